//! Instances that come and go: launching, running, draining, parked — and moving flows between
//! instances with no loss and no reordering.
//!
//! A chain's packets go to its *active* instances, by flow hash. When that set changes (an
//! instance is added, resumed or stopped), the hash maps some flows to another instance. Such a
//! flow may still have packets queued at, or running in, its old instance; sending its new
//! packets to the new instance at once could overtake them. So, during a *transition*, a packet
//! whose instance under the new set differs from the one under the old set is *held* (in
//! arrival order, bounded by [`SchedConfig::max_held`](super::SchedConfig::max_held)); every old
//! instance gets a *barrier* at its last item queued before the change; once every old instance
//! has completed its items up to its barrier, the held packets are released to their new
//! instances in order and the transition ends. Flows whose instance did not change never wait.
//!
//! One transition per chain at a time: a change requested while one is under way is refused
//! with [`Change::Busy`] (the caller retries; transitions last as long as the old instances
//! take to finish what they had), except adding an instance to a chain that has none.
//!
//! States: `Launching` instances accept packets (the bounded buffer for a chain being launched)
//! but get no dispatch until [`Scheduler::set_running`], after which they are served first.
//! `Draining` instances get no new packets and finish what they have, then become `Parked`
//! (reported by [`Scheduler::take_parked`]); a parked instance can be resumed, or removed to
//! free its slot for a later instance.

use super::{pick, Instance, Scheduler};
use crate::ids::{ChainId, InstanceId, TenantId};
use std::collections::VecDeque;

/// Where an instance is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    /// Accepts packets, does not run yet (its region is being launched).
    Launching,
    /// Accepts and runs packets.
    Running,
    /// Runs what it has, accepts nothing new.
    Draining,
    /// Has nothing; accepts nothing (a victim, or stopped).
    Parked,
    /// The slot is unused.
    Free,
}

impl InstanceState {
    /// True if the instance's queued items may be dispatched.
    #[inline]
    pub(super) fn dispatches(self) -> bool {
        matches!(self, InstanceState::Running | InstanceState::Draining)
    }
}

/// Why an instance change was refused (nothing changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Change {
    /// No such chain.
    #[error("unknown chain")]
    UnknownChain,
    /// No such instance.
    #[error("unknown instance")]
    UnknownInstance,
    /// The instance is not in a state that allows this.
    #[error("instance is {0:?}")]
    WrongState(InstanceState),
    /// The chain's instances are still changing from an earlier request.
    #[error("chain's instances are still changing")]
    Busy,
}

/// A chain: its NT count, active instances, and the transition under way.
#[derive(Debug)]
pub(super) struct Chain<T> {
    pub(super) nts: usize,
    pub(super) list: Vec<InstanceId>,
    pub(super) tr: Option<Transition<T>>,
}

#[derive(Debug)]
pub(super) struct Transition<T> {
    /// The active instances before the change.
    pub(super) prev: Vec<InstanceId>,
    /// Packets of moving flows, in arrival order.
    pub(super) held: VecDeque<Held<T>>,
}

#[derive(Debug)]
pub(super) struct Held<T> {
    pub(super) tenant: TenantId,
    pub(super) flow_hash: u64,
    pub(super) item: T,
}

/// An old instance's barrier: items queued before the change still to dispatch, then the
/// dispatch count after the last of them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Barrier {
    pre_left: usize,
    at: Option<u64>,
}

impl Barrier {
    /// `taken` of the pre-change items were just dispatched; `dispatched` is the running total.
    #[inline]
    pub(super) fn dispatched(&mut self, taken: usize, dispatched: u64) {
        self.pre_left -= taken;
        if self.pre_left == 0 && self.at.is_none() {
            self.at = Some(dispatched);
        }
    }

    fn passed(&self, completed: u64) -> bool {
        self.at.is_some_and(|a| completed >= a)
    }
}

impl<T: Copy> Scheduler<T> {
    /// Adds a running instance of `chain` with `credits` credits (in a free slot if one was
    /// removed earlier). If the chain had instances, flows that the new one takes over move to
    /// it once their old instance has finished their earlier packets.
    pub fn add_instance(&mut self, chain: ChainId, credits: u32) -> Result<InstanceId, Change> {
        self.add_in(chain, credits, InstanceState::Running)
    }

    /// Adds an instance that is still launching: it takes packets (the chain's wait buffer,
    /// bounded per tenant) and runs them, first, once [`Scheduler::set_running`] says so.
    pub fn add_launching(&mut self, chain: ChainId, credits: u32) -> Result<InstanceId, Change> {
        self.add_in(chain, credits, InstanceState::Launching)
    }

    fn add_in(&mut self, chain: ChainId, credits: u32, state: InstanceState) -> Result<InstanceId, Change> {
        let ch = self.chains.get(chain.index()).ok_or(Change::UnknownChain)?;
        if ch.tr.is_some() && !ch.list.is_empty() {
            return Err(Change::Busy);
        }
        let fresh = Instance {
            chain,
            state,
            credits,
            max_credits: credits,
            cost_ns: 0.0,
            inflight_cap_ns: 0.0,
            deficit: 0.0,
            paused: false,
            queues: Vec::new(),
            rr: 0,
            last_q: 0,
            queued: 0,
            dispatched: 0,
            completed: 0,
            barrier: None,
        };
        let id = match self.instances.iter().position(|i| i.state == InstanceState::Free) {
            Some(i) => {
                // (A stale entry in the ready list, if any, finds nothing to dispatch.)
                self.instances[i] = fresh;
                InstanceId(i as u16)
            }
            None => {
                self.instances.push(fresh);
                self.in_ready.push(false);
                InstanceId((self.instances.len() - 1) as u16)
            }
        };
        self.join(chain, id);
        Ok(id)
    }

    /// A launching instance runs: what waited for it is dispatched first.
    pub fn set_running(&mut self, id: InstanceId) -> Result<(), Change> {
        let inst = self.instances.get_mut(id.index()).ok_or(Change::UnknownInstance)?;
        if inst.state != InstanceState::Launching {
            return Err(Change::WrongState(inst.state));
        }
        inst.state = InstanceState::Running;
        self.make_ready(id, true);
        Ok(())
    }

    /// An instance that now runs joins the ready list if it has work and credit (`front`: a
    /// launch's buffered packets go first).
    fn make_ready(&mut self, id: InstanceId, front: bool) {
        let inst = &self.instances[id.index()];
        if inst.queued > 0 && inst.credits > 0 && !self.in_ready[id.index()] {
            self.in_ready[id.index()] = true;
            if front {
                self.ready.push_front(id);
            } else {
                self.ready.push_back(id);
            }
        }
    }

    /// Stops a running instance: it takes no new packets, its flows move to the chain's other
    /// instances (or wait for a new one), and it finishes what it has, after which
    /// [`Scheduler::take_parked`] reports it.
    pub fn stop_instance(&mut self, id: InstanceId) -> Result<(), Change> {
        let inst = self.instances.get(id.index()).ok_or(Change::UnknownInstance)?;
        if inst.state != InstanceState::Running {
            return Err(Change::WrongState(inst.state));
        }
        let c = inst.chain.index();
        if self.chains[c].tr.is_some() {
            return Err(Change::Busy);
        }
        let prev = self.chains[c].list.clone();
        self.chains[c].list.retain(|&i| i != id);
        self.instances[id.index()].state = InstanceState::Draining;
        self.begin(c, prev);
        self.settle(id);
        Ok(())
    }

    /// Makes a parked (or still draining) instance active again, with whatever state its region
    /// kept: no launch.
    pub fn resume_instance(&mut self, id: InstanceId) -> Result<(), Change> {
        let inst = self.instances.get(id.index()).ok_or(Change::UnknownInstance)?;
        if !matches!(inst.state, InstanceState::Parked | InstanceState::Draining) {
            return Err(Change::WrongState(inst.state));
        }
        let chain = inst.chain;
        let ch = &self.chains[chain.index()];
        if ch.tr.is_some() && !ch.list.is_empty() {
            return Err(Change::Busy);
        }
        self.instances[id.index()].state = InstanceState::Running;
        self.parked.retain(|&p| p != id);
        self.join(chain, id);
        self.make_ready(id, false);
        Ok(())
    }

    /// An instance that will never run (its region could not be put in place): launching, or
    /// added running but never dispatched to (a scale-out). It leaves its chain and frees its
    /// slot, and the items queued at it go to `out` (the caller drops them, counted), in order.
    /// It never dispatched, so no flow can be overtaken: the chain's other instances, if any,
    /// take its flows at once, and a transition that waited on it waits no more.
    pub fn abandon_launch(&mut self, id: InstanceId, out: &mut Vec<T>) -> Result<(), Change> {
        let inst = self.instances.get_mut(id.index()).ok_or(Change::UnknownInstance)?;
        let never_ran = inst.state == InstanceState::Running && inst.dispatched == 0;
        if inst.state != InstanceState::Launching && !never_ran {
            return Err(Change::WrongState(inst.state));
        }
        for q in &mut inst.queues {
            out.extend(q.q.drain(..));
            q.pre = 0;
        }
        inst.queued = 0;
        inst.barrier = None;
        inst.state = InstanceState::Free;
        let c = inst.chain.index();
        self.chains[c].list.retain(|&i| i != id);
        if let Some(tr) = &mut self.chains[c].tr {
            tr.prev.retain(|&i| i != id);
        }
        self.finish_if_done(c);
        Ok(())
    }

    /// Frees a parked instance's slot (its id may be reused by a later instance).
    pub fn remove_instance(&mut self, id: InstanceId) -> Result<(), Change> {
        let inst = self.instances.get_mut(id.index()).ok_or(Change::UnknownInstance)?;
        if inst.state != InstanceState::Parked {
            return Err(Change::WrongState(inst.state));
        }
        inst.state = InstanceState::Free;
        inst.queues.clear();
        self.parked.retain(|&p| p != id);
        Ok(())
    }

    /// A stopped instance that has finished everything it had, if any (each reported once).
    pub fn take_parked(&mut self) -> Option<InstanceId> {
        self.parked.pop()
    }

    /// True if [`Scheduler::take_parked`] has something.
    #[inline]
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// An instance's state.
    pub fn state(&self, id: InstanceId) -> InstanceState {
        self.instances.get(id.index()).map_or(InstanceState::Free, |i| i.state)
    }

    /// A chain's active instances (launching or running), in flow-hash order.
    pub fn instances_of(&self, chain: ChainId) -> &[InstanceId] {
        self.chains.get(chain.index()).map_or(&[], |c| &c.list)
    }

    /// Packets held back while a chain's instances change (0 when none is under way).
    pub fn held(&self, chain: ChainId) -> Option<usize> {
        self.chains.get(chain.index()).and_then(|c| c.tr.as_ref()).map(|t| t.held.len())
    }

    /// Adds `id` to its chain's active set, starting a transition if the chain had instances.
    fn join(&mut self, chain: ChainId, id: InstanceId) {
        let c = chain.index();
        let prev = self.chains[c].list.clone();
        self.chains[c].list.push(id);
        // With a transition already under way (the chain had no active instance, its last one
        // draining), that transition holds every flow until the old instance is done.
        if self.chains[c].tr.is_none() && !prev.is_empty() {
            self.begin(c, prev);
        }
        self.finish_if_done(c);
    }

    /// Starts a transition of chain `c` from the active set `prev`: a barrier on each old
    /// instance after what it has queued now.
    fn begin(&mut self, c: usize, prev: Vec<InstanceId>) {
        for &id in &prev {
            let inst = &mut self.instances[id.index()];
            let mut pre_left = 0;
            for q in &mut inst.queues {
                q.pre = q.q.len();
                pre_left += q.pre;
            }
            let mut b = Barrier { pre_left, at: None };
            b.dispatched(0, inst.dispatched);
            inst.barrier = (!b.passed(inst.completed)).then_some(b);
        }
        self.chains[c].tr = Some(Transition { prev, held: VecDeque::new() });
        self.finish_if_done(c);
    }

    /// After completions at `id`: its barrier may have passed, a draining instance may be done.
    pub(super) fn settle(&mut self, id: InstanceId) {
        let inst = &mut self.instances[id.index()];
        if inst.barrier.is_some_and(|b| b.passed(inst.completed)) {
            inst.barrier = None;
        }
        if inst.state == InstanceState::Draining && inst.queued == 0 && inst.completed == inst.dispatched {
            inst.state = InstanceState::Parked;
            inst.barrier = None;
            self.parked.push(id);
        }
        let c = self.instances[id.index()].chain.index();
        self.finish_if_done(c);
    }

    /// Ends chain `c`'s transition once every old instance has passed its barrier: the held
    /// packets go to their new instances, in order.
    fn finish_if_done(&mut self, c: usize) {
        let Some(tr) = &self.chains[c].tr else { return };
        if tr.prev.iter().any(|&i| self.instances[i.index()].barrier.is_some()) {
            return;
        }
        if self.chains[c].list.is_empty() && !tr.held.is_empty() {
            return;
        }
        let tr = self.chains[c].tr.take().expect("checked above");
        for h in tr.held {
            let id = pick(&self.chains[c].list, h.flow_hash);
            // Already accepted: the per-tenant bound was applied to the held queue instead.
            let _ = self.enqueue(id, h.tenant, h.item, usize::MAX);
        }
    }
}
