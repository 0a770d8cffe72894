//! A node's placements on its peers: the hosting it asked for and has not had an answer to,
//! the DAGs peers host for it, the chains coming home that wait for their state, and the
//! requests for the driver to carry to the peers. The node's core keeps them and applies one
//! rule to every answer ([`crate::node::NodeCore::host_answer`]); drivers — the data plane and
//! the simulator alike — carry the requests out and act on the [`PoolNote`]s.

use crate::ids::{ChainId, DagUid};
use crate::pool::ChainKey;
use crate::time::Instant;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// What the node asks of a peer (the driver carries it to the pool and hands the answer back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolRequest {
    /// Ask the member at pool address `peer` to host DAG `dag` — its packets enter it at step
    /// `pos`, for chain `chain` — and answer with [`crate::node::NodeCore::host_answer`] (with
    /// `chain`, `route` and `peer` as given).
    Place {
        /// The chain that needs a region.
        chain: ChainId,
        /// This node's route the packets were on.
        route: u32,
        /// The DAG.
        dag: DagUid,
        /// The step its packets enter on the peer.
        pos: u8,
        /// The peer's pool address.
        peer: SocketAddr,
    },
    /// Chain `chain` comes home: the member at pool address `peer` is to stop hosting its DAG
    /// `hosted` for this node — once the `sent` packets this node sent it have arrived, and it
    /// has run them — and send the state of its chains' NTs; answer with
    /// [`crate::node::NodeCore::pool_returned`] (the chain's packets wait for it).
    Return {
        /// The chain coming home.
        chain: ChainId,
        /// Its key: the state of the peer's chain of this key is the chain's.
        key: ChainKey,
        /// The peer's pool address.
        peer: SocketAddr,
        /// Its number for the DAG.
        hosted: u32,
        /// Packets this node sent it for the DAG, in all.
        sent: u64,
    },
    /// The member at pool address `peer` no longer needs to host its DAG `hosted` for this
    /// node (the chain went away while it was being placed, its spill ended, or nobody asked).
    Unhost {
        /// The peer's pool address.
        peer: SocketAddr,
        /// Its number for the DAG.
        hosted: u32,
    },
}

/// A peer's answer to [`PoolRequest::Place`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostAnswer {
    /// It hosts the DAG as its DAG `hosted`; redirected packets go to its data address `data`,
    /// named for its incarnation of generation `gen`.
    Hosted {
        /// The peer's data address.
        data: SocketAddr,
        /// Its number for the DAG.
        hosted: u32,
        /// Its generation.
        gen: u64,
    },
    /// It refused, or did not answer in time.
    Refused,
}

/// What the core did about the pool, for the driver to act on (its packets, its counters, its
/// log) — in the order it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolNote {
    /// `peer` (pool address) was asked to host `chain` — the whole of it (its packets wait for
    /// the answer), or `share` of its new flows.
    Asked {
        /// The chain.
        chain: ChainId,
        /// The peer's pool address.
        peer: SocketAddr,
        /// A spill's share of new flows, in 1/1024ths; `None`: the whole chain.
        share: Option<u16>,
    },
    /// The whole of `chain` runs on the peer at data address `data` from now: the packets that
    /// waited for the answer go there first.
    Placed {
        /// The chain.
        chain: ChainId,
        /// The peer's data address.
        data: SocketAddr,
    },
    /// `share` of `chain`'s new flows go to the peer at data address `data` from now.
    Spilled {
        /// The chain.
        chain: ChainId,
        /// The peer's data address.
        data: SocketAddr,
        /// Its share, in 1/1024ths.
        share: u16,
    },
    /// `peer` (pool address) did not host `chain`: it is not asked again until it reports
    /// anew; a whole chain's waiting packets take the next step of the launch order.
    Refused {
        /// The chain.
        chain: ChainId,
        /// The peer's pool address.
        peer: SocketAddr,
        /// It was asked for a share of the chain's flows.
        spill: bool,
    },
    /// An answer about `chain` from `peer` (pool address) that the core did not take: that
    /// peer was not asked (or was asked no longer), or the chain no longer wants it (gone, or
    /// no longer spilling). A peer that hosted is told to stop ([`PoolRequest::Unhost`]).
    Ignored {
        /// The chain named.
        chain: ChainId,
        /// The peer that answered.
        peer: SocketAddr,
    },
    /// The share of `chain`'s new flows that goes to the peer at data address `data` changes.
    SpillShare {
        /// The chain.
        chain: ChainId,
        /// The peer's data address (its pool address if it hosts nothing yet).
        data: SocketAddr,
        /// The new share, in 1/1024ths.
        share: u16,
    },
    /// `chain`'s flows on the peer at data address `data` have ended: it was told to stop
    /// hosting.
    Unspilled {
        /// The chain.
        chain: ChainId,
        /// The peer's data address.
        data: SocketAddr,
    },
    /// `chain` comes home from the peer at data address `data`: its packets stop going there
    /// and wait for its NTs' state ([`PoolRequest::Return`]).
    MovingBack {
        /// The chain.
        chain: ChainId,
        /// The peer's data address.
        data: SocketAddr,
    },
    /// The peer `chain` ran on (data address `data`) is gone: it runs here again.
    PeerLost {
        /// The chain.
        chain: ChainId,
        /// The peer's data address.
        data: SocketAddr,
    },
    /// `chain`, coming home since `since`, will not get its state: the peer it waited for is
    /// gone. Its packets run here, its NTs start afresh.
    ReturnLost {
        /// The chain.
        chain: ChainId,
        /// The peer's data address.
        data: SocketAddr,
        /// When it started coming home.
        since: Instant,
    },
}

/// A placement asked for and not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Asked {
    pub chain: ChainId,
    pub route: u32,
    /// The peer asked (pool address): only its answer counts.
    pub peer: SocketAddr,
    /// A share of the chain's new flows (a spill), not the whole chain.
    pub spill: bool,
}

/// A DAG a peer hosts for this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedDag {
    /// The chain it runs.
    pub chain: ChainId,
    /// This node's route whose packets go there.
    pub route: u32,
    /// The peer's pool address.
    pub peer: SocketAddr,
    /// The peer's data address.
    pub data: SocketAddr,
    /// The peer's number for the DAG.
    pub hosted: u32,
    /// It takes a share of the chain's new flows (the chain runs here too).
    pub spill: bool,
}

/// A chain coming home, waiting for its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Returning {
    pub chain: ChainId,
    pub peer: SocketAddr,
    pub data: SocketAddr,
    pub since: Instant,
}

/// Most requests kept for a driver that does not take them: a driver that polls does not come
/// near (one per placement asked, returned or ended), and a node that has no pool driver (a
/// test, a bench) does not grow without bound. The oldest goes first.
pub const MAX_REQUESTS: usize = 4096;

/// The node's placements on its peers. See the module docs.
#[derive(Debug, Default)]
pub struct Placements {
    pub(crate) asked: Vec<Asked>,
    pub(crate) placed: Vec<PlacedDag>,
    pub(crate) returning: Vec<Returning>,
    requests: VecDeque<PoolRequest>,
    /// Requests dropped because the driver took none ([`MAX_REQUESTS`]).
    pub dropped: u64,
}

impl Placements {
    /// The DAGs peers host for this node.
    pub fn placed(&self) -> &[PlacedDag] {
        &self.placed
    }

    /// True while a placement of the whole of `chain` is asked and not answered.
    pub fn placing(&self, chain: ChainId) -> bool {
        self.asked.iter().any(|p| p.chain == chain && !p.spill)
    }

    /// True while `chain` comes home and waits for its state.
    pub fn returning(&self, chain: ChainId) -> bool {
        self.returning.iter().any(|r| r.chain == chain)
    }

    /// True while `chain`'s packets wait for the pool: a peer is asked to host it, or it comes
    /// home and waits for its state.
    pub fn waits(&self, chain: ChainId) -> bool {
        self.placing(chain) || self.returning(chain)
    }

    /// Takes the placement of `chain` on `route` asked of `peer`: whether it was a spill.
    /// `None`: nothing of the kind was asked of that peer (the one acceptance rule).
    pub(crate) fn answered(&mut self, chain: ChainId, route: u32, peer: SocketAddr) -> Option<bool> {
        let i = self.asked.iter().position(|p| p.chain == chain && p.route == route && p.peer == peer)?;
        Some(self.asked.swap_remove(i).spill)
    }

    pub(crate) fn request(&mut self, r: PoolRequest) {
        if self.requests.len() >= MAX_REQUESTS {
            self.requests.pop_front();
            self.dropped += 1;
        }
        self.requests.push_back(r);
    }

    /// The oldest request not yet taken.
    pub(crate) fn next_request(&mut self) -> Option<PoolRequest> {
        self.requests.pop_front()
    }
}
