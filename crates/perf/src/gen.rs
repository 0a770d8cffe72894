//! The benchmarks' load generator: an allocation-free [`Backend`] that receives copies of
//! template frames and transmits into a counting sink.

use snic_dataplane::backend::{Backend, Framing, RxMeta, TxReq, TxResult};
use snic_dataplane::store::{Slots, BUF_SIZE};
use snic_nt::HEADROOM;
use std::net::SocketAddr;

const SMALL: usize = 128;

/// What the generator writes into a buffer it fills, for frames stored as header plus shared
/// payload (larger than [`Generator::WHOLE_BELOW`]; smaller ones are always written whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RxWrites {
    /// The whole frame, every packet: the CPU pays for what a NIC's DMA would write.
    #[default]
    Frame,
    /// The per-flow headers only; the payload bytes are whatever the buffer holds (zeroes, or
    /// the bytes an earlier packet left there), as DPDK's `net_null` leaves its buffers. Only
    /// for chains whose NTs decide nothing by the payload's bytes (the bench's `dummy` and
    /// `vpc`: the cipher's work does not depend on them): it shows how much of a run's time
    /// is the generator's copy.
    Headers,
}

/// A benchmark load generator: receives copies of template frames round-robin (as a NIC's DMA
/// writes into host buffers) up to a packet budget, and transmits into a counting sink (as
/// DPDK's `net_null` does). No allocation after construction.
///
/// Each frame is a per-flow header followed by a payload shared by all flows, the way packet
/// generators build traffic: every packet still lands in the node's buffer as its full bytes
/// (unless told to write the headers only, [`RxWrites::Headers`]), but the generator's own source
/// data stays small, so it does not evict the node's working set from the cache (a NIC's DMA
/// engine does not read through the CPU's caches either).
#[derive(Debug)]
pub struct Generator {
    templates: Vec<Vec<u8>>,
    /// The templates again, zero-padded to one fixed size, when all fit: a fixed-size copy is a
    /// few vector moves instead of a `memcpy` call per packet (a DMA engine copies whole lines).
    small: Vec<([u8; SMALL], u16)>,
    payload: Vec<u8>,
    /// Whether each receive writes the shared payload after the header ([`RxWrites`]).
    writes_payload: bool,
    src: SocketAddr,
    framing: Framing,
    next: usize,
    /// Packets still to generate.
    pub remaining: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// A fold of one byte of each transmitted packet (keeps the sink's reads observable).
    pub tx_check: u64,
}

impl Generator {
    /// A generator of `count` packets cycling through `headers`, each followed by `payload`.
    /// Frames of at most [`Generator::WHOLE_BELOW`] bytes are kept whole (one copy per packet);
    /// larger ones as header plus the shared payload.
    pub fn new(framing: Framing, headers: Vec<Vec<u8>>, payload: Vec<u8>, src: SocketAddr, count: u64) -> Self {
        assert!(!headers.is_empty(), "a generator needs at least one template");
        let (templates, payload) = if headers[0].len() + payload.len() <= Self::WHOLE_BELOW {
            (
                headers
                    .into_iter()
                    .map(|mut h| {
                        h.extend_from_slice(&payload);
                        h
                    })
                    .collect(),
                Vec::new(),
            )
        } else {
            (headers, payload)
        };
        let small = if payload.is_empty() && templates.iter().all(|t: &Vec<u8>| t.len() <= SMALL) {
            templates
                .iter()
                .map(|t| {
                    let mut b = [0u8; SMALL];
                    b[..t.len()].copy_from_slice(t);
                    (b, t.len() as u16)
                })
                .collect()
        } else {
            Vec::new()
        };
        Generator {
            templates,
            small,
            payload,
            writes_payload: true,
            src,
            framing,
            next: 0,
            remaining: count,
            tx_packets: 0,
            tx_bytes: 0,
            tx_check: 0,
        }
    }

    /// What each receive writes into the node's buffer (the default: the whole frame).
    pub fn with_writes(mut self, w: RxWrites) -> Self {
        self.writes_payload = w == RxWrites::Frame;
        self
    }

    /// Frame size up to which templates are stored whole.
    pub const WHOLE_BELOW: usize = 256;
}

impl Backend for Generator {
    fn framing(&self) -> Framing {
        self.framing
    }
    #[inline]
    fn recv(&mut self, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        let n = (idx.len() as u64).min(self.remaining) as usize;
        if !self.small.is_empty() {
            for (i, m) in meta[..n].iter_mut().enumerate() {
                let (t, len) = &self.small[self.next];
                self.next += 1;
                if self.next == self.small.len() {
                    self.next = 0;
                }
                // SAFETY: the dispatcher owns buffers it passes to `recv`.
                let (buf, _) = unsafe { slots.get(idx[i]) };
                let dst: &mut [u8; SMALL] = (&mut buf[HEADROOM..HEADROOM + SMALL]).try_into().expect("buffer holds headroom + 128");
                *dst = *t;
                *m = RxMeta { len: *len, src: self.src, truncated: false, arrival_ns: 0, ifindex: 0 };
            }
            self.remaining -= n as u64;
            return n;
        }
        for i in 0..n {
            let t = &self.templates[self.next];
            self.next += 1;
            if self.next == self.templates.len() {
                self.next = 0;
            }
            // SAFETY: the dispatcher owns buffers it passes to `recv`.
            let (buf, _) = unsafe { slots.get(idx[i]) };
            let (h, p) = (t.len(), self.payload.len());
            let fits = HEADROOM + h + p <= BUF_SIZE;
            if fits {
                buf[HEADROOM..HEADROOM + h].copy_from_slice(t);
                if p > 0 && self.writes_payload {
                    buf[HEADROOM + h..HEADROOM + h + p].copy_from_slice(&self.payload);
                }
            }
            meta[i] = RxMeta { len: if fits { (h + p) as u16 } else { 0 }, src: self.src, truncated: !fits, arrival_ns: 0, ifindex: 0 };
        }
        self.remaining -= n as u64;
        n
    }
    #[inline]
    fn send(&mut self, slots: &Slots, reqs: &[TxReq]) -> TxResult {
        for r in reqs {
            // SAFETY: the dispatcher owns buffers it passes to `send`.
            let (buf, _) = unsafe { slots.get(r.idx) };
            self.tx_check = self.tx_check.wrapping_add(buf[r.start as usize] as u64);
            self.tx_bytes += r.len as u64;
        }
        self.tx_packets += reqs.len() as u64;
        TxResult { sent: reqs.len(), failed: 0 }
    }
    fn wait(&mut self, _timeout: std::time::Duration) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_dataplane::store::Store;

    /// Receives one packet into a buffer that held `old` bytes; returns the frame.
    fn receive_over(w: RxWrites, old: u8) -> Vec<u8> {
        let mut store = Store::new(4, 1);
        let mut idx = Vec::new();
        store.take_for_rx(1, &mut idx);
        let slots = store.slots().clone();
        // SAFETY: the test owns the buffer it just took.
        unsafe { slots.get(idx[0]) }.0.fill(old);
        let mut g =
            Generator::new(Framing::Ethernet, vec![vec![1u8; 60]], vec![2u8; 1340], "192.0.2.10:4789".parse().unwrap(), 1).with_writes(w);
        let mut meta = [RxMeta { len: 0, src: "0.0.0.0:0".parse().unwrap(), truncated: false, arrival_ns: 0, ifindex: 0 }];
        assert_eq!(g.recv(&slots, &mut idx, &mut meta), 1);
        assert_eq!(meta[0].len, 1400);
        // SAFETY: as above.
        unsafe { slots.get(idx[0]) }.0[HEADROOM..HEADROOM + 1400].to_vec()
    }

    #[test]
    fn frame_writes_the_whole_frame_and_headers_leave_the_payload_as_it_was() {
        let whole = receive_over(RxWrites::Frame, 9);
        assert!(whole[..60].iter().all(|&b| b == 1) && whole[60..].iter().all(|&b| b == 2));
        let headers = receive_over(RxWrites::Headers, 9);
        assert!(headers[..60].iter().all(|&b| b == 1) && headers[60..].iter().all(|&b| b == 9));
    }
}
