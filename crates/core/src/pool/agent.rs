//! The pool agent: where a chain runs when its home node has no room, and when it comes home.
//!
//! Paper 000 §4.3 and §5: when packets need a chain and the home node can neither share a
//! running instance nor launch one into a free region, the node looks at the pool before
//! resorting to the tenant's endpoint or a context switch:
//!
//! 3. a **peer that already runs the chain** with spare bandwidth for its load;
//! 4. a **peer with a free region**, nearest in hops (ties: the most free regions, then the
//!    lowest address).
//!
//! It knows the peers from their load reports (free regions, each chain's spare capacity,
//! memory, port bandwidth), which arrive by gossip at least every gossip period; a report
//! older than [`AgentConfig::report_ttl`] or from a member that is down does not count. A peer
//! that refused a launch is not asked again until it reports anew.
//!
//! Decisions hold: a chain placed on a peer stays there while the peer lives, and comes home
//! only once it has run there a whole MONITOR_PERIOD *and* the home node has had room for it a
//! whole MONITOR_PERIOD ([`PoolAct::MoveBack`]) — never on a spike, never faster than the
//! auto-scaler decides. A peer that dies hosting a chain gives [`PoolAct::Lost`]: the home node
//! serves it again (locally, or on another peer) and says so. Sans-IO.

use crate::ids::ChainId;
use crate::pool::report::{ChainKey, LoadReport};
use crate::pool::MemberEvent;
use crate::time::Instant;
use core::time::Duration;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// The agent's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AgentConfig {
    /// A decision holds at least this long (the auto-scaler's MONITOR_PERIOD).
    pub monitor_period: Duration,
    /// A peer's report older than this does not count.
    pub report_ttl: Duration,
    /// A chain that spills a share of its flows ([`crate::pool::spill`]): a flow not seen this
    /// long has ended (its side is forgotten; the spill ends once the peer has none left).
    pub flow_idle: Duration,
    /// A chain that spills records at most this many flows' sides.
    pub spill_flows: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            monitor_period: Duration::from_millis(100),
            report_ttl: Duration::from_secs(1),
            flow_idle: Duration::from_secs(10),
            spill_flows: 65_536,
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolAct {
    /// Bring chain `key` home from `peer`: launch it here, move its NT state, then stop
    /// redirecting (pause new traffic, migrate state, resume).
    MoveBack {
        /// The chain.
        key: ChainKey,
        /// Where it ran.
        peer: SocketAddr,
    },
    /// `peer` died (or left) while running chain `key` (or a share of its flows) for this
    /// node: serve it again.
    Lost {
        /// The chain.
        key: ChainKey,
        /// The peer.
        peer: SocketAddr,
    },
    /// Chain `chain` (key `key`) is overloaded here with no room: ask `peer` (pool address) to
    /// host its DAG for `share` of its new flows ([`crate::pool::spill`]); answer with
    /// [`crate::node::NodeCore::spill_placed`] or [`crate::node::NodeCore::spill_failed`].
    Spill {
        /// The chain, here.
        chain: ChainId,
        /// Its pool-wide key.
        key: ChainKey,
        /// The peer's pool address.
        peer: SocketAddr,
        /// Of [`crate::pool::redirect::SHARE_ALL`].
        share: u16,
    },
    /// The share of `chain`'s new flows that spill to `peer` is now `share` (0: its load fits
    /// home again, the peer's flows finish there; else it is overloaded again).
    SpillShare {
        /// The chain.
        chain: ChainId,
        /// The peer's pool address.
        peer: SocketAddr,
        /// Of [`crate::pool::redirect::SHARE_ALL`].
        share: u16,
    },
    /// `chain`'s flows on `peer` (pool address) have all ended: it no longer needs to host the
    /// chain's DAG.
    Unspill {
        /// The chain.
        chain: ChainId,
        /// Its pool-wide key.
        key: ChainKey,
        /// The peer's pool address.
        peer: SocketAddr,
    },
}

#[derive(Debug, Clone)]
struct Peer {
    up: bool,
    report: Option<(LoadReport, Instant)>,
    /// Refused a launch since its last report.
    refused: bool,
    /// Its data address, as its reports give it.
    data: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy)]
struct Placed {
    peer: SocketAddr,
    since: Instant,
    /// Since when the home node has had room for it (None: not now).
    room_since: Option<Instant>,
}

/// One node's pool agent. See the module docs.
#[derive(Debug, Clone)]
pub struct PoolAgent {
    cfg: AgentConfig,
    peers: BTreeMap<SocketAddr, Peer>,
    /// Hops from this node to each peer, and to one the topology does not list.
    hops: BTreeMap<SocketAddr, u32>,
    unknown_hops: u32,
    placed: BTreeMap<ChainKey, Placed>,
    /// This node's pool address and the pool's links (pass-through routes).
    me: Option<SocketAddr>,
    links: Vec<[SocketAddr; 2]>,
    /// Data address of a node that runs what is redirected → data address of the
    /// pass-through node the datagram goes to first.
    via: BTreeMap<SocketAddr, SocketAddr>,
}

impl PoolAgent {
    /// An agent with no peers yet.
    pub fn new(cfg: AgentConfig) -> Self {
        PoolAgent {
            cfg,
            peers: BTreeMap::new(),
            hops: BTreeMap::new(),
            unknown_hops: 1,
            placed: BTreeMap::new(),
            me: None,
            links: Vec::new(),
            via: BTreeMap::new(),
        }
    }

    /// The settings (MONITOR_PERIOD follows the auto-scaler's: see [`PoolAgent::set_monitor_period`]).
    pub fn config(&self) -> &AgentConfig {
        &self.cfg
    }

    /// MONITOR_PERIOD, as the node's auto-scaler has it (raised to the measured launch time).
    pub fn set_monitor_period(&mut self, p: Duration) {
        self.cfg.monitor_period = p;
    }

    /// This node's hop distance to each peer (from the pool's topology,
    /// [`crate::pool::topology::hops`]). A peer it does not list comes last. Without a topology
    /// every peer is one hop away (a switch, or a full mesh).
    pub fn set_hops(&mut self, hops: impl IntoIterator<Item = (SocketAddr, u32)>) {
        self.hops = hops.into_iter().collect();
        self.unknown_hops = if self.hops.is_empty() { 1 } else { u32::MAX };
    }

    /// The pool's links (node.yaml's `pool.links`) and this node's pool address in them: the
    /// hop distance to each peer ([`PoolAgent::set_hops`]), and the pass-through routes — a
    /// packet redirected to a peer it has no link to crosses the nodes in between
    /// ([`PoolAgent::via`]).
    pub fn set_links(&mut self, me: SocketAddr, links: &[[SocketAddr; 2]]) {
        self.set_hops(crate::pool::topology::hops(me, links));
        (self.me, self.links) = (Some(me), links.to_vec());
        self.update_via();
    }

    /// Where a datagram for the node at data address `data` goes first: the data address of
    /// the pass-through node on the shortest path of live members, or `None` — straight to
    /// it (a neighbour, no links given, or no live path: the network may still reach it).
    #[inline]
    pub fn via(&self, data: SocketAddr) -> Option<SocketAddr> {
        self.via.get(&data).copied()
    }

    /// Recomputes the pass-through routes (links, members up, their data addresses).
    fn update_via(&mut self) {
        self.via.clear();
        let Some(me) = self.me.filter(|_| !self.links.is_empty()) else { return };
        let down: std::collections::BTreeSet<SocketAddr> = self.peers.iter().filter(|(_, p)| !p.up).map(|(a, _)| *a).collect();
        let data = |a: &SocketAddr| self.peers.get(a).filter(|p| p.up).and_then(|p| p.data);
        for (to, next) in crate::pool::topology::next_hops(me, &self.links, &down) {
            if let (Some(t), Some(n)) = (data(&to), data(&next)) {
                self.via.insert(t, n);
            }
        }
    }

    /// A peer's data address, as its reports gave it.
    pub fn data_of(&self, peer: SocketAddr) -> Option<SocketAddr> {
        self.peers.get(&peer).and_then(|p| p.data)
    }

    /// The live members holding state slots, by their fresh reports: (slot, data address).
    pub fn slot_holders(&self, now: Instant) -> impl Iterator<Item = (u16, SocketAddr)> + '_ {
        self.peers.values().filter_map(move |p| Some((self.fresh(now, p)?.slot?, p.data?)))
    }

    /// Hops to `peer`.
    pub fn hops(&self, peer: SocketAddr) -> u32 {
        self.hops.get(&peer).copied().unwrap_or(self.unknown_hops)
    }

    /// A peer's load report arrived (an older one than the last is ignored).
    pub fn handle_report(&mut self, now: Instant, from: SocketAddr, report: LoadReport) {
        let p = self.peer(from);
        if p.report.as_ref().is_some_and(|(r, _)| r.gen == report.gen && r.seq >= report.seq) {
            return;
        }
        let moved = report.data.is_some_and(|d| p.data != Some(d));
        if moved {
            p.data = report.data;
        }
        p.report = Some((report, now));
        p.refused = false;
        if moved {
            self.update_via();
        }
    }

    /// A membership change. A peer going down loses what it ran for this node.
    pub fn handle_member(&mut self, event: MemberEvent, acts: &mut Vec<PoolAct>) {
        match event {
            MemberEvent::Up(a) => {
                self.peer(a).up = true;
                self.update_via();
            }
            MemberEvent::Down(a) => {
                if let Some(p) = self.peers.get_mut(&a) {
                    p.up = false;
                    p.report = None;
                }
                self.update_via();
                let lost: Vec<ChainKey> = self.placed.iter().filter(|(_, p)| p.peer == a).map(|(k, _)| *k).collect();
                for key in lost {
                    self.placed.remove(&key);
                    acts.push(PoolAct::Lost { key, peer: a });
                }
            }
            MemberEvent::Rejoined => {}
        }
    }

    /// `addr`'s entry; a peer first heard of is up.
    fn peer(&mut self, addr: SocketAddr) -> &mut Peer {
        self.peers.entry(addr).or_insert(Peer { up: true, report: None, refused: false, data: None })
    }

    /// The peer's report, if it counts now (up, fresh).
    fn fresh<'a>(&self, now: Instant, p: &'a Peer) -> Option<&'a LoadReport> {
        let (r, at) = p.report.as_ref()?;
        (p.up && now.saturating_since(*at) <= self.cfg.report_ttl).then_some(r)
    }

    /// Where chain `key`, needing `load` instances' worth, can run in the pool (steps 3 and 4
    /// of the launch order), or `None`. A chain placed on a live peer stays there.
    pub fn remote_for(&self, now: Instant, key: ChainKey, load: f64) -> Option<SocketAddr> {
        if let Some(p) = self.placed.get(&key) {
            if self.peers.get(&p.peer).is_some_and(|x| x.up) {
                return Some(p.peer);
            }
        }
        let candidates = || self.peers.iter().filter(|(_, p)| !p.refused).filter_map(|(a, p)| self.fresh(now, p).map(|r| (*a, r)));
        // 3. A peer that runs the chain with spare bandwidth for its load: nearest, then the
        // most spare.
        let share = candidates()
            .filter_map(|(a, r)| r.spare(key).filter(|&s| s >= load).map(|s| (a, s)))
            .min_by(|x, y| self.hops(x.0).cmp(&self.hops(y.0)).then(y.1.total_cmp(&x.1)).then(x.0.cmp(&y.0)));
        if let Some((a, _)) = share {
            return Some(a);
        }
        // 4. A peer with a free region: nearest, then the most free regions.
        candidates()
            .filter(|(_, r)| r.free_regions > 0)
            .min_by(|x, y| self.hops(x.0).cmp(&self.hops(y.0)).then(y.1.free_regions.cmp(&x.1.free_regions)).then(x.0.cmp(&y.0)))
            .map(|(a, _)| a)
    }

    /// `peer` runs chain `key` for this node now (it accepted the launch, or shares an
    /// instance).
    pub fn placed(&mut self, now: Instant, key: ChainKey, peer: SocketAddr) {
        self.placed.insert(key, Placed { peer, since: now, room_since: None });
    }

    /// `peer` refused to launch `key`: it is not asked again until it reports anew.
    pub fn refused(&mut self, peer: SocketAddr) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.refused = true;
        }
    }

    /// The chain came home (or stopped): no longer remote.
    pub fn home(&mut self, key: ChainKey) {
        self.placed.remove(&key);
    }

    /// Where chain `key` runs for this node, if on a peer.
    pub fn placement(&self, key: ChainKey) -> Option<SocketAddr> {
        self.placed.get(&key).map(|p| p.peer)
    }

    /// True if this node runs any chain on a peer.
    pub fn has_placed(&self) -> bool {
        !self.placed.is_empty()
    }

    /// The chains this node runs on peers, and where.
    pub fn remote_chains(&self) -> impl Iterator<Item = (ChainKey, SocketAddr)> + '_ {
        self.placed.iter().map(|(k, p)| (*k, p.peer))
    }

    /// The peers up, with the age of their last report.
    pub fn peers(&self, now: Instant) -> impl Iterator<Item = (SocketAddr, Option<&LoadReport>)> + '_ {
        self.peers.iter().filter(|(_, p)| p.up).map(move |(a, p)| (*a, self.fresh(now, p)))
    }

    /// How old the last report of `peer` is (`None`: none yet, or it is down).
    pub fn report_age(&self, now: Instant, peer: SocketAddr) -> Option<Duration> {
        let p = self.peers.get(&peer).filter(|p| p.up)?;
        p.report.as_ref().map(|(_, at)| now.saturating_since(*at))
    }

    /// Once an epoch: `room(key)` says whether this node could run chain `key` now. A chain
    /// that has run on its peer a whole MONITOR_PERIOD, while home has had room for a whole
    /// MONITOR_PERIOD, comes home.
    pub fn epoch(&mut self, now: Instant, room: impl Fn(ChainKey) -> bool, acts: &mut Vec<PoolAct>) {
        let period = self.cfg.monitor_period;
        for (key, p) in self.placed.iter_mut() {
            if !room(*key) {
                p.room_since = None;
                continue;
            }
            let since = *p.room_since.get_or_insert(now);
            if now.saturating_since(since) >= period && now.saturating_since(p.since) >= period {
                acts.push(PoolAct::MoveBack { key: *key, peer: p.peer });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::report::ChainSpare;
    use proptest::prelude::*;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 7946))
    }

    fn report(seq: u64, free: u16, chains: &[(u64, f32)]) -> LoadReport {
        LoadReport {
            gen: 1,
            seq,
            free_regions: free,
            chains: chains.iter().map(|&(k, s)| ChainSpare { key: ChainKey(k), spare: s }).collect(),
            ..Default::default()
        }
    }

    /// The launch order's steps 3–4 written the slow, obvious way (a report names a chain once).
    fn reference(peers: &[(SocketAddr, bool, u32, Option<LoadReport>)], key: ChainKey, load: f64) -> Option<SocketAddr> {
        let mut best: Option<(u32, f64, SocketAddr)> = None;
        for (a, up, hops, r) in peers {
            let Some(r) = r.as_ref().filter(|_| *up) else { continue };
            for c in &r.chains {
                if c.key == key && c.spare as f64 >= load {
                    let cand = (*hops, -(c.spare as f64), *a);
                    if best.is_none_or(|b| cand.0 < b.0 || (cand.0 == b.0 && (cand.1 < b.1 || (cand.1 == b.1 && cand.2 < b.2)))) {
                        best = Some(cand);
                    }
                }
            }
        }
        if let Some(b) = best {
            return Some(b.2);
        }
        let mut best: Option<(u32, i64, SocketAddr)> = None;
        for (a, up, hops, r) in peers {
            let Some(r) = r.as_ref().filter(|r| *up && r.free_regions > 0) else { continue };
            let cand = (*hops, -(r.free_regions as i64), *a);
            if best.is_none_or(|b| cand < b) {
                best = Some(cand);
            }
        }
        best.map(|b| b.2)
    }

    /// A peer: up, hops, and its report (free regions, chains' spare capacity) if any.
    type PeerState = (bool, u32, Option<(u16, Vec<(u64, f32)>)>);

    fn peer_state() -> impl Strategy<Value = PeerState> {
        (
            any::<bool>(),
            1u32..4,
            proptest::option::of((
                0u16..3,
                proptest::collection::btree_map(0u64..3, 0.0f32..1.0, 0..3).prop_map(|m| m.into_iter().collect()),
            )),
        )
    }

    proptest! {
        #[test]
        fn picks_what_the_launch_order_gives_and_never_a_peer_without_room(
            states in proptest::collection::vec(peer_state(), 0..6),
            key in 0u64..3,
            load in 0.05f64..0.9,
        ) {
            let now = Instant::from_nanos(1_000_000_000);
            let mut agent = PoolAgent::new(AgentConfig::default());
            let mut peers = Vec::new();
            let mut acts = Vec::new();
            for (i, (up, hops, r)) in states.into_iter().enumerate() {
                let a = addr(i as u8 + 1);
                let r = r.map(|(free, chains)| report(1, free, &chains));
                agent.handle_member(MemberEvent::Up(a), &mut acts);
                if let Some(r) = &r {
                    agent.handle_report(now, a, r.clone());
                }
                if !up {
                    agent.handle_member(MemberEvent::Down(a), &mut acts);
                }
                peers.push((a, up, hops, r));
            }
            agent.set_hops(peers.iter().map(|p| (p.0, p.2)));
            let got = agent.remote_for(now, ChainKey(key), load);
            prop_assert_eq!(got, reference(&peers, ChainKey(key), load));
            if let Some(a) = got {
                let (_, up, _, r) = peers.iter().find(|p| p.0 == a).unwrap();
                let r = r.as_ref().unwrap();
                prop_assert!(*up && (r.free_regions > 0 || r.spare(ChainKey(key)).is_some_and(|s| s >= load)));
            }
        }

        #[test]
        fn a_chain_comes_home_only_after_room_held_a_whole_period_and_always_then(
            room in proptest::collection::vec(any::<bool>(), 1..60),
        ) {
            // Epochs every 10 ms; MONITOR_PERIOD 100 ms.
            let mut agent = PoolAgent::new(AgentConfig::default());
            let (key, peer) = (ChainKey(7), addr(2));
            let mut acts = Vec::new();
            agent.handle_member(MemberEvent::Up(peer), &mut acts);
            agent.placed(Instant::ZERO, key, peer);
            let mut run = 0u64; // consecutive epochs with room, this one included
            for (i, &r) in room.iter().enumerate() {
                let now = Instant::from_nanos(i as u64 * 10_000_000);
                run = if r { run + 1 } else { 0 };
                acts.clear();
                agent.epoch(now, |_| r, &mut acts);
                let due = r && (run - 1) * 10 >= 100 && i * 10 >= 100;
                prop_assert_eq!(acts.contains(&PoolAct::MoveBack { key, peer }), due, "epoch {} run {}", i, run);
            }
        }
    }

    #[test]
    fn a_placed_chain_stays_on_its_peer_until_the_peer_dies_then_is_lost() {
        let now = Instant::from_nanos(1);
        let mut agent = PoolAgent::new(AgentConfig::default());
        let mut acts = Vec::new();
        let (a, b) = (addr(1), addr(2));
        for p in [a, b] {
            agent.handle_member(MemberEvent::Up(p), &mut acts);
        }
        agent.handle_report(now, a, report(1, 1, &[]));
        agent.handle_report(now, b, report(1, 3, &[]));
        agent.set_hops([(a, 2), (b, 1)]);
        let key = ChainKey(1);
        assert_eq!(agent.remote_for(now, key, 0.5), Some(b), "the nearest peer with a free region");
        agent.refused(b);
        assert_eq!(agent.remote_for(now, key, 0.5), Some(a), "a peer that refused is not asked again");
        agent.placed(now, key, a);
        agent.handle_report(now, b, report(2, 3, &[(1, 0.9)]));
        assert_eq!(agent.remote_for(now, key, 0.5), Some(a), "decisions hold while the peer lives");
        agent.handle_member(MemberEvent::Down(a), &mut acts);
        assert_eq!(acts, vec![PoolAct::Lost { key, peer: a }]);
        assert_eq!(agent.remote_for(now, key, 0.5), Some(b));
        let late = now + Duration::from_secs(2);
        assert_eq!(agent.remote_for(late, key, 0.5), None, "a stale report does not count");
    }

    #[test]
    fn a_peer_the_topology_does_not_reach_comes_last() {
        let now = Instant::from_nanos(1);
        let mut agent = PoolAgent::new(AgentConfig::default());
        let mut acts = Vec::new();
        let (near, far, unlisted) = (addr(1), addr(2), addr(3));
        for p in [near, far, unlisted] {
            agent.handle_member(MemberEvent::Up(p), &mut acts);
        }
        agent.handle_report(now, unlisted, report(1, 8, &[]));
        agent.handle_report(now, far, report(1, 1, &[]));
        assert_eq!(agent.remote_for(now, ChainKey(1), 0.5), Some(unlisted), "no topology: all one hop, the most free regions");
        agent.set_hops([(near, 1), (far, 3)]);
        assert_eq!(agent.remote_for(now, ChainKey(1), 0.5), Some(far), "the graph's peer before one it does not reach");
        agent.handle_report(now, near, report(1, 1, &[]));
        assert_eq!(agent.remote_for(now, ChainKey(1), 0.5), Some(near), "the nearest");
    }

    #[test]
    fn a_peer_without_a_link_is_reached_through_the_live_node_between() {
        let data = |i: u8| SocketAddr::from(([10, 0, 1, i], 4789));
        let mut g = PoolAgent::new(AgentConfig::default());
        // A line me(1) - 2 - 3, and 4 linked to both 1 and 3 (1-4-3 is the other way round).
        g.set_links(addr(1), &[[addr(1), addr(2)], [addr(2), addr(3)], [addr(3), addr(4)], [addr(4), addr(1)]]);
        let mut acts = Vec::new();
        for i in 2..=4 {
            g.handle_member(MemberEvent::Up(addr(i)), &mut acts);
            if i <= 3 {
                assert_eq!(g.via(data(3)), None, "not before the data addresses of 2 and 3 are known");
            }
            g.handle_report(Instant::ZERO, addr(i), LoadReport { data: Some(data(i)), ..report(1, 0, &[]) });
        }
        assert_eq!(g.via(data(3)), Some(data(2)), "two hops: through the lowest-addressed neighbour");
        assert_eq!((g.via(data(2)), g.via(data(4))), (None, None), "neighbours directly");
        g.handle_member(MemberEvent::Down(addr(2)), &mut acts);
        assert_eq!(g.via(data(3)), Some(data(4)), "the other way round the ring");
        g.handle_member(MemberEvent::Down(addr(4)), &mut acts);
        assert_eq!(g.via(data(3)), None, "no live path: straight to it");
        g.handle_member(MemberEvent::Up(addr(2)), &mut acts);
        assert_eq!(g.via(data(3)), Some(data(2)));
    }
}
