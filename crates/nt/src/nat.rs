//! The `nat` NT: source NAT (inside prefix → one public address, ports allocated per flow) and
//! destination NAT (public address:port → inside address:port), with per-flow state in both
//! directions, idle timeouts, and the IPv4, TCP, UDP and ICMP checksums fixed incrementally
//! (RFC 1624).
//!
//! Memory is fixed at construction: the flow table, both direction indexes and the port bitmaps
//! are sized for `max_flows`, so a new flow never allocates. The index ([`FlowIndex`]) holds
//! 8-byte entries (a key's hash and its slot; keys are compared in the slab, whose live flows sit
//! together), one line a probe, and the region asks the NAT to prefetch that line for a packet
//! a few places ahead in its batch ([`Nt::prefetch`]): a hash map of whole keys sized for 65,536
//! flows (11 MB) missed in cache and TLB on every packet, ≈20% of the vpc chain's time; when the table is full the new
//! flow's packet is dropped (`nat_table_full`), and established flows are unaffected. Expired
//! flows are reclaimed when they are next looked up, and a sweep reclaims the rest: every
//! [`SWEEP_EVERY_NS`] of packet time it checks [`SWEEP_SLOTS`] slots, so a full table is covered
//! in about a tenth of a second — far below the shortest timeout — while the per-packet path stays
//! off the cold slab. (Sweeping two slots per packet touched two cold cache lines per packet and
//! cost ≈15% of the vpc chain.)
//!
//! Scope: IPv4. IPv6 packets are treated as unmatched. ICMP echo is translated by identifier;
//! ICMP errors are passed without rewriting the header they quote.

use crate::firewall::Policy;
use crate::flow_index::FlowIndex;
use crate::key4::Key4;
use crate::{Ctx, DropReason, Nt, Pkt, StateError, Verdict};
use core::net::{IpAddr, Ipv4Addr};
use serde::{Deserialize, Serialize};
use snic_core::mat::{IpPrefix, PortRange};
use snic_core::time::Instant;
use snic_wire::layout::{FlowKey, InnerL3};
use snic_wire::{checksum, ip_proto, tcp};

/// Source NAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snat {
    /// Traffic from this prefix is translated.
    pub inside: IpPrefix,
    /// To this address.
    pub public: Ipv4Addr,
    /// Ports (and ICMP identifiers) to allocate from.
    #[serde(default = "default_ports")]
    pub ports: PortRange,
}

fn default_ports() -> PortRange {
    PortRange { lo: 1024, hi: 65535 }
}

/// A destination NAT (port forwarding) rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dnat {
    /// Public address.
    pub public: Ipv4Addr,
    /// Protocol (6 or 17).
    pub proto: u8,
    /// Public port.
    pub port: u16,
    /// Inside address.
    pub to: Ipv4Addr,
    /// Inside port.
    pub to_port: u16,
}

/// NAT configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatConfig {
    /// Source NAT, if any.
    #[serde(default)]
    pub snat: Option<Snat>,
    /// Destination NAT rules.
    #[serde(default)]
    pub dnat: Vec<Dnat>,
    /// Flow-table size.
    #[serde(default = "default_max_flows")]
    pub max_flows: usize,
    /// Idle timeout of UDP flows, seconds.
    #[serde(default = "d30")]
    pub udp_timeout_s: u64,
    /// Idle timeout of established TCP flows, seconds.
    #[serde(default = "d300")]
    pub tcp_timeout_s: u64,
    /// Idle timeout after a FIN or RST, seconds.
    #[serde(default = "d10")]
    pub tcp_closing_timeout_s: u64,
    /// Idle timeout of ICMP echo flows, seconds.
    #[serde(default = "d30")]
    pub icmp_timeout_s: u64,
    /// What to do with traffic no rule or flow translates.
    #[serde(default)]
    pub unmatched: Policy,
}

fn default_max_flows() -> usize {
    65536
}
fn d10() -> u64 {
    10
}
fn d30() -> u64 {
    30
}
fn d300() -> u64 {
    300
}

impl Default for NatConfig {
    fn default() -> Self {
        NatConfig {
            snat: None,
            dnat: Vec::new(),
            max_flows: default_max_flows(),
            udp_timeout_s: 30,
            tcp_timeout_s: 300,
            tcp_closing_timeout_s: 10,
            icmp_timeout_s: 30,
            unmatched: Policy::Allow,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Flow {
    /// Forward key as it arrives (before translation).
    orig: Key4,
    /// Forward key after translation.
    xlat: Key4,
    expires: Instant,
    /// SNAT port to release on expiry.
    snat_port: Option<u16>,
    /// A TCP flow that has seen a FIN or RST: it keeps the closing timeout (the last ACKs do
    /// not give it the established one back).
    closing: bool,
}

/// True if a packet of `proto` with TCP `flags` closes its flow (a FIN or RST).
#[inline]
fn closes(proto: u8, flags: u8) -> bool {
    proto == ip_proto::TCP && flags & (tcp::flags::FIN | tcp::flags::RST) != 0
}

/// One bit per port, per protocol.
struct PortMap {
    bits: Box<[u64; 1024]>,
    cursor: u16,
}

impl PortMap {
    fn new() -> Self {
        PortMap { bits: Box::new([0; 1024]), cursor: 0 }
    }
    fn test(&self, p: u16) -> bool {
        self.bits[p as usize / 64] & (1 << (p % 64)) != 0
    }
    fn set(&mut self, p: u16, v: bool) {
        let w = &mut self.bits[p as usize / 64];
        if v {
            *w |= 1 << (p % 64)
        } else {
            *w &= !(1 << (p % 64))
        }
    }
    /// Next free port in `r`, round-robin from the last allocation.
    fn alloc(&mut self, r: PortRange) -> Option<u16> {
        let span = r.hi as u32 - r.lo as u32 + 1;
        let start = (self.cursor.max(r.lo).min(r.hi) - r.lo) as u32;
        for i in 0..span {
            let p = r.lo + ((start + i) % span) as u16;
            if !self.test(p) {
                self.set(p, true);
                self.cursor = p.wrapping_add(1);
                return Some(p);
            }
        }
        None
    }
}

impl core::fmt::Debug for PortMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortMap").field("cursor", &self.cursor).finish()
    }
}

/// The NAT NT.
#[derive(Debug)]
pub struct Nat {
    cfg: NatConfig,
    /// Timeouts in nanoseconds: TCP established, TCP closing, UDP, ICMP.
    tmo: [u64; 4],
    slab: Vec<Option<Flow>>,
    free: Vec<u32>,
    /// Both directions of every flow in one index (one probe per packet): slot index, with
    /// [`REPLY`] set for the reply-direction key, hashed by that key ([`FlowKey::hash64`]).
    index: FlowIndex,
    ports: [PortMap; 3],
    sweep: usize,
    next_sweep: Instant,
}

const REPLY: u32 = 1 << 31;
/// Interval between sweep steps, in nanoseconds of packet time.
pub const SWEEP_EVERY_NS: u64 = 100_000;
/// Slots checked per sweep step.
pub const SWEEP_SLOTS: usize = 64;

fn port_idx(proto: u8) -> usize {
    match proto {
        ip_proto::TCP => 0,
        ip_proto::UDP => 1,
        _ => 2,
    }
}

impl Nat {
    /// A NAT with this configuration; all flow memory is allocated here.
    pub fn new(cfg: NatConfig) -> Self {
        let n = cfg.max_flows.max(1);
        let ns = |s: u64| s.saturating_mul(1_000_000_000);
        Nat {
            tmo: [ns(cfg.tcp_timeout_s), ns(cfg.tcp_closing_timeout_s), ns(cfg.udp_timeout_s), ns(cfg.icmp_timeout_s)],
            slab: vec![None; n],
            free: (0..n as u32).rev().collect(),
            index: FlowIndex::with_capacity(2 * n),
            ports: [PortMap::new(), PortMap::new(), PortMap::new()],
            sweep: 0,
            next_sweep: Instant::ZERO,
            cfg,
        }
    }

    /// The flow memory a NAT of `cfg` allocates, bytes: its slab, its index (two keys a flow)
    /// and its port maps.
    pub fn memory(cfg: &NatConfig) -> u64 {
        let n = cfg.max_flows.max(1);
        let slab = n * core::mem::size_of::<Option<Flow>>();
        (slab + FlowIndex::bytes(2 * n) + 3 * core::mem::size_of::<[u64; 1024]>()) as u64
    }

    /// Flows in the table.
    pub fn flows(&self) -> usize {
        self.index.len() / 2
    }

    /// The idle timeout of a flow of `proto`, `closing` if a TCP flow has seen a FIN or RST.
    #[inline]
    fn timeout(&self, proto: u8, closing: bool) -> u64 {
        match proto {
            ip_proto::TCP if closing => self.tmo[1],
            ip_proto::TCP => self.tmo[0],
            ip_proto::UDP => self.tmo[2],
            _ => self.tmo[3],
        }
    }

    /// The key index entry `e` stands for (its flow is live).
    #[inline]
    fn key_of(slab: &[Option<Flow>], e: u32) -> Key4 {
        let f = slab[(e & !REPLY) as usize].as_ref().expect("indexed flows are live");
        if e & REPLY == 0 {
            f.orig
        } else {
            f.xlat.reversed()
        }
    }

    /// The index entry for key `k`, if a live flow has it.
    #[inline]
    fn find(&self, k: Key4) -> Option<u32> {
        let slab = &self.slab;
        self.index.find(k.hash64(), |e| Self::key_of(slab, e) == k)
    }

    /// Indexes flow `i` under both its keys (the index has room: two keys a slot).
    fn index_flow(&mut self, i: u32, orig: Key4, reply: Key4) {
        let ok = self.index.insert(orig.hash64(), i) && self.index.insert(reply.hash64(), i | REPLY);
        debug_assert!(ok, "the index holds two keys for each slot");
    }

    fn remove(&mut self, i: u32) {
        if let Some(f) = self.slab[i as usize].take() {
            self.index.remove(f.orig.hash64(), i);
            self.index.remove(f.xlat.reversed().hash64(), i | REPLY);
            if let Some(p) = f.snat_port {
                self.ports[port_idx(f.orig.proto())].set(p, false);
            }
            self.free.push(i);
        }
    }

    #[inline]
    fn sweep(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = Instant::from_nanos(now.as_nanos() + SWEEP_EVERY_NS);
        for _ in 0..SWEEP_SLOTS.min(self.slab.len()) {
            self.sweep = (self.sweep + 1) % self.slab.len();
            if self.slab[self.sweep].is_some_and(|f| f.expires < now) {
                self.remove(self.sweep as u32);
            }
        }
    }

    /// Finds the live flow for `k` (either direction); returns the key to rewrite to.
    fn lookup(&mut self, now: Instant, k: Key4, flags: u8) -> Option<Key4> {
        let e = self.find(k)?;
        let (i, fwd) = (e & !REPLY, e & REPLY == 0);
        let (open_t, closing_t) = (self.timeout(k.proto(), false), self.timeout(k.proto(), true));
        let f = self.slab[i as usize].as_mut().expect("indexed flows are live");
        if f.expires < now {
            self.remove(i);
            return None;
        }
        f.closing |= closes(k.proto(), flags);
        let t = if f.closing { closing_t } else { open_t };
        f.expires = Instant::from_nanos(now.as_nanos().saturating_add(t));
        Some(if fwd { f.xlat } else { f.orig.reversed() })
    }

    fn create(&mut self, now: Instant, k: Key4, flags: u8) -> Result<Option<Key4>, DropReason> {
        let (src, dst, proto) = (Ipv4Addr::from(k.src()), Ipv4Addr::from(k.dst()), k.proto());
        let dnat = self.cfg.dnat.iter().find(|d| d.public == dst && d.proto == proto && d.port == k.dst_port()).copied();
        let (xlat, port) = if let Some(d) = dnat {
            (Key4::new(k.src(), d.to.into(), proto, k.src_port(), d.to_port), None)
        } else if let Some(s) = self.cfg.snat.filter(|s| s.inside.contains(&IpAddr::V4(src))) {
            let echo = matches!(proto, ip_proto::ICMP) && k.src_port() == k.dst_port();
            if !matches!(proto, ip_proto::TCP | ip_proto::UDP) && !echo {
                return Ok(None);
            }
            if self.free.is_empty() {
                return Err(DropReason::NatTableFull);
            }
            let p = self.ports[port_idx(proto)].alloc(s.ports).ok_or(DropReason::NatPortsExhausted)?;
            let dport = if echo { p } else { k.dst_port() };
            (Key4::new(s.public.into(), k.dst(), proto, p, dport), Some(p))
        } else {
            return Ok(None);
        };
        let Some(i) = self.free.pop() else { return Err(DropReason::NatTableFull) };
        let rk = xlat.reversed();
        if self.find(rk).is_some() {
            // Another flow already owns the reply tuple (two clients DNATed onto one inside
            // socket from the same source port): refuse rather than cross the streams.
            self.free.push(i);
            if let Some(p) = port {
                self.ports[port_idx(proto)].set(p, false);
            }
            return Err(DropReason::NatPortsExhausted);
        }
        let closing = closes(proto, flags);
        let expires = Instant::from_nanos(now.as_nanos().saturating_add(self.timeout(proto, closing)));
        self.slab[i as usize] = Some(Flow { orig: k, xlat, expires, snat_port: port, closing });
        self.index_flow(i, k, rk);
        Ok(Some(xlat))
    }
}

/// A flow's 5-tuple, as saved.
#[derive(Serialize, Deserialize)]
struct SavedKey(IpAddr, IpAddr, u8, u16, u16);

impl From<Key4> for SavedKey {
    fn from(k: Key4) -> Self {
        let k = k.key();
        SavedKey(k.src, k.dst, k.proto, k.src_port, k.dst_port)
    }
}

impl SavedKey {
    /// The key, if it is an IPv4 flow's (the only kind a NAT keeps).
    fn key4(&self) -> Option<Key4> {
        Key4::of(&FlowKey { src: self.0, dst: self.1, proto: self.2, src_port: self.3, dst_port: self.4 })
    }
}

/// A flow, as saved: its keys, the time it has left, its SNAT port.
#[derive(Serialize, Deserialize)]
struct SavedFlow {
    orig: SavedKey,
    xlat: SavedKey,
    left_ns: u64,
    snat_port: Option<u16>,
    closing: bool,
}

/// The NAT's state, as saved: its live flows (postcard).
#[derive(Serialize, Deserialize)]
struct SavedNat {
    flows: Vec<SavedFlow>,
}

impl Nat {
    /// Takes one saved flow: false if it clashes with a flow here (either key, or its SNAT port)
    /// or the table is full.
    fn restore_flow(&mut self, f: &SavedFlow, now: Instant) -> bool {
        let (Some(orig), Some(xlat)) = (f.orig.key4(), f.xlat.key4()) else { return false };
        let rk = xlat.reversed();
        let ports = port_idx(orig.proto());
        if self.find(orig).is_some() || self.find(rk).is_some() || f.snat_port.is_some_and(|p| self.ports[ports].test(p)) {
            return false;
        }
        let Some(i) = self.free.pop() else { return false };
        if let Some(p) = f.snat_port {
            self.ports[ports].set(p, true);
        }
        let expires = Instant::from_nanos(now.as_nanos().saturating_add(f.left_ns));
        self.slab[i as usize] = Some(Flow { orig, xlat, expires, snat_port: f.snat_port, closing: f.closing });
        self.index_flow(i, orig, rk);
        true
    }
}

/// Rewrites the IPv4 addresses and L4 ports of `pkt` from `old` to `new`, fixing checksums.
fn rewrite(pkt: &mut Pkt<'_>, old: Key4, new: Key4) {
    let inner = pkt.meta.inner.as_mut().expect("caller checked");
    let s = pkt.meta.off as usize + snic_wire::vxlan::HEADER_LEN;
    let l3 = s + inner.l3_off as usize;
    let l4 = s + inner.l4_off as usize;
    let b = &mut *pkt.buf;
    let (os, od, ns, nd) = (old.src(), old.dst(), new.src(), new.dst());
    let (proto, old_sp, old_dp, new_sp, new_dp) = (new.proto(), old.src_port(), old.dst_port(), new.src_port(), new.dst_port());
    // One's-complement delta of the changed words (RFC 1624): addresses count in the IPv4 header
    // and in the TCP/UDP pseudo-header, ports only in TCP/UDP. Summed once, folded once per field.
    let words = |old: u32, new: u32| (!(old >> 16) as u16 as u64) + (!(old as u16) as u64) + (new >> 16) as u64 + (new as u16) as u64;
    let d_addr = words(os, ns) + words(od, nd);
    let apply = |c: u16, d: u64| !checksum::fold(!c as u64 + d);
    let ipc = u16::from_be_bytes([b[l3 + 10], b[l3 + 11]]);
    b[l3 + 10..l3 + 12].copy_from_slice(&apply(ipc, d_addr).to_be_bytes());
    b[l3 + 12..l3 + 16].copy_from_slice(&ns.to_be_bytes());
    b[l3 + 16..l3 + 20].copy_from_slice(&nd.to_be_bytes());
    match proto {
        ip_proto::TCP | ip_proto::UDP => {
            let at = l4 + if proto == ip_proto::TCP { 16 } else { 6 };
            let c = u16::from_be_bytes([b[at], b[at + 1]]);
            // UDP over IPv4 may carry no checksum (0): leave it so.
            if inner.l4_partial {
                // Partial (the pseudo-header's sum, for the node or a device to finish): the
                // addresses' delta added as it stands, not complemented; ports are not in it
                // (Linux's `inet_proto_csum_replace4` on CHECKSUM_PARTIAL).
                b[at..at + 2].copy_from_slice(&checksum::fold(c as u64 + d_addr).to_be_bytes());
            } else if proto == ip_proto::TCP || c != 0 {
                let d_port = (!old_sp as u64) + new_sp as u64 + (!old_dp as u64) + new_dp as u64;
                let mut c = apply(c, d_addr + d_port);
                if proto == ip_proto::UDP && c == 0 {
                    c = 0xffff;
                }
                b[at..at + 2].copy_from_slice(&c.to_be_bytes());
            }
            b[l4..l4 + 2].copy_from_slice(&new_sp.to_be_bytes());
            b[l4 + 2..l4 + 4].copy_from_slice(&new_dp.to_be_bytes());
        }
        ip_proto::ICMP => {
            // Echo: the identifier is the "port" on both sides; ICMPv4 has no pseudo-header.
            let old_id = u16::from_be_bytes([b[l4 + 4], b[l4 + 5]]);
            let new_id = if old_id == old_sp { new_sp } else { new_dp };
            let c = checksum::update16(u16::from_be_bytes([b[l4 + 2], b[l4 + 3]]), old_id, new_id);
            b[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
            b[l4 + 4..l4 + 6].copy_from_slice(&new_id.to_be_bytes());
        }
        _ => {}
    }
    // Only what changed: the whole 40-byte key, copied, cost more.
    inner.key.src = IpAddr::V4(ns.into());
    inner.key.dst = IpAddr::V4(nd.into());
    inner.key.src_port = new_sp;
    inner.key.dst_port = new_dp;
}

impl Nt for Nat {
    fn kind(&self) -> &'static str {
        "nat"
    }

    /// Partial checksums pass through it (its rewrite updates a partial checksum as one).
    fn takes_partial_checksums(&self) -> bool {
        true
    }

    fn process(&mut self, cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        self.sweep(cx.now);
        let Some(inner) = &pkt.meta.inner else { return Verdict::Drop(DropReason::OpaquePayload) };
        let pass = self.cfg.unmatched == Policy::Allow;
        let unmatched = || if pass { Verdict::Continue } else { Verdict::Drop(DropReason::NatUnmatched) };
        let k = match Key4::of(&inner.key) {
            Some(k) if inner.l3 == InnerL3::Ipv4 => k,
            _ => return unmatched(),
        };
        let flags = inner.l4_flags;
        let new = match self.lookup(cx.now, k, flags) {
            Some(n) => n,
            None => match self.create(cx.now, k, flags) {
                Ok(Some(n)) => n,
                Ok(None) => return unmatched(),
                Err(r) => return Verdict::Drop(r),
            },
        };
        if new != k {
            rewrite(pkt, k, new);
        }
        Verdict::Continue
    }

    fn wants_prefetch(&self) -> bool {
        true
    }

    #[inline]
    fn prefetch(&self, meta: &crate::PktMeta) {
        if let Some(k) = meta.inner.as_ref().and_then(|l| Key4::of(&l.key)) {
            self.index.prefetch(k.hash64());
        }
    }

    /// Both directions of every live flow: a packet of either, landing on a peer while this
    /// node drains, comes back here.
    fn flow_hashes(&self, now: Instant, out: &mut Vec<u64>) {
        for f in self.slab.iter().flatten().filter(|f| f.expires >= now) {
            out.push(f.orig.hash64());
            out.push(f.xlat.reversed().hash64());
        }
    }

    /// The live flows, each with the time it has left: a moved NAT keeps its mappings, so
    /// established connections (and their replies) carry on through it.
    fn save_state(&self, now: Instant) -> Option<Vec<u8>> {
        let flows = (self.slab.iter().flatten())
            .filter(|f| f.expires >= now)
            .map(|f| SavedFlow {
                orig: f.orig.into(),
                xlat: f.xlat.into(),
                left_ns: f.expires.as_nanos() - now.as_nanos(),
                snat_port: f.snat_port,
                closing: f.closing,
            })
            .collect();
        postcard::to_allocvec(&SavedNat { flows }).ok()
    }

    fn restore_state(&mut self, state: &[u8], now: Instant) -> Result<usize, StateError> {
        let saved: SavedNat = postcard::from_bytes(state).map_err(|e| StateError::Malformed("nat", e.to_string()))?;
        Ok(saved.flows.iter().filter(|f| self.restore_flow(f, now)).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use snic_wire::build::L4Spec;

    fn snat_cfg(max_flows: usize, ports: PortRange) -> NatConfig {
        NatConfig {
            snat: Some(Snat { inside: "10.0.0.0/24".parse().unwrap(), public: [203, 0, 113, 1].into(), ports }),
            max_flows,
            ..Default::default()
        }
    }

    fn at(s: u64) -> Ctx<'static> {
        Ctx::real(Instant::from_nanos(s * 1_000_000_000))
    }

    #[test]
    fn snat_rewrites_and_reply_comes_back() {
        let mut nat = Nat::new(snat_cfg(16, default_ports()));
        for l4 in [udp(5000, 53), tcp(5000, 80, 0x02), L4Spec::Icmp { msg_type: 8, ident: 77, seq: 1 }] {
            let mut out = TestPkt::new("10.0.0.5", "198.51.100.9", l4, 20);
            assert_eq!(nat.process(&at(0), &mut out.pkt()), Verdict::Continue);
            let k = out.reparse().key;
            assert_eq!(k.src, IpAddr::from([203, 0, 113, 1]));
            assert!(k.src_port >= 1024);
            assert_eq!(out.meta.inner.unwrap().key, k, "descriptor follows the rewrite");
            assert!(out.checksums_ok(), "checksums after SNAT for {l4:?}");
            // The reply, addressed to the public tuple, is translated back.
            let reply_l4 = match l4 {
                L4Spec::Udp { .. } => udp(53, k.src_port),
                L4Spec::Tcp { .. } => tcp(80, k.src_port, 0x12),
                L4Spec::Icmp { .. } => L4Spec::Icmp { msg_type: 0, ident: k.src_port, seq: 1 },
            };
            let mut back = TestPkt::new("198.51.100.9", "203.0.113.1", reply_l4, 20);
            assert_eq!(nat.process(&at(1), &mut back.pkt()), Verdict::Continue);
            let kb = back.reparse().key;
            assert_eq!(kb.dst, IpAddr::from([10, 0, 0, 5]));
            match l4 {
                L4Spec::Icmp { .. } => assert_eq!(kb.dst_port, 77),
                _ => assert_eq!(kb.dst_port, 5000),
            }
            assert!(back.checksums_ok(), "checksums after reverse translation for {l4:?}");
        }
        assert_eq!(nat.flows(), 3);
    }

    #[test]
    fn dnat_forwards_and_reverses() {
        let cfg = NatConfig {
            dnat: vec![Dnat { public: [203, 0, 113, 1].into(), proto: 6, port: 80, to: [10, 0, 0, 7].into(), to_port: 8080 }],
            ..Default::default()
        };
        let mut nat = Nat::new(cfg);
        let mut inb = TestPkt::new("198.51.100.9", "203.0.113.1", tcp(40000, 80, 0x02), 0);
        nat.process(&at(0), &mut inb.pkt());
        let k = inb.reparse().key;
        assert_eq!((k.dst, k.dst_port), (IpAddr::from([10, 0, 0, 7]), 8080));
        assert!(inb.checksums_ok());
        let mut reply = TestPkt::new("10.0.0.7", "198.51.100.9", tcp(8080, 40000, 0x12), 0);
        nat.process(&at(0), &mut reply.pkt());
        let k = reply.reparse().key;
        assert_eq!((k.src, k.src_port), (IpAddr::from([203, 0, 113, 1]), 80));
        assert!(reply.checksums_ok());
    }

    #[test]
    fn timeouts_free_ports_and_flows() {
        let mut nat = Nat::new(snat_cfg(4, PortRange { lo: 2000, hi: 2001 }));
        let mut a = TestPkt::new("10.0.0.1", "1.1.1.1", udp(1, 2), 0);
        let mut b = TestPkt::new("10.0.0.2", "1.1.1.1", udp(1, 2), 0);
        let mut c = TestPkt::new("10.0.0.3", "1.1.1.1", udp(1, 2), 0);
        assert_eq!(nat.process(&at(0), &mut a.pkt()), Verdict::Continue);
        assert_eq!(nat.process(&at(0), &mut b.pkt()), Verdict::Continue);
        assert_eq!(nat.process(&at(0), &mut c.pkt()), Verdict::Drop(DropReason::NatPortsExhausted));
        // After the UDP timeout (30 s) the ports come back.
        let mut c2 = TestPkt::new("10.0.0.3", "1.1.1.1", udp(1, 2), 0);
        // Sweep runs two slots per packet; the expired flows are also reclaimed on lookup.
        let mut a2 = TestPkt::new("10.0.0.1", "1.1.1.1", udp(1, 2), 0);
        assert_eq!(nat.process(&at(31), &mut a2.pkt()), Verdict::Continue);
        assert_eq!(nat.process(&at(31), &mut c2.pkt()), Verdict::Continue);
    }

    #[test]
    fn a_closing_tcp_flow_keeps_the_closing_timeout_through_its_last_acks() {
        let mut nat = Nat::new(snat_cfg(4, default_ports()));
        let mut syn = TestPkt::new("10.0.0.1", "1.1.1.1", tcp(4000, 80, 0x02), 0);
        assert_eq!(nat.process(&at(0), &mut syn.pkt()), Verdict::Continue);
        let mut fin = TestPkt::new("10.0.0.1", "1.1.1.1", tcp(4000, 80, 0x11), 0);
        assert_eq!(nat.process(&at(1), &mut fin.pkt()), Verdict::Continue);
        // The last ACK, after the FIN: still closing (10 s), not established (300 s) again.
        let mut ack = TestPkt::new("10.0.0.1", "1.1.1.1", tcp(4000, 80, 0x10), 0);
        assert_eq!(nat.process(&at(2), &mut ack.pkt()), Verdict::Continue);
        let mut live = Vec::new();
        nat.flow_hashes(Instant::from_nanos(11_000_000_000), &mut live);
        assert_eq!(live.len(), 2, "both directions of the closing flow, 9 s after its last ACK");
        live.clear();
        nat.flow_hashes(Instant::from_nanos(13_000_000_000), &mut live);
        assert!(live.is_empty(), "gone 11 s after its last ACK: {live:?}");
    }

    #[test]
    fn sweep_reclaims_flows_nobody_looks_up() {
        let mut nat = Nat::new(snat_cfg(256, default_ports()));
        for h in 1..=100u8 {
            let mut p = TestPkt::new(&format!("10.0.0.{h}"), "1.1.1.1", udp(1, 2), 0);
            nat.process(&at(0), &mut p.pkt());
        }
        assert_eq!(nat.flows(), 100);
        // Long after the UDP timeout, unrelated traffic (a DNAT-less, unmatched packet) drives
        // the sweep: four steps of 64 slots cover the 256-slot table.
        for step in 0..4u64 {
            let cx = Ctx::real(Instant::from_nanos(60_000_000_000 + step * SWEEP_EVERY_NS));
            let mut p = TestPkt::new("192.168.1.1", "1.1.1.1", udp(1, 2), 0);
            nat.process(&cx, &mut p.pkt());
        }
        assert_eq!(nat.flows(), 0);
    }

    #[test]
    fn table_full_drops_new_flows_only() {
        let mut nat = Nat::new(snat_cfg(1, default_ports()));
        let mut a = TestPkt::new("10.0.0.1", "1.1.1.1", udp(1, 2), 0);
        let mut b = TestPkt::new("10.0.0.2", "1.1.1.1", udp(1, 2), 0);
        assert_eq!(nat.process(&at(0), &mut a.pkt()), Verdict::Continue);
        assert_eq!(nat.process(&at(0), &mut b.pkt()), Verdict::Drop(DropReason::NatTableFull));
        let mut a2 = TestPkt::new("10.0.0.1", "1.1.1.1", udp(1, 2), 0);
        assert_eq!(nat.process(&at(1), &mut a2.pkt()), Verdict::Continue, "established flow unaffected");
    }

    /// Flows come and go through a small table many times over (slots, ports and index entries
    /// reused): every live flow keeps its own mapping both ways, and what expired is gone from
    /// the index, so the table takes a full set of new flows each round.
    #[test]
    fn a_table_churned_through_many_times_keeps_each_live_flows_mapping() {
        let mut nat = Nat::new(snat_cfg(32, default_ports()));
        for round in 0..20u64 {
            let t = at(round * 40);
            let mut public = Vec::new();
            for h in 1..=32u16 {
                let mut p = TestPkt::new(&format!("10.0.0.{h}"), "1.1.1.1", udp(1000 + h + round as u16, 53), 0);
                assert_eq!(nat.process(&t, &mut p.pkt()), Verdict::Continue, "round {round}, flow {h}");
                public.push(p.reparse().key.src_port);
            }
            let mut over = TestPkt::new("10.0.0.99", "1.1.1.1", udp(7, 53), 0);
            assert_eq!(nat.process(&t, &mut over.pkt()), Verdict::Drop(DropReason::NatTableFull), "round {round}");
            assert_eq!(nat.flows(), 32);
            for (h, port) in (1..=32u16).zip(&public) {
                let mut back = TestPkt::new("1.1.1.1", "203.0.113.1", udp(53, *port), 0);
                assert_eq!(nat.process(&t, &mut back.pkt()), Verdict::Continue);
                let k = back.reparse().key;
                assert_eq!((k.dst, k.dst_port), (IpAddr::from([10, 0, 0, h as u8]), 1000 + h + round as u16), "round {round}");
            }
        }
    }

    #[test]
    fn a_flow_takes_48_bytes_of_the_table() {
        // Two packed keys, the expiry, the SNAT port and the closing flag (docs/manifests.md
        // states it; with `FlowKey`s it was 96).
        assert_eq!(core::mem::size_of::<Option<Flow>>(), 48);
    }

    proptest::proptest! {
        /// The packed key holds every field of an IPv4 flow key, turns around as the key does,
        /// and hashes as it does (the index and `flow_hashes` depend on that).
        #[test]
        fn the_packed_key_is_the_flow_key(src in proptest::prelude::any::<[u8; 4]>(), dst in proptest::prelude::any::<[u8; 4]>(), proto in proptest::prelude::any::<u8>(), sp in proptest::prelude::any::<u16>(), dp in proptest::prelude::any::<u16>()) {
            let k = FlowKey { src: IpAddr::from(src), dst: IpAddr::from(dst), proto, src_port: sp, dst_port: dp };
            let p = Key4::of(&k).expect("an IPv4 key");
            proptest::prop_assert_eq!(p.key(), k);
            proptest::prop_assert_eq!(p.reversed().key(), k.reversed());
            proptest::prop_assert_eq!(p.hash64(), k.hash64());
            let v6 = FlowKey { src: IpAddr::from([0u16, 0, 0, 0, 0, 0xffff, 0, 1]), ..k };
            proptest::prop_assert_eq!(Key4::of(&v6), None);
        }

        /// Whatever the tuple, SNAT out and back leaves every checksum valid and restores the
        /// original addresses and ports. A partial checksum stays partial, for the rewritten
        /// addresses, and finished it is valid.
        #[test]
        fn rewrites_keep_checksums_valid(host in 1u8..255, sp in 1u16.., dst in proptest::prelude::any::<[u8; 4]>(), dp in 1u16.., tcp_flow in proptest::prelude::any::<bool>(), payload in 0usize..64, partial in proptest::prelude::any::<bool>()) {
            let mut nat = Nat::new(snat_cfg(64, default_ports()));
            let d = IpAddr::from(dst);
            let ok = |p: &mut TestPkt| {
                if partial {
                    if !p.reparse().l4_partial || p.meta.inner.map(|il| il.l4_partial) != Some(true) {
                        return false;
                    }
                    p.meta.finish_checksum(&mut p.buf);
                }
                p.checksums_ok()
            };
            let made = |src: &str, dst: &str, l4| {
                let p = TestPkt::new(src, dst, l4, payload);
                if partial { p.partial() } else { p }
            };
            let l4 = if tcp_flow { tcp(sp, dp, 0x10) } else { udp(sp, dp) };
            let mut out = made(&format!("10.0.0.{host}"), &d.to_string(), l4);
            proptest::prop_assert_eq!(nat.process(&at(0), &mut out.pkt()), Verdict::Continue);
            proptest::prop_assert!(ok(&mut out));
            let k = out.reparse().key;
            let back_l4 = if tcp_flow { tcp(dp, k.src_port, 0x10) } else { udp(dp, k.src_port) };
            let mut back = made(&d.to_string(), "203.0.113.1", back_l4);
            proptest::prop_assert_eq!(nat.process(&at(0), &mut back.pkt()), Verdict::Continue);
            proptest::prop_assert!(ok(&mut back));
            let kb = back.reparse().key;
            proptest::prop_assert_eq!((kb.dst, kb.dst_port), (IpAddr::from([10, 0, 0, host]), sp));
        }
    }

    #[test]
    fn a_restored_nat_keeps_the_mappings_replies_and_time_left_and_skips_clashes() {
        let mut home = Nat::new(snat_cfg(16, default_ports()));
        let mut out = TestPkt::new("10.0.0.5", "198.51.100.9", tcp(5000, 80, 0x02), 0);
        home.process(&at(100), &mut out.pkt());
        let mapped = out.reparse().key;
        let mut gone = TestPkt::new("10.0.0.6", "198.51.100.9", udp(7, 53), 0);
        home.process(&at(60), &mut gone.pkt());
        // Saved at 100 s on one clock: the UDP flow (seen at 60 s, 30 s timeout) has expired.
        let state = home.save_state(Instant::from_nanos(100_000_000_000)).expect("a NAT has state");
        // Restored at 5 s on another node's clock, into a NAT that has a flow of its own on the
        // TCP port the saved flow holds (a clash: left out).
        let mut peer = Nat::new(snat_cfg(16, PortRange { lo: mapped.src_port, hi: mapped.src_port }));
        let mut mine = TestPkt::new("10.0.0.9", "192.0.2.1", tcp(9, 9, 0x02), 0);
        peer.process(&at(5), &mut mine.pkt());
        assert_eq!(peer.restore_state(&state, Instant::from_nanos(5_000_000_000)), Ok(0), "port clash");
        let mut fresh = Nat::new(snat_cfg(16, default_ports()));
        assert_eq!(fresh.restore_state(&state, Instant::from_nanos(5_000_000_000)), Ok(1));
        assert_eq!(fresh.flows(), 1);
        // The connection carries on with its mapping, both ways.
        let mut again = TestPkt::new("10.0.0.5", "198.51.100.9", tcp(5000, 80, 0x10), 0);
        assert_eq!(fresh.process(&at(6), &mut again.pkt()), Verdict::Continue);
        assert_eq!(again.reparse().key, mapped);
        let mut reply = TestPkt::new("198.51.100.9", "203.0.113.1", tcp(80, mapped.src_port, 0x10), 0);
        assert_eq!(fresh.process(&at(6), &mut reply.pkt()), Verdict::Continue);
        assert_eq!(reply.reparse().key.dst_port, 5000);
        // A new flow does not take the moved flow's port.
        let mut other = TestPkt::new("10.0.0.7", "198.51.100.9", tcp(5000, 80, 0x02), 0);
        fresh.process(&at(6), &mut other.pkt());
        assert_ne!(other.reparse().key.src_port, mapped.src_port);
        // The time left moved too: idle 300 s after 6 s, the flow is gone.
        let mut late = TestPkt::new("198.51.100.9", "203.0.113.1", tcp(80, mapped.src_port, 0x10), 0);
        assert_eq!(fresh.process(&at(307), &mut late.pkt()), Verdict::Continue);
        assert_eq!(late.reparse().key.dst_port, mapped.src_port, "not translated once expired");
        assert!(matches!(fresh.restore_state(b"\xff\xff\xff", Instant::ZERO), Err(StateError::Malformed("nat", _))));
    }

    #[test]
    fn unmatched_policy() {
        let mut nat = Nat::new(NatConfig { unmatched: Policy::Deny, ..snat_cfg(4, default_ports()) });
        let mut p = TestPkt::new("192.168.0.1", "1.1.1.1", udp(1, 2), 0);
        assert_eq!(nat.process(&at(0), &mut p.pkt()), Verdict::Drop(DropReason::NatUnmatched));
    }
}
