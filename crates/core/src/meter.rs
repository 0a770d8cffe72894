//! The meter: the demand model. It turns a node's counters into each tenant's demand on every
//! resource of the node, runs the fairness policy ([`crate::fair`]) once per epoch, and enforces
//! its result at ingress with one token bucket per tenant (paper §4.4).
//!
//! The driver only samples counters: it hands [`Meter::end_epoch`] a [`Counters`] view of its
//! cumulative per-tenant and per-NT counters, the scheduler (whose per-DAG arrivals are the
//! intended load at each NT) and timed polls ([`Meter::sample_poll`]); every decision — what is
//! fixed and what variable demand, how losses before reception inflate it, what the dispatcher
//! costs, how costs are smoothed — is made here, on the driver's clock, with no I/O.
//!
//! Resources and their units (the names are metrics labels):
//!
//! | name      | kind  | unit            | demand measured as                                  | capacity |
//! |-----------|-------|-----------------|-----------------------------------------------------|----------|
//! | `ingress` | rate  | bytes/s         | bytes offered (fixed: before the limiter)           | link |
//! | `egress`  | rate  | bytes/s         | bytes transmitted                                   | link |
//! | `store`   | level | buffers         | packet-store buffers held at the epoch's end        | store size |
//! | `dispatcher` | rate | cores        | packets offered × measured cost of receiving one (fixed) + packets admitted × measured cost of the rest of the way (+ NT time when regions run inline) | `FairConfig::core_target` (0.8) × the share of its core the thread gets ([`Meter::core_share`]) |
//! | `workers` | rate  | cores           | packets that arrived for each NT × its measured cost (only with worker threads) | `core_target` × worker threads |
//! | each NT   | rate  | instances       | packets that arrived for it ÷ one instance's throughput | running instances |
//!
//! Arrivals for an NT are counted by the scheduler before credits (intended load); an NT's
//! throughput is its declared capacity if it has one, otherwise 1 / its measured cost per
//! packet (the driver times some of each region's batches NT by NT: [`Counters::nt_time`]).

use crate::dag::DagRoute;
use crate::fair::{Allocate, FairConfig, Fairness, Kind, OnBoard, Resource, Scope, TenantShare, TokenBucket};
use crate::ids::{ChainId, InstanceId, TenantId};
use crate::sched::Scheduler;
use crate::time::Instant;
use std::time::Duration;

/// A tenant's cumulative counters, as the driver keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantCounters {
    /// Packets received and charged to the tenant.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Packets dropped at ingress over the tenant's limit ([`Meter::admit`] said no).
    pub over_limit: u64,
    /// Packets the packet store refused (the tenant's quota, or the store full).
    pub store_refused: u64,
    /// Packets the scheduler refused, its queue for the tenant full: admitted at ingress, and
    /// then more than the cores took (see [`Meter::core_scale`]).
    pub sched_refused: u64,
}

/// Where the meter learns what arrived at each DAG's steps this epoch: the intended load at
/// every NT (before credits). The scheduler counts it ([`Scheduler::drain_arrivals`]); a
/// simulator may report its own.
pub trait Arrivals {
    /// Calls `f` once per DAG that had arrivals since the last call, with its tenant, its route
    /// and the packets that arrived for each step, and starts counting afresh.
    fn drain_arrivals(&mut self, f: impl FnMut(TenantId, &DagRoute, &[u64]));
}

impl<T: Copy> Arrivals for Scheduler<T> {
    fn drain_arrivals(&mut self, f: impl FnMut(TenantId, &DagRoute, &[u64])) {
        Scheduler::drain_arrivals(self, f)
    }
}

/// A thread's time on its core, cumulative, as the kernel accounts it (Linux `schedstat`): on
/// the CPU, and runnable but waiting for it — other work on the machine had the core. A virtual
/// clock reports the stretches its driver took the core away for as waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreTime {
    /// Nanoseconds it ran.
    pub run_ns: u64,
    /// Nanoseconds it was ready to run and did not.
    pub wait_ns: u64,
}

/// What the meter reads of the driver at an epoch's end: counters only.
pub trait Counters {
    /// Tenants whose counters may have moved since the last epoch (others are not read).
    fn touched(&self) -> &[TenantId];
    /// Tenant `t`'s cumulative counters.
    fn tenant(&self, t: TenantId) -> TenantCounters;
    /// Packet-store buffers tenant `t` holds now.
    fn store_buffers(&self, t: TenantId) -> u64;
    /// Instance `inst`'s NT `nt`: cumulative ns spent in it over its timed batches, and the
    /// packets it processed in them.
    fn nt_time(&self, inst: InstanceId, nt: usize) -> (u64, u64);
    /// Packets lost before reception in receive queues that tenants share (cumulative).
    fn lost_shared(&self) -> u64;
    /// Packets tenant `t` lost this epoch in a receive queue of its own (intended load that
    /// cost the dispatcher nothing).
    fn lost_own(&self, t: TenantId) -> u64;
    /// True if tenant `t` has a receive queue of its own, which the node reads no faster than
    /// its limit: receiving its admitted packets is then work the limit can shrink (variable),
    /// not work every packet it sends costs (fixed).
    fn own_queue(&self, _t: TenantId) -> bool {
        false
    }
    /// The dispatcher's thread's time on its core (cumulative), if the driver can tell; a
    /// reading may be up to a few epochs old. `None`: the core is taken to be its own.
    fn dispatcher_time(&self) -> Option<CoreTime> {
        None
    }
}

const INGRESS: usize = 0;
const EGRESS: usize = 1;
const STORE: usize = 2;
const DISPATCHER: usize = 3;
/// `memory`: what the tenant's NTs hold by their configuration (a level, all of it fixed: the
/// limiter cannot shrink it; it weighs in the tenant's dominant share).
const MEMORY: usize = 4;
/// `workers` when there are worker threads: the NT time of regions on them (the NT time of
/// regions on the dispatcher's thread is dispatcher time).
const WORKERS: usize = 5;
const NO_ROW: u16 = u16::MAX;
/// How much more than it was admitted a tenant held back in its own receive queue is taken to
/// want (see `Meter::end_epoch`).
const HELD_MARGIN: f64 = 0.25;
/// The least [`Meter::core_scale`]: a node that keeps over-admitting is not starved.
pub const MIN_CORE_SCALE: f64 = 0.3;
/// The scale's factor in an epoch the scheduler refused packets...
const CORE_DECREASE: f64 = 0.95;
/// ... and what it gains back in an epoch it refused none (from the least to 1 in 70 ms).
const CORE_INCREASE: f64 = 0.001;

/// Runnable time (ran or waited) over which the dispatcher's share of its core is measured, ns:
/// a few of the kernel's time slices, so that one estimate sees the other work come and go.
const CORE_WINDOW_NS: u64 = 20_000_000;
/// The weight of a window's measurement in the smoothed share of the core.
const CORE_SMOOTHING: f64 = 0.5;
/// The least share of its core the dispatcher is taken to have: a node that has almost none
/// still hands out something, and its AIMD scale ([`Meter::core_scale`]) does the rest.
pub const MIN_CORE_SHARE: f64 = 0.1;

/// How long a tenant counts as sending after its last packet (see [`Meter::sharing`]).
const SHARING_HOLD: Duration = Duration::from_millis(10);

/// Most an epoch's timing counts for against an NT's estimated cost, as a multiple of it (see
/// `Meter::update_costs`): at the default smoothing a quarter, the estimate grows at most 1.75×
/// an epoch (tenfold in five epochs).
const COST_JUMP: f64 = 4.0;

/// Packets timed before an NT's cost is first estimated...
const MIN_TIMED: u64 = 256;
/// ... or this much time in it, ns, whichever comes first: an NT whose packets take
/// milliseconds each (a tenant's module running to its time bound) is measured after a few,
/// not after 256 of them (seconds of a core unaccounted for).
const MIN_TIMED_NS: u64 = 20_000_000;

/// Per-packet costs of sampled polls, for an estimate that a few disturbed polls do not move.
/// The sampled polls are those that handled at least half a batch, and under light load those
/// are mostly the polls right after the thread was off its core: their total time over their
/// total packets read 1.5–3× the median on a noisy machine (343 against 124 ns a packet).
/// The median of the polls' own per-packet costs is what a poll usually costs.
#[derive(Debug, Clone, Copy)]
struct CostSamples {
    /// Per-packet ns of the last [`COST_SAMPLES`] polls sampled (a ring).
    v: [f32; COST_SAMPLES],
    /// Polls sampled, and the packets they handled, since the last estimate.
    polls: usize,
    packets: u64,
}

/// Samples kept per estimate.
const COST_SAMPLES: usize = 64;

impl Default for CostSamples {
    fn default() -> Self {
        CostSamples { v: [0.0; COST_SAMPLES], polls: 0, packets: 0 }
    }
}

impl CostSamples {
    #[inline]
    fn push(&mut self, ns: u64, packets: usize) {
        self.v[self.polls % COST_SAMPLES] = (ns as f64 / packets as f64) as f32;
        self.polls += 1;
        self.packets += packets as u64;
    }

    /// The median per-packet cost once [`MIN_TIMED`] packets were sampled (and starts over);
    /// `None` before.
    fn take_median(&mut self) -> Option<f64> {
        if self.packets < MIN_TIMED || self.polls == 0 {
            return None;
        }
        let n = self.polls.min(COST_SAMPLES);
        let v = &mut self.v[..n];
        let (_, m, _) = v.select_nth_unstable_by(n / 2, f32::total_cmp);
        let m = *m as f64;
        (self.polls, self.packets) = (0, 0);
        Some(m)
    }
}

/// A tenant's counters as of the last epoch (the node's own counters are read, so the
/// per-packet path pays nothing for measuring offered load).
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    rx_packets: u64,
    rx_bytes: u64,
    tx_bytes: u64,
    over_limit: u64,
    store_refused: u64,
    sched_refused: u64,
    /// Mean size of its packets, for the bytes of packets refused before being counted.
    mean_bytes: f64,
    /// The counters have been read once (a newly registered tenant's history is not one
    /// epoch's load).
    primed: bool,
    /// The end of the last epoch it sent in, while that is within [`SHARING_HOLD`] (it is then
    /// in `Meter::recent`).
    last_sent: Option<Instant>,
}

/// One tenant's epoch, from the counters.
#[derive(Debug, Clone, Copy, Default)]
struct Epoch {
    egress_bytes: u64,
    offered_packets: u64,
    offered_bytes: f64,
    admitted_packets: u64,
    /// Packets the dispatcher received (admitted or over the limit): what cost it reception.
    received_packets: u64,
}

#[derive(Debug, Clone, Default)]
struct NtState {
    label: String,
    /// Resource index.
    res: usize,
    /// Smoothed measured cost, ns per packet (0 until measured).
    cost_ns: f64,
    /// Timings not yet folded into `cost_ns` (busy ns, packets): the first estimate waits for
    /// [`MIN_TIMED`] packets, so one cold batch does not make an NT look slow.
    pending: (u64, u64),
    /// Declared throughput per instance.
    declared_pps: Option<f64>,
    /// Its chain runs on a worker thread (its time is `workers` time, not the dispatcher's).
    on_worker: bool,
}

#[derive(Debug)]
struct Inst {
    id: InstanceId,
    chain: ChainId,
    /// Running (launched and not stopped): counts toward its NTs' capacity.
    active: bool,
    last_busy: Vec<u64>,
    last_timed: Vec<u64>,
}

/// Demand measurement, the fairness policy and the ingress limiters. See the module docs.
#[derive(Debug)]
pub struct Meter {
    fair: Fairness,
    buckets: Vec<TokenBucket>,
    /// Buckets that limit (while 0, ingress skips the limiter).
    limited: usize,
    seen: Vec<Seen>,
    epoch: Vec<Epoch>,
    row_of: Vec<u16>,
    /// Per registered tenant × resource: variable and fixed use this epoch.
    rows: Vec<f64>,
    fixed: Vec<f64>,
    chains: Vec<Vec<NtState>>,
    instances: Vec<Inst>,
    link_bytes: f64,
    workers: usize,
    store_size: f64,
    /// The sampled polls since the last estimate: per-packet time receiving, and for the rest
    /// of the way (inline NT time excluded).
    s_rx: CostSamples,
    s_rest: CostSamples,
    /// Smoothed dispatcher cost of receiving one packet (paid by every packet, over its limit
    /// or not), and of the rest of an admitted packet's way, NT time excluded (0 until measured).
    rx_ns: f64,
    proc_ns: f64,
    /// The backend's cumulative count of packets lost before reception, at the last epoch.
    last_lost: u64,
    /// See [`Meter::core_scale`].
    core_scale: f64,
    /// See [`Meter::core_share`]; the last reading of the dispatcher's core time, and what ran
    /// and waited since the last estimate.
    core_share: f64,
    core_seen: Option<CoreTime>,
    core_window: CoreTime,
    /// When the last epoch ended.
    last_end: Instant,
    /// Per chain, per NT: instance-seconds of work that arrived this epoch; and per chain the
    /// last epoch's load in instances' worth (its busiest NT).
    nt_work: Vec<Vec<f64>>,
    chain_load: Vec<f64>,
    /// Per chain: its NTs' names (`chainC.I:kind` until labelled: unique on the node).
    chain_names: Vec<Vec<String>>,
    /// Per chain: packets arrived for it this epoch.
    chain_arrived: Vec<bool>,
    /// Per tenant: bytes its NTs hold ([`Meter::set_memory`]).
    memory: Vec<f64>,
    /// Per tenant: its own receive queue was left unread this epoch because its limit ran out.
    held: Vec<bool>,
    /// Per tenant held back: the fraction of a packet its held demand left over (see `end_epoch`).
    held_carry: Vec<f64>,
    /// The tenants the epoch visits, and those with arrivals at an NT (scratch).
    visit: Vec<TenantId>,
    /// Tenants that sent within [`SHARING_HOLD`] (each once: those whose `Seen::last_sent` is set).
    recent: Vec<TenantId>,
    extra: Vec<TenantId>,
    /// The node's board when its dispatcher threads share one allocation
    /// ([`Meter::share_fairness`]).
    shared: Option<OnBoard>,
}

impl Meter {
    /// A meter for a node with a `link_bps` link, `workers` worker threads (0: regions inline),
    /// `store_size` packet buffers and tenant ids below `max_tenants`.
    pub fn new(cfg: FairConfig, now: Instant, link_bps: f64, workers: usize, store_size: usize, max_tenants: usize) -> Self {
        let mut m = Meter {
            fair: Fairness::new(cfg, now),
            buckets: vec![TokenBucket::unlimited(); max_tenants],
            limited: 0,
            seen: vec![Seen::default(); max_tenants],
            epoch: vec![Epoch::default(); max_tenants],
            row_of: vec![NO_ROW; max_tenants],
            rows: Vec::new(),
            fixed: Vec::new(),
            chains: Vec::new(),
            instances: Vec::new(),
            link_bytes: link_bps / 8.0,
            workers,
            store_size: store_size as f64,
            s_rx: CostSamples::default(),
            s_rest: CostSamples::default(),
            rx_ns: 0.0,
            proc_ns: 0.0,
            last_lost: 0,
            core_scale: 1.0,
            core_share: 1.0,
            core_seen: None,
            core_window: CoreTime::default(),
            last_end: now,
            nt_work: Vec::new(),
            chain_load: Vec::new(),
            chain_arrived: Vec::new(),
            chain_names: Vec::new(),
            held: vec![false; max_tenants],
            held_carry: vec![0.0; max_tenants],
            memory: vec![0.0; max_tenants],
            visit: Vec::with_capacity(max_tenants),
            recent: Vec::with_capacity(max_tenants),
            extra: Vec::new(),
            shared: None,
        };
        m.publish_resources();
        m
    }

    /// The fairness policy's state: resources and per-tenant shares.
    pub fn fairness(&self) -> &Fairness {
        &self.fair
    }

    /// The tenant's ingress limit in packets per second, if limited.
    pub fn limit(&self, t: TenantId) -> Option<f64> {
        self.buckets.get(t.index()).and_then(|b| b.rate())
    }

    /// Registers a tenant with its weight, or changes the weight.
    pub fn set_tenant(&mut self, t: TenantId, weight: f64) {
        self.fair.set_tenant(t, weight);
        self.reindex();
    }

    /// Forgets a tenant and lifts its limit.
    pub fn remove_tenant(&mut self, t: TenantId) {
        self.fair.remove_tenant(t);
        if let Some(s) = self.seen.get_mut(t.index()) {
            *s = Seen::default();
        }
        if let Some(b) = self.buckets.get_mut(t.index()) {
            self.limited -= b.is_limited() as usize;
            *b = TokenBucket::unlimited();
        }
        self.reindex();
    }

    fn reindex(&mut self) {
        self.row_of.iter_mut().for_each(|r| *r = NO_ROW);
        for (i, s) in self.fair.shares().iter().enumerate() {
            self.row_of[s.tenant.index()] = i as u16;
        }
    }

    /// Declares a chain with its NTs' kinds.
    pub fn add_chain(&mut self, kinds: &[&str]) {
        let c = ChainId(self.chains.len() as u16);
        self.nt_work.push(Vec::new());
        self.chain_load.push(0.0);
        self.chain_arrived.push(false);
        self.chain_names.push(Vec::new());
        self.chains.push(Vec::new());
        self.reuse_chain(c, kinds);
    }

    /// Declares chain `chain` again (an id the node reuses after [`Meter::remove_chain`]) with
    /// its NTs' kinds.
    pub fn reuse_chain(&mut self, chain: ChainId, kinds: &[&str]) {
        let c = chain.index();
        if c >= self.chains.len() {
            return;
        }
        self.nt_work[c] = vec![0.0; kinds.len()];
        self.chain_load[c] = 0.0;
        self.chain_arrived[c] = false;
        self.chains[c] =
            kinds.iter().enumerate().map(|(i, k)| NtState { label: format!("chain{c}.{i}:{k}"), ..NtState::default() }).collect();
        self.chain_names[c] = self.chains[c].iter().map(|n| n.label.clone()).collect();
        self.publish_resources();
    }

    /// A chain is gone (its instances torn down): its NTs and instances no longer count.
    pub fn remove_chain(&mut self, chain: ChainId) {
        let c = chain.index();
        if c >= self.chains.len() {
            return;
        }
        self.instances.retain(|i| i.chain != chain);
        self.nt_work[c].clear();
        self.chain_load[c] = 0.0;
        self.chain_arrived[c] = false;
        self.chain_names[c].clear();
        self.chains[c].clear();
        self.publish_resources();
    }

    /// Names a chain's NTs (manifest names instead of `chainC.I:kind`).
    pub fn label_chain(&mut self, chain: ChainId, names: &[String]) {
        if let Some(n) = self.chain_names.get_mut(chain.index()) {
            n.iter_mut().zip(names).for_each(|(n, name)| n.clone_from(name));
        }
        if let Some(nts) = self.chains.get_mut(chain.index()) {
            for (n, name) in nts.iter_mut().zip(names) {
                n.label = name.clone();
            }
            self.publish_resources();
        }
    }

    /// The names of `chain`'s NTs (as labelled, else `chainC.I:kind`).
    pub fn chain_names(&self, chain: ChainId) -> &[String] {
        self.chain_names.get(chain.index()).map_or(&[], Vec::as_slice)
    }

    /// A new running instance of `chain` (or a new one in a reused instance slot), on a worker
    /// thread or on the dispatcher's; `capacity_pps`: its NTs' declared throughput per
    /// instance, if any. Its NT timings ([`Counters::nt_time`]) start from 0.
    pub fn add_instance(&mut self, chain: ChainId, inst: InstanceId, capacity_pps: &[Option<f64>], on_worker: bool) {
        if let Some(nts) = self.chains.get_mut(chain.index()) {
            for (n, d) in nts.iter_mut().zip(capacity_pps) {
                n.declared_pps = *d;
                n.on_worker = on_worker;
            }
        }
        let k = capacity_pps.len();
        let fresh = Inst { id: inst, chain, active: true, last_busy: vec![0; k], last_timed: vec![0; k] };
        match self.instances.iter_mut().find(|i| i.id == inst) {
            Some(old) => *old = fresh,
            None => self.instances.push(fresh),
        }
        self.publish_resources();
    }

    /// `chain`'s regions now run on a worker thread (`true`) or on the dispatcher's: its NT
    /// time counts as `workers` or as `dispatcher` time from the next epoch.
    pub fn set_on_worker(&mut self, chain: ChainId, on_worker: bool) {
        if let Some(nts) = self.chains.get_mut(chain.index()) {
            nts.iter_mut().for_each(|n| n.on_worker = on_worker);
        }
    }

    /// An instance stopped (`false`) or runs again (`true`): its NTs' capacity follows.
    pub fn set_active(&mut self, inst: InstanceId, active: bool) {
        if let Some(i) = self.instances.iter_mut().find(|i| i.id == inst) {
            if i.active != active {
                i.active = active;
                self.publish_resources();
            }
        }
    }

    /// `chain`'s pool-wide key (its NTs' names: [`crate::pool::ChainKey::of_names`]). Names are
    /// unique in a desired state (an NT shared by tenants is one chain), so two chains of the
    /// same kinds — two tenants' firewalls — have two keys; an unlabelled chain's names carry its
    /// id, so it never shares a key on the node either.
    pub fn chain_key(&self, chain: ChainId) -> crate::pool::ChainKey {
        crate::pool::ChainKey::of_names(self.chain_names(chain))
    }

    /// The load that arrived for `chain` over the last epoch, in instances' worth of work (its
    /// busiest NT's arrivals ÷ one instance's throughput): what auto-scaling watches. Exactly 0
    /// only if nothing arrived.
    pub fn chain_load(&self, chain: ChainId) -> f64 {
        self.chain_load.get(chain.index()).copied().unwrap_or(0.0)
    }

    fn publish_resources(&mut self) {
        let rate = |name: &str, capacity: f64| Resource { name: name.into(), kind: Kind::Rate, capacity, scope: Scope::Thread };
        let link = |name: &str, capacity: f64| Resource { scope: Scope::Node, ..rate(name, capacity) };
        let level = |name: &str, capacity: f64| Resource { kind: Kind::Level, ..rate(name, capacity) };
        let core = self.fair.config().core_target;
        // (With several dispatcher threads, each has its own core, store, NT memory and
        // regions; the link is the node's: see `fair::Board`.)
        let mut res = vec![
            link("ingress", self.link_bytes),
            link("egress", self.link_bytes),
            level("store", self.store_size),
            rate("dispatcher", core * self.core_scale * self.core_share),
            level("memory", self.fair.config().nt_memory),
        ];
        if self.workers > 0 {
            res.push(rate("workers", core * self.core_scale * self.workers as f64));
        }
        for (c, nts) in self.chains.iter_mut().enumerate() {
            // A chain with no running instance is launched when its packets arrive: count one.
            let running = self.instances.iter().filter(|i| i.active && i.chain.index() == c).count().max(1) as f64;
            for n in nts.iter_mut() {
                n.res = res.len();
                res.push(rate(&n.label, running));
            }
        }
        self.fair.set_resources(res);
    }

    /// This meter is one of a node's dispatcher threads (`data_cores`): its epochs allocate
    /// through the node's board, DRF once over every thread's demand (see [`crate::fair::Board`]),
    /// and its limits are its tenants' parts of the node's allocation.
    pub fn share_fairness(&mut self, on: OnBoard) {
        self.shared = Some(on);
    }

    /// Tenant `t`'s NTs hold `bytes` of memory (by their configuration; the driver says so
    /// when it deploys them): the tenant's demand on the `memory` resource from the next epoch.
    pub fn set_memory(&mut self, t: TenantId, bytes: f64) {
        if let Some(m) = self.memory.get_mut(t.index()) {
            *m = bytes;
        }
    }

    /// Asks `t`'s limiter for a packet; false: over the limit (the caller drops it as
    /// `rate_limit`, which the meter reads back as offered load).
    #[inline]
    pub fn admit(&mut self, t: TenantId, now: Instant) -> bool {
        self.buckets[t.index()].take(now)
    }

    /// Packets `t` may still be admitted at `now` (`None`: no limit).
    #[inline]
    pub fn budget(&mut self, t: TenantId, now: Instant) -> Option<u32> {
        self.buckets.get_mut(t.index()).and_then(|b| b.available(now))
    }

    /// When `t`'s limit admits `want` packets (a batch) again, if it is limited.
    pub fn budget_at(&self, t: TenantId, now: Instant, want: f64) -> Option<Instant> {
        self.buckets.get(t.index()).and_then(|b| b.ready_at(now, want))
    }

    /// `t`'s own receive queue was read only up to its limit: packets were left waiting.
    #[inline]
    pub fn held_back(&mut self, t: TenantId) {
        if let Some(h) = self.held.get_mut(t.index()) {
            *h = true;
        }
    }

    /// True if any tenant is limited (otherwise [`Meter::admit`] need not be asked).
    #[inline]
    pub fn any_limited(&self) -> bool {
        self.limited > 0
    }

    /// A timed poll: `rx_ns` receiving `rx` packets, `rest_ns` for the rest (dispatching
    /// `dispatched` packets, completing and transmitting them; inline NT time excluded). Only
    /// phases that handled at least `min` packets feed the cost estimates: a lightly loaded
    /// dispatcher spins with one or two packets per poll, and its per-poll overhead would pass
    /// for per-packet cost.
    #[inline]
    pub fn sample_poll(&mut self, rx_ns: u64, rx: usize, min: usize, rest_ns: u64, dispatched: usize) {
        if rx >= min.max(1) {
            self.s_rx.push(rx_ns, rx);
        }
        if dispatched >= min.max(1) {
            self.s_rest.push(rest_ns, dispatched);
        }
    }

    /// True when the epoch is over.
    #[inline]
    pub fn due(&self, now: Instant) -> bool {
        self.fair.due(now)
    }

    /// When the current epoch ends: the driver must close it then ([`Meter::end_epoch`]) unless
    /// [`Meter::quiet`] and it saw no traffic since the last.
    pub fn next_epoch(&self) -> Instant {
        self.fair.next_epoch()
    }

    /// True if no tenant is limited or still accounted for (see [`Fairness::quiet`]).
    pub fn quiet(&self) -> bool {
        self.limited == 0 && self.fair.quiet()
    }

    /// Closes the epoch: measures (from `counters` and the `arrivals` at each NT), allocates,
    /// sets the limits.
    pub fn end_epoch(&mut self, now: Instant, arrivals: &mut impl Arrivals, counters: &impl Counters) -> &[TenantShare] {
        self.update_costs(counters);
        let r = self.fair.resources().len();
        let n = self.fair.shares().len();
        // Rows are zero outside an epoch (only the visited tenants' are zeroed after it): an
        // epoch costs the active tenants, not every configured one.
        if self.rows.len() != n * r {
            self.rows.clear();
            self.rows.resize(n * r, 0.0);
            self.fixed.clear();
            self.fixed.resize(n * r, 0.0);
        }
        let (rows, row_of, chains, work) = (&mut self.rows, &self.row_of, &self.chains, &mut self.nt_work);
        let (arrived, extra) = (&mut self.chain_arrived, &mut self.extra);
        arrived.iter_mut().for_each(|a| *a = false);
        extra.clear();
        arrivals.drain_arrivals(|t, route, counts| {
            let row = row_of.get(t.index()).copied().unwrap_or(NO_ROW);
            if row != NO_ROW {
                // (A packet re-entering between chains may belong to a tenant that received
                // nothing this epoch.)
                extra.push(t);
            }
            for (step, &k) in route.steps().iter().zip(counts) {
                let Some(nts) = chains.get(step.chain.index()) else { continue };
                arrived[step.chain.index()] |= k > 0;
                for (i, nt) in nts.iter().enumerate() {
                    if !step.mask.runs(i) {
                        continue;
                    }
                    let k = k as f64;
                    let per_instance = nt.declared_pps.or((nt.cost_ns > 0.0).then(|| 1e9 / nt.cost_ns));
                    if let Some(pps) = per_instance {
                        work[step.chain.index()][i] += k / pps;
                    }
                    if row == NO_ROW {
                        continue;
                    }
                    let row = &mut rows[row as usize * r..(row as usize + 1) * r];
                    if let Some(pps) = per_instance {
                        row[nt.res] += k / pps;
                    }
                    row[if nt.on_worker { WORKERS } else { DISPATCHER }] += k * nt.cost_ns / 1e9;
                }
            }
        });
        // The tenants this epoch visits: those whose counters moved or whose packets arrived at
        // an NT, and those the policy still accounts for (demand, a limit).
        self.visit.clear();
        self.visit.extend(self.fair.activate(counters.touched().iter().chain(&self.extra).copied()));
        let secs = now.saturating_since(self.last_end).as_secs_f64();
        self.last_end = now;
        for ((load, work), &arrived) in self.chain_load.iter_mut().zip(&mut self.nt_work).zip(&self.chain_arrived) {
            *load = if secs > 0.0 { work.iter().fold(0.0, |m: f64, &w| m.max(w)) / secs } else { 0.0 };
            if arrived && *load <= 0.0 {
                // Packets came (their NTs' cost not yet measured): loaded, not idle.
                *load = f64::MIN_POSITIVE;
            }
            work.iter_mut().for_each(|w| *w = 0.0);
        }
        // The dispatcher's own costs per packet, from the sampled full polls: receiving (every
        // packet) and the rest of the way (admitted packets).
        let a = self.fair.config().smoothing.clamp(0.0, 1.0);
        let ewma = |old: f64, x: f64| if old == 0.0 { x } else { old + a * (x - old) };
        if let Some(x) = self.s_rx.take_median() {
            self.rx_ns = ewma(self.rx_ns, x);
        }
        if let Some(x) = self.s_rest.take_median() {
            self.proc_ns = ewma(self.proc_ns, x);
        }
        // Packets lost before reception were wanted too: a full receive queue drops without
        // regard to tenant, so each tenant lost the same fraction of what it sent.
        let lost = counters.lost_shared();
        let lost_now = lost.saturating_sub(self.last_lost);
        self.last_lost = lost;
        // This epoch's offered and admitted load per tenant, from the node's counters: admitted
        // packets were charged or refused by the store; offered ones add those over the limit.
        let mut offered_all = 0;
        // Tenants that sent this epoch, and those of them whose admitted packets the scheduler
        // refused (see `adjust_cores`).
        let (mut active, mut refused_tenants) = (0usize, 0usize);
        for &tid in &self.visit {
            let t = tid.index();
            let (st, seen) = (counters.tenant(tid), &mut self.seen[t]);
            let (over, refused) = (st.over_limit, st.store_refused);
            if seen.primed {
                refused_tenants += (st.sched_refused > seen.sched_refused) as usize;
                active += (st.rx_packets > seen.rx_packets) as usize;
            }
            let rx = st.rx_packets.saturating_sub(seen.rx_packets);
            let bytes = st.rx_bytes.saturating_sub(seen.rx_bytes);
            if rx > 0 {
                seen.mean_bytes = bytes as f64 / rx as f64;
            }
            let admitted = rx + refused.saturating_sub(seen.store_refused);
            let received = admitted + over.saturating_sub(seen.over_limit);
            if seen.primed && received > 0 {
                if seen.last_sent.is_none() {
                    self.recent.push(tid);
                }
                seen.last_sent = Some(now);
            }
            let mut offered = received + counters.lost_own(tid);
            // A tenant read from a queue of its own only up to its limit leaves its excess
            // waiting there, unseen until the queue overflows: while it is held back, it wants
            // at least HELD_MARGIN more than its limit admits (so its limit is not lifted the
            // moment its backlog hides its demand, and it may grow that fast when others leave).
            // Its limit's rate over the epoch, not what it was admitted in it: a queue paused
            // for its limit is admitted nothing for many epochs at a time (until the limit
            // admits a batch), and read as wanting nothing then, it looked idle, its demand
            // decayed, its limit was lifted and it flooded its neighbours' NTs (issue 51: two
            // dispatcher threads, tenants limited to a few packets a millisecond each). The
            // fraction of a packet an epoch this leaves is carried to the next.
            if std::mem::take(&mut self.held[t]) {
                let rate = self.buckets[t].rate().unwrap_or(0.0) * secs;
                let want = (admitted as f64).max(rate) * (1.0 + HELD_MARGIN) + self.held_carry[t];
                let whole = want.floor();
                self.held_carry[t] = want - whole;
                offered = offered.max(whole as u64);
            } else {
                self.held_carry[t] = 0.0;
            }
            self.epoch[t] = if seen.primed {
                Epoch {
                    egress_bytes: st.tx_bytes.saturating_sub(seen.tx_bytes),
                    offered_packets: offered,
                    offered_bytes: bytes as f64 + (offered - rx) as f64 * seen.mean_bytes,
                    admitted_packets: admitted,
                    received_packets: received,
                }
            } else {
                Epoch::default()
            };
            *seen = Seen {
                rx_packets: st.rx_packets,
                rx_bytes: st.rx_bytes,
                tx_bytes: st.tx_bytes,
                over_limit: over,
                store_refused: refused,
                sched_refused: st.sched_refused,
                mean_bytes: seen.mean_bytes,
                primed: true,
                last_sent: seen.last_sent,
            };
            offered_all += offered;
        }
        let seen = &mut self.seen;
        self.recent.retain(|t| {
            let s = &mut seen[t.index()];
            let keep = s.last_sent.is_some_and(|at| now.saturating_since(at) <= SHARING_HOLD);
            if !keep {
                s.last_sent = None;
            }
            keep
        });
        let inflate = if offered_all > 0 { (offered_all + lost_now) as f64 / offered_all as f64 } else { 1.0 };
        // Every tenant that sent counts, also one whose packets are sparser than epochs: a
        // flood refused alone, epoch after epoch, while a tenant at 2.5 kpps sent one packet
        // every fourth epoch, cut the node to its least scale, and the small tenant, its
        // share cut with it, was limited and lost packets (issue 49).
        let active = active.max(self.recent.len());
        self.observe_core(counters.dispatcher_time());
        self.adjust_cores(refused_tenants >= 2 || (refused_tenants > 0 && refused_tenants >= active));
        for &tid in &self.visit {
            let t = tid.index();
            let span = self.row_of[t] as usize * r..(self.row_of[t] as usize + 1) * r;
            // Every packet that arrives uses the link, and every packet the dispatcher reads it
            // must receive and classify, over its limit or not: the fixed part of the demand.
            // A tenant with a receive queue of its own is read only up to its limit; what it
            // sends beyond waits or is lost in its queue, at no cost to the dispatcher.
            let fixed = &mut self.fixed[span.clone()];
            let received = self.epoch[t].received_packets as f64 * inflate;
            // Read from a queue of its own only up to its limit, a tenant's admitted packets cost
            // their reception because they were admitted: that part is variable (issue 49: taken
            // as fixed, a receive path that was the bottleneck set every limit to 0).
            let own = counters.own_queue(tid);
            let rx_admitted = if own { self.epoch[t].admitted_packets as f64 } else { 0.0 };
            fixed[INGRESS] = self.epoch[t].offered_bytes * inflate;
            fixed[DISPATCHER] = (received - rx_admitted).max(0.0) * self.rx_ns / 1e9;
            fixed[MEMORY] = self.memory[t];
            let row = &mut self.rows[span];
            // What was admitted; the policy scales it to the intended load, as for every
            // resource behind the limiter.
            row[DISPATCHER] += self.epoch[t].admitted_packets as f64 * self.proc_ns / 1e9 + rx_admitted * self.rx_ns / 1e9;
            row[EGRESS] = self.epoch[t].egress_bytes as f64;
            row[STORE] = counters.store_buffers(tid) as f64;
        }
        let (rows, fixed, row_of, epoch) = (&self.rows, &self.fixed, &self.row_of, &self.epoch);
        let shared = self.shared.as_mut().map(|b| b as &mut dyn Allocate);
        self.fair.end_epoch_with(
            now,
            |t, o| {
                let i = row_of[t.index()] as usize;
                o.amounts.copy_from_slice(&rows[i * r..(i + 1) * r]);
                o.fixed.copy_from_slice(&fixed[i * r..(i + 1) * r]);
                let e = epoch[t.index()];
                o.offered_packets = (e.offered_packets as f64 * inflate).round() as u64;
                o.admitted_packets = e.admitted_packets;
            },
            shared,
        );
        let enforce = self.fair.config().enforce;
        for &tid in &self.visit {
            let i = self.row_of[tid.index()] as usize;
            if enforce {
                let s = &self.fair.shares()[i];
                // On a core shared with other work the node is off it for stretches, and a
                // tenant's packets wait in its queue meanwhile: its bucket holds the burst of
                // its rate over the time the node's share of its core stretches it to, or a
                // tenant whose bucket is deeper than that stretch (the least depth) gets more
                // than its rate after every stretch and one with a shallow bucket less.
                let depth = s.limit_pps.map_or(0.0, |l| self.fair.burst_for(l / self.core_share));
                let b = &mut self.buckets[tid.index()];
                self.limited -= b.is_limited() as usize;
                b.set(now, s.limit_pps, depth);
                self.limited += b.is_limited() as usize;
            }
            self.rows[i * r..(i + 1) * r].iter_mut().for_each(|x| *x = 0.0);
            self.fixed[i * r..(i + 1) * r].iter_mut().for_each(|x| *x = 0.0);
        }
        self.fair.shares()
    }

    /// True when more than one tenant sent within the last 10 ms: their packets then share the
    /// node's cores and receive queues, and a batch of one tenant's may keep another's unread
    /// (the scheduler bounds batches to a quantum of work, [`crate::sched::SchedConfig::quantum_alone`]).
    /// A tenant alone takes whole batches: bounded, they would only slow it down.
    pub fn sharing(&self) -> bool {
        self.recent.len() > 1
    }

    /// The share of `core_target` the cores are taken to give now, in [[`MIN_CORE_SCALE`], 1]:
    /// lowered when the scheduler refused packets the limits had admitted (more was admitted than
    /// the cores took: the machine gave the node less than `core_target` of a core — other work
    /// on it, the kernel's receive path — or a cost was read low), raised slowly back otherwise.
    /// The capacity of `dispatcher` and `workers` follow, so the limits sum to what the cores
    /// take and no tenant's packets wait, or are dropped, for another's (issue 49: on two cores
    /// shared with the senders, weights 1:2:5 came out 1.2 : 1 : 1 of their fair shares).
    pub fn core_scale(&self) -> f64 {
        self.core_scale
    }

    /// One epoch of the cores' scale: additive increase, multiplicative decrease. `short` says
    /// the cores took less than was admitted: the scheduler refused admitted packets of two
    /// tenants or more, or of every tenant that sent. One tenant's refusals among others that
    /// went through are that tenant's own cost read low (a module that turned slow): its limit
    /// follows its cost, and the others' capacity is not cut for it (issue 49: a wasm hog's
    /// overflowing queue shrank the node to 0.3 and cost its neighbour 10 % of its packets).
    fn adjust_cores(&mut self, short: bool) {
        let old = self.core_scale;
        self.core_scale = if short { (old * CORE_DECREASE).max(MIN_CORE_SCALE) } else { (old + CORE_INCREASE).min(1.0) };
        if self.core_scale != old {
            self.set_core_capacity();
        }
    }

    fn set_core_capacity(&mut self) {
        let core = self.fair.config().core_target * self.core_scale;
        self.fair.set_capacity(DISPATCHER, core * self.core_share);
        if self.workers > 0 {
            self.fair.set_capacity(WORKERS, core * self.workers as f64);
        }
    }

    /// The share of its core the dispatcher's thread had while it could run, in
    /// [[`MIN_CORE_SHARE`], 1]: what it ran over what it ran and waited for the core, measured
    /// over windows of [`CORE_WINDOW_NS`] and smoothed; 1 while the driver cannot tell. The
    /// `dispatcher` resource's capacity is `core_target` of this share (and of
    /// [`Meter::core_scale`]): on a core that other work takes two thirds of, the dispatcher
    /// hands out a third of what it would alone, and a flood is refused at ingress instead of
    /// filling the scheduler's queues behind it (issue 50: beside two CPU hogs the meter saw no
    /// tenant over capacity while the queues overflowed). The worker threads' capacity follows
    /// `core_scale` alone.
    pub fn core_share(&self) -> f64 {
        self.core_share
    }

    /// Folds the dispatcher's core time since the last reading into [`Meter::core_share`].
    fn observe_core(&mut self, now: Option<CoreTime>) {
        let Some(now) = now.filter(|_| self.fair.config().measure_core) else { return };
        let Some(seen) = self.core_seen.replace(now) else { return };
        let w = &mut self.core_window;
        w.run_ns += now.run_ns.saturating_sub(seen.run_ns);
        w.wait_ns += now.wait_ns.saturating_sub(seen.wait_ns);
        let runnable = w.run_ns + w.wait_ns;
        if runnable < CORE_WINDOW_NS {
            return;
        }
        let x = w.run_ns as f64 / runnable as f64;
        *w = CoreTime::default();
        let old = self.core_share;
        self.core_share = (old + CORE_SMOOTHING * (x - old)).clamp(MIN_CORE_SHARE, 1.0);
        if self.core_share != old {
            self.set_core_capacity();
        }
    }

    /// Folds the regions' timings since the last epoch into each NT's cost per packet.
    fn update_costs(&mut self, counters: &impl Counters) {
        let a = self.fair.config().smoothing.clamp(0.0, 1.0);
        for (c, nts) in self.chains.iter_mut().enumerate() {
            for (i, nt) in nts.iter_mut().enumerate() {
                let (mut busy, mut timed) = (0u64, 0u64);
                for inst in self.instances.iter_mut().filter(|x| x.chain.index() == c) {
                    // (Stopped instances' counters no longer move: their deltas are 0.)
                    let Some((lb, lt)) = inst.last_busy.get_mut(i).zip(inst.last_timed.get_mut(i)) else { continue };
                    let (b, t) = counters.nt_time(inst.id, i);
                    busy += b.saturating_sub(*lb);
                    timed += t.saturating_sub(*lt);
                    (*lb, *lt) = (b, t);
                }
                if nt.cost_ns == 0.0 {
                    nt.pending.0 += busy;
                    nt.pending.1 += timed;
                    if nt.pending.1 >= MIN_TIMED || (nt.pending.0 >= MIN_TIMED_NS && nt.pending.1 > 0) {
                        nt.cost_ns = (nt.pending.0 as f64 / nt.pending.1 as f64).max(f64::MIN_POSITIVE);
                    }
                } else if timed > 0 {
                    // An epoch's cost moves the estimate up by at most COST_JUMP times it: a
                    // batch during which the thread lost its core (milliseconds, to other work on
                    // the machine) is timed as the NT's, and one such batch among a few dozen
                    // packets read the cost tens of times high — for the epochs it took to decay,
                    // DRF saw tenants far below their share as over it and limited them (issue
                    // 49: `snic demo` beside two CPU hogs dropped 5 kpps tenants as `rate_limit`
                    // and `queue_full`). A cost that really rose is reached within a few epochs.
                    let epoch_ns = (busy as f64 / timed as f64).min(COST_JUMP * nt.cost_ns);
                    nt.cost_ns += a * (epoch_ns - nt.cost_ns);
                }
            }
        }
    }

    /// The measured cost of a whole chain (all its NTs), in ns per packet (0 until measured).
    pub fn chain_cost_ns(&self, chain: ChainId) -> f64 {
        self.chains.get(chain.index()).map_or(0.0, |c| c.iter().map(|n| n.cost_ns).sum())
    }

    /// The dispatcher's measured costs per packet, NT time excluded (0 until measured):
    /// receiving it, and the rest of an admitted packet's way.
    pub fn dispatcher_ns(&self) -> (f64, f64) {
        (self.rx_ns, self.proc_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::{DagRoute, NtMask, Step};
    use crate::ids::DagUid;
    use crate::sched::SchedConfig;
    use std::time::Duration;

    /// A driver's counters, as plain values.
    #[derive(Default)]
    struct Fake {
        touched: Vec<TenantId>,
        tenants: Vec<TenantCounters>,
        store: Vec<u64>,
        lost_shared: u64,
        /// Every NT's cumulative timed ns and packets.
        nt: (u64, u64),
        /// The dispatcher's core time.
        core: Option<CoreTime>,
    }

    impl Counters for Fake {
        fn touched(&self) -> &[TenantId] {
            &self.touched
        }
        fn tenant(&self, t: TenantId) -> TenantCounters {
            self.tenants[t.index()]
        }
        fn store_buffers(&self, t: TenantId) -> u64 {
            self.store[t.index()]
        }
        fn nt_time(&self, _: InstanceId, _: usize) -> (u64, u64) {
            self.nt
        }
        fn lost_shared(&self) -> u64 {
            self.lost_shared
        }
        fn lost_own(&self, _: TenantId) -> u64 {
            0
        }
        fn dispatcher_time(&self) -> Option<CoreTime> {
            self.core
        }
    }

    /// The dispatcher's capacity follows the share of its core it keeps, measured over windows
    /// of runnable time and smoothed, never below the least; without a reading it is the whole.
    #[test]
    fn the_dispatchers_capacity_follows_the_share_of_its_core_it_gets() {
        let (mut m, mut s) = node();
        let target = FairConfig::default().core_target;
        let capacity = |m: &Meter| m.fairness().resources()[DISPATCHER].capacity;
        let mut f = Fake { tenants: vec![TenantCounters::default(); 8], store: vec![0; 8], ..Fake::default() };
        let mut now = Instant::ZERO;
        let mut epoch = |m: &mut Meter, f: &Fake| {
            now = now + EPOCH;
            m.end_epoch(now, &mut s, f);
        };
        epoch(&mut m, &f);
        assert_eq!((m.core_share(), capacity(&m)), (1.0, target), "no reading: the core is the node's");
        // Each epoch it runs 1 ms and waits 2 (other work has the core two thirds of the time).
        let mut t = CoreTime::default();
        let mut shares = Vec::new();
        for _ in 0..60 {
            t = CoreTime { run_ns: t.run_ns + 1_000_000, wait_ns: t.wait_ns + 2_000_000 };
            f.core = Some(t);
            epoch(&mut m, &f);
            shares.push(m.core_share());
        }
        // A window is 20 ms runnable: the first reading only primes, the estimate moves every
        // seventh epoch after, halfway each time.
        assert_eq!(shares[..7], [1.0; 7], "{shares:?}");
        assert!((shares[7] - (1.0 + 1.0 / 3.0) / 2.0).abs() < 1e-9, "{shares:?}");
        assert!((m.core_share() - 1.0 / 3.0).abs() < 0.01, "{shares:?}");
        assert!((capacity(&m) - target * m.core_share()).abs() < 1e-12);
        // Almost no core: the least share.
        for _ in 0..200 {
            t = CoreTime { run_ns: t.run_ns + 10_000, wait_ns: t.wait_ns + 1_000_000 };
            f.core = Some(t);
            epoch(&mut m, &f);
        }
        assert_eq!(m.core_share(), MIN_CORE_SHARE);
        // Its core again.
        for _ in 0..200 {
            t.run_ns += 1_000_000;
            f.core = Some(t);
            epoch(&mut m, &f);
        }
        assert!(m.core_share() > 0.99 && (capacity(&m) - target * m.core_share()).abs() < 1e-12, "{}", m.core_share());
    }

    const EPOCH: Duration = Duration::from_millis(1);
    /// Resources: ingress, egress, store, dispatcher, memory, then the NT (no worker threads).
    const NT: usize = 5;

    /// A meter and scheduler with one NT of 100 kpps declared, run by tenants 1 and 2 (DAGs 1
    /// and 2); demand replaces the last (smoothing 1).
    fn node() -> (Meter, Scheduler<u32>) {
        node_with(SchedConfig::plain())
    }

    /// [`node`] with the scheduler configured `sched`.
    fn node_with(sched: SchedConfig) -> (Meter, Scheduler<u32>) {
        let cfg = FairConfig { epoch: EPOCH, smoothing: 1.0, measure_core: true, ..FairConfig::default() };
        let mut m = Meter::new(cfg, Instant::ZERO, 10e9, 0, 1000, 8);
        let mut s = Scheduler::new(sched);
        m.add_chain(&["nat"]);
        let c = s.add_chain(1);
        let i = s.add_instance(c, 1 << 20).unwrap();
        m.add_instance(c, i, &[Some(100_000.0)], false);
        for t in 1..=2 {
            m.set_tenant(TenantId(t), 1.0);
            s.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
        }
        (m, s)
    }

    /// One epoch in which tenant `t` had `n` packets of 1000 bytes arrive at the NT.
    fn arrive(s: &mut Scheduler<u32>, t: u16, n: u32) {
        for k in 0..n {
            s.handle_packet(Instant::ZERO, TenantId(t), DagUid(t as u32), 0, k as u64, k).unwrap();
        }
    }

    /// A hostile tenant whose own chain overflows (its module turned slow) cannot shrink the
    /// cores the others are given: only refusals of two tenants, or of every tenant that sent,
    /// say the cores give less than the limits admitted.
    #[test]
    fn one_tenants_refusals_do_not_shrink_the_cores() {
        let (mut m, mut s) = node();
        let two = vec![TenantId(1), TenantId(2)];
        let mut c = Fake { touched: two.clone(), tenants: vec![TenantCounters::default(); 8], store: vec![0; 8], ..Fake::default() };
        let mut now = Instant::ZERO;
        let mut epoch = |m: &mut Meter, c: &mut Fake, refused: &[usize]| {
            now = now + EPOCH;
            for t in c.touched.iter().map(|t| t.index()) {
                let x = &mut c.tenants[t];
                x.rx_packets += 10;
                x.rx_bytes += 10_000;
                x.sched_refused += refused.contains(&t) as u64 * 5;
            }
            m.end_epoch(now, &mut s, c);
            m.core_scale()
        };
        epoch(&mut m, &mut c, &[]);
        for _ in 0..20 {
            assert_eq!(epoch(&mut m, &mut c, &[2]), 1.0, "tenant 2's own refusals");
        }
        assert!(epoch(&mut m, &mut c, &[1, 2]) < 1.0, "both refused: the cores gave less");
        for _ in 0..2000 {
            epoch(&mut m, &mut c, &[]);
        }
        assert_eq!(m.core_scale(), 1.0);
        // Tenant 1 sends in one epoch of four (as one at 2.5 kpps does on 100 µs epochs): in the three between,
        // tenant 2's refusals are still its own.
        for k in 0..200 {
            c.touched = if k % 4 == 0 { two.clone() } else { vec![TenantId(2)] };
            assert_eq!(epoch(&mut m, &mut c, &[2]), 1.0, "tenant 2's own refusals, tenant 1 sparse (epoch {k})");
        }
        // Alone (nothing from tenant 1 for longer than SHARING_HOLD), a tenant's refusals do
        // scale (no one else to protect; its limit follows).
        c.touched = vec![TenantId(2)];
        for _ in 0..SHARING_HOLD.as_nanos() / EPOCH.as_nanos() {
            epoch(&mut m, &mut c, &[]);
        }
        let before = m.core_scale();
        assert!(epoch(&mut m, &mut c, &[2]) < before);
    }

    /// An NT's cost is measured from timed batches. One batch during which the thread lost its
    /// core for 6 ms (timed as the NT's: 1,200 times the 5 µs of the batch's 32 packets) moves
    /// the estimate by at most 1.75×; a cost that really rose tenfold is reached in a few
    /// epochs all the same.
    #[test]
    fn a_batch_that_lost_its_core_does_not_read_an_nts_cost_far_high() {
        let mut m = Meter::new(FairConfig { epoch: EPOCH, ..FairConfig::default() }, Instant::ZERO, 10e9, 0, 1000, 8);
        let mut s = Scheduler::<u32>::new(SchedConfig::plain());
        m.add_chain(&["fw"]);
        let c = s.add_chain(1);
        let i = s.add_instance(c, 1 << 20).unwrap();
        m.add_instance(c, i, &[None], false);
        let mut f = Fake { tenants: vec![TenantCounters::default(); 8], store: vec![0; 8], ..Fake::default() };
        let mut now = Instant::ZERO;
        let mut epoch = |m: &mut Meter, f: &mut Fake, per_packet_ns: u64, extra_ns: u64| {
            f.nt = (f.nt.0 + 32 * per_packet_ns + extra_ns, f.nt.1 + 32);
            now = now + EPOCH;
            m.end_epoch(now, &mut s, f);
            m.chain_cost_ns(c)
        };
        for _ in 0..20 {
            epoch(&mut m, &mut f, 5_000, 0);
        }
        assert!((epoch(&mut m, &mut f, 5_000, 0) - 5_000.0).abs() < 1.0);
        let stalled = epoch(&mut m, &mut f, 5_000, 6_000_000);
        assert!(stalled <= 1.75 * 5_000.0 + 1.0, "one stalled batch read the cost as {stalled} ns");
        let mut cost = stalled;
        for _ in 0..15 {
            cost = epoch(&mut m, &mut f, 5_000, 0);
        }
        assert!(cost < 5_200.0, "back to the NT's cost: {cost}");
        let mut epochs = 0;
        while cost < 45_000.0 {
            cost = epoch(&mut m, &mut f, 50_000, 0);
            epochs += 1;
            assert!(epochs <= 12, "a tenfold rise is followed: {cost} after {epochs} epochs");
        }
    }

    #[test]
    fn demand_is_counter_deltas_and_arrivals_scaled_to_what_was_offered() {
        let (mut m, mut s) = node();
        let mut c = Fake { touched: vec![TenantId(1)], tenants: vec![TenantCounters::default(); 8], store: vec![0; 8], ..Fake::default() };
        // The first epoch only reads the counters (their history is not one epoch's load).
        c.tenants[1] = TenantCounters { rx_packets: 7, rx_bytes: 7000, ..TenantCounters::default() };
        m.end_epoch(Instant::ZERO + EPOCH, &mut s, &c);
        // Then 50 packets admitted and 50 more dropped over the limit; 40 buffers held.
        arrive(&mut s, 1, 50);
        c.tenants[1] =
            TenantCounters { rx_packets: 57, rx_bytes: 57_000, tx_bytes: 20_000, over_limit: 50, store_refused: 0, sched_refused: 0 };
        c.store[1] = 40;
        let shares = m.end_epoch(Instant::ZERO + EPOCH * 2, &mut s, &c);
        let d = &shares[0].demand;
        let secs = EPOCH.as_secs_f64();
        // Fixed: every packet offered crosses the link (the 50 over the limit too).
        assert_eq!(shares[0].fixed[INGRESS], 100_000.0 / secs);
        assert_eq!(d[INGRESS], 100_000.0 / secs);
        // Variable use is what was admitted, scaled by offered ÷ admitted (2): the NT would have
        // had 100 packets this epoch, each 1/100,000 of an instance-second.
        assert!((d[NT] - 2.0 * 50.0 / 100_000.0 / secs).abs() < 1e-9, "{d:?}");
        assert!((d[EGRESS] - 2.0 * 20_000.0 / secs).abs() < 1e-6, "{d:?}");
        // A level is not a rate: the buffers held, scaled like the rest.
        assert!((d[STORE] - 2.0 * 40.0).abs() < 1e-9, "{d:?}");
        assert_eq!(m.chain_load(ChainId(0)), 50.0 / 100_000.0 / secs, "what arrived, in instances' worth");
    }

    /// A tenant held to its limit whose own receive queue is paused (its limit admits nothing
    /// until a batch, [`Meter::held_back`] each poll) is admitted nothing for many epochs: it
    /// still wants more than its limit, and keeps it. (Read as wanting nothing, it looked idle,
    /// its demand decayed within a few epochs, its limit was lifted and it flooded the NT it
    /// shares — issue 51, two dispatcher threads with tenants at a few packets a millisecond.)
    #[test]
    fn a_tenant_held_in_its_paused_queue_keeps_its_limit() {
        // (Packets arrive at the NT and stay queued: room for all of them.)
        let (mut m, mut s) = node_with(SchedConfig { max_queue_per_tenant: 1 << 20, max_held: 1 << 20, ..SchedConfig::plain() });
        let both = vec![TenantId(1), TenantId(2)];
        let mut c = Fake { touched: both.clone(), tenants: vec![TenantCounters::default(); 8], store: vec![0; 8], ..Fake::default() };
        let mut now = Instant::ZERO;
        // Each epoch both offer 100 packets (the NT does 100 an epoch): each is admitted what
        // its limit allows, the rest dropped over the limit — or, while `paused`, tenant 1 is
        // read not at all (its packets wait in its queue).
        let mut epoch = |m: &mut Meter, s: &mut Scheduler<u32>, c: &mut Fake, paused: bool| {
            now = now + EPOCH;
            for t in [1u16, 2] {
                let lim = m.limit(TenantId(t)).map_or(100, |l| (l * EPOCH.as_secs_f64()) as u64).min(100);
                if t == 1 && paused {
                    m.held_back(TenantId(1));
                    continue;
                }
                let x = &mut c.tenants[t as usize];
                (x.rx_packets, x.rx_bytes, x.over_limit) = (x.rx_packets + lim, x.rx_bytes + lim * 1000, x.over_limit + 100 - lim);
                arrive(s, t, lim as u32);
            }
            c.touched = if paused { vec![TenantId(2)] } else { both.clone() };
            m.end_epoch(now, s, c);
            m.limit(TenantId(1))
        };
        for _ in 0..50 {
            epoch(&mut m, &mut s, &mut c, false);
        }
        let before = m.limit(TenantId(1)).expect("both over their halves: limited");
        assert!((30_000.0..70_000.0).contains(&before), "half of the NT: {before}");
        for k in 0..40 {
            let l = epoch(&mut m, &mut s, &mut c, true);
            assert!(l.is_some_and(|l| l > 0.5 * before), "paused {k} epochs: limit {l:?} (was {before})");
        }
    }

    /// Two tenants of equal weight each want 60% of the NT; one of them also holds 90% of the
    /// node's NT memory (a large cache), which is then its dominant resource. DRF equalizes
    /// dominant shares: the tenant holding the memory gets less of the NT (0.6 · 0.6/0.9 = 0.4),
    /// the other all it asked for.
    #[test]
    fn memory_an_nts_configuration_holds_weighs_in_the_dominant_share() {
        let (mut m, mut s) = node();
        let most = m.fairness().config().nt_memory * 0.9;
        m.set_memory(TenantId(1), most);
        let mut c = Fake {
            touched: vec![TenantId(1), TenantId(2)],
            tenants: vec![TenantCounters::default(); 8],
            store: vec![0; 8],
            ..Fake::default()
        };
        m.end_epoch(Instant::ZERO + EPOCH, &mut s, &c);
        arrive(&mut s, 1, 60);
        arrive(&mut s, 2, 60);
        c.tenants[1] = TenantCounters { rx_packets: 60, rx_bytes: 60_000, ..TenantCounters::default() };
        c.tenants[2] = TenantCounters { rx_packets: 60, rx_bytes: 60_000, ..TenantCounters::default() };
        let shares = m.end_epoch(Instant::ZERO + EPOCH * 2, &mut s, &c);
        assert_eq!(shares[0].fixed[MEMORY], most, "held whatever is admitted");
        assert_eq!(shares[1].fixed[MEMORY], 0.0);
        assert_eq!(shares[0].dominant, Some(MEMORY));
        let (a, b) = (shares[0].allocation[NT], shares[1].allocation[NT]);
        assert!((b - 0.6).abs() < 1e-6, "the other tenant got all it asked for: {b}");
        assert!((a - 0.4).abs() < 1e-6, "the tenant holding the memory got {a} of the NT");
        // Without the memory, the two would split the NT evenly.
        m.set_memory(TenantId(1), 0.0);
        arrive(&mut s, 1, 60);
        arrive(&mut s, 2, 60);
        c.tenants[1].rx_packets += 60;
        c.tenants[2].rx_packets += 60;
        let shares = m.end_epoch(Instant::ZERO + EPOCH * 3, &mut s, &c);
        assert!((shares[0].allocation[NT] - shares[1].allocation[NT]).abs() < 1e-6, "{shares:?}");
    }

    #[test]
    fn losses_before_reception_are_shared_by_what_each_tenant_offered() {
        let (mut m, mut s) = node();
        let mut c = Fake {
            touched: vec![TenantId(1), TenantId(2)],
            tenants: vec![TenantCounters::default(); 8],
            store: vec![0; 8],
            ..Fake::default()
        };
        m.end_epoch(Instant::ZERO + EPOCH, &mut s, &c);
        arrive(&mut s, 1, 100);
        arrive(&mut s, 2, 300);
        c.tenants[1] = TenantCounters { rx_packets: 100, rx_bytes: 100_000, ..TenantCounters::default() };
        c.tenants[2] = TenantCounters { rx_packets: 300, rx_bytes: 300_000, ..TenantCounters::default() };
        // The shared receive queue lost as many packets as were read: each tenant lost what
        // it offered (a full queue does not choose), so each wanted twice what it got.
        c.lost_shared = 400;
        let shares = m.end_epoch(Instant::ZERO + EPOCH * 2, &mut s, &c);
        let secs = EPOCH.as_secs_f64();
        assert_eq!(shares[0].fixed[INGRESS], 200_000.0 / secs);
        assert_eq!(shares[1].fixed[INGRESS], 600_000.0 / secs);
        assert!((shares[1].demand[NT] - 2.0 * 300.0 / 100_000.0 / secs).abs() < 1e-9);
        // Cumulative: the next epoch with no new loss inflates nothing.
        arrive(&mut s, 1, 100);
        c.tenants[1].rx_packets += 100;
        c.tenants[1].rx_bytes += 100_000;
        let shares = m.end_epoch(Instant::ZERO + EPOCH * 3, &mut s, &c);
        assert_eq!(shares[0].fixed[INGRESS], 100_000.0 / secs);
    }

    #[test]
    fn a_few_disturbed_polls_do_not_move_the_cost_estimate() {
        let mut s = CostSamples::default();
        assert_eq!(s.take_median(), None, "nothing sampled");
        // 15 polls of 16 packets at 100 ns each, and 2 polls where the thread lost its core for
        // 200 us: total over total reads 1.56 us a packet, the median 100 ns.
        for _ in 0..15 {
            s.push(1_600, 16);
        }
        assert_eq!(s.take_median(), None, "under MIN_TIMED packets");
        s.push(200_000, 16);
        s.push(200_000, 16);
        assert_eq!(s.take_median(), Some(100.0));
        assert_eq!(s.take_median(), None, "starts over");
    }

    #[test]
    fn past_its_capacity_the_newest_polls_count() {
        let mut s = CostSamples::default();
        for _ in 0..COST_SAMPLES {
            s.push(16 * 500, 16);
        }
        for _ in 0..COST_SAMPLES {
            s.push(16 * 50, 16);
        }
        assert_eq!(s.take_median(), Some(50.0));
    }

    #[test]
    fn two_chains_of_the_same_kinds_have_two_pool_keys_and_one_name_list_one_key() {
        let mut m = Meter::new(FairConfig::default(), Instant::ZERO, 10e9, 0, 1000, 8);
        for _ in 0..3 {
            m.add_chain(&["firewall", "nat"]);
        }
        let (a, b, c) = (ChainId(0), ChainId(1), ChainId(2));
        assert_ne!(m.chain_key(a), m.chain_key(b), "unlabelled chains of the same kinds");
        m.label_chain(a, &["blue-fw".into(), "blue-nat".into()]);
        m.label_chain(b, &["red-fw".into(), "red-nat".into()]);
        assert_ne!(m.chain_key(a), m.chain_key(b), "two tenants' chains of the same kinds");
        m.label_chain(c, &["blue-fw".into(), "blue-nat".into()]);
        assert_eq!(m.chain_key(a), m.chain_key(c), "the same NTs (a peer hosting the chain) have one key");
        m.remove_chain(b);
        m.reuse_chain(b, &["firewall", "nat"]);
        assert_ne!(m.chain_key(b), m.chain_key(a), "a reused id is unlabelled again");
    }
}
