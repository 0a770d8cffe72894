//! ICMPv4 and ICMPv6 headers: type, code, and the echo identifier that NAT translates.

use crate::{be16, put16, ParseError};

/// Length of the ICMP header snic reads (type, code, checksum, identifier, sequence).
pub const HEADER_LEN: usize = 8;

/// ICMPv4 echo request.
pub const V4_ECHO_REQUEST: u8 = 8;
/// ICMPv4 echo reply.
pub const V4_ECHO_REPLY: u8 = 0;
/// ICMPv6 echo request.
pub const V6_ECHO_REQUEST: u8 = 128;
/// ICMPv6 echo reply.
pub const V6_ECHO_REPLY: u8 = 129;

/// A checked view of an ICMP message (v4 or v6; the layout of the first 8 bytes is shared).
#[derive(Debug, Clone)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Checks that the 8-byte header fits.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(IcmpPacket { buffer })
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// Echo identifier (meaningful for echo request/reply).
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }
    /// Echo sequence number.
    pub fn seq(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }
}

/// True for the echo request and reply types of either family.
pub fn is_echo(msg_type: u8) -> bool {
    matches!(msg_type, V4_ECHO_REQUEST | V4_ECHO_REPLY | V6_ECHO_REQUEST | V6_ECHO_REPLY)
}

/// The parsed ICMP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpRepr {
    /// Type.
    pub msg_type: u8,
    /// Code.
    pub code: u8,
    /// Identifier.
    pub ident: u16,
    /// Sequence.
    pub seq: u16,
}

impl IcmpRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &IcmpPacket<T>) -> Self {
        IcmpRepr { msg_type: p.msg_type(), code: p.code(), ident: p.ident(), seq: p.seq() }
    }
    /// Writes the 8-byte header with a zero checksum.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = self.msg_type;
        buf[1] = self.code;
        put16(buf, 2, 0);
        put16(buf, 4, self.ident);
        put16(buf, 6, self.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_emit_roundtrip(t in any::<u8>(), c in any::<u8>(), id in any::<u16>(), s in any::<u16>()) {
            let r = IcmpRepr { msg_type: t, code: c, ident: id, seq: s };
            let mut buf = [0u8; 8];
            r.emit(&mut buf);
            prop_assert_eq!(IcmpRepr::parse(&IcmpPacket::new_checked(&buf[..]).unwrap()), r);
        }
    }
}
