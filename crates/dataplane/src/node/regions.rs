//! The NT objects behind the core's instances, one responsibility apart from moving packets:
//! built for a launch (from a chain's saved state, else freshly from its specs, the build
//! timed), installed as a region at a place (the dispatcher's thread or a worker), taken down
//! (their state saved for the chain's next launch, or collected for a peer the chain moves
//! to), and restored from a peer's state when a chain comes home.
//!
//! The core decides which instance launches or stops, where and when ([`LaunchStep`]); the
//! node borrows these parts apart ([`super::Node::regions`]) and this carries the step out.
//! What concerns packets (those that waited at an instance that will not run) goes back to
//! the node.

use super::exec::Exec;
use super::handback::{restore_into, save_all, ChainState, Handback};
use super::{LaunchError, Place};
use crate::elastic::{Elastic, EventKind};
use crate::region::Region;
use snic_core::ids::{ChainId, InstanceId};
use snic_core::launches::LaunchStep;
use snic_core::node::NodeCore;
use snic_core::pool::owner::Slots;
use snic_core::time::Instant;
use snic_nt::{Nt, WorkTimer};

/// The node's parts that hold NT objects, and the core, borrowed apart.
pub(super) struct Regions<'a> {
    pub(super) core: &'a mut NodeCore,
    pub(super) exec: &'a mut Exec,
    pub(super) elastic: &'a mut Elastic,
    pub(super) handback: &'a mut Handback,
    pub(super) timer: &'a WorkTimer,
    /// This node's block of SNAT ports in a pool behind a switch.
    pub(super) slots: Option<Slots>,
    /// Token buckets in front of the regions' engines.
    pub(super) engine_buckets: bool,
    pub(super) now: Instant,
}

impl Regions<'_> {
    /// The chain's NTs for a new instance: the state an evicted instance saved, else freshly
    /// built (the real instantiation cost, measured, in ns).
    pub(super) fn chain_nts(&mut self, chain: ChainId) -> Result<(Vec<Box<dyn Nt>>, u64), LaunchError> {
        if let Some(nts) = self.elastic.take_saved(chain) {
            return Ok((nts, 0));
        }
        // Timed on the node's work timer: a node on a virtual clock builds in no time, so its
        // launch time (and MONITOR_PERIOD, which follows it) does not depend on the machine.
        let t0 = self.timer.now_ns();
        let nts = self.build_nts(chain)?;
        let ns = self.timer.now_ns().saturating_sub(t0);
        self.core.chain_built(ns);
        Ok((nts, ns))
    }

    /// A live chain's NTs, freshly built from its specs.
    pub(super) fn build_nts(&self, chain: ChainId) -> Result<Vec<Box<dyn Nt>>, LaunchError> {
        if !self.core.is_live(chain) {
            return Err(LaunchError::UnknownChain(chain));
        }
        Ok(self.elastic.build(chain, self.slots)?)
    }

    /// Puts a region for `inst` in place.
    pub(super) fn install(&mut self, chain: ChainId, inst: InstanceId, nts: Vec<Box<dyn Nt>>, place: Place) -> Result<(), LaunchError> {
        let region = Region::new(inst, nts, self.engine_buckets);
        self.core.instance_installed(chain, inst, &region.counters().nt_capacity_pps, place != Place::Dispatcher);
        Ok(self.exec.install(inst, region, place)?)
    }

    /// Takes the region of `inst` (an instance of `chain` the core took away) down; its NTs'
    /// state is saved for the chain's next launch if `keep`, else collected if the chain's
    /// state is being exported.
    fn teardown(&mut self, chain: ChainId, inst: InstanceId, keep: bool) {
        if let Some(r) = self.exec.take(inst) {
            match keep {
                true => self.elastic.save(chain, r.into_nts()),
                false => self.handback.collect(chain, &r.into_nts(), self.now),
            }
        }
        self.export_if_stopped(chain);
    }

    /// Carries out the core's steps for the launches under way; true if a launch ran. The
    /// packets that waited in an instance that cannot run go into `lost`, for the node to drop
    /// (counted: never left queued at an instance that will not run).
    pub(super) fn carry_out_launches(&mut self, lost: &mut Vec<u32>) -> bool {
        let mut ran = false;
        while let Some(step) = self.core.poll_launch() {
            match step {
                LaunchStep::Teardown { chain, inst, keep } => self.teardown(chain, inst, keep),
                LaunchStep::Install { chain, inst, region, place, why, took_ns } => {
                    // (A worker that does not answer: the instance cannot run anywhere.)
                    let nts = self.elastic.built.get_mut(region).and_then(Option::take);
                    if nts.is_some_and(|nts| self.install(chain, inst, nts, place).is_ok()) {
                        self.core.launch_installed(region, inst);
                        self.core.record(self.now, chain, Some(region), EventKind::Running { after: why }, took_ns);
                        ran = true;
                    } else {
                        self.core.launch_failed(region, inst, lost);
                    }
                }
            }
        }
        ran
    }

    /// Starts collecting `chain`'s NTs' state as its instances stop, beginning with the state
    /// its stopped instances saved; a chain not live has none.
    pub(super) fn begin_export(&mut self, chain: ChainId, key: snic_core::pool::ChainKey) {
        let mut state = ChainState { key, instances: Vec::new() };
        if !self.core.is_live(chain) {
            return self.handback.exported.push_back((chain, state));
        }
        for nts in std::mem::take(&mut self.elastic.saved[chain.index()]) {
            state.instances.push(save_all(&nts, self.now));
        }
        self.handback.exporting.push((chain, state));
    }

    /// The chain's state is whole once no instance of it runs or launches.
    pub(super) fn export_if_stopped(&mut self, chain: ChainId) {
        // (A launch evicting the chain's last instance does not hold it back: that instance is
        // gone, and nothing would call this again once the launch ran.)
        let core = &self.core;
        let stopped = || core.sched().instances_of(chain).is_empty() && !core.launches().launches_of(chain);
        self.handback.finish(chain, stopped);
    }

    /// Builds `chain`'s NTs and restores into them every instance's state of `states` for its
    /// key; they are kept for its next launch. The entries restored.
    pub(super) fn restore(&mut self, chain: ChainId, states: &[ChainState]) -> u32 {
        let key = self.core.meter().chain_key(chain);
        let mine: Vec<&Vec<Option<Vec<u8>>>> = states.iter().filter(|s| s.key == key).flat_map(|s| &s.instances).collect();
        if mine.iter().all(|i| i.iter().all(Option::is_none)) {
            return 0;
        }
        let Ok(mut nts) = self.build_nts(chain) else { return 0 };
        let n = restore_into(&mut nts, &mine, self.now);
        self.elastic.save(chain, nts);
        n
    }

    /// A DAG switched forms: the NTs of its old chains `from` (stopped), with their state, go
    /// in route order to its new chains `into`, kept for their launch. Nothing moves if one
    /// cannot be had.
    pub(super) fn move_form(&mut self, from: &[ChainId], into: &[ChainId]) {
        let mut nts: Vec<Box<dyn Nt>> = Vec::new();
        for &c in from {
            match self.chain_nts(c) {
                Ok((mut n, _)) => nts.append(&mut n),
                Err(_) => return,
            }
        }
        for &c in into.iter().rev() {
            let k = self.elastic.specs(c).len();
            let part = nts.split_off(nts.len() - k);
            self.elastic.save(c, part);
        }
    }
}
