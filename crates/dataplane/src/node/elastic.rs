//! The node's side of elasticity (see [`crate::elastic`]): pre-launch, on-demand launch,
//! stop-and-launch, victims and auto-scaling, applied to the regions and the scheduler.

use super::{Backend, LaunchError, Node};
use crate::drops::Drop;
use crate::elastic::Elastic;
use snic_core::elastic::EndpointFallback;
use snic_core::ids::{ChainId, InstanceId};
use snic_core::node::demand::{Demand, LaunchPlan, Scaled};
use snic_core::sched::{Change, Reject};
use snic_core::time::Instant;
use snic_nt::Nt;

/// What to do with a packet whose chain had no active instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnDemand {
    /// The chain has an instance now (running or launching): schedule the packet again.
    Retry,
    /// Send the packet on unprocessed: the tenant's endpoint runs the chain.
    Endpoint,
    /// Every region is being launched: wait for one to run.
    Wait,
    /// No room: drop it.
    Nothing,
}

impl<B: Backend> Node<B> {
    /// Elasticity, the node's side: which instance is in which region, counters and recent
    /// events.
    pub fn elastic(&self) -> &Elastic {
        &self.elastic
    }

    /// Declares whether the tenant's endpoint can run `chain` itself: when it can and no region
    /// can be found for it (and before resorting to a context switch), its packets are sent on
    /// unprocessed.
    pub fn set_endpoint_fallback(&mut self, chain: ChainId, fallback: EndpointFallback) {
        self.core.set_endpoint_fallback(chain, fallback);
    }

    /// Carries out the core's steps for the launches under way ([`super::regions::Regions`]);
    /// true if a launch ran. What waited in an instance that cannot run is dropped, counted.
    pub(super) fn carry_out_launches(&mut self, now: Instant) -> bool {
        let mut lost = Vec::new();
        let ran = self.regions().carry_out_launches(&mut lost);
        for idx in lost {
            self.refuse(idx, Drop::Sched(Reject::NoInstance), now);
        }
        ran
    }

    /// Pre-launch at deploy: `chain` gets a free region; `None` when there is none (it will be
    /// launched when its first packet arrives). Its NTs are built first: the build time is
    /// part of the launch time the policy expects.
    pub(super) fn prelaunch(&mut self, chain: ChainId) -> Result<Option<InstanceId>, LaunchError> {
        let now = self.clock.now();
        let (nts, build) = self.regions().chain_nts(chain)?;
        let Some(plan) = self.core.prelaunch_plan(chain, now) else {
            self.elastic.save(chain, nts);
            return Ok(None);
        };
        self.begin_plan(plan, nts, build, now).map_err(|_| LaunchError::UnknownChain(chain))
    }

    /// A peer asks this node to host `chain` (a DAG placed here, or a share of its flows): it
    /// launches where a launch can go without stopping a running chain — a free region, or a
    /// victim's, as the node's load report counted them free ([`snic_core::node::NodeCore::host_chain`]);
    /// with neither it fails with [`LaunchError::NoFreeRegion`]. Without elasticity, as
    /// [`Node::launch`].
    pub fn launch_for_peer(&mut self, chain: ChainId) -> Result<(), LaunchError> {
        if !self.core.elastic().on() {
            return self.launch(chain).map(|_| ());
        }
        let now = self.clock.now();
        match self.core.host_chain(now, chain) {
            Demand::Retry => Ok(()),
            Demand::Launch(plan) if self.launch_plan(plan, now) == OnDemand::Retry => Ok(()),
            _ => Err(LaunchError::NoFreeRegion),
        }
    }

    /// A packet on `route` needs `chain` (at step `pos`), which has no active instance: what
    /// the core decides ([`snic_core::node::NodeCore::on_demand`]), carried out.
    #[cold]
    pub(super) fn on_demand(&mut self, chain: ChainId, route: u32, pos: u8, now: Instant) -> OnDemand {
        match self.carry_out(now, |core, notes| core.on_demand(now, chain, route, pos, notes)) {
            Demand::Retry => OnDemand::Retry,
            Demand::Launch(plan) => self.launch_plan(plan, now),
            Demand::Endpoint => OnDemand::Endpoint,
            Demand::Wait => OnDemand::Wait,
            Demand::Nothing => OnDemand::Nothing,
        }
    }

    /// Builds the NTs for the launch the core planned and begins it (`Retry`: its packets
    /// schedule again, into its instance); a build that fails empties the region.
    fn launch_plan(&mut self, plan: LaunchPlan, now: Instant) -> OnDemand {
        let Ok((nts, build)) = self.regions().chain_nts(plan.chain) else {
            self.core.region_freed(plan.region);
            return OnDemand::Nothing;
        };
        match self.begin_plan(plan, nts, build, now) {
            Ok(_) => OnDemand::Retry,
            Err(_) => OnDemand::Nothing,
        }
    }

    /// The launch begins with its NTs built ([`snic_core::node::NodeCore::launch_planned`]),
    /// and whatever can advance does (a launch with no delay into an empty region runs at
    /// once). Refused, the NTs are kept for the chain's next launch.
    fn begin_plan(&mut self, plan: LaunchPlan, nts: Vec<Box<dyn Nt>>, build: u64, now: Instant) -> Result<Option<InstanceId>, Change> {
        match self.core.launch_planned(now, plan, build) {
            Ok(inst) => {
                self.elastic.built[plan.region] = Some(nts);
                self.advance_elastic(now);
                Ok(inst)
            }
            Err(e) => {
                self.elastic.save(plan.chain, nts);
                Err(e)
            }
        }
    }

    /// Launches and stops under way advance ([`snic_core::node::NodeCore::advance_launches`])
    /// and are carried out; packets waiting for a region enter again once one runs. Called
    /// every poll while any is under way.
    pub(super) fn advance_elastic(&mut self, now: Instant) {
        self.core.advance_launches(now);
        let ran = self.carry_out_launches(now);
        if self.core.any_waiting() && (ran || !self.core.launches().busy()) {
            self.release_waiting(None, now);
        }
    }

    /// Packets waiting for a region enter again, in order: those of `chain` only, or all but
    /// those still waiting for the pool ([`snic_core::node::NodeCore::release_waiting`]).
    pub(super) fn release_waiting(&mut self, chain: Option<ChainId>, now: Instant) {
        if !self.core.any_waiting() {
            return;
        }
        let mut go = std::mem::take(&mut self.elastic.released);
        self.core.release_waiting(chain, &mut go);
        for idx in go.drain(..) {
            self.enter(idx, now);
        }
        self.elastic.released = go;
    }

    /// Carries out what the elasticity policy decided at the epoch's end
    /// ([`snic_core::node::NodeCore::handle_epoch`], [`snic_core::node::NodeCore::scale`]): the
    /// core resumes and stops instances itself; a scale-out's NTs are built here. Then the
    /// DAGs' forms.
    pub(super) fn elastic_epoch(&mut self, now: Instant) {
        if !self.core.elastic().on() {
            return;
        }
        let mut acts = std::mem::take(&mut self.elastic.acts);
        for act in acts.drain(..) {
            match self.core.scale(now, act) {
                Scaled::Launch(plan) => {
                    self.launch_plan(plan, now);
                }
                Scaled::Stopped => self.advance_elastic(now),
                Scaled::Done => {}
            }
        }
        self.elastic.acts = acts;
        self.rechain_epoch(now);
    }
}
