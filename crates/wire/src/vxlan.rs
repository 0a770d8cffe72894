//! VXLAN headers (RFC 7348).

use crate::{be32, put32, ParseError};

/// Length of a VXLAN header.
pub const HEADER_LEN: usize = 8;
/// The IANA VXLAN UDP port.
pub const PORT: u16 = 4789;
/// The I flag: the VNI is valid.
pub const FLAG_I: u8 = 0x08;

/// A checked view of a VXLAN header: it fits, and the I flag is set (RFC 7348 §5: a receiver
/// must not use a VNI whose I flag is clear). Other reserved bits are ignored on receipt, as the
/// RFC says.
#[derive(Debug, Clone)]
pub struct VxlanPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VxlanPacket<T> {
    /// Checks the header.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        if b[0] & FLAG_I == 0 {
            return Err(ParseError::BadVxlanFlags);
        }
        Ok(VxlanPacket { buffer })
    }
    /// The 24-bit VXLAN network identifier.
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), 4) >> 8
    }
    /// The encapsulated frame.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

/// Writes a VXLAN header carrying `vni` at the start of `buf`.
#[inline]
pub fn emit(buf: &mut [u8], vni: u32) {
    put32(buf, 0, (FLAG_I as u32) << 24);
    put32(buf, 4, (vni & 0x00ff_ffff) << 8);
}

/// Rewrites the VNI of an existing header in place.
#[inline]
pub fn set_vni(buf: &mut [u8], vni: u32) {
    let low = buf[7];
    put32(buf, 4, ((vni & 0x00ff_ffff) << 8) | low as u32);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_emit_roundtrip(vni in 0u32..(1 << 24)) {
            let mut buf = [0u8; 8];
            emit(&mut buf, vni);
            prop_assert_eq!(VxlanPacket::new_checked(&buf[..]).unwrap().vni(), vni);
            set_vni(&mut buf, vni ^ 0x55);
            prop_assert_eq!(VxlanPacket::new_checked(&buf[..]).unwrap().vni(), vni ^ 0x55);
        }
    }

    #[test]
    fn missing_i_flag_rejected() {
        let buf = [0u8; 8];
        assert_eq!(VxlanPacket::new_checked(&buf[..]).unwrap_err(), ParseError::BadVxlanFlags);
    }
}
