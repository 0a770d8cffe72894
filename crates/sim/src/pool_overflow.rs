//! The `pool_overflow` experiment (paper Fig. 10): a foreground workload on one node while a
//! background load on the same node rises — a single node against a pool of two in the
//! intermediate topology (the home node passes the redirected traffic on to its neighbour) and
//! behind a switch (the switch sends it to the peer directly) — performance and OpEx.
//!
//! **Model.** A pool of fluid nodes on one virtual clock ([`crate::pool_node`]), each running
//! the node's own core — its elasticity policy, pool agent and spill policy, the daemon's code —
//! in bins of `bin_ms` (each an epoch). `nodes` nodes of `regions` regions; a region runs one
//! instance of one chain at `instance_gbps`. Node 0 is the home of every chain: the foreground
//! tenants (the first rack's endpoints of `[topology]`, sending the `[workload]` — Facebook ETC
//! in the paper — scaled so that their mean is `fg_load` of one node's capacity), each with a
//! chain, and `bg_chains` background chains that share a constant load of `bg_load` of one
//! node's capacity (each value of `bg_loads` a run), each chain's bytes carried by `flows`
//! flows. The work is throughput oriented: what a chain's instances cannot serve in a bin waits
//! for the next (the job runs longer); the run ends when everything offered in `duration_s` is
//! served.
//!
//! What happens is what the cores decide: a chain with traffic and no instance is launched on
//! demand in the paper's order (a free region, then — in a pool — a peer with room, last a
//! context switch of the least-loaded region, which costs the `[node.elastic]` launch delay);
//! the auto-scaler adds instances when a chain's load outgrows them for a MONITOR_PERIOD and
//! there is room; a chain overloaded with no room spills a share of its new flows to a peer; a
//! chain placed on a peer comes home once home has had room a whole MONITOR_PERIOD. Peers learn
//! each other's load from reports every `gossip_ms`.
//!
//! **Performance**: each class's throughput (its bytes over the time until they were all
//! served) relative to the offered rate (1: not slowed). **OpEx**: energy — each node's static
//! power while it runs or launches any chain, plus energy per Gbit processed, plus
//! (intermediate topology only) energy per Gbit passed on to a peer, per hop. The energy
//! figures are assumptions of the scenario, not measurements.

use crate::pool_node::{PoolSetup, PoolSim};
use serde::{Deserialize, Serialize};
use snic_core::elastic::ElasticConfig;
use snic_core::pool::AgentConfig;
use std::time::Duration;

/// The scenario's `[pool_overflow]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OverflowSpec {
    /// Nodes (node 0 is the home; the others are peers).
    #[serde(default = "nodes")]
    pub nodes: usize,
    /// Regions per node.
    pub regions: usize,
    /// One instance's capacity, Gbit/s.
    pub instance_gbps: f64,
    /// Mean foreground load, share of one node's capacity.
    pub fg_load: f64,
    /// Background chains.
    pub bg_chains: usize,
    /// Background loads, each a share of one node's capacity: one run each.
    pub bg_loads: Vec<f64>,
    /// Load report period, ms.
    #[serde(default = "gossip_ms")]
    pub gossip_ms: f64,
    /// Concurrent flows carrying each chain's bytes.
    #[serde(default = "flows")]
    pub flows: usize,
    /// Mean flow lifetime, ms (exponential).
    #[serde(default = "flow_ms")]
    pub flow_ms: f64,
    /// A flow spilled to a peer not seen this long has ended (`pool.flow_idle_ms`), ms.
    #[serde(default = "flow_idle_ms")]
    pub flow_idle_ms: f64,
    /// A node's static power while it runs a chain, W.
    pub node_w: f64,
    /// Energy per Gbit processed, J.
    pub process_j_per_gbit: f64,
    /// Energy per Gbit passed on to a peer (intermediate topology), J.
    pub pass_j_per_gbit: f64,
}

fn nodes() -> usize {
    2
}
fn gossip_ms() -> f64 {
    100.0
}
fn flows() -> usize {
    64
}
fn flow_ms() -> f64 {
    100.0
}
fn flow_idle_ms() -> f64 {
    500.0
}

/// One row: a topology at a background load.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OverflowRow {
    /// `single`, `ring` or `switch`.
    pub topology: &'static str,
    /// Background load, share of one node's capacity.
    pub bg_load: f64,
    /// Foreground throughput relative to its offered rate (1: not slowed).
    pub fg_throughput: f64,
    /// The same for the background.
    pub bg_throughput: f64,
    /// Until everything was served, s (the offered load lasts `duration_s`).
    pub makespan_s: f64,
    /// Share of all bytes served on a peer.
    pub on_peers: f64,
    /// Chains placed whole on a peer over the run.
    pub placements: u64,
    /// Brought home.
    pub moves_back: u64,
    /// Chains that spilled a share of their flows to a peer.
    pub spills: u64,
    /// Stop-and-launch of a running chain, pool-wide.
    pub context_switches: u64,
    /// Hosting asked of a peer and refused.
    pub refusals: u64,
    /// Energy, J.
    pub opex_j: f64,
    /// Against the single node at the same background load.
    pub opex_vs_single: f64,
}

/// Most time a run may take to serve what was offered, in multiples of `duration_s`.
const MAX_STRETCH: f64 = 20.0;

impl OverflowSpec {
    /// Checks the section.
    pub fn validate(&self) -> Result<(), String> {
        if !(2..=64).contains(&self.nodes) || !(1..=4096).contains(&self.regions) || !(0..=4096).contains(&self.bg_chains) {
            return Err("pool_overflow: nodes from 2 to 64, regions from 1 to 4096, bg_chains at most 4096".into());
        }
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let nonneg = |v: f64| v.is_finite() && v >= 0.0;
        if !(pos(self.instance_gbps) && pos(self.gossip_ms) && nonneg(self.fg_load) && self.fg_load <= 4.0) {
            return Err("pool_overflow: instance_gbps and gossip_ms must be positive, fg_load in [0, 4]".into());
        }
        if !((1..=4096).contains(&self.flows) && pos(self.flow_ms) && pos(self.flow_idle_ms) && self.flow_idle_ms <= 3.6e6) {
            return Err("pool_overflow: flows from 1 to 4096, flow_ms positive, flow_idle_ms in (0, 3600000]".into());
        }
        if self.bg_loads.is_empty() || self.bg_loads.iter().any(|l| !(nonneg(*l) && *l <= 4.0)) {
            return Err("pool_overflow: bg_loads must list loads in [0, 4]".into());
        }
        if !(nonneg(self.node_w) && nonneg(self.process_j_per_gbit) && nonneg(self.pass_j_per_gbit)) {
            return Err("pool_overflow: node_w, process_j_per_gbit and pass_j_per_gbit must not be negative".into());
        }
        Ok(())
    }

    /// Every topology at every background load; `fg` is the foreground tenants' bytes per bin,
    /// `elastic` the scenario's `[node.elastic]` (launch delay, MONITOR_PERIOD, `high`,
    /// victims: the regions and scaling are this experiment's).
    pub fn run(&self, fg: &[Vec<f64>], elastic: &ElasticConfig, seed: u64, bin_s: f64, duration_s: f64) -> Vec<OverflowRow> {
        let mut rows = Vec::new();
        for &bg in &self.bg_loads {
            let single = self.run_one("single", bg, fg, elastic, seed, bin_s, duration_s);
            let base = single.opex_j;
            for topo in ["single", "ring", "switch"] {
                let mut r = if topo == "single" { single.clone() } else { self.run_one(topo, bg, fg, elastic, seed, bin_s, duration_s) };
                r.opex_vs_single = if base > 0.0 { r.opex_j / base } else { 1.0 };
                rows.push(r);
            }
        }
        rows
    }

    #[allow(clippy::too_many_arguments)] // one run's dimensions
    fn run_one(
        &self,
        topo: &'static str,
        bg_load: f64,
        fg: &[Vec<f64>],
        elastic: &ElasticConfig,
        seed: u64,
        bin_s: f64,
        duration_s: f64,
    ) -> OverflowRow {
        let node_gbps = self.regions as f64 * self.instance_gbps;
        let bins = (duration_s / bin_s).ceil() as usize;
        // Offered Gbit per bin, per chain: the foreground's scaled to its mean, then the
        // background's, constant.
        let fg_mean: f64 = fg.iter().map(|s| s.iter().sum::<f64>()).sum::<f64>() / bins.max(1) as f64;
        let scale = if fg_mean > 0.0 { self.fg_load * node_gbps * bin_s / fg_mean } else { 0.0 };
        let n_fg = fg.len();
        let n = n_fg + self.bg_chains;
        let bg_each = if self.bg_chains == 0 { 0.0 } else { bg_load * node_gbps * bin_s / self.bg_chains as f64 };
        let elastic = ElasticConfig { regions: self.regions, autoscale: true, ..*elastic };
        // The intermediate topology: a ring; behind a switch every peer is one hop away.
        let links = if topo == "ring" { ring(self.nodes) } else { Vec::new() };
        let mut pool = PoolSim::new(PoolSetup {
            nodes: if topo == "single" { 1 } else { self.nodes },
            elastic,
            agent: AgentConfig {
                monitor_period: elastic.monitor_period,
                // Three reports' worth: a report a little late still counts.
                report_ttl: Duration::from_secs_f64(self.gossip_ms * 3e-3),
                flow_idle: Duration::from_secs_f64(self.flow_idle_ms / 1e3),
                ..AgentConfig::default()
            },
            pooled: topo != "single",
            links,
            instance_gbps: self.instance_gbps,
            bin: Duration::from_secs_f64(bin_s),
            gossip_bins: ((self.gossip_ms / 1e3) / bin_s).round().max(1.0) as usize,
            flows: self.flows,
            flow_bins: (self.flow_ms / 1e3) / bin_s,
            seed,
        });
        for _ in 0..n {
            pool.add_chain(0);
        }
        let limit = ((duration_s * MAX_STRETCH) / bin_s).ceil() as usize;
        let mut offered = vec![0.0; n];
        let mut b = 0usize;
        while b < limit {
            for (c, o) in offered.iter_mut().enumerate() {
                *o = if b >= bins {
                    0.0
                } else if c < n_fg {
                    fg[c].get(b).copied().unwrap_or(0.0) * scale
                } else {
                    bg_each
                };
            }
            pool.step(&offered);
            b += 1;
            // (A residue below a bit is served.)
            if b >= bins && (0..n).all(|c| pool.waiting(c) <= 1e-9) {
                break;
            }
        }
        // Until each class's last byte was served (at least the offered time; the whole run if
        // some was never served).
        let span = |cs: std::ops::Range<usize>| {
            let unserved = cs.clone().any(|c| pool.waiting(c) > 1e-9);
            let done = if unserved { b as u64 } else { cs.map(|c| pool.done_bin(c)).max().unwrap_or(0) };
            done.max(bins as u64) as f64 * bin_s
        };
        let served: f64 = pool.served.iter().sum();
        let busy_s: f64 = (0..pool.served.len()).map(|i| pool.busy_bins(i) as f64 * bin_s).sum();
        let mut energy = self.node_w * busy_s + served * self.process_j_per_gbit;
        if topo == "ring" {
            energy += pool.passed_hops * self.pass_j_per_gbit;
        }
        let c = pool.counts;
        OverflowRow {
            topology: topo,
            bg_load,
            fg_throughput: if n_fg == 0 { 1.0 } else { duration_s / span(0..n_fg) },
            bg_throughput: if self.bg_chains == 0 || bg_load == 0.0 { 1.0 } else { duration_s / span(n_fg..n) },
            makespan_s: b as f64 * bin_s,
            on_peers: if served > 0.0 { pool.served_away / served } else { 0.0 },
            placements: c.placements,
            moves_back: c.moves_back,
            spills: c.spills,
            context_switches: c.context_switches,
            refusals: c.refusals,
            opex_j: energy,
            opex_vs_single: 1.0,
        }
    }
}

/// The links of a ring of `n` nodes (two nodes: one link).
fn ring(n: usize) -> Vec<[usize; 2]> {
    match n {
        0 | 1 => Vec::new(),
        2 => vec![[0, 1]],
        _ => (0..n).map(|i| [i, (i + 1) % n]).collect(),
    }
}
