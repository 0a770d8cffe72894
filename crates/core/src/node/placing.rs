//! Placing chains on peers, the node's side, once for every driver: the launch order that may
//! ask a peer to host a chain, the one rule by which an answer is taken, and what the pool
//! agent's decisions (come home, peer lost, spill, unspill) do to the placements and the
//! redirects. The core keeps the requests for its driver ([`NodeCore::poll_pool_request`]) and
//! tells it, in [`PoolNote`]s, what it did — release the packets that waited, start taking a
//! chain's state back, count and log.

use super::{NodeCore, PoolReach};
use crate::events::EventKind;
use crate::ids::{ChainId, DagUid};
use crate::launcher::Decision;
use crate::pool::placements::{Asked, HostAnswer, Placements, PoolNote, PoolRequest, Returning};
use crate::pool::redirect::{Redirect, SHARE_ALL};
use crate::pool::spill::Phase;
use crate::pool::{Heard, MemberEvent, Placement, PoolAct};
use crate::time::Instant;
use std::net::SocketAddr;

/// What packets that need a chain with no active instance do now
/// ([`NodeCore::place_on_demand`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDemand {
    /// Run here: the launcher's decision.
    Here(Decision),
    /// Wait: a peer is asked to host the chain, or the chain comes home and waits for its
    /// state.
    Wait,
    /// A peer would host it, but the packets' route belongs to no DAG a peer can be asked to
    /// host: nothing to do.
    Nothing,
}

/// One entry of the pool trace ([`NodeCore::trace_pool`]): what the core asked of its peers
/// and told its driver, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolTraced {
    /// A request for the peers.
    Request(PoolRequest),
    /// A note for the driver.
    Note(PoolNote),
}

/// Most entries a pool trace keeps (a test's scenario needs a few dozen).
const MAX_TRACE: usize = 1 << 14;

impl NodeCore {
    /// The placements on peers: asked, placed, coming home (read-only).
    pub fn placements(&self) -> &Placements {
        &self.placements
    }

    /// The oldest request for the peers not yet taken by the driver.
    pub fn poll_pool_request(&mut self) -> Option<PoolRequest> {
        self.placements.next_request()
    }

    /// Starts (`true`) or stops keeping a trace of the pool's requests and notes — for tests
    /// that compare drivers; bounded.
    pub fn trace_pool(&mut self, on: bool) {
        self.trace = on.then(Vec::new);
    }

    /// The pool trace kept since [`NodeCore::trace_pool`].
    pub fn pool_trace(&self) -> &[PoolTraced] {
        self.trace.as_deref().unwrap_or(&[])
    }

    /// True while `chain`'s packets wait for the pool: a peer is asked to host the whole of
    /// it, or it comes home and waits for its state.
    pub fn waits_for_pool(&self, chain: ChainId) -> bool {
        self.placements.waits(chain)
    }

    /// Packets on this node's route `route` need `chain` at step `pos`, and it has no active
    /// instance: the whole launch order — this node's regions, then (able to reach its peers)
    /// a peer, asked to host the DAG while the packets wait.
    pub fn place_on_demand(&mut self, now: Instant, chain: ChainId, route: u32, pos: u8, notes: &mut Vec<PoolNote>) -> OnDemand {
        if self.waits_for_pool(chain) {
            return OnDemand::Wait;
        }
        let placement = if self.reach == PoolReach::Peers {
            let key = self.meter.chain_key(chain);
            crate::pool::on_demand(&mut self.elastic, &self.pool, chain, key, now)
        } else {
            Placement::Here(self.elastic.on_demand(chain, now, crate::elastic::PeerRoom::None))
        };
        let peer = match placement {
            Placement::Here(d) => return OnDemand::Here(d),
            Placement::Peer(peer) => peer,
        };
        let Some(dag) = self.dags.uid_arriving_as(route) else { return OnDemand::Nothing };
        self.ask(now, chain, route, dag, pos, peer, None, notes);
        OnDemand::Wait
    }

    /// The answer of `from` (pool address) to the request to host `chain`'s packets on `route`:
    /// taken only if that very peer was asked and has not answered, and, for a peer that
    /// hosts, only while the chain still wants it. Refused: the peer is not asked again until
    /// it reports anew.
    pub fn host_answer(
        &mut self,
        now: Instant,
        chain: ChainId,
        route: u32,
        from: SocketAddr,
        answer: HostAnswer,
        notes: &mut Vec<PoolNote>,
    ) {
        let asked = self.placements.answered(chain, route, from);
        let (spill, data, hosted, gen) = match (asked, answer) {
            (Some(spill), HostAnswer::Refused) => {
                if spill {
                    self.spill_failed(now, chain, from);
                } else {
                    self.pool.refused(from);
                }
                return self.note(now, PoolNote::Refused { chain, peer: from, spill }, notes);
            }
            (None, HostAnswer::Refused) => return self.note(now, PoolNote::Ignored { chain, peer: from }, notes),
            (Some(spill), HostAnswer::Hosted { data, hosted, gen }) => (spill, data, hosted, gen),
            (None, HostAnswer::Hosted { hosted, .. }) => return self.unwanted(now, chain, from, hosted, notes),
        };
        let spilling = matches!(self.spills.phase(chain), Some(Phase::Asked { peer, .. }) if peer == from);
        if !self.life.is_live(chain) || (spill && !spilling) {
            // It went away meanwhile (or no longer spills): the peer need not host it.
            return self.unwanted(now, chain, from, hosted, notes);
        }
        self.redirects.set_route(route, data, hosted, gen);
        self.placements.placed.push(crate::pool::placements::PlacedDag { chain, route, peer: from, data, hosted, spill });
        if spill {
            self.spills.placed(now, chain, data, &mut self.redirects);
            let share = self.redirects.get(chain).map_or(0, |r| r.share);
            return self.note(now, PoolNote::Spilled { chain, data, share }, notes);
        }
        self.redirects.set(chain, Redirect { peer: data, share: SHARE_ALL });
        let key = self.meter.chain_key(chain);
        self.pool.placed(now, key, from);
        self.note(now, PoolNote::Placed { chain, data }, notes);
    }

    /// The state of `chain`, coming home, has arrived (or will not): it runs here from now.
    /// When it started coming home and from which peer (data address); `None` if it was not.
    pub fn pool_returned(&mut self, chain: ChainId) -> Option<(SocketAddr, Instant)> {
        let i = self.placements.returning.iter().position(|r| r.chain == chain)?;
        let r = self.placements.returning.swap_remove(i);
        Some((r.data, r.since))
    }

    /// A membership change: a peer that went down loses what it ran for this node — whole
    /// chains, spilled flows, chains coming home that waited for its state — which runs here
    /// again (or on another peer), and the state slot it held.
    pub fn pool_member(&mut self, now: Instant, event: MemberEvent, notes: &mut Vec<PoolNote>) {
        if let MemberEvent::Down(peer) = event {
            let (lost, kept): (Vec<Returning>, Vec<Returning>) =
                std::mem::take(&mut self.placements.returning).into_iter().partition(|r| r.peer == peer);
            self.placements.returning = kept;
            for r in lost {
                self.note(now, PoolNote::ReturnLost { chain: r.chain, data: r.data, since: r.since }, notes);
            }
        }
        let mut acts = std::mem::take(&mut self.pool_acts_out);
        self.handle_member(now, event, &mut acts);
        self.carry_out(now, &mut acts, notes);
        self.pool_acts_out = acts;
    }

    /// A member spoke (at pool address `from`) with generation `gen`: the pool's rule
    /// ([`crate::pool::Incarnations`]) — a newer generation than the one known restarted, and
    /// what its earlier incarnation ran for this node is gone, as if it had gone down and come
    /// up ([`NodeCore::pool_member`]). `Heard::Stale`: an earlier incarnation's word, to be
    /// ignored.
    pub fn pool_heard(&mut self, now: Instant, from: SocketAddr, gen: u64, notes: &mut Vec<PoolNote>) -> Heard {
        let heard = self.incarnations.observe(from, gen);
        if heard == Heard::Restarted {
            for e in [MemberEvent::Down(from), MemberEvent::Up(from)] {
                self.pool_member(now, e, notes);
            }
        }
        heard
    }

    /// The epoch's pool decisions (after the elasticity policy's), carried out.
    pub fn pool_epoch(&mut self, now: Instant, notes: &mut Vec<PoolNote>) {
        let mut acts = std::mem::take(&mut self.pool_acts_out);
        acts.append(&mut self.pool_acts);
        self.carry_out(now, &mut acts, notes);
        self.pool_acts_out = acts;
    }

    /// Carries out the agent's decisions: chains that come home, chains whose peer died, chains
    /// that spill a share of their flows.
    fn carry_out(&mut self, now: Instant, acts: &mut Vec<PoolAct>, notes: &mut Vec<PoolNote>) {
        for act in acts.drain(..) {
            // (A peer lost takes spilled flows with it too; a chain coming home is a whole one.)
            let (key, peer, lost) = match act {
                PoolAct::MoveBack { key, peer } => (key, peer, false),
                PoolAct::Lost { key, peer } => (key, peer, true),
                PoolAct::Spill { chain, peer, share, .. } => {
                    self.spill(now, chain, peer, share, notes);
                    continue;
                }
                PoolAct::SpillShare { chain, peer, share } => {
                    let data = self.placements.placed.iter().find(|p| p.chain == chain && p.spill).map_or(peer, |p| p.data);
                    self.note(now, PoolNote::SpillShare { chain, data, share }, notes);
                    continue;
                }
                PoolAct::Unspill { chain, .. } => {
                    self.unspill(now, chain, notes);
                    continue;
                }
            };
            let meter = &self.meter;
            let (went, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.placements.placed)
                .into_iter()
                .partition(|p| p.peer == peer && (lost || !p.spill) && meter.chain_key(p.chain) == key);
            self.placements.placed = kept;
            for p in went {
                let sent = self.redirects.clear_route(p.route, p.data).unwrap_or(0);
                if !self.placements.placed.iter().any(|q| q.chain == p.chain) {
                    self.redirects.clear(p.chain);
                }
                if lost {
                    self.note(now, PoolNote::PeerLost { chain: p.chain, data: p.data }, notes);
                    continue;
                }
                self.placements.returning.push(Returning { chain: p.chain, peer, data: p.data, since: now });
                self.request(PoolRequest::Return { chain: p.chain, key, peer, hosted: p.hosted, sent });
                self.note(now, PoolNote::MovingBack { chain: p.chain, data: p.data }, notes);
            }
            if !lost {
                self.pool.home(key);
            }
        }
    }

    /// The agent decided that `chain` spills `share` of its new flows to `peer` (pool address):
    /// ask it to host the DAG whose arrivals reach the chain.
    fn spill(&mut self, now: Instant, chain: ChainId, peer: SocketAddr, share: u16, notes: &mut Vec<PoolNote>) {
        let sched = &self.sched;
        let found = self.dags.arrivals().find_map(|(dag, route)| {
            let steps = sched.route(DagUid(route))?.steps().len();
            (0..steps as u8).find(|&pos| sched.chain_at(DagUid(route), pos) == Some(chain)).map(|pos| (dag, route, pos))
        });
        let Some((dag, route, pos)) = found else {
            self.spill_failed(now, chain, peer);
            return;
        };
        self.ask(now, chain, route, dag, pos, peer, Some(share), notes);
    }

    /// `chain`'s flows on its peer have ended: the peer may stop hosting its DAG.
    fn unspill(&mut self, now: Instant, chain: ChainId, notes: &mut Vec<PoolNote>) {
        let (went, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.placements.placed).into_iter().partition(|p| p.chain == chain && p.spill);
        self.placements.placed = kept;
        for p in went {
            self.redirects.clear_route(p.route, p.data);
            self.request(PoolRequest::Unhost { peer: p.peer, hosted: p.hosted });
            self.note(now, PoolNote::Unspilled { chain, data: p.data }, notes);
        }
    }

    /// Asks `peer` to host `dag` for `chain` (the whole of it, or `share` of its new flows).
    #[allow(clippy::too_many_arguments)] // one request's fields
    fn ask(
        &mut self,
        now: Instant,
        chain: ChainId,
        route: u32,
        dag: DagUid,
        pos: u8,
        peer: SocketAddr,
        share: Option<u16>,
        notes: &mut Vec<PoolNote>,
    ) {
        self.placements.asked.push(Asked { chain, route, peer, spill: share.is_some() });
        self.request(PoolRequest::Place { chain, route, dag, pos, peer });
        self.note(now, PoolNote::Asked { chain, peer, share }, notes);
    }

    /// An answer not taken; a peer that hosts is told it need not.
    fn unwanted(&mut self, now: Instant, chain: ChainId, peer: SocketAddr, hosted: u32, notes: &mut Vec<PoolNote>) {
        self.request(PoolRequest::Unhost { peer, hosted });
        self.note(now, PoolNote::Ignored { chain, peer }, notes);
    }

    fn request(&mut self, r: PoolRequest) {
        if let Some(t) = self.trace.as_mut().filter(|t| t.len() < MAX_TRACE) {
            t.push(PoolTraced::Request(r));
        }
        self.placements.request(r);
    }

    /// Notes `n` for the driver to carry out, and records its event (counted, and kept among
    /// the recent ones: [`NodeCore::events`]).
    fn note(&mut self, now: Instant, n: PoolNote, notes: &mut Vec<PoolNote>) {
        if let Some(t) = self.trace.as_mut().filter(|t| t.len() < MAX_TRACE) {
            t.push(PoolTraced::Note(n));
        }
        let (chain, kind) = match n {
            PoolNote::Asked { chain, peer, share: None } => (chain, EventKind::PlaceAsked { peer }),
            PoolNote::Asked { chain, peer, share: Some(share) } => (chain, EventKind::SpillAsked { peer, share }),
            PoolNote::Placed { chain, data } => (chain, EventKind::Placed { peer: data }),
            PoolNote::Spilled { chain, data, share } => (chain, EventKind::Spilled { peer: data, share }),
            PoolNote::Refused { chain, peer, .. } => (chain, EventKind::PlaceRefused { peer }),
            PoolNote::SpillShare { chain, data, share } => (chain, EventKind::SpillShare { peer: data, share }),
            PoolNote::Unspilled { chain, data } => (chain, EventKind::Unspilled { peer: data }),
            PoolNote::MovingBack { chain, data } => (chain, EventKind::MovingBack { peer: data }),
            PoolNote::PeerLost { chain, data } => (chain, EventKind::PeerLost { peer: data }),
            PoolNote::Ignored { .. } => {
                self.events.answers_ignored += 1;
                return notes.push(n);
            }
            // (The driver records the chain's coming home, with what its state restored.)
            PoolNote::ReturnLost { .. } => return notes.push(n),
        };
        self.record(now, chain, None, kind, 0);
        notes.push(n);
    }
}
