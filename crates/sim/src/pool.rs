//! A pool of nodes on one virtual clock, and the `membership` experiment.
//!
//! [`Net`] runs several of `snic-core`'s membership machines (SWIM, with `foca`: the daemon's
//! code) over a simulated network that delays every datagram by a fixed latency, loses a
//! share of them (seeded) and may be cut into sides that cannot talk (a partition). Timers and
//! datagrams are handled in time order; nodes can die and restart with a newer generation.
//!
//! The `membership` experiment measures what an operator of a pool wants to know: how long a
//! pool of `n` nodes takes to form from one seed address, how long after a node dies every
//! survivor has noticed, and whether live nodes were wrongly declared down, under loss.

use serde::{Deserialize, Serialize};
use snic_core::pool::{MemberEvent, MemberId, Membership, MembershipConfig};
use snic_core::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

/// The pool address of node `i`.
pub fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, (i >> 8) as u8, i as u8, 1], 7946))
}

/// One node: its membership machine and what it has seen.
pub struct Node {
    /// Its machine.
    pub m: Membership,
    /// False once it died (it neither receives nor fires timers).
    pub alive: bool,
    /// The members it believes up, from its events.
    pub up: BTreeSet<SocketAddr>,
    /// When it saw each member go down (last time).
    pub down_at: BTreeMap<SocketAddr, Instant>,
    /// Down events it raised for members that were alive then.
    pub false_downs: u64,
}

/// Nodes and the network between them. See the module docs.
pub struct Net {
    /// The virtual clock.
    pub now: Instant,
    /// The nodes, by index.
    pub nodes: Vec<Node>,
    cfg: MembershipConfig,
    latency: Duration,
    /// Datagrams in flight: (arrival, sequence) → (to, bytes).
    wire: BTreeMap<(Instant, u64), (usize, Vec<u8>)>,
    seq: u64,
    /// Datagrams lost, per mille.
    pub loss_per_mille: u32,
    rng: u64,
    /// Each node's side of a partition: nodes on different sides cannot talk.
    pub side: Vec<u8>,
    /// Datagrams sent so far.
    pub sent: u64,
    by_addr: BTreeMap<SocketAddr, usize>,
}

impl Net {
    /// `n` nodes (not joined yet), datagrams delayed by `latency`, randomness from `seed`.
    pub fn new(n: usize, cfg: MembershipConfig, latency: Duration, seed: u64) -> Net {
        let mut net = Net {
            now: Instant::ZERO,
            nodes: Vec::with_capacity(n),
            cfg,
            latency,
            wire: BTreeMap::new(),
            seq: 0,
            loss_per_mille: 0,
            rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            side: vec![0; n],
            sent: 0,
            by_addr: (0..n).map(|i| (addr(i), i)).collect(),
        };
        for i in 0..n {
            let m = net.machine(i, 1);
            net.nodes.push(Node { m, alive: true, up: BTreeSet::new(), down_at: BTreeMap::new(), false_downs: 0 });
        }
        net
    }

    fn machine(&mut self, i: usize, gen: u64) -> Membership {
        let seed = self.next_random();
        Membership::new(MemberId { addr: addr(i), gen }, &self.cfg, seed ^ i as u64)
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Takes what node `i` wants sent (onto the wire, unless lost or cut off) and what it
    /// says changed.
    fn drain(&mut self, i: usize) {
        while let Some((to, bytes)) = self.nodes[i].m.poll_transmit() {
            self.sent += 1;
            let Some(&j) = self.by_addr.get(&to) else { continue };
            let lost = (self.next_random() >> 32) % 1000 < self.loss_per_mille as u64;
            if self.side[i] != self.side[j] || lost {
                continue;
            }
            self.seq += 1;
            self.wire.insert((self.now + self.latency, self.seq), (j, bytes));
        }
        let now = self.now;
        while let Some(e) = self.nodes[i].m.poll_event() {
            let alive = |a: &SocketAddr| self.by_addr.get(a).is_some_and(|&j| self.nodes[j].alive);
            let wrong = matches!(e, MemberEvent::Down(a) if alive(&a));
            let n = &mut self.nodes[i];
            match e {
                MemberEvent::Up(a) => {
                    n.up.insert(a);
                }
                MemberEvent::Down(a) => {
                    n.up.remove(&a);
                    n.down_at.insert(a, now);
                    n.false_downs += u64::from(wrong);
                }
                MemberEvent::Rejoined => {}
            }
        }
    }

    /// Every node asks to join through node 0.
    pub fn join_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.nodes[i].m.join(self.now, &[addr(0)]);
            self.drain(i);
        }
    }

    /// Node `i` dies: it stops answering and its timers stop.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].alive = false;
    }

    /// Node `i` restarts with generation `gen` (newer than before) and joins through node 0.
    pub fn restart(&mut self, i: usize, gen: u64) {
        let m = self.machine(i, gen);
        self.nodes[i] = Node { m, alive: true, up: BTreeSet::new(), down_at: BTreeMap::new(), false_downs: 0 };
        self.nodes[i].m.join(self.now, &[addr(0)]);
        self.drain(i);
    }

    /// Advances the clock to `until`, delivering datagrams and firing timers in time order.
    pub fn run_until(&mut self, until: Instant) {
        loop {
            let timer =
                (0..self.nodes.len()).filter(|&i| self.nodes[i].alive).filter_map(|i| self.nodes[i].m.poll_timeout().map(|t| (t, i))).min();
            let msg = self.wire.keys().next().map(|k| k.0);
            let Some(next) = timer.map(|t| t.0).into_iter().chain(msg).min() else { break };
            if next > until {
                break;
            }
            self.now = next;
            if msg == Some(next) {
                let Some((_, (j, bytes))) = self.wire.pop_first() else { break };
                if self.nodes[j].alive {
                    // Every datagram on this wire was sent by a member: refusing one would be
                    // a bug, and shows as a node that never converges.
                    let _ = self.nodes[j].m.handle_data(self.now, &bytes);
                    self.drain(j);
                }
            } else if let Some((_, i)) = timer {
                self.nodes[i].m.handle_timeout(self.now);
                self.drain(i);
            }
        }
        self.now = self.now.max(until);
    }

    /// True if every live node believes every other live node up (and no dead one).
    pub fn converged(&self) -> bool {
        let live: BTreeSet<SocketAddr> = (0..self.nodes.len()).filter(|&i| self.nodes[i].alive).map(addr).collect();
        (0..self.nodes.len()).filter(|&i| self.nodes[i].alive).all(|i| {
            let mut want = live.clone();
            want.remove(&addr(i));
            self.nodes[i].up == want
        })
    }

    /// Runs in steps of `step` until converged or `limit`; the time it converged.
    pub fn run_until_converged(&mut self, step: Duration, limit: Instant) -> Option<Instant> {
        while self.now < limit {
            if self.converged() {
                return Some(self.now);
            }
            let next = (self.now + step).min(limit);
            self.run_until(next);
        }
        self.converged().then_some(self.now)
    }
}

/// The scenario's `[membership]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MembershipSpec {
    /// Pool sizes to run.
    pub nodes: Vec<usize>,
    /// Datagram loss rates to run, per mille.
    #[serde(default = "no_loss")]
    pub loss_per_mille: Vec<u32>,
    /// One-way latency of a datagram, µs.
    #[serde(default = "latency_us")]
    pub latency_us: f64,
    /// Runs per (size, loss), each with its own seed; a node dies in each, once the pool has
    /// formed.
    #[serde(default = "runs")]
    pub runs: u64,
    /// How long to watch after the death (and for wrong downs), s.
    #[serde(default = "watch_s")]
    pub watch_s: f64,
    /// The protocol's timing, ms (defaults: the daemon's).
    #[serde(default)]
    pub probe_period_ms: Option<f64>,
    /// How long a probe waits for a direct answer, ms.
    #[serde(default)]
    pub probe_rtt_ms: Option<f64>,
    /// How long a suspect member has to refute, ms.
    #[serde(default)]
    pub suspect_after_ms: Option<f64>,
}

fn no_loss() -> Vec<u32> {
    vec![0]
}
fn latency_us() -> f64 {
    200.0
}
fn runs() -> u64 {
    5
}
fn watch_s() -> f64 {
    10.0
}

/// One row of the `membership` experiment.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MembershipRow {
    /// Pool size.
    pub nodes: usize,
    /// Datagrams lost, per mille.
    pub loss_per_mille: u32,
    /// Time for the pool to form from one seed (every node sees every other), s: worst run.
    pub converge_s: f64,
    /// After a node dies: when the last survivor noticed, s — median over runs, and worst.
    pub detect_p50_s: f64,
    /// Worst run.
    pub detect_max_s: f64,
    /// Survivors that never noticed within `watch_s` (summed over runs).
    pub missed: u64,
    /// Live members wrongly declared down (summed over runs and nodes).
    pub false_downs: u64,
    /// Membership datagrams per node per second while the pool is steady.
    pub datagrams_per_node_s: f64,
}

impl MembershipSpec {
    /// Checks the section.
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes.is_empty() || self.nodes.iter().any(|&n| !(2..=4096).contains(&n)) {
            return Err("membership: nodes must list pool sizes from 2 to 4096".into());
        }
        if self.loss_per_mille.iter().any(|&l| l >= 1000) {
            return Err("membership: loss_per_mille must be below 1000".into());
        }
        let ms = [self.probe_period_ms, self.probe_rtt_ms, self.suspect_after_ms];
        if !(self.latency_us >= 0.0 && self.watch_s > 0.0 && self.runs >= 1 && ms.iter().flatten().all(|&m| m > 0.0)) {
            return Err("membership: latency_us ≥ 0, watch_s > 0, runs ≥ 1 and timings > 0".into());
        }
        if let (Some(p), Some(r)) = (self.probe_period_ms, self.probe_rtt_ms) {
            if r >= p {
                return Err("membership: probe_rtt_ms must be below probe_period_ms".into());
            }
        }
        Ok(())
    }

    /// The protocol's timing.
    pub fn config(&self, nodes: usize) -> MembershipConfig {
        let d = MembershipConfig::default();
        let ms = |v: Option<f64>, d: Duration| v.map_or(d, |m| Duration::from_secs_f64(m / 1e3));
        MembershipConfig {
            probe_period: ms(self.probe_period_ms, d.probe_period),
            probe_rtt: ms(self.probe_rtt_ms, d.probe_rtt),
            suspect_after: ms(self.suspect_after_ms, d.suspect_after),
            expected_members: nodes as u32,
            ..d
        }
    }

    /// Runs every (size, loss) `runs` times.
    pub fn run(&self, seed: u64) -> Vec<MembershipRow> {
        let mut rows = Vec::new();
        for &n in &self.nodes {
            for &loss in &self.loss_per_mille {
                rows.push(self.run_one(n, loss, seed));
            }
        }
        rows
    }

    fn run_one(&self, n: usize, loss: u32, seed: u64) -> MembershipRow {
        let latency = Duration::from_secs_f64(self.latency_us / 1e6);
        let watch = Duration::from_secs_f64(self.watch_s);
        let (mut converge, mut detect, mut missed, mut false_downs, mut rate) = (0.0f64, Vec::new(), 0, 0, 0.0);
        for r in 0..self.runs {
            let mut net = Net::new(n, self.config(n), latency, seed.wrapping_add(r * 7919 + n as u64 * 31 + loss as u64));
            net.loss_per_mille = loss;
            net.join_all();
            let limit = Instant::ZERO + watch * 3;
            let formed = net.run_until_converged(Duration::from_millis(10), limit).unwrap_or(limit);
            converge = converge.max(formed.as_nanos() as f64 / 1e9);
            // Steady for a second: the protocol's traffic.
            let (sent0, t0) = (net.sent, net.now);
            net.run_until(t0 + Duration::from_secs(1));
            rate += (net.sent - sent0) as f64 / n as f64 / self.runs as f64;
            let victim = 1 + (r as usize % (n - 1));
            let died = net.now;
            net.kill(victim);
            net.run_until(died + watch);
            let mut last = Duration::ZERO;
            for (_, node) in net.nodes.iter().enumerate().filter(|(i, _)| *i != victim) {
                match node.down_at.get(&addr(victim)) {
                    Some(&t) => last = last.max(t.saturating_since(died)),
                    None => missed += 1,
                }
                false_downs += node.false_downs;
            }
            detect.push(last.as_secs_f64());
        }
        detect.sort_by(f64::total_cmp);
        MembershipRow {
            nodes: n,
            loss_per_mille: loss,
            converge_s: converge,
            detect_p50_s: detect[detect.len() / 2],
            detect_max_s: detect[detect.len() - 1],
            missed,
            false_downs,
            datagrams_per_node_s: rate,
        }
    }
}
