//! Ethernet II frames with at most one 802.1Q VLAN tag.

use crate::{be16, put16, ParseError};

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for broadcast and multicast addresses (group bit set).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// The address as a u64 (top 16 bits zero), a cheap hash key.
    #[inline]
    pub fn as_u64(&self) -> u64 {
        // Two loads (a 4-byte and a 2-byte one): the compiler builds the 8-byte array byte by
        // byte otherwise.
        let [a, b, c, d, e, f] = self.0;
        (u32::from_be_bytes([a, b, c, d]) as u64) << 16 | u16::from_be_bytes([e, f]) as u64
    }
}

impl core::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl core::str::FromStr for MacAddr {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split(':') {
            if n == 6 || part.len() != 2 {
                return Err(ParseError::Truncated);
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| ParseError::Truncated)?;
            n += 1;
        }
        if n != 6 {
            return Err(ParseError::Truncated);
        }
        Ok(MacAddr(out))
    }
}

/// EtherType values snic knows.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of an 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// A checked view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
    tagged: bool,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the buffer holds the whole header, including a VLAN tag if the frame has one.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated);
        }
        let tagged = be16(b, 12) == ethertype::VLAN;
        if tagged && b.len() < HEADER_LEN + VLAN_TAG_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(EthernetFrame { buffer, tagged })
    }

    /// Destination address.
    pub fn dst(&self) -> MacAddr {
        let b = self.buffer.as_ref();
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// Source address.
    pub fn src(&self) -> MacAddr {
        let b = self.buffer.as_ref();
        MacAddr([b[6], b[7], b[8], b[9], b[10], b[11]])
    }

    /// The VLAN ID (12 bits) if the frame carries an 802.1Q tag.
    pub fn vlan(&self) -> Option<u16> {
        self.tagged.then(|| be16(self.buffer.as_ref(), 14) & 0x0fff)
    }

    /// The EtherType of the payload (after the VLAN tag, if any).
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), if self.tagged { 16 } else { 12 })
    }

    /// Header length: 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        if self.tagged {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    pub fn set_dst(&mut self, m: MacAddr) {
        self.buffer.as_mut()[0..6].copy_from_slice(&m.0);
    }
    /// Sets the source address.
    pub fn set_src(&mut self, m: MacAddr) {
        self.buffer.as_mut()[6..12].copy_from_slice(&m.0);
    }
}

/// The parsed contents of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source address.
    pub src: MacAddr,
    /// Destination address.
    pub dst: MacAddr,
    /// VLAN ID, if tagged.
    pub vlan: Option<u16>,
    /// Payload EtherType.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Self {
        EthernetRepr { src: f.src(), dst: f.dst(), vlan: f.vlan(), ethertype: f.ethertype() }
    }

    /// Bytes [`EthernetRepr::emit`] writes.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header at the start of `buf`, which must hold [`EthernetRepr::header_len`] bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        match self.vlan {
            Some(v) => {
                put16(buf, 12, ethertype::VLAN);
                put16(buf, 14, v & 0x0fff);
                put16(buf, 16, self.ethertype);
            }
            None => put16(buf, 12, self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parse_emit_roundtrip(src in any::<[u8; 6]>(), dst in any::<[u8; 6]>(), vlan in proptest::option::of(0u16..4096), et in any::<u16>()) {
            prop_assume!(et != ethertype::VLAN);
            let r = EthernetRepr { src: MacAddr(src), dst: MacAddr(dst), vlan, ethertype: et };
            let mut buf = [0u8; 18];
            r.emit(&mut buf);
            let f = EthernetFrame::new_checked(&buf[..r.header_len()]).unwrap();
            prop_assert_eq!(EthernetRepr::parse(&f), r);
        }
    }

    #[test]
    fn truncated_tag_is_an_error() {
        let mut buf = [0u8; 16];
        put16(&mut buf, 12, ethertype::VLAN);
        assert_eq!(EthernetFrame::new_checked(&buf[..]).unwrap_err(), ParseError::Truncated);
    }

    #[test]
    fn mac_parse_display() {
        let m: MacAddr = "02:00:00:00:00:0a".parse().unwrap();
        assert_eq!(m.to_string(), "02:00:00:00:00:0a");
        assert!("02:00:00".parse::<MacAddr>().is_err());
    }
}
