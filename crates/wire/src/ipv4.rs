//! IPv4 headers.

use crate::checksum;
use crate::{be16, put16, ParseError};
use core::net::Ipv4Addr;

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;

/// A checked view of an IPv4 packet. `new_checked` guarantees the version is 4, the header
/// length is at least 20 and fits, and the total length fits the buffer (the buffer may be
/// longer: Ethernet padding).
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks lengths and version.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(ParseError::BadIpVersion);
        }
        let ihl = ((b[0] & 0x0f) as usize) * 4;
        let total = be16(b, 2) as usize;
        if ihl < HEADER_LEN || total < ihl {
            return Err(ParseError::BadIpLength);
        }
        if total > b.len() {
            return Err(ParseError::Truncated);
        }
        Ok(Ipv4Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Header length in bytes, options included.
    pub fn header_len(&self) -> usize {
        ((self.b()[0] & 0x0f) as usize) * 4
    }
    /// DSCP and ECN byte.
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }
    /// Total length (header and payload).
    pub fn total_len(&self) -> usize {
        be16(self.b(), 2) as usize
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.b(), 4)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }
    /// True if this is any fragment (more-fragments set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        be16(self.b(), 6) & 0x3fff != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }
    /// Upper-layer protocol.
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 10)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
    /// True if the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        let hl = self.header_len();
        if hl == HEADER_LEN {
            return checksum::ipv4_header(self.b()[..HEADER_LEN].try_into().expect("20 bytes")) == 0;
        }
        checksum::fold(checksum::sum(0, &self.b()[..hl])) == 0xffff
    }
    /// The payload, bounded by the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Recomputes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        put16(b, 10, 0);
        let c = checksum::checksum(&b[..hl]);
        put16(b, 10, c);
    }
}

/// The parsed contents of an IPv4 header (options are not represented).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source.
    pub src: Ipv4Addr,
    /// Destination.
    pub dst: Ipv4Addr,
    /// Upper-layer protocol.
    pub protocol: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP/ECN.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Parses a checked view; rejects a bad checksum.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self, ParseError> {
        if !p.verify_checksum() {
            return Err(ParseError::BadIpChecksum);
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len(),
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }

    /// Writes a 20-byte header with a correct checksum at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = 0x45;
        buf[1] = self.tos;
        put16(buf, 2, (HEADER_LEN + self.payload_len) as u16);
        put16(buf, 4, self.ident);
        put16(buf, 6, if self.dont_frag { 0x4000 } else { 0 });
        buf[8] = self.ttl;
        buf[9] = self.protocol;
        put16(buf, 10, 0);
        buf[12..16].copy_from_slice(&self.src.octets());
        buf[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum::ipv4_header(buf[..HEADER_LEN].try_into().expect("20 bytes"));
        put16(buf, 10, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_emit_roundtrip(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), protocol in any::<u8>(), payload_len in 0usize..1480, ttl in any::<u8>(), tos in any::<u8>(), ident in any::<u16>(), df in any::<bool>()) {
            let r = Ipv4Repr { src: src.into(), dst: dst.into(), protocol, payload_len, ttl, tos, ident, dont_frag: df };
            let mut buf = vec![0u8; HEADER_LEN + payload_len];
            r.emit(&mut buf);
            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            prop_assert!(!p.is_fragment());
            prop_assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Ipv4Packet::new_checked(&buf[..]) {
                let _ = Ipv4Repr::parse(&p);
                let _ = p.payload();
            }
        }
    }

    #[test]
    fn lying_total_length_is_truncated() {
        let r = Ipv4Repr {
            src: [1, 2, 3, 4].into(),
            dst: [5, 6, 7, 8].into(),
            protocol: 17,
            payload_len: 100,
            ttl: 64,
            tos: 0,
            ident: 1,
            dont_frag: true,
        };
        let mut buf = [0u8; 40];
        r.emit(&mut buf);
        assert_eq!(Ipv4Packet::new_checked(&buf[..]).unwrap_err(), ParseError::Truncated);
    }

    #[test]
    fn bad_checksum_rejected() {
        let r = Ipv4Repr {
            src: [1, 2, 3, 4].into(),
            dst: [5, 6, 7, 8].into(),
            protocol: 17,
            payload_len: 0,
            ttl: 64,
            tos: 0,
            ident: 1,
            dont_frag: true,
        };
        let mut buf = [0u8; 20];
        r.emit(&mut buf);
        buf[8] ^= 1;
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p).unwrap_err(), ParseError::BadIpChecksum);
    }
}
