//! Weights, latency and goodput at overload (issue 49): several tenants of unequal weights, each
//! offering the same multiple of its fair part of the node, with one of three bottlenecks:
//!
//! | bottleneck   | what binds                                                                 |
//! |--------------|----------------------------------------------------------------------------|
//! | `dispatcher` | each tenant its own NT of 5 µs, inline on the dispatcher's core            |
//! | `nt`         | one NT of 40 µs every tenant's DAG shares (25 kpps), on the dispatcher    |
//! | `receive`    | NTs that cost nothing; receiving a packet costs 2 µs (a socket's path, as the UDP backend's) and binds |
//!
//! The offered load is a multiple of the node's capacity for that bottleneck (its cost per
//! packet at the fairness `core_target`): at 1× the node is just full, at 10× it is offered ten
//! times what it can carry. Each tenant has a receive ring of its own (`rx_queues: per_tenant`)
//! unless the run says otherwise. What a run measures: each tenant's delivered rate and its
//! share against its weight's, the total goodput, each tenant's p99, where the excess was
//! dropped, and how much each tenant's ingress limit moved from one epoch to the next over the
//! measured time (converged limits move little once the load is steady).
//!
//! On a virtual clock with the [`Machine`] model, exact and the same on any machine: what the
//! tests assert on; with real senders through the daemon, `scripts/bench-overload.sh`.

use super::isolation::{run_virtual_stalled, Machine, Timing};
use super::{dag_rule, datagram, spin, TestbedError};
use crate::paced::{IoCost, Paced, StreamSpec};
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::fair::FairConfig;
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::Mat;
use snic_core::node::NodeCoreConfig;
use snic_dataplane::node::{Clock, ManualClock, MonotonicClock};
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use snic_wire::ethernet::MacAddr;
use std::sync::Arc;
use std::time::Duration;

/// What binds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// Each tenant's own NT on the dispatcher's core.
    Dispatcher,
    /// One expensive NT all tenants share.
    Nt,
    /// The dispatcher's receive and transmit path.
    Receive,
}

impl Bottleneck {
    /// Every one, in report order.
    pub const ALL: [Bottleneck; 3] = [Bottleneck::Dispatcher, Bottleneck::Nt, Bottleneck::Receive];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Bottleneck::Dispatcher => "dispatcher",
            Bottleneck::Nt => "nt",
            Bottleneck::Receive => "receive",
        }
    }

    /// The bottleneck named `s`.
    pub fn parse(s: &str) -> Option<Bottleneck> {
        Bottleneck::ALL.into_iter().find(|b| b.name() == s)
    }

    /// The NT's cost per packet, ns.
    fn nt_ns(self) -> u64 {
        match self {
            Bottleneck::Dispatcher => 5_000,
            Bottleneck::Nt => 40_000,
            Bottleneck::Receive => 0,
        }
    }

    /// The machine a virtual run of it models: the default, but for the receive path's cost when
    /// that is the bottleneck.
    fn machine(self, m: Machine) -> Machine {
        match self {
            Bottleneck::Receive => Machine { io: IoCost { rx_ns: 2_000, ..m.io }, ..m },
            _ => m,
        }
    }
}

/// A run.
#[derive(Debug, Clone, PartialEq)]
pub struct Overload {
    /// What binds.
    pub bottleneck: Bottleneck,
    /// Each tenant's weight (tenant `i + 1`, VNI `100 × (i + 1)`).
    pub weights: Vec<f64>,
    /// The offered load, as a multiple of the node's capacity, split evenly among the tenants.
    pub multiple: f64,
    /// A receive ring per tenant (else one shared).
    pub queues: bool,
    /// Real or virtual.
    pub timing: Timing,
    /// Warm-up, then measured time.
    pub warmup: Duration,
    /// See `warmup`.
    pub measure: Duration,
    /// EPOCH_LEN.
    pub epoch: Duration,
    /// Packets each receive ring holds.
    pub ring: usize,
    /// Ingress limits enforced (else fair sharing measures only, and what holds the weights
    /// is the scheduler's round robin by time, weighted).
    pub enforce: bool,
    /// The node measures the share of its core it gets ([`FairConfig::measure_core`]).
    pub measure_core: bool,
}

impl Overload {
    /// A virtual run: `weights`, `multiple` × capacity through `bottleneck`, a ring per tenant,
    /// 300 ms of warm-up, 100 ms measured, 100 µs epochs.
    pub fn virtual_run(bottleneck: Bottleneck, weights: &[f64], multiple: f64) -> Self {
        Overload {
            bottleneck,
            weights: weights.to_vec(),
            multiple,
            queues: true,
            timing: Timing::Virtual(Machine::default()),
            warmup: Duration::from_millis(300),
            measure: Duration::from_millis(100),
            epoch: Duration::from_micros(100),
            ring: 1024,
            enforce: true,
            measure_core: false,
        }
    }

    /// The node's capacity for this bottleneck, packets per second: its core's share for
    /// tenants ([`FairConfig::core_target`]) over a packet's cost (NT, receive and transmit;
    /// on the real clock the receive path is taken as the model's).
    pub fn capacity_pps(&self) -> f64 {
        let m = match self.timing {
            Timing::Virtual(m) => self.bottleneck.machine(m),
            Timing::Real => Machine::default(),
        };
        let ns = self.bottleneck.nt_ns() + m.io.rx_ns + m.io.tx_ns;
        let duty = m.stalls.map_or(1.0, |s| s.duty());
        duty * FairConfig::default().core_target * 1e9 / ns as f64
    }
}

/// One tenant's figures over the measured time.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TenantOutcome {
    /// Its weight.
    pub weight: f64,
    /// Offered and delivered, packets per second.
    pub offered_pps: f64,
    /// See `offered_pps`.
    pub delivered_pps: f64,
    /// What it was delivered over its weighted max-min fair share of all that was delivered
    /// ([`fair_shares`]: a tenant offering less than its weight's part keeps what it offers, the
    /// rest is split by weight): 1 is exactly fair.
    pub over_fair_share: f64,
    /// Arrival-to-transmit latency, ns.
    pub p50_ns: u64,
    /// See `p50_ns`.
    pub p99_ns: u64,
    /// Lost in its receive ring before the node read it.
    pub ring_drops: u64,
    /// The node's drops by reason.
    pub drops: Vec<(&'static str, u64)>,
    /// Its ingress limit at the end, packets per second.
    pub limit_pps: Option<f64>,
    /// The largest change of its limit from one epoch to the next over the measured time,
    /// relative to the limit (0: it did not move; epochs without a limit on either side count
    /// as a change of 1).
    pub limit_swing: f64,
}

/// What a run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OverloadOutcome {
    /// The bottleneck's name.
    pub bottleneck: &'static str,
    /// The offered multiple of capacity.
    pub multiple: f64,
    /// The node's capacity, packets per second.
    pub capacity_pps: f64,
    /// Delivered in all, packets per second.
    pub goodput_pps: f64,
    /// Per tenant.
    pub tenants: Vec<TenantOutcome>,
    /// The largest `over_fair_share`'s distance from 1 among the tenants.
    pub weight_error: f64,
}

/// Runs `o`.
pub fn run(o: &Overload) -> Result<OverloadOutcome, TestbedError> {
    let n = o.weights.len();
    let src = "192.0.2.1:4789".parse().expect("an address");
    let cap = o.capacity_pps();
    let per_tenant = o.multiple * cap / n as f64;
    let streams: Vec<StreamSpec> =
        (0..n).map(|i| StreamSpec { datagram: datagram(100 * (i as u32 + 1), 1000 + i as u16, 64), pps: per_tenant, src }).collect();
    let cfg = NodeConfig {
        core: NodeCoreConfig {
            fair: FairConfig { epoch: o.epoch, enforce: o.enforce, measure_core: o.measure_core, ..FairConfig::default() },
            link_bps: 400e9,
            ..NodeCoreConfig::default()
        },
        vtep_port: None,
        ..Default::default()
    };
    let (clock_box, virtual_clock, io): (Box<dyn Clock>, Option<(ManualClock, Machine)>, IoCost) = match o.timing {
        Timing::Real => (Box::new(MonotonicClock::default()), None, IoCost::default()),
        Timing::Virtual(m) => {
            let c = ManualClock::default();
            (Box::new(c.clone()), Some((c, m)), o.bottleneck.machine(m).io)
        }
    };
    let node_clock: Box<dyn Clock> = match &virtual_clock {
        Some((c, _)) => Box::new(c.clone()),
        None => Box::new(MonotonicClock::default()),
    };
    let backend =
        if o.queues { Paced::with_queues(streams, o.ring, clock_box) } else { Paced::new(streams, o.ring, clock_box) }.with_io_cost(io);
    let mut node = Node::new(cfg, backend, node_clock)?;
    let nt = || NtSpec::Synthetic(SyntheticConfig::costing(o.bottleneck.nt_ns()));
    let shared = match o.bottleneck {
        Bottleneck::Nt => {
            let c = node.add_chain(vec![nt()]);
            node.launch(c)?;
            Some(c)
        }
        _ => None,
    };
    let mut mat = Mat::new();
    for (i, &w) in o.weights.iter().enumerate() {
        let t = TenantId(i as u16 + 1);
        if o.queues {
            node.set_rx_queue_tenant(i, Some(t));
        }
        let chain = match shared {
            Some(c) => c,
            None => {
                let c = node.add_chain(vec![nt()]);
                node.launch(c)?;
                c
            }
        };
        let vni = 100 * (i as u32 + 1);
        node.set_dag(DagUid(t.0 as u32), DagRoute::new(vec![Step { chain, mask: NtMask::all(1) }]));
        mat.insert(dag_rule(vni, t, DagUid(t.0 as u32)));
        node.fdb_mut().set_default(vni, Some(Peer { addr: "192.0.2.9:4789".parse().expect("an address"), mac: MacAddr::default() }));
        node.set_tenant(t, w);
    }
    node.mat_handle().store(Arc::new(mat));
    let drive = |node: &mut Node<Paced>, d: Duration| match &virtual_clock {
        Some((c, m)) => run_virtual_stalled(node, c, d, m.idle_poll, m.stalls),
        None => {
            spin(node, d);
        }
    };
    drive(&mut node, o.warmup);
    node.backend_mut().reset_stats();
    let before: Vec<_> = (1..=n).map(|i| node.stats().tenants[i].clone()).collect();
    // The measured time in epochs: each tenant's limit at every epoch's end.
    let mut limits: Vec<Vec<Option<f64>>> = vec![Vec::new(); n];
    let steps = (o.measure.as_nanos() / o.epoch.as_nanos()).max(1) as u32;
    let t0 = std::time::Instant::now();
    let v0 = virtual_clock.as_ref().map(|(c, _)| c.now());
    for _ in 0..steps {
        drive(&mut node, o.epoch);
        for (i, l) in limits.iter_mut().enumerate() {
            l.push(node.core().meter().limit(TenantId(i as u16 + 1)));
        }
    }
    let secs = match (&virtual_clock, v0) {
        (Some((c, _)), Some(v0)) => c.now().saturating_since(v0).as_secs_f64(),
        _ => t0.elapsed().as_secs_f64(),
    };
    let st = node.backend().stats();
    let delivered: u64 = st.iter().map(|s| s.delivered).sum();
    let offered: Vec<f64> = st.iter().map(|s| s.offered as f64).collect();
    let fair = fair_shares(&offered, &o.weights, delivered as f64);
    let tenants: Vec<TenantOutcome> = (0..n)
        .map(|i| {
            let s = &st[i];
            let mut ts = node.stats().tenants[i + 1].clone();
            for (d, b) in ts.drops.iter_mut().zip(&before[i].drops) {
                *d -= b;
            }
            TenantOutcome {
                weight: o.weights[i],
                offered_pps: s.offered as f64 / secs,
                delivered_pps: s.delivered as f64 / secs,
                over_fair_share: if fair[i] > 0.0 { s.delivered as f64 / fair[i] } else { 1.0 },
                p50_ns: s.latency.quantile(0.5),
                p99_ns: s.latency.quantile(0.99),
                ring_drops: s.ring_drops,
                drops: ts.drops_by_reason(),
                limit_pps: node.core().meter().limit(TenantId(i as u16 + 1)),
                limit_swing: swing(&limits[i]),
            }
        })
        .collect();
    let weight_error = tenants.iter().map(|t| (t.over_fair_share - 1.0).abs()).fold(0.0, f64::max);
    Ok(OverloadOutcome {
        bottleneck: o.bottleneck.name(),
        multiple: o.multiple,
        capacity_pps: cap,
        goodput_pps: delivered as f64 / secs,
        tenants,
        weight_error,
    })
}

/// The largest change of a limit between consecutive epochs, relative to the larger of the two
/// (a limit that appears or goes counts 1).
fn swing(limits: &[Option<f64>]) -> f64 {
    limits
        .windows(2)
        .map(|w| match (w[0], w[1]) {
            (Some(a), Some(b)) if a.max(b) > 0.0 => (a - b).abs() / a.max(b),
            (Some(_), Some(_)) | (None, None) => 0.0,
            _ => 1.0,
        })
        .fold(0.0, f64::max)
}

/// The weighted max-min fair split of `total` among tenants that offered `offered` with
/// `weights` (water-filling): one offering less than its weight's part of what is left keeps
/// all it offered; the rest is split by weight. The oracle weights are judged against.
pub fn fair_shares(offered: &[f64], weights: &[f64], total: f64) -> Vec<f64> {
    let mut fair = vec![0.0; offered.len()];
    let mut open: Vec<usize> = (0..offered.len()).collect();
    let mut left = total;
    while !open.is_empty() {
        let unit = left / open.iter().map(|&i| weights[i]).sum::<f64>();
        let (sat, rest): (Vec<usize>, Vec<usize>) = open.iter().partition(|&&i| offered[i] <= unit * weights[i]);
        if sat.is_empty() {
            for &i in &rest {
                fair[i] = unit * weights[i];
            }
            break;
        }
        for &i in &sat {
            fair[i] = offered[i];
            left -= offered[i];
        }
        open = rest;
    }
    fair
}

#[cfg(test)]
mod tests {
    use super::fair_shares;

    #[test]
    fn the_oracle_splits_by_weight_what_the_satisfied_leave() {
        assert_eq!(fair_shares(&[10.0, 10.0, 10.0], &[1.0, 2.0, 5.0], 8.0), vec![1.0, 2.0, 5.0]);
        assert_eq!(fair_shares(&[1.0, 10.0, 10.0], &[5.0, 2.0, 1.0], 10.0), vec![1.0, 6.0, 3.0]);
        assert_eq!(fair_shares(&[3.0, 3.0], &[1.0, 1.0], 6.0), vec![3.0, 3.0]);
    }
}
