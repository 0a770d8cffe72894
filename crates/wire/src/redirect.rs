//! The pool's redirect encapsulation: a tenant's VXLAN datagram that a node sends to a peer for
//! the peer to run the rest of the packet's DAG (docs/pool.md, "Redirect").
//!
//! The header goes in front of the VXLAN datagram, unchanged behind it, in one UDP datagram from
//! the home node's data socket to the peer's:
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+---------------+---------------+---------------+
//! |      'S'      |      'N'      |      'R'      |  version (4)  |  0
//! +---------------+---------------+---------------+---------------+
//! |                                                               |  4
//! |      tag: AES-128-GCM over bytes 20.. (no plaintext: GMAC)    |
//! |                                                               |
//! +---------------+---------------+---------------+---------------+
//! |          nonce: sender (32 bits), counter (64 bits)           |  20
//! +---------------+---------------+---------------+---------------+
//! |                   route (the peer's hosted DAG)               |  32
//! +---------------+---------------+---------------+---------------+
//! |   position    |     hops      |     flags     |   reserved    |  36
//! +---------------+---------------+---------------+---------------+
//! |        incarnation (of the node that runs the route)          |  40
//! +---------------+---------------+---------------+---------------+
//! |        delivery address (IPv6, or IPv4-mapped)                |  44
//! +---------------+---------------+---------------+---------------+
//! |  delivery port                |  destination port             |  60
//! +---------------+---------------+---------------+---------------+
//! |      destination address (IPv6, or IPv4-mapped)               |  64
//! +---------------+---------------+---------------+---------------+
//! |                 VXLAN header + tenant's frame                 |  80
//! ```
//!
//! - *route*: the DAG the peer hosts for the home node (the peer's number, from the launch);
//! - *incarnation*: the generation of the node that runs *route* — the one that gave the number
//!   — as the home node knows it (its low 32 bits; a node's generation is new at every start). A
//!   node drops a packet named for another incarnation than its own: after a restart its hosted
//!   numbers start again, and a number an earlier incarnation gave never reaches the DAG the new
//!   one gave it to (docs/pool.md, "Incarnations"). 0 for a packet to its state's owner (bit 2);
//! - *position*: the step of that DAG the packet enters next (steps before it ran at home);
//! - *hops*: nodes the packet crossed after its home (a pass-through node adds one);
//! - *flags*: bit 0 — a delivery address is given: the VTEP the home node would have sent the
//!   packet to (its forwarding table's answer for the inner destination). Without it the peer
//!   uses its own table. Bit 1 — a destination is given: the data address of the node that
//!   runs the DAG, when the datagram goes through pass-through nodes first (the pool's links
//!   are a ring or another graph without a direct link). A node that receives a datagram with
//!   a destination forwards it toward it without running anything; the last pass-through node
//!   clears the bit. Without it, the receiver is the node that runs it. Bit 2 — *to the
//!   owner*: in a pool behind a switch, the packet belongs to the NT state of the receiving
//!   node (a SNAT's return traffic, `snic_core::pool::owner`); it has run nothing yet. The
//!   receiver takes it as if from the tenant's VTEP given as the delivery address (bit 0 is
//!   set), through its own rules, from the start of its own DAG; *route* is the DAG's
//!   pool-wide UID and *position* 0.
//!
//! The first byte, `'S'` (0x53), has VXLAN's I flag (0x08) clear, so no VXLAN datagram is ever
//! mistaken for a redirected one. This module reads and writes the fields; the tag is the data
//! plane's (it holds the key).

use crate::{be16, be32, put16, put32};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Bytes in front of the VXLAN datagram.
pub const HEADER_LEN: usize = 80;
/// The first three bytes.
pub const MAGIC: [u8; 3] = *b"SNR";
/// The version this module writes and reads (4: the incarnation).
pub const VERSION: u8 = 4;
/// Where the tag is (16 bytes).
pub const TAG: core::ops::Range<usize> = 4..20;
/// Where the nonce is (12 bytes).
pub const NONCE: core::ops::Range<usize> = 20..32;
/// The tag covers the datagram from here to its end.
pub const AUTHENTICATED_FROM: usize = 20;

const FLAG_DELIVERY: u8 = 1;
const FLAG_DESTINATION: u8 = 2;
const FLAG_OWNER: u8 = 4;

/// The header's fields (all but the tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedirectRepr {
    /// Sender part of the nonce.
    pub sender: u32,
    /// Counter part of the nonce (unique per sender).
    pub counter: u64,
    /// The peer's hosted DAG.
    pub route: u32,
    /// The incarnation (low 32 bits of the generation) of the node that runs `route`.
    pub incarnation: u32,
    /// The step the packet enters next.
    pub pos: u8,
    /// Nodes crossed after its home.
    pub hops: u8,
    /// Where the home node would have delivered it, if it knew.
    pub delivery: Option<SocketAddr>,
    /// The node that runs it, when the receiver is a pass-through node on the way.
    pub destination: Option<SocketAddr>,
    /// For the receiver's own DAG, as its state's owner (flag bit 2): `delivery` is the
    /// tenant's VTEP it came from.
    pub owner: bool,
}

/// Why a datagram is not a redirected packet this node can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectError {
    /// Shorter than a header and a VXLAN header.
    Truncated,
    /// Not the magic (not a redirected packet at all).
    NotRedirect,
    /// A version this node does not speak.
    Version(u8),
}

/// True if `d` starts like a redirected packet (any version).
#[inline]
pub fn is_redirect(d: &[u8]) -> bool {
    d.len() >= 3 && d[..3] == MAGIC
}

impl RedirectRepr {
    /// Reads the header at the start of `d` (the tag is not checked here).
    pub fn parse(d: &[u8]) -> Result<RedirectRepr, RedirectError> {
        if !is_redirect(d) {
            return Err(RedirectError::NotRedirect);
        }
        if d.len() < HEADER_LEN + crate::vxlan::HEADER_LEN {
            return Err(RedirectError::Truncated);
        }
        if d[3] != VERSION {
            return Err(RedirectError::Version(d[3]));
        }
        Ok(RedirectRepr {
            sender: be32(d, 20),
            counter: u64::from(be32(d, 24)) << 32 | u64::from(be32(d, 28)),
            route: be32(d, 32),
            incarnation: be32(d, 40),
            pos: d[36],
            hops: d[37],
            delivery: (d[38] & FLAG_DELIVERY != 0).then(|| read_addr(d, 60, 44)),
            destination: (d[38] & FLAG_DESTINATION != 0).then(|| read_addr(d, 62, 64)),
            owner: d[38] & FLAG_OWNER != 0,
        })
    }

    /// Writes the header into `h` (the tag left zero, for the sender to fill).
    pub fn emit(&self, h: &mut [u8; HEADER_LEN]) {
        h[..3].copy_from_slice(&MAGIC);
        h[3] = VERSION;
        h[TAG].fill(0);
        put32(h, 20, self.sender);
        put32(h, 24, (self.counter >> 32) as u32);
        put32(h, 28, self.counter as u32);
        put32(h, 32, self.route);
        h[36] = self.pos;
        h[37] = self.hops;
        h[38] = if self.delivery.is_some() { FLAG_DELIVERY } else { 0 }
            | if self.destination.is_some() { FLAG_DESTINATION } else { 0 }
            | if self.owner { FLAG_OWNER } else { 0 };
        h[39] = 0;
        put32(h, 40, self.incarnation);
        write_addr(h, 60, 44, self.delivery);
        write_addr(h, 62, 64, self.destination);
    }
}

/// The address whose port is at `port` and IPv6 (or IPv4-mapped) address at `ip`.
fn read_addr(d: &[u8], port: usize, ip: usize) -> SocketAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&d[ip..ip + 16]);
    let ip6 = Ipv6Addr::from(a);
    SocketAddr::new(ip6.to_ipv4_mapped().map_or(IpAddr::V6(ip6), IpAddr::V4), be16(d, port))
}

/// Writes `a` (or zeros) as [`read_addr`] reads it.
fn write_addr(h: &mut [u8; HEADER_LEN], port: usize, ip: usize, a: Option<SocketAddr>) {
    let (p, addr) = match a {
        Some(a) => (
            a.port(),
            match a.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            },
        ),
        None => (0, Ipv6Addr::UNSPECIFIED),
    };
    put16(h, port, p);
    h[ip..ip + 16].copy_from_slice(&addr.octets());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr(delivery: Option<SocketAddr>) -> RedirectRepr {
        RedirectRepr {
            sender: 0xdead_beef,
            counter: 0x0102_0304_0506_0708,
            route: 7,
            incarnation: 0x0a0b_0c0d,
            pos: 2,
            hops: 1,
            delivery,
            destination: None,
            owner: false,
        }
    }

    #[test]
    fn a_header_reads_back_as_written_for_both_address_families_and_none() {
        let addrs: [Option<SocketAddr>; 3] = [None, Some("192.0.2.9:4789".parse().unwrap()), Some("[2001:db8::9]:4790".parse().unwrap())];
        for d in addrs {
            for (dest, owner) in addrs.into_iter().flat_map(|a| [(a, false), (a, true)]) {
                let mut h = [0u8; HEADER_LEN];
                let r = RedirectRepr { destination: dest, owner, ..repr(d) };
                r.emit(&mut h);
                let mut dgram = h.to_vec();
                dgram.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 100, 0]);
                assert!(is_redirect(&dgram));
                assert_eq!(RedirectRepr::parse(&dgram), Ok(r));
            }
        }
    }

    #[test]
    fn vxlan_short_foreign_and_future_datagrams_are_told_apart() {
        let mut h = [0u8; HEADER_LEN];
        repr(None).emit(&mut h);
        let mut d = h.to_vec();
        assert_eq!(RedirectRepr::parse(&d), Err(RedirectError::Truncated), "no VXLAN header behind it");
        d.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 100, 0]);
        d[3] = 1;
        assert_eq!(RedirectRepr::parse(&d), Err(RedirectError::Version(1)), "the 60-byte header of the first version");
        d[3] = 3;
        assert_eq!(RedirectRepr::parse(&d), Err(RedirectError::Version(3)), "the version without incarnations");
        let vxlan = [0x08u8, 0, 0, 0, 0, 0, 100, 0];
        assert!(!is_redirect(&vxlan));
        assert_eq!(RedirectRepr::parse(&vxlan), Err(RedirectError::NotRedirect));
        assert_eq!(MAGIC[0] & crate::vxlan::FLAG_I, 0, "a VXLAN datagram never starts like one");
    }
}
