//! NT-level parallelism in the node: a DAG's parallel group forks each packet to its branches
//! and joins them; a drop in any branch drops the packet once; the packet goes on with what each
//! branch wrote; nothing leaks; per-flow order holds — inline and on worker threads.

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{DagUid, TenantId};
use snic_core::launcher::EndpointFallback;
use snic_core::mat::{Mat, PortRange};
use snic_core::node::NodeCoreConfig;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Drop, Node, NodeConfig};
use snic_nt::firewall::{FirewallConfig, FwRule, Policy};
use snic_nt::spec::VniPair;
use snic_nt::{DropReason, NtSpec};
use snic_perf::testbed::{dag_rule, datagram, snat};
use snic_wire::layout::{parse_inner, parse_vxlan};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

fn firewall_denying_port(p: u16) -> NtSpec {
    NtSpec::Firewall(FirewallConfig {
        rules: vec![FwRule {
            src: None,
            dst: None,
            proto: Some(17),
            src_ports: PortRange::single(p),
            dst_ports: PortRange::ANY,
            action: Policy::Deny,
        }],
        ..Default::default()
    })
}

fn remap(from: u32, to: u32) -> NtSpec {
    NtSpec::VniMap { map: vec![VniPair { from, to }], default: None }
}

/// A node whose DAG runs `group` (one chain per NT) in parallel, then a counter; VNI 100 in.
fn node(group: Vec<NtSpec>, workers: usize) -> Node<MemPort> {
    let cfg = NodeConfig { core: NodeCoreConfig { workers, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default())).unwrap();
    let mut steps = Vec::new();
    for spec in group.into_iter().chain([NtSpec::Counter]) {
        let c = node.add_chain(vec![spec]);
        node.launch(c).unwrap();
        steps.push(Step { chain: c, mask: NtMask::all(1) });
    }
    let n = steps.len() - 1;
    serve(&mut node, DagRoute::with_groups(steps, &[(0, n)]).unwrap());
    node
}

/// Installs `route` as DAG 1, VNI 100's, and sends VNIs 100 and 300 out to one peer.
fn serve(node: &mut Node<MemPort>, route: DagRoute) {
    node.set_dag(DagUid(1), route);
    let mut mat = Mat::new();
    mat.insert(dag_rule(100, TenantId(1), DagUid(1)));
    node.mat_handle().store(Arc::new(mat));
    for vni in [100, 300] {
        node.fdb_mut().set_default(vni, Some(Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), ..Default::default() }));
    }
}

/// Sends `per_flow` packets on each source port of `ports` (sequence numbers in the payload),
/// interleaved; returns what came out: (VNI, inner source address, source port, sequence).
fn run(node: &mut Node<MemPort>, ports: &[u16], per_flow: u32) -> Vec<(u32, IpAddr, u16, u32)> {
    let src = SocketAddr::from(([192, 0, 2, 1], 4789));
    for seq in 0..per_flow {
        for &p in ports {
            let mut b = datagram(100, p, 4);
            let n = b.len();
            b[n - 4..].copy_from_slice(&seq.to_be_bytes());
            node.backend_mut().rx.push_back((b, src));
        }
        node.poll();
    }
    assert!(node.drain(Duration::from_secs(5)), "buffers still held: {}", node.store().charged());
    std::mem::take(&mut node.backend_mut().tx)
        .into_iter()
        .map(|(b, _)| {
            let inner = parse_inner(&b[8..]).unwrap();
            let n = b.len();
            (parse_vxlan(&b).unwrap(), inner.key.src, inner.key.src_port, u32::from_be_bytes(b[n - 4..].try_into().unwrap()))
        })
        .collect()
}

fn in_order(out: &[(u32, IpAddr, u16, u32)]) {
    let mut last: HashMap<u16, u32> = HashMap::new();
    for &(_, _, port, seq) in out {
        if let Some(&l) = last.get(&port) {
            assert!(seq > l, "flow {port}: {seq} after {l}");
        }
        last.insert(port, seq);
    }
}

fn check_filter_and_remap(workers: usize) {
    // Firewall (reads headers) ∥ VNI map (writes the VNI), then a counter.
    let mut n = node(vec![firewall_denying_port(666), remap(100, 300)], workers);
    let out = run(&mut n, &[1000, 1001, 666, 1002], 200);
    // Port 666 is dropped by the firewall branch, once per packet; the others come out once,
    // with the VNI the other branch wrote.
    assert_eq!(out.len(), 600, "3 allowed flows × 200");
    assert!(out.iter().all(|&(vni, _, port, _)| vni == 300 && port != 666));
    let drops = n.stats().tenants[1].drops;
    assert_eq!(drops[Drop::Nt(DropReason::FirewallDeny).index()], 200, "each denied packet counted once");
    assert_eq!(drops.iter().sum::<u64>(), 200);
    in_order(&out);
    assert_eq!(n.store().charged(), 0, "every copy freed");
}

#[test]
fn a_branch_drop_drops_the_packet_once_and_the_other_branch_s_write_survives() {
    check_filter_and_remap(0);
}

#[test]
fn branches_on_worker_threads_keep_order_and_lose_nothing() {
    check_filter_and_remap(2);
}

#[test]
fn writes_of_two_branches_are_merged() {
    // NAT (writes headers) ∥ VNI map (writes the VNI): the packet leaves NATed *and* remapped.
    let mut n = node(vec![snat(), remap(100, 300)], 0);
    let out = run(&mut n, &[1000, 1001], 50);
    assert_eq!(out.len(), 100);
    for &(vni, src, port, _) in &out {
        assert_eq!((vni, src), (300, IpAddr::from([203, 0, 113, 1])), "port {port}");
    }
    in_order(&out);
    assert_eq!(n.store().charged(), 0);
}

/// One region, a DAG that is one parallel group (a firewall denying port 666 ∥ a VNI map), and
/// the chain of branch `skipped` left to the tenant's endpoint: the other branch's chain holds
/// the only region.
fn one_region_and_a_branch_for_the_endpoint(skipped: usize) -> Node<MemPort> {
    let elastic = snic_dataplane::elastic::ElasticConfig { regions: 1, launch_delay: Duration::ZERO, ..Default::default() };
    let cfg = NodeConfig { core: NodeCoreConfig { elastic, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default())).unwrap();
    let mut steps = Vec::new();
    let mut chains = Vec::new();
    for spec in [firewall_denying_port(666), remap(100, 300)] {
        let c = node.add_chain(vec![spec]);
        chains.push(c);
        steps.push(Step { chain: c, mask: NtMask::all(1) });
    }
    node.launch(chains[1 - skipped]).unwrap();
    node.set_endpoint_fallback(chains[skipped], EndpointFallback::Allowed);
    serve(&mut node, DagRoute::with_groups(steps, &[(0, 2)]).unwrap());
    node
}

#[test]
fn a_branch_left_to_the_endpoint_joins_the_others_having_run_nothing() {
    for skipped in [0, 1] {
        let mut n = one_region_and_a_branch_for_the_endpoint(skipped);
        let out = run(&mut n, &[1000, 666], 50);
        // Every packet comes out once, having run the other branch only: VNI remapped if the
        // map ran, port 666 not denied when the firewall was left to the endpoint.
        let want_vni = if skipped == 1 { 100 } else { 300 };
        let denied = if skipped == 1 { 50 } else { 0 };
        assert_eq!(out.len(), 100 - denied, "branch {skipped} skipped");
        assert!(out.iter().all(|&(vni, ..)| vni == want_vni), "branch {skipped} skipped: {:?}", &out[..1]);
        assert!(n.core().events().endpoint_packets > 0);
        in_order(&out);
        assert_eq!(n.store().charged(), 0, "every copy freed (branch {skipped} skipped)");
    }
}

#[test]
fn a_branch_with_no_instance_drops_its_packet_once_and_holds_nothing() {
    // No elasticity, and the VNI map's chain never launched: the copy for that branch finds no
    // instance. Its packet is dropped once (the join learns of the failed branch) and every
    // buffer comes back.
    let cfg = NodeConfig { vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default())).unwrap();
    let fw = node.add_chain(vec![firewall_denying_port(666)]);
    node.launch(fw).unwrap();
    let map = node.add_chain(vec![remap(100, 300)]);
    let steps = [fw, map].map(|chain| Step { chain, mask: NtMask::all(1) }).to_vec();
    serve(&mut node, DagRoute::with_groups(steps, &[(0, 2)]).unwrap());
    let out = run(&mut node, &[1000, 1001], 20);
    assert!(out.is_empty());
    let drops = node.stats().tenants[1].drops;
    assert_eq!(drops[Drop::Sched(snic_core::sched::Reject::NoInstance).index()], 40);
    assert_eq!(drops.iter().sum::<u64>(), 40, "each packet counted once");
    assert_eq!(node.store().charged(), 0);
}
