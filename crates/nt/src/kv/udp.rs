//! The IPv4/UDP frames the KV NTs read and rewrite: where the headers are, and rewrites that
//! keep lengths and checksums right (swapping a request into its reply, pointing a copy at
//! another server, answering in a server's name).

use crate::Pkt;
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::InnerL3;
use snic_wire::{build::fill_l4_checksum, checksum, ip_proto};
use std::net::Ipv4Addr;

/// Offsets of an inner IPv4/UDP frame's parts in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Udp4 {
    /// The inner Ethernet header.
    pub eth: usize,
    /// The IPv4 header.
    pub l3: usize,
    /// The UDP header.
    pub l4: usize,
    /// The UDP payload.
    pub pay: usize,
    /// One past the IP packet.
    pub end: usize,
}

impl Udp4 {
    /// The parts of `pkt` if it is an inner IPv4/UDP frame whose offsets fit its buffer.
    pub fn of(pkt: &Pkt<'_>) -> Option<Udp4> {
        let inner = pkt.meta.inner?;
        if inner.l3 != InnerL3::Ipv4 || inner.key.proto != ip_proto::UDP {
            return None;
        }
        let eth = pkt.meta.off as usize + snic_wire::vxlan::HEADER_LEN;
        let u = Udp4 {
            eth,
            l3: eth + inner.l3_off as usize,
            l4: eth + inner.l4_off as usize,
            pay: eth + inner.l4_off as usize + 8,
            end: eth + inner.l3_end as usize,
        };
        (u.pay <= u.end && u.end <= pkt.buf.len()).then_some(u)
    }

    /// The same parts in a copy of the buffer's bytes moved from offset `from` to `to`.
    pub fn shifted(self, from: usize, to: usize) -> Udp4 {
        let m = |x: usize| x - from + to;
        Udp4 { eth: m(self.eth), l3: m(self.l3), l4: m(self.l4), pay: m(self.pay), end: m(self.end) }
    }
}

/// An inner IPv4 UDP packet the data plane could not parse to its ports (a fragment): where its
/// parts are in its VXLAN datagram, and what its IP header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment4 {
    /// Its parts, as offsets in the VXLAN datagram (`end`: the fragment's; `l4` and `pay` mean
    /// something only in the first fragment, and may lie past `end` in a malformed one).
    pub u: Udp4,
    /// Offset 0: it carries the UDP header and the start of the payload.
    pub first: bool,
    /// More fragments follow.
    pub more: bool,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

/// The VXLAN datagram `d` as an inner IPv4 UDP packet read from its IP header alone; `None` if
/// its inner frame is not IPv4 (untagged), its header is cut short, or it is not UDP.
pub fn fragment(d: &[u8]) -> Option<Fragment4> {
    let eth = snic_wire::vxlan::HEADER_LEN;
    if d.get(eth + 12..eth + 14)? != [0x08, 0x00] {
        return None;
    }
    let ip = &d[eth + 14..];
    let ihl = (*ip.first()? & 0x0f) as usize * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip.len() < ihl || ip[9] != ip_proto::UDP {
        return None;
    }
    let l3 = eth + 14;
    let end = (l3 + u16::from_be_bytes([ip[2], ip[3]]) as usize).min(d.len());
    Some(Fragment4 {
        u: Udp4 { eth, l3, l4: l3 + ihl, pay: l3 + ihl + 8, end },
        first: u16::from_be_bytes([ip[6] & 0x1f, ip[7]]) == 0,
        more: ip[6] & 0x20 != 0,
        src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
    })
}

/// Sets the IPv4 total length and header checksum and the UDP length and checksum of the frame
/// `u`, whose IP packet now ends at `end`.
pub fn finish(b: &mut [u8], u: &Udp4, end: usize) {
    let (l3, l4) = (u.l3, u.l4);
    b[l3 + 2..l3 + 4].copy_from_slice(&((end - l3) as u16).to_be_bytes());
    b[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
    let ihl = (b[l3] & 0x0f) as usize * 4;
    let c = checksum::checksum(&b[l3..l3 + ihl]);
    b[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    b[l4 + 4..l4 + 6].copy_from_slice(&((end - l4) as u16).to_be_bytes());
    fill_l4_checksum(&mut b[l3..end], l4 - l3, ip_proto::UDP);
}

/// Makes the frame `u` a reply ending at `end`: Ethernet addresses, IP addresses and UDP ports
/// swapped, TTL reset, lengths and checksums set.
pub fn turn_around(b: &mut [u8], u: &Udp4, end: usize) {
    let (d, s) = b[u.eth..u.eth + 12].split_at_mut(6);
    d.swap_with_slice(s);
    let (src, dst) = b[u.l3 + 12..u.l3 + 20].split_at_mut(4);
    src.swap_with_slice(dst);
    let (sp, dp) = b[u.l4..u.l4 + 4].split_at_mut(2);
    sp.swap_with_slice(dp);
    b[u.l3 + 8] = 64;
    finish(b, u, end);
}

/// Points the frame `u` at `ip` (Ethernet destination `mac`), checksums fixed.
pub fn set_dst(b: &mut [u8], u: &Udp4, ip: Ipv4Addr, mac: MacAddr) {
    b[u.eth..u.eth + 6].copy_from_slice(&mac.0);
    b[u.l3 + 16..u.l3 + 20].copy_from_slice(&ip.octets());
    finish(b, u, u.end);
}

/// Makes the frame `u` come from `ip` (Ethernet source `mac`, if known), checksums fixed.
pub fn set_src(b: &mut [u8], u: &Udp4, ip: Ipv4Addr, mac: Option<MacAddr>) {
    if let Some(m) = mac {
        b[u.eth + 6..u.eth + 12].copy_from_slice(&m.0);
    }
    b[u.l3 + 12..u.l3 + 16].copy_from_slice(&ip.octets());
    finish(b, u, u.end);
}

/// Points the IPv4 fragment `u` (its `end` the fragment's) at `ip` (Ethernet destination
/// `mac`): the IP header checksum recomputed, and, in the `first` fragment, the UDP checksum
/// (which covers the whole datagram, most of it elsewhere) updated for the new address.
pub fn set_fragment_dst(b: &mut [u8], u: &Udp4, first: bool, ip: Ipv4Addr, mac: MacAddr) {
    b[u.eth..u.eth + 6].copy_from_slice(&mac.0);
    let old = u32::from_be_bytes([b[u.l3 + 16], b[u.l3 + 17], b[u.l3 + 18], b[u.l3 + 19]]);
    b[u.l3 + 16..u.l3 + 20].copy_from_slice(&ip.octets());
    b[u.l3 + 10..u.l3 + 12].copy_from_slice(&[0, 0]);
    let ihl = (b[u.l3] & 0x0f) as usize * 4;
    let c = checksum::checksum(&b[u.l3..u.l3 + ihl]);
    b[u.l3 + 10..u.l3 + 12].copy_from_slice(&c.to_be_bytes());
    let at = u.l4 + 6;
    if first && b.len() >= at + 2 {
        let c = u16::from_be_bytes([b[at], b[at + 1]]);
        if c != 0 {
            let n = checksum::update32(c, old, u32::from(ip));
            b[at..at + 2].copy_from_slice(&(if n == 0 { 0xffff } else { n }).to_be_bytes());
        }
    }
}
