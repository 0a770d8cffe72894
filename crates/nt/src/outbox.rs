//! Packets an NT sends of its own: the rest of a reply that spans several datagrams, copies of
//! a request to replicas, an answer to a client after its replicas answered. During a batch an
//! NT writes each as a whole VXLAN datagram (VXLAN header and inner frame) into its region's
//! [`Outbox`] ([`Ctx::out`](crate::Ctx)); after the batch the data plane takes them out, puts
//! each in a packet buffer charged to the NT's tenant and sends it to egress, which routes it
//! like any packet by its VNI and inner destination. They skip the rest of the chain.
//!
//! The outbox is allocated once, with a bound on frames and bytes: a push that does not fit
//! fails, and the NT decides what that means (a reply not sent is a request the client
//! retries). Several threads may hold it (the region runs on a worker, the dispatcher drains):
//! a mutex, taken once per push and once per drain, and a flag the dispatcher reads once per
//! batch.

use snic_core::ids::TenantId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

#[derive(Debug, Clone, Copy)]
struct Frame {
    off: usize,
    len: usize,
    vni: u32,
    tenant: TenantId,
}

#[derive(Debug)]
struct Inner {
    bytes: Box<[u8]>,
    used: usize,
    frames: Vec<Frame>,
    max_frames: usize,
}

/// See the module docs.
#[derive(Debug)]
pub struct Outbox {
    inner: Mutex<Inner>,
    pending: AtomicBool,
    waiting: AtomicBool,
}

/// The most bytes one datagram in an outbox takes (a VXLAN datagram of a 1500-byte inner
/// frame, with room).
pub const MAX_FRAME: usize = 1600;

impl Outbox {
    /// An outbox for at most `frames` datagrams, `frames × MAX_FRAME` bytes.
    pub fn new(frames: usize) -> Outbox {
        Outbox {
            inner: Mutex::new(Inner {
                bytes: vec![0u8; frames * MAX_FRAME].into_boxed_slice(),
                used: 0,
                frames: Vec::with_capacity(frames),
                max_frames: frames,
            }),
            pending: AtomicBool::new(false),
            waiting: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it cannot leave it half written in a way that matters: frames
        // are recorded only after their bytes.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes one VXLAN datagram of tenant `tenant` on `vni` with `fill`, which gets at most
    /// [`MAX_FRAME`] bytes and returns the datagram's length (`None`: nothing sent). False if
    /// the outbox is full or `fill` gave up.
    pub fn push(&self, vni: u32, tenant: TenantId, fill: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        let mut g = self.lock();
        let g = &mut *g;
        if g.frames.len() >= g.max_frames || g.used + MAX_FRAME > g.bytes.len() {
            return false;
        }
        let off = g.used;
        let Some(len) = fill(&mut g.bytes[off..off + MAX_FRAME]).filter(|&n| n > 0 && n <= MAX_FRAME) else { return false };
        g.used += len;
        g.frames.push(Frame { off, len, vni, tenant });
        self.pending.store(true, Ordering::Release);
        true
    }

    /// The NT has timers running (requests waiting for answers) and needs its
    /// [`Nt::tick`](crate::Nt::tick) even without traffic; false lets an idle node sleep.
    pub fn set_waiting(&self, waiting: bool) {
        self.waiting.store(waiting, Ordering::Relaxed);
    }

    /// See [`Outbox::set_waiting`].
    pub fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Datagrams that can still be pushed.
    pub fn room(&self) -> usize {
        let g = self.lock();
        (g.max_frames - g.frames.len()).min((g.bytes.len() - g.used) / MAX_FRAME)
    }

    /// True if datagrams wait (a cheap check, once per batch).
    #[inline]
    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Takes every datagram out, oldest first: `f(datagram, vni, tenant)`.
    pub fn drain(&self, mut f: impl FnMut(&[u8], u32, TenantId)) {
        let mut g = self.lock();
        self.pending.store(false, Ordering::Release);
        for fr in &g.frames {
            f(&g.bytes[fr.off..fr.off + fr.len], fr.vni, fr.tenant);
        }
        g.frames.clear();
        g.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_come_out_in_order_and_a_full_outbox_refuses() {
        let o = Outbox::new(2);
        assert!(!o.is_pending());
        assert!(o.push(1, TenantId(1), |b| {
            b[..3].copy_from_slice(b"one");
            Some(3)
        }));
        assert!(!o.push(1, TenantId(1), |_| None), "fill gave up");
        assert!(o.push(2, TenantId(2), |b| {
            b[..3].copy_from_slice(b"two");
            Some(3)
        }));
        assert!(!o.push(3, TenantId(3), |_| Some(1)), "full");
        assert!(o.is_pending());
        let mut out = vec![];
        o.drain(|d, v, t| out.push((d.to_vec(), v, t)));
        assert_eq!(out, [(b"one".to_vec(), 1, TenantId(1)), (b"two".to_vec(), 2, TenantId(2))]);
        assert!(!o.is_pending());
        assert!(o.push(1, TenantId(1), |_| Some(MAX_FRAME)), "room again");
        assert!(!o.push(1, TenantId(1), |_| Some(MAX_FRAME + 1)));
    }
}
