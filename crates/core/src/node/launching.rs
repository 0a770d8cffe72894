//! Launches under way and the regions' instances ([`crate::launches`]), driven by the core: a
//! launch begins (what it evicts stops), advances as instances park and launch delays pass,
//! and hands the driver its [`LaunchStep`]s — take this region down, install that one — in the
//! order they must be carried out ([`NodeCore::poll_launch`]). The driver builds NTs, keeps them
//! by region until their launch runs, and says how an install went.

use super::NodeCore;
use crate::ids::{ChainId, InstanceId, TenantId};
use crate::launches::{Launch, LaunchStep, Launches};
use crate::sched::InstanceState;
use crate::time::Instant;

impl NodeCore {
    /// The regions' instances and the launches under way, read-only.
    pub fn launches(&self) -> &Launches {
        &self.launches
    }

    /// True while a launch of `chain`, or one evicting its instance, is under way (the chain's
    /// NTs' state is in hand only once it is done).
    pub fn launching(&self, chain: ChainId) -> bool {
        self.launches.launching(&self.sched, chain)
    }

    /// When the next launch under way is due to run (its launch delay over; it may wait longer
    /// for its region to empty).
    pub fn next_launch_at(&self) -> Option<Instant> {
        self.launches.pending().iter().filter_map(|p| self.launch_ready_at(p.region)).min()
    }

    /// A launch begins (its region was given by a decision or an act, its NTs are built): the
    /// instance it evicts stops (a parked one is taken down at once), and the launch runs from
    /// the launch delay after its request, once its region is empty ([`NodeCore::advance_launches`]).
    pub fn begin_launch(&mut self, l: Launch) {
        if let Some(old) = l.evict {
            self.stop_for_eviction(old);
        }
        self.elastic.launch_begins(l.region, l.requested);
        self.launches.push(l);
    }

    /// Stop-and-launch, stop part: the running instance takes no new packets and finishes what
    /// it has; a parked one (a victim) goes at once.
    fn stop_for_eviction(&mut self, old: InstanceId) {
        match self.sched.state(old) {
            // Refused only while its chain's instances are changing: retried as launches advance.
            InstanceState::Running => {
                let _ = self.stop_instance(old);
            }
            InstanceState::Parked => self.teardown(old),
            _ => {}
        }
    }

    /// Takes a parked instance away: out of the scheduler, out of its region; the driver takes
    /// the region down ([`LaunchStep::Teardown`]).
    fn teardown(&mut self, inst: InstanceId) {
        let chain = self.sched.chain_of(inst);
        let keep = self.is_live(chain);
        let _ = self.remove_instance(inst);
        if let Some(r) = self.launches.region_of(inst) {
            self.launches.set_instance(r, None);
        }
        self.launches.step(LaunchStep::Teardown { chain, inst, keep });
    }

    /// Launches and stops under way, at `now`: instances that stopped and finished become
    /// victims (or are taken down to make room), and launches whose time has come and whose
    /// region is empty run. The driver then carries out [`NodeCore::poll_launch`]'s steps. Called
    /// every poll while [`Launches::busy`] or the scheduler has parked instances.
    pub fn advance_launches(&mut self, now: Instant) {
        while let Some(p) = self.take_parked() {
            let live = self.is_live(self.sched.chain_of(p));
            match self.launches.region_of(p) {
                Some(region) if !self.launches.evicting(p) => {
                    if !self.region_stopped(region, now, live) {
                        self.teardown(p);
                    }
                }
                _ => self.teardown(p),
            }
        }
        let mut i = 0;
        while let Some(p) = self.launches.pending_at(i) {
            if !self.launch_due(p.region, now) {
                i += 1;
                continue;
            }
            if let Some(old) = p.evict {
                if self.launches.region_of(old) == Some(p.region) {
                    // Still there: stopping (retry a refused stop) or draining.
                    self.stop_for_eviction(old);
                    if self.launches.region_of(old) == Some(p.region) {
                        i += 1;
                        continue;
                    }
                }
            }
            let inst = match p.inst {
                Some(inst) => inst,
                // A scale-out joins the chain's instances now that it can run.
                None => match self.add_instance(p.chain) {
                    Ok(inst) => inst,
                    Err(_) => {
                        i += 1;
                        continue;
                    }
                },
            };
            self.launches.take_pending(i);
            let place = self.launches.place_of_region(p.region);
            let took_ns = now.saturating_since(p.requested).as_nanos() as u64;
            self.launches.step(LaunchStep::Install { chain: p.chain, inst, region: p.region, place, why: p.why, took_ns });
        }
    }

    /// The next thing the driver does for the launches, in order.
    pub fn poll_launch(&mut self) -> Option<LaunchStep> {
        self.launches.next_step()
    }

    /// The driver installed `inst`'s region for the launch into `region`: it runs.
    pub fn launch_installed(&mut self, region: usize, inst: InstanceId) {
        self.launches.set_instance(region, Some(inst));
        if self.sched.state(inst) == InstanceState::Launching {
            let _ = self.set_running(inst);
        }
        self.region_running(region);
    }

    /// The driver could not install `inst`'s region for the launch into `region` (a worker that
    /// does not answer): the region is empty again, and the instance leaves the scheduler and
    /// the meter — the packets that waited in it go to `lost`, in order, for the driver to drop
    /// (counted: `no_instance`). The chain's next packet asks for a launch again.
    pub fn launch_failed(&mut self, region: usize, inst: InstanceId, lost: &mut Vec<u32>) {
        self.region_freed(region);
        if self.sched.abandon_launch(inst, lost).is_ok() {
            self.meter.set_active(inst, false);
        }
    }

    /// Tenant `t`'s packet `item`, for `chain`, waits for a region (every one is mid-launch) or
    /// for the pool; false if `t` has its most packets waiting already (four times its queue
    /// bound at an instance): the driver drops it.
    pub fn wait_for_launch(&mut self, item: u32, t: TenantId, chain: ChainId) -> bool {
        self.waiting.push(item, t, chain)
    }

    /// True while packets wait for a region or the pool.
    pub fn any_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The packets that wait no more, in arrival order, into `out`: those of `chain` (it has an
    /// instance now, or the pool answered for it), or with `None` all but those whose chain
    /// still waits for the pool (a peer asked to host it, or coming home for its state).
    pub fn release_waiting(&mut self, chain: Option<ChainId>, out: &mut Vec<u32>) {
        let Self { waiting, placements, .. } = self;
        match chain {
            Some(c) => waiting.release(|w| w == c, out),
            None => waiting.release(|w| !placements.waits(w), out),
        }
    }

    /// Stops every running instance of `chain` and takes down those parked in a region (idle,
    /// or victims), freeing it ([`LaunchStep::Teardown`]s follow). Instances still draining are
    /// taken down once parked.
    pub fn stop_chain(&mut self, chain: ChainId) {
        for inst in self.sched.instances_of(chain).to_vec() {
            if self.sched.state(inst) == InstanceState::Running {
                let _ = self.stop_instance(inst);
            }
        }
        let sched = &self.sched;
        let parked: Vec<(usize, InstanceId)> = (self.launches.region_instances().enumerate())
            .filter_map(|(r, i)| i.map(|i| (r, i)))
            .filter(|&(_, i)| sched.chain_of(i) == chain && sched.state(i) == InstanceState::Parked)
            .collect();
        for (region, inst) in parked {
            self.teardown(inst);
            self.region_freed(region);
        }
    }
}
