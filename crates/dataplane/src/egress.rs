//! Re-encapsulation toward the destination VTEP.
//!
//! For datagram backends (UDP sockets) the VXLAN datagram already is the payload and only the
//! destination changes. For frame backends (in-memory rings, and later AF_XDP) egress writes a
//! fresh outer Ethernet/IP/UDP header into the headroom in front of the VXLAN header: source is
//! this node's VTEP, destination the chosen peer, and the UDP source port carries the inner
//! flow's entropy (as Linux VXLAN does), so the underlay's ECMP keeps flows on one path.

use crate::store::Peer;
use snic_wire::ethernet::{ethertype, EthernetRepr};
use snic_wire::ip_proto;
use snic_wire::ipv4::Ipv4Repr;
use snic_wire::ipv6::Ipv6Repr;
use snic_wire::udp::UdpRepr;
use std::net::IpAddr;

/// Bytes of outer headers for this peer's address family.
pub fn outer_len(peer: &Peer) -> usize {
    14 + if peer.addr.is_ipv4() { 20 } else { 40 } + 8
}

/// Writes outer headers so that the frame ends with the VXLAN datagram at `buf[off..off+len]`;
/// returns the frame's start, or `None` if the headroom is too small or the families differ.
#[inline]
pub fn encap(buf: &mut [u8], off: usize, len: usize, local: &Peer, peer: &Peer, flow_hash: u64) -> Option<usize> {
    let ol = outer_len(peer);
    let start = off.checked_sub(ol)?;
    let b = &mut buf[start..off];
    let v4 = peer.addr.is_ipv4();
    EthernetRepr { src: local.mac, dst: peer.mac, vlan: None, ethertype: if v4 { ethertype::IPV4 } else { ethertype::IPV6 } }.emit(b);
    let udp_len = 8 + len;
    let l4 = match (local.addr.ip(), peer.addr.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Ipv4Repr { src: s, dst: d, protocol: ip_proto::UDP, payload_len: udp_len, ttl: 64, tos: 0, ident: 0, dont_frag: true }
                .emit(&mut b[14..]);
            34
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ipv6Repr { src: s, dst: d, next_header: ip_proto::UDP, payload_len: udp_len, hop_limit: 64, traffic_class: 0, flow_label: 0 }
                .emit(&mut b[14..]);
            54
        }
        _ => return None,
    };
    let sport = 49152 | (flow_hash as u16 & 0x3fff);
    UdpRepr { src_port: sport, dst_port: peer.addr.port(), payload_len: len }.emit(&mut b[l4..]);
    Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_wire::ethernet::MacAddr;
    use snic_wire::layout::parse_outer;

    #[test]
    fn encap_parses_back() {
        let local = Peer { addr: "192.0.2.1:4789".parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, 1]) };
        let peer = Peer { addr: "192.0.2.9:4789".parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, 9]) };
        let mut buf = vec![0u8; 512];
        let off = 128;
        snic_wire::vxlan::emit(&mut buf[off..], 4242);
        let len = 8 + 60;
        let start = encap(&mut buf, off, len, &local, &peer, 7).unwrap();
        let o = parse_outer(&buf[start..off + len]).unwrap();
        assert_eq!(o.vni, 4242);
        assert_eq!(o.dst_ip, peer.addr.ip());
        assert_eq!(o.src_ip, local.addr.ip());
        assert_eq!(o.src_mac, local.mac);
        assert_eq!(o.vxlan_off as usize, off - start);
        assert_eq!(encap(&mut buf, 10, len, &local, &peer, 7), None, "no headroom");
    }
}
