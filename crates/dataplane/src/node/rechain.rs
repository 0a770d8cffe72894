//! The node's side of its DAG table ([`snic_core::dags`]: the route each DAG's arrivals take,
//! and a switch of route held until the old one is empty) and of rechaining (which form a DAG
//! runs as: [`snic_core::rechain`], inside the node's [`snic_core::elastic::Elasticity`]).
//!
//! The table decides; this module applies what it returns: packets held and released onto a
//! route in order, a switch's NT state moved from the old form's chains into the new form's
//! (a NAT keeps its mappings, a firewall its flows) and the new chains launched, a compact
//! form's chain taken away, and the events logged.

use super::{Backend, Drop, Node};
use snic_core::dag::DagRoute;
pub use snic_core::dags::CompactError;
use snic_core::dags::DagAct;
use snic_core::ids::{ChainId, DagUid};
use snic_core::rechain::Form;
use snic_core::sched::Reject;
use snic_core::time::Instant;
use snic_nt::NtSpec;

/// A switch not drained after this many MONITOR_PERIODs (and at least 100 ms) is abandoned.
pub use snic_core::elastic::SWITCH_TIMEOUT_PERIODS;

impl<B: Backend> Node<B> {
    /// Installs the route of a DAG (its planned form). Replacing a route with a different one
    /// puts the DAG back on its planned form and forgets its compact form; packets already on
    /// the old route finish it (it leaves once they have), and arrivals wait until they have.
    pub fn set_dag(&mut self, uid: DagUid, route: DagRoute) {
        // What its stateful NTs claim of return traffic, in a pool behind a switch.
        let claims = route.steps().iter().flat_map(|s| self.elastic.specs(s.chain)).filter_map(NtSpec::claim).collect();
        self.core.set_claims(uid, claims);
        let (now, store, mut acts) = (self.clock.now(), &self.store, std::mem::take(&mut self.dag_acts));
        self.core.set_dag(uid, route, now, |r| store.in_route(r) as usize, &mut acts);
        self.apply_dag_acts(acts, now);
    }

    /// Removes a DAG; its packets already on a route finish it, those held by a switch are
    /// dropped. Its compact form's chain goes too.
    pub fn remove_dag(&mut self, uid: DagUid) {
        self.core.set_claims(uid, Vec::new());
        let mut acts = std::mem::take(&mut self.dag_acts);
        self.core.remove_dag(uid, &mut acts);
        self.apply_dag_acts(acts, self.clock.now());
    }

    /// Gives DAG `uid` a compact form: one chain of `specs`, which must be its planned chains'
    /// NTs in route order (each planned chain once). The node may then switch the DAG between
    /// its forms at run time (with elasticity on). Idempotent for the same specs.
    pub fn set_compact_form(&mut self, uid: DagUid, specs: Vec<NtSpec>, names: &[String]) -> Result<ChainId, CompactError> {
        let elastic = &self.elastic;
        if let Some(c) = self.core.check_compact(uid, specs.len(), |c| elastic.specs(c) == specs)? {
            return Ok(c);
        }
        let mut acts = std::mem::take(&mut self.dag_acts);
        self.core.forget_compact(uid, &mut acts);
        self.apply_dag_acts(acts, self.clock.now());
        let n = specs.len();
        let chain = self.add_chain(specs);
        self.label_chain(chain, names);
        self.core.set_compact(uid, chain, n);
        Ok(chain)
    }

    /// Starts switching DAG `uid` to `to` (the policy does this by itself; operators and tests
    /// may too). False if the node has no elasticity (regions as a pool), the DAG has no such
    /// form, already runs it, or is switching.
    pub fn switch_form(&mut self, uid: DagUid, to: Form) -> bool {
        let now = self.clock.now();
        let started = self.begin_switch(uid, to, now);
        if started {
            self.core.switched(now);
        }
        started
    }

    fn begin_switch(&mut self, uid: DagUid, to: Form, now: Instant) -> bool {
        // Chains come and go only with elasticity on (regions as a pool).
        if !self.core.elastic().on() {
            return false;
        }
        let mut acts = std::mem::take(&mut self.dag_acts);
        let started = self.core.begin_switch(uid, to, now, &mut acts);
        self.apply_dag_acts(acts, now);
        if started {
            self.advance_switches(now);
        }
        started
    }

    /// A packet of a switching DAG arrived (or of an unknown DAG: dropped).
    #[cold]
    #[inline(never)]
    pub(super) fn hold(&mut self, idx: u32, uid: DagUid) {
        if let Err((idx, why)) = self.core.hold_arrival(uid, idx, self.cfg.core.sched.max_queue_per_tenant) {
            self.drop_held(idx, Drop::Sched(why));
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

    /// Each poll while a DAG switches: the table completes switches whose old route has
    /// emptied and abandons those past their time.
    pub(super) fn advance_switches(&mut self, now: Instant) {
        let timeout = self.core.elastic().switch_timeout();
        let store = &self.store;
        let mut acts = std::mem::take(&mut self.dag_acts);
        self.core.advance_switches(now, timeout, |r| store.in_route(r) as usize, &mut acts);
        self.apply_dag_acts(acts, now);
    }

    /// Does what the DAG table asked, in order.
    fn apply_dag_acts(&mut self, mut acts: Vec<DagAct<u32>>, now: Instant) {
        for act in acts.drain(..) {
            match act {
                DagAct::RemoveChain(c) => self.remove_chain(c),
                DagAct::Release { route, held } => {
                    for idx in held {
                        self.enter_route(idx, route, now);
                    }
                }
                DagAct::DropHeld(held) => {
                    for idx in held {
                        self.drop_held(idx, Drop::Sched(Reject::UnknownDag));
                    }
                }
                // (The core recorded them.)
                DagAct::Started { .. } | DagAct::Abandoned { .. } => {}
                DagAct::Switched { from, into, .. } => self.move_form(&from, &into),
            }
        }
        // (Empty now: kept for its capacity.)
        self.dag_acts = acts;
    }

    /// A switch's old form has drained: its chains stop, their NTs' state moves (in route
    /// order) into the new form's chains, and those launch now, side by side, into the regions
    /// just freed (what finds none launches on demand).
    fn move_form(&mut self, from: &[ChainId], into: &[ChainId]) {
        for &c in from {
            self.stop_chain(c);
        }
        self.regions().move_form(from, into);
        for &c in into {
            let _ = self.prelaunch(c);
        }
    }

    /// One epoch of the policy ([`snic_core::node::NodeCore::rechain_epoch`]): the switch it
    /// wants begins.
    pub(super) fn rechain_epoch(&mut self, now: Instant) {
        if let Some(s) = self.core.rechain_epoch(now) {
            self.begin_switch(s.dag, s.to, now);
        }
    }
}
