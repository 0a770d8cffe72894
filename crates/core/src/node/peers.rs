//! The node's side of its pool, through its core: what it redirects to peers (per chain, per
//! route it placed, per flow that spills), which node holds a flow's state behind a switch,
//! and what its agent knows of its peers. The driver reads them (`pool()`, `redirects()`,
//! `spills()`, `owners()`) and tells the core what it carried out through these verbs.

use super::{NodeCore, PoolReach};
use crate::ids::{ChainId, DagUid};
use crate::pool::owner::{Claim, Owners};
use crate::pool::redirect::{Redirect, Redirects, Target};
use crate::pool::spill::Spills;
use crate::pool::PoolAgent;
use crate::time::Instant;
use std::net::SocketAddr;

impl NodeCore {
    /// The pool agent (peers, their reports, what runs where), read-only.
    pub fn pool(&self) -> &PoolAgent {
        &self.pool
    }

    /// What goes to peers, read-only.
    pub fn redirects(&self) -> &Redirects {
        &self.redirects
    }

    /// The chains that spill a share of their flows, read-only.
    pub fn spills(&self) -> &Spills {
        &self.spills
    }

    /// Which node holds a flow's state in a pool behind a switch, read-only.
    pub fn owners(&self) -> &Owners {
        &self.owners
    }

    /// Whether this node can redirect packets to its peers.
    pub fn set_pool_reach(&mut self, reach: PoolReach) {
        self.reach = reach;
    }

    /// The pool's links (a ring's, or a switch's): hops to each peer.
    pub fn set_pool_links(&mut self, me: SocketAddr, links: &[[SocketAddr; 2]]) {
        self.pool.set_links(me, links);
    }

    /// Redirects `chain`'s packets (a share of its flows) to a peer, replacing what it had.
    pub fn redirect_chain(&mut self, chain: ChainId, r: Redirect) {
        self.redirects.set(chain, r);
    }

    /// Where a packet of flow `flow_hash` on this node's route `route` that reaches `chain` at
    /// `now` goes: a peer, or `None` — here ([`Redirects::target`]; a packet given a peer is
    /// counted as sent there: the caller sends it).
    #[inline]
    pub fn redirect_target(&mut self, chain: ChainId, route: u32, flow_hash: u64, now: Instant) -> Option<Target> {
        self.redirects.target(chain, route, flow_hash, now)
    }

    /// Stops redirecting `chain`; what it had.
    pub fn stop_redirect(&mut self, chain: ChainId) -> Option<Redirect> {
        self.redirects.clear(chain)
    }

    /// `peer`, in its incarnation of generation `gen`, hosts this node's route `route` as its
    /// DAG `hosted`.
    pub fn redirect_route(&mut self, route: u32, peer: SocketAddr, hosted: u32, gen: u64) {
        self.redirects.set_route(route, peer, hosted, gen);
    }

    /// `peer` no longer hosts route `route`: the packets sent to it for the route, if it did.
    pub fn clear_redirect_route(&mut self, route: u32, peer: SocketAddr) -> Option<u64> {
        self.redirects.clear_route(route, peer)
    }

    /// Forgets what `peer` hosts (it died, or left): the chains redirected to it, which no
    /// longer are.
    pub fn forget_peer(&mut self, peer: SocketAddr) -> Vec<ChainId> {
        self.redirects.forget_peer(peer)
    }

    /// What DAG `dag`'s stateful NTs claim of return traffic, in a pool behind a switch.
    pub fn set_claims(&mut self, dag: DagUid, claims: Vec<Claim>) {
        self.owners.set_claims(dag, claims);
    }

    /// The draining peer at data address `owner` holds the state of the flows of these hashes:
    /// their packets go to it.
    pub fn pin_owner(&mut self, now: Instant, owner: SocketAddr, hashes: &[u64]) {
        self.owners.pin(now, owner, hashes);
    }

    /// This node drains (`true`: it takes no new flows' state) or no longer does.
    pub fn set_draining(&mut self, on: bool) {
        self.owners.set_draining(on);
    }

    /// A packet went to the node that holds its state.
    #[inline]
    pub fn owner_forwarded(&mut self) {
        self.owners.forwarded += 1;
    }

    /// A packet arrived from a peer as its state's owner.
    #[inline]
    pub fn owner_received(&mut self) {
        self.owners.received += 1;
    }
}
