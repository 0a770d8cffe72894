//! The packet path of a node's core: what happens to a packet between its steps (paper 000
//! §4.2), asked by the driver packet by packet (a data plane's dispatcher, a simulator's
//! events) and answered by the same code.
//!
//! A packet arrives at a step ([`NodeCore::handle_arrival`]): the scheduler queues it at an
//! instance of the step's chain (forking copies if the step starts a parallel group:
//! [`NodeCore::handle_fork`]), or finds none (the on-demand order decides:
//! [`NodeCore::place`]), or the route is done (egress), or it is refused. The scheduler hands
//! out batches by credits ([`NodeCore::poll_dispatch`]); a batch's region runs it and gives the
//! credits back ([`NodeCore::handle_completion`]); then each packet goes on
//! ([`NodeCore::handle_ran`]): to the next step, to egress, to the synchronization buffer
//! ([`NodeCore::handle_branch`]), back to the same instance for its step's next NT (PANIC
//! mode: [`NodeCore::handle_requeue`]), or nowhere.

use super::NodeCore;
use crate::ids::{DagUid, InstanceId, TenantId};
use crate::join::{JoinId, Joined};
use crate::sched::Reject;
use crate::time::Instant;
use crate::walk::{Entered, Ran, Walk};

impl NodeCore {
    /// Packet `item` of `tenant` (its flow hashed to `flow_hash`) arrives at the step its
    /// `walk` is at, at `now`.
    #[inline(always)]
    pub fn handle_arrival(&mut self, walk: &mut Walk, now: Instant, tenant: TenantId, flow_hash: u64, item: u32) -> Entered {
        walk.enter(&mut self.sched, now, tenant, flow_hash, item, self.panic)
    }

    /// A run of packets of one `tenant` (`items`; `hash` gives an item's flow hash) arrives at
    /// the first step of `route`, in order: the route, its step, chain and queue are looked up
    /// once for the run (a driver receives its packets in batches, and a batch's packets
    /// mostly belong to few tenants and routes). The walk each packet queued now has, and the
    /// items the per-tenant bound refused pushed to `refused` (the driver drops them, as for
    /// [`Entered::Refused`]). `None`: nothing changed, and the run goes packet by packet
    /// ([`NodeCore::handle_arrival`]), which answers the rarer cases: no instance, a first step
    /// that starts a parallel group, the chain's instances changing.
    #[inline(always)]
    pub fn handle_arrivals(
        &mut self,
        now: Instant,
        tenant: TenantId,
        route: DagUid,
        items: &[u32],
        hash: impl Fn(u32) -> u64,
        refused: &mut Vec<u32>,
    ) -> Option<Walk> {
        let a = self.sched.handle_run(now, tenant, route, 0, items, hash, refused)?;
        let mut w = Walk::start(route);
        w.accepted(a, self.panic);
        Some(w)
    }

    /// The packet just queued ([`Entered::Queued`]) starts a parallel group of `branches`
    /// steps: opens its join slot, for the copies the driver then makes
    /// ([`Walk::branch_copy`], each entered with [`NodeCore::handle_arrival`]). `None` if the
    /// table is full: the packet runs its first branch only, is dropped at the join, and no
    /// copies are made.
    pub fn handle_fork(&mut self, walk: &mut Walk, branches: u8) -> Option<JoinId> {
        walk.fork(&mut self.joins, branches)
    }

    /// The next batch to run: up to `max` packets into `out`, and the instance whose region
    /// runs them; `None` when no instance has both packets and credits.
    #[inline(always)]
    pub fn poll_dispatch(&mut self, out: &mut Vec<u32>, max: usize) -> Option<InstanceId> {
        self.sched.poll_dispatch(out, max)
    }

    /// `inst`'s region finished `n` packets: their credits come back.
    #[inline(always)]
    pub fn handle_completion(&mut self, inst: InstanceId, n: u32) {
        self.sched.handle_completion(inst, n)
    }

    /// A region ran the packet whose walk this is (`dropped`: an NT dropped it): where it goes
    /// now. In PANIC mode a packet whose step has another NT to run comes back
    /// ([`Ran::Again`]) to the same instance.
    #[inline(always)]
    pub fn handle_ran(&self, walk: &mut Walk, dropped: bool) -> Ran {
        if self.panic && !dropped && walk.panic_next(&self.sched) {
            return Ran::Again;
        }
        walk.ran(dropped)
    }

    /// PANIC mode: queues packet `item` of `tenant` at `inst` again, for its step's next NT
    /// (after [`Ran::Again`]). An error: drop it, counted with the reason.
    pub fn handle_requeue(&mut self, inst: InstanceId, tenant: TenantId, item: u32) -> Result<(), Reject> {
        self.sched.requeue(inst, tenant, item)
    }

    /// Branch `branch` of the packet forked at join slot `j` is back (`item`: what the driver
    /// holds for it; `dropped`: it was dropped on the way). When it is the last, the joined
    /// packet: its branches' items, and whether any dropped it. The driver then frees the
    /// copies and sends the original on ([`Walk::joined`], then
    /// [`NodeCore::handle_arrival`]), or drops it.
    pub fn handle_branch(&mut self, j: JoinId, branch: u8, item: u32, dropped: bool) -> Option<Joined<u32>> {
        self.joins.arrive(j, branch as usize, item, dropped)
    }

    /// True if the packet has run every step of its route (after a join).
    pub fn at_end(&self, walk: &Walk) -> bool {
        walk.at_end(&self.sched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::{DagRoute, NtMask, Step};
    use crate::elastic::ElasticConfig;
    use crate::fair::FairConfig;
    use crate::node::NodeCoreConfig;

    /// A node's core with route 1: a chain of two NTs, then a parallel group of two one-NT
    /// chains that ends the route; an instance each.
    fn core(panic: bool) -> NodeCore {
        let cfg = NodeCoreConfig {
            fair: FairConfig::default(),
            link_bps: 25e9,
            workers: 0,
            store_buffers: 64,
            max_tenants: 4,
            elastic: ElasticConfig::default(),
            auto_place: false,
            join_slots: 1,
            panic,
            ..NodeCoreConfig::default()
        };
        let mut core = NodeCore::new(cfg, Instant::ZERO);
        let mut steps = Vec::new();
        for nts in [2, 1, 1] {
            let chain = core.sched.add_chain(nts);
            core.sched.add_instance(chain, 8).unwrap();
            steps.push(Step { chain, mask: NtMask::all(nts) });
        }
        core.sched.set_dag(DagUid(1), DagRoute::with_groups(steps, &[(1, 3)]).unwrap());
        core
    }

    /// Runs what the scheduler has queued: each batch's instance and items, in order.
    fn run(core: &mut NodeCore) -> Vec<(InstanceId, Vec<u32>)> {
        let mut ran = Vec::new();
        let mut out = Vec::new();
        while let Some(inst) = core.poll_dispatch(&mut out, 8) {
            core.handle_completion(inst, out.len() as u32);
            ran.push((inst, out.clone()));
        }
        ran
    }

    /// Walks packet 7 along route 1, as a driver does: every answer of the core carried out.
    /// Returns the NTs it ran at each visit to the first chain's instance, and what entering
    /// past the group came to.
    fn walk(core: &mut NodeCore) -> (Vec<NtMask>, Entered) {
        let (t, now) = (TenantId(1), Instant::ZERO);
        let mut w = Walk::start(DagUid(1));
        assert_eq!(core.handle_arrival(&mut w, now, t, 99, 7), Entered::Queued { branches: 0 });
        let mut visits = Vec::new();
        loop {
            let batches = run(core);
            assert_eq!(batches, vec![(InstanceId(0), vec![7])], "one visit, to the first chain's instance");
            visits.push(w.mask);
            match core.handle_ran(&mut w, false) {
                Ran::Again => core.handle_requeue(InstanceId(0), t, 7).unwrap(),
                Ran::Next => break,
                other => panic!("after the first step: {other:?}"),
            }
        }
        // The group: the packet and a copy (item 8), each on its branch, joined.
        assert_eq!(core.handle_arrival(&mut w, now, t, 99, 7), Entered::Queued { branches: 2 });
        let j = core.handle_fork(&mut w, 2).expect("a free join slot");
        let mut copy = w.branch_copy(1);
        assert_eq!(core.handle_arrival(&mut copy, now, t, 99, 8), Entered::Queued { branches: 0 });
        assert_eq!(run(core), vec![(InstanceId(1), vec![7]), (InstanceId(2), vec![8])]);
        assert_eq!(core.handle_ran(&mut w, false), Ran::Join);
        assert_eq!(core.handle_ran(&mut copy, false), Ran::Join);
        assert_eq!(core.handle_fork(&mut Walk::start(DagUid(1)), 2), None, "the one slot is taken");
        assert_eq!(core.handle_branch(j, 1, 8, false), None, "waits for branch 0");
        let joined = core.handle_branch(j, 0, 7, false).expect("both branches back");
        assert_eq!((joined.dropped, joined.items[0], joined.items[1]), (false, Some(7), Some(8)));
        w.joined();
        assert!(core.at_end(&w));
        (visits, core.handle_arrival(&mut w, now, t, 99, 7))
    }

    #[test]
    fn a_packet_runs_its_route_through_the_core_and_the_join_slot_is_freed() {
        let mut core = core(false);
        let (visits, end) = walk(&mut core);
        assert_eq!(visits, vec![NtMask::all(2)], "the whole step in one visit");
        assert_eq!(end, Entered::Out, "the group ended the route");
        assert!(core.handle_fork(&mut Walk::start(DagUid(1)), 2).is_some(), "the join freed its slot");
    }

    #[test]
    fn in_panic_mode_a_packet_comes_back_to_the_scheduler_after_each_nt_of_its_step() {
        let mut core = core(true);
        let (visits, end) = walk(&mut core);
        assert_eq!(visits, vec![NtMask(0b01), NtMask(0b10)], "one NT a visit, in order");
        assert_eq!(end, Entered::Out, "the group ended the route");
        // A packet an NT dropped does not come back for the step's next NT.
        let mut w = Walk::start(DagUid(1));
        core.handle_arrival(&mut w, Instant::ZERO, TenantId(1), 99, 9);
        run(&mut core);
        assert_eq!(core.handle_ran(&mut w, true), Ran::Drop);
    }
}
