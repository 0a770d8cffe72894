//! The `firewall` NT: ordered 5-tuple rules with prefixes and port ranges, first match wins,
//! and a default policy when none matches.
//!
//! Classification cost must not grow with the rule count for established traffic (nftables with
//! 3000 linear rules fell to ≈10 kpps on this kind of machine, DEPENDENCIES.md). So the first
//! packet of a flow is classified by a linear first-match scan, and its verdict is remembered in
//! a fixed-size, 4-way set-associative flow cache keyed by the full 5-tuple; later packets of
//! the flow cost one probe of four slots. The cache is allocated once at construction and a new
//! flow replaces the set's entries round-robin, so memory is fixed and a cache miss is only
//! slower, never wrong. (A direct-mapped cache thrashed: 1024 flows in 4096 slots collide for
//! about a fifth of them, and each collision re-scans every rule.) IPv4 flows are cached with
//! their keys packed, a set in one cache line; other flows (IPv6) in a cache of whole keys of the
//! same shape.

use crate::key4::Key4;
use crate::{Ctx, DropReason, Nt, Pkt, Verdict};
use serde::{Deserialize, Serialize};
use snic_core::mat::{IpPrefix, PortRange};
use snic_wire::layout::FlowKey;

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Let the packet through.
    #[default]
    Allow,
    /// Drop it.
    Deny,
}

/// One firewall rule. Absent fields match anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FwRule {
    /// Source prefix.
    #[serde(default)]
    pub src: Option<IpPrefix>,
    /// Destination prefix.
    #[serde(default)]
    pub dst: Option<IpPrefix>,
    /// IP protocol number.
    #[serde(default)]
    pub proto: Option<u8>,
    /// Source ports (TCP/UDP).
    #[serde(default)]
    pub src_ports: PortRange,
    /// Destination ports (TCP/UDP).
    #[serde(default)]
    pub dst_ports: PortRange,
    /// What to do on a match.
    pub action: Policy,
}

impl FwRule {
    /// True if the rule matches the flow.
    pub fn matches(&self, k: &FlowKey) -> bool {
        let ports = k.proto == 6 || k.proto == 17;
        self.proto.is_none_or(|p| p == k.proto)
            && self.src.is_none_or(|p| p.contains(&k.src))
            && self.dst.is_none_or(|p| p.contains(&k.dst))
            && (self.src_ports.is_any() || (ports && self.src_ports.contains(k.src_port)))
            && (self.dst_ports.is_any() || (ports && self.dst_ports.contains(k.dst_port)))
    }
}

/// Firewall configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FirewallConfig {
    /// Rules in order; the first match decides.
    #[serde(default)]
    pub rules: Vec<FwRule>,
    /// Policy when no rule matches.
    #[serde(default)]
    pub default: Policy,
    /// Policy for non-IP frames (ARP): allowed by default so tenants can resolve addresses.
    #[serde(default)]
    pub non_ip: Policy,
    /// Flow-cache slots (rounded up to a power of two); 0 disables the cache.
    #[serde(default = "default_cache")]
    pub flow_cache: usize,
}

fn default_cache() -> usize {
    4096
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: FlowKey,
    allow: bool,
}

/// A set of the IPv4 flow cache: four packed keys ([`Key4`]) in one cache line, each way with
/// [`USED`] set when it holds a flow and [`ALLOW`] its verdict. Kept as `FlowKey` slots (two
/// 17-byte address enums each, three lines a set), a hit cost the `vpc` chain about 80
/// instructions a packet more: the key hashed through its enums twice (prefetch and lookup)
/// and compared field by field in each way.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct Set4([u128; WAYS]);

/// The [`Set4`] of packed key `k`, before masking: the firewall's own index, so one multiply
/// (of the key's two words folded) where [`Key4::hash64`] spends four.
#[inline]
fn set_of(k: Key4) -> usize {
    let x = (k.0 as u64) ^ ((k.0 >> 64) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 32) as usize
}

/// Puts a new flow into its set in place of the way `victim` names, and moves `victim` on
/// (round-robin replacement, the same in both caches).
#[inline]
fn replace_way<T>(set: &mut [T; WAYS], victim: &mut u8, entry: T) {
    let v = *victim as usize % WAYS;
    set[v] = entry;
    *victim = ((v + 1) % WAYS) as u8;
}

/// A way of a [`Set4`] holds a flow (a packed key uses bits 0 to 103 only).
const USED: u128 = 1 << 127;
/// A way of a [`Set4`] allows its flow.
const ALLOW: u128 = 1 << 126;

/// The firewall NT.
#[derive(Debug)]
pub struct Firewall {
    cfg: FirewallConfig,
    /// The flow cache for IPv4 flows, and the next way each set replaces.
    sets4: Vec<Set4>,
    victim4: Vec<u8>,
    /// The flow cache for every other flow (IPv6), and the next way each set replaces.
    cache: Vec<[Option<Slot>; WAYS]>,
    victim: Vec<u8>,
    mask: usize,
}

const WAYS: usize = 4;

impl Firewall {
    /// A firewall with this configuration.
    pub fn new(cfg: FirewallConfig) -> Self {
        let sets = if cfg.flow_cache == 0 { 0 } else { cfg.flow_cache.div_ceil(WAYS).next_power_of_two() };
        Firewall {
            sets4: vec![Set4::default(); sets],
            victim4: vec![0; sets],
            cache: vec![[None; WAYS]; sets],
            victim: vec![0; sets],
            mask: sets.wrapping_sub(1),
            cfg,
        }
    }

    /// The linear first-match classification (also the reference the cache is tested against).
    pub fn classify(&self, k: &FlowKey) -> Policy {
        self.cfg.rules.iter().find(|r| r.matches(k)).map_or(self.cfg.default, |r| r.action)
    }
}

impl Nt for Firewall {
    fn kind(&self) -> &'static str {
        "firewall"
    }

    /// Partial checksums pass through it (it reads headers only).
    fn takes_partial_checksums(&self) -> bool {
        true
    }
    #[inline]
    /// With a flow cache: its sets are spread over more memory than stays in cache beside the
    /// packets' bytes (≈50% of the firewall's time was the set's first load).
    fn wants_prefetch(&self) -> bool {
        !self.sets4.is_empty()
    }

    #[inline]
    fn prefetch(&self, meta: &crate::PktMeta) {
        if let Some(i) = &meta.inner {
            match Key4::of(&i.key) {
                Some(k) => crate::flow_index::prefetch(&self.sets4[set_of(k) & self.mask]),
                None => crate::flow_index::prefetch(&self.cache[i.key.hash64() as usize & self.mask]),
            }
        }
    }

    fn process(&mut self, _cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        let key = match &pkt.meta.inner {
            Some(i) if i.l3 != snic_wire::layout::InnerL3::Arp => &i.key,
            Some(_) => return if self.cfg.non_ip == Policy::Allow { Verdict::Continue } else { Verdict::Drop(DropReason::FirewallDeny) },
            None => return Verdict::Drop(DropReason::OpaquePayload),
        };
        let allow = if self.sets4.is_empty() {
            self.classify(key) == Policy::Allow
        } else if let Some(k) = Key4::of(key) {
            let i = set_of(k) & self.mask;
            let want = k.0 | USED;
            match self.sets4[i].0.iter().find(|&&w| w & !ALLOW == want) {
                Some(w) => w & ALLOW != 0,
                None => {
                    let allow = self.classify(key) == Policy::Allow;
                    replace_way(&mut self.sets4[i].0, &mut self.victim4[i], if allow { want | ALLOW } else { want });
                    allow
                }
            }
        } else {
            let i = key.hash64() as usize & self.mask;
            match self.cache[i].iter().flatten().find(|s| s.key == *key) {
                Some(s) => s.allow,
                None => {
                    let allow = self.classify(key) == Policy::Allow;
                    replace_way(&mut self.cache[i], &mut self.victim[i], Some(Slot { key: *key, allow }));
                    allow
                }
            }
        };
        if allow {
            Verdict::Continue
        } else {
            Verdict::Drop(DropReason::FirewallDeny)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use proptest::prelude::*;
    use snic_core::time::Instant;

    fn cx() -> Ctx<'static> {
        Ctx::real(Instant::ZERO)
    }

    #[test]
    fn first_match_and_default() {
        let cfg: FirewallConfig = serde_json::from_str(
            r#"{"rules":[
                {"proto":6,"dst_ports":{"lo":22,"hi":22},"action":"deny"},
                {"src":"10.0.0.0/24","action":"allow"}
            ],"default":"deny"}"#,
        )
        .unwrap();
        let mut fw = Firewall::new(cfg);
        let mut ssh = TestPkt::new("10.0.0.1", "10.0.1.1", tcp(4000, 22, 2), 0);
        let mut web = TestPkt::new("10.0.0.1", "10.0.1.1", tcp(4000, 80, 2), 0);
        let mut other = TestPkt::new("10.9.0.1", "10.0.1.1", udp(4000, 80), 0);
        for _ in 0..2 {
            // Twice: the second pass is served from the flow cache.
            assert_eq!(fw.process(&cx(), &mut ssh.pkt()), Verdict::Drop(DropReason::FirewallDeny));
            assert_eq!(fw.process(&cx(), &mut web.pkt()), Verdict::Continue);
            assert_eq!(fw.process(&cx(), &mut other.pkt()), Verdict::Drop(DropReason::FirewallDeny));
        }
    }

    #[test]
    fn an_ipv4_set_is_one_cache_line_and_a_slot_costs_what_the_manifest_says() {
        assert_eq!(std::mem::size_of::<Set4>(), 64);
        assert_eq!(std::mem::align_of::<Set4>(), 64);
        let per_slot = std::mem::size_of::<Set4>() / WAYS + std::mem::size_of::<Option<Slot>>();
        assert!((56..=64).contains(&per_slot), "{per_slot} B a slot; docs/manifests.md says about 60");
    }

    #[test]
    fn unknown_fields_rejected() {
        assert!(serde_json::from_str::<FirewallConfig>(r#"{"rulez":[]}"#).is_err());
    }

    proptest! {
        /// With any rules, and a cache small enough to collide, the cached verdict always equals
        /// the linear first-match classification, for IPv4 and IPv6 flows mixed (each has its
        /// own cache).
        #[test]
        fn cache_agrees_with_linear_scan(
            rules in proptest::collection::vec((proptest::option::of(0u8..4), proptest::option::of(prop_oneof![Just(6u8), Just(17u8)]), 0u16..4, any::<bool>()), 0..12),
            flows in proptest::collection::vec((0u8..4, 0u8..4, prop_oneof![Just(6u8), Just(17u8)], 0u16..4, any::<bool>()), 1..64),
            default_allow in any::<bool>())
        {
            let rules = rules.into_iter().map(|(net, proto, port, allow)| FwRule {
                src: net.map(|n| IpPrefix { addr: [10, n, 0, 0].into(), len: 16 }),
                dst: None,
                proto,
                src_ports: PortRange::ANY,
                dst_ports: PortRange { lo: port, hi: port + 1 },
                action: if allow { Policy::Allow } else { Policy::Deny },
            }).collect();
            let mut fw = Firewall::new(FirewallConfig { rules, default: if default_allow { Policy::Allow } else { Policy::Deny }, non_ip: Policy::Allow, flow_cache: 4 });
            for (a, b, proto, port, v6) in flows {
                let l4 = if proto == 6 { tcp(1000, port, 0x10) } else { udp(1000, port) };
                let (src, dst) = if v6 { (format!("fd00:{a}::1"), format!("fd00:{b}::1")) } else { (format!("10.{a}.0.1"), format!("10.{b}.0.1")) };
                let mut p = TestPkt::new(&src, &dst, l4, 0);
                let want = fw.classify(&p.meta.inner.unwrap().key);
                let got = fw.process(&cx(), &mut p.pkt());
                prop_assert_eq!(got == Verdict::Continue, want == Policy::Allow);
            }
        }
    }
}
