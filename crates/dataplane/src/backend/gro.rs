//! Receiving coalesced datagrams (`UDP_GRO`): one `recvmmsg` entry may carry a run of up to 64
//! datagrams of one outer flow, back to back, all of the size the control message gives (the
//! last may be shorter). The kernel coalesces them on a receiving interface with GRO on (on veth:
//! `ethtool -K … gro on`), and on loopback a sender's segmentation-offload send arrives as one.
//! One system call then receives what took one per datagram, and the copy to user space runs
//! once per run.
//!
//! Each message is received into two places: its packet buffer (the first [`CAP`] bytes) and an
//! overflow buffer from its receive queue's own pool ([`POOL`] × 66 KB, allocated when the queue
//! is first read; its pages are touched only as runs fill them). Datagram 0 of a run stays in its
//! packet buffer, without a copy; datagrams 1.. are copied into spare packet buffers of the same
//! call. A queue's pool is its own so that one tenant's runs, held while its ingress limit
//! admits few datagrams, never take the buffers another tenant's queue receives with.
//! When the call has fewer spare buffers than the runs hold datagrams, the rest waits in its
//! overflow buffer ("held", per receive queue, in order) and is delivered first by the queue's
//! next receive, before the queue is read again: a queue's datagrams leave in the order they
//! came, and the node takes no more from a queue than the buffers it offers (a tenant's ingress
//! budget counts datagrams, not runs). How many messages a call asks for follows the runs a queue
//! has been seeing, so that a call's runs mostly fit its buffers.
//!
//! A datagram larger than a packet buffer is reported truncated (the node drops it, counted as
//! `oversize`), as before coalescing: one not coalesced whose bytes reach the overflow buffer, or
//! every datagram of a run whose size exceeds [`CAP`].

use super::RxMeta;
use crate::store::{Slots, BUF_SIZE};
use snic_nt::HEADROOM;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Bytes a packet buffer receives (the store's buffer past its headroom, less tailroom).
pub const CAP: usize = BUF_SIZE - HEADROOM - 64;

/// The overflow a message may need past its packet buffer: a UDP payload's most (65,507
/// bytes), rounded up.
const OVER: usize = 65_536;

/// Overflow buffers in a receive queue's pool: the most messages one receive asks for (4.2 MB of
/// address space per queue, resident only where runs were written).
pub const POOL: usize = crate::store::MAX_BATCH;

/// One received message, as `recvmmsg` left it.
#[derive(Debug, Clone, Copy)]
pub struct Msg {
    /// Bytes received (packet buffer and overflow together).
    pub len: usize,
    /// The run's datagram size (`UDP_GRO` control message); 0 if the message is one datagram.
    pub seg: usize,
    /// The kernel cut it (`MSG_TRUNC`).
    pub cut: bool,
    /// Sender.
    pub src: SocketAddr,
    /// Arrival interface (0: unknown).
    pub ifindex: u32,
}

/// The datagrams of a message not yet delivered: they wait in overflow buffer `buf`, which
/// holds the whole message by offset (its first [`CAP`] bytes copied there from the packet
/// buffer as needed).
struct Held {
    buf: u16,
    next: usize,
    msg: Msg,
}

/// One receive queue's pool, held messages and recent runs.
struct QueueRx {
    /// `POOL` × (`CAP` + `OVER`): buffer `b`'s byte `i` is byte `i` of the message received
    /// with it (`CAP..` written by the kernel, `..CAP` copied as needed).
    over: Vec<u8>,
    free: Vec<u16>,
    /// Held messages, oldest first.
    held: VecDeque<Held>,
    /// Datagrams per message lately, × 16 (an average over about 8 messages).
    per_msg: u32,
}

impl QueueRx {
    fn new() -> Self {
        QueueRx { over: vec![0; POOL * STRIDE], free: (0..POOL as u16).rev().collect(), held: VecDeque::new(), per_msg: 16 }
    }
}

/// See the module docs.
pub struct GroRx {
    queues: Vec<QueueRx>,
    /// Scratch: the buffers of one call in delivery order, those it did not fill, and the
    /// overflow buffers of its messages.
    order: Vec<u32>,
    unused: Vec<u32>,
    bufs: Vec<u16>,
    /// Messages received, and the datagrams they carried (cumulative).
    messages: u64,
    datagrams: u64,
}

const STRIDE: usize = CAP + OVER;

/// Datagrams in a message.
#[inline]
fn segments(m: &Msg) -> usize {
    if m.seg > 0 && m.len > m.seg {
        m.len.div_ceil(m.seg)
    } else {
        1
    }
}

/// Datagram `k`'s byte range in its message.
#[inline]
fn range(m: &Msg, k: usize) -> (usize, usize) {
    if segments(m) == 1 {
        return (0, m.len);
    }
    (k * m.seg, ((k + 1) * m.seg).min(m.len))
}

impl Default for GroRx {
    fn default() -> Self {
        GroRx {
            queues: Vec::new(),
            order: Vec::with_capacity(crate::store::MAX_BATCH),
            unused: Vec::with_capacity(crate::store::MAX_BATCH),
            bufs: Vec::with_capacity(crate::store::MAX_BATCH),
            messages: 0,
            datagrams: 0,
        }
    }
}

impl GroRx {
    fn queue(&mut self, q: usize) -> &mut QueueRx {
        if self.queues.len() <= q {
            self.queues.resize_with(q + 1, QueueRx::new);
        }
        &mut self.queues[q]
    }

    /// Delivers queue `q`'s held datagrams into `idx`/`meta` (copies), oldest first; returns how
    /// many, and whether any are still held (then the queue must not be read yet).
    pub fn deliver_held(&mut self, q: usize, slots: &Slots, idx: &[u32], meta: &mut [RxMeta]) -> (usize, bool) {
        let qr = self.queue(q);
        let mut n = 0;
        while let Some(h) = qr.held.front_mut() {
            let base = h.buf as usize * STRIDE;
            while h.next < segments(&h.msg) && n < idx.len() {
                let (a, b) = range(&h.msg, h.next);
                meta[n] = copy_out(slots, idx[n], &qr.over[base + a..base + b], &h.msg);
                h.next += 1;
                n += 1;
            }
            if h.next < segments(&h.msg) {
                return (n, true);
            }
            qr.free.push(h.buf);
            qr.held.pop_front();
        }
        (n, false)
    }

    /// How many messages a receive from queue `q` into `space` buffers should ask for: as many
    /// as its recent runs fill, at least one (none with `space` 0).
    pub fn plan(&mut self, q: usize, space: usize) -> usize {
        let qr = self.queue(q);
        let want = (space * 16 / qr.per_msg as usize).max(1);
        want.min(space).min(qr.free.len())
    }

    /// The overflow buffer for the `i`th message of the receive from queue `q` being planned,
    /// and its length.
    pub fn overflow(&mut self, q: usize, i: usize) -> (*mut u8, usize) {
        let qr = self.queue(q);
        let b = qr.free[qr.free.len() - 1 - i] as usize;
        // (In bounds: `b` < POOL, and `CAP + OVER` = STRIDE.)
        (qr.over[b * STRIDE + CAP..].as_mut_ptr(), OVER)
    }

    /// Splits the `msgs` received from queue `q` into `idx[i]` (message `i` each, the buffers
    /// [`GroRx::overflow`] gave) into datagrams: reorders `idx` so that `idx[..n]` hold them in
    /// arrival order, described by `meta[..n]`, and `idx[n..]` are the buffers left unfilled;
    /// what does not fit is held. Returns `n`.
    pub fn split(&mut self, q: usize, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta], msgs: &[Msg]) -> usize {
        self.queue(q);
        let GroRx { queues, order, unused, bufs, messages, datagrams } = self;
        let qr = &mut queues[q];
        let r = msgs.len();
        debug_assert!(r <= idx.len() && r <= qr.free.len());
        // The buffers `overflow` gave, in order (the free list's last first).
        let from = qr.free.len() - r;
        bufs.clear();
        bufs.extend(qr.free.drain(from..).rev());
        order.clear();
        unused.clear();
        let mut spare = r;
        let mut holding = false;
        for (i, m) in msgs.iter().enumerate() {
            let segs = segments(m);
            *messages += 1;
            *datagrams += segs as u64;
            qr.per_msg = (qr.per_msg * 7 + (segs.min(64) as u32) * 16).div_ceil(8).max(16);
            let (b, slot) = (bufs[i], idx[i]);
            let base = b as usize * STRIDE;
            // SAFETY: the dispatcher owns the buffers it passes to `recv`; `slot` was just
            // received into.
            let (pb, _) = unsafe { slots.get(slot) };
            let first = &pb[HEADROOM..HEADROOM + CAP];
            if holding {
                // An earlier message is held: this one waits behind it, whole.
                let k = m.len.min(CAP);
                qr.over[base..base + k].copy_from_slice(&first[..k]);
                qr.held.push_back(Held { buf: b, next: 0, msg: *m });
                unused.push(slot);
                continue;
            }
            let (_, e0) = range(m, 0);
            meta[order.len()] =
                RxMeta { len: e0.min(CAP) as u16, src: m.src, truncated: e0 > CAP || m.cut, arrival_ns: 0, ifindex: m.ifindex };
            order.push(slot);
            if segs > 1 && m.seg < CAP {
                // Datagram 1 begins in the packet buffer: its start joins the rest.
                let e = m.len.min(CAP);
                qr.over[base + m.seg..base + e].copy_from_slice(&first[m.seg..e]);
            }
            let mut k = 1;
            while k < segs && spare < idx.len() {
                let (a, e) = range(m, k);
                meta[order.len()] = copy_out(slots, idx[spare], &qr.over[base + a..base + e], m);
                order.push(idx[spare]);
                spare += 1;
                k += 1;
            }
            if k < segs {
                qr.held.push_back(Held { buf: b, next: k, msg: *m });
                holding = true;
            } else {
                qr.free.push(b);
            }
        }
        let n = order.len();
        unused.extend_from_slice(&idx[spare..]);
        idx[..n].copy_from_slice(order);
        idx[n..].copy_from_slice(unused);
        n
    }

    /// Messages received and the datagrams they carried, cumulative: their ratio is how well
    /// runs coalesce.
    pub fn runs(&self) -> (u64, u64) {
        (self.messages, self.datagrams)
    }
}

/// Copies one datagram `bytes` of message `m` into packet buffer `idx`: its metadata.
fn copy_out(slots: &Slots, idx: u32, bytes: &[u8], m: &Msg) -> RxMeta {
    // SAFETY: the dispatcher owns the buffers it passes to `recv`.
    let (buf, _) = unsafe { slots.get(idx) };
    let k = bytes.len().min(CAP);
    buf[HEADROOM..HEADROOM + k].copy_from_slice(&bytes[..k]);
    RxMeta { len: k as u16, src: m.src, truncated: bytes.len() > CAP, arrival_ns: 0, ifindex: m.ifindex }
}
