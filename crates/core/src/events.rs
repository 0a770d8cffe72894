//! What happened on a node, as its core saw it: launches, resumes, context switches,
//! scaling, DAG form switches, region moves and the pool's placements, each an [`Event`] with
//! its time, chain and region; counters by kind; the most recent events for `snic status` and
//! the daemon's log. [`crate::node::NodeCore`] keeps them ([`crate::node::NodeCore::events`]),
//! and records most itself as it decides; the driver records what only it sees happen (a
//! launch running, a region that moved).

use crate::ids::{ChainId, DagUid, InstanceId};
use crate::launches::Launched;
use crate::placement::Place;
use crate::rechain::Form;
use std::collections::VecDeque;
use std::net::SocketAddr;

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

    /// Counts `e` and keeps it among the recent events.
    pub fn record(&mut self, e: Event) {
        match e.kind {
            EventKind::Prelaunch => self.prelaunches += 1,
            EventKind::Launch => self.launches += 1,
            EventKind::Resume => self.resumes += 1,
            EventKind::ContextSwitch { .. } => self.context_switches += 1,
            EventKind::ScaleOut => self.scale_outs += 1,
            EventKind::ScaleIn => self.scale_ins += 1,
            EventKind::Deschedule => self.deschedules += 1,
            EventKind::Moved { .. } => self.moves += 1,
            EventKind::Placed { .. } => self.remote_launches += 1,
            EventKind::Spilled { .. } => {
                self.remote_launches += 1;
                self.spills += 1;
            }
            EventKind::PlaceRefused { .. } => self.remote_refusals += 1,
            EventKind::MovedBack { .. } => self.moves_back += 1,
            EventKind::Rechained { .. } => self.rechains += 1,
            EventKind::MoveFailed { .. }
            | EventKind::Running { .. }
            | EventKind::EndpointFallback
            | EventKind::Rechain { .. }
            | EventKind::RechainAbandoned { .. }
            | EventKind::PlaceAsked { .. }
            | EventKind::MovingBack { .. }
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
