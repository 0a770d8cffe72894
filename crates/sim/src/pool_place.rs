//! The `pool_placement` experiment (paper Fig. 11): where a pool places chains its nodes have
//! no room for, and the latency that costs, by topology — a single node (no pool), an
//! intermediate pool (nodes in a ring: a redirected packet crosses the nodes in between) and a
//! switch-attached pool (every node one hop from the ToR, which directs each packet to the
//! node running its chain).
//!
//! **Model.** `nodes` nodes of `regions` regions each. Chains arrive at a random home node
//! (Poisson, at the rate that makes `load` the pool's offered utilization) and hold a region
//! for an exponential time (mean `hold_ms`). A chain whose home has a free region runs there;
//! else the home's pool agent (`snic-core`'s [`PoolAgent`], the daemon's code) picks a peer from
//! the load reports it has — sent by every node each `gossip_ms`, so they may be stale — and a
//! peer that has no region left refuses, which the agent remembers until that peer reports
//! again; past every candidate the chain is turned away (its endpoint runs it). One-way
//! latency of a chain's packets: `base_us` at the node running it, plus `hop_us` per hop
//! between the home and that node (ring), or plus one `hop_us` for every chain (switch).
//! Latency percentiles are over chains' time (a chain counts as long as it runs).

use crate::pool::addr;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use snic_core::pool::{topology, AgentConfig, ChainKey, LoadReport, MemberEvent, PoolAgent};
use snic_core::time::Instant;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::Duration;

/// The scenario's `[pool_placement]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlacementSpec {
    /// Nodes of the pool.
    pub nodes: usize,
    /// Regions per node.
    pub regions: usize,
    /// Offered utilization of the pool's regions, each a run.
    pub loads: Vec<f64>,
    /// Mean time a chain holds its region, ms.
    #[serde(default = "hold_ms")]
    pub hold_ms: f64,
    /// Load report period, ms.
    #[serde(default = "gossip_ms")]
    pub gossip_ms: f64,
    /// Latency at the node that runs a chain, µs.
    #[serde(default = "base_us")]
    pub base_us: f64,
    /// Latency per hop between nodes (or node and switch), µs.
    #[serde(default = "hop_us")]
    pub hop_us: f64,
}

fn hold_ms() -> f64 {
    200.0
}
fn gossip_ms() -> f64 {
    100.0
}
fn base_us() -> f64 {
    2.0
}
fn hop_us() -> f64 {
    1.0
}

/// One row: a topology at a load.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PlacementRow {
    /// `single`, `ring` or `switch`.
    pub topology: &'static str,
    /// Offered utilization.
    pub load: f64,
    /// Chains that arrived.
    pub chains: u64,
    /// Shares of them run at home, on a peer, or turned away.
    pub local: f64,
    /// On a peer.
    pub remote: f64,
    /// Turned away.
    pub rejected: f64,
    /// Peers that refused (their last report was stale), per remote placement.
    pub refusals_per_remote: f64,
    /// One-way latency over chains' time, µs.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Worst.
    pub max_us: f64,
}

impl PlacementSpec {
    /// Checks the section.
    pub fn validate(&self) -> Result<(), String> {
        if !(2..=1024).contains(&self.nodes) || !(1..=4096).contains(&self.regions) {
            return Err("pool_placement: nodes from 2 to 1024, regions from 1 to 4096".into());
        }
        if self.loads.is_empty() || self.loads.iter().any(|l| !(l.is_finite() && *l > 0.0 && *l <= 4.0)) {
            return Err("pool_placement: loads must list utilizations in (0, 4]".into());
        }
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !(ok(self.hold_ms) && ok(self.gossip_ms) && self.base_us >= 0.0 && self.hop_us >= 0.0) {
            return Err("pool_placement: hold_ms and gossip_ms must be positive, base_us and hop_us not negative".into());
        }
        Ok(())
    }

    /// Every topology at every load.
    pub fn run(&self, seed: u64, duration_s: f64) -> Vec<PlacementRow> {
        let mut rows = Vec::new();
        for &load in &self.loads {
            for topology in ["single", "ring", "switch"] {
                rows.push(self.run_one(topology, load, seed, duration_s));
            }
        }
        rows
    }

    fn run_one(&self, topo: &'static str, load: f64, seed: u64, duration_s: f64) -> PlacementRow {
        let n = self.nodes;
        let node_of: std::collections::BTreeMap<SocketAddr, usize> = (0..n).map(|i| (addr(i), i)).collect();
        let ring: Vec<[SocketAddr; 2]> = (0..n).map(|i| [addr(i), addr((i + 1) % n)]).collect();
        let mut agents: Vec<PoolAgent> = (0..n)
            .map(|i| {
                let mut a =
                    PoolAgent::new(AgentConfig { report_ttl: Duration::from_secs_f64(self.gossip_ms * 3e-3), ..Default::default() });
                let mut acts = Vec::new();
                for j in (0..n).filter(|&j| j != i) {
                    a.handle_member(MemberEvent::Up(addr(j)), &mut acts);
                }
                if topo == "ring" {
                    a.set_hops(topology::hops(addr(i), &ring));
                }
                a
            })
            .collect();
        let mut free = vec![self.regions; n];
        let mut rng = Pcg64::seed_from_u64(seed ^ (n as u64) << 32 ^ (load * 1e3) as u64);
        // Arrivals per second for `load` of the pool's regions busy on average.
        let rate = load * (n * self.regions) as f64 / (self.hold_ms / 1e3);
        let (gap, hold) = (Exp::new(rate).expect("positive rate"), Exp::new(1e3 / self.hold_ms).expect("positive"));
        let ns = |s: f64| Instant::from_nanos((s * 1e9) as u64);
        let end = duration_s;
        // Departures: (time, node), soonest first.
        let mut leaving: BinaryHeap<std::cmp::Reverse<(u64, usize)>> = BinaryHeap::new();
        let (mut t, mut next_gossip) = (0.0f64, 0.0f64);
        let (mut chains, mut local, mut remote, mut rejected, mut refusals) = (0u64, 0u64, 0u64, 0u64, 0u64);
        // (latency µs, seconds held) per placed chain.
        let mut lat: Vec<(f64, f64)> = Vec::new();
        let mut seq = 0u64;
        loop {
            t += gap.sample(&mut rng);
            if t >= end {
                break;
            }
            let now = ns(t);
            while let Some(&std::cmp::Reverse((at, node))) = leaving.peek() {
                if at > now.as_nanos() {
                    break;
                }
                leaving.pop();
                free[node] += 1;
            }
            while next_gossip <= t {
                let at = ns(next_gossip);
                seq += 1;
                for (i, agent) in agents.iter_mut().enumerate() {
                    for (j, &f) in free.iter().enumerate().filter(|&(j, _)| j != i) {
                        let r = LoadReport { gen: 1, seq, free_regions: f.min(u16::MAX as usize) as u16, ..Default::default() };
                        agent.handle_report(at, addr(j), r);
                    }
                }
                next_gossip += self.gossip_ms / 1e3;
            }
            chains += 1;
            let home = rng.random_range(0..n);
            let held = hold.sample(&mut rng).min(end - t);
            // Where it runs (node, hops from home), if anywhere.
            let mut at = None;
            if free[home] > 0 {
                local += 1;
                at = Some((home, 0));
            } else if topo != "single" {
                let key = ChainKey(chains);
                while let Some(p) = agents[home].remote_for(now, key, 1.0) {
                    let j = node_of[&p];
                    if free[j] > 0 {
                        remote += 1;
                        at = Some((j, agents[home].hops(p)));
                        break;
                    }
                    refusals += 1;
                    agents[home].refused(p);
                }
            }
            let Some((node, hops)) = at else {
                rejected += 1;
                continue;
            };
            free[node] -= 1;
            leaving.push(std::cmp::Reverse((ns(t + held).as_nanos(), node)));
            let extra = if topo == "switch" { 1.0 } else { hops as f64 };
            lat.push((self.base_us + extra * self.hop_us, held));
        }
        lat.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: f64 = lat.iter().map(|x| x.1).sum();
        let quantile = |q: f64| {
            let mut acc = 0.0;
            for &(l, w) in &lat {
                acc += w;
                if acc >= q * total {
                    return l;
                }
            }
            lat.last().map_or(0.0, |x| x.0)
        };
        let share = |k: u64| if chains == 0 { 0.0 } else { k as f64 / chains as f64 };
        PlacementRow {
            topology: topo,
            load,
            chains,
            local: share(local),
            remote: share(remote),
            rejected: share(rejected),
            refusals_per_remote: if remote == 0 { 0.0 } else { refusals as f64 / remote as f64 },
            p50_us: quantile(0.5),
            p99_us: quantile(0.99),
            max_us: lat.last().map_or(0.0, |x| x.0),
        }
    }
}
