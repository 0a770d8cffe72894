//! The `chaining` experiment (paper Fig. 14 and 15, under load): a sequence of NTs deployed as
//! one chain, as two half chains, in PANIC-style scheduling (back to the central scheduler after
//! every NT), or — for NTs that do not depend on each other — as parallel chains that fork and
//! join. A packet-level discrete-event simulation that drives a node's core ([`NodeCore`]: its
//! credit scheduler, synchronization buffer and packet path — `handle_arrival`, `handle_fork`,
//! `poll_dispatch`, `handle_completion`, `handle_ran`, `handle_requeue`, `handle_branch`, the
//! calls the daemon's dispatcher makes) on a virtual clock.
//!
//! **Model.** Packets arrive as a Poisson stream of one tenant's `flows` flows — or, when the
//! scenario has a `[topology]` and a `[workload]`, from the workload's generators: each endpoint
//! of the first rack is a tenant with `flows` flows, and its bytes per bin, scaled so that the
//! whole offered load is `load`, become packets at uniformly random times within the bin (the
//! scheduler then serves the tenants' queues round robin, as in the node). A flow is spread
//! over instances by its 5-tuple's hash, the data plane's (`FlowKey::hash64`). The central scheduler is one
//! server: each decision (a packet's arrival, its return between chains, a PANIC return after
//! one NT, each forked copy) takes `sched_ns` of its time, in the order packets reach it.
//! Dispatch follows the scheduler's credits: an instance holds at most `credits` packets; a
//! packet reaches its region `hop_ns` after dispatch, waits for the region (FIFO), runs the NTs of
//! its step (`nt_ns` each) and returns `hop_ns` later (a packet whose DAG ends there leaves
//! for egress at once). Every mode gets the same area: `nts` regions, divided among its chains
//! in proportion to their NTs, so each NT's capacity is one packet per `nt_ns` in every mode
//! and `load` is a fraction of it. Latency runs from arrival to egress.

use crate::workload::{rng, unit};
use hdrhistogram::Histogram;
use rand::Rng;
use serde::{Deserialize, Serialize};
use snic_core::dag::{DagRoute, NtMask, Step, MAX_BRANCHES};
use snic_core::ids::{DagUid, InstanceId, TenantId};
use snic_core::join::JoinId;
use snic_core::node::setup::Instances;
use snic_core::node::{NodeCore, NodeCoreConfig};
use snic_core::sched::SchedConfig;
use snic_core::time::Instant;
use snic_core::walk::{Entered, Ran, Walk};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// How a sequence of NTs is deployed.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One chain of every NT: one scheduler visit per packet.
    Single,
    /// Two chains, one after the other: two visits.
    Half,
    /// One chain, but back to the scheduler after every NT (PANIC): one visit per NT.
    Panic,
    /// Two chains run at once on copies of the packet, joined (the NTs must be independent).
    HalfParallel,
    /// One chain per NT, all at once, joined.
    Parallel,
}

/// The scenario's `[chaining]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChainingSpec {
    /// Lengths of the NT sequence to run (2..=8).
    pub nts: Vec<usize>,
    /// Deployments to compare.
    #[serde(default = "all_modes")]
    pub modes: Vec<Mode>,
    /// Offered loads, fractions of an NT's capacity.
    pub loads: Vec<f64>,
    /// Time one NT takes per packet, ns.
    #[serde(default = "default_nt")]
    pub nt_ns: f64,
    /// The central scheduler's time per decision, ns.
    #[serde(default = "default_sched")]
    pub sched_ns: f64,
    /// One way between the scheduler and a region, ns.
    #[serde(default = "default_hop")]
    pub hop_ns: f64,
    /// Credits (packets in flight) per instance.
    #[serde(default = "default_credits")]
    pub credits: u32,
    /// Flows the packets belong to.
    #[serde(default = "default_flows")]
    pub flows: u32,
    /// Most packets waiting per instance (past it they are dropped).
    #[serde(default = "default_queue")]
    pub queue: usize,
}

fn all_modes() -> Vec<Mode> {
    vec![Mode::Single, Mode::Half, Mode::Panic, Mode::HalfParallel, Mode::Parallel]
}
fn default_nt() -> f64 {
    100.0
}
fn default_sched() -> f64 {
    25.0
}
fn default_hop() -> f64 {
    50.0
}
fn default_credits() -> u32 {
    8
}
fn default_flows() -> u32 {
    256
}
fn default_queue() -> usize {
    1024
}

/// One (length, mode, load) run's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChainFigures {
    /// NTs in the sequence.
    pub nts: usize,
    /// The deployment.
    pub mode: Mode,
    /// Offered load, fraction of an NT's capacity.
    pub load: f64,
    /// Chains the sequence was split into.
    pub chains: usize,
    /// Regions (instances) used.
    pub regions: usize,
    /// Packets per second offered.
    pub offered_pps: f64,
    /// Packets per second delivered.
    pub delivered_pps: f64,
    /// Packets dropped (queue full or no join slot), fraction of offered.
    pub dropped: f64,
    /// Scheduler decisions per offered packet.
    pub visits_per_packet: f64,
    /// Share of the run the scheduler was busy deciding.
    pub sched_busy: f64,
    /// Median latency, ns.
    pub p50_ns: u64,
    /// 99th percentile latency, ns.
    pub p99_ns: u64,
    /// Mean latency, ns.
    pub mean_ns: f64,
    /// Packets delivered after a later packet of their flow.
    pub reordered: u64,
    /// Tenants sending (1: the Poisson stream).
    pub tenants: usize,
}

impl ChainingSpec {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), String> {
        use crate::{non_negative as non_neg, positive as pos};
        if self.nts.is_empty() || self.nts.iter().any(|&n| !(2..=MAX_BRANCHES).contains(&n)) {
            return Err(format!("chaining.nts must list lengths from 2 to {MAX_BRANCHES}"));
        }
        if self.modes.is_empty() {
            return Err("chaining.modes must list at least one mode".into());
        }
        if self.loads.is_empty() || self.loads.iter().any(|&l| !pos(l) || l > 4.0) {
            return Err("chaining.loads must list loads in (0, 4] (fractions of an NT's capacity)".into());
        }
        if !pos(self.nt_ns) || !non_neg(self.sched_ns) || !non_neg(self.hop_ns) {
            return Err("chaining: nt_ns must be positive, sched_ns and hop_ns zero or more".into());
        }
        if self.credits == 0 || self.flows == 0 || self.queue == 0 {
            return Err("chaining: credits, flows and queue must be at least 1".into());
        }
        Ok(())
    }

    /// Runs every length × mode × load for `duration_s` simulated seconds each: one tenant's
    /// Poisson stream, or the workload's tenants (`tenants`). Every mode of a (length, load) sees
    /// the same arrivals.
    pub fn run(
        &self,
        seed: u64,
        duration_s: f64,
        tenants: Option<&TenantLoad>,
        mut progress: impl FnMut(usize, usize),
    ) -> Vec<ChainFigures> {
        let total = self.nts.len() * self.loads.len() * self.modes.len();
        let mut out = Vec::with_capacity(total);
        // The workload's mean offered bytes per ns, over its bins.
        let mean_bytes_per_ns = tenants.map(|l| {
            let bins = l.bytes.first().map_or(0, Vec::len).max(1) as f64;
            l.bytes.iter().flatten().sum::<f64>() / (bins * l.bin_ns)
        });
        for &n in &self.nts {
            for (li, &load) in self.loads.iter().enumerate() {
                for &mode in &self.modes {
                    progress(out.len(), total);
                    let arrivals = rng(seed, (n as u64) << 32 | li as u64);
                    let (source, k) = match (tenants, mean_bytes_per_ns) {
                        // `load` of an NT's capacity (one packet per `nt_ns`), on average.
                        (Some(l), Some(m)) if m > 0.0 => (Source::Tenants { load: l, per_byte: load / self.nt_ns / m }, l.bytes.len()),
                        (Some(l), _) => (Source::Tenants { load: l, per_byte: 0.0 }, l.bytes.len()),
                        _ => (Source::Poisson(self.nt_ns / load), 1),
                    };
                    let mut r = Run::new(self, n, mode, k).go(self, load, source, arrivals, duration_s);
                    r.tenants = k;
                    out.push(r);
                }
            }
        }
        progress(total, total);
        out
    }
}

/// Per-tenant offered bytes, from the scenario's workload.
#[derive(Debug, Clone)]
pub struct TenantLoad {
    /// `bytes[tenant][bin]`.
    pub bytes: Vec<Vec<f64>>,
    /// A bin's length, ns.
    pub bin_ns: f64,
}

/// Where packets come from in one run.
enum Source<'a> {
    /// One tenant, Poisson, a mean gap of this many ns.
    Poisson(f64),
    /// The workload's tenants; `per_byte` packets per offered byte.
    Tenants { load: &'a TenantLoad, per_byte: f64 },
}

/// A packet (or a forked copy of one).
#[derive(Debug, Clone, Copy)]
struct Pkt {
    arrival: u64,
    tenant: u16,
    /// Index over every tenant's flows.
    flow: u32,
    seq: u32,
    /// Where it is on its route: the node's walk, the same decisions.
    walk: Walk,
    /// PANIC: the instance it returns to for its step's next NT.
    back_to: Option<InstanceId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A packet of this tenant arrives (a Poisson arrival schedules the next).
    Arrive(u16),
    /// A workload bin starts: its packets are drawn.
    Bin(u32),
    /// A packet reaches the scheduler.
    Reach(u32),
    /// The scheduler's decision for a packet is made.
    Decide(u32),
    /// A region finished a packet.
    Done(InstanceId, u32),
}

const DAG: DagUid = DagUid(0);

/// The 5-tuple hash of each tenant's flows, as the data plane computes it: flow `k` of tenant
/// `t` is UDP 10.t.k/16 → 10.255.0.1:4789 from port 1024 + k.
fn flow_hashes(tenants: usize, flows: u32) -> Vec<u64> {
    let mut out = Vec::with_capacity(tenants * flows as usize);
    for t in 0..tenants {
        for k in 0..flows {
            let key = snic_wire::layout::FlowKey {
                src: std::net::Ipv4Addr::new(10, t as u8, (k >> 8) as u8, k as u8).into(),
                dst: std::net::Ipv4Addr::new(10, 255, 0, 1).into(),
                proto: 17,
                src_port: 1024u16.wrapping_add(k as u16),
                dst_port: 4789,
            };
            out.push(key.hash64());
        }
    }
    out
}

struct Run {
    nts: usize,
    mode: Mode,
    /// The node's core: its scheduler, join table and packet path.
    core: NodeCore,
    /// Steps of the route: the chains the sequence was split into.
    steps: usize,
    /// Packets waiting for a decision, in order of arrival at the scheduler.
    pending: VecDeque<u32>,
    /// Most new packets `pending` takes.
    input_bound: usize,
    /// A decision is under way.
    sched_busy_now: bool,
    /// Per instance: when its region is next free, ns.
    free_at: Vec<u64>,
    pkts: Vec<Pkt>,
    spare: Vec<u32>,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    sched_busy: f64,
    visits: u64,
    dropped: u64,
    delivered: u64,
    last_seq: Vec<Option<u32>>,
    reordered: u64,
    hist: Histogram<u64>,
    out: Vec<u32>,
    /// Per flow (over every tenant's): its hash.
    hashes: Vec<u64>,
}

impl Run {
    /// A node's core with `n` NTs deployed as `mode` asks: chains, instances, route.
    fn new(spec: &ChainingSpec, n: usize, mode: Mode, tenants: usize) -> Run {
        let a = n.div_ceil(2);
        let sizes: Vec<usize> = match mode {
            Mode::Single | Mode::Panic => vec![n],
            Mode::Half | Mode::HalfParallel => vec![a, n - a],
            Mode::Parallel => vec![1; n],
        };
        // Regions in proportion to the chains' NTs: every NT gets one region's worth.
        let regions: usize = sizes.iter().sum();
        let mut core = NodeCore::new(
            NodeCoreConfig {
                fair: Default::default(),
                link_bps: 100e9,
                workers: 0,
                store_buffers: spec.queue * regions,
                max_tenants: tenants + 1,
                elastic: Default::default(),
                auto_place: false,
                sched: SchedConfig { max_queue_per_tenant: spec.queue, credits: spec.credits, ..SchedConfig::default() },
                join_slots: spec.queue * regions,
                panic: mode == Mode::Panic,
                ..NodeCoreConfig::default()
            },
            Instant::ZERO,
        );
        let mut steps = Vec::new();
        for &k in &sizes {
            // (Each NT is a `synthetic` one in the demand model: only its kind's name shows.)
            let c = core.add_chain(&vec!["synthetic"; k], Instances::Many);
            for _ in 0..k {
                core.add_instance(c).expect("a new chain takes instances");
            }
            steps.push(Step { chain: c, mask: NtMask::all(k) });
        }
        let route = match mode {
            Mode::HalfParallel | Mode::Parallel => DagRoute::with_groups(steps, &[(0, sizes.len())]).expect("2..=8 branches"),
            _ => DagRoute::new(steps),
        };
        core.set_route(DAG, route);
        Run {
            nts: n,
            mode,
            core,
            steps: sizes.len(),
            free_at: vec![0; regions],
            pkts: Vec::new(),
            spare: Vec::new(),
            events: BinaryHeap::new(),
            seq: 0,
            pending: VecDeque::new(),
            input_bound: spec.queue * regions,
            sched_busy_now: false,
            sched_busy: 0.0,
            visits: 0,
            dropped: 0,
            delivered: 0,
            last_seq: vec![None; tenants * spec.flows as usize],
            hashes: flow_hashes(tenants, spec.flows),
            reordered: 0,
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
            out: Vec::with_capacity(32),
        }
    }

    fn at(&mut self, t: u64, e: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, e)));
    }

    fn alloc(&mut self, p: Pkt) -> u32 {
        match self.spare.pop() {
            Some(i) => {
                self.pkts[i as usize] = p;
                i
            }
            None => {
                self.pkts.push(p);
                (self.pkts.len() - 1) as u32
            }
        }
    }

    /// `i` reaches the scheduler at `t`.
    fn visit(&mut self, i: u32, t: u64) {
        self.at(t, Ev::Reach(i));
    }

    /// `i` is at the scheduler at `now`: it waits for the decisions before it. A new packet
    /// that finds the scheduler's input full is dropped (packets already inside the node always
    /// get in: credits bound them).
    fn reach(&mut self, spec: &ChainingSpec, i: u32, now: u64, new: bool) {
        if new && self.pending.len() >= self.input_bound {
            return self.drop_pkt(i);
        }
        self.pending.push_back(i);
        if !self.sched_busy_now {
            self.start_decision(spec, now);
        }
    }

    /// The scheduler takes the next waiting packet: one decision, or one per branch if the
    /// packet starts a parallel group (a copy each).
    fn start_decision(&mut self, spec: &ChainingSpec, now: u64) {
        let Some(i) = self.pending.pop_front() else {
            self.sched_busy_now = false;
            return;
        };
        let p = self.pkts[i as usize];
        let k = if p.back_to.is_some() { 1 } else { self.core.sched().fork_at(DAG, p.walk.pos).0.max(1) as u64 };
        let t = k as f64 * spec.sched_ns;
        self.sched_busy += t;
        self.visits += k;
        self.sched_busy_now = true;
        self.at(now + t as u64, Ev::Decide(i));
    }

    fn decide(&mut self, i: u32, now: u64) {
        let p = self.pkts[i as usize];
        let tenant = TenantId(p.tenant);
        if let Some(inst) = p.back_to {
            if self.core.handle_requeue(inst, tenant, i).is_err() {
                self.drop_pkt(i);
            }
            return;
        }
        let hash = self.hashes[p.flow as usize];
        let mut w = p.walk;
        let e = self.core.handle_arrival(&mut w, Instant::ZERO + Duration::from_nanos(now), tenant, hash, i);
        self.pkts[i as usize].walk = w;
        match e {
            Entered::Queued { branches: 0 } => {}
            Entered::Queued { branches } => self.fork(i, branches, now),
            Entered::Out => self.deliver(i, now),
            Entered::OnDemand | Entered::Refused(_) => self.drop_pkt(i),
        }
    }

    /// `i` starts a parallel group of `branches` steps: a copy for each other step (the
    /// decision's time included them).
    fn fork(&mut self, i: u32, branches: u8, now: u64) {
        let Some(j) = self.core.handle_fork(&mut self.pkts[i as usize].walk, branches) else { return };
        for b in 1..branches {
            let p = self.pkts[i as usize];
            let c = self.alloc(Pkt { walk: p.walk.branch_copy(b), ..p });
            let at = Instant::ZERO + Duration::from_nanos(now);
            let mut w = self.pkts[c as usize].walk;
            match self.core.handle_arrival(&mut w, at, TenantId(p.tenant), self.hashes[p.flow as usize], c) {
                Entered::Queued { .. } => self.pkts[c as usize].walk = w,
                // Counted once, when the join sees the drop.
                _ => self.branch_back(j, b, c, true, now),
            }
        }
    }

    /// Moves every packet that has a credit to its region.
    fn dispatch(&mut self, spec: &ChainingSpec, now: u64) {
        let mut out = std::mem::take(&mut self.out);
        while let Some(inst) = self.core.poll_dispatch(&mut out, 32) {
            for &i in &out {
                let cost = self.pkts[i as usize].walk.mask.count() as u64 * spec.nt_ns as u64;
                let start = self.free_at[inst.index()].max(now + spec.hop_ns as u64);
                self.free_at[inst.index()] = start + cost;
                self.at(start + cost, Ev::Done(inst, i));
            }
        }
        self.out = out;
    }

    /// Region `inst` finished `i` at `now`.
    fn done(&mut self, spec: &ChainingSpec, inst: InstanceId, i: u32, now: u64) {
        self.core.handle_completion(inst, 1);
        let back = now + spec.hop_ns as u64;
        let mut w = self.pkts[i as usize].walk;
        let ran = self.core.handle_ran(&mut w, false);
        let q = &mut self.pkts[i as usize];
        q.walk = w;
        // PANIC: back through the scheduler to the same instance, for the step's next NT.
        q.back_to = (ran == Ran::Again).then_some(inst);
        match ran {
            Ran::Again => self.visit(i, back),
            // Branches join at the scheduler's synchronization buffer.
            Ran::Join => match w.join_slot() {
                Some(j) => self.branch_back(j, w.branch, i, false, back),
                None => self.drop_pkt(i),
            },
            Ran::Drop => self.drop_pkt(i),
            Ran::Out => self.deliver(i, now),
            Ran::Next => self.visit(i, back),
        }
    }

    /// Branch `b` of a forked packet is back: when it is the last, the packet goes on.
    fn branch_back(&mut self, j: JoinId, b: u8, i: u32, dropped: bool, now: u64) {
        let Some(joined) = self.core.handle_branch(j, b, i, dropped) else { return };
        let copies = joined.items.iter().flatten().copied();
        let orig = joined.items[0];
        for c in copies.filter(|&c| Some(c) != orig) {
            self.spare.push(c);
        }
        let Some(orig) = orig else { return };
        if joined.dropped {
            return self.drop_pkt(orig);
        }
        let w = &mut self.pkts[orig as usize].walk;
        w.joined();
        if self.core.at_end(w) {
            self.deliver(orig, now);
        } else {
            // Steps after the group: the scheduler decides the next one (it is at hand).
            self.visit(orig, now);
        }
    }

    fn drop_pkt(&mut self, i: u32) {
        self.dropped += 1;
        self.spare.push(i);
    }

    fn deliver(&mut self, i: u32, now: u64) {
        let p = self.pkts[i as usize];
        let _ = self.hist.record((now - p.arrival).max(1));
        let last = &mut self.last_seq[p.flow as usize];
        if last.is_some_and(|s| s > p.seq) {
            self.reordered += 1;
        } else {
            *last = Some(p.seq);
        }
        self.delivered += 1;
        self.spare.push(i);
    }

    /// Arrivals from `source` for `duration_s`, then until every packet has left.
    fn go(mut self, spec: &ChainingSpec, load: f64, source: Source<'_>, mut rng: rand_pcg::Pcg64, duration_s: f64) -> ChainFigures {
        let end = (duration_s * 1e9) as u64;
        let mut next_seq = vec![0u32; self.last_seq.len()];
        let (mut offered, mut t_arr) = (0u64, 0f64);
        match source {
            Source::Poisson(_) => self.at(0, Ev::Arrive(0)),
            Source::Tenants { .. } => self.at(0, Ev::Bin(0)),
        }
        let mut now = 0;
        while let Some(Reverse((t, _, e))) = self.events.pop() {
            now = t;
            match e {
                Ev::Arrive(tenant) => {
                    let flow = tenant as u32 * spec.flows + rng.random_range(0..spec.flows);
                    let seq = next_seq[flow as usize];
                    next_seq[flow as usize] += 1;
                    let i = self.alloc(Pkt { arrival: t, tenant, flow, seq, walk: Walk::start(DAG), back_to: None });
                    offered += 1;
                    self.reach(spec, i, t, true);
                    if let Source::Poisson(mean_gap) = source {
                        t_arr += -mean_gap * unit(&mut rng).ln();
                        if (t_arr as u64) < end {
                            self.at(t_arr as u64, Ev::Arrive(0));
                        }
                    }
                }
                Ev::Bin(b) => {
                    let Source::Tenants { load: l, per_byte } = source else { continue };
                    let start = b as f64 * l.bin_ns;
                    for (tenant, row) in l.bytes.iter().enumerate() {
                        // Packets of the bin: its bytes scaled, the fraction drawn.
                        let x = row.get(b as usize).copied().unwrap_or(0.0) * per_byte;
                        let n = x.floor() as u64 + u64::from(unit(&mut rng) < x.fract());
                        for _ in 0..n {
                            let at = start + unit(&mut rng) * l.bin_ns;
                            self.at(at as u64, Ev::Arrive(tenant as u16));
                        }
                    }
                    let next = start + l.bin_ns;
                    if (next as u64) < end && (b as usize + 1) < l.bytes.first().map_or(0, Vec::len) {
                        self.at(next as u64, Ev::Bin(b + 1));
                    }
                }
                Ev::Reach(i) => self.reach(spec, i, t, false),
                Ev::Decide(i) => {
                    self.decide(i, t);
                    self.dispatch(spec, t);
                    self.start_decision(spec, t);
                }
                Ev::Done(inst, i) => {
                    self.done(spec, inst, i, t);
                    self.dispatch(spec, t);
                }
            }
        }
        let secs = (now.max(end) as f64 / 1e9).max(f64::MIN_POSITIVE);
        let h = &self.hist;
        ChainFigures {
            nts: self.nts,
            mode: self.mode,
            load,
            chains: self.steps,
            regions: self.free_at.len(),
            offered_pps: offered as f64 / duration_s,
            delivered_pps: self.delivered as f64 / secs,
            dropped: if offered > 0 { self.dropped as f64 / offered as f64 } else { 0.0 },
            visits_per_packet: if offered > 0 { self.visits as f64 / offered as f64 } else { 0.0 },
            sched_busy: self.sched_busy / (secs * 1e9),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            mean_ns: h.mean(),
            reordered: self.reordered,
            tenants: 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(nts: Vec<usize>, loads: Vec<f64>) -> ChainingSpec {
        ChainingSpec {
            nts,
            modes: all_modes(),
            loads,
            nt_ns: default_nt(),
            sched_ns: default_sched(),
            hop_ns: default_hop(),
            credits: default_credits(),
            flows: default_flows(),
            queue: default_queue(),
        }
    }

    fn row(rows: &[ChainFigures], n: usize, mode: Mode, load: f64) -> &ChainFigures {
        rows.iter().find(|r| r.nts == n && r.mode == mode && r.load == load).expect("row")
    }

    /// Unloaded, every packet's latency is its path: scheduler decisions, hops and NTs, as the
    /// module docs add them up; and each mode visits the scheduler as often as it should.
    #[test]
    fn an_unloaded_packet_pays_exactly_its_visits_hops_and_nts() {
        let s = spec(vec![2, 5], vec![0.001]);
        let rows = s.run(7, 0.05, None, |_, _| {});
        let (nt, sch, hop) = (s.nt_ns, s.sched_ns, s.hop_ns);
        for n in [2usize, 5] {
            let nf = n as f64;
            let expect = [
                (Mode::Single, 1.0, sch + hop + nf * nt),
                (Mode::Half, 2.0, 2.0 * (sch + hop) + hop + nf * nt),
                (Mode::Panic, nf, nf * (sch + hop) + (nf - 1.0) * hop + nf * nt),
                // One decision per branch, one hop out and back, the longer half's NTs.
                (Mode::HalfParallel, 2.0, 2.0 * sch + 2.0 * hop + n.div_ceil(2) as f64 * nt),
                (Mode::Parallel, nf, nf * sch + 2.0 * hop + nt),
            ];
            for (mode, visits, latency) in expect {
                let r = row(&rows, n, mode, 0.001);
                assert_eq!(r.visits_per_packet, visits, "{n} {mode:?}");
                assert_eq!(r.dropped, 0.0);
                assert_eq!(r.reordered, 0);
                assert!((r.p50_ns as f64 - latency).abs() <= latency * 0.002, "{n} {mode:?}: p50 {} vs {latency}", r.p50_ns);
            }
        }
    }

    /// Paper Fig. 14 and 15: chaining beats PANIC-style scheduling, and parallel chains beat a
    /// sequence; under load, PANIC's trips saturate the scheduler first, and nothing is
    /// reordered or lost below saturation.
    #[test]
    fn chains_beat_panic_and_panic_saturates_the_scheduler_first() {
        let s = spec(vec![4, 7], vec![0.2, 0.8]);
        let rows = s.run(3, 0.01, None, |_, _| {});
        assert!(rows.iter().all(|r| r.reordered == 0), "per-flow order kept in every mode");
        for n in [4, 7] {
            let p50 = |m: Mode| row(&rows, n, m, 0.2).p50_ns;
            assert!(p50(Mode::Single) < p50(Mode::Half) && p50(Mode::Half) < p50(Mode::Panic), "{n}");
            assert!(p50(Mode::Parallel) < p50(Mode::HalfParallel) && p50(Mode::HalfParallel) < p50(Mode::Single), "{n}");
        }
        // 7 NTs at 0.8 of capacity: PANIC asks 7 × 25 ns of the scheduler per 125 ns packet.
        let panic = row(&rows, 7, Mode::Panic, 0.8);
        let single = row(&rows, 7, Mode::Single, 0.8);
        assert!(panic.sched_busy > 0.99 && panic.dropped > 0.05, "{panic:?}");
        assert!(single.sched_busy < 0.25 && single.dropped == 0.0, "{single:?}");
        assert!(single.delivered_pps > panic.delivered_pps * 1.2, "{single:?} vs {panic:?}");
        // Same arrivals in every mode: the offered rate is the same.
        assert_eq!(panic.offered_pps, single.offered_pps);
    }

    #[test]
    fn bad_sections_are_refused_with_the_reason() {
        let mut s = spec(vec![9], vec![0.5]);
        assert!(s.validate().unwrap_err().contains("nts"));
        s.nts = vec![3];
        s.loads = vec![0.0];
        assert!(s.validate().unwrap_err().contains("loads"));
        s.loads = vec![0.5];
        s.credits = 0;
        assert!(s.validate().unwrap_err().contains("credits"));
        s.credits = 1;
        assert!(s.validate().is_ok());
    }
}
