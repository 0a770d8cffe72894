//! A packet's walk along its DAG's route: what a node decides for a packet between its steps
//! (paper 000 §4.2). A packet enters a step (the scheduler queues it at an instance of the step's
//! chain, or finds none), runs it in a region, and then goes on: to the next step, to egress,
//! to the synchronization buffer if it is a branch of a parallel group, or — an NT dropped it —
//! nowhere. PANIC-style scheduling (paper Fig. 14) brings it back after every NT instead.
//!
//! [`Walk`] is the part of a packet's descriptor these decisions read and write; the data plane
//! keeps one per descriptor, the simulator one per simulated packet, and both ask the same
//! methods what happens next. The driver does what the answer says: queue, fork copies, launch
//! on demand, join, transmit or drop.

use crate::dag::NtMask;
use crate::ids::{DagUid, TenantId};
use crate::join::{JoinId, JoinTable};
use crate::sched::{Accepted, Reject, Scheduler};
use crate::time::Instant;

/// The join slot of a branch whose packet could not be forked (no slot free).
const NO_SLOT: u32 = u32::MAX;

/// Where a packet is on its DAG's route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    /// The route (the node's internal DAG UID).
    pub dag: DagUid,
    /// The step it is at.
    pub pos: u8,
    /// The NTs of that step's chain it runs.
    pub mask: NtMask,
    /// The step is the route's last.
    pub last: bool,
    /// In a parallel group: the position after it, where the copies join (0: not in one).
    pub join_at: u8,
    /// In a parallel group: this copy's branch.
    pub branch: u8,
    /// In a parallel group: its join slot.
    join: u32,
}

impl Default for Walk {
    fn default() -> Self {
        Walk::start(DagUid(0))
    }
}

/// What happens to a packet that entered a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entered {
    /// Queued at an instance. If the step starts a parallel group of `branches` steps (else 0),
    /// the driver copies the packet for the others ([`Walk::fork`]).
    Queued {
        /// The size of the parallel group the step starts, or 0.
        branches: u8,
    },
    /// The step's chain has no running instance: the on-demand path decides (launch, resume,
    /// wait, or leave the chain to the tenant's endpoint).
    OnDemand,
    /// The route has no more steps: to egress.
    Out,
    /// Refused: drop it, counted with the reason.
    Refused(Reject),
}

/// What happens to a packet its region has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// A branch of a parallel group: to the synchronization buffer (dropped or not: the join
    /// drops the packet if any branch did).
    Join,
    /// An NT dropped it.
    Drop,
    /// Past the route's last step: to egress.
    Out,
    /// On to the next step ([`Walk::enter`] it; `pos` has moved on).
    Next,
    /// PANIC-style: the step has another NT, and the packet runs it next on the same instance
    /// (the driver queues it there again). Only the node's core says so
    /// ([`crate::node::NodeCore::handle_ran`]), which knows the mode.
    Again,
}

impl Walk {
    /// A packet entering route `dag` at its first step.
    pub const fn start(dag: DagUid) -> Walk {
        Walk { dag, pos: 0, mask: NtMask(0), last: true, join_at: 0, branch: 0, join: NO_SLOT }
    }

    /// A packet entering route `dag` at step `pos` (the steps before it ran elsewhere: a
    /// redirected packet at the peer).
    pub const fn at(dag: DagUid, pos: u8) -> Walk {
        Walk { pos, ..Walk::start(dag) }
    }

    /// Enters the step at `pos`: the scheduler queues `item` of `tenant` at an instance chosen
    /// by `flow_hash`. In PANIC mode the packet runs one NT of the step per visit. (Not inlined,
    /// the scheduler's admission inlined into it: callgrind counts 1.5% more instructions for
    /// the dummy chain the other way round, as the compiler otherwise chooses since the data
    /// plane's entry grew a check for redirects.)
    #[inline(never)]
    pub fn enter<T: Copy>(
        &mut self,
        sched: &mut Scheduler<T>,
        now: Instant,
        tenant: TenantId,
        flow_hash: u64,
        item: T,
        panic: bool,
    ) -> Entered {
        match sched.handle_packet(now, tenant, self.dag, self.pos, flow_hash, item) {
            Ok(a) => {
                self.accepted(a, panic);
                Entered::Queued { branches: a.branches }
            }
            Err(Reject::NoInstance) => Entered::OnDemand,
            Err(Reject::BadPosition) if self.pos > 0 && self.at_end(sched) => Entered::Out,
            Err(e) => Entered::Refused(e),
        }
    }

    /// Records what the packet runs at the step the scheduler accepted it at.
    #[inline(always)]
    pub(crate) fn accepted(&mut self, a: Accepted, panic: bool) {
        self.mask = if panic { a.mask.first() } else { a.mask };
        self.last = a.last;
        self.join_at = a.join_at;
    }

    /// The packet's region ran it; `dropped` if an NT dropped it.
    #[inline(always)]
    pub fn ran(&mut self, dropped: bool) -> Ran {
        if self.join_at != 0 {
            Ran::Join
        } else if dropped {
            Ran::Drop
        } else if self.last {
            Ran::Out
        } else {
            self.pos += 1;
            Ran::Next
        }
    }

    /// PANIC-style: the packet ran one NT of its step; if the step has another, it runs that
    /// one next on the same instance (the driver queues it there again: true).
    pub fn panic_next<T: Copy>(&mut self, sched: &Scheduler<T>) -> bool {
        match sched.panic_next(self.dag, self.pos, self.mask) {
            Some(next) => {
                self.mask = next;
                true
            }
            None => false,
        }
    }

    /// The packet was just queued at the first step of a parallel group of `branches` steps:
    /// opens its join slot. `None` if the table is full: then the packet runs its first branch
    /// only and is dropped at the join ([`Walk::join_slot`]), and no copies are made.
    pub fn fork<T: Copy>(&mut self, joins: &mut JoinTable<T>, branches: u8) -> Option<JoinId> {
        self.branch = 0;
        let j = joins.open(branches);
        self.join = j.map_or(NO_SLOT, |j| j.0);
        j
    }

    /// The walk of the copy that runs branch `b` of the group this packet forked at.
    pub fn branch_copy(&self, b: u8) -> Walk {
        Walk { branch: b, pos: self.pos + b, ..*self }
    }

    /// The join slot of a branch, or `None` if its packet has not forked or could not (drop it
    /// at the join: it cannot go on with only some of its branches run).
    pub fn join_slot(&self) -> Option<JoinId> {
        (self.join != NO_SLOT).then_some(JoinId(self.join))
    }

    /// Every branch is back: the packet goes on at the step after the group ([`Walk::enter`] it:
    /// [`Entered::Out`] if the group ended the route).
    pub fn joined(&mut self) {
        self.pos = self.join_at;
        self.join_at = 0;
        self.branch = 0;
        self.join = NO_SLOT;
    }

    /// True if `pos` is just past the last step of the packet's route (it has run them all).
    pub fn at_end<T: Copy>(&self, sched: &Scheduler<T>) -> bool {
        sched.route(self.dag).is_some_and(|r| r.steps().len() == self.pos as usize)
    }

    /// Skips the step at `pos` (its chain left to the tenant's endpoint). A packet at the first
    /// step of a parallel group forks first (its copies run the other branches) and joins them
    /// having run nothing, as does any other branch; any other packet moves on to the next step.
    pub fn skip<T: Copy>(&mut self, sched: &Scheduler<T>) -> Skip {
        let (branches, join_at) = sched.fork_at(self.dag, self.pos);
        if join_at != 0 {
            // (`join_at` is set only once the scheduler accepted the packet: ask the route.)
            self.mask = NtMask(0);
            self.join_at = join_at;
            self.last = false;
            return if branches > 0 { Skip::Fork { branches } } else { Skip::Join };
        }
        self.pos += 1;
        if self.at_end(sched) {
            Skip::Out
        } else {
            Skip::Next
        }
    }
}

/// What happens to a packet whose step was skipped ([`Walk::skip`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// It starts a parallel group: fork it ([`Walk::fork`], copies for the other branches), then
    /// it joins them.
    Fork {
        /// The size of the group.
        branches: u8,
    },
    /// A branch of a parallel group: to the synchronization buffer.
    Join,
    /// On to the next step ([`Walk::enter`] it).
    Next,
    /// It was the route's last step: to egress.
    Out,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::{DagRoute, Step};

    fn two_steps_then_a_group() -> Scheduler<u32> {
        let mut s = Scheduler::new(Default::default());
        let chains: Vec<_> = (0..4).map(|_| s.add_chain(2)).collect();
        for &c in &chains {
            s.add_instance(c, 8).unwrap();
        }
        let steps = chains.iter().map(|&chain| Step { chain, mask: NtMask::all(2) }).collect();
        // Steps 0, 1 in sequence; 2 and 3 a parallel group that ends the route.
        s.set_dag(DagUid(1), DagRoute::with_groups(steps, &[(2, 4)]).unwrap());
        s
    }

    #[test]
    fn a_packet_walks_its_steps_then_forks_joins_and_leaves() {
        let mut s = two_steps_then_a_group();
        let mut w = Walk::start(DagUid(1));
        assert_eq!(w.enter(&mut s, Instant::ZERO, TenantId(0), 7, 1, false), Entered::Queued { branches: 0 });
        assert_eq!((w.mask, w.last), (NtMask::all(2), false));
        assert_eq!(w.ran(false), Ran::Next);
        assert_eq!(w.pos, 1);
        assert_eq!(w.enter(&mut s, Instant::ZERO, TenantId(0), 7, 1, false), Entered::Queued { branches: 0 });
        assert_eq!(w.ran(false), Ran::Next);
        assert_eq!(w.enter(&mut s, Instant::ZERO, TenantId(0), 7, 1, false), Entered::Queued { branches: 2 });
        let mut joins: JoinTable<u32> = JoinTable::new(1);
        let j = w.fork(&mut joins, 2).unwrap();
        let mut copy = w.branch_copy(1);
        assert_eq!((copy.pos, copy.branch), (3, 1));
        assert_eq!(copy.enter(&mut s, Instant::ZERO, TenantId(0), 7, 2, false), Entered::Queued { branches: 0 });
        // Both branches go to the join, even one an NT dropped.
        assert_eq!(w.ran(false), Ran::Join);
        assert_eq!(copy.ran(true), Ran::Join);
        assert_eq!((w.join_slot(), copy.join_slot()), (Some(j), Some(j)));
        w.joined();
        assert_eq!(w.enter(&mut s, Instant::ZERO, TenantId(0), 7, 1, false), Entered::Out);
    }

    #[test]
    fn drops_and_the_last_step_end_the_walk() {
        let mut s = two_steps_then_a_group();
        let mut w = Walk::start(DagUid(1));
        w.enter(&mut s, Instant::ZERO, TenantId(0), 7, 1, false);
        assert_eq!(w.ran(true), Ran::Drop);
        let mut s2: Scheduler<u32> = Scheduler::new(Default::default());
        let c = s2.add_chain(1);
        s2.set_dag(DagUid(0), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
        let mut w = Walk::start(DagUid(0));
        // No instance yet: the on-demand path decides.
        assert_eq!(w.enter(&mut s2, Instant::ZERO, TenantId(0), 7, 1, false), Entered::OnDemand);
        s2.add_instance(c, 1).unwrap();
        assert_eq!(w.enter(&mut s2, Instant::ZERO, TenantId(0), 7, 1, false), Entered::Queued { branches: 0 });
        assert_eq!(w.ran(false), Ran::Out);
        // An unknown route is refused, not sent out.
        let mut w = Walk::start(DagUid(9));
        assert_eq!(w.enter(&mut s2, Instant::ZERO, TenantId(0), 7, 1, false), Entered::Refused(Reject::UnknownDag));
    }

    #[test]
    fn a_full_join_table_forks_nothing_and_the_packet_is_dropped_at_the_join() {
        let mut s = two_steps_then_a_group();
        let mut w = Walk { pos: 2, ..Walk::start(DagUid(1)) };
        assert_eq!(w.enter(&mut s, Instant::ZERO, TenantId(0), 7, 1, false), Entered::Queued { branches: 2 });
        let mut joins: JoinTable<u32> = JoinTable::new(0);
        assert_eq!(w.fork(&mut joins, 2), None);
        assert_eq!(w.ran(false), Ran::Join);
        assert_eq!(w.join_slot(), None);
    }

    #[test]
    fn panic_mode_runs_one_nt_per_visit() {
        let mut s = two_steps_then_a_group();
        let mut w = Walk::start(DagUid(1));
        w.enter(&mut s, Instant::ZERO, TenantId(0), 7, 1, true);
        assert_eq!(w.mask, NtMask(1));
        assert!(w.panic_next(&s));
        assert_eq!(w.mask, NtMask(2));
        assert!(!w.panic_next(&s));
        assert_eq!(w.ran(false), Ran::Next);
    }

    #[test]
    fn a_skipped_step_moves_on_or_joins() {
        let s = two_steps_then_a_group();
        let mut w = Walk::start(DagUid(1));
        assert_eq!(w.skip(&s), Skip::Next);
        assert_eq!(w.pos, 1);
        let mut w = Walk { pos: 1, ..Walk::start(DagUid(1)) };
        assert_eq!(w.skip(&s), Skip::Next);
        // The group's first step: fork, then join having run nothing.
        assert_eq!(w.skip(&s), Skip::Fork { branches: 2 });
        assert_eq!((w.pos, w.mask, w.join_at), (2, NtMask(0), 4));
        let mut branch = Walk { pos: 3, ..Walk::start(DagUid(1)) };
        assert_eq!(branch.skip(&s), Skip::Join);
        assert_eq!((branch.mask, branch.join_at), (NtMask(0), 4));
        let mut s2: Scheduler<u32> = Scheduler::new(Default::default());
        let c = s2.add_chain(1);
        s2.set_dag(DagUid(0), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
        assert_eq!(Walk::start(DagUid(0)).skip(&s2), Skip::Out);
    }
}
