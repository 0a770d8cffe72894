//! Endpoint workloads: the published Facebook memcached "ETC" distributions (Atikoglu et al.,
//! SIGMETRICS'12, as mutilate uses them), on/off spikes with a controllable correlation across
//! endpoints, and square waves — each endpoint's bytes per time bin, from a seeded generator
//! (same seed, same series).

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::Deserialize;

/// A generalized Pareto distribution (location, scale, shape).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpd {
    /// μ.
    pub loc: f64,
    /// σ.
    pub scale: f64,
    /// ξ.
    pub shape: f64,
}

/// A generalized extreme value distribution (location, scale, shape).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gev {
    /// μ.
    pub loc: f64,
    /// σ.
    pub scale: f64,
    /// ξ.
    pub shape: f64,
}

impl Gpd {
    /// A sample by inversion of the CDF, from `u` uniform in (0, 1].
    pub fn at(&self, u: f64) -> f64 {
        if self.shape == 0.0 {
            self.loc - self.scale * u.ln()
        } else {
            self.loc + self.scale * (u.powf(-self.shape) - 1.0) / self.shape
        }
    }

    /// The mean (finite for shape < 1).
    pub fn mean(&self) -> f64 {
        self.loc + self.scale / (1.0 - self.shape)
    }
}

impl Gev {
    /// A sample by inversion of the CDF, from `u` uniform in (0, 1).
    pub fn at(&self, u: f64) -> f64 {
        let t = -u.ln();
        if self.shape == 0.0 {
            self.loc - self.scale * t.ln()
        } else {
            self.loc + self.scale * (t.powf(-self.shape) - 1.0) / self.shape
        }
    }
}

/// ETC: key size in bytes.
pub const ETC_KEY: Gev = Gev { loc: 30.7984, scale: 8.20449, shape: 0.078688 };
/// ETC: value size in bytes.
pub const ETC_VALUE: Gpd = Gpd { loc: 0.0, scale: 214.476, shape: 0.348238 };
/// ETC: time between requests, µs.
pub const ETC_GAP_US: Gpd = Gpd { loc: 0.0, scale: 16.0292, shape: 0.154971 };

/// What each endpoint sends (the scenario's `[workload]`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    /// ETC requests (key + value bytes each), at `rate_scale` times ETC's request rate, with
    /// on/off spikes.
    Etc {
        /// Multiplies the request rate (1: ETC's, ≈ 52.7 k requests/s).
        #[serde(default = "one")]
        rate_scale: f64,
        /// Spikes.
        #[serde(default)]
        spikes: Spikes,
    },
    /// Replay of a CSV trace (`time_s, endpoint, bytes[, tenant]`; path relative to the
    /// working directory): endpoints in name order take the topology's places in order; places
    /// beyond the trace's endpoints are idle.
    Trace {
        /// The CSV file.
        file: String,
    },
    /// A trace once read (what `Trace` becomes before a run; not written in scenario files):
    /// each endpoint's bytes per bin, and its tenant if the trace names them.
    #[serde(skip)]
    Loaded {
        /// Bytes per bin, per endpoint.
        series: std::sync::Arc<Vec<Vec<f64>>>,
        /// Each endpoint's tenant, if the trace names them.
        tenants: std::sync::Arc<Vec<Option<String>>>,
    },
    /// A square wave of bytes per second, alternating every `half_period_ms`; endpoint k is
    /// shifted by `k × phase_ms`.
    Square {
        /// High level, bytes/s.
        high_bps: f64,
        /// Low level, bytes/s.
        low_bps: f64,
        /// Time at each level, ms.
        half_period_ms: f64,
        /// Shift between consecutive endpoints, ms.
        #[serde(default)]
        phase_ms: f64,
    },
}

fn one() -> f64 {
    1.0
}

/// On/off spikes: during a spike an endpoint sends `factor` times its rate. Spike and gap
/// lengths are exponential. With `correlation` c, each spike of a shared process is joined by
/// each endpoint with probability c, and each endpoint has spikes of its own at (1 − c) times
/// the rate: c = 1, every endpoint spikes together; c = 0, independently.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Spikes {
    /// Rate multiplier during a spike (1: no spikes).
    #[serde(default = "one")]
    pub factor: f64,
    /// Mean spike length, ms.
    #[serde(default = "default_on")]
    pub on_ms: f64,
    /// Mean time between spikes, ms.
    #[serde(default = "default_off")]
    pub off_ms: f64,
    /// 0..=1.
    #[serde(default)]
    pub correlation: f64,
}

fn default_on() -> f64 {
    50.0
}
fn default_off() -> f64 {
    500.0
}

impl Default for Spikes {
    fn default() -> Self {
        Spikes { factor: 1.0, on_ms: default_on(), off_ms: default_off(), correlation: 0.0 }
    }
}

/// Why a workload cannot be generated.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorkloadError {
    /// A parameter is out of range.
    #[error("workload.{0}: {1}")]
    Range(&'static str, &'static str),
}

impl Workload {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        use crate::{non_negative, positive as pos};
        match self {
            Workload::Etc { rate_scale, spikes } => {
                if !pos(*rate_scale) {
                    return Err(WorkloadError::Range("rate_scale", "must be positive"));
                }
                if !(spikes.factor.is_finite() && spikes.factor >= 1.0) {
                    return Err(WorkloadError::Range("spikes.factor", "must be at least 1"));
                }
                if !pos(spikes.on_ms) || !pos(spikes.off_ms) {
                    return Err(WorkloadError::Range("spikes.on_ms/off_ms", "must be positive"));
                }
                if !(0.0..=1.0).contains(&spikes.correlation) {
                    return Err(WorkloadError::Range("spikes.correlation", "must be between 0 and 1"));
                }
            }
            Workload::Trace { .. } | Workload::Loaded { .. } => {}
            Workload::Square { high_bps, low_bps, half_period_ms, phase_ms } => {
                if !(high_bps.is_finite() && low_bps.is_finite() && *low_bps >= 0.0 && high_bps >= low_bps) {
                    return Err(WorkloadError::Range("high_bps/low_bps", "need 0 ≤ low ≤ high"));
                }
                if !(pos(*half_period_ms) && non_negative(*phase_ms)) {
                    return Err(WorkloadError::Range("half_period_ms/phase_ms", "must be positive / zero or more"));
                }
            }
        }
        Ok(())
    }

    /// Reads a `Trace` into `Loaded` (bins of `bin_ms`); other workloads are returned as they
    /// are.
    pub fn resolve(&self, bin_ms: f64) -> Result<Workload, crate::trace::TraceError> {
        match self {
            Workload::Trace { file } => {
                let (series, tenants) = crate::trace::read_with_tenants(std::path::Path::new(file), bin_ms)?;
                Ok(Workload::Loaded { series: std::sync::Arc::new(series), tenants: std::sync::Arc::new(tenants) })
            }
            w => Ok(w.clone()),
        }
    }

    /// Bytes per bin of `bin_s` seconds, for `bins` bins, of each of `endpoints` endpoints (a
    /// `Trace` must be [`Workload::resolve`]d first; unresolved, it is idle).
    pub fn series(&self, seed: u64, endpoints: usize, bins: usize, bin_s: f64, mut progress: impl FnMut(usize)) -> Vec<Vec<f64>> {
        match self {
            Workload::Trace { .. } => vec![vec![0.0; bins]; endpoints],
            Workload::Loaded { series: l, .. } => (0..endpoints)
                .map(|e| {
                    progress(e);
                    (0..bins).map(|b| l.get(e).and_then(|s| s.get(b)).copied().unwrap_or(0.0)).collect()
                })
                .collect(),
            Workload::Etc { rate_scale, spikes } => {
                let shared = spike_process(&mut rng(seed, u64::MAX), spikes, bins as f64 * bin_s, 1.0);
                (0..endpoints)
                    .map(|e| {
                        progress(e);
                        etc_endpoint(&mut rng(seed, e as u64), *rate_scale, spikes, &shared, bins, bin_s)
                    })
                    .collect()
            }
            Workload::Square { high_bps, low_bps, half_period_ms, phase_ms } => (0..endpoints)
                .map(|e| {
                    progress(e);
                    (0..bins)
                        .map(|b| {
                            let t_ms = b as f64 * bin_s * 1e3 + e as f64 * phase_ms;
                            let level = if ((t_ms / half_period_ms) as u64).is_multiple_of(2) { high_bps } else { low_bps };
                            level * bin_s
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

/// The generator of stream `stream` under `seed`.
pub(crate) fn rng(seed: u64, stream: u64) -> Pcg64 {
    Pcg64::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream.wrapping_mul(0xbf58_476d_1ce4_e5b9))
}

/// Uniform in (0, 1].
pub(crate) fn unit(r: &mut Pcg64) -> f64 {
    1.0 - r.random::<f64>()
}

/// Spike intervals [start, end) in seconds over `len_s`, at `scale` times the spike rate.
fn spike_process(r: &mut Pcg64, s: &Spikes, len_s: f64, scale: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    if s.factor <= 1.0 || scale <= 0.0 {
        return out;
    }
    let mut t = -unit(r).ln() * s.off_ms / 1e3 / scale;
    while t < len_s {
        let len = -unit(r).ln() * s.on_ms / 1e3;
        out.push((t, t + len));
        t += len - unit(r).ln() * s.off_ms / 1e3 / scale;
    }
    out
}

fn etc_endpoint(r: &mut Pcg64, rate_scale: f64, s: &Spikes, shared: &[(f64, f64)], bins: usize, bin_s: f64) -> Vec<f64> {
    let len_s = bins as f64 * bin_s;
    // This endpoint's spikes: the shared ones it joins, and its own.
    let mut on: Vec<(f64, f64)> = shared.iter().copied().filter(|_| r.random::<f64>() < s.correlation).collect();
    on.extend(spike_process(r, s, len_s, 1.0 - s.correlation));
    on.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = vec![0.0; bins];
    let (mut t, mut k) = (0.0f64, 0usize);
    loop {
        while k < on.len() && on[k].1 <= t {
            k += 1;
        }
        let spiking = k < on.len() && on[k].0 <= t;
        let rate = rate_scale * if spiking { s.factor } else { 1.0 };
        t += ETC_GAP_US.at(unit(r)) / 1e6 / rate;
        if t >= len_s {
            return out;
        }
        let bytes = ETC_KEY.at(unit(r).min(1.0 - f64::EPSILON)).max(1.0) + ETC_VALUE.at(unit(r));
        out[((t / bin_s) as usize).min(bins - 1)] += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etc_samples_have_the_published_means() {
        let mut r = rng(7, 0);
        let n = 200_000;
        let gap: f64 = (0..n).map(|_| ETC_GAP_US.at(unit(&mut r))).sum::<f64>() / n as f64;
        // GPD mean σ / (1 − ξ) = 16.0292 / 0.845029 = 18.97 µs.
        assert!((gap / ETC_GAP_US.mean() - 1.0).abs() < 0.02, "{gap}");
        let key: f64 = (0..n).map(|_| ETC_KEY.at(unit(&mut r).min(1.0 - f64::EPSILON))).sum::<f64>() / n as f64;
        // GEV mean μ + σ (Γ(1 − ξ) − 1) / ξ ≈ 35.8 bytes.
        assert!((key - 35.8).abs() < 0.5, "{key}");
        let median = {
            let mut v: Vec<f64> = (0..n).map(|_| ETC_VALUE.at(unit(&mut r))).collect();
            v.sort_by(f64::total_cmp);
            v[n / 2]
        };
        // GPD median σ (2^ξ − 1) / ξ = 167.2 bytes.
        assert!((median - 167.2).abs() < 3.0, "{median}");
    }

    #[test]
    fn same_seed_same_series_and_correlation_moves_the_peak_of_the_sum() {
        let w = |c: f64| Workload::Etc { rate_scale: 0.05, spikes: Spikes { factor: 8.0, on_ms: 20.0, off_ms: 200.0, correlation: c } };
        let a = w(0.5).series(3, 4, 2000, 1e-3, |_| {});
        assert_eq!(a, w(0.5).series(3, 4, 2000, 1e-3, |_| {}), "deterministic");
        assert_ne!(a, w(0.5).series(4, 4, 2000, 1e-3, |_| {}));
        // Endpoints spiking together make the sum peak higher than independent ones (10 ms
        // bins, so that spikes, not single large values, make the peaks).
        let ratio = |c: f64| {
            let w = Workload::Etc { rate_scale: 0.2, spikes: Spikes { factor: 8.0, on_ms: 50.0, off_ms: 500.0, correlation: c } };
            let s = w.series(11, 16, 2000, 1e-2, |_| {});
            snic_core::cost::peak_ratio(&s).2
        };
        assert!(ratio(1.0) > ratio(0.0), "{} vs {}", ratio(1.0), ratio(0.0));
    }

    #[test]
    fn square_waves_and_ranges() {
        let w = Workload::Square { high_bps: 1000.0, low_bps: 0.0, half_period_ms: 2.0, phase_ms: 2.0 };
        let s = w.series(0, 2, 4, 1e-3, |_| {});
        assert_eq!(s, vec![vec![1.0, 1.0, 0.0, 0.0], vec![0.0, 0.0, 1.0, 1.0]]);
        assert_eq!(snic_core::cost::peak_ratio(&s).2, 0.5, "opposite phases: half the sum of peaks");
        let bad = Workload::Etc { rate_scale: 1.0, spikes: Spikes { correlation: 2.0, ..Default::default() } };
        assert!(bad.validate().is_err());
    }
}

/// The mean and variance of one ETC request's bytes (key + value), estimated once from a
/// million samples of the request-level sampler (fixed seed), so both granularities agree.
fn etc_moments() -> (f64, f64) {
    static M: std::sync::OnceLock<(f64, f64)> = std::sync::OnceLock::new();
    *M.get_or_init(|| {
        let mut r = rng(0x5eed, 0);
        let n = 1_000_000;
        let (mut s, mut s2) = (0.0, 0.0);
        for _ in 0..n {
            let b = etc_request(&mut r);
            s += b;
            s2 += b * b;
        }
        let mean = s / n as f64;
        (mean, s2 / n as f64 - mean * mean)
    })
}

fn etc_request(r: &mut Pcg64) -> f64 {
    ETC_KEY.at(unit(r).min(1.0 - f64::EPSILON)).max(1.0) + ETC_VALUE.at(unit(r))
}

/// Requests per bin up to which a flow-granularity bin sums each request's bytes; beyond, the
/// normal approximation.
const EXACT_UP_TO: u64 = 8;

/// One endpoint's load bin by bin at *flow granularity*: a bin's request count is Poisson at
/// the endpoint's rate (ETC's mean gap, spikes included), and their bytes are summed exactly up
/// to `EXACT_UP_TO` requests and by the normal approximation beyond — no request is drawn one by one, and
/// nothing is held but a few numbers per endpoint, so data-center runs fit in memory.
#[derive(Debug, Clone)]
pub struct FlowGen {
    r: Pcg64,
    kind: FlowKind,
    bin_s: f64,
    t: f64,
    index: u64,
}

#[derive(Debug, Clone)]
enum FlowKind {
    Etc { rate: f64, spikes: Spikes, own_on: bool, own_next: f64, member_of: u64, member: bool },
    Square { high: f64, low: f64, half_ms: f64, shift_ms: f64 },
    Replay { series: std::sync::Arc<Vec<Vec<f64>>>, endpoint: usize },
}

/// The spike process every endpoint may join (shared, advanced once per bin for all).
#[derive(Debug, Clone)]
pub struct SharedSpikes {
    r: Pcg64,
    spikes: Spikes,
    on: bool,
    next: f64,
    /// Count of spikes started so far (the current one's id while on).
    pub id: u64,
}

impl SharedSpikes {
    fn new(seed: u64, spikes: Spikes) -> Self {
        let mut r = rng(seed, u64::MAX);
        let next = if spikes.factor > 1.0 { -unit(&mut r).ln() * spikes.off_ms / 1e3 } else { f64::INFINITY };
        SharedSpikes { r, spikes, on: false, next, id: 0 }
    }

    /// Advances to time `t`; true while a shared spike is on.
    fn at(&mut self, t: f64) -> bool {
        while self.next <= t {
            self.on = !self.on;
            let mean = if self.on { self.spikes.on_ms } else { self.spikes.off_ms };
            if self.on {
                self.id += 1;
            }
            self.next += -unit(&mut self.r).ln() * mean / 1e3;
        }
        self.on
    }
}

impl Workload {
    /// Flow-granularity generators for `endpoints` endpoints and the shared spike process.
    pub fn flows(&self, seed: u64, endpoints: usize, bin_s: f64) -> (Vec<FlowGen>, Option<SharedSpikes>) {
        let shared = match self {
            Workload::Etc { spikes, .. } => Some(SharedSpikes::new(seed, *spikes)),
            _ => None,
        };
        let gens = (0..endpoints)
            .map(|e| {
                let mut r = rng(seed, e as u64);
                let kind = match self {
                    Workload::Etc { rate_scale, spikes } => {
                        let own = (1.0 - spikes.correlation).max(0.0);
                        let own_next =
                            if spikes.factor > 1.0 && own > 0.0 { -unit(&mut r).ln() * spikes.off_ms / 1e3 / own } else { f64::INFINITY };
                        FlowKind::Etc {
                            rate: rate_scale * 1e6 / ETC_GAP_US.mean(),
                            spikes: *spikes,
                            own_on: false,
                            own_next,
                            member_of: 0,
                            member: false,
                        }
                    }
                    Workload::Square { high_bps, low_bps, half_period_ms, phase_ms } => {
                        FlowKind::Square { high: *high_bps, low: *low_bps, half_ms: *half_period_ms, shift_ms: e as f64 * phase_ms }
                    }
                    Workload::Loaded { series, .. } => FlowKind::Replay { series: series.clone(), endpoint: e },
                    Workload::Trace { .. } => FlowKind::Replay { series: Default::default(), endpoint: e },
                };
                FlowGen { r, kind, bin_s, t: 0.0, index: 0 }
            })
            .collect();
        (gens, shared)
    }
}

impl FlowGen {
    /// The next bin's bytes; `shared` is the shared spike process, advanced to this bin.
    pub fn next(&mut self, shared: Option<&SharedSpikes>) -> f64 {
        let (t, bin_s) = (self.t, self.bin_s);
        self.index += 1;
        self.t = self.index as f64 * bin_s;
        match &mut self.kind {
            FlowKind::Replay { series, endpoint } => {
                series.get(*endpoint).and_then(|s| s.get(self.index as usize - 1)).copied().unwrap_or(0.0)
            }
            FlowKind::Square { high, low, half_ms, shift_ms } => {
                let level = if (((t * 1e3 + *shift_ms) / *half_ms) as u64).is_multiple_of(2) { *high } else { *low };
                level * bin_s
            }
            FlowKind::Etc { rate, spikes, own_on, own_next, member_of, member } => {
                let r = &mut self.r;
                while *own_next <= t {
                    *own_on = !*own_on;
                    let mean = if *own_on { spikes.on_ms } else { spikes.off_ms / (1.0 - spikes.correlation).max(1e-9) };
                    *own_next += -unit(r).ln() * mean / 1e3;
                }
                let shared_on = match shared {
                    Some(s) if s.on => {
                        if *member_of != s.id {
                            *member_of = s.id;
                            *member = r.random::<f64>() < spikes.correlation;
                        }
                        *member
                    }
                    _ => false,
                };
                let lambda = *rate * bin_s * if *own_on || shared_on { spikes.factor } else { 1.0 };
                let n = rand_distr::Poisson::new(lambda.max(1e-12)).map_or(0.0, |p| r.sample(p));
                let n = n as u64;
                if n <= EXACT_UP_TO {
                    (0..n).map(|_| etc_request(r)).sum()
                } else {
                    let (mean, var) = etc_moments();
                    let d = rand_distr::Normal::new(n as f64 * mean, (n as f64 * var).sqrt()).expect("finite moments");
                    r.sample(d).max(0.0)
                }
            }
        }
    }
}

/// Advances the shared spike process to bin `b` (call once per bin, before the endpoints).
pub fn advance(shared: &mut Option<SharedSpikes>, b: usize, bin_s: f64) {
    if let Some(s) = shared {
        s.at(b as f64 * bin_s);
    }
}

#[cfg(test)]
mod flow_tests {
    use super::*;

    #[test]
    fn flow_granularity_matches_request_granularity_on_average() {
        let w = Workload::Etc { rate_scale: 0.5, spikes: Spikes::default() };
        let bins = 2000;
        let req = w.series(9, 2, bins, 1e-3, |_| {});
        let (mut gens, mut shared) = w.flows(9, 2, 1e-3);
        let mut flow = [0.0; 2];
        for b in 0..bins {
            advance(&mut shared, b, 1e-3);
            for (e, g) in gens.iter_mut().enumerate() {
                flow[e] += g.next(shared.as_ref());
            }
        }
        for e in 0..2 {
            let r: f64 = req[e].iter().sum();
            assert!((flow[e] / r - 1.0).abs() < 0.05, "endpoint {e}: flow {} vs request {}", flow[e], r);
        }
        // Deterministic too.
        let (mut g2, mut s2) = w.flows(9, 2, 1e-3);
        advance(&mut s2, 0, 1e-3);
        let (mut g3, mut s3) = w.flows(9, 2, 1e-3);
        advance(&mut s3, 0, 1e-3);
        assert_eq!(g2[0].next(s2.as_ref()), g3[0].next(s3.as_ref()));
    }
}
