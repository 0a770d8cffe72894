//! The `pool_overflow` experiment (paper Fig. 10): a foreground workload on one node while a
//! background load on the same node rises — a single node against a pool of two in the
//! intermediate topology (the home node passes the redirected traffic on to its neighbour) and
//! behind a switch (the switch sends it to the peer directly) — performance and OpEx.
//!
//! **Model.** Fluid, in bins of `bin_ms`. `nodes` nodes of `regions` regions; a region runs one
//! instance at `instance_gbps`. Node 0 is the home of every chain: the foreground tenants (the
//! first rack's endpoints of `[topology]`, sending the `[workload]` — Facebook ETC in the
//! paper — scaled so that their mean is `fg_load` of one node's capacity), each with a chain,
//! and `bg_chains` background chains that share a constant load of `bg_load` of one node's
//! capacity (each value of `bg_loads` a run). The work is throughput oriented: what a node
//! cannot serve in a bin waits for the next (the job runs longer); the run ends when everything
//! offered in `duration_s` is served.
//!
//! Each `monitor_ms` the home node measures each chain's load of the last period (in
//! instances' worth: Gbit/s over `instance_gbps`) and places it: home while the chains there
//! fit its regions; otherwise, in a pool, where the
//! home's pool agent (`snic-core`'s [`PoolAgent`], the daemon's code) says — a peer with free
//! regions from the load reports it has (sent every `gossip_ms`), one that refuses being asked
//! no more until it reports again — and a chain on a peer comes home once home has had room a
//! whole MONITOR_PERIOD (the agent's rule). A chain with nowhere to go stays home, which is
//! over-committed: its node serves every chain in proportion to what it waits with.
//!
//! **Performance**: each class's throughput (its bytes over the time until they were all
//! served) relative to the offered rate (1: not slowed). **OpEx**: energy — each node's static
//! power while it runs any chain, plus energy per Gbit processed, plus (intermediate topology
//! only) energy per Gbit the home node passes on to a peer. The energy figures are
//! assumptions of the scenario, not measurements.

use crate::pool::addr;
use serde::{Deserialize, Serialize};
use snic_core::pool::{AgentConfig, ChainKey, LoadReport, MemberEvent, PoolAct, PoolAgent};
use snic_core::time::Instant;
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
    /// Placement period (the MONITOR_PERIOD), ms.
    #[serde(default = "monitor_ms")]
    pub monitor_ms: f64,
    /// Load report period, ms.
    #[serde(default = "gossip_ms")]
    pub gossip_ms: f64,
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
fn monitor_ms() -> f64 {
    100.0
}
fn gossip_ms() -> f64 {
    100.0
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
    /// Chains placed on a peer, and brought home, over the run.
    pub placements: u64,
    /// Brought home.
    pub moves_back: u64,
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
        if !(pos(self.instance_gbps) && pos(self.monitor_ms) && pos(self.gossip_ms) && nonneg(self.fg_load) && self.fg_load <= 4.0) {
            return Err("pool_overflow: instance_gbps, monitor_ms and gossip_ms must be positive, fg_load in [0, 4]".into());
        }
        if self.bg_loads.is_empty() || self.bg_loads.iter().any(|l| !(nonneg(*l) && *l <= 4.0)) {
            return Err("pool_overflow: bg_loads must list loads in [0, 4]".into());
        }
        if !(nonneg(self.node_w) && nonneg(self.process_j_per_gbit) && nonneg(self.pass_j_per_gbit)) {
            return Err("pool_overflow: node_w, process_j_per_gbit and pass_j_per_gbit must not be negative".into());
        }
        Ok(())
    }

    /// Every topology at every background load; `fg` is the foreground tenants' bytes per bin.
    pub fn run(&self, fg: &[Vec<f64>], bin_s: f64, duration_s: f64) -> Vec<OverflowRow> {
        let mut rows = Vec::new();
        for &bg in &self.bg_loads {
            let single = self.run_one("single", bg, fg, bin_s, duration_s);
            let base = single.opex_j;
            for topo in ["single", "ring", "switch"] {
                let mut r = if topo == "single" { single.clone() } else { self.run_one(topo, bg, fg, bin_s, duration_s) };
                r.opex_vs_single = if base > 0.0 { r.opex_j / base } else { 1.0 };
                rows.push(r);
            }
        }
        rows
    }

    fn run_one(&self, topo: &'static str, bg_load: f64, fg: &[Vec<f64>], bin_s: f64, duration_s: f64) -> OverflowRow {
        let node_gbps = self.regions as f64 * self.instance_gbps;
        let bins = (duration_s / bin_s).ceil() as usize;
        // Offered Gbit per bin, per chain: the foreground's scaled to its mean, then the
        // background's, constant.
        let fg_mean: f64 = fg.iter().map(|s| s.iter().sum::<f64>()).sum::<f64>() / bins.max(1) as f64;
        let scale = if fg_mean > 0.0 { self.fg_load * node_gbps * bin_s / fg_mean } else { 0.0 };
        let n_fg = fg.len();
        let n = n_fg + self.bg_chains;
        let bg_each = if self.bg_chains == 0 { 0.0 } else { bg_load * node_gbps * bin_s / self.bg_chains as f64 };
        let offered = |c: usize, b: usize| -> f64 {
            if b >= bins {
                0.0
            } else if c < n_fg {
                fg[c].get(b).copied().unwrap_or(0.0) * scale
            } else {
                bg_each
            }
        };
        let pooled = topo != "single";
        let period = Duration::from_secs_f64(self.monitor_ms / 1e3);
        let mut agent = PoolAgent::new(AgentConfig {
            monitor_period: period,
            report_ttl: Duration::from_secs_f64(self.gossip_ms * 3e-3),
            ..Default::default()
        });
        let mut acts = Vec::new();
        for j in 1..self.nodes {
            agent.handle_member(MemberEvent::Up(addr(j)), &mut acts);
        }
        let key = |c: usize| ChainKey(c as u64 + 1);
        // Per chain: the node it runs on, its size (regions), what waits, what arrived this
        // period.
        let mut at = vec![0usize; n];
        let mut size = vec![0.0f64; n];
        let mut waiting = vec![0.0f64; n];
        let mut arrived = vec![0.0f64; n];
        let (mut fg_done_bin, mut bg_done_bin) = (0usize, 0usize);
        let (mut served_total, mut served_on_peers, mut energy) = (0.0f64, 0.0f64, 0.0f64);
        let (mut placements, mut moves_back, mut seq) = (0u64, 0u64, 0u64);
        let monitor_bins = ((self.monitor_ms / 1e3) / bin_s).round().max(1.0) as usize;
        let gossip_bins = ((self.gossip_ms / 1e3) / bin_s).round().max(1.0) as usize;
        let limit = ((duration_s * MAX_STRETCH) / bin_s).ceil() as usize;
        let mut b = 0usize;
        while b < limit {
            let now = Instant::from_nanos((b as f64 * bin_s * 1e9) as u64);
            if pooled && b.is_multiple_of(gossip_bins) {
                seq += 1;
                for j in 1..self.nodes {
                    let free = (self.regions as f64 - load_on(&at, &size, j)).max(0.0).floor();
                    agent.handle_report(
                        now,
                        addr(j),
                        LoadReport { gen: 1, seq, free_regions: free.min(u16::MAX as f64) as u16, ..Default::default() },
                    );
                }
            }
            if b.is_multiple_of(monitor_bins) {
                // Each chain's load of the last period, in instances' worth (at the start: what
                // its first bin offers).
                let per = if b > 0 { monitor_bins as f64 * bin_s * self.instance_gbps } else { bin_s * self.instance_gbps };
                for c in 0..n {
                    let got = if b > 0 { arrived[c] } else { offered(c, 0) };
                    size[c] = (got / per).min(self.regions as f64);
                    arrived[c] = 0.0;
                }
                if pooled {
                    self.place(&mut agent, now, &mut at, &size, &mut placements, &mut moves_back, key);
                }
            }
            // Arrivals, then each node serves in proportion to what waits.
            for c in 0..n {
                let o = offered(c, b);
                waiting[c] += o;
                arrived[c] += o;
            }
            for node in 0..self.nodes {
                let demand: f64 = (0..n).filter(|&c| at[c] == node).map(|c| waiting[c]).sum();
                if demand <= 0.0 {
                    continue;
                }
                let cap = node_gbps * bin_s;
                let f = (cap / demand).min(1.0);
                let served = demand * f;
                for c in (0..n).filter(|&c| at[c] == node) {
                    waiting[c] -= waiting[c] * f;
                }
                served_total += served;
                energy += self.node_w * bin_s + served * self.process_j_per_gbit;
                if node != 0 {
                    served_on_peers += served;
                    if topo == "ring" {
                        energy += served * self.pass_j_per_gbit;
                    }
                }
            }
            let fg_left: f64 = waiting[..n_fg].iter().sum();
            let bg_left: f64 = waiting[n_fg..].iter().sum();
            b += 1;
            // (A residue below a bit is served.)
            if fg_left > 1e-9 || b <= bins {
                fg_done_bin = b;
            }
            if bg_left > 1e-9 || b <= bins {
                bg_done_bin = b;
            }
            if b >= bins && fg_left <= 1e-9 && bg_left <= 1e-9 {
                break;
            }
        }
        let span = |done: usize| done as f64 * bin_s;
        OverflowRow {
            topology: topo,
            bg_load,
            fg_throughput: if n_fg == 0 { 1.0 } else { duration_s / span(fg_done_bin).max(duration_s) },
            bg_throughput: if self.bg_chains == 0 || bg_load == 0.0 { 1.0 } else { duration_s / span(bg_done_bin).max(duration_s) },
            makespan_s: span(b),
            on_peers: if served_total > 0.0 { served_on_peers / served_total } else { 0.0 },
            placements,
            moves_back,
            opex_j: energy,
            opex_vs_single: 1.0,
        }
    }

    /// The home node's placement, each MONITOR_PERIOD: chains come home when the agent says,
    /// chains that fit stay home, the others go where the agent picks (a peer that has no room
    /// refuses), or stay home over-committed. Foreground chains (the lower numbers) first.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        agent: &mut PoolAgent,
        now: Instant,
        at: &mut [usize],
        size: &[f64],
        placements: &mut u64,
        moves_back: &mut u64,
        key: impl Fn(usize) -> ChainKey,
    ) {
        let n = at.len();
        let regions = self.regions as f64;
        // Home's room, chain by chain: what runs at home and the chains coming home first.
        let mut acts = Vec::new();
        let mut budget = (regions - load_on(at, size, 0)).max(0.0);
        agent.epoch(
            now,
            |k| {
                let c = (k.0 - 1) as usize;
                c < n && size[c] <= budget
            },
            &mut acts,
        );
        for act in acts {
            if let PoolAct::MoveBack { key: k, .. } = act {
                let c = (k.0 - 1) as usize;
                if size[c] <= budget {
                    budget -= size[c];
                    at[c] = 0;
                    agent.home(k);
                    *moves_back += 1;
                }
            }
        }
        // Chains at home that no longer fit (they grew): the latest go out first.
        let mut home: Vec<usize> = (0..n).filter(|&c| at[c] == 0).collect();
        let mut over: Vec<usize> = Vec::new();
        while home.iter().map(|&c| size[c]).sum::<f64>() > regions {
            over.push(home.pop().expect("over-committed, so not empty"));
        }
        for c in over.into_iter().rev() {
            while let Some(p) = agent.remote_for(now, key(c), size[c]) {
                let j = (1..self.nodes).find(|&j| addr(j) == p).expect("a member");
                if load_on(at, size, j) + size[c] <= regions {
                    at[c] = j;
                    agent.placed(now, key(c), p);
                    *placements += 1;
                    break;
                }
                agent.refused(p);
            }
        }
    }
}

/// The load of the chains on `node` (instances' worth): `at[c]` is where chain `c` runs,
/// `size[c]` its load.
fn load_on(at: &[usize], size: &[f64], node: usize) -> f64 {
    at.iter().zip(size).filter(|(&a, _)| a == node).map(|(_, s)| s).sum()
}
