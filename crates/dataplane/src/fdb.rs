//! The per-VNI forwarding table at egress: which VTEP an inner destination MAC sits behind.
//!
//! Entries are static (configured) or learned at ingress from the inner source MAC and the
//! outer source address of tenant traffic, as a VXLAN VTEP learns (RFC 7348 §4). Learned entries
//! never override static ones, and learning stops at a fixed table size (memory fixed after
//! start). Each VNI may also have a default VTEP — where traffic goes when the inner destination
//! is unknown or unreadable (encrypted traffic toward the peer sNIC) — and a flood list for
//! broadcast and unknown unicast (head-end replication).

use crate::store::Peer;
use rustc_hash::FxHashMap;
use snic_wire::ethernet::MacAddr;

/// Where egress sends a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// To one VTEP.
    Unicast(Peer),
    /// A copy to each of these (the source VTEP excluded by the caller).
    Flood(&'a [Peer]),
    /// Nowhere.
    None,
}

#[derive(Debug, Clone, Default)]
struct VniRoutes {
    default: Option<Peer>,
    flood: Vec<Peer>,
}

/// The forwarding table.
#[derive(Debug, Clone)]
pub struct Fdb {
    macs: FxHashMap<(u32, u64), (Peer, bool)>,
    /// Direct-mapped filter of recent learn calls: a packet whose (VNI, MAC, peer) was just
    /// learned skips the table probe. Any table change clears it.
    recent: Box<[Option<(u32, u64, Peer)>; 64]>,
    vnis: FxHashMap<u32, VniRoutes>,
    max_learned: usize,
    learned: usize,
    /// Direct-mapped cache of unicast lookups, valid while `gen` matches: any change to the MAC
    /// table bumps `gen` and so invalidates it at once.
    hits: Box<[(u64, u32, u64, Peer); 256]>,
    gen: u64,
}

impl Fdb {
    /// A table that learns at most `max_learned` entries.
    pub fn new(max_learned: usize) -> Self {
        Fdb {
            macs: FxHashMap::with_capacity_and_hasher(max_learned, Default::default()),
            recent: Box::new([None; 64]),
            vnis: FxHashMap::default(),
            max_learned,
            learned: 0,
            hits: Box::new([(u64::MAX, 0, 0, Peer::default()); 256]),
            gen: 0,
        }
    }

    /// Adds a static entry.
    pub fn add_static(&mut self, vni: u32, mac: MacAddr, peer: Peer) {
        self.recent.fill(None);
        self.gen += 1;
        if let Some((_, false)) = self.macs.insert((vni, mac.as_u64()), (peer, true)) {
            self.learned -= 1;
        }
    }

    /// Sets the VTEP for unknown or unreadable destinations of `vni`.
    pub fn set_default(&mut self, vni: u32, peer: Option<Peer>) {
        self.vnis.entry(vni).or_default().default = peer;
    }

    /// Adds a VTEP to the flood list of `vni`.
    pub fn add_flood(&mut self, vni: u32, peer: Peer) {
        let f = &mut self.vnis.entry(vni).or_default().flood;
        if !f.contains(&peer) {
            f.push(peer);
        }
    }

    /// Learns that `mac` on `vni` is behind `peer`.
    #[inline(always)]
    pub fn learn(&mut self, vni: u32, mac: MacAddr, peer: Peer) {
        if mac.is_multicast() {
            return;
        }
        let m = mac.as_u64();
        let slot = ((m ^ (m >> 17) ^ vni as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize;
        if self.recent[slot] == Some((vni, m, peer)) {
            return;
        }
        self.recent[slot] = Some((vni, m, peer));
        let k = (vni, m);
        match self.macs.get_mut(&k) {
            Some((p, false)) if *p != peer => {
                *p = peer;
                self.gen += 1;
            }
            Some(_) => {}
            None if self.learned < self.max_learned => {
                self.macs.insert(k, (peer, false));
                self.learned += 1;
                self.gen += 1;
            }
            None => {}
        }
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
            if let Some((p, _)) = self.macs.get(&(vni, mu)) {
                self.hits[slot] = (self.gen, vni, mu, *p);
                return Route::Unicast(*p);
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
            (*v, MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]]), *p, *s)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u8) -> Peer {
        Peer { addr: format!("192.0.2.{n}:4789").parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, n]) }
    }

    #[test]
    fn static_learned_default_flood() {
        let mut f = Fdb::new(2);
        let a = MacAddr([2, 0, 0, 0, 0, 0xa]);
        let b = MacAddr([2, 0, 0, 0, 0, 0xb]);
        assert_eq!(f.route(1, Some(a)), Route::None);
        f.add_flood(1, peer(1));
        f.add_flood(1, peer(2));
        assert_eq!(f.route(1, Some(a)), Route::Flood(&[peer(1), peer(2)]));
        f.learn(1, a, peer(1));
        assert_eq!(f.route(1, Some(a)), Route::Unicast(peer(1)));
        assert_eq!(f.route(2, Some(a)), Route::None, "learning is per VNI");
        f.add_static(1, b, peer(2));
        f.learn(1, b, peer(1));
        assert_eq!(f.route(1, Some(b)), Route::Unicast(peer(2)), "static beats learned");
        assert_eq!(f.route(1, Some(MacAddr::BROADCAST)), Route::Flood(&[peer(1), peer(2)]));
        f.set_default(1, Some(peer(3)));
        assert_eq!(f.route(1, None), Route::Unicast(peer(3)));
        // Bounded learning.
        f.learn(1, MacAddr([2, 0, 0, 0, 0, 1]), peer(1));
        f.learn(1, MacAddr([2, 0, 0, 0, 0, 2]), peer(1));
        assert_eq!(f.entries().filter(|e| !e.3).count(), 2);
    }
}
