//! The packet store (paper §4.1): a fixed pool of packet buffers and their descriptors, all
//! allocated at start.
//!
//! A packet is named by its index. The dispatcher thread owns the free list and the per-tenant
//! occupancy accounting; an index is *owned* by exactly one thread at a time — the dispatcher,
//! or the worker thread it handed the index to through a ring — and only the owner touches that
//! buffer and descriptor. That protocol is what makes the `unsafe` accessors sound; the rings
//! (`rtrb`) provide the happens-before edge when ownership moves.
//!
//! Accounting follows FairNIC's isolation rule (paper 003 §4): each tenant has a quota of
//! buffers, and when a tenant is at its quota, or the store is full, the arriving packet of
//! *that* tenant is dropped — a packet already stored is never evicted for another tenant.

use crate::drops::Drop;
use snic_core::ids::{InstanceId, TenantId};
use snic_core::walk::Walk;
use snic_nt::PktMeta;
use snic_wire::ethernet::MacAddr;
use std::cell::UnsafeCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Size of one packet buffer: headroom, a 1500-byte inner MTU frame with VXLAN and outer
/// headers, the crypto overhead, and slack.
pub const BUF_SIZE: usize = 2048;

/// Most descriptors in one batch (received, dispatched to a region, transmitted).
pub const MAX_BATCH: usize = 64;

/// Where a packet came from (the sending VTEP), as learned at ingress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The VTEP's UDP address.
    pub addr: SocketAddr,
    /// Its MAC (Ethernet framing only; zero otherwise).
    pub mac: MacAddr,
}

/// A peer VTEP's index in the forwarding table's peer table ([`crate::fdb::Fdb`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

impl PeerId {
    /// No peer: none known, or the peer table was full.
    pub const NONE: PeerId = PeerId(u32::MAX);
}

impl Peer {
    /// A compact identity for fast equality checks: for IPv4 the address, port and MAC packed
    /// exactly; for IPv6 a 128-bit fold of them (a false match is astronomically unlikely and
    /// would only delay a learning update until the next packet from that sender).
    #[inline]
    pub fn key(&self) -> u128 {
        let mac = self.mac.as_u64() as u128;
        match self.addr {
            SocketAddr::V4(a) => ((u32::from_be_bytes(a.ip().octets()) as u128) << 64) | ((a.port() as u128) << 48) | mac,
            SocketAddr::V6(a) => {
                let ip = u128::from_be_bytes(a.ip().octets());
                (ip ^ (ip >> 64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).rotate_left(17) ^ ((a.port() as u128) << 48) ^ mac ^ (1u128 << 127)
            }
        }
    }
}

impl Default for Peer {
    fn default() -> Self {
        Peer { addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0), mac: MacAddr::default() }
    }
}

/// A packet descriptor: the parsed header view and everything the scheduler needs.
#[derive(Debug, Clone, Copy)]
pub struct Desc {
    /// What NTs may read and change.
    pub meta: PktMeta,
    /// Where it is on its DAG's route (the node's internal route UID, the step, the NTs it
    /// runs there, its parallel-group fields): what the core's walk decides on.
    pub walk: Walk,
    /// Instance it was dispatched to.
    pub instance: InstanceId,
    /// Sending VTEP, by its id in the forwarding table ([`crate::fdb::Fdb::get`]);
    /// [`PeerId::NONE`] for none (emitted by an NT) or when the peer table was full.
    pub src: PeerId,
    /// Flow hash (inner 5-tuple at ingress).
    pub flow_hash: u64,
    /// Ingress timestamp (ns, the node's clock).
    pub rx_ns: u64,
    /// Set by the region: `None` to continue, or why an NT dropped it.
    pub verdict: Option<snic_nt::DropReason>,
    /// True once the packet is charged to `meta.tenant`.
    pub charged: bool,
}

impl Default for Desc {
    fn default() -> Self {
        Desc {
            meta: PktMeta { off: 0, len: 0, vni: 0, tenant: TenantId(0), inner: None },
            walk: Walk::default(),
            instance: InstanceId(0),
            src: PeerId::NONE,
            flow_hash: 0,
            rx_ns: 0,
            verdict: None,
            charged: false,
        }
    }
}

/// Distance between consecutive buffers in the store's memory: each buffer has a cache line of
/// padding after it. At a stride of exactly 2 KiB every buffer's bytes at one offset fell in the
/// same two L1 sets (set index = address bits 6..11), so a batch's 32 header lines fought over
/// 16 ways, and evicted descriptors with them. At 2 KiB plus 64 consecutive buffers start one set
/// further each (and stay 64-byte aligned: [`BUF_BASE`] is too).
pub const BUF_STRIDE: usize = BUF_SIZE + 64;

/// Offset of buffer 0 in the store's memory ([`Slots::region`]). The memory starts on a page
/// (an AF_XDP UMEM must), and the buffers `BUF_BASE` bytes into it, so that a chunk an AF_XDP
/// socket fills from `BUF_BASE` bytes before a buffer gets the frame at the buffer's
/// [`snic_nt::HEADROOM`] (the kernel writes it `XDP_PACKET_HEADROOM`, 256, into the chunk).
pub const BUF_BASE: usize = 256 - snic_nt::HEADROOM;

/// The buffers' memory: one zeroed, page-aligned allocation, every page written at start (the
/// store is allocated at start: the data path must take no page fault on a buffer's first use).
struct BufMem {
    ptr: std::ptr::NonNull<u8>,
    count: usize,
    layout: std::alloc::Layout,
}

impl BufMem {
    fn new(count: usize) -> Self {
        let size = (BUF_BASE + count * BUF_STRIDE).next_multiple_of(4096);
        let layout = std::alloc::Layout::from_size_align(size, 4096).expect("store size fits a layout");
        // SAFETY: the layout's size is non-zero (BUF_BASE > 0).
        let ptr = unsafe { std::alloc::alloc(layout) };
        let ptr = std::ptr::NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        // Zeroed by writing, not `alloc_zeroed`: a large zeroed allocation comes as untouched
        // pages from mmap, each faulted in (and zeroed by the kernel) on its first use, on the
        // dispatcher's time, during traffic. The old per-buffer construction wrote them all.
        // (The volatile write a page keeps the compiler from folding the two into a zeroed
        // allocation again.)
        // SAFETY: `ptr` is valid for `size` bytes just allocated.
        unsafe {
            std::ptr::write_bytes(ptr.as_ptr(), 0, size);
            for page in (0..size).step_by(4096) {
                std::ptr::write_volatile(ptr.as_ptr().add(page), 0);
            }
        }
        BufMem { ptr, count, layout }
    }
}

impl std::ops::Drop for BufMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Buffers and descriptors, shared between the dispatcher and the workers.
pub struct Slots {
    bufs: BufMem,
    descs: Box<[UnsafeCell<Desc>]>,
}

// SAFETY: Slots hands out references only through `unsafe` accessors whose contract is the
// ownership protocol in the module docs: one thread at a time per index, transfers through
// rings that synchronize. Under that protocol no two threads access the same cell concurrently.
// (A backend that lends buffers to the kernel, AF_XDP, gives them up by that same protocol.)
unsafe impl Sync for Slots {}
// SAFETY: the cells contain plain bytes and Copy descriptors; moving the allocation between
// threads is fine.
unsafe impl Send for Slots {}

impl Slots {
    fn new(n: usize) -> Self {
        let descs = (0..n).map(|_| UnsafeCell::new(Desc::default())).collect();
        Slots { bufs: BufMem::new(n), descs }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.bufs.count
    }

    /// Never true: a store has at least one slot.
    pub fn is_empty(&self) -> bool {
        self.bufs.count == 0
    }

    /// The buffers' memory, page-aligned, and its length: buffer `i` is at
    /// `BUF_BASE + i * BUF_STRIDE`. For a backend that registers it with the kernel (an AF_XDP
    /// UMEM), which then writes only into buffers the dispatcher lent it.
    pub fn region(&self) -> (*mut u8, usize) {
        (self.bufs.ptr.as_ptr(), self.bufs.layout.size())
    }

    /// The buffer at byte `offset` of [`Slots::region`], if one is there.
    #[inline]
    pub fn index_at(&self, offset: usize) -> Option<u32> {
        let i = offset.checked_sub(BUF_BASE)? / BUF_STRIDE;
        (i < self.bufs.count).then_some(i as u32)
    }

    /// The buffer and descriptor of `idx`.
    ///
    /// # Safety
    /// The caller must own `idx` (module docs) and must not hold another reference to it.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get(&self, idx: u32) -> (&mut [u8; BUF_SIZE], &mut Desc) {
        let i = idx as usize;
        // Every index in circulation comes from the store's own free list, built from
        // `0..len`; checked in debug builds, trusted in release (this is on every stage of the
        // per-packet path).
        debug_assert!(i < self.bufs.count);
        // SAFETY: `i < len` as above, so the buffer lies inside the allocation; exclusive
        // ownership of `idx` is the caller's contract. No reference to the whole region is
        // ever made, so this one aliases nothing.
        unsafe {
            let b = self.bufs.ptr.as_ptr().add(BUF_BASE + i * BUF_STRIDE) as *mut [u8; BUF_SIZE];
            (&mut *b, &mut *self.descs.get_unchecked(i).get())
        }
    }
}

/// The dispatcher-owned side of the store: free list and accounting.
pub struct Store {
    slots: std::sync::Arc<Slots>,
    free: Vec<u32>,
    /// Each tenant's buffers and quota, side by side (one line per charge, and a fixed length
    /// that a tenant index checked against [`MAX_TENANTS`] needs no second bounds check for).
    accounts: Box<[Account; MAX_TENANTS]>,
    charged: usize,
    /// Most buffers charged at once: all but those kept back for the receive path, so a full
    /// store drops arriving packets instead of stalling reception.
    charge_limit: usize,
    /// The tenant each slot last belonged to, so a buffer changing hands is zeroed (FairNIC's
    /// buffer-reuse leak).
    owner: Vec<u16>,
    /// The DAG route (node-internal UID) each charged slot runs, or `UNTAGGED`, and how many
    /// slots each route holds: a DAG switching to another chain candidate waits until its old
    /// route holds none (see `Node::rechain`).
    route_of: Vec<u32>,
    in_route: Vec<u32>,
}

const UNTAGGED: u32 = u32::MAX;

/// One tenant's buffers charged and its quota.
#[derive(Debug, Clone, Copy)]
struct Account {
    occupancy: u32,
    quota: u32,
}

/// Tenant slots in the accounting tables (tenant ids must be below this).
pub const MAX_TENANTS: usize = 1024;

impl Store {
    /// A store of `n` buffers, every tenant's quota set to `n`.
    pub fn new(n: usize, rx_reserve: usize) -> Self {
        let n = n.max(rx_reserve + 1);
        Store {
            slots: std::sync::Arc::new(Slots::new(n)),
            free: (0..n as u32).rev().collect(),
            accounts: Box::new([Account { occupancy: 0, quota: n as u32 }; MAX_TENANTS]),
            charged: 0,
            charge_limit: n - rx_reserve,
            owner: vec![u16::MAX; n],
            route_of: vec![UNTAGGED; n],
            in_route: Vec::new(),
        }
    }

    /// A store of `n` buffers as [`Store::new`], and `lent + in_flight` more for a backend that
    /// holds buffers outside the store's accounting (AF_XDP: `lent` given to the kernel for good
    /// to receive into, returned as the result; up to `in_flight` transmitted and not yet
    /// completed). Tenants can still be charged `n - rx_reserve` buffers at most, as with
    /// [`Store::new`].
    pub fn with_held(n: usize, rx_reserve: usize, lent: usize, in_flight: usize) -> (Self, Vec<u32>) {
        let n = n.max(rx_reserve + 1);
        let mut s = Store::new(n + lent + in_flight, rx_reserve);
        s.charge_limit = n - rx_reserve;
        let at = s.free.len() - lent;
        let out = s.free.split_off(at);
        (s, out)
    }

    /// The shared slots (for workers).
    pub fn slots(&self) -> &std::sync::Arc<Slots> {
        &self.slots
    }

    /// Total buffers.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Free buffers.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Buffers charged to any tenant.
    pub fn charged(&self) -> usize {
        self.charged
    }

    /// Buffers charged to `t`.
    pub fn occupancy(&self, t: TenantId) -> u32 {
        self.accounts[t.index()].occupancy
    }

    /// Sets `t`'s quota (buffers).
    pub fn set_quota(&mut self, t: TenantId, q: u32) {
        self.accounts[t.index()].quota = q;
    }

    /// Takes up to `n` free buffers for reception into `out`.
    #[inline]
    pub fn take_for_rx(&mut self, n: usize, out: &mut Vec<u32>) {
        out.clear();
        let k = n.min(self.free.len());
        let at = self.free.len() - k;
        // A slice copy and a truncation: `extend(drain(..))` went element by element (~130
        // instructions a 32-buffer batch against ~20).
        out.extend_from_slice(&self.free[at..]);
        self.free.truncate(at);
    }

    /// Returns a buffer that was never charged (reception unused, or an uncharged drop).
    #[inline]
    pub fn release(&mut self, idx: u32) {
        self.free.push(idx);
    }

    /// Charges a received buffer to tenant `t`. Fails when `t` is at its quota or the store
    /// holds fewer free buffers than the receive reserve; the caller then drops *this* packet.
    /// `fresh` is the byte range reception just wrote: if the buffer last belonged to another
    /// tenant, everything outside it is zeroed, so no NT can read a previous tenant's bytes.
    #[inline]
    pub fn charge(&mut self, idx: u32, t: TenantId, fresh: core::ops::Range<usize>) -> Result<(), Drop> {
        self.count_in(t, false)?;
        self.claim(idx, t, fresh);
        Ok(())
    }

    /// Counts one more buffer against `t` and the store, or says why not: `t` at its quota
    /// first, then the store at its charge limit (or `no_buffer`: none free to hand out). The
    /// accounting rule both [`Store::charge`] and [`Store::alloc_charged`] follow.
    #[inline(always)]
    fn count_in(&mut self, t: TenantId, no_buffer: bool) -> Result<(), Drop> {
        let Some(a) = self.accounts.get_mut(t.index()).filter(|a| a.occupancy < a.quota) else {
            return Err(Drop::TenantQuota);
        };
        if self.charged >= self.charge_limit || no_buffer {
            return Err(Drop::StoreFull);
        }
        a.occupancy += 1;
        self.charged += 1;
        Ok(())
    }

    fn claim(&mut self, idx: u32, t: TenantId, keep: core::ops::Range<usize>) {
        let o = &mut self.owner[idx as usize];
        if *o != t.0 {
            if *o != u16::MAX {
                // SAFETY: the dispatcher owns `idx` while charging it.
                let (buf, _) = unsafe { self.slots.get(idx) };
                buf[..keep.start].fill(0);
                buf[keep.end..].fill(0);
            }
            *o = t.0;
        }
    }

    /// Allocates a buffer charged to `t` that the caller will fill at `fill` (flood copies).
    pub fn alloc_charged(&mut self, t: TenantId, fill: core::ops::Range<usize>) -> Result<u32, Drop> {
        self.count_in(t, self.free.is_empty())?;
        let idx = self.free.pop().expect("checked non-empty");
        self.claim(idx, t, fill);
        Ok(idx)
    }

    /// Counts charged buffer `idx` as running DAG route `route` (node-internal UID) until it
    /// is freed.
    #[inline]
    pub fn tag_route(&mut self, idx: u32, route: u32) {
        self.tag_run(&[idx], route);
    }

    /// [`Store::tag_route`] for each buffer of `run` (untagged, charged, distinct): the
    /// route's count grows once for the run.
    #[inline]
    pub fn tag_run(&mut self, run: &[u32], route: u32) {
        let r = route as usize;
        if self.in_route.len() <= r {
            self.in_route.resize(r + 1, 0);
        }
        self.in_route[r] += run.len() as u32;
        for &idx in run {
            self.route_of[idx as usize] = route;
        }
    }

    /// Charged buffers running DAG route `route`.
    pub fn in_route(&self, route: u32) -> u32 {
        self.in_route.get(route as usize).copied().unwrap_or(0)
    }

    /// Frees a charged buffer.
    #[inline]
    pub fn free_charged(&mut self, idx: u32, t: TenantId) {
        self.free_uncounted(idx);
        self.uncharge(t, 1);
    }

    /// [`Store::free_charged`] for buffer `idx` without its tenant's accounting, which the
    /// caller does once for a run of the tenant's buffers ([`Store::uncharge`]).
    #[inline(always)]
    pub fn free_uncounted(&mut self, idx: u32) {
        self.untag(idx);
        self.free.push(idx);
    }

    /// Buffer `idx` leaves its DAG route's count ([`Store::tag_route`]) without being freed: a
    /// backend that keeps transmitted buffers until the kernel completes them gives them back
    /// with [`Store::release`].
    #[inline(always)]
    pub fn untag(&mut self, idx: u32) {
        let r = std::mem::replace(&mut self.route_of[idx as usize], UNTAGGED);
        if r != UNTAGGED {
            self.in_route[r as usize] -= 1;
        }
    }

    /// `n` buffers charged to `t`, freed with [`Store::free_uncounted`], leave its count and
    /// the store's.
    #[inline(always)]
    pub fn uncharge(&mut self, t: TenantId, n: u32) {
        self.accounts[t.index()].occupancy -= n;
        self.charged -= n as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_buffers_start_in_different_cache_sets() {
        let slots = Slots::new(64);
        let set = |i: u32| {
            // SAFETY: no other reference to any slot is live.
            let (buf, _) = unsafe { slots.get(i) };
            (buf.as_ptr() as usize >> 6) & 63
        };
        let sets: std::collections::HashSet<usize> = (0..64).map(set).collect();
        assert_eq!(sets.len(), 64, "64 consecutive buffers cover all 64 sets of a 4 KiB way");
        // SAFETY: as above.
        assert_eq!(unsafe { slots.get(0) }.0.as_ptr() as usize % 64, 0, "line-aligned");
    }

    #[test]
    fn the_region_is_page_aligned_and_names_each_buffer_by_its_offset() {
        let slots = Slots::new(10);
        let (base, len) = slots.region();
        assert_eq!(base as usize % 4096, 0);
        assert!(len >= BUF_BASE + 10 * BUF_STRIDE && len % 4096 == 0);
        for i in 0..10u32 {
            // SAFETY: no other reference to any slot is live.
            let at = unsafe { slots.get(i) }.0.as_ptr() as usize - base as usize;
            assert_eq!(at, BUF_BASE + i as usize * BUF_STRIDE);
            assert_eq!(slots.index_at(at + snic_nt::HEADROOM), Some(i), "a frame inside buffer {i}");
        }
        assert_eq!(slots.index_at(BUF_BASE - 1), None, "before buffer 0");
        assert_eq!(slots.index_at(BUF_BASE + 10 * BUF_STRIDE), None, "past the last");
    }

    #[test]
    fn held_buffers_are_outside_the_tenants_accounting() {
        let (mut s, lent) = Store::with_held(8, 2, 3, 4);
        assert_eq!((s.capacity(), lent.len(), s.free_count()), (15, 3, 12));
        assert!(lent.iter().all(|&i| i < 15));
        // Tenants can be charged as in a store of 8 with 2 kept for reception: 6.
        let got = take_charged(&mut s, 6, TenantId(1));
        assert_eq!(got.len(), 6);
        let mut rx = Vec::new();
        s.take_for_rx(1, &mut rx);
        assert_eq!(s.charge(rx[0], TenantId(1), 0..0), Err(Drop::StoreFull));
        // A buffer kept by the backend after transmission leaves its route, not the store.
        s.tag_route(got[0], 3);
        s.untag(got[0]);
        assert_eq!(s.in_route(3), 0);
    }

    #[test]
    fn peer_key_is_exact_for_ipv4_and_separates_families() {
        let p = |a: &str, m: u8| Peer { addr: a.parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, m]) };
        let v4 = [p("192.0.2.1:4789", 1), p("192.0.2.1:4790", 1), p("192.0.2.2:4789", 1), p("192.0.2.1:4789", 2)];
        for (i, a) in v4.iter().enumerate() {
            for (j, b) in v4.iter().enumerate() {
                assert_eq!(a.key() == b.key(), i == j);
            }
        }
        assert_ne!(p("[::ffff:192.0.2.1]:4789", 1).key(), v4[0].key());
        assert_ne!(p("[2001:db8::1]:4789", 1).key(), p("[2001:db8::2]:4789", 1).key());
    }

    /// `n` buffers taken for reception, each charged to `t` (no bytes received).
    fn take_charged(s: &mut Store, n: usize, t: TenantId) -> Vec<u32> {
        let mut rx = Vec::new();
        s.take_for_rx(n, &mut rx);
        for &i in &rx {
            s.charge(i, t, 0..0).unwrap();
        }
        rx
    }

    #[test]
    fn route_tags_count_charged_buffers_until_freed() {
        let mut s = Store::new(8, 2);
        let rx = take_charged(&mut s, 3, TenantId(1));
        s.tag_route(rx[0], 5);
        s.tag_route(rx[1], 5);
        assert_eq!((s.in_route(5), s.in_route(4), s.in_route(99)), (2, 0, 0));
        s.free_charged(rx[0], TenantId(1));
        s.free_charged(rx[2], TenantId(1));
        assert_eq!(s.in_route(5), 1, "an untagged buffer changes nothing");
        s.free_charged(rx[1], TenantId(1));
        assert_eq!(s.in_route(5), 0);
        // A reused slot starts untagged.
        let c = s.alloc_charged(TenantId(1), 0..0).unwrap();
        s.free_charged(c, TenantId(1));
        assert_eq!(s.in_route(5), 0);
    }

    #[test]
    fn a_run_tagged_and_freed_at_once_counts_as_one_by_one() {
        let mut s = Store::new(8, 2);
        let mut rx = take_charged(&mut s, 4, TenantId(1));
        s.tag_run(&rx[..3], 7);
        assert_eq!((s.in_route(7), s.occupancy(TenantId(1)), s.charged()), (3, 4, 4));
        // Three freed as a run, their tenant uncharged once; the fourth one by one.
        for &i in &rx[..3] {
            s.free_uncounted(i);
        }
        s.uncharge(TenantId(1), 3);
        assert_eq!((s.in_route(7), s.occupancy(TenantId(1)), s.charged()), (0, 1, 1));
        s.free_charged(rx[3], TenantId(1));
        assert_eq!((s.occupancy(TenantId(1)), s.charged()), (0, 0));
        // Every buffer is back: a whole store's worth can be taken again.
        s.take_for_rx(8, &mut rx);
        assert_eq!(rx.len(), 8);
    }

    #[test]
    fn quota_drops_only_that_tenant() {
        let mut s = Store::new(8, 2);
        s.set_quota(TenantId(1), 2);
        let mut rx = Vec::new();
        s.take_for_rx(4, &mut rx);
        assert_eq!(s.charge(rx[0], TenantId(1), 0..0), Ok(()));
        assert_eq!(s.charge(rx[1], TenantId(1), 0..0), Ok(()));
        assert_eq!(s.charge(rx[2], TenantId(1), 0..0), Err(Drop::TenantQuota));
        assert_eq!(s.charge(rx[3], TenantId(2), 0..0), Ok(()), "another tenant is unaffected");
        assert_eq!(s.occupancy(TenantId(1)), 2);
        s.release(rx[2]);
        s.free_charged(rx[0], TenantId(1));
        assert_eq!(s.occupancy(TenantId(1)), 1);
        assert_eq!(s.free_count(), 6);
    }

    #[test]
    fn store_full_keeps_rx_reserve() {
        let mut s = Store::new(6, 2);
        let mut rx = Vec::new();
        s.take_for_rx(6, &mut rx);
        for &i in &rx[..4] {
            s.charge(i, TenantId(1), 0..0).unwrap();
        }
        // Four of six charged: the last two are the receive reserve, so the next arrival is
        // dropped, whoever it belongs to, rather than leaving reception without buffers.
        assert_eq!(s.charge(rx[4], TenantId(2), 0..0), Err(Drop::StoreFull));
    }

    #[test]
    fn buffer_changing_tenant_is_scrubbed() {
        let mut s = Store::new(4, 0);
        let mut rx = Vec::new();
        s.take_for_rx(1, &mut rx);
        let i = rx[0];
        {
            // SAFETY: the test owns every index.
            let (b, _) = unsafe { s.slots().get(i) };
            b.fill(0xaa);
        }
        s.charge(i, TenantId(1), 0..BUF_SIZE).unwrap();
        s.free_charged(i, TenantId(1));
        s.take_for_rx(4, &mut rx);
        assert!(rx.contains(&i));
        {
            // SAFETY: as above.
            let (b, _) = unsafe { s.slots().get(i) };
            b[100..110].fill(0x55);
        }
        s.charge(i, TenantId(2), 100..110).unwrap();
        // SAFETY: as above.
        let (b, _) = unsafe { s.slots().get(i) };
        assert!(b[..100].iter().all(|&x| x == 0) && b[110..].iter().all(|&x| x == 0), "tenant 1's bytes leaked");
        assert!(b[100..110].iter().all(|&x| x == 0x55), "tenant 2's own data kept");
    }
}
