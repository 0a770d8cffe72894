//! The `victim_cache` experiment (paper Fig. 13): how often a descheduled chain is kept loaded
//! as a victim (instead of being deleted) against performance and OpEx.
//!
//! **Model.** Each endpoint of the rack is a tenant with a chain of its own; it alternates
//! between active periods (sending its workload's bytes) and silent ones (exponential lengths,
//! `on_ms` / `off_ms`). The rack's pool has `regions` regions, fewer than chains (area
//! over-commitment). A chain with bytes and no region is placed by `snic-core`'s elasticity policy — the
//! daemon's code — in the paper's order (resume a victim, launch into a free region, else stop
//! the least loaded chain); a launch takes `[node.elastic]`'s `launch_delay_ms`, during which its bytes
//! wait. A chain silent for its `monitor_period_ms` is descheduled: kept as a victim with probability `keep_ratio`, deleted
//! otherwise. Each chain has a FIFO fluid queue (`fluid`, as in the `autoscale` experiment). OpEx counts
//! regions serving or being launched (reconfiguration costs power too).

use crate::fluid::{Delays, Server};
use crate::workload::Workload;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use snic_core::elastic::{Act, ElasticConfig, Elasticity};
use snic_core::ids::ChainId;
use snic_core::launcher::{Decision, PeerRoom, RegionState};
use snic_core::time::Instant;
use std::time::Duration;

/// One chain per named tenant, in order of first appearance among the endpoints, carrying
/// the sum of its endpoints' bytes; a chain is active in the bins it has bytes in.
fn by_tenant(load: Vec<Vec<f64>>, names: &[Option<String>]) -> (Vec<Vec<f64>>, Vec<Vec<bool>>) {
    let mut chains: Vec<(&str, Vec<f64>)> = Vec::new();
    for (row, name) in load.into_iter().zip(names) {
        let Some(name) = name.as_deref() else { continue };
        match chains.iter_mut().find(|c| c.0 == name) {
            Some(c) => c.1.iter_mut().zip(&row).for_each(|(a, b)| *a += b),
            None => chains.push((name, row)),
        }
    }
    let load: Vec<Vec<f64>> = chains.into_iter().map(|c| c.1).collect();
    let active = load.iter().map(|r| r.iter().map(|&x| x > 0.0).collect()).collect();
    (load, active)
}

/// The scenario's `[victim_cache]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VictimSpec {
    /// Throughput of one region, Gbit/s.
    pub instance_gbps: f64,
    /// Regions of the rack's pool.
    pub regions: usize,
    /// Also run with these region counts (area over-commitment: chains ÷ regions).
    #[serde(default)]
    pub regions_sweep: Vec<usize>,
    /// Mean active period of a tenant, ms.
    pub on_ms: f64,
    /// Mean silent period of a tenant, ms.
    pub off_ms: f64,
    /// Fractions of descheduled chains kept as victims, each a run.
    pub keep_ratios: Vec<f64>,
    /// Queue bound per chain, ms of a region's capacity.
    #[serde(default = "fifty")]
    pub buffer_ms: f64,
    /// The packet the bytes travel in, bytes: its service at a region is the latency without
    /// queueing (default 1500).
    #[serde(default = "crate::fluid::packet_bytes")]
    pub packet_bytes: f64,
}

fn fifty() -> f64 {
    50.0
}

/// One keep ratio's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VictimFigures {
    /// `snic`.
    pub scheme: &'static str,
    /// Regions of the pool.
    pub regions: usize,
    /// Chains per region (area over-commitment).
    pub overcommit: f64,
    /// Fraction of descheduled chains kept as victims.
    pub keep_ratio: f64,
    /// Mean delay over bytes ÷ that with no victim cache (keep ratio 0, same regions).
    pub slowdown_vs_no_victims: f64,
    /// Mean delay over bytes, ms.
    pub mean_delay_ms: f64,
    /// Median delay over bytes, ms.
    pub p50_delay_ms: f64,
    /// 99th percentile of delay over bytes, ms.
    pub p99_delay_ms: f64,
    /// Bytes dropped at a full queue, fraction.
    pub dropped: f64,
    /// Launches (into a free region or by stop-and-launch).
    pub launches: u64,
    /// Victim hits.
    pub resumes: u64,
    /// Region-seconds serving or launching.
    pub opex_region_s: f64,
    /// `opex_region_s` ÷ that with no victim cache.
    pub opex_vs_no_victims: f64,
}

impl VictimSpec {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), String> {
        use crate::positive as pos;
        if !pos(self.instance_gbps) || !pos(self.on_ms) || !pos(self.off_ms) || !pos(self.buffer_ms) {
            return Err("victim_cache: instance_gbps, on_ms, off_ms and buffer_ms must be positive".into());
        }
        if self.regions == 0 || self.regions_sweep.contains(&0) {
            return Err("victim_cache: regions at least 1".into());
        }
        if self.keep_ratios.is_empty() || self.keep_ratios.iter().any(|k| !(0.0..=1.0).contains(k)) {
            return Err("victim_cache.keep_ratios: at least one, each in [0, 1]".into());
        }
        if !pos(self.packet_bytes) {
            return Err("victim_cache.packet_bytes must be positive".into());
        }
        Ok(())
    }

    /// Runs each keep ratio on the same workload (`tenants` chains, `bins` bins of `bin_ms`).
    /// A replayed trace that names tenants gives one chain per tenant instead, carrying its
    /// endpoints' bytes (of the first `tenants` endpoints), active in the bins it sends in.
    /// The pool follows `elastic` (the scenario's `[node.elastic]`: launch delay, and the
    /// MONITOR_PERIOD of silence after which a chain is descheduled).
    pub fn run(
        &self,
        workload: &Workload,
        elastic: &ElasticConfig,
        seed: u64,
        tenants: usize,
        bins: usize,
        bin_ms: f64,
    ) -> Vec<VictimFigures> {
        let bin_s = bin_ms / 1e3;
        let load = workload.series(seed, tenants, bins, bin_s, |_| {});
        let (load, active) = match workload {
            Workload::Loaded { tenants: names, .. } if names.iter().any(Option::is_some) => by_tenant(load, names),
            _ => {
                let active = self.activity(seed, load.len(), bins, bin_s);
                (load, active)
            }
        };
        let mut counts = vec![self.regions];
        counts.extend(self.regions_sweep.iter().copied().filter(|&r| r != self.regions));
        let mut out = Vec::new();
        for regions in counts {
            let mut rows: Vec<VictimFigures> =
                self.keep_ratios.iter().map(|&k| self.one(elastic, k, regions, seed, &load, &active, bins, bin_ms)).collect();
            let base = rows.iter().find(|r| r.keep_ratio == 0.0).map(|r| (r.mean_delay_ms, r.opex_region_s));
            for r in &mut rows {
                let (d, o) = base.unwrap_or((r.mean_delay_ms, r.opex_region_s));
                r.slowdown_vs_no_victims = if d > 0.0 { r.mean_delay_ms / d } else { 1.0 };
                r.opex_vs_no_victims = if o > 0.0 { r.opex_region_s / o } else { 1.0 };
            }
            out.extend(rows);
        }
        out
    }

    /// The on/off periods of `chains` chains over `bins` bins (the same for every keep ratio).
    fn activity(&self, seed: u64, chains: usize, bins: usize, bin_s: f64) -> Vec<Vec<bool>> {
        let mut active = vec![vec![false; bins]; chains];
        for (c, row) in active.iter_mut().enumerate() {
            let mut r = Pcg64::seed_from_u64(seed ^ 0xac71_0000 ^ c as u64);
            let mut exp = |mean: f64| -(1.0 - r.random::<f64>()).ln() * mean / 1e3;
            let (mut t, mut on) = (exp(self.off_ms), false);
            let mut b = 0;
            while b < bins {
                let until = ((t / bin_s) as usize).min(bins);
                for x in &mut row[b..until] {
                    *x = on;
                }
                b = until.max(b + 1);
                on = !on;
                t += exp(if on { self.on_ms } else { self.off_ms });
            }
        }
        active
    }

    #[allow(clippy::too_many_arguments)] // one run's dimensions
    fn one(
        &self,
        elastic: &ElasticConfig,
        keep: f64,
        regions: usize,
        seed: u64,
        load: &[Vec<f64>],
        active: &[Vec<bool>],
        bins: usize,
        bin_ms: f64,
    ) -> VictimFigures {
        let bin_s = bin_ms / 1e3;
        let per_region = self.instance_gbps * 1e9 / 8.0 * bin_s;
        let service = crate::fluid::service_ms(self.packet_bytes, self.instance_gbps);
        let bound = per_region * self.buffer_ms / bin_ms;
        // The node's elasticity policy: no scaling, a chain idle for a MONITOR_PERIOD
        // descheduled.
        let mut l = Elasticity::new(ElasticConfig { regions, autoscale: false, deschedule_idle: true, ..*elastic });
        let mut coin = Pcg64::seed_from_u64(seed ^ 0x71c7);
        let n = load.len();
        for c in 0..n {
            l.add_chain(ChainId(c as u16));
        }
        let (mut queue, mut silent_since) = (vec![Server::default(); n], vec![0usize; n]);
        let mut d = Delays::default();
        let (mut launches, mut resumes, mut opex) = (0u64, 0u64, 0.0);
        let mut acts = Vec::new();
        for b in 0..bins {
            let now = Instant::ZERO + Duration::from_secs_f64(b as f64 * bin_s);
            l.tick(now);
            for c in 0..n {
                let a = if active[c][b] { load[c][b] } else { 0.0 };
                let backlog = queue[c].backlog;
                let chain = ChainId(c as u16);
                if (a > 0.0 || backlog > 0.0) && l.instances(chain) == 0 {
                    match l.on_demand(chain, now, PeerRoom::None) {
                        Decision::Resume { .. } => resumes += 1,
                        Decision::Launch { .. } | Decision::ContextSwitch { .. } => launches += 1,
                        _ => {}
                    }
                }
                let running = l.regions().iter().any(|r| matches!(*r, RegionState::Running { chain: x, .. } if x == chain));
                let cap = if running { per_region } else { 0.0 };
                // The fluid queue the `autoscale` experiment uses too; with no region running
                // (a launch under way), bytes wait.
                queue[c].bin(a, cap, per_region, bound, bin_ms, service, &mut d);
                if a > 0.0 || backlog > 0.0 {
                    silent_since[c] = b;
                }
                // Its load (which the launcher weighs when it must stop a chain) and its
                // silence, to the policy: idle for a period, it is descheduled.
                l.epoch(now, chain, (a + backlog) / per_region, &mut acts);
                for act in acts.drain(..) {
                    if let Act::Stop { region, .. } = act {
                        // Kept as a victim with probability `keep`, deleted otherwise.
                        l.stopped(region, now, coin.random::<f64>() < keep);
                    }
                }
            }
            let busy = l
                .regions()
                .iter()
                .filter(|r| match **r {
                    RegionState::Launching { .. } => true,
                    RegionState::Running { chain, .. } => queue[chain.index()].backlog > 0.0 || silent_since[chain.index()] == b,
                    _ => false,
                })
                .count();
            opex += busy as f64 * bin_s;
        }
        VictimFigures {
            scheme: "snic",
            regions,
            overcommit: n as f64 / regions as f64,
            keep_ratio: keep,
            slowdown_vs_no_victims: 1.0,
            mean_delay_ms: d.mean(),
            p50_delay_ms: d.quantile(0.5),
            p99_delay_ms: d.quantile(0.99),
            dropped: if d.offered > 0.0 { d.dropped / d.offered } else { 0.0 },
            launches,
            resumes,
            opex_region_s: opex,
            opex_vs_no_victims: 1.0,
        }
    }
}
