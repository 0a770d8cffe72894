//! An in-memory backend: a port with queues of frames in and out, for tests and for drivers that
//! hand the node frames themselves.

use super::{Backend, Framing, RxMeta, TxReq, TxResult};
use crate::store::{Slots, BUF_SIZE};
use snic_nt::HEADROOM;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// A port for tests: push frames (or datagrams) in, read what the node sent out.
#[derive(Debug)]
pub struct MemPort {
    framing: Framing,
    /// Waiting to be received: bytes and (datagram framing) the sender.
    pub rx: VecDeque<(Vec<u8>, SocketAddr)>,
    /// What the node transmitted: bytes and (datagram framing) the destination.
    pub tx: Vec<(Vec<u8>, SocketAddr)>,
    /// The interface index every received frame reports (0: unknown).
    pub arrived_on: u32,
}

impl MemPort {
    /// An empty port.
    pub fn new(framing: Framing) -> Self {
        MemPort { framing, rx: VecDeque::new(), tx: Vec::new(), arrived_on: 0 }
    }
}

fn copy_in(slots: &Slots, idx: u32, bytes: &[u8]) -> (u16, bool) {
    // SAFETY: the dispatcher owns buffers it passes to `recv`.
    let (buf, _) = unsafe { slots.get(idx) };
    let room = BUF_SIZE - HEADROOM;
    let n = bytes.len().min(room);
    buf[HEADROOM..HEADROOM + n].copy_from_slice(&bytes[..n]);
    (n as u16, bytes.len() > room)
}

impl Backend for MemPort {
    fn framing(&self) -> Framing {
        self.framing
    }
    fn recv(&mut self, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
        let mut n = 0;
        while n < idx.len() {
            let Some((bytes, src)) = self.rx.pop_front() else { break };
            let (len, truncated) = copy_in(slots, idx[n], &bytes);
            meta[n] = RxMeta { len, src, truncated, arrival_ns: 0, ifindex: self.arrived_on };
            n += 1;
        }
        n
    }
    fn send(&mut self, slots: &Slots, reqs: &[TxReq]) -> TxResult {
        for r in reqs {
            // SAFETY: the dispatcher owns buffers it passes to `send`.
            let (buf, _) = unsafe { slots.get(r.idx) };
            self.tx.push((buf[r.start as usize..r.start as usize + r.len as usize].to_vec(), r.dst));
        }
        TxResult { sent: reqs.len(), failed: 0 }
    }
    fn wait(&mut self, _timeout: std::time::Duration) {}
}
