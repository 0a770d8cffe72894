//! Received packets enter their routes a run at a time: ingress classifies each packet of a
//! batch and sets it aside here, then each run of packets of one tenant on one route enters
//! the scheduler in one call ([`snic_core::node::NodeCore::handle_arrivals`]): the route, its
//! step, chain and queue looked up once. The rarer cases (no instance yet, a first step that
//! forks, a chain changing instances) go packet by packet, in order, as before.

use super::{Backend, Node};
use crate::worker::MAX_BATCH;
use crate::Drop;
use snic_core::ids::{DagUid, TenantId};
use snic_core::sched::Reject;
use snic_core::time::Instant;

/// Consecutive packets of one tenant on one route, up to `end` in [`Arriving::idx`], `bytes`
/// of VXLAN datagrams received in all.
#[derive(Clone, Copy)]
struct Run {
    tenant: TenantId,
    route: u32,
    end: u32,
    bytes: u32,
}

/// The packets ingress classified this batch, in order, and the runs they form. At most a
/// batch: entered after each.
#[derive(Default)]
pub(super) struct Arriving {
    idx: Vec<u32>,
    runs: Vec<Run>,
    refused: Vec<u32>,
}

impl Arriving {
    pub(super) fn new() -> Self {
        Arriving { idx: Vec::with_capacity(MAX_BATCH), runs: Vec::with_capacity(MAX_BATCH), refused: Vec::with_capacity(MAX_BATCH) }
    }

    /// Sets packet `idx` of `tenant`, on `route`, aside (`len`: the bytes it was received
    /// with).
    #[inline(always)]
    pub(super) fn push(&mut self, idx: u32, tenant: TenantId, route: u32, len: u32) {
        self.idx.push(idx);
        let end = self.idx.len() as u32;
        match self.runs.last_mut() {
            Some(r) if r.tenant == tenant && r.route == route => {
                r.end = end;
                r.bytes += len;
            }
            _ => self.runs.push(Run { tenant, route, end, bytes: len }),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }
}

impl<B: Backend> Node<B> {
    /// Enters the packets set aside this batch, a run of one tenant and route at a time.
    #[inline]
    pub(super) fn enter_arrivals(&mut self, now: Instant) {
        let mut a = std::mem::take(&mut self.arriving);
        let mut start = 0;
        for r in &a.runs {
            let run = &a.idx[start..r.end as usize];
            start = r.end as usize;
            // Received, and in its route, counted once for the run.
            self.stats.count_rx(r.tenant, run.len() as u64, r.bytes as u64);
            self.store.tag_run(run, r.route);
            let slots = &self.slots;
            let hash = |idx: u32| {
                // SAFETY: the dispatcher owns the packets it received.
                unsafe { slots.get(idx) }.1.flow_hash
            };
            match self.core.handle_arrivals(now, r.tenant, DagUid(r.route), run, hash, &mut a.refused) {
                Some(walk) => {
                    for &idx in run {
                        // SAFETY: as above.
                        unsafe { self.slots.get(idx) }.1.walk = walk;
                    }
                    for &idx in &a.refused {
                        self.refuse(idx, Drop::Sched(Reject::QueueFull), now);
                    }
                    a.refused.clear();
                }
                None => {
                    for &idx in run {
                        self.enter(idx, now);
                    }
                }
            }
        }
        a.idx.clear();
        a.runs.clear();
        self.arriving = a;
    }
}
