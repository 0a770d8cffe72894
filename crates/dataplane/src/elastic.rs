//! Elastic NTs on one node (paper 000 §4.3–§4.4): a fixed number of regions, chains pre-launched
//! at deploy, launched on demand when their first packet arrives, context-switched with
//! stop-and-launch, kept as victims, and auto-scaled with load.
//!
//! The policy is `snic-core`'s (`snic_core::elastic::Elasticity`, in the node's
//! `snic_core::node::NodeCore`: where a chain runs, when an instance is added
//! or removed, which one stops; the scheduler's instance lifecycle for moving flows without
//! loss or reordering; which instance is in which region and the launches under way,
//! `snic_core::launches`); this module holds the node's side of it — the NTs built for a
//! launch until it runs, NT state saved by stopped chains, and what happened, for `snic
//! status`. The node drives it (`node::elastic`).
//!
//! In software a region is an execution slot: one chain instance, its NTs built and loaded, on
//! the dispatcher's thread or a worker's. A launch builds the NTs (the real instantiation
//! cost, measured) and waits an optional emulated reconfiguration delay (0 by default; 5 ms
//! reproduces the paper's partial reconfiguration). A stopped chain's NTs keep their state in
//! memory: a victim keeps its whole region; an evicted chain's NTs are saved and restored at its
//! next launch (the paper's "store their states in on-board memory").

use snic_core::ids::{ChainId, DagUid, InstanceId};
use snic_core::placement::Place;
use snic_core::rechain::Form;
use snic_nt::Nt;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Elasticity parameters (the node config's `elastic:` block): the core's.
pub use snic_core::elastic::ElasticConfig;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Launched into a free region at deploy.
    Prelaunch,
    /// Launched into a free region when its first packet arrived.
    Launch,
    /// A victim ran again: no launch.
    Resume,
    /// Stop-and-launch: `evicted` stopped so this chain could run in its region.
    ContextSwitch {
        /// The chain that stopped.
        evicted: ChainId,
    },
    /// One more instance (auto-scaling).
    ScaleOut,
    /// One instance fewer (auto-scaling); its flows moved to the others.
    ScaleIn,
    /// The chain's last instance stopped (idle for a whole MONITOR_PERIOD).
    Deschedule,
    /// A launched chain started running; `took_ns` is from request to running.
    Running {
        /// What the launch was for.
        after: Launched,
    },
    /// No region could be found; packets were sent on for the tenant's endpoint to process.
    EndpointFallback,
    /// DAG `dag` starts switching to another chain candidate (its arrivals wait until its old
    /// route is empty); `chain` is the first chain of the new form.
    Rechain {
        /// The DAG (its UID in the MAT).
        dag: DagUid,
        /// The form it switches to.
        to: Form,
    },
    /// The switch is done: the DAG runs as `to`; `took_ns` is from its start (the time its
    /// arrivals were held).
    Rechained {
        /// The DAG.
        dag: DagUid,
        /// The form it now runs as.
        to: Form,
    },
    /// The old route did not drain in time; the DAG stays as it was.
    RechainAbandoned {
        /// The DAG.
        dag: DagUid,
    },
    /// An instance's region moved to another core (long chains apart from short ones);
    /// `took_ns` is from the decision (dispatch to it held) to running there.
    Moved {
        /// The instance.
        instance: InstanceId,
        /// Where it runs now.
        to: Place,
    },
    /// A move failed: the worker thread holding the region died.
    MoveFailed {
        /// The instance.
        instance: InstanceId,
        /// Where it was to go.
        to: Place,
    },
    /// No room here: a peer (its pool address) is asked to host the chain's DAG.
    PlaceAsked {
        /// The peer.
        peer: SocketAddr,
    },
    /// A peer (its data address) hosts the chain's DAG: its packets are redirected there.
    Placed {
        /// The peer.
        peer: SocketAddr,
    },
    /// Overloaded with no room here: a peer (its pool address) is asked to host the chain's DAG
    /// for `share` (of 1024) of its new flows.
    SpillAsked {
        /// The peer.
        peer: SocketAddr,
        /// Of 1024.
        share: u16,
    },
    /// A peer (its data address) hosts the chain's DAG: `share` (of 1024) of its new flows go
    /// there, each flow keeping its side.
    Spilled {
        /// The peer.
        peer: SocketAddr,
        /// Of 1024.
        share: u16,
    },
    /// The share of the chain's new flows sent to its peer (data address) changed: 0 when its
    /// load fits here again (the peer's flows finish there), back when it is overloaded again.
    SpillShare {
        /// The peer.
        peer: SocketAddr,
        /// Of 1024.
        share: u16,
    },
    /// The chain's flows on its peer (data address) have all ended: it runs only here.
    Unspilled {
        /// The peer.
        peer: SocketAddr,
    },
    /// The peer (its pool address) refused, or did not answer.
    PlaceRefused {
        /// The peer.
        peer: SocketAddr,
    },
    /// Home had room a whole MONITOR_PERIOD: the chain comes home from the peer (its data
    /// address). Its packets stop going there and wait here for its NTs' state.
    MovingBack {
        /// The peer.
        peer: SocketAddr,
    },
    /// The chain runs here again, no longer on the peer (its data address); `took_ns` is the
    /// pause (its packets waited from [`EventKind::MovingBack`] to now). `restored`: the state
    /// entries (NAT flows, counts) its NTs took from the peer's; `None`: the state did not come
    /// (the peer did not answer, or died) and the chain starts afresh.
    MovedBack {
        /// The peer.
        peer: SocketAddr,
        /// State entries restored.
        restored: Option<u32>,
    },
    /// The peer (its data address) running the chain died: it runs here again.
    PeerLost {
        /// The peer.
        peer: SocketAddr,
    },
}

/// Why a chain was launched (the core's).
pub use snic_core::launches::Launched;

/// One event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When (node clock, ns).
    pub at_ns: u64,
    /// The chain.
    pub chain: ChainId,
    /// The region, if one is involved.
    pub region: Option<usize>,
    /// What.
    pub kind: EventKind,
    /// For `Running`: request to running, ns; for launches: the NTs' build time, ns.
    pub took_ns: u64,
}

/// Counters and recent events.
#[derive(Debug, Clone, Default)]
pub struct ElasticStats {
    /// Pre-launches at deploy.
    pub prelaunches: u64,
    /// On-demand launches into a free region.
    pub launches: u64,
    /// Victim-cache hits (resumed without a launch).
    pub resumes: u64,
    /// Stop-and-launch context switches.
    pub context_switches: u64,
    /// Scale-outs.
    pub scale_outs: u64,
    /// Scale-ins.
    pub scale_ins: u64,
    /// Idle chains descheduled.
    pub deschedules: u64,
    /// Packets sent on unprocessed for the endpoint.
    pub endpoint_packets: u64,
    /// DAGs switched to another chain candidate.
    pub rechains: u64,
    /// Regions moved to another core.
    pub moves: u64,
    /// Chains placed on a peer (remote launches that succeeded).
    pub remote_launches: u64,
    /// Remote launches a peer refused or did not answer.
    pub remote_refusals: u64,
    /// Answers to remote launches not taken: from a peer that was not asked, or for a chain
    /// that no longer wanted it (a peer that hosted was told to stop).
    pub answers_ignored: u64,
    /// Chains that came home from a peer.
    pub moves_back: u64,
    /// Chains that began sending a share of their new flows to a peer.
    pub spills: u64,
    /// Most recent events, oldest first (at most [`ElasticStats::EVENTS`]).
    pub events: VecDeque<Event>,
    /// Events recorded since the start (the last `events.len()` of them are in `events`).
    pub recorded: u64,
}

impl ElasticStats {
    /// Events kept.
    pub const EVENTS: usize = 256;

    pub(crate) fn record(&mut self, e: Event) {
        match e.kind {
            EventKind::Prelaunch => self.prelaunches += 1,
            EventKind::Launch => self.launches += 1,
            EventKind::Resume => self.resumes += 1,
            EventKind::ContextSwitch { .. } => self.context_switches += 1,
            EventKind::ScaleOut => self.scale_outs += 1,
            EventKind::ScaleIn => self.scale_ins += 1,
            EventKind::Deschedule => self.deschedules += 1,
            EventKind::Moved { .. } => self.moves += 1,
            EventKind::Spilled { .. } => self.spills += 1,
            EventKind::MoveFailed { .. }
            | EventKind::Running { .. }
            | EventKind::EndpointFallback
            | EventKind::Rechain { .. }
            | EventKind::Rechained { .. }
            | EventKind::RechainAbandoned { .. }
            | EventKind::PlaceAsked { .. }
            | EventKind::Placed { .. }
            | EventKind::PlaceRefused { .. }
            | EventKind::MovingBack { .. }
            | EventKind::MovedBack { .. }
            | EventKind::PeerLost { .. }
            | EventKind::SpillAsked { .. }
            | EventKind::SpillShare { .. }
            | EventKind::Unspilled { .. } => {}
        }
        if self.events.len() == Self::EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(e);
        self.recorded += 1;
    }
}

/// The node's elastic state. See the module docs.
pub struct Elastic {
    /// Per region: the NTs built for the launch into it under way, until it runs.
    pub(crate) built: Vec<Option<Vec<Box<dyn Nt>>>>,
    /// The policy's acts of one epoch (kept to reuse its room).
    pub(crate) acts: Vec<snic_core::elastic::Act>,
    /// A buffer for the packets that wait no more (those waiting are the core's,
    /// [`snic_core::node::NodeCore::wait_for_launch`]).
    pub(crate) released: Vec<u32>,
    /// Per chain: NT state saved by evicted instances, most recent last (bounded).
    pub(crate) saved: Vec<Vec<Vec<Box<dyn Nt>>>>,
    pub(crate) stats: ElasticStats,
}

/// Saved NT states kept per chain.
pub(crate) const SAVED_PER_CHAIN: usize = 4;

impl Elastic {
    /// For `regions` regions.
    pub(crate) fn new(regions: usize) -> Self {
        Elastic {
            built: (0..regions).map(|_| None).collect(),
            acts: Vec::new(),
            released: Vec::new(),
            saved: Vec::new(),
            stats: ElasticStats::default(),
        }
    }

    /// A chain goes away (or its id is reused): no saved state.
    pub(crate) fn forget_chain(&mut self, chain: ChainId) {
        if let Some(saved) = self.saved.get_mut(chain.index()) {
            saved.clear();
        }
    }

    pub(crate) fn add_chain(&mut self) {
        self.saved.push(Vec::new());
    }

    /// Counters and recent events.
    pub fn stats(&self) -> &ElasticStats {
        &self.stats
    }
}
