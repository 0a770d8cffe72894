//! Fair sharing in the node, on a virtual clock: measured demand, weighted DRF, ingress limits.
//! The paper's Fig. 7 / Fig. 20 scenario, with synthetic NTs of declared throughput.

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::fair::{jain, FairConfig};
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::{Action, Mat, PortRange, Rule};
use snic_core::time::Instant;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::node::Clock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Drop, Node, NodeConfig};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Default)]
struct ManualClock(Arc<AtomicU64>);

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant(self.0.load(Ordering::Relaxed))
    }
}

fn frame(vni: u32, sport: u16) -> Vec<u8> {
    let spec = FrameSpec {
        outer: None,
        vni,
        inner_src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        inner_dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src: "10.0.0.1".parse().unwrap(),
        dst: "10.0.0.2".parse().unwrap(),
        l4: L4Spec::Udp { src_port: sport, dst_port: 80 },
        payload_len: 64,
        payload_byte: 0,
    };
    let mut b = vec![0u8; 512];
    let n = build(&spec, &mut b).unwrap();
    b.truncate(n);
    b
}

fn engine(pps: u64) -> NtSpec {
    NtSpec::Synthetic(SyntheticConfig { cost_ns: 0, capacity_pps: Some(pps) })
}

const UNIT: f64 = 1000.0; // packets per second per unit of the figure
const EPOCH: Duration = Duration::from_millis(1);

/// Chains NT1→NT2 and NT3→NT4 (capacities 10, 10, 7, 10 units); user1 (VNI 100) visits NT1,
/// NT2 and NT4; user2 (VNI 200) NT3, NT4 and NT2.
fn fig7(enforce: bool) -> (Node<MemPort>, ManualClock) {
    let clock = ManualClock::default();
    // Rates here are thousands of packets per second: bursts of a few packets, not 256.
    let fair = FairConfig { epoch: EPOCH, enforce, min_burst_packets: 4.0, ..FairConfig::default() };
    let cfg = NodeConfig { vtep_port: None, fair, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone())).unwrap();
    let u = |x: f64| (x * UNIT) as u64;
    let c1 = node.add_chain(vec![engine(u(10.0)), engine(u(10.0))]);
    let c2 = node.add_chain(vec![engine(u(7.0)), engine(u(10.0))]);
    node.label_chain(c1, &["nt1".into(), "nt2".into()]);
    node.label_chain(c2, &["nt3".into(), "nt4".into()]);
    node.launch(c1).unwrap();
    node.launch(c2).unwrap();
    node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c1, mask: NtMask::all(2) }, Step { chain: c2, mask: NtMask(0b10) }]));
    node.set_dag(DagUid(2), DagRoute::new(vec![Step { chain: c2, mask: NtMask::all(2) }, Step { chain: c1, mask: NtMask(0b10) }]));
    let mut mat = Mat::new();
    for (vni, t, d) in [(100, 1, 1), (200, 2, 2)] {
        mat.insert(Rule {
            vni,
            proto: None,
            dst: None,
            dst_ports: PortRange::ANY,
            priority: 0,
            action: Action::Dag { tenant: TenantId(t), dag: DagUid(d) },
        });
        node.fdb_mut().set_default(vni, Some(Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), mac: MacAddr::default() }));
    }
    node.mat_handle().store(Arc::new(mat));
    node.set_tenant(TenantId(1), 1.0);
    node.set_tenant(TenantId(2), 1.0);
    (node, clock)
}

/// Offers `load` units per tenant from `clock`'s time for `dur`, in 50 µs steps, polling the
/// node to idle after each step; returns the packets each tenant got through.
fn drive(node: &mut Node<MemPort>, clock: &ManualClock, load: [f64; 2], dur: Duration) -> [u64; 2] {
    let before = [1, 2].map(|t| node.stats().tenants[t].tx_packets);
    let step = 50_000u64;
    let mut owed = [0.0f64; 2];
    let end = clock.0.load(Ordering::Relaxed) + dur.as_nanos() as u64;
    let src = SocketAddr::from(([192, 0, 2, 1], 4789));
    let mut seq = 0u16;
    while clock.0.load(Ordering::Relaxed) < end {
        clock.0.fetch_add(step, Ordering::Relaxed);
        for (i, vni) in [100, 200].into_iter().enumerate() {
            owed[i] += load[i] * UNIT * step as f64 / 1e9;
            while owed[i] >= 1.0 {
                owed[i] -= 1.0;
                seq = seq.wrapping_add(1);
                node.backend_mut().rx.push_back((frame(vni, 1000 + seq % 64), src));
            }
        }
        while node.poll() > 0 {}
        node.backend_mut().tx.clear();
    }
    let after = [1, 2].map(|t| node.stats().tenants[t].tx_packets);
    [after[0] - before[0], after[1] - before[1]]
}

fn share(node: &Node<MemPort>, t: u16) -> snic_core::fair::TenantShare {
    node.meter().fairness().shares().iter().find(|s| s.tenant == TenantId(t)).unwrap().clone()
}

#[test]
fn fig7_user2_steps_up_and_drf_rebalances_the_shared_nts() {
    let (mut node, clock) = fig7(true);
    // Before the step: user1 8 units, user2 2; NT2 and NT4 carry 10: nobody is limited.
    let got = drive(&mut node, &clock, [8.0, 2.0], Duration::from_millis(30));
    assert!(share(&node, 1).limit_pps.is_none() && share(&node, 2).limit_pps.is_none());
    assert!((got[0] as f64 - 240.0).abs() <= 2.0 && (got[1] as f64 - 60.0).abs() <= 2.0, "{got:?}");
    let names: Vec<_> = node.meter().fairness().resources().iter().map(|r| r.name.clone()).collect();
    assert_eq!(names, ["ingress", "egress", "store", "cpu", "nt1", "nt2", "nt3", "nt4"]);

    // user2 steps to 6 units. DRF equalises dominant shares (user1's on NT1/NT2/NT4, 10 units;
    // user2's on NT3, 7 units) until NT2 and NT4 are full: s = 10/17, so user1 gets 100/17 =
    // 5.88 units and user2 70/17 = 4.12.
    drive(&mut node, &clock, [8.0, 6.0], Duration::from_millis(30));
    let (s1, s2) = (share(&node, 1), share(&node, 2));
    let rel = |a: f64, b: f64| (a - b).abs() / b;
    assert!(rel(s1.limit_pps.unwrap(), 100.0 / 17.0 * UNIT) < 0.03, "{s1:?}");
    assert!(rel(s2.limit_pps.unwrap(), 70.0 / 17.0 * UNIT) < 0.03, "{s2:?}");
    assert_eq!(s2.dominant, Some(6), "user2's dominant resource is NT3");
    assert!(jain(&[s1.dominant_share, s2.dominant_share]) > 0.999);
    // Measured demand stays at the intended 8 and 6 units although less is admitted.
    assert!(rel(s1.demand[5], 0.8) < 0.03 && rel(s2.demand[6], 6.0 / 7.0) < 0.03, "{s1:?} {s2:?}");
    // What gets through follows the allocation (bursts of one epoch aside).
    let got = drive(&mut node, &clock, [8.0, 6.0], Duration::from_millis(40));
    let rate = got.map(|n| n as f64 / 0.040);
    assert!(rel(rate[0], 100.0 / 17.0 * UNIT) < 0.05 && rel(rate[1], 70.0 / 17.0 * UNIT) < 0.05, "{rate:?}");
    assert_eq!(
        node.stats().tenants[1].drops[Drop::RateLimit.index()] + node.stats().tenants[1].tx_packets,
        240 + 240 + 320,
        "every offered packet is delivered or counted as rate-limited"
    );
}

#[test]
fn without_enforcement_the_node_only_measures() {
    let (mut node, clock) = fig7(false);
    let got = drive(&mut node, &clock, [8.0, 6.0], Duration::from_millis(40));
    // The allocation is computed, but nothing is limited: both get their whole load.
    assert!(share(&node, 1).fraction < 0.8);
    assert!(got[0].abs_diff(320) <= 1 && got[1].abs_diff(240) <= 1, "{got:?}");
    assert_eq!(node.meter().limit(TenantId(1)), None);
}

#[test]
fn a_removed_tenant_is_no_longer_limited() {
    let (mut node, clock) = fig7(true);
    drive(&mut node, &clock, [8.0, 6.0], Duration::from_millis(20));
    assert!(node.meter().limit(TenantId(1)).is_some());
    node.remove_tenant(TenantId(1));
    assert_eq!(node.meter().limit(TenantId(1)), None);
    assert_eq!(node.meter().fairness().shares().len(), 1);
}
