//! # snic-sim: snic's simulator
//!
//! Runs the paper's experiments on a virtual clock from a scenario file (TOML, documented in
//! `docs/sim.md`): a topology of racks and endpoints, a workload per endpoint ([`workload`]),
//! and an experiment. The simulator reuses the policy code of `snic-core` — the same code the
//! daemon runs — never its own copy of a policy.
//!
//! Runnable today: `consolidation` (paper Fig. 2): what the endpoints' traffic needs when each
//! endpoint provisions for its own peak, when a rack's pool provisions for the rack's peak, and
//! when the data center's does; its rack-level ratio is the cost model's `capExConsolidRatio`.
//! `fairness` (paper Fig. 20): the node's fairness controller (`snic_core::fair`) closing the
//! loop on tenants whose load steps. `autoscale` (paper Fig. 12): slowdown against OpEx for the
//! ways of provisioning a rack's NT capacity, the snic scheme driven by the daemon's auto-scaler
//! and launcher. `victim_cache` (paper Fig. 13): how often descheduled chains stay loaded,
//! against performance and OpEx, placing chains with the daemon's launcher.
//! `consolidation_usage` (paper Fig. 22): the NT instance-time a node consolidating 2 or 4
//! endpoints uses against each running its own, for several NT speeds. `chaining` (paper
//! Fig. 14 and 15 under load): a sequence of NTs as one chain, two half chains, PANIC-style
//! scheduling or parallel chains, packet by packet through the daemon's credit scheduler.
//! `membership` (the pool, paper §5): pools of nodes running the daemon's membership protocol
//! on one virtual clock over a lossy network ([`pool`]) — how long a pool takes to form, how
//! long until every survivor notices a death, and wrong suspicions. `pool_placement` (paper
//! Fig. 11): chains a node has no room for placed on peers by the daemon's pool agent, in a
//! ring or behind a switch, and the latency the extra hops cost ([`pool_place`]).
//! `pool_overflow` (paper Fig. 10): one node against a pool of two as background load on the
//! home node rises — throughput and OpEx, placements by the daemon's pool agent
//! ([`pool_overflow`]).

pub mod autoscale;
pub mod chaining;
pub mod fairness;
mod fluid;
pub mod plot;
pub mod pool;
pub mod pool_node;
pub mod pool_overflow;
pub mod pool_place;
pub mod trace;
pub mod usage;
pub mod victim;
pub mod workload;

use serde::{Deserialize, Serialize};
use snic_core::config::{Config, NodeSettings};
use snic_core::cost::peak_ratio;
use workload::{Workload, WorkloadError};

/// A scenario file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name (reported).
    pub name: String,
    /// The experiment: `consolidation`, `fairness`, `autoscale`, `victim_cache`,
    /// `consolidation_usage`, `chaining`, `membership`, `pool_placement` or `pool_overflow`.
    pub experiment: String,
    /// Seed of every random stream (overridden by `--seed`).
    #[serde(default)]
    pub seed: u64,
    /// Simulated time, seconds.
    pub duration_s: f64,
    /// Time bin of the load series, ms.
    #[serde(default = "default_bin")]
    pub bin_ms: f64,
    /// `request` (every request drawn, the load series held in memory) or `flow` (each bin's
    /// bytes drawn at once, nothing held: for hours and data centers).
    #[serde(default)]
    pub granularity: Granularity,
    /// Racks and endpoints (`consolidation`).
    #[serde(default)]
    pub topology: Option<Topology>,
    /// What each endpoint sends (`consolidation`).
    #[serde(default)]
    pub workload: Option<Workload>,
    /// Tenants, NTs and loads (`fairness`).
    #[serde(default)]
    pub fairness: Option<fairness::FairnessSpec>,
    /// Instance speed, launch time, MONITOR_PERIOD (`autoscale`).
    #[serde(default)]
    pub autoscale: Option<autoscale::AutoscaleSpec>,
    /// Regions, activity, keep ratios (`victim_cache`).
    #[serde(default)]
    pub victim_cache: Option<victim::VictimSpec>,
    /// Endpoints per node and NT speeds (`consolidation_usage`).
    #[serde(default)]
    pub consolidation_usage: Option<usage::UsageSpec>,
    /// NT sequences, deployments and loads (`chaining`).
    #[serde(default)]
    pub chaining: Option<chaining::ChainingSpec>,
    /// Pool sizes, loss and the protocol's timing (`membership`).
    #[serde(default)]
    pub membership: Option<pool::MembershipSpec>,
    /// Nodes, regions, loads and latencies (`pool_placement`).
    #[serde(default)]
    pub pool_placement: Option<pool_place::PlacementSpec>,
    /// Nodes, regions, foreground and background loads, energy (`pool_overflow`).
    #[serde(default)]
    pub pool_overflow: Option<pool_overflow::OverflowSpec>,
    /// The simulated nodes' configuration: node.yaml's tree, defaults and checks
    /// (`snic_core::config`), as `[node]`, `[node.elastic]`, `[node.fairness]`. The experiments
    /// take their policy settings from it: `autoscale`, `victim_cache` and
    /// `consolidation_usage` the elastic section's launch delay, MONITOR_PERIOD, `high`,
    /// `share_below` and `victims` (their region counts and whether they scale are the
    /// experiment's); `fairness` the fairness section.
    #[serde(default)]
    pub node: NodeSettings,
}

fn default_bin() -> f64 {
    1.0
}

/// A finite value above zero (the scenario sections' range checks).
pub(crate) fn positive(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// A finite value of zero or more.
pub(crate) fn non_negative(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// How finely the workload is simulated.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    /// Every request.
    #[default]
    Request,
    /// Each bin's bytes at once.
    Flow,
}

/// Racks of endpoints.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Racks.
    pub racks: usize,
    /// Endpoints in each rack.
    pub endpoints_per_rack: usize,
}

/// Most load cells (endpoints × bins) a request-granularity run holds.
pub const MAX_CELLS: usize = 200_000_000;

/// Why a scenario cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The file is not a valid scenario.
    #[error("invalid scenario")]
    Parse(#[from] toml::de::Error),
    /// A value is out of range.
    #[error("{0}")]
    Range(String),
    /// The workload is invalid.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The workload's trace could not be read.
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    /// No such experiment.
    #[error(
        "unknown experiment `{0}` (runnable: consolidation, fairness, autoscale, victim_cache, consolidation_usage, chaining, membership, pool_placement, pool_overflow)"
    )]
    Unknown(String),
}

/// One scheme's figures in the `consolidation` experiment.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SchemeResult {
    /// `no-consolidation`, `rack` or `datacenter`.
    pub scheme: &'static str,
    /// Capacity provisioned (the peak it must carry), Gbit/s.
    pub provisioned_gbps: f64,
    /// Relative to no consolidation.
    pub vs_no_consolidation: f64,
}

/// A run's report (the JSON on stdout).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The seed used.
    pub seed: u64,
    /// The experiment.
    pub experiment: String,
    /// Simulated seconds.
    pub duration_s: f64,
    /// Endpoints simulated (`consolidation`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<usize>,
    /// Per scheme (the fields depend on the experiment).
    pub results: Vec<serde_json::Value>,
    /// Rack-level peak-of-sum ÷ sum-of-peaks (`consolidation`): the cost model's
    /// `capExConsolidRatio` for this workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capex_consolid_ratio: Option<f64>,
    /// What the figure shows (not in the JSON report).
    #[serde(skip)]
    pub figure: plot::Figure,
}

impl Scenario {
    /// Parses a scenario.
    pub fn parse(text: &str) -> Result<Self, SimError> {
        Ok(toml::from_str(text)?)
    }

    fn validate(&self, t: Topology, w: &Workload) -> Result<(), SimError> {
        if t.racks == 0 || t.endpoints_per_rack == 0 {
            return Err(SimError::Range("topology: racks and endpoints_per_rack must be at least 1".into()));
        }
        if !(positive(self.duration_s) && positive(self.bin_ms)) {
            return Err(SimError::Range("duration_s and bin_ms must be positive".into()));
        }
        let cells = t.racks as f64 * t.endpoints_per_rack as f64 * (self.duration_s * 1e3 / self.bin_ms);
        if self.granularity == Granularity::Request && cells > MAX_CELLS as f64 {
            return Err(SimError::Range(format!(
                "{cells:.0} load cells (endpoints × bins) is more than {MAX_CELLS} at request granularity: use granularity = \"flow\", fewer endpoints, a shorter run or a larger bin_ms"
            )));
        }
        w.validate()?;
        Ok(())
    }

    /// What a rack experiment runs on: the topology and workload (checked; `check` checks the
    /// experiment's own section between the two; a trace read) and the number of bins. Each
    /// experiment `needs` its sections, which `present` says are there.
    fn inputs(
        &self,
        needs: &str,
        present: bool,
        check: impl FnOnce() -> Result<(), String>,
    ) -> Result<(Topology, Workload, usize), SimError> {
        let (Some(t), Some(w), true) = (self.topology, &self.workload, present) else {
            return Err(SimError::Range(format!("{} needs {needs}", self.experiment)));
        };
        self.validate(t, w)?;
        check().map_err(SimError::Range)?;
        let bins = (self.duration_s * 1e3 / self.bin_ms).ceil() as usize;
        Ok((t, w.resolve(self.bin_ms)?, bins))
    }

    /// The report of an experiment whose results are `rows`.
    fn report<R: Serialize>(&self, seed: u64, endpoints: Option<usize>, rows: &[R], figure: plot::Figure) -> Report {
        Report {
            figure,
            scenario: self.name.clone(),
            seed,
            experiment: self.experiment.clone(),
            duration_s: self.duration_s,
            endpoints,
            results: rows.iter().map(|r| serde_json::to_value(r).expect("plain data")).collect(),
            capex_consolid_ratio: None,
        }
    }

    /// Runs the scenario with `seed`; `progress(done, total)` is called per endpoint.
    pub fn run(&self, seed: u64, progress: impl FnMut(usize, usize)) -> Result<Report, SimError> {
        if !positive(self.duration_s) {
            return Err(SimError::Range("duration_s must be positive".into()));
        }
        let node: Config = self.node.clone().validate().map_err(|e| SimError::Range(format!("[node]: {e}")))?;
        match self.experiment.as_str() {
            "consolidation" => {
                let (t, w, _) = self.inputs("[topology] and [workload]", true, || Ok(()))?;
                Ok(self.consolidation(seed, t, &w, progress))
            }
            "fairness" => {
                let Some(spec) = &self.fairness else {
                    return Err(SimError::Range("fairness needs a [fairness] section".into()));
                };
                spec.validate().map_err(SimError::Range)?;
                let r = spec.run(self.duration_s, &node);
                let figure = plot::Figure::Lines {
                    title: format!("{}: delivered load per tenant", self.name),
                    x: "time (ms)".into(),
                    y: "delivered (units)".into(),
                    lines: r.timeline.clone(),
                    log_y: false,
                };
                Ok(self.report(seed, None, std::slice::from_ref(&r), figure))
            }
            "autoscale" => {
                let spec = self.autoscale.as_ref();
                let (t, w, bins) =
                    self.inputs("[topology], [workload] and [autoscale]", spec.is_some(), || spec.map_or(Ok(()), |s| s.validate()))?;
                let spec = spec.expect("checked by inputs");
                // Each rack: its endpoints and its pool.
                let n = t.racks * t.endpoints_per_rack;
                let flow = self.granularity == Granularity::Flow;
                let rows = spec.run(&w, &node.elastic, seed, t.racks, t.endpoints_per_rack, bins, self.bin_ms, flow, progress);
                let figure = plot::Figure::Scatter {
                    title: format!("{}: slowdown vs OpEx", self.name),
                    x: "OpEx (instance-time, vs static-max)".into(),
                    y: "slowdown vs no disaggregation (log)".into(),
                    points: rows.iter().map(|r| (format!("{} c={}", r.scheme, r.correlation), r.opex_vs_static_max, r.slowdown)).collect(),
                    // From 1 (provisioned for the peak) to hundreds (for the average).
                    log_y: true,
                };
                Ok(self.report(seed, Some(n), &rows, figure))
            }
            "victim_cache" => {
                let spec = self.victim_cache.as_ref();
                let (t, w, bins) = self.inputs("[topology], [workload] and [victim_cache]", spec.is_some(), || {
                    spec.map_or(Ok(()), |s| s.validate())?;
                    match self.topology {
                        Some(t) if t.endpoints_per_rack > u16::MAX as usize => Err("victim_cache: at most 65535 tenants".into()),
                        _ => Ok(()),
                    }
                })?;
                let spec = spec.expect("checked by inputs");
                let rows = spec.run(&w, &node.elastic, seed, t.endpoints_per_rack, bins, self.bin_ms);
                let figure = plot::Figure::Scatter {
                    title: format!("{}: victim cache — slowdown vs OpEx", self.name),
                    x: "OpEx (vs no victim cache)".into(),
                    y: "slowdown (vs no victim cache)".into(),
                    points: rows
                        .iter()
                        .map(|r| {
                            (
                                format!("{} regions, keep {:.0}%", r.regions, 100.0 * r.keep_ratio),
                                r.opex_vs_no_victims,
                                r.slowdown_vs_no_victims,
                            )
                        })
                        .collect(),
                    log_y: false,
                };
                Ok(self.report(seed, Some(t.endpoints_per_rack), &rows, figure))
            }
            "consolidation_usage" => {
                let spec = self.consolidation_usage.as_ref();
                let (_, w, bins) = self
                    .inputs("[topology], [workload] and [consolidation_usage]", spec.is_some(), || spec.map_or(Ok(()), |s| s.validate()))?;
                let spec = spec.expect("checked by inputs");
                let rows = spec.run(&w, &node.elastic, seed, bins, self.bin_ms, self.granularity == Granularity::Flow);
                let figure = plot::Figure::Bars {
                    title: format!("{}: NT usage consolidated ÷ separate", self.name),
                    y: "instance-time ratio".into(),
                    bars: rows.iter().map(|r| (format!("{} ep, {} Gb/s", r.endpoints_per_node, r.nt_gbps), r.usage_ratio)).collect(),
                };
                Ok(self.report(seed, None, &rows, figure))
            }
            "membership" => {
                let Some(spec) = &self.membership else {
                    return Err(SimError::Range("membership needs a [membership] section".into()));
                };
                spec.validate().map_err(SimError::Range)?;
                let rows = spec.run(seed);
                let figure = plot::Figure::Bars {
                    title: format!("{}: time until every survivor noticed a death (worst run)", self.name),
                    y: "seconds".into(),
                    bars: rows.iter().map(|r| (format!("{} nodes, {}‰ lost", r.nodes, r.loss_per_mille), r.detect_max_s)).collect(),
                };
                Ok(self.report(seed, None, &rows, figure))
            }
            "pool_placement" => {
                let Some(spec) = &self.pool_placement else {
                    return Err(SimError::Range("pool_placement needs a [pool_placement] section".into()));
                };
                spec.validate().map_err(SimError::Range)?;
                let rows = spec.run(seed, self.duration_s);
                let lines = ["single", "ring", "switch"]
                    .iter()
                    .map(|&t| (format!("{t} p99"), rows.iter().filter(|r| r.topology == t).map(|r| (r.load, r.p99_us)).collect()))
                    .collect();
                let figure = plot::Figure::Lines {
                    title: format!("{}: p99 one-way latency of chains' packets", self.name),
                    x: "offered load (share of the pool's regions)".into(),
                    y: "latency (µs)".into(),
                    lines,
                    log_y: false,
                };
                Ok(self.report(seed, None, &rows, figure))
            }
            "pool_overflow" => {
                let spec = self.pool_overflow.as_ref();
                let (t, w, bins) =
                    self.inputs("[topology], [workload] and [pool_overflow]", spec.is_some(), || spec.map_or(Ok(()), |s| s.validate()))?;
                let spec = spec.expect("checked by inputs");
                let bin_s = self.bin_ms / 1e3;
                // The foreground: the first rack's endpoints.
                let fg = w.series(seed, t.endpoints_per_rack, bins, bin_s, |_| {});
                let rows = spec.run(&fg, &node.elastic, seed, bin_s, self.duration_s);
                // OpEx against the single node at the first (lowest) background load.
                let base = rows.first().map_or(1.0, |r| r.opex_j).max(f64::MIN_POSITIVE);
                let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
                for topo in ["single", "ring", "switch"] {
                    let mine = || rows.iter().filter(|r| r.topology == topo);
                    lines.push((format!("{topo}: foreground throughput"), mine().map(|r| (r.bg_load, r.fg_throughput)).collect()));
                    lines.push((format!("{topo}: OpEx"), mine().map(|r| (r.bg_load, r.opex_j / base)).collect()));
                }
                let figure = plot::Figure::Lines {
                    title: format!("{}: foreground throughput (÷ offered), OpEx (÷ one node's, no background)", self.name),
                    x: "background load (share of one node)".into(),
                    y: "relative".into(),
                    lines,
                    log_y: false,
                };
                Ok(self.report(seed, Some(t.endpoints_per_rack), &rows, figure))
            }
            "chaining" => {
                let Some(spec) = &self.chaining else {
                    return Err(SimError::Range("chaining needs a [chaining] section".into()));
                };
                spec.validate().map_err(SimError::Range)?;
                // With a topology and a workload: the first rack's endpoints are the tenants.
                let tenants = match (self.topology, &self.workload) {
                    (None, None) => None,
                    _ => {
                        let (t, w, bins) =
                            self.inputs("[topology] and [workload] together (or neither)", true, || match self.topology {
                                Some(t) if t.endpoints_per_rack > 256 => Err("chaining: at most 256 tenants (endpoints per rack)".into()),
                                _ => Ok(()),
                            })?;
                        let bytes = w.series(seed, t.endpoints_per_rack, bins, self.bin_ms / 1e3, |_| {});
                        Some(chaining::TenantLoad { bytes, bin_ns: self.bin_ms * 1e6 })
                    }
                };
                let rows = spec.run(seed, self.duration_s, tenants.as_ref(), progress);
                let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
                for r in &rows {
                    let label = format!("{}, load {}", serde_json::to_value(r.mode).expect("plain data").as_str().unwrap_or("?"), r.load);
                    let point = (r.nts as f64, r.p99_ns as f64 / 1e3);
                    match lines.iter_mut().find(|l| l.0 == label) {
                        Some(l) => l.1.push(point),
                        None => lines.push((label, vec![point])),
                    }
                }
                let figure = plot::Figure::Lines {
                    title: format!("{}: p99 latency of an NT sequence", self.name),
                    x: "NTs in the sequence".into(),
                    y: "p99 latency (µs, log scale)".into(),
                    lines,
                    log_y: true,
                };
                Ok(self.report(seed, None, &rows, figure))
            }
            e => Err(SimError::Unknown(e.into())),
        }
    }

    /// Paper Fig. 2: sum of peaks (each endpoint for itself), sum of rack peaks, and the data
    /// center's peak.
    fn consolidation(&self, seed: u64, t: Topology, w: &Workload, mut progress: impl FnMut(usize, usize)) -> Report {
        let n = t.racks * t.endpoints_per_rack;
        let bin_s = self.bin_ms / 1e3;
        let bins = (self.duration_s / bin_s).ceil() as usize;
        let gbps = |bytes_per_bin: f64| bytes_per_bin * 8.0 / bin_s / 1e9;
        let (sum_of_peaks, rack_sum, rack_sop, dc) = if self.granularity == Granularity::Flow {
            // Bin by bin: per endpoint and per rack only a running peak is kept.
            let (mut gens, mut shared) = w.flows(seed, n, bin_s);
            let (mut own, mut rack, mut dc) = (vec![0.0f64; n], vec![0.0f64; t.racks], 0.0f64);
            for b in 0..bins {
                if b % (bins / 100).max(1) == 0 {
                    progress(b, bins);
                }
                workload::advance(&mut shared, b, bin_s);
                let mut total = 0.0;
                for (r, peak) in rack.iter_mut().enumerate() {
                    let mut sum = 0.0;
                    for e in r * t.endpoints_per_rack..(r + 1) * t.endpoints_per_rack {
                        let x = gens[e].next(shared.as_ref());
                        own[e] = own[e].max(x);
                        sum += x;
                    }
                    *peak = peak.max(sum);
                    total += sum;
                }
                dc = dc.max(total);
            }
            progress(bins, bins);
            let sop: f64 = own.iter().sum();
            (sop, rack.iter().sum::<f64>(), sop, dc)
        } else {
            let load = w.series(seed, n, bins, bin_s, |e| progress(e, n));
            progress(n, n);
            let (_, sum_of_peaks, _) = peak_ratio(&load);
            let racks: Vec<(f64, f64)> = load.chunks(t.endpoints_per_rack).map(|r| (peak_ratio(r).0, peak_ratio(r).1)).collect();
            let total: Vec<f64> = (0..bins).map(|b| load.iter().map(|s| s[b]).sum()).collect();
            let dc = total.iter().copied().fold(0.0, f64::max);
            (sum_of_peaks, racks.iter().map(|r| r.0).sum(), racks.iter().map(|r| r.1).sum(), dc)
        };
        let rel = |x: f64| if sum_of_peaks > 0.0 { x / sum_of_peaks } else { 1.0 };
        let results = [
            SchemeResult { scheme: "no-consolidation", provisioned_gbps: gbps(sum_of_peaks), vs_no_consolidation: 1.0 },
            SchemeResult { scheme: "rack", provisioned_gbps: gbps(rack_sum), vs_no_consolidation: rel(rack_sum) },
            SchemeResult { scheme: "datacenter", provisioned_gbps: gbps(dc), vs_no_consolidation: rel(dc) },
        ];
        let figure = plot::Figure::Bars {
            title: format!("{}: capacity provisioned for {n} endpoints", self.name),
            y: "Gbit/s".into(),
            bars: results.iter().map(|r| (r.scheme.to_string(), r.provisioned_gbps)).collect(),
        };
        let ratio = if rack_sop > 0.0 { rack_sum / rack_sop } else { 1.0 };
        Report { capex_consolid_ratio: Some(ratio), ..self.report(seed, Some(n), &results, figure) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
name = "small"
experiment = "consolidation"
seed = 5
duration_s = 2.0
bin_ms = 1.0
[topology]
racks = 2
endpoints_per_rack = 4
[workload]
kind = "etc"
rate_scale = 0.1
spikes = { factor = 6.0, on_ms = 20.0, off_ms = 300.0, correlation = 0.2 }
"#;

    #[test]
    fn consolidation_needs_less_at_each_level_and_runs_are_reproducible() {
        let s = Scenario::parse(SMALL).unwrap();
        let r = s.run(5, |_, _| {}).unwrap();
        let p: Vec<f64> = r.results.iter().map(|x| x["provisioned_gbps"].as_f64().unwrap()).collect();
        assert!(p[0] > p[1] && p[1] > p[2] && p[2] > 0.0, "{p:?}");
        let c = r.capex_consolid_ratio.unwrap();
        assert!(c > 0.0 && c < 1.0);
        assert_eq!(r, s.run(5, |_, _| {}).unwrap(), "same seed, same report");
        assert_ne!(r, s.run(6, |_, _| {}).unwrap());
    }

    #[test]
    fn square_waves_in_opposite_phase_halve_the_rack_peak() {
        let s = Scenario::parse(
            r#"
name = "sq"
experiment = "consolidation"
duration_s = 0.1
[topology]
racks = 1
endpoints_per_rack = 2
[workload]
kind = "square"
high_bps = 1.25e9
low_bps = 0.0
half_period_ms = 10.0
phase_ms = 10.0
"#,
        )
        .unwrap();
        let r = s.run(0, |_, _| {}).unwrap();
        // Two endpoints at 10 Gbit/s, never at once: 20 for themselves, 10 for the rack.
        let p = |i: usize| r.results[i]["provisioned_gbps"].as_f64().unwrap();
        assert!((p(0) - 20.0).abs() < 1e-9);
        assert!((p(1) - 10.0).abs() < 1e-9);
        assert!((r.capex_consolid_ratio.unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn pending_unknown_and_invalid_scenarios_say_why() {
        let with = |exp: &str| SMALL.replace("experiment = \"consolidation\"", &format!("experiment = \"{exp}\""));
        let e = Scenario::parse(&with("consolidation_usage")).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("needs [topology], [workload] and [consolidation_usage]"), "{e}");
        let e = Scenario::parse(&with("autoscale")).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("needs [topology], [workload] and [autoscale]"), "{e}");
        let e = Scenario::parse(&with("chaining")).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("needs a [chaining] section"), "{e}");
        let e = Scenario::parse(&with("teleport")).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("unknown experiment"), "{e}");
        let e = Scenario::parse(&SMALL.replace("racks = 2", "racks = 0")).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("racks"), "{e}");
        assert!(Scenario::parse(&SMALL.replace("seed = 5", "seed = 5\ncolour = 1")).is_err(), "unknown fields refused");
        let big = SMALL.replace("racks = 2", "racks = 2500").replace("duration_s = 2.0", "duration_s = 3600.0");
        let e = Scenario::parse(&big).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("load cells"), "{e}");
    }
}

#[cfg(test)]
mod fig12 {
    use super::*;

    /// The ordering the paper's Fig. 12 shows, on a smaller rack.
    #[test]
    fn static_max_static_avg_snic_and_as_instant_fall_in_the_papers_order() {
        let text = include_str!("../../../scenarios/fig12.toml").replace("duration_s = 20.0", "duration_s = 8.0");
        let r = Scenario::parse(&text).unwrap().run(1, |_, _| {}).unwrap();
        for c in [0.8, 0.1] {
            let get = |s: &str| {
                let x = r.results.iter().find(|x| x["scheme"] == s && x["correlation"].as_f64() == Some(c)).unwrap();
                (x["slowdown"].as_f64().unwrap(), x["opex_vs_static_max"].as_f64().unwrap())
            };
            let (max, avg, snic, inst) = (get("static-max"), get("static-avg"), get("snic"), get("as-instant"));
            // static-max: the best performance of the pools and the most OpEx; static-avg the
            // reverse; snic between them on both; as-instant at least as good as snic on both.
            assert!(max.0 <= snic.0 && snic.0 <= avg.0, "c={c}: slowdown max {max:?} snic {snic:?} avg {avg:?}");
            assert!(avg.1 <= snic.1 && snic.1 <= max.1, "c={c}: OpEx max {max:?} snic {snic:?} avg {avg:?}");
            assert!(inst.0 <= snic.0 * 1.02 && inst.1 <= snic.1 * 1.02, "c={c}: as-instant {inst:?} vs snic {snic:?}");
            assert_eq!(get("no-disaggregation").0, 1.0);
        }
        // Scale events never come within a MONITOR_PERIOD of each other: checked by the
        // auto-scaler's own tests; here, that snic did scale.
        assert!(r.results.iter().any(|x| x["scheme"] == "snic" && x["scale_events"].as_u64().unwrap() > 0));
    }

    /// The end-to-end slowdown puts the NT stage's delay on a byte's whole way, with the pool's
    /// detour for pooled schemes only; with no way and no detour it is the NT stage's slowdown.
    #[test]
    fn end_to_end_slowdown_adds_the_path_and_the_pools_detour() {
        let text = include_str!("../../../scenarios/fig12.toml").replace("duration_s = 20.0", "duration_s = 2.0");
        let with = |extra: &str| {
            let t = text.replace("[autoscale]\n", &format!("[autoscale]\n{extra}"));
            Scenario::parse(&t).unwrap().run(1, |_, _| {}).unwrap().results
        };
        let f = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap();
        let (path, hop) = (0.010, 0.002); // ms
        for x in with("path_us = 10.0\npool_hop_us = 2.0\n") {
            let own = f(&x, "mean_delay_ms") / f(&x, "slowdown");
            let detour = if x["scheme"] == "no-disaggregation" || x["scheme"] == "multi-host-nic" { 0.0 } else { hop };
            let want = (path + detour + f(&x, "mean_delay_ms")) / (path + own);
            assert!((f(&x, "e2e_slowdown") - want).abs() < 1e-9, "{x}");
        }
        for x in with("path_us = 0.0\npool_hop_us = 0.0\n") {
            assert!((f(&x, "e2e_slowdown") - f(&x, "slowdown")).abs() < 1e-9, "{x}");
        }
        let bad = text.replace("[autoscale]\n", "[autoscale]\npath_us = -1.0\n");
        assert!(Scenario::parse(&bad).unwrap().run(1, |_, _| {}).is_err());
    }
}

#[cfg(test)]
mod racks {
    use super::*;

    /// Each rack has its own pool: racks with the same load give the same delays, and the
    /// costs add up.
    #[test]
    fn racks_pool_separately_and_their_costs_add_up() {
        let text = |racks: usize| {
            format!(
                "name = \"r\"\nexperiment = \"autoscale\"\nduration_s = 2.0\nbin_ms = 1.0\n[topology]\nracks = {racks}\nendpoints_per_rack = 4\n[workload]\nkind = \"square\"\nhigh_bps = 2e9\nlow_bps = 1e8\nhalf_period_ms = 100.0\n[autoscale]\ninstance_gbps = 2.0\n"
            )
        };
        let run = |racks: usize| Scenario::parse(&text(racks)).unwrap().run(0, |_, _| {}).unwrap();
        let (one, three) = (run(1), run(3));
        assert_eq!(three.endpoints, Some(12));
        for (a, b) in one.results.iter().zip(&three.results) {
            assert_eq!(a["scheme"], b["scheme"]);
            let f = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap();
            for k in ["slowdown", "mean_delay_ms", "dropped", "opex_vs_static_max"] {
                assert!((f(a, k) - f(b, k)).abs() <= 1e-9 * f(a, k).abs().max(1.0), "{k}: {a} vs {b}");
            }
            for k in ["capex_instances", "scale_events"] {
                assert_eq!(3 * a[k].as_u64().unwrap(), b[k].as_u64().unwrap(), "{k}: {a} vs {b}");
            }
            assert!((3.0 * f(a, "opex_instance_s") - f(b, "opex_instance_s")).abs() < 1e-6, "{a} vs {b}");
        }
        let snic = one.results.iter().find(|x| x["scheme"] == "snic").unwrap();
        assert!(snic["scale_events"].as_u64().unwrap() > 0, "the square wave makes snic scale: {snic}");
        // Two racks of one endpoint in opposite phase (16 Gbit/s peaks: 8 instances): a pool for
        // both would need 8 instances; a pool per rack needs 8 each.
        let opposite =
            text(2).replace("endpoints_per_rack = 4", "endpoints_per_rack = 1").replace("[autoscale]", "phase_ms = 100.0\n[autoscale]");
        let r = Scenario::parse(&opposite).unwrap().run(0, |_, _| {}).unwrap();
        let max = r.results.iter().find(|x| x["scheme"] == "static-max").unwrap();
        assert_eq!(max["capex_instances"], 16, "{max}");
    }
}

#[cfg(test)]
mod flow {
    use super::*;

    #[test]
    fn flow_granularity_tells_the_same_consolidation_story() {
        let text = |g: &str| {
            format!(
                "name = \"f\"\nexperiment = \"consolidation\"\nduration_s = 4.0\nbin_ms = 10.0\ngranularity = \"{g}\"\n[topology]\nracks = 2\nendpoints_per_rack = 4\n[workload]\nkind = \"etc\"\nrate_scale = 0.2\nspikes = {{ factor = 8.0, on_ms = 50.0, off_ms = 500.0, correlation = 0.3 }}\n"
            )
        };
        let run = |g: &str| Scenario::parse(&text(g)).unwrap().run(3, |_, _| {}).unwrap();
        let (req, flow) = (run("request"), run("flow"));
        assert_eq!(flow, run("flow"), "deterministic");
        // The no-consolidation figure is a sum of peaks: the two granularities agree within 15%;
        // the ratios (what the experiment is about) within 0.1.
        let g = |r: &Report, i: usize| r.results[i]["provisioned_gbps"].as_f64().unwrap();
        assert!((g(&flow, 0) / g(&req, 0) - 1.0).abs() < 0.15, "{} vs {}", g(&flow, 0), g(&req, 0));
        assert!((flow.capex_consolid_ratio.unwrap() - req.capex_consolid_ratio.unwrap()).abs() < 0.1);
        // And flow runs are not held to the request-granularity cell limit.
        let big = text("flow").replace("racks = 2", "racks = 3000").replace("duration_s = 4.0", "duration_s = 0.02");
        assert!(Scenario::parse(&big).unwrap().run(0, |_, _| {}).is_ok());
    }
}

#[cfg(test)]
mod replay {
    use super::*;

    #[test]
    fn a_csv_trace_replays_at_either_granularity() {
        let dir = std::env::temp_dir().join(format!("snic-sim-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.csv");
        // Endpoints a and b (rack 0), c (rack 1): a and b peak in different milliseconds.
        std::fs::write(&f, "time_s,endpoint,bytes\n0.0001,a,1000\n0.0011,b,1000\n0.0012,a,100\n0.0021,c,500\n").unwrap();
        let text = |g: &str| {
            format!(
                "name = \"t\"\nexperiment = \"consolidation\"\nduration_s = 0.003\nbin_ms = 1.0\ngranularity = \"{g}\"\n[topology]\nracks = 2\nendpoints_per_rack = 2\n[workload]\nkind = \"trace\"\nfile = \"{}\"\n",
                f.display()
            )
        };
        for g in ["request", "flow"] {
            let r = Scenario::parse(&text(g)).unwrap().run(0, |_, _| {}).unwrap();
            let bytes = |i: usize| r.results[i]["provisioned_gbps"].as_f64().unwrap() * 1e9 / 8.0 * 1e-3;
            // Sum of peaks 1000 + 1000 + 500; rack 0 peaks at 1100, rack 1 (c, idle) at 500.
            assert!((bytes(0) - 2500.0).abs() < 1e-6, "{g}: {}", bytes(0));
            assert!((bytes(1) - 1600.0).abs() < 1e-6, "{g}: {}", bytes(1));
        }
        // A trace that names tenants: in `victim_cache`, one chain per tenant.
        let g = dir.join("g.csv");
        std::fs::write(&g, "time_s,endpoint,bytes,tenant\n0.0001,a,1000,x\n0.0011,b,1000,x\n0.0021,c,500,y\n0.0031,a,10,x\n").unwrap();
        let victim = format!(
            "name = \"v\"\nexperiment = \"victim_cache\"\nduration_s = 0.01\nbin_ms = 1.0\n[topology]\nracks = 1\nendpoints_per_rack = 3\n[workload]\nkind = \"trace\"\nfile = \"{}\"\n[victim_cache]\ninstance_gbps = 1.0\nregions = 1\non_ms = 5.0\noff_ms = 5.0\nkeep_ratios = [0.0]\n",
            g.display()
        );
        let r = Scenario::parse(&victim).unwrap().run(0, |_, _| {}).unwrap();
        assert_eq!(r.results[0]["overcommit"].as_f64(), Some(2.0), "tenants x and y on one region: {:?}", r.results);
        // Both chains send, one region: each needed a launch.
        assert!(r.results[0]["launches"].as_u64() >= Some(2), "{:?}", r.results);
        std::fs::write(&g, "0.0001,a,1000,x\n0.0011,a,1000,y\n").unwrap();
        let e = Scenario::parse(&victim).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("endpoint `a` is in tenant"), "{e}");
        std::fs::write(&g, "0.0001,a,1000,x\n0.0011,b,1000\n").unwrap();
        let e = Scenario::parse(&victim).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("some endpoints have a tenant and others none"), "{e}");
        let missing = text("request").replace("t.csv", "missing.csv");
        let e = Scenario::parse(&missing).unwrap().run(0, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("missing.csv"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod fig13 {
    use super::*;

    /// More victims kept: fewer launches, victim hits instead, less waiting.
    #[test]
    fn keeping_victims_saves_launches_and_delay() {
        let text = include_str!("../../../scenarios/fig13.toml").replace("duration_s = 20.0", "duration_s = 8.0");
        let r = Scenario::parse(&text).unwrap().run(1, |_, _| {}).unwrap();
        let first = r.results[0]["regions"].clone();
        let get = |k: f64| r.results.iter().find(|x| x["regions"] == first && x["keep_ratio"].as_f64() == Some(k)).unwrap().clone();
        let (none, all) = (get(0.0), get(1.0));
        assert_eq!(none["resumes"], 0, "no victims, no victim hits");
        assert!(all["resumes"].as_u64().unwrap() > 0);
        assert!(all["launches"].as_u64() < none["launches"].as_u64(), "{all} vs {none}");
        assert!(all["mean_delay_ms"].as_f64() < none["mean_delay_ms"].as_f64(), "{all} vs {none}");
        let launches: Vec<u64> = r.results.iter().filter(|x| x["regions"] == first).map(|x| x["launches"].as_u64().unwrap()).collect();
        assert!(launches.windows(2).all(|w| w[1] <= w[0]), "launches fall as more victims are kept: {launches:?}");
        // Fewer regions for the same chains (more over-commitment): more launches.
        let at = |regions: u64| {
            r.results.iter().find(|x| x["regions"] == regions && x["keep_ratio"].as_f64() == Some(1.0)).unwrap()["launches"]
                .as_u64()
                .unwrap()
        };
        assert!(at(4) > at(8), "{} vs {}", at(4), at(8));
    }
}

#[cfg(test)]
mod fig14 {
    use super::*;

    /// The shipped scenario, shortened: every length × mode × load, one line per mode and load
    /// in the figure.
    #[test]
    fn the_chaining_scenario_reports_every_case() {
        let text = include_str!("../../../scenarios/fig14.toml").replace("duration_s = 0.01", "duration_s = 0.0005");
        let r = Scenario::parse(&text).unwrap().run(1, |_, _| {}).unwrap();
        assert_eq!(r.results.len(), 6 * 5 * 3);
        let plot::Figure::Lines { lines, .. } = &r.figure else { panic!("a line figure") };
        assert_eq!(lines.len(), 5 * 3);
        assert!(lines.iter().all(|l| l.1.len() == 6), "a point per length");
        assert!(lines.iter().any(|l| l.0 == "panic, load 0.8"));
    }

    /// Packets from the workload's tenants: every tenant's flows, the tenants' queues served in
    /// turn, nothing reordered, the offered load as asked on average; and the same scenario and
    /// seed give the same bytes.
    #[test]
    fn the_workload_driven_chaining_scenario_runs_every_tenant() {
        let text = include_str!("../../../scenarios/fig14-etc.toml")
            .replace("duration_s = 0.05", "duration_s = 0.005")
            .replace("nts = [2, 4, 7]", "nts = [4]")
            .replace("loads = [0.5, 0.8]", "loads = [0.5]");
        let s = Scenario::parse(&text).unwrap();
        let r = s.run(1, |_, _| {}).unwrap();
        assert_eq!(r.results.len(), 5);
        for x in &r.results {
            assert_eq!(x["tenants"], 8, "{x}");
            assert_eq!(x["reordered"], 0, "{x}");
            // 0.5 of an NT's capacity (one packet per 100 ns) = 5 Mpps on average, within the
            // randomness of 5 ms of bursty traffic.
            let pps = x["offered_pps"].as_f64().unwrap();
            assert!((4.0e6..6.0e6).contains(&pps), "{x}");
        }
        let visits = |m: &str| r.results.iter().find(|x| x["mode"] == m).unwrap()["visits_per_packet"].as_f64().unwrap();
        assert_eq!(visits("single"), 1.0);
        assert!(visits("panic") > 3.9, "one visit per NT: {}", visits("panic"));
        let again = serde_json::to_string(&s.run(1, |_, _| {}).unwrap().results).unwrap();
        assert_eq!(again, serde_json::to_string(&r.results).unwrap());
        // A topology without a workload is refused.
        let (head, tail) = text.split_once("[workload]").unwrap();
        let bad = format!("{head}{}", &tail[tail.find("[chaining]").unwrap()..]);
        let e = Scenario::parse(&bad).unwrap().run(1, |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("[topology] and [workload] together"), "{e}");
    }
}

#[cfg(test)]
mod fig22 {
    use super::*;

    #[test]
    fn a_consolidating_node_uses_less_than_separate_nts() {
        let r = Scenario::parse(include_str!("../../../scenarios/fig22.toml")).unwrap().run(1, |_, _| {}).unwrap();
        assert_eq!(r.results.len(), 4, "2 node sizes × 2 NT speeds");
        for x in &r.results {
            let ratio = x["usage_ratio"].as_f64().unwrap();
            assert!(ratio > 0.0 && ratio < 1.0, "{x}");
            assert!(x["consolidated_instances"].as_u64() <= x["separate_instances"].as_u64(), "{x}");
        }
        // Faster NTs: fewer instances either way.
        let inst = |k: u64, g: f64| {
            r.results.iter().find(|x| x["endpoints_per_node"] == k && x["nt_gbps"].as_f64() == Some(g)).unwrap()["separate_instances"]
                .as_u64()
                .unwrap()
        };
        assert!(inst(4, 4.0) < inst(4, 1.0) && inst(2, 1.0) < inst(4, 1.0));
    }
}

#[cfg(test)]
mod fig10 {
    use super::*;

    /// Paper Fig. 10's shape, from the nodes' own cores: with no background every topology is
    /// the same; as the background rises the single node (ten chains for eight regions:
    /// context switches, chains it cannot scale out) slows both classes down, while the pool
    /// carries everything; the intermediate topology pays for passing traffic on, and only when
    /// something runs on the peer.
    #[test]
    fn a_pool_keeps_the_foreground_whole_while_one_node_slows_down() {
        let text = include_str!("../../../scenarios/fig10.toml").replace("duration_s = 10.0", "duration_s = 4.0");
        let r = Scenario::parse(&text).unwrap().run(1, |_, _| {}).unwrap();
        assert_eq!(r.results.len(), 18, "6 background loads × 3 topologies");
        let row = |t: &str, bg: f64| r.results.iter().find(|x| x["topology"] == t && x["bg_load"].as_f64() == Some(bg)).unwrap().clone();
        let f = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap();
        let alone = row("single", 0.0);
        for t in ["ring", "switch"] {
            let x = row(t, 0.0);
            assert_eq!(f(&x, "fg_throughput"), f(&alone, "fg_throughput"), "{x}");
            assert_eq!((x["placements"].as_u64(), x["spills"].as_u64(), f(&x, "opex_vs_single")), (Some(0), Some(0), 1.0), "{x}");
        }
        let mut last = f(&alone, "opex_j");
        for bg in [0.25, 0.5, 0.75, 1.0, 1.25] {
            let (s, ring, sw) = (row("single", bg), row("ring", bg), row("switch", bg));
            assert!(f(&s, "context_switches") > 0.0 && f(&s, "fg_throughput") < f(&alone, "fg_throughput"), "one node thrashes: {s}");
            assert!(f(&s, "opex_j") >= last, "one node costs more as load rises: {s}");
            last = f(&s, "opex_j");
            for p in [&ring, &sw] {
                // (What waited while the overload was watched a MONITOR_PERIOD is served late:
                // over 4 s, up to 2% of the run.)
                assert!(f(p, "fg_throughput") > 0.98 && f(p, "bg_throughput") > 0.98, "the pool carries it: {p}");
                assert_eq!(f(p, "context_switches"), 0.0, "a peer comes before a context switch: {p}");
                assert!(f(p, "on_peers") > 0.0 && p["moves_back"].as_u64() <= p["placements"].as_u64(), "{p}");
            }
            assert_eq!(f(&ring, "on_peers"), f(&sw, "on_peers"), "two nodes: the same decisions either way");
            assert!(f(&ring, "opex_j") > f(&sw, "opex_j"), "passing traffic on costs: {ring} {sw}");
        }
        let s = row("single", 1.0);
        assert!(f(&s, "bg_throughput") < 0.8, "over-committed: {s}");
    }
}
