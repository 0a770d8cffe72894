//! The dispatcher: one sNIC node's data plane, advanced by [`Node::poll`].
//!
//! One call receives a batch, parses and classifies it (MAT), charges each packet to its tenant
//! in the packet store, hands it to the credit scheduler, runs dispatched batches in their
//! regions (inline, or on worker threads), sends finished packets on to their next chain or to
//! egress, and transmits. Every drop is counted with its reason, against the tenant when the
//! tenant is known.

use crate::backend::{Backend, Framing, RxMeta};
pub use crate::clock::{Clock, ManualClock, MonotonicClock};
use crate::elastic::Elastic;
use crate::fdb::{Fdb, FdbConfig};
use crate::stats::Stats;
use crate::store::{Peer, Slots, Store, MAX_TENANTS};
use crate::worker::{Work, WorkerError, MAX_BATCH};
use crate::Drop;
use arc_swap::ArcSwap;
use snic_core::dags::DagAct;
use snic_core::ids::{ChainId, DagUid, InstanceId, TenantId};
use snic_core::mat::Mat;
use snic_core::meter::{CoreTime, Counters, TenantCounters};
use snic_core::node::setup::Instances;
use snic_core::node::{NodeCore, NodeCoreConfig};
use snic_core::placement::Moving;
pub use snic_core::placement::Place;
use snic_core::sched::{Reject, SchedConfig};
use snic_core::time::Instant;
use snic_core::walk::{Entered, Ran, Skip, Walk};
pub use snic_nt::WorkTimer;
use snic_nt::{NtSpec, SpecError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often regions whose NTs send packets of their own run without traffic, ns.
const TICK_NS: u64 = 1_000_000;

/// Node configuration: the node's policy (the core's configuration tree) and what only the data
/// plane has.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The node's policy, with its one set of defaults ([`NodeCoreConfig::default`]: node.yaml's
    /// where node.yaml has the setting): fair sharing (epoch, smoothing, bursts, enforcement),
    /// the link's speed (the capacity of the ingress and egress resources, bit/s), worker
    /// threads for regions (0: regions run on the dispatcher's thread), packet buffers,
    /// elasticity (regions, launches, victims, auto-scaling; off by default), the pool agent,
    /// this node's state slot in a pool behind a switch, automatic placement of regions on
    /// cores and its thresholds, the scheduler's queue bounds, quantum and credits, PANIC-style
    /// scheduling. The node sets the core's `max_tenants` ([`MAX_TENANTS`]) and `join_slots`
    /// (half the packet buffers) itself.
    pub core: NodeCoreConfig,
    /// Receive and dispatch batch size (at most [`MAX_BATCH`]).
    pub batch: usize,
    /// This node's VTEP (outer source for frame backends).
    pub local: Peer,
    /// Pin the dispatcher and workers to cores.
    pub pin_cores: bool,
    /// The forwarding table's learning bounds (in all and per tenant) and aging.
    pub fdb: FdbConfig,
    /// The UDP port learned peers listen on: `Some(4789)` for kernel VXLAN endpoints (they send
    /// from an entropy port), `None` to reply to the datagram's source port.
    pub vtep_port: Option<u16>,
    /// Per-tenant token buckets in front of engine NTs shared by several tenants (FairNIC).
    pub engine_buckets: bool,
    /// This node is one of a node's dispatcher threads (`data_cores`), sharing fair sharing
    /// through their board: its tenants get their parts of one allocation for the whole node,
    /// and its source NATs allocate from the thread's block of their ports. `None`: the only one.
    pub data_core: Option<snic_core::fair::OnBoard>,
}

impl Default for NodeConfig {
    /// The core's defaults, and node.yaml's where node.yaml has a data-plane setting.
    fn default() -> Self {
        NodeConfig {
            core: NodeCoreConfig::default(),
            batch: 32,
            local: Peer::default(),
            pin_cores: false,
            fdb: FdbConfig::default(),
            vtep_port: snic_core::config::NodeSettings::default().vtep_port,
            engine_buckets: true,
            data_core: None,
        }
    }
}

impl NodeConfig {
    /// The core's configuration, with what the data plane sets itself.
    fn core_config(&self) -> NodeCoreConfig {
        NodeCoreConfig {
            max_tenants: MAX_TENANTS,
            join_slots: self.core.store_buffers / 2,
            // Set each epoch by the core: while several tenants send, their packets wait
            // unread while a batch runs — in their own receive queues, or behind it in the one
            // all share — and a batch's work is bounded to a quantum even with one instance
            // ready (issue 49: with one shared queue, a tenant's module cut at 100 µs a packet
            // ran batches of 5 ms alone, and its neighbour lost 7-10 % of its packets at the
            // full queue, p99 20 ms).
            sched: SchedConfig { quantum_alone: false, ..self.core.sched },
            ..self.core
        }
    }

    /// The block of a stateful NT's ports this node allocates from: its slot in a pool behind a
    /// switch, and within it its dispatcher thread's part.
    pub(crate) fn port_slots(&self) -> Option<snic_core::pool::owner::Slots> {
        match &self.data_core {
            Some(on) if on.threads > 1 => Some(on.ports(self.core.slots)),
            _ => self.core.slots,
        }
    }

    /// The most time a tenant's queue at an instance holds, at the instance's cost.
    fn max_queue_time(&self) -> Duration {
        Duration::from_nanos(self.core.sched.max_queue_ns as u64)
    }
}

/// Why a launch failed.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No such chain.
    #[error("unknown chain {0:?}")]
    UnknownChain(ChainId),
    /// An NT could not be built.
    #[error("NT configuration: {0}")]
    Spec(#[from] SpecError),
    /// A worker failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// No worker thread of that number.
    #[error("no worker thread {0}")]
    NoWorker(usize),
    /// Every region is taken (the chain is launched when its first packet arrives).
    #[error("no free region")]
    NoFreeRegion,
}

/// One node's data plane. See the module docs.
pub struct Node<B: Backend> {
    cfg: NodeConfig,
    backend: B,
    framing: Framing,
    clock: Box<dyn Clock>,
    /// Times NT work (see [`Clock::work_timer`]).
    work_timer: WorkTimer,
    store: Store,
    slots: Arc<Slots>,
    mat: Arc<ArcSwap<Mat>>,
    fdb: Fdb,
    exec: Exec,
    stats: Stats,
    rx_idx: Vec<u32>,
    rx_meta: Vec<RxMeta>,
    /// The packets received this batch, classified, waiting to enter their routes a run at a
    /// time.
    arriving: arrive::Arriving,
    batch_buf: Vec<u32>,
    /// The transmit half: forwarding, encapsulation, the link's queues.
    tx: transmit::Transmit,
    /// The receive half: parsing, the MAT and its memo, the tenant's checks and charge.
    rx: ingress::Ingress,
    /// When regions with emitting NTs were last ticked ([`Node::tick_regions`]).
    ticked: Instant,
    /// The node's epoch-time policy: demand, fair shares, ingress limits, elasticity.
    core: NodeCore,
    /// The dispatcher's core time (for the meter's share of the core) and when it was read.
    core_time: (Instant, Option<CoreTime>),
    /// Polls so far (for sampling), and the NT time of the sampled poll's inline regions.
    polls: u64,
    sample_nt_ns: u64,
    elastic: Elastic,
    /// Batches for regions on the dispatcher's thread, run after the workers got theirs.
    deferred: Vec<Work>,
    /// The deployed DAGs: their routes per chain candidate, and switches under way.
    /// Scratch for what the DAG table returns, and for the rechaining policy's views.
    dag_acts: Vec<DagAct<u32>>,
    /// The backend's receive queues and the tenant each holds, if its own.
    rx_queues: receive::RxQueues,
    /// The pool's redirects: chains sent to peers, DAGs hosted for them. (Boxed: the key is
    /// large, and the node's hot fields keep their places.)
    pool: Box<redirect::PoolLink>,
}

use transmit::Hop;

/// What the meter reads at an epoch's end: the node's counters.
struct EpochCounters<'a> {
    stats: &'a Stats,
    store: &'a Store,
    regions: &'a [Option<Arc<crate::region::RegionCounters>>],
    /// Losses in receive queues tenants share (cumulative), and per tenant in its own this epoch.
    lost: u64,
    own: &'a [u64],
    /// Per receive queue, the tenant it is the own of (none with one queue).
    queues: &'a [Option<TenantId>],
    /// The dispatcher's thread's core time, as last read.
    core: Option<CoreTime>,
}

impl Counters for EpochCounters<'_> {
    fn touched(&self) -> &[TenantId] {
        self.stats.touched()
    }
    fn tenant(&self, t: TenantId) -> TenantCounters {
        let Some(s) = self.stats.tenants.get(t.index()) else { return TenantCounters::default() };
        TenantCounters {
            rx_packets: s.rx_packets,
            rx_bytes: s.rx_bytes,
            tx_bytes: s.tx_bytes,
            over_limit: s.drops[Drop::RateLimit.index()],
            store_refused: s.drops[Drop::TenantQuota.index()] + s.drops[Drop::StoreFull.index()],
            sched_refused: s.drops[Drop::Sched(Reject::QueueFull).index()],
        }
    }
    fn store_buffers(&self, t: TenantId) -> u64 {
        self.store.occupancy(t) as u64
    }
    fn nt_time(&self, inst: InstanceId, nt: usize) -> (u64, u64) {
        let Some(Some(r)) = self.regions.get(inst.index()) else { return (0, 0) };
        let load = |v: &[std::sync::atomic::AtomicU64]| v.get(nt).map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed));
        (load(&r.nt_busy_ns), load(&r.nt_timed))
    }
    fn lost_shared(&self) -> u64 {
        self.lost
    }
    fn lost_own(&self, t: TenantId) -> u64 {
        self.own.get(t.index()).copied().unwrap_or(0)
    }
    fn own_queue(&self, t: TenantId) -> bool {
        self.queues.contains(&Some(t))
    }
    fn dispatcher_time(&self) -> Option<CoreTime> {
        self.core
    }
}

mod arrive;
mod fork;
mod handback;
mod ingress;

mod elastic;
mod exec;
mod placement;
mod pool;
mod receive;
mod rechain;
mod redirect;
mod regions;
mod retire;
mod transmit;
use elastic::OnDemand;
pub use exec::pin_current;
use exec::Exec;
pub use handback::ChainState;
use ingress::{Arrival, Source};
pub use placement::{MoveError, PLACEMENT_PERIOD};
pub use pool::{HostAnswer, PoolRequest};
pub use rechain::{CompactError, SWITCH_TIMEOUT_PERIODS};
pub use redirect::PoolLink;

/// How often the dispatcher's core time is read (a system call on the real clock), at most.
const CORE_TIME_EVERY: Duration = Duration::from_millis(1);

/// One poll in this many is timed for the meter (receive phase, the rest, inline NT time).
const SAMPLE_EVERY: u64 = 32;

impl<B: Backend> Node<B> {
    /// A node on `backend`, with worker threads spawned if configured.
    pub fn new(mut cfg: NodeConfig, mut backend: B, clock: Box<dyn Clock>) -> Result<Self, WorkerError> {
        cfg.batch = cfg.batch.clamp(1, MAX_BATCH);
        if let Some(p) = backend.local_peer() {
            cfg.local = p;
        }
        let (lent, in_flight) = backend.held_buffers();
        let (store, lent) = Store::with_held(cfg.core.store_buffers, cfg.batch, lent, in_flight);
        let slots = store.slots().clone();
        backend.attach(&slots, lent).map_err(WorkerError::Backend)?;
        let work_timer = clock.work_timer();
        let exec = Exec::start(cfg.core.workers, cfg.pin_cores, &slots, &work_timer, clock.now())?;
        let queues = backend.rx_queues().max(1);
        let mut core = NodeCore::new(cfg.core_config(), clock.now());
        if let Some(on) = cfg.data_core.clone() {
            core.share_fairness(on);
        }
        let framing = backend.framing();
        Ok(Node {
            framing,
            tx: transmit::Transmit::new(backend.framing(), cfg.batch, store.capacity(), cfg.local).keeping_sent(backend.keeps_sent()),
            backend,
            work_timer,
            clock,
            mat: Arc::new(ArcSwap::from_pointee(Mat::new())),
            fdb: Fdb::new(cfg.fdb),
            exec,
            stats: Stats::default(),
            rx_idx: Vec::with_capacity(MAX_BATCH),
            rx_meta: vec![RxMeta::default(); MAX_BATCH],
            arriving: arrive::Arriving::new(),
            batch_buf: Vec::with_capacity(MAX_BATCH),
            rx: ingress::Ingress::new(framing, cfg.vtep_port),
            ticked: Instant::ZERO,
            core,
            core_time: (Instant::ZERO, None),
            polls: 0,
            sample_nt_ns: 0,
            elastic: Elastic::new(cfg.core.elastic.regions),
            deferred: Vec::with_capacity(64),
            dag_acts: Vec::new(),
            rx_queues: receive::RxQueues::new(queues),
            pool: Box::default(),
            slots,
            store,
            cfg,
        })
    }

    /// The node's policy core, read-only: its scheduler, meter, elasticity, DAG table, pool
    /// agent, redirects and state owners, chain lives. Everything that changes them goes
    /// through the node's own verbs, which carry out what the core decides.
    pub fn core(&self) -> &NodeCore {
        &self.core
    }

    /// The MAT, for the control plane: publish a new table with `store(Arc::new(mat))`; the data
    /// plane picks it up at its next batch.
    pub fn mat_handle(&self) -> Arc<ArcSwap<Mat>> {
        self.mat.clone()
    }

    /// The forwarding table.
    pub fn fdb_mut(&mut self) -> &mut Fdb {
        &mut self.fdb
    }

    /// The forwarding table, read-only.
    pub fn fdb(&self) -> &Fdb {
        &self.fdb
    }

    /// The packet store (quotas, occupancy).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The packet store, read-only.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The counters of the region running `instance`.
    pub fn region_counters(&self, instance: InstanceId) -> Option<&crate::region::RegionCounters> {
        self.exec.counters(instance).map(|c| &**c)
    }

    /// Resets counters and the latency histogram.
    pub fn reset_stats(&mut self) {
        self.stats.reset();
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The backend, mutably (tests feed in-memory ports).
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// Declares a chain of NTs (not yet running anywhere). Its id is new, or that of a chain
    /// [`Node::remove_chain`] took away and that has gone.
    pub fn add_chain(&mut self, specs: Vec<NtSpec>) -> ChainId {
        let kinds: Vec<&str> = specs.iter().map(NtSpec::kind).collect();
        let instances = if specs.iter().any(NtSpec::single_instance) { Instances::One } else { Instances::Many };
        let id = self.core.add_chain(&kinds, instances);
        self.elastic.add_chain(id, specs);
        id
    }

    /// Names a chain's NTs in fair-sharing reports (by default `chainC.I:kind`).
    pub fn label_chain(&mut self, chain: ChainId, names: &[String]) {
        self.core.label_chain(chain, names);
    }

    /// Registers a tenant for fair sharing with its weight (or changes the weight).
    pub fn set_tenant(&mut self, t: TenantId, weight: f64) {
        self.core.set_tenant(t, weight);
        self.tx.set_weight(t, weight.round().max(1.0) as u32);
        self.stats.track_latency(t, true);
    }

    /// Tenant `t`'s NTs hold `bytes` of memory: its demand on the `memory` resource.
    pub fn set_tenant_memory(&mut self, t: TenantId, bytes: f64) {
        self.core.set_tenant_memory(t, bytes);
    }

    /// Forgets a tenant for fair sharing and lifts its ingress limit.
    pub fn remove_tenant(&mut self, t: TenantId) {
        self.core.remove_tenant(t);
        self.stats.track_latency(t, false);
    }

    /// Launches an instance of `chain` into a new region: instantiates its NTs (the software
    /// analogue of partial reconfiguration) and gives the scheduler its credits. The region runs
    /// on the dispatcher's thread without worker threads, else on the workers in turn. With a
    /// region limit ([`crate::elastic::ElasticConfig::regions`]) this is the deploy-time pre-launch: it takes a
    /// free region or fails with [`LaunchError::NoFreeRegion`], and the instance runs after the
    /// emulated launch delay.
    pub fn launch(&mut self, chain: ChainId) -> Result<InstanceId, LaunchError> {
        if self.core.elastic().on() {
            return self.prelaunch(chain)?.ok_or(LaunchError::NoFreeRegion);
        }
        let place = self.exec.next_place();
        self.launch_on(chain, place)
    }

    /// Launches an instance of `chain` at a chosen place: a chain that must not wait behind
    /// another can be given its own core (e.g. a costly chain on a worker, the rest inline).
    /// Outside the region limit: with elasticity on, use [`Node::launch`].
    pub fn launch_on(&mut self, chain: ChainId, place: Place) -> Result<InstanceId, LaunchError> {
        self.exec.check(place)?;
        let nts = self.regions().build_nts(chain)?;
        // Reserve the instance id only once the NTs built, so a failed launch changes nothing.
        let inst = self.core.add_instance(chain).map_err(|_| LaunchError::UnknownChain(chain))?;
        self.regions().install(chain, inst, nts, place)?;
        Ok(inst)
    }

    /// True while worker threads hold batches that a poll could take now: on the real clock,
    /// any that have not come back; on a virtual clock, any done by the dispatcher's time (a
    /// batch its worker finishes later in virtual time waits for the clock to get there).
    pub fn workers_busy(&self) -> bool {
        self.exec.busy(self.work_timer.now_ns())
    }

    /// Polls until every buffer is back in the store or `limit` passes; returns true if drained.
    pub fn drain(&mut self, limit: Duration) -> bool {
        let t0 = std::time::Instant::now();
        while self.store.charged() > 0 && t0.elapsed() < limit {
            self.poll();
        }
        self.store.charged() == 0
    }

    /// Stops the node (its worker threads end) and gives its backend back, for a node rebuilt
    /// with another deployment on the same socket. Call [`Node::drain`] first.
    pub fn into_backend(self) -> B {
        self.backend
    }

    /// Runs until `stop` is set, idling in the backend's wait when there is no work (at most
    /// 1 ms at a time: nothing wakes it when `stop` is set).
    pub fn run(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            if self.poll() == 0 {
                self.idle(Duration::from_millis(1));
            }
        }
    }

    /// How long the node may go without a poll if nothing arrives: zero while worker threads
    /// hold batches or the scheduler has items to dispatch; 1 ms while the backend pushes back on transmit; until the next fair-sharing
    /// epoch while an epoch has anything to do (tenants with demand or limits, traffic since the
    /// last epoch, elastic instances that may scale in or be descheduled, chains or routes going
    /// away, DAGs switching forms, a move, launches under way); otherwise `None`: only
    /// traffic or a control command needs it.
    pub fn poll_timeout(&self) -> Option<Duration> {
        if self.exec.outstanding() {
            return Some(Duration::ZERO);
        }
        if self.tx.pending() {
            return Some(Duration::from_millis(1));
        }
        // What only the driver knows: traffic since the epoch began, and NTs' timers.
        let traffic = !self.stats.touched().is_empty();
        let tick = (self.exec.waiting().next().is_some()).then(|| Instant::from_nanos(self.ticked.as_nanos() + TICK_NS));
        let now = self.clock.now();
        let t = self.core.poll_timeout(now, traffic, tick);
        // A tenant's own queue paused for its limit is read again when the limit admits a batch.
        [t, self.rx_queues.until_resume(&self.core, now)].into_iter().flatten().min()
    }

    /// The node's clock, now.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Waits in the backend for traffic, a wake-up ([`Backend::waker`]) or the node's
    /// [`Node::poll_timeout`], at most `most`.
    pub fn idle(&mut self, most: Duration) {
        let t = self.poll_timeout().map_or(most, |t| t.min(most));
        if !t.is_zero() {
            self.backend.wait(t);
        }
    }

    /// One round: completions, receive, dispatch, transmit. Returns the packets handled.
    pub fn poll(&mut self) -> usize {
        let now = self.clock.now();
        let mat = self.mat.load_full();
        self.rx.begin(&mat);
        // One poll in SAMPLE_EVERY is timed phase by phase for the meter's cost estimates.
        self.polls = self.polls.wrapping_add(1);
        let sampled = self.sampled();
        self.tx.sample(sampled);
        let mut work = self.drain_completions(now);
        // With worker threads, completions (egress of finished packets) belong to the rest of
        // the way, not to receiving: the receive phase starts after them.
        let rx_start = if sampled && work > 0 { self.clock.now() } else { now };
        if self.tx.keeps_sent() {
            // Transmissions the kernel completed come back to the store (`rx_idx` as scratch).
            self.backend.reclaim(&mut self.rx_idx);
            for &i in &self.rx_idx {
                self.store.release(i);
            }
            self.rx_idx.clear();
        }
        self.store.take_for_rx(self.cfg.batch, &mut self.rx_idx);
        let n = if self.rx_idx.is_empty() {
            0
        } else if self.rx_queues.several() {
            self.rx_queues.recv(&mut self.backend, &self.slots, &mut self.rx_idx, &mut self.rx_meta, &mut self.core, now)
        } else {
            self.backend.recv(&self.slots, &mut self.rx_idx, &mut self.rx_meta)
        };
        for i in n..self.rx_idx.len() {
            self.store.release(self.rx_idx[i]);
        }
        for i in 0..n {
            let (idx, m) = (self.rx_idx[i], self.rx_meta[i]);
            self.ingress(idx, m, now, &mat, Source::Endpoint);
        }
        if !self.arriving.is_empty() {
            self.enter_arrivals(now);
        }
        if !self.pool.owned.is_empty() {
            self.ingress_owned(now, &mat);
            self.enter_arrivals(now);
        }
        let rx_end = if sampled && n > 0 { self.clock.now() } else { rx_start };
        work += n;
        self.sample_nt_ns = 0;
        let dispatched = self.dispatch(now, sampled);
        work += dispatched;
        let (tx, l) = self.link();
        tx.flush(l);
        if sampled && work > 0 {
            let end = self.clock.now().as_nanos();
            let (t0, t1, rx) = (now.as_nanos(), rx_start.as_nanos(), rx_end.as_nanos());
            let half = self.cfg.batch / 2;
            let rest = (t1 - t0) + end.saturating_sub(rx).saturating_sub(self.sample_nt_ns);
            self.core.sample_poll(rx.saturating_sub(t1), n, half, rest, dispatched);
        }
        if self.core.launches().busy() || self.core.sched().has_parked() || self.core.any_waiting() {
            self.advance_elastic(now);
        }
        if self.core.dags().switching() {
            self.advance_switches(now);
        }
        if self.core.moving() == Moving::UnderWay {
            self.advance_move(now);
        }
        if self.core.due(now) {
            self.end_epoch(now);
            self.placement_look(now);
            self.advance_retired();
            // (An idle node ages nothing until traffic wakes it: its entries route nothing
            // meanwhile, and the first epoch then forgets the stale ones.)
            self.fdb.sweep(now);
        }
        if now.as_nanos().saturating_sub(self.ticked.as_nanos()) >= TICK_NS {
            self.ticked = now;
            self.tick_regions(now);
        }
        work
    }

    /// Runs an empty batch in every region whose NTs wait on timers, so that they fire without
    /// traffic ([`snic_nt::Nt::tick`]); what they send goes out when the
    /// batch completes. A worker whose ring is full skips this tick.
    #[cold]
    #[inline(never)]
    fn tick_regions(&mut self, now: Instant) {
        let waiting: Vec<InstanceId> = self.exec.waiting().collect();
        for inst in waiting {
            match self.exec.place_of(inst) {
                Place::Dispatcher => self.run_inline(inst, &[], now, false),
                Place::Worker(w) => {
                    let _ = self.exec.workers[w].submit(Work::new(inst, &[], now, 0));
                }
            }
        }
    }

    /// Says that the backend's receive queue `queue` holds tenant `t`'s packets only (the
    /// backend steers them there): the node then takes from it no more than `t`'s ingress limit
    /// admits, and counts what is lost there as `t`'s. A backend with one queue ignores it.
    pub fn set_rx_queue_tenant(&mut self, queue: usize, t: Option<TenantId>) {
        self.rx_queues.set_tenant(queue, t, self.backend.rx_queues());
    }

    /// True during the polls timed for the meter (one in SAMPLE_EVERY).
    #[inline]
    fn sampled(&self) -> bool {
        self.polls.is_multiple_of(SAMPLE_EVERY)
    }

    /// Closes a fair-sharing epoch: demand, DRF, ingress limits, and each instance's measured
    /// cost for the scheduler's round robin by time.
    fn end_epoch(&mut self, now: Instant) {
        // Losses in a tenant's own receive queue are that tenant's; the rest are shared.
        let lost = self.rx_queues.count_losses(&mut self.backend, &mut self.stats);
        // On a virtual clock, a worker thread may or may not have run the batch it was just
        // sent when the epoch reads the NTs' timings: wait until it has, so that what the meter
        // sees does not depend on the thread's speed (CI saw two runs of one virtual scenario
        // differ by that).
        for w in self.exec.workers.iter().filter(|w| w.is_virtual()) {
            w.wait_all_back();
        }
        if now.saturating_since(self.core_time.0) >= CORE_TIME_EVERY {
            self.core_time = (now, self.clock.core_time());
        }
        let counters = EpochCounters {
            core: self.core_time.1,
            stats: &self.stats,
            store: &self.store,
            regions: &self.exec.counters,
            lost,
            own: self.rx_queues.lost_own(),
            queues: self.rx_queues.owners(),
        };
        let acts = self.core.handle_epoch(now, &counters);
        self.elastic.acts.clear();
        self.elastic.acts.extend_from_slice(acts);
        self.stats.clear_touched();
        self.rx_queues.end_epoch();
        self.exec.bound_shared(&mut self.core, self.cfg.core.sched.quantum_ns);
        self.rx_queues.bound(&mut self.backend, &self.core, self.cfg.max_queue_time(), &self.stats);
        self.elastic_epoch(now);
        self.pool_epoch();
    }

    // The drops, counted as the transmit Link counts them (one place for how a drop is
    // counted and its buffer given back).
    #[cold]
    fn drop_unattributed(&mut self, idx: u32, why: Drop) {
        self.link().1.drop_unattributed(idx, why);
    }

    #[cold]
    fn drop_charged(&mut self, idx: u32, t: TenantId, why: Drop) {
        self.link().1.drop_charged(idx, t, why);
    }

    /// A received datagram, from `source`, through the receive half ([`ingress::Ingress`]) and
    /// on the way it says.
    #[inline(always)]
    fn ingress(&mut self, idx: u32, m: RxMeta, now: Instant, mat: &Mat, source: Source) {
        let (_, mut l, _, core, rx) = self.parts();
        match rx.admit(&mut l, core, idx, m, now, mat, source) {
            Arrival::Dropped => {}
            Arrival::Out => self.egress(idx),
            Arrival::Other(e) => self.ingress_other(idx, m, e, now),
            Arrival::Pooled(uid) => self.arrive_pooled(idx, uid, now),
            Arrival::Held(uid) => self.hold(idx, uid),
            Arrival::Route { tenant, route, len } if self.pool.on => {
                self.stats.count_rx(tenant, 1, len as u64);
                self.store.tag_route(idx, route);
                self.enter_pooled(idx, now)
            }
            // It enters with the rest of its run, after the batch ([`Node::enter_arrivals`]),
            // which counts it received and tags its buffer with the route, a run at a time.
            Arrival::Route { tenant, route, len } => self.arriving.push(idx, tenant, route, len),
        }
    }

    /// [`Node::ingress`]'s last step in a pool behind a switch: the packet goes to the node
    /// holding its state, or takes its route here as on the usual path (kept apart so that
    /// the usual path stays as it was).
    #[cold]
    #[inline(never)]
    fn arrive_pooled(&mut self, idx: u32, uid: DagUid, now: Instant) {
        if self.send_to_owner(idx, uid) {
            return;
        }
        let Some(route) = self.core.dags().arriving(uid) else { return self.hold(idx, uid) };
        // SAFETY: the dispatcher owns `idx`.
        let (_, d) = unsafe { self.slots.get(idx) };
        d.walk = Walk::start(DagUid(route));
        self.store.tag_route(idx, route);
        self.enter(idx, now);
    }

    /// `idx` enters the step its walk is at (unless its chain is redirected to a peer).
    #[inline(always)]
    fn enter(&mut self, idx: u32, now: Instant) {
        if self.pool.on {
            return self.enter_pooled(idx, now);
        }
        let e = self.walk_enter(idx, now);
        self.entered(idx, e, now);
    }

    /// [`Node::enter`] while chains are redirected: kept apart so that the usual path stays
    /// as it was.
    #[cold]
    #[inline(never)]
    fn enter_pooled(&mut self, idx: u32, now: Instant) {
        if !self.redirect(idx, now) {
            let e = self.walk_enter(idx, now);
            self.entered(idx, e, now);
        }
    }

    /// Asks the walk of `idx` to enter its step (the scheduler queues it, or says why not).
    #[inline(always)]
    fn walk_enter(&mut self, idx: u32, now: Instant) -> Entered {
        // SAFETY: the dispatcher owns `idx`.
        let (_, d) = unsafe { self.slots.get(idx) };
        self.core.handle_arrival(&mut d.walk, now, d.meta.tenant, d.flow_hash, idx)
    }

    /// Does what entering a step came to: queued (and forked, if the step starts a parallel
    /// group), the on-demand path, egress, or a drop.
    #[inline(always)]
    fn entered(&mut self, idx: u32, e: Entered, now: Instant) {
        match e {
            Entered::Queued { branches: 0 } => {}
            Entered::Queued { branches } => self.fork(idx, branches, now),
            Entered::OnDemand => self.enter_on_demand(idx, now),
            Entered::Out => self.egress(idx),
            Entered::Refused(why) => self.refuse(idx, Drop::Sched(why), now),
        }
    }

    /// Drops `idx` before it ran its step. A branch of a parallel group also tells the join, so
    /// that the packet's other branches are not held for it.
    #[cold]
    #[inline(never)]
    fn refuse(&mut self, idx: u32, why: Drop, now: Instant) {
        // SAFETY: the dispatcher owns `idx`.
        let (_, d) = unsafe { self.slots.get(idx) };
        let (t, branch, slot) = (d.meta.tenant, d.walk.branch, d.walk.join_slot().filter(|_| d.walk.join_at != 0));
        self.drop_charged(idx, t, why);
        if let Some(j) = slot {
            self.branch_failed(j, branch, now);
        }
    }

    /// PANIC-style: `idx` ran one NT of its step and goes back to `inst` for the next one.
    #[cold]
    #[inline(never)]
    fn requeue(&mut self, inst: InstanceId, idx: u32, t: TenantId) {
        if let Err(e) = self.core.handle_requeue(inst, t, idx) {
            self.drop_charged(idx, t, Drop::Sched(e));
        }
    }

    /// The packet's chain (at its DAG position) has no active instance: launch or resume one
    /// and schedule the packet again, or send it on for the tenant's endpoint, or drop it.
    #[cold]
    #[inline(never)]
    fn enter_on_demand(&mut self, idx: u32, now: Instant) {
        // (The Arc clone keeps the descriptor's borrow apart from `self`.)
        let slots = self.slots.clone();
        loop {
            // SAFETY: the dispatcher owns `idx`.
            let (_, d) = unsafe { slots.get(idx) };
            let Some(chain) = self.core.sched().chain_at(d.walk.dag, d.walk.pos) else {
                return self.refuse(idx, Drop::Sched(Reject::UnknownDag), now);
            };
            match self.on_demand(chain, d.walk.dag.0, d.walk.pos, now) {
                OnDemand::Retry => {
                    // Packets that waited for this chain go first.
                    self.release_waiting(Some(chain), now);
                    let e = match self.walk_enter(idx, now) {
                        Entered::OnDemand => Entered::Refused(Reject::NoInstance),
                        e => e,
                    };
                    return self.entered(idx, e, now);
                }
                OnDemand::Wait if self.core.wait_for_launch(idx, d.meta.tenant, chain) => return,
                OnDemand::Wait | OnDemand::Nothing => return self.refuse(idx, Drop::Sched(Reject::NoInstance), now),
                OnDemand::Endpoint => match d.walk.skip(self.core.sched()) {
                    Skip::Fork { branches } => {
                        // Its copies run the group's other branches; it joins them.
                        self.fork(idx, branches, now);
                        return self.join_arrive(idx, now);
                    }
                    Skip::Join => return self.join_arrive(idx, now),
                    Skip::Out => return self.egress(idx),
                    Skip::Next => match self.walk_enter(idx, now) {
                        Entered::OnDemand => continue,
                        e => return self.entered(idx, e, now),
                    },
                },
            }
        }
    }

    fn dispatch(&mut self, now: Instant, sampled: bool) -> usize {
        let mut n = 0;
        let max = self.cfg.batch;
        let mut batch = std::mem::take(&mut self.batch_buf);
        // With worker threads, batches for regions on the dispatcher's thread wait until every
        // worker has its batches of this round: the workers run while the dispatcher runs its
        // own (the branches of a parallel group, spread over cores, then really overlap).
        let defer = !self.exec.workers.is_empty();
        // One turn per instance per poll (and one more for packets moving on to their next
        // chain): a backlogged or slow chain gets its batch and then waits for the next round,
        // so it cannot hold the dispatcher away from receiving other tenants' packets.
        let mut turns = 2 * self.exec.counters.len().max(1);
        while turns > 0 {
            turns -= 1;
            let Some(inst) = self.core.poll_dispatch(&mut batch, max) else {
                // Nothing to dispatch, or the ready instances still gather the time of an item:
                // another turn gives them a quantum each (within this poll's turns).
                if self.core.sched().has_ready() {
                    continue;
                }
                break;
            };
            n += batch.len();
            for &idx in &batch {
                // SAFETY: the dispatcher owns queued indices.
                let (_, d) = unsafe { self.slots.get(idx) };
                d.verdict = None;
                d.instance = inst;
            }
            let Place::Worker(w) = self.exec.place_of(inst) else {
                if defer {
                    self.deferred.push(Work::new(inst, &batch, now, 0));
                } else {
                    self.run_inline(inst, &batch, now, sampled);
                }
                continue;
            };
            let sent_ns = if self.exec.workers[w].is_virtual() { self.work_timer.now_ns() } else { 0 };
            let mut work = Work::new(inst, &batch, now, sent_ns);
            while let Err(back) = self.exec.workers[w].submit(work) {
                // The ring is full: finish what has come back to make room.
                work = back;
                self.exec.wait_for_room(w, &self.work_timer);
                self.drain_completions(now);
            }
        }
        self.batch_buf = batch;
        let mut deferred = std::mem::take(&mut self.deferred);
        for w in deferred.drain(..) {
            self.run_inline(w.instance, w.indices(), now, sampled);
        }
        self.deferred = deferred;
        n
    }

    /// Runs a batch in a region on the dispatcher's thread, and completes it.
    #[inline]
    fn run_inline(&mut self, inst: InstanceId, batch: &[u32], now: Instant, sampled: bool) {
        self.sample_nt_ns += self.exec.run_inline(&self.slots, inst, batch, now, &self.work_timer, sampled);
        self.complete(inst, batch, now);
    }

    /// Completes the batches the worker threads finished (none without workers: then the
    /// call is all it costs, kept out of the receive path's inlined body).
    #[inline(never)]
    fn drain_completions(&mut self, now: Instant) -> usize {
        let mut n = 0;
        for w in 0..self.exec.workers.len() {
            while let Some(work) = self.exec.next_done(w, &self.work_timer) {
                n += work.n as usize;
                self.complete(work.instance, work.indices(), now);
            }
        }
        n
    }

    /// The transmit half, and what it touches of the node.
    #[inline(always)]
    fn link(&mut self) -> (&mut transmit::Transmit, transmit::Link<'_, B>) {
        let (tx, l, ..) = self.parts();
        (tx, l)
    }

    /// The node's parts that move packets (the transmit half, the pool's data path, the receive
    /// half), what they touch of it, and the core, borrowed apart.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn parts(&mut self) -> (&mut transmit::Transmit, transmit::Link<'_, B>, &mut redirect::PoolLink, &mut NodeCore, &mut ingress::Ingress) {
        let l = transmit::Link {
            backend: &mut self.backend,
            slots: &self.slots,
            store: &mut self.store,
            stats: &mut self.stats,
            fdb: &mut self.fdb,
            clock: &*self.clock,
        };
        (&mut self.tx, l, &mut self.pool, &mut self.core, &mut self.rx)
    }

    /// The node's parts that hold NT objects, and the core, borrowed apart.
    fn regions(&mut self) -> regions::Regions<'_> {
        let (slots, engine_buckets, now) = (self.cfg.port_slots(), self.cfg.engine_buckets, self.clock.now());
        let (core, exec, elastic, timer) = (&mut self.core, &mut self.exec, &mut self.elastic, &self.work_timer);
        regions::Regions { core, exec, elastic, handback: &mut self.pool.handback, timer, slots, engine_buckets, now }
    }

    /// Sends a packet that finished its route ([`transmit::Transmit::egress`]).
    #[inline(always)]
    fn egress(&mut self, idx: u32) {
        let (tx, mut l) = self.link();
        tx.egress(&mut l, idx)
    }

    fn complete(&mut self, inst: InstanceId, batch: &[u32], now: Instant) {
        self.core.handle_completion(inst, batch.len() as u32);
        if let Some(c) = self.exec.counters(inst) {
            if c.outbox.as_ref().is_some_and(|o| o.is_pending()) {
                let c = c.clone();
                let (tx, mut l) = self.link();
                tx.send_emitted(&mut l, c.outbox.as_ref().expect("checked"), now);
            }
        }
        // The batch's packets mostly go to one next hop: its route is looked up once.
        let mut hop: Hop = None;
        for &idx in batch {
            // SAFETY: the batch came back to the dispatcher, which owns it again.
            let (_, d) = unsafe { self.slots.get(idx) };
            match self.core.handle_ran(&mut d.walk, d.verdict.is_some()) {
                Ran::Join => self.join_arrive(idx, now),
                Ran::Drop => {
                    // (`ran` says Drop only for a packet with a verdict.)
                    let why = d.verdict.map_or(Drop::StoreFull, Drop::Nt);
                    self.drop_charged(idx, d.meta.tenant, why)
                }
                Ran::Out => {
                    let (tx, mut l) = self.link();
                    tx.egress_via(&mut l, idx, &mut hop)
                }
                Ran::Next => self.enter(idx, now),
                Ran::Again => self.requeue(inst, idx, d.meta.tenant),
            }
        }
    }
}
