//! Placement on the pool, the node's side: carrying out what the node's core decides
//! ([`snic_core::node::placing`]: the pool agent's decisions, the one rule for a host's answer,
//! the placements themselves — the simulator's nodes run the same code). When packets need a chain this node has
//! no room for and a peer has ([`snic_core::node::NodeCore::place`]), the node asks the driver
//! to have that peer host the packets' DAG ([`PoolRequest::Place`], a remote launch); the
//! packets wait meanwhile. The answer ([`Node::pool_answer`])
//! starts the redirect, or lets the packets take the next step of the launch order (the agent
//! does not ask a peer that refused again until it reports anew). Each epoch the agent may bring
//! a chain home ([`PoolAct::MoveBack`]: home has had room a whole MONITOR_PERIOD): the redirect
//! stops, the chain's next packets launch it here, and the driver tells the peer it may stop
//! hosting ([`PoolRequest::Unhost`]). A peer that dies: its chains run here again.
//!
//! A chain overloaded here with no room *spills* a share of its new flows to a peer
//! ([`snic_core::pool::spill`], decided in the core): the same remote launch, then a redirect
//! of that share, each flow keeping its side; when its flows on the peer have ended, the peer
//! is told it may stop hosting.
//!
//! Pool addresses (the agent's, the membership's) and data addresses (where redirected packets
//! go) differ: the answer to a placement gives the peer's data address.

use super::{Backend, Node};
use snic_core::ids::ChainId;
use snic_core::pool::placements::PoolNote;
use snic_core::pool::{ChainKey, Heard, LoadReport, MemberEvent};
use snic_core::time::Instant;
use std::net::SocketAddr;

pub use snic_core::pool::placements::{HostAnswer, PoolRequest};

impl<B: Backend> Node<B> {
    /// The pool's links (node.yaml's `pool.links`) and this node's pool address: the hop
    /// distance to each peer (the agent prefers the nearest), and the pass-through routes — a
    /// redirect to a peer with no link to this node goes through the nodes between
    /// ([`snic_core::pool::PoolAgent::via`]), which pass it on.
    pub fn set_pool_links(&mut self, me: SocketAddr, links: &[[SocketAddr; 2]]) {
        self.core.set_pool_links(me, links);
    }

    /// A member's load report (`from`: its pool address).
    pub fn pool_report(&mut self, from: SocketAddr, report: LoadReport) {
        let now = self.clock.now();
        self.core.handle_report(now, from, report);
    }

    /// A membership change: a peer that went down loses what it ran for this node, which runs
    /// here again (or on another peer).
    pub fn pool_member(&mut self, event: MemberEvent) {
        let now = self.clock.now();
        self.carry_out(now, |core, notes| core.pool_member(now, event, notes));
    }

    /// Member `from` (pool address) spoke with generation `gen`: one newer than the one known
    /// restarted, and what it ran for this node is gone
    /// ([`snic_core::node::NodeCore::pool_heard`]). `Heard::Stale`: ignore what it said.
    pub fn pool_heard(&mut self, from: SocketAddr, gen: u64) -> Heard {
        let now = self.clock.now();
        self.carry_out(now, |core, notes| core.pool_heard(now, from, gen, notes))
    }

    /// Keeps (`true`) or stops keeping a trace of the pool's requests and notes (a test's).
    pub fn trace_pool(&mut self, on: bool) {
        self.core.trace_pool(on);
    }

    /// The DAGs peers host for this node (placed, or taking a share of a chain's flows): each
    /// peer's pool address and its number for the DAG. A driver that replaces the node (a
    /// rebuild) tells them to stop ([`PoolRequest::Unhost`]): the new node places afresh.
    pub fn placed_dags(&self) -> Vec<(SocketAddr, u32)> {
        self.core.placements().placed().iter().map(|p| (p.peer, p.hosted)).collect()
    }

    /// What the node asks of the pool, oldest first.
    pub fn poll_pool(&mut self) -> Option<PoolRequest> {
        self.core.poll_pool_request()
    }

    /// The peer at pool address `peer` answered whether it hosts `route`'s DAG for `chain`
    /// ([`snic_core::node::NodeCore::host_answer`], the one rule for it). Hosted, by the peer
    /// that was asked ([`PoolRequest::Place`]): `chain`'s packets on that route go there from
    /// now, those that waited first (or, for a spill, the share of its new flows), named for
    /// that incarnation; by another, the peer is told it need not host it. Refused (or no
    /// answer): the agent does not ask it again until it reports anew, and the packets that
    /// waited take the next step of the launch order (a spill looks for another peer).
    pub fn pool_answer(&mut self, chain: ChainId, route: u32, peer: SocketAddr, answer: HostAnswer) {
        let now = self.clock.now();
        self.carry_out(now, |core, notes| core.host_answer(now, chain, route, peer, answer, notes));
    }

    /// `chain`'s pool-wide key (its NTs' names).
    pub(super) fn chain_key(&self, chain: ChainId) -> ChainKey {
        self.core.meter().chain_key(chain)
    }

    /// The epoch's pool decisions (after the elasticity policy's).
    pub(super) fn pool_epoch(&mut self) {
        let now = self.clock.now();
        self.carry_out(now, |core, notes| core.pool_epoch(now, notes));
    }

    /// Has the core do `decide` at `now`, then acts on what it noted (in a buffer kept between
    /// calls); what `decide` gave.
    pub(super) fn carry_out<T>(&mut self, now: Instant, decide: impl FnOnce(&mut snic_core::node::NodeCore, &mut Vec<PoolNote>) -> T) -> T {
        let mut notes = std::mem::take(&mut self.pool.notes);
        let out = decide(&mut self.core, &mut notes);
        // (The core may have begun or stopped recording a chain's flows, or redirected one:
        // packets released next must see it.)
        self.update_pool_on();
        self.act_on(&mut notes, now);
        self.pool.notes = notes;
        out
    }

    /// The driver's part of what the core did (which recorded it, [`snic_core::node::NodeCore::events`]):
    /// waiting packets released, chains coming home.
    fn act_on(&mut self, notes: &mut Vec<PoolNote>, now: Instant) {
        for note in notes.drain(..) {
            match note {
                PoolNote::Placed { chain, .. } | PoolNote::Refused { chain, spill: false, .. } => self.release_waiting(Some(chain), now),
                PoolNote::ReturnLost { chain, data, since } => self.came_home(chain, data, since, None, now),
                _ => {}
            }
        }
    }
}
