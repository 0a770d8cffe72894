//! A region: one execution slot holding one chain instance (paper §4.1–§4.2).
//!
//! A region runs its chain run-to-completion over a batch of descriptors, NT by NT (the batch
//! passes through the first NT, then the second: better instruction-cache behaviour than packet
//! by packet). This loop is the software form of the paper's NT wrapper: it skips NTs the
//! packet's DAG does not use (the descriptor's mask) and packets an earlier NT dropped.

use crate::store::Slots;
use snic_core::ids::InstanceId;
use snic_core::time::Instant;
use snic_nt::{Ctx, Nt, Pkt, Verdict};

/// A chain instance in a region.
pub struct Region {
    /// The scheduler's instance id.
    pub instance: InstanceId,
    chain: Vec<Box<dyn Nt>>,
}

impl core::fmt::Debug for Region {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Region").field("instance", &self.instance).field("chain", &self.kinds()).finish()
    }
}

impl Region {
    /// A region running `chain`.
    pub fn new(instance: InstanceId, chain: Vec<Box<dyn Nt>>) -> Self {
        Region { instance, chain }
    }

    /// The NT kinds of the chain, in order.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.chain.iter().map(|n| n.kind()).collect()
    }

    /// Runs the chain over `batch`, recording each packet's verdict in its descriptor.
    ///
    /// # Safety
    /// The calling thread must own every index in `batch` (see `store`), and `batch` must not
    /// repeat an index.
    pub unsafe fn run(&mut self, slots: &Slots, batch: &[u32], now: Instant) {
        let cx = Ctx { now };
        for (i, nt) in self.chain.iter_mut().enumerate() {
            for &idx in batch {
                // SAFETY: ownership of `idx` is the caller's contract; the reference does not
                // outlive this iteration.
                let (buf, d) = unsafe { slots.get(idx) };
                if d.verdict.is_some() || !d.mask.runs(i) {
                    continue;
                }
                if let Verdict::Drop(r) = nt.process(&cx, &mut Pkt { buf, meta: &mut d.meta }) {
                    d.verdict = Some(r);
                }
            }
        }
    }
}
