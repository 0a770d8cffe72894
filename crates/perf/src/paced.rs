//! A paced multi-stream source for isolation benchmarks and tests: several streams, each a
//! VXLAN datagram arriving at a fixed rate on the node's clock, share one bounded receive ring
//! — the way tenants share a NIC queue or a socket's receive buffer — or, built with
//! [`Paced::with_queues`], each have a ring of their own (a NIC or a socket group steering
//! tenants to their own queues). Arrivals that find their ring full are lost there, before snic
//! sees them, as they would be on a real host. Each packet is handed over with its arrival time
//! (a receive timestamp), so the node measures latency from arrival, ring wait included;
//! transmit counts each stream's delivered packets and records that latency.
//!
//! Arrivals are generated lazily at each `recv`, in time order across streams, until the ring
//! is full; the arrivals that cannot fit are counted without being generated, so an overloaded
//! node does not pay for packets it could never have received.
//!
//! On the real clock ([`snic_dataplane::node::MonotonicClock`]) it measures the node's real costs. On a
//! virtual clock ([`snic_dataplane::node::ManualClock`]) the node's work takes only the time it
//! spends: give the backend [`IoCost`]s and receiving and transmitting each packet cost the
//! dispatcher that much of its core, so that the node is a deterministic model of a machine with
//! those costs ([`crate::testbed::isolation`]).

use snic_dataplane::backend::{Backend, Framing, RxMeta, TxReq, TxResult};
use snic_dataplane::node::{Clock, WorkTimer};
use snic_dataplane::stats::Histogram;
use snic_dataplane::store::{Slots, BUF_SIZE};
use snic_nt::HEADROOM;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// One stream's traffic.
#[derive(Debug, Clone)]
pub struct StreamSpec {
    /// The VXLAN datagram; streams are told apart by VNI at transmit, so give each its own.
    pub datagram: Vec<u8>,
    /// Arrival rate, packets per second.
    pub pps: f64,
    /// The sender's address.
    pub src: SocketAddr,
}

/// Per-packet I/O costs spent on the dispatcher's core ([`WorkTimer::spend`]): a model of
/// reception (read, parse up to the MAT) and transmission for a node on a virtual clock. Zero,
/// the default, on the real clock, where the real costs are paid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCost {
    /// Per packet received, ns.
    pub rx_ns: u64,
    /// Per packet transmitted, ns.
    pub tx_ns: u64,
}

/// One stream's results.
#[derive(Debug, Clone, Default)]
pub struct StreamStats {
    /// Packets that arrived (offered).
    pub offered: u64,
    /// Arrivals lost because the receive ring was full.
    pub ring_drops: u64,
    /// Packets transmitted by the node.
    pub delivered: u64,
    /// Arrival-to-transmit latency of delivered packets, ns.
    pub latency: Histogram,
}

#[derive(Debug)]
struct Stream {
    spec: StreamSpec,
    vni: u32,
    period_ns: f64,
    /// Arrival time of the next packet, ns since the origin.
    next: f64,
    stats: StreamStats,
}

/// See the module docs.
pub struct Paced {
    streams: Vec<Stream>,
    /// One shared ring, or one per stream, and each ring's depth.
    rings: Vec<VecDeque<(u8, u64)>>,
    capacity: usize,
    depth: Vec<usize>,
    clock: Box<dyn Clock>,
    /// The dispatcher's core, on which I/O costs are spent.
    core: WorkTimer,
    io: IoCost,
    /// Per stream: ring drops cleared by `reset_stats` (the backend's drop counts stay
    /// cumulative).
    dropped_before_reset: Vec<u64>,
}

impl core::fmt::Debug for Paced {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Paced").field("streams", &self.streams).field("rings", &self.rings.len()).field("io", &self.io).finish()
    }
}

impl Paced {
    /// Streams sharing a receive ring of `ring` packets, starting now on `clock` (give it the
    /// node's clock, or a copy, so that arrival times are in the node's time).
    pub fn new(streams: Vec<StreamSpec>, ring: usize, clock: Box<dyn Clock>) -> Self {
        Self::build(streams, ring, clock, false)
    }

    /// Streams each with a receive ring of `ring` packets of its own: receive queue `i` is
    /// stream `i`'s.
    pub fn with_queues(streams: Vec<StreamSpec>, ring: usize, clock: Box<dyn Clock>) -> Self {
        Self::build(streams, ring, clock, true)
    }

    /// Spends `io` per packet received and transmitted on the clock's core (for a virtual
    /// clock; see the module docs).
    pub fn with_io_cost(mut self, io: IoCost) -> Self {
        self.io = io;
        self
    }

    fn build(streams: Vec<StreamSpec>, ring: usize, clock: Box<dyn Clock>, per_stream: bool) -> Self {
        assert!(streams.len() < 256, "at most 255 streams");
        let streams: Vec<Stream> = streams
            .into_iter()
            .map(|spec| {
                assert!(spec.datagram.len() <= BUF_SIZE - HEADROOM, "datagram size");
                let vni = snic_wire::layout::parse_vxlan(&spec.datagram).expect("a VXLAN datagram");
                Stream {
                    period_ns: if spec.pps > 0.0 { 1e9 / spec.pps } else { f64::INFINITY },
                    next: 0.0,
                    vni,
                    spec,
                    stats: StreamStats::default(),
                }
            })
            .collect();
        let rings: Vec<_> = (0..if per_stream { streams.len().max(1) } else { 1 }).map(|_| VecDeque::with_capacity(ring)).collect();
        let dropped_before_reset = vec![0; streams.len()];
        let core = clock.work_timer();
        let depth = vec![ring; rings.len()];
        let mut p = Paced { streams, rings, capacity: ring, depth, clock, core, io: IoCost::default(), dropped_before_reset };
        let now = p.now_ns() as f64;
        for s in &mut p.streams {
            s.next = now;
        }
        p
    }

    /// Results per stream, in the order given.
    pub fn stats(&self) -> Vec<StreamStats> {
        self.streams.iter().map(|s| s.stats.clone()).collect()
    }

    /// Clears the results (after a warm-up); pacing continues.
    pub fn reset_stats(&mut self) {
        for (s, d) in self.streams.iter_mut().zip(&mut self.dropped_before_reset) {
            *d += s.stats.ring_drops;
            s.stats = StreamStats::default();
        }
    }

    fn now_ns(&self) -> u64 {
        self.clock.now().as_nanos()
    }

    fn arrive(&mut self, now: u64) {
        let now = now as f64;
        if self.rings.len() > 1 {
            // A ring per stream: each fills on its own.
            for (i, ((s, ring), &depth)) in self.streams.iter_mut().zip(&mut self.rings).zip(&self.depth).enumerate() {
                while ring.len() < depth && s.next <= now {
                    ring.push_back((i as u8, s.next as u64));
                    s.stats.offered += 1;
                    s.next += s.period_ns;
                }
            }
        }
        let shared = self.rings.len() == 1;
        let ring = &mut self.rings[0];
        // In time order across streams while the shared ring has room.
        while shared && ring.len() < self.capacity {
            let Some((i, s)) = self.streams.iter().enumerate().filter(|(_, s)| s.next <= now).min_by(|a, b| a.1.next.total_cmp(&b.1.next))
            else {
                return;
            };
            ring.push_back((i as u8, s.next as u64));
            let s = &mut self.streams[i];
            s.stats.offered += 1;
            s.next += s.period_ns;
        }
        // Full: everything else due by now is lost at the ring.
        for s in &mut self.streams {
            if s.next <= now {
                let n = ((now - s.next) / s.period_ns).floor() as u64 + 1;
                s.stats.offered += n;
                s.stats.ring_drops += n;
                s.next += n as f64 * s.period_ns;
            }
        }
    }
}

impl Backend for Paced {
    fn framing(&self) -> Framing {
        Framing::Datagram
    }

    fn recv(&mut self, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        let mut n = 0;
        for q in 0..self.rings.len() {
            n += self.recv_queue(q, slots, &mut idx[n..], &mut meta[n..]);
        }
        n
    }

    fn rx_queues(&self) -> usize {
        self.rings.len()
    }

    /// A ring of its own holds `packets` at most (its `ring` size again with `None`); what is
    /// already in it past that stays, and later arrivals find it full.
    fn set_rx_depth(&mut self, q: usize, packets: Option<usize>, _bytes: usize) {
        if self.rings.len() > 1 {
            if let Some(d) = self.depth.get_mut(q) {
                *d = packets.unwrap_or(self.capacity).min(self.capacity);
            }
        }
    }

    fn rx_dropped_queue(&self, q: usize) -> u64 {
        if self.rings.len() == 1 {
            return self.rx_dropped();
        }
        self.streams.get(q).map_or(0, |s| s.stats.ring_drops) + self.dropped_before_reset.get(q).copied().unwrap_or(0)
    }

    fn recv_queue(&mut self, q: usize, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        if q >= self.rings.len() {
            return 0;
        }
        self.arrive(self.now_ns());
        let mut n = 0;
        while n < idx.len() {
            let Some((s, at)) = self.rings[q].pop_front() else { break };
            // Time 0 means "unknown" to the node.
            let d = &self.streams[s as usize].spec;
            // SAFETY: the dispatcher owns buffers it passes to `recv`.
            let (buf, _) = unsafe { slots.get(idx[n]) };
            let b = &mut buf[HEADROOM..HEADROOM + d.datagram.len()];
            b.copy_from_slice(&d.datagram);
            meta[n] = RxMeta { len: d.datagram.len() as u16, src: d.src, truncated: false, arrival_ns: at.max(1), ifindex: 0 };
            n += 1;
        }
        self.core.spend(self.io.rx_ns * n as u64);
        n
    }

    fn send(&mut self, slots: &Slots, reqs: &[TxReq]) -> TxResult {
        self.core.spend(self.io.tx_ns * reqs.len() as u64);
        let now = self.now_ns();
        for r in reqs {
            // SAFETY: the dispatcher owns buffers it passes to `send`.
            let (buf, d) = unsafe { slots.get(r.idx) };
            // The stream by VNI (an NT may have encrypted the payload, not the VXLAN header);
            // the latency from the arrival time the node kept in the descriptor.
            let Ok(vni) = snic_wire::layout::parse_vxlan(&buf[r.start as usize..r.start as usize + r.len as usize]) else { continue };
            if let Some(s) = self.streams.iter_mut().find(|s| s.vni == vni) {
                s.stats.delivered += 1;
                s.stats.latency.record(now.saturating_sub(d.rx_ns));
            }
        }
        TxResult { sent: reqs.len(), failed: 0 }
    }

    fn rx_dropped(&self) -> u64 {
        self.streams.iter().map(|s| s.stats.ring_drops).sum::<u64>() + self.dropped_before_reset.iter().sum::<u64>()
    }

    fn wait(&mut self, _timeout: std::time::Duration) {}
}
