//! The backend's receive queues, as the node uses them: with one queue, everyone's packets
//! arrive there; with several (a queue per tenant, steered by the backend), the node reads them
//! in turn, takes from a tenant's own queue no more than its ingress limit admits now, counts
//! what a tenant's own queue lost as that tenant's, and bounds each limited tenant's queue in
//! time. The policies are the core's (`NodeCore::budget`, `snic_core::fair::rx_depth`).

use crate::backend::{Backend, RxMeta};
use crate::stats::Stats;
use crate::store::{Slots, MAX_TENANTS};
use crate::Drop;
use snic_core::ids::TenantId;
use snic_core::node::NodeCore;
use snic_core::time::Instant;
use std::time::Duration;

/// See the module docs.
pub(crate) struct RxQueues {
    /// Per queue: the tenant whose packets only it holds.
    tenant: Vec<Option<TenantId>>,
    /// Per queue: its cumulative losses at the last epoch.
    lost_seen: Vec<u64>,
    /// Per tenant: losses in its own queues this epoch.
    lost: Vec<u64>,
    /// The queue the next poll starts at.
    next: usize,
    /// Per queue: something to read (when the backend can tell).
    ready: Vec<bool>,
    /// Per queue: it had something to read this epoch. Only such a queue can have lost
    /// anything (a queue overflows only while it holds datagrams), so only its loss counter
    /// (a syscall) is read at the epoch's end: with a queue per tenant, idle tenants' queues
    /// cost nothing.
    touched: Vec<bool>,
    /// Per queue: the depth it was last given (`None`: the backend's default).
    depth: Vec<Option<usize>>,
    /// Per queue: paused in the backend ([`Backend::pause_queue`]) because its tenant's limit
    /// admits nothing now — until its limit admits [`RESUME_BATCH`] packets.
    paused: Vec<bool>,
}

/// A tenant's own queue its limit paused is read again once the limit admits this many packets
/// (or its whole burst, if less): one wake-up and one read per batch, not per packet.
pub(crate) const RESUME_BATCH: f64 = 8.0;

impl RxQueues {
    /// The backend's `queues` queues, none a tenant's yet.
    pub fn new(queues: usize) -> Self {
        let queues = queues.max(1);
        RxQueues {
            tenant: vec![None; queues],
            lost_seen: vec![0; queues],
            lost: vec![0; MAX_TENANTS],
            next: 0,
            ready: vec![false; queues],
            touched: vec![true; queues],
            depth: vec![None; queues],
            paused: vec![false; queues],
        }
    }

    /// True with more than one queue (then some may be tenants' own).
    #[inline(always)]
    pub fn several(&self) -> bool {
        self.tenant.len() > 1
    }

    /// Receives into `idx`/`meta` from each queue in turn (starting one further each poll),
    /// taking from a tenant's own queue no more than its ingress limit admits at `now`.
    pub fn recv<B: Backend>(
        &mut self,
        backend: &mut B,
        slots: &Slots,
        idx: &mut [u32],
        meta: &mut [RxMeta],
        core: &mut NodeCore,
        now: Instant,
    ) -> usize {
        let (q, mut n) = (self.tenant.len(), 0);
        let known = backend.ready_queues(&mut self.ready);
        if known {
            for (t, &r) in self.touched.iter_mut().zip(&self.ready) {
                *t |= r;
            }
        } else {
            self.touched.iter_mut().for_each(|t| *t = true);
        }
        for k in 0..q {
            let queue = (self.next + k) % q;
            let owner = self.tenant[queue];
            if self.paused[queue] {
                // Held for its limit: read again once the limit admits a batch (or at once if
                // the limit was lifted). Until then it is still held back.
                let ready = owner.and_then(|t| core.budget_at(t, now, RESUME_BATCH)).is_none_or(|at| at <= now);
                if !ready {
                    if let Some(t) = owner {
                        core.held_back(t);
                    }
                    continue;
                }
                backend.pause_queue(queue, false);
                self.paused[queue] = false;
                self.touched[queue] = true;
            } else if known && !self.ready[queue] {
                continue;
            }
            let mut want = idx.len() - n;
            let mut capped = None;
            if let Some(t) = owner {
                if let Some(b) = core.budget(t, now) {
                    if (b as usize) < want {
                        (want, capped) = (b as usize, Some(t));
                    }
                }
            }
            let got = if want > 0 { backend.recv_queue(queue, slots, &mut idx[n..n + want], &mut meta[n..n + want]) } else { 0 };
            if let Some(t) = capped.filter(|_| got == want) {
                // Its limit, not its queue, stopped the read: it wants more than it is admitted.
                core.held_back(t);
                if want == 0 {
                    // Nothing admitted now: its datagrams wait in the kernel, and a wait that
                    // they woke at once would spin (a node whose tenants are all held burned
                    // its core so). Paused until the limit admits a batch.
                    backend.pause_queue(queue, true);
                    self.paused[queue] = true;
                }
            }
            n += got;
            if n == idx.len() {
                break;
            }
        }
        self.next = (self.next + 1) % q;
        n
    }

    /// Queue `queue` holds tenant `t`'s packets only (or no one's own); the backend has
    /// `opened` queues now (it may have opened some since the node started). One queue is
    /// everyone's: never one tenant's.
    pub fn set_tenant(&mut self, queue: usize, t: Option<TenantId>, opened: usize) {
        let n = opened.max(1);
        if self.tenant.len() < n {
            self.tenant.resize(n, None);
            self.lost_seen.resize(n, 0);
            self.ready.resize(n, false);
            self.touched.resize(n, true);
            self.depth.resize(n, None);
            self.paused.resize(n, false);
        }
        if self.several() && queue < self.tenant.len() {
            self.tenant[queue] = t;
        }
    }

    /// When the first queue paused for its tenant's limit may be read again (`None`: none is
    /// paused): the node's idle wait ends then at the latest.
    pub fn until_resume(&self, core: &NodeCore, now: Instant) -> Option<Duration> {
        let at = |q: usize| self.tenant[q].and_then(|t| core.budget_at(t, now, RESUME_BATCH)).unwrap_or(now);
        let paused = self.paused.iter().enumerate().filter(|(_, &p)| p);
        paused.map(|(q, _)| Duration::from_nanos(at(q).as_nanos().saturating_sub(now.as_nanos()))).min()
    }

    /// At an epoch's end: the losses since the last, those of a tenant's own queue counted as
    /// its drops (and [`RxQueues::lost_own`]); returns the cumulative losses of the queues
    /// tenants share.
    pub fn count_losses<B: Backend>(&mut self, backend: &mut B, stats: &mut Stats) -> u64 {
        if !self.several() {
            return backend.rx_dropped();
        }
        let mut shared = 0;
        for (q, seen) in self.lost_seen.iter_mut().enumerate() {
            // An untouched queue lost nothing since its counter was last read. A paused one is
            // read although its datagrams woke nothing: it is the queue that overflows while its
            // tenant is held, and what it loses is demand the limit must go on seeing (unread,
            // the tenant's demand fell to what it was admitted, its limit lifted, and its
            // neighbours lost their share to it).
            let read = std::mem::take(&mut self.touched[q]) || self.paused[q];
            let total = if read { backend.rx_dropped_queue(q) } else { *seen };
            let delta = total.saturating_sub(*seen);
            *seen = total;
            match self.tenant[q] {
                Some(t) if delta > 0 => {
                    self.lost[t.index()] += delta;
                    stats.tenant_mut(t).drops[Drop::RxQueue.index()] += delta;
                }
                Some(_) => {}
                None => shared += total,
            }
        }
        shared
    }

    /// Per tenant, what its own queues lost this epoch.
    pub fn lost_own(&self) -> &[u64] {
        &self.lost
    }

    /// Per queue, the tenant it is the own queue of (none with one queue).
    pub fn owners(&self) -> &[Option<TenantId>] {
        if self.several() {
            &self.tenant
        } else {
            &[]
        }
    }

    /// The epoch is closed: its losses were read.
    pub fn end_epoch(&mut self) {
        for t in self.tenant.iter().flatten() {
            self.lost[t.index()] = 0;
        }
    }

    /// Bounds each limited tenant's own queue in time ([`snic_core::fair::rx_depth`]): a
    /// packet waits there no longer than `max_queue` once the dispatcher reads it (at the
    /// tenant's limit over the share of its core the dispatcher gets). A depth that moved less
    /// than a quarter is left as it is (a socket option per change, not per epoch).
    pub fn bound<B: Backend>(&mut self, backend: &mut B, core: &NodeCore, max_queue: Duration, stats: &Stats) {
        if !self.several() {
            return;
        }
        for q in 0..self.tenant.len() {
            let Some(t) = self.tenant[q] else { continue };
            let want = snic_core::fair::rx_depth(core.meter().limit(t), max_queue, core.meter().core_share());
            let moved = match (self.depth[q], want) {
                (Some(a), Some(b)) => a.abs_diff(b) * 4 > a.max(b),
                (a, b) => a != b,
            };
            if moved {
                let ts = &stats.tenants[t.index()];
                let bytes = ts.rx_bytes.checked_div(ts.rx_packets).unwrap_or(128) as usize;
                backend.set_rx_depth(q, want, bytes);
                self.depth[q] = want;
            }
        }
    }
}
