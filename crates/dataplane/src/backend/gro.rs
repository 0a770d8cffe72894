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
//! A message may instead be one datagram whose inner TCP packet an endpoint with segmentation
//! offload left whole (tens of KB; the kernel gives no size for it): it is cut into segments as
//! TSO would, each a datagram of its own ([`Form::Super`], `snic_wire::tso`).
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
    /// What it holds (found as it is split; [`Form::One`] until then).
    pub form: Form,
}

/// What a message holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// One datagram.
    One,
    /// A coalesced run: datagrams of `seg` bytes back to back, each with its own VXLAN header.
    Run,
    /// One datagram whose inner TCP packet an offloading endpoint left unsegmented: cut into
    /// segments, each a datagram of its own, at the MSS the kernel gave (`seg`) or, with none,
    /// to inner packets of [`SUPER_IP_MAX`] bytes.
    Super(snic_wire::tso::Super),
    /// One datagram, larger than a packet buffer, that cannot be cut (an unsegmented inner
    /// packet that is not TCP): delivered cut, and dropped as oversize.
    Whole,
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
    /// Super-packets are cut with their segments' TCP checksums left partial (a backend that
    /// joins runs back, `egress_tap`: `snic_wire::tso::Super::leaving_partial`).
    pub cut_partial: bool,
}

const STRIDE: usize = CAP + OVER;

/// True if the kernel says the message holds several datagrams' worth (a run, or a
/// super-packet to cut).
#[inline]
fn several(m: &Msg) -> bool {
    m.seg > 0 && m.len > m.seg
}

/// Datagrams in a message (once its form is known).
#[inline]
fn segments(m: &Msg) -> usize {
    match m.form {
        Form::One | Form::Whole => 1,
        Form::Run => m.len.div_ceil(m.seg),
        Form::Super(s) => s.segments(),
    }
}

/// The most bytes of an inner IP packet in a segment cut from a super-packet that came without
/// its MSS: what a 1500-byte underlay carries in VXLAN (1450; docs/endpoints.md, "MTU").
pub const SUPER_IP_MAX: usize = 1450;

/// What message `m`, all of it in `bytes`, holds (one larger than a packet buffer, or several).
fn form(m: &Msg, bytes: &[u8], cut_partial: bool) -> Form {
    use snic_wire::tso::{is_one_packet, Super};
    if !is_one_packet(bytes) {
        return if several(m) { Form::Run } else { Form::One };
    }
    // An unsegmented packet: the kernel gives a tunnel packet's MSS as none (`UDP_GRO` reports
    // only UDP segmentation), so it is cut to what the underlay carries.
    let cut = if several(m) { Super::of(bytes, m.seg) } else { Super::of_ip_max(bytes, SUPER_IP_MAX) };
    cut.map_or(Form::Whole, |s| Form::Super(s.leaving_partial(cut_partial)))
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
            cut_partial: false,
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
                meta[n] = put(slots, idx[n], &qr.over[base..base + h.msg.len], &h.msg, h.next);
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
        let GroRx { queues, order, unused, bufs, messages, datagrams, cut_partial } = self;
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
            let mut m = *m;
            let (b, slot) = (bufs[i], idx[i]);
            let base = b as usize * STRIDE;
            if holding || several(&m) || m.len > CAP {
                // The whole message into its overflow buffer: its first bytes join the rest.
                // SAFETY: the dispatcher owns the buffers it passes to `recv`; `slot` was just
                // received into.
                let (pb, _) = unsafe { slots.get(slot) };
                let k = m.len.min(CAP);
                qr.over[base..base + k].copy_from_slice(&pb[HEADROOM..HEADROOM + k]);
                m.form = form(&m, &qr.over[base..base + m.len], *cut_partial);
            }
            let segs = segments(&m);
            *messages += 1;
            *datagrams += segs as u64;
            qr.per_msg = (qr.per_msg * 7 + (segs.min(64) as u32) * 16).div_ceil(8).max(16);
            if holding {
                // An earlier message is held: this one waits behind it, whole.
                qr.held.push_back(Held { buf: b, next: 0, msg: m });
                unused.push(slot);
                continue;
            }
            meta[order.len()] = match m.form {
                // Datagram 0 is where it was received.
                Form::One | Form::Run | Form::Whole => {
                    let e0 = if m.form == Form::Run { m.seg } else { m.len };
                    RxMeta { truncated: e0 > CAP || m.cut, ..rx_meta(&m, e0.min(CAP), e0) }
                }
                Form::Super(_) => put(slots, slot, &qr.over[base..base + m.len], &m, 0),
            };
            order.push(slot);
            let mut k = 1;
            while k < segs && spare < idx.len() {
                meta[order.len()] = put(slots, idx[spare], &qr.over[base..base + m.len], &m, k);
                order.push(idx[spare]);
                spare += 1;
                k += 1;
            }
            if k < segs {
                qr.held.push_back(Held { buf: b, next: k, msg: m });
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

/// Writes datagram `k` of message `m` (all of it in `bytes`) into packet buffer `idx`: its
/// metadata. One larger than the buffer is cut to it, and says so.
fn put(slots: &Slots, idx: u32, bytes: &[u8], m: &Msg, k: usize) -> RxMeta {
    // SAFETY: the dispatcher owns the buffers it passes to `recv`.
    let (buf, _) = unsafe { slots.get(idx) };
    let out = &mut buf[HEADROOM..HEADROOM + CAP];
    let (len, full) = match m.form {
        Form::Super(s) if s.segment_len(k) <= CAP => (s.write(bytes, k, out), s.segment_len(k)),
        Form::Super(s) => (0, s.segment_len(k)),
        _ => {
            let (a, e) = if m.form == Form::Run { (k * m.seg, ((k + 1) * m.seg).min(m.len)) } else { (0, m.len) };
            let n = (e - a).min(CAP);
            out[..n].copy_from_slice(&bytes[a..a + n]);
            (n, e - a)
        }
    };
    rx_meta(m, len, full)
}

/// The metadata of a datagram of message `m`: `len` bytes in its buffer, of `full` (cut if more
/// than a buffer holds).
fn rx_meta(m: &Msg, len: usize, full: usize) -> RxMeta {
    RxMeta { len: len as u16, src: m.src, truncated: full > CAP, arrival_ns: 0, ifindex: m.ifindex }
}
