//! The node's transmit half: where a finished packet goes — the tenant's forwarding table
//! names one peer, a flood list (head-end replication) or none — its encapsulation with
//! Ethernet framing, and the link. While the backend takes everything, packets go out in the
//! order they finished; once it pushes back they wait in per-tenant egress queues, and the link
//! is shared by deficit round robin on bytes, so large packets do not buy a larger share
//! (FairNIC). What a send left over goes first next time.
//!
//! [`Transmit`] holds the queues; what it touches of the node (backend, buffers, counters,
//! forwarding table) comes in a [`Link`] for the call.

use crate::backend::{Backend, Framing, TxReq};
use crate::clock::Clock;
use crate::egress;
use crate::fdb::{Fdb, PeerId, Route};
use crate::stats::Stats;
use crate::store::{Peer, Slots, Store, MAX_TENANTS};
use crate::Drop;
use snic_core::dwrr::Dwrr;
use snic_core::ids::{DagUid, TenantId};
use snic_core::time::Instant;
use snic_core::walk::Walk;
use snic_nt::HEADROOM;
use snic_wire::layout;
use snic_wire::vxlan;
use std::net::SocketAddr;

/// The route of the previous packet sent: (forwarding-table generation, VNI and tenant, MAC)
/// and the peer it named.
pub(crate) type Hop = Option<((u64, u64, u64), PeerId)>;

/// The transmit queues. See the module docs.
pub(crate) struct Transmit {
    framing: Framing,
    /// Packets per send.
    batch: usize,
    /// In line for the backend, in order.
    txq: Vec<TxReq>,
    /// Per-tenant egress queues, used while the backend pushes back.
    egress_q: Dwrr<TxReq>,
    backlogged: bool,
    /// This poll is sampled: sent packets' latencies are recorded ([`Transmit::sample`]).
    sampled: bool,
    /// Scratch: a flood's peers; the buffers of emitted datagrams.
    flood: Vec<PeerId>,
    emitted: Vec<u32>,
    templates: egress::Templates,
    /// The backend keeps transmitted buffers until the kernel completes them.
    keeps_sent: bool,
}

/// What transmitting touches of the node, for one call.
pub(crate) struct Link<'a, B> {
    pub backend: &'a mut B,
    pub slots: &'a Slots,
    pub store: &'a mut Store,
    pub stats: &'a mut Stats,
    pub fdb: &'a mut Fdb,
    pub clock: &'a dyn Clock,
}

impl<B> Link<'_, B> {
    /// The same, for a call that is not inlined: the caller's stays in registers (a `&mut`
    /// to it would make it live in memory on the per-packet path, ~18 instructions a packet).
    #[inline(always)]
    pub fn reborrow(&mut self) -> Link<'_, B> {
        Link {
            backend: &mut *self.backend,
            slots: self.slots,
            store: &mut *self.store,
            stats: &mut *self.stats,
            fdb: &mut *self.fdb,
            clock: self.clock,
        }
    }

    /// Drops a packet received before its tenant was known (counted as the node's). False,
    /// for callers that return whether a packet goes on.
    #[inline]
    pub fn drop_unattributed(&mut self, idx: u32, why: Drop) -> bool {
        self.stats.unattributed[why.index()] += 1;
        self.store.release(idx);
        false
    }

    /// Drops tenant `t`'s packet in buffer `idx`, not yet charged to its quota. False, as
    /// [`Link::drop_unattributed`].
    #[inline]
    pub fn drop_uncharged(&mut self, idx: u32, t: TenantId, why: Drop) -> bool {
        self.stats.tenant_mut(t).drops[why.index()] += 1;
        self.store.release(idx);
        false
    }

    /// Drops tenant `t`'s packet in buffer `idx`, charged to its quota.
    #[inline]
    pub fn drop_charged(&mut self, idx: u32, t: TenantId, why: Drop) {
        self.stats.tenant_mut(t).drops[why.index()] += 1;
        self.store.free_charged(idx, t);
    }
}

impl Transmit {
    /// Queues of `capacity` buffers at most; `batch` packets per send; `local`: this node's
    /// underlay address (Ethernet framing's templates).
    pub fn new(framing: Framing, batch: usize, capacity: usize, local: Peer) -> Self {
        Transmit {
            framing,
            batch,
            txq: Vec::with_capacity(capacity),
            egress_q: Dwrr::new(MAX_TENANTS, crate::store::BUF_SIZE as u32),
            backlogged: false,
            sampled: false,
            flood: Vec::with_capacity(64),
            emitted: Vec::new(),
            templates: egress::Templates::new(local),
            keeps_sent: false,
        }
    }

    /// The backend keeps what it transmits until the kernel completes it
    /// ([`Backend::keeps_sent`]): sent buffers are not freed here.
    pub fn keeping_sent(mut self, yes: bool) -> Self {
        self.keeps_sent = yes;
        self
    }

    /// True if the backend keeps what it transmits ([`Transmit::keeping_sent`]).
    pub fn keeps_sent(&self) -> bool {
        self.keeps_sent
    }

    /// True while packets wait for the backend.
    pub fn pending(&self) -> bool {
        self.backlogged || !self.txq.is_empty()
    }

    /// Whether this poll is sampled (one in SAMPLE_EVERY): percentiles need a sample, not
    /// every packet.
    pub fn sample(&mut self, sampled: bool) {
        self.sampled = sampled;
    }

    /// Tenant `t`'s weight on a backlogged link.
    pub fn set_weight(&mut self, t: TenantId, weight: u32) {
        self.egress_q.set_weight(t, weight);
    }

    /// Sends what NTs emitted ([`snic_nt::outbox`]): each datagram in a buffer charged to its
    /// tenant, routed as a packet that finished its route.
    #[cold]
    #[inline(never)]
    pub fn send_emitted<B: Backend>(&mut self, l: &mut Link<'_, B>, out: &snic_nt::Outbox, now: Instant) {
        let mut sent = std::mem::take(&mut self.emitted);
        out.drain(|dgram, vni, t| match l.store.alloc_charged(t, HEADROOM..HEADROOM + dgram.len()) {
            Ok(c) => {
                // SAFETY: `c` was just allocated to the dispatcher.
                let (buf, d) = unsafe { l.slots.get(c) };
                buf[HEADROOM..HEADROOM + dgram.len()].copy_from_slice(dgram);
                let inner = layout::parse_inner(&buf[HEADROOM + vxlan::HEADER_LEN..HEADROOM + dgram.len()]).ok();
                d.flow_hash = super::ingress::flow_hash(buf, &inner, HEADROOM, dgram.len());
                d.meta = snic_nt::PktMeta { off: HEADROOM as u16, len: dgram.len() as u16, vni, tenant: t, inner };
                d.src = PeerId::NONE;
                d.rx_ns = now.as_nanos();
                d.verdict = None;
                d.charged = true;
                d.walk = Walk::start(DagUid::default());
                sent.push(c);
            }
            Err(e) => l.stats.tenant_mut(t).drops[e.index()] += 1,
        });
        for &c in &sent {
            self.egress(l, c);
        }
        sent.clear();
        self.emitted = sent;
    }

    /// [`Transmit::egress`] for a packet whose route is likely `hop`'s, the previous packet's:
    /// sent there without a lookup if it is, else looked up and remembered.
    #[inline(always)]
    pub fn egress_via<B: Backend>(&mut self, l: &mut Link<'_, B>, idx: u32, hop: &mut Hop) {
        // SAFETY: the dispatcher owns `idx`.
        let (_, d) = unsafe { l.slots.get(idx) };
        let Some(inner) = &d.meta.inner else { return self.egress(l, idx) };
        // The tenant is part of the key: a route holds for the VNI's owner only.
        let key = (l.fdb.generation(), (d.meta.vni as u64) << 16 | d.meta.tenant.0 as u64, inner.dst_mac.as_u64());
        if let Some((k, p)) = *hop {
            if k == key {
                return self.emit(l, idx, p);
            }
        }
        match l.fdb.route(d.meta.tenant, d.meta.vni, Some(inner.dst_mac)) {
            Route::Unicast(p) => {
                *hop = Some((key, p));
                self.emit(l, idx, p)
            }
            _ => self.egress(l, idx),
        }
    }

    /// Sends a packet that finished its route where its tenant's forwarding table says.
    #[inline(always)]
    pub fn egress<B: Backend>(&mut self, l: &mut Link<'_, B>, idx: u32) {
        // SAFETY: the dispatcher owns `idx`.
        let (_, d) = unsafe { l.slots.get(idx) };
        match l.fdb.route(d.meta.tenant, d.meta.vni, d.meta.inner.as_ref().map(|i| i.dst_mac)) {
            Route::Unicast(p) => self.emit(l, idx, p),
            Route::Flood(list) => {
                let (t, src, off, len) = (d.meta.tenant, d.src, d.meta.off as usize, d.meta.len as usize);
                self.flood.clear();
                self.flood.extend(list.iter().copied());
                let fdb = &*l.fdb;
                // Not back to the sender's address (whatever MAC it was seen with).
                let src = fdb.get(src).map(|p| p.addr);
                self.flood.retain(|p| Some(fdb.peer(*p).addr) != src);
                if self.flood.is_empty() {
                    return l.drop_charged(idx, t, Drop::NoRoute);
                }
                // Head-end replication: one copy per extra VTEP (rare path).
                for i in 1..self.flood.len() {
                    let p = self.flood[i];
                    match l.store.alloc_charged(t, off..off + len) {
                        Ok(c) => {
                            // SAFETY: `c` was just allocated to the dispatcher and differs from
                            // `idx`, which the dispatcher also owns.
                            let ((buf, d), (cb, cd)) = unsafe { (l.slots.get(idx), l.slots.get(c)) };
                            cb[off..off + len].copy_from_slice(&buf[off..off + len]);
                            *cd = *d;
                            self.emit(l, c, p);
                        }
                        Err(e) => l.stats.tenant_mut(t).drops[e.index()] += 1,
                    }
                }
                let first = self.flood[0];
                self.emit(l, idx, first);
            }
            Route::None => l.drop_charged(idx, d.meta.tenant, Drop::NoRoute),
            Route::Foreign => l.drop_charged(idx, d.meta.tenant, Drop::ForeignVni),
        }
    }

    #[inline(always)]
    fn emit<B: Backend>(&mut self, l: &mut Link<'_, B>, idx: u32, id: PeerId) {
        // SAFETY: the dispatcher owns `idx`.
        let (buf, d) = unsafe { l.slots.get(idx) };
        let (off, len) = (d.meta.off as usize, d.meta.len as usize);
        let peer = l.fdb.peer(id);
        let start = match self.framing {
            Framing::Datagram => off,
            Framing::Ethernet => match self.templates.encap(buf, off, len, id, peer, d.flow_hash) {
                Some(s) => s,
                None => return l.drop_charged(idx, d.meta.tenant, Drop::NoRoute),
            },
        };
        self.queue(l, idx, start, off + len - start, peer.addr);
    }

    /// Queues `len` bytes from `start` of buffer `idx` for transmission (to `dst`, for datagram
    /// backends), as its descriptor's tenant's. The request carries the tenant and the
    /// datagram's length, so that the transmit loop counts them without reading descriptors
    /// again.
    #[inline(always)]
    pub fn queue<B: Backend>(&mut self, l: &mut Link<'_, B>, idx: u32, start: usize, len: usize, dst: SocketAddr) {
        // SAFETY: the dispatcher owns `idx`.
        let (buf, d) = unsafe { l.slots.get(idx) };
        let t = d.meta.tenant;
        // A checksum still partial is finished before the datagram leaves, unless it is a
        // VXLAN datagram (no pool header before it, no outer headers written) to a backend that
        // may join it into a burst, which then finishes what it does not join.
        let partial = d.meta.inner.is_some_and(|il| il.l4_partial) && Self::keep_partial(l, d, start, buf);
        let req = TxReq { idx, start: start as u16, len: len as u16, tenant: t, bytes: d.meta.len, dst, partial };
        if self.backlogged {
            return self.enqueue_backlogged(l.reborrow(), t, req);
        }
        self.txq.push(req);
        if self.txq.len() >= self.batch {
            self.flush(l.reborrow());
        }
    }

    /// A packet whose inner checksum is partial, queued: true if it may leave so (see
    /// [`Transmit::queue`]), else it is finished here.
    #[cold]
    #[inline(never)]
    fn keep_partial<B: Backend>(l: &Link<'_, B>, d: &mut crate::store::Desc, start: usize, buf: &mut [u8]) -> bool {
        if start == d.meta.off as usize && l.backend.joins_runs() {
            return true;
        }
        d.meta.finish_checksum(buf);
        false
    }

    /// The link is backlogged: tenants take turns by bytes (deficit round robin).
    #[cold]
    #[inline(never)]
    fn enqueue_backlogged<B>(&mut self, mut l: Link<'_, B>, t: TenantId, req: TxReq) {
        if let Err(req) = self.egress_q.push(t, req, req.len as u32) {
            l.drop_charged(req.idx, t, Drop::TxError);
        }
    }

    /// Transmits (see the module docs).
    #[inline(never)]
    pub fn flush<B: Backend>(&mut self, mut l: Link<'_, B>) {
        loop {
            if self.txq.is_empty() {
                while self.txq.len() < self.batch {
                    let Some((_, req)) = self.egress_q.pop() else { break };
                    self.txq.push(req);
                }
                if self.txq.is_empty() {
                    self.backlogged = false;
                    return;
                }
            }
            if !self.send(&mut l) {
                // Back-pressure: what is left stays first in line (its order was already
                // decided), and from now on packets queue per tenant.
                self.backlogged = true;
                return;
            }
            if !self.backlogged {
                return;
            }
        }
    }

    /// Sends `txq`; true if the backend took (or refused for good) all of it.
    fn send<B: Backend>(&mut self, l: &mut Link<'_, B>) -> bool {
        // The clock only for the latency sample: a read costs ~25 ns in a guest, ~1.5% of a
        // 64-byte packet's time when every flush took one (perf, `dummy` 64 B).
        let now = if self.sampled { l.clock.now().as_nanos() } else { 0 };
        let mut done = 0;
        while done < self.txq.len() {
            let r = l.backend.send(l.slots, &self.txq[done..]);
            // Counted once per run of one tenant's packets (most of a batch is one tenant's).
            let mut run = (self.txq[done].tenant, 0u64, 0u64);
            for i in done..done + r.sent {
                let TxReq { idx, tenant: t, bytes, .. } = self.txq[i];
                if t != run.0 {
                    end_run(l.stats, l.store, run);
                    run = (t, 0, 0);
                }
                run.1 += 1;
                run.2 += bytes as u64;
                // Latency from the sampled polls.
                if self.sampled {
                    // SAFETY: the dispatcher owns queued transmit buffers.
                    let (_, d) = unsafe { l.slots.get(idx) };
                    let lat = now.saturating_sub(d.rx_ns);
                    l.stats.latency.record(lat);
                    if let Some(h) = &mut l.stats.tenant_latency[t.index()] {
                        h.record(lat);
                    }
                }
                if self.keeps_sent {
                    l.store.untag(idx);
                } else {
                    l.store.free_uncounted(idx);
                }
            }
            end_run(l.stats, l.store, run);
            for i in done + r.sent..done + r.sent + r.failed {
                let TxReq { idx, tenant, .. } = self.txq[i];
                l.drop_charged(idx, tenant, Drop::TxError);
            }
            done += r.sent + r.failed;
            if r.sent + r.failed == 0 {
                break;
            }
        }
        if done == self.txq.len() {
            self.txq.clear();
        } else {
            self.txq.drain(..done);
        }
        self.txq.is_empty()
    }
}

/// A run of tenant `t`'s packets sent (`(t, packets, bytes)`), their buffers freed uncounted:
/// adds them to its transmit counters and takes them off its store count.
#[inline(always)]
fn end_run(stats: &mut Stats, store: &mut Store, (t, packets, bytes): (TenantId, u64, u64)) {
    if packets > 0 {
        let ts = stats.tenant_mut(t);
        ts.tx_packets += packets;
        ts.tx_bytes += bytes;
        store.uncharge(t, packets as u32);
    }
}
