//! One node's elasticity policy (paper 000 §4.3–§4.4): its regions, where a chain runs when
//! packets need it, and when a chain gets an instance more or one fewer.
//!
//! [`Elasticity`] composes the [`Launcher`] (what each region holds; the on-demand order), the
//! [`Autoscaler`] (scale events on load held for a whole MONITOR_PERIOD) and the
//! [`Rechainer`] (which of a DAG's chain candidates it runs as, with the pressure on regions)
//! with what they need from a node, on one MONITOR_PERIOD: each chain's load, smoothed ([`LoadSmoother`]), split over the regions
//! that run it; which chains the tenant's endpoint can run; and which instance a scale-in
//! stops. The daemon's data plane and the simulator drive this one machine: they report loads
//! once an epoch and a chain's region emptying, and carry out the [`Act`]s it returns (build
//! and start a region, resume a victim, stop an instance). What they keep is what only they
//! have: the regions' NTs and their state, the packets, the threads.
//!
//! The rules a driver used to make on its own, now made here once:
//! - a chain's instances, for the auto-scaler, are the regions running it or launching it (a
//!   launch under way counts as capacity on its way, so a load it will carry is not asked for
//!   twice) — but while one of its instances is launching, a chain is never under-loaded nor
//!   idle (the packets waiting for the launch are not idleness);
//! - a scale-in stops the chain's most recently started region (the longer-lived instances keep
//!   their flows);
//! - a region whose chain has stopped becomes a victim or is freed ([`Elasticity::stopped`]).

use crate::autoscale::{AutoscaleConfig, Autoscaler, LoadSmoother, Scale};
use crate::ids::ChainId;
use crate::launcher::{Decision, Launcher, LauncherConfig, RegionState};
pub use crate::launcher::{EndpointFallback, PeerRoom};
use crate::rechain::{DagView, Rechainer, Switch};
use crate::time::Instant;
use core::time::Duration;

/// Elasticity parameters (node.yaml's `elastic:` block; a scenario's region and launch keys).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ElasticConfig {
    /// Regions on the node. 0: no region limit and no elasticity (every launch gets its own
    /// region, nothing is launched on demand or scaled).
    pub regions: usize,
    /// Emulated reconfiguration delay added to every launch (0; 5 ms = the paper's PR).
    pub launch_delay: Duration,
    /// Scale chains out and in with their load.
    pub autoscale: bool,
    /// Deschedule a chain with no load at all for a whole MONITOR_PERIOD (its last instance
    /// stops; a victim if `victims`).
    pub deschedule_idle: bool,
    /// MONITOR_PERIOD: how long an overload or underload must last before a scale event (never
    /// shorter than a launch).
    pub monitor_period: Duration,
    /// Load per instance (fraction of its throughput) above which it counts as overloaded.
    pub high: f64,
    /// A running instance below this load is shared with a new tenant rather than launching.
    pub share_below: f64,
    /// Keep descheduled chains loaded as victims (the victim cache); off: free their regions.
    pub victims: bool,
    /// Switch DAGs that have a compact form between it and their planned chains with the
    /// pressure on regions (`crate::rechain`).
    pub rechain: bool,
}

impl Default for ElasticConfig {
    fn default() -> Self {
        let scale = AutoscaleConfig::default();
        ElasticConfig {
            regions: 0,
            launch_delay: Duration::ZERO,
            autoscale: false,
            deschedule_idle: scale.deschedule_idle,
            monitor_period: scale.monitor_period,
            high: scale.high,
            share_below: LauncherConfig::default().share_below,
            victims: true,
            rechain: true,
        }
    }
}

/// What the driver must do after an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Scale out by resuming the chain's victim in `region` (no launch).
    Resume {
        /// The chain.
        chain: ChainId,
        /// Its region.
        region: usize,
    },
    /// Scale out by launching the chain into `region`; if `evict` names a chain, that chain's
    /// victim holds the region and goes first.
    Launch {
        /// The chain.
        chain: ChainId,
        /// The region.
        region: usize,
        /// A victim to evict from the region first.
        evict: Option<ChainId>,
    },
    /// Stop the chain's instance in `region` (its flows move to the others); report the region
    /// with [`Elasticity::stopped`] once it has finished what it held. `last`: it was the
    /// chain's only instance (an idle chain descheduled).
    Stop {
        /// The chain.
        chain: ChainId,
        /// The region.
        region: usize,
        /// The chain's last instance.
        last: bool,
    },
}

/// One node's elasticity policy. See the module docs.
#[derive(Debug, Clone)]
pub struct Elasticity {
    cfg: ElasticConfig,
    launcher: Launcher,
    scaler: Autoscaler,
    /// Per chain: its load as auto-scaling watches it (instances' worth).
    load: Vec<LoadSmoother>,
    /// Per chain: the tenant's endpoint can run it.
    endpoint: Vec<EndpointFallback>,
    /// Per chain: its NTs' state cannot be split between instances (a cache, writes waiting
    /// for replicas): it never scales out.
    single: Vec<bool>,
    /// Per region: when its chain last started (launch asked for, or resumed).
    started: Vec<Instant>,
    shortfalls: u64,
    rechainer: Rechainer,
    /// `shortfalls` at the last rechaining epoch.
    shortfalls_seen: u64,
    /// Smoothed time to build a chain's NTs, ns (0 until one is built).
    build_ns: f64,
    /// The load smoothing's weight and the MONITOR_PERIOD it is for
    /// ([`crate::autoscale::smoothing_weight`], a `powf`: once per period change, not per
    /// chain per epoch).
    smoothing: (Duration, f64),
}

/// Weight of the newest build in the smoothed build time.
const BUILD_SMOOTHING: f64 = 0.25;

/// A DAG's switch between chain candidates not drained after this many MONITOR_PERIODs (and
/// at least [`SWITCH_TIMEOUT_FLOOR`]) is given up.
pub const SWITCH_TIMEOUT_PERIODS: u32 = 20;

/// The shortest time a switch is given to drain.
pub const SWITCH_TIMEOUT_FLOOR: Duration = Duration::from_millis(100);

impl Elasticity {
    /// A node's regions, all free.
    pub fn new(cfg: ElasticConfig) -> Self {
        let scaler = Autoscaler::new(AutoscaleConfig {
            monitor_period: cfg.monitor_period,
            high: cfg.high,
            launch_time: cfg.launch_delay,
            deschedule_idle: cfg.deschedule_idle,
            scale: cfg.autoscale,
        });
        Elasticity {
            // On the auto-scaler's MONITOR_PERIOD (raised to the launch time if shorter).
            rechainer: Rechainer::new(scaler.config().monitor_period, cfg.high),
            shortfalls_seen: 0,
            build_ns: 0.0,
            smoothing: (scaler.config().monitor_period, crate::autoscale::smoothing_weight(scaler.config().monitor_period)),
            launcher: Launcher::new(LauncherConfig { share_below: cfg.share_below, launch_time: cfg.launch_delay }, cfg.regions),
            scaler,
            load: Vec::new(),
            endpoint: Vec::new(),
            single: Vec::new(),
            started: vec![Instant::ZERO; cfg.regions],
            shortfalls: 0,
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ElasticConfig {
        &self.cfg
    }

    /// True when regions are limited and chains come and go.
    #[inline]
    pub fn on(&self) -> bool {
        self.cfg.regions > 0
    }

    /// The regions, as the launch policy sees them.
    pub fn regions(&self) -> &[RegionState] {
        self.launcher.regions()
    }

    /// The effective MONITOR_PERIOD (never shorter than a launch, as measured).
    pub fn monitor_period(&self) -> Duration {
        self.scaler.config().monitor_period
    }

    /// Times packets needed a region and none was free (a context switch, the endpoint
    /// fallback, or nothing at all): the pressure on regions.
    pub fn shortfalls(&self) -> u64 {
        self.shortfalls
    }

    /// A chain id comes into use (or back into use): no load, no fallback, no scaling history.
    pub fn add_chain(&mut self, chain: ChainId) {
        let c = chain.index();
        if self.load.len() <= c {
            self.load.resize(c + 1, LoadSmoother::default());
            self.endpoint.resize(c + 1, EndpointFallback::Never);
            self.single.resize(c + 1, false);
        }
        self.load[c] = LoadSmoother::default();
        self.endpoint[c] = EndpointFallback::Never;
        self.single[c] = false;
        self.scaler.forget(chain);
    }

    /// Declares that `chain` runs as one instance at most: its NTs hold state that instances
    /// could not share (each would keep its own cache, and a write through one would not reach
    /// the others). Auto-scaling then never scales it out.
    pub fn set_single_instance(&mut self, chain: ChainId, yes: bool) {
        if let Some(s) = self.single.get_mut(chain.index()) {
            *s = yes;
        }
    }

    /// True if `chain` runs as one instance at most ([`Elasticity::set_single_instance`]).
    pub fn is_single_instance(&self, chain: ChainId) -> bool {
        self.single.get(chain.index()).copied().unwrap_or(false)
    }

    /// Declares whether the tenant's endpoint can run `chain` itself (its packets are then sent
    /// on unprocessed when no region can be found, before resorting to a context switch).
    pub fn set_endpoint_fallback(&mut self, chain: ChainId, fallback: EndpointFallback) {
        if let Some(e) = self.endpoint.get_mut(chain.index()) {
            *e = fallback;
        }
    }

    /// A chain's NTs were built in `ns` (measured on the node's work timer): a launch is
    /// expected to take the smoothed build time plus the emulated delay, and MONITOR_PERIOD
    /// never falls below it.
    pub fn built(&mut self, ns: u64) {
        let ns = ns as f64;
        self.build_ns = if self.build_ns == 0.0 { ns } else { self.build_ns + BUILD_SMOOTHING * (ns - self.build_ns) };
        self.set_launch_time(self.cfg.launch_delay + Duration::from_nanos(self.build_ns as u64));
    }

    /// The smoothed build time of a chain's NTs, ns.
    pub fn build_ns(&self) -> f64 {
        self.build_ns
    }

    /// How long a DAG's switch between chain candidates may take to drain before it is given up.
    pub fn switch_timeout(&self) -> Duration {
        (self.monitor_period() * SWITCH_TIMEOUT_PERIODS).max(SWITCH_TIMEOUT_FLOOR)
    }

    /// A launch is expected to take `t`: launches are planned with it and MONITOR_PERIOD never
    /// falls below it.
    pub fn set_launch_time(&mut self, t: Duration) {
        self.launcher.set_launch_time(t);
        self.scaler.set_launch_time(t);
        self.rechainer.set_monitor_period(self.scaler.config().monitor_period);
    }

    /// One epoch of rechaining: `dags` are the DAGs that have a compact form. The pressure on
    /// regions is the shortfalls since the last call. Returns the switch due, if any.
    pub fn rechain(&mut self, now: Instant, dags: &[DagView]) -> Option<Switch> {
        let pressure = self.shortfalls > self.shortfalls_seen;
        self.shortfalls_seen = self.shortfalls;
        self.rechainer.observe(now, pressure, self.launcher.unused(), dags)
    }

    /// A switch the policy did not decide (an operator's) happened at `now`: the next waits a
    /// whole MONITOR_PERIOD.
    pub fn switched(&mut self, now: Instant) {
        self.rechainer.switched(now);
    }

    /// True if a launch could take a region without stopping a running chain (a free one, or
    /// a victim's).
    pub fn has_room(&self) -> bool {
        self.launcher.has_room()
    }

    /// A chain starts in `region` at `now` (a launch asked for, or a victim resumed): it is
    /// the newest there (a scale-in stops it first), and no context switch stops it for a
    /// MONITOR_PERIOD.
    fn start(&mut self, region: usize, now: Instant) {
        self.started[region] = now;
        self.launcher.hold(region, now + self.scaler.config().monitor_period);
    }

    /// A chain starts in a region if the launcher's decision `d` put it there.
    fn started_by(&mut self, d: Decision, now: Instant) {
        if let Decision::Resume { region } | Decision::Launch { region } | Decision::ContextSwitch { region, .. } = d {
            self.start(region, now);
        }
    }

    /// Regions a launch could take without stopping a running chain: free ones and victims
    /// (what a node reports to its pool as free).
    pub fn unused(&self) -> usize {
        self.launcher.unused()
    }

    /// A peer asks this node to host `chain` (paper §5: the peer "launches the chain in one of
    /// its own free regions"): a victim of it resumes, else it launches into a free region or a
    /// victim's — never stopping a running chain, as its load report promised. `None`: no room
    /// (the peer is refused).
    pub fn host(&mut self, chain: ChainId, now: Instant) -> Option<Decision> {
        let d = self.launcher.scale_out(chain, now)?;
        self.started_by(d, now);
        Some(d)
    }

    /// Pre-launch at deploy: `chain` takes a free region if there is one (never evicts).
    pub fn prelaunch(&mut self, chain: ChainId, now: Instant) -> Option<usize> {
        let region = self.launcher.prelaunch(chain, now)?;
        self.start(region, now);
        Some(region)
    }

    /// Packets need `chain`, which has no active instance: the paper's on-demand order (share
    /// or resume what is loaded, a free region, the pool, the tenant's endpoint, last a context
    /// switch), applied to the regions. `remote`: whether a peer has room for it.
    pub fn on_demand(&mut self, chain: ChainId, now: Instant, remote: PeerRoom) -> Decision {
        let endpoint = self.endpoint.get(chain.index()).copied().unwrap_or_default();
        let room = self.launcher.has_room();
        let decision = self.launcher.place(chain, now, remote, endpoint);
        match decision {
            Decision::ContextSwitch { .. } | Decision::Remote | Decision::Endpoint | Decision::Busy if !room => self.shortfalls += 1,
            _ => {}
        }
        self.started_by(decision, now);
        decision
    }

    /// Launches that were due by `now` run (for a driver whose launches take exactly the
    /// launch time, as the simulator's do).
    pub fn tick(&mut self, now: Instant) {
        self.launcher.tick(now);
    }

    /// The driver has built the NTs for the launch into `region`, asked for at `requested`:
    /// it runs at `requested` plus the launch delay (the build took its own time).
    pub fn launch_begins(&mut self, region: usize, requested: Instant) {
        self.launcher.launch_from(region, requested + self.cfg.launch_delay);
    }

    /// When the launch into `region` runs (`None`: none is under way there).
    pub fn launch_ready_at(&self, region: usize) -> Option<Instant> {
        self.launcher.ready_at(region)
    }

    /// The driver finished launching `region`.
    pub fn running(&mut self, region: usize) {
        self.launcher.set_running(region);
    }

    /// `region` is empty again (its launch failed, or its chain went away).
    pub fn free(&mut self, region: usize) {
        self.launcher.free(region);
    }

    /// The instance in `region` stopped and finished what it held: it stays loaded as a victim
    /// if victims are kept and the driver would `keep` it (its chain is still wanted), else the
    /// region is freed. Returns true if it is a victim.
    pub fn stopped(&mut self, region: usize, now: Instant, keep: bool) -> bool {
        if keep && self.cfg.victims {
            self.launcher.deschedule(region, now);
            true
        } else {
            self.launcher.free(region);
            false
        }
    }

    /// Since when `chain` has been overloaded (its load above what its instances carry before
    /// they count as overloaded), if it is.
    pub fn over_since(&self, chain: ChainId) -> Option<Instant> {
        self.scaler.over_since(chain)
    }

    /// What `chain`'s instances carry before they count as overloaded (instances' worth).
    pub fn capacity(&self, chain: ChainId) -> f64 {
        self.instances(chain) as f64 * self.cfg.high
    }

    /// `chain`'s smoothed load (instances' worth).
    pub fn smoothed_load(&self, chain: ChainId) -> f64 {
        self.load.get(chain.index()).map_or(0.0, LoadSmoother::smoothed)
    }

    /// The regions running or launching `chain`: its instances, as the auto-scaler counts them.
    pub fn instances(&self, chain: ChainId) -> usize {
        let (running, launching) = self.held_by(chain);
        running + launching
    }

    /// The regions running `chain`, and those launching it.
    fn held_by(&self, chain: ChainId) -> (usize, usize) {
        self.regions().iter().fold((0, 0), |(r, l), s| match *s {
            RegionState::Running { chain: c, .. } if c == chain => (r + 1, l),
            RegionState::Launching { chain: c, .. } if c == chain => (r, l + 1),
            _ => (r, l),
        })
    }

    /// One epoch of `chain`: `load` is what it carried, in instances' worth (0 only if nothing
    /// arrived). Smooths it, gives each region running the chain its share (the launch policy
    /// weighs it), asks the auto-scaler, and pushes what is to be done onto `acts`.
    pub fn epoch(&mut self, now: Instant, chain: ChainId, load: f64, acts: &mut Vec<Act>) {
        let Some(smoother) = self.load.get_mut(chain.index()) else { return };
        // (The meter reads exactly 0 only if nothing arrived.)
        let arrived = load > 0.0;
        let period = self.scaler.config().monitor_period;
        if self.smoothing.0 != period {
            self.smoothing = (period, crate::autoscale::smoothing_weight(period));
        }
        let load = smoother.update(load, self.smoothing.1);
        let (running, launching) = self.held_by(chain);
        let instances = running + launching;
        if instances == 0 {
            // Nothing runs it: packets that come launch it on demand.
            return;
        }
        self.scaler.set_launching(chain, launching > 0);
        // The launcher weighs a region whose chain got nothing this epoch as unloaded (when it
        // must stop a chain, such a region goes first: Fig. 13's victim choice).
        let share = if arrived { load / instances as f64 } else { 0.0 };
        for region in 0..self.regions().len() {
            if matches!(self.regions()[region], RegionState::Running { chain: c, .. } if c == chain) {
                self.launcher.set_load(region, share);
            }
        }
        match self.scaler.observe(now, chain, load, arrived, instances, self.launcher.has_room()) {
            // As many as there are regions for (each launch takes one).
            Some(Scale::Out(_, n)) if !self.is_single_instance(chain) => {
                for _ in 0..n {
                    let (region, act) = match self.launcher.scale_out(chain, now) {
                        Some(Decision::Resume { region }) => (region, Act::Resume { chain, region }),
                        Some(Decision::Launch { region }) => (region, Act::Launch { chain, region, evict: None }),
                        Some(Decision::ContextSwitch { region, evicted }) => (region, Act::Launch { chain, region, evict: Some(evicted) }),
                        _ => break,
                    };
                    self.start(region, now);
                    acts.push(act);
                }
            }
            Some(Scale::In(_)) => {
                let newest = (0..self.regions().len())
                    .filter(|&r| matches!(self.regions()[r], RegionState::Running { chain: c, .. } if c == chain))
                    .max_by_key(|&r| (self.started[r], r));
                if let Some(region) = newest {
                    acts.push(Act::Stop { chain, region, last: instances == 1 });
                }
            }
            // A single-instance chain stays at one, however loaded (fair sharing limits what
            // it is offered).
            Some(Scale::Out(..)) | None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ChainId = ChainId(0);
    const B: ChainId = ChainId(1);
    const MS: u64 = 1_000_000;

    fn elastic(regions: usize) -> Elasticity {
        let mut e = Elasticity::new(ElasticConfig {
            regions,
            autoscale: true,
            monitor_period: Duration::from_millis(5),
            ..ElasticConfig::default()
        });
        e.add_chain(A);
        e.add_chain(B);
        e
    }

    /// Runs epochs of 1 ms from `from` with a constant load until an act comes out.
    fn until_act(e: &mut Elasticity, from: u64, chain: ChainId, load: f64) -> (u64, Vec<Act>) {
        let mut acts = Vec::new();
        for t in from..from + 100 {
            e.epoch(Instant(t * MS), chain, load, &mut acts);
            if !acts.is_empty() {
                return (t, acts);
            }
        }
        panic!("no act in 100 epochs");
    }

    #[test]
    fn an_overload_held_a_period_launches_what_it_needs_and_a_launch_under_way_counts() {
        let mut e = elastic(4);
        let r0 = e.prelaunch(A, Instant::ZERO).unwrap();
        e.running(r0);
        // 2.5 instances' worth on one: two more, after one period (the smoothing ramps up).
        let (t, acts) = until_act(&mut e, 0, A, 2.5);
        assert_eq!(acts.len(), 2, "{acts:?}");
        assert!(acts.iter().all(|a| matches!(a, Act::Launch { chain: A, evict: None, .. })));
        assert_eq!(e.instances(A), 3, "launching regions count as instances");
        // While they launch, the same load asks for nothing more: three instances carry it.
        let mut more = Vec::new();
        for u in t + 1..t + 30 {
            e.epoch(Instant(u * MS), A, 2.5, &mut more);
        }
        assert!(more.is_empty(), "{more:?}");
    }

    #[test]
    fn a_single_instance_chain_is_never_scaled_out() {
        let mut e = elastic(4);
        e.set_single_instance(A, true);
        let r0 = e.prelaunch(A, Instant::ZERO).unwrap();
        e.running(r0);
        let mut acts = Vec::new();
        for t in 0..100 {
            e.epoch(Instant(t * MS), A, 2.5, &mut acts);
        }
        assert!(acts.is_empty(), "{acts:?}");
        assert_eq!(e.instances(A), 1);
        // Declared again (its id reused for another chain): it scales again.
        e.add_chain(A);
        let (_, acts) = until_act(&mut e, 100, A, 2.5);
        assert!(acts.iter().all(|a| matches!(a, Act::Launch { chain: A, .. })), "{acts:?}");
    }

    /// Found by the daemon's spill test: a chain offered 20 times what it carries, in packets
    /// that arrive in one epoch of ten (a few thousand packets a second, epochs of 100 µs),
    /// never scaled out — each epoch without an arrival read as idle and reset the overload
    /// watch. It scales out after a period; and a chain idle for a period is still descheduled.
    #[test]
    fn an_overload_in_sparse_bursts_scales_out_and_idleness_is_no_arrival_at_all() {
        let mut e = elastic(4);
        let r0 = e.prelaunch(A, Instant::ZERO).unwrap();
        e.running(r0);
        let mut acts = Vec::new();
        // Epochs of 100 µs; one in ten carries 200 instances' worth (20 on average).
        let t = (0..200u64).find(|&t| {
            e.epoch(Instant(t * MS / 10), A, if t % 10 == 0 { 200.0 } else { 0.0 }, &mut acts);
            !acts.is_empty()
        });
        let t = t.unwrap_or_else(|| panic!("never scaled out: {acts:?}"));
        assert!(t * MS / 10 >= 5 * MS, "not before a whole period ({t} epochs)");
        assert!(acts.len() == 3 && acts.iter().all(|a| matches!(a, Act::Launch { chain: A, .. })), "{acts:?}");
        // Chain B, running alone on a region, gets nothing at all for a period: descheduled.
        let mut e = elastic(4);
        let r = e.prelaunch(B, Instant::ZERO).unwrap();
        e.running(r);
        e.epoch(Instant::ZERO, B, 0.5, &mut acts);
        acts.clear();
        let (_, acts) = until_act(&mut e, 1, B, 0.0);
        assert_eq!(acts, vec![Act::Stop { chain: B, region: r, last: true }]);
    }

    #[test]
    fn a_scale_in_stops_the_most_recently_started_region_and_keeps_it_as_a_victim() {
        let mut e = elastic(4);
        let r0 = e.prelaunch(A, Instant::ZERO).unwrap();
        e.running(r0);
        let (t, acts) = until_act(&mut e, 0, A, 1.5);
        let Act::Launch { region: r1, .. } = acts[0] else { panic!("{acts:?}") };
        e.running(r1);
        // The load falls to fit one instance: the newer region stops.
        let (t, acts) = until_act(&mut e, t + 1, A, 0.3);
        assert_eq!(acts, vec![Act::Stop { chain: A, region: r1, last: false }]);
        assert!(e.stopped(r1, Instant(t * MS), true));
        assert!(matches!(e.regions()[r1], RegionState::Victim { chain: A, .. }));
        // Idle for a period: the last one is descheduled too.
        let (_, acts) = until_act(&mut e, t + 1, A, 0.0);
        assert_eq!(acts, vec![Act::Stop { chain: A, region: r0, last: true }]);
    }

    /// Found by `snic bench launch --delay-ms 3` on a loaded machine: a chain launched on demand
    /// for a packet, whose launch took longer than MONITOR_PERIOD, was descheduled the moment
    /// it ran — its load read 0 while the packet waited for the launch.
    #[test]
    fn a_chain_is_not_idle_while_it_launches() {
        // Whenever the launch completes (after 1 to 30 epochs of 1 ms, MONITOR_PERIOD 5 ms),
        // the chain is not stopped before it has been idle a whole period while running.
        for ready in 1..30u64 {
            let mut e = elastic(1);
            assert_eq!(e.on_demand(A, Instant::ZERO, PeerRoom::None), Decision::Launch { region: 0 });
            let mut acts = Vec::new();
            for t in 0..ready + 5 {
                if t == ready {
                    e.running(0);
                }
                e.epoch(Instant(t * MS), A, if t == 0 { 1.0 } else { 0.0 }, &mut acts);
                assert!(acts.is_empty(), "launch done at {ready} ms: stopped at {t} ms: {acts:?}");
            }
            let (_, acts) = until_act(&mut e, ready + 5, A, 0.0);
            assert_eq!(acts, vec![Act::Stop { chain: A, region: 0, last: true }]);
        }
    }

    #[test]
    fn scale_out_resumes_a_victim_of_the_chain_before_launching_and_evicts_another_chains_last() {
        let mut e = elastic(2);
        let ra = e.prelaunch(A, Instant::ZERO).unwrap();
        let rb = e.prelaunch(B, Instant::ZERO).unwrap();
        e.running(ra);
        e.running(rb);
        // B goes idle and becomes a victim; A then needs a second instance: B's region.
        let (t, acts) = until_act(&mut e, 0, B, 0.0);
        assert_eq!(acts, vec![Act::Stop { chain: B, region: rb, last: true }]);
        e.stopped(rb, Instant(t * MS), true);
        let (_, acts) = until_act(&mut e, 0, A, 1.5);
        assert_eq!(acts, vec![Act::Launch { chain: A, region: rb, evict: Some(B) }]);
    }

    #[test]
    fn on_demand_counts_a_shortfall_only_when_no_region_is_free_and_honours_the_endpoint() {
        let mut e = elastic(1);
        assert_eq!(e.on_demand(A, Instant::ZERO, PeerRoom::None), Decision::Launch { region: 0 });
        e.running(0);
        assert_eq!(e.shortfalls(), 0);
        e.set_endpoint_fallback(B, EndpointFallback::Allowed);
        assert_eq!(e.on_demand(B, Instant(MS), PeerRoom::None), Decision::Endpoint);
        assert_eq!(e.shortfalls(), 1);
        assert_eq!(e.on_demand(B, Instant(MS), PeerRoom::Available), Decision::Remote, "a peer with room comes before the endpoint");
        e.set_endpoint_fallback(B, EndpointFallback::Never);
        // A stops no earlier than a MONITOR_PERIOD after it started: the packets wait till then.
        assert_eq!(e.on_demand(B, Instant(2 * MS), PeerRoom::None), Decision::Busy);
        assert_eq!(e.on_demand(B, Instant(5 * MS), PeerRoom::None), Decision::ContextSwitch { region: 0, evicted: A });
        assert_eq!(e.shortfalls(), 4);
    }

    /// Found by the pool simulator: with more chains needing regions than there are, each chain
    /// that finished its launch had measured no load yet — the least loaded — and the next
    /// context switch stopped it before it ran a packet: a livelock in which no chain ran at
    /// all. A chain now runs a MONITOR_PERIOD before a context switch may stop it, so every
    /// chain runs in turn.
    #[test]
    fn chains_that_outnumber_the_regions_take_turns_and_each_runs_before_it_is_stopped() {
        let mut e = elastic(1);
        let mut ran = [0u64; 2];
        for t in 0..100u64 {
            let now = Instant(t * MS);
            e.tick(now);
            for (i, c) in [A, B].into_iter().enumerate() {
                if e.instances(c) == 0 {
                    e.on_demand(c, now, PeerRoom::None);
                }
                if matches!(e.regions()[0], RegionState::Running { chain, .. } if chain == c) {
                    ran[i] += 1;
                }
            }
        }
        // Launches take no time here; each start holds the region for 5 ms.
        assert!(ran[0] >= 40 && ran[1] >= 40, "each ran about half the time: {ran:?}");
    }
}
