//! TCP headers: ports, sequence numbers, flags and the data offset.

use crate::{be16, be32, put16, put32, ParseError};

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = 20;

/// TCP flag bits.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// A checked view of a TCP segment: the data offset is at least 5 words and within the buffer.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Checks the header length.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let off = ((b[12] >> 4) as usize) * 4;
        if off < HEADER_LEN || off > b.len() {
            return Err(ParseError::BadTcpHeader);
        }
        Ok(TcpPacket { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.b(), 4)
    }
    /// Acknowledgement number.
    pub fn ack(&self) -> u32 {
        be32(self.b(), 8)
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        ((self.b()[12] >> 4) as usize) * 4
    }
    /// Flag byte (FIN..CWR).
    pub fn flags(&self) -> u8 {
        self.b()[13]
    }
    /// Window.
    pub fn window(&self) -> u16 {
        be16(self.b(), 14)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 16)
    }
}

/// The parsed fixed part of a TCP header (options are not represented).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flags.
    pub flags: u8,
    /// Window.
    pub window: u16,
}

impl TcpRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Self {
        TcpRepr { src_port: p.src_port(), dst_port: p.dst_port(), seq: p.seq(), ack: p.ack(), flags: p.flags(), window: p.window() }
    }

    /// Writes a 20-byte header with a zero checksum.
    pub fn emit(&self, buf: &mut [u8]) {
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put32(buf, 4, self.seq);
        put32(buf, 8, self.ack);
        buf[12] = 5 << 4;
        buf[13] = self.flags;
        put16(buf, 14, self.window);
        put16(buf, 16, 0);
        put16(buf, 18, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_emit_roundtrip(s in any::<u16>(), d in any::<u16>(), seq in any::<u32>(), ack in any::<u32>(), fl in any::<u8>(), w in any::<u16>()) {
            let r = TcpRepr { src_port: s, dst_port: d, seq, ack, flags: fl, window: w };
            let mut buf = [0u8; 20];
            r.emit(&mut buf);
            prop_assert_eq!(TcpRepr::parse(&TcpPacket::new_checked(&buf[..]).unwrap()), r);
        }
    }

    #[test]
    fn bad_data_offset() {
        let mut buf = [0u8; 20];
        buf[12] = 4 << 4;
        assert_eq!(TcpPacket::new_checked(&buf[..]).unwrap_err(), ParseError::BadTcpHeader);
        buf[12] = 15 << 4;
        assert_eq!(TcpPacket::new_checked(&buf[..]).unwrap_err(), ParseError::BadTcpHeader);
    }
}
