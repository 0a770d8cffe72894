//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

/// One's-complement sum of `data` folded into 32 bits (not yet complemented). Start with 0 and
/// chain calls with [`fold`] at the end; `data` of odd length is padded with a zero byte.
#[inline]
pub fn sum(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        // Add as two 32-bit halves so the 64-bit accumulator cannot overflow for any
        // packet that fits in memory.
        let v = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        acc += v >> 32;
        acc += v & 0xffff_ffff;
    }
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        acc += u16::from_be_bytes([rest[i], rest[i + 1]]) as u64;
        i += 2;
    }
    if i < rest.len() {
        acc += (rest[i] as u64) << 8;
    }
    acc
}

/// Folds an accumulator into a 16-bit one's-complement sum.
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The checksum of `data`: complement of the folded sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(0, data))
}

/// The checksum of a 20-byte IPv4 header (checksum field included as stored), for the
/// per-packet outer header: five native-endian 32-bit words summed and folded, without a loop.
/// The one's-complement sum does not depend on byte order (RFC 1071 §2(B)): summed in the
/// machine's order, it comes out byte-swapped on a little-endian machine, and `from_be` swaps it
/// back. (Ten big-endian 16-bit words cost ~15 more instructions a packet.)
#[inline(always)]
pub fn ipv4_header(h: &[u8; 20]) -> u16 {
    let w = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as u64;
    // < 5 * 2^32 < 2^35; three folds bring it to 16 bits (< 0x90000, <= 0x10008, <= 0xffff).
    let mut acc = w(0) + w(4) + w(8) + w(12) + w(16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    !u16::from_be(acc as u16)
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit word of the covered data changes from
/// `old` to `new`.
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    let acc = (!csum as u64) + (!old as u64) + new as u64;
    !fold(acc)
}

/// [`update16`] for a 32-bit field (an IPv4 address).
#[inline]
pub fn update32(csum: u16, old: u32, new: u32) -> u16 {
    let c = update16(csum, (old >> 16) as u16, (new >> 16) as u16);
    update16(c, old as u16, new as u16)
}

/// [`update16`] over a byte slice of even length that changed from `old` to `new`.
#[inline]
pub fn update_bytes(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    let mut acc = !csum as u64;
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        acc += !u16::from_be_bytes([o[0], o[1]]) as u64;
        acc += u16::from_be_bytes([n[0], n[1]]) as u64;
    }
    !fold(acc)
}

/// Sum of the IPv4 or IPv6 pseudo-header for an upper-layer checksum.
pub fn pseudo_header(src: &[u8], dst: &[u8], proto: u8, len: u32) -> u64 {
    let mut acc = sum(0, src);
    acc = sum(acc, dst);
    acc += proto as u64;
    acc += (len >> 16) as u64 + (len & 0xffff) as u64;
    acc
}

/// The pseudo-header sum of the IP packet `ip` (IPv4 or IPv6 by its version; at least its fixed
/// header long) for an upper layer `proto` of `len` bytes.
#[inline]
pub fn ip_pseudo_header(ip: &[u8], proto: u8, len: u32) -> u64 {
    if ip[0] >> 4 == 4 {
        pseudo_header(&ip[12..16], &ip[16..20], proto, len)
    } else {
        pseudo_header(&ip[8..24], &ip[24..40], proto, len)
    }
}

/// Where the checksum field of an L4 header of `proto` sits in it (TCP, UDP, ICMP, ICMPv6).
#[inline]
pub fn l4_checksum_at(proto: u8) -> Option<usize> {
    match proto {
        crate::ip_proto::TCP => Some(16),
        crate::ip_proto::UDP => Some(6),
        crate::ip_proto::ICMP | crate::ip_proto::ICMPV6 => Some(2),
        _ => None,
    }
}

/// True if the TCP or UDP checksum field of the IP packet `ip` (L4 header at `l4_off`) holds the
/// folded sum of its pseudo-header: what a sender with transmit checksum offload leaves for the
/// NIC to finish ("partial"). A complete checksum holds that value 1 time in 65,536 (finishing
/// it, [`crate::build::fill_l4_checksum`], computes it again to the same value). False for
/// other protocols and for headers too short.
#[inline]
pub fn l4_field_is_pseudo(ip: &[u8], l4_off: usize, proto: u8) -> bool {
    let Some(at) = l4_checksum_at(proto).filter(|_| matches!(proto, crate::ip_proto::TCP | crate::ip_proto::UDP)) else {
        return false;
    };
    let v4 = ip.first().is_some_and(|b| b >> 4 == 4);
    if ip.len() < l4_off + at + 2 || ip.len() < if v4 { 20 } else { 40 } {
        return false;
    }
    let ph = ip_pseudo_header(ip, proto, (ip.len() - l4_off) as u32);
    u16::from_be_bytes([ip[l4_off + at], ip[l4_off + at + 1]]) == fold(ph)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_valid_ipv4_header_sums_to_zero_and_a_changed_one_does_not() {
        // 192.168.0.1 -> 192.168.0.199, UDP, checksum 0xb861 as sent.
        let mut h =
            [0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7];
        assert_eq!(ipv4_header(&h), 0);
        h[10..12].fill(0);
        assert_eq!(ipv4_header(&h), 0xb861);
        h[19] = 0xc8;
        assert_ne!(ipv4_header(&h), 0xb861);
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example bytes: sum is 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(0, &d)), 0xddf2);
    }

    proptest! {
        #[test]
        fn ipv4_header_fast_path_agrees(h in any::<[u8; 20]>()) {
            prop_assert_eq!(ipv4_header(&h), checksum(&h));
        }

        #[test]
        fn incremental_update_equals_recompute(mut data in proptest::collection::vec(any::<u8>(), 2..64), at in 0usize..31, new in any::<u16>()) {
            if data.len() % 2 == 1 { data.push(0); }
            let at = (at * 2) % data.len();
            let c0 = checksum(&data);
            let old = u16::from_be_bytes([data[at], data[at + 1]]);
            data[at..at + 2].copy_from_slice(&new.to_be_bytes());
            let c1 = checksum(&data);
            // One's complement has two zeros; compare sums folded the same way.
            let inc = update16(c0, old, new);
            prop_assert!(inc == c1 || (inc == 0xffff && c1 == 0) || (inc == 0 && c1 == 0xffff));
        }
    }
}
