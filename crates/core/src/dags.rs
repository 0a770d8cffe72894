//! A node's DAG table: every deployed DAG's routes, the one its arrivals take now, and a
//! change of route under way — a run-time switch between the DAG's chain candidates (which
//! one, and when: [`crate::rechain`]), or the control plane replacing its route.
//!
//! Every deployed DAG has a *planned* route (the planner's chains); a DAG given a *compact*
//! form ([`DagTable::set_compact`]) can also run as one chain holding all its NTs. Each form
//! has its own node-internal route UID (the scheduler's [`DagUid`] for that form), so a packet
//! always finishes the route it entered on. A switch:
//!
//! 1. **holds** the DAG's arriving packets (in order, bounded) instead of entering them;
//! 2. waits until no packet is left on the old route (the driver counts buffers per route);
//! 3. says [`DagAct::Switched`]: the driver stops the old form's chains and moves their NTs'
//!    state into the new form's chains (concatenated into the compact chain, or split back into
//!    the planned ones), and launches the new form's chains;
//! 4. releases the held packets, in order, onto the new route ([`DagAct::Release`]).
//!
//! Nothing is reordered within a flow, since no packet of the new route runs before the old
//! route is empty. A switch that does not drain within the switch timeout (the elasticity
//! policy's, [`crate::elastic::Elasticity::switch_timeout`]) is abandoned: the held packets go
//! on along the old route, still in order.
//!
//! The control plane replacing a DAG's planned route ([`DagTable::set_dag`]) is handled alike:
//! the new route gets a new internal UID, arrivals are held while packets remain on the old
//! one, then enter the new one in order (past the timeout they go anyway: the old route is no
//! longer the DAG's). Replaced and removed routes leave the scheduler once no packet is on them
//! ([`DagTable::free_routes`]), and their UIDs are reused.
//!
//! Sans-IO: the driver tells it how many packets are on a route (`in_route`) and which chains
//! have a launch under way; it changes the scheduler's routes and returns [`DagAct`]s for what
//! only the driver can do (packets, regions, NT state, the event log).

use crate::dag::{DagRoute, NtMask, Step};
use crate::ids::{ChainId, DagUid};
use crate::rechain::{DagView, Form};
use crate::sched::{Reject, Scheduler};
use crate::time::Instant;
use core::time::Duration;
use std::collections::VecDeque;

/// `live` value of a UID that is not deployed.
const NONE: u32 = u32::MAX;
/// `live` flag: the DAG is switching; its arrivals are held.
const HOLD: u32 = 1 << 31;

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

/// What the driver must do after a change to the table. Apply them in order.
#[derive(Debug, PartialEq)]
pub enum DagAct<T> {
    /// A compact form's chain is no longer one of its DAG's forms: take the chain away.
    RemoveChain(ChainId),
    /// Enter these held packets, in order, on internal route `route` at its first step.
    Release {
        /// The internal route UID.
        route: u32,
        /// The packets, oldest first.
        held: VecDeque<T>,
    },
    /// Drop these held packets: their DAG was removed.
    DropHeld(VecDeque<T>),
    /// A switch between forms started.
    Started {
        /// The DAG.
        dag: DagUid,
        /// The form it switches to.
        to: Form,
        /// The first chain of that form (the event's chain).
        first: ChainId,
    },
    /// The old form's route has emptied: stop the chains of `from`, move their NTs' state, in
    /// route order, into the chains of `into`, and launch those. A [`DagAct::Release`] of the
    /// held packets onto the new route follows.
    Switched {
        /// The DAG.
        dag: DagUid,
        /// The form it runs as now.
        to: Form,
        /// The old form's chains, in route order.
        from: Vec<ChainId>,
        /// The new form's chains, in route order.
        into: Vec<ChainId>,
        /// Since the switch started.
        took: Duration,
    },
    /// A switch did not drain in time and was given up; a [`DagAct::Release`] of the held
    /// packets onto the old route follows.
    Abandoned {
        /// The DAG.
        dag: DagUid,
        /// The first chain of the form it stays in.
        first: ChainId,
        /// Since the switch started.
        took: Duration,
    },
}

/// The table. See the module docs. `T` is what the driver holds a packet by.
#[derive(Debug)]
pub struct DagTable<T> {
    /// By the DAG's UID (the MAT's): the internal route UID its arrivals take, `HOLD` set while
    /// it switches, `NONE` if not deployed.
    live: Vec<u32>,
    entries: Vec<Option<Entry<T>>>,
    next: u32,
    /// Internal route UIDs replaced or removed, still in the scheduler while packets run them.
    retired: Vec<u32>,
    /// Internal route UIDs free for reuse.
    free: Vec<u32>,
    /// DAGs switching now.
    switching: usize,
}

#[derive(Debug)]
struct Entry<T> {
    planned: u32,
    /// The planned route's chains, each once, in route order.
    planned_chains: Vec<ChainId>,
    compact: Option<(u32, ChainId)>,
    form: Form,
    switch: Option<Switching<T>>,
}

#[derive(Debug)]
struct Switching<T> {
    from: u32,
    /// The form it switches to; `None`: its planned route was replaced (a control-plane
    /// change), arrivals wait until the old route is empty, then take the new one.
    to: Option<Form>,
    held: VecDeque<T>,
    since: Instant,
}

impl<T> Entry<T> {
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

fn distinct_chains(route: &DagRoute) -> Vec<ChainId> {
    let mut out: Vec<ChainId> = Vec::new();
    for s in route.steps() {
        if !out.contains(&s.chain) {
            out.push(s.chain);
        }
    }
    out
}

fn other(f: Form) -> Form {
    match f {
        Form::Planned => Form::Compact,
        Form::Compact => Form::Planned,
    }
}

impl<T> Default for DagTable<T> {
    fn default() -> Self {
        DagTable { live: Vec::new(), entries: Vec::new(), next: 0, retired: Vec::new(), free: Vec::new(), switching: 0 }
    }
}

impl<T: Copy> DagTable<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The internal route DAG `uid`'s arrivals enter now; `None` while it switches (or is
    /// unknown): give the packet to [`DagTable::hold`].
    #[inline]
    pub fn arriving(&self, uid: DagUid) -> Option<u32> {
        let r = self.live.get(uid.0 as usize).copied().unwrap_or(NONE);
        (r & HOLD == 0).then_some(r)
    }

    /// The DAGs and the internal routes their arrivals enter now (those not switching).
    pub fn arrivals(&self) -> impl Iterator<Item = (DagUid, u32)> + '_ {
        self.live.iter().enumerate().filter(|(_, &r)| r & HOLD == 0).map(|(i, &r)| (DagUid(i as u32), r))
    }

    /// The DAG whose arrivals enter internal route `route` now (the reverse of
    /// [`DagTable::arriving`]; not per packet).
    pub fn uid_arriving_as(&self, route: u32) -> Option<DagUid> {
        self.live.iter().position(|&r| r == route).map(|i| DagUid(i as u32))
    }

    /// Holds an arrival of a switching DAG, up to `cap` packets; gives it back with the reason
    /// when it must be dropped (too many held, or no such DAG).
    pub fn hold(&mut self, uid: DagUid, item: T, cap: usize) -> Result<(), (T, Reject)> {
        match self.entry(uid).and_then(|e| e.switch.as_mut()).map(|s| &mut s.held) {
            Some(h) if h.len() < cap => {
                h.push_back(item);
                Ok(())
            }
            Some(_) => Err((item, Reject::QueueFull)),
            None => Err((item, Reject::UnknownDag)),
        }
    }

    /// True while some DAG switches (the driver then calls [`DagTable::advance`] each poll).
    #[inline]
    pub fn switching(&self) -> bool {
        self.switching > 0
    }

    /// True while replaced or removed routes wait for their packets to leave.
    pub fn retiring(&self) -> bool {
        !self.retired.is_empty()
    }

    /// The form DAG `uid` runs as (while switching: the one it is leaving).
    pub fn form(&self, uid: DagUid) -> Option<Form> {
        self.get(uid).map(|e| e.form)
    }

    /// True while DAG `uid` is switching forms (or waiting for its replaced route to empty).
    pub fn is_switching(&self, uid: DagUid) -> bool {
        self.get(uid).is_some_and(|e| e.switch.is_some())
    }

    /// True if some DAG has a compact form (else the rechaining policy has nothing to do).
    pub fn any_compact(&self) -> bool {
        self.entries.iter().flatten().any(|e| e.compact.is_some())
    }

    fn get(&self, uid: DagUid) -> Option<&Entry<T>> {
        self.entries.get(uid.0 as usize).and_then(Option::as_ref)
    }

    fn entry(&mut self, uid: DagUid) -> Option<&mut Entry<T>> {
        self.entries.get_mut(uid.0 as usize).and_then(Option::as_mut)
    }

    fn set_live(&mut self, uid: DagUid, v: u32) {
        let i = uid.0 as usize;
        if self.live.len() <= i {
            self.live.resize(i + 1, NONE);
            self.entries.resize_with(i + 1, || None);
        }
        self.live[i] = v;
    }

    fn alloc(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    fn start_hold(&mut self, uid: DagUid, from: u32, to: Option<Form>, now: Instant) {
        if let Some(e) = self.entry(uid) {
            e.switch = Some(Switching { from, to, held: VecDeque::new(), since: now });
            self.switching += 1;
            self.set_live(uid, HOLD | from);
        }
    }

    /// Installs the route of a DAG (its planned form) in `sched`. Replacing a route with a
    /// different one puts the DAG back on its planned form and forgets its compact form;
    /// packets already on the old route finish it, and arrivals are held until they have
    /// (`in_route(r)`: packets on internal route `r`).
    pub fn set_dag(
        &mut self,
        sched: &mut Scheduler<T>,
        uid: DagUid,
        route: DagRoute,
        now: Instant,
        in_route: impl Fn(u32) -> usize,
        acts: &mut Vec<DagAct<T>>,
    ) {
        if self.get(uid).is_some_and(|e| sched.route(DagUid(e.planned)) == Some(&route)) {
            return;
        }
        let chains = distinct_chains(&route);
        let internal = self.alloc();
        sched.set_dag(DagUid(internal), route);
        let replaced = match self.entries.get_mut(uid.0 as usize).and_then(Option::as_mut) {
            Some(e) => {
                // The route its arrivals took (its compact one, if it ran that form): the
                // packets to wait for.
                let live = e.live();
                self.retired.push(std::mem::replace(&mut e.planned, internal));
                Some(live)
            }
            None => {
                self.set_live(uid, internal);
                self.entries[uid.0 as usize] =
                    Some(Entry { planned: internal, planned_chains: Vec::new(), compact: None, form: Form::Planned, switch: None });
                None
            }
        };
        self.forget_compact(uid, acts);
        if let Some(e) = self.entry(uid) {
            e.planned_chains = chains;
        }
        if let Some(old) = replaced.filter(|&r| in_route(r) > 0) {
            self.start_hold(uid, old, None, now);
        }
    }

    /// Installs a route that no MAT rule leads to (a DAG this node hosts for a peer, whose
    /// packets name it themselves); its internal UID.
    pub fn add_hosted(&mut self, sched: &mut Scheduler<T>, route: DagRoute) -> u32 {
        let internal = self.alloc();
        sched.set_dag(DagUid(internal), route);
        internal
    }

    /// Removes a hosted route: it leaves the scheduler once its packets have finished it.
    pub fn remove_hosted(&mut self, internal: u32) {
        if !self.retired.contains(&internal) {
            self.retired.push(internal);
        }
    }

    /// Removes a DAG; its packets already on a route finish it, those held by a switch are
    /// dropped, and its compact form's chain goes too.
    pub fn remove_dag(&mut self, uid: DagUid, acts: &mut Vec<DagAct<T>>) {
        let Some(e) = self.entries.get_mut(uid.0 as usize).and_then(Option::take) else { return };
        self.live[uid.0 as usize] = NONE;
        self.retired.push(e.planned);
        if let Some((r, c)) = e.compact {
            self.retired.push(r);
            acts.push(DagAct::RemoveChain(c));
        }
        if let Some(s) = e.switch {
            self.switching -= 1;
            acts.push(DagAct::DropHeld(s.held));
        }
    }

    /// Checks a compact form of `nts` NTs for DAG `uid`: it must hold its planned chains' NTs
    /// (`chain_len`: a chain's NTs). `Ok(Some(c))`: the DAG has that form already, as chain `c`
    /// (`same(c)`: the chain has the specs given); `Ok(None)`: declare the chain, then
    /// [`DagTable::set_compact`].
    pub fn check_compact(
        &self,
        uid: DagUid,
        nts: usize,
        chain_len: impl Fn(ChainId) -> usize,
        same: impl Fn(ChainId) -> bool,
    ) -> Result<Option<ChainId>, CompactError> {
        let e = self.get(uid).ok_or(CompactError::UnknownDag(uid.0))?;
        if let Some((_, c)) = e.compact.filter(|&(_, c)| same(c)) {
            return Ok(Some(c));
        }
        if e.planned_chains.len() < 2 {
            return Err(CompactError::OneChain(e.planned_chains.len()));
        }
        let want: usize = e.planned_chains.iter().map(|&c| chain_len(c)).sum();
        if nts != want || want > 64 {
            return Err(CompactError::NtCount { got: nts, want });
        }
        Ok(None)
    }

    /// Gives DAG `uid` its compact form: `chain`, of `nts` NTs (checked by
    /// [`DagTable::check_compact`]; call [`DagTable::forget_compact`] before declaring it).
    pub fn set_compact(&mut self, sched: &mut Scheduler<T>, uid: DagUid, chain: ChainId, nts: usize) {
        if self.get(uid).is_none() {
            return;
        }
        let internal = self.alloc();
        sched.set_dag(DagUid(internal), DagRoute::new(vec![Step { chain, mask: NtMask::all(nts) }]));
        if let Some(e) = self.entry(uid) {
            e.compact = Some((internal, chain));
        }
    }

    /// The DAG's compact form goes away: back to the planned route at once (a control-plane
    /// change; packets held by a switch go on along the planned route).
    pub fn forget_compact(&mut self, uid: DagUid, acts: &mut Vec<DagAct<T>>) {
        let Some(e) = self.entry(uid) else { return };
        let planned = e.planned;
        let held = e.switch.take().map(|s| s.held);
        e.form = Form::Planned;
        let compact = e.compact.take();
        if let Some((r, c)) = compact {
            self.retired.push(r);
            acts.push(DagAct::RemoveChain(c));
        }
        self.set_live(uid, planned);
        if let Some(held) = held {
            self.switching -= 1;
            acts.push(DagAct::Release { route: planned, held });
        }
    }

    /// Starts switching DAG `uid` to `to`; false if it has no such form, already runs it, or is
    /// switching. Follow with [`DagTable::advance`] (the old route may be empty already).
    pub fn begin_switch(&mut self, uid: DagUid, to: Form, now: Instant, acts: &mut Vec<DagAct<T>>) -> bool {
        let Some(e) = self.get(uid) else { return false };
        let Some((_, compact_chain)) = e.compact else { return false };
        if e.form == to || e.switch.is_some() {
            return false;
        }
        let from = e.live();
        let first = if to == Form::Compact { compact_chain } else { e.planned_chains.first().copied().unwrap_or(compact_chain) };
        self.start_hold(uid, from, Some(to), now);
        acts.push(DagAct::Started { dag: uid, to, first });
        true
    }

    /// Each poll while a DAG switches: switches whose old route has emptied complete, those
    /// past `timeout` are abandoned. `in_route(r)`: packets on internal route `r`;
    /// `launching(c)`: a launch of chain `c` (or one evicting its instance) is under way — its
    /// NTs' state is in hand only once that is done.
    pub fn advance(
        &mut self,
        now: Instant,
        timeout: Duration,
        in_route: impl Fn(u32) -> usize,
        launching: impl Fn(ChainId) -> bool,
        acts: &mut Vec<DagAct<T>>,
    ) {
        for i in 0..self.entries.len() {
            let Some(Some(e)) = self.entries.get(i) else { continue };
            let Some(s) = &e.switch else { continue };
            let uid = DagUid(i as u32);
            let (empty, late) = (in_route(s.from) == 0, now.saturating_since(s.since) >= timeout);
            match s.to {
                // A replaced route: past the time, the held packets go on anyway (the old
                // route is gone from the DAG; waiting longer only grows their delay).
                None if empty || late => self.finish_replace(uid, acts),
                None => {}
                Some(_) if empty && !e.chains(e.form).iter().any(|&c| launching(c)) => self.finish_switch(uid, now, acts),
                Some(_) if late => self.abandon(uid, now, acts),
                Some(_) => {}
            }
        }
    }

    /// The replaced route has emptied: held arrivals take the new one, in order.
    fn finish_replace(&mut self, uid: DagUid, acts: &mut Vec<DagAct<T>>) {
        let Some(e) = self.entry(uid) else { return };
        let Some(s) = e.switch.take() else { return };
        let to = e.planned;
        self.switching -= 1;
        self.set_live(uid, to);
        acts.push(DagAct::Release { route: to, held: s.held });
    }

    fn abandon(&mut self, uid: DagUid, now: Instant, acts: &mut Vec<DagAct<T>>) {
        let Some(e) = self.entry(uid) else { return };
        let Some(s) = e.switch.take() else { return };
        let first = e.chains(e.form).first().copied().unwrap_or(ChainId(0));
        self.switching -= 1;
        self.set_live(uid, s.from);
        acts.push(DagAct::Abandoned { dag: uid, first, took: now.saturating_since(s.since) });
        acts.push(DagAct::Release { route: s.from, held: s.held });
    }

    fn finish_switch(&mut self, uid: DagUid, now: Instant, acts: &mut Vec<DagAct<T>>) {
        let Some(e) = self.entry(uid) else { return };
        let Some(s) = e.switch.take() else { return };
        let Some(to) = s.to else { return };
        let (from, into) = (e.chains(e.form), e.chains(to));
        e.form = to;
        let route = e.live();
        self.switching -= 1;
        self.set_live(uid, route);
        acts.push(DagAct::Switched { dag: uid, to, from, into, took: now.saturating_since(s.since) });
        acts.push(DagAct::Release { route, held: s.held });
    }

    /// Replaced and removed routes with no packet left (`in_route`) leave the scheduler; their
    /// UIDs are reused.
    pub fn free_routes(&mut self, sched: &mut Scheduler<T>, in_route: impl Fn(u32) -> usize) {
        let mut i = 0;
        while i < self.retired.len() {
            let r = self.retired[i];
            if in_route(r) == 0 {
                sched.remove_dag(DagUid(r));
                self.free.push(self.retired.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }

    /// The DAGs that have a compact form, as the rechaining policy sees them: `load(c)` is
    /// chain `c`'s smoothed load, in instances' worth. A DAG can switch only while no switch is
    /// under way and each chain of both forms runs at most one instance and serves this DAG
    /// alone (a chain shared with another DAG cannot move, nor can several NT states become
    /// one).
    pub fn views(&self, sched: &Scheduler<T>, chains: usize, load: impl Fn(ChainId) -> f64, out: &mut Vec<DagView>) {
        out.clear();
        let mut users = vec![0u32; chains];
        for e in self.entries.iter().flatten() {
            for c in e.planned_chains.iter().chain(e.compact.as_ref().map(|(_, c)| c)) {
                if let Some(u) = users.get_mut(c.index()) {
                    *u += 1;
                }
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            let Some(e) = e.as_ref().filter(|e| e.compact.is_some()) else { continue };
            let now = e.chains(e.form);
            let ready = e.switch.is_none()
                && now
                    .iter()
                    .chain(&e.chains(other(e.form)))
                    .all(|&c| sched.instances_of(c).len() <= 1 && users.get(c.index()) == Some(&1));
            out.push(DagView {
                dag: DagUid(i as u32),
                form: e.form,
                planned_chains: e.planned_chains.len(),
                compact_load: now.iter().map(|&c| load(c)).sum(),
                ready,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::SchedConfig;
    use std::cell::Cell;

    fn route(chains: &[u16]) -> DagRoute {
        DagRoute::new(chains.iter().map(|&c| Step { chain: ChainId(c), mask: NtMask::all(1) }).collect())
    }

    fn setup() -> (DagTable<u32>, Scheduler<u32>) {
        let mut s = Scheduler::new(SchedConfig::plain());
        for _ in 0..3 {
            s.add_chain(1);
        }
        s.add_chain(2);
        (DagTable::new(), s)
    }

    #[test]
    fn a_switch_holds_arrivals_until_the_old_route_is_empty_then_moves_state_and_releases_them_in_order() {
        let (mut t, mut s) = setup();
        let mut acts = Vec::new();
        let dag = DagUid(5);
        t.set_dag(&mut s, dag, route(&[0, 1]), Instant::ZERO, |_| 0, &mut acts);
        let planned = t.arriving(dag).expect("deployed");
        assert_eq!(t.check_compact(dag, 3, |c| s.chain_len(c), |_| false), Err(CompactError::NtCount { got: 3, want: 2 }));
        assert_eq!(t.check_compact(dag, 2, |c| s.chain_len(c), |_| false), Ok(None));
        t.set_compact(&mut s, dag, ChainId(3), 2);
        assert!(acts.is_empty());

        let on_old = Cell::new(2usize);
        let in_route = |r: u32| if r == planned { on_old.get() } else { 0 };
        assert!(t.begin_switch(dag, Form::Compact, Instant::ZERO, &mut acts));
        assert_eq!(acts.pop(), Some(DagAct::Started { dag, to: Form::Compact, first: ChainId(3) }));
        assert!(!t.begin_switch(dag, Form::Compact, Instant::ZERO, &mut acts), "one switch at a time");
        assert_eq!(t.arriving(dag), None);
        for p in 10..13 {
            t.hold(dag, p, 3).unwrap();
        }
        assert_eq!(t.hold(dag, 13, 3), Err((13, Reject::QueueFull)), "the hold is bounded");

        let period = Duration::from_millis(100);
        t.advance(Instant::from_nanos(1_000), period, in_route, |_| false, &mut acts);
        assert!(acts.is_empty() && t.is_switching(dag), "packets remain on the old route");
        on_old.set(0);
        t.advance(Instant::from_nanos(2_000), period, in_route, |c| c == ChainId(1), &mut acts);
        assert!(acts.is_empty(), "an old chain's launch must finish before its state can move");
        t.advance(Instant::from_nanos(3_000), period, in_route, |_| false, &mut acts);
        let compact = t.arriving(dag).expect("switched");
        assert_ne!(compact, planned);
        assert_eq!(
            acts,
            vec![
                DagAct::Switched {
                    dag,
                    to: Form::Compact,
                    from: vec![ChainId(0), ChainId(1)],
                    into: vec![ChainId(3)],
                    took: Duration::from_nanos(3_000)
                },
                DagAct::Release { route: compact, held: VecDeque::from(vec![10, 11, 12]) },
            ]
        );
        assert_eq!((t.form(dag), t.switching()), (Some(Form::Compact), false));
    }

    #[test]
    fn a_switch_that_does_not_drain_is_abandoned_and_its_packets_take_the_old_route() {
        let (mut t, mut s) = setup();
        let mut acts = Vec::new();
        let dag = DagUid(0);
        t.set_dag(&mut s, dag, route(&[0, 1]), Instant::ZERO, |_| 0, &mut acts);
        t.set_compact(&mut s, dag, ChainId(3), 2);
        let planned = t.arriving(dag).unwrap();
        t.begin_switch(dag, Form::Compact, Instant::ZERO, &mut acts);
        t.hold(dag, 7, 8).unwrap();
        acts.clear();
        let timeout = Duration::from_millis(100);
        t.advance(Instant::ZERO + timeout, timeout, |_| 1, |_| false, &mut acts);
        assert_eq!(
            acts,
            vec![
                DagAct::Abandoned { dag, first: ChainId(0), took: timeout },
                DagAct::Release { route: planned, held: VecDeque::from(vec![7]) }
            ]
        );
        assert_eq!((t.arriving(dag), t.form(dag)), (Some(planned), Some(Form::Planned)));
    }

    #[test]
    fn a_replaced_route_holds_arrivals_while_the_old_one_has_packets_and_frees_it_after() {
        let (mut t, mut s) = setup();
        let mut acts = Vec::new();
        let dag = DagUid(1);
        t.set_dag(&mut s, dag, route(&[0]), Instant::ZERO, |_| 0, &mut acts);
        let old = t.arriving(dag).unwrap();
        t.set_dag(&mut s, dag, route(&[0]), Instant::ZERO, |_| 1, &mut acts);
        assert_eq!(t.arriving(dag), Some(old), "the same route again changes nothing");
        t.set_dag(&mut s, dag, route(&[2]), Instant::ZERO, |r| usize::from(r == old), &mut acts);
        assert_eq!(t.arriving(dag), None, "held while the old route has a packet");
        t.hold(dag, 1, 8).unwrap();
        t.free_routes(&mut s, |r| usize::from(r == old));
        assert!(s.route(DagUid(old)).is_some() && t.retiring(), "a route leaves only once empty");
        t.advance(Instant::ZERO, Duration::from_secs(1), |_| 0, |_| false, &mut acts);
        let new = t.arriving(dag).unwrap();
        assert_eq!(acts, vec![DagAct::Release { route: new, held: VecDeque::from(vec![1]) }]);
        t.free_routes(&mut s, |_| 0);
        assert!(s.route(DagUid(old)).is_none() && !t.retiring());
        // Its UID is reused by the next route.
        t.set_dag(&mut s, DagUid(2), route(&[1]), Instant::ZERO, |_| 0, &mut acts);
        assert_eq!(t.arriving(DagUid(2)), Some(old));
    }

    #[test]
    fn removing_a_dag_drops_what_it_held_and_takes_its_compact_chain_away() {
        let (mut t, mut s) = setup();
        let mut acts = Vec::new();
        let dag = DagUid(0);
        t.set_dag(&mut s, dag, route(&[0, 1]), Instant::ZERO, |_| 0, &mut acts);
        t.set_compact(&mut s, dag, ChainId(3), 2);
        assert_eq!(t.check_compact(dag, 2, |c| s.chain_len(c), |c| c == ChainId(3)), Ok(Some(ChainId(3))));
        t.begin_switch(dag, Form::Compact, Instant::ZERO, &mut acts);
        t.hold(dag, 9, 8).unwrap();
        acts.clear();
        t.remove_dag(dag, &mut acts);
        assert_eq!(acts, vec![DagAct::RemoveChain(ChainId(3)), DagAct::DropHeld(VecDeque::from(vec![9]))]);
        assert_eq!((t.arriving(dag), t.switching()), (None, false));
        assert_eq!(t.hold(dag, 4, 8), Err((4, Reject::UnknownDag)));
    }

    #[test]
    fn a_dag_sharing_a_chain_with_another_is_not_ready_to_switch() {
        let (mut t, mut s) = setup();
        let mut acts = Vec::new();
        t.set_dag(&mut s, DagUid(0), route(&[0, 1]), Instant::ZERO, |_| 0, &mut acts);
        t.set_compact(&mut s, DagUid(0), ChainId(3), 2);
        let mut views = Vec::new();
        t.views(&s, 4, |_| 0.25, &mut views);
        assert_eq!(views.len(), 1);
        assert!(views[0].ready && (views[0].compact_load - 0.5).abs() < 1e-9, "{views:?}");
        t.set_dag(&mut s, DagUid(1), route(&[1, 2]), Instant::ZERO, |_| 0, &mut acts);
        t.views(&s, 4, |_| 0.25, &mut views);
        assert!(!views[0].ready, "chain 1 serves two DAGs");
    }
}
