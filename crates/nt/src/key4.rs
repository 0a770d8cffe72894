//! An IPv4 flow key packed into one `u128`, for the NTs that keep per-flow tables (NAT,
//! firewall): compared, copied and stored as two machine words, where a [`FlowKey`] is two
//! 17-byte address enums.

use core::net::IpAddr;
use snic_wire::layout::FlowKey;

/// An IPv4 flow key packed into one `u128` (source and destination address, ports, protocol;
/// bits 104 to 127 are 0). Kept as [`FlowKey`]s, the NAT's lookups, compares and copies cost
/// the `vpc` chain about 200 instructions a packet (callgrind). The packed key hashes to the
/// same value as its [`FlowKey`] ([`Key4::hash64`]), so the NAT's index and
/// [`crate::Nt::flow_hashes`] are unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key4(pub(crate) u128);

impl Key4 {
    #[inline]
    pub(crate) fn new(src: u32, dst: u32, proto: u8, src_port: u16, dst_port: u16) -> Self {
        Key4(src as u128 | (dst as u128) << 32 | (src_port as u128) << 64 | (dst_port as u128) << 80 | (proto as u128) << 96)
    }

    /// The key of an IPv4 flow; `None` for any other.
    #[inline]
    pub(crate) fn of(k: &FlowKey) -> Option<Self> {
        match (k.src, k.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(Key4::new(s.into(), d.into(), k.proto, k.src_port, k.dst_port)),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn src(self) -> u32 {
        self.0 as u32
    }
    #[inline]
    pub(crate) fn dst(self) -> u32 {
        (self.0 >> 32) as u32
    }
    #[inline]
    pub(crate) fn src_port(self) -> u16 {
        (self.0 >> 64) as u16
    }
    #[inline]
    pub(crate) fn dst_port(self) -> u16 {
        (self.0 >> 80) as u16
    }
    #[inline]
    pub(crate) fn proto(self) -> u8 {
        (self.0 >> 96) as u8
    }

    /// The same flow seen from the other end.
    #[inline]
    pub(crate) fn reversed(self) -> Self {
        Key4::new(self.dst(), self.src(), self.proto(), self.dst_port(), self.src_port())
    }

    /// As a [`FlowKey`].
    pub(crate) fn key(self) -> FlowKey {
        FlowKey {
            src: IpAddr::V4(self.src().into()),
            dst: IpAddr::V4(self.dst().into()),
            proto: self.proto(),
            src_port: self.src_port(),
            dst_port: self.dst_port(),
        }
    }

    /// [`FlowKey::hash64`] of [`Key4::key`], without building it.
    #[inline]
    pub(crate) fn hash64(self) -> u64 {
        FlowKey::hash_v4(self.src(), self.dst(), self.proto(), self.src_port(), self.dst_port())
    }
}
