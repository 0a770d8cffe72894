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
use crate::region::Region;
use crate::stats::Stats;
use crate::store::{Peer, Slots, Store, MAX_TENANTS};
use crate::worker::{Work, WorkerError, WorkerHandle, MAX_BATCH};
use crate::Drop;
use arc_swap::ArcSwap;
use snic_core::dags::DagAct;
use snic_core::ids::{ChainId, DagUid, InstanceId, TenantId};
use snic_core::mat::{Action, Mat, MatKey, SourceCheck};
use snic_core::meter::{CoreTime, Counters, TenantCounters};
use snic_core::node::setup::Instances;
use snic_core::node::{NodeCore, NodeCoreConfig};
use snic_core::placement::Moving;
pub use snic_core::placement::Place;
use snic_core::sched::{InstanceState, Reject, SchedConfig};
use snic_core::time::Instant;
use snic_core::walk::{Entered, Ran, Skip, Walk};
pub use snic_nt::WorkTimer;
use snic_nt::{NtSpec, SpecError, HEADROOM};
use snic_wire::layout::{self, InnerL3};
use snic_wire::vxlan;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Copies an address by variant. The parser has just written it as a one-byte tag and a
/// four-byte address; a plain copy reloads it with one 16-byte load spanning both stores, which
/// defeats store-to-load forwarding (it showed as 12% of the dispatcher's samples).
#[inline(always)]
fn rebuild(a: &std::net::IpAddr) -> std::net::IpAddr {
    match *a {
        std::net::IpAddr::V4(v) => std::net::IpAddr::V4(std::net::Ipv4Addr::from(u32::from(v))),
        std::net::IpAddr::V6(v) => std::net::IpAddr::V6(v),
    }
}

/// The fields of a packet's [`MatKey`] in one word, one to one with the key where it is not 0:
/// a tag (bits 120..), the VNI (64..96), and for IPv4 the protocol (48..56), destination port
/// (32..48) and address (0..32). Non-IP and ARP frames key on the VNI alone, as their
/// [`MatKey`] does; IPv6 does not fit (0).
#[inline(always)]
fn memo_key(vni: u32, inner: &Option<layout::InnerLayout>) -> u128 {
    const V4: u128 = 1 << 120;
    const NO_DST: u128 = 2 << 120;
    match inner {
        Some(l) if l.l3 == InnerL3::Ipv4 => match l.key.dst {
            std::net::IpAddr::V4(a) => {
                V4 | (vni as u128) << 64 | (l.key.proto as u128) << 48 | (l.key.dst_port as u128) << 32 | u32::from(a) as u128
            }
            std::net::IpAddr::V6(_) => 0,
        },
        Some(l) if l.l3 == InnerL3::Ipv6 => 0,
        _ => NO_DST | (vni as u128) << 64,
    }
}

/// The packed memo's key when it holds none: [`memo_key`] never gives it (its tags are 1 and
/// 2), nor 0, which the memo is never set to; so a hit needs one comparison.
const NO_MEMO: u128 = u128::MAX;

/// How often regions whose NTs send packets of their own run without traffic, ns.
const TICK_NS: u64 = 1_000_000;

/// Finishes a checksum an offloading sender left partial ([`snic_wire::build::complete_partial_l4`]):
/// out of the per-packet path, which only tested the parse's flag.
#[cold]
#[inline(never)]
fn complete_partial(ip: &mut [u8], l4_off: usize, proto: u8) {
    snic_wire::build::complete_partial_l4(ip, l4_off, proto);
}

/// A packet's flow hash: its inner 5-tuple's, or for opaque (encrypted) traffic the first 8
/// bytes after the VXLAN header (the sender's SPI and id), which keeps each sender's packets in
/// order. `off`, `len`: the VXLAN datagram in `buf`.
#[inline(always)]
fn flow_hash(buf: &[u8], inner: &Option<layout::InnerLayout>, off: usize, len: usize) -> u64 {
    match inner {
        Some(l) => l.key.hash64(),
        None => {
            let s = off + vxlan::HEADER_LEN;
            let b = &buf[s..(s + 8).min(off + len)];
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        }
    }
}

/// Where a received datagram comes from, as [`Node::ingress`] treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A tenant's endpoint (or a peer that redirected one of a chain's packets here).
    Endpoint,
    /// A peer in a pool behind a switch, to this node as the packet's state's owner: it goes no
    /// further in the pool.
    Owner,
}

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
        }
    }
}

impl NodeConfig {
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

/// The regions: those on the dispatcher's thread, the worker threads, and where each instance
/// runs.
struct Exec {
    inline: Vec<Option<Region>>,
    workers: Vec<WorkerHandle>,
    placement: Vec<Place>,
    next: usize,
    /// Scratch for the in-flight caps, per instance: its worker if active there, and its cap.
    on_worker: Vec<Option<usize>>,
    caps: Vec<f64>,
}

impl Exec {
    /// `workers` worker threads (none: every region on the dispatcher's thread), each on a core
    /// of its own if `pin` (the dispatcher keeps the first, and is pinned to it); on a virtual
    /// clock (`timer`'s, at `now`) each worker is a virtual core of its own.
    fn start(workers: usize, pin: bool, slots: &Arc<Slots>, timer: &WorkTimer, now: Instant) -> Result<Exec, WorkerError> {
        let cores = if pin && workers > 0 { process_cores().to_vec() } else { Vec::new() };
        let mut handles = Vec::with_capacity(workers);
        for w in 0..workers {
            let core = (!cores.is_empty()).then(|| cores[(w + 1) % cores.len()]);
            let timer = if timer.is_virtual() { WorkTimer::virtual_core(now.as_nanos()) } else { WorkTimer::Real };
            handles.push(WorkerHandle::spawn(w, slots.clone(), core, 1024, timer)?);
        }
        if let Some(c) = cores.first() {
            core_affinity::set_for_current(*c);
        }
        Ok(Exec { inline: Vec::new(), workers: handles, placement: Vec::new(), next: 0, on_worker: Vec::new(), caps: Vec::new() })
    }

    /// Keeps instance `i`'s region on the dispatcher's thread.
    fn put_inline(&mut self, i: usize, region: Region) {
        if self.inline.len() <= i {
            self.inline.resize_with(i + 1, || None);
        }
        self.inline[i] = Some(region);
    }

    /// Where instance `inst`'s region runs.
    fn place_of(&self, inst: InstanceId) -> Place {
        self.placement.get(inst.index()).copied().unwrap_or(Place::Dispatcher)
    }

    /// A batch worker `w` finished: on the real clock, any that came back; on a virtual clock,
    /// one done by the dispatcher's time, once the thread has run all it was sent (see
    /// [`crate::worker`]).
    fn next_done(&mut self, w: usize, timer: &WorkTimer) -> Option<Work> {
        let worker = &mut self.workers[w];
        if !worker.is_virtual() {
            return worker.poll_done();
        }
        worker.wait_all_back();
        worker.poll_done_by(timer.now_ns())
    }

    /// Worker `w`'s ring is full: on a virtual clock the dispatcher waits (its time moves on)
    /// until the worker's oldest batch is done; then the caller takes what came back.
    fn wait_for_room(&mut self, w: usize, timer: &WorkTimer) {
        let worker = &mut self.workers[w];
        if worker.is_virtual() {
            worker.wait_all_back();
            if let Some(done) = worker.next_done_ns() {
                timer.spend(done.saturating_sub(timer.now_ns()));
            }
        }
    }

    /// True while worker threads hold batches that a poll could take at `now_ns`: on the real
    /// clock, any that have not come back; on a virtual clock, any done by then (a batch its
    /// worker finishes later in virtual time waits for the clock to get there).
    fn busy(&self, now_ns: u64) -> bool {
        self.workers.iter().any(|w| {
            if !w.is_virtual() {
                return w.outstanding() > 0;
            }
            w.wait_all_back();
            w.next_done_ns().is_some_and(|d| d <= now_ns)
        })
    }

    /// Caps the work in flight of instances that share a worker (the policy:
    /// [`snic_core::placement::inflight_caps`], at the scheduler's `quantum_ns`).
    fn bound_shared(&mut self, core: &mut NodeCore, quantum_ns: f64) {
        if self.workers.is_empty() {
            return;
        }
        let sched = core.sched();
        let active = |i: usize| {
            matches!(sched.state(InstanceId(i as u16)), InstanceState::Running | InstanceState::Launching | InstanceState::Draining)
        };
        self.on_worker.clear();
        self.on_worker.extend(self.placement.iter().enumerate().map(|(i, p)| match p {
            Place::Worker(k) if active(i) => Some(*k),
            _ => None,
        }));
        snic_core::placement::inflight_caps(&self.on_worker, quantum_ns, &mut self.caps);
        for (i, (cap, p)) in self.caps.iter().zip(&self.placement).enumerate() {
            if matches!(p, Place::Worker(_)) {
                core.set_inflight_cap(InstanceId(i as u16), *cap);
            }
        }
    }
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
    chains: Vec<Vec<NtSpec>>,
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
    /// The last MAT lookup (key and result): consecutive packets of a flow share it. It belongs
    /// to `memo_table`, held here so that its address cannot be reused; a newly published table
    /// clears it (checked once per batch).
    mat_memo: Option<(MatKey, Option<Action>)>,
    /// The same for keys that pack into one word ([`memo_key`]: IPv4 and non-IP), checked
    /// first: comparing a packed key cost ~12 instructions a packet less than building and
    /// comparing a [`MatKey`]. [`NO_MEMO`]: none.
    mat_fast: (u128, Option<Action>),
    memo_table: Arc<Mat>,
    /// Counters of each launched region, by instance.
    region_counters: Vec<Option<Arc<crate::region::RegionCounters>>>,
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

mod elastic;
mod placement;
mod pool;
mod receive;
mod rechain;
mod redirect;
mod retire;
mod transmit;
use elastic::OnDemand;
pub use handback::ChainState;
pub use placement::{MoveError, PLACEMENT_PERIOD};
pub use pool::PoolRequest;
pub use rechain::{CompactError, SWITCH_TIMEOUT_PERIODS};

/// The cores this process may run on, read once. `core_affinity::get_core_ids` reads the
/// calling thread's affinity, and a node with pinned cores pins the thread that builds it: read
/// afresh, a second node built on that thread would see one core and put every worker on the
/// dispatcher's.
fn process_cores() -> &'static [core_affinity::CoreId] {
    static CORES: std::sync::OnceLock<Vec<core_affinity::CoreId>> = std::sync::OnceLock::new();
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}

/// How often the dispatcher's core time is read (a system call on the real clock), at most.
const CORE_TIME_EVERY: Duration = Duration::from_millis(1);

/// One poll in this many is timed for the meter (receive phase, the rest, inline NT time).
const SAMPLE_EVERY: u64 = 32;

impl<B: Backend> Node<B> {
    /// A node on `backend`, with worker threads spawned if configured.
    pub fn new(mut cfg: NodeConfig, backend: B, clock: Box<dyn Clock>) -> Result<Self, WorkerError> {
        cfg.batch = cfg.batch.clamp(1, MAX_BATCH);
        let store = Store::new(cfg.core.store_buffers, cfg.batch);
        let slots = store.slots().clone();
        let work_timer = clock.work_timer();
        let exec = Exec::start(cfg.core.workers, cfg.pin_cores, &slots, &work_timer, clock.now())?;
        let queues = backend.rx_queues().max(1);
        let core = NodeCore::new(
            NodeCoreConfig {
                max_tenants: MAX_TENANTS,
                join_slots: cfg.core.store_buffers / 2,
                // Set each epoch by the core: while several tenants send, their packets
                // wait unread while a batch runs — in their own receive queues, or behind it
                // in the one all share — and a batch's work is bounded to a quantum even
                // with one instance ready (issue 49: with one shared queue, a tenant's
                // module cut at 100 µs a packet ran batches of 5 ms alone, and its
                // neighbour lost 7-10 % of its packets at the full queue, p99 20 ms).
                sched: SchedConfig { quantum_alone: false, ..cfg.core.sched },
                ..cfg.core
            },
            clock.now(),
        );
        Ok(Node {
            framing: backend.framing(),
            tx: transmit::Transmit::new(backend.framing(), cfg.batch, store.capacity(), cfg.local),
            backend,
            work_timer,
            clock,
            mat: Arc::new(ArcSwap::from_pointee(Mat::new())),
            fdb: Fdb::new(cfg.fdb),
            chains: Vec::new(),
            exec,
            stats: Stats::default(),
            rx_idx: Vec::with_capacity(MAX_BATCH),
            rx_meta: vec![RxMeta::default(); MAX_BATCH],
            arriving: arrive::Arriving::new(),
            batch_buf: Vec::with_capacity(MAX_BATCH),
            mat_memo: None,
            mat_fast: (NO_MEMO, None),
            memo_table: Arc::new(Mat::new()),
            region_counters: Vec::new(),
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
        self.region_counters.get(instance.index()).and_then(|c| c.as_deref())
    }

    /// Resets counters and the latency histogram.
    pub fn reset_stats(&mut self) {
        let tracked: Vec<TenantId> = self.core.meter().fairness().shares().iter().map(|s| s.tenant).collect();
        self.stats = Stats::default();
        for t in tracked {
            self.stats.track_latency(t, true);
        }
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
        if id.index() < self.chains.len() {
            // A gone chain's id, reused.
            self.chains[id.index()] = specs;
        } else {
            self.elastic.add_chain();
            self.chains.push(specs);
        }
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
    /// region limit ([`ElasticConfig::regions`]) this is the deploy-time pre-launch: it takes a
    /// free region or fails with [`LaunchError::NoFreeRegion`], and the instance runs after the
    /// emulated launch delay.
    pub fn launch(&mut self, chain: ChainId) -> Result<InstanceId, LaunchError> {
        if self.core.elastic().on() {
            return self.prelaunch(chain)?.ok_or(LaunchError::NoFreeRegion);
        }
        let place = if self.exec.workers.is_empty() {
            Place::Dispatcher
        } else {
            self.exec.next += 1;
            Place::Worker((self.exec.next - 1) % self.exec.workers.len())
        };
        self.launch_on(chain, place)
    }

    /// Launches an instance of `chain` at a chosen place: a chain that must not wait behind
    /// another can be given its own core (e.g. a costly chain on a worker, the rest inline).
    /// Outside the region limit: with elasticity on, use [`Node::launch`].
    pub fn launch_on(&mut self, chain: ChainId, place: Place) -> Result<InstanceId, LaunchError> {
        if let Place::Worker(w) = place {
            if w >= self.exec.workers.len() {
                return Err(LaunchError::NoWorker(w));
            }
        }
        let nts = self.build_nts(chain)?;
        // Reserve the instance id only once the NTs built, so a failed launch changes nothing.
        let inst = self.core.add_instance(chain).map_err(|_| LaunchError::UnknownChain(chain))?;
        self.install(chain, inst, nts, place)?;
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
        if self.exec.workers.iter().any(|w| w.outstanding() > 0) || self.core.sched().has_ready() {
            return Some(Duration::ZERO);
        }
        if self.tx.pending() {
            return Some(Duration::from_millis(1));
        }
        let now = self.clock.now();
        let epoch = self.core.next_epoch().saturating_since(now);
        let core = self.core.poll_at().map(|at| at.saturating_since(now));
        // What only the driver knows: traffic since the epoch began.
        let busy = !self.stats.touched().is_empty();
        let tick = self
            .region_counters
            .iter()
            .any(|c| c.as_ref().and_then(|c| c.outbox.as_ref()).is_some_and(|o| o.is_waiting()))
            .then(|| Duration::from_nanos((self.ticked.as_nanos() + TICK_NS).saturating_sub(now.as_nanos())));
        busy.then_some(epoch).into_iter().chain(core).chain(tick).min()
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
        if !Arc::ptr_eq(&mat, &self.memo_table) {
            self.memo_table = mat.clone();
            self.mat_memo = None;
            self.mat_fast = (NO_MEMO, None);
        }
        // One poll in SAMPLE_EVERY is timed phase by phase for the meter's cost estimates.
        self.polls = self.polls.wrapping_add(1);
        let sampled = self.sampled();
        self.tx.sample(sampled);
        let mut work = self.drain_completions(now);
        // With worker threads, completions (egress of finished packets) belong to the rest of
        // the way, not to receiving: the receive phase starts after them.
        let rx_start = if sampled && work > 0 { self.clock.now() } else { now };
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
        for i in 0..self.region_counters.len() {
            if !self.region_counters[i].as_ref().and_then(|c| c.outbox.as_ref()).is_some_and(|o| o.is_waiting()) {
                continue;
            }
            let inst = InstanceId(i as u16);
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
            regions: &self.region_counters,
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
    fn drop_uncharged(&mut self, idx: u32, t: TenantId, why: Drop) {
        self.link().1.drop_uncharged(idx, t, why);
    }

    #[cold]
    fn drop_charged(&mut self, idx: u32, t: TenantId, why: Drop) {
        self.link().1.drop_charged(idx, t, why);
    }

    /// A received datagram, from `source`. Inlined at both of its calls: left to itself, the
    /// compiler kept it out of line once it had two, at ~20% more instructions a packet
    /// (callgrind, dummy 64 B).
    #[inline(always)]
    fn ingress(&mut self, idx: u32, m: RxMeta, now: Instant, mat: &Mat, source: Source) {
        // SAFETY: the dispatcher owns `idx` (just received, not yet handed to a worker).
        let (buf, d) = unsafe { self.slots.get(idx) };
        if m.truncated {
            return self.drop_unattributed(idx, Drop::Oversize);
        }
        let data = &buf[HEADROOM..HEADROOM + m.len as usize];
        // The source VTEP, at the node's VTEP port if it has one (replies go there).
        let (off, len, vni, src) = match self.framing {
            Framing::Ethernet => match layout::parse_outer(data) {
                Ok(o) => (
                    HEADROOM + o.vxlan_off as usize,
                    o.vxlan_len as usize,
                    o.vni,
                    Peer { addr: SocketAddr::new(o.src_ip, self.cfg.vtep_port.unwrap_or(o.src_port)), mac: o.src_mac },
                ),
                Err(e) => return self.drop_unattributed(idx, Drop::Parse(e)),
            },
            Framing::Datagram => match layout::parse_vxlan(data) {
                Ok(v) => {
                    let mut addr = m.src;
                    if let Some(p) = self.cfg.vtep_port {
                        addr.set_port(p);
                    }
                    (HEADROOM, m.len as usize, v, Peer { addr, mac: Default::default() })
                }
                // Not VXLAN: a peer's redirected packet, or a drop.
                Err(e) => return self.ingress_other(idx, m, e, now),
            },
        };
        // Parsed straight into the descriptor (a layout built on the stack and copied in cost
        // ~30 instructions a packet, and a store-forwarding stall).
        let parse_err = layout::parse_inner_into(&buf[off + vxlan::HEADER_LEN..off + len], &mut d.meta.inner).err();
        let packed = memo_key(vni, &d.meta.inner);
        let action = match self.mat_fast {
            (k, a) if k == packed => a,
            _ => Self::classify(&mut self.mat_memo, &mut self.mat_fast, mat, vni, &d.meta.inner, packed),
        };
        let (tenant, dag) = match action {
            Some(Action::Dag { tenant, dag }) => (tenant, Some(dag)),
            Some(Action::PassThrough { tenant }) => (tenant, None),
            Some(Action::Drop) => return self.drop_unattributed(idx, Drop::MatDrop),
            None => return self.drop_unattributed(idx, parse_err.map_or(Drop::NoRule, Drop::Parse)),
        };
        if tenant.index() >= MAX_TENANTS {
            return self.drop_unattributed(idx, Drop::TenantQuota);
        }
        // Only the tenant's own VTEPs may send on its VNIs (docs/endpoints.md, "Trust"): a frame
        // from elsewhere is counted and dropped before it is charged, admitted or learned from.
        if mat.restricts_sources() {
            match mat.source_check(vni, &src.addr.ip(), m.ifindex) {
                SourceCheck::Allowed => {}
                SourceCheck::Foreign => return self.drop_uncharged(idx, tenant, Drop::ForeignVtep),
                SourceCheck::WrongInterface => return self.drop_uncharged(idx, tenant, Drop::SpoofedVtep),
            }
        }
        if !self.core.admit(tenant, now) {
            return self.drop_uncharged(idx, tenant, Drop::RateLimit);
        }
        if let Err(e) = self.store.charge(idx, tenant, HEADROOM..HEADROOM + m.len as usize) {
            return self.drop_uncharged(idx, tenant, e);
        }
        // An endpoint that keeps its transmit offloads leaves inner TCP and UDP checksums
        // partial for a NIC to finish (docs/endpoints.md): finished here, before any NT reads
        // or updates them. (The parse compared the field with the pseudo-header: the payload is
        // summed only on a match.)
        if let Some(l) = d.meta.inner.as_ref().filter(|l| l.l4_partial) {
            let ip = off + vxlan::HEADER_LEN + l.l3_off as usize..off + vxlan::HEADER_LEN + l.l3_end as usize;
            complete_partial(&mut buf[ip], (l.l4_off - l.l3_off) as usize, l.key.proto);
        }
        let inner = &d.meta.inner;
        // Learning gives the sender's id: the descriptor keeps 4 bytes, not its 40-byte address
        // (written per packet, that cost ~20 instructions a packet).
        let src = match inner {
            Some(l) => self.fdb.learn(vni, l.src_mac, src),
            None => self.fdb.sender(src),
        };
        let flow_hash = flow_hash(buf, inner, off, len);
        // Field by field, in place: building a whole `Desc` and copying it cost more.
        d.meta.off = off as u16;
        d.meta.len = len as u16;
        d.meta.vni = vni;
        d.meta.tenant = tenant;
        d.src = src;
        d.flow_hash = flow_hash;
        d.rx_ns = m.arrival(now);
        d.verdict = None;
        d.charged = true;
        let Some(uid) = dag else {
            d.walk = Walk::start(DagUid::default());
            self.stats.count_rx(tenant, 1, len as u64);
            return self.egress(idx);
        };
        // In a pool behind a switch: a packet whose state another node holds goes there.
        if self.core.owners().on() && source == Source::Endpoint {
            self.stats.count_rx(tenant, 1, len as u64);
            return self.arrive_pooled(idx, uid, now);
        }
        // The route its arrivals take now (node-internal UID), unless the DAG is switching
        // between chain candidates or unknown.
        let Some(route) = self.core.dags().arriving(uid) else {
            self.stats.count_rx(tenant, 1, len as u64);
            return self.hold(idx, uid);
        };
        d.walk = Walk::start(DagUid(route));
        if self.pool.on {
            self.stats.count_rx(tenant, 1, len as u64);
            self.store.tag_route(idx, route);
            return self.enter_pooled(idx, now);
        }
        // It enters with the rest of its run, after the batch ([`Node::enter_arrivals`]),
        // which counts it received and tags its buffer with the route, a run at a time.
        self.arriving.push(idx, tenant, route, len as u32);
    }

    /// The MAT's action for a packet on `vni` whose inner frame is `inner`, through the memo
    /// of the last key (and into the packed one's when `packed` is not 0).
    #[inline(never)]
    fn classify(
        memo: &mut Option<(MatKey, Option<Action>)>,
        fast: &mut (u128, Option<Action>),
        mat: &Mat,
        vni: u32,
        inner: &Option<layout::InnerLayout>,
        packed: u128,
    ) -> Option<Action> {
        let key = match inner {
            Some(l) if l.l3 != InnerL3::Arp => MatKey { vni, proto: l.key.proto, dst: Some(rebuild(&l.key.dst)), dst_port: l.key.dst_port },
            _ => MatKey { vni, proto: 0, dst: None, dst_port: 0 },
        };
        let action = match memo {
            Some((k, a)) if *k == key => *a,
            _ => {
                let a = mat.lookup(&key);
                *memo = Some((key, a));
                a
            }
        };
        if packed != 0 {
            *fast = (packed, action);
        }
        action
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

    /// Admits a received packet of `tenant` (`stored` bytes from `HEADROOM`, `len` of them its
    /// VXLAN datagram): its ingress limit, a charge in the store, its receive counters. False:
    /// dropped, counted. (On the fields it needs, so that the caller keeps its descriptor. The
    /// usual path, [`Node::ingress`], writes the same steps out: calling this from there cost
    /// dummy 64 B 6–8% in wall time, alternating runs, for 4 more instructions a packet.)
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn charge_rx(
        core: &mut NodeCore,
        store: &mut Store,
        stats: &mut Stats,
        idx: u32,
        tenant: TenantId,
        stored: usize,
        len: usize,
        now: Instant,
    ) -> bool {
        let why = if !core.admit(tenant, now) {
            Drop::RateLimit
        } else {
            match store.charge(idx, tenant, HEADROOM..HEADROOM + stored) {
                Ok(()) => {
                    stats.count_rx(tenant, 1, len as u64);
                    return true;
                }
                Err(e) => e,
            }
        };
        stats.tenant_mut(tenant).drops[why.index()] += 1;
        store.release(idx);
        false
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
        let mut turns = 2 * self.region_counters.len().max(1);
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
            loop {
                match self.exec.workers[w].submit(work) {
                    Ok(()) => break,
                    Err(back) => {
                        // The ring is full: finish what has come back to make room.
                        work = back;
                        self.exec.wait_for_room(w, &self.work_timer);
                        self.drain_completions(now);
                    }
                }
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
        if let Some(Some(r)) = self.exec.inline.get_mut(inst.index()) {
            let t0 = sampled.then(|| self.work_timer.now_ns());
            // SAFETY: the dispatcher owns every index in the batch, each once (the scheduler
            // queues an index at most once).
            unsafe { r.run(&self.slots, batch, now, &self.work_timer) };
            if let Some(t0) = t0 {
                self.sample_nt_ns += self.work_timer.now_ns().saturating_sub(t0);
            }
        }
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
        let (tx, l, _, _) = self.parts();
        (tx, l)
    }

    /// The node's parts that move packets (the transmit half, the pool's data path), what they
    /// touch of it, and the core, borrowed apart.
    #[inline(always)]
    fn parts(&mut self) -> (&mut transmit::Transmit, transmit::Link<'_, B>, &mut redirect::PoolLink, &mut NodeCore) {
        let l = transmit::Link {
            backend: &mut self.backend,
            slots: &self.slots,
            store: &mut self.store,
            stats: &mut self.stats,
            fdb: &mut self.fdb,
            clock: &*self.clock,
        };
        (&mut self.tx, l, &mut self.pool, &mut self.core)
    }

    /// Sends a packet that finished its route ([`transmit::Transmit::egress`]).
    #[inline(always)]
    fn egress(&mut self, idx: u32) {
        let (tx, mut l) = self.link();
        tx.egress(&mut l, idx)
    }

    fn complete(&mut self, inst: InstanceId, batch: &[u32], now: Instant) {
        self.core.handle_completion(inst, batch.len() as u32);
        if let Some(Some(c)) = self.region_counters.get(inst.index()) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use snic_wire::layout::{FlowKey, InnerLayout};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// An inner frame of kind `l3` toward `dst`, with the protocol and port given.
    fn inner(l3: InnerL3, dst: IpAddr, proto: u8, dst_port: u16) -> Option<InnerLayout> {
        let key = FlowKey { src: IpAddr::V4(Ipv4Addr::UNSPECIFIED), dst, proto, src_port: 1, dst_port };
        Some(InnerLayout {
            dst_mac: Default::default(),
            src_mac: Default::default(),
            l3,
            l3_off: 14,
            l4_off: 34,
            l3_end: 60,
            key,
            l4_flags: 0,
            l4_partial: false,
        })
    }

    fn mat_key(vni: u32, l: &Option<InnerLayout>) -> MatKey {
        match l {
            Some(l) if l.l3 != InnerL3::Arp => MatKey { vni, proto: l.key.proto, dst: Some(l.key.dst), dst_port: l.key.dst_port },
            _ => MatKey { vni, proto: 0, dst: None, dst_port: 0 },
        }
    }

    proptest! {
        /// Two packets share a packed memo key exactly when they share a MAT key (small
        /// ranges, so that equal fields come up often).
        #[test]
        fn the_packed_memo_key_is_one_to_one_with_the_mat_key(
            a in (0u32..3, 0usize..4, 0u8..3, 0u16..3, 0u32..3),
            b in (0u32..3, 0usize..4, 0u8..3, 0u16..3, 0u32..3),
        ) {
            let frame = |(vni, kind, proto, port, ip): (u32, usize, u8, u16, u32)| {
                let v4 = IpAddr::V4(Ipv4Addr::from(ip));
                let l = match kind {
                    0 => inner(InnerL3::Ipv4, v4, proto, port),
                    1 => inner(InnerL3::Arp, v4, 0, 0),
                    2 => inner(InnerL3::Ipv6, IpAddr::V6(Ipv6Addr::from(ip as u128)), proto, port),
                    _ => None,
                };
                (vni << 22, l)
            };
            let ((va, la), (vb, lb)) = (frame(a), frame(b));
            let (ka, kb) = (memo_key(va, &la), memo_key(vb, &lb));
            let v6 = |l: &Option<InnerLayout>| l.is_some_and(|l| l.l3 == InnerL3::Ipv6);
            prop_assert_eq!(ka == 0, v6(&la), "IPv6 alone is not packed");
            if ka != 0 && kb != 0 {
                prop_assert_eq!(ka == kb, mat_key(va, &la) == mat_key(vb, &lb));
            }
        }

        #[test]
        fn no_frame_packs_to_the_empty_memo(vni in any::<u32>(), proto in any::<u8>(), port in any::<u16>(), ip in any::<u32>(), kind in 0usize..3) {
            let l = match kind {
                0 => inner(InnerL3::Ipv4, IpAddr::V4(Ipv4Addr::from(ip)), proto, port),
                1 => inner(InnerL3::Arp, IpAddr::V4(Ipv4Addr::from(ip)), 0, 0),
                _ => None,
            };
            // The ingress memo's hit test is one comparison, against a key no frame packs to.
            prop_assert_ne!(memo_key(vni, &l), NO_MEMO);
        }
    }
}
