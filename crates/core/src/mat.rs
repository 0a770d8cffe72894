//! The match-action table (paper §4.1): the control plane installs rules, the parser looks every
//! packet up once.
//!
//! A rule matches on the VNI, optionally the inner IP protocol, optionally an inner destination
//! prefix, and a destination port range (TCP and UDP only). Its action sends the packet to a
//! tenant's DAG, passes it through untouched (plain switching), or drops it.
//!
//! **Which rule wins.** Within a VNI: an *exact* rule (full-length prefix, a protocol and a
//! single port) beats every other rule; otherwise the rule with the *longest* prefix wins, a
//! rule without a prefix counting as shorter than /0 of either family (it also matches non-IP
//! frames such as ARP); among rules of equal prefix length, higher `priority` wins, then the
//! rule installed first. [`Mat::lookup_reference`] states the same order as a linear scan and the
//! property tests hold the indexed lookup to it.
//!
//! **Updating while traffic flows.** A `Mat` is a value: the control plane edits a copy and
//! publishes it (the data plane swaps an `Arc` once per batch), so a lookup always sees one
//! consistent table, never a half-applied update, and the data plane never stops.

use crate::ids::{DagUid, TenantId};
use core::net::IpAddr;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Run the tenant's DAG.
    Dag {
        /// Tenant.
        tenant: TenantId,
        /// DAG UID.
        dag: DagUid,
    },
    /// Forward without running any NT (plain switching, or traffic another node handles).
    PassThrough {
        /// Tenant charged for the traffic.
        tenant: TenantId,
    },
    /// Drop.
    Drop,
}

/// An IP prefix. Serialized as `"10.0.0.0/8"` (a bare address means a full-length prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IpPrefix {
    /// Address (bits past `len` are ignored).
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl IpPrefix {
    /// A prefix, or `None` if `len` exceeds the family's width.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        (len <= width(&addr)).then_some(IpPrefix { addr, len })
    }
    /// True if `a` is inside this prefix (same family).
    pub fn contains(&self, a: &IpAddr) -> bool {
        a.is_ipv4() == self.addr.is_ipv4() && masked(a, self.len) == masked(&self.addr, self.len)
    }
}

impl core::str::FromStr for IpPrefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| format!("`{a}` is not an IP address"))?;
        let len = match l {
            Some(l) => l.parse::<u8>().map_err(|_| format!("`{l}` is not a prefix length"))?,
            None => width(&addr),
        };
        IpPrefix::new(addr, len).ok_or_else(|| format!("prefix length {len} is too long for {addr}"))
    }
}

impl TryFrom<String> for IpPrefix {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<IpPrefix> for String {
    fn from(p: IpPrefix) -> String {
        p.to_string()
    }
}

impl core::fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

fn width(a: &IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

/// The address as a u128 with only the first `len` bits kept.
fn masked(a: &IpAddr, len: u8) -> u128 {
    let (v, w) = match a {
        IpAddr::V4(v) => (u32::from_be_bytes(v.octets()) as u128, 32u32),
        IpAddr::V6(v) => (u128::from_be_bytes(v.octets()), 128u32),
    };
    if len == 0 {
        0
    } else {
        let keep = (len as u32).min(w);
        let mask = if keep == 128 { u128::MAX } else { ((1u128 << keep) - 1) << (w - keep) };
        v & mask
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Every port.
    pub const ANY: PortRange = PortRange { lo: 0, hi: u16::MAX };
    /// One port.
    pub fn single(p: u16) -> Self {
        PortRange { lo: p, hi: p }
    }
    /// True for [`PortRange::ANY`].
    pub fn is_any(&self) -> bool {
        *self == Self::ANY
    }
    /// True if `p` is in range.
    pub fn contains(&self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

impl Default for PortRange {
    fn default() -> Self {
        Self::ANY
    }
}

/// A MAT rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    /// VNI.
    pub vni: u32,
    /// Inner IP protocol; `None` for any.
    pub proto: Option<u8>,
    /// Inner destination prefix; `None` for any (non-IP frames included).
    pub dst: Option<IpPrefix>,
    /// Inner destination ports (TCP/UDP). A rule with a narrower range never matches other
    /// protocols.
    pub dst_ports: PortRange,
    /// Tie-break among rules of equal prefix length; higher wins.
    pub priority: u16,
    /// What to do.
    pub action: Action,
}

/// The fields of a packet the MAT looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatKey {
    /// VNI.
    pub vni: u32,
    /// Inner IP protocol, 0 for non-IP.
    pub proto: u8,
    /// Inner destination address; `None` for non-IP.
    pub dst: Option<IpAddr>,
    /// Inner destination port (0 without ports).
    pub dst_port: u16,
}

/// The handle of an installed rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RuleId(pub u32);

fn has_ports(proto: u8) -> bool {
    proto == 6 || proto == 17
}

impl Rule {
    /// True if this rule matches `k` (ignoring which rule would win).
    pub fn matches(&self, k: &MatKey) -> bool {
        if self.vni != k.vni {
            return false;
        }
        if let Some(p) = self.proto {
            if p != k.proto || k.dst.is_none() {
                return false;
            }
        }
        if let Some(pre) = &self.dst {
            match &k.dst {
                Some(a) if pre.contains(a) => {}
                _ => return false,
            }
        }
        if !self.dst_ports.is_any() && (k.dst.is_none() || !has_ports(k.proto) || !self.dst_ports.contains(k.dst_port)) {
            return false;
        }
        true
    }

    fn is_exact(&self) -> bool {
        matches!((self.proto, &self.dst), (Some(p), Some(pre)) if has_ports(p) && pre.len == width(&pre.addr))
            && self.dst_ports.lo == self.dst_ports.hi
    }

    /// Rank used to pick the winner: exact first, then prefix length, then priority.
    fn rank(&self) -> (bool, i16, u16) {
        (self.is_exact(), self.dst.map_or(-1, |p| p.len as i16), self.priority)
    }
}

/// Per-VNI index.
#[derive(Debug, Clone, Default)]
struct VniTable {
    /// (proto, v6, addr, port) -> rule index into `Mat::dense`.
    exact: FxHashMap<(u8, bool, u128, u16), u32>,
    /// (v6, prefix len) groups, longest first; each maps the masked address to candidate rules in
    /// winning order.
    lpm: Vec<(bool, u8, FxHashMap<u128, Vec<u32>>)>,
    /// Rules without a prefix, in winning order.
    any_dst: Vec<u32>,
}

/// The match-action table.
#[derive(Debug, Clone, Default)]
pub struct Mat {
    rules: BTreeMap<RuleId, Rule>,
    next_id: u32,
    dense: Vec<Rule>,
    vnis: FxHashMap<u32, VniTable>,
    /// Per VNI, the outer source addresses (VTEPs) its traffic may come from, each with the
    /// interface it must arrive on (0: any); a VNI without an entry takes traffic from anywhere.
    /// See [`Mat::source_check`].
    sources: FxHashMap<u32, Vec<(IpPrefix, u32)>>,
}

/// Whether a frame's outer source may send on its VNI ([`Mat::source_check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceCheck {
    /// The VNI is open, or the source is one of its VTEPs and came in where the node reaches it.
    Allowed,
    /// The source is not one of the VNI's VTEPs.
    Foreign,
    /// The source is one of the VNI's VTEPs, but the frame came in on another interface than the
    /// one the node reaches that VTEP through: its source address is forged.
    WrongInterface,
}

impl Mat {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A table holding `rules`, indexed once (inserting them one by one re-indexes each time).
    pub fn from_rules(rules: impl IntoIterator<Item = Rule>) -> Self {
        let mut m = Mat::new();
        for r in rules {
            m.rules.insert(RuleId(m.next_id), r);
            m.next_id += 1;
        }
        m.reindex();
        m
    }

    /// Restricts `vni` to traffic whose outer source address is inside one of `prefixes` (the
    /// VTEPs of the tenant that owns it); an empty list lifts the restriction.
    pub fn set_sources(&mut self, vni: u32, prefixes: Vec<IpPrefix>) {
        if prefixes.is_empty() {
            self.sources.remove(&vni);
        } else {
            self.sources.insert(vni, prefixes.into_iter().map(|p| (p, 0)).collect());
        }
    }

    /// Says through which interface (an index, as the receive path reports it) the node reaches
    /// each allowed source prefix: `via` gives it, `None` or 0 for unknown (any interface is
    /// then accepted). A frame from an allowed source that arrives elsewhere is forged
    /// ([`SourceCheck::WrongInterface`]) — the reverse-path check a host's strict `rp_filter`
    /// makes, done by the node whatever the host's setting (docs/endpoints.md, "Trust").
    pub fn set_source_interfaces(&mut self, via: impl Fn(&IpPrefix) -> Option<u32>) {
        for ps in self.sources.values_mut() {
            for (p, i) in ps.iter_mut() {
                *i = via(p).unwrap_or(0);
            }
        }
    }

    /// Every allowed source prefix (each once).
    pub fn source_prefixes(&self) -> Vec<IpPrefix> {
        let mut v: Vec<IpPrefix> = self.sources.values().flatten().map(|(p, _)| *p).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// True if some VNI has allowed sources (a node checks sources only then).
    #[inline]
    pub fn restricts_sources(&self) -> bool {
        !self.sources.is_empty()
    }

    /// True if traffic on `vni` may come from outer source `src`: the VNI is unrestricted, or
    /// `src` is one of its VTEPs. A frame that fails this is not the tenant's and must neither
    /// be processed nor teach the forwarding table anything.
    #[inline]
    pub fn source_allowed(&self, vni: u32, src: &IpAddr) -> bool {
        self.source_check(vni, src, 0) != SourceCheck::Foreign
    }

    /// [`Mat::source_allowed`], and for a frame that arrived on interface `arrived_on` (0:
    /// unknown), whether that is where the node reaches the source: the most specific allowed
    /// prefix holding `src` decides.
    #[inline]
    pub fn source_check(&self, vni: u32, src: &IpAddr, arrived_on: u32) -> SourceCheck {
        let Some(ps) = self.sources.get(&vni) else { return SourceCheck::Allowed };
        let best = ps.iter().filter(|(p, _)| p.contains(src)).max_by_key(|(p, _)| p.len);
        match best {
            None => SourceCheck::Foreign,
            Some(&(_, via)) if via != 0 && arrived_on != 0 && via != arrived_on => SourceCheck::WrongInterface,
            Some(_) => SourceCheck::Allowed,
        }
    }

    /// Installs a rule.
    pub fn insert(&mut self, rule: Rule) -> RuleId {
        let id = RuleId(self.next_id);
        self.next_id += 1;
        self.rules.insert(id, rule);
        self.reindex();
        id
    }

    /// Removes a rule; returns it if it was installed.
    pub fn remove(&mut self, id: RuleId) -> Option<Rule> {
        let r = self.rules.remove(&id);
        if r.is_some() {
            self.reindex();
        }
        r
    }

    /// Installed rules in installation order.
    pub fn rules(&self) -> impl Iterator<Item = (RuleId, &Rule)> {
        self.rules.iter().map(|(i, r)| (*i, r))
    }

    /// Number of installed rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True if no rule is installed.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    fn reindex(&mut self) {
        self.dense = self.rules.values().copied().collect();
        self.vnis.clear();
        // Candidate lists are kept in winning order: priority desc, then installation order.
        let mut order: Vec<u32> = (0..self.dense.len() as u32).collect();
        order.sort_by_key(|&i| (core::cmp::Reverse(self.dense[i as usize].priority), i));
        for i in order {
            let r = &self.dense[i as usize];
            let t = self.vnis.entry(r.vni).or_default();
            if r.is_exact() {
                let pre = r.dst.expect("exact rules have a prefix");
                let p = r.proto.expect("exact rules have a protocol");
                t.exact.entry((p, pre.addr.is_ipv6(), masked(&pre.addr, pre.len), r.dst_ports.lo)).or_insert(i);
                continue;
            }
            match &r.dst {
                None => t.any_dst.push(i),
                Some(pre) => {
                    let v6 = pre.addr.is_ipv6();
                    let g = match t.lpm.iter_mut().position(|(f, l, _)| *f == v6 && *l == pre.len) {
                        Some(g) => g,
                        None => {
                            t.lpm.push((v6, pre.len, FxHashMap::default()));
                            t.lpm.len() - 1
                        }
                    };
                    t.lpm[g].2.entry(masked(&pre.addr, pre.len)).or_default().push(i);
                }
            }
        }
        for t in self.vnis.values_mut() {
            t.lpm.sort_by_key(|(_, l, _)| core::cmp::Reverse(*l));
        }
    }

    /// The action for a packet, or `None` if no rule matches. Cost: one hash probe per distinct
    /// prefix length of the VNI's family, plus a scan of the (usually one) candidates in the
    /// matching bucket.
    #[inline]
    pub fn lookup(&self, k: &MatKey) -> Option<Action> {
        let t = self.vnis.get(&k.vni)?;
        if let Some(a) = &k.dst {
            let v6 = a.is_ipv6();
            if !t.exact.is_empty() {
                let full = masked(a, 128);
                if let Some(&i) = t.exact.get(&(k.proto, v6, full, k.dst_port)) {
                    return Some(self.dense[i as usize].action);
                }
            }
            for (f, len, map) in &t.lpm {
                if *f != v6 {
                    continue;
                }
                if let Some(cands) = map.get(&masked(a, *len)) {
                    for &i in cands {
                        let r = &self.dense[i as usize];
                        if r.matches(k) {
                            return Some(r.action);
                        }
                    }
                }
            }
        }
        t.any_dst.iter().map(|&i| &self.dense[i as usize]).find(|r| r.matches(k)).map(|r| r.action)
    }

    /// The slow, obviously-correct statement of [`Mat::lookup`]: scan every rule, keep the best
    /// by (exact, prefix length, priority), earliest installed on ties.
    pub fn lookup_reference(&self, k: &MatKey) -> Option<Action> {
        let mut best: Option<&Rule> = None;
        for r in self.rules.values() {
            if r.matches(k) && best.is_none_or(|b| r.rank() > b.rank()) {
                best = Some(r);
            }
        }
        best.map(|r| r.action)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn sources_restrict_only_their_vnis() {
        let mut m = Mat::from_rules([]);
        assert!(!m.restricts_sources());
        m.set_sources(100, vec!["10.0.0.1".parse().unwrap(), "192.168.0.0/16".parse().unwrap()]);
        assert!(m.restricts_sources());
        let ok = |m: &Mat, v: u32, a: &str| m.source_allowed(v, &a.parse().unwrap());
        assert!(ok(&m, 100, "10.0.0.1") && ok(&m, 100, "192.168.7.9"));
        assert!(!ok(&m, 100, "10.0.0.2") && !ok(&m, 100, "::1"));
        assert!(ok(&m, 200, "10.0.0.2"), "a VNI without sources is open");
        m.set_sources(100, vec![]);
        assert!(!m.restricts_sources() && ok(&m, 100, "10.0.0.2"));
    }

    #[test]
    fn an_allowed_source_must_come_in_where_the_node_reaches_it() {
        let mut m = Mat::from_rules([]);
        m.set_sources(100, vec!["192.168.1.2".parse().unwrap(), "192.168.2.0/24".parse().unwrap()]);
        m.set_sources(200, vec!["192.168.2.2".parse().unwrap()]);
        let at = |m: &Mat, v: u32, a: &str, i: u32| m.source_check(v, &a.parse().unwrap(), i);
        assert_eq!(at(&m, 100, "192.168.2.2", 7), SourceCheck::Allowed, "interfaces not known yet: any");
        m.set_source_interfaces(|p| match p.to_string().as_str() {
            "192.168.1.2/32" => Some(5),
            "192.168.2.2/32" => Some(6),
            "192.168.2.0/24" => None,
            _ => unreachable!("{p}"),
        });
        assert_eq!(at(&m, 100, "192.168.1.2", 5), SourceCheck::Allowed);
        assert_eq!(at(&m, 100, "192.168.1.2", 6), SourceCheck::WrongInterface, "forged from the other endpoint's side");
        assert_eq!(at(&m, 100, "192.168.1.2", 0), SourceCheck::Allowed, "a receive path that does not tell");
        assert_eq!(at(&m, 100, "192.168.2.9", 5), SourceCheck::Allowed, "a prefix whose way is unknown");
        assert_eq!(at(&m, 200, "192.168.2.2", 5), SourceCheck::WrongInterface);
        assert_eq!(at(&m, 200, "192.168.2.3", 6), SourceCheck::Foreign);
        assert_eq!(m.source_prefixes().len(), 3);
    }

    use super::*;
    use proptest::prelude::*;

    fn dag(t: u16) -> Action {
        Action::Dag { tenant: TenantId(t), dag: DagUid(t as u32) }
    }

    fn key(vni: u32, proto: u8, dst: &str, port: u16) -> MatKey {
        MatKey { vni, proto, dst: Some(dst.parse().unwrap()), dst_port: port }
    }

    #[test]
    fn longest_prefix_then_exact_wins() {
        let mut m = Mat::new();
        m.insert(Rule { vni: 10, proto: None, dst: None, dst_ports: PortRange::ANY, priority: 0, action: dag(1) });
        m.insert(Rule {
            vni: 10,
            proto: None,
            dst: Some("10.0.0.0/8".parse().unwrap()),
            dst_ports: PortRange::ANY,
            priority: 0,
            action: dag(2),
        });
        m.insert(Rule {
            vni: 10,
            proto: None,
            dst: Some("10.1.0.0/16".parse().unwrap()),
            dst_ports: PortRange::ANY,
            priority: 0,
            action: Action::Drop,
        });
        m.insert(Rule {
            vni: 10,
            proto: Some(6),
            dst: Some("10.1.2.3/32".parse().unwrap()),
            dst_ports: PortRange::single(80),
            priority: 0,
            action: dag(3),
        });
        assert_eq!(m.lookup(&key(10, 17, "10.2.0.1", 1)), Some(dag(2)));
        assert_eq!(m.lookup(&key(10, 17, "10.1.0.1", 1)), Some(Action::Drop));
        assert_eq!(m.lookup(&key(10, 6, "10.1.2.3", 80)), Some(dag(3)));
        assert_eq!(m.lookup(&key(10, 6, "10.1.2.3", 81)), Some(Action::Drop));
        assert_eq!(m.lookup(&key(10, 6, "192.168.0.1", 81)), Some(dag(1)));
        assert_eq!(m.lookup(&key(11, 6, "10.1.2.3", 80)), None);
        // Non-IP frames (ARP) only match rules without protocol, prefix or ports.
        assert_eq!(m.lookup(&MatKey { vni: 10, proto: 0, dst: None, dst_port: 0 }), Some(dag(1)));
    }

    #[test]
    fn remove_restores_previous_winner() {
        let mut m = Mat::new();
        m.insert(Rule { vni: 1, proto: None, dst: None, dst_ports: PortRange::ANY, priority: 0, action: dag(1) });
        let id = m.insert(Rule {
            vni: 1,
            proto: None,
            dst: Some("0.0.0.0/0".parse().unwrap()),
            dst_ports: PortRange::ANY,
            priority: 0,
            action: dag(2),
        });
        assert_eq!(m.lookup(&key(1, 17, "1.2.3.4", 5)), Some(dag(2)));
        assert!(m.remove(id).is_some());
        assert!(m.remove(id).is_none());
        assert_eq!(m.lookup(&key(1, 17, "1.2.3.4", 5)), Some(dag(1)));
    }

    #[test]
    fn prefix_parse_errors() {
        assert!("10.0.0.0/33".parse::<IpPrefix>().is_err());
        assert!("nonsense/8".parse::<IpPrefix>().is_err());
        assert_eq!("10.0.0.1".parse::<IpPrefix>().unwrap().len, 32);
        assert_eq!("fd00::/8".parse::<IpPrefix>().unwrap().len, 8);
    }

    // Small value spaces so random keys hit random rules often.
    fn addr_strategy() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            (0u8..4, 0u8..4).prop_map(|(a, b)| IpAddr::from([10, a, b, 1])),
            (0u16..4).prop_map(|a| IpAddr::from([0xfd00, a, 0, 0, 0, 0, 0, 1])),
        ]
    }

    fn rule_strategy() -> impl Strategy<Value = Rule> {
        (
            1u32..3,
            proptest::option::of(prop_oneof![Just(6u8), Just(17u8), Just(1u8)]),
            proptest::option::of((addr_strategy(), 0u8..129)),
            prop_oneof![Just(PortRange::ANY), (0u16..4, 0u16..4).prop_map(|(a, b)| PortRange { lo: a.min(b), hi: a.max(b) })],
            0u16..3,
            prop_oneof![(0u16..5).prop_map(dag), Just(Action::Drop), (0u16..3).prop_map(|t| Action::PassThrough { tenant: TenantId(t) })],
        )
            .prop_map(|(vni, proto, dst, dst_ports, priority, action)| Rule {
                vni,
                proto,
                dst: dst.map(|(a, l)| IpPrefix { addr: a, len: l.min(if a.is_ipv4() { 32 } else { 128 }) }),
                dst_ports,
                priority,
                action,
            })
    }

    fn key_strategy() -> impl Strategy<Value = MatKey> {
        (1u32..3, prop_oneof![Just(6u8), Just(17u8), Just(1u8), Just(0u8)], addr_strategy(), 0u16..5)
            .prop_map(|(vni, proto, a, p)| MatKey { vni, proto, dst: (proto != 0).then_some(a), dst_port: p })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The indexed lookup agrees with the linear reference, through inserts and removals.
        #[test]
        fn lookup_matches_reference(rules in proptest::collection::vec(rule_strategy(), 0..24), removals in proptest::collection::vec(any::<prop::sample::Index>(), 0..6), keys in proptest::collection::vec(key_strategy(), 1..32)) {
            let mut m = Mat::new();
            let ids: Vec<RuleId> = rules.iter().map(|r| m.insert(*r)).collect();
            for k in &keys {
                prop_assert_eq!(m.lookup(k), m.lookup_reference(k), "key {:?}", k);
            }
            if !ids.is_empty() {
                for r in removals { m.remove(ids[r.index(ids.len())]); }
            }
            for k in &keys {
                prop_assert_eq!(m.lookup(k), m.lookup_reference(k), "after removals, key {:?}", k);
            }
        }
    }
}
