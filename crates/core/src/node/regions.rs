//! The node's regions as its driver launches into them and takes them down: the verbs through
//! which the driver tells the elasticity policy what it carried out (a build measured, a launch
//! done, a region freed or left holding a victim) and asks it where a chain goes. Read the
//! policy's view with [`NodeCore::elastic`].

use super::NodeCore;
use crate::elastic::EndpointFallback;
use crate::ids::ChainId;
use crate::launcher::{Decision, PeerRoom};
use crate::rechain::{DagView, Switch};
use crate::time::Instant;

impl NodeCore {
    /// Declares whether the tenant's endpoint can run `chain` itself (when it can and no region
    /// is found, its packets go on unprocessed, before a context switch).
    pub fn set_endpoint_fallback(&mut self, chain: ChainId, fallback: EndpointFallback) {
        self.elastic.set_endpoint_fallback(chain, fallback);
    }

    /// A chain's NTs were built in `ns` (on the node's work timer): launches are expected to
    /// take the smoothed build time plus the emulated delay.
    pub fn chain_built(&mut self, ns: u64) {
        self.elastic.built(ns);
    }

    /// Pre-launch at deploy: `chain` takes a free region if there is one (never evicts).
    pub fn prelaunch(&mut self, chain: ChainId, now: Instant) -> Option<usize> {
        self.elastic.prelaunch(chain, now)
    }

    /// A peer asks this node to host `chain`: where it goes here, never stopping a running
    /// chain (`None`: no room; the peer is refused).
    pub fn host(&mut self, chain: ChainId, now: Instant) -> Option<Decision> {
        self.elastic.host(chain, now)
    }

    /// Packets need `chain`, which has no active instance, and the pool has been asked already
    /// (or there is none): the on-demand order among this node's regions and the endpoint.
    /// [`NodeCore::place`] is the whole order, the pool included.
    pub fn place_here(&mut self, chain: ChainId, now: Instant) -> Decision {
        self.elastic.on_demand(chain, now, PeerRoom::None)
    }

    /// Launches that were due by `now` run (for a driver whose launches take exactly the launch
    /// time, as the simulator's do).
    pub fn launches_due(&mut self, now: Instant) {
        self.elastic.tick(now);
    }

    /// True if the launch into `region` may run at `now` (or none is under way there).
    pub(crate) fn launch_due(&self, region: usize, now: Instant) -> bool {
        self.elastic.launch_ready_at(region).is_none_or(|t| t <= now)
    }

    /// When the launch into `region` runs (`None`: none is under way there).
    pub(crate) fn launch_ready_at(&self, region: usize) -> Option<Instant> {
        self.elastic.launch_ready_at(region)
    }

    /// The driver finished launching into `region`.
    pub(crate) fn region_running(&mut self, region: usize) {
        self.elastic.running(region);
    }

    /// `region` is empty again (its launch failed, or its chain went away).
    pub fn region_freed(&mut self, region: usize) {
        self.elastic.free(region);
    }

    /// The instance in `region` stopped and finished what it held: it stays loaded as a victim
    /// if victims are kept and `keep` (its chain is still wanted), else the region is freed.
    /// True if it is a victim.
    pub fn region_stopped(&mut self, region: usize, now: Instant, keep: bool) -> bool {
        self.elastic.stopped(region, now, keep)
    }

    /// One epoch of rechaining over the DAGs that have a compact form: the switch due, if any.
    pub fn rechain(&mut self, now: Instant, dags: &[DagView]) -> Option<Switch> {
        self.elastic.rechain(now, dags)
    }

    /// A switch the policy did not decide (an operator's) happened at `now`.
    pub fn switched(&mut self, now: Instant) {
        self.elastic.switched(now);
    }
}
