//! Launches under way on one node, and which instance holds each region: the state machine
//! between the elasticity policy's decisions ([`crate::elastic`]: launch into this region, stop
//! that instance) and a region running. [`crate::node::NodeCore`] owns it and drives it
//! ([`crate::node::launching`]); the driver builds NTs and carries out the [`LaunchStep`]s it
//! hands out, so that no driver keeps its own launch list or region table.
//!
//! A launch ([`Launch`]) is asked for with the chain's NTs already built (the driver keeps
//! them by region). It runs once the launch delay after its request has passed (the launcher's
//! time, [`crate::node::NodeCore::launch_due`]) and the region is empty: an instance it evicts
//! first stops, finishes what it holds, and is taken down ([`LaunchStep::Teardown`]); then the
//! driver installs the NTs ([`LaunchStep::Install`]) and says how that went.

use crate::ids::{ChainId, InstanceId, TenantId};
use crate::placement::Place;
use crate::time::Instant;
use std::collections::VecDeque;

/// Why a chain was launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launched {
    /// At deploy.
    Prelaunch,
    /// For its first packets, into a free region.
    OnDemand,
    /// For its first packets, by stop-and-launch.
    ContextSwitch,
    /// Auto-scaling.
    ScaleOut,
}

/// A launch being asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// The chain.
    pub chain: ChainId,
    /// The region it launches into.
    pub region: usize,
    /// The scheduler's instance (already added, launching) — or `None` for a scale-out, which
    /// joins the chain's instances only once it runs, so that no flow waits for it.
    pub inst: Option<InstanceId>,
    /// What for.
    pub why: Launched,
    /// The instance to stop to make room: the launch runs once it is gone.
    pub evict: Option<InstanceId>,
    /// When it was asked for.
    pub requested: Instant,
}

/// What the driver does next for the launches under way, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchStep {
    /// Take `inst`'s region down (the core has removed the instance and emptied its slot). Its
    /// NTs' state is kept for `chain`'s next launch if `keep` (the chain is live), else it goes
    /// with the chain (to a peer collecting it, or nowhere).
    Teardown {
        /// The instance's chain.
        chain: ChainId,
        /// The instance.
        inst: InstanceId,
        /// The chain is live: keep the state for its next launch.
        keep: bool,
    },
    /// The launch into `region` runs: install the NTs built for it as `inst`, at `place`, then
    /// tell the core ([`crate::node::NodeCore::launch_installed`]).
    Install {
        /// The chain.
        chain: ChainId,
        /// Its instance.
        inst: InstanceId,
        /// The region.
        region: usize,
        /// Where the region runs.
        place: Place,
        /// What the launch was for.
        why: Launched,
        /// From the request to now.
        took_ns: u64,
    },
}

/// The regions' instances and the launches under way. See the module docs.
#[derive(Debug, Clone)]
pub struct Launches {
    /// Per region: its instance, and where it runs.
    slots: Vec<(Option<InstanceId>, Place)>,
    pending: Vec<Launch>,
    steps: VecDeque<LaunchStep>,
}

impl Launches {
    /// `regions` empty regions, on the dispatcher's thread without workers, else on the
    /// workers in turn.
    pub fn new(regions: usize, workers: usize) -> Self {
        let place = |i: usize| if workers == 0 { Place::Dispatcher } else { Place::Worker(i % workers) };
        Launches { slots: (0..regions).map(|i| (None, place(i))).collect(), pending: Vec::new(), steps: VecDeque::new() }
    }

    /// The instance in each region.
    pub fn region_instances(&self) -> impl Iterator<Item = Option<InstanceId>> + '_ {
        self.slots.iter().map(|s| s.0)
    }

    /// The instance in `region`.
    pub fn instance_in(&self, region: usize) -> Option<InstanceId> {
        self.slots.get(region).and_then(|s| s.0)
    }

    /// The region holding `inst`.
    pub fn region_of(&self, inst: InstanceId) -> Option<usize> {
        self.slots.iter().position(|s| s.0 == Some(inst))
    }

    /// Launches under way.
    pub fn pending(&self) -> &[Launch] {
        &self.pending
    }

    /// True while a launch of `chain`, or one evicting its instance, is under way.
    pub fn launching<T: Copy>(&self, sched: &crate::sched::Scheduler<T>, chain: ChainId) -> bool {
        self.launches_of(chain) || self.pending.iter().any(|p| p.evict.is_some_and(|e| sched.chain_of(e) == chain))
    }

    /// True while a launch of `chain` itself is under way (one evicting its instance aside).
    pub fn launches_of(&self, chain: ChainId) -> bool {
        self.pending.iter().any(|p| p.chain == chain)
    }

    /// True while a launch is under way, or a step waits for the driver.
    pub fn busy(&self) -> bool {
        !self.pending.is_empty() || !self.steps.is_empty()
    }

    pub(crate) fn place_of_region(&self, region: usize) -> Place {
        self.slots[region].1
    }

    pub(crate) fn set_instance(&mut self, region: usize, inst: Option<InstanceId>) {
        self.slots[region].0 = inst;
    }

    pub(crate) fn evicting(&self, inst: InstanceId) -> bool {
        self.pending.iter().any(|p| p.evict == Some(inst))
    }

    pub(crate) fn push(&mut self, l: Launch) {
        self.pending.push(l);
    }

    pub(crate) fn pending_at(&self, i: usize) -> Option<Launch> {
        self.pending.get(i).copied()
    }

    pub(crate) fn take_pending(&mut self, i: usize) -> Launch {
        self.pending.swap_remove(i)
    }

    pub(crate) fn step(&mut self, s: LaunchStep) {
        self.steps.push_back(s);
    }

    pub(crate) fn next_step(&mut self) -> Option<LaunchStep> {
        self.steps.pop_front()
    }
}

/// Packets whose chain found every region mid-launch (or waits for the pool), in arrival order,
/// until a launch runs or the pool answers. Each tenant may have at most `per_tenant` waiting, so
/// that one tenant's flood of packets for chains it cannot get launched leaves room for every
/// other tenant's (the node-wide bound it replaced let one tenant refuse everyone's).
#[derive(Debug, Clone)]
pub struct Waiting<T> {
    queue: VecDeque<(T, TenantId, ChainId)>,
    /// Per tenant (by index): packets in `queue`.
    counts: Vec<u32>,
    per_tenant: u32,
}

impl<T: Copy> Waiting<T> {
    /// At most `per_tenant` packets waiting for each tenant.
    pub fn new(per_tenant: usize) -> Self {
        Waiting { queue: VecDeque::new(), counts: Vec::new(), per_tenant: per_tenant.min(u32::MAX as usize) as u32 }
    }

    /// True if no packet waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// `item`, tenant `t`'s packet for `chain`, waits; false (and it does not) if `t` has its
    /// most waiting already.
    pub fn push(&mut self, item: T, t: TenantId, chain: ChainId) -> bool {
        let i = t.0 as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        if self.counts[i] >= self.per_tenant {
            return false;
        }
        self.counts[i] += 1;
        self.queue.push_back((item, t, chain));
        true
    }

    /// Takes out, in arrival order, the packets for which `go(chain)` is true; the rest keep
    /// waiting, in order.
    pub fn release(&mut self, mut go: impl FnMut(ChainId) -> bool, out: &mut Vec<T>) {
        let counts = &mut self.counts;
        self.queue.retain(|&(item, t, chain)| {
            if !go(chain) {
                return true;
            }
            counts[t.0 as usize] -= 1;
            out.push(item);
            false
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_fills_only_its_own_room_to_wait() {
        let mut w = Waiting::new(2);
        let (a, b, c) = (TenantId(0), TenantId(7), ChainId(0));
        assert!(w.push(1u32, a, c) && w.push(2, a, c));
        assert!(!w.push(3, a, c), "a tenant waits for at most its bound");
        assert!(w.push(4, b, c), "another tenant still waits");
        let mut out = Vec::new();
        w.release(|_| true, &mut out);
        assert_eq!(out, vec![1, 2, 4]);
        assert!(w.is_empty());
        assert!(w.push(5, a, c), "released packets free their tenant's room");
    }

    #[test]
    fn release_keeps_the_others_in_order() {
        let mut w = Waiting::new(8);
        let t = TenantId(1);
        for (i, c) in [0u16, 1, 0, 2, 1].into_iter().enumerate() {
            assert!(w.push(i as u32, t, ChainId(c)));
        }
        let mut out = Vec::new();
        w.release(|c| c == ChainId(1), &mut out);
        assert_eq!(out, vec![1, 4]);
        out.clear();
        w.release(|c| c != ChainId(2), &mut out);
        assert_eq!(out, vec![0, 2]);
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn regions_alternate_between_workers_and_start_empty() {
        let l = Launches::new(3, 2);
        assert_eq!(l.region_instances().collect::<Vec<_>>(), vec![None, None, None]);
        assert_eq!(l.place_of_region(0), Place::Worker(0));
        assert_eq!(l.place_of_region(1), Place::Worker(1));
        assert_eq!(l.place_of_region(2), Place::Worker(0));
        assert_eq!(Launches::new(2, 0).place_of_region(1), Place::Dispatcher);
        assert!(!l.busy());
    }
}
