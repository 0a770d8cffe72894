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
        let pos = |v: f64| v.is_finite() && v > 0.0;
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
            Workload::Square { high_bps, low_bps, half_period_ms, phase_ms } => {
                if !(high_bps.is_finite() && low_bps.is_finite() && *low_bps >= 0.0 && high_bps >= low_bps) {
                    return Err(WorkloadError::Range("high_bps/low_bps", "need 0 ≤ low ≤ high"));
                }
                if !(pos(*half_period_ms) && phase_ms.is_finite() && *phase_ms >= 0.0) {
                    return Err(WorkloadError::Range("half_period_ms/phase_ms", "must be positive / zero or more"));
                }
            }
        }
        Ok(())
    }

    /// Bytes per bin of `bin_s` seconds, for `bins` bins, of each of `endpoints` endpoints.
    pub fn series(&self, seed: u64, endpoints: usize, bins: usize, bin_s: f64, mut progress: impl FnMut(usize)) -> Vec<Vec<f64>> {
        match self {
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
                            let level = if ((t_ms / half_period_ms) as u64) % 2 == 0 { high_bps } else { low_bps };
                            level * bin_s
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

/// The generator of stream `stream` under `seed`.
fn rng(seed: u64, stream: u64) -> Pcg64 {
    Pcg64::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream.wrapping_mul(0xbf58_476d_1ce4_e5b9))
}

/// Uniform in (0, 1].
fn unit(r: &mut Pcg64) -> f64 {
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
