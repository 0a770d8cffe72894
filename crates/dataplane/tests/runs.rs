//! Runs against packets one by one: a node that receives a batch enters each run of one tenant
//! on one route into the scheduler in one call (node/arrive.rs). Whatever the runs, the outcome
//! per packet must be what entering them one at a time gives: the same bytes out to the same
//! VTEPs in the same order per tenant, the same counters and drop reasons, the same demand
//! measured for fair sharing.

use proptest::prelude::*;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::Mat;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::clock::ManualClock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::NtSpec;
use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The NTs a tenant's chain is drawn from.
fn nt(i: u8) -> NtSpec {
    match i {
        0 => snic_perf::testbed::deny_udp_port(9999),
        1 => snic_perf::testbed::snat(),
        2 => NtSpec::Counter,
        _ => NtSpec::Dummy,
    }
}

const TENANTS: u16 = 3;

fn vni(t: u16) -> u32 {
    100 * t as u32
}

/// Endpoint `e` (0 or 1) of tenant `t`.
fn ep(t: u16, e: u16) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, t as u8], 10000 + e))
}

/// One received datagram: tenant (1..=3; 4 is a VNI no rule matches), inner source host,
/// source port, whether the firewall denies it, payload length; or bytes that are not VXLAN.
#[derive(Debug, Clone)]
enum Pkt {
    Vxlan { tenant: u16, host: u8, sport: u16, denied: bool, payload: usize },
    Garbage(Vec<u8>),
}

/// A burst: one tenant's packets back to back (a run, while the firewall lets them all pass),
/// or bytes that are not VXLAN.
fn burst() -> impl Strategy<Value = Vec<Pkt>> {
    let one = (0u8..3, 0u16..3, prop::bool::weighted(0.2), 0usize..300);
    prop_oneof![
        8 => (1..=TENANTS + 1, prop::collection::vec(one, 1..16)).prop_map(|(tenant, v)| {
            v.into_iter().map(|(host, sport, denied, payload)| Pkt::Vxlan { tenant, host, sport, denied, payload }).collect()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| vec![Pkt::Garbage(b)]),
    ]
}

fn bytes(p: &Pkt) -> (Vec<u8>, SocketAddr) {
    match p {
        Pkt::Garbage(b) => (b.clone(), ep(1, 0)),
        &Pkt::Vxlan { tenant, host, sport, denied, payload } => {
            let spec = FrameSpec {
                outer: None,
                vni: vni(tenant),
                inner_src_mac: MacAddr([2, 0, 0, 0, tenant as u8, 0xa]),
                inner_dst_mac: MacAddr([2, 0, 0, 0, tenant as u8, 0xb]),
                src: [10, 0, 0, 5 + host].into(),
                dst: [10, 0, 1, 9].into(),
                l4: L4Spec::Udp { src_port: 4000 + sport, dst_port: if denied { 9999 } else { 80 } },
                payload_len: payload,
                payload_byte: host ^ sport as u8,
            };
            let mut b = vec![0u8; 2048];
            let n = build(&spec, &mut b).unwrap();
            b.truncate(n);
            // Tenant 4's VNI has no rule: it arrives from tenant 1's endpoint.
            (b, ep(tenant.min(TENANTS), 0))
        }
    }
}

/// A node receiving `batch` datagrams a poll, tenants 1..=3 each with a chain of its own, on a
/// clock that only moves when told.
fn node(batch: usize, chains: &[Vec<u8>]) -> (Node<MemPort>, ManualClock) {
    let clock = ManualClock::default();
    let cfg = NodeConfig { batch, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone())).unwrap();
    let mut mat = Mat::new();
    for t in 1..=TENANTS {
        let specs: Vec<NtSpec> = chains[t as usize - 1].iter().map(|&i| nt(i)).collect();
        let n = specs.len();
        let c = node.add_chain(specs);
        node.launch(c).unwrap();
        node.set_tenant(TenantId(t), t as f64);
        node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(n) }]));
        mat.insert(snic_perf::testbed::dag_rule(vni(t), TenantId(t), DagUid(t as u32)));
        for e in 0..2 {
            node.fdb_mut().add_flood(vni(t), Peer { addr: ep(t, e), mac: MacAddr::default() });
        }
    }
    node.mat_handle().store(Arc::new(mat));
    (node, clock)
}

/// What the node did with `pkts`: what it sent, per tenant (by VNI) in order, its counters, and
/// the demand fair sharing measured after one epoch.
type Outcome = (Vec<Vec<(Vec<u8>, SocketAddr)>>, Vec<snic_dataplane::stats::TenantStats>, Vec<(&'static str, u64)>, Vec<Vec<f64>>);

fn run(batch: usize, chains: &[Vec<u8>], pkts: &[Pkt]) -> Outcome {
    let (mut node, clock) = node(batch, chains);
    node.backend_mut().rx.extend(pkts.iter().map(bytes));
    let mut polls = 0;
    while node.poll() > 0 || node.store().charged() > 0 || !node.backend().rx.is_empty() {
        polls += 1;
        assert!(polls < 10_000, "the node did not go idle");
    }
    // One epoch closes, on the virtual clock: both nodes measured the same traffic in it.
    clock.advance(Duration::from_millis(5));
    node.poll();
    let tx = &node.backend().tx;
    let per_vni = (1..=TENANTS)
        .map(|t| tx.iter().filter(|(d, _)| snic_wire::layout::parse_vxlan(d).ok() == Some(vni(t))).cloned().collect())
        .collect();
    let stats = node.stats();
    let tenants = (0..=TENANTS + 1).map(|t| stats.tenants[t as usize].clone()).collect();
    let unattributed = snic_dataplane::stats::named_drops(&stats.unattributed);
    let mut shares: Vec<_> = node.core().meter().fairness().shares().iter().map(|s| (s.tenant, s.demand.clone())).collect();
    shares.sort_by_key(|s| s.0);
    (per_vni, tenants, unattributed, shares.into_iter().map(|s| s.1).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random traffic (three tenants interleaved, denied packets amid allowed ones, a VNI no
    /// rule matches, bytes that are not VXLAN) through random chains: received 32 a poll, so
    /// that runs form and break wherever the tenant changes, against one a poll.
    #[test]
    fn a_run_gives_what_its_packets_give_one_by_one(
        chains in prop::collection::vec(prop::collection::vec(0u8..4, 1..4), TENANTS as usize),
        bursts in prop::collection::vec(burst(), 1..24),
    ) {
        let pkts: Vec<Pkt> = bursts.into_iter().flatten().collect();
        let runs = run(32, &chains, &pkts);
        let single = run(1, &chains, &pkts);
        prop_assert_eq!(&runs.0, &single.0, "bytes out, per tenant, in order");
        prop_assert_eq!(&runs.1, &single.1, "per-tenant counters and drop reasons");
        prop_assert_eq!(&runs.2, &single.2, "drops before a tenant was known");
        prop_assert_eq!(&runs.3, &single.3, "measured demand");
        // Something went through: the property is not vacuous.
        let offered = pkts.iter().filter(|p| matches!(p, Pkt::Vxlan { tenant, denied: false, .. } if *tenant <= TENANTS)).count();
        let sent: usize = runs.0.iter().map(Vec::len).sum();
        prop_assert!(offered == 0 || sent > 0);
    }
}
