//! Which of a node's dispatcher threads (`data_cores`) a VXLAN datagram belongs to.
//!
//! Each thread is a node of its own with its own NT state, so both directions of a flow whose
//! state an NT keeps must reach the same thread, and the packets of one flow must stay on one
//! thread (no reordering). The rule, on the datagram's UDP payload (the VXLAN header and the
//! inner frame), decided before any thread sees it (the UDP backend compiles it into the
//! classic BPF program of its reuseport group, and a test checks the kernel agrees with
//! [`Steering::thread_of`] on random datagrams):
//!
//! 1. **A source NAT's return traffic** (a tenant's VNI, inner IPv4 to the NAT's public address,
//!    a TCP or UDP destination port or an ICMP echo identifier in its range) goes to the thread
//!    whose block of the range holds the port: thread `k` of `n` allocates only from block `k`
//!    ([`crate::fair::OnBoard::ports`], the pool's owner rule one level down), so the thread
//!    that made the mapping gets its replies — their outer and inner hashes are the other
//!    direction's.
//! 2. **A destination NAT's replies** (from its inside address and port, that tenant's VNI)
//!    are hashed as if they came from the public address and port the client sent to, so they
//!    meet the thread of the client's packets.
//! 3. **Everything else** by a hash over the inner addresses and ports that does not depend on
//!    the direction (XOR of source and destination): a flow and its reverse land together. ICMP
//!    echo by its identifier; inner fragments, and IP protocols without ports, by addresses
//!    alone; frames that are not IP (ARP) on thread 0.
//!
//! A datagram too short for a header the rule reads goes to thread 0 (and the reuseport
//! group's first queue, as the single-thread steering program does).
//!
//! What a tenant controls: its own inner headers, so it can put all its flows on one thread.
//! That fills that thread's core only — fair sharing counts each thread's dispatcher as a
//! resource of its own ([`crate::fair::Board`]) — and a claim matches only its own VNIs, so it
//! cannot steer through another tenant's NAT.

use crate::mat::PortRange;
use std::net::Ipv4Addr;

/// A tenant's NAT, as the steering rule reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatClaim {
    /// The tenant's VNIs: the claim matches only datagrams on them.
    pub vnis: Vec<u32>,
    /// What the NAT translates.
    pub kind: NatKind,
}

/// One translation of a NAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatKind {
    /// Source NAT: return traffic to `public` and a port of `ports`.
    Snat {
        /// The public address.
        public: Ipv4Addr,
        /// The whole range it allocates from.
        ports: PortRange,
    },
    /// Destination NAT: replies from `to:to_port` (protocol `proto`) for clients of
    /// `public:port`.
    Dnat {
        /// 6 or 17.
        proto: u8,
        /// The public address clients send to.
        public: Ipv4Addr,
        /// Its port.
        port: u16,
        /// The inside address.
        to: Ipv4Addr,
        /// The inside port.
        to_port: u16,
    },
}

/// The rule for a node of `threads` dispatcher threads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Steering {
    /// The node's dispatcher threads (1: every datagram on thread 0).
    pub threads: u16,
    /// Its tenants' NATs, in the order they are checked (the first that matches decides).
    pub claims: Vec<NatClaim>,
}

/// Offsets in the UDP payload: the VXLAN header, the inner Ethernet type, the inner IP header.
pub const VNI_AT: usize = 4;
/// The inner frame's EtherType (an untagged frame).
pub const ETHERTYPE_AT: usize = 20;
/// The inner IP header.
pub const IP_AT: usize = 22;

/// The headers the rule reads, as the program keeps them.
#[derive(Debug, Default, Clone, Copy)]
struct Fields {
    vni: u32,
    /// 0 for an inner fragment (no claim matches it).
    proto: u8,
    sport: u16,
    dport: u16,
    src: u32,
    dst: u32,
}

impl Steering {
    /// The thread of a datagram whose UDP payload is `p` (see the module docs).
    pub fn thread_of(&self, p: &[u8]) -> u16 {
        if self.threads <= 1 {
            return 0;
        }
        self.decide(p).unwrap_or(0)
    }

    /// `None` where the kernel's program runs past the datagram's end (its verdict is then
    /// socket 0 of the group).
    pub fn decide(&self, p: &[u8]) -> Option<u16> {
        let vni = word(p, VNI_AT)? >> 8;
        let mut f = Fields { vni, ..Fields::default() };
        match half(p, ETHERTYPE_AT)? {
            0x0800 => {
                if p.get(IP_AT)? >> 4 != 4 {
                    return Some(0);
                }
                f.src = word(p, IP_AT + 12)?;
                f.dst = word(p, IP_AT + 16)?;
                let fragment = half(p, IP_AT + 6)? & 0x3fff != 0;
                let proto = *p.get(IP_AT + 9)?;
                if !fragment {
                    f.proto = proto;
                    let l4 = IP_AT + 4 * usize::from(p[IP_AT] & 0xf);
                    match proto {
                        6 | 17 => {
                            let w = word(p, l4)?;
                            (f.sport, f.dport) = ((w >> 16) as u16, w as u16);
                        }
                        1 => {
                            let ty = *p.get(l4)?;
                            if ty == 0 || ty == 8 {
                                f.dport = half(p, l4 + 4)?;
                            }
                        }
                        _ => {}
                    }
                }
                for c in &self.claims {
                    if !c.vnis.contains(&f.vni) {
                        continue;
                    }
                    match c.kind {
                        NatKind::Snat { public, ports } => {
                            if f.dst == u32::from(public) && matches!(f.proto, 1 | 6 | 17) && (ports.lo..=ports.hi).contains(&f.dport) {
                                return Some(crate::pool::owner::slot_of(ports, self.threads, f.dport));
                            }
                        }
                        NatKind::Dnat { proto, public, port, to, to_port } => {
                            if f.proto == proto && f.src == u32::from(to) && f.sport == to_port {
                                return Some(self.fold(u32::from(public) ^ f.dst ^ u32::from(port) ^ u32::from(f.dport)));
                            }
                        }
                    }
                }
            }
            0x86dd => {
                let x = |at: usize| -> Option<u32> { Some(word(p, at)? ^ word(p, at + 4)? ^ word(p, at + 8)? ^ word(p, at + 12)?) };
                f.src = x(IP_AT + 8)?;
                f.dst = x(IP_AT + 24)?;
                if matches!(p.get(IP_AT + 6)?, 6 | 17) {
                    let w = word(p, IP_AT + 40)?;
                    (f.sport, f.dport) = ((w >> 16) as u16, w as u16);
                }
            }
            _ => return Some(0),
        }
        Some(self.fold(f.src ^ f.dst ^ u32::from(f.sport) ^ u32::from(f.dport)))
    }

    /// A hash's thread: its halves and then its bytes folded, modulo the threads.
    pub fn fold(&self, h: u32) -> u16 {
        let h = h ^ (h >> 16);
        let h = h ^ (h >> 8);
        (h % u32::from(self.threads.max(1))) as u16
    }
}

fn word(p: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(p.get(at..at + 4)?.try_into().ok()?))
}

fn half(p: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(p.get(at..at + 2)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A VXLAN payload: VNI `vni`, an inner IPv4 packet of `proto` from `src:sport` to
    /// `dst:dport` (an ICMP echo with identifier `sport` when `proto` is 1).
    pub(crate) fn v4(vni: u32, proto: u8, src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
        let mut p = vec![0x08, 0, 0, 0];
        p.extend_from_slice(&(vni << 8).to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0];
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        p.extend_from_slice(&ip);
        match proto {
            1 => p.extend_from_slice(&[8, 0, 0, 0, (sport >> 8) as u8, sport as u8, 0, 1]),
            _ => {
                p.extend_from_slice(&sport.to_be_bytes());
                p.extend_from_slice(&dport.to_be_bytes());
                p.extend_from_slice(&[0; 16]);
            }
        }
        p
    }

    fn two(claims: Vec<NatClaim>) -> Steering {
        Steering { threads: 2, claims }
    }

    #[test]
    fn a_flow_and_its_reverse_land_on_one_thread_and_flows_spread() {
        let s = Steering { threads: 4, claims: vec![] };
        let mut seen = [0u32; 4];
        for port in 1000..1400u16 {
            let there = s.thread_of(&v4(7, 6, [10, 0, 0, 1], port, [10, 0, 0, 2], 80));
            let back = s.thread_of(&v4(7, 6, [10, 0, 0, 2], 80, [10, 0, 0, 1], port));
            assert_eq!(there, back, "port {port}");
            seen[usize::from(there)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }

    #[test]
    fn a_snat_reply_goes_to_the_thread_whose_block_holds_its_port() {
        let ports = PortRange { lo: 1024, hi: 65535 };
        let s = two(vec![NatClaim { vnis: vec![7], kind: NatKind::Snat { public: Ipv4Addr::new(192, 0, 2, 1), ports } }]);
        // Block 0 is 1024..=33279, block 1 33280..=65535 (owner::block).
        for (port, thread) in [(1024, 0), (33279, 0), (33280, 1), (65535, 1)] {
            assert_eq!(s.thread_of(&v4(7, 17, [8, 8, 8, 8], 53, [192, 0, 2, 1], port)), thread, "port {port}");
            assert_eq!(s.thread_of(&v4(7, 1, [8, 8, 8, 8], port, [192, 0, 2, 1], 0)), thread, "ICMP id {port}");
        }
        // Another tenant's datagrams to the same address are hashed: the claim is not theirs.
        let other = |port| s.thread_of(&v4(9, 17, [8, 8, 8, 8], 53, [192, 0, 2, 1], port));
        let hashed = |port| s.fold(u32::from_be_bytes([8, 8, 8, 8]) ^ u32::from_be_bytes([192, 0, 2, 1]) ^ 53 ^ u32::from(port));
        assert!((1024..1100).all(|p| other(p) == hashed(p)));
    }

    #[test]
    fn a_dnat_reply_meets_its_clients_packets() {
        let (public, to) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(10, 0, 0, 5));
        let s = Steering {
            threads: 3,
            claims: vec![NatClaim { vnis: vec![7], kind: NatKind::Dnat { proto: 6, public, port: 80, to, to_port: 8080 } }],
        };
        for cport in 40000..40100u16 {
            let ask = s.thread_of(&v4(7, 6, [198, 51, 100, 9], cport, public.octets(), 80));
            let reply = s.thread_of(&v4(7, 6, to.octets(), 8080, [198, 51, 100, 9], cport));
            assert_eq!(ask, reply, "client port {cport}");
        }
    }

    #[test]
    fn short_and_non_ip_datagrams_go_to_thread_0() {
        let s = two(vec![]);
        assert_eq!(s.decide(&[0; 10]), None);
        let mut arp = v4(7, 6, [1, 2, 3, 4], 1, [5, 6, 7, 8], 2);
        arp[ETHERTYPE_AT..ETHERTYPE_AT + 2].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(s.decide(&arp), Some(0));
        // Cut inside the ports: the program's load fails.
        assert_eq!(s.decide(&v4(7, 6, [1, 2, 3, 4], 1, [5, 6, 7, 8], 2)[..IP_AT + 22]), None);
    }
}
