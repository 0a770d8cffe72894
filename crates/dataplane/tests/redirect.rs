//! Redirect between two nodes: the home node sends a chain's packets to the peer that hosts its
//! DAG, the peer runs the rest of the DAG and delivers where the home node would have; a
//! datagram not sealed under the pool's key, or for a DAG not hosted, is dropped and counted.

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{ChainId, DagUid, TenantId};
use snic_core::mat::Mat;
use snic_core::pool::redirect::SHARE_ALL;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Drop, Node, NodeConfig};
use snic_nt::{DropReason, NtSpec};
use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::parse_inner;
use snic_wire::redirect::{RedirectRepr, HEADER_LEN};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);
const SECRET: &[u8] = b"a pool secret of 32 bytes, more!";

fn addr(last: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, last], port))
}
/// Endpoints A (sender) and B (receiver), the home node H and the peer P.
fn a() -> SocketAddr {
    addr(1, 4789)
}
fn b() -> SocketAddr {
    addr(2, 4789)
}
fn home() -> SocketAddr {
    addr(10, 4789)
}
fn peer() -> SocketAddr {
    addr(11, 4789)
}

fn datagram(dst_port: u16, fill: u8) -> Vec<u8> {
    let spec = FrameSpec {
        outer: None,
        vni: 100,
        inner_src_mac: MAC_A,
        inner_dst_mac: MAC_B,
        src: "10.0.0.5".parse().unwrap(),
        dst: "10.0.0.9".parse().unwrap(),
        l4: L4Spec::Udp { src_port: 4000 + fill as u16, dst_port },
        payload_len: 64,
        payload_byte: fill,
    };
    let mut v = vec![0u8; 2048];
    let n = build(&spec, &mut v).unwrap();
    v.truncate(n);
    v
}

fn firewall() -> NtSpec {
    snic_perf::testbed::deny_udp_port(9999)
}

fn node() -> Node<MemPort> {
    Node::new(NodeConfig { vtep_port: None, ..Default::default() }, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default()))
        .unwrap()
}

fn step(c: ChainId) -> Step {
    Step { chain: c, mask: NtMask::all(1) }
}

fn run_until_idle(node: &mut Node<MemPort>) {
    let t0 = std::time::Instant::now();
    while node.poll() > 0 || node.store().charged() > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the node did not go idle");
    }
}

/// Home: tenant 1 on VNI 100, DAG 1 = firewall → SNAT; the firewall runs here, the SNAT chain
/// is redirected to the peer. Peer: hosts the same DAG for the home node under its tenant 7,
/// with only its SNAT chain running (a packet entering the DAG at its first step there would
/// find no instance and be dropped).
fn pool() -> (Node<MemPort>, Node<MemPort>, u32) {
    let mut h = node();
    h.set_tenant(TenantId(1), 1.0);
    let (fw, nat) = (h.add_chain(vec![firewall()]), h.add_chain(vec![snic_perf::testbed::snat()]));
    h.launch(fw).unwrap();
    h.set_dag(DagUid(1), DagRoute::new(vec![step(fw), step(nat)]));
    let mut mat = Mat::new();
    mat.insert(snic_perf::testbed::dag_rule(100, TenantId(1), DagUid(1)));
    h.mat_handle().store(Arc::new(mat));
    h.fdb_mut().add_static(100, MAC_B, Peer { addr: b(), mac: MacAddr::default() });
    h.set_pool_secret(Some(SECRET));

    let mut p = node();
    p.set_tenant(TenantId(7), 1.0);
    let (pfw, pnat) = (p.add_chain(vec![firewall()]), p.add_chain(vec![snic_perf::testbed::snat()]));
    p.launch(pnat).unwrap();
    let hosted = p.host_dag(home(), TenantId(7), DagRoute::new(vec![step(pfw), step(pnat)]));
    // The hosted tenant's VNI is its own here (the daemon gives it the home tenant's VNIs).
    p.fdb_mut().set_owner(100, Some(TenantId(7)));
    p.set_pool_secret(Some(SECRET));

    h.redirect_chain(nat, peer(), SHARE_ALL);
    assert!(h.redirect_route(DagUid(1), peer(), hosted, p.pool_link().generation()));
    (h, p, hosted)
}

/// Hands what `from` (at `from_addr`) sent to `to_addr` over to `to`.
fn carry(from: &mut Node<MemPort>, from_addr: SocketAddr, to: &mut Node<MemPort>, to_addr: SocketAddr) -> usize {
    let sent: Vec<_> = from.backend_mut().tx.drain(..).collect();
    let n = sent.iter().filter(|(_, dst)| *dst == to_addr).count();
    for (d, dst) in sent {
        assert_eq!(dst, to_addr, "everything goes to the peer");
        to.backend_mut().rx.push_back((d, from_addr));
    }
    n
}

#[test]
fn a_redirected_chain_runs_on_the_peer_from_its_step_and_is_delivered_where_home_would() {
    let (mut h, mut p, _) = pool();
    for i in 0..100u8 {
        let port = if i % 10 == 0 { 9999 } else { 80 };
        h.backend_mut().rx.push_back((datagram(port, i), a()));
    }
    run_until_idle(&mut h);
    // The firewall ran at home: 10 denied there; 90 redirected to the peer, with the header.
    let ht = &h.stats().tenants[1];
    assert_eq!(ht.drops[Drop::Nt(DropReason::FirewallDeny).index()], 10);
    assert_eq!((h.pool_link().redirected(ChainId(1)), ht.tx_packets), (90, 90));
    assert!(h.backend().tx.iter().all(|(d, _)| RedirectRepr::parse(d).is_ok_and(|r| r.pos == 1 && r.delivery == Some(b()))));
    assert_eq!(carry(&mut h, home(), &mut p, peer()), 90);
    run_until_idle(&mut p);
    // The peer ran the SNAT step only and delivered to B, as the home node would have.
    let pt = &p.stats().tenants[7];
    assert_eq!((pt.rx_packets, pt.tx_packets, pt.dropped()), (90, 90, 0));
    let out = &p.backend().tx;
    assert_eq!(out.len(), 90);
    for (d, to) in out {
        assert_eq!(*to, b());
        let k = parse_inner(&d[8..]).unwrap().key;
        assert_eq!(k.src, IpAddr::from([203, 0, 113, 1]), "SNAT ran on the peer");
        assert_eq!(k.dst_port, 80);
    }
    assert_eq!(p.pool_link().hosted().map(|(_, x)| (x.home, x.packets)).collect::<Vec<_>>(), vec![(home(), 90)]);
}

#[test]
fn the_peer_drops_and_counts_what_the_pool_did_not_seal_and_what_it_does_not_host() {
    let (mut h, mut p, hosted) = pool();
    // Sealed under another secret.
    let mut other = node();
    other.set_pool_secret(Some(b"another secret, also 32 bytes!!!"));
    h.backend_mut().rx.push_back((datagram(80, 1), a()));
    run_until_idle(&mut h);
    let (good, _) = h.backend_mut().tx.pop().unwrap();
    // A copy with one byte of the tenant's frame changed, a forged header with no valid tag, the
    // intact one, then the intact one again after the peer stopped hosting the DAG.
    let mut changed = good.clone();
    *changed.last_mut().unwrap() ^= 1;
    let mut forged = [0u8; HEADER_LEN];
    RedirectRepr {
        sender: 1,
        counter: 1,
        route: hosted,
        incarnation: snic_core::pool::redirect::incarnation(p.pool_link().generation()),
        pos: 1,
        hops: 0,
        delivery: Some(b()),
        destination: None,
        owner: false,
    }
    .emit(&mut forged);
    let mut forged = forged.to_vec();
    forged.extend_from_slice(&good[HEADER_LEN..]);
    for d in [changed, forged, good.clone()] {
        p.backend_mut().rx.push_back((d, home()));
    }
    run_until_idle(&mut p);
    let un = Drop::Unauthenticated.index();
    assert_eq!(p.stats().unattributed[un], 2);
    assert_eq!(p.stats().tenants[7].tx_packets, 1, "the intact one ran");
    assert!(p.unhost_dag(hosted).is_some());
    p.backend_mut().rx.push_back((good.clone(), home()));
    run_until_idle(&mut p);
    assert_eq!(p.stats().unattributed[Drop::NotHosted.index()], 1);
    // A node of another pool, and a node without a pool secret, accept none of it.
    let mut bare = node();
    for n in [&mut other, &mut bare] {
        n.backend_mut().rx.push_back((good.clone(), home()));
        run_until_idle(n);
        assert_eq!(n.stats().unattributed[un], 1);
        assert!(n.backend().tx.is_empty());
    }
}

/// A redirected packet received twice — replayed by someone on the path, or duplicated by the
/// network — runs once; packets reordered on the way all run.
#[test]
fn the_peer_runs_a_redirected_packet_once_and_accepts_reordering() {
    let (mut h, mut p, hosted) = pool();
    for i in 0..3u8 {
        h.backend_mut().rx.push_back((datagram(80, i), a()));
    }
    run_until_idle(&mut h);
    let sent: Vec<Vec<u8>> = h.backend_mut().tx.drain(..).map(|(d, _)| d).collect();
    assert_eq!(sent.len(), 3);
    // Reordered: 3rd, 1st, 2nd; then the 2nd and the 3rd again.
    for i in [2, 0, 1, 1, 2] {
        p.backend_mut().rx.push_back((sent[i].clone(), home()));
    }
    run_until_idle(&mut p);
    assert_eq!(p.stats().tenants[7].tx_packets, 3, "each packet ran once");
    assert_eq!(p.stats().unattributed[Drop::ReplayedRedirect.index()], 2);
    // What a DAG given back waits for (the home's count of packets sent) counts each once.
    assert_eq!(p.pool_link().hosted_received(hosted), Some(3), "replays are not received packets");
    assert_eq!(p.pool_link().hosted_received(hosted + 1), None);
    assert_eq!(Drop::name(Drop::ReplayedRedirect.index()), "replayed_redirect");
}

/// The pool address of the node whose data address ends in `last`.
fn pool_addr(last: u8) -> SocketAddr {
    addr(last, 7946)
}

/// Node `n` (pool address ending in `me`) knows the pool's `links` and the data addresses of
/// the members `others` (last bytes), from their reports.
fn learn_links(n: &mut Node<MemPort>, me: u8, links: &[[SocketAddr; 2]], others: &[u8]) {
    n.set_pool_links(pool_addr(me), links);
    for &o in others {
        let r = snic_core::pool::LoadReport { gen: 1, seq: 1, data: Some(addr(o, 4789)), ..Default::default() };
        n.pool_report(pool_addr(o), r);
    }
}

/// The pool's links join home (10) and peer (11) only through a third node T (12): the
/// redirected packet goes to T, which forwards it, runs nothing, counts it; the peer runs it.
#[test]
fn a_pass_through_node_forwards_a_redirected_packet_without_running_it_and_counts_it() {
    let (mut h, mut p, _) = pool();
    let t_addr = addr(12, 4789);
    let mut t = node();
    t.set_pool_secret(Some(SECRET));
    let links = [[pool_addr(10), pool_addr(12)], [pool_addr(12), pool_addr(11)]];
    learn_links(&mut h, 10, &links, &[11, 12]);
    learn_links(&mut t, 12, &links, &[10, 11]);
    for i in 0..20u8 {
        h.backend_mut().rx.push_back((datagram(80, i), a()));
    }
    run_until_idle(&mut h);
    let to_t = |n: &Node<MemPort>| {
        n.backend().tx.iter().map(|(d, to)| (*to, RedirectRepr::parse(d).map(|r| (r.destination, r.hops)))).collect::<Vec<_>>()
    };
    assert_eq!(to_t(&h), vec![(t_addr, Ok((Some(peer()), 0))); 20], "to T, for the peer");
    assert_eq!(carry(&mut h, home(), &mut t, t_addr), 20);
    run_until_idle(&mut t);
    assert_eq!(t.pool_link().pass_through().0, 20);
    assert_eq!(to_t(&t), vec![(peer(), Ok((None, 1))); 20], "on to the peer, one hop more, T the last on the way");
    assert_eq!(t.store().charged(), 0, "nothing held once sent");
    assert!(t.stats().unattributed.iter().all(|&c| c == 0));
    assert_eq!(carry(&mut t, t_addr, &mut p, peer()), 20);
    run_until_idle(&mut p);
    // The peer ran it and delivered where home would have; the frame came through intact.
    let pt = &p.stats().tenants[7];
    assert_eq!((pt.rx_packets, pt.tx_packets, pt.dropped()), (20, 20, 0));
    assert!(p.backend().tx.iter().all(|(d, to)| *to == b() && parse_inner(&d[8..]).unwrap().key.src == IpAddr::from([203, 0, 113, 1])));
    // A datagram changed on the way is refused by T before it forwards anything.
    h.backend_mut().rx.push_back((datagram(80, 99), a()));
    run_until_idle(&mut h);
    let (mut d, _) = h.backend_mut().tx.pop().unwrap();
    d[HEADER_LEN + 20] ^= 1;
    t.backend_mut().rx.push_back((d, home()));
    run_until_idle(&mut t);
    assert_eq!((t.stats().unattributed[Drop::Unauthenticated.index()], t.pool_link().pass_through().0), (1, 20));
}

/// Two nodes whose routes point at each other (links that disagree): the datagram bounces a
/// bounded number of times, then is dropped and counted.
#[test]
fn a_redirected_packet_caught_in_a_loop_of_pass_through_nodes_is_dropped_after_the_limit() {
    let (mut h, _p, _) = pool();
    let t_addr = addr(12, 4789);
    let mut t = node();
    t.set_pool_secret(Some(SECRET));
    // H believes the peer is behind T; T believes it is behind H.
    learn_links(&mut h, 10, &[[pool_addr(10), pool_addr(12)], [pool_addr(12), pool_addr(11)]], &[11, 12]);
    learn_links(&mut t, 12, &[[pool_addr(12), pool_addr(10)], [pool_addr(10), pool_addr(11)]], &[10, 11]);
    h.backend_mut().rx.push_back((datagram(80, 1), a()));
    run_until_idle(&mut h);
    let mut bounces = 0;
    loop {
        let moved = carry(&mut h, home(), &mut t, t_addr);
        run_until_idle(&mut t);
        let back = carry(&mut t, t_addr, &mut h, home());
        run_until_idle(&mut h);
        if moved + back == 0 {
            break;
        }
        bounces += moved + back;
        assert!(bounces <= 40, "the loop did not end");
    }
    let limit = snic_dataplane::MAX_PASS_THROUGH as u64;
    assert_eq!(h.pool_link().pass_through().0 + t.pool_link().pass_through().0, limit);
    let hops = Drop::PassThroughHops.index();
    assert_eq!(h.stats().unattributed[hops] + t.stats().unattributed[hops], 1);
    assert_eq!(Drop::name(hops), "pass_through_hops");
    assert_eq!((h.store().charged(), t.store().charged()), (0, 0));
}

#[test]
fn stopping_a_redirect_brings_the_chain_back_home() {
    let (mut h, _p, _) = pool();
    let nat = ChainId(1);
    assert_eq!(h.core().redirects().iter().map(|(c, r)| (c, r.peer)).collect::<Vec<_>>(), vec![(nat, peer())]);
    assert!(h.stop_redirect(nat).is_some());
    h.launch(nat).unwrap();
    h.backend_mut().rx.push_back((datagram(80, 1), a()));
    run_until_idle(&mut h);
    let t = &h.stats().tenants[1];
    assert_eq!((h.pool_link().redirected(nat), t.tx_packets), (0, 1));
    assert_eq!(h.backend().tx[0].1, b(), "delivered from home");
    // And a peer that died takes its redirects with it.
    h.redirect_chain(nat, peer(), SHARE_ALL);
    assert_eq!(h.forget_peer(peer()), vec![nat]);
    assert_eq!(h.core().redirects().iter().count(), 0);
}

/// Issue 49: the peer restarted (faster than failure detection, so its home still sends) and a
/// DAG of another tenant took the number the home's packets carry. They name the earlier
/// incarnation: none runs in the new one's DAG.
#[test]
fn a_restarted_peer_runs_nothing_named_for_its_earlier_incarnation() {
    let (mut h, _old, hosted) = pool();
    let mut p = node();
    p.set_pool_secret(Some(SECRET));
    p.set_tenant(TenantId(9), 1.0);
    let c = p.add_chain(vec![NtSpec::Counter]);
    p.launch(c).unwrap();
    let again = p.host_dag(home(), TenantId(9), DagRoute::new(vec![step(c), step(c)]));
    assert_eq!(again, hosted, "the new incarnation gave the same number to another tenant's DAG");
    p.fdb_mut().set_owner(100, Some(TenantId(9)));
    for i in 0..10u8 {
        h.backend_mut().rx.push_back((datagram(80, i), a()));
    }
    run_until_idle(&mut h);
    assert_eq!(carry(&mut h, home(), &mut p, peer()), 10);
    run_until_idle(&mut p);
    assert_eq!(p.stats().tenants[9].rx_packets, 0, "nothing ran in the other tenant's DAG");
    assert_eq!(p.stats().unattributed[Drop::NotHosted.index()], 10);
    assert!(p.backend().tx.is_empty());
}

/// A redirected packet whose VNI is not the hosted DAG's tenant's (a home that mapped another
/// tenant's VNI to the DAG) does not run in it.
#[test]
fn a_redirected_packet_runs_only_in_a_dag_of_its_own_tenant() {
    let (mut h, mut p, _) = pool();
    // VNI 100 is tenant 8's at the peer, not the hosted DAG's tenant 7's.
    p.fdb_mut().set_owner(100, Some(TenantId(8)));
    h.backend_mut().rx.push_back((datagram(80, 1), a()));
    run_until_idle(&mut h);
    assert_eq!(carry(&mut h, home(), &mut p, peer()), 1);
    run_until_idle(&mut p);
    assert_eq!(p.stats().tenants[7].drops[Drop::ForeignVni.index()], 1);
    assert_eq!((p.stats().tenants[7].tx_packets, p.stats().tenants[8].rx_packets), (0, 0));
}
