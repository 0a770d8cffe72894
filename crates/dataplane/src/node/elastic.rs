//! The node's side of elasticity (see [`crate::elastic`]): pre-launch, on-demand launch,
//! stop-and-launch, victims and auto-scaling, applied to the regions and the scheduler.

use super::{Backend, LaunchError, Node, Place};
use crate::elastic::{Elastic, EventKind, SAVED_PER_CHAIN};
use crate::region::Region;
use snic_core::elastic::{Act, EndpointFallback};
use snic_core::ids::{ChainId, InstanceId};
use snic_core::launcher::Decision;
use snic_core::launches::{Launch, LaunchStep, Launched};
use snic_core::time::Instant;
use snic_nt::{Nt, NtSpec};

/// Why a victim runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resumed {
    /// Its chain's packets need it.
    OnDemand,
    /// The auto-scaler adds an instance.
    ScaleOut,
}

/// What to do with a packet whose chain had no active instance.
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
        if let Some(nts) = self.elastic.saved.get_mut(chain.index()).and_then(Vec::pop) {
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
        let slots = self.cfg.core.slots;
        let build = |spec: &NtSpec| match slots {
            // In a pool behind a switch: a SNAT allocates from this node's block of ports.
            Some(s) => snic_nt::build(&*spec.in_slot(s)?),
            None => snic_nt::build(spec),
        };
        Ok(self.live_specs(chain)?.iter().map(build).collect::<Result<Vec<_>, _>>()?)
    }

    /// Puts a region for `inst` in place (the dispatcher's thread or a worker).
    pub(super) fn install(&mut self, chain: ChainId, inst: InstanceId, nts: Vec<Box<dyn Nt>>, place: Place) -> Result<(), LaunchError> {
        let region = Region::new(inst, nts, self.cfg.engine_buckets);
        if self.region_counters.len() <= inst.index() {
            self.region_counters.resize(inst.index() + 1, None);
        }
        self.region_counters[inst.index()] = Some(region.counters());
        self.core.instance_installed(chain, inst, &region.counters().nt_capacity_pps, place != Place::Dispatcher);
        let e = &mut self.exec;
        match place {
            Place::Dispatcher => e.put_inline(inst.index(), region),
            Place::Worker(w) => e.workers[w].install(region)?,
        }
        if e.placement.len() <= inst.index() {
            e.placement.resize(inst.index() + 1, Place::Dispatcher);
        }
        e.placement[inst.index()] = place;
        Ok(())
    }

    /// Takes the region of `inst` (an instance of `chain` the core took away) down; its NTs'
    /// state is saved for the chain's next launch if `keep`.
    fn teardown(&mut self, chain: ChainId, inst: InstanceId, keep: bool) {
        let region = match self.exec.placement.get(inst.index()).copied().unwrap_or(Place::Dispatcher) {
            Place::Dispatcher => self.exec.inline.get_mut(inst.index()).and_then(Option::take),
            Place::Worker(w) => self.exec.workers[w].remove(inst).ok().flatten(),
        };
        if let Some(r) = region {
            // A chain going away keeps nothing (unless it moves to a peer).
            match keep {
                true => self.save_state(chain, r.into_nts()),
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
                    let ok = nts.is_some_and(|nts| self.install(chain, inst, nts, place).is_ok());
                    self.core.launch_installed(region, inst, ok);
                    if ok {
                        self.core.record(now, chain, Some(region), EventKind::Running { after: why }, took_ns);
                        ran = true;
                    }
                }
            }
        }
        ran
    }

    /// Keeps `nts` (a stopped instance's NTs, with their state) for `chain`'s next launch; the
    /// oldest saved state goes past [`SAVED_PER_CHAIN`].
    pub(super) fn save_state(&mut self, chain: ChainId, nts: Vec<Box<dyn Nt>>) {
        let saved = &mut self.elastic.saved[chain.index()];
        if saved.len() == SAVED_PER_CHAIN {
            saved.remove(0);
        }
        saved.push(nts);
    }

    /// Pre-launch at deploy: `chain` gets a free region; `None` when there is none (it will be
    /// launched when its first packet arrives).
    pub(super) fn prelaunch(&mut self, chain: ChainId) -> Result<Option<InstanceId>, LaunchError> {
        let now = self.clock.now();
        let (nts, build) = self.chain_nts(chain)?;
        let Some(slot) = self.core.prelaunch(chain, now) else {
            self.elastic.saved[chain.index()].push(nts);
            return Ok(None);
        };
        let inst = self.core.add_launching(chain).map_err(|_| LaunchError::UnknownChain(chain))?;
        let l = Launch { chain, region: slot, inst: Some(inst), why: Launched::Prelaunch, evict: None, requested: now };
        self.start(l, nts, EventKind::Prelaunch, build);
        Ok(Some(inst))
    }

    /// A peer asks this node to host `chain` (a DAG placed here, or a share of its flows): it
    /// launches where a launch can go without stopping a running chain — a free region, or a
    /// victim's, as the node's load report counted them free ([`snic_core::elastic::Elasticity::host`]);
    /// with neither it fails with [`LaunchError::NoFreeRegion`]. Without elasticity, as
    /// [`Node::launch`].
    pub fn launch_for_peer(&mut self, chain: ChainId) -> Result<(), LaunchError> {
        if !self.core.elastic().on() {
            return self.launch(chain).map(|_| ());
        }
        let now = self.clock.now();
        let done = match self.core.host(chain, now) {
            Some(Decision::Launch { region }) => self.launch_into(chain, region, None, now, EventKind::Launch),
            Some(Decision::ContextSwitch { region, evicted }) => {
                let old = self.core.launches().instance_in(region);
                self.launch_into(chain, region, old, now, EventKind::ContextSwitch { evicted })
            }
            Some(Decision::Resume { region }) if self.resume(chain, region, now, Resumed::OnDemand) => OnDemand::Retry,
            _ => OnDemand::Nothing,
        };
        match done {
            OnDemand::Retry => Ok(()),
            _ => Err(LaunchError::NoFreeRegion),
        }
    }

    /// A launch begins with its NTs built ([`snic_core::node::NodeCore::begin_launch`]): the
    /// event is recorded, and whatever can advance does (a launch with no delay into an empty
    /// region runs at once).
    fn start(&mut self, l: Launch, nts: Vec<Box<dyn Nt>>, kind: EventKind, build: u64) {
        self.elastic.built[l.region] = Some(nts);
        self.core.begin_launch(l);
        self.core.record(l.requested, l.chain, Some(l.region), kind, build);
        self.advance_elastic(l.requested);
    }

    /// A packet on `route` needs `chain` (at step `pos`), which has no active instance: the
    /// paper's on-demand order — share or resume what is loaded, a free region, a peer (see
    /// [`super::pool`]), the tenant's endpoint, and last a context switch.
    #[cold]
    pub(super) fn on_demand(&mut self, chain: ChainId, route: u32, pos: u8, now: Instant) -> OnDemand {
        if !self.core.elastic().on() || !self.core.is_live(chain) {
            return OnDemand::Nothing;
        }
        let decision = match self.place(chain, route, pos, now) {
            Ok(d) => d,
            Err(o) => return o,
        };
        match decision {
            Decision::Share { region } | Decision::Resume { region } => {
                if self.resume(chain, region, now, Resumed::OnDemand) {
                    OnDemand::Retry
                } else {
                    OnDemand::Nothing
                }
            }
            Decision::Launch { region } => self.launch_into(chain, region, None, now, EventKind::Launch),
            Decision::ContextSwitch { region, evicted } => {
                let old = self.core.launches().instance_in(region);
                self.launch_into(chain, region, old, now, EventKind::ContextSwitch { evicted })
            }
            Decision::Endpoint => {
                self.core.endpoint_packet(now, chain);
                OnDemand::Endpoint
            }
            // Every region is mid-launch: one runs soon.
            Decision::Wait { .. } | Decision::Busy => OnDemand::Wait,
            // (`place` turns it into a request to a peer.)
            Decision::Remote => OnDemand::Nothing,
        }
    }

    /// Launches `chain` into `region` for packets waiting now (they buffer in the launching
    /// instance), stopping `evict` first if the region holds it.
    fn launch_into(&mut self, chain: ChainId, region: usize, evict: Option<InstanceId>, now: Instant, kind: EventKind) -> OnDemand {
        let Ok((nts, build)) = self.chain_nts(chain) else {
            self.core.region_freed(region);
            return OnDemand::Nothing;
        };
        let Ok(inst) = self.core.add_launching(chain) else {
            self.elastic.saved[chain.index()].push(nts);
            return OnDemand::Nothing;
        };
        let why = if evict.is_some() { Launched::ContextSwitch } else { Launched::OnDemand };
        self.start(Launch { chain, region, inst: Some(inst), why, evict, requested: now }, nts, kind, build);
        OnDemand::Retry
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
    /// ([`snic_core::node::NodeCore::handle_epoch`]), then looks at the DAGs' forms.
    pub(super) fn elastic_epoch(&mut self, now: Instant) {
        if !self.core.elastic().on() {
            return;
        }
        let mut acts = std::mem::take(&mut self.elastic.acts);
        for act in acts.drain(..) {
            match act {
                Act::Resume { chain, region } => {
                    self.resume(chain, region, now, Resumed::ScaleOut);
                }
                Act::Launch { chain, region, .. } => self.scale_out(chain, region, now),
                Act::Stop { chain, region, last } => self.scale_in(chain, region, last, now),
            }
        }
        self.elastic.acts = acts;
        self.rechain_epoch(now);
    }

    /// The victim in `region` runs again (for packets, or to scale out); false if it cannot.
    fn resume(&mut self, chain: ChainId, region: usize, now: Instant, why: Resumed) -> bool {
        let Some(inst) = self.core.launches().instance_in(region) else { return false };
        if self.core.resume_instance(inst).is_err() {
            return false;
        }
        self.core.record(now, chain, Some(region), EventKind::Resume, 0);
        if why == Resumed::ScaleOut {
            self.core.record(now, chain, Some(region), EventKind::ScaleOut, 0);
        }
        true
    }

    /// One more instance of `chain`, launched into `region` (after the victim it holds, if any).
    fn scale_out(&mut self, chain: ChainId, region: usize, now: Instant) {
        let Ok((nts, build)) = self.chain_nts(chain) else {
            self.core.region_freed(region);
            return;
        };
        let evict = self.core.launches().instance_in(region);
        let l = Launch { chain, region, inst: None, why: Launched::ScaleOut, evict, requested: now };
        self.start(l, nts, EventKind::ScaleOut, build);
    }

    /// The instance of `chain` in `region` stops; its flows move to the others.
    fn scale_in(&mut self, chain: ChainId, region: usize, last: bool, now: Instant) {
        let Some(inst) = self.core.launches().instance_in(region) else { return };
        if self.core.stop_instance(inst).is_err() {
            return;
        }
        self.core.record(now, chain, Some(region), if last { EventKind::Deschedule } else { EventKind::ScaleIn }, 0);
        self.advance_elastic(now);
    }
}
