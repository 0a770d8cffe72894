//! The node's DAG table, and a DAG's run-time switch between its chain candidates (the policy
//! is `snic-core`'s `Rechainer`, inside the node's [`snic_core::elastic::Elasticity`]; see
//! [`snic_core::rechain`]).
//!
//! Every deployed DAG has a *planned* route (the planner's chains); a DAG given a *compact*
//! form ([`Node::set_compact_form`]) can also run as one chain holding all its NTs. Each form
//! has its own node-internal route UID, so a packet always finishes the route it entered on.
//! A switch:
//!
//! 1. **holds** the DAG's arriving packets (in order, bounded) instead of entering them;
//! 2. waits until no packet is left on the old route (the store counts buffers per route);
//! 3. stops the old form's chains and **moves their NTs' state** into the new form's chains (a
//!    NAT keeps its mappings, a firewall its flows): concatenated into the compact chain, or
//!    split back into the planned chains; their regions are freed;
//! 4. launches the new form's chains into the freed regions, with the moved state, and
//!    releases the held packets, in order, onto the new route (they wait for the launch, as
//!    any packet of a launching chain).
//!
//! Nothing is lost (past the hold bound, arrivals are dropped and counted) and nothing is
//! reordered within a flow, since no packet of the new route runs before the old route is
//! empty. A switch that does not drain within [`SWITCH_TIMEOUT_PERIODS`] MONITOR_PERIODs is
//! abandoned: the held packets go on along the old route, still in order.
//!
//! The control plane replacing a DAG's planned route ([`Node::set_dag`]) is handled alike: the
//! new route gets a new internal UID, arrivals are held while packets remain on the old one,
//! then enter the new one in order (past the timeout, they go anyway: the old route is no
//! longer the DAG's). Replaced and removed routes leave the scheduler once empty, and their
//! UIDs are reused (see `retire.rs`).

use super::{Backend, Drop, Node};
use crate::elastic::EventKind;
use crate::store::Store;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{ChainId, DagUid};
use snic_core::rechain::{DagView, Form};
use snic_core::sched::{Reject, Scheduler};
use snic_core::time::Instant;
use snic_nt::{Nt, NtSpec};
use std::collections::VecDeque;

/// `live` value of a UID that is not deployed.
pub(super) const NONE: u32 = u32::MAX;
/// `live` flag: the DAG is switching; its arrivals are held.
pub(super) const HOLD: u32 = 1 << 31;

/// A switch not drained after this many MONITOR_PERIODs (and at least 100 ms) is abandoned.
pub use snic_core::elastic::SWITCH_TIMEOUT_PERIODS;

/// Why a compact form was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    /// No such DAG.
    #[error("no DAG with UID {0}")]
    UnknownDag(u32),
    /// The planned route visits fewer than two chains: nothing to compact.
    #[error("the DAG's planned route visits {0} chain(s); a compact form needs at least two")]
    OneChain(usize),
    /// The compact chain must hold exactly the planned chains' NTs, in their order.
    #[error("the compact chain has {got} NTs but the planned chains hold {want}")]
    NtCount {
        /// The compact chain's.
        got: usize,
        /// The planned chains'.
        want: usize,
    },
}

/// The node's DAG table. See the module docs.
pub(super) struct Dags {
    /// By the DAG's UID (the MAT's): the internal route UID its arrivals take, `HOLD` set while
    /// it switches, `NONE` if not deployed.
    pub(super) live: Vec<u32>,
    entries: Vec<Option<Entry>>,
    next: u32,
    /// Internal route UIDs replaced or removed, still in the scheduler while packets run them.
    retired: Vec<u32>,
    /// Internal route UIDs free for reuse.
    free: Vec<u32>,
    /// DAGs switching now (the poll checks them while non-zero).
    pub(super) switching: usize,
}

struct Entry {
    planned: u32,
    /// The planned route's chains, each once, in route order.
    planned_chains: Vec<ChainId>,
    compact: Option<(u32, ChainId)>,
    form: Form,
    switch: Option<Switching>,
}

struct Switching {
    from: u32,
    /// The form it switches to; `None`: its planned route was replaced (a control-plane
    /// change), arrivals wait until the old route is empty, then take the new one.
    to: Option<Form>,
    held: VecDeque<u32>,
    since: Instant,
}

impl Entry {
    fn live(&self) -> u32 {
        match (self.form, self.compact) {
            (Form::Compact, Some((c, _))) => c,
            _ => self.planned,
        }
    }
    fn chains(&self, form: Form) -> Vec<ChainId> {
        match (form, self.compact) {
            (Form::Compact, Some((_, c))) => vec![c],
            _ => self.planned_chains.clone(),
        }
    }
}

impl Dags {
    pub(super) fn new() -> Self {
        Dags { live: Vec::new(), entries: Vec::new(), next: 0, retired: Vec::new(), free: Vec::new(), switching: 0 }
    }

    fn set_live(&mut self, uid: DagUid, v: u32) {
        let i = uid.0 as usize;
        if self.live.len() <= i {
            self.live.resize(i + 1, NONE);
            self.entries.resize_with(i + 1, || None);
        }
        self.live[i] = v;
    }

    fn entry(&mut self, uid: DagUid) -> Option<&mut Entry> {
        self.entries.get_mut(uid.0 as usize).and_then(Option::as_mut)
    }

    fn alloc(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// Internal route `r` takes no new packets; it leaves the scheduler once those on it have
    /// finished ([`Dags::free_routes`]).
    /// True while replaced or removed routes wait for their packets to leave.
    pub(super) fn retiring(&self) -> bool {
        !self.retired.is_empty()
    }

    fn retire(&mut self, r: u32) {
        self.retired.push(r);
    }

    /// Retired routes with no packet left leave the scheduler; their UIDs are reused.
    pub(super) fn free_routes<T: Copy>(&mut self, store: &Store, sched: &mut Scheduler<T>) {
        let mut i = 0;
        while i < self.retired.len() {
            let r = self.retired[i];
            if store.in_route(r) == 0 {
                sched.remove_dag(DagUid(r));
                self.free.push(self.retired.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }
}

fn distinct_chains(route: &DagRoute) -> Vec<ChainId> {
    let mut out: Vec<ChainId> = Vec::new();
    for s in route.steps() {
        if !out.contains(&s.chain) {
            out.push(s.chain);
        }
    }
    out
}

impl<B: Backend> Node<B> {
    /// Installs the route of a DAG (its planned form). Replacing a route with a different one
    /// puts the DAG back on its planned form and forgets its compact form; packets already on
    /// the old route finish it (it leaves once they have).
    pub fn set_dag(&mut self, uid: DagUid, route: DagRoute) {
        let chains = distinct_chains(&route);
        let internal = self.dags.alloc();
        let mut replaced = None;
        match self.dags.entry(uid) {
            Some(e) => {
                if self.sched.route(DagUid(e.planned)) == Some(&route) {
                    self.dags.free.push(internal);
                    return;
                }
                // The route its arrivals took (its compact one, if it ran that form): the
                // packets to wait for.
                replaced = Some(e.live());
                let old = std::mem::replace(&mut e.planned, internal);
                self.dags.retire(old);
            }
            None => {
                self.dags.set_live(uid, internal);
                self.dags.entries[uid.0 as usize] =
                    Some(Entry { planned: internal, planned_chains: Vec::new(), compact: None, form: Form::Planned, switch: None });
            }
        }
        self.sched.set_dag(DagUid(internal), route);
        self.forget_compact(uid);
        let Some(e) = self.dags.entry(uid) else { return };
        e.planned_chains = chains;
        // Packets still on the old route: arrivals wait until they have gone (no flow is
        // reordered), as in a switch between forms.
        if let Some(old) = replaced.filter(|&r| self.store.in_route(r) > 0) {
            let now = self.clock.now();
            e.switch = Some(Switching { from: old, to: None, held: VecDeque::new(), since: now });
            self.dags.switching += 1;
            self.dags.set_live(uid, HOLD | old);
        }
    }

    /// Removes a DAG; its packets already on a route finish it, those held by a switch are
    /// dropped. Its compact form's chain goes too.
    pub fn remove_dag(&mut self, uid: DagUid) {
        let Some(e) = self.dags.entries.get_mut(uid.0 as usize).and_then(Option::take) else { return };
        self.dags.live[uid.0 as usize] = NONE;
        self.dags.retire(e.planned);
        if let Some((r, c)) = e.compact {
            self.dags.retire(r);
            self.remove_chain(c);
        }
        if let Some(s) = e.switch {
            self.dags.switching -= 1;
            for idx in s.held {
                self.drop_held(idx, Drop::Sched(Reject::UnknownDag));
            }
        }
    }

    /// Gives DAG `uid` a compact form: one chain of `specs`, which must be its planned chains'
    /// NTs in route order (each planned chain once). The node may then switch the DAG between
    /// its forms at run time (with elasticity on). Idempotent for the same specs.
    pub fn set_compact_form(&mut self, uid: DagUid, specs: Vec<NtSpec>, names: &[String]) -> Result<ChainId, CompactError> {
        let e = self.dags.entry(uid).ok_or(CompactError::UnknownDag(uid.0))?;
        if let Some((_, c)) = e.compact {
            if self.chains[c.index()] == specs {
                return Ok(c);
            }
        }
        let planned = e.planned_chains.clone();
        if planned.len() < 2 {
            return Err(CompactError::OneChain(planned.len()));
        }
        let want: usize = planned.iter().map(|c| self.chains[c.index()].len()).sum();
        if specs.len() != want || want > 64 {
            return Err(CompactError::NtCount { got: specs.len(), want });
        }
        self.forget_compact(uid);
        let n = specs.len();
        let chain = self.add_chain(specs);
        self.label_chain(chain, names);
        let internal = self.dags.alloc();
        self.sched.set_dag(DagUid(internal), DagRoute::new(vec![Step { chain, mask: NtMask::all(n) }]));
        if let Some(e) = self.dags.entry(uid) {
            e.compact = Some((internal, chain));
        }
        Ok(chain)
    }

    /// The form DAG `uid` runs as (while switching: the one it is leaving).
    pub fn dag_form(&self, uid: DagUid) -> Option<Form> {
        self.dags.entries.get(uid.0 as usize)?.as_ref().map(|e| e.form)
    }

    /// True while DAG `uid` is switching forms.
    pub fn dag_switching(&self, uid: DagUid) -> bool {
        self.dags.entries.get(uid.0 as usize).and_then(Option::as_ref).is_some_and(|e| e.switch.is_some())
    }

    /// Starts switching DAG `uid` to `to` (the policy does this by itself; operators and tests
    /// may too). False if the node has no elasticity (regions as a pool), the DAG has no such
    /// form, already runs it, or is switching.
    pub fn switch_form(&mut self, uid: DagUid, to: Form) -> bool {
        let now = self.clock.now();
        let started = self.begin_switch(uid, to, now);
        if started {
            self.core.elastic.switched(now);
        }
        started
    }

    /// The DAG's compact form goes away: back to the planned route at once (a control-plane
    /// change; packets held by a switch go on along the planned route).
    fn forget_compact(&mut self, uid: DagUid) {
        let Some(e) = self.dags.entry(uid) else { return };
        let planned = e.planned;
        let held = e.switch.take().map(|s| s.held);
        e.form = Form::Planned;
        let compact = e.compact.take();
        if let Some((r, c)) = compact {
            self.dags.retire(r);
            self.remove_chain(c);
        }
        self.dags.set_live(uid, planned);
        if let Some(held) = held {
            self.dags.switching -= 1;
            let now = self.clock.now();
            for idx in held {
                self.enter_route(idx, planned, now);
            }
        }
    }

    fn begin_switch(&mut self, uid: DagUid, to: Form, now: Instant) -> bool {
        // Chains come and go only with elasticity on (regions as a pool).
        if !self.core.elastic.on() {
            return false;
        }
        let Some(e) = self.dags.entry(uid) else { return false };
        let Some((_, compact_chain)) = e.compact else { return false };
        if e.form == to || e.switch.is_some() {
            return false;
        }
        let from = e.live();
        e.switch = Some(Switching { from, to: Some(to), held: VecDeque::new(), since: now });
        self.dags.switching += 1;
        self.dags.set_live(uid, HOLD | from);
        let first = if to == Form::Compact { compact_chain } else { self.dags.entry(uid).map_or(compact_chain, |e| e.planned_chains[0]) };
        self.record(now, first, None, EventKind::Rechain { dag: uid, to }, 0);
        self.advance_switches(now);
        true
    }

    /// A packet of a switching DAG arrived (or of an unknown DAG: dropped).
    #[cold]
    #[inline(never)]
    pub(super) fn hold(&mut self, idx: u32, uid: DagUid) {
        let cap = self.cfg.max_queue_per_tenant;
        let held = self.dags.entry(uid).and_then(|e| e.switch.as_mut()).map(|s| &mut s.held);
        match held {
            Some(h) if h.len() < cap => h.push_back(idx),
            Some(_) => self.drop_held(idx, Drop::Sched(Reject::QueueFull)),
            None => self.drop_held(idx, Drop::Sched(Reject::UnknownDag)),
        }
    }

    fn drop_held(&mut self, idx: u32, why: Drop) {
        // SAFETY: the dispatcher owns held packets.
        let t = unsafe { self.slots.get(idx) }.1.meta.tenant;
        self.drop_charged(idx, t, why);
    }

    /// A packet enters internal route `route` at its first step.
    fn enter_route(&mut self, idx: u32, route: u32, now: Instant) {
        // SAFETY: the dispatcher owns `idx`.
        let (_, d) = unsafe { self.slots.get(idx) };
        d.walk = snic_core::walk::Walk::start(DagUid(route));
        self.store.tag_route(idx, route);
        self.enter(idx, now);
    }

    /// Switches whose old route has emptied complete; those past their time are abandoned.
    pub(super) fn advance_switches(&mut self, now: Instant) {
        let timeout = self.core.elastic.switch_timeout();
        for i in 0..self.dags.entries.len() {
            let Some(Some(e)) = self.dags.entries.get(i) else { continue };
            let Some(s) = &e.switch else { continue };
            let uid = DagUid(i as u32);
            if s.to.is_none() {
                // A replaced route: past the time, the held packets go on anyway (the old route
                // is gone from the DAG; waiting longer only grows their delay).
                if self.store.in_route(s.from) == 0 || now.saturating_since(s.since) >= timeout {
                    self.finish_replace(uid, now);
                }
                continue;
            }
            // An old chain being launched, or evicted, has its NTs' state in hand only once that
            // is done.
            let busy = e
                .chains(e.form)
                .iter()
                .any(|&c| self.elastic.pending.iter().any(|p| p.chain == c || p.evict.is_some_and(|ev| self.sched.chain_of(ev) == c)));
            if self.store.in_route(s.from) == 0 && !busy {
                self.finish_switch(uid, now);
            } else if now.saturating_since(s.since) >= timeout {
                self.abandon_switch(uid, now);
            }
        }
    }

    /// The replaced route has emptied: held arrivals take the new one, in order.
    fn finish_replace(&mut self, uid: DagUid, now: Instant) {
        let Some(e) = self.dags.entry(uid) else { return };
        let Some(s) = e.switch.take() else { return };
        let to = e.planned;
        self.dags.switching -= 1;
        self.dags.set_live(uid, to);
        for idx in s.held {
            self.enter_route(idx, to, now);
        }
    }

    fn abandon_switch(&mut self, uid: DagUid, now: Instant) {
        let Some(e) = self.dags.entry(uid) else { return };
        let Some(s) = e.switch.take() else { return };
        self.dags.switching -= 1;
        self.dags.set_live(uid, s.from);
        let first = self.dags.entry(uid).map_or(ChainId(0), |e| e.chains(e.form)[0]);
        self.record(now, first, None, EventKind::RechainAbandoned { dag: uid }, now.saturating_since(s.since).as_nanos() as u64);
        for idx in s.held {
            self.enter_route(idx, s.from, now);
        }
    }

    fn finish_switch(&mut self, uid: DagUid, now: Instant) {
        let Some(e) = self.dags.entry(uid) else { return };
        // (A replaced route has no form to switch to: see `finish_replace`.)
        let Some(Some(to_form)) = e.switch.as_ref().map(|s| s.to) else { return self.finish_replace(uid, now) };
        let Some(s) = e.switch.take() else { return };
        let (old, new) = (e.chains(e.form), e.chains(to_form));
        e.form = to_form;
        let to = e.live();
        self.dags.switching -= 1;
        // The old form's NTs, with their state, in route order.
        let mut nts: Vec<Box<dyn Nt>> = Vec::new();
        let mut moved = true;
        for &c in &old {
            self.stop_chain(c);
            match self.chain_nts(c) {
                Ok((mut n, _)) => nts.append(&mut n),
                Err(_) => moved = false,
            }
        }
        if moved {
            for &c in new.iter().rev() {
                let k = self.chains[c.index()].len();
                let part = nts.split_off(nts.len() - k);
                self.save_state(c, part);
            }
        }
        // The new form's chains launch now, side by side, into the regions just freed (what
        // finds none launches on demand).
        for &c in &new {
            let _ = self.prelaunch(c);
        }
        self.dags.set_live(uid, to);
        self.elastic.stats.rechains += 1;
        self.record(now, new[0], None, EventKind::Rechained { dag: uid, to: to_form }, now.saturating_since(s.since).as_nanos() as u64);
        for idx in s.held {
            self.enter_route(idx, to, now);
        }
    }

    /// One epoch of the policy: region shortfalls since the last, unused regions, and the
    /// DAGs that can switch.
    pub(super) fn rechain_epoch(&mut self, now: Instant) {
        if !self.core.elastic.config().rechain || self.dags.entries.iter().flatten().all(|e| e.compact.is_none()) {
            return;
        }
        // Per chain: the DAGs whose forms use it (a chain shared with another DAG cannot move).
        let mut users = vec![0u32; self.chains.len()];
        for e in self.dags.entries.iter().flatten() {
            for c in e.planned_chains.iter().chain(e.compact.as_ref().map(|(_, c)| c)) {
                users[c.index()] += 1;
            }
        }
        let mut views = Vec::new();
        for (i, e) in self.dags.entries.iter().enumerate() {
            let Some(e) = e else { continue };
            if e.compact.is_none() {
                continue;
            }
            let chains = e.chains(e.form);
            let ready = e.switch.is_none()
                && chains.iter().chain(&e.chains(other(e.form))).all(|&c| self.sched.instances_of(c).len() <= 1 && users[c.index()] == 1);
            views.push(DagView {
                dag: DagUid(i as u32),
                form: e.form,
                planned_chains: e.planned_chains.len(),
                compact_load: chains.iter().map(|c| self.core.elastic.smoothed_load(*c)).sum(),
                ready,
            });
        }
        if let Some(s) = self.core.elastic.rechain(now, &views) {
            self.begin_switch(s.dag, s.to, now);
        }
    }
}

fn other(f: Form) -> Form {
    match f {
        Form::Planned => Form::Compact,
        Form::Compact => Form::Planned,
    }
}
