//! Redirect: which packets a node sends to a peer instead of running them, and what it runs for
//! its peers (paper 000 §5; the encapsulation is `snic_wire::redirect`).
//!
//! **Home side.** A chain placed on a peer ([`crate::pool::PoolAgent::placed`]) is *redirected*:
//! packets that reach it are sent to the peer, which runs it and the rest of their DAG and
//! delivers them. All of its packets, or a share of its flows: a flow's share is decided by its
//! hash, so a flow keeps its path for as long as the share does not change — and a chain that
//! spills a share of its flows ([`crate::pool::spill`]) records each flow's side
//! ([`FlowPaths`]), so that a flow keeps its path while it lives, whatever the share does. The
//! peer names the DAG it hosts for this node by its own number; [`Redirects::target`] pairs the
//! two.
//!
//! **Peer side.** [`HostTable`]: the DAGs a node hosts for its peers — whose, under which local
//! tenant, and how many packets it ran for them.
//!
//! **Giving a DAG back** (a chain moving home): home counts the packets it sent each hosted
//! DAG and names the count when it asks for the DAG back; the peer stops it only once it has
//! received that many ([`Fence`]), so that a packet still in the network when home asks is run
//! there, not dropped — or, if one was lost on the way, after [`FENCE_WAIT`].
//!
//! Sans-IO: the data plane asks, per packet, and does the sending.

use crate::ids::{ChainId, TenantId};
use crate::pool::spill::FlowPaths;
use crate::time::Instant;
use core::time::Duration;
use std::net::SocketAddr;

/// A share of all flows, in 1/1024ths: [`SHARE_ALL`] sends every flow.
pub const SHARE_ALL: u16 = 1024;

/// A chain's redirect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirect {
    /// The peer's data address.
    pub peer: SocketAddr,
    /// The flows sent there, in 1/1024ths of all ([`SHARE_ALL`]: all).
    pub share: u16,
}

/// Where one packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The peer's data address.
    pub peer: SocketAddr,
    /// The peer's number for the DAG it hosts for this node.
    pub route: u32,
    /// The peer's incarnation that gave the number ([`incarnation`] of its generation): the
    /// peer runs the packet only if it is still that incarnation.
    pub incarnation: u32,
}

/// A node's incarnation as the redirect header carries it: the low 32 bits of its generation
/// (new at every start), never 0 (0 names none: a packet to its state's owner).
#[inline]
pub fn incarnation(gen: u64) -> u32 {
    (gen as u32).max(1)
}

/// Whether a node of generation `gen` runs a redirected packet named for `incarnation`: only a
/// packet for this incarnation. After a restart a node numbers the DAGs it hosts anew; a packet
/// a home node sent for a number the node's earlier incarnation gave is dropped, never run in
/// the DAG the new incarnation gave the same number to (which may be another tenant's).
#[inline]
pub fn runs_here(gen: u64, named: u32) -> bool {
    named == incarnation(gen)
}

/// True if the flow with `flow_hash` is within `share` (of [`SHARE_ALL`]). Decided by the
/// hash's top ten bits: the same flow, the same answer.
#[inline]
pub fn in_share(flow_hash: u64, share: u16) -> bool {
    ((flow_hash >> 54) as u16) < share
}

/// This node's route `route`, hosted by `peer` (of `incarnation`) as its DAG `hosted`; packets
/// sent there so far.
#[derive(Debug, Clone, Copy)]
struct HostedRoute {
    route: u32,
    peer: SocketAddr,
    hosted: u32,
    incarnation: u32,
    sent: u64,
}

/// A home node's redirects. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Redirects {
    by_chain: Vec<Option<Redirect>>,
    /// This node's routes that peers host.
    routes: Vec<HostedRoute>,
    count: usize,
    /// Per chain, the side each of its flows runs on (chains that spill, or may).
    paths: Vec<Option<FlowPaths>>,
    tables: usize,
}

impl Redirects {
    /// None.
    pub fn new() -> Self {
        Self::default()
    }

    /// Redirects `chain` (replacing what it had).
    pub fn set(&mut self, chain: ChainId, r: Redirect) {
        let i = chain.index();
        if self.by_chain.len() <= i {
            self.by_chain.resize(i + 1, None);
        }
        if self.by_chain[i].replace(r).is_none() {
            self.count += 1;
        }
    }

    /// Stops redirecting `chain`; what it had.
    pub fn clear(&mut self, chain: ChainId) -> Option<Redirect> {
        let r = self.by_chain.get_mut(chain.index()).and_then(Option::take);
        if r.is_some() {
            self.count -= 1;
        }
        r
    }

    /// `peer`, in the incarnation of generation `gen`, hosts this node's route `route` as its
    /// DAG `hosted` (its count of packets sent starts from 0 for a DAG new to it).
    pub fn set_route(&mut self, route: u32, peer: SocketAddr, hosted: u32, gen: u64) {
        let incarnation = incarnation(gen);
        match self.routes.iter_mut().find(|e| e.route == route && e.peer == peer) {
            Some(e) if e.hosted == hosted && e.incarnation == incarnation => {}
            Some(e) => (e.hosted, e.incarnation, e.sent) = (hosted, incarnation, 0),
            None => self.routes.push(HostedRoute { route, peer, hosted, incarnation, sent: 0 }),
        }
    }

    /// `peer` no longer hosts this node's route `route`: the packets sent to it for the route,
    /// if it did ([`Fence`]).
    pub fn clear_route(&mut self, route: u32, peer: SocketAddr) -> Option<u64> {
        let i = self.routes.iter().position(|e| e.route == route && e.peer == peer)?;
        Some(self.routes.swap_remove(i).sent)
    }

    /// Forgets what `peer` hosts (it died, or left); the chains redirected to it, which no longer
    /// are.
    pub fn forget_peer(&mut self, peer: SocketAddr) -> Vec<ChainId> {
        self.routes.retain(|e| e.peer != peer);
        let mut out = Vec::new();
        for (i, r) in self.by_chain.iter_mut().enumerate() {
            if r.is_some_and(|r| r.peer == peer) {
                *r = None;
                self.count -= 1;
                out.push(ChainId(i as u16));
            }
        }
        out
    }

    /// Sets the share of `chain`'s new flows sent to its peer (a chain that spills, draining:
    /// 0), if it is redirected.
    pub fn set_share(&mut self, chain: ChainId, share: u16) {
        if let Some(Some(r)) = self.by_chain.get_mut(chain.index()) {
            r.share = share;
        }
    }

    /// Records the side of each of `chain`'s flows from now, at most `cap` of them
    /// ([`FlowPaths`]): a flow seen keeps its side.
    pub fn learn(&mut self, chain: ChainId, cap: usize) {
        let i = chain.index();
        if self.paths.len() <= i {
            self.paths.resize(i + 1, None);
        }
        if self.paths[i].replace(FlowPaths::new(cap)).is_none() {
            self.tables += 1;
        }
    }

    /// Stops recording `chain`'s flows.
    pub fn forget_paths(&mut self, chain: ChainId) {
        if self.paths.get_mut(chain.index()).and_then(Option::take).is_some() {
            self.tables -= 1;
        }
    }

    /// `chain`'s recorded flows, if it has them.
    pub fn paths(&self, chain: ChainId) -> Option<&FlowPaths> {
        self.paths.get(chain.index()).and_then(Option::as_ref)
    }

    /// `chain`'s recorded flows, if it has them.
    pub fn paths_mut(&mut self, chain: ChainId) -> Option<&mut FlowPaths> {
        self.paths.get_mut(chain.index()).and_then(Option::as_mut)
    }

    /// True if any chain is redirected or has its flows recorded (the per-packet check is
    /// skipped otherwise).
    #[inline]
    pub fn active(&self) -> bool {
        self.count > 0 || self.tables > 0
    }

    /// `chain`'s redirect.
    pub fn get(&self, chain: ChainId) -> Option<Redirect> {
        self.by_chain.get(chain.index()).copied().flatten()
    }

    /// The redirected chains.
    pub fn iter(&self) -> impl Iterator<Item = (ChainId, Redirect)> + '_ {
        self.by_chain.iter().enumerate().filter_map(|(i, r)| r.map(|r| (ChainId(i as u16), r)))
    }

    /// Where a packet of flow `flow_hash` on this node's route `route` that reaches `chain`
    /// `now` goes: a peer (which hosts the route), or `None` — here. A chain whose flows are
    /// recorded sends a flow where it went before; a new one by the share. A packet given a
    /// peer is counted as sent there: the caller sends it.
    #[inline]
    pub fn target(&mut self, chain: ChainId, route: u32, flow_hash: u64, now: Instant) -> Option<Target> {
        let r = self.get(chain);
        let r = match self.paths_mut(chain) {
            Some(paths) => {
                let new_peer = r.is_some_and(|r| in_share(flow_hash, r.share));
                paths.side(flow_hash, now, new_peer).then_some(r).flatten()?
            }
            None => r.filter(|r| in_share(flow_hash, r.share))?,
        };
        let e = self.routes.iter_mut().find(|e| e.route == route && e.peer == r.peer)?;
        e.sent += 1;
        Some(Target { peer: r.peer, route: e.hosted, incarnation: e.incarnation })
    }
}

/// A DAG a node hosts for a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hosted {
    /// The peer it runs it for (its data address).
    pub home: SocketAddr,
    /// The local tenant its packets are charged to.
    pub tenant: TenantId,
    /// Since when.
    pub since: Instant,
    /// Packets received for it (authenticated, and not replays).
    pub packets: u64,
}

/// How long a peer giving a DAG back waits for packets its home sent before asking that have
/// not arrived (lost on the way, or dropped at home's transmit queue): they would be dropped
/// as not hosted after it.
pub const FENCE_WAIT: Duration = Duration::from_millis(100);

/// A DAG to give back once the packets its home sent it have arrived. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// Packets home sent the DAG in all.
    pub sent: u64,
    /// Waits no longer than this.
    pub until: Instant,
}

/// Whether a DAG can be given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceState {
    /// Packets home sent are still on the way: wait (at most until the fence's `until`).
    Wait,
    /// Every packet home sent has arrived.
    Ready,
    /// `missing` packets did not arrive in time: give it back without them.
    TimedOut {
        /// Sent but not received.
        missing: u64,
    },
}

impl Fence {
    /// A fence for `sent` packets, asked `now`: waits at most [`FENCE_WAIT`].
    pub fn new(sent: u64, now: Instant) -> Fence {
        Fence { sent, until: now + FENCE_WAIT }
    }

    /// With `received` packets of the DAG arrived by `now`.
    pub fn check(&self, received: u64, now: Instant) -> FenceState {
        if received >= self.sent {
            FenceState::Ready
        } else if now >= self.until {
            FenceState::TimedOut { missing: self.sent - received }
        } else {
            FenceState::Wait
        }
    }
}

/// The DAGs a node hosts for its peers, by its own number for each (its route).
#[derive(Debug, Clone, Default)]
pub struct HostTable {
    by_route: Vec<Option<Hosted>>,
}

/// Why a node does not run a redirected packet (one whose tag verified and that is no replay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRun {
    /// No DAG of that number is hosted here.
    NotHosted,
    /// It was named for another incarnation of this node ([`runs_here`]): the number it
    /// carries is an earlier incarnation's, not this one's.
    OtherIncarnation,
    /// Its VNI is not the hosted DAG's tenant's: it would run in another tenant's NTs.
    OtherTenant(TenantId),
}

impl HostTable {
    /// None.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rule a node runs a peer's redirected packet by, on every driver: a packet named for
    /// DAG `route` and incarnation `named`, on a VNI whose owner here is `vni_owner`, runs in
    /// the hosted DAG — whose tenant this returns — only if this node (of generation `gen`) is
    /// the incarnation that gave the number, hosts it, and the VNI is its tenant's. So a packet
    /// runs only in a DAG of its own tenant, whatever number it carries.
    pub fn admit(&self, gen: u64, route: u32, named: u32, vni_owner: Option<TenantId>) -> Result<TenantId, NotRun> {
        if !runs_here(gen, named) {
            return Err(NotRun::OtherIncarnation);
        }
        let h = self.get(route).ok_or(NotRun::NotHosted)?;
        if vni_owner != Some(h.tenant) {
            return Err(NotRun::OtherTenant(h.tenant));
        }
        Ok(h.tenant)
    }

    /// Hosts `h` as route `route`.
    pub fn insert(&mut self, route: u32, h: Hosted) {
        let i = route as usize;
        if self.by_route.len() <= i {
            self.by_route.resize(i + 1, None);
        }
        self.by_route[i] = Some(h);
    }

    /// Route `route`'s entry.
    #[inline]
    pub fn get(&self, route: u32) -> Option<&Hosted> {
        self.by_route.get(route as usize)?.as_ref()
    }

    /// Counts a packet received for route `route` (authenticated, not a replay).
    #[inline]
    pub fn count(&mut self, route: u32) {
        if let Some(Some(h)) = self.by_route.get_mut(route as usize) {
            h.packets += 1;
        }
    }

    /// Stops hosting `route`.
    pub fn remove(&mut self, route: u32) -> Option<Hosted> {
        self.by_route.get_mut(route as usize).and_then(Option::take)
    }

    /// What it hosts.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Hosted)> + '_ {
        self.by_route.iter().enumerate().filter_map(|(i, h)| h.as_ref().map(|h| (i as u32, h)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peers' generation in these tests.
    const G: u64 = 0x1_0000_0007;

    fn a(p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    #[test]
    fn a_share_keeps_each_flow_on_one_side_and_sends_about_its_share() {
        let mut r = Redirects::new();
        assert!(!r.active());
        r.set(ChainId(3), Redirect { peer: a(1), share: 256 });
        r.set_route(9, a(1), 4, G);
        assert!(r.active());
        let mut sent = 0;
        for f in 0..10_000u64 {
            let h = f.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let t = r.target(ChainId(3), 9, h, Instant::ZERO);
            assert_eq!(t, r.target(ChainId(3), 9, h, Instant::ZERO), "the same flow, the same side");
            if let Some(t) = t {
                assert_eq!(t, Target { peer: a(1), route: 4, incarnation: incarnation(G) });
                sent += 1;
            }
        }
        assert!((2000..3000).contains(&sent), "a quarter of the flows, got {sent}");
        assert_eq!(r.target(ChainId(2), 9, u64::MAX, Instant::ZERO), None, "another chain stays");
        assert_eq!(r.target(ChainId(3), 8, 0, Instant::ZERO), None, "a route the peer does not host stays");
        r.set(ChainId(3), Redirect { peer: a(1), share: SHARE_ALL });
        assert!((0..1000u64).all(|f| r.target(ChainId(3), 9, f.wrapping_mul(0x9e37_79b9_7f4a_7c15), Instant::ZERO).is_some()));
    }

    #[test]
    fn a_dead_peer_takes_its_redirects_and_routes_with_it() {
        let mut r = Redirects::new();
        r.set(ChainId(0), Redirect { peer: a(1), share: SHARE_ALL });
        r.set(ChainId(1), Redirect { peer: a(2), share: SHARE_ALL });
        r.set_route(0, a(1), 0, G);
        r.set_route(1, a(2), 0, G);
        assert_eq!(r.forget_peer(a(1)), vec![ChainId(0)]);
        assert_eq!(r.target(ChainId(0), 0, 0, Instant::ZERO), None);
        assert!(r.target(ChainId(1), 1, 0, Instant::ZERO).is_some());
        assert_eq!(r.clear(ChainId(1)).map(|r| r.peer), Some(a(2)));
        assert!(!r.active());
    }

    #[test]
    fn the_host_table_counts_what_arrives_for_each_hosted_dag() {
        let mut t = HostTable::new();
        t.insert(2, Hosted { home: a(1), tenant: TenantId(5), since: Instant::ZERO, packets: 0 });
        assert_eq!(t.get(1), None);
        assert_eq!(t.get(2).map(|h| h.tenant), Some(TenantId(5)));
        t.count(2);
        t.count(2);
        t.count(1);
        assert_eq!(t.iter().map(|(r, h)| (r, h.packets)).collect::<Vec<_>>(), vec![(2, 2)]);
        assert!(t.remove(2).is_some());
        t.count(2);
        assert_eq!(t.get(2), None);
    }

    #[test]
    fn home_counts_what_it_sent_each_hosted_dag_and_the_peer_gives_it_back_once_all_arrived() {
        let mut r = Redirects::new();
        r.set(ChainId(1), Redirect { peer: a(1), share: SHARE_ALL });
        r.set_route(5, a(1), 7, G);
        for f in 0..10u64 {
            assert_eq!(r.target(ChainId(1), 5, f << 40, Instant::ZERO), Some(Target { peer: a(1), route: 7, incarnation: incarnation(G) }));
        }
        assert_eq!(r.target(ChainId(1), 6, 0, Instant::ZERO), None, "a route the peer does not host is not counted");
        r.set_route(5, a(1), 7, G);
        assert_eq!(r.clear_route(5, a(1)), Some(10), "the same DAG again keeps its count");
        assert_eq!(r.clear_route(5, a(1)), None);
        r.set_route(5, a(1), 7, G);
        r.target(ChainId(1), 5, 0, Instant::ZERO);
        r.set_route(5, a(1), 8, G);
        assert_eq!(r.clear_route(5, a(1)), Some(0), "another DAG on the peer counts from 0");
        r.set_route(5, a(1), 7, G);
        r.target(ChainId(1), 5, 0, Instant::ZERO);
        r.set_route(5, a(1), 7, G + 1);
        assert_eq!(r.target(ChainId(1), 5, 0, Instant::ZERO).map(|t| t.incarnation), Some(incarnation(G + 1)));
        assert_eq!(r.clear_route(5, a(1)), Some(1), "the same number from a restarted peer is another DAG: counted from 0");

        let mut hosts = HostTable::new();
        hosts.insert(7, Hosted { home: a(2), tenant: TenantId(3), since: Instant::ZERO, packets: 0 });
        let now = Instant::from_nanos(1_000);
        let fence = Fence::new(10, now);
        for _ in 0..9 {
            hosts.count(7);
        }
        hosts.count(8);
        let got = hosts.get(7).unwrap().packets;
        assert_eq!(fence.check(got, now + FENCE_WAIT / 2), FenceState::Wait, "one is still on the way");
        assert_eq!(fence.check(got, now + FENCE_WAIT), FenceState::TimedOut { missing: 1 });
        hosts.count(7);
        assert_eq!(fence.check(hosts.get(7).unwrap().packets, now), FenceState::Ready);
        assert_eq!(Fence::new(0, now).check(0, now), FenceState::Ready, "nothing sent: nothing to wait for");
    }

    #[test]
    fn a_node_runs_only_what_is_named_for_its_own_incarnation() {
        assert!(runs_here(G, incarnation(G)));
        assert!(!runs_here(G + 1, incarnation(G)), "restarted: the old incarnation's numbers are not its");
        assert!(!runs_here(G, 0), "0 names none");
        assert_eq!(incarnation(1 << 32), 1, "never 0");
    }

    #[test]
    fn a_redirected_packet_runs_only_in_a_dag_of_its_own_tenant_of_this_incarnation() {
        let mut t = HostTable::new();
        t.insert(1, Hosted { home: a(1), tenant: TenantId(7), since: Instant::ZERO, packets: 0 });
        let me = incarnation(G);
        assert_eq!(t.admit(G, 1, me, Some(TenantId(7))), Ok(TenantId(7)));
        assert_eq!(t.admit(G, 2, me, Some(TenantId(7))), Err(NotRun::NotHosted));
        assert_eq!(t.admit(G + 1, 1, me, Some(TenantId(7))), Err(NotRun::OtherIncarnation), "a number the earlier incarnation gave");
        assert_eq!(t.admit(G, 1, me, Some(TenantId(8))), Err(NotRun::OtherTenant(TenantId(7))), "another tenant's VNI");
        assert_eq!(t.admit(G, 1, me, None), Err(NotRun::OtherTenant(TenantId(7))), "a VNI no tenant owns here");
    }
}
