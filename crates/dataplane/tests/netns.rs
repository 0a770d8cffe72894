//! Root-only tests of the data plane's kernel parts (`scripts/test.sh` runs them as root with
//! `--ignored`, with the `af_xdp` feature; without root they fail, saying why).
#![cfg(feature = "af_xdp")]

use snic_dataplane::backend::xdp::prog::{Filter, Loaded, XDP_DROP, XDP_PASS};
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
