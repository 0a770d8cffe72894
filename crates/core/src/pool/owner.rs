//! Where a flow's state lives in a pool behind a switch (docs/pool.md, "Behind a switch").
//!
//! Every node of such a pool holds the same anycast address and the switch spreads flows over
//! them by a hash of the outer headers. A flow's first packet creates its NT state (a NAT's
//! mapping) on the node the switch sent it to, and the switch keeps sending that direction
//! there (a resilient next-hop group moves only a dead node's flows). The other direction —
//! a SNAT's return traffic, from another endpoint, with another outer hash — may land on any
//! node. So the state's owner must follow from the return packet itself: the pool splits a
//! stateful NT's port range into `slots` contiguous blocks, each node allocates only from the
//! block of its own slot (node.yaml `pool.slot`), and a return packet to the NT's public
//! address and a port of another node's block is forwarded, whole and before any NT runs, to
//! the node holding that slot (as Nezha keeps a flow's state at one node and brings its
//! packets to it). A node learns who holds each slot from its peers' load reports.
//!
//! **Draining** (docs/pool.md, "Draining a node"): a node leaving the pool for an upgrade is
//! withdrawn from the switch, which sends its flows' packets to other nodes. So that none of
//! them loses its state, the draining node tells its peers the hashes of the flows whose state
//! it holds ([`Owners::pin`], again every gossip period while it drains); a peer brings those
//! flows' packets back to it the same way, until it has none left and stops. New flows stay
//! where the switch puts them.
//!
//! What it costs: a return packet that lands on a node other than its owner crosses the pool
//! once more (with `n` nodes, `(n-1)/n` of them on average); the forward direction costs
//! nothing. The check per packet is one table read for DAGs that hold no such NT, and a
//! compare per claim for those that do.

use crate::ids::DagUid;
use crate::mat::PortRange;
use crate::time::Instant;
use core::time::Duration;
use rustc_hash::FxHashMap;
use std::net::{IpAddr, SocketAddr};

/// Most slots a pool can be split into.
pub const MAX_SLOTS: u16 = 256;

/// Most flows a node keeps pinned to draining peers (past it, a draining peer's further flows
/// are not pinned here, and counted).
pub const MAX_PINNED: usize = 1 << 20;

/// A pinned flow its draining peer has not named again this long is forgotten (the peer names
/// them every gossip period).
pub const PIN_TTL: Duration = Duration::from_secs(2);

/// This node's slot, of the pool's `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// This node's slot, below `count`.
    pub slot: u16,
    /// The pool's slot count (the same on every node).
    pub count: u16,
}

/// The block of `range` that slot `s.slot` of `s.count` allocates from; `None` if the range
/// has fewer ports than slots.
pub fn block(range: PortRange, s: Slots) -> Option<PortRange> {
    let span = u32::from(range.hi) - u32::from(range.lo) + 1;
    let count = u32::from(s.count.max(1));
    if span < count || s.slot >= s.count.max(1) {
        return None;
    }
    let start = |i: u32| u32::from(range.lo) + i * span / count;
    let (lo, next) = (start(u32::from(s.slot)), start(u32::from(s.slot) + 1));
    Some(PortRange { lo: lo as u16, hi: (next - 1) as u16 })
}

/// The slot whose block of `range` (split `count` ways) holds `port` (in `range`).
pub fn slot_of(range: PortRange, count: u16, port: u16) -> u16 {
    let span = u64::from(range.hi) - u64::from(range.lo) + 1;
    let count = u64::from(count.max(1));
    let off = u64::from(port.saturating_sub(range.lo));
    // Block i starts at floor(i·span/count): the last i whose start is at most `off`.
    let i = ((off + 1) * count - 1) / span;
    i.min(count - 1) as u16
}

/// A stateful NT's claim on return traffic: packets to `public` and a port of `ports` belong
/// to the node whose block holds the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The NT's public address.
    pub public: IpAddr,
    /// The whole port range it allocates from, pool-wide.
    pub ports: PortRange,
}

/// The node's table of owners: its slot, the claims of its DAGs' stateful NTs, and the data
/// address of the live member holding each slot.
#[derive(Debug, Clone, Default)]
pub struct Owners {
    slots: Option<Slots>,
    /// Claims, by DAG (the MAT's UID, pool-wide).
    claims: Vec<Vec<Claim>>,
    /// Data address of the member holding each slot (`None`: none, or this node).
    at: Vec<Option<SocketAddr>>,
    /// Slots more than one member claims (the first by address is used).
    conflicts: Vec<u16>,
    on: bool,
    /// Flows of draining peers, by hash: the peer's data address, when last named.
    pinned: FxHashMap<u64, (SocketAddr, Instant)>,
    /// Flows a draining peer named that did not fit [`MAX_PINNED`].
    pub unpinned: u64,
    /// This node drains.
    draining: bool,
    /// Packets this node forwarded to their owner, and packets it received as their owner.
    pub forwarded: u64,
    /// See `forwarded`.
    pub received: u64,
}

impl Owners {
    /// This node's slot (`None`, or a count of 1: the pool is not split, nothing is forwarded).
    pub fn new(slots: Option<Slots>) -> Self {
        Owners { slots: slots.filter(|s| s.count > 1), ..Default::default() }
    }

    /// This node's slot.
    pub fn slots(&self) -> Option<Slots> {
        self.slots
    }

    /// True if any packet may need forwarding (a split pool, a claim, a peer holding a slot).
    #[inline]
    pub fn on(&self) -> bool {
        self.on
    }

    fn update_on(&mut self) {
        self.on = self.slots.is_some()
            && self.claims.iter().any(|c| !c.is_empty())
            && (self.at.iter().any(Option::is_some) || !self.pinned.is_empty());
    }

    /// The draining peer at data address `owner` holds the state of the flows of these hashes:
    /// their packets go to it.
    pub fn pin(&mut self, now: Instant, owner: SocketAddr, hashes: &[u64]) {
        for &h in hashes {
            if self.pinned.len() < MAX_PINNED || self.pinned.contains_key(&h) {
                self.pinned.insert(h, (owner, now));
            } else {
                self.unpinned += 1;
            }
        }
        self.update_on();
    }

    /// The peer at data address `owner` is gone: its flows are forgotten.
    pub fn unpin(&mut self, owner: SocketAddr) {
        self.pinned.retain(|_, (o, _)| *o != owner);
        self.update_on();
    }

    /// Flows pinned to draining peers.
    pub fn pinned(&self) -> usize {
        self.pinned.len()
    }

    /// This node drains (or no longer does).
    pub fn set_draining(&mut self, on: bool) {
        self.draining = on;
    }

    /// True while this node drains.
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// DAG `dag`'s stateful NTs claim these (none: it claims nothing).
    pub fn set_claims(&mut self, dag: DagUid, claims: Vec<Claim>) {
        let i = dag.0 as usize;
        if self.claims.len() <= i {
            self.claims.resize(i + 1, Vec::new());
        }
        self.claims[i] = claims;
        self.update_on();
    }

    /// The members holding slots, from their fresh load reports: (slot, data address), at
    /// `now` (pins not named for [`PIN_TTL`] go). A slot this node holds stays its own.
    pub fn set_holders(&mut self, now: Instant, holders: impl IntoIterator<Item = (u16, SocketAddr)>) {
        if !self.pinned.is_empty() {
            self.pinned.retain(|_, (_, at)| now.saturating_since(*at) <= PIN_TTL);
        }
        let Some(me) = self.slots else { return };
        self.at.clear();
        self.at.resize(usize::from(me.count), None);
        self.conflicts.clear();
        let mut sorted: Vec<(u16, SocketAddr)> = holders.into_iter().filter(|(s, _)| *s < me.count).collect();
        sorted.sort();
        for (s, addr) in sorted {
            if s == me.slot || self.at[usize::from(s)].is_some() {
                if !self.conflicts.contains(&s) {
                    self.conflicts.push(s);
                }
                continue;
            }
            self.at[usize::from(s)] = Some(addr);
        }
        self.update_on();
    }

    /// Slots claimed by more than one node (this one included): a misconfigured pool.
    pub fn conflicts(&self) -> &[u16] {
        &self.conflicts
    }

    /// The members holding slots: (slot, data address).
    pub fn holders(&self) -> impl Iterator<Item = (u16, SocketAddr)> + '_ {
        self.at.iter().enumerate().filter_map(|(s, a)| a.map(|a| (s as u16, a)))
    }

    /// Where a packet of DAG `dag` to `dst`:`port`, of the flow of hash `flow`, must go: the
    /// data address of the peer owning its state, or `None` to run it here (the DAG claims
    /// nothing, this node owns it, or no live member holds the slot). A flow pinned to a
    /// draining peer goes there.
    #[inline]
    pub fn owner(&self, dag: DagUid, dst: IpAddr, port: u16, flow: u64) -> Option<SocketAddr> {
        let me = self.slots?;
        let claims = self.claims.get(dag.0 as usize).filter(|c| !c.is_empty())?;
        if let Some(&(o, _)) = self.pinned.get(&flow) {
            return Some(o);
        }
        let c = claims.iter().find(|c| c.public == dst && (c.ports.lo..=c.ports.hi).contains(&port))?;
        let s = slot_of(c.ports, me.count, port);
        if s == me.slot {
            return None;
        }
        self.at.get(usize::from(s)).copied().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The blocks of any range cover it exactly, in order, none empty, and `slot_of` finds
        /// every port's block.
        #[test]
        fn blocks_partition_the_range_and_slot_of_inverts_them(lo in 0u16..2000, extra in 0u16..3000, count in 1u16..40) {
            let range = PortRange { lo, hi: lo + extra };
            let span = u32::from(extra) + 1;
            if span < u32::from(count) {
                prop_assert_eq!(block(range, Slots { slot: 0, count }), None);
                return Ok(());
            }
            let mut next = u32::from(lo);
            for slot in 0..count {
                let b = block(range, Slots { slot, count }).unwrap();
                prop_assert_eq!(u32::from(b.lo), next);
                prop_assert!(b.hi >= b.lo);
                for p in b.lo..=b.hi {
                    prop_assert_eq!(slot_of(range, count, p), slot);
                }
                next = u32::from(b.hi) + 1;
            }
            prop_assert_eq!(next, u32::from(range.hi) + 1);
        }
    }

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 4789))
    }

    #[test]
    fn a_return_packet_goes_to_the_node_holding_its_ports_block() {
        let public: IpAddr = [10, 1, 0, 100].into();
        let ports = PortRange { lo: 1000, hi: 1899 };
        let mut o = Owners::new(Some(Slots { slot: 0, count: 3 }));
        let dag = DagUid(4);
        o.set_claims(dag, vec![Claim { public, ports }]);
        assert!(!o.on(), "no peer holds a slot yet");
        o.set_holders(Instant::ZERO, [(1, addr(2)), (2, addr(3))]);
        assert!(o.on());
        // Blocks: 1000–1299 here, 1300–1599 node 2, 1600–1899 node 3.
        assert_eq!(o.owner(dag, public, 1299, 0), None, "this node's own block");
        assert_eq!(o.owner(dag, public, 1300, 0), Some(addr(2)));
        assert_eq!(o.owner(dag, public, 1899, 0), Some(addr(3)));
        assert_eq!(o.owner(dag, public, 999, 0), None, "outside the claim");
        assert_eq!(o.owner(dag, [10, 1, 0, 2].into(), 1500, 0), None, "another address");
        assert_eq!(o.owner(DagUid(3), public, 1500, 0), None, "a DAG that claims nothing");
        // Node 3 is gone: its block's packets run here (and find no state).
        o.set_holders(Instant::ZERO, [(1, addr(2))]);
        assert_eq!(o.owner(dag, public, 1899, 0), None);
        assert_eq!(o.holders().collect::<Vec<_>>(), [(1, addr(2))]);
    }

    #[test]
    fn a_draining_peers_flows_go_back_to_it_until_it_is_gone_or_stops_naming_them() {
        let public: IpAddr = [10, 1, 0, 100].into();
        let mut o = Owners::new(Some(Slots { slot: 0, count: 2 }));
        let dag = DagUid(1);
        o.set_claims(dag, vec![Claim { public, ports: PortRange { lo: 1000, hi: 1999 } }]);
        let t0 = Instant::ZERO;
        o.pin(t0, addr(2), &[7, 8]);
        assert!(o.on(), "pins alone turn the check on");
        let elsewhere: IpAddr = [10, 1, 0, 2].into();
        assert_eq!(o.owner(dag, elsewhere, 80, 7), Some(addr(2)), "a pinned flow, either direction");
        assert_eq!(o.owner(dag, elsewhere, 80, 9), None, "a new flow stays here");
        assert_eq!(o.owner(DagUid(2), elsewhere, 80, 7), None, "only DAGs with stateful NTs");
        // Named again: kept; not named for PIN_TTL: gone.
        o.pin(t0 + PIN_TTL, addr(2), &[7]);
        o.set_holders(t0 + PIN_TTL + Duration::from_millis(1), []);
        assert_eq!((o.owner(dag, elsewhere, 80, 7), o.owner(dag, elsewhere, 80, 8)), (Some(addr(2)), None));
        o.unpin(addr(2));
        assert_eq!(o.pinned(), 0);
        assert!(!o.on());
    }

    #[test]
    fn a_slot_claimed_twice_is_a_conflict_and_this_nodes_slot_stays_its_own() {
        let mut o = Owners::new(Some(Slots { slot: 1, count: 2 }));
        o.set_holders(Instant::ZERO, [(1, addr(2)), (0, addr(4)), (0, addr(3))]);
        assert_eq!(o.conflicts(), [0, 1]);
        assert_eq!(o.holders().collect::<Vec<_>>(), [(0, addr(3))], "the first by address");
        assert!(Owners::new(Some(Slots { slot: 0, count: 1 })).slots().is_none(), "one slot: not split");
    }
}
