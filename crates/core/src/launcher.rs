//! Where a chain runs when its packets need it (paper 000 §4.3–§4.4): the on-demand launch
//! order, stop-and-launch, and the victim cache — as a sans-IO policy over a node's regions.
//!
//! A region is free, launching a chain (until a time the driver gives: the measured
//! instantiation cost plus any emulated reconfiguration delay), running one, or holding a
//! *victim*: a chain descheduled but kept loaded until its region is needed. When packets need a
//! chain, [`Launcher::place`] decides, in the paper's order:
//!
//! 1. **share** a running instance of the chain that has spare bandwidth;
//! 2. **resume** a victim of the chain: no launch at all (a victim-cache hit);
//! 3. **launch** into a free region, or into the oldest victim's (a victim is kept only until
//!    its region is needed: [`Decision::ContextSwitch`] evicting it, though no running chain
//!    stops);
//! 4. **remote**: another node of the pool has the chain or a free region (the driver says so:
//!    [`crate::pool::on_demand`]);
//! 5. **endpoint**: the tenant declared it can run the chain itself;
//! 6. **context switch**: stop-and-launch in the least-loaded running region — the last
//!    resort, since the evicted chain stops.
//!
//! Packets for a chain that is launching wait (bounded) and are served first when it runs; that
//! buffer is the driver's. Nothing here reads a clock.
//!
//! A launching region runs once its driver says so: [`Launcher::set_running`] when the driver
//! installed the chain (the node), or [`Launcher::tick`] when the driver lets time alone decide
//! (the simulator, whose launches take exactly the launch time). Deciding never promotes a
//! launch on its own: a region whose chain the driver has not installed yet is not a running
//! chain that could be evicted, even at the instant its launch is due.

use crate::ids::ChainId;
use crate::time::Instant;
use core::time::Duration;

/// What a region holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RegionState {
    /// Nothing.
    Free,
    /// `chain` is being launched; it runs from `ready_at`.
    Launching {
        /// The chain.
        chain: ChainId,
        /// When it runs.
        ready_at: Instant,
    },
    /// `chain` runs; `load` is its measured load as a fraction of one instance's capacity.
    Running {
        /// The chain.
        chain: ChainId,
        /// Load, 0..=1 (or above when overloaded).
        load: f64,
    },
    /// `chain` was descheduled at `since` but is still loaded.
    Victim {
        /// The chain.
        chain: ChainId,
        /// When it was descheduled (least recent is evicted first).
        since: Instant,
    },
}

/// Whether a pool peer has room for a chain this node cannot place (its last load report said
/// so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRoom {
    /// A peer has a free region.
    Available,
    /// No peer has (or this node has no pool).
    None,
}

/// Whether the tenant's endpoint can run a chain itself ([`crate::elastic::Elasticity::set_endpoint_fallback`]):
/// its packets are then sent on unprocessed when no region can be found, before a context switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EndpointFallback {
    /// The endpoint runs the chain's NTs itself when the node cannot.
    Allowed,
    /// The node runs them or the packets wait (the default).
    #[default]
    Never,
}

impl From<bool> for EndpointFallback {
    /// The manifest's `endpoint_fallback: true|false`.
    fn from(yes: bool) -> Self {
        if yes {
            EndpointFallback::Allowed
        } else {
            EndpointFallback::Never
        }
    }
}

/// What to do for a chain that packets need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send them to the running instance in `region`.
    Share {
        /// Region index.
        region: usize,
    },
    /// The chain is a victim in `region`: make it run again, no launch.
    Resume {
        /// Region index.
        region: usize,
    },
    /// The chain is already launching in `region`: buffer until it runs.
    Wait {
        /// Region index.
        region: usize,
    },
    /// Launch it into the free `region`.
    Launch {
        /// Region index.
        region: usize,
    },
    /// Send them to another node of the pool.
    Remote,
    /// Let the tenant's endpoint run the chain.
    Endpoint,
    /// Stop what `region` holds (`evicted`) and launch the chain there.
    ContextSwitch {
        /// Region index.
        region: usize,
        /// The chain that stops.
        evicted: ChainId,
    },
    /// Every region is launching, or runs a chain that started too recently to be stopped:
    /// nothing can be decided until one runs or its hold ends.
    Busy,
}

/// Launch parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LauncherConfig {
    /// A running instance with load below this has spare bandwidth to share.
    pub share_below: f64,
    /// Time from launch to running (measured instantiation cost + emulated reconfiguration).
    pub launch_time: Duration,
}

impl Default for LauncherConfig {
    fn default() -> Self {
        LauncherConfig { share_below: 0.8, launch_time: Duration::ZERO }
    }
}

/// The regions of one node and the launch policy. See the module docs.
#[derive(Debug, Clone)]
pub struct Launcher {
    cfg: LauncherConfig,
    regions: Vec<RegionState>,
    /// Per region: a context switch does not stop its chain before this time.
    held_until: Vec<Instant>,
}

impl Launcher {
    /// A node with `regions` free regions.
    pub fn new(cfg: LauncherConfig, regions: usize) -> Self {
        Launcher { cfg, regions: vec![RegionState::Free; regions], held_until: vec![Instant::ZERO; regions] }
    }

    /// The regions.
    pub fn regions(&self) -> &[RegionState] {
        &self.regions
    }

    /// Launches that were due by `now` start running (for a driver whose launches take exactly
    /// the launch time; see the module docs).
    pub fn tick(&mut self, now: Instant) {
        for r in &mut self.regions {
            if let RegionState::Launching { chain, ready_at } = *r {
                if ready_at <= now {
                    *r = RegionState::Running { chain, load: 0.0 };
                }
            }
        }
    }

    /// The launch into `region` (if one is under way) runs from `at`: its driver built the
    /// chain's NTs, and the rest of the launch takes a known time.
    pub fn launch_from(&mut self, region: usize, at: Instant) {
        if let Some(RegionState::Launching { ready_at, .. }) = self.regions.get_mut(region) {
            *ready_at = at;
        }
    }

    /// When the launch into `region` runs (`None`: no launch is under way there).
    pub fn ready_at(&self, region: usize) -> Option<Instant> {
        match self.regions.get(region) {
            Some(RegionState::Launching { ready_at, .. }) => Some(*ready_at),
            _ => None,
        }
    }

    /// The chain that starts in `region` is not stopped by a context switch before `until`: a
    /// chain just launched has measured no load yet, so it would be the least loaded, and
    /// stopping it before it ran would let two chains that need the region take it from each
    /// other forever (paper §4.4: MONITOR_PERIOD, at least a launch, avoids thrashing).
    pub fn hold(&mut self, region: usize, until: Instant) {
        if let Some(h) = self.held_until.get_mut(region) {
            *h = until;
        }
    }

    /// The measured load of the instance in `region` (ignored unless it runs).
    pub fn set_load(&mut self, region: usize, load: f64) {
        if let Some(RegionState::Running { load: l, .. }) = self.regions.get_mut(region) {
            *l = load;
        }
    }

    /// The chain in `region` is no longer needed: it stays loaded as a victim.
    pub fn deschedule(&mut self, region: usize, now: Instant) {
        if let Some(r) = self.regions.get_mut(region) {
            if let RegionState::Running { chain, .. } = *r {
                *r = RegionState::Victim { chain, since: now };
            }
        }
    }

    /// Decides where `chain` runs for packets that need it now, and applies the decision to the
    /// regions (a launch or context switch occupies the region until the driver reports it
    /// running). `remote`: the pool has room for it elsewhere; `endpoint`: the tenant can run it
    /// itself.
    pub fn place(&mut self, chain: ChainId, now: Instant, remote: PeerRoom, endpoint: EndpointFallback) -> Decision {
        let find = |f: &dyn Fn(&RegionState) -> bool| self.regions.iter().position(f);
        // 1. Share a running instance with spare bandwidth (the least loaded one).
        let share = self
            .regions
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match *r {
                RegionState::Running { chain: c, load } if c == chain && load < self.cfg.share_below => Some((i, load)),
                _ => None,
            })
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((region, _)) = share {
            return Decision::Share { region };
        }
        if let Some(region) = find(&|r| matches!(*r, RegionState::Launching { chain: c, .. } if c == chain)) {
            return Decision::Wait { region };
        }
        // 2. A victim-cache hit: resume without launching; 3. a free region — and a victim's
        // region is free (paper §4.3: a descheduled chain is kept "unless the region is needed
        // to launch a new chain"): the oldest victim makes way, no running chain stops.
        if let Some(d) = self.resume_or_launch(chain, now) {
            return d;
        }
        if let Some((region, evicted)) = self.oldest_victim() {
            self.occupy(region, chain, now);
            return Decision::ContextSwitch { region, evicted };
        }
        // 4, 5. Elsewhere.
        if remote == PeerRoom::Available {
            return Decision::Remote;
        }
        if endpoint == EndpointFallback::Allowed {
            return Decision::Endpoint;
        }
        // 6. Stop-and-launch: the least-loaded running chain (a victim made way at step 3) of
        // those that have run their hold; none: the packets wait.
        let target = self
            .regions
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match *r {
                RegionState::Running { chain: c, load } if self.held_until[i] <= now => Some((i, c, load)),
                _ => None,
            })
            .min_by(|a, b| a.2.total_cmp(&b.2))
            .map(|(i, c, _)| (i, c));
        match target {
            Some((region, evicted)) => {
                self.occupy(region, chain, now);
                Decision::ContextSwitch { region, evicted }
            }
            None => Decision::Busy,
        }
    }

    /// Pre-launch at deploy: `chain` takes a free region if there is one (never evicts).
    pub fn prelaunch(&mut self, chain: ChainId, now: Instant) -> Option<usize> {
        let region = self.regions.iter().position(|r| *r == RegionState::Free)?;
        self.occupy(region, chain, now);
        Some(region)
    }

    /// One more instance of a running chain (auto-scaling): a victim of the chain is resumed;
    /// else a free region is launched; else another chain's victim is replaced (a victim is
    /// only kept while no one needs its region). Never stops a running chain. `None`: no room.
    pub fn scale_out(&mut self, chain: ChainId, now: Instant) -> Option<Decision> {
        if let Some(d) = self.resume_or_launch(chain, now) {
            return Some(d);
        }
        let (region, evicted) = self.oldest_victim()?;
        self.occupy(region, chain, now);
        Some(Decision::ContextSwitch { region, evicted })
    }

    /// A victim of `chain` runs again (no launch), else `chain` is launched into a free region;
    /// `None` when neither exists.
    fn resume_or_launch(&mut self, chain: ChainId, now: Instant) -> Option<Decision> {
        if let Some(region) = self.regions.iter().position(|r| matches!(*r, RegionState::Victim { chain: c, .. } if c == chain)) {
            self.regions[region] = RegionState::Running { chain, load: 0.0 };
            return Some(Decision::Resume { region });
        }
        let region = self.regions.iter().position(|r| *r == RegionState::Free)?;
        self.occupy(region, chain, now);
        Some(Decision::Launch { region })
    }

    /// The least recently descheduled victim: its region and chain.
    fn oldest_victim(&self) -> Option<(usize, ChainId)> {
        self.regions
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match *r {
                RegionState::Victim { chain: c, since } => Some((i, c, since)),
                _ => None,
            })
            .min_by_key(|&(_, _, since)| since)
            .map(|(i, c, _)| (i, c))
    }

    /// True if [`Launcher::scale_out`] would find room (a free region or a victim).
    pub fn has_room(&self) -> bool {
        self.unused() > 0
    }

    /// Regions a launch could take without stopping a running chain: free ones and victims.
    pub fn unused(&self) -> usize {
        self.regions.iter().filter(|r| matches!(**r, RegionState::Free | RegionState::Victim { .. })).count()
    }

    /// The driver finished launching `region` (earlier or later than the launch time said: the
    /// real instantiation, and draining an evicted chain, take what they take).
    pub fn set_running(&mut self, region: usize) {
        if let Some(r) = self.regions.get_mut(region) {
            if let RegionState::Launching { chain, .. } | RegionState::Victim { chain, .. } = *r {
                *r = RegionState::Running { chain, load: 0.0 };
            }
        }
    }

    /// `region` is empty again (its chain was removed, not kept as a victim).
    pub fn free(&mut self, region: usize) {
        if let Some(r) = self.regions.get_mut(region) {
            *r = RegionState::Free;
        }
    }

    /// The time a launch is expected to take (for the auto-scaler's MONITOR_PERIOD floor).
    pub fn set_launch_time(&mut self, t: Duration) {
        self.cfg.launch_time = t;
    }

    fn occupy(&mut self, region: usize, chain: ChainId, now: Instant) {
        self.regions[region] = RegionState::Launching { chain, ready_at: now + self.cfg.launch_time };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ChainId = ChainId(0);
    const B: ChainId = ChainId(1);
    const C: ChainId = ChainId(2);
    const MS: u64 = 1_000_000;

    fn launcher(regions: usize) -> Launcher {
        Launcher::new(LauncherConfig { share_below: 0.8, launch_time: Duration::from_millis(5) }, regions)
    }

    #[test]
    fn the_on_demand_order_is_followed_step_by_step() {
        let mut l = launcher(2);
        let t = Instant(0);
        // 3: a free region.
        assert_eq!(l.place(A, t, PeerRoom::None, EndpointFallback::Never), Decision::Launch { region: 0 });
        // While it launches, more packets for A wait for it.
        assert_eq!(l.place(A, Instant(MS), PeerRoom::None, EndpointFallback::Never), Decision::Wait { region: 0 });
        // 1: once it runs with spare bandwidth, it is shared.
        l.tick(Instant(5 * MS));
        l.set_load(0, 0.3);
        assert_eq!(l.place(A, Instant(6 * MS), PeerRoom::None, EndpointFallback::Never), Decision::Share { region: 0 });
        // Loaded past the threshold: not shared; the free region gets a second instance.
        l.set_load(0, 0.95);
        assert_eq!(l.place(A, Instant(6 * MS), PeerRoom::None, EndpointFallback::Never), Decision::Launch { region: 1 });
        l.tick(Instant(11 * MS));
        l.set_load(1, 0.5);
        // No free region for B: 4, remote if the pool has room; 5, else the endpoint if it can.
        assert_eq!(l.place(B, Instant(12 * MS), PeerRoom::Available, EndpointFallback::Allowed), Decision::Remote);
        assert_eq!(l.place(B, Instant(12 * MS), PeerRoom::None, EndpointFallback::Allowed), Decision::Endpoint);
        // 6: else stop-and-launch in the least-loaded running region.
        assert_eq!(
            l.place(B, Instant(12 * MS), PeerRoom::None, EndpointFallback::Never),
            Decision::ContextSwitch { region: 1, evicted: A }
        );
        assert_eq!(l.regions()[1], RegionState::Launching { chain: B, ready_at: Instant(17 * MS) });
    }

    #[test]
    fn a_victim_hit_avoids_a_launch_and_victims_go_first_when_evicting() {
        let mut l = launcher(2);
        l.place(A, Instant(0), PeerRoom::None, EndpointFallback::Never);
        l.place(B, Instant(0), PeerRoom::None, EndpointFallback::Never);
        l.tick(Instant(5 * MS));
        // A is no longer needed: it stays loaded as a victim.
        l.deschedule(0, Instant(6 * MS));
        assert_eq!(l.place(A, Instant(7 * MS), PeerRoom::None, EndpointFallback::Never), Decision::Resume { region: 0 }, "no launch");
        assert!(matches!(l.regions()[0], RegionState::Running { chain: A, .. }));
        // With A a victim again, a new chain C evicts the victim, not the running B.
        l.deschedule(0, Instant(8 * MS));
        l.set_load(1, 0.0);
        assert_eq!(l.place(C, Instant(9 * MS), PeerRoom::None, EndpointFallback::Never), Decision::ContextSwitch { region: 0, evicted: A });
        // Now A is gone: it needs a launch again (here, a context switch of the least loaded).
        l.tick(Instant(14 * MS));
        l.set_load(0, 0.9);
        l.set_load(1, 0.2);
        assert_eq!(
            l.place(A, Instant(15 * MS), PeerRoom::None, EndpointFallback::Never),
            Decision::ContextSwitch { region: 1, evicted: B }
        );
    }

    #[test]
    fn prelaunch_and_scale_out_never_stop_a_running_chain() {
        let mut l = launcher(3);
        assert_eq!(l.prelaunch(A, Instant(0)), Some(0));
        assert_eq!(l.prelaunch(B, Instant(0)), Some(1));
        l.tick(Instant(5 * MS));
        // Scale-out of A: the free region.
        assert_eq!(l.scale_out(A, Instant(6 * MS)), Some(Decision::Launch { region: 2 }));
        assert_eq!(l.prelaunch(C, Instant(6 * MS)), None, "no free region: C waits for on-demand");
        l.set_running(2);
        assert!(!l.has_room());
        assert_eq!(l.scale_out(A, Instant(7 * MS)), None, "B keeps running");
        // A's second instance is descheduled: a later scale-out resumes it, no launch.
        l.deschedule(2, Instant(8 * MS));
        assert!(l.has_room());
        assert_eq!(l.scale_out(A, Instant(9 * MS)), Some(Decision::Resume { region: 2 }));
        // B's instance is descheduled: A may take its region (the victim is replaced).
        l.deschedule(1, Instant(10 * MS));
        assert_eq!(l.scale_out(A, Instant(11 * MS)), Some(Decision::ContextSwitch { region: 1, evicted: B }));
        // All launching: an on-demand request cannot be decided yet.
        let mut l = launcher(1);
        l.place(A, Instant(0), PeerRoom::None, EndpointFallback::Never);
        assert_eq!(l.place(B, Instant(MS), PeerRoom::None, EndpointFallback::Never), Decision::Busy);
    }

    #[test]
    fn a_launch_not_yet_reported_running_is_never_evicted_even_when_due() {
        // The node installs a launch when its time comes, in its own poll; packets of another
        // chain may be decided first at that very instant. The region's chain is not running
        // yet: evicting it would leave the driver's instance running untracked.
        let mut l = launcher(2);
        assert_eq!(l.place(A, Instant(0), PeerRoom::None, EndpointFallback::Never), Decision::Launch { region: 0 });
        assert_eq!(l.place(B, Instant(0), PeerRoom::None, EndpointFallback::Never), Decision::Launch { region: 1 });
        l.set_running(1);
        l.set_load(1, 0.5);
        // At 5 ms A's launch is due but not reported running: C evicts B, the running chain.
        assert_eq!(l.place(C, Instant(5 * MS), PeerRoom::None, EndpointFallback::Never), Decision::ContextSwitch { region: 1, evicted: B });
        assert!(matches!(l.regions()[0], RegionState::Launching { chain: A, .. }));
        // Reported running, A is a candidate like any other.
        l.set_running(0);
        assert_eq!(l.place(B, Instant(6 * MS), PeerRoom::None, EndpointFallback::Never), Decision::ContextSwitch { region: 0, evicted: A });
    }

    #[test]
    fn the_least_recent_victim_is_evicted_first() {
        let mut l = launcher(3);
        for c in [A, B, C] {
            l.place(c, Instant(0), PeerRoom::None, EndpointFallback::Never);
        }
        l.tick(Instant(5 * MS));
        l.deschedule(1, Instant(6 * MS));
        l.deschedule(2, Instant(7 * MS));
        l.deschedule(0, Instant(8 * MS));
        assert_eq!(
            l.place(ChainId(9), Instant(9 * MS), PeerRoom::None, EndpointFallback::Never),
            Decision::ContextSwitch { region: 1, evicted: B }
        );
    }
}
