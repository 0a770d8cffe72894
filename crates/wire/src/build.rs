//! Assembling whole VXLAN frames, with correct lengths and checksums, for tests, benchmarks,
//! load generators and the demo's in-process endpoints.

use crate::checksum;
use crate::ethernet::{ethertype, EthernetRepr, MacAddr};
use crate::icmp::IcmpRepr;
use crate::ipv4::Ipv4Repr;
use crate::ipv6::Ipv6Repr;
use crate::tcp::TcpRepr;
use crate::udp::UdpRepr;
use crate::{ip_proto, put16, vxlan};
use core::net::IpAddr;

/// The upper layer of the inner packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4Spec {
    /// UDP with these ports.
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
    },
    /// TCP with these ports and flags.
    Tcp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Flags.
        flags: u8,
    },
    /// ICMP (v4 or v6 by the inner family) with this type, identifier and sequence.
    Icmp {
        /// Type.
        msg_type: u8,
        /// Identifier.
        ident: u16,
        /// Sequence.
        seq: u16,
    },
}

/// Outer headers, when building a whole Ethernet frame rather than a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OuterSpec {
    /// Outer source MAC.
    pub src_mac: MacAddr,
    /// Outer destination MAC.
    pub dst_mac: MacAddr,
    /// Sending VTEP address.
    pub src_ip: IpAddr,
    /// Receiving VTEP address (same family as `src_ip`).
    pub dst_ip: IpAddr,
    /// Outer UDP source port.
    pub src_port: u16,
}

/// A VXLAN frame to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSpec {
    /// Outer headers; `None` builds a datagram that starts at the VXLAN header.
    pub outer: Option<OuterSpec>,
    /// VNI.
    pub vni: u32,
    /// Inner source MAC.
    pub inner_src_mac: MacAddr,
    /// Inner destination MAC.
    pub inner_dst_mac: MacAddr,
    /// Inner source address.
    pub src: IpAddr,
    /// Inner destination address (same family as `src`).
    pub dst: IpAddr,
    /// Inner upper layer.
    pub l4: L4Spec,
    /// Bytes of application payload after the L4 header.
    pub payload_len: usize,
    /// Fill byte of the payload.
    pub payload_byte: u8,
}

fn outer_len(o: &OuterSpec) -> usize {
    14 + if o.src_ip.is_ipv4() { 20 } else { 40 } + 8
}

/// Bytes the frame will take.
pub fn frame_len(s: &FrameSpec) -> usize {
    let l3 = if s.src.is_ipv4() { 20 } else { 40 };
    let l4 = match s.l4 {
        L4Spec::Tcp { .. } => 20,
        _ => 8,
    };
    s.outer.as_ref().map_or(0, outer_len) + vxlan::HEADER_LEN + 14 + l3 + l4 + s.payload_len
}

/// Builds the frame into `buf` and returns its length, or `None` if `buf` is too short or the
/// address families are mixed.
pub fn build(s: &FrameSpec, buf: &mut [u8]) -> Option<usize> {
    let total = frame_len(s);
    if buf.len() < total || s.src.is_ipv4() != s.dst.is_ipv4() {
        return None;
    }
    let mut off = 0;
    if let Some(o) = &s.outer {
        if o.src_ip.is_ipv4() != o.dst_ip.is_ipv4() {
            return None;
        }
        off = emit_outer(o, vxlan::PORT, total - outer_len(o), buf)?;
    }
    vxlan::emit(&mut buf[off..], s.vni);
    off += vxlan::HEADER_LEN;
    let v4 = s.src.is_ipv4();
    EthernetRepr { src: s.inner_src_mac, dst: s.inner_dst_mac, vlan: None, ethertype: if v4 { ethertype::IPV4 } else { ethertype::IPV6 } }
        .emit(&mut buf[off..]);
    off += 14;
    let (proto, l4_len) = match s.l4 {
        L4Spec::Udp { .. } => (ip_proto::UDP, 8),
        L4Spec::Tcp { .. } => (ip_proto::TCP, 20),
        L4Spec::Icmp { .. } => (if v4 { ip_proto::ICMP } else { ip_proto::ICMPV6 }, 8),
    };
    let l4_total = l4_len + s.payload_len;
    let l3_off = off;
    match (s.src, s.dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            Ipv4Repr { src: a, dst: b, protocol: proto, payload_len: l4_total, ttl: 64, tos: 0, ident: 0, dont_frag: true }
                .emit(&mut buf[off..]);
            off += 20;
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            Ipv6Repr { src: a, dst: b, next_header: proto, payload_len: l4_total, hop_limit: 64, traffic_class: 0, flow_label: 0 }
                .emit(&mut buf[off..]);
            off += 40;
        }
        _ => return None,
    }
    let l4_off = off;
    match s.l4 {
        L4Spec::Udp { src_port, dst_port } => UdpRepr { src_port, dst_port, payload_len: s.payload_len }.emit(&mut buf[off..]),
        L4Spec::Tcp { src_port, dst_port, flags } => {
            TcpRepr { src_port, dst_port, seq: 1, ack: 0, flags, window: 65535 }.emit(&mut buf[off..])
        }
        L4Spec::Icmp { msg_type, ident, seq } => IcmpRepr { msg_type, code: 0, ident, seq }.emit(&mut buf[off..]),
    }
    off += l4_len;
    buf[off..off + s.payload_len].fill(s.payload_byte);
    fill_l4_checksum(&mut buf[l3_off..l4_off + l4_total], l4_off - l3_off, proto);
    Some(total)
}

/// Writes outer Ethernet / IPv4 or IPv6 / UDP headers for a VXLAN datagram of `vxlan_len`
/// bytes sent to UDP port `dst_port`, at the start of `buf`; returns the header length (42 or 62),
/// or `None` if `buf` is too short or the address families differ. The UDP checksum is zero
/// (valid over IPv4, and for VXLAN over IPv6 per RFC 6935).
pub fn emit_outer(o: &OuterSpec, dst_port: u16, vxlan_len: usize, buf: &mut [u8]) -> Option<usize> {
    let v4 = o.src_ip.is_ipv4();
    let len = 14 + if v4 { 20 } else { 40 } + 8;
    if buf.len() < len {
        return None;
    }
    let udp_len = 8 + vxlan_len;
    match (o.src_ip, o.dst_ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            Ipv4Repr { src: a, dst: b, protocol: ip_proto::UDP, payload_len: udp_len, ttl: 64, tos: 0, ident: 0, dont_frag: true }
                .emit(&mut buf[14..]);
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            Ipv6Repr { src: a, dst: b, next_header: ip_proto::UDP, payload_len: udp_len, hop_limit: 64, traffic_class: 0, flow_label: 0 }
                .emit(&mut buf[14..]);
        }
        _ => return None,
    }
    EthernetRepr { src: o.src_mac, dst: o.dst_mac, vlan: None, ethertype: if v4 { ethertype::IPV4 } else { ethertype::IPV6 } }.emit(buf);
    UdpRepr { src_port: o.src_port, dst_port, payload_len: vxlan_len }.emit(&mut buf[len - 8..]);
    Some(len)
}

/// Computes and stores the full L4 checksum of the IP packet `ip` (IPv4 or IPv6 without
/// extension headers) whose L4 header starts at `l4_off`. ICMPv4 has no pseudo-header.
pub fn fill_l4_checksum(ip: &mut [u8], l4_off: usize, proto: u8) {
    let Some(csum_at) = checksum::l4_checksum_at(proto) else { return };
    let len = ip.len() - l4_off;
    put16(ip, l4_off + csum_at, 0);
    let mut acc = if proto == ip_proto::ICMP { 0 } else { checksum::ip_pseudo_header(ip, proto, len as u32) };
    acc = checksum::sum(acc, &ip[l4_off..]);
    let mut c = !checksum::fold(acc);
    if proto == ip_proto::UDP && c == 0 {
        c = 0xffff;
    }
    put16(ip, l4_off + csum_at, c);
}

/// Leaves the TCP or UDP checksum of the IP packet `ip` (IPv4 or IPv6 without extension
/// headers, L4 header at `l4_off`) *partial*, as a kernel with transmit checksum offload leaves
/// it for a NIC to finish: the pseudo-header's folded sum, without the payload's
/// ([`checksum::l4_field_is_pseudo`] then holds). [`fill_l4_checksum`] finishes it.
pub fn fill_l4_partial(ip: &mut [u8], l4_off: usize, proto: u8) {
    let Some(csum_at) = checksum::l4_checksum_at(proto).filter(|_| matches!(proto, ip_proto::TCP | ip_proto::UDP)) else { return };
    let len = ip.len() - l4_off;
    let p = checksum::fold(checksum::ip_pseudo_header(ip, proto, len as u32));
    put16(ip, l4_off + csum_at, p);
}

/// True if the L4 checksum of the IP packet `ip` verifies (see [`fill_l4_checksum`]).
pub fn verify_l4_checksum(ip: &[u8], l4_off: usize, proto: u8) -> bool {
    let len = ip.len() - l4_off;
    let mut acc = if proto == ip_proto::ICMP { 0 } else { checksum::ip_pseudo_header(ip, proto, len as u32) };
    acc = checksum::sum(acc, &ip[l4_off..]);
    checksum::fold(acc) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{parse_inner, parse_outer, parse_vxlan, InnerL3};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_partial_checksum_is_flagged_and_finished_to_the_valid_one(
            v4 in any::<bool>(), tcp in any::<bool>(), payload in 0usize..1400, fill in any::<u8>(),
        ) {
            let (src, dst) = if v4 { ("10.1.0.1", "10.1.0.2") } else { ("fd00::1", "fd00::2") };
            let l4 = if tcp { L4Spec::Tcp { src_port: 1, dst_port: 2, flags: 0x10 } } else { L4Spec::Udp { src_port: 1, dst_port: 2 } };
            let s = FrameSpec {
                outer: None, vni: 1, inner_src_mac: MacAddr([2, 0, 0, 0, 0, 1]), inner_dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
                src: src.parse().unwrap(), dst: dst.parse().unwrap(), l4, payload_len: payload, payload_byte: fill,
            };
            let mut d = vec![0; frame_len(&s)];
            build(&s, &mut d).unwrap();
            let l3 = vxlan::HEADER_LEN + 14;
            let l4_off = if v4 { 20 } else { 40 };
            let (proto, at) = if tcp { (ip_proto::TCP, 16) } else { (ip_proto::UDP, 6) };
            let good = d.clone();
            // Complete: flagged by the parse only if its checksum happens to equal the partial
            // sum, and then finishing it computes it again, to itself.
            let lay = parse_inner(&d[vxlan::HEADER_LEN..]).unwrap();
            prop_assert_eq!(lay.l4_partial, checksum::l4_field_is_pseudo(&d[l3..], l4_off, proto));
            fill_l4_checksum(&mut d[l3..], l4_off, proto);
            prop_assert_eq!(&d, &good);
            // Partial, as an offloading sender (or the node's segmentation) leaves it.
            let ip = &mut d[l3..];
            fill_l4_partial(ip, l4_off, proto);
            let ph = checksum::fold(checksum::ip_pseudo_header(ip, proto, (ip.len() - l4_off) as u32));
            prop_assert_eq!(u16::from_be_bytes([ip[l4_off + at], ip[l4_off + at + 1]]), ph);
            // The parse flags it, its fast path (IPv4) as its general one; finished, it is the
            // valid checksum.
            let lay = parse_inner(&d[vxlan::HEADER_LEN..]).unwrap();
            prop_assert!(lay.l4_partial);
            prop_assert_eq!(lay, crate::layout::parse_inner_general(&d[vxlan::HEADER_LEN..]).unwrap());
            fill_l4_checksum(&mut d[l3..], l4_off, proto);
            prop_assert_eq!(&d, &good);
            // Corrupt (neither valid nor partial): not flagged, for the receiver to drop.
            let mut bad = good.clone();
            let f = u16::from_be_bytes([bad[l3 + l4_off + at], bad[l3 + l4_off + at + 1]]) ^ 0x0101;
            put16(&mut bad[l3..], l4_off + at, f);
            if f != ph {
                prop_assert!(!parse_inner(&bad[vxlan::HEADER_LEN..]).unwrap().l4_partial);
            }
        }
    }

    fn ip_strategy(v4: bool) -> BoxedStrategy<IpAddr> {
        if v4 {
            any::<[u8; 4]>().prop_map(IpAddr::from).boxed()
        } else {
            any::<[u8; 16]>().prop_map(IpAddr::from).boxed()
        }
    }

    fn l4_strategy() -> impl Strategy<Value = L4Spec> {
        prop_oneof![
            (any::<u16>(), any::<u16>()).prop_map(|(s, d)| L4Spec::Udp { src_port: s, dst_port: d }),
            (any::<u16>(), any::<u16>(), any::<u8>()).prop_map(|(s, d, f)| L4Spec::Tcp { src_port: s, dst_port: d, flags: f }),
            (any::<u16>(), any::<u16>()).prop_map(|(i, q)| L4Spec::Icmp { msg_type: 8, ident: i, seq: q }),
        ]
    }

    fn spec_strategy() -> impl Strategy<Value = FrameSpec> {
        (any::<bool>(), any::<bool>(), any::<bool>()).prop_flat_map(|(inner_v4, outer_v4, with_outer)| {
            let outer = (ip_strategy(outer_v4), ip_strategy(outer_v4), any::<[u8; 6]>(), any::<[u8; 6]>(), any::<u16>())
                .prop_map(|(s, d, sm, dm, p)| OuterSpec { src_mac: MacAddr(sm), dst_mac: MacAddr(dm), src_ip: s, dst_ip: d, src_port: p });
            (
                if with_outer { outer.prop_map(Some).boxed() } else { Just(None).boxed() },
                0u32..(1 << 24),
                any::<[u8; 6]>(),
                any::<[u8; 6]>(),
                ip_strategy(inner_v4),
                ip_strategy(inner_v4),
                l4_strategy(),
                0usize..1400,
                any::<u8>(),
            )
                .prop_map(|(outer, vni, sm, dm, src, dst, l4, n, b)| FrameSpec {
                    outer,
                    vni,
                    inner_src_mac: MacAddr(sm),
                    inner_dst_mac: MacAddr(dm),
                    src,
                    dst,
                    l4,
                    payload_len: n,
                    payload_byte: b,
                })
        })
    }

    proptest! {
        /// parse(emit(x)) == x for whole frames, outer and inner.
        #[test]
        fn whole_frame_roundtrip(s in spec_strategy()) {
            let mut buf = vec![0u8; 2048];
            let n = build(&s, &mut buf).unwrap();
            let f = &buf[..n];
            let (vx_off, vni) = match &s.outer {
                Some(o) => {
                    let l = parse_outer(f).unwrap();
                    prop_assert_eq!(l.src_ip, o.src_ip);
                    prop_assert_eq!(l.dst_ip, o.dst_ip);
                    prop_assert_eq!(l.src_mac, o.src_mac);
                    prop_assert_eq!(l.src_port, o.src_port);
                    prop_assert_eq!(l.vxlan_len as usize, n - l.vxlan_off as usize);
                    (l.vxlan_off as usize, l.vni)
                }
                None => (0, parse_vxlan(f).unwrap()),
            };
            prop_assert_eq!(vni, s.vni);
            let inner = &f[vx_off + 8..];
            let i = parse_inner(inner).unwrap();
            prop_assert_eq!(i.src_mac, s.inner_src_mac);
            prop_assert_eq!(i.dst_mac, s.inner_dst_mac);
            prop_assert_eq!(i.l3, if s.src.is_ipv4() { InnerL3::Ipv4 } else { InnerL3::Ipv6 });
            prop_assert_eq!(i.key.src, s.src);
            prop_assert_eq!(i.key.dst, s.dst);
            match s.l4 {
                L4Spec::Udp { src_port, dst_port } | L4Spec::Tcp { src_port, dst_port, .. } => {
                    prop_assert_eq!((i.key.src_port, i.key.dst_port), (src_port, dst_port));
                }
                L4Spec::Icmp { ident, .. } => prop_assert_eq!((i.key.src_port, i.key.dst_port), (ident, ident)),
            }
            let ip = &inner[i.l3_off as usize..i.l3_end as usize];
            prop_assert!(verify_l4_checksum(ip, (i.l4_off - i.l3_off) as usize, i.key.proto));
        }

        /// Every prefix of a valid frame is either parsed consistently or rejected; never a panic.
        #[test]
        fn truncations_never_panic(s in spec_strategy(), cut in any::<prop::sample::Index>()) {
            let mut buf = vec![0u8; 2048];
            let n = build(&s, &mut buf).unwrap();
            crate::layout::fuzz_parse(&buf[..cut.index(n + 1)]);
        }

        /// Random bit flips never panic.
        #[test]
        fn corruptions_never_panic(s in spec_strategy(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
            let mut buf = vec![0u8; 2048];
            let n = build(&s, &mut buf).unwrap();
            for (i, x) in flips { buf[i.index(n)] ^= x; }
            crate::layout::fuzz_parse(&buf[..n]);
        }
    }
}
