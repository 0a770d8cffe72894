//! Re-encapsulation toward the destination VTEP.
//!
//! For datagram backends (UDP sockets) the VXLAN datagram already is the payload and only the
//! destination changes. For frame backends (in-memory rings, and later AF_XDP) egress writes a
//! fresh outer Ethernet/IP/UDP header into the headroom in front of the VXLAN header: source is
//! this node's VTEP, destination the chosen peer, and the UDP source port carries the inner
//! flow's entropy (as Linux VXLAN does), so the underlay's ECMP keeps flows on one path.

use crate::fdb::PeerId;
use crate::store::Peer;
use snic_wire::build::{emit_outer, OuterSpec};

/// Bytes of outer headers for this peer's address family.
pub fn outer_len(peer: &Peer) -> usize {
    14 + if peer.addr.is_ipv4() { 20 } else { 40 } + 8
}

/// Writes outer headers so that the frame ends with the VXLAN datagram at `buf[off..off+len]`;
/// returns the frame's start, or `None` if the headroom is too small or the families differ.
#[inline]
pub fn encap(buf: &mut [u8], off: usize, len: usize, local: &Peer, peer: &Peer, flow_hash: u64) -> Option<usize> {
    let start = off.checked_sub(outer_len(peer))?;
    let o = OuterSpec {
        src_mac: local.mac,
        dst_mac: peer.mac,
        src_ip: local.addr.ip(),
        dst_ip: peer.addr.ip(),
        src_port: 49152 | (flow_hash as u16 & 0x3fff),
    };
    emit_outer(&o, peer.addr.port(), len, &mut buf[start..off])?;
    Some(start)
}

/// Per-peer outer-header templates. The outer headers toward one peer differ between packets
/// only in the IP total length (and so its checksum), the UDP length and the UDP source port, so
/// each is built once and patched per packet; the IPv4 checksum is updated incrementally
/// (RFC 1624). A direct-mapped cache indexed by [`PeerId`] keeps them.
pub struct Templates {
    local: Peer,
    slots: Box<[Option<Template>; 256]>,
}

#[derive(Clone, Copy)]
struct Template {
    id: PeerId,
    bytes: [u8; 62],
    len: u8,
    /// Offset of the UDP header.
    udp: u8,
    /// IPv4 total length as built (payload length 0) and the one's-complement sum the
    /// checksum for another total length starts from (RFC 1624 eqn. 3, `~HC + ~m`); `None`
    /// for IPv6.
    v4: Option<(u16, u32)>,
}

impl Templates {
    /// Templates for frames sent from `local`.
    pub fn new(local: Peer) -> Self {
        Templates { local, slots: Box::new([None; 256]) }
    }

    /// Same result as [`encap`] toward `peer` (whose id is `id`), faster: writes outer headers in
    /// front of `buf[off..off+len]` and returns the frame's start.
    ///
    /// Inlined into the transmit path (a call a packet cost ~10 instructions); building a
    /// template is out of line.
    #[inline(always)]
    pub fn encap(&mut self, buf: &mut [u8], off: usize, len: usize, id: PeerId, peer: &Peer, flow_hash: u64) -> Option<usize> {
        let slot = (id.0 & 255) as usize;
        let t = match &self.slots[slot] {
            Some(t) if t.id == id => t,
            _ => self.build(slot, id, peer)?,
        };
        let tl = t.len as usize;
        let start = off.checked_sub(tl)?;
        let udp_len = (8 + len) as u16;
        let sport = 49152 | (flow_hash as u16 & 0x3fff);
        if let Some((tl0, base)) = t.v4 {
            // IPv4: a fixed 42-byte header, so the copy and the patches are constant moves.
            let out: &mut [u8; 42] = (&mut buf[start..off]).try_into().ok()?;
            out.copy_from_slice(t.bytes[..42].try_into().expect("42 bytes"));
            let total = tl0 + len as u16;
            out[16..18].copy_from_slice(&total.to_be_bytes());
            // `~(~HC + ~m + m')` (RFC 1624): the sum is < 3 * 2^16, so two folds bring it to 16
            // bits (the general fold loop cost ~10 instructions a packet).
            let mut acc = base + total as u32;
            acc = (acc & 0xffff) + (acc >> 16);
            acc = (acc & 0xffff) + (acc >> 16);
            out[24..26].copy_from_slice(&(!(acc as u16)).to_be_bytes());
            out[34..36].copy_from_slice(&sport.to_be_bytes());
            out[38..40].copy_from_slice(&udp_len.to_be_bytes());
            return Some(start);
        }
        let out = &mut buf[start..off];
        out.copy_from_slice(&t.bytes[..tl]);
        out[18..20].copy_from_slice(&udp_len.to_be_bytes());
        let u = t.udp as usize;
        out[u..u + 2].copy_from_slice(&sport.to_be_bytes());
        out[u + 4..u + 6].copy_from_slice(&udp_len.to_be_bytes());
        Some(start)
    }

    /// Builds the template toward `peer` into `slot` (replacing the one there).
    #[cold]
    #[inline(never)]
    fn build(&mut self, slot: usize, id: PeerId, peer: &Peer) -> Option<&Template> {
        let mut bytes = [0u8; 62];
        let ol = outer_len(peer);
        encap(&mut bytes[..ol], ol, 0, &self.local, peer, 0)?;
        let v4 = peer.addr.is_ipv4().then(|| {
            let (tl0, c0) = (u16::from_be_bytes([bytes[16], bytes[17]]), u16::from_be_bytes([bytes[24], bytes[25]]));
            (tl0, !c0 as u32 + !tl0 as u32)
        });
        self.slots[slot] = Some(Template { id, bytes, len: ol as u8, udp: (ol - 8) as u8, v4 });
        self.slots[slot].as_ref()
    }
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

    #[test]
    fn templates_write_the_same_bytes_as_encap() {
        let local4 = Peer { addr: "192.0.2.1:4789".parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, 1]) };
        let local6 = Peer { addr: "[2001:db8::1]:4789".parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, 1]) };
        let mut t4 = Templates::new(local4);
        let mut t6 = Templates::new(local6);
        let mut ids = std::collections::HashMap::new();
        for i in 0..200u32 {
            let v6 = i % 3 == 0;
            let peer = if v6 {
                Peer { addr: format!("[2001:db8::{}]:4789", i % 40 + 2).parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 1, i as u8]) }
            } else {
                Peer { addr: format!("192.0.2.{}:{}", i % 50 + 2, 4789 + i % 2).parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, i as u8]) }
            };
            let local = if v6 { &local6 } else { &local4 };
            let len = 16 + (i as usize * 7) % 1400;
            let (mut a, mut b) = (vec![0u8; 2048], vec![0u8; 2048]);
            let h = (i as u64).wrapping_mul(0x1234_5678_9abc);
            let sa = encap(&mut a, 128, len, local, &peer, h);
            // Ids are assigned per distinct peer, as the FDB does.
            let n = ids.len() as u32;
            let id = *ids.entry(peer).or_insert(PeerId(n * 7));
            let t = if v6 { &mut t6 } else { &mut t4 };
            let sb = t.encap(&mut b, 128, len, id, &peer, h);
            assert_eq!(sa, sb);
            assert_eq!(a[..128], b[..128], "peer {:?} len {}", peer, len);
        }
    }
}
