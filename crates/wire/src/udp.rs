//! UDP headers.

use crate::{be16, put16, ParseError};

/// Length of a UDP header.
pub const HEADER_LEN: usize = 8;

/// A checked view of a UDP datagram: the header fits and the length field lies between 8 and
/// the buffer length.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Checks the header and the length field.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let len = be16(b, 4) as usize;
        if len < HEADER_LEN || len > b.len() {
            return Err(ParseError::BadUdpLength);
        }
        Ok(UdpPacket { buffer })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// Length field (header and payload).
    pub fn len(&self) -> usize {
        be16(self.buffer.as_ref(), 4) as usize
    }
    /// Always false: a checked datagram has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }
    /// Payload bounded by the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len()]
    }
}

/// The parsed contents of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length.
    pub payload_len: usize,
}

impl UdpRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Self {
        UdpRepr { src_port: p.src_port(), dst_port: p.dst_port(), payload_len: p.len() - HEADER_LEN }
    }

    /// Writes the header with a zero checksum (valid for UDP over IPv4, and for VXLAN over
    /// IPv6 per RFC 6935); callers that need a checksum fill it afterwards.
    pub fn emit(&self, buf: &mut [u8]) {
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put16(buf, 4, (HEADER_LEN + self.payload_len) as u16);
        put16(buf, 6, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_emit_roundtrip(s in any::<u16>(), d in any::<u16>(), n in 0usize..1400) {
            let r = UdpRepr { src_port: s, dst_port: d, payload_len: n };
            let mut buf = vec![0u8; HEADER_LEN + n];
            r.emit(&mut buf);
            prop_assert_eq!(UdpRepr::parse(&UdpPacket::new_checked(&buf[..]).unwrap()), r);
        }
    }

    #[test]
    fn length_below_header_rejected() {
        let buf = [0, 1, 0, 2, 0, 7, 0, 0];
        assert_eq!(UdpPacket::new_checked(&buf[..]).unwrap_err(), ParseError::BadUdpLength);
    }
}
