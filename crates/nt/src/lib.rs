//! # snic-nt: network tasks
//!
//! An NT is a unit of packet processing a tenant deploys: a firewall, a NAT, an encryptor. In
//! the paper each NT is FPGA logic inside a region; here an NT is a Rust object implementing
//! [`Nt`], and a chain is a list of them that a region runs over a batch of packets, NT by NT
//! (paper §4.2). The wrapper the paper puts around every NT — skipping, load monitoring — is the
//! region's loop in `snic-dataplane`; an NT only sees packets it must process.
//!
//! NTs see a packet as a [`Pkt`]: the packet buffer plus the descriptor fields they may read or
//! change ([`PktMeta`]). They never allocate per packet and never return `Err`: each call returns
//! a [`Verdict`], and a drop carries a [`DropReason`] that the data plane counts.
//!
//! Built-in NTs, each configured by a serde-deserializable spec ([`NtSpec`]):
//! [`firewall`], [`nat`], [`crypto`] (AES-GCM between two sNICs), [`vni_map`] (VPC re-mapping),
//! [`counter`], [`dummy`] (touches only the header; for benchmarks) and [`synthetic`] (a
//! calibrated cost, for fairness and scaling experiments); [`kv`] (a cache and a replicator in
//! front of memcached); and [`wasm`], a tenant's own NT as a sandboxed WebAssembly module.
#![warn(missing_docs)]

pub mod counter;
pub mod crypto;
pub mod dummy;
pub mod firewall;
mod flow_index;
mod key4;
pub mod kv;
pub mod nat;
pub mod outbox;
pub mod spec;
pub mod synthetic;
pub mod vni_map;
pub mod wasm;
pub mod work;

use snic_core::ids::TenantId;
use snic_core::time::Instant;
use snic_wire::layout::InnerLayout;

pub use outbox::Outbox;
pub use spec::{build, Access, NtSpec, SpecError};
pub use work::WorkTimer;

/// Bytes of headroom every packet buffer keeps in front of the VXLAN header, so egress can write
/// outer headers and the encryptor can insert its header without moving the payload.
pub const HEADROOM: usize = 128;

/// The descriptor fields an NT may read and change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PktMeta {
    /// Offset of the VXLAN header in the buffer.
    pub off: u16,
    /// Length of the VXLAN datagram (VXLAN header and the rest).
    pub len: u16,
    /// The packet's VNI.
    pub vni: u32,
    /// The tenant the MAT assigned.
    pub tenant: TenantId,
    /// The parsed inner frame; `None` while it is opaque (encrypted).
    pub inner: Option<InnerLayout>,
}

impl PktMeta {
    /// Finishes the inner TCP or UDP checksum if its sender (or the node's own segmentation)
    /// left it partial (`InnerLayout::l4_partial`: the field holds the pseudo-header's sum).
    /// A complete checksum that happens to hold that value (1 valid packet in 65,536) is
    /// computed again to the same value. The node calls it before an NT that does not
    /// [`Nt::takes_partial_checksums`] and before a datagram leaves whole.
    #[inline]
    pub fn finish_checksum(&mut self, buf: &mut [u8]) {
        if let Some(il) = self.inner.as_mut().filter(|il| il.l4_partial) {
            let s = self.off as usize + snic_wire::vxlan::HEADER_LEN;
            let l4 = il.l4_off.saturating_sub(il.l3_off) as usize;
            if let Some(ip) = buf.get_mut(s + il.l3_off as usize..s + il.l3_end as usize).filter(|ip| ip.len() >= l4) {
                snic_wire::build::fill_l4_checksum(ip, l4, il.key.proto);
            }
            il.l4_partial = false;
        }
    }
}

/// A packet as an NT sees it.
#[derive(Debug)]
pub struct Pkt<'a> {
    /// The whole packet buffer (headroom and tailroom included).
    pub buf: &'a mut [u8],
    /// The descriptor fields.
    pub meta: &'a mut PktMeta,
    /// Where the packet is on its DAG.
    pub at: At,
}

/// Where a packet is on its DAG: the route the node gave the DAG and the step it is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct At {
    /// The node's number for the DAG's route.
    pub dag: u32,
    /// The step of the route.
    pub step: u8,
}

/// What happens to a packet after an NT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On to the next NT (or the scheduler, or egress).
    Continue,
    /// Dropped, for this reason.
    Drop(DropReason),
    /// On, but past the rest of this chain's NTs at this step (to the next step, or egress).
    Skip,
}

/// Why an NT dropped a packet. Stable names for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum DropReason {
    FirewallDeny,
    NatTableFull,
    NatPortsExhausted,
    NatUnmatched,
    NotIp,
    CryptoNoKey,
    CryptoNoRoom,
    CryptoMalformed,
    CryptoAuthFailed,
    CryptoReplay,
    CryptoReplayStateFull,
    CryptoBadInner,
    OpaquePayload,
    EngineThrottled,
    Overloaded,
    KvAnswerHeld,
    KvAnswerLate,
    WasmDrop,
    WasmTimeLimit,
    WasmTrap,
    WasmBadVerdict,
    WasmBadFrame,
    WasmStopped,
}

impl DropReason {
    /// Every variant, for counter tables.
    pub const ALL: [DropReason; 23] = [
        DropReason::FirewallDeny,
        DropReason::NatTableFull,
        DropReason::NatPortsExhausted,
        DropReason::NatUnmatched,
        DropReason::NotIp,
        DropReason::CryptoNoKey,
        DropReason::CryptoNoRoom,
        DropReason::CryptoMalformed,
        DropReason::CryptoAuthFailed,
        DropReason::CryptoReplay,
        DropReason::CryptoReplayStateFull,
        DropReason::CryptoBadInner,
        DropReason::OpaquePayload,
        DropReason::EngineThrottled,
        DropReason::Overloaded,
        DropReason::KvAnswerHeld,
        DropReason::KvAnswerLate,
        DropReason::WasmDrop,
        DropReason::WasmTimeLimit,
        DropReason::WasmTrap,
        DropReason::WasmBadVerdict,
        DropReason::WasmBadFrame,
        DropReason::WasmStopped,
    ];

    /// Stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::FirewallDeny => "firewall_deny",
            DropReason::NatTableFull => "nat_table_full",
            DropReason::NatPortsExhausted => "nat_ports_exhausted",
            DropReason::NatUnmatched => "nat_unmatched",
            DropReason::NotIp => "not_ip",
            DropReason::CryptoNoKey => "crypto_no_key",
            DropReason::CryptoNoRoom => "crypto_no_room",
            DropReason::CryptoMalformed => "crypto_malformed",
            DropReason::CryptoAuthFailed => "crypto_auth_failed",
            DropReason::CryptoReplay => "crypto_replay",
            DropReason::CryptoReplayStateFull => "crypto_replay_state_full",
            DropReason::CryptoBadInner => "crypto_bad_inner",
            DropReason::OpaquePayload => "opaque_payload",
            DropReason::EngineThrottled => "engine_throttled",
            DropReason::Overloaded => "nt_overloaded",
            // A replica's answer held until every replica answered (not lost: the last one
            // goes to the client).
            DropReason::KvAnswerHeld => "kv_answer_held",
            // A replica's answer to a write the client was already answered for.
            DropReason::KvAnswerLate => "kv_answer_late",
            // A tenant's module dropped it (its code is counted in the NT's counters).
            DropReason::WasmDrop => "wasm_drop",
            // A tenant's module used up the packet's fuel.
            DropReason::WasmTimeLimit => "wasm_time_limit",
            // A tenant's module trapped on it.
            DropReason::WasmTrap => "wasm_trap",
            // A tenant's module returned a verdict the ABI does not know.
            DropReason::WasmBadVerdict => "wasm_bad_verdict",
            // Too long for the module's buffer, or the module gave it a length out of range.
            DropReason::WasmBadFrame => "wasm_bad_frame",
            // The module was stopped for exceeding its time bound too often.
            DropReason::WasmStopped => "wasm_stopped",
        }
    }

    /// Index into [`DropReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Per-call context.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// The time the batch is processed.
    pub now: Instant,
    /// The core the NT runs on: what modelled work is spent on ([`WorkTimer::spend`]).
    pub work: &'a WorkTimer,
    /// Where the NT puts packets it sends of its own ([`outbox`]); `None` where nothing can be
    /// sent (an NT that does not say it emits, [`Nt::emits`]).
    pub out: Option<&'a Outbox>,
}

static REAL: WorkTimer = WorkTimer::Real;

impl Ctx<'static> {
    /// A context on the real clock at `now` (tests and tools that run an NT by hand).
    pub fn real(now: Instant) -> Self {
        Ctx { now, work: &REAL, out: None }
    }
}

impl<'a> Ctx<'a> {
    /// A context on the real clock at `now` whose NT sends into `out`.
    pub fn real_with(now: Instant, out: &'a Outbox) -> Self {
        Ctx { now, work: &REAL, out: Some(out) }
    }
}

/// Adds `n` to a counter only its NT writes: a relaxed load and store are enough, and avoid a
/// locked read-modify-write per packet (readers on other threads see it a little late).
pub(crate) fn bump(c: &std::sync::atomic::AtomicU64, n: u64) {
    use std::sync::atomic::Ordering::Relaxed;
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Counters an NT keeps of its own (a counter's packets by protocol, a cache's hits, a
/// replication's timeouts), readable from any thread while the NT runs: the node shows them in
/// status and `/metrics`.
pub trait NtCounters: Send + Sync + std::fmt::Debug {
    /// Calls `f` with each counter's stable name (a metrics label), its value, and whether an
    /// increase is worth an operator's attention (the node logs it as a warning).
    fn each(&self, f: &mut dyn FnMut(&'static str, u64, bool));
}

/// A network task. (`Any`: a region runs its batch loop with a built-in NT's own type, so that
/// [`Nt::process`] is called directly, see [`with_type`].)
pub trait Nt: Send + std::any::Any {
    /// The kind name (`firewall`, `nat`, ...).
    fn kind(&self) -> &'static str;

    /// Processes one packet. Must not allocate, must not panic on any packet content.
    fn process(&mut self, cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict;

    /// The throughput of one instance in packets per second, if the NT has a fixed one (an
    /// engine that is not the CPU). `None`, the default: the data plane measures the NT's cost.
    fn capacity_pps(&self) -> Option<f64> {
        None
    }

    /// Its own counters ([`NtCounters`]), if it keeps any. The default: none.
    fn counters(&self) -> Option<std::sync::Arc<dyn NtCounters>> {
        None
    }

    /// True for an NT that sends packets of its own ([`outbox`]): its region gets an outbox,
    /// and [`Nt::tick`] is called at least every millisecond, traffic or not.
    fn emits(&self) -> bool {
        false
    }

    /// Time passes (an NT that [`Nt::emits`]): at the start of each batch its region runs, and
    /// about every millisecond without traffic. For timers: a retry, a timeout's answer.
    fn tick(&mut self, _cx: &Ctx<'_>) {}

    /// True for an NT that looks packets up in tables too large for the cache (a NAT's flow
    /// index): its region then calls [`Nt::prefetch`] for a packet a few places ahead in the
    /// batch before it processes the current one.
    fn wants_prefetch(&self) -> bool {
        false
    }

    /// A packet this NT will process soon: start loading what its lookup will read. A hint
    /// only — it must not change what [`Nt::process`] does.
    fn prefetch(&self, _meta: &PktMeta) {}

    /// True for an engine whose cost grows with the bytes it processes (encryption,
    /// compression): shared by several tenants, it gets per-tenant token buckets in bytes
    /// (`snic_core::engine`).
    fn is_engine(&self) -> bool {
        false
    }

    /// True for an NT that reads no payload and no checksum, and updates checksums knowing
    /// one may be *partial* ([`PktMeta::finish_checksum`]): the node leaves an inner checksum
    /// partial through it (a segment the node cut from an endpoint's TCP burst, a packet whose
    /// sender left its checksum to the NIC), and finishes it only where something needs it
    /// whole. The default, false: the node finishes it before the NT sees the packet.
    fn takes_partial_checksums(&self) -> bool {
        false
    }

    /// The NT's state, for another instance of it on another node (a chain moving home from a
    /// peer, paper §5: pause, migrate state, resume). `None`, the default: nothing worth moving
    /// (no state, or a cache that refills). Times are saved relative to `now`, so the state
    /// means the same on a node whose clock started elsewhere. Called off the packet path, on a
    /// stopped instance.
    fn save_state(&self, _now: Instant) -> Option<Vec<u8>> {
        None
    }

    /// The flows whose state it holds, live at `now`, by the hash of the 5-tuple their packets
    /// arrive with ([`snic_wire::layout::FlowKey::hash64`]), appended to `out`: a node that
    /// drains tells its peers which flows to bring back to it. The default: none. Off the
    /// packet path.
    fn flow_hashes(&self, _now: Instant, _out: &mut Vec<u64>) {}

    /// Takes `state`, saved by [`Nt::save_state`] of an instance of the same kind and
    /// configuration, into this one (merged with what it has: several instances' states may be
    /// restored into one). Off the packet path. Returns how many entries (flows, counts) it
    /// took; entries that clash with its own, or do not fit, are left out and not counted.
    fn restore_state(&mut self, _state: &[u8], _now: Instant) -> Result<usize, StateError> {
        Err(StateError::Unsupported(self.kind()))
    }
}

/// A loop over a batch, written once for any NT type: [`with_type`] runs it with the NT's own
/// type where it is a built-in one, so that each built-in NT gets its own copy of the loop with
/// its [`Nt::process`] called directly and inlined, not through the vtable once a packet.
pub trait BatchLoop {
    /// What the loop returns.
    type Out;
    /// Runs the loop with `nt`.
    fn run<N: Nt + ?Sized>(self, nt: &mut N) -> Self::Out;
}

/// Runs `l` with `nt` as its own type if it is one of the built-in NTs a chain runs on the
/// packet path, else as `dyn Nt` (a tenant's WebAssembly NT, an application NT: their work per
/// packet dwarfs a virtual call). One type comparison per built-in kind, once a batch.
pub fn with_type<L: BatchLoop>(nt: &mut dyn Nt, l: L) -> L::Out {
    use std::any::Any;
    macro_rules! try_as {
        ($($t:ty),*) => {$(
            if (&*nt as &dyn Any).is::<$t>() {
                if let Some(n) = (&mut *nt as &mut dyn Any).downcast_mut::<$t>() {
                    return l.run(n);
                }
            }
        )*};
    }
    try_as!(dummy::Dummy, firewall::Firewall, nat::Nat, crypto::Crypto, vni_map::VniMap, counter::Counter, synthetic::Synthetic);
    l.run(nt)
}

/// Why an NT could not take a saved state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The NT keeps no state to restore.
    #[error("a {0} NT keeps no state to restore")]
    Unsupported(&'static str),
    /// The bytes are not a state of this NT.
    #[error("not a saved {0} state: {1}")]
    Malformed(&'static str, String),
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Packets for NT tests.
    use super::*;
    use snic_wire::build::{build, FrameSpec, L4Spec};
    use snic_wire::ethernet::MacAddr;
    use snic_wire::layout::parse_inner;

    pub struct TestPkt {
        pub buf: Vec<u8>,
        pub meta: PktMeta,
    }

    impl TestPkt {
        pub fn new(src: &str, dst: &str, l4: L4Spec, payload: usize) -> TestPkt {
            let spec = FrameSpec {
                outer: None,
                vni: 100,
                inner_src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                inner_dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                l4,
                payload_len: payload,
                payload_byte: 0xab,
            };
            let mut buf = vec![0u8; 2048];
            let n = build(&spec, &mut buf[HEADROOM..]).unwrap();
            let inner = parse_inner(&buf[HEADROOM + 8..HEADROOM + n]).ok();
            TestPkt { buf, meta: PktMeta { off: HEADROOM as u16, len: n as u16, vni: 100, tenant: TenantId(1), inner } }
        }

        pub fn pkt(&mut self) -> Pkt<'_> {
            Pkt { buf: &mut self.buf, meta: &mut self.meta, at: At::default() }
        }

        /// The same packet with its L4 checksum left partial, as an offloading sender leaves
        /// it (and the node's segmentation): the layout says so.
        pub fn partial(mut self) -> TestPkt {
            let l = self.reparse();
            let s = self.meta.off as usize + 8;
            let ip = &mut self.buf[s + l.l3_off as usize..s + l.l3_end as usize];
            snic_wire::build::fill_l4_partial(ip, (l.l4_off - l.l3_off) as usize, l.key.proto);
            self.meta.inner = Some(self.reparse());
            assert!(self.reparse().l4_partial);
            self
        }

        pub fn reparse(&self) -> snic_wire::layout::InnerLayout {
            let s = self.meta.off as usize + 8;
            parse_inner(&self.buf[s..self.meta.off as usize + self.meta.len as usize]).unwrap()
        }

        /// True if the inner L4 checksum (and IPv4 header checksum) verify.
        pub fn checksums_ok(&self) -> bool {
            let l = self.reparse();
            let s = self.meta.off as usize + 8;
            let f = &self.buf[s..self.meta.off as usize + self.meta.len as usize];
            let ip = &f[l.l3_off as usize..l.l3_end as usize];
            let v4ok = l.l3 != snic_wire::layout::InnerL3::Ipv4 || snic_wire::checksum::checksum(&ip[..20]) == 0;
            v4ok && snic_wire::build::verify_l4_checksum(ip, (l.l4_off - l.l3_off) as usize, l.key.proto)
        }
    }

    pub fn udp(sp: u16, dp: u16) -> L4Spec {
        L4Spec::Udp { src_port: sp, dst_port: dp }
    }
    pub fn tcp(sp: u16, dp: u16, flags: u8) -> L4Spec {
        L4Spec::Tcp { src_port: sp, dst_port: dp, flags }
    }
}

#[cfg(test)]
mod batch_loop_tests {
    use super::*;

    /// Names the type the loop was run with.
    struct TypeName;
    impl BatchLoop for TypeName {
        type Out = &'static str;
        fn run<N: Nt + ?Sized>(self, _nt: &mut N) -> &'static str {
            std::any::type_name::<N>()
        }
    }

    /// An NT the crate does not know (as a tenant's would be).
    struct Foreign;
    impl Nt for Foreign {
        fn kind(&self) -> &'static str {
            "foreign"
        }
        fn process(&mut self, _cx: &Ctx<'_>, _pkt: &mut Pkt<'_>) -> Verdict {
            Verdict::Continue
        }
    }

    #[test]
    fn built_in_nts_run_the_loop_as_their_own_type_and_others_through_the_vtable() {
        let mut built_in: Vec<(Box<dyn Nt>, &str)> = vec![
            (Box::new(dummy::Dummy::new()), "Dummy"),
            (Box::new(firewall::Firewall::new(Default::default())), "Firewall"),
            (Box::new(nat::Nat::new(Default::default())), "Nat"),
            (Box::new(counter::Counter::new()), "Counter"),
        ];
        for (nt, name) in &mut built_in {
            let ran_as = with_type(&mut **nt, TypeName);
            assert!(ran_as.ends_with(&format!("::{name}")), "{name} ran as {ran_as}");
        }
        let mut foreign: Box<dyn Nt> = Box::new(Foreign);
        assert_eq!(with_type(&mut *foreign, TypeName), std::any::type_name::<dyn Nt>());
    }
}
