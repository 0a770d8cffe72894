//! The composite parse the data plane does once per packet: outer headers down to VXLAN, then
//! the tenant's inner frame down to its flow key. The result is a small `Copy` layout of
//! offsets and fields that travels in the packet descriptor, so no later stage parses again
//! unless it changes the headers.

use crate::ethernet::{ethertype, EthernetFrame, MacAddr};
use crate::icmp::IcmpPacket;
use crate::ipv4::Ipv4Packet;
use crate::ipv6::Ipv6Packet;
use crate::tcp::TcpPacket;
use crate::udp::UdpPacket;
use crate::vxlan::{self, VxlanPacket};
use crate::{ip_proto, ParseError};
use core::net::{IpAddr, Ipv4Addr};

/// The outer headers of a VXLAN frame received as a whole Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OuterLayout {
    /// Offset of the VXLAN header from the start of the frame.
    pub vxlan_off: u16,
    /// Outer source MAC.
    pub src_mac: MacAddr,
    /// Outer destination MAC.
    pub dst_mac: MacAddr,
    /// Outer source IP (the sending VTEP).
    pub src_ip: IpAddr,
    /// Outer destination IP.
    pub dst_ip: IpAddr,
    /// Outer UDP source port (the sender's flow entropy).
    pub src_port: u16,
    /// VNI.
    pub vni: u32,
    /// Length of the VXLAN datagram (VXLAN header and inner frame) per the UDP length.
    pub vxlan_len: u16,
}

/// Parses outer Ethernet, IPv4 (no options, no fragments, valid checksum) or IPv6, UDP to
/// [`vxlan::PORT`] and the VXLAN header.
///
/// The common case — untagged IPv4 without options — takes a fast path with fixed offsets and
/// one bounds check; anything else, including every malformed frame, goes through the general
/// header-by-header parse, so errors are always named by it. A property test holds the two to the
/// same result on every input.
#[inline(always)]
pub fn parse_outer(frame: &[u8]) -> Result<OuterLayout, ParseError> {
    match parse_outer_fast(frame) {
        Some(l) => Ok(l),
        None => parse_outer_general(frame),
    }
}

#[inline(always)]
fn arr<const N: usize>(f: &[u8], at: usize) -> [u8; N] {
    f[at..at + N].try_into().expect("length checked by the caller")
}

#[inline(always)]
fn parse_outer_fast(f: &[u8]) -> Option<OuterLayout> {
    // Whole-word loads: the fields are read as arrays (one load each), not byte by byte.
    if f.len() < 50 || u16::from_be_bytes(arr(f, 12)) != 0x0800 || f[14] != 0x45 || f[23] != ip_proto::UDP {
        return None;
    }
    let tl = u16::from_be_bytes(arr(f, 16)) as usize;
    if tl < 36 || 14 + tl > f.len() || u16::from_be_bytes(arr(f, 20)) & 0x3fff != 0 {
        return None;
    }
    if crate::checksum::ipv4_header(&arr(f, 14)) != 0 {
        return None;
    }
    let ul = u16::from_be_bytes(arr(f, 38)) as usize;
    if ul != tl - 20 || u16::from_be_bytes(arr(f, 36)) != vxlan::PORT || f[42] & vxlan::FLAG_I == 0 {
        return None;
    }
    Some(OuterLayout {
        vxlan_off: 42,
        src_mac: MacAddr(arr(f, 6)),
        dst_mac: MacAddr(arr(f, 0)),
        src_ip: IpAddr::V4(Ipv4Addr::from(u32::from_be_bytes(arr(f, 26)))),
        dst_ip: IpAddr::V4(Ipv4Addr::from(u32::from_be_bytes(arr(f, 30)))),
        src_port: u16::from_be_bytes(arr(f, 34)),
        vni: u32::from_be_bytes(arr(f, 46)) >> 8,
        vxlan_len: (ul - 8) as u16,
    })
}

/// The general (header by header) form of [`parse_outer`].
pub fn parse_outer_general(frame: &[u8]) -> Result<OuterLayout, ParseError> {
    let eth = EthernetFrame::new_checked(frame)?;
    let l3 = eth.header_len();
    let (src_ip, dst_ip, l4, l4_end) = match eth.ethertype() {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(&frame[l3..])?;
            if ip.header_len() != crate::ipv4::HEADER_LEN {
                return Err(ParseError::IpOptions);
            }
            if ip.is_fragment() {
                return Err(ParseError::Fragment);
            }
            if !ip.verify_checksum() {
                return Err(ParseError::BadIpChecksum);
            }
            if ip.protocol() != ip_proto::UDP {
                return Err(ParseError::NotUdp);
            }
            (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()), l3 + 20, l3 + ip.total_len())
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(&frame[l3..])?;
            let (nh, off) = ip.upper_layer()?;
            if nh != ip_proto::UDP {
                return Err(ParseError::NotUdp);
            }
            (IpAddr::V6(ip.src()), IpAddr::V6(ip.dst()), l3 + off, l3 + 40 + ip.payload_len())
        }
        _ => return Err(ParseError::UnknownEtherType),
    };
    let udp = UdpPacket::new_checked(&frame[l4..l4_end])?;
    if udp.len() != l4_end - l4 {
        return Err(ParseError::BadUdpLength);
    }
    if udp.dst_port() != vxlan::PORT {
        return Err(ParseError::NotVxlanPort);
    }
    let vx_off = l4 + crate::udp::HEADER_LEN;
    let vx = VxlanPacket::new_checked(&frame[vx_off..l4_end])?;
    Ok(OuterLayout {
        vxlan_off: vx_off as u16,
        src_mac: eth.src(),
        dst_mac: eth.dst(),
        src_ip,
        dst_ip,
        src_port: udp.src_port(),
        vni: vx.vni(),
        vxlan_len: (l4_end - vx_off) as u16,
    })
}

/// Parses a VXLAN datagram (as received on a UDP socket) and returns its VNI.
pub fn parse_vxlan(datagram: &[u8]) -> Result<u32, ParseError> {
    Ok(VxlanPacket::new_checked(datagram)?.vni())
}

/// A flow's 5-tuple. For ICMP echo the identifier stands in for both ports; other ICMP
/// messages and non-IP frames have ports 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol (0 for non-IP).
    pub proto: u8,
    /// Source port (or echo identifier).
    pub src_port: u16,
    /// Destination port (or echo identifier).
    pub dst_port: u16,
}

/// Hashes through [`FlowKey::hash64`]: one word into the hasher instead of the derived
/// byte-by-byte walk over two `IpAddr` enums (NAT and firewall tables are keyed by flows).
impl core::hash::Hash for FlowKey {
    #[inline]
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash64());
    }
}

impl FlowKey {
    /// The key of the reply direction.
    pub fn reversed(&self) -> FlowKey {
        FlowKey { src: self.dst, dst: self.src, proto: self.proto, src_port: self.dst_port, dst_port: self.src_port }
    }

    /// A fast 64-bit hash of the 5-tuple, used to keep a flow on one instance.
    pub fn hash64(&self) -> u64 {
        fn ip64(a: &IpAddr) -> u64 {
            match a {
                IpAddr::V4(v) => u32::from_be_bytes(v.octets()) as u64,
                IpAddr::V6(v) => {
                    let o = v.octets();
                    let hi = u64::from_be_bytes([o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]]);
                    let lo = u64::from_be_bytes([o[8], o[9], o[10], o[11], o[12], o[13], o[14], o[15]]);
                    hi ^ lo.rotate_left(29)
                }
            }
        }
        mix(ip64(&self.src), ip64(&self.dst), self.proto, self.src_port, self.dst_port)
    }

    /// [`FlowKey::hash64`] of an IPv4 key given as numbers (addresses as `u32::from`), for
    /// tables that keep keys packed.
    #[inline]
    pub fn hash_v4(src: u32, dst: u32, proto: u8, src_port: u16, dst_port: u16) -> u64 {
        mix(src as u64, dst as u64, proto, src_port, dst_port)
    }
}

/// The mixing step of [`FlowKey::hash64`], on the addresses already folded to 64 bits.
#[inline]
fn mix(src: u64, dst: u64, proto: u8, src_port: u16, dst_port: u16) -> u64 {
    let mut h = src.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= dst.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    h ^= ((proto as u64) << 32 | (src_port as u64) << 16 | dst_port as u64).wrapping_mul(0x1656_67b1_9e37_79f9);
    h ^= h >> 31;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 29)
}

/// What the inner frame carries at layer 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InnerL3 {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// ARP (passed through; matched only by VNI-wide rules).
    Arp,
}

/// The tenant's inner frame, parsed. Offsets are from the start of the inner Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerLayout {
    /// Inner destination MAC.
    pub dst_mac: MacAddr,
    /// Inner source MAC.
    pub src_mac: MacAddr,
    /// Layer-3 kind.
    pub l3: InnerL3,
    /// Offset of the IP (or ARP) header.
    pub l3_off: u16,
    /// Offset of the L4 header (equal to the end of the IP packet when there is none).
    pub l4_off: u16,
    /// Offset one past the IP packet (Ethernet padding excluded).
    pub l3_end: u16,
    /// The flow key.
    pub key: FlowKey,
    /// TCP flags, or the ICMP type; 0 otherwise.
    pub l4_flags: u8,
    /// The TCP or UDP checksum field holds the pseudo-header's folded sum: the sender may have
    /// left it partial, for a NIC to finish ([`crate::checksum::l4_field_is_pseudo`];
    /// the node finishes it where it must be whole, `snic_nt::PktMeta::finish_checksum`).
    pub l4_partial: bool,
}

const UNSPEC: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// Parses the inner Ethernet frame of a VXLAN packet down to its flow key. Fragments are
/// rejected ([`ParseError::Fragment`]): ports would be invisible to firewall and NAT. IPv4
/// options on the inner header are allowed (they are the tenant's business).
///
/// Like [`parse_outer`], untagged IPv4 TCP/UDP without options takes a fast path held to the
/// general parse by a property test.
// Always inlined: returned out of line, the layout was written to the stack byte by byte and
// reloaded at once in wider loads, a store-forwarding stall that cost 13% of the dispatcher.
#[inline(always)]
pub fn parse_inner(frame: &[u8]) -> Result<InnerLayout, ParseError> {
    let mut out = None;
    if parse_inner_fast(frame, &mut out) {
        if let Some(l) = out {
            return Ok(l);
        }
    }
    parse_inner_general(frame)
}

/// [`parse_inner`] written straight into `out` (`None` on error). The data plane parses into
/// its descriptor this way: a layout built on the stack and copied in was stored field by
/// field and reloaded 16 bytes at a time, which stalled store forwarding on every packet.
#[inline(always)]
pub fn parse_inner_into(frame: &[u8], out: &mut Option<InnerLayout>) -> Result<(), ParseError> {
    if parse_inner_fast(frame, out) {
        return Ok(());
    }
    match parse_inner_general(frame) {
        Ok(l) => {
            *out = Some(l);
            Ok(())
        }
        Err(e) => {
            *out = None;
            Err(e)
        }
    }
}

/// The fast path: true with `out` written, false (and `out` untouched) when the general
/// parse must decide.
#[inline(always)]
fn parse_inner_fast(f: &[u8], out: &mut Option<InnerLayout>) -> bool {
    if f.len() < 34 || u16::from_be_bytes(arr(f, 12)) != 0x0800 || f[14] != 0x45 {
        return false;
    }
    let tl = u16::from_be_bytes(arr(f, 16)) as usize;
    if tl < 20 || 14 + tl > f.len() || u16::from_be_bytes(arr(f, 20)) & 0x3fff != 0 {
        return false;
    }
    let seg = tl - 20;
    let proto = f[23];
    let (fl, field) = match proto {
        ip_proto::UDP if seg >= 8 => {
            let ul = u16::from_be_bytes(arr(f, 38)) as usize;
            if ul < 8 || ul > seg {
                return false;
            }
            (0, u16::from_be_bytes(arr(f, 40)))
        }
        ip_proto::TCP if seg >= 20 => {
            let off = ((f[46] >> 4) as usize) * 4;
            if off < 20 || off > seg {
                return false;
            }
            (f[47], u16::from_be_bytes(arr(f, 50)))
        }
        _ => return false,
    };
    let ports = u32::from_be_bytes(arr(f, 34));
    let (s, d) = (u32::from_be_bytes(arr(f, 26)), u32::from_be_bytes(arr(f, 30)));
    // The pseudo-header's folded sum against the checksum field (`checksum::l4_field_is_pseudo`,
    // from the words at hand: a handful of instructions). (< 2^19: two folds reach 16 bits.)
    let acc = (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + proto as u32 + seg as u32;
    let acc = (acc & 0xffff) + (acc >> 16);
    let partial = field as u32 == (acc & 0xffff) + (acc >> 16);
    let (src, dst) = (Ipv4Addr::from(s), Ipv4Addr::from(d));
    // Field by field into the layout the descriptor holds already (the usual case): a whole
    // layout assigned was built on the stack and copied 16 bytes at a time, reloading narrow
    // stores just made.
    let l = out.get_or_insert(STALE);
    l.dst_mac = MacAddr(arr(f, 0));
    l.src_mac = MacAddr(arr(f, 6));
    l.l3 = InnerL3::Ipv4;
    l.l3_off = 14;
    l.l4_off = 34;
    l.l3_end = (14 + tl) as u16;
    l.key.src = IpAddr::V4(src);
    l.key.dst = IpAddr::V4(dst);
    l.key.proto = proto;
    l.key.src_port = (ports >> 16) as u16;
    l.key.dst_port = ports as u16;
    l.l4_flags = fl;
    l.l4_partial = partial;
    true
}

/// The general (header by header) form of [`parse_inner`].
pub fn parse_inner_general(frame: &[u8]) -> Result<InnerLayout, ParseError> {
    let eth = EthernetFrame::new_checked(frame)?;
    let l3 = eth.header_len();
    let (l3kind, src, dst, proto, l4, end) = match eth.ethertype() {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(&frame[l3..])?;
            if ip.is_fragment() {
                return Err(ParseError::Fragment);
            }
            (InnerL3::Ipv4, IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()), ip.protocol(), l3 + ip.header_len(), l3 + ip.total_len())
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(&frame[l3..])?;
            let (nh, off) = ip.upper_layer()?;
            (InnerL3::Ipv6, IpAddr::V6(ip.src()), IpAddr::V6(ip.dst()), nh, l3 + off, l3 + 40 + ip.payload_len())
        }
        ethertype::ARP => {
            let end = frame.len();
            return Ok(InnerLayout {
                dst_mac: eth.dst(),
                src_mac: eth.src(),
                l3: InnerL3::Arp,
                l3_off: l3 as u16,
                l4_off: end as u16,
                l3_end: end as u16,
                key: FlowKey { src: UNSPEC, dst: UNSPEC, proto: 0, src_port: 0, dst_port: 0 },
                l4_flags: 0,
                l4_partial: false,
            });
        }
        _ => return Err(ParseError::UnknownInnerL3),
    };
    let seg = &frame[l4..end];
    let (sp, dp, fl) = match proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(seg)?;
            (t.src_port(), t.dst_port(), t.flags())
        }
        ip_proto::UDP => {
            let u = UdpPacket::new_checked(seg)?;
            (u.src_port(), u.dst_port(), 0)
        }
        ip_proto::ICMP | ip_proto::ICMPV6 => {
            let i = IcmpPacket::new_checked(seg)?;
            let id = if crate::icmp::is_echo(i.msg_type()) { i.ident() } else { 0 };
            (id, id, i.msg_type())
        }
        _ => (0, 0, 0),
    };
    Ok(InnerLayout {
        dst_mac: eth.dst(),
        src_mac: eth.src(),
        l3: l3kind,
        l3_off: l3 as u16,
        l4_off: l4 as u16,
        l3_end: end as u16,
        key: FlowKey { src, dst, proto, src_port: sp, dst_port: dp },
        l4_flags: fl,
        l4_partial: crate::checksum::l4_field_is_pseudo(&frame[l3..end], l4 - l3, proto),
    })
}

/// A layout to overwrite field by field ([`parse_inner_fast`]); also another packet's layout
/// left in a descriptor the fuzz harness parses into.
const STALE: InnerLayout = InnerLayout {
    dst_mac: MacAddr([2, 0, 0, 0, 0, 1]),
    src_mac: MacAddr([2, 0, 0, 0, 0, 2]),
    l3: InnerL3::Ipv6,
    l3_off: 18,
    l4_off: 58,
    l3_end: 99,
    key: FlowKey { src: UNSPEC, dst: UNSPEC, proto: 17, src_port: 1, dst_port: 2 },
    l4_flags: 3,
    l4_partial: true,
};

/// The harness shared by the cargo-fuzz target and the corpus-replay test: parse arbitrary bytes
/// every way the data plane does, and touch every accessor. It must never panic, and the fast
/// paths must agree with the general parses.
pub fn fuzz_parse(data: &[u8]) {
    assert_eq!(parse_outer(data), parse_outer_general(data), "outer fast path disagrees");
    assert_eq!(parse_inner(data), parse_inner_general(data), "inner fast path disagrees");
    // In place, over a descriptor that held another packet's layout.
    let mut held = Some(STALE);
    let got = parse_inner_into(data, &mut held);
    assert_eq!(got.map(|()| held), parse_inner_general(data).map(Some), "in-place parse disagrees");
    assert!(got.is_ok() || held.is_none(), "a failed in-place parse leaves no layout");
    if data.len() > 50 {
        assert_eq!(parse_inner(&data[50..]), parse_inner_general(&data[50..]), "inner fast path disagrees");
    }
    if let Ok(o) = parse_outer(data) {
        let start = o.vxlan_off as usize + vxlan::HEADER_LEN;
        let end = o.vxlan_off as usize + o.vxlan_len as usize;
        if let Ok(i) = parse_inner(&data[start..end]) {
            let _ = i.key.hash64();
            assert!(i.l3_off <= i.l4_off && i.l4_off <= i.l3_end);
            assert!(i.l3_end as usize <= end - start);
        }
    }
    let _ = parse_vxlan(data);
    if let Ok(i) = parse_inner(data) {
        assert!(i.l3_end as usize <= data.len());
    }
}
