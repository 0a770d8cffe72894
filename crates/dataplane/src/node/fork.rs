//! NT-level parallelism in the node (paper 000 §4.2): a packet reaching a parallel group of its
//! DAG is copied once per extra branch (the copies charged to its tenant), each copy runs its
//! branch's chain, and the copies meet in the synchronization buffer ([`JoinTable`]) before the
//! step after the group. A packet any branch dropped is dropped (counted once); otherwise the
//! packet goes on with the bytes of the branch that writes the packet (headers or payload: at
//! most one branch of a group may, since the group's NTs do not conflict) and the VNI of the
//! branch that writes the VNI.
//!
//! [`JoinTable`]: snic_core::join::JoinTable

use super::{Backend, Node};
use crate::Drop;
use snic_core::join::{JoinId, Merged};
use snic_core::time::Instant;
use snic_nt::Access;
use snic_wire::vxlan;

/// A branch that never ran (no buffer, or refused by the scheduler): its drop is already
/// counted.
const FAILED: u32 = u32::MAX;

impl<B: Backend> Node<B> {
    /// `idx` was just queued for the first step of a parallel group of `branches` steps: copy
    /// it for the others and queue each copy at its step.
    #[cold]
    #[inline(never)]
    pub(super) fn fork(&mut self, idx: u32, branches: u8, now: Instant) {
        let slots = self.slots.clone();
        // SAFETY: the dispatcher owns `idx` (queued, not dispatched yet: only its descriptor's
        // join fields are written, which no region reads).
        let (buf, d) = unsafe { slots.get(idx) };
        let Some(j) = self.core.handle_fork(&mut d.walk, branches) else {
            // No room to join: the packet runs its first branch and is dropped at the join.
            return;
        };
        let (t, off, len) = (d.meta.tenant, d.meta.off as usize, d.meta.len as usize);
        for b in 1..branches {
            let c = match self.store.alloc_charged(t, off..off + len) {
                Ok(c) => c,
                Err(e) => {
                    self.stats.tenant_mut(t).drops[e.index()] += 1;
                    self.branch_failed(j, b, now);
                    continue;
                }
            };
            // SAFETY: `c` was just allocated to the dispatcher and differs from `idx`.
            let (cb, cd) = unsafe { slots.get(c) };
            cb[off..off + len].copy_from_slice(&buf[off..off + len]);
            *cd = *d;
            cd.walk = d.walk.branch_copy(b);
            self.store.tag_route(c, cd.walk.dag.0);
            // (A group's other steps start no group: this forks nothing; a refused copy tells
            // the join.)
            self.enter(c, now);
        }
    }

    /// Branch `b` of the packet joining at `j` could not run (its drop is counted).
    pub(super) fn branch_failed(&mut self, j: JoinId, b: u8, now: Instant) {
        self.branch_back(j, b, FAILED, true, now);
    }

    /// A copy finished its branch (or its branch was skipped for the endpoint).
    #[cold]
    #[inline(never)]
    pub(super) fn join_arrive(&mut self, idx: u32, now: Instant) {
        // SAFETY: the batch came back to the dispatcher, which owns `idx`.
        let (_, d) = unsafe { self.slots.get(idx) };
        let Some(j) = d.walk.join_slot() else {
            return self.drop_charged(idx, d.meta.tenant, Drop::StoreFull);
        };
        let dropped = d.verdict.is_some();
        self.branch_back(j, d.walk.branch, idx, dropped, now);
    }

    fn branch_back(&mut self, j: JoinId, branch: u8, idx: u32, dropped: bool, now: Instant) {
        let Some(done) = self.core.handle_branch(j, branch, idx, dropped) else { return };
        let slots = self.slots.clone();
        // SAFETY: every copy that ran is back with the dispatcher; the closure's borrow ends
        // before `keep`'s buffer is written.
        let desc = |c: u32| unsafe { slots.get(c) }.1;
        let writes = |c| {
            let w = self.step_writes(c);
            (w & (Access::HEADERS | Access::PAYLOAD) != 0, w & Access::VNI != 0)
        };
        let Some(merged) = done.merge(FAILED, |c| desc(c).verdict.is_some(), writes) else { return };
        let Some(first) = done.live(FAILED).next() else { return };
        let t = desc(first).meta.tenant;
        let (keep, vni) = match merged {
            Merged::Dropped { counted } => (counted, None),
            Merged::Goes { keep, vni } => (Some(keep), vni.map(|c| desc(c).meta.vni)),
        };
        for c in done.live(FAILED).filter(|&c| Some(c) != keep) {
            self.store.free_charged(c, t);
        }
        let Some(keep) = keep else { return };
        // SAFETY: `keep` is back with the dispatcher.
        let (buf, d) = unsafe { slots.get(keep) };
        if done.dropped {
            // (`merge` counts a copy with a verdict.)
            return self.drop_charged(keep, t, d.verdict.map_or(Drop::StoreFull, Drop::Nt));
        }
        if let Some(v) = vni {
            // The VNI lives in the descriptor and in the packet's VXLAN header.
            let off = d.meta.off as usize;
            vxlan::set_vni(&mut buf[off..off + vxlan::HEADER_LEN], v);
            d.meta.vni = v;
        }
        d.walk.joined();
        self.enter(keep, now);
    }

    /// What the NTs a copy just ran (its chain, its mask) write.
    fn step_writes(&self, idx: u32) -> u8 {
        // SAFETY: the dispatcher owns `idx`.
        let d = unsafe { self.slots.get(idx) }.1;
        self.elastic.writes(self.core.sched().chain_of(d.instance), |i| d.walk.mask.runs(i))
    }
}
