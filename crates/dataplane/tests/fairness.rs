//! Fair sharing in the node, on a virtual clock: measured demand, weighted DRF, ingress limits.
//! The paper's Fig. 7 / Fig. 20 scenario, with synthetic NTs of declared throughput.

use snic_core::fair::{jain, FairConfig};
use snic_core::ids::TenantId;
use snic_core::node::NodeCoreConfig;
use snic_dataplane::{Drop, NodeConfig};
use snic_perf::testbed::Fig7;
use std::time::Duration;

const UNIT: f64 = 1000.0; // packets per second per unit of the figure
const EPOCH: Duration = Duration::from_millis(1);
const STEP: Duration = Duration::from_micros(50);

fn fig7(enforce: bool) -> Fig7 {
    // Rates here are thousands of packets per second: bursts of a few packets, not 256.
    let fair = FairConfig { epoch: EPOCH, enforce, min_burst_packets: 4.0, ..FairConfig::default() };
    Fig7::new(NodeConfig { core: NodeCoreConfig { fair, ..NodeCoreConfig::default() }, ..Default::default() }, UNIT).unwrap()
}

fn drive(f: &mut Fig7, load: [f64; 2], dur: Duration) -> [u64; 2] {
    f.drive(load, dur, STEP, |_| {})
}

fn share(f: &Fig7, t: u16) -> snic_core::fair::TenantShare {
    f.share(t).unwrap()
}

#[test]
fn fig7_user2_steps_up_and_drf_rebalances_the_shared_nts() {
    let mut f = fig7(true);
    // Before the step: user1 8 units, user2 2; NT2 and NT4 carry 10: nobody is limited.
    let got = drive(&mut f, [8.0, 2.0], Duration::from_millis(30));
    assert!(share(&f, 1).limit_pps.is_none() && share(&f, 2).limit_pps.is_none());
    assert!((got[0] as f64 - 240.0).abs() <= 2.0 && (got[1] as f64 - 60.0).abs() <= 2.0, "{got:?}");
    let names: Vec<_> = f.node.core().meter().fairness().resources().iter().map(|r| r.name.clone()).collect();
    assert_eq!(names, ["ingress", "egress", "store", "dispatcher", "memory", "nt1", "nt2", "nt3", "nt4"]);

    // user2 steps to 6 units. DRF equalises dominant shares (user1's on NT1/NT2/NT4, 10 units;
    // user2's on NT3, 7 units) until NT2 and NT4 are full: s = 10/17, so user1 gets 100/17 =
    // 5.88 units and user2 70/17 = 4.12.
    drive(&mut f, [8.0, 6.0], Duration::from_millis(30));
    let (s1, s2) = (share(&f, 1), share(&f, 2));
    let rel = |a: f64, b: f64| (a - b).abs() / b;
    assert!(rel(s1.limit_pps.unwrap(), 100.0 / 17.0 * UNIT) < 0.03, "{s1:?}");
    assert!(rel(s2.limit_pps.unwrap(), 70.0 / 17.0 * UNIT) < 0.03, "{s2:?}");
    assert_eq!(s2.dominant, Some(7), "user2's dominant resource is NT3");
    assert!(jain(&[s1.dominant_share, s2.dominant_share]) > 0.999);
    // Measured demand stays at the intended 8 and 6 units although less is admitted.
    assert!(rel(s1.demand[6], 0.8) < 0.03 && rel(s2.demand[7], 6.0 / 7.0) < 0.03, "{s1:?} {s2:?}");
    // What gets through follows the allocation (bursts of one epoch aside).
    let got = drive(&mut f, [8.0, 6.0], Duration::from_millis(40));
    let rate = got.map(|n| n as f64 / 0.040);
    assert!(rel(rate[0], 100.0 / 17.0 * UNIT) < 0.05 && rel(rate[1], 70.0 / 17.0 * UNIT) < 0.05, "{rate:?}");
    assert_eq!(
        f.node.stats().tenants[1].drops[Drop::RateLimit.index()] + f.node.stats().tenants[1].tx_packets,
        240 + 240 + 320,
        "every offered packet is delivered or counted as rate-limited"
    );
}

#[test]
fn without_enforcement_the_node_only_measures() {
    let mut f = fig7(false);
    let got = drive(&mut f, [8.0, 6.0], Duration::from_millis(40));
    // The allocation is computed, but nothing is limited: both get their whole load.
    assert!(share(&f, 1).fraction < 0.8);
    assert!(got[0].abs_diff(320) <= 1 && got[1].abs_diff(240) <= 1, "{got:?}");
    assert_eq!(f.node.core().meter().limit(TenantId(1)), None);
}

#[test]
fn a_removed_tenant_is_no_longer_limited() {
    let mut f = fig7(true);
    drive(&mut f, [8.0, 6.0], Duration::from_millis(20));
    assert!(f.node.core().meter().limit(TenantId(1)).is_some());
    f.node.remove_tenant(TenantId(1));
    assert_eq!(f.node.core().meter().limit(TenantId(1)), None);
    assert_eq!(f.node.core().meter().fairness().shares().len(), 1);
}

/// Two tenants share one engine on a virtual clock; tenant 2 asks for more bytes per second
/// than the engine does. The engine's token buckets (FairNIC) hold tenant 2 to the rest of the
/// engine and leave tenant 1 untouched. (Ingress limits are off: the buckets alone.) The engine
/// is synthetic — 50 ns + 1 ns a byte of its core's virtual time — so its measured speed, and
/// what the buckets are sized from, is the same on any machine.
#[test]
fn engine_buckets_hold_a_flooding_tenant_to_the_rest_of_a_shared_engine() {
    use snic_core::dag::{DagRoute, NtMask, Step};
    use snic_core::ids::DagUid;
    use snic_core::mat::Mat;
    use snic_dataplane::backend::mem::MemPort;
    use snic_dataplane::backend::Framing;
    use snic_dataplane::node::ManualClock;
    use snic_dataplane::store::Peer;
    use snic_dataplane::Node;
    use snic_nt::synthetic::SyntheticConfig;
    use snic_nt::{DropReason, NtSpec};
    use snic_perf::testbed::datagram;
    use std::sync::Arc;

    let clock = ManualClock::default();
    let fair = FairConfig { enforce: false, ..FairConfig::default() };
    let cfg = NodeConfig {
        core: NodeCoreConfig { fair, store_buffers: 65536, ..NodeCoreConfig::default() },
        vtep_port: None,
        ..Default::default()
    };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone())).unwrap();
    let engine = SyntheticConfig { cost_ps_per_byte: 1000, engine: true, ..SyntheticConfig::costing(50) };
    let c = node.add_chain(vec![NtSpec::Synthetic(engine)]);
    node.launch(c).unwrap();
    let mut mat = Mat::new();
    for t in 1..=2u16 {
        node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
        mat.insert(snic_perf::testbed::dag_rule(100 * t as u32, TenantId(t), DagUid(t as u32)));
        let peer = Peer { addr: "192.0.2.9:4789".parse().unwrap(), mac: Default::default() };
        node.fdb_mut().set_default(100 * t as u32, Some(peer));
        node.set_tenant(TenantId(t), 1.0);
    }
    node.mat_handle().store(Arc::new(mat));
    let src = "192.0.2.1:4789".parse().unwrap();
    let (small, big) = (datagram(100, 1, 256), datagram(200, 2, 1400));
    // A big packet costs the engine 50 + 1450 ns. In each 10 µs step tenant 1 offers 2 small
    // packets (under 10% of the engine) and tenant 2 twenty big ones: three times the engine.
    let offer = |node: &mut Node<MemPort>, smalls: usize, bigs: usize| {
        clock.advance(Duration::from_micros(10));
        for _ in 0..smalls {
            node.backend_mut().rx.push_back((small.clone(), src));
        }
        for _ in 0..bigs {
            node.backend_mut().rx.push_back((big.clone(), src));
        }
        while node.poll() > 0 {}
        node.backend_mut().tx.clear();
    };
    // Until the engine's speed is measured (1 MiB timed), nothing is refused: tenant 2 alone
    // warms it up.
    for _ in 0..500 {
        offer(&mut node, 0, 20);
    }
    let stats0 = [1, 2].map(|t| node.stats().tenants[t].clone());
    for _ in 0..3000 {
        offer(&mut node, 2, 20);
    }
    let throttled = |t: usize| node.stats().tenants[t].drops[Drop::Nt(DropReason::EngineThrottled).index()];
    let sent = |t: usize| node.stats().tenants[t].tx_packets - stats0[t - 1].tx_packets;
    assert_eq!(throttled(1), 0, "tenant 1 stays within its share");
    assert_eq!(sent(1), 6000, "and all of it goes through");
    assert!(throttled(2) > 0, "tenant 2 is held back at the engine");
    assert!(sent(2) > 0, "but still served");
}

/// Losses in a receive queue are a tenant's only when the queue is that tenant's own: with one
/// shared ring nobody is charged them by name; with a ring per tenant, the flooding tenant is.
/// Virtual clock: receiving a packet costs the dispatcher 50 ns, so it reads at most 20 Mpps,
/// and the flood offers 40.
#[test]
fn receive_queue_losses_are_charged_to_the_queues_tenant_only() {
    use snic_core::dag::{DagRoute, NtMask, Step};
    use snic_core::ids::DagUid;
    use snic_core::mat::Mat;
    use snic_dataplane::backend::Backend;
    use snic_dataplane::node::ManualClock;
    use snic_dataplane::Node;
    use snic_perf::paced::{IoCost, Paced, StreamSpec};
    use snic_perf::testbed::isolation::run_virtual;
    use snic_perf::testbed::{dag_rule, datagram};
    let run = |queues: bool| {
        let src = "192.0.2.1:4789".parse().unwrap();
        let streams = vec![
            StreamSpec { datagram: datagram(100, 1000, 64), pps: 10_000.0, src },
            StreamSpec { datagram: datagram(200, 2000, 64), pps: 40_000_000.0, src },
        ];
        let clock = ManualClock::default();
        let ring = 4096;
        let backend = if queues {
            Paced::with_queues(streams, ring, Box::new(clock.clone()))
        } else {
            Paced::new(streams, ring, Box::new(clock.clone()))
        }
        .with_io_cost(IoCost { rx_ns: 50, tx_ns: 20 });
        let fair = FairConfig { epoch: Duration::from_micros(100), ..FairConfig::default() };
        let mut node = Node::new(
            NodeConfig { core: NodeCoreConfig { fair, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() },
            backend,
            Box::new(clock.clone()),
        )
        .unwrap();
        let mut mat = Mat::new();
        for t in [1u16, 2] {
            let c = node.add_chain(vec![snic_nt::NtSpec::Dummy]);
            node.launch(c).unwrap();
            node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
            mat.insert(dag_rule(100 * t as u32, TenantId(t), DagUid(t as u32)));
            node.set_tenant(TenantId(t), 1.0);
            // With one queue this is ignored: the shared ring is nobody's own.
            node.set_rx_queue_tenant(t as usize - 1, Some(TenantId(t)));
        }
        node.mat_handle().store(std::sync::Arc::new(mat));
        run_virtual(&mut node, &clock, Duration::from_millis(10), Duration::from_micros(1));
        let lost = |t: usize| node.stats().tenants[t].drops[Drop::RxQueue.index()];
        (node.backend().rx_dropped(), lost(1), lost(2))
    };
    let (ring, victim, flood) = run(false);
    assert!(ring > 0, "the flood overflows the shared ring");
    assert_eq!((victim, flood), (0, 0), "a shared ring's losses are nobody's by name");
    let (ring, victim, flood) = run(true);
    assert!(ring > 0 && flood > 0, "the flood overflows its own ring: {ring} {flood}");
    assert_eq!(victim, 0, "the victim's ring is not charged the flood's losses");
}

#[test]
fn the_cores_handed_out_follow_core_target() {
    for (target, workers) in [(0.8, 0), (0.6, 0), (0.6, 2)] {
        let fair = FairConfig { epoch: EPOCH, core_target: target, ..FairConfig::default() };
        let f = Fig7::new(NodeConfig { core: NodeCoreConfig { fair, workers, ..NodeCoreConfig::default() }, ..Default::default() }, UNIT)
            .unwrap();
        let res = f.node.core().meter().fairness().resources();
        let cap = |name: &str| res.iter().find(|r| r.name == name).map(|r| r.capacity);
        assert_eq!(cap("dispatcher"), Some(target));
        assert_eq!(cap("workers"), (workers > 0).then_some(target * workers as f64));
    }
}

/// Two tenants of weights 1 and 3 share one NT that does 25 kpps (a declared engine held to it,
/// dropping the rest: capacity-bound, as an expensive NT is), each offering 30 kpps, with the
/// default fair-sharing settings: at 100 µs epochs each tenant has about three packets an
/// epoch. Weighted DRF gives them 6.25 and 18.75 kpps of it.
struct LowRate {
    node: snic_dataplane::Node<snic_dataplane::backend::mem::MemPort>,
    clock: snic_dataplane::node::ManualClock,
    owed: [f64; 2],
    seq: u16,
    rng: u64,
}

impl LowRate {
    fn new(fair: FairConfig, capacity_pps: u64) -> LowRate {
        Self::on(fair, capacity_pps, None)
    }

    /// [`LowRate::new`] as one of a node's dispatcher threads (`data_core`).
    fn on(fair: FairConfig, capacity_pps: u64, data_core: Option<snic_core::fair::OnBoard>) -> LowRate {
        use snic_core::dag::{DagRoute, NtMask, Step};
        use snic_core::ids::DagUid;
        use snic_core::mat::Mat;
        use snic_dataplane::backend::mem::MemPort;
        use snic_dataplane::backend::Framing;
        use snic_dataplane::node::ManualClock;
        use snic_dataplane::store::Peer;
        use snic_nt::synthetic::SyntheticConfig;
        use snic_nt::NtSpec;
        use snic_perf::testbed::dag_rule;
        let clock = ManualClock::default();
        let cfg =
            NodeConfig { core: NodeCoreConfig { fair, ..NodeCoreConfig::default() }, vtep_port: None, data_core, ..Default::default() };
        let mut node = snic_dataplane::Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone())).unwrap();
        let c = node.add_chain(vec![NtSpec::Synthetic(SyntheticConfig::declared(capacity_pps, true))]);
        node.launch(c).unwrap();
        let mut mat = Mat::new();
        for (t, w) in [(1u16, 1.0), (2, 3.0)] {
            node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
            mat.insert(dag_rule(100 * t as u32, TenantId(t), DagUid(t as u32)));
            let peer = Peer { addr: "192.0.2.9:4789".parse().unwrap(), mac: Default::default() };
            node.fdb_mut().set_default(100 * t as u32, Some(peer));
            node.set_tenant(TenantId(t), w);
        }
        node.mat_handle().store(std::sync::Arc::new(mat));
        LowRate { node, clock, owed: [0.0; 2], seq: 0, rng: 7 }
    }

    /// Offers `pps` per tenant for `dur` in 50 µs steps; the packets each got through.
    fn drive(&mut self, pps: [f64; 2], dur: Duration) -> [u64; 2] {
        use snic_perf::testbed::datagram;
        let before = [1, 2].map(|t| self.node.stats().tenants[t].tx_packets);
        use snic_dataplane::node::Clock;
        let end = self.clock.now() + dur;
        let src = "192.0.2.1:4789".parse().unwrap();
        while self.clock.now() < end {
            self.clock.advance(STEP);
            for (i, vni) in [100, 200].into_iter().enumerate() {
                // Poisson arrivals (exponential gaps from a fixed-seed generator): real senders
                // are bursty, and a few packets an epoch make each epoch's count noisy.
                self.owed[i] -= STEP.as_secs_f64();
                while self.owed[i] <= 0.0 {
                    self.rng = self.rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let u = ((self.rng >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                    self.owed[i] += -u.ln() / pps[i];
                    self.seq = self.seq.wrapping_add(1);
                    self.node.backend_mut().rx.push_back((datagram(vni, 1000 + self.seq % 64, 64), src));
                }
            }
            while self.node.poll() > 0 {}
            self.node.backend_mut().tx.clear();
        }
        let after = [1, 2].map(|t| self.node.stats().tenants[t].tx_packets);
        [after[0] - before[0], after[1] - before[1]]
    }
}

/// Weights hold at a few packets an epoch: delivered 1:3 within 10%, the limits enforced (the
/// weight-1 tenant is dropped as `rate_limit`, not admitted far past its limit), and the split
/// steady from one second to the next.
#[test]
fn weights_hold_at_a_few_packets_an_epoch() {
    let mut f = LowRate::new(FairConfig::default(), 25_000);
    f.drive([30_000.0, 30_000.0], Duration::from_secs(1));
    for _ in 0..2 {
        let got = f.drive([30_000.0, 30_000.0], Duration::from_secs(1));
        let ratio = got[1] as f64 / got[0] as f64;
        assert!((ratio - 3.0).abs() / 3.0 < 0.10, "delivered {got:?}: ratio {ratio:.2}, DRF's is 3");
        assert!(got[0] + got[1] > 22_000, "the NT is kept busy: {got:?}");
    }
    let limited = f.node.stats().tenants[1].drops[Drop::RateLimit.index()];
    assert!(limited > 30_000, "the weight-1 tenant is held at ingress ({limited} rate-limited)");
}

/// Two dispatcher threads, both tenants on both (half of each one's flows on each), one NT
/// instance per thread of half the capacity of [`weights_hold_at_a_few_packets_an_epoch`]'s:
/// each thread's NT is the bottleneck, each tenant offers more than its weighted share of the
/// two, and the board's one DRF splits what the node delivers 1:3, as one thread's does.
#[test]
fn weights_hold_across_two_dispatcher_threads_sharing_each_ones_nt() {
    let on = snic_core::fair::Board::shared(2);
    let mut t = [0, 1].map(|k| LowRate::on(FairConfig::default(), 12_500, Some(on[k].clone())));
    let mut got = [0u64; 2];
    for second in 0..3 {
        let mut here = [0u64; 2];
        // (In 10 ms slices, alternating: the threads' clocks stay within a slice of each other.)
        for _ in 0..100 {
            for th in &mut t {
                let g = th.drive([15_000.0, 15_000.0], Duration::from_millis(10));
                here[0] += g[0];
                here[1] += g[1];
            }
        }
        if second > 0 {
            got[0] += here[0];
            got[1] += here[1];
        }
    }
    let ratio = got[1] as f64 / got[0] as f64;
    assert!((ratio - 3.0).abs() / 3.0 < 0.10, "delivered {got:?}: ratio {ratio:.2}, DRF's is 3");
    assert!(got[0] + got[1] > 2 * 22_000, "both NTs are kept busy: {got:?}");
}

/// A hostile tenant puts all its flows on one dispatcher thread (it controls its inner headers)
/// and floods it at 5× that thread's NT; its neighbour, on both threads, keeps all of what it
/// sends on either: the flood fills thread 0's NT only, and DRF there gives the neighbour its
/// demand (under its share) first.
#[test]
fn a_tenant_that_crowds_one_dispatcher_thread_does_not_take_its_neighbours_share() {
    let on = snic_core::fair::Board::shared(2);
    let mut t = [0, 1].map(|k| LowRate::on(FairConfig::default(), 12_500, Some(on[k].clone())));
    let (mut got, mut offered) = ([[0u64; 2]; 2], 0.0);
    for second in 0..3 {
        for _ in 0..100 {
            let a = t[0].drive([60_000.0, 4_000.0], Duration::from_millis(10));
            let b = t[1].drive([0.0, 4_000.0], Duration::from_millis(10));
            if second > 0 {
                (got[0][0], got[0][1], got[1][1]) = (got[0][0] + a[0], got[0][1] + a[1], got[1][1] + b[1]);
                offered += 4_000.0 * 0.01;
            }
        }
    }
    for (k, g) in got.iter().enumerate() {
        assert!(g[1] as f64 > 0.95 * offered, "thread {k}: the neighbour got {} of {offered:.0}", g[1]);
    }
    assert!(got[0][0] as f64 <= 2.0 * 12_500.0 * 1.05, "the flood is held to what thread 0's NT has left: {got:?}");
}

/// `data_cores`: two dispatcher threads of one node, each a node of its own on its own receive
/// queue, share fair sharing through one board. User 1's flows land on both threads (4 units
/// each), user 2's on thread 0 only (4 units); the NTs have room, the link (the node's, shared by
/// both threads) does not. DRF once over both threads gives each user half the link: user 1 is
/// limited on each thread to its part, and gets its weight, not twice it. Each thread on its own
/// (no board) would give user 1 half of thread 0's view of the link and all of thread 1's.
#[test]
fn a_tenant_on_two_dispatcher_threads_gets_its_weight_of_the_link_not_twice_it() {
    fn run(board: bool) -> [u64; 2] {
        let fair = FairConfig { epoch: EPOCH, min_burst_packets: 4.0, ..FairConfig::default() };
        // 64 B frames leave as ~110 B on the wire: the link carries about 5 units, 12 are offered.
        let core = NodeCoreConfig { fair, link_bps: 5.0 * UNIT * 110.0 * 8.0, ..NodeCoreConfig::default() };
        let on = snic_core::fair::Board::shared(2);
        let cfg = |k: usize| NodeConfig { core, data_core: board.then(|| on[k].clone()), ..Default::default() };
        let (mut t0, mut t1) = (Fig7::new(cfg(0), UNIT).unwrap(), Fig7::new(cfg(1), UNIT).unwrap());
        let mut got = [0u64; 2];
        let (mut warm, total) = (Duration::ZERO, Duration::from_millis(150));
        while warm < total {
            let a = t0.drive([4.0, 4.0], STEP, STEP, |_| {});
            let b = t1.drive([4.0, 0.0], STEP, STEP, |_| {});
            warm += STEP;
            if warm > Duration::from_millis(70) {
                got[0] += a[0] + b[0];
                got[1] += a[1];
            }
        }
        got
    }
    let shared = run(true);
    let ratio = shared[0] as f64 / shared[1] as f64;
    assert!((0.85..1.15).contains(&ratio), "with the board, user 1 on two threads against user 2 on one: {shared:?}");
    let apart = run(false);
    let ratio = apart[0] as f64 / apart[1] as f64;
    assert!(ratio > 1.3, "each thread alone gives user 1 more than its weight: {apart:?}");
}
