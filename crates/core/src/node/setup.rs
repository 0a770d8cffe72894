//! What a node is made of — chains, their instances, tenants — set up and torn down through
//! its core. Each verb keeps the machines that know about the thing in step (the scheduler, the
//! demand model, the elasticity policy), so that no driver does it by hand: three drivers did,
//! each its own way, and the simulators' nodes lacked what the data plane's had.

use super::NodeCore;
use crate::dag::DagRoute;
use crate::elastic::Elasticity;
use crate::events::{ElasticStats, Event, EventKind};
use crate::ids::DagUid;
use crate::ids::{ChainId, InstanceId, TenantId};
use crate::meter::Meter;
use crate::sched::{Change, Scheduler};
use crate::time::Instant;

/// How many instances a chain may run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instances {
    /// As many as its load needs (auto-scaling's call).
    Many,
    /// One at most: an NT of it keeps state that cannot be split between instances (a cache,
    /// a replication log).
    One,
}

impl NodeCore {
    /// The demand model and fairness controller, read-only.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// The packet path's scheduler, read-only.
    pub fn sched(&self) -> &Scheduler<u32> {
        &self.sched
    }

    /// The elasticity policy, read-only.
    pub fn elastic(&self) -> &Elasticity {
        &self.elastic
    }

    /// What happened on the node: counters by kind and the most recent events.
    pub fn events(&self) -> &ElasticStats {
        &self.events
    }

    /// Records what happened to `chain` (in `region`, if one is involved) at `now`; `took_ns`
    /// as [`Event::took_ns`] says. The core records what it decides; the driver what only it
    /// sees happen (a launch running, a region moved).
    pub fn record(&mut self, now: Instant, chain: ChainId, region: Option<usize>, kind: EventKind, took_ns: u64) {
        self.events.record(Event { at_ns: now.as_nanos(), chain, region, kind, took_ns });
    }

    /// A packet of `chain` was sent on unprocessed for its tenant's endpoint at `now` (the
    /// first is also an event).
    pub fn endpoint_packet(&mut self, now: Instant, chain: ChainId) {
        self.events.endpoint_packets += 1;
        if self.events.endpoint_packets == 1 {
            self.record(now, chain, None, EventKind::EndpointFallback, 0);
        }
    }

    /// Declares a chain of NTs of `kinds` (no instance yet): its id, the same in the scheduler,
    /// the demand model and the elasticity policy — that of a chain [`NodeCore::retire_chain`]
    /// took away and that has gone, if the scheduler agrees, else a new one
    /// ([`NodeCore::chain_count`] grows).
    pub fn add_chain(&mut self, kinds: &[&str], instances: Instances) -> ChainId {
        if let Some(id) = self.life.reusable() {
            if self.sched.reuse_chain(id, kinds.len()) {
                // (Its elastic state was forgotten when it was taken away.)
                self.meter.reuse_chain(id, kinds);
                self.elastic.set_single_instance(id, instances == Instances::One);
                self.life.declared(id);
                return id;
            }
        }
        let id = self.sched.add_chain(kinds.len());
        self.meter.add_chain(kinds);
        self.elastic.add_chain(id);
        self.elastic.set_single_instance(id, instances == Instances::One);
        self.life.declared(id);
        id
    }

    /// Chain ids declared so far (live, going away or gone).
    pub fn chain_count(&self) -> usize {
        self.life.len()
    }

    /// True while `chain` is declared and not being taken away.
    #[inline]
    pub fn is_live(&self, chain: ChainId) -> bool {
        self.life.is_live(chain)
    }

    /// Chains declared and not being taken away.
    pub fn live_chains(&self) -> usize {
        self.life.live_count()
    }

    /// True while some chain is going away.
    pub fn chains_retiring(&self) -> bool {
        self.life.retiring()
    }

    /// Takes `chain` away (false if it was not live): it launches no more, the elasticity
    /// policy forgets it (no saved state, no endpoint fallback, no load, no scaling history),
    /// and its instances finish what routes still bring them ([`NodeCore::chains_to_stop`]).
    pub fn retire_chain(&mut self, chain: ChainId) -> bool {
        if !self.life.retire(chain) {
            return false;
        }
        self.elastic.add_chain(chain);
        true
    }

    /// The chains going away whose instances should stop now: no route uses them and no launch
    /// of them is under way ([`NodeCore::launching`]).
    pub fn chains_to_stop(&self) -> Vec<ChainId> {
        self.life.to_stop(&self.sched, |c| self.launching(c)).collect()
    }

    /// A chain going away with no route and no instance left is gone (true if it just went):
    /// its NTs and instances no longer count for fair sharing, and its id is free.
    pub fn settle_chain(&mut self, chain: ChainId) -> bool {
        if !self.life.settle(chain, &self.sched) {
            return false;
        }
        self.meter.remove_chain(chain);
        true
    }

    /// Names a chain's NTs in fair-sharing reports (by default `chainC.I:kind`): its manifest's
    /// names, which also make its pool-wide key.
    pub fn label_chain(&mut self, chain: ChainId, names: &[String]) {
        self.meter.label_chain(chain, names);
    }

    /// A new running instance `inst` of `chain` was installed, on a worker thread or the
    /// dispatcher's; `capacity_pps`: its NTs' declared throughput, if any.
    pub fn instance_installed(&mut self, chain: ChainId, inst: InstanceId, capacity_pps: &[Option<f64>], on_worker: bool) {
        self.meter.add_instance(chain, inst, capacity_pps, on_worker);
    }

    /// A new running instance of `chain` in the scheduler, with the configured credits (in a free
    /// slot if one was removed earlier); the driver installs its region next
    /// ([`NodeCore::instance_installed`]).
    pub fn add_instance(&mut self, chain: ChainId) -> Result<InstanceId, Change> {
        self.sched.add_instance(chain, self.credits)
    }

    /// A new instance of `chain` that is still launching: it takes packets, and runs them once
    /// [`NodeCore::set_running`] says so.
    pub fn add_launching(&mut self, chain: ChainId) -> Result<InstanceId, Change> {
        self.sched.add_launching(chain, self.credits)
    }

    /// A launching instance runs: what waited for it is dispatched first.
    pub fn set_running(&mut self, inst: InstanceId) -> Result<(), Change> {
        self.sched.set_running(inst)
    }

    /// Stops a running instance: it takes no new packets, finishes what it has (then
    /// [`NodeCore::take_parked`] reports it), and its NTs' capacity no longer counts.
    pub fn stop_instance(&mut self, inst: InstanceId) -> Result<(), Change> {
        self.sched.stop_instance(inst)?;
        self.meter.set_active(inst, false);
        Ok(())
    }

    /// A parked (or still draining) instance runs again, with whatever state its region kept.
    pub fn resume_instance(&mut self, inst: InstanceId) -> Result<(), Change> {
        self.sched.resume_instance(inst)?;
        self.meter.set_active(inst, true);
        Ok(())
    }

    /// A parked instance's region was taken down: its slot is free (its id may be reused).
    pub fn remove_instance(&mut self, inst: InstanceId) -> Result<(), Change> {
        self.meter.set_active(inst, false);
        self.sched.remove_instance(inst)
    }

    /// A stopped instance that has finished everything it had, if any (each reported once).
    pub fn take_parked(&mut self) -> Option<InstanceId> {
        self.sched.take_parked()
    }

    /// Holds dispatch to `inst` (`true`: its packets keep queueing) while its region moves, or
    /// lets it go on.
    pub fn pause_instance(&mut self, inst: InstanceId, paused: bool) {
        self.sched.set_paused(inst, paused);
    }

    /// Most work, ns, `inst` may have in flight on its worker thread.
    pub fn set_inflight_cap(&mut self, inst: InstanceId, ns: f64) {
        self.sched.set_inflight_cap(inst, ns);
    }

    /// Route `uid` through the node's chains, straight into the scheduler (replacing an earlier
    /// one), for a driver that keeps no DAG table: the chaining simulator's one fixed DAG. A
    /// node's DAGs go through [`NodeCore::set_dag`], which holds arrivals while a route changes.
    pub fn set_route(&mut self, uid: DagUid, route: DagRoute) {
        self.sched.set_dag(uid, route);
    }

    /// `chain`'s regions now run on a worker thread (`true`) or on the dispatcher's.
    pub fn set_chain_on_worker(&mut self, chain: ChainId, on_worker: bool) {
        self.meter.set_on_worker(chain, on_worker);
    }

    /// Registers tenant `t` with its weight, or changes the weight: its share of every resource,
    /// and its turn at instances it shares with other tenants (the weight rounded, at least 1).
    pub fn set_tenant(&mut self, t: TenantId, weight: f64) {
        self.meter.set_tenant(t, weight);
        self.sched.set_weight(t, weight.round().max(1.0) as u32);
    }

    /// This node is one of several dispatcher threads of one node (`data_cores`): fair sharing
    /// allocates through their board, once for all of them ([`crate::fair::Board`]).
    pub fn share_fairness(&mut self, on: crate::fair::OnBoard) {
        self.meter.share_fairness(on);
    }

    /// Tenant `t`'s NTs hold `bytes` of memory: its demand on the `memory` resource from the next
    /// epoch.
    pub fn set_tenant_memory(&mut self, t: TenantId, bytes: f64) {
        self.meter.set_memory(t, bytes);
    }

    /// Forgets tenant `t` for fair sharing and lifts its ingress limit.
    pub fn remove_tenant(&mut self, t: TenantId) {
        self.meter.remove_tenant(t);
    }

    /// Asks `t`'s ingress limiter for a packet at `now`; false: over its limit (the driver drops
    /// it as `rate_limit`, which the demand model reads back as offered load).
    #[inline]
    pub fn admit(&mut self, t: TenantId, now: Instant) -> bool {
        !self.meter.any_limited() || self.meter.admit(t, now)
    }

    /// Packets `t` may still be admitted at `now` (`None`: no limit).
    #[inline]
    pub fn budget(&mut self, t: TenantId, now: Instant) -> Option<u32> {
        self.meter.budget(t, now)
    }

    /// When `t`'s ingress limit admits `want` packets again (`None`: no limit): a receive queue
    /// of its own that its limit stopped is read again then.
    pub fn budget_at(&self, t: TenantId, now: Instant, want: f64) -> Option<Instant> {
        self.meter.budget_at(t, now, want)
    }

    /// `t`'s own receive queue was read only up to its limit: packets were left waiting.
    #[inline]
    pub fn held_back(&mut self, t: TenantId) {
        self.meter.held_back(t);
    }

    /// A timed poll of the dispatcher (see [`Meter::sample_poll`]).
    #[inline]
    pub fn sample_poll(&mut self, rx_ns: u64, rx: usize, min: usize, rest_ns: u64, dispatched: usize) {
        self.meter.sample_poll(rx_ns, rx, min, rest_ns, dispatched);
    }
}
