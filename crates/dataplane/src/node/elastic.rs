//! The node's side of elasticity (see [`crate::elastic`]): pre-launch, on-demand launch,
//! stop-and-launch, victims and auto-scaling, applied to the regions and the scheduler.

use super::{Backend, LaunchError, Node, Place};
use crate::drops::Drop;
use crate::elastic::{Elastic, EventKind};
use crate::region::Region;
use snic_core::elastic::EndpointFallback;
use snic_core::ids::{ChainId, InstanceId};
use snic_core::launches::LaunchStep;
use snic_core::node::demand::{Demand, LaunchPlan, Scaled};
use snic_core::sched::{Change, Reject};
use snic_core::time::Instant;
use snic_nt::Nt;

/// What to do with a packet whose chain had no active instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnDemand {
    /// The chain has an instance now (running or launching): schedule the packet again.
    Retry,
    /// Send the packet on unprocessed: the tenant's endpoint runs the chain.
    Endpoint,
    /// Every region is being launched: wait for one to run.
    Wait,
    /// No room: drop it.
    Nothing,
}

impl<B: Backend> Node<B> {
    /// Elasticity, the node's side: which instance is in which region, counters and recent
    /// events.
    pub fn elastic(&self) -> &Elastic {
        &self.elastic
    }

    /// Declares whether the tenant's endpoint can run `chain` itself: when it can and no region
    /// can be found for it (and before resorting to a context switch), its packets are sent on
    /// unprocessed.
    pub fn set_endpoint_fallback(&mut self, chain: ChainId, fallback: EndpointFallback) {
        self.core.set_endpoint_fallback(chain, fallback);
    }

    /// The chain's NTs for a new instance: the state an evicted instance saved, else freshly
    /// built (the real instantiation cost, measured).
    pub(super) fn chain_nts(&mut self, chain: ChainId) -> Result<(Vec<Box<dyn Nt>>, u64), LaunchError> {
        if let Some(nts) = self.elastic.take_saved(chain) {
            return Ok((nts, 0));
        }
        // Timed on the node's work timer: a node on a virtual clock builds in no time, so its
        // launch time (and MONITOR_PERIOD, which follows it) does not depend on the machine.
        let t0 = self.work_timer.now_ns();
        let nts = self.build_nts(chain)?;
        let ns = self.work_timer.now_ns().saturating_sub(t0);
        self.core.chain_built(ns);
        Ok((nts, ns))
    }

    /// A live chain's NTs, freshly built from its specs.
    pub(super) fn build_nts(&self, chain: ChainId) -> Result<Vec<Box<dyn Nt>>, LaunchError> {
        if !self.core.is_live(chain) {
            return Err(LaunchError::UnknownChain(chain));
        }
        Ok(self.elastic.build(chain, self.cfg.port_slots())?)
    }

    /// Puts a region for `inst` in place (the dispatcher's thread or a worker).
    pub(super) fn install(&mut self, chain: ChainId, inst: InstanceId, nts: Vec<Box<dyn Nt>>, place: Place) -> Result<(), LaunchError> {
        let region = Region::new(inst, nts, self.cfg.engine_buckets);
        self.core.instance_installed(chain, inst, &region.counters().nt_capacity_pps, place != Place::Dispatcher);
        Ok(self.exec.install(inst, region, place)?)
    }

    /// Takes the region of `inst` (an instance of `chain` the core took away) down; its NTs'
    /// state is saved for the chain's next launch if `keep`.
    fn teardown(&mut self, chain: ChainId, inst: InstanceId, keep: bool) {
        if let Some(r) = self.exec.take(inst) {
            // A chain going away keeps nothing (unless it moves to a peer).
            match keep {
                true => self.elastic.save(chain, r.into_nts()),
                false => self.exported_nts(chain, r.into_nts()),
            }
        }
        self.export_if_stopped(chain);
    }

    /// Carries out the core's steps for the launches under way ([`LaunchStep`]); true if a
    /// launch ran.
    pub(super) fn carry_out_launches(&mut self, now: Instant) -> bool {
        let mut ran = false;
        while let Some(step) = self.core.poll_launch() {
            match step {
                LaunchStep::Teardown { chain, inst, keep } => self.teardown(chain, inst, keep),
                LaunchStep::Install { chain, inst, region, place, why, took_ns } => {
                    // (A worker that does not answer: the instance cannot run anywhere.)
                    let nts = self.elastic.built.get_mut(region).and_then(Option::take);
                    if nts.is_some_and(|nts| self.install(chain, inst, nts, place).is_ok()) {
                        self.core.launch_installed(region, inst);
                        self.core.record(now, chain, Some(region), EventKind::Running { after: why }, took_ns);
                        ran = true;
                    } else {
                        // What waited in the instance is dropped, counted (never left queued at
                        // an instance that will not run).
                        let mut lost = Vec::new();
                        self.core.launch_failed(region, inst, &mut lost);
                        for idx in lost {
                            self.refuse(idx, Drop::Sched(Reject::NoInstance), now);
                        }
                    }
                }
            }
        }
        ran
    }

    /// Pre-launch at deploy: `chain` gets a free region; `None` when there is none (it will be
    /// launched when its first packet arrives). Its NTs are built first: the build time is
    /// part of the launch time the policy expects.
    pub(super) fn prelaunch(&mut self, chain: ChainId) -> Result<Option<InstanceId>, LaunchError> {
        let now = self.clock.now();
        let (nts, build) = self.chain_nts(chain)?;
        let Some(plan) = self.core.prelaunch_plan(chain, now) else {
            self.elastic.save(chain, nts);
            return Ok(None);
        };
        self.begin_plan(plan, nts, build, now).map_err(|_| LaunchError::UnknownChain(chain))
    }

    /// A peer asks this node to host `chain` (a DAG placed here, or a share of its flows): it
    /// launches where a launch can go without stopping a running chain — a free region, or a
    /// victim's, as the node's load report counted them free ([`snic_core::node::NodeCore::host_chain`]);
    /// with neither it fails with [`LaunchError::NoFreeRegion`]. Without elasticity, as
    /// [`Node::launch`].
    pub fn launch_for_peer(&mut self, chain: ChainId) -> Result<(), LaunchError> {
        if !self.core.elastic().on() {
            return self.launch(chain).map(|_| ());
        }
        let now = self.clock.now();
        match self.core.host_chain(now, chain) {
            Demand::Retry => Ok(()),
            Demand::Launch(plan) if self.launch_plan(plan, now) == OnDemand::Retry => Ok(()),
            _ => Err(LaunchError::NoFreeRegion),
        }
    }

    /// A packet on `route` needs `chain` (at step `pos`), which has no active instance: what
    /// the core decides ([`snic_core::node::NodeCore::on_demand`]), carried out.
    #[cold]
    pub(super) fn on_demand(&mut self, chain: ChainId, route: u32, pos: u8, now: Instant) -> OnDemand {
        match self.carry_out(now, |core, notes| core.on_demand(now, chain, route, pos, notes)) {
            Demand::Retry => OnDemand::Retry,
            Demand::Launch(plan) => self.launch_plan(plan, now),
            Demand::Endpoint => OnDemand::Endpoint,
            Demand::Wait => OnDemand::Wait,
            Demand::Nothing => OnDemand::Nothing,
        }
    }

    /// Builds the NTs for the launch the core planned and begins it (`Retry`: its packets
    /// schedule again, into its instance); a build that fails empties the region.
    fn launch_plan(&mut self, plan: LaunchPlan, now: Instant) -> OnDemand {
        let Ok((nts, build)) = self.chain_nts(plan.chain) else {
            self.core.region_freed(plan.region);
            return OnDemand::Nothing;
        };
        match self.begin_plan(plan, nts, build, now) {
            Ok(_) => OnDemand::Retry,
            Err(_) => OnDemand::Nothing,
        }
    }

    /// The launch begins with its NTs built ([`snic_core::node::NodeCore::launch_planned`]),
    /// and whatever can advance does (a launch with no delay into an empty region runs at
    /// once). Refused, the NTs are kept for the chain's next launch.
    fn begin_plan(&mut self, plan: LaunchPlan, nts: Vec<Box<dyn Nt>>, build: u64, now: Instant) -> Result<Option<InstanceId>, Change> {
        match self.core.launch_planned(now, plan, build) {
            Ok(inst) => {
                self.elastic.built[plan.region] = Some(nts);
                self.advance_elastic(now);
                Ok(inst)
            }
            Err(e) => {
                self.elastic.save(plan.chain, nts);
                Err(e)
            }
        }
    }

    /// Launches and stops under way advance ([`snic_core::node::NodeCore::advance_launches`])
    /// and are carried out; packets waiting for a region enter again once one runs. Called
    /// every poll while any is under way.
    pub(super) fn advance_elastic(&mut self, now: Instant) {
        self.core.advance_launches(now);
        let ran = self.carry_out_launches(now);
        if self.core.any_waiting() && (ran || !self.core.launches().busy()) {
            self.release_waiting(None, now);
        }
    }

    /// Packets waiting for a region enter again, in order: those of `chain` only, or all but
    /// those still waiting for the pool ([`snic_core::node::NodeCore::release_waiting`]).
    pub(super) fn release_waiting(&mut self, chain: Option<ChainId>, now: Instant) {
        if !self.core.any_waiting() {
            return;
        }
        let mut go = std::mem::take(&mut self.elastic.released);
        self.core.release_waiting(chain, &mut go);
        for idx in go.drain(..) {
            self.enter(idx, now);
        }
        self.elastic.released = go;
    }

    /// Carries out what the elasticity policy decided at the epoch's end
    /// ([`snic_core::node::NodeCore::handle_epoch`], [`snic_core::node::NodeCore::scale`]): the
    /// core resumes and stops instances itself; a scale-out's NTs are built here. Then the
    /// DAGs' forms.
    pub(super) fn elastic_epoch(&mut self, now: Instant) {
        if !self.core.elastic().on() {
            return;
        }
        let mut acts = std::mem::take(&mut self.elastic.acts);
        for act in acts.drain(..) {
            match self.core.scale(now, act) {
                Scaled::Launch(plan) => {
                    self.launch_plan(plan, now);
                }
                Scaled::Stopped => self.advance_elastic(now),
                Scaled::Done => {}
            }
        }
        self.elastic.acts = acts;
        self.rechain_epoch(now);
    }
}
