//! The data-plane thread of the daemon: owns the node, applies plans, publishes snapshots.
//!
//! A new plan is applied to the running node, by what changed: tenants (weights, quotas, receive
//! queues), forwarding entries, chains (a chain the new plan still has keeps its instances and
//! their NTs' state; new ones are launched; those gone finish what they hold and stop), DAG
//! routes (a packet finishes the route it entered on) and the MAT, swapped whole. Traffic never
//! stops. If a change fails half way, the node is drained and rebuilt on the same socket with
//! the previous deployment (NT state and learned MACs then start afresh), and the apply fails.

use super::config::{Config, RxQueues};
use super::handback::Returned;
use super::pool::PoolLink;
use super::pool_work::PoolWork;
use super::routes::Interfaces;
use crate::deploy::deploy;
use anyhow::Context;
use serde::Serialize;
use snic_control::plan::{HostRequest, Plan, RoutePlan, TenantPlan};
use snic_core::config::{AfXdpSection, Io};
use snic_core::ids::{ChainId, DagUid, TenantId};
use snic_core::node::NodeCoreConfig;
use snic_core::pool::{AgentConfig, LoadReport, MemberEvent};
use snic_core::sched::InstanceState;
use snic_dataplane::backend::udp::UdpBackend;
use snic_dataplane::backend::{Backend, Waker};
use snic_dataplane::elastic::{Event, EventKind};
use snic_dataplane::node::{MonotonicClock, Place};
use snic_dataplane::{Drop, Node, NodeConfig};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Counters of one tenant, as last published.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TenantSnap {
    /// Tenant id.
    pub id: u16,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Receive rate over the last interval.
    pub rx_pps: f64,
    /// Transmit rate over the last interval.
    pub tx_pps: f64,
    /// Drops by reason (non-zero).
    pub drops: Vec<(&'static str, u64)>,
    /// Packet-store buffers held now.
    pub store_buffers: u32,
    /// Fair sharing: the last epoch's result.
    pub fair: FairSnap,
    /// Receive-to-transmit latency quantiles of this tenant's packets, ns (a sample).
    pub latency_p50_ns: u64,
    /// p99.
    pub latency_p99_ns: u64,
    /// Its MACs in the forwarding table: learned, bound, not learned at the bound, aged out.
    pub fdb: FdbSnap,
}

/// A tenant's part of the forwarding table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FdbSnap {
    /// MACs learned on its VNIs now.
    pub learned: u32,
    /// Its bound.
    pub bound: u32,
    /// New MACs not learned because it was at its bound (once per MAC and VTEP seen).
    pub refused: u64,
    /// MACs forgotten for lack of traffic.
    pub aged: u64,
}

/// A tenant's fair share, as of the last epoch.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FairSnap {
    /// Its dominant resource (largest demand relative to capacity), if it has demand.
    pub dominant: Option<String>,
    /// Granted share of the dominant resource, 0..=1.
    pub dominant_share: f64,
    /// Fraction of its demand granted, 0..=1.
    pub fraction: f64,
    /// Ingress limit in packets per second (null: not limited).
    pub limit_pps: Option<f64>,
    /// Epochs that ended with it limited, since it was applied.
    pub limited_epochs: u64,
    /// Measured demand per resource (resource units per second; `store` in buffers), in the
    /// unit of each: a tenant that offers more than the node has is shown wanting at most the
    /// whole of its dominant resource, its vector scaled down whole (`offered_pps` says by how
    /// much it asks to go over).
    pub demand: Vec<(String, f64)>,
    /// Packets per second it offers at ingress (smoothed), before any limit.
    pub offered_pps: f64,
    /// Allocation per resource, same units.
    pub allocation: Vec<(String, f64)>,
}

/// One resource of the node.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ResourceSnap {
    /// Name.
    pub name: String,
    /// Capacity.
    pub capacity: f64,
    /// The node has it once, whatever its dispatcher threads (the link); otherwise each thread
    /// has its own (its core, its store), and a snapshot of several adds them up.
    #[serde(skip)]
    pub node_wide: bool,
}

/// One region as last published.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RegionSnap {
    /// The dispatcher thread it belongs to (`data_cores`; 0 with one).
    pub thread: u16,
    /// Region (instance) id, on its thread.
    pub region: u16,
    /// `launching`, `running`, `draining` or `victim` (loaded, not running).
    pub state: &'static str,
    /// NTs of its chain.
    pub chain: Vec<String>,
    /// Packets waiting for it.
    pub queued: usize,
    /// Free credits.
    pub credits: u32,
    /// The core it runs on: `the data-plane thread` or `worker N` (regions move between them
    /// with `auto_place`).
    pub place: String,
    /// Packets the region has run.
    pub packets: u64,
    /// Per NT of the chain: (name, packets processed, packets dropped).
    pub nts: Vec<(String, u64, u64)>,
    /// The NTs' own counters (`Nt::counters`): (NT, counter, value).
    pub counters: Vec<(String, &'static str, u64)>,
}

/// A chain that runs, as the pool sees it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChainSnap {
    /// Its pool-wide key (`ChainKey::of_names` of its NTs).
    pub key: u64,
    /// Running instances.
    pub instances: usize,
    /// The last epoch's load, in instances' worth.
    pub load: f64,
}

/// What the data plane publishes for status and metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// Per tenant of the plan.
    pub tenants: Vec<TenantSnap>,
    /// Per region.
    pub regions: Vec<RegionSnap>,
    /// Drops before a tenant was known.
    pub unattributed_drops: Vec<(&'static str, u64)>,
    /// Receive → transmit latency quantiles, ns.
    pub latency_p50_ns: u64,
    /// p99.
    pub latency_p99_ns: u64,
    /// Node rebuilds since start.
    pub rebuilds: u64,
    /// Messages the data sockets received, and the datagrams they carried: more datagrams than
    /// messages when runs arrive coalesced (GRO on the receiving interface, docs/endpoints.md).
    pub rx_messages: u64,
    /// The datagrams.
    pub rx_datagrams: u64,
    /// Packets received and sent through the kernel's own stack beside a bypass backend
    /// (AF_XDP: outer fragments the kernel reassembled; frames to a next hop it had not
    /// resolved yet).
    pub rx_via_kernel: u64,
    /// See `rx_via_kernel`.
    pub tx_via_kernel: u64,
    /// Runs sent joined into one TCP super-packet through `egress_tap`, and the datagrams they
    /// carried.
    pub tx_joined_writes: u64,
    /// See `tx_joined_writes`.
    pub tx_joined_datagrams: u64,
    /// Joined runs the kernel refused (their datagrams went out of the data socket instead).
    pub tx_joined_refused: u64,
    /// Resources fair sharing divides.
    pub resources: Vec<ResourceSnap>,
    /// Fair-sharing epochs run.
    pub epochs: u64,
    /// Elastic NTs: counters and recent events.
    pub elastic: ElasticSnap,
    /// Chains with a running instance: their pool-wide key, instances and measured load.
    pub chains: Vec<ChainSnap>,
    /// DAGs this node hosts for peers.
    pub hosted: Vec<HostedSnap>,
    /// Chains this node sends to peers.
    pub redirects: Vec<RedirectSnap>,
    /// Redirected packets this node passed on toward the peer that runs them (a pass-through
    /// node on the pool's links), and their bytes.
    pub pass_through_packets: u64,
    /// Their bytes.
    pub pass_through_bytes: u64,
    /// Behind a switch: this node's state slot, who holds the others, packets forwarded to
    /// their owner and received as the owner.
    pub owners: Option<OwnersSnap>,
    /// While the node drains: the flows whose state it still holds (both directions of each,
    /// by hash), named to its peers by the pool thread.
    #[serde(skip)]
    pub pins: Vec<u64>,
    /// True while the node drains.
    pub draining: bool,
    /// The members up as the node's pool agent knows them (the pool thread shows them).
    #[serde(skip)]
    pub pool_peers: Vec<PoolPeerSnap>,
    /// When the data plane published this (it does every 250 ms while it runs).
    #[serde(skip)]
    pub published: Option<Instant>,
}

/// A member up, as the node's pool agent knows it.
#[derive(Debug, Clone)]
pub struct PoolPeerSnap {
    /// Its pool address.
    pub addr: SocketAddr,
    /// Its last load report, while it counts (fresh).
    pub report: Option<LoadReport>,
    /// How old that report was when this was published.
    pub report_age: Option<Duration>,
    /// Hops from this node (`u32::MAX`: the pool's links do not reach it).
    pub hops: u32,
}

/// The state slots of a pool behind a switch, as this node sees them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OwnersSnap {
    /// This node's slot, and the pool's count.
    pub slot: u16,
    /// See `slot`.
    pub slots: u16,
    /// The members holding the other slots: [slot, data address].
    pub holders: Vec<(u16, String)>,
    /// Slots more than one node claims (a misconfigured pool).
    pub conflicts: Vec<u16>,
    /// Packets this node sent to the node holding their state.
    pub forwarded: u64,
    /// Packets peers sent to this node as their state's owner.
    pub received: u64,
    /// Flows of draining peers this node brings back to them.
    pub pinned: usize,
}

/// How often the data plane publishes its snapshot.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// A data plane that has not published for this long is reported down.
pub const STALE_AFTER: Duration = Duration::from_secs(2);

impl Snapshot {
    /// Whether the data plane is running, and how long ago it last published.
    pub fn health(&self, now: Instant) -> (bool, Duration) {
        let age = self.published.map_or(Duration::MAX, |t| now.saturating_duration_since(t));
        (age < STALE_AFTER, age)
    }
}

/// Elastic NTs, as last published.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ElasticSnap {
    /// Chains come and go from a pool of regions.
    pub enabled: bool,
    /// Emulated launch delay, ms.
    pub launch_delay_ms: f64,
    /// Effective MONITOR_PERIOD, ms.
    pub monitor_period_ms: f64,
    /// Smoothed time to build a chain's NTs (the real instantiation cost), µs.
    pub build_us: f64,
    /// Counters: prelaunches, launches, resumes, context_switches, scale_outs, scale_ins,
    /// deschedules, endpoint_packets, region_shortfalls, rechains, moves.
    pub counters: Vec<(&'static str, u64)>,
    /// The most recent events, oldest first.
    pub events: Vec<EventSnap>,
}

/// One elastic event.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EventSnap {
    /// When, ms on the node's clock.
    pub at_ms: f64,
    /// The chain's NTs.
    pub chain: String,
    /// The region.
    pub region: Option<usize>,
    /// What happened.
    pub event: String,
    /// For `running`: from request to running; for launches: the NTs' build time (µs).
    pub took_us: f64,
}

enum Cmd {
    Deploy(Plan, mpsc::Sender<anyhow::Result<()>>),
    /// Host a peer's DAG (its data address, the request): the hosted DAG's number here.
    Host(SocketAddr, HostRequest, mpsc::Sender<Result<u32, String>>),
    /// Redirect a DAG (its UID here) to a peer's data address, which hosts it as the number,
    /// in its incarnation of that generation.
    Redirect(DagUid, SocketAddr, u32, u64, mpsc::Sender<Result<(), String>>),
    /// The peer at this data address is down: what went there runs here again, what it was
    /// hosted here for goes.
    PeerDown(SocketAddr),
    /// A member's load report (its pool address), for the node's pool agent.
    PoolReport(SocketAddr, LoadReport),
    /// A draining member (its data address) holds the state of these flows.
    Pins(SocketAddr, Vec<u64>),
    /// Start draining (true) or stop.
    Drain(bool, mpsc::Sender<()>),
    /// A membership change, for the node's pool agent.
    Member(MemberEvent),
    /// The pool thread, to ask peers to host chains this node has no room for.
    SetPool(PoolLink),
    /// The home node at this data address no longer needs the DAG hosted here as the number.
    Unhost(SocketAddr, u32),
    /// The home node at this data address takes the DAG hosted here as the number back, with
    /// its chains' state, once the packets it sent the DAG (the count) have arrived.
    Return(SocketAddr, u32, u64, mpsc::Sender<Returned>),
    /// The interfaces the node reaches tenants' VTEPs through, as the kernel routes now.
    Interfaces(Interfaces),
}

/// A handle on the data-plane thread for the other threads (the pool's, the API's).
#[derive(Clone)]
pub struct DpLink {
    tx: mpsc::Sender<Cmd>,
    waker: Option<Waker>,
    /// The node's other dispatcher threads (`data_cores`), for what each must hear (draining).
    others: Arc<Vec<(mpsc::Sender<Cmd>, Option<Waker>)>>,
}

impl DpLink {
    /// Sends `cmd` without waiting for an answer.
    fn tell(&self, cmd: Cmd) {
        let _ = self.tx.send(cmd);
        self.wake();
    }

    /// Ends the data plane's idle wait: an answer it waits for has come.
    pub fn wake(&self) {
        if let Some(w) = &self.waker {
            w.wake();
        }
    }

    /// A member's load report (`from`: its pool address).
    pub fn pool_report(&self, from: SocketAddr, report: LoadReport) {
        self.tell(Cmd::PoolReport(from, report));
    }

    /// A draining member (`owner`: its data address) holds the state of these flows.
    pub fn pool_pins(&self, owner: SocketAddr, flows: Vec<u64>) {
        self.tell(Cmd::Pins(owner, flows));
    }

    /// Starts draining (`true`) or stops, on every dispatcher thread.
    pub fn drain(&self, on: bool) -> Result<(), String> {
        for (tx, waker) in self.others.iter() {
            DpLink { tx: tx.clone(), waker: waker.clone(), others: Arc::default() }.ask(|r| Cmd::Drain(on, r))?;
        }
        self.ask(|r| Cmd::Drain(on, r))
    }

    /// A membership change.
    pub fn member(&self, event: MemberEvent) {
        self.tell(Cmd::Member(event));
    }

    /// The home node at data address `home` no longer needs its DAG hosted here as `route`.
    pub fn unhost(&self, home: SocketAddr, route: u32) {
        self.tell(Cmd::Unhost(home, route));
    }

    fn ask<T>(&self, cmd: impl FnOnce(mpsc::Sender<T>) -> Cmd) -> Result<T, String> {
        self.ask_within(Duration::from_secs(10), cmd)
    }

    fn ask_within<T>(&self, most: Duration, cmd: impl FnOnce(mpsc::Sender<T>) -> Cmd) -> Result<T, String> {
        let (reply, answer) = mpsc::channel();
        self.tx.send(cmd(reply)).map_err(|_| "the data plane has stopped".to_string())?;
        self.wake();
        answer.recv_timeout(most).map_err(|_| "the data plane did not answer".to_string())
    }

    /// Gives the DAG hosted here as `hosted` back to the home node at data address `home`,
    /// once the `sent` packets it sent the DAG have arrived: waits until its chains have
    /// stopped, and returns their state.
    pub fn give_back(&self, home: SocketAddr, hosted: u32, sent: u64) -> Returned {
        self.ask_within(super::handback::RETURN_TIMEOUT, |r| Cmd::Return(home, hosted, sent, r))?
    }

    /// Hosts DAG `req` for the peer whose data address is `home`: its number here.
    pub fn host(&self, home: SocketAddr, req: HostRequest) -> Result<u32, String> {
        self.ask(|r| Cmd::Host(home, req, r))?
    }

    /// The peer at data address `peer` is down (fire and forget).
    pub fn peer_down(&self, peer: SocketAddr) {
        self.tell(Cmd::PeerDown(peer));
    }

    /// Sends DAG `dag`'s packets to the peer at data address `peer`, which hosts it as `hosted`.
    pub fn redirect(&self, dag: DagUid, peer: SocketAddr, hosted: u32, gen: u64) -> Result<(), String> {
        self.ask(|r| Cmd::Redirect(dag, peer, hosted, gen, r))?
    }
}

/// A DAG this node hosts for a peer, as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct HostedSnap {
    /// The home node's data address.
    pub home: String,
    /// The tenant there.
    pub tenant: String,
    /// The DAG there.
    pub dag: String,
    /// Its number here.
    pub route: u32,
    /// The local tenant its packets are charged to.
    pub local_tenant: u16,
    /// Packets received for it.
    pub packets: u64,
}

/// A DAG this node redirects, as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RedirectSnap {
    /// The chain (its NTs).
    pub chain: String,
    /// The peer's data address.
    pub peer: String,
    /// Share of the chain's flows, in 1/1024ths.
    pub share: u16,
    /// While it spills a share of its flows: the flows it records (running here, on the peer),
    /// and the packets of new flows that found that table full and went by their hash alone.
    /// Absent for a whole chain redirected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flows: Option<SpillFlows>,
    /// The pass-through node its packets go to first (the pool's links join this node and the
    /// peer only through others), by data address; null: straight to the peer.
    pub via: Option<String>,
    /// Packets sent there.
    pub packets: u64,
}

/// A spilling chain's flow table, as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SpillFlows {
    /// Flows recorded running here.
    pub here: usize,
    /// Flows recorded running on the peer.
    pub peer: usize,
    /// Packets of new flows that found the table full (`pool.spill_flows`).
    pub unpinned: u64,
}

/// Sends DAG `uid`'s packets to `peer` (which hosts it as `hosted`, in its incarnation of
/// generation `gen`): its first chain is redirected, for all flows.
fn redirect<B: Backend>(
    node: &mut Node<B>,
    plan: &Plan,
    ids: &[ChainId],
    uid: DagUid,
    peer: SocketAddr,
    hosted: u32,
    gen: u64,
) -> Result<(), String> {
    let d = plan.dags.iter().find(|d| d.uid == uid).ok_or("no such DAG")?;
    let chain = ids.get(d.steps[0].0).copied().ok_or("the DAG's chain is not deployed")?;
    if !node.redirect_route(uid, peer, hosted, gen) {
        return Err("the DAG is switching between forms; try again".into());
    }
    node.redirect_chain(chain, peer, snic_core::pool::redirect::SHARE_ALL);
    tracing::info!(dag = d.name, peer = %peer, hosted, "pool: redirecting a DAG to a peer");
    Ok(())
}

/// How long an apply waits for the data plane to deploy it.
pub const DEPLOY_WAIT: Duration = Duration::from_secs(60);

/// Why a deployment did not happen.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The data plane refused it (and runs what it ran before).
    #[error("{0:#}")]
    Failed(anyhow::Error),
    /// The data plane did not answer within [`DEPLOY_WAIT`]: whether it runs the plan is not
    /// known.
    #[error("the data plane did not answer within {} s", DEPLOY_WAIT.as_secs())]
    NoAnswer,
}

/// Handle on the data plane: its dispatcher threads (one, or `data_cores`).
pub struct DataPlane {
    threads: Vec<DpThread>,
    stop: Arc<AtomicBool>,
    /// The plan every thread runs: with several, put back on those that took a plan another
    /// refused.
    plan: Mutex<Plan>,
    /// Thread 0's last published snapshot (the pool thread reads it: a node in a pool has one
    /// dispatcher thread).
    pub snapshot: Arc<Mutex<Snapshot>>,
}

/// One dispatcher thread.
struct DpThread {
    tx: mpsc::Sender<Cmd>,
    /// Ends the thread's idle wait, so that a command does not wait for traffic or a timer.
    waker: Option<Waker>,
    join: Option<JoinHandle<()>>,
    snapshot: Arc<Mutex<Snapshot>>,
}

impl DpThread {
    fn tell(&self, cmd: Cmd) {
        let _ = self.tx.send(cmd);
        if let Some(w) = &self.waker {
            w.wake();
        }
    }

    /// Hands the thread `plan`; its answer comes on the receiver.
    fn ask_deploy(&self, plan: Plan) -> Result<mpsc::Receiver<anyhow::Result<()>>, DeployError> {
        let (ack, done) = mpsc::channel();
        self.tx.send(Cmd::Deploy(plan, ack)).map_err(|_| DeployError::Failed(anyhow::anyhow!("the data plane has stopped")))?;
        if let Some(w) = &self.waker {
            w.wake();
        }
        Ok(done)
    }

    fn snapshot(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        self.snapshot.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The data plane's configuration: node.yaml's validated sections and the data plane's own
/// defaults for what node.yaml does not set.
fn node_config(cfg: &Config, seat: &Seat) -> NodeConfig {
    let s = &cfg.settings;
    NodeConfig {
        core: NodeCoreConfig {
            // (Node-wide bounds, split between the dispatcher threads.)
            store_buffers: s.store_buffers / seat.threads,
            workers: s.workers,
            auto_place: s.auto_place,
            fair: cfg.fair,
            link_bps: cfg.link_bps,
            elastic: cfg.elastic,
            pool: cfg.pool.as_ref().map_or_else(AgentConfig::default, |p| AgentConfig {
                report_ttl: p.gossip_period * 10,
                flow_idle: p.flow_idle,
                spill_flows: p.spill_flows,
                ..AgentConfig::default()
            }),
            slots: cfg.pool.as_ref().and_then(|p| p.slots),
            ..NodeCoreConfig::default()
        },
        vtep_port: s.vtep_port,
        fdb: snic_dataplane::fdb::FdbConfig {
            max_learned: s.limits.fdb_macs / seat.threads,
            per_tenant: s.limits.fdb_macs_per_tenant,
            age: Duration::from_secs(s.limits.fdb_age_s),
        },
        data_core: seat.board.clone(),
        // With `egress_tap` a TCP burst (about 48 segments of a 64 KB send) is taken in one
        // receive and handed to one send, so that it leaves joined in one write rather than
        // two (at 32, a burst spanned two polls: BENCHMARKS.md, issue 51).
        batch: if s.egress_tap.is_some() { snic_dataplane::store::MAX_BATCH } else { NodeConfig::default().batch },
        ..Default::default()
    }
}

/// Which of the node's dispatcher threads (`data_cores`) a data-plane thread is.
#[derive(Clone)]
struct Seat {
    /// Its number.
    thread: usize,
    /// The node's dispatcher threads.
    threads: usize,
    /// The node's fair-sharing board, with more than one thread.
    board: Option<snic_core::fair::OnBoard>,
}

impl Seat {
    /// A node of one dispatcher thread.
    fn one() -> Self {
        Seat { thread: 0, threads: 1, board: None }
    }
}

/// With several dispatcher threads, each runs its own instance of every chain: NTs whose state
/// instances cannot split are refused, by name.
/// And each tenant's NATs may take at most [`cbpf::INSNS_PER_TENANT`] of the steering program,
/// which is the node's (a tenant's own NT configurations must not fill it for the others).
fn refuse_split_state(plan: &Plan, threads: usize) -> anyhow::Result<()> {
    use snic_dataplane::backend::cbpf;
    if threads <= 1 {
        return Ok(());
    }
    let nts = plan.single_instance_nts();
    if !nts.is_empty() {
        anyhow::bail!(
            "NT {} keeps state that instances cannot split (a cache, writes waiting for replicas), and with data_cores: {threads} every dispatcher thread runs its own instance of every chain: run it on a node with data_cores: 1",
            nts.join(", ")
        );
    }
    let claims = plan.steering(threads as u16).claims;
    for t in &plan.tenants {
        let used: usize = claims.iter().filter(|c| c.vnis.iter().any(|v| t.vnis.contains(v))).map(cbpf::claim_insns).sum();
        if used > cbpf::INSNS_PER_TENANT {
            anyhow::bail!(
                "tenant {:?}'s NATs need {used} instructions of the steering program that brings their replies to the right dispatcher thread (data_cores: {threads}); a tenant may use {}: fewer destination NAT rules or NAT NTs",
                t.name,
                cbpf::INSNS_PER_TENANT
            );
        }
    }
    Ok(())
}

fn owners_snap(o: &snic_core::pool::owner::Owners) -> Option<OwnersSnap> {
    let s = o.slots()?;
    Some(OwnersSnap {
        slot: s.slot,
        slots: s.count,
        holders: o.holders().map(|(s, a)| (s, a.to_string())).collect(),
        conflicts: o.conflicts().to_vec(),
        forwarded: o.forwarded,
        received: o.received,
        pinned: o.pinned(),
    })
}

/// A node on `backend` with `plan` deployed. Constructing the node failing is fatal (the socket
/// goes with it); a failed deployment gives the node back so its socket can be reused.
#[allow(clippy::type_complexity)]
fn build<B: Backend>(cfg: &Config, seat: &Seat, mut backend: B, plan: &Plan) -> anyhow::Result<(Node<B>, anyhow::Result<ChainIds>)> {
    // Each tenant's VNIs to a receive queue of its own, before the node sizes its queues. A
    // plan that cannot be steered fails like a plan that cannot be deployed — the caller then
    // puts the previous one back on the same socket — and leaves everything on queue 0.
    let steered = match cfg.settings.rx_queues {
        RxQueues::PerTenant => backend.steer(&steering_groups(plan)).inspect_err(|_| {
            let _ = backend.steer(&[]);
        }),
        RxQueues::Shared => Ok(Vec::new()),
    };
    // Several dispatcher threads: the plan's NATs steered to the thread holding their state.
    let steered = steered.and_then(|q| {
        if seat.threads > 1 {
            backend.set_steering(&plan.steering(seat.threads as u16))?;
        }
        Ok(q)
    });
    let mut node = Node::new(node_config(cfg, seat), backend, Box::new(MonotonicClock::default()))?;
    if let Some(p) = &cfg.pool {
        node.set_pool_secret(Some(&super::config::read_pool_secret(p)?));
        node.set_pool_links(p.listen, &p.links);
    }
    let queues = match steered {
        Ok(q) => q,
        Err(e) => {
            return Ok((
                node,
                Err(anyhow::Error::new(e).context("steering tenants' VNIs to their receive queues and flows to their threads")),
            ))
        }
    };
    assign_queues(&mut node, plan, &queues);
    let r = deploy(&mut node, plan).map(|d| d.into_iter().map(|(c, _)| c).collect());
    Ok((node, r))
}

/// Tenants in id order (ids are assigned in order and kept: a new tenant comes last, so the
/// others keep their receive queues).
fn by_id(plan: &Plan) -> Vec<&TenantPlan> {
    let mut v: Vec<_> = plan.tenants.iter().collect();
    v.sort_by_key(|t| t.id);
    v
}

/// Each tenant's VNIs, a group per receive queue, in tenant id order.
fn steering_groups(plan: &Plan) -> Vec<Vec<u32>> {
    by_id(plan).iter().map(|t| t.vnis.clone()).collect()
}

/// Tells the node which tenant each receive queue holds (`queues`: per tenant in id order, as
/// [`steering_groups`]); queues no tenant holds any more are everyone's.
fn assign_queues<B: snic_dataplane::backend::Backend>(node: &mut Node<B>, plan: &Plan, queues: &[usize]) {
    for q in 1..node.backend().rx_queues() {
        node.set_rx_queue_tenant(q, None);
    }
    for (t, &q) in by_id(plan).iter().zip(queues) {
        if q > 0 {
            node.set_rx_queue_tenant(q, Some(t.id));
        }
    }
}

/// Applies a change of tenants (added, removed, weights, quotas, VNIs) to a running node: fair
/// sharing, quotas and receive-queue steering, without rebuilding it.
fn update_tenants<B: Backend>(cfg: &Config, node: &mut Node<B>, old: &Plan, new: &Plan) -> anyhow::Result<()> {
    // Steering first: if the kernel refuses it, nothing has changed.
    if cfg.settings.rx_queues == RxQueues::PerTenant {
        let groups = steering_groups(new);
        if steering_groups(old) != groups {
            let queues = node.backend_mut().steer(&groups).context("steering tenants' VNIs to their receive queues")?;
            assign_queues(node, new, &queues);
        }
    }
    let was: HashMap<TenantId, &TenantPlan> = old.tenants.iter().map(|t| (t.id, t)).collect();
    let is: HashSet<TenantId> = new.tenants.iter().map(|t| t.id).collect();
    for t in old.tenants.iter().filter(|t| !is.contains(&t.id)) {
        crate::deploy::remove_tenant(node, t);
    }
    for t in new.tenants.iter().filter(|t| was.get(&t.id) != Some(t)) {
        if let Some(old) = was.get(&t.id) {
            crate::deploy::disown_vnis(node, old, &t.vnis);
        }
    }
    for t in new.tenants.iter().filter(|t| was.get(&t.id) != Some(t)) {
        crate::deploy::set_tenant(node, t);
    }
    for (t, bytes) in new.tenant_memory() {
        node.set_tenant_memory(t, bytes);
    }
    Ok(())
}

/// The data socket: a reuseport group steered per tenant, or one socket.
fn bind(cfg: &Config) -> std::io::Result<UdpBackend> {
    match cfg.settings.rx_queues {
        RxQueues::PerTenant => UdpBackend::bind_steered(cfg.settings.data),
        RxQueues::Shared => UdpBackend::bind(cfg.settings.data),
    }
}

/// The node's id for each of the deployed plan's chains, by index.
type ChainIds = Vec<ChainId>;

/// The node's chains for `new`'s: those `old` had too (same NTs, same configuration) are
/// `ids`' and taken out of `kept`; the others are added and launched.
fn match_chains<B: Backend>(node: &mut Node<B>, old: &Plan, new: &Plan, kept: &mut [Option<ChainId>]) -> anyhow::Result<ChainIds> {
    let mut out = Vec::with_capacity(new.chains.len());
    // Plans mostly keep their chains in order (a chain added or removed shifts those after
    // it): look where the last match was first.
    let mut next = 0;
    for (j, c) in new.chains.iter().enumerate() {
        let same = |i: &usize| old.chains.get(*i) == Some(c) && kept[*i].is_some();
        let found = Some(next).filter(same).or_else(|| (0..old.chains.len()).find(same));
        let id = match found {
            Some(i) => {
                next = i + 1;
                kept[i].take().context("matched chain")?
            }
            None => {
                let (id, inst) = crate::deploy::add_chain(node, j, c)?;
                tracing::info!(chain = c.nts.join(" → "), instance = inst.map(|i| i.0), "chain added");
                id
            }
        };
        out.push(id);
    }
    Ok(out)
}

/// Applies a change of forwarding entries to a running node: removed ones first (a default
/// replaced is set again below), then the new ones.
fn update_routes<B: Backend>(node: &mut Node<B>, old: &Plan, new: &Plan) -> anyhow::Result<()> {
    let (was, is): (HashSet<&RoutePlan>, HashSet<&RoutePlan>) = (old.routes.iter().collect(), new.routes.iter().collect());
    for r in old.routes.iter().filter(|r| !is.contains(r)) {
        crate::deploy::remove_route(node, r);
    }
    for r in new.routes.iter().filter(|r| !was.contains(r)) {
        crate::deploy::add_route(node, r)?;
    }
    Ok(())
}

impl DataPlane {
    /// Binds the data socket, deploys `plan` (its tenants' VTEPs reached through `ifaces`) and
    /// starts the thread (or, with `data_cores` above 1, the threads).
    pub fn start(cfg: &Config, plan: Plan, ifaces: Interfaces) -> anyhow::Result<(Self, SocketAddr)> {
        if let Io::AfXdp(x) = &cfg.settings.io {
            return Self::start_af_xdp(cfg, x, plan, ifaces);
        }
        if cfg.settings.data_cores > 1 {
            return Self::start_threads(cfg, plan, ifaces);
        }
        let mut backend = bind(cfg).with_context(|| format!("binding the data socket on {}", cfg.settings.data))?;
        if let (Some(name), SocketAddr::V4(src)) = (&cfg.settings.egress_tap, cfg.settings.data) {
            let tap = snic_dataplane::backend::tap::TunnelTap::open(name, src).with_context(|| format!("opening egress_tap {name}"))?;
            tracing::info!(tap = name, "runs of one TCP flow leave joined through the tap");
            backend.set_egress_tap(Some(tap));
        }
        let addr = backend.local_addr()?;
        Ok((Self::start_on(cfg, backend, plan, ifaces)?, addr))
    }

    /// [`DataPlane::start`] on an AF_XDP socket (`io: {af_xdp: ...}`).
    #[cfg(feature = "af_xdp")]
    fn start_af_xdp(cfg: &Config, x: &AfXdpSection, plan: Plan, ifaces: Interfaces) -> anyhow::Result<(Self, SocketAddr)> {
        use snic_dataplane::backend::xdp::{XdpBackend, XdpConfig};
        let SocketAddr::V4(addr) = cfg.settings.data else { anyhow::bail!("io: af_xdp needs an IPv4 data address") };
        let xc = XdpConfig { interface: x.interface.clone(), queue: x.queue, mode: x.mode, addr };
        let backend = XdpBackend::new(xc).with_context(|| format!("opening AF_XDP on {} queue {}", x.interface, x.queue))?;
        let addr = backend.local_addr()?;
        Ok((Self::start_on(cfg, backend, plan, ifaces)?, addr))
    }

    /// Without the `af_xdp` feature: says how to get it.
    #[cfg(not(feature = "af_xdp"))]
    fn start_af_xdp(_: &Config, _: &AfXdpSection, _: Plan, _: Interfaces) -> anyhow::Result<(Self, SocketAddr)> {
        anyhow::bail!("io: af_xdp needs a snic built with the AF_XDP backend: cargo build --release -p snic --features af_xdp (docs/dataplane.md, \"The AF_XDP backend\")")
    }

    /// `data_cores` dispatcher threads, each a node of its own on its part of one reuseport
    /// group (the kernel steers each datagram to a thread by its flow, [`snic_core::steer`]),
    /// pinned to a core of its own, all sharing one fair-sharing board.
    fn start_threads(cfg: &Config, plan: Plan, ifaces: Interfaces) -> anyhow::Result<(Self, SocketAddr)> {
        let n = cfg.settings.data_cores;
        refuse_split_state(&plan, n)?;
        let per_tenant = cfg.settings.rx_queues == RxQueues::PerTenant;
        let backends = UdpBackend::bind_threads(cfg.settings.data, n, per_tenant)
            .with_context(|| format!("binding the data sockets of {n} dispatcher threads on {}", cfg.settings.data))?;
        let addr = backends[0].local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::with_capacity(n);
        for (k, (backend, on)) in backends.into_iter().zip(snic_core::fair::Board::shared(n)).enumerate() {
            let seat = Seat { thread: k, threads: n, board: Some(on) };
            match spawn(cfg, seat, backend, plan.clone(), ifaces.clone(), &stop) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    Self::from_threads(threads, stop, plan).stop();
                    return Err(e.context(format!("starting dispatcher thread {k} of {n}")));
                }
            }
        }
        Ok((Self::from_threads(threads, stop, plan), addr))
    }

    /// Deploys `plan` on a node over `backend` and starts the thread: the data plane over any
    /// [`Backend`] (the daemon binds UDP; a test hands it an in-memory port).
    pub fn start_on<B: Backend + 'static>(cfg: &Config, backend: B, plan: Plan, ifaces: Interfaces) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let t = spawn(cfg, Seat::one(), backend, plan.clone(), ifaces, &stop)?;
        Ok(Self::from_threads(vec![t], stop, plan))
    }

    fn from_threads(threads: Vec<DpThread>, stop: Arc<AtomicBool>, plan: Plan) -> Self {
        let snapshot = threads.first().map_or_else(Arc::default, |t| t.snapshot.clone());
        DataPlane { threads, stop, plan: Mutex::new(plan), snapshot }
    }

    /// Hands a plan to the data plane and waits until it runs. Every step of a deployment is
    /// bounded (a tenant's module starts within its `max_init_ms`), so the data plane answers;
    /// if it has not within [`DEPLOY_WAIT`], it is wedged: [`DeployError::NoAnswer`]. With
    /// several dispatcher threads, each deploys it; if one refuses, those that took it go back
    /// to the plan before, and the apply fails with the refusal.
    pub fn deploy(&self, plan: Plan) -> Result<(), DeployError> {
        refuse_split_state(&plan, self.threads.len()).map_err(DeployError::Failed)?;
        let deadline = Instant::now() + DEPLOY_WAIT;
        let wait = |done: mpsc::Receiver<anyhow::Result<()>>| match done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(r) => r.map_err(DeployError::Failed),
            Err(_) => Err(DeployError::NoAnswer),
        };
        let asked: Vec<_> = self.threads.iter().map(|t| t.ask_deploy(plan.clone())).collect();
        let mut results: Vec<Result<(), DeployError>> = asked.into_iter().map(|a| a.and_then(wait)).collect();
        let Some(bad) = results.iter().position(Result::is_err) else {
            *self.plan.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = plan;
            return Ok(());
        };
        if self.threads.len() > 1 {
            let before = self.plan.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            for (t, r) in self.threads.iter().zip(&results) {
                if r.is_ok() {
                    let back = t
                        .ask_deploy(before.clone())
                        .and_then(|d| d.recv_timeout(DEPLOY_WAIT).map_err(|_| DeployError::NoAnswer)?.map_err(DeployError::Failed));
                    if let Err(e) = back {
                        tracing::error!(error = %e, "a dispatcher thread could not go back to the plan before a refused change");
                    }
                }
            }
        }
        results.swap_remove(bad)
    }

    /// The interfaces tenants' VTEPs are reached through (for the reverse-path check): the
    /// data plane uses them from its next command on (a deploy sent after this sees them).
    pub fn set_interfaces(&self, ifaces: Interfaces) {
        for t in &self.threads {
            t.tell(Cmd::Interfaces(ifaces.clone()));
        }
    }

    /// The pool thread, for the chains this node has no room for.
    pub fn set_pool(&self, link: PoolLink) {
        self.link().tell(Cmd::SetPool(link));
    }

    /// A handle for other threads: on thread 0 (a node in a pool has only it), and draining
    /// on all.
    pub fn link(&self) -> DpLink {
        let others = self.threads.iter().skip(1).map(|t| (t.tx.clone(), t.waker.clone())).collect();
        DpLink { tx: self.threads[0].tx.clone(), waker: self.threads[0].waker.clone(), others: Arc::new(others) }
    }

    /// Whether the data plane is running (every thread), how long ago it last published (the
    /// oldest thread's), whether the node drains, and the flows it still holds if it does
    /// (without copying the snapshot).
    pub fn health(&self, now: Instant) -> (bool, Duration, Option<usize>) {
        let (mut up, mut age) = (true, Duration::ZERO);
        for t in &self.threads {
            let (u, a) = t.snapshot().health(now);
            (up, age) = (up && u, age.max(a));
        }
        let s = self.threads[0].snapshot();
        (up, age, s.draining.then_some(s.pins.len()))
    }

    /// The last published snapshot: with several dispatcher threads, theirs added up
    /// ([`super::merge`]).
    pub fn snapshot(&self) -> Snapshot {
        match self.threads.as_slice() {
            [one] => one.snapshot().clone(),
            many => super::merge::merge(many.iter().map(|t| t.snapshot().clone()).collect()),
        }
    }

    /// Stops the threads.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in &self.threads {
            if let Some(w) = &t.waker {
                w.wake();
            }
        }
        for t in &mut self.threads {
            if let Some(j) = t.join.take() {
                let _ = j.join();
            }
        }
    }
}

/// Deploys `plan` on a node over `backend` as dispatcher thread `seat` and starts its thread.
fn spawn<B: Backend + 'static>(
    cfg: &Config,
    seat: Seat,
    backend: B,
    plan: Plan,
    ifaces: Interfaces,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<DpThread> {
    let (mut node, deployed) = build(cfg, &seat, backend, &plan)?;
    let ids = deployed?;
    store_mat(&mut node, &plan, &ifaces);
    let waker = node.backend_mut().waker();
    let (tx, rx) = mpsc::channel();
    let snapshot = Arc::new(Mutex::new(Snapshot { published: Some(Instant::now()), ..Snapshot::default() }));
    let (st, snap, cfg) = (stop.clone(), snapshot.clone(), cfg.clone());
    let name = if seat.threads > 1 { format!("snic-dataplane-{}", seat.thread) } else { "snic-dataplane".into() };
    let join = std::thread::Builder::new().name(name).spawn(move || {
        if seat.threads > 1 && !snic_dataplane::node::pin_current(seat.thread) {
            tracing::warn!(thread = seat.thread, "could not pin the dispatcher thread to a core of its own");
        }
        let stopping = st.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cfg, seat, node, plan, ids, ifaces, rx, st, snap)));
        if stopping.load(Ordering::Relaxed) {
            return;
        }
        // The data plane is gone while the daemon was not stopping: a node that keeps
        // answering its API but forwards nothing would blackhole every tenant's traffic.
        // Exit, so that the supervisor restarts the node. (A panic's message and place were
        // printed by the panic hook. A thread the kernel kills outright cannot say so:
        // `snic status` then reports the data plane down, see `health`.)
        tracing::error!("the data plane {}; exiting", if r.is_err() { "panicked" } else { "stopped" });
        std::process::exit(70);
    })?;
    Ok(DpThread { tx, waker, join: Some(join), snapshot })
}

#[allow(clippy::too_many_arguments)] // the thread's whole state, handed over once
fn run<B: Backend>(
    cfg: Config,
    seat: Seat,
    mut node: Node<B>,
    mut plan: Plan,
    mut ids: ChainIds,
    mut ifaces: Interfaces,
    rx: mpsc::Receiver<Cmd>,
    stop: Arc<AtomicBool>,
    snap: Arc<Mutex<Snapshot>>,
) {
    // With a waker (made at start), an idle wait may last until the next snapshot: a command
    // ends it. Without one, waits stay at 1 ms.
    let dp_waker = node.backend_mut().waker();
    let waker = dp_waker.is_some();
    let mut node = Some(node);
    let mut last_pub = Instant::now();
    let mut prev = Prev::default();
    let mut rebuilds = 0;
    let mut polls = 0u32;
    let mut logged = Logged::default();
    let mut pool = PoolWork::new(dp_waker);
    while !stop.load(Ordering::Relaxed) {
        let Some(n) = node.as_mut() else {
            tracing::error!("the data plane could not be rebuilt and has stopped");
            return;
        };
        // (An answer from the pool releases waiting packets: poll them now, not after an idle
        // wait.)
        let work = n.poll() + pool.poll(n, &plan);
        polls = polls.wrapping_add(1);
        if work == 0 {
            // Until traffic, a command (the waker), the node's next timer, or the next snapshot.
            let most = if waker { PUBLISH_EVERY.saturating_sub(last_pub.elapsed()) } else { Duration::from_millis(1) };
            // (A DAG given back waits for packets on the way, a bounded time.)
            let most = pool.next_deadline(n.now()).map_or(most, |d| d.min(most));
            n.idle(most);
        }
        if work == 0 || polls.is_multiple_of(1024) {
            while let Ok(cmd) = rx.try_recv() {
                match cmd {
                    Cmd::Deploy(p, ack) => {
                        let r = apply(&cfg, &seat, &mut node, &plan, &p, &mut ids, &mut rebuilds, &mut pool);
                        if r.is_ok() {
                            plan = p;
                            prev = Prev::default();
                        }
                        // (Before any packet: the MAT the change stored did not know them.)
                        if let Some(n) = node.as_mut() {
                            store_mat(n, &plan, &ifaces);
                        }
                        let _ = ack.send(r);
                    }
                    Cmd::Host(home, req, ack) => {
                        let r = node.as_mut().ok_or_else(|| "the data plane is down".to_string());
                        let _ = ack.send(r.and_then(|n| pool.host(n, &plan, home, req)));
                    }
                    Cmd::Redirect(uid, peer, r, gen, ack) => {
                        let n = node.as_mut().ok_or_else(|| "the data plane is down".to_string());
                        let _ = ack.send(n.and_then(|n| redirect(n, &plan, &ids, uid, peer, r, gen)));
                    }
                    Cmd::PeerDown(peer) => {
                        if let Some(n) = node.as_mut() {
                            pool.peer_down(n, peer);
                        }
                    }
                    Cmd::PoolReport(from, r) => {
                        if let Some(n) = node.as_mut() {
                            n.pool_report(from, r);
                        }
                    }
                    Cmd::Pins(owner, flows) => {
                        if let Some(n) = node.as_mut() {
                            n.pool_pins(owner, &flows);
                        }
                    }
                    Cmd::Drain(on, ack) => {
                        if let Some(n) = node.as_mut() {
                            if on != n.core().owners().draining() {
                                tracing::info!(
                                    draining = on,
                                    "{}",
                                    if on {
                                        "draining: the health check fails from now (the ToR withdraws this node); peers bring its flows back here until none is left"
                                    } else {
                                        "no longer draining"
                                    }
                                );
                            }
                            n.set_draining(on);
                        }
                        let _ = ack.send(());
                    }
                    Cmd::Member(e) => pool.member(node.as_mut(), e),
                    Cmd::SetPool(link) => pool.set_link(node.as_mut(), link),
                    Cmd::Unhost(home, route) => {
                        if let Some(n) = node.as_mut() {
                            pool.unhost(n, home, route);
                        }
                    }
                    Cmd::Interfaces(i) => {
                        if i != ifaces {
                            ifaces = i;
                            if let Some(n) = node.as_mut() {
                                store_mat(n, &plan, &ifaces);
                            }
                        }
                    }
                    Cmd::Return(home, route, sent, reply) => match node.as_mut() {
                        Some(n) => pool.give_back(n, home, route, sent, reply),
                        None => {
                            let _ = reply.send(Err("the data plane is down".into()));
                        }
                    },
                }
            }
        }
        if let Some(n) = node.as_ref() {
            if last_pub.elapsed() >= PUBLISH_EVERY {
                let dt = last_pub.elapsed().as_secs_f64();
                last_pub = Instant::now();
                log_news(n, &plan, &mut logged);
                let (pass_through_packets, pass_through_bytes) = n.pool_link().pass_through();
                let s = Snapshot {
                    published: Some(last_pub),
                    hosted: pool.hosted_snap(n),
                    redirects: n
                        .core()
                        .redirects()
                        .iter()
                        .map(|(c, r)| RedirectSnap {
                            chain: chain_name(n, c),
                            peer: r.peer.to_string(),
                            share: r.share,
                            flows: n.spill_flows(c).map(|((here, peer), unpinned)| SpillFlows { here, peer, unpinned }),
                            via: n.core().pool().via(r.peer).map(|a| a.to_string()),
                            packets: n.pool_link().redirected(c),
                        })
                        .collect(),
                    pass_through_packets,
                    pass_through_bytes,
                    owners: owners_snap(n.core().owners()),
                    pins: if n.core().owners().draining() { n.flow_hashes().unwrap_or_default() } else { Vec::new() },
                    draining: n.core().owners().draining(),
                    ..snapshot(n, &plan, &mut prev, dt, rebuilds)
                };
                let mut s = s;
                s.regions.iter_mut().for_each(|r| r.thread = seat.thread as u16);
                if let Ok(mut g) = snap.lock() {
                    *g = s;
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)] // the thread's state the change touches
fn apply<B: Backend>(
    cfg: &Config,
    seat: &Seat,
    slot: &mut Option<Node<B>>,
    old: &Plan,
    new: &Plan,
    ids: &mut ChainIds,
    rebuilds: &mut u64,
    pool: &mut PoolWork,
) -> anyhow::Result<()> {
    let node = slot.as_mut().context("no data plane")?;
    let e = match change(cfg, seat, node, old, new, ids) {
        Ok(now) => {
            *ids = now;
            return Ok(());
        }
        Err(e) => e,
    };
    // Part of the change may be in: put the old plan back whole, on the same socket.
    tracing::warn!(error = %format!("{e:#}"), "a change failed half way; rebuilding the previous deployment (NT state starts afresh)");
    let mut old_node = slot.take().context("no data plane")?;
    old_node.drain(Duration::from_millis(200));
    pool.rebuilt(&old_node);
    let (mut n, r) = build(cfg, seat, old_node.into_backend(), old)?;
    pool.attach(&mut n);
    *ids = r.context("restoring the previous deployment")?;
    *slot = Some(n);
    *rebuilds += 1;
    Err(e.context("changing the deployment; the previous deployment was restored"))
}

/// Applies what changed from `old` to `new` to the running node (see the module docs); returns
/// the node's chain for each of `new`'s.
fn change<B: Backend>(cfg: &Config, seat: &Seat, node: &mut Node<B>, old: &Plan, new: &Plan, ids: &[ChainId]) -> anyhow::Result<ChainIds> {
    if old.tenants != new.tenants {
        update_tenants(cfg, node, old, new)?;
    }
    if seat.threads > 1 {
        node.backend_mut().set_steering(&new.steering(seat.threads as u16)).context("steering flows to their dispatcher threads")?;
    }
    if old.routes != new.routes {
        update_routes(node, old, new)?;
    }
    let mut kept: Vec<Option<ChainId>> = ids.iter().copied().map(Some).collect();
    let now = match_chains(node, old, new, &mut kept)?;
    for d in &old.dags {
        if !new.dags.iter().any(|n| n.uid == d.uid) {
            node.remove_dag(d.uid);
        }
    }
    for d in &new.dags {
        node.set_dag(d.uid, d.route(|c| now[c]));
    }
    // Chains no DAG uses any more finish what they hold, then stop.
    for c in kept.into_iter().flatten() {
        tracing::info!(chain = chain_name(node, c), "chain removed: it finishes what it holds, then stops");
        node.remove_chain(c);
    }
    crate::deploy::compact_forms(node, new)?;
    node.mat_handle().store(Arc::new(new.mat()));
    Ok(now)
}

/// Publishes `plan`'s MAT with the interfaces its tenants' VTEPs are reached through.
fn store_mat<B: Backend>(node: &mut Node<B>, plan: &Plan, ifaces: &Interfaces) {
    let mut m = plan.mat();
    m.set_source_interfaces(|p| ifaces.get(p).copied());
    node.mat_handle().store(Arc::new(m));
}

/// What the last snapshot saw, for rates and for counters worth a warning when they grow.
#[derive(Default)]
struct Prev {
    /// Per tenant of the plan: packets received and transmitted.
    tenants: Vec<(u64, u64)>,
    /// NTs' own counters whose increase is worth a warning: by region, NT and counter.
    alarms: std::collections::HashMap<(u16, String, &'static str), u64>,
}

fn snapshot<B: Backend>(node: &Node<B>, plan: &Plan, prev: &mut Prev, dt: f64, rebuilds: u64) -> Snapshot {
    let s = node.stats();
    let mut out =
        Snapshot { rebuilds, latency_p50_ns: s.latency.quantile(0.5), latency_p99_ns: s.latency.quantile(0.99), ..Default::default() };
    (out.rx_messages, out.rx_datagrams) = node.backend().rx_runs();
    (out.rx_via_kernel, out.tx_via_kernel) = node.backend().via_kernel();
    (out.tx_joined_writes, out.tx_joined_datagrams, out.tx_joined_refused) = node.backend().tx_joined();
    prev.tenants.resize(plan.tenants.len(), (0, 0));
    for (i, t) in plan.tenants.iter().enumerate() {
        let ts = &s.tenants[t.id.index()];
        let (prx, ptx) = prev.tenants[i];
        out.tenants.push(TenantSnap {
            id: t.id.0,
            rx_packets: ts.rx_packets,
            rx_bytes: ts.rx_bytes,
            tx_packets: ts.tx_packets,
            tx_bytes: ts.tx_bytes,
            rx_pps: (ts.rx_packets.saturating_sub(prx)) as f64 / dt,
            tx_pps: (ts.tx_packets.saturating_sub(ptx)) as f64 / dt,
            drops: ts.drops_by_reason(),
            store_buffers: node.store().occupancy(t.id),
            fair: fair_snap(node, t.id),
            latency_p50_ns: s.tenant_latency[t.id.index()].as_ref().map_or(0, |h| h.quantile(0.5)),
            latency_p99_ns: s.tenant_latency[t.id.index()].as_ref().map_or(0, |h| h.quantile(0.99)),
            fdb: {
                let f = node.fdb().tenant(t.id);
                FdbSnap { learned: f.learned, bound: f.bound, refused: f.refused, aged: f.aged }
            },
        });
        prev.tenants[i] = (ts.rx_packets, ts.tx_packets);
    }
    // Running chains with their instance counts, for the pool's load reports.
    let mut running: Vec<(ChainId, usize)> = Vec::new();
    for r in 0..node.core().sched().instance_count() {
        let id = snic_core::ids::InstanceId(r as u16);
        let state = node.core().sched().state(id);
        if state == InstanceState::Free {
            continue;
        }
        let chain = node.core().sched().chain_of(id);
        if state == InstanceState::Running {
            match running.iter_mut().find(|x| x.0 == chain) {
                Some(x) => x.1 += 1,
                None => running.push((chain, 1)),
            }
        }
        let names = node.core().meter().chain_names(chain);
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let (packets, nts) = match node.region_counters(id) {
            Some(rc) => (
                load(&rc.packets),
                names.iter().enumerate().map(|(i, n)| (n.clone(), load(&rc.nt_packets[i]), load(&rc.nt_drops[i]))).collect(),
            ),
            None => (0, Vec::new()),
        };
        let mut counters = Vec::new();
        if let Some(rc) = node.region_counters(id) {
            for (i, n) in names.iter().enumerate() {
                let Some(Some(c)) = rc.nt_counters.get(i) else { continue };
                c.each(&mut |name, v, alarm| {
                    counters.push((n.clone(), name, v));
                    if alarm {
                        let was = prev.alarms.insert((r as u16, n.clone(), name), v).unwrap_or(0);
                        if v > was {
                            tracing::warn!(nt = %n, region = r, counter = name, total = v, new = v - was, "an NT counted trouble");
                        }
                    }
                });
            }
        }
        out.regions.push(RegionSnap {
            thread: 0,
            region: r as u16,
            state: state_name(state),
            chain: names.to_vec(),
            queued: node.core().sched().queued(id),
            credits: node.core().sched().credits(id),
            place: node.place_of(id).map_or_else(String::new, place_name),
            packets,
            nts,
            counters,
        });
    }
    out.chains = running
        .into_iter()
        .map(|(c, instances)| ChainSnap { key: node.core().meter().chain_key(c).0, instances, load: node.core().meter().chain_load(c) })
        .collect();
    let fair = node.core().meter().fairness();
    out.epochs = fair.epochs();
    out.resources = fair
        .resources()
        .iter()
        .map(|r| ResourceSnap { name: r.name.clone(), capacity: r.capacity, node_wide: r.scope == snic_core::fair::Scope::Node })
        .collect();
    out.unattributed_drops = snic_dataplane::stats::named_drops(&s.unattributed);
    out.elastic = elastic_snap(node, plan);
    let (agent, now) = (node.core().pool(), node.now());
    out.pool_peers = agent
        .peers(now)
        .map(|(addr, r)| PoolPeerSnap { addr, report: r.cloned(), report_age: agent.report_age(now, addr), hops: agent.hops(addr) })
        .collect();
    out
}

/// Events shown by `snic status`.
pub(super) const EVENTS_SHOWN: usize = 32;

/// A chain, by its NTs' names.
pub(super) fn chain_name<B: Backend>(node: &Node<B>, c: ChainId) -> String {
    node.core().meter().chain_names(c).join(" → ")
}

/// What an elastic event says, in words (`snic status` and the log).
fn describe<B: Backend>(node: &Node<B>, plan: &Plan, ev: &Event) -> String {
    let dag_name =
        |u: snic_core::ids::DagUid| plan.dags.iter().find(|d| d.uid == u).map_or_else(|| format!("#{}", u.0), |d| d.name.clone());
    let form = |f: snic_core::rechain::Form| match f {
        snic_core::rechain::Form::Planned => "planned",
        snic_core::rechain::Form::Compact => "compact",
    };
    match ev.kind {
        EventKind::ContextSwitch { evicted } => format!("context switch (evicted {})", chain_name(node, evicted)),
        EventKind::Running { after } => format!("running ({after:?})").to_lowercase(),
        EventKind::Rechain { dag, to } => format!("DAG {} switching to its {} form", dag_name(dag), form(to)),
        EventKind::Rechained { dag, to } => format!("DAG {} runs its {} form", dag_name(dag), form(to)),
        EventKind::RechainAbandoned { dag } => format!("DAG {}'s switch abandoned (old route did not drain)", dag_name(dag)),
        EventKind::Moved { instance, to } => format!("instance {} moved to {}", instance.0, place_name(to)),
        EventKind::MoveFailed { instance, to } => format!("instance {} lost moving to {} (worker died)", instance.0, place_name(to)),
        EventKind::PlaceAsked { peer } => format!("no room here: asked pool member {peer} to host it"),
        EventKind::Placed { peer } => format!("runs on peer {peer}: redirected there"),
        EventKind::PlaceRefused { peer } => format!("pool member {peer} did not host it"),
        EventKind::MovingBack { peer } => format!("moving back from peer {peer}: its packets wait for its state"),
        EventKind::MovedBack { peer, restored: Some(n) } => {
            format!("moved back from peer {peer} with its state ({n} entries): runs here again")
        }
        EventKind::MovedBack { peer, restored: None } => format!("moved back from peer {peer} WITHOUT its state: runs here again, afresh"),
        EventKind::PeerLost { peer } => format!("peer {peer} running it died: runs here again"),
        EventKind::SpillAsked { peer, share } => {
            format!("overloaded with no room here: asked pool member {peer} to host it for {} of its new flows", share_text(share))
        }
        EventKind::Spilled { peer, share } => {
            format!("spills to peer {peer}: {} of its new flows go there, each flow keeps its side", share_text(share))
        }
        EventKind::SpillShare { peer, share: 0 } => {
            format!("fits here again: new flows stay here, those on peer {peer} finish there")
        }
        EventKind::SpillShare { peer, share } => format!("overloaded again: {} of its new flows go to peer {peer}", share_text(share)),
        EventKind::Unspilled { peer } => format!("its flows on peer {peer} have ended: runs only here"),
        k => format!("{k:?}").to_lowercase(),
    }
}

/// A share of flows (of 1024) as a percentage.
fn share_text(share: u16) -> String {
    format!("{:.1}%", share as f64 * 100.0 / 1024.0)
}

/// What the data plane has logged so far: events, and which tenants fair sharing limits.
#[derive(Default)]
struct Logged {
    events: u64,
    limited: HashMap<TenantId, bool>,
    /// Per tenant, the totals last logged of what isolation refused: drops by reason index, and
    /// MACs not learned (`usize::MAX`).
    refused: HashMap<(TenantId, usize), u64>,
    /// The largest segment the backend groups for segmentation, as last logged.
    gso_max_segment: usize,
}

/// Logs the elastic events recorded since the last call, and tenants that fair sharing began
/// or stopped limiting. Runs with the snapshot (every 250 ms), never per packet.
fn log_news<B: Backend>(node: &Node<B>, plan: &Plan, logged: &mut Logged) {
    let seg = node.backend().gso_max_segment();
    if logged.gso_max_segment != 0 && seg < logged.gso_max_segment {
        tracing::warn!(
            bytes = seg + 1,
            "datagrams of this size and more exceed the path's MTU: they are sent one per message and fragmented by the kernel (docs/endpoints.md, MTU)"
        );
    }
    logged.gso_max_segment = seg;
    let st = node.core().events();
    let new = st.recorded - logged.events;
    if new > st.events.len() as u64 {
        tracing::warn!(missed = new - st.events.len() as u64, "more elastic events than the log keeps up with; see snic status");
    }
    for ev in st.events.iter().skip(st.events.len().saturating_sub(new as usize)) {
        // (The macros format their fields only at a level that is logged.)
        let (region, took_us) = (ev.region, ev.took_ns as f64 / 1e3);
        match ev.kind {
            EventKind::ContextSwitch { .. }
            | EventKind::Rechain { .. }
            | EventKind::Rechained { .. }
            | EventKind::RechainAbandoned { .. }
            | EventKind::Moved { .. }
            | EventKind::PlaceAsked { .. }
            | EventKind::Placed { .. }
            | EventKind::PlaceRefused { .. }
            | EventKind::MovingBack { .. }
            | EventKind::MovedBack { .. }
            | EventKind::PeerLost { .. }
            | EventKind::SpillAsked { .. }
            | EventKind::Spilled { .. }
            | EventKind::SpillShare { .. }
            | EventKind::Unspilled { .. }
            | EventKind::EndpointFallback => {
                tracing::info!(chain = chain_name(node, ev.chain), region, took_us, "{}", describe(node, plan, ev))
            }
            EventKind::MoveFailed { .. } => tracing::error!(chain = chain_name(node, ev.chain), region, "{}", describe(node, plan, ev)),
            _ => tracing::debug!(chain = chain_name(node, ev.chain), region, took_us, "{}", describe(node, plan, ev)),
        }
    }
    logged.events = st.recorded;
    for t in &plan.tenants {
        let limit = node.core().meter().limit(t.id);
        let was = logged.limited.insert(t.id, limit.is_some()).unwrap_or(false);
        match limit {
            Some(pps) if !was => {
                let f = fair_snap(node, t.id);
                tracing::info!(tenant = %t.name, limit_pps = pps.round(), dominant = f.dominant.as_deref().unwrap_or("-"), "fair sharing limits the tenant");
            }
            None if was => tracing::info!(tenant = %t.name, "fair sharing no longer limits the tenant"),
            _ => {}
        }
        // What a tenant (or someone posing as one) tried against the isolation: each new count
        // is logged once per snapshot, with its total (docs/endpoints.md, "Trust").
        let ts = &node.stats().tenants[t.id.index()];
        for why in [Drop::ForeignVtep, Drop::SpoofedVtep, Drop::ForeignVni] {
            let n = ts.drops[why.index()];
            let was = logged.refused.insert((t.id, why.index()), n).unwrap_or(0);
            if n > was {
                tracing::warn!(tenant = %t.name, reason = Drop::name(why.index()), new = n - was, total = n, "dropped packets that crossed a tenant boundary");
            }
        }
        let f = node.fdb().tenant(t.id);
        let was = logged.refused.insert((t.id, usize::MAX), f.refused).unwrap_or(0);
        if f.refused > was {
            tracing::warn!(tenant = %t.name, learned = f.learned, bound = f.bound, new_refused = f.refused - was, "the tenant is at its bound of learned MACs: its new ones are flooded on its own VNIs, not learned");
        }
    }
}

fn elastic_snap<B: Backend>(node: &Node<B>, plan: &Plan) -> ElasticSnap {
    let (st, policy) = (node.core().events(), node.core().elastic());
    let events = st.events.iter().skip(st.events.len().saturating_sub(EVENTS_SHOWN));
    ElasticSnap {
        enabled: policy.on(),
        launch_delay_ms: policy.config().launch_delay.as_secs_f64() * 1e3,
        monitor_period_ms: policy.monitor_period().as_secs_f64() * 1e3,
        build_us: policy.build_ns() / 1e3,
        counters: vec![
            ("prelaunches", st.prelaunches),
            ("launches", st.launches),
            ("resumes", st.resumes),
            ("context_switches", st.context_switches),
            ("scale_outs", st.scale_outs),
            ("scale_ins", st.scale_ins),
            ("deschedules", st.deschedules),
            ("endpoint_packets", st.endpoint_packets),
            ("region_shortfalls", policy.shortfalls()),
            ("rechains", st.rechains),
            ("moves", st.moves),
            ("remote_launches", st.remote_launches),
            ("remote_refusals", st.remote_refusals),
            ("answers_ignored", st.answers_ignored),
            // Requests for the peers the pool thread did not take in time (bounded queue).
            ("pool_requests_dropped", node.core().placements().dropped),
            ("moves_back", st.moves_back),
            ("spills", st.spills),
        ],
        events: events
            .map(|ev| EventSnap {
                at_ms: ev.at_ns as f64 / 1e6,
                chain: chain_name(node, ev.chain),
                region: ev.region,
                event: describe(node, plan, ev),
                took_us: ev.took_ns as f64 / 1e3,
            })
            .collect(),
    }
}

fn place_name(p: Place) -> String {
    match p {
        Place::Dispatcher => "the data-plane thread".into(),
        Place::Worker(w) => format!("worker {w}"),
    }
}

fn state_name(s: InstanceState) -> &'static str {
    match s {
        InstanceState::Launching => "launching",
        InstanceState::Running => "running",
        InstanceState::Draining => "draining",
        // A parked instance keeps its region loaded until the region is needed: a victim.
        InstanceState::Parked => "victim",
        InstanceState::Free => "free",
    }
}

fn fair_snap<B: Backend>(node: &Node<B>, t: snic_core::ids::TenantId) -> FairSnap {
    let fair = node.core().meter().fairness();
    let Some(s) = fair.shares().iter().find(|s| s.tenant == t) else { return FairSnap::default() };
    let names = fair.resources().iter().map(|r| r.name.clone());
    FairSnap {
        dominant: s.dominant.and_then(|d| fair.resources().get(d)).map(|r| r.name.clone()),
        dominant_share: s.dominant_share,
        fraction: s.fraction,
        limit_pps: node.core().meter().limit(t),
        limited_epochs: s.limited_epochs,
        demand: names.clone().zip(s.demand_within(&fair.resources().iter().map(|r| r.capacity).collect::<Vec<_>>())).collect(),
        offered_pps: s.offered_pps,
        allocation: names.zip(s.allocation.iter().copied()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::NodeSettings;
    use super::*;
    use snic_control::{manifest::parse, plan::plan, state::State};
    use snic_dataplane::backend::mem::MemPort;
    use snic_dataplane::backend::{Framing, RxMeta, TxReq, TxResult};
    use snic_dataplane::store::Slots;
    use snic_wire::build::{build, FrameSpec, L4Spec};

    /// An in-memory port the test keeps a handle on while the data plane's thread owns it.
    #[derive(Clone)]
    struct Shared(Arc<Mutex<MemPort>>);

    impl Backend for Shared {
        fn framing(&self) -> Framing {
            Framing::Datagram
        }
        fn recv(&mut self, slots: &Slots, idx: &mut [u32], meta: &mut [RxMeta]) -> usize {
            self.0.lock().unwrap().recv(slots, idx, meta)
        }
        fn send(&mut self, slots: &Slots, reqs: &[TxReq]) -> TxResult {
            self.0.lock().unwrap().send(slots, reqs)
        }
        fn wait(&mut self, timeout: Duration) {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
    }

    const VTEP_OUT: &str = "127.0.0.1:6000";

    /// Tenant red: VNI 400 through a counter to the endpoint behind `VTEP_OUT`; with `blue`,
    /// a second tenant beside it.
    fn red_plan(blue: bool) -> Plan {
        let mut y = format!(
            "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: red}}\nspec: {{vnis: [400]}}\n---\napiVersion: snic/v1\nkind: NT\nmetadata: {{name: red-counter}}\nspec: {{tenant: red, config: {{kind: counter}}}}\n---\napiVersion: snic/v1\nkind: DAG\nmetadata: {{name: red-dag}}\nspec: {{tenant: red, nodes: [red-counter]}}\n---\napiVersion: snic/v1\nkind: Rule\nmetadata: {{name: red-all}}\nspec: {{vni: 400, action: {{dag: red-dag}}}}\n---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: red-r}}\nspec: {{vni: 400, mac: '02:00:00:00:00:0b', vtep: '{VTEP_OUT}'}}\n"
        );
        if blue {
            y.push_str("---\napiVersion: snic/v1\nkind: Tenant\nmetadata: {name: blue}\nspec: {vnis: [100]}\n");
        }
        plan(&State::default().apply(parse(&y).unwrap()).unwrap(), 8).unwrap()
    }

    fn red_datagram() -> Vec<u8> {
        let spec = FrameSpec {
            outer: None,
            vni: 400,
            inner_src_mac: snic_wire::ethernet::MacAddr([2, 0, 0, 0, 0, 0xa]),
            inner_dst_mac: snic_wire::ethernet::MacAddr([2, 0, 0, 0, 0, 0xb]),
            src: "10.1.0.5".parse().unwrap(),
            dst: "10.2.0.9".parse().unwrap(),
            l4: L4Spec::Udp { src_port: 4000, dst_port: 5001 },
            payload_len: 64,
            payload_byte: 7,
        };
        let mut b = vec![0u8; 2048];
        let n = build(&spec, &mut b).unwrap();
        b.truncate(n);
        b
    }

    fn settings(rx_queues: RxQueues) -> Config {
        NodeSettings { rx_queues, ..NodeSettings::default() }.validate().unwrap()
    }

    /// The daemon's data plane is not written for UDP sockets: on an in-memory port it deploys,
    /// forwards a tenant's packets through its chain, takes a change of tenants in place and
    /// publishes what it did. Per-tenant receive queues on a port that has one are refused,
    /// saying so, not run on a shared queue unannounced.
    #[test]
    fn the_data_plane_runs_over_any_backend() {
        let port = Shared(Arc::new(Mutex::new(MemPort::new(Framing::Datagram))));
        let e = DataPlane::start_on(&settings(RxQueues::PerTenant), port.clone(), red_plan(false), Interfaces::new()).err().unwrap();
        assert!(format!("{e:#}").contains("one receive queue"), "{e:#}");

        let dp = DataPlane::start_on(&settings(RxQueues::Shared), port.clone(), red_plan(false), Interfaces::new()).unwrap();
        let from: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let sent = |n: usize| {
            let mut p = port.0.lock().unwrap();
            p.rx.extend(std::iter::repeat_n((red_datagram(), from), n));
        };
        // Bounded: the data plane's thread runs on the machine's clock.
        let wait_for = |what: &str, done: &dyn Fn() -> bool| {
            let t0 = Instant::now();
            while !done() {
                assert!(t0.elapsed() < Duration::from_secs(20), "{what}: not within 20 s");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        sent(20);
        wait_for("red's packets out", &|| port.0.lock().unwrap().tx.len() == 20);
        assert!(port.0.lock().unwrap().tx.iter().all(|(_, dst)| dst.to_string() == VTEP_OUT));

        dp.deploy(red_plan(true)).unwrap();
        sent(10);
        wait_for("red's packets out after the change", &|| port.0.lock().unwrap().tx.len() == 30);
        wait_for("a snapshot with red's packets", &|| {
            dp.snapshot.lock().unwrap().tenants.iter().any(|t| t.rx_packets == 30 && t.tx_packets == 30)
        });
        let s = dp.snapshot.lock().unwrap();
        assert_eq!((s.tenants.len(), s.rebuilds), (2, 0), "blue added in place");
        drop(s);
        dp.stop();
    }

    #[test]
    fn a_data_plane_that_stopped_publishing_is_reported_down() {
        let t0 = Instant::now();
        let s = Snapshot { published: Some(t0), ..Snapshot::default() };
        assert_eq!(s.health(t0 + Duration::from_millis(300)), (true, Duration::from_millis(300)));
        assert!(!s.health(t0 + STALE_AFTER).0);
        assert!(!Snapshot::default().health(t0).0, "never published: down");
    }
}
