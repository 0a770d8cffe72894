//! # snic-wire: the headers snic reads and writes
//!
//! Zero-copy, bounds-checked views over packet bytes, in the style of smoltcp's `wire` module:
//! each header has an `XxxPacket<T: AsRef<[u8]>>` view whose `new_checked` proves the buffer is
//! long enough and the header self-consistent, and an `XxxRepr` that parses from and emits into a
//! view. Nothing here allocates, and no input — truncated, lying about its lengths, fragmented,
//! carrying options — can make a read go past the buffer or panic: it becomes a [`ParseError`],
//! which the data plane counts as a drop with that reason.
//!
//! What it covers: Ethernet II with one 802.1Q tag, IPv4, IPv6 (fixed header and the common
//! extension headers, enough to pass through and to match on), UDP, TCP (ports, flags, data
//! offset), ICMPv4/ICMPv6 (type, code, echo identifier) and VXLAN (RFC 7348).
//!
//! What it is not: a protocol stack. It does not reassemble fragments or track connections.
//!
//! The key entry points for the data plane are [`layout::parse_outer`] (outer
//! Ethernet/IP/UDP + VXLAN of a frame taken from a NIC-like backend),
//! [`layout::parse_vxlan`] (a VXLAN datagram received on a UDP socket), and
//! [`layout::parse_inner`] (the tenant's inner frame, down to the [`layout::FlowKey`]).
//! [`build`] assembles whole VXLAN frames for tests, benchmarks and the demo.
#![warn(missing_docs)]

pub mod build;
pub mod checksum;
pub mod error;
pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod layout;
pub mod redirect;
pub mod tcp;
pub mod tso;
pub mod udp;
pub mod vxlan;

pub use error::ParseError;

/// IP protocol numbers snic looks at.
pub mod ip_proto {
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
}

#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Writes `v` big-endian at `b[at..at + 2]`.
#[inline(always)]
pub fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// The committed seeds of the cargo-fuzz target `target` (`fuzz/corpus/<target>`), sorted by
/// name: the corpus-replay tests of every crate with a fuzz harness read them through this.
/// Panics if the directory cannot be read (a test that replays nothing must not pass).
#[doc(hidden)]
pub fn fuzz_seeds(target: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} unreadable: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, b)
        })
        .collect();
    v.sort();
    v
}
