//! The per-VNI forwarding table at egress: which VTEP an inner destination MAC sits behind.
//!
//! Entries are static (configured) or learned at ingress from the inner source MAC and the
//! outer source address of tenant traffic, as a VXLAN VTEP learns (RFC 7348 §4). Learned entries
//! never override static ones, and learning stops at a fixed table size (memory fixed after
//! start). Each VNI may also have a default VTEP — where traffic goes when the inner destination
//! is unknown or unreadable (encrypted traffic toward the peer sNIC) — and a flood list for
//! broadcast and unknown unicast (head-end replication).
//!
//! Peers (VTEPs) are interned: the table maps to a small [`PeerId`], egress works with ids, and
//! [`Fdb::peer`] gives the address. Passing and comparing 40-byte socket addresses per packet
//! cost more than the lookups themselves.

use crate::store::Peer;
pub use crate::store::PeerId;
use rustc_hash::FxHashMap;
use snic_wire::ethernet::MacAddr;

/// Where egress sends a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// To one VTEP.
    Unicast(PeerId),
    /// A copy to each of these (the source VTEP excluded by the caller).
    Flood(&'a [PeerId]),
    /// Nowhere.
    None,
}

#[derive(Debug, Clone, Default)]
struct VniRoutes {
    default: Option<PeerId>,
    flood: Vec<PeerId>,
}

/// Most distinct peers the table interns.
pub const MAX_PEERS: usize = 65536;

/// The forwarding table.
#[derive(Debug, Clone)]
pub struct Fdb {
    peers: Vec<Peer>,
    peer_ids: FxHashMap<Peer, PeerId>,
    macs: FxHashMap<(u32, u64), (PeerId, bool)>,
    /// Direct-mapped filter of recent learn calls: a packet whose (VNI, MAC, peer) was just
    /// learned skips the table probe, and takes the peer's id from here. Any table change
    /// clears it.
    recent: Box<[(u32, PeerId, u64, u128); 64]>,
    /// The last sender [`Fdb::sender`] interned, by [`Peer::key`].
    last_sender: (u128, PeerId),
    vnis: FxHashMap<u32, VniRoutes>,
    max_learned: usize,
    learned: usize,
    /// Direct-mapped cache of unicast results (learned, static or the VNI's default), valid
    /// while `gen` matches: any change to the MAC table or the VNI routes bumps `gen` and so
    /// invalidates it at once.
    hits: Box<[(u64, u32, u64, PeerId); 256]>,
    gen: u64,
}

impl Fdb {
    /// A table that learns at most `max_learned` entries.
    pub fn new(max_learned: usize) -> Self {
        Fdb {
            peers: Vec::with_capacity(1024),
            peer_ids: FxHashMap::default(),
            macs: FxHashMap::with_capacity_and_hasher(max_learned, Default::default()),
            recent: Box::new([(u32::MAX, PeerId::NONE, 0, 0); 64]),
            last_sender: (Peer::default().key(), PeerId::NONE),
            vnis: FxHashMap::default(),
            max_learned,
            learned: 0,
            hits: Box::new([(u64::MAX, 0, 0, PeerId(0)); 256]),
            gen: 0,
        }
    }

    /// The id of `peer`, interning it; `None` when the peer table is full.
    pub fn intern(&mut self, peer: Peer) -> Option<PeerId> {
        if let Some(id) = self.peer_ids.get(&peer) {
            return Some(*id);
        }
        if self.peers.len() >= MAX_PEERS {
            return None;
        }
        let id = PeerId(self.peers.len() as u32);
        self.peers.push(peer);
        self.peer_ids.insert(peer, id);
        Some(id)
    }

    /// The peer behind an id.
    #[inline]
    pub fn peer(&self, id: PeerId) -> &Peer {
        &self.peers[id.0 as usize]
    }

    /// The peer behind an id that may be [`PeerId::NONE`] (a descriptor's sender).
    #[inline]
    pub fn get(&self, id: PeerId) -> Option<&Peer> {
        self.peers.get(id.0 as usize)
    }

    /// Adds a static entry. Fails only when the peer table is full.
    pub fn add_static(&mut self, vni: u32, mac: MacAddr, peer: Peer) -> Option<()> {
        let id = self.intern(peer)?;
        self.recent.fill((u32::MAX, PeerId::NONE, 0, 0));
        self.gen += 1;
        if let Some((_, false)) = self.macs.insert((vni, mac.as_u64()), (id, true)) {
            self.learned -= 1;
        }
        Some(())
    }

    /// Removes a static entry (a learned one for that MAC stays: it is not configuration).
    pub fn remove_static(&mut self, vni: u32, mac: MacAddr) {
        if let Some((_, true)) = self.macs.get(&(vni, mac.as_u64())) {
            self.macs.remove(&(vni, mac.as_u64()));
            self.recent.fill((u32::MAX, PeerId::NONE, 0, 0));
            self.gen += 1;
        }
    }

    /// Removes a VTEP from the flood list of `vni`.
    pub fn remove_flood(&mut self, vni: u32, peer: Peer) {
        let Some(&id) = self.peer_ids.get(&peer) else { return };
        if let Some(r) = self.vnis.get_mut(&vni) {
            r.flood.retain(|&p| p != id);
            self.gen += 1;
        }
    }

    /// Sets the VTEP for unknown or unreadable destinations of `vni`.
    pub fn set_default(&mut self, vni: u32, peer: Option<Peer>) -> Option<()> {
        let id = match peer {
            Some(p) => Some(self.intern(p)?),
            None => None,
        };
        self.gen += 1;
        self.vnis.entry(vni).or_default().default = id;
        Some(())
    }

    /// Adds a VTEP to the flood list of `vni`.
    pub fn add_flood(&mut self, vni: u32, peer: Peer) -> Option<()> {
        let id = self.intern(peer)?;
        self.gen += 1;
        let f = &mut self.vnis.entry(vni).or_default().flood;
        if !f.contains(&id) {
            f.push(id);
        }
        Some(())
    }

    /// Learns that `mac` on `vni` is behind `peer`, and gives `peer`'s id ([`PeerId::NONE`]
    /// when the peer table is full).
    #[inline(always)]
    pub fn learn(&mut self, vni: u32, mac: MacAddr, peer: Peer) -> PeerId {
        if mac.is_multicast() {
            return self.sender(peer);
        }
        let m = mac.as_u64();
        let slot = ((m ^ (m >> 17) ^ vni as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize;
        let pk = peer.key();
        let r = &self.recent[slot];
        if r.0 == vni && r.2 == m && r.3 == pk {
            return r.1;
        }
        self.learn_slow(vni, m, peer, slot, pk)
    }

    #[inline(never)]
    fn learn_slow(&mut self, vni: u32, m: u64, peer: Peer, slot: usize, pk: u128) -> PeerId {
        let id = self.intern(peer).unwrap_or(PeerId::NONE);
        self.recent[slot] = (vni, id, m, pk);
        let k = (vni, m);
        if id == PeerId::NONE {
            return id;
        }
        match self.macs.get(&k).copied() {
            Some((old, false)) if id != old => {
                self.macs.insert(k, (id, false));
                self.gen += 1;
            }
            None if self.learned < self.max_learned => {
                self.macs.insert(k, (id, false));
                self.learned += 1;
                self.gen += 1;
            }
            _ => {}
        }
        id
    }

    /// The id of a packet's sending VTEP when nothing is learned from it (its inner frame
    /// unread): interned, the last one remembered. [`PeerId::NONE`] when the peer table is full.
    #[inline]
    pub fn sender(&mut self, peer: Peer) -> PeerId {
        let k = peer.key();
        if self.last_sender.0 == k && self.last_sender.1 != PeerId::NONE {
            return self.last_sender.1;
        }
        let id = self.intern(peer).unwrap_or(PeerId::NONE);
        self.last_sender = (k, id);
        id
    }

    /// Changes whenever a route may have: a route found while it stays the same still holds.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.gen
    }

    /// The route for a packet on `vni` to inner destination `dst` (`None` when unreadable).
    #[inline]
    pub fn route(&mut self, vni: u32, dst: Option<MacAddr>) -> Route<'_> {
        if let Some(m) = dst.filter(|m| !m.is_multicast()) {
            let mu = m.as_u64();
            let slot = ((mu ^ ((vni as u64) << 48)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
            let h = &self.hits[slot];
            if h.0 == self.gen && h.1 == vni && h.2 == mu {
                return Route::Unicast(h.3);
            }
            let found = match self.macs.get(&(vni, mu)) {
                Some((p, _)) => Some(*p),
                None => self.vnis.get(&vni).and_then(|r| r.default),
            };
            if let Some(p) = found {
                self.hits[slot] = (self.gen, vni, mu, p);
                return Route::Unicast(p);
            }
        }
        match self.vnis.get(&vni) {
            Some(VniRoutes { default: Some(p), .. }) => Route::Unicast(*p),
            Some(r) if !r.flood.is_empty() => Route::Flood(&r.flood),
            _ => Route::None,
        }
    }

    /// The MAC entries, for `snic status` and tests: (vni, mac, peer, static).
    pub fn entries(&self) -> impl Iterator<Item = (u32, MacAddr, Peer, bool)> + '_ {
        self.macs.iter().map(|((v, m), (p, s))| {
            let b = m.to_be_bytes();
            (*v, MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]]), self.peers[p.0 as usize], *s)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn peer(n: u8) -> Peer {
        Peer { addr: format!("192.0.2.{n}:4789").parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, n]) }
    }

    fn unicast(f: &mut Fdb, vni: u32, m: Option<MacAddr>) -> Option<Peer> {
        match f.route(vni, m) {
            Route::Unicast(id) => Some(*f.peer(id)),
            _ => None,
        }
    }

    fn flood(f: &mut Fdb, vni: u32, m: Option<MacAddr>) -> Vec<Peer> {
        match f.route(vni, m) {
            Route::Flood(ids) => {
                let ids = ids.to_vec();
                ids.iter().map(|i| *f.peer(*i)).collect()
            }
            _ => vec![],
        }
    }

    #[test]
    fn configured_entries_come_out_again() {
        let mut f = Fdb::new(4);
        let b = MacAddr([2, 0, 0, 0, 0, 0xb]);
        f.add_static(1, b, peer(2)).unwrap();
        f.add_flood(1, peer(1)).unwrap();
        f.add_flood(1, peer(3)).unwrap();
        assert_eq!(unicast(&mut f, 1, Some(b)), Some(peer(2)), "cached");
        f.remove_static(1, b);
        assert_eq!(flood(&mut f, 1, Some(b)), vec![peer(1), peer(3)], "unknown again: flooded, not the cached peer");
        f.remove_flood(1, peer(1));
        assert_eq!(flood(&mut f, 1, Some(b)), vec![peer(3)]);
        // A learned entry is not configuration: removing a static one for that MAC leaves it.
        f.learn(1, b, peer(3));
        f.remove_static(1, b);
        assert_eq!(unicast(&mut f, 1, Some(b)), Some(peer(3)));
    }

    #[test]
    fn static_learned_default_flood() {
        let mut f = Fdb::new(2);
        let a = MacAddr([2, 0, 0, 0, 0, 0xa]);
        let b = MacAddr([2, 0, 0, 0, 0, 0xb]);
        assert_eq!(f.route(1, Some(a)), Route::None);
        f.add_flood(1, peer(1)).unwrap();
        f.add_flood(1, peer(2)).unwrap();
        assert_eq!(flood(&mut f, 1, Some(a)), vec![peer(1), peer(2)]);
        f.learn(1, a, peer(1));
        assert_eq!(unicast(&mut f, 1, Some(a)), Some(peer(1)));
        assert_eq!(f.route(2, Some(a)), Route::None, "learning is per VNI");
        f.add_static(1, b, peer(2)).unwrap();
        f.learn(1, b, peer(1));
        assert_eq!(unicast(&mut f, 1, Some(b)), Some(peer(2)), "static beats learned");
        assert_eq!(flood(&mut f, 1, Some(MacAddr::BROADCAST)), vec![peer(1), peer(2)]);
        // A MAC that moves is re-learned, and the route cache follows at once.
        f.learn(1, a, peer(3));
        assert_eq!(unicast(&mut f, 1, Some(a)), Some(peer(3)));
        f.set_default(1, Some(peer(4))).unwrap();
        assert_eq!(unicast(&mut f, 1, None), Some(peer(4)));
        assert_eq!(unicast(&mut f, 1, Some(MacAddr([2, 0, 0, 0, 0, 0x77]))), Some(peer(4)), "unknown MAC takes the default");
        // Bounded learning.
        f.learn(1, MacAddr([2, 0, 0, 0, 0, 1]), peer(1));
        f.learn(1, MacAddr([2, 0, 0, 0, 0, 2]), peer(1));
        assert_eq!(f.entries().filter(|e| !e.3).count(), 2);
    }

    #[test]
    fn learning_names_the_sender_by_its_id_until_the_peer_table_is_full() {
        let mut f = Fdb::new(4);
        let a = MacAddr([2, 0, 0, 0, 0, 0xa]);
        let id = f.learn(1, a, peer(1));
        assert_eq!(*f.peer(id), peer(1));
        assert_eq!(f.learn(1, a, peer(1)), id, "again, from the filter");
        assert_eq!(f.sender(peer(1)), id, "the same id without learning");
        assert_eq!(f.learn(1, MacAddr::BROADCAST, peer(1)), id, "a multicast source is named, not learned");
        let moved = f.learn(1, a, peer(2));
        assert_eq!(*f.peer(moved), peer(2));
        assert_eq!(unicast(&mut f, 1, Some(a)), Some(peer(2)));
        for m in 0..8 {
            f.learn(2, MacAddr([2, 0, 0, 0, 1, m]), peer(3));
        }
        let late = MacAddr([2, 0, 0, 0, 2, 0]);
        let named = f.learn(3, late, peer(5));
        assert_eq!(*f.peer(named), peer(5), "named even once learning has stopped");
        assert_eq!(f.route(3, Some(late)), Route::None, "but not learned");
        for i in f.peers.len()..MAX_PEERS {
            f.intern(Peer { addr: SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 4789)), mac: MacAddr::default() })
                .expect("room");
        }
        assert_eq!(f.sender(peer(9)), PeerId::NONE, "peer table full");
        assert_eq!(f.get(PeerId::NONE), None);
        assert_eq!(f.get(id), Some(&peer(1)));
        let b = MacAddr([2, 0, 0, 0, 0, 0xb]);
        assert_eq!(f.learn(1, b, peer(9)), PeerId::NONE);
        assert_eq!(f.route(1, Some(b)), Route::None, "nothing learned toward no peer");
        assert_eq!(f.sender(peer(1)), id, "known peers keep their ids");
    }
}
