//! NT auto-scaling (paper 000 §4.4): add instances of a chain when its load has exceeded what
//! its instances carry for a whole MONITOR_PERIOD and a region is free — as many as that load
//! needs (the paper's monitor identifies "the load they are expected to handle"), so a spike of
//! several instances' worth is met after one period, not one period per instance; remove one
//! when the load
//! has fit one instance fewer for a whole MONITOR_PERIOD. Persistent changes only — a spike
//! shorter than the period changes nothing — and at most one scale event per chain per period,
//! so the instance count cannot oscillate faster than launches complete (MONITOR_PERIOD is never
//! shorter than the launch time). A chain with no load at all for a whole period is
//! descheduled (its last instance stops; the driver keeps it as a victim until its region is
//! needed). Sans-IO: the driver reports loads with `now`.

use crate::ids::ChainId;
use crate::time::Instant;
use core::time::Duration;

/// Auto-scaler parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoscaleConfig {
    /// MONITOR_PERIOD (raised to `launch_time` if shorter).
    pub monitor_period: Duration,
    /// Load an instance may carry before it counts as overloaded (fraction of its capacity).
    pub high: f64,
    /// The time a launch takes (measured instantiation plus emulated reconfiguration).
    pub launch_time: Duration,
    /// Deschedule a chain's last instance once it has had no load for a whole period.
    pub deschedule_idle: bool,
    /// Scale out and in (false: only idle chains are descheduled).
    pub scale: bool,
}

impl Default for AutoscaleConfig {
    /// MONITOR_PERIOD 5 ms, the paper's default (its measured reconfiguration time).
    fn default() -> Self {
        AutoscaleConfig {
            monitor_period: Duration::from_millis(5),
            high: 0.9,
            launch_time: Duration::ZERO,
            deschedule_idle: true,
            scale: true,
        }
    }
}

/// A decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Launch this many more instances of the chain (at least one: enough for its load at
    /// `high` per instance; the driver launches as many as it has regions for).
    Out(ChainId, usize),
    /// Stop one instance of the chain (its flows move to the others; the last instance of an
    /// idle chain is descheduled).
    In(ChainId),
}

#[derive(Debug, Clone, Copy, Default)]
struct Watch {
    over_since: Option<Instant>,
    under_since: Option<Instant>,
    last_event: Option<Instant>,
    /// An instance of the chain is being launched.
    launching: bool,
}

/// Weight of the newest epoch in a chain's smoothed load at the paper's MONITOR_PERIOD
/// ([`REFERENCE_PERIOD`]); see [`smoothing_weight`].
pub const LOAD_SMOOTHING: f64 = 0.25;

/// The MONITOR_PERIOD at which an epoch weighs [`LOAD_SMOOTHING`]: the paper's 5 ms.
pub const REFERENCE_PERIOD: Duration = Duration::from_millis(5);

/// The weight of the newest epoch in a chain's smoothed load under MONITOR_PERIOD `period`:
/// [`LOAD_SMOOTHING`] at 5 ms, and a window as much longer as the period is (`1 − 0.75^(5 ms /
/// period)`), so that the load watched for a period is averaged over a fixed fraction of it.
/// With a fixed weight, a node with a 1 s period judged its load over the last half
/// millisecond: a chain offered a few hundred packets a second read as many times overloaded
/// at each packet and idle between them, and the watch never held either way for a period.
pub fn smoothing_weight(period: Duration) -> f64 {
    let p = period.as_secs_f64();
    if p <= 0.0 {
        return 1.0;
    }
    1.0 - (1.0 - LOAD_SMOOTHING).powf(REFERENCE_PERIOD.as_secs_f64() / p)
}

/// A chain's load as the auto-scaler watches it: smoothed over epochs, idle epochs included
/// (so that one epoch's burst or lull does not count as a trend), with the weight
/// [`smoothing_weight`] gives its MONITOR_PERIOD. An epoch is short (100 µs by default): a
/// chain offered a few thousand packets a second has many epochs with no arrival, and reading
/// each of those as idle reset the overload watch every few epochs, so that a chain offered
/// many times what it carries never scaled out. Idleness is watched apart: an epoch with no
/// arrival at all ([`Autoscaler::observe`]'s `arrived`).
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadSmoother {
    smoothed: f64,
}

impl LoadSmoother {
    /// Folds in one epoch's load (instances' worth) with weight `weight` and returns the
    /// smoothed load.
    pub fn update(&mut self, raw: f64, weight: f64) -> f64 {
        self.smoothed += weight * (raw - self.smoothed);
        self.smoothed
    }

    /// The smoothed load.
    pub fn smoothed(&self) -> f64 {
        self.smoothed
    }
}

/// Per-chain load watch. See the module docs.
#[derive(Debug, Clone)]
pub struct Autoscaler {
    cfg: AutoscaleConfig,
    chains: Vec<Watch>,
}

impl Autoscaler {
    /// An auto-scaler; MONITOR_PERIOD is raised to the launch time if shorter.
    pub fn new(mut cfg: AutoscaleConfig) -> Self {
        cfg.monitor_period = cfg.monitor_period.max(cfg.launch_time);
        Autoscaler { cfg, chains: Vec::new() }
    }

    /// The time a launch takes, as measured: MONITOR_PERIOD is raised to it if shorter.
    pub fn set_launch_time(&mut self, t: Duration) {
        self.cfg.launch_time = t;
        self.cfg.monitor_period = self.cfg.monitor_period.max(t);
    }

    /// The effective parameters.
    pub fn config(&self) -> &AutoscaleConfig {
        &self.cfg
    }

    /// Forgets what was watched of `chain` (it went away; its id may come back as another).
    pub fn forget(&mut self, chain: ChainId) {
        if let Some(w) = self.chains.get_mut(chain.index()) {
            *w = Watch::default();
        }
    }

    /// Whether an instance of `chain` is being launched. While one is, the chain's load never
    /// counts as under-load: an instance still launching has had no chance to serve, and the
    /// packets that wait for it are not idleness (a chain launched on demand would otherwise be
    /// descheduled the moment it runs, its packets still waiting). Overload is still watched,
    /// with the launching instances counted.
    pub fn set_launching(&mut self, chain: ChainId, yes: bool) {
        let i = chain.index();
        if self.chains.len() <= i {
            self.chains.resize(i + 1, Watch::default());
        }
        self.chains[i].launching = yes;
    }

    /// Since when `chain` has been overloaded (its load above what its instances carry), if
    /// it is.
    pub fn over_since(&self, chain: ChainId) -> Option<Instant> {
        self.chains.get(chain.index()).and_then(|w| w.over_since)
    }

    /// `chain` carried `load` (smoothed, in instances' worth of work, e.g. 1.5 = one and a half
    /// instances) on `instances` running instances at `now`, and packets `arrived` for it this
    /// epoch or not; `free_region` says whether one more could be launched. Returns the scale
    /// event due, if any.
    pub fn observe(
        &mut self,
        now: Instant,
        chain: ChainId,
        load: f64,
        arrived: bool,
        instances: usize,
        free_region: bool,
    ) -> Option<Scale> {
        let i = chain.index();
        if self.chains.len() <= i {
            self.chains.resize(i + 1, Watch::default());
        }
        let (period, high) = (self.cfg.monitor_period, self.cfg.high);
        let w = &mut self.chains[i];
        let over = self.cfg.scale && load > instances as f64 * high;
        let under = if w.launching {
            false
        } else if instances > 1 {
            self.cfg.scale && load <= (instances - 1) as f64 * high
        } else {
            // Idle: nothing at all arrived.
            self.cfg.deschedule_idle && instances == 1 && !arrived
        };
        w.over_since = if over { w.over_since.or(Some(now)) } else { None };
        w.under_since = if under { w.under_since.or(Some(now)) } else { None };
        if w.last_event.is_some_and(|t| now.saturating_since(t) < period) {
            return None;
        }
        let held = |since: Option<Instant>| since.is_some_and(|t| now.saturating_since(t) >= period);
        let event = if held(w.over_since) && free_region {
            let need = (load / high).ceil() as usize;
            Some(Scale::Out(chain, need.saturating_sub(instances).max(1)))
        } else if held(w.under_since) {
            Some(Scale::In(chain))
        } else {
            None
        };
        if event.is_some() {
            *w = Watch { last_event: Some(now), launching: w.launching, ..Watch::default() };
        }
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: ChainId = ChainId(0);
    const MS: u64 = 1_000_000;

    /// Observes `load` (packets arrived if it is above 0).
    fn obs(s: &mut Autoscaler, now: Instant, c: ChainId, load: f64, instances: usize, free_region: bool) -> Option<Scale> {
        s.observe(now, c, load, load > 0.0, instances, free_region)
    }

    fn scaler() -> Autoscaler {
        Autoscaler::new(AutoscaleConfig {
            monitor_period: Duration::from_millis(10),
            high: 0.9,
            launch_time: Duration::from_millis(5),
            deschedule_idle: false,
            scale: true,
        })
    }

    #[test]
    fn scales_out_after_a_whole_period_overloaded_and_only_with_a_free_region() {
        let mut s = scaler();
        for t in 0..10 {
            assert_eq!(obs(&mut s, Instant(t * MS), C, 1.5, 1, true), None, "not yet a whole period");
        }
        assert_eq!(obs(&mut s, Instant(10 * MS), C, 1.5, 1, false), None, "no free region");
        assert_eq!(obs(&mut s, Instant(11 * MS), C, 1.5, 1, true), Some(Scale::Out(C, 1)));
        // A spike shorter than the period changes nothing.
        let mut s = scaler();
        for t in 0..9 {
            obs(&mut s, Instant(t * MS), C, 1.5, 1, true);
        }
        assert_eq!(obs(&mut s, Instant(9 * MS), C, 0.5, 1, true), None);
        assert_eq!(obs(&mut s, Instant(30 * MS), C, 0.5, 1, true), None);
    }

    #[test]
    fn scales_in_when_one_instance_fewer_has_fit_for_a_period() {
        let mut s = scaler();
        // 2 instances, load 1.2: does not fit in one (0.9): stays.
        for t in 0..30 {
            assert_eq!(obs(&mut s, Instant(t * MS), C, 1.2, 2, true), None);
        }
        // Load drops to 0.6: after a whole period, one instance goes.
        let mut ev = None;
        for t in 30..45 {
            ev = ev.or(obs(&mut s, Instant(t * MS), C, 0.6, 2, true));
        }
        assert_eq!(ev, Some(Scale::In(C)));
        // One instance is never scaled in.
        let mut s = scaler();
        assert!((0..50).all(|t| obs(&mut s, Instant(t * MS), C, 0.0, 1, true).is_none()));
    }

    #[test]
    fn a_square_wave_gives_at_most_one_event_per_period_and_no_flapping() {
        // Load alternates between 1.6 and 0.4 instances every 25 ms for 1 s; instances follow
        // the decisions.
        let mut s = scaler();
        let mut instances = 1usize;
        let mut events: Vec<(u64, Scale)> = Vec::new();
        for t in 0..1000u64 {
            let load = if (t / 25) % 2 == 0 { 1.6 } else { 0.4 };
            if let Some(e) = obs(&mut s, Instant(t * MS), C, load, instances, instances < 4) {
                instances = match e {
                    Scale::Out(_, n) => instances + n,
                    Scale::In(_) => instances - 1,
                };
                events.push((t, e));
            }
        }
        assert!(!events.is_empty());
        for w in events.windows(2) {
            assert!(w[1].0 - w[0].0 >= 10, "two events within one period: {events:?}");
        }
        // Each half-wave is 25 ms: at most one out and one in per 50 ms cycle.
        assert!(events.len() <= 2 * 1000 / 50, "{}", events.len());
        // Constant load right at the threshold: no events at all.
        let mut s = scaler();
        assert!((0..1000).all(|t| obs(&mut s, Instant(t * MS), C, 0.9, 1, true).is_none()));
    }

    #[test]
    fn a_spike_of_several_instances_worth_gets_them_after_one_period() {
        // One instance, then a held load of 4.5 instances' worth: ceil(4.5 / 0.9) = 5 needed.
        let mut s = scaler();
        let ev = (0..=10).filter_map(|t| obs(&mut s, Instant(t * MS), C, 4.5, 1, true)).next();
        assert_eq!(ev, Some(Scale::Out(C, 4)));
        // Just over what the instances carry: one more.
        let mut s = scaler();
        let ev = (0..=10).filter_map(|t| obs(&mut s, Instant(t * MS), C, 2.0, 2, true)).next();
        assert_eq!(ev, Some(Scale::Out(C, 1)));
    }

    #[test]
    fn an_idle_chain_is_descheduled_after_a_whole_period() {
        let mut s = Autoscaler::new(AutoscaleConfig { monitor_period: Duration::from_millis(10), ..Default::default() });
        assert_eq!(obs(&mut s, Instant(0), C, 0.0, 1, false), None);
        assert_eq!(obs(&mut s, Instant(5 * MS), C, 0.3, 1, false), None, "a packet resets the watch");
        assert_eq!(obs(&mut s, Instant(6 * MS), C, 0.0, 1, false), None);
        assert_eq!(obs(&mut s, Instant(15 * MS), C, 0.0, 1, false), None);
        assert_eq!(obs(&mut s, Instant(16 * MS), C, 0.0, 1, false), Some(Scale::In(C)));
    }

    /// The smoothed load averages over a fraction of MONITOR_PERIOD: the paper's weight at
    /// 5 ms; at 1 s, a chain that carries 100 packets a second, offered 20 in single packets
    /// 50 ms apart (each, in its 100-µs epoch, 100 instances' worth), reads under one
    /// instance throughout, and offered 2,000 in pairs each millisecond, over it throughout.
    #[test]
    fn the_load_is_smoothed_over_a_fraction_of_the_period() {
        assert_eq!(smoothing_weight(REFERENCE_PERIOD), LOAD_SMOOTHING);
        let w = smoothing_weight(Duration::from_secs(1));
        let run = |every: u64, raw: f64| {
            let mut l = LoadSmoother::default();
            // 10 s of 100-µs epochs; the range of the last 5 s.
            let (mut lo, mut hi) = (f64::MAX, 0.0f64);
            for e in 0..100_000u64 {
                let x = l.update(if e % every == 0 { raw } else { 0.0 }, w);
                if e >= 50_000 {
                    (lo, hi) = (lo.min(x), hi.max(x));
                }
            }
            (lo, hi)
        };
        let (_, hi) = run(500, 100.0);
        assert!(hi < 0.9, "20 packets a second read {hi}");
        let (lo, _) = run(10, 200.0);
        assert!(lo > 0.9, "2,000 packets a second read {lo}");
    }

    #[test]
    fn monitor_period_is_never_shorter_than_a_launch() {
        let s = Autoscaler::new(AutoscaleConfig {
            monitor_period: Duration::from_millis(1),
            launch_time: Duration::from_millis(5),
            ..Default::default()
        });
        assert_eq!(s.config().monitor_period, Duration::from_millis(5));
        // A launch measured slower than configured raises it too.
        let mut s = s;
        s.set_launch_time(Duration::from_millis(8));
        assert_eq!(s.config().monitor_period, Duration::from_millis(8));
    }
}
