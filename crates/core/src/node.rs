//! One node's decisions at an epoch's end, composed: [`NodeCore`].
//!
//! Once an epoch (EPOCH_LEN, the fair-sharing period) a node hands its counters to the core and
//! gets back what to do. [`NodeCore::handle_epoch`] runs, in this order:
//!
//! 1. the demand model and the fairness controller ([`Meter`]): counter deltas and the
//!    scheduler's arrivals in, DRF shares and ingress limits out;
//! 2. the NTs' measured costs to the scheduler (its dispatch quanta weigh them);
//! 3. each live chain's load to the elasticity policy ([`Elasticity`]), whose [`Act`]s —
//!    resume a victim, launch into a region, stop an instance — the driver carries out.
//!
//! Between epochs the driver asks [`NodeCore::wants_epoch`] whether anything an epoch looks
//! after is live (so that an idle node can sleep), and [`NodeCore::next_epoch`] when the next is
//! due.
//!
//! The packet path is the core's too ([`NodeCore::handle_arrival`] and the rest of
//! [`packets`]): the scheduler that queues packets at instances and hands out batches by
//! credits, the join table of parallel groups, and what happens to a packet between its steps.
//! The driver keeps each packet's [`crate::walk::Walk`] in its descriptor and carries out the
//! answers (run this batch on that instance, fork copies, launch on demand, transmit, drop). The
//! node's own tables (DAG routes, regions' contents) stay with the driver.
//!
//! Where regions run is decided here too: every [`PLACEMENT_PERIOD`] with worker threads and
//! automatic placement on, [`NodeCore::handle_placement`] shows the placement policy
//! ([`Placer`]) each running instance's measured cost and load, and returns the one move (if
//! any) the driver then carries out.
//!
//! The pool's agent ([`PoolAgent`]) is part of it: [`NodeCore::place`] is the whole on-demand
//! launch order (local room, then the pool, then the endpoint and a context switch), and each
//! epoch tells the agent whether this node has room, so that a chain placed on a peer comes
//! home once room has lasted ([`NodeCore::pool_epoch`]). So is the spill policy
//! ([`crate::pool::spill`]): a chain overloaded here with no room sends a share of its new
//! flows to a peer, and each epoch sees its whole load, home's and the peer's share.

use crate::elastic::{Act, ElasticConfig, Elasticity};
use crate::fair::FairConfig;
use crate::ids::{ChainId, InstanceId};
use crate::join::JoinTable;
use crate::meter::{Arrivals, Counters, Meter};
use crate::placement::{Move, Place, PlacementConfig, Placer, View, PLACEMENT_PERIOD};
use crate::pool::owner::{Owners, Slots};
use crate::pool::redirect::Redirects;
use crate::pool::spill::{Look, Spills};
use crate::pool::{LoadReport, MemberEvent, PoolAct, PoolAgent};
use crate::sched::{InstanceState, SchedConfig, Scheduler};
use crate::time::Instant;
use core::time::Duration;
use std::net::SocketAddr;

pub mod dags;
pub mod demand;
pub mod launching;
pub mod moving;
pub mod packets;
pub mod peers;
pub mod placing;
pub mod regions;
pub mod setup;

/// What a node's core is built from (its validated configuration's sections, and the node's
/// sizes).
#[derive(Debug, Clone, Copy)]
pub struct NodeCoreConfig {
    /// The fairness section.
    pub fair: FairConfig,
    /// The link, bit/s each way.
    pub link_bps: f64,
    /// Worker threads (their time is a resource of its own).
    pub workers: usize,
    /// Packet-store buffers.
    pub store_buffers: usize,
    /// Most tenants.
    pub max_tenants: usize,
    /// The elastic section.
    pub elastic: ElasticConfig,
    /// The pool agent's settings (its MONITOR_PERIOD follows the elastic section's).
    pub pool: crate::pool::AgentConfig,
    /// This node's state slot in a pool behind a switch ([`crate::pool::owner`]).
    pub slots: Option<Slots>,
    /// Moves regions between cores on its own ([`NodeCore::handle_placement`]).
    pub auto_place: bool,
    /// The placement policy's thresholds.
    pub placement: PlacementConfig,
    /// The scheduler's bounds and dispatch quantum.
    pub sched: SchedConfig,
    /// Packets being joined at once (the join table's slots; 0 for a node without parallel
    /// groups).
    pub join_slots: usize,
    /// PANIC-style scheduling (paper Fig. 14): a packet goes back to the scheduler after every
    /// NT of its step, not after the step.
    pub panic: bool,
}

/// node.yaml's defaults ([`crate::config::NodeSettings::default`], validated: the one place
/// they are written) for a node of up to 1,024 tenants, without parallel groups, PANIC mode or
/// a pool. A driver or a simulator sets what it models otherwise and takes the rest from here.
impl Default for NodeCoreConfig {
    fn default() -> Self {
        let c = crate::config::NodeSettings::default().validate().expect("node.yaml's defaults validate");
        NodeCoreConfig {
            fair: c.fair,
            link_bps: c.link_bps,
            workers: c.settings.workers,
            store_buffers: c.settings.store_buffers,
            max_tenants: 1024,
            elastic: c.elastic,
            pool: Default::default(),
            slots: None,
            auto_place: c.settings.auto_place,
            placement: PlacementConfig::default(),
            sched: SchedConfig::default(),
            join_slots: 0,
            panic: false,
        }
    }
}

/// What an epoch reads from the packet path and tells it: the arrivals at each step (for the
/// demand model) and each instance's measured cost. The scheduler is it on a node; a
/// simulator's fluid node may have no instances to tell.
pub trait PacketPath: Arrivals {
    /// Instances, by id `0..n`.
    fn instance_count(&self) -> usize;
    /// The chain of instance `inst`.
    fn chain_of(&self, inst: InstanceId) -> ChainId;
    /// The measured cost of a packet through `inst`'s chain, ns.
    fn set_cost(&mut self, inst: InstanceId, ns: f64);
}

impl PacketPath for Scheduler<u32> {
    fn instance_count(&self) -> usize {
        Scheduler::instance_count(self)
    }
    fn chain_of(&self, inst: InstanceId) -> ChainId {
        Scheduler::chain_of(self, inst)
    }
    fn set_cost(&mut self, inst: InstanceId, ns: f64) {
        Scheduler::set_cost(self, inst, ns)
    }
}

/// Whether a node can send packets to its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolReach {
    /// No pool, or no way to redirect packets (no pool key, or a frame backend).
    Alone,
    /// Packets can go to peers: a chain overloaded here may spill a share of its flows.
    Peers,
}

/// One node's epoch-time policy. See the module docs.
#[derive(Debug)]
pub struct NodeCore {
    /// Demand, fair shares and ingress limits (read: [`NodeCore::meter`]; changed through the
    /// verbs of [`setup`]).
    meter: Meter,
    /// Regions, launches, scale events, victims, rechaining (read: [`NodeCore::elastic`];
    /// told what the driver carried out through the verbs of [`regions`]).
    elastic: Elasticity,
    /// Where chains run when this node has no room: its peers.
    pool: PoolAgent,
    /// Which packets go to a peer (per chain, and per flow for a chain that spills).
    redirects: Redirects,
    /// Chains that spill a share of their flows to a peer, or may.
    spills: Spills,
    /// In a pool behind a switch, which node holds a flow's state.
    owners: Owners,
    /// Whether this node can redirect packets to its peers (a pool key, datagram framing): the
    /// driver says so ([`NodeCore::set_pool_reach`]).
    reach: PoolReach,
    /// The packet path's scheduler: instances, DAG routes, queues and credits. Packets go
    /// through [`NodeCore::handle_arrival`] and the other packet methods; the driver sets
    /// instances up and down through the verbs of [`setup`] as it carries out [`Act`]s (read:
    /// [`NodeCore::sched`]).
    sched: Scheduler<u32>,
    /// The DAG table: the routes DAGs' arrivals take, switches between forms, routes hosted
    /// for peers ([`dags`]).
    dags: crate::dags::DagTable<u32>,
    /// Which instance is in each region, and the launches under way ([`launching`]).
    launches: crate::launches::Launches,
    /// Packets waiting for a region or the pool ([`launching`]).
    waiting: crate::launches::Waiting<u32>,
    /// The declared chains' lives: live, going away, gone ([`setup`]).
    life: crate::chains::ChainLife,
    /// Credits each new instance gets ([`SchedConfig::credits`]).
    credits: u32,
    /// The synchronization buffer of parallel groups.
    joins: JoinTable<u32>,
    panic: bool,
    acts: Vec<Act>,
    pool_acts: Vec<PoolAct>,
    /// A buffer for the pool's decisions being carried out.
    pool_acts_out: Vec<PoolAct>,
    /// Placements on peers: asked, placed, coming home; the requests for them ([`placing`]).
    placements: crate::pool::placements::Placements,
    /// The generation each member was last heard with ([`NodeCore::pool_heard`]).
    incarnations: crate::pool::Incarnations,
    /// The pool's requests and notes, kept for a test ([`NodeCore::trace_pool`]).
    trace: Option<Vec<placing::PoolTraced>>,
    /// What happened: counters and recent events ([`NodeCore::events`]).
    events: crate::events::ElasticStats,
    placer: Placer,
    auto_place: bool,
    next_look: Instant,
    views: Vec<View>,
    /// The region moving to another core, if one is ([`moving`]).
    moving: Option<moving::MoveUnderWay>,
    /// Scratch for the DAGs' views an epoch of rechaining looks at ([`dags`]).
    dag_views: Vec<crate::rechain::DagView>,
}

impl NodeCore {
    /// A node's core, its first epoch starting `now`.
    pub fn new(cfg: NodeCoreConfig, now: Instant) -> Self {
        NodeCore {
            meter: Meter::new(cfg.fair, now, cfg.link_bps, cfg.workers, cfg.store_buffers, cfg.max_tenants),
            elastic: Elasticity::new(cfg.elastic),
            pool: PoolAgent::new(cfg.pool),
            redirects: Redirects::new(),
            spills: Spills::new(),
            owners: Owners::new(cfg.slots),
            reach: PoolReach::Alone,
            sched: Scheduler::new(cfg.sched),
            credits: cfg.sched.credits,
            dags: crate::dags::DagTable::new(),
            launches: crate::launches::Launches::new(cfg.elastic.regions, cfg.workers),
            waiting: crate::launches::Waiting::new(4 * cfg.sched.max_queue_per_tenant),
            life: crate::chains::ChainLife::new(),
            joins: JoinTable::new(cfg.join_slots),
            panic: cfg.panic,
            acts: Vec::new(),
            pool_acts: Vec::new(),
            pool_acts_out: Vec::new(),
            placements: Default::default(),
            incarnations: Default::default(),
            trace: None,
            events: Default::default(),
            placer: Placer::new(cfg.placement),
            auto_place: cfg.auto_place,
            next_look: Instant::ZERO,
            views: Vec::new(),
            moving: None,
            dag_views: Vec::new(),
        }
    }

    /// True when the epoch is over.
    #[inline]
    pub fn due(&self, now: Instant) -> bool {
        self.meter.due(now)
    }

    /// When the next epoch ends.
    pub fn next_epoch(&self) -> Instant {
        self.meter.next_epoch()
    }

    /// True while an epoch has anything to look after in the core: tenants with demand or
    /// limits, instances stopping, or (with elasticity) running instances that may scale in or
    /// be descheduled.
    pub fn wants_epoch(&self) -> bool {
        let sched = &self.sched;
        !self.meter.quiet()
            || sched.has_parked()
            || self.pool.has_placed()
            || !self.spills.is_empty()
            || (self.elastic.on() && (0..sched.instance_count()).any(|i| sched.state(InstanceId(i as u16)) == InstanceState::Running))
    }

    /// When the core next needs the driver to call it if nothing arrives meanwhile (as
    /// smoltcp's `Interface::poll_at`): the end of the epoch while one has anything to look
    /// after ([`NodeCore::wants_epoch`]) or the node's tables change (a DAG switching forms, a
    /// route or a chain going away, packets waiting for a launch or the pool), and the next
    /// launch's time; `None`: only traffic or a command needs it. The driver merges it with its
    /// own deadlines (batches held by threads, NTs' timers).
    pub fn poll_at(&self) -> Option<Instant> {
        self.poll_at_with(false)
    }

    /// How long the driver may wait for traffic: zero while the scheduler has items to
    /// dispatch; else until [`NodeCore::poll_at`], the epoch's end if there was `traffic` since
    /// it began, or the driver's own deadline `driver` (NTs' timers), whichever is first;
    /// `None`: only traffic or a command needs a poll.
    pub fn poll_timeout(&self, now: Instant, traffic: bool, driver: Option<Instant>) -> Option<Duration> {
        if self.sched.has_ready() {
            return Some(Duration::ZERO);
        }
        let at = self.poll_at_with(traffic).into_iter().chain(driver).min()?;
        Some(at.saturating_since(now))
    }

    fn poll_at_with(&self, traffic: bool) -> Option<Instant> {
        let busy = traffic
            || self.wants_epoch()
            || self.dags.switching()
            || self.dags.retiring()
            || self.life.retiring()
            || !self.waiting.is_empty()
            || self.moving.is_some();
        let epoch = busy.then(|| self.meter.next_epoch());
        epoch.into_iter().chain(self.next_launch_at()).min()
    }

    /// The epoch ends at `now`: `counters` are the node's (cumulative). The demand model drains the scheduler's arrivals, and
    /// the scheduler is given the NTs' measured costs. Returns what the elasticity policy
    /// decided, for the driver to carry out (and the pool agent's decisions wait in
    /// [`NodeCore::pool_epoch`]).
    pub fn handle_epoch(&mut self, now: Instant, counters: &impl Counters) -> &[Act] {
        Self::measure(&mut self.meter, &mut self.sched, now, counters);
        self.sched.set_quantum_alone(self.meter.sharing());
        let life = std::mem::take(&mut self.life);
        self.handle_loads(now, life.len(), Meter::chain_load, |c| life.is_live(c));
        self.life = life;
        &self.acts
    }

    /// [`NodeCore::handle_epoch`] for a node whose packet path is not the scheduler (a
    /// simulator's fluid node): `path` gives the epoch's arrivals and takes the NTs' costs.
    pub fn handle_fluid_epoch(
        &mut self,
        now: Instant,
        path: &mut impl PacketPath,
        counters: &impl Counters,
        chains: usize,
        live: impl Fn(ChainId) -> bool,
    ) -> &[Act] {
        Self::measure(&mut self.meter, path, now, counters);
        self.handle_loads(now, chains, Meter::chain_load, live)
    }

    /// The demand model's epoch: `path`'s arrivals and the counters in, and each instance of
    /// `path` given its chain's measured cost.
    fn measure(meter: &mut Meter, path: &mut impl PacketPath, now: Instant, counters: &impl Counters) {
        meter.end_epoch(now, path, counters);
        for i in 0..path.instance_count() {
            let inst = InstanceId(i as u16);
            path.set_cost(inst, meter.chain_cost_ns(path.chain_of(inst)));
        }
    }

    /// The epoch's decisions on chains, given each chain's load of the epoch (instances' worth;
    /// exactly 0 only if nothing arrived): elasticity, spills and the pool's moves back. A
    /// node's epoch ([`NodeCore::handle_epoch`]) calls it with the demand model's loads; a
    /// driver that knows its chains' loads without counters (a fluid simulator) calls it
    /// directly.
    pub fn handle_loads(
        &mut self,
        now: Instant,
        chains: usize,
        load_of: impl Fn(&Meter, ChainId) -> f64,
        live: impl Fn(ChainId) -> bool,
    ) -> &[Act] {
        self.acts.clear();
        if self.elastic.on() {
            // The pool's decisions hold as long as the auto-scaler's.
            self.pool.set_monitor_period(self.elastic.monitor_period());
            for c in 0..chains {
                let chain = ChainId(c as u16);
                if !live(chain) {
                    continue;
                }
                let load = self.spills.whole_load(chain, load_of(&self.meter, chain), &mut self.redirects);
                self.elastic.epoch(now, chain, load, &mut self.acts);
                // A chain that runs as one instance does not spill its new flows to a peer's
                // instance either (each would keep its own state).
                if self.reach == PoolReach::Peers && !self.elastic.is_single_instance(chain) {
                    let look = Look {
                        over_since: self.elastic.over_since(chain),
                        room: self.elastic.has_room(),
                        load: self.elastic.smoothed_load(chain),
                        capacity: self.elastic.capacity(chain),
                    };
                    let meter = &self.meter;
                    let key = || meter.chain_key(chain);
                    self.spills.epoch(now, chain, key, look, &self.pool, &mut self.redirects, &mut self.pool_acts);
                }
            }
            if !self.spills.is_empty() {
                let meter = &self.meter;
                let key = |c: ChainId| meter.chain_key(c);
                self.spills.retain_live(&live, key, &mut self.redirects, &mut self.pool_acts);
            }
            if self.pool.has_placed() {
                // Room: a region a launch could take without stopping a running chain.
                let room = self.elastic.has_room();
                self.pool.epoch(now, |_| room, &mut self.pool_acts);
            }
        }
        &self.acts
    }

    /// The pool agent's decisions since the last call (chains to bring home, chains whose peer
    /// died), moved into `out`.
    /// A membership change: a peer that went down loses what it ran for this node, whole
    /// chains and spilled flows ([`PoolAct::Lost`]), and the state slot it held.
    fn handle_member(&mut self, now: Instant, event: MemberEvent, acts: &mut Vec<PoolAct>) {
        if let MemberEvent::Down(peer) = event {
            let meter = &self.meter;
            let key = |c: ChainId| meter.chain_key(c);
            self.spills.lost(peer, key, &mut self.redirects, acts);
            if let Some(data) = self.pool.data_of(peer) {
                self.owners.unpin(data);
            }
        }
        self.pool.handle_member(event, acts);
        self.owners.set_holders(now, self.pool.slot_holders(now));
    }

    /// A member's load report (`from`: its pool address): its load, and the state slot it
    /// holds.
    pub fn handle_report(&mut self, now: Instant, from: SocketAddr, report: LoadReport) {
        self.pool.handle_report(now, from, report);
        self.owners.set_holders(now, self.pool.slot_holders(now));
    }

    /// The peer asked to take a share of `chain`'s flows ([`PoolAct::Spill`]) hosts its DAG at
    /// data address `data`: new flows in the share go there from now.
    /// The peer asked to take a share of `chain`'s flows refused (or did not answer): it is not
    /// asked again until it reports anew, and the next epoch may choose another.
    fn spill_failed(&mut self, now: Instant, chain: ChainId, peer: SocketAddr) {
        self.pool.refused(peer);
        self.spills.failed(now, chain);
    }

    /// Where the running instances should run, looked at once every
    /// [`PLACEMENT_PERIOD`] (and not while a move is under way: it finishes first), with
    /// automatic placement on and `workers` worker threads; `at[i]` is where instance `i`'s
    /// region runs now (missing: on the dispatcher's thread). Returns the one move to make now,
    /// if any, which the driver carries out and then reports with [`NodeCore::placed`]. Each
    /// instance's cost and load are the demand model's of the last epoch (its chain's load
    /// split evenly over the chain's instances).
    pub fn handle_placement(&mut self, now: Instant, at: &[Place], workers: usize) -> Option<Move> {
        let sched = &self.sched;
        if !self.auto_place || workers == 0 || self.moving.is_some() || now < self.next_look {
            return None;
        }
        self.next_look = now + PLACEMENT_PERIOD;
        self.views.clear();
        for i in 0..sched.instance_count() {
            let id = InstanceId(i as u16);
            if sched.state(id) != InstanceState::Running {
                continue;
            }
            let chain = sched.chain_of(id);
            let n = sched.instances_of(chain).len().max(1) as f64;
            let at = at.get(i).copied().unwrap_or(Place::Dispatcher);
            self.views.push(View { id, cost_ns: self.meter.chain_cost_ns(chain), load: self.meter.chain_load(chain) / n, at });
        }
        self.placer.decide(&self.views, workers)
    }

    /// Instance `inst`'s region moved (or its slot is reused): the placement policy starts its
    /// history afresh.
    pub fn placed(&mut self, inst: InstanceId) {
        self.placer.forget(inst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::{DagRoute, NtMask, Step};
    use crate::ids::{DagUid, TenantId};
    use crate::meter::TenantCounters;
    use crate::walk::Walk;
    use core::time::Duration;

    /// A node's counters: tenants that received `rx` packets so far (those `stopped`, fewer), and instance `i`'s NT
    /// having run `n` packets at `cost[i]` ns each (no time for instances past `cost`).
    #[derive(Default)]
    struct Count {
        rx: u64,
        /// Tenants whose count stopped at a value of its own.
        stopped: Vec<(TenantId, u64)>,
        touched: Vec<TenantId>,
        cost: Vec<u64>,
        n: u64,
    }

    impl Counters for Count {
        fn touched(&self) -> &[TenantId] {
            &self.touched
        }
        fn tenant(&self, t: TenantId) -> TenantCounters {
            let rx = self.stopped.iter().find(|s| s.0 == t).map_or(self.rx, |s| s.1);
            TenantCounters { rx_packets: rx, rx_bytes: rx * 100, ..TenantCounters::default() }
        }
        fn store_buffers(&self, _: TenantId) -> u64 {
            0
        }
        fn nt_time(&self, inst: InstanceId, _: usize) -> (u64, u64) {
            self.cost.get(inst.index()).map_or((0, 0), |c| (c * self.n, self.n))
        }
        fn lost_shared(&self) -> u64 {
            0
        }
        fn lost_own(&self, _: TenantId) -> u64 {
            0
        }
    }

    /// While two tenants send, a batch is bounded to a quantum of work even with one instance
    /// ready (the other's packets may wait unread behind it); 10 ms after all but one stopped,
    /// the one left takes whole batches again.
    #[test]
    fn batches_are_bounded_while_tenants_share_the_node_and_whole_for_one_alone() {
        let epoch = Duration::from_millis(1);
        let cfg = NodeCoreConfig { fair: FairConfig { epoch, ..FairConfig::default() }, max_tenants: 4, ..NodeCoreConfig::default() };
        let mut core = NodeCore::new(cfg, Instant::ZERO);
        core.meter.set_tenant(TenantId(1), 1.0);
        core.meter.set_tenant(TenantId(2), 1.0);
        let mut counters = Count { touched: vec![TenantId(1), TenantId(2)], ..Count::default() };
        let mut now = Instant::ZERO;
        let mut step = |core: &mut NodeCore, counters: &mut Count| {
            now = now + epoch;
            counters.rx += 10;
            core.handle_epoch(now, counters);
            core.sched.config().quantum_alone
        };
        assert!(!step(&mut core, &mut counters), "the first epoch only reads the counters");
        assert!(!core.sched.config().quantum_alone);
        assert!(step(&mut core, &mut counters), "two tenants sent");
        counters.stopped = vec![(TenantId(2), counters.rx)];
        for e in 1..=10 {
            assert!(step(&mut core, &mut counters), "tenant 2 sent {e} ms ago");
        }
        assert!(!step(&mut core, &mut counters), "tenant 2 last sent 11 ms ago: tenant 1 is alone");
    }

    #[test]
    fn a_long_instance_on_the_dispatchers_thread_is_moved_to_a_worker_after_three_looks_a_period_apart() {
        let cfg = NodeCoreConfig {
            fair: FairConfig::default(),
            link_bps: 25e9,
            workers: 1,
            store_buffers: 1024,
            max_tenants: 4,
            elastic: ElasticConfig::default(),
            auto_place: true,
            ..NodeCoreConfig::default()
        };
        let mut core = NodeCore::new(cfg, Instant::ZERO);
        // Chain 0 costs 20 µs a packet, chain 1 100 ns: both on the dispatcher's thread.
        let mut insts = Vec::new();
        for name in ["long", "short"] {
            let chain = core.add_chain(&[name], setup::Instances::Many);
            let inst = core.sched.add_instance(chain, 64).unwrap();
            core.meter.add_instance(chain, inst, &[None], false);
            insts.push(inst);
        }
        let at = [Place::Dispatcher, Place::Dispatcher];
        let mut counters = Count { cost: vec![20_000, 100], ..Count::default() };
        let epoch = FairConfig::default().epoch;
        let (mut now, mut looks, mut moved) = (Instant::ZERO, 0, None);
        while now < Instant::ZERO + PLACEMENT_PERIOD * 10 && moved.is_none() {
            now = now + epoch;
            counters.n += 300;
            core.handle_epoch(now, &counters);
            core.moving = Some(moving::MoveUnderWay { inst: insts[1], to: Place::Worker(0), since: now });
            assert_eq!(core.handle_placement(now, &at, 1), None, "no look while a move is under way");
            core.moving = None;
            let before = core.next_look;
            moved = core.handle_placement(now, &at, 1);
            if core.next_look != before {
                looks += 1;
                assert!(looks == 1 || core.next_look == before + PLACEMENT_PERIOD, "a look once a period");
            }
        }
        assert_eq!(moved, Some(Move { id: insts[0], to: Place::Worker(0) }), "the long instance goes to the worker");
        assert_eq!(looks, 3, "after `hold` looks in a row");
        // Without workers or with automatic placement off, nothing is proposed.
        assert_eq!(core.handle_placement(now + PLACEMENT_PERIOD * 5, &at, 0), None);
        core.auto_place = false;
        assert_eq!(core.handle_placement(now + PLACEMENT_PERIOD * 10, &at, 1), None);
    }

    #[test]
    fn an_epoch_measures_demand_and_scales_a_chain_its_load_outgrows() {
        let epoch = Duration::from_millis(1);
        let cfg = NodeCoreConfig {
            fair: FairConfig { epoch, ..FairConfig::default() },
            link_bps: 25e9,
            workers: 0,
            store_buffers: 1024,
            max_tenants: 4,
            elastic: ElasticConfig { regions: 2, autoscale: true, monitor_period: Duration::from_millis(3), ..ElasticConfig::default() },
            auto_place: false,
            ..NodeCoreConfig::default()
        };
        let mut core = NodeCore::new(cfg, Instant::ZERO);
        let chain = core.add_chain(&["nt"], setup::Instances::Many);
        // One instance of 100 kpps, running in region 0.
        let inst = core.sched.add_instance(chain, 64).unwrap();
        core.meter.add_instance(chain, inst, &[Some(100_000.0)], false);
        let region = core.elastic.prelaunch(chain, Instant::ZERO).unwrap();
        core.elastic.running(region);
        core.meter.set_tenant(TenantId(1), 1.0);
        core.sched.set_dag(DagUid(1), DagRoute::new(vec![Step { chain, mask: NtMask::all(1) }]));
        assert!(core.wants_epoch(), "a running elastic instance may scale in");

        // 150 packets a millisecond: 1.5 instances' worth, held for more than a period.
        let (mut rx, mut launched) = (0u64, None);
        for e in 1..=20u64 {
            for k in 0..150u32 {
                let _ = core.handle_arrival(&mut Walk::start(DagUid(1)), Instant::ZERO, TenantId(1), k as u64, k);
                let mut out = Vec::new();
                if let Some(i) = core.poll_dispatch(&mut out, 64) {
                    core.handle_completion(i, out.len() as u32);
                }
            }
            rx += 150;
            let now = Instant::ZERO + epoch * e as u32;
            let counters = Count { rx, touched: vec![TenantId(1)], ..Count::default() };
            let acts = core.handle_epoch(now, &counters);
            if let Some(a) = acts.first() {
                launched = Some((e, *a));
                break;
            }
        }
        let (e, act) = launched.expect("the chain scaled out");
        assert_eq!(act, Act::Launch { chain, region: 1, evict: None });
        assert!(e >= 4, "not before a whole MONITOR_PERIOD of overload (epoch {e})");
        assert!((core.meter.chain_load(chain) - 1.5).abs() < 0.01, "load {}", core.meter.chain_load(chain));
    }
}
