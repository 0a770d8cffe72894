//! The `fairness` experiment (paper Fig. 20, the Fig. 7 scenario): tenants whose DAGs visit
//! NTs of given throughputs, loads that step over time, and the node's demand model and
//! fairness controller — `snic_core::meter::Meter` inside the node's epoch machine
//! (`snic_core::node::NodeCore`), the code the data plane runs — closing the
//! loop every epoch: each tenant offers its load, its ingress limit admits part of it, the NTs
//! on its path see what was admitted, the link carries it; the meter reads the counters that
//! result (as it reads the node's) and DRF reallocates. A fluid model: NT throughput is shared
//! in proportion to the load admitted to it.

use serde::{Deserialize, Serialize};
use snic_core::config::Config;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::elastic::ElasticConfig;
use snic_core::fair::jain;
use snic_core::ids::{ChainId, InstanceId, TenantId};
use snic_core::meter::{Arrivals, Counters, TenantCounters};
use snic_core::node::setup::Instances;
use snic_core::node::{NodeCore, NodeCoreConfig, PacketPath};
use snic_core::time::Instant;

/// The scenario's `[fairness]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FairnessSpec {
    /// Packets per second per load unit.
    #[serde(default = "default_unit")]
    pub unit_pps: f64,
    /// Bytes per packet (VXLAN datagram), for the link.
    #[serde(default = "default_packet_bytes")]
    pub packet_bytes: f64,
    /// The modelled machine's dispatcher (one core), ns per packet: receiving it (every packet
    /// read, over its limit or not) and the rest of an admitted packet's way (classify,
    /// schedule, transmit; NT time excluded) — the costs a node on a virtual clock is given
    /// (`snic bench fair --virtual`'s `--rx-ns`/`--tx-ns`). The dispatcher reads what it has
    /// time for; a shared receive queue loses the rest, each tenant the same fraction. 0 (the
    /// default): the dispatcher is never the bottleneck.
    #[serde(default)]
    pub rx_ns: f64,
    /// See `rx_ns`.
    #[serde(default)]
    pub rest_ns: f64,
    /// The NTs and their throughput (units).
    pub nts: Vec<NtSpec>,
    /// The tenants.
    pub tenants: Vec<TenantSpec>,
}

fn default_unit() -> f64 {
    100_000.0
}
fn default_packet_bytes() -> f64 {
    1000.0
}

/// Packet-store buffers the modelled node has (the fluid model holds none).
const STORE_BUFFERS: usize = 65_536;

/// An NT.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NtSpec {
    /// Name.
    pub name: String,
    /// Throughput of its one instance, units.
    pub capacity: f64,
}

/// A tenant.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Name.
    pub name: String,
    /// DRF weight.
    #[serde(default = "one")]
    pub weight: f64,
    /// The NTs its packets visit.
    pub path: Vec<String>,
    /// `[time_s, units]` steps: from each time on, the tenant offers that load.
    pub load: Vec<[f64; 2]>,
}

fn one() -> f64 {
    1.0
}

/// One tenant's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TenantResult {
    /// Name.
    pub tenant: String,
    /// Delivered over the last 20% of the time before the last load step, units.
    pub before_units: f64,
    /// Delivered over the last 20% of the run, units.
    pub after_units: f64,
    /// Its dominant NT at the end.
    pub dominant: Option<String>,
    /// Its share of it.
    pub dominant_share: f64,
}

/// The experiment's report entry.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FairnessResult {
    /// `snic` (weighted DRF on measured demand, enforced at ingress).
    pub scheme: &'static str,
    /// Per tenant.
    pub tenants: Vec<TenantResult>,
    /// Time after the last load step until every tenant's delivered rate stays within 5% of its
    /// final value, µs.
    pub convergence_us: f64,
    /// Jain's index of the dominant shares at the end.
    pub jain_dominant: f64,
    /// Per tenant: delivered units per epoch (for plots; not in the JSON report).
    #[serde(skip)]
    pub timeline: Vec<(String, Vec<(f64, f64)>)>,
}

impl FairnessSpec {
    /// Checks names and ranges.
    pub fn validate(&self) -> Result<(), String> {
        use crate::{non_negative, positive};
        if !positive(self.unit_pps) || !positive(self.packet_bytes) {
            return Err("fairness: unit_pps and packet_bytes must be positive".into());
        }
        if !non_negative(self.rx_ns) || !non_negative(self.rest_ns) {
            return Err("fairness: rx_ns and rest_ns must be zero or more".into());
        }
        if self.tenants.len() >= usize::from(u16::MAX) {
            return Err("fairness: too many tenants".into());
        }
        if self.nts.iter().any(|n| !positive(n.capacity)) {
            return Err("fairness.nts: every capacity must be positive".into());
        }
        for t in &self.tenants {
            if let Some(n) = t.path.iter().find(|n| !self.nts.iter().any(|x| &x.name == *n)) {
                return Err(format!("fairness.tenants `{}`: unknown NT `{n}` in path", t.name));
            }
            if t.load.is_empty() || t.load.iter().any(|&[ts, u]| !(non_negative(ts) && non_negative(u))) {
                return Err(format!("fairness.tenants `{}`: load needs [time_s, units] steps, both zero or more", t.name));
            }
            if !positive(t.weight) {
                return Err(format!("fairness.tenants `{}`: weight must be positive", t.name));
            }
        }
        Ok(())
    }

    /// The fraction of what was `offered` the dispatcher reads in an epoch of `epoch_ns` on its
    /// one core, each tenant admitting up to its budget: all of it, or as much as fills the
    /// epoch (the same fraction of every tenant's: one shared receive queue, read in order).
    fn dispatcher_reads(&self, offered: &[f64], budgets: &[Option<f64>], epoch_ns: f64) -> f64 {
        let cost = |f: f64| -> f64 {
            offered.iter().zip(budgets).map(|(o, b)| self.rx_ns * f * o + self.rest_ns * b.map_or(f * o, |b| (f * o).min(b))).sum()
        };
        if cost(1.0) <= epoch_ns {
            return 1.0;
        }
        // The cost grows with the fraction read: bisect for the one that fills the epoch.
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if cost(mid) <= epoch_ns {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn load_at(t: &TenantSpec, s: f64) -> f64 {
        // The latest step at or before `s` (steps may be listed in any order).
        t.load.iter().filter(|[ts, _]| *ts <= s).max_by(|a, b| a[0].total_cmp(&b[0])).map_or(0.0, |l| l[1])
    }

    /// Runs `duration_s` of epochs on a node configured by `node` (the scenario's `[node]`:
    /// its fairness section and link).
    pub fn run(&self, duration_s: f64, node: &Config) -> FairnessResult {
        let epoch = node.fair.epoch;
        // The node's epoch machine: its demand model and fairness controller (no regions: the
        // elasticity policy stays off).
        let mut core = NodeCore::new(
            NodeCoreConfig {
                fair: node.fair,
                link_bps: node.link_bps,
                workers: 0,
                store_buffers: STORE_BUFFERS,
                max_tenants: self.tenants.len() + 1,
                elastic: ElasticConfig::default(),
                // (The fluid node has no worker threads to place regions on.)
                auto_place: false,
                ..NodeCoreConfig::default()
            },
            Instant::ZERO,
        );
        // Each NT is a chain of one, with one instance of its declared throughput.
        for (i, n) in self.nts.iter().enumerate() {
            let c = ChainId(i as u16);
            let id = core.add_chain(&["nt"], Instances::Many);
            debug_assert_eq!(id, c);
            core.label_chain(c, std::slice::from_ref(&n.name));
            core.instance_installed(c, InstanceId(i as u16), &[Some(n.capacity * self.unit_pps)], false);
        }
        for (i, t) in self.tenants.iter().enumerate() {
            core.set_tenant(TenantId(i as u16 + 1), t.weight);
        }
        let paths: Vec<Vec<usize>> = self
            .tenants
            .iter()
            .map(|t| t.path.iter().map(|n| self.nts.iter().position(|x| &x.name == n).expect("validated")).collect())
            .collect();
        let routes: Vec<DagRoute> = paths
            .iter()
            .map(|p| DagRoute::new(p.iter().map(|&n| Step { chain: ChainId(n as u16), mask: NtMask::all(1) }).collect()))
            .collect();
        let mut node = Fluid::new(self.tenants.len(), self.packet_bytes);
        let last_step = self.tenants.iter().flat_map(|t| t.load.iter().map(|l| l[0])).fold(0.0, f64::max);
        let epochs = (duration_s / epoch.as_secs_f64()).round() as u64;
        let dt = epoch.as_secs_f64();
        let mut delivered: Vec<Vec<f64>> = vec![Vec::new(); self.tenants.len()];
        let mut now = Instant::ZERO;
        for k in 0..epochs {
            let s = k as f64 * dt;
            let limits: Vec<Option<f64>> = core.meter().fairness().shares().iter().map(|x| x.limit_pps).collect();
            let offered: Vec<f64> = self.tenants.iter().map(|t| Self::load_at(t, s) * self.unit_pps * dt).collect();
            // Everything offered reaches the node (`[node.fairness]`'s `link_gbps` is the
            // link's capacity as fair sharing counts it: the limits keep tenants within it); the
            // dispatcher reads what its core has time for, and the limits admit part of that.
            let budgets: Vec<Option<f64>> = limits.iter().map(|l| l.map(|l| l * dt)).collect();
            let read = self.dispatcher_reads(&offered, &budgets, dt * 1e9);
            let received: Vec<f64> = offered.iter().map(|o| o * read).collect();
            let admitted: Vec<f64> = received.iter().zip(&budgets).map(|(r, b)| b.map_or(*r, |b| r.min(b))).collect();
            // Each NT serves what was admitted to it, up to its throughput, in proportion.
            let mut on_nt = vec![0.0; self.nts.len()];
            for (p, a) in paths.iter().zip(&admitted) {
                for &n in p {
                    on_nt[n] += a;
                }
            }
            let served = |n: usize| (self.nts[n].capacity * self.unit_pps * dt / on_nt[n]).min(1.0);
            let mut out = vec![0.0; self.tenants.len()];
            for (i, (p, a)) in paths.iter().zip(&admitted).enumerate() {
                let frac = p.iter().map(|&n| served(n)).fold(1.0, f64::min);
                out[i] = a * frac;
                delivered[i].push(a * frac / dt / self.unit_pps);
            }
            now = now + epoch;
            node.epoch(&received, &admitted, &out);
            node.lost += offered.iter().sum::<f64>() * (1.0 - read);
            if self.rx_ns > 0.0 || self.rest_ns > 0.0 {
                // The node times its polls; here one poll per epoch, at the model's costs.
                let (r, a) = (received.iter().sum::<f64>(), admitted.iter().sum::<f64>());
                core.sample_poll(
                    (r * self.rx_ns).round() as u64,
                    r.round() as usize,
                    1,
                    (a * self.rest_ns).round() as u64,
                    a.round() as usize,
                );
            }
            let mut arrivals = FluidArrivals { routes: &routes, admitted: &node.arrived, counts: Vec::new() };
            core.handle_fluid_epoch(now, &mut arrivals, &node, 0, |_| false);
        }
        let f = core.meter().fairness();
        let resource = |d: usize| f.resources()[d].name.clone();
        let avg = |xs: &[f64]| if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 };
        let step_epoch = ((last_step / dt).round() as usize).min(epochs as usize);
        let tail = |from: usize, to: usize| (to.saturating_sub((to - from) / 5).max(from), to);
        let tenants = self
            .tenants
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let (b0, b1) = tail(0, step_epoch);
                let (a0, a1) = tail(step_epoch, delivered[i].len());
                let sh = &f.shares()[i];
                TenantResult {
                    tenant: t.name.clone(),
                    before_units: avg(&delivered[i][b0..b1]),
                    after_units: avg(&delivered[i][a0..a1]),
                    dominant: sh.dominant.map(resource),
                    dominant_share: sh.dominant_share,
                }
            })
            .collect::<Vec<_>>();
        // Settled: the first epoch after which every tenant stays within 5% of its final rate.
        let last_out = (step_epoch..epochs as usize)
            .filter(|&k| tenants.iter().enumerate().any(|(i, r)| (delivered[i][k] - r.after_units).abs() > 0.05 * r.after_units.max(1e-12)))
            .max();
        let convergence_us = last_out.map_or(0.0, |k| (k + 1 - step_epoch) as f64 * dt * 1e6);
        let shares: Vec<f64> = f.shares().iter().map(|s| s.dominant_share).collect();
        let timeline = self
            .tenants
            .iter()
            .zip(&delivered)
            .map(|(t, d)| (t.name.clone(), d.iter().enumerate().map(|(k, &u)| (k as f64 * dt * 1e3, u)).collect()))
            .collect();
        FairnessResult { scheme: "snic", tenants, convergence_us, jain_dominant: jain(&shares), timeline }
    }
}

/// The modelled node's counters, cumulative as a driver keeps them (the fluid amounts summed,
/// rounded when read).
struct Fluid {
    touched: Vec<TenantId>,
    /// Per tenant (index = tenant id): packets admitted, bytes admitted, bytes sent, packets
    /// over the limit; and the packets admitted this epoch, which arrive at every NT of its path.
    rx: Vec<f64>,
    tx_bytes: Vec<f64>,
    over: Vec<f64>,
    arrived: Vec<u64>,
    packet_bytes: f64,
    /// Packets lost in the shared receive queue (the dispatcher had no time for them).
    lost: f64,
}

impl Fluid {
    fn new(tenants: usize, packet_bytes: f64) -> Self {
        let n = tenants + 1;
        Fluid {
            touched: (1..n).map(|t| TenantId(t as u16)).collect(),
            rx: vec![0.0; n],
            tx_bytes: vec![0.0; n],
            over: vec![0.0; n],
            arrived: vec![0; n],
            packet_bytes,
            lost: 0.0,
        }
    }

    /// One epoch: per tenant (by index) received, admitted by its limit, and delivered.
    fn epoch(&mut self, received: &[f64], admitted: &[f64], delivered: &[f64]) {
        for i in 0..received.len() {
            let t = i + 1;
            let before = self.rx[t].round() as u64;
            self.rx[t] += admitted[i];
            self.arrived[t] = self.rx[t].round() as u64 - before;
            self.tx_bytes[t] += delivered[i] * self.packet_bytes;
            self.over[t] += received[i] - admitted[i];
        }
    }
}

impl Counters for Fluid {
    fn touched(&self) -> &[TenantId] {
        &self.touched
    }
    fn tenant(&self, t: TenantId) -> TenantCounters {
        let i = t.index();
        TenantCounters {
            rx_packets: self.rx[i].round() as u64,
            rx_bytes: (self.rx[i] * self.packet_bytes).round() as u64,
            tx_bytes: self.tx_bytes[i].round() as u64,
            over_limit: self.over[i].round() as u64,
            store_refused: 0,
            sched_refused: 0,
        }
    }
    fn store_buffers(&self, _: TenantId) -> u64 {
        0
    }
    fn nt_time(&self, _: InstanceId, _: usize) -> (u64, u64) {
        // Every NT declares its throughput: no timing needed.
        (0, 0)
    }
    fn lost_shared(&self) -> u64 {
        self.lost.round() as u64
    }
    fn lost_own(&self, _: TenantId) -> u64 {
        0
    }
}

/// What arrived at each NT this epoch: a tenant's admitted packets, at every step of its path.
struct FluidArrivals<'a> {
    routes: &'a [DagRoute],
    admitted: &'a [u64],
    counts: Vec<u64>,
}

/// The fluid node's packet path: arrivals only (its NTs declare their throughput; no instance
/// is timed).
impl PacketPath for FluidArrivals<'_> {
    fn instance_count(&self) -> usize {
        0
    }
    fn chain_of(&self, _: InstanceId) -> ChainId {
        ChainId(0)
    }
    fn set_cost(&mut self, _: InstanceId, _: f64) {}
}

impl Arrivals for FluidArrivals<'_> {
    fn drain_arrivals(&mut self, mut f: impl FnMut(TenantId, &DagRoute, &[u64])) {
        for (i, r) in self.routes.iter().enumerate() {
            let n = self.admitted[i + 1];
            if n > 0 {
                self.counts.clear();
                self.counts.resize(r.steps().len(), n);
                f(TenantId(i as u16 + 1), r, &self.counts);
            }
        }
    }
}
