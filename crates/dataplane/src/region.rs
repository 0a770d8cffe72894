//! A region: one execution slot holding one chain instance (paper §4.1–§4.2).
//!
//! A region runs its chain run-to-completion over a batch of descriptors, NT by NT (the batch
//! passes through the first NT, then the second: better instruction-cache behaviour than packet
//! by packet). This loop is the software form of the paper's NT wrapper: it skips NTs the
//! packet's DAG does not use (the descriptor's mask) and packets an earlier NT dropped. In
//! front of an engine NT (encryption, compression) it keeps per-tenant token buckets in bytes
//! (`snic_core::engine`, FairNIC's accelerator isolation), sized by the engine's measured speed.

use crate::store::Slots;
use snic_core::engine::{EngineConfig, EngineShaper};
use snic_core::ids::InstanceId;
use snic_core::time::Instant;
use snic_nt::{At, Ctx, DropReason, Nt, Outbox, Pkt, Verdict, WorkTimer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a region has done, readable from any thread while it runs. The region is the only
/// writer, once per batch.
#[derive(Debug)]
pub struct RegionCounters {
    /// Batches run.
    pub batches: AtomicU64,
    /// Packets that entered the region.
    pub packets: AtomicU64,
    /// Per NT of the chain: packets it processed (not skipped).
    pub nt_packets: Vec<AtomicU64>,
    /// Per NT of the chain: packets it dropped.
    pub nt_drops: Vec<AtomicU64>,
    /// Per NT: nanoseconds spent in it over the timed batches (the first [`TIMED_FIRST`], then
    /// one in [`TIMED_EVERY`]), and the packets it processed in them: their ratio is the NT's cost per
    /// packet, which fair sharing turns into demand and capacity.
    pub nt_busy_ns: Vec<AtomicU64>,
    /// Per NT: packets processed in timed batches.
    pub nt_timed: Vec<AtomicU64>,
    /// Per NT: its declared throughput per instance ([`Nt::capacity_pps`]).
    pub nt_capacity_pps: Vec<Option<f64>>,
    /// Per NT: its own counters, if it keeps any ([`Nt::counters`]).
    pub nt_counters: Vec<Option<Arc<dyn snic_nt::NtCounters>>>,
    /// Where its NTs put packets they send of their own, if one of them does ([`Nt::emits`]):
    /// the dispatcher takes them out when a batch completes.
    pub outbox: Option<Outbox>,
}

/// Datagrams a region's outbox holds: a batch's worth of multi-datagram replies or replica
/// copies.
pub const OUTBOX_FRAMES: usize = 256;

/// How many packets ahead in a batch a region asks an NT to prefetch ([`Nt::prefetch`]): far
/// enough for a line from memory to arrive while the NT works on the packets between.
const PREFETCH_AHEAD: usize = 4;

/// One batch in this many is timed NT by NT (two clock reads per NT per timed batch).
pub const TIMED_EVERY: u64 = 32;

/// A new region times each of its first batches: the meter estimates an NT's cost once it has
/// timed 256 of its packets, and a 20 µs NT, which runs a packet or two a batch, would otherwise
/// wait 8,000 batches (190 ms at its rate) for its first estimate — all that time its tenant's
/// demand on it is unknown and unlimited.
pub const TIMED_FIRST: u64 = 256;

impl RegionCounters {
    fn new(chain: &[Box<dyn Nt>]) -> Self {
        let z = || (0..chain.len()).map(|_| AtomicU64::new(0)).collect();
        RegionCounters {
            batches: AtomicU64::new(0),
            packets: AtomicU64::new(0),
            nt_packets: z(),
            nt_drops: z(),
            nt_busy_ns: z(),
            nt_timed: z(),
            nt_capacity_pps: chain.iter().map(|n| n.capacity_pps()).collect(),
            nt_counters: chain.iter().map(|n| n.counters()).collect(),
            outbox: chain.iter().any(|n| n.emits()).then(|| Outbox::new(OUTBOX_FRAMES)),
        }
    }
}

/// One NT's pass over a batch: the packets it runs (those its DAG's mask names at this NT, not
/// yet dropped), through its engine's buckets if it has them. Returns the packets it ran, those
/// it dropped, and the bytes its engine took. A [`snic_nt::BatchLoop`], so that a built-in NT's
/// `process` is called directly (callgrind, `dummy` 64 B: 33 instructions a packet fewer than
/// through the vtable).
struct NtPass<'a, 'c> {
    slots: &'a Slots,
    batch: &'a [u32],
    cx: &'a Ctx<'c>,
    i: usize,
    engine: Option<&'a mut Engine>,
}

impl snic_nt::BatchLoop for NtPass<'_, '_> {
    type Out = (u64, u64, u64);

    #[inline]
    fn run<N: Nt + ?Sized>(self, nt: &mut N) -> (u64, u64, u64) {
        let NtPass { slots, batch, cx, i, mut engine } = self;
        let (mut ran, mut dropped, mut bytes) = (0u64, 0u64, 0u64);
        let prefetch = nt.wants_prefetch();
        let partial_ok = nt.takes_partial_checksums();
        if prefetch {
            for &idx in batch.iter().take(PREFETCH_AHEAD) {
                // SAFETY: as below; read only, and no other reference to it is live.
                nt.prefetch(&unsafe { slots.get(idx) }.1.meta);
            }
        }
        for (k, &idx) in batch.iter().enumerate() {
            if prefetch {
                if let Some(&ahead) = batch.get(k + PREFETCH_AHEAD) {
                    // SAFETY: as below (a different index of the batch: each is there once);
                    // read only, and the reference ends here.
                    nt.prefetch(&unsafe { slots.get(ahead) }.1.meta);
                }
            }
            // SAFETY: ownership of `idx` is `Region::run`'s caller's contract; the reference
            // does not outlive this iteration.
            let (buf, d) = unsafe { slots.get(idx) };
            if d.verdict.is_some() || !d.walk.mask.runs(i) {
                continue;
            }
            ran += 1;
            if let Some(e) = engine.as_deref_mut() {
                let len = d.meta.len as u64;
                if !e.shaper.admit(d.meta.tenant, len as f64, cx.now) {
                    d.verdict = Some(DropReason::EngineThrottled);
                    dropped += 1;
                    continue;
                }
                bytes += len;
            }
            if !partial_ok {
                // (Left partial through the NTs before, which take it so: finished for one that
                // may read it.)
                d.meta.finish_checksum(buf);
            }
            let at = At { dag: d.walk.dag.0, step: d.walk.pos };
            match nt.process(cx, &mut Pkt { buf, meta: &mut d.meta, at }) {
                Verdict::Continue => {}
                Verdict::Drop(r) => {
                    d.verdict = Some(r);
                    dropped += 1;
                }
                // The chain's later NTs leave it alone at this step. (PANIC-style scheduling,
                // one NT per visit, does not see it: there it is a forward.)
                Verdict::Skip => d.walk.mask = d.walk.mask.up_to(i),
            }
        }
        (ran, dropped, bytes)
    }
}

fn add(c: &AtomicU64, n: u64) {
    // Single writer: a relaxed load and store, no locked read-modify-write.
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// A chain instance in a region.
pub struct Region {
    /// The scheduler's instance id.
    pub instance: InstanceId,
    chain: Vec<Box<dyn Nt>>,
    counters: Arc<RegionCounters>,
    /// Per NT: the token buckets in front of it if it is an engine, and its measured speed.
    engines: Vec<Option<Engine>>,
}

/// A shared engine's shaper and the timings that give its capacity.
#[derive(Debug)]
struct Engine {
    shaper: EngineShaper,
    busy_ns: u64,
    bytes: u64,
    capacity: f64,
}

impl Engine {
    /// Bytes an engine must have been timed on before its speed is (re-)estimated.
    const SAMPLE_BYTES: u64 = 1 << 20;

    /// A timed batch: `bytes` took `ns`. Every MiB, the measured speed (bytes per second while
    /// busy) updates the shaper's capacity.
    fn measured(&mut self, ns: u64, bytes: u64) {
        self.busy_ns += ns;
        self.bytes += bytes;
        if self.bytes >= Self::SAMPLE_BYTES && self.busy_ns > 0 {
            let x = self.bytes as f64 * 1e9 / self.busy_ns as f64;
            self.capacity = if self.capacity == 0.0 { x } else { self.capacity + 0.25 * (x - self.capacity) };
            self.shaper.set_capacity(self.capacity);
            (self.busy_ns, self.bytes) = (0, 0);
        }
    }
}

impl core::fmt::Debug for Region {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Region").field("instance", &self.instance).field("chain", &self.kinds()).finish()
    }
}

impl Region {
    /// A region running `chain`; `engine_buckets` puts token buckets in front of its engines.
    pub fn new(instance: InstanceId, chain: Vec<Box<dyn Nt>>, engine_buckets: bool) -> Self {
        let counters = Arc::new(RegionCounters::new(&chain));
        let engines = chain
            .iter()
            .map(|n| {
                (engine_buckets && n.is_engine()).then(|| Engine {
                    shaper: EngineShaper::new(EngineConfig::default(), 0.0, Instant::ZERO),
                    busy_ns: 0,
                    bytes: 0,
                    capacity: 0.0,
                })
            })
            .collect();
        Region { instance, chain, counters, engines }
    }

    /// The region's counters (a shared handle).
    pub fn counters(&self) -> Arc<RegionCounters> {
        self.counters.clone()
    }

    /// The chain's NTs, with their state (the region is gone).
    pub fn into_nts(self) -> Vec<Box<dyn Nt>> {
        self.chain
    }

    /// The flows whose state the chain's NTs hold, by hash ([`Nt::flow_hashes`]).
    pub fn flow_hashes(&self, now: Instant, out: &mut Vec<u64>) {
        for nt in &self.chain {
            nt.flow_hashes(now, out);
        }
    }

    /// The NT kinds of the chain, in order.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.chain.iter().map(|n| n.kind()).collect()
    }

    /// Runs the chain over `batch`, recording each packet's verdict in its descriptor, on the
    /// core `core` (the node clock's [`WorkTimer`] on the dispatcher's thread, a worker's own
    /// core on a worker): it times the NTs' work, and NTs spend modelled work on it.
    ///
    /// # Safety
    /// The calling thread must own every index in `batch` (see `store`), and `batch` must not
    /// repeat an index.
    pub unsafe fn run(&mut self, slots: &Slots, batch: &[u32], now: Instant, core: &WorkTimer) {
        let cx = Ctx { now, work: core, out: self.counters.outbox.as_ref() };
        let c = &self.counters;
        let batches = c.batches.load(Ordering::Relaxed);
        let timed = batches < TIMED_FIRST || batches.is_multiple_of(TIMED_EVERY);
        add(&c.batches, 1);
        add(&c.packets, batch.len() as u64);
        if c.outbox.is_some() {
            for nt in self.chain.iter_mut().filter(|n| n.emits()) {
                nt.tick(&cx);
            }
        }
        for (i, (nt, engine)) in self.chain.iter_mut().zip(&mut self.engines).enumerate() {
            let t0 = timed.then(|| core.now_ns());
            let (ran, dropped, bytes) = snic_nt::with_type(&mut **nt, NtPass { slots, batch, cx: &cx, i, engine: engine.as_mut() });
            add(&c.nt_packets[i], ran);
            add(&c.nt_drops[i], dropped);
            if let Some(t0) = t0 {
                if ran > 0 {
                    let ns = core.now_ns().saturating_sub(t0);
                    add(&c.nt_busy_ns[i], ns);
                    add(&c.nt_timed[i], ran);
                    if let Some(e) = engine {
                        e.measured(ns, bytes);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use snic_core::dag::NtMask;
    use snic_core::ids::TenantId;
    use snic_nt::HEADROOM;
    use snic_wire::build::{build, fill_l4_partial, verify_l4_checksum, FrameSpec, L4Spec};
    use snic_wire::checksum::l4_field_is_pseudo;
    use snic_wire::ethernet::MacAddr;
    use std::sync::Mutex;

    /// An NT that records, per packet, whether the inner TCP checksum it saw was partial and
    /// whether it verified; `partial_ok` says whether it takes partial checksums.
    struct Sees {
        partial_ok: bool,
        seen: Arc<Mutex<Vec<(bool, bool)>>>,
    }

    impl Nt for Sees {
        fn kind(&self) -> &'static str {
            "sees"
        }

        fn takes_partial_checksums(&self) -> bool {
            self.partial_ok
        }

        fn process(&mut self, _cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
            let il = pkt.meta.inner.expect("parsed");
            let s = pkt.meta.off as usize + 8;
            let ip = &pkt.buf[s + il.l3_off as usize..s + il.l3_end as usize];
            let l4 = (il.l4_off - il.l3_off) as usize;
            self.seen.lock().unwrap().push((l4_field_is_pseudo(ip, l4, 6) && il.l4_partial, verify_l4_checksum(ip, l4, 6)));
            Verdict::Continue
        }
    }

    #[test]
    fn a_partial_checksum_passes_nts_that_take_it_and_is_finished_before_one_that_does_not() {
        let mut store = Store::new(4, 0);
        let idx = store.alloc_charged(TenantId(1), HEADROOM..HEADROOM + 1500).unwrap();
        let slots = store.slots().clone();
        let spec = FrameSpec {
            outer: None,
            vni: 100,
            inner_src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            inner_dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            l4: L4Spec::Tcp { src_port: 1, dst_port: 2, flags: 0x10 },
            payload_len: 1000,
            payload_byte: 7,
        };
        {
            // SAFETY: the test owns the store and its one buffer.
            let (buf, d) = unsafe { slots.get(idx) };
            let n = build(&spec, &mut buf[HEADROOM..]).unwrap();
            let ip = &mut buf[HEADROOM + 8 + 14..HEADROOM + n];
            fill_l4_partial(ip, 20, 6);
            d.meta.off = HEADROOM as u16;
            d.meta.len = n as u16;
            d.meta.inner = snic_wire::layout::parse_inner(&buf[HEADROOM + 8..HEADROOM + n]).ok();
            assert!(d.meta.inner.unwrap().l4_partial);
            d.walk.mask = NtMask::all(3);
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let nt = |partial_ok| Box::new(Sees { partial_ok, seen: seen.clone() }) as Box<dyn Nt>;
        let mut region = Region::new(InstanceId(0), vec![nt(true), nt(false), nt(true)], false);
        // SAFETY: the test owns the buffer; the batch holds it once.
        unsafe { region.run(&slots, &[idx], Instant::ZERO, &WorkTimer::Real) };
        // Partial (and not valid) through the first; finished before the second, and whole
        // from then on.
        assert_eq!(*seen.lock().unwrap(), vec![(true, false), (false, true), (false, true)]);
    }
}
