//! Placement on the pool, the node's side: carrying out what the pool agent decides
//! ([`snic_core::pool::PoolAgent`], in the node's core). When packets need a chain this node has
//! no room for and a peer has ([`snic_core::node::NodeCore::place`]), the node asks the driver
//! to have that peer host the packets' DAG ([`PoolRequest::Place`], a remote launch); the
//! packets wait meanwhile. The answer ([`Node::pool_placed`] / [`Node::pool_place_failed`])
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
use crate::elastic::EventKind;
use crate::node::elastic::OnDemand;
use snic_core::ids::{ChainId, DagUid};
use snic_core::pool::redirect::SHARE_ALL;
use snic_core::pool::spill::Phase;
use snic_core::pool::{ChainKey, LoadReport, MemberEvent, Placement, PoolAct};
use snic_core::time::Instant;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// What the node asks of its driver (which talks to the pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolRequest {
    /// Ask the member at pool address `peer` to host DAG `dag` (the MAT's UID) — its packets
    /// enter it at step `pos`, for chain `chain` — and answer with [`Node::pool_placed`] or
    /// [`Node::pool_place_failed`] (with `chain`, `route` as given).
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
    /// [`Node::pool_returned`] (the chain's packets wait for it).
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
    /// node (the chain went away while it was being placed).
    Unhost {
        /// The peer's pool address.
        peer: SocketAddr,
        /// Its number for the DAG.
        hosted: u32,
    },
}

/// A DAG a peer hosts for this node because the agent placed its chain there.
#[derive(Debug, Clone, Copy)]
struct PlacedDag {
    chain: ChainId,
    route: u32,
    /// The peer's pool address, its data address, its number for the DAG.
    peer: SocketAddr,
    data: SocketAddr,
    hosted: u32,
    /// It takes a share of the chain's new flows (the chain runs here too).
    spill: bool,
}

/// A placement asked for and not answered.
#[derive(Debug, Clone, Copy)]
struct Asked {
    chain: ChainId,
    route: u32,
    /// A share of the chain's new flows (a spill), not the whole chain.
    spill: bool,
}

/// Placements under way and done.
#[derive(Default)]
pub(crate) struct Placements {
    placing: Vec<Asked>,
    placed: Vec<PlacedDag>,
    requests: VecDeque<PoolRequest>,
    acts: Vec<PoolAct>,
}

impl Placements {
    /// True while a placement of the whole of `chain` is asked and not answered.
    pub(crate) fn placing(&self, chain: ChainId) -> bool {
        self.placing.iter().any(|p| p.chain == chain && !p.spill)
    }

    /// Takes the placement of `chain` on `route` asked for: whether it was a spill.
    fn answered(&mut self, chain: ChainId, route: u32) -> Option<bool> {
        let i = self.placing.iter().position(|p| p.chain == chain && p.route == route)?;
        Some(self.placing.swap_remove(i).spill)
    }
}

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
        if let MemberEvent::Down(peer) = event {
            self.returns_lost(peer);
        }
        let now = self.clock.now();
        self.carry_out(|core, acts| core.handle_member(now, event, acts));
    }

    /// The DAGs peers host for this node (placed, or taking a share of a chain's flows): each
    /// peer's pool address and its number for the DAG. A driver that replaces the node (a
    /// rebuild) tells them to stop ([`PoolRequest::Unhost`]): the new node places afresh.
    pub fn placed_dags(&self) -> Vec<(SocketAddr, u32)> {
        self.pool.place.placed.iter().map(|p| (p.peer, p.hosted)).collect()
    }

    /// What the node asks of the pool, oldest first.
    pub fn poll_pool(&mut self) -> Option<PoolRequest> {
        self.pool.place.requests.pop_front()
    }

    /// The pool agent, as the node's core has it (peers, their reports, what runs where).
    pub fn pool_agent(&self) -> &snic_core::pool::PoolAgent {
        self.core.pool()
    }

    /// The peer at pool address `peer` (data address `data`), of generation `gen`, hosts
    /// `route`'s DAG as `hosted`: `chain`'s packets on that route go there from now, those that
    /// waited first (or, for a spill, the share of its new flows), named for that incarnation.
    pub fn pool_placed(&mut self, chain: ChainId, route: u32, peer: SocketAddr, data: SocketAddr, hosted: u32, gen: u64) {
        let now = self.clock.now();
        let spill = self.pool.place.answered(chain, route).unwrap_or(false);
        if !self.is_live(chain) || (spill && !matches!(self.core.spills().phase(chain), Some(Phase::Asked { .. }))) {
            // It went away meanwhile (or no longer spills): the peer need not host it.
            self.pool.place.requests.push_back(PoolRequest::Unhost { peer, hosted });
            return;
        }
        self.core.redirect_route(route, data, hosted, gen);
        self.pool.place.placed.push(PlacedDag { chain, route, peer, data, hosted, spill });
        self.elastic.stats.remote_launches += 1;
        if spill {
            self.core.spill_placed(now, chain, data);
            let share = self.core.redirects().get(chain).map_or(0, |r| r.share);
            self.update_pool_on();
            self.record(now, chain, None, EventKind::Spilled { peer: data, share }, 0);
            return;
        }
        self.redirect_chain(chain, data, SHARE_ALL);
        let key = self.chain_key(chain);
        self.core.pool_placed(now, key, peer);
        self.record(now, chain, None, EventKind::Placed { peer: data }, 0);
        self.release_waiting(Some(chain), now);
    }

    /// The peer at pool address `peer` did not host `route`'s DAG for `chain` (it refused, or
    /// did not answer): the agent does not ask it again until it reports anew, and the packets
    /// that waited take the next step of the launch order (a spill looks for another peer).
    pub fn pool_place_failed(&mut self, chain: ChainId, route: u32, peer: SocketAddr) {
        let now = self.clock.now();
        let spill = self.pool.place.answered(chain, route).unwrap_or(false);
        self.elastic.stats.remote_refusals += 1;
        self.record(now, chain, None, EventKind::PlaceRefused { peer }, 0);
        if spill {
            self.core.spill_failed(now, chain, peer);
            return;
        }
        self.core.pool_refused(peer);
        self.release_waiting(Some(chain), now);
    }

    /// True while `chain`'s packets wait for the pool: a peer is asked to host it, or it comes
    /// home and waits for its state.
    pub(super) fn waits_for_pool(&self, chain: ChainId) -> bool {
        self.pool.place.placing(chain) || self.pool.handback.returning(chain)
    }

    /// `chain`'s pool-wide key (its NTs' names).
    pub(super) fn chain_key(&self, chain: ChainId) -> ChainKey {
        self.core.meter().chain_key(chain)
    }

    /// The whole launch order for `chain`, which packets on `route` need at step `pos`: this
    /// node's regions, then (with the pool's key and datagram framing) a peer, which is asked
    /// to host the DAG while the packets wait.
    pub(super) fn place(&mut self, chain: ChainId, route: u32, pos: u8, now: Instant) -> Result<snic_core::launcher::Decision, OnDemand> {
        if self.waits_for_pool(chain) {
            return Err(OnDemand::Wait);
        }
        let placement = if self.pooled() {
            let key = self.chain_key(chain);
            self.core.place(chain, key, now)
        } else {
            Placement::Here(self.core.place_here(chain, now))
        };
        let peer = match placement {
            Placement::Here(d) => return Ok(d),
            Placement::Peer(peer) => peer,
        };
        let Some(dag) = self.core.dags().uid_arriving_as(route) else { return Err(OnDemand::Nothing) };
        self.pool.place.placing.push(Asked { chain, route, spill: false });
        self.pool.place.requests.push_back(PoolRequest::Place { chain, route, dag, pos, peer });
        self.record(now, chain, None, EventKind::PlaceAsked { peer }, 0);
        Err(OnDemand::Wait)
    }

    /// Carries out the agent's decisions: chains that come home, chains whose peer died, chains
    /// that spill a share of their flows.
    pub(super) fn pool_acts(&mut self, acts: &mut Vec<PoolAct>) {
        let now = self.clock.now();
        for act in acts.drain(..) {
            // (A peer lost takes spilled flows with it too; a chain coming home is a whole one.)
            let (key, peer, with_spills) = match act {
                PoolAct::MoveBack { key, peer } => (key, peer, false),
                PoolAct::Lost { key, peer } => (key, peer, true),
                PoolAct::Spill { chain, peer, share, .. } => {
                    self.spill(chain, peer, share, now);
                    continue;
                }
                PoolAct::SpillShare { chain, peer, share } => {
                    let data = self.pool.place.placed.iter().find(|p| p.chain == chain && p.spill).map_or(peer, |p| p.data);
                    self.record(now, chain, None, EventKind::SpillShare { peer: data, share }, 0);
                    continue;
                }
                PoolAct::Unspill { chain, .. } => {
                    self.unspill(chain, now);
                    continue;
                }
            };
            let (went, kept): (Vec<PlacedDag>, Vec<PlacedDag>) = std::mem::take(&mut self.pool.place.placed)
                .into_iter()
                .partition(|p| p.peer == peer && (with_spills || !p.spill) && self.chain_key(p.chain) == key);
            self.pool.place.placed = kept;
            for p in went {
                let sent = self.core.clear_redirect_route(p.route, p.data).unwrap_or(0);
                if !self.pool.place.placed.iter().any(|q| q.chain == p.chain) {
                    self.stop_redirect(p.chain);
                }
                let kind = match act {
                    PoolAct::MoveBack { .. } => {
                        self.pool.place.requests.push_back(PoolRequest::Return { chain: p.chain, key, peer, hosted: p.hosted, sent });
                        self.pool.handback.start_return(p.chain, peer, p.data, now);
                        EventKind::MovingBack { peer: p.data }
                    }
                    _ => EventKind::PeerLost { peer: p.data },
                };
                self.record(now, p.chain, None, kind, 0);
            }
            if matches!(act, PoolAct::MoveBack { .. }) {
                self.core.pool_home(key);
            }
        }
    }

    /// The core decided that `chain` spills `share` of its new flows to `peer` (pool address):
    /// ask it to host the DAG the chain serves.
    fn spill(&mut self, chain: ChainId, peer: SocketAddr, share: u16, now: Instant) {
        // The DAG whose arrivals reach the chain, and the step they reach it at.
        let found = self.core.dags().arrivals().find_map(|(dag, route)| {
            let steps = self.core.sched().route(DagUid(route))?.steps().len();
            (0..steps as u8).find(|&pos| self.core.sched().chain_at(DagUid(route), pos) == Some(chain)).map(|pos| (dag, route, pos))
        });
        let Some((dag, route, pos)) = found else {
            self.core.spill_failed(now, chain, peer);
            return;
        };
        self.pool.place.placing.push(Asked { chain, route, spill: true });
        self.pool.place.requests.push_back(PoolRequest::Place { chain, route, dag, pos, peer });
        self.record(now, chain, None, EventKind::SpillAsked { peer, share }, 0);
    }

    /// `chain`'s flows on its peer have ended: the peer may stop hosting its DAG.
    fn unspill(&mut self, chain: ChainId, now: Instant) {
        let (went, kept): (Vec<PlacedDag>, Vec<PlacedDag>) =
            std::mem::take(&mut self.pool.place.placed).into_iter().partition(|p| p.chain == chain && p.spill);
        self.pool.place.placed = kept;
        for p in went {
            self.core.clear_redirect_route(p.route, p.data);
            self.pool.place.requests.push_back(PoolRequest::Unhost { peer: p.peer, hosted: p.hosted });
            self.record(now, chain, None, EventKind::Unspilled { peer: p.data }, 0);
        }
    }

    /// The epoch's pool decisions (after the elasticity policy's).
    pub(super) fn pool_epoch(&mut self) {
        self.carry_out(|core, acts| core.pool_acts(acts));
    }

    /// Carries out the agent's decisions `decide` gives (in a buffer kept between calls).
    fn carry_out(&mut self, decide: impl FnOnce(&mut snic_core::node::NodeCore, &mut Vec<PoolAct>)) {
        let mut acts = std::mem::take(&mut self.pool.place.acts);
        decide(&mut self.core, &mut acts);
        if !acts.is_empty() {
            self.pool_acts(&mut acts);
        }
        self.pool.place.acts = acts;
        // (The core may have begun or stopped recording a chain's flows, or redirected one.)
        self.update_pool_on();
    }
}
