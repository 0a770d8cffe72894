//! NT specifications: the serde form a manifest gives, and [`build`] to instantiate one.

use crate::counter::Counter;
use crate::crypto::{Crypto, CryptoConfig, CryptoConfigError};
use crate::dummy::Dummy;
use crate::firewall::{Firewall, FirewallConfig};
use crate::kv::cache_nt::{KvCache, KvCacheConfig};
use crate::kv::replicate::{KvReplicate, KvReplicateConfig};
use crate::nat::{Nat, NatConfig};
use crate::synthetic::{Synthetic, SyntheticConfig};
use crate::vni_map::VniMap;
use crate::wasm::{Wasm, WasmConfig, WasmError};
use crate::Nt;
use serde::{Deserialize, Serialize};
use snic_core::pool::owner::{self, Claim, Slots};

/// One VNI mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VniPair {
    /// Incoming VNI.
    pub from: u32,
    /// Outgoing VNI.
    pub to: u32,
}

/// An NT kind with its configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum NtSpec {
    /// Touches only the header.
    Dummy,
    /// Counts packets and bytes.
    Counter,
    /// Ordered 5-tuple rules.
    Firewall(FirewallConfig),
    /// SNAT/DNAT.
    Nat(NatConfig),
    /// AES-GCM encryption or decryption.
    AesGcm(CryptoConfig),
    /// VNI re-mapping.
    VniMap {
        /// VNI → VNI pairs.
        #[serde(default)]
        map: Vec<VniPair>,
        /// VNI for anything not in `map`.
        #[serde(default)]
        default: Option<u32>,
    },
    /// A calibrated cost (experiments).
    Synthetic(SyntheticConfig),
    /// A cache in front of a memcached server (UDP).
    KvCache(KvCacheConfig),
    /// Writes to a memcached server made on K servers, acknowledged after all K.
    KvReplicate(KvReplicateConfig),
    /// A tenant's own NT: a WebAssembly module, sandboxed.
    Wasm(WasmConfig),
}

/// Why an NT spec cannot be instantiated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Crypto configuration error.
    #[error(transparent)]
    Crypto(#[from] CryptoConfigError),
    /// A VNI above 2^24 - 1.
    #[error("VNI {0} does not fit in 24 bits")]
    BadVni(u32),
    /// A size that must be positive is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// A WebAssembly module that cannot be deployed.
    #[error("`module`: {0}")]
    Wasm(#[from] WasmError),
    /// A field outside its documented bounds (docs/manifests.md, "Bounds").
    #[error("`{field}`: {reason}")]
    Bound {
        /// The field, relative to the NT's config (`flow_cache`, `snat.ports`, `rules[3].dst_ports`).
        field: String,
        /// What is wrong.
        reason: String,
    },
}

impl SpecError {
    /// The field at fault, relative to the NT's config, if the error names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            SpecError::Bound { field, .. } => Some(field),
            SpecError::Wasm(_) => Some("module"),
            _ => None,
        }
    }
}

/// The bounds every NT config is checked against before anything is built. Each is documented
/// in docs/manifests.md ("Bounds"); sizes are bounded so that the largest allowed table fits in
/// tens of MiB, never more than the node's memory.
pub mod bounds {
    /// Firewall rules per NT.
    pub const FIREWALL_RULES: usize = 10_000;
    /// Firewall flow-cache slots (about 48 bytes each).
    pub const FIREWALL_FLOW_CACHE: usize = 1 << 18;
    /// NAT flows per NT (about 120 bytes each with the index).
    pub const NAT_MAX_FLOWS: usize = 1 << 20;
    /// DNAT rules per NT.
    pub const NAT_DNAT_RULES: usize = 10_000;
    /// NAT timeouts, seconds (one day).
    pub const NAT_TIMEOUT_S: u64 = 86_400;
    /// AES-GCM keys per NT.
    pub const CRYPTO_KEYS: usize = 1024;
    /// AES-GCM replay windows (senders) per decryptor.
    pub const CRYPTO_MAX_SENDERS: usize = 1 << 16;
    /// VNI pairs per `vni_map`.
    pub const VNI_MAP_PAIRS: usize = 1 << 16;
    /// Synthetic work per packet, ns (1 ms).
    pub const SYNTHETIC_COST_NS: u64 = 1_000_000;
    /// Synthetic work per byte, ps (1 µs).
    pub const SYNTHETIC_COST_PS_PER_BYTE: u64 = 1_000_000;
    /// Declared throughput of a synthetic instance, pps.
    pub const SYNTHETIC_CAPACITY_PPS: u64 = 1_000_000_000;
    /// Bytes of a `kv_cache` (its index takes about a third more).
    pub const KV_CACHE_MIN_BYTES: usize = 4096;
    /// See [`KV_CACHE_MIN_BYTES`].
    pub const KV_CACHE_MAX_BYTES: usize = 1 << 30;
    /// The longest a `kv_cache` keeps a value, ms (one day).
    pub const KV_CACHE_MAX_AGE_MS: u64 = 86_400_000;
    /// Replicas of a `kv_replicate`.
    pub const KV_REPLICAS: usize = 8;
    /// A `kv_replicate`'s wait for an answer, ms.
    pub const KV_TIMEOUT_MS: u64 = 60_000;
    /// A `kv_replicate`'s retries.
    pub const KV_RETRIES: u32 = 10;
    /// Writes a `kv_replicate` keeps waiting (each keeps its datagram, ≤ 1.6 KB).
    pub const KV_MAX_PENDING: usize = 65_536;
}

fn bound(field: impl Into<String>, reason: impl Into<String>) -> SpecError {
    SpecError::Bound { field: field.into(), reason: reason.into() }
}

fn at_most(field: &str, n: usize, max: usize) -> Result<(), SpecError> {
    if n > max {
        return Err(bound(field, format!("{n} is over the limit of {max}")));
    }
    Ok(())
}

/// A port range must not be inverted; with `need_port`, it must not include port 0 either.
fn check_ports(field: impl Into<String>, r: &snic_core::mat::PortRange, need_port: bool) -> Result<(), SpecError> {
    if r.lo > r.hi {
        return Err(bound(field, format!("empty range: lo {} is above hi {}", r.lo, r.hi)));
    }
    if need_port && r.lo == 0 {
        return Err(bound(field, "port 0 is not a port; the range must start at 1 or above"));
    }
    Ok(())
}

/// What part of a packet an NT touches, for deciding which NTs may run on one packet at the
/// same time (NT-level parallelism, paper §4.2): two NTs conflict if one writes what the other
/// reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// Parts read (`Access::HEADERS | ...`).
    pub reads: u8,
    /// Parts written.
    pub writes: u8,
}

impl Access {
    /// The inner Ethernet/IP/L4 headers.
    pub const HEADERS: u8 = 1;
    /// The inner payload.
    pub const PAYLOAD: u8 = 2;
    /// The VNI (the descriptor's, and the VXLAN header's on egress).
    pub const VNI: u8 = 4;

    /// True if the two cannot run on one packet at once.
    pub fn conflicts(self, other: Access) -> bool {
        self.writes & (other.reads | other.writes) != 0 || other.writes & self.reads != 0
    }
}

impl NtSpec {
    /// What the NT reads and writes of a packet.
    pub fn access(&self) -> Access {
        let (h, p, v) = (Access::HEADERS, Access::PAYLOAD, Access::VNI);
        match self {
            NtSpec::Dummy | NtSpec::Counter | NtSpec::Firewall(_) => Access { reads: h, writes: 0 },
            NtSpec::Nat(_) => Access { reads: h, writes: h },
            // Encrypting or decrypting replaces the whole inner frame.
            NtSpec::AesGcm(_) => Access { reads: h | p, writes: h | p },
            NtSpec::VniMap { .. } => Access { reads: v, writes: v },
            NtSpec::Synthetic(_) => Access::default(),
            // Answers in place: the reply replaces the request's headers and payload.
            NtSpec::KvCache(_) | NtSpec::KvReplicate(_) => Access { reads: h | p, writes: h | p },
            // A tenant's code may read and rewrite the whole frame.
            NtSpec::Wasm(_) => Access { reads: h | p, writes: h | p },
        }
    }

    /// The kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            NtSpec::Dummy => "dummy",
            NtSpec::Counter => "counter",
            NtSpec::Firewall(_) => "firewall",
            NtSpec::Nat(_) => "nat",
            NtSpec::AesGcm(_) => "aes_gcm",
            NtSpec::VniMap { .. } => "vni_map",
            NtSpec::Synthetic(_) => "synthetic",
            NtSpec::KvCache(_) => "kv_cache",
            NtSpec::KvReplicate(_) => "kv_replicate",
            NtSpec::Wasm(_) => "wasm",
        }
    }
}

impl NtSpec {
    /// Checks every field against its bounds without building anything (no allocation that
    /// depends on the config's sizes): what a control plane calls to validate a manifest.
    /// [`build`] calls it first, so nothing out of bounds is ever instantiated.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.within_bounds()?;
        if let NtSpec::Wasm(c) = self {
            // Compiled (once per module: cached) and checked against the ABI; not started:
            // starting runs the tenant's code, which an apply does once for a module it brings
            // ([`crate::wasm::WasmConfig::check`]), never for the state around it.
            c.check_module()?;
        }
        Ok(())
    }

    /// [`NtSpec::validate`] but for what only building finds (a module's start).
    fn within_bounds(&self) -> Result<(), SpecError> {
        match self {
            NtSpec::Dummy | NtSpec::Counter => {}
            NtSpec::Firewall(c) => {
                at_most("rules", c.rules.len(), bounds::FIREWALL_RULES)?;
                at_most("flow_cache", c.flow_cache, bounds::FIREWALL_FLOW_CACHE)?;
                for (i, r) in c.rules.iter().enumerate() {
                    check_ports(format!("rules[{i}].src_ports"), &r.src_ports, false)?;
                    check_ports(format!("rules[{i}].dst_ports"), &r.dst_ports, false)?;
                }
            }
            NtSpec::Nat(c) => {
                if c.max_flows == 0 {
                    return Err(SpecError::Zero("nat.max_flows"));
                }
                at_most("max_flows", c.max_flows, bounds::NAT_MAX_FLOWS)?;
                at_most("dnat", c.dnat.len(), bounds::NAT_DNAT_RULES)?;
                for (f, t) in [
                    ("udp_timeout_s", c.udp_timeout_s),
                    ("tcp_timeout_s", c.tcp_timeout_s),
                    ("tcp_closing_timeout_s", c.tcp_closing_timeout_s),
                    ("icmp_timeout_s", c.icmp_timeout_s),
                ] {
                    if t == 0 || t > bounds::NAT_TIMEOUT_S {
                        return Err(bound(f, format!("{t} s is outside 1..={} s", bounds::NAT_TIMEOUT_S)));
                    }
                }
                if let Some(s) = &c.snat {
                    check_ports("snat.ports", &s.ports, true)?;
                }
                for (i, d) in c.dnat.iter().enumerate() {
                    if d.proto != 6 && d.proto != 17 {
                        return Err(bound(format!("dnat[{i}].proto"), format!("{} is neither TCP (6) nor UDP (17)", d.proto)));
                    }
                    for (f, p) in [("port", d.port), ("to_port", d.to_port)] {
                        if p == 0 {
                            return Err(bound(format!("dnat[{i}].{f}"), "port 0 is not a port"));
                        }
                    }
                }
            }
            NtSpec::AesGcm(c) => {
                at_most("keys", c.keys.len(), bounds::CRYPTO_KEYS)?;
                if c.max_senders == 0 {
                    return Err(SpecError::Zero("aes_gcm.max_senders"));
                }
                at_most("max_senders", c.max_senders, bounds::CRYPTO_MAX_SENDERS)?;
                c.check_keys()?;
            }
            NtSpec::VniMap { map, default } => {
                at_most("map", map.len(), bounds::VNI_MAP_PAIRS)?;
                for v in map.iter().flat_map(|p| [p.from, p.to]).chain(default.iter().copied()) {
                    if v >= 1 << 24 {
                        return Err(SpecError::BadVni(v));
                    }
                }
            }
            NtSpec::Synthetic(c) => {
                if c.cost_ns > bounds::SYNTHETIC_COST_NS {
                    return Err(bound("cost_ns", format!("{} ns is over the limit of {} ns", c.cost_ns, bounds::SYNTHETIC_COST_NS)));
                }
                if c.cost_ps_per_byte > bounds::SYNTHETIC_COST_PS_PER_BYTE {
                    return Err(bound(
                        "cost_ps_per_byte",
                        format!("{} ps is over the limit of {} ps", c.cost_ps_per_byte, bounds::SYNTHETIC_COST_PS_PER_BYTE),
                    ));
                }
                match c.capacity_pps {
                    Some(0) => return Err(SpecError::Zero("synthetic.capacity_pps")),
                    Some(p) if p > bounds::SYNTHETIC_CAPACITY_PPS => {
                        return Err(bound("capacity_pps", format!("{p} is over the limit of {}", bounds::SYNTHETIC_CAPACITY_PPS)))
                    }
                    _ => {}
                }
            }
            NtSpec::KvCache(c) => {
                if !(bounds::KV_CACHE_MIN_BYTES..=bounds::KV_CACHE_MAX_BYTES).contains(&c.bytes) {
                    return Err(bound(
                        "bytes",
                        format!("{} is outside {}..={}", c.bytes, bounds::KV_CACHE_MIN_BYTES, bounds::KV_CACHE_MAX_BYTES),
                    ));
                }
                if c.max_age_ms == 0 || c.max_age_ms > bounds::KV_CACHE_MAX_AGE_MS {
                    return Err(bound("max_age_ms", format!("{} is outside 1..={}", c.max_age_ms, bounds::KV_CACHE_MAX_AGE_MS)));
                }
                if c.backend.port() == 0 || c.backend.ip().is_unspecified() {
                    return Err(bound("backend", format!("{} is not a server's address", c.backend)));
                }
            }
            NtSpec::KvReplicate(c) => {
                if !(2..=bounds::KV_REPLICAS).contains(&c.replicas.len()) {
                    return Err(bound("replicas", format!("{} replicas: give 2 to {}", c.replicas.len(), bounds::KV_REPLICAS)));
                }
                for (i, r) in c.replicas.iter().enumerate() {
                    if r.port() == 0 || r.ip().is_unspecified() {
                        return Err(bound(format!("replicas[{i}]"), format!("{r} is not a server's address")));
                    }
                    if c.replicas[..i].iter().any(|o| o.ip() == r.ip()) {
                        return Err(bound(format!("replicas[{i}]"), format!("{} is given twice (one replica per address)", r.ip())));
                    }
                }
                if c.timeout_ms == 0 || c.timeout_ms > bounds::KV_TIMEOUT_MS {
                    return Err(bound("timeout_ms", format!("{} is outside 1..={}", c.timeout_ms, bounds::KV_TIMEOUT_MS)));
                }
                if c.retries > bounds::KV_RETRIES {
                    return Err(bound("retries", format!("{} is over the limit of {}", c.retries, bounds::KV_RETRIES)));
                }
                if c.max_pending == 0 || c.max_pending > bounds::KV_MAX_PENDING {
                    return Err(bound("max_pending", format!("{} is outside 1..={}", c.max_pending, bounds::KV_MAX_PENDING)));
                }
            }
            NtSpec::Wasm(c) => {
                use crate::wasm::bounds as w;
                at_most("config", c.config.len(), w::CONFIG_BYTES)?;
                if !(w::MIN_MEMORY..=w::MAX_MEMORY).contains(&c.max_memory_bytes) {
                    return Err(bound(
                        "max_memory_bytes",
                        format!("{} is outside {}..={}", c.max_memory_bytes, w::MIN_MEMORY, w::MAX_MEMORY),
                    ));
                }
                if !(w::MIN_FUEL..=w::MAX_FUEL).contains(&c.max_fuel_per_packet) {
                    return Err(bound(
                        "max_fuel_per_packet",
                        format!("{} is outside {}..={}", c.max_fuel_per_packet, w::MIN_FUEL, w::MAX_FUEL),
                    ));
                }
                if !(1..=w::MAX_PACKET_US).contains(&c.max_packet_us) {
                    return Err(bound("max_packet_us", format!("{} is outside 1..={}", c.max_packet_us, w::MAX_PACKET_US)));
                }
                if !(1..=w::MAX_INIT_MS).contains(&c.max_init_ms) {
                    return Err(bound("max_init_ms", format!("{} is outside 1..={}", c.max_init_ms, w::MAX_INIT_MS)));
                }
                c.bytes()?;
            }
        }
        Ok(())
    }
}

impl NtSpec {
    /// The spec as a node holding state slot `s` of a pool behind a switch builds it
    /// ([`snic_core::pool::owner`]): a source NAT allocates from the slot's block of its ports
    /// only; every other NT is built as it is.
    pub fn in_slot(&self, s: Slots) -> Result<std::borrow::Cow<'_, NtSpec>, SpecError> {
        match self {
            NtSpec::Nat(c) if c.snat.is_some() && s.count > 1 => {
                let mut c = c.clone();
                let snat = c.snat.as_mut().expect("checked");
                snat.ports = owner::block(snat.ports, s).ok_or_else(|| SpecError::Bound {
                    field: "snat.ports".into(),
                    reason: format!("{}–{} has fewer ports than the pool's {} state slots", snat.ports.lo, snat.ports.hi, s.count),
                })?;
                Ok(std::borrow::Cow::Owned(NtSpec::Nat(c)))
            }
            _ => Ok(std::borrow::Cow::Borrowed(self)),
        }
    }

    /// True for an NT whose state instances could not split between them (a cache: a write
    /// through one instance would not reach another's; writes waiting for replicas): its
    /// chain runs as one instance and is never scaled out.
    pub fn single_instance(&self) -> bool {
        matches!(self, NtSpec::KvCache(_) | NtSpec::KvReplicate(_))
    }

    /// About how much memory an NT of this configuration holds, bytes: its tables at their
    /// configured size (a cache's ring and index, a NAT's flows, writes waiting for replicas).
    /// The tenant's demand on the node's `memory` resource in fair sharing.
    pub fn memory_bytes(&self) -> u64 {
        let n = |x: usize, each: u64| x as u64 * each;
        match self {
            NtSpec::Firewall(c) => n(c.flow_cache, 48) + n(c.rules.len(), 64),
            NtSpec::Nat(c) => crate::nat::Nat::memory(c) + n(c.dnat.len(), 64),
            NtSpec::AesGcm(c) => n(c.max_senders, 160) + n(c.keys.len(), 512),
            NtSpec::VniMap { map, .. } => n(map.len(), 16),
            NtSpec::KvCache(c) => crate::kv::cache_nt::KvCache::memory(c),
            NtSpec::KvReplicate(c) => crate::kv::replicate::KvReplicate::memory(c),
            NtSpec::Wasm(c) => c.memory_bytes(),
            NtSpec::Dummy | NtSpec::Counter | NtSpec::Synthetic(_) => 0,
        }
    }

    /// What a node of several dispatcher threads must steer to the thread holding this NT's
    /// state ([`snic_core::steer`]): a NAT's source and destination translations.
    pub fn steering(&self) -> Vec<snic_core::steer::NatKind> {
        use snic_core::steer::NatKind;
        let NtSpec::Nat(c) = self else { return Vec::new() };
        let snat = c.snat.map(|s| NatKind::Snat { public: s.public, ports: s.ports });
        let dnat = c.dnat.iter().map(|d| NatKind::Dnat { proto: d.proto, public: d.public, port: d.port, to: d.to, to_port: d.to_port });
        snat.into_iter().chain(dnat).collect()
    }

    /// What the NT claims of return traffic in a pool behind a switch: a source NAT, the
    /// packets to its public address and ports.
    pub fn claim(&self) -> Option<Claim> {
        match self {
            NtSpec::Nat(c) => c.snat.map(|s| Claim { public: s.public.into(), ports: s.ports }),
            _ => None,
        }
    }
}

/// Instantiates an NT. Called at launch time (the software analogue of partial reconfiguration).
/// The spec is [validated](NtSpec::validate) first.
pub fn build(spec: &NtSpec) -> Result<Box<dyn Nt>, SpecError> {
    // What validating would add for a module (starting it) is what building does.
    spec.within_bounds()?;
    Ok(match spec {
        NtSpec::Dummy => Box::new(Dummy::new()),
        NtSpec::Counter => Box::new(Counter::new()),
        NtSpec::Firewall(c) => Box::new(Firewall::new(c.clone())),
        NtSpec::Nat(c) => Box::new(Nat::new(c.clone())),
        NtSpec::AesGcm(c) => Box::new(Crypto::new(c)?),
        NtSpec::VniMap { map, default } => Box::new(VniMap::new(map.iter().map(|p| (p.from, p.to)), *default)),
        NtSpec::Synthetic(c) => Box::new(Synthetic::new(c)),
        NtSpec::KvCache(c) => Box::new(KvCache::new(c)),
        NtSpec::KvReplicate(c) => Box::new(KvReplicate::new(c)),
        // A module that fails to start here (it started when it was applied: its start depends
        // on something that changed) stops its NT, not the deployment around it: no tenant's
        // code can make a node refuse, or roll back, what runs for the others.
        NtSpec::Wasm(c) => match Wasm::new(c) {
            Ok(w) => Box::new(w),
            Err(e) => Box::new(crate::wasm::Unstarted::new(e)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words in backticks in `line`.
    fn backticked(line: &str) -> std::collections::BTreeSet<String> {
        line.split('`').skip(1).step_by(2).map(str::to_owned).collect()
    }

    /// docs/concepts.md names every NT kind a manifest accepts, and no other: its list is
    /// checked against the schema itself (the kinds serde reports for an unknown one).
    #[test]
    fn concepts_md_lists_exactly_the_nt_kinds_a_manifest_accepts() {
        let err = serde_json::from_str::<NtSpec>(r#"{"kind": "no_such_kind"}"#).unwrap_err().to_string();
        let (_, expected) = err.split_once("expected one of").unwrap_or_else(|| panic!("serde's error lists the kinds: {err}"));
        let schema = backticked(expected);
        assert!(schema.contains("firewall") && schema.contains("wasm"), "the schema's kinds, read from {err:?}: {schema:?}");
        let concepts = include_str!("../../../docs/concepts.md");
        let row = concepts.lines().find(|l| l.starts_with("| NT |")).expect("concepts.md has a row for NT");
        assert_eq!(backticked(row), schema, "docs/concepts.md's NT row and the manifest schema differ");
    }

    #[test]
    fn a_snat_in_a_split_pool_takes_its_slots_block_and_claims_the_whole_range() {
        let nat: NtSpec =
            serde_json::from_str(r#"{"kind":"nat","snat":{"inside":"10.0.0.0/8","public":"203.0.113.1","ports":{"lo":1000,"hi":1899}}}"#)
                .unwrap();
        let claim = nat.claim().unwrap();
        assert_eq!((claim.public, claim.ports), ("203.0.113.1".parse().unwrap(), snic_core::mat::PortRange { lo: 1000, hi: 1899 }));
        let mine = nat.in_slot(Slots { slot: 1, count: 3 }).unwrap();
        let NtSpec::Nat(c) = &*mine else { panic!("{mine:?}") };
        assert_eq!(c.snat.unwrap().ports, snic_core::mat::PortRange { lo: 1300, hi: 1599 });
        assert_eq!(*nat.in_slot(Slots { slot: 0, count: 1 }).unwrap(), nat, "one slot: as it is");
        let few = nat.in_slot(Slots { slot: 0, count: 901 }).unwrap_err();
        assert_eq!(few.field(), Some("snat.ports"), "{few}");
        assert_eq!(NtSpec::Counter.claim(), None);
    }

    #[test]
    fn specs_parse_and_build() {
        let specs: Vec<NtSpec> = serde_json::from_str(
            r#"[{"kind":"dummy"},{"kind":"counter"},
                {"kind":"firewall","rules":[{"proto":6,"action":"deny"}],"default":"allow"},
                {"kind":"nat","snat":{"inside":"10.0.0.0/8","public":"203.0.113.1"}},
                {"kind":"aes_gcm","direction":"encrypt","keys":[{"tenant":1,"spi":1,"key_hex":"000102030405060708090a0b0c0d0e0f"}]},
                {"kind":"vni_map","map":[{"from":100,"to":200}]},
                {"kind":"synthetic","cost_ns":100,"capacity_pps":1000},
                {"kind":"kv_cache","backend":"10.0.0.2:11211","bytes":65536,"policy":"fifo"},
                {"kind":"kv_replicate","replicas":["10.0.0.2:11211","10.0.0.3:11211"]}]"#,
        )
        .unwrap();
        let kinds: Vec<_> = specs.iter().map(|s| build(s).unwrap().kind()).collect();
        assert_eq!(kinds, ["dummy", "counter", "firewall", "nat", "aes_gcm", "vni_map", "synthetic", "kv_cache", "kv_replicate"]);
    }

    #[test]
    fn bad_specs_rejected() {
        assert!(serde_json::from_str::<NtSpec>(r#"{"kind":"teleporter"}"#).is_err());
        assert!(serde_json::from_str::<NtSpec>(r#"{"kind":"nat","bogus":1}"#).is_err());
        let s: NtSpec = serde_json::from_str(r#"{"kind":"vni_map","default":16777216}"#).unwrap();
        assert_eq!(build(&s).err(), Some(SpecError::BadVni(16777216)));
        for (bad, field) in [
            (r#"{"kind":"kv_replicate","replicas":["10.0.0.2:11211"]}"#, "replicas"),
            (r#"{"kind":"kv_replicate","replicas":["10.0.0.2:11211","10.0.0.2:11212"]}"#, "replicas[1]"),
            (r#"{"kind":"kv_replicate","replicas":["10.0.0.2:11211","10.0.0.3:0"]}"#, "replicas[1]"),
            (r#"{"kind":"kv_replicate","replicas":["10.0.0.2:1","10.0.0.3:1"],"timeout_ms":0}"#, "timeout_ms"),
            (r#"{"kind":"kv_cache","backend":"10.0.0.2:11211","bytes":10}"#, "bytes"),
            (r#"{"kind":"kv_cache","backend":"0.0.0.0:11211"}"#, "backend"),
        ] {
            let s: NtSpec = serde_json::from_str(bad).unwrap();
            assert_eq!(s.validate().err().as_ref().and_then(|e| e.field()), Some(field), "{bad}");
        }
    }
}
