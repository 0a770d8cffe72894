//! Root-only tests of the data plane's kernel parts (`scripts/test.sh` runs them as root with
//! `--ignored`, with the `af_xdp` feature; without root they fail, saying why).
#![cfg(feature = "af_xdp")]

use snic_dataplane::backend::xdp::prog::{Filter, Loaded, XDP_DROP, XDP_PASS};
use snic_dataplane::backend::xdp::XdpMode;
use std::net::Ipv4Addr;

fn require_root() {
    // SAFETY: no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test loads an XDP program: run it as root (scripts/test.sh does)");
}

/// An Ethernet + IPv4 + UDP frame to `dst:port`, with IPv4 flags/offset `frag` and 64 bytes of
/// payload.
fn udp_frame(dst: Ipv4Addr, port: u16, frag: u16) -> Vec<u8> {
    let mut f = vec![0u8; 42 + 64];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((20 + 8 + 64) as u16).to_be_bytes());
    f[20..22].copy_from_slice(&frag.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[192, 0, 2, 9]);
    f[30..34].copy_from_slice(&dst.octets());
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&port.to_be_bytes());
    f[38..40].copy_from_slice(&((8 + 64) as u16).to_be_bytes());
    f
}

/// The kernel runs the program (`BPF_PROG_TEST_RUN`) on frames of every kind: only IPv4 UDP to
/// the node's address and port, unfragmented and without options, would go to the socket
/// (with no socket in the map the test's program drops them, so a match shows as `XDP_DROP`);
/// the rest goes on to the kernel.
#[test]
#[ignore = "needs root (loads an XDP program): scripts/test.sh runs it as root with --ignored"]
fn the_xdp_program_takes_only_vxlan_to_the_node() {
    require_root();
    let node = Ipv4Addr::new(192, 0, 2, 1);
    let p = Loaded::load(&Filter { port: 4789, addr: Some(node), no_socket: XDP_DROP }, 1).unwrap();
    let run = |f: &[u8]| p.test_run(f).unwrap() as i32;
    assert_eq!(run(&udp_frame(node, 4789, 0)), XDP_DROP, "VXLAN to the node is taken");
    assert_eq!(run(&udp_frame(node, 4789, 0x4000)), XDP_DROP, "DF set is not a fragment");
    assert_eq!(run(&udp_frame(node, 4790, 0)), XDP_PASS, "another port");
    assert_eq!(run(&udp_frame(Ipv4Addr::new(192, 0, 2, 2), 4789, 0)), XDP_PASS, "another address");
    assert_eq!(run(&udp_frame(node, 4789, 0x2000)), XDP_PASS, "a first fragment (more fragments)");
    assert_eq!(run(&udp_frame(node, 4789, 0x00b9)), XDP_PASS, "a later fragment");
    let mut tcp = udp_frame(node, 4789, 0);
    tcp[23] = 6;
    assert_eq!(run(&tcp), XDP_PASS, "TCP");
    let mut opts = udp_frame(node, 4789, 0);
    opts[14] = 0x46;
    assert_eq!(run(&opts), XDP_PASS, "IPv4 options");
    let mut arp = udp_frame(node, 4789, 0);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(run(&arp), XDP_PASS, "ARP");
    let mut v6 = udp_frame(node, 4789, 0);
    v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    assert_eq!(run(&v6), XDP_PASS, "IPv6");
    assert_eq!(run(&udp_frame(node, 4789, 0)[..41]), XDP_PASS, "too short for its headers");
    // Any address when the node has none configured.
    let any = Loaded::load(&Filter { port: 4789, addr: None, no_socket: XDP_DROP }, 1).unwrap();
    assert_eq!(any.test_run(&udp_frame(Ipv4Addr::new(198, 51, 100, 7), 4789, 0)).unwrap() as i32, XDP_DROP);
}

/// Two network namespaces joined by a veth pair: the node's (`sx0`, 192.0.2.1/24) and its
/// peer's (`sx1`, 192.0.2.2/24 and .3); removed on drop.
struct Netns(String);

impl Netns {
    /// Named after this process and `tag` (tests run side by side).
    fn new(tag: &str) -> Netns {
        let name = format!("snx{tag}{}", std::process::id());
        let ip = |args: &[&str]| {
            let out = std::process::Command::new("ip").args(args).output().unwrap();
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let (n, p) = (format!("{name}-n"), format!("{name}-p"));
        ip(&["netns", "add", &n]);
        let ns = Netns(name);
        ip(&["netns", "add", &p]);
        for a in [
            vec!["-n", &n, "link", "add", "sx0", "type", "veth", "peer", "name", "sx1", "netns", &p],
            vec!["-n", &n, "addr", "add", "192.0.2.1/24", "dev", "sx0"],
            vec!["-n", &p, "addr", "add", "192.0.2.2/24", "dev", "sx1"],
            vec!["-n", &p, "addr", "add", "192.0.2.3/24", "dev", "sx1"],
            vec!["-n", &n, "link", "set", "sx0", "up"],
            vec!["-n", &p, "link", "set", "sx1", "up"],
        ] {
            ip(&a);
        }
        ns
    }

    /// Moves the calling thread into namespace `which` ("n" or "p") for good (a test's thread,
    /// or one spawned for it, ends with it).
    fn enter(&self, which: &str) {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(format!("/var/run/netns/{}-{which}", self.0)).unwrap();
        // SAFETY: a namespace descriptor; only this thread changes namespace.
        assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for w in ["n", "p"] {
            let _ = std::process::Command::new("ip").args(["netns", "del", &format!("{}-{w}", self.0)]).status();
        }
    }
}

/// A node on the AF_XDP backend (native XDP on `sx0`) forwards VXLAN from a socket on `sx1` to
/// another there: the first frames to a next hop the kernel has not resolved go out through the
/// kernel (`via_kernel`), the rest from the store through the AF_XDP socket once its neighbour
/// table has the MAC; and a node rebuilt on the same backend (the daemon after a failed change)
/// forwards again; a program a node left attached is replaced by the next node's.
#[test]
#[ignore = "needs root (network namespaces, XDP): scripts/test.sh runs it as root with --ignored"]
fn a_node_on_af_xdp_forwards_resolves_its_next_hop_and_survives_a_rebuild() {
    forwards_resolves_and_survives_a_rebuild(XdpMode::Native);
}

/// The same with the program in generic mode (after the kernel made an skb).
#[test]
#[ignore = "needs root (network namespaces, XDP): scripts/test.sh runs it as root with --ignored"]
fn a_node_on_af_xdp_in_generic_mode_forwards_resolves_and_survives_a_rebuild() {
    forwards_resolves_and_survives_a_rebuild(XdpMode::Generic);
}

fn forwards_resolves_and_survives_a_rebuild(mode: XdpMode) {
    use snic_core::dag::{DagRoute, NtMask, Step};
    use snic_core::ids::{DagUid, TenantId};
    use snic_core::mat::Mat;
    use snic_dataplane::backend::xdp::{XdpBackend, XdpConfig};
    use snic_dataplane::backend::Backend;
    use snic_dataplane::node::MonotonicClock;
    use snic_dataplane::store::Peer;
    use snic_dataplane::{Node, NodeConfig};
    use snic_wire::build::{build, FrameSpec, L4Spec};
    use snic_wire::ethernet::MacAddr;
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    require_root();
    let ns = Netns::new(if mode == XdpMode::Native { "n" } else { "g" });
    // The peer's sockets are made in its namespace (a socket stays in the one it was made in).
    let (a, b) = std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter("p");
            // (B on an address the node's kernel has not met: it has to resolve it.)
            (UdpSocket::bind("192.0.2.2:0").unwrap(), UdpSocket::bind("192.0.2.3:0").unwrap())
        })
        .join()
        .unwrap()
    });
    ns.enter("n");
    let (mac_a, mac_b) = (MacAddr([2, 0, 0, 0, 0, 0xa]), MacAddr([2, 0, 0, 0, 0, 0xb]));
    let cfg = XdpConfig { interface: "sx0".into(), queue: 0, mode, addr: "0.0.0.0:4789".parse().unwrap() };
    let mut backend = XdpBackend::new(cfg).unwrap();
    assert_eq!(backend.local_addr().unwrap(), "192.0.2.1:4789".parse().unwrap(), "the interface's address");
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let frame = |i: u16| {
        let spec = FrameSpec {
            outer: None,
            vni: 100,
            inner_src_mac: mac_a,
            inner_dst_mac: mac_b,
            src: "10.0.0.5".parse().unwrap(),
            dst: "10.0.0.9".parse().unwrap(),
            l4: L4Spec::Udp { src_port: 4000 + i, dst_port: 80 },
            payload_len: 64,
            payload_byte: i as u8,
        };
        let mut v = vec![0u8; 2048];
        let n = build(&spec, &mut v).unwrap();
        v.truncate(n);
        v
    };
    for round in 0..2 {
        let mut node =
            Node::new(NodeConfig { vtep_port: None, ..Default::default() }, backend, Box::new(MonotonicClock::default())).unwrap();
        let c = node.add_chain(vec![snic_nt::NtSpec::Counter]);
        node.launch(c).unwrap();
        node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
        let mut mat = Mat::new();
        mat.insert(snic_perf::testbed::dag_rule(100, TenantId(1), DagUid(1)));
        node.mat_handle().store(Arc::new(mat));
        // B is a configured VTEP: no MAC known.
        node.fdb_mut().add_static(100, mac_b, Peer { addr: b.local_addr().unwrap(), mac: MacAddr::default() });
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let runner = std::thread::spawn(move || {
            node.run(&st);
            node
        });
        let mut buf = [0u8; 2048];
        for i in 0..200u16 {
            a.send_to(&frame(i), "192.0.2.1:4789").unwrap();
            let (n, from) = b.recv_from(&mut buf).unwrap_or_else(|e| panic!("round {round}: datagram {i} did not arrive at B: {e}"));
            assert_eq!(from.ip(), std::net::IpAddr::from([192, 0, 2, 1]));
            assert_eq!(&buf[..n], &frame(i)[..], "round {round}: forwarded unchanged");
        }
        stop.store(true, Ordering::Relaxed);
        let node = runner.join().unwrap();
        let (rx, _) = node.backend().rx_runs();
        let (rx_kernel, tx_kernel) = node.backend().via_kernel();
        assert_eq!(node.stats().tenants[1].tx_packets, 200, "round {round}");
        assert!(rx >= 200 * (round + 1) && rx_kernel == 0, "round {round}: {rx} frames received, {rx_kernel} through the kernel");
        assert!(tx_kernel >= 1 && tx_kernel < 100 * (round + 1), "round {round}: {tx_kernel} of 200 sent through the kernel");
        backend = node.into_backend();
    }
    // A node that could not detach its program (killed): the next one takes the interface back.
    std::mem::forget(backend);
    // (Another port: the forgotten backend's UDP socket still holds 4789.)
    let cfg = XdpConfig { interface: "sx0".into(), queue: 0, mode, addr: "0.0.0.0:4790".parse().unwrap() };
    XdpBackend::new(cfg).expect("a program snic left attached is replaced");
}
