//! Cutting a TCP super-packet into segments, as a NIC's TCP segmentation offload would.
//!
//! An endpoint that keeps its transmit offloads hands its VXLAN device TCP bursts of up to 64 KB
//! and nothing segments them on the way: the node's socket receives one VXLAN datagram holding
//! one inner IP packet of tens of KB, its TCP checksum left partial, with the MSS to cut it at in
//! the `UDP_GRO` control message. [`Super::of`] recognises such a datagram; [`Super::write`]
//! builds segment `k`: the same VXLAN, Ethernet and IP headers with its own lengths, IPv4
//! identification and header checksum, the TCP header with its sequence number, FIN and PSH on
//! the last segment only and CWR on the first only (RFC 9293 §3.1 and Linux's
//! `tcp_gso_segment`), and a complete TCP checksum — or, [`Super::leaving_partial`], the
//! checksum left *partial* as the sender left the whole one, for a node that may join the
//! segments back for a device that finishes it ([`finish_partial`] finishes one).
//!
//! The other way, [`Joined::of`]: datagrams that carry consecutive segments of one inner
//! TCP/IPv4 flow (what a run received with `UDP_GRO` holds, once the node ran them) are joined
//! back into one super-packet — its headers ([`Joined::write_headers`]) and the segments'
//! payloads in order — for a device that segments it again on its way (a tap with UDP tunnel
//! GSO, `backend::tap` in the data plane). Cutting the joined packet at its MSS gives back the
//! same segments: the join accepts only what the kernel's segmentation would reproduce (same
//! headers but for lengths, identification, sequence number, checksums and the flags the
//! segmentation places: CWR on the first, PSH and FIN on the last), every segment full but the
//! last, and each segment's own checksum valid or left partial (a corrupt segment is never made
//! whole again; a partial one is finished on the way, as the node would have finished it).

use crate::build::{fill_l4_checksum, fill_l4_partial};
use crate::ethernet::{ethertype, HEADER_LEN as ETH_LEN, VLAN_TAG_LEN};
use crate::tcp::flags;
use crate::{be16, be32, checksum, ip_proto, put16, put32, vxlan};

/// TCP's CWR flag (not among [`flags`]).
const CWR: u8 = 0x80;

/// The layout of a VXLAN datagram that carries one inner TCP packet to cut at `mss`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Super {
    /// Offset of the inner IP header.
    l3: u16,
    /// Offset of the TCP header.
    l4: u16,
    /// Length of the headers (VXLAN to TCP options): each segment's first bytes.
    hdrs: u16,
    /// Total length (the datagram's).
    len: u32,
    /// Payload bytes per segment.
    mss: u16,
    v4: bool,
    /// Each segment's TCP checksum is left partial ([`Super::leaving_partial`]).
    partial: bool,
}

/// The offset of the inner IP header of a VXLAN datagram and whether it is IPv4; `None` if the
/// inner frame is not IP.
fn inner_l3(d: &[u8]) -> Option<(usize, bool)> {
    let mut at = vxlan::HEADER_LEN + ETH_LEN;
    let mut et = be16(d.get(..at)?, at - 2);
    if et == ethertype::VLAN {
        at += VLAN_TAG_LEN;
        et = be16(d.get(..at)?, at - 2);
    }
    match et {
        ethertype::IPV4 => Some((at, true)),
        ethertype::IPV6 => Some((at, false)),
        _ => None,
    }
}

/// True if `d`, a message of several datagrams run together (a coalesced run), is instead one
/// datagram whose inner IP packet fills all of it: an unsegmented super-packet, whatever it
/// carries. (A run's first datagram holds an inner packet shorter than the message.)
pub fn is_one_packet(d: &[u8]) -> bool {
    let Some((l3, v4)) = inner_l3(d) else { return false };
    let Some(h) = d.get(l3..l3 + if v4 { 20 } else { 40 }) else { return false };
    let ip_len = if v4 { be16(h, 2) as usize } else { 40 + be16(h, 4) as usize };
    l3 + ip_len == d.len()
}

impl Super {
    /// The layout of `d` if it is one VXLAN datagram whose inner packet is TCP (IPv4 with any
    /// options but not a fragment, or IPv6 without extension headers) with more than `mss`
    /// payload bytes; `None` otherwise.
    pub fn of(d: &[u8], mss: usize) -> Option<Super> {
        let (l3, v4) = inner_l3(d)?;
        let (l4, ip_len) = if v4 {
            let h = d.get(l3..l3 + 20)?;
            let ihl = (h[0] & 0xf) as usize * 4;
            let frag = be16(h, 6) & 0x3fff;
            if h[0] >> 4 != 4 || ihl < 20 || h[9] != ip_proto::TCP || frag != 0 {
                return None;
            }
            (l3 + ihl, be16(h, 2) as usize)
        } else {
            let h = d.get(l3..l3 + 40)?;
            if h[0] >> 4 != 6 || h[6] != ip_proto::TCP {
                return None;
            }
            (l3 + 40, 40 + be16(h, 4) as usize)
        };
        let doff = (*d.get(l4 + 12)? >> 4) as usize * 4;
        let hdrs = l4 + doff;
        if doff < 20 || l3 + ip_len != d.len() || hdrs > d.len() || mss == 0 || d.len() - hdrs <= mss || hdrs + mss > u16::MAX as usize {
            return None;
        }
        Some(Super { l3: l3 as u16, l4: l4 as u16, hdrs: hdrs as u16, len: d.len() as u32, mss: mss as u16, v4, partial: false })
    }

    /// The same, its segments' TCP checksums left partial (`partial`) or complete: partial
    /// costs no sum over the payload, for segments that may be joined back into a burst whose
    /// device finishes them (the node finishes any that leave alone).
    pub fn leaving_partial(self, partial: bool) -> Super {
        Super { partial, ..self }
    }

    /// As [`Super::of`], cut so that each segment's inner IP packet is at most `ip_max` bytes:
    /// for a super-packet that came without its MSS (the kernel gives a tunnel packet's none).
    pub fn of_ip_max(d: &[u8], ip_max: usize) -> Option<Super> {
        let s = Super::of(d, 1)?;
        let mss = ip_max.checked_sub(s.hdrs as usize - s.l3 as usize).filter(|&m| m > 0)?;
        Super::of(d, mss)
    }

    /// Segments it makes.
    pub fn segments(&self) -> usize {
        (self.len as usize - self.hdrs as usize).div_ceil(self.mss as usize)
    }

    /// Segment `k`'s length.
    pub fn segment_len(&self, k: usize) -> usize {
        let payload = self.len as usize - self.hdrs as usize;
        self.hdrs as usize + (payload - k * self.mss as usize).min(self.mss as usize)
    }

    /// Writes segment `k` of `d` (the datagram [`Super::of`] read) into `out`, which holds at
    /// least [`Super::segment_len`] bytes; returns its length.
    pub fn write(&self, d: &[u8], k: usize, out: &mut [u8]) -> usize {
        let (l3, l4, hdrs, mss) = (self.l3 as usize, self.l4 as usize, self.hdrs as usize, self.mss as usize);
        let n = self.segment_len(k);
        let from = hdrs + k * mss;
        out[..hdrs].copy_from_slice(&d[..hdrs]);
        out[hdrs..n].copy_from_slice(&d[from..from + n - hdrs]);
        let ip = &mut out[l3..n];
        if self.v4 {
            let ihl = l4 - l3;
            put16(ip, 2, (n - l3) as u16);
            put16(ip, 4, be16(ip, 4).wrapping_add(k as u16));
            put16(ip, 10, 0);
            let c = checksum::checksum(&ip[..ihl]);
            put16(ip, 10, c);
        } else {
            put16(ip, 4, (n - l4) as u16);
        }
        let t = l4 - l3;
        put32(ip, t + 4, be32(ip, t + 4).wrapping_add((k * mss) as u32));
        let mut f = ip[t + 13];
        if k + 1 < self.segments() {
            f &= !(flags::FIN | flags::PSH);
        }
        if k > 0 {
            f &= !CWR;
        }
        ip[t + 13] = f;
        if self.partial {
            fill_l4_partial(ip, t, ip_proto::TCP);
        } else {
            fill_l4_checksum(ip, t, ip_proto::TCP);
        }
        n
    }
}

/// TCP's ECE flag.
const ECE: u8 = 0x40;

/// The most bytes of an outer IPv4 packet: a joined super-packet's VXLAN datagram behind its
/// outer IPv4 and UDP headers fits in it.
pub const JOINED_MAX: usize = u16::MAX as usize - 28;

/// The datagrams, from the first, that join into one super-packet (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    /// Offset of the inner IPv4 header.
    pub l3: usize,
    /// Offset of the TCP header.
    pub l4: usize,
    /// Length of each datagram's headers (VXLAN to TCP options): where its payload begins.
    pub hdrs: usize,
    /// How many datagrams join (at least 2).
    pub count: usize,
    /// Their payload bytes in all.
    pub payload: usize,
    /// Payload bytes per segment (the first's): the size to cut at again.
    pub mss: usize,
}

impl Joined {
    /// How the first of the `n` datagrams `get(0)`, `get(1)`, … join: the longest run from
    /// the first that joins, if it holds two or more. IPv4 inner packets only.
    pub fn of<'a>(n: usize, get: impl Fn(usize) -> &'a [u8]) -> Option<Joined> {
        if n < 2 {
            return None;
        }
        let f = get(0);
        let (l3, true) = inner_l3(f)? else { return None };
        let h = f.get(l3..l3 + 20)?;
        let ihl = (h[0] & 0xf) as usize * 4;
        if h[0] >> 4 != 4 || ihl < 20 || h[9] != ip_proto::TCP {
            return None;
        }
        let l4 = l3 + ihl;
        let hdrs = l4 + (*f.get(l4 + 12)? >> 4) as usize * 4;
        let mss = f.len().checked_sub(hdrs).filter(|&m| m > 0 && hdrs >= l4 + 20)?;
        let (mut count, mut payload, mut seq) = (0, 0usize, be32(f, l4 + 4));
        while count < n {
            let d = get(count);
            let last = count + 1 == n;
            let Some(p) = d.len().checked_sub(hdrs) else { break };
            let fits = p > 0 && p <= mss && l3 + (hdrs - l3) + payload + p <= JOINED_MAX;
            if !fits || !same_flow(f, d, l3, l4, hdrs) || be32(d, l4 + 4) != seq || !verify(d, l3, l4) {
                break;
            }
            let fl = d[l4 + 13];
            let (first, more) = (count == 0, !last && p == mss);
            // CWR only on the first; PSH and FIN end the run (the segment is its last).
            let ece_differs = (fl ^ f[l4 + 13]) & ECE != 0;
            if fl & !(CWR | ECE | flags::PSH | flags::FIN) != flags::ACK || (fl & CWR != 0 && !first) || ece_differs {
                break;
            }
            count += 1;
            payload += p;
            seq = seq.wrapping_add(p as u32);
            if fl & (flags::PSH | flags::FIN) != 0 || !more {
                break;
            }
        }
        (count >= 2).then_some(Joined { l3, l4, hdrs, count, payload, mss })
    }

    /// Writes the super-packet's headers (`hdrs` bytes) into `out`: the first datagram's
    /// (`first`), its inner IPv4 length and checksum for the whole, the flags of the first
    /// (CWR) and of the last (`last`: PSH, FIN), and the TCP checksum left *partial* (the
    /// pseudo-header's folded sum over the whole length), for the device that segments it to
    /// finish per segment.
    pub fn write_headers(&self, first: &[u8], last: &[u8], out: &mut [u8]) {
        let (l3, l4, hdrs) = (self.l3, self.l4, self.hdrs);
        out[..hdrs].copy_from_slice(&first[..hdrs]);
        let ip = &mut out[l3..hdrs];
        put16(ip, 2, (hdrs - l3 + self.payload) as u16);
        put16(ip, 10, 0);
        let c = checksum::checksum(&ip[..l4 - l3]);
        put16(ip, 10, c);
        let t = l4 - l3;
        ip[t + 13] = (first[l4 + 13] & !(flags::PSH | flags::FIN)) | (last[l4 + 13] & (flags::PSH | flags::FIN));
        let tcp_len = (hdrs - l4 + self.payload) as u32;
        let pseudo = checksum::pseudo_header(&first[l3 + 12..l3 + 16], &first[l3 + 16..l3 + 20], ip_proto::TCP, tcp_len);
        put16(ip, t + 16, checksum::fold(pseudo));
    }
}

/// True if `d` is of `f`'s flow with `f`'s headers but for what segmentation changes (lengths,
/// identification, checksums, sequence number, flags): VXLAN and inner Ethernet, the IPv4
/// header's version, TOS, fragment flags (never a fragment), TTL, protocol, addresses and
/// options, TCP ports, acknowledgment, data offset, window, urgent pointer and options, and an
/// inner packet that fills the datagram.
fn same_flow(f: &[u8], d: &[u8], l3: usize, l4: usize, hdrs: usize) -> bool {
    let (fi, di) = (&f[l3..], &d[l3..]);
    d[..l3] == f[..l3]
        && di[0] == fi[0]
        && di[1] == fi[1]
        && be16(di, 2) as usize == d.len() - l3
        && be16(di, 6) & 0x3fff == 0
        && be16(di, 6) == be16(fi, 6)
        && di[8..10] == fi[8..10]
        && di[12..l4 - l3] == fi[12..l4 - l3]
        && d[l4..l4 + 4] == f[l4..l4 + 4]
        && d[l4 + 8..l4 + 13] == f[l4 + 8..l4 + 13]
        && d[l4 + 14..l4 + 16] == f[l4 + 14..l4 + 16]
        && d[l4 + 18..hdrs] == f[l4 + 18..hdrs]
}

/// True if the inner IPv4 header and TCP checksums of `d` verify.
fn verify(d: &[u8], l3: usize, l4: usize) -> bool {
    let ip = &d[l3..];
    checksum::checksum(&d[l3..l4]) == 0
        && (checksum::l4_field_is_pseudo(ip, l4 - l3, ip_proto::TCP) || crate::build::verify_l4_checksum(ip, l4 - l3, ip_proto::TCP))
}

/// Finishes the TCP or UDP checksum of the inner IP packet of the VXLAN datagram `d` (its
/// inner frame untagged or with one VLAN tag), which must be partial
/// ([`crate::build::fill_l4_partial`]); false (nothing written) if `d` holds no such packet.
pub fn finish_partial(d: &mut [u8]) -> bool {
    let Some((l3, v4)) = inner_l3(d) else { return false };
    let Some(h) = d.get(l3..l3 + if v4 { 20 } else { 40 }) else { return false };
    let (l4, end, proto) = if v4 { ((h[0] & 0xf) as usize * 4, be16(h, 2) as usize, h[9]) } else { (40, 40 + be16(h, 4) as usize, h[6]) };
    let Some(ip) = d.get_mut(l3..l3 + end) else { return false };
    if !matches!(proto, ip_proto::TCP | ip_proto::UDP) || l4 < 20 || !checksum::l4_field_is_pseudo(ip, l4, proto) {
        return false;
    }
    fill_l4_checksum(ip, l4, proto);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{build, frame_len, verify_l4_checksum, FrameSpec, L4Spec};
    use crate::ethernet::MacAddr;
    use crate::layout::{parse_inner, parse_vxlan, InnerL3};
    use proptest::prelude::*;

    fn spec(v4: bool, payload: usize, fl: u8) -> FrameSpec {
        let (src, dst) = if v4 { ("10.1.0.1", "10.1.0.2") } else { ("fd00::1", "fd00::2") };
        FrameSpec {
            outer: None,
            vni: 100,
            inner_src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            inner_dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            l4: L4Spec::Tcp { src_port: 40000, dst_port: 5201, flags: fl },
            payload_len: payload,
            payload_byte: 0,
        }
    }

    /// A super-packet of `payload` bytes (numbered), its TCP checksum left partial as an
    /// offloading sender leaves it (the pseudo-header sum only, here garbage: it must not
    /// matter).
    fn superpacket(v4: bool, payload: usize, fl: u8) -> Vec<u8> {
        let s = spec(v4, payload, fl);
        let mut d = vec![0; frame_len(&s)];
        build(&s, &mut d).unwrap();
        let hdrs = d.len() - payload;
        for (i, b) in d[hdrs..].iter_mut().enumerate() {
            *b = (i * 7 + i / 251) as u8;
        }
        let l4 = hdrs - 20;
        put16(&mut d, l4 + 16, 0x1234);
        d
    }

    proptest! {
        #[test]
        fn the_segments_carry_the_payload_in_order_each_a_valid_packet(
            v4 in any::<bool>(), payload in 1usize..66_000, mss in 500usize..1500, fin in any::<bool>(), cwr in any::<bool>(), partial in any::<bool>(),
        ) {
            let fl = flags::ACK | flags::PSH | if fin { flags::FIN } else { 0 } | if cwr { CWR } else { 0 };
            let d = superpacket(v4, payload, fl);
            if d.len() > 65_507 { return Ok(()); }
            let Some(s) = Super::of(&d, mss).map(|s| s.leaving_partial(partial)) else {
                prop_assert!(payload <= mss, "a packet longer than the MSS is a super-packet");
                return Ok(());
            };
            prop_assert!(is_one_packet(&d));
            prop_assert_eq!(s.segments(), payload.div_ceil(mss));
            let hdrs = d.len() - payload;
            let mut joined = Vec::new();
            let seq0 = be32(&d, hdrs - 20 + 4);
            let id0 = be16(&d, hdrs - 40 + 4);
            for k in 0..s.segments() {
                let mut out = vec![0u8; 2000];
                let n = s.write(&d, k, &mut out);
                let seg = &out[..n];
                prop_assert_eq!(n, s.segment_len(k));
                prop_assert!(n - hdrs <= mss);
                prop_assert_eq!(parse_vxlan(seg).unwrap(), 100);
                let lay = parse_inner(&seg[vxlan::HEADER_LEN..]).unwrap();
                prop_assert_eq!(lay.l3_end as usize, n - vxlan::HEADER_LEN, "the inner packet fills the segment");
                let l3 = vxlan::HEADER_LEN + ETH_LEN;
                let ip = &seg[l3..];
                match lay.l3 {
                    InnerL3::Ipv4 => {
                        prop_assert_eq!(be16(ip, 2) as usize, ip.len());
                        prop_assert_eq!(checksum::checksum(&ip[..20]), 0);
                        prop_assert_eq!(be16(ip, 4), id0.wrapping_add(k as u16));
                    }
                    _ => prop_assert_eq!(be16(ip, 4) as usize, ip.len() - 40),
                }
                let t = hdrs - l3 - 20;
                if partial {
                    prop_assert!(checksum::l4_field_is_pseudo(ip, t, ip_proto::TCP), "segment {}'s TCP checksum is left partial", k);
                    let mut whole = seg.to_vec();
                    prop_assert!(finish_partial(&mut whole));
                    prop_assert!(verify_l4_checksum(&whole[l3..], t, ip_proto::TCP), "segment {}'s TCP checksum, finished", k);
                    prop_assert_eq!(&whole[..l3 + t + 16], &seg[..l3 + t + 16]);
                    prop_assert_eq!(&whole[l3 + t + 18..], &seg[l3 + t + 18..]);
                } else {
                    prop_assert!(verify_l4_checksum(ip, t, ip_proto::TCP), "segment {}'s TCP checksum", k);
                }
                prop_assert_eq!(be32(ip, t + 4), seq0.wrapping_add((k * mss) as u32));
                let f = ip[t + 13];
                let last = k + 1 == s.segments();
                prop_assert_eq!(f & flags::FIN != 0, fin && last);
                prop_assert_eq!(f & flags::PSH != 0, last);
                prop_assert_eq!(f & CWR != 0, cwr && k == 0);
                prop_assert!(f & flags::ACK != 0);
                joined.extend_from_slice(&seg[hdrs..]);
            }
            prop_assert_eq!(&joined[..], &d[hdrs..]);
        }
    }

    proptest! {
        /// What a hostile endpoint sends is any bytes, lengths lying: recognising and cutting
        /// never read or write out of bounds, and every segment fits what it says.
        #[test]
        fn any_bytes_are_recognised_and_cut_without_a_panic(
            mut d in proptest::collection::vec(any::<u8>(), 0..3000), mss in 0usize..2000, v6 in any::<bool>(), ihl in 5u8..16,
        ) {
            // Most random bytes are not IP at all: make the inner frame claim to be, with its
            // lengths as they came, half the time its total length the datagram's.
            if d.len() > 8 + 14 + 40 {
                let (l3, et) = (8 + 14, if v6 { 0x86ddu16 } else { 0x0800 });
                d[20..22].copy_from_slice(&et.to_be_bytes());
                let honest = d[0] & 1 == 0;
                let l4 = if v6 {
                    d[l3] = 0x60;
                    d[l3 + 6] = ip_proto::TCP;
                    if honest {
                        let pl = (d.len() - l3 - 40) as u16;
                        d[l3 + 4..l3 + 6].copy_from_slice(&pl.to_be_bytes());
                    }
                    l3 + 40
                } else {
                    d[l3] = 0x40 | ihl;
                    d[l3 + 9] = ip_proto::TCP;
                    d[l3 + 6] &= 0x80;
                    d[l3 + 7] = 0;
                    if honest {
                        let tl = (d.len() - l3) as u16;
                        d[l3 + 2..l3 + 4].copy_from_slice(&tl.to_be_bytes());
                    }
                    l3 + ihl as usize * 4
                };
                // Its TCP data offset as it came, but at least 5 words.
                if let Some(b) = d.get_mut(l4 + 12) {
                    *b |= 0x50;
                }
            }
            let _ = is_one_packet(&d);
            for s in [Super::of(&d, mss), Super::of_ip_max(&d, mss)].into_iter().flatten() {
                for k in 0..s.segments() {
                    let mut out = vec![0u8; s.segment_len(k)];
                    prop_assert_eq!(s.write(&d, k, &mut out), out.len());
                }
            }
        }
    }

    /// The segments [`Super::write`] cuts from `d` at `mss`, their checksums left partial (as
    /// a node that joins them cuts them).
    fn cut(d: &[u8], mss: usize) -> Vec<Vec<u8>> {
        let s = Super::of(d, mss).unwrap().leaving_partial(true);
        (0..s.segments())
            .map(|k| {
                let mut out = vec![0u8; s.segment_len(k)];
                s.write(d, k, &mut out);
                out
            })
            .collect()
    }

    proptest! {
        /// Joining is cutting's inverse: the segments of a super-packet join back into it (its
        /// headers, the TCP checksum partial over the whole), and cut again give the same.
        #[test]
        fn segments_join_back_into_the_super_packet_they_were_cut_from(
            payload in 2usize..65_000, mss in 500usize..1500, fin in any::<bool>(), cwr in any::<bool>(), psh in any::<bool>(),
        ) {
            let fl = flags::ACK | if psh { flags::PSH } else { 0 } | if fin { flags::FIN } else { 0 } | if cwr { CWR } else { 0 };
            let mut d = superpacket(true, payload, fl);
            prop_assume!(d.len() <= JOINED_MAX && payload > mss);
            let segs = cut(&d, mss);
            let j = Joined::of(segs.len(), |i| &segs[i][..]).unwrap();
            prop_assert_eq!((j.count, j.payload, j.mss), (segs.len(), payload, mss));
            let mut joined = vec![0u8; j.hdrs];
            j.write_headers(&segs[0], &segs[segs.len() - 1], &mut joined);
            for s in &segs {
                joined.extend_from_slice(&s[j.hdrs..]);
            }
            // The partial checksum an offloading sender leaves: the pseudo-header's sum.
            let l3 = vxlan::HEADER_LEN + ETH_LEN;
            let pseudo = checksum::pseudo_header(&d[l3 + 12..l3 + 16], &d[l3 + 16..l3 + 20], ip_proto::TCP, (d.len() - j.l4) as u32);
            put16(&mut d, j.l4 + 16, checksum::fold(pseudo));
            prop_assert_eq!(&joined[..j.hdrs], &d[..j.hdrs]);
            prop_assert_eq!(&joined, &d);
            prop_assert_eq!(cut(&joined, mss), segs);
        }
    }

    #[test]
    fn a_join_stops_before_what_segmentation_would_not_give_back() {
        let d = superpacket(true, 10 * 1000, flags::ACK | flags::PSH);
        let join = |s: &[Vec<u8>]| Joined::of(s.len(), |i| &s[i][..]).map(|j| j.count);
        // As the node cuts them (checksums partial) and as a segmenting endpoint sends them
        // (each checksum whole): both join.
        let partial = cut(&d, 1000);
        assert_eq!(join(&partial), Some(10));
        let mut segs = partial.clone();
        for s in &mut segs {
            assert!(finish_partial(s));
        }
        assert_eq!(join(&segs), Some(10));
        assert_eq!(join(&segs[..1]), None, "one datagram is nothing to join");
        // A segment corrupted on its way (its checksum fails): the join stops before it.
        let mut bad = segs.clone();
        let last = bad[4].len() - 1;
        bad[4][last] ^= 1;
        assert_eq!(join(&bad), Some(4));
        // One whose checksum is partial has none to fail: it joins, and the device that cuts
        // the whole finishes its checksum, as the node would have (an endpoint's partial
        // checksum is the node's to finish, whatever the payload).
        let mut bad = partial.clone();
        bad[4][last] ^= 1;
        assert_eq!(join(&bad), Some(10));
        // A corrupt IPv4 header checksum stops it either way.
        let mut bad = partial.clone();
        bad[4][vxlan::HEADER_LEN + ETH_LEN + 10] ^= 1;
        assert_eq!(join(&bad), Some(4));
        // Out of order, or another flow's: the same.
        let mut swapped = segs.clone();
        swapped.swap(3, 5);
        assert_eq!(join(&swapped), Some(3));
        let mut other = segs.clone();
        let l4 = vxlan::HEADER_LEN + ETH_LEN + 20;
        put16(&mut other[2], l4, 40001);
        crate::build::fill_l4_checksum(&mut other[2][vxlan::HEADER_LEN + ETH_LEN..], 20, ip_proto::TCP);
        assert_eq!(join(&other), Some(2));
        // Another tenant's packet (its VNI) that copies this flow's headers and sequence
        // numbers exactly is never joined into it.
        let mut neighbour = segs.clone();
        vxlan::set_vni(&mut neighbour[3][..vxlan::HEADER_LEN], 200);
        assert_eq!(join(&neighbour), Some(3));
        // A short segment ends the run (it is included); PSH in the middle too.
        let mut short = segs.clone();
        let cut_to = short[6].len() - 10;
        short[6].truncate(cut_to);
        let l3 = vxlan::HEADER_LEN + ETH_LEN;
        let n = short[6].len() - l3;
        put16(&mut short[6], l3 + 2, n as u16);
        put16(&mut short[6], l3 + 10, 0);
        let c = checksum::checksum(&short[6][l3..l3 + 20]);
        put16(&mut short[6], l3 + 10, c);
        crate::build::fill_l4_checksum(&mut short[6][l3..], 20, ip_proto::TCP);
        assert_eq!(join(&short), Some(7));
        let mut psh = segs.clone();
        psh[1][l4 + 13] |= flags::PSH;
        crate::build::fill_l4_checksum(&mut psh[1][l3..], 20, ip_proto::TCP);
        assert_eq!(join(&psh), Some(2));
        // IPv6 inner packets are not joined (yet).
        let v6 = superpacket(false, 5000, flags::ACK);
        let segs6 = cut(&v6, 1000);
        assert_eq!(join(&segs6), None);
    }

    #[test]
    fn a_run_of_datagrams_or_a_fragment_is_not_a_super_packet() {
        // Two datagrams run together: the first's inner packet ends before the message does.
        let one = superpacket(true, 1000, flags::ACK);
        let mut run = one.clone();
        run.extend_from_slice(&one);
        assert!(!is_one_packet(&run));
        assert_eq!(Super::of(&run, 500), None);
        // An inner IPv4 fragment (more fragments set) is left alone.
        let mut frag = superpacket(true, 5000, flags::ACK);
        let l3 = vxlan::HEADER_LEN + ETH_LEN;
        put16(&mut frag, l3 + 6, 0x2000);
        assert!(is_one_packet(&frag));
        assert_eq!(Super::of(&frag, 1000), None);
        // Inner UDP is one packet, but not one to cut.
        let mut udp = superpacket(true, 5000, flags::ACK);
        udp[l3 + 9] = ip_proto::UDP;
        assert!(is_one_packet(&udp));
        assert_eq!(Super::of(&udp, 1000), None);
        // Without its MSS: cut to inner packets of at most 1450 bytes.
        let big = superpacket(true, 10_000, flags::ACK);
        let s = Super::of_ip_max(&big, 1450).unwrap();
        assert_eq!(s.segments(), 10_000usize.div_ceil(1410));
        assert_eq!(s.segment_len(0) - (vxlan::HEADER_LEN + ETH_LEN), 1450);
        assert_eq!(Super::of_ip_max(&big, 40), None, "no room for payload");
        // Truncated headers are no packet at all.
        assert!(!is_one_packet(&one[..30]));
        assert_eq!(Super::of(&one[..30], 100), None);
    }
}
