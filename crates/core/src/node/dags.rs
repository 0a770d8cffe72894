//! The node's DAG table ([`crate::dags::DagTable`]: the route each DAG's arrivals take, a switch
//! of route held until the old one is empty, compact forms, routes hosted for peers) as part of
//! its core. The table installs routes in the core's scheduler; the driver reads it through
//! [`NodeCore::dags`], changes it through these verbs and carries out the [`DagAct`]s they
//! return (packets released onto a route, NT state moved between forms, chains taken away).

use super::NodeCore;
use crate::dag::DagRoute;
use crate::dags::{CompactError, DagAct, DagTable};
use crate::events::EventKind;
use crate::ids::{ChainId, DagUid};
use crate::rechain::{Form, Switch};
use crate::sched::Reject;
use crate::time::Instant;
use core::time::Duration;

impl NodeCore {
    /// The DAG table, read-only.
    pub fn dags(&self) -> &DagTable<u32> {
        &self.dags
    }

    /// Installs the route of DAG `uid` (its planned form); see [`DagTable::set_dag`].
    /// `in_route(r)`: packets on internal route `r`.
    pub fn set_dag(&mut self, uid: DagUid, route: DagRoute, now: Instant, in_route: impl Fn(u32) -> usize, acts: &mut Vec<DagAct<u32>>) {
        self.dags.set_dag(&mut self.sched, uid, route, now, in_route, acts);
    }

    /// Removes DAG `uid` ([`DagTable::remove_dag`]).
    pub fn remove_dag(&mut self, uid: DagUid, acts: &mut Vec<DagAct<u32>>) {
        self.dags.remove_dag(uid, acts);
    }

    /// Checks a compact form of `nts` NTs for DAG `uid` ([`DagTable::check_compact`]; `same(c)`:
    /// chain `c` has the specs given).
    pub fn check_compact(&self, uid: DagUid, nts: usize, same: impl Fn(ChainId) -> bool) -> Result<Option<ChainId>, CompactError> {
        self.dags.check_compact(uid, nts, |c| self.sched.chain_len(c), same)
    }

    /// DAG `uid` forgets its compact form ([`DagTable::forget_compact`]).
    pub fn forget_compact(&mut self, uid: DagUid, acts: &mut Vec<DagAct<u32>>) {
        self.dags.forget_compact(uid, acts);
    }

    /// DAG `uid`'s compact form is chain `chain` of `nts` NTs ([`DagTable::set_compact`]).
    pub fn set_compact(&mut self, uid: DagUid, chain: ChainId, nts: usize) {
        self.dags.set_compact(&mut self.sched, uid, chain, nts);
    }

    /// Starts switching DAG `uid` to form `to` ([`DagTable::begin_switch`]).
    /// Recorded as [`EventKind::Rechain`].
    pub fn begin_switch(&mut self, uid: DagUid, to: Form, now: Instant, acts: &mut Vec<DagAct<u32>>) -> bool {
        let from = acts.len();
        let started = self.dags.begin_switch(uid, to, now, acts);
        self.record_dag_acts(now, &acts[from..]);
        started
    }

    /// Holds a packet of a switching DAG ([`DagTable::hold`]; `cap`: most held per DAG).
    pub fn hold_arrival(&mut self, uid: DagUid, item: u32, cap: usize) -> Result<(), (u32, Reject)> {
        self.dags.hold(uid, item, cap)
    }

    /// Each poll while a DAG switches ([`DagTable::advance`]); a switch waits while a launch of
    /// one of its chains (or one evicting its instance) is under way ([`NodeCore::launching`]).
    /// Switches done and abandoned are recorded ([`EventKind::Rechained`],
    /// [`EventKind::RechainAbandoned`]).
    pub fn advance_switches(&mut self, now: Instant, timeout: Duration, in_route: impl Fn(u32) -> usize, acts: &mut Vec<DagAct<u32>>) {
        let (launches, sched, from) = (&self.launches, &self.sched, acts.len());
        self.dags.advance(now, timeout, in_route, |c| launches.launching(sched, c), acts);
        self.record_dag_acts(now, &acts[from..]);
    }

    /// Records the switches among `acts` that began, finished or were abandoned.
    fn record_dag_acts(&mut self, now: Instant, acts: &[DagAct<u32>]) {
        for act in acts {
            match *act {
                DagAct::Started { dag, to, first } => self.record(now, first, None, EventKind::Rechain { dag, to }, 0),
                DagAct::Abandoned { dag, first, took } => {
                    self.record(now, first, None, EventKind::RechainAbandoned { dag }, took.as_nanos() as u64)
                }
                DagAct::Switched { dag, to, ref into, took, .. } => {
                    self.record(now, into[0], None, EventKind::Rechained { dag, to }, took.as_nanos() as u64)
                }
                DagAct::RemoveChain(_) | DagAct::Release { .. } | DagAct::DropHeld(_) => {}
            }
        }
    }

    /// A route hosted for a peer's chain: its internal number ([`DagTable::add_hosted`]).
    pub fn add_hosted(&mut self, route: DagRoute) -> u32 {
        self.dags.add_hosted(&mut self.sched, route)
    }

    /// The hosted route `internal` goes once its packets have ([`DagTable::remove_hosted`]).
    pub fn remove_hosted(&mut self, internal: u32) {
        self.dags.remove_hosted(internal);
    }

    /// Routes whose packets have all finished leave the scheduler ([`DagTable::free_routes`]).
    pub fn free_routes(&mut self, in_route: impl Fn(u32) -> usize) {
        self.dags.free_routes(&mut self.sched, in_route);
    }

    /// One epoch of rechaining (with it on, and DAGs that have a compact form): the switch
    /// the policy wants now, if any, over every DAG's view (its forms' chains and their loads),
    /// which the driver begins ([`NodeCore::begin_switch`]).
    pub fn rechain_epoch(&mut self, now: Instant) -> Option<Switch> {
        if !self.elastic.config().rechain || !self.dags.any_compact() {
            return None;
        }
        let mut views = std::mem::take(&mut self.dag_views);
        let elastic = &self.elastic;
        self.dags.views(&self.sched, self.life.len(), |c| elastic.smoothed_load(c), &mut views);
        let switch = self.rechain(now, &views);
        self.dag_views = views;
        switch
    }
}
