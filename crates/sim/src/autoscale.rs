//! The `autoscale` experiment (paper Fig. 12): performance slowdown against OpEx for the ways
//! of provisioning a rack's NT capacity, on the same workload, at flow granularity.
//!
//! **Model.** Time runs in bins. Each endpoint sends bytes per bin ([`crate::workload`]); its
//! traffic needs one NT whose instance (a region) serves `instance_gbps`. A *server* (an
//! endpoint's own NIC, or the rack's pool) has a capacity per bin and a FIFO fluid queue bounded
//! by `buffer_ms` of that capacity (bytes beyond it are dropped). The bytes arriving in a bin wait
//! on average for the backlog ahead of them and half the bin's own arrivals: delay =
//! (backlog + arrivals / 2) ÷ capacity. Slowdown is a scheme's mean delay over bytes divided by
//! no disaggregation's.
//!
//! **Schemes.** `no-disaggregation`: each endpoint has its own instances, enough for its own
//! peak bin. `multi-host-nic`: the same capacity in one rack device, each endpoint on its fixed
//! sub-link (the sum of peaks; no sharing). `static-max`: the rack's pool with enough instances
//! for the rack's peak bin; `static-avg`: for its average. `snic`: the rack's pool scaled by
//! `snic-core`'s auto-scaler and launcher — the daemon's code — with launches taking
//! `launch_ms`, descheduled instances kept as victims; `as-instant`: the instances the load
//! needs, every bin, at no cost (the unrealistic bound).
//!
//! **Costs.** CapEx: instances provisioned (for `snic`, the regions it may use). OpEx:
//! instance-time of instances actually serving (paper §7.2: only regions that are accessed
//! count), relative to static-max.

use crate::workload::{Spikes, Workload};
use serde::{Deserialize, Serialize};
use snic_core::autoscale::{AutoscaleConfig, Autoscaler, Scale};
use snic_core::ids::ChainId;
use snic_core::launcher::{Launcher, LauncherConfig, RegionState};
use snic_core::time::Instant;
use std::time::Duration;

/// The scenario's `[autoscale]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleSpec {
    /// Throughput of one NT instance, Gbit/s.
    pub instance_gbps: f64,
    /// Launch time (the paper's PR: 5 ms).
    #[serde(default = "five")]
    pub launch_ms: f64,
    /// MONITOR_PERIOD.
    #[serde(default = "five")]
    pub monitor_period_ms: f64,
    /// Load per instance above which it is overloaded.
    #[serde(default = "high")]
    pub high: f64,
    /// Regions of the rack's pool (default: static-max's instances).
    #[serde(default)]
    pub regions: Option<usize>,
    /// Queue bound, ms of a server's capacity.
    #[serde(default = "buffer")]
    pub buffer_ms: f64,
    /// Spike correlations to compare (each a variant of the scenario's workload).
    #[serde(default)]
    pub correlations: Vec<f64>,
}

fn five() -> f64 {
    5.0
}
fn high() -> f64 {
    0.9
}
fn buffer() -> f64 {
    10.0
}

/// One scheme's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SchemeFigures {
    /// The scheme.
    pub scheme: &'static str,
    /// The spike correlation of the workload variant.
    pub correlation: f64,
    /// Mean delay over bytes ÷ no disaggregation's.
    pub slowdown: f64,
    /// Mean delay over bytes, ms.
    pub mean_delay_ms: f64,
    /// 99th percentile of delay over bytes, ms.
    pub p99_delay_ms: f64,
    /// Bytes dropped at a full queue, fraction of bytes offered.
    pub dropped: f64,
    /// Instances provisioned.
    pub capex_instances: usize,
    /// Instance-seconds of instances serving traffic.
    pub opex_instance_s: f64,
    /// `opex_instance_s` ÷ static-max's.
    pub opex_vs_static_max: f64,
    /// Scale events (snic only).
    pub scale_events: u64,
}

/// A FIFO fluid queue.
#[derive(Debug, Default)]
struct Server {
    backlog: f64,
}

/// Delay samples weighted by bytes, for the mean and percentiles.
#[derive(Debug, Default)]
struct Delays {
    samples: Vec<(f64, f64)>,
    dropped: f64,
    offered: f64,
}

impl Delays {
    fn mean(&self) -> f64 {
        let (w, s) = self.samples.iter().fold((0.0, 0.0), |(w, s), &(d, b)| (w + b, s + d * b));
        if w > 0.0 {
            s / w
        } else {
            0.0
        }
    }

    fn quantile(&mut self, q: f64) -> f64 {
        self.samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: f64 = self.samples.iter().map(|s| s.1).sum();
        let mut acc = 0.0;
        for &(d, b) in &self.samples {
            acc += b;
            if acc >= q * total {
                return d;
            }
        }
        self.samples.last().map_or(0.0, |s| s.0)
    }
}

impl Server {
    /// One bin: `arrivals` bytes, `capacity` bytes per bin, queue bound `bound` bytes.
    fn bin(&mut self, arrivals: f64, capacity: f64, bound: f64, bin_ms: f64, d: &mut Delays) {
        d.offered += arrivals;
        if arrivals <= 0.0 && self.backlog <= 0.0 {
            return;
        }
        if capacity <= 0.0 {
            // Nothing serves: everything waits, up to the bound.
            let kept = arrivals.min((bound - self.backlog).max(0.0));
            d.dropped += arrivals - kept;
            self.backlog += kept;
            if kept > 0.0 {
                d.samples.push((f64::INFINITY, kept));
            }
            return;
        }
        let delay = (self.backlog + arrivals / 2.0) / capacity * bin_ms;
        let left = (self.backlog + arrivals - capacity).max(0.0);
        let over = (left - bound).max(0.0);
        d.dropped += over;
        if arrivals > over {
            d.samples.push((delay, arrivals - over));
        }
        self.backlog = left - over;
    }
}

impl AutoscaleSpec {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), String> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let non_neg = |v: f64| v.is_finite() && v >= 0.0;
        if !pos(self.instance_gbps) || !pos(self.buffer_ms) || !non_neg(self.launch_ms) || !non_neg(self.monitor_period_ms) {
            return Err("autoscale: instance_gbps and buffer_ms must be positive, launch_ms and monitor_period_ms zero or more".into());
        }
        if !(self.high > 0.0 && self.high <= 1.0) {
            return Err("autoscale.high must be in (0, 1]".into());
        }
        if self.correlations.iter().any(|c| !(0.0..=1.0).contains(c)) {
            return Err("autoscale.correlations must lie in [0, 1]".into());
        }
        if self.regions == Some(0) {
            return Err("autoscale.regions must be at least 1".into());
        }
        Ok(())
    }

    /// Runs every scheme on each correlation variant of `workload` (`endpoints` endpoints of one
    /// rack, `bins` bins of `bin_ms`).
    pub fn run(
        &self,
        workload: &Workload,
        seed: u64,
        endpoints: usize,
        bins: usize,
        bin_ms: f64,
        mut progress: impl FnMut(usize, usize),
    ) -> Vec<SchemeFigures> {
        let variants: Vec<Workload> = if self.correlations.is_empty() {
            vec![workload.clone()]
        } else {
            self.correlations
                .iter()
                .map(|&c| match workload {
                    Workload::Etc { rate_scale, spikes } => {
                        Workload::Etc { rate_scale: *rate_scale, spikes: Spikes { correlation: c, ..*spikes } }
                    }
                    w => w.clone(),
                })
                .collect()
        };
        let mut out = Vec::new();
        let n = variants.len();
        for (k, w) in variants.iter().enumerate() {
            let corr = match w {
                Workload::Etc { spikes, .. } => spikes.correlation,
                _ => 0.0,
            };
            let load = w.series(seed, endpoints, bins, bin_ms / 1e3, |e| progress(k * endpoints + e, n * endpoints));
            out.extend(self.schemes(&load, corr, bins, bin_ms));
        }
        progress(n * endpoints, n * endpoints);
        out
    }

    fn schemes(&self, load: &[Vec<f64>], corr: f64, bins: usize, bin_ms: f64) -> Vec<SchemeFigures> {
        let per_inst = self.instance_gbps * 1e9 / 8.0 * bin_ms / 1e3; // bytes per bin
        let bound = |cap: f64| cap * self.buffer_ms / bin_ms;
        let total: Vec<f64> = (0..bins).map(|b| load.iter().map(|s| s[b]).sum()).collect();
        let need = |bytes: f64| (bytes / per_inst).ceil().max(1.0) as usize;
        let peak = total.iter().copied().fold(0.0, f64::max);
        let avg = total.iter().sum::<f64>() / bins.max(1) as f64;
        let bin_s = bin_ms / 1e3;
        let mut rows: Vec<(&'static str, Delays, usize, f64, u64)> = Vec::new();
        // Per-endpoint provisioning: each endpoint its own server (no disaggregation; a
        // multi-host NIC's fixed sub-links give the same service).
        let own: Vec<usize> = load.iter().map(|s| need(s.iter().copied().fold(0.0, f64::max))).collect();
        let mut d = Delays::default();
        let mut opex = 0.0;
        for (s, &k) in load.iter().zip(&own) {
            let mut srv = Server::default();
            for &a in s {
                srv.bin(a, k as f64 * per_inst, bound(k as f64 * per_inst), bin_ms, &mut d);
                if a > 0.0 {
                    opex += k as f64 * bin_s;
                }
            }
        }
        let capex: usize = own.iter().sum();
        rows.push(("no-disaggregation", d, capex, opex, 0));
        let mut d2 = Delays::default();
        for (s, &k) in load.iter().zip(&own) {
            let mut srv = Server::default();
            for &a in s {
                srv.bin(a, k as f64 * per_inst, bound(k as f64 * per_inst), bin_ms, &mut d2);
            }
        }
        rows.push(("multi-host-nic", d2, capex, opex, 0));
        // The rack's pool, statically provisioned.
        for (name, k) in [("static-max", need(peak)), ("static-avg", need(avg))] {
            let (mut srv, mut d, mut opex) = (Server::default(), Delays::default(), 0.0);
            for &a in &total {
                srv.bin(a, k as f64 * per_inst, bound(k as f64 * per_inst), bin_ms, &mut d);
                if a > 0.0 || srv.backlog > 0.0 {
                    opex += k as f64 * bin_s;
                }
            }
            rows.push((name, d, k, opex, 0));
        }
        // The snic pool: the daemon's auto-scaler and launcher.
        let regions = self.regions.unwrap_or(need(peak));
        let launch = Duration::from_secs_f64(self.launch_ms / 1e3);
        let mut launcher = Launcher::new(LauncherConfig { share_below: 0.8, launch_time: launch }, regions);
        let mut scaler = Autoscaler::new(AutoscaleConfig {
            monitor_period: Duration::from_secs_f64(self.monitor_period_ms / 1e3),
            high: self.high,
            launch_time: launch,
            deschedule_idle: false,
            scale: true,
        });
        let chain = ChainId(0);
        launcher.prelaunch(chain, Instant::ZERO);
        launcher.tick(Instant::ZERO + launch);
        let (mut srv, mut d, mut opex, mut events) = (Server::default(), Delays::default(), 0.0, 0u64);
        let running = |l: &Launcher| l.regions().iter().filter(|r| matches!(r, RegionState::Running { .. })).count();
        let mut smoothed = 0.0;
        for (b, &a) in total.iter().enumerate() {
            let now = Instant::ZERO + launch + Duration::from_secs_f64(b as f64 * bin_s);
            launcher.tick(now);
            let k = running(&launcher);
            srv.bin(a, k as f64 * per_inst, bound(k as f64 * per_inst), bin_ms, &mut d);
            if a > 0.0 || srv.backlog > 0.0 {
                opex += k as f64 * bin_s;
            }
            // The load the chain carries, in instances' worth (smoothed as the node does).
            smoothed += 0.25 * (a / per_inst - smoothed);
            let active =
                launcher.regions().iter().filter(|r| matches!(r, RegionState::Running { .. } | RegionState::Launching { .. })).count();
            match scaler.observe(now, chain, smoothed, active, launcher.has_room()) {
                Some(Scale::Out(_)) if launcher.scale_out(chain, now).is_some() => events += 1,
                Some(Scale::In(_)) => {
                    // The most recently started instance stops (it stays loaded, a victim).
                    if let Some(r) = launcher.regions().iter().rposition(|r| matches!(r, RegionState::Running { .. })) {
                        launcher.deschedule(r, now);
                        events += 1;
                    }
                }
                _ => {}
            }
        }
        rows.push(("snic", d, regions, opex, events));
        // As-instant: what the load needs, every bin, for free.
        let (mut srv, mut d, mut opex) = (Server::default(), Delays::default(), 0.0);
        let mut most = 0;
        for &a in &total {
            let k = ((a / per_inst / self.high).ceil() as usize).max(1);
            most = most.max(k);
            srv.bin(a, k as f64 * per_inst, bound(k as f64 * per_inst), bin_ms, &mut d);
            if a > 0.0 || srv.backlog > 0.0 {
                opex += k as f64 * bin_s;
            }
        }
        rows.push(("as-instant", d, most, opex, 0));
        let base = rows[0].1.mean();
        let max_opex = rows.iter().find(|r| r.0 == "static-max").map_or(1.0, |r| r.3);
        rows.into_iter()
            .map(|(scheme, mut d, capex, opex, events)| {
                let mean = d.mean();
                SchemeFigures {
                    scheme,
                    correlation: corr,
                    slowdown: if base > 0.0 { mean / base } else { 1.0 },
                    mean_delay_ms: mean,
                    p99_delay_ms: d.quantile(0.99),
                    dropped: if d.offered > 0.0 { d.dropped / d.offered } else { 0.0 },
                    capex_instances: capex,
                    opex_instance_s: opex,
                    opex_vs_static_max: if max_opex > 0.0 { opex / max_opex } else { 0.0 },
                    scale_events: events,
                }
            })
            .collect()
    }
}
