//! IPv6 headers: the fixed header, and a walk over the common extension headers to find the
//! upper-layer protocol (enough to pass IPv6 through and to match on it).

use crate::{be16, put16, put32, ParseError};
use core::net::Ipv6Addr;

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;
/// Extension headers walked before giving up (a bound against crafted chains).
pub const MAX_EXTENSIONS: usize = 4;

const HOP_BY_HOP: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const DEST_OPTS: u8 = 60;

/// A checked view of an IPv6 packet: the fixed header fits, the version is 6 and the payload
/// length fits the buffer.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Checks lengths and version.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(ParseError::BadIpVersion);
        }
        if HEADER_LEN + be16(b, 4) as usize > b.len() {
            return Err(ParseError::Truncated);
        }
        Ok(Ipv6Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        let b = self.b();
        (b[0] << 4) | (b[1] >> 4)
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        let b = self.b();
        (((b[1] & 0x0f) as u32) << 16) | be16(b, 2) as u32
    }
    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> usize {
        be16(self.b(), 4) as usize
    }
    /// The Next Header field of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        a.into()
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        a.into()
    }

    /// Walks hop-by-hop, routing and destination-options headers; returns the upper-layer
    /// protocol and its offset from the start of the IPv6 header. A fragment header is
    /// [`ParseError::Fragment`]; more than [`MAX_EXTENSIONS`] headers, or one running past the
    /// payload, is [`ParseError::BadIpv6Extension`].
    pub fn upper_layer(&self) -> Result<(u8, usize), ParseError> {
        let end = HEADER_LEN + self.payload_len();
        let b = self.b();
        let mut nh = self.next_header();
        let mut off = HEADER_LEN;
        for _ in 0..=MAX_EXTENSIONS {
            match nh {
                HOP_BY_HOP | ROUTING | DEST_OPTS => {
                    if off + 8 > end {
                        return Err(ParseError::BadIpv6Extension);
                    }
                    let len = (b[off + 1] as usize + 1) * 8;
                    if off + len > end {
                        return Err(ParseError::BadIpv6Extension);
                    }
                    nh = b[off];
                    off += len;
                }
                FRAGMENT => return Err(ParseError::Fragment),
                _ => return Ok((nh, off)),
            }
        }
        Err(ParseError::BadIpv6Extension)
    }
}

/// The parsed fixed header of an IPv6 packet without extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source.
    pub src: Ipv6Addr,
    /// Destination.
    pub dst: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Payload length.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Self {
        Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        }
    }

    /// Writes the 40-byte fixed header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        put32(buf, 0, (6 << 28) | ((self.traffic_class as u32) << 20) | (self.flow_label & 0xfffff));
        put16(buf, 4, self.payload_len as u16);
        buf[6] = self.next_header;
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src.octets());
        buf[24..40].copy_from_slice(&self.dst.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_emit_roundtrip(src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), nh in 100u8..255, payload_len in 0usize..1400, hl in any::<u8>(), tc in any::<u8>(), fl in 0u32..(1 << 20)) {
            let r = Ipv6Repr { src: src.into(), dst: dst.into(), next_header: nh, payload_len, hop_limit: hl, traffic_class: tc, flow_label: fl };
            let mut buf = vec![0u8; HEADER_LEN + payload_len];
            r.emit(&mut buf);
            let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Ipv6Repr::parse(&p), r);
            prop_assert_eq!(p.upper_layer().unwrap(), (nh, HEADER_LEN));
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(p) = Ipv6Packet::new_checked(&buf[..]) {
                let _ = p.upper_layer();
            }
        }
    }

    #[test]
    fn walks_extension_headers_and_rejects_fragments() {
        let r = Ipv6Repr {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::LOCALHOST,
            next_header: HOP_BY_HOP,
            payload_len: 16,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0,
        };
        let mut buf = [0u8; 56];
        r.emit(&mut buf);
        buf[40] = DEST_OPTS; // hop-by-hop -> dest opts, 8 bytes each
        buf[48] = 17; // dest opts -> UDP
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap(), (17, 56));
        buf[48] = FRAGMENT;
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap_err(), ParseError::Fragment);
        buf[48] = 17;
        buf[49] = 1; // dest opts claims 16 bytes: runs past the payload
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap_err(), ParseError::BadIpv6Extension);
        buf[40] = FRAGMENT;
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap_err(), ParseError::Fragment);
    }
}
