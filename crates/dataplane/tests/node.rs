//! End-to-end tests of one node's data plane on in-memory ports and loopback UDP sockets.

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::{Action, Mat, PortRange, Rule};
use snic_core::node::NodeCoreConfig;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::udp::UdpBackend;
use snic_dataplane::backend::{Backend, Framing};
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Drop, Node, NodeConfig};
use snic_nt::NtSpec;
use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::{parse_inner, parse_vxlan, FlowKey};
use snic_wire::ParseError;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);

fn ep(n: u16) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, 1], 10000 + n))
}

#[allow(clippy::too_many_arguments)] // a test builder: each argument is one field of the frame
fn datagram(vni: u32, src_mac: MacAddr, dst_mac: MacAddr, src: &str, dst: &str, l4: L4Spec, payload: usize, fill: u8) -> Vec<u8> {
    let spec = FrameSpec {
        outer: None,
        vni,
        inner_src_mac: src_mac,
        inner_dst_mac: dst_mac,
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        l4,
        payload_len: payload,
        payload_byte: fill,
    };
    let mut b = vec![0u8; 2048];
    let n = build(&spec, &mut b).unwrap();
    b.truncate(n);
    b
}

fn udp(sp: u16, dp: u16) -> L4Spec {
    L4Spec::Udp { src_port: sp, dst_port: dp }
}

fn rule(vni: u32, tenant: u16, dag: u32) -> Rule {
    snic_perf::testbed::dag_rule(vni, TenantId(tenant), DagUid(dag))
}

fn fw_nat() -> Vec<NtSpec> {
    vec![snic_perf::testbed::deny_udp_port(9999), snic_perf::testbed::snat()]
}

/// A node with tenant 1 on VNI 100 (firewall → NAT) and tenant 2 on VNI 200 (counter), both
/// endpoints A and B in each VNI's flood list.
fn two_tenant_node(workers: usize) -> Node<MemPort> {
    let cfg = NodeConfig { core: NodeCoreConfig { workers, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default())).unwrap();
    let c1 = node.add_chain(fw_nat());
    let c2 = node.add_chain(vec![NtSpec::Counter]);
    node.launch(c1).unwrap();
    node.launch(c2).unwrap();
    node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c1, mask: NtMask::all(2) }]));
    node.set_dag(DagUid(2), DagRoute::new(vec![Step { chain: c2, mask: NtMask::all(1) }]));
    let mut mat = Mat::new();
    mat.insert(rule(100, 1, 1));
    mat.insert(rule(200, 2, 2));
    node.mat_handle().store(Arc::new(mat));
    for vni in [100, 200] {
        node.fdb_mut().add_flood(vni, Peer { addr: ep(1), mac: MacAddr::default() });
        node.fdb_mut().add_flood(vni, Peer { addr: ep(2), mac: MacAddr::default() });
    }
    node
}

/// Polls until the node has nothing left: nothing received, nothing on a worker thread, every
/// buffer back in the store (10 s at most: a node that never goes idle fails the test).
fn run_until_idle<B: snic_dataplane::backend::Backend>(node: &mut Node<B>) {
    let t0 = std::time::Instant::now();
    while node.poll() > 0 || node.workers_busy() || node.store().charged() > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the node did not go idle: {} buffers held", node.store().charged());
    }
}

fn inner_key(d: &[u8]) -> FlowKey {
    parse_inner(&d[8..]).unwrap().key
}

fn firewall_nat_isolation(workers: usize) {
    let mut node = two_tenant_node(workers);
    let p = node.backend_mut();
    // A → B on VNI 100: first unknown (flooded to B only: split horizon), allowed, NATed.
    p.rx.push_back((datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000, 80), 32, 1), ep(1)));
    // Denied by the firewall.
    p.rx.push_back((datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000, 9999), 32, 1), ep(1)));
    // B → A on VNI 100: A's MAC was learned from the first packet: unicast to A.
    p.rx.push_back((datagram(100, MAC_B, MAC_A, "10.0.0.9", "10.0.0.5", udp(80, 4000), 32, 2), ep(2)));
    // Tenant 2 on VNI 200 with the same inner addresses: not NATed, not seen by tenant 1.
    p.rx.push_back((datagram(200, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000, 9999), 32, 3), ep(1)));
    let offered = |vni| p.rx.iter().filter(|(d, _)| parse_vxlan(d).unwrap() == vni).map(|(d, _)| d.len() as u64).sum::<u64>();
    let (rx1, rx2) = (offered(100), offered(200));
    run_until_idle(&mut node);
    let tx = node.backend().tx.clone();
    assert_eq!(tx.len(), 3, "{tx:?}");
    let t1: Vec<_> = tx.iter().filter(|(d, _)| parse_vxlan(d).unwrap() == 100).collect();
    assert_eq!(t1.len(), 2);
    let to_b = t1.iter().find(|(_, a)| *a == ep(2)).expect("A→B flooded to B");
    let k = inner_key(&to_b.0);
    assert_eq!(k.src, IpAddr::from([203, 0, 113, 1]), "SNAT rewrote the source");
    assert_eq!(k.dst_port, 80);
    let to_a = t1.iter().find(|(_, a)| *a == ep(1)).expect("B→A unicast to the learned VTEP");
    assert_eq!(inner_key(&to_a.0).dst, IpAddr::from([10, 0, 0, 5]));
    let t2: Vec<_> = tx.iter().filter(|(d, _)| parse_vxlan(d).unwrap() == 200).collect();
    assert_eq!(t2.len(), 1);
    assert_eq!(t2[0].1, ep(2));
    let k2 = inner_key(&t2[0].0);
    assert_eq!((k2.src, k2.dst_port), (IpAddr::from([10, 0, 0, 5]), 9999), "tenant 2 untouched by tenant 1's NTs");
    let s = node.stats();
    assert_eq!(s.tenants[1].drops[Drop::Nt(snic_nt::DropReason::FirewallDeny).index()], 1);
    assert_eq!(s.tenants[1].rx_packets, 3);
    // Received bytes are counted a run of one tenant's packets at a time, the dropped one's
    // included.
    assert_eq!((s.tenants[1].rx_bytes, s.tenants[2].rx_bytes), (rx1, rx2));
    assert_eq!(s.tenants[1].tx_packets, 2);
    assert_eq!(s.tenants[2].tx_packets, 1);
    // Each tenant's transmit bytes are its own datagrams' (counted per run of one tenant's
    // packets in a send).
    let bytes = |v: &[&(Vec<u8>, std::net::SocketAddr)]| v.iter().map(|(d, _)| d.len() as u64).sum::<u64>();
    assert_eq!((s.tenants[1].tx_bytes, s.tenants[2].tx_bytes), (bytes(&t1), bytes(&t2)));
    assert_eq!(s.tenants[2].dropped(), 0);
    assert_eq!(node.store().charged(), 0, "every buffer returned");
}

#[test]
fn firewall_nat_isolation_inline() {
    firewall_nat_isolation(0);
}

/// A TCP packet whose sender left its checksum partial (as an offloading endpoint does, and
/// as the node's own cutting of a burst does) goes through firewall → NAT partial and leaves
/// finished: its checksum valid for the rewritten source.
#[test]
fn a_partial_checksum_leaves_finished_through_firewall_and_nat() {
    let mut node = two_tenant_node(0);
    let mut d = datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", L4Spec::Tcp { src_port: 4000, dst_port: 80, flags: 0x10 }, 900, 1);
    snic_wire::build::fill_l4_partial(&mut d[8 + 14..], 20, 6);
    assert!(parse_inner(&d[8..]).unwrap().l4_partial);
    node.backend_mut().rx.push_back((d, ep(1)));
    run_until_idle(&mut node);
    let tx = node.backend().tx.clone();
    assert_eq!(tx.len(), 1, "{tx:?}");
    let out = &tx[0].0;
    assert_eq!(inner_key(out).src, IpAddr::from([203, 0, 113, 1]), "SNAT rewrote the source");
    assert!(snic_wire::build::verify_l4_checksum(&out[8 + 14..], 20, 6), "the TCP checksum leaves finished");
    assert!(!parse_inner(&out[8..]).unwrap().l4_partial);
}

#[test]
fn firewall_nat_isolation_worker_thread() {
    firewall_nat_isolation(1);
}

#[test]
fn flow_order_kept_across_two_instances_on_two_workers() {
    let cfg =
        NodeConfig { core: NodeCoreConfig { workers: 2, ..NodeCoreConfig::default() }, vtep_port: None, batch: 8, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default())).unwrap();
    let c = node.add_chain(vec![NtSpec::Counter, NtSpec::Dummy]);
    node.launch(c).unwrap();
    node.launch(c).unwrap();
    node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(2) }]));
    let mut mat = Mat::new();
    mat.insert(rule(7, 1, 1));
    node.mat_handle().store(Arc::new(mat));
    node.fdb_mut().add_static(7, MAC_B, Peer { addr: ep(2), mac: MacAddr::default() });
    // 16 flows × 40 packets, interleaved; the payload byte carries the sequence number.
    for seq in 0..40u8 {
        for f in 0..16u16 {
            node.backend_mut().rx.push_back((datagram(7, MAC_A, MAC_B, "10.0.0.1", "10.0.0.2", udp(1000 + f, 53), 4, seq), ep(1)));
        }
        run_until_idle_quick(&mut node);
    }
    run_until_idle(&mut node);
    let tx = &node.backend().tx;
    assert_eq!(tx.len(), 640);
    let mut last = std::collections::HashMap::new();
    for (d, _) in tx {
        let k = inner_key(d);
        let seq = *d.last().unwrap();
        if let Some(prev) = last.insert(k.src_port, seq) {
            assert!(seq > prev, "flow {} reordered: {} after {}", k.src_port, seq, prev);
        }
    }
}

fn run_until_idle_quick<B: snic_dataplane::backend::Backend>(node: &mut Node<B>) {
    for _ in 0..4 {
        node.poll();
    }
}

/// An NT that re-maps a packet into another tenant's VNI gets nothing delivered there: the
/// packet is dropped as the sender's `foreign_vni`, flooded or unicast alike, whatever the
/// control plane let through (it refuses such a `vni_map` too: `snic_control::state`).
#[test]
fn a_packet_never_leaves_on_another_tenants_vni() {
    let mut node = two_tenant_node(0);
    let map = |to| NtSpec::VniMap { map: vec![snic_nt::spec::VniPair { from: 100, to }], default: None };
    let hostile = node.add_chain(vec![map(200)]);
    let own = node.add_chain(vec![map(101)]);
    node.launch(hostile).unwrap();
    node.launch(own).unwrap();
    node.set_dag(DagUid(3), DagRoute::new(vec![Step { chain: hostile, mask: NtMask::all(1) }]));
    node.set_dag(DagUid(4), DagRoute::new(vec![Step { chain: own, mask: NtMask::all(1) }]));
    let mut mat = Mat::new();
    mat.insert(snic_perf::testbed::dag_rule(100, TenantId(1), DagUid(3)));
    mat.insert(rule(200, 2, 2));
    node.mat_handle().store(Arc::new(mat));
    for (vni, t) in [(100, 1), (101, 1), (200, 2)] {
        node.fdb_mut().set_owner(vni, Some(TenantId(t)));
    }
    node.fdb_mut().add_flood(101, Peer { addr: ep(3), mac: MacAddr::default() });
    // Tenant 2 teaches the node where its MAC_B is, so a unicast route exists too.
    let p = node.backend_mut();
    p.rx.push_back((datagram(200, MAC_B, MAC_A, "10.0.0.9", "10.0.0.5", udp(1, 2), 16, 0), ep(2)));
    p.rx.push_back((datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000, 80), 32, 1), ep(1)));
    p.rx.push_back((datagram(100, MAC_A, MacAddr::BROADCAST, "10.0.0.5", "10.0.0.9", udp(4000, 80), 32, 1), ep(1)));
    run_until_idle(&mut node);
    let tx = std::mem::take(&mut node.backend_mut().tx);
    assert!(tx.iter().all(|(d, _)| parse_vxlan(d).unwrap() != 200 || inner_key(d).dst_port != 80), "delivered into VNI 200: {tx:?}");
    assert_eq!(node.stats().tenants[1].drops[Drop::ForeignVni.index()], 2, "{:?}", node.stats().tenants[1].drops_by_reason());
    // The same map into its own VNI delivers.
    let mut mat = Mat::new();
    mat.insert(snic_perf::testbed::dag_rule(100, TenantId(1), DagUid(4)));
    node.mat_handle().store(Arc::new(mat));
    node.backend_mut().rx.push_back((datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000, 80), 32, 1), ep(1)));
    run_until_idle(&mut node);
    let tx = &node.backend().tx;
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert_eq!((parse_vxlan(&tx[0].0).unwrap(), tx[0].1), (101, ep(3)));
}

#[test]
fn multi_chain_dag_with_skipping() {
    let mut node = Node::new(
        NodeConfig { vtep_port: None, ..Default::default() },
        MemPort::new(Framing::Datagram),
        Box::new(MonotonicClock::default()),
    )
    .unwrap();
    // Chain 1: firewall (deny port 9999) → counter. Chain 2: NAT.
    let fw = fw_nat().remove(0);
    let c1 = node.add_chain(vec![fw, NtSpec::Counter]);
    let c2 = node.add_chain(vec![fw_nat().remove(1)]);
    node.launch(c1).unwrap();
    node.launch(c2).unwrap();
    // DAG 1 runs the whole of both chains; DAG 2 skips the firewall and uses only chain 1.
    node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c1, mask: NtMask::all(2) }, Step { chain: c2, mask: NtMask::all(1) }]));
    node.set_dag(DagUid(2), DagRoute::new(vec![Step { chain: c1, mask: NtMask(0b10) }]));
    let mut mat = Mat::new();
    mat.insert(rule(1, 1, 1));
    mat.insert(rule(2, 2, 2));
    node.mat_handle().store(Arc::new(mat));
    for vni in [1, 2] {
        node.fdb_mut().add_static(vni, MAC_B, Peer { addr: ep(2), mac: MacAddr::default() });
    }
    let p = node.backend_mut();
    p.rx.push_back((datagram(1, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(1, 80), 0, 0), ep(1)));
    p.rx.push_back((datagram(1, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(1, 9999), 0, 0), ep(1)));
    p.rx.push_back((datagram(2, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(1, 9999), 0, 0), ep(1)));
    run_until_idle(&mut node);
    let tx = &node.backend().tx;
    assert_eq!(tx.len(), 2);
    let natted = tx.iter().find(|(d, _)| parse_vxlan(d).unwrap() == 1).unwrap();
    assert_eq!(inner_key(&natted.0).src, IpAddr::from([203, 0, 113, 1]), "second chain ran");
    let skipped = tx.iter().find(|(d, _)| parse_vxlan(d).unwrap() == 2).unwrap();
    assert_eq!(inner_key(&skipped.0).dst_port, 9999, "DAG 2 skipped the firewall");
    assert_eq!(node.stats().tenants[1].drops[Drop::Nt(snic_nt::DropReason::FirewallDeny).index()], 1);
    // Per-NT counters: chain 1's firewall saw DAG 1's two packets (one dropped), its counter saw
    // DAG 1's survivor and DAG 2's packet; chain 2's NAT saw the survivor only.
    let c1 = node.region_counters(snic_core::ids::InstanceId(0)).unwrap();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!((load(&c1.packets), load(&c1.nt_packets[0]), load(&c1.nt_drops[0]), load(&c1.nt_packets[1])), (3, 2, 1, 2));
    let c2 = node.region_counters(snic_core::ids::InstanceId(1)).unwrap();
    assert_eq!((load(&c2.packets), load(&c2.nt_packets[0])), (1, 1));
}

#[test]
fn malformed_and_unmatched_input_is_counted_never_fatal() {
    let mut node = two_tenant_node(0);
    let good = datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000, 80), 32, 1);
    let p = node.backend_mut();
    p.rx.push_back((good[..5].to_vec(), ep(1))); // truncated VXLAN
    let mut bad_flags = good.clone();
    bad_flags[0] = 0;
    p.rx.push_back((bad_flags, ep(1)));
    p.rx.push_back((datagram(555, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(1, 2), 0, 0), ep(1))); // no rule
    let mut short_inner = good.clone();
    short_inner.truncate(8 + 20); // VXLAN + a cut inner Ethernet/IP header
    p.rx.push_back((short_inner, ep(1)));
    p.rx.push_back((vec![0u8; 4000], ep(1))); // larger than a buffer
    run_until_idle(&mut node);
    let s = node.stats();
    assert_eq!(s.unattributed[Drop::Parse(ParseError::Truncated).index()], 1);
    assert_eq!(s.unattributed[Drop::Parse(ParseError::BadVxlanFlags).index()], 1);
    assert_eq!(s.unattributed[Drop::NoRule.index()], 1);
    // The cut inner frame still matches tenant 1's VNI-wide rule and reaches its chain, whose
    // firewall cannot read it.
    assert_eq!(s.tenants[1].drops[Drop::Nt(snic_nt::DropReason::OpaquePayload).index()], 1);
    assert_eq!(s.unattributed[Drop::Oversize.index()], 1);
    assert!(node.backend().tx.is_empty());
    assert_eq!(node.store().charged(), 0);
}

#[test]
fn dag_without_running_instance_is_a_counted_drop() {
    let mut node = Node::new(
        NodeConfig { vtep_port: None, ..Default::default() },
        MemPort::new(Framing::Datagram),
        Box::new(MonotonicClock::default()),
    )
    .unwrap();
    let c = node.add_chain(vec![NtSpec::Dummy]);
    node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
    let mut mat = Mat::new();
    mat.insert(rule(1, 3, 1));
    node.mat_handle().store(Arc::new(mat));
    node.backend_mut().rx.push_back((datagram(1, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(1, 80), 0, 0), ep(1)));
    run_until_idle(&mut node);
    assert_eq!(node.stats().tenants[3].drops[Drop::Sched(snic_core::sched::Reject::NoInstance).index()], 1);
    assert_eq!(node.store().charged(), 0);
}

#[test]
fn mat_updates_while_traffic_flows_lose_nothing() {
    let mut node = two_tenant_node(0);
    node.fdb_mut().add_static(100, MAC_B, Peer { addr: ep(2), mac: MacAddr::default() });
    let mat = node.mat_handle();
    let stop = Arc::new(AtomicBool::new(false));
    let updates = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (st, n) = (stop.clone(), updates.clone());
    // The control plane keeps rewriting rules for other VNIs while VNI 100 traffic flows.
    let updater = std::thread::spawn(move || {
        while !st.load(Ordering::Relaxed) && n.load(Ordering::Relaxed) < 20_000 {
            let k = n.load(Ordering::Relaxed);
            let mut m = (**mat.load()).clone();
            m.insert(rule(1000 + k % 50, 5, 9));
            mat.store(Arc::new(m));
            n.fetch_add(1, Ordering::Relaxed);
        }
    });
    // Traffic flows until at least 20,000 packets went in and the updater published 1,000
    // tables meanwhile, however the two threads were scheduled (60 s at most).
    let t0 = std::time::Instant::now();
    let mut fed = 0u64;
    while fed < 20_000 || updates.load(Ordering::Relaxed) < 1_000 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the updater made {} updates", updates.load(Ordering::Relaxed));
        for _ in 0..32 {
            node.backend_mut()
                .rx
                .push_back((datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000 + (fed % 7) as u16, 80), 0, 0), ep(1)));
            fed += 1;
        }
        node.poll();
        node.backend_mut().tx.clear();
    }
    run_until_idle(&mut node);
    stop.store(true, Ordering::Relaxed);
    updater.join().unwrap();
    let s = node.stats();
    assert_eq!(s.tenants[1].tx_packets, fed, "drops: {:?}", s.drops_by_reason());
}

#[test]
fn udp_sockets_end_to_end_on_loopback() {
    let node = udp_loopback(true);
    assert!(node.backend().gso(), "segmentation offload stayed on (the kernel accepted it)");
}

#[test]
fn udp_sockets_end_to_end_without_segmentation_offload() {
    udp_loopback(false);
}

/// Runs firewall -> NAT over real loopback sockets: 100 datagrams in, 90 allowed out to B, each
/// arriving at B as its own datagram (with offload, runs are segmented by the kernel).
fn udp_loopback(gso: bool) -> Node<UdpBackend> {
    let mut backend = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    backend.set_gso(gso);
    let node_addr = backend.local_addr().unwrap();
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut node = Node::new(NodeConfig { vtep_port: None, ..Default::default() }, backend, Box::new(MonotonicClock::default())).unwrap();
    let c = node.add_chain(fw_nat());
    node.launch(c).unwrap();
    node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(2) }]));
    let mut mat = Mat::new();
    mat.insert(rule(100, 1, 1));
    node.mat_handle().store(Arc::new(mat));
    node.fdb_mut().add_static(100, MAC_B, Peer { addr: b.local_addr().unwrap(), mac: MacAddr::default() });
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let runner = std::thread::spawn(move || {
        node.run(&st);
        node
    });
    for i in 0..100u16 {
        let port = if i % 10 == 0 { 9999 } else { 80 };
        a.send_to(&datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000, port), 64, i as u8), node_addr).unwrap();
    }
    let mut got = 0;
    let mut buf = [0u8; 2048];
    while got < 90 {
        let (n, from) = b.recv_from(&mut buf).expect("datagrams arrive at B");
        assert_eq!(from, node_addr);
        let k = inner_key(&buf[..n]);
        assert_eq!(k.src, IpAddr::from([203, 0, 113, 1]));
        assert_eq!(k.dst_port, 80, "the firewall let only port 80 through");
        got += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let node = runner.join().unwrap();
    let s = node.stats();
    assert_eq!(s.tenants[1].tx_packets, 90);
    assert_eq!(s.tenants[1].drops[Drop::Nt(snic_nt::DropReason::FirewallDeny).index()], 10);
    node
}

#[test]
fn republished_mat_applies_to_the_same_flow_at_once() {
    let mut node = two_tenant_node(0);
    node.fdb_mut().add_static(100, MAC_B, Peer { addr: ep(2), mac: MacAddr::default() });
    let pkt = datagram(100, MAC_A, MAC_B, "10.0.0.5", "10.0.0.9", udp(4000, 80), 0, 0);
    node.backend_mut().rx.push_back((pkt.clone(), ep(1)));
    run_until_idle(&mut node);
    assert_eq!(node.backend().tx.len(), 1);
    // Same flow, new table that drops VNI 100: the memo of the last lookup must not survive.
    let mut m = Mat::new();
    m.insert(Rule { vni: 100, proto: None, dst: None, dst_ports: PortRange::ANY, priority: 0, action: Action::Drop });
    node.mat_handle().store(Arc::new(m));
    node.backend_mut().rx.push_back((pkt.clone(), ep(1)));
    run_until_idle(&mut node);
    assert_eq!(node.backend().tx.len(), 1);
    assert_eq!(node.stats().unattributed[Drop::MatDrop.index()], 1);
    // And back: a third table routes it again.
    let mut m = Mat::new();
    m.insert(rule(100, 1, 1));
    node.mat_handle().store(Arc::new(m));
    node.backend_mut().rx.push_back((pkt, ep(1)));
    run_until_idle(&mut node);
    assert_eq!(node.backend().tx.len(), 2);
}

#[test]
fn socket_receive_drops_are_counted() {
    use snic_dataplane::backend::Backend;
    let mut be = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let to = be.local_addr().unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Far more than the receive buffer holds, none read meanwhile.
    let d = vec![0u8; 200];
    for _ in 0..30_000 {
        let _ = tx.send_to(&d, to);
    }
    let store = snic_dataplane::store::Store::new(256, 32);
    let slots = store.slots().clone();
    let mut idx: Vec<u32> = (0..32).collect();
    let mut meta = vec![snic_dataplane::backend::RxMeta::default(); 32];
    let mut got = 0;
    let mut drain = |be: &mut UdpBackend| loop {
        let n = be.recv(&slots, &mut idx, &mut meta);
        if n == 0 {
            break;
        }
        got += n;
    };
    drain(&mut be);
    // Ten more that get in after the drops.
    for _ in 0..10 {
        tx.send_to(&d, to).unwrap();
    }
    drain(&mut be);
    let lost = be.rx_dropped();
    assert!(got > 10 && lost > 0, "received {got}, lost {lost}");
    assert_eq!(got as u64 + lost, 30_010, "every datagram is either received or counted as lost");
}

/// A link that carries `budget` bytes per poll: the node's transmit sees back-pressure.
struct NarrowLink {
    rx: std::collections::VecDeque<(Vec<u8>, SocketAddr)>,
    budget: usize,
    left: usize,
    sent_bytes: [u64; 2],
}

impl snic_dataplane::backend::Backend for NarrowLink {
    fn framing(&self) -> Framing {
        Framing::Datagram
    }
    fn recv(&mut self, slots: &snic_dataplane::store::Slots, idx: &mut [u32], meta: &mut [snic_dataplane::backend::RxMeta]) -> usize {
        self.left = self.budget;
        let mut n = 0;
        while n < idx.len() {
            let Some((b, src)) = self.rx.pop_front() else { break };
            // SAFETY: the dispatcher owns buffers it passes to `recv`.
            let (buf, _) = unsafe { slots.get(idx[n]) };
            buf[snic_nt::HEADROOM..snic_nt::HEADROOM + b.len()].copy_from_slice(&b);
            meta[n] = snic_dataplane::backend::RxMeta { len: b.len() as u16, src, truncated: false, arrival_ns: 0, ifindex: 0 };
            n += 1;
        }
        n
    }
    fn send(&mut self, slots: &snic_dataplane::store::Slots, reqs: &[snic_dataplane::backend::TxReq]) -> snic_dataplane::backend::TxResult {
        let mut sent = 0;
        for r in reqs {
            if (r.len as usize) > self.left {
                break;
            }
            self.left -= r.len as usize;
            // SAFETY: the dispatcher owns buffers it passes to `send`.
            let (buf, _) = unsafe { slots.get(r.idx) };
            let vni = parse_vxlan(&buf[r.start as usize..r.start as usize + r.len as usize]).unwrap();
            self.sent_bytes[(vni == 200) as usize] += r.len as u64;
            sent += 1;
        }
        snic_dataplane::backend::TxResult { sent, failed: 0 }
    }
}

#[test]
fn a_backlogged_link_is_shared_by_bytes_not_packets() {
    let link = NarrowLink { rx: Default::default(), budget: 4000, left: 0, sent_bytes: [0; 2] };
    // Ingress limits off: this loop keeps the core busy, and the link alone is under test.
    let fair = snic_core::fair::FairConfig { enforce: false, ..Default::default() };
    let mut node = Node::new(
        NodeConfig { core: NodeCoreConfig { fair, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() },
        link,
        Box::new(MonotonicClock::default()),
    )
    .unwrap();
    let c = node.add_chain(vec![NtSpec::Counter]);
    node.launch(c).unwrap();
    let mut mat = Mat::new();
    for (vni, t) in [(100, 1), (200, 2)] {
        node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
        mat.insert(rule(vni, t, t as u32));
        node.fdb_mut().set_default(vni, Some(Peer { addr: ep(9), mac: MacAddr::default() }));
        node.set_tenant(TenantId(t), 1.0);
        // Per-tenant store quotas: one tenant's backlog cannot take the other's buffers.
        node.store_mut().set_quota(TenantId(t), 1024);
    }
    node.mat_handle().store(Arc::new(mat));
    // Tenant 1 sends 1400-byte frames, tenant 2 128-byte ones, the same number of packets;
    // both offer far more than their half of the 4000-byte-per-poll link.
    let big = datagram(100, MAC_A, MAC_B, "10.0.0.1", "10.0.0.2", udp(1, 2), 1400 - 42, 1);
    let small = datagram(200, MAC_A, MAC_B, "10.0.0.1", "10.0.0.2", udp(1, 2), 128 - 42, 2);
    let mut before = [0u64; 2];
    for poll in 0..3000 {
        for _ in 0..16 {
            node.backend_mut().rx.push_back((big.clone(), ep(1)));
            node.backend_mut().rx.push_back((small.clone(), ep(1)));
        }
        node.poll();
        node.backend_mut().rx.clear();
        if poll == 1000 {
            before = node.backend().sent_bytes;
        }
    }
    let after = node.backend().sent_bytes;
    let (b, s) = ((after[0] - before[0]) as f64, (after[1] - before[1]) as f64);
    // Packet-fair FIFO would give tenant 1 eleven times the bytes of tenant 2.
    assert!((b / s - 1.0).abs() < 0.1, "bytes big {b} small {s}");
    // (A 1400-byte packet that does not fit what is left of a poll's budget waits.)
    assert!(b + s > 0.7 * 4000.0 * 2000.0, "the link stays busy: {b} + {s}");
}

/// A tenant's own queue its limit holds is paused: datagrams waiting there no longer end the
/// dispatcher's idle wait (a node whose tenants were all held spun on them, its core at 100%),
/// and resumed, they are read as before.
#[test]
fn a_paused_queue_does_not_end_a_wait_and_is_read_once_resumed() {
    use snic_dataplane::backend::Backend;
    let mut be = UdpBackend::bind_steered("127.0.0.1:0".parse().unwrap()).unwrap();
    be.steer(&[vec![100]]).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&snic_perf::testbed::datagram(100, 1000, 16), be.local_addr().unwrap()).unwrap();
    // (Once the datagram is there, a wait returns at once.)
    let t0 = std::time::Instant::now();
    be.wait(Duration::from_secs(5));
    assert!(t0.elapsed() < Duration::from_secs(5), "the datagram never arrived");
    be.pause_queue(1, true);
    let t0 = std::time::Instant::now();
    be.wait(Duration::from_millis(50));
    assert!(t0.elapsed() >= Duration::from_millis(45), "a paused queue's datagram ended the wait after {:?}", t0.elapsed());
    be.pause_queue(1, false);
    let store = snic_dataplane::store::Store::new(64, 32);
    let slots = store.slots().clone();
    let (mut idx, mut meta): (Vec<u32>, _) = ((0..32).collect(), vec![snic_dataplane::backend::RxMeta::default(); 32]);
    assert_eq!(be.recv_queue(1, &slots, &mut idx, &mut meta), 1);
}

#[test]
fn a_steered_backend_queues_each_tenants_vnis_apart_and_counts_their_drops() {
    use snic_dataplane::backend::Backend;
    let mut be = UdpBackend::bind_steered("127.0.0.1:0".parse().unwrap()).unwrap();
    let to = be.local_addr().unwrap();
    assert_eq!(be.rx_queues(), 1);
    // VNIs 100 and 101 are one tenant's, 200 another's; 300 nobody's.
    assert_eq!(be.steer(&[vec![100, 101], vec![200]]).unwrap(), vec![1, 2]);
    assert_eq!(be.rx_queues(), 3);
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    for (vni, n) in [(100u32, 5), (101, 5), (200, 7), (300, 3)] {
        for _ in 0..n {
            tx.send_to(&snic_perf::testbed::datagram(vni, 1000, 16), to).unwrap();
        }
    }
    let store = snic_dataplane::store::Store::new(256, 32);
    let slots = store.slots().clone();
    let mut idx: Vec<u32> = (0..32).collect();
    let mut meta = vec![snic_dataplane::backend::RxMeta::default(); 32];
    // Reads queue `q` until `want` datagrams came (5 s at most) and one more read finds none:
    // how many, and their VNIs in order, duplicates folded.
    let mut vnis = |be: &mut UdpBackend, q: usize, want: usize| {
        let t0 = std::time::Instant::now();
        let mut v = Vec::new();
        loop {
            let n = be.recv_queue(q, &slots, &mut idx, &mut meta);
            v.extend((0..n).map(|i| {
                // SAFETY: the test owns every buffer; nothing else touches the store.
                let (buf, _) = unsafe { slots.get(idx[i]) };
                snic_wire::layout::parse_vxlan(&buf[snic_nt::HEADROOM..snic_nt::HEADROOM + meta[i].len as usize]).unwrap()
            }));
            if (v.len() >= want && n == 0) || t0.elapsed() > Duration::from_secs(5) {
                break;
            }
        }
        let got = v.len();
        v.dedup();
        (got, v)
    };
    assert_eq!(vnis(&mut be, 1, 10), (10, vec![100, 101]));
    assert_eq!(vnis(&mut be, 2, 7), (7, vec![200]));
    assert_eq!(vnis(&mut be, 0, 3), (3, vec![300]));
    // A flood of one tenant is lost in its own queue, counted there.
    let d = snic_perf::testbed::datagram(200, 1000, 200);
    for _ in 0..30_000 {
        let _ = tx.send_to(&d, to);
    }
    assert!(be.rx_dropped_queue(2) > 0);
    assert_eq!((be.rx_dropped_queue(0), be.rx_dropped_queue(1)), (0, 0));
    // With many queues the backend tells which have datagrams, in one poll(2).
    let mut many = UdpBackend::bind_steered("127.0.0.1:0".parse().unwrap()).unwrap();
    let groups: Vec<Vec<u32>> = (0..6).map(|i| vec![1000 + i]).collect();
    many.steer(&groups).unwrap();
    let mut ready = vec![false; many.rx_queues()];
    assert!(many.ready_queues(&mut ready));
    assert!(ready.iter().all(|r| !r), "{ready:?}");
    tx.send_to(&snic_perf::testbed::datagram(1003, 1000, 16), many.local_addr().unwrap()).unwrap();
    let t0 = std::time::Instant::now();
    while many.ready_queues(&mut ready) && !ready.iter().any(|&r| r) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the datagram never arrived");
    }
    assert_eq!(ready.iter().position(|&r| r), Some(4), "VNI 1003 is group 3's: queue 4 {ready:?}");
    assert!(!be.ready_queues(&mut ready), "three queues: read them all");
    // Steering again keeps the sockets and can move VNIs.
    assert_eq!(be.steer(&[vec![300]]).unwrap(), vec![1]);
    assert_eq!(be.rx_queues(), 3);
    // A plain backend has one queue.
    let mut plain = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(plain.steer(&[vec![1]]).is_err());
    // A second node on the same address is refused, not let into the group.
    let again = UdpBackend::bind_steered(to).map(|_| ()).unwrap_err();
    assert_eq!(again.kind(), std::io::ErrorKind::AddrInUse);
}

#[test]
fn a_quiet_node_asks_for_no_timer_and_one_with_traffic_for_its_next_epoch() {
    let clock = snic_dataplane::node::ManualClock::default();
    let cfg = NodeConfig { vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone())).unwrap();
    assert_eq!(node.poll_timeout(), None, "an empty node waits for traffic or a command only");
    let c = node.add_chain(vec![NtSpec::Counter]);
    node.launch(c).unwrap();
    node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
    let mut mat = Mat::new();
    mat.insert(rule(100, 1, 1));
    node.mat_handle().store(Arc::new(mat));
    node.fdb_mut().set_default(100, Some(Peer { addr: ep(1), mac: MacAddr::default() }));
    node.set_tenant(TenantId(1), 1.0);
    let epoch = snic_core::fair::FairConfig::default().epoch;
    for sport in 0..64 {
        let d =
            datagram(100, MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]), "10.0.0.1", "10.0.0.2", udp(1000 + sport, 80), 16, 0);
        node.backend_mut().rx.push_back((d, ep(2)));
    }
    while node.poll() > 0 {}
    assert_eq!(node.backend_mut().tx.len(), 64);
    // Traffic: the epoch that measures it must run.
    let t = node.poll_timeout().expect("an epoch to close");
    assert!(t <= epoch, "{t:?}");
    // Epoch by epoch, the tenant's demand decays to nothing; then no timer is asked for.
    let mut epochs = 0;
    while node.poll_timeout().is_some() {
        assert!(epochs < 100_000, "still asking for a timer after {epochs} idle epochs");
        clock.advance(epoch);
        node.poll();
        epochs += 1;
    }
}

#[test]
fn a_woken_backend_stops_waiting() {
    use snic_dataplane::backend::Backend;
    let mut b = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let w = b.waker().expect("a UDP backend can be woken");
    for _ in 0..2 {
        let (t0, wake) = (std::time::Instant::now(), w.clone());
        let t = std::thread::spawn(move || wake.wake());
        // Nothing arrives: only the wake-up ends this wait before its minute is up.
        b.wait(Duration::from_secs(60));
        t.join().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(60), "the wait ran its full minute");
    }
}
