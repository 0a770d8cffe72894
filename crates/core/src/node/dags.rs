//! The node's DAG table ([`crate::dags::DagTable`]: the route each DAG's arrivals take, a switch
//! of route held until the old one is empty, compact forms, routes hosted for peers) as part of
//! its core. The table installs routes in the core's scheduler; the driver reads it through
//! [`NodeCore::dags`], changes it through these verbs and carries out the [`DagAct`]s they
//! return (packets released onto a route, NT state moved between forms, chains taken away).

use super::NodeCore;
use crate::dag::DagRoute;
use crate::dags::{CompactError, DagAct, DagTable};
use crate::ids::{ChainId, DagUid};
use crate::rechain::{DagView, Form};
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
    pub fn begin_switch(&mut self, uid: DagUid, to: Form, now: Instant, acts: &mut Vec<DagAct<u32>>) -> bool {
        self.dags.begin_switch(uid, to, now, acts)
    }

    /// Holds a packet of a switching DAG ([`DagTable::hold`]; `cap`: most held per DAG).
    pub fn hold_arrival(&mut self, uid: DagUid, item: u32, cap: usize) -> Result<(), (u32, Reject)> {
        self.dags.hold(uid, item, cap)
    }

    /// Each poll while a DAG switches ([`DagTable::advance`]); a switch waits while a launch of
    /// one of its chains (or one evicting its instance) is under way ([`NodeCore::launching`]).
    pub fn advance_switches(&mut self, now: Instant, timeout: Duration, in_route: impl Fn(u32) -> usize, acts: &mut Vec<DagAct<u32>>) {
        let (launches, sched) = (&self.launches, &self.sched);
        self.dags.advance(now, timeout, in_route, |c| launches.launching(sched, c), acts);
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

    /// What rechaining sees of the DAGs that have a compact form, each chain's load the
    /// elasticity policy's smoothed one ([`DagTable::views`]).
    pub fn dag_views(&self, chains: usize, out: &mut Vec<DagView>) {
        let elastic = &self.elastic;
        self.dags.views(&self.sched, chains, |c| elastic.smoothed_load(c), out);
    }
}
