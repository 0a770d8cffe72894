//! The per-VNI forwarding table at egress: which VTEP an inner destination MAC sits behind.
//!
//! Entries are static (configured) or learned at ingress from the inner source MAC and the
//! outer source address of tenant traffic, as a VXLAN VTEP learns (RFC 7348 §4). Learned entries
//! never override static ones. Each VNI may also have a default VTEP — where traffic goes when
//! the inner destination is unknown or unreadable (encrypted traffic toward the peer sNIC) — and a
//! flood list for broadcast and unknown unicast (head-end replication).
//!
//! **Tenants stay apart in it** (docs/endpoints.md, "Trust"). Each VNI has an owner
//! ([`Fdb::set_owner`]); a packet is routed only on a VNI of its own tenant ([`Route::Foreign`]
//! otherwise), so an NT cannot deliver into another tenant's overlay. Learned entries are counted
//! against the VNI's owner and bounded per tenant ([`FdbConfig::per_tenant`], or the tenant's own
//! bound): a tenant at its bound stops learning — its unknown unicast floods on its own VNIs — and
//! never evicts another's entries. Learned entries age out after [`FdbConfig::age`] without a
//! packet ([`Fdb::sweep`]). The whole table is bounded as well ([`FdbConfig::max_learned`]), so
//! its memory is too.
//!
//! Peers (VTEPs) are interned: the table maps to a small [`PeerId`], egress works with ids, and
//! [`Fdb::peer`] gives the address. Passing and comparing 40-byte socket addresses per packet
//! cost more than the lookups themselves.

pub use crate::store::PeerId;
use crate::store::{Peer, MAX_TENANTS};
use rustc_hash::FxHashMap;
use snic_core::ids::TenantId;
use snic_core::time::Instant;
use snic_wire::ethernet::MacAddr;
use std::time::Duration;

/// Where egress sends a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// To one VTEP.
    Unicast(PeerId),
    /// A copy to each of these (the source VTEP excluded by the caller).
    Flood(&'a [PeerId]),
    /// Nowhere.
    None,
    /// The VNI belongs to another tenant than the packet's: never delivered.
    Foreign,
}

#[derive(Debug, Clone, Default)]
struct VniRoutes {
    default: Option<PeerId>,
    flood: Vec<PeerId>,
    owner: Option<TenantId>,
}

/// The learning table's bounds and aging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbConfig {
    /// Most learned entries in all (the table's memory bound).
    pub max_learned: usize,
    /// Most learned entries per tenant, unless [`Fdb::set_tenant_bound`] gives the tenant its
    /// own.
    pub per_tenant: u32,
    /// A learned entry no packet refreshed for this long is forgotten (within an eighth more).
    pub age: Duration,
}

impl Default for FdbConfig {
    /// 1024 MACs a tenant, room for every tenant a node holds at that bound, 300 s of aging
    /// (the Linux bridge's and most switches' default).
    fn default() -> Self {
        FdbConfig { max_learned: 1 << 20, per_tenant: 1024, age: Duration::from_secs(300) }
    }
}

/// A learned entry's sweeps without a refresh before it goes ([`Fdb::sweep`] runs every
/// `age / AGE_SWEEPS`).
const AGE_SWEEPS: u32 = 8;

/// Who an entry belongs to: a tenant's index, or one of these.
const STATIC: u16 = u16::MAX;
/// Learned on a VNI no tenant owns (bounded by the table's bound only).
const UNOWNED: u16 = u16::MAX - 1;

#[derive(Debug, Clone, Copy)]
struct Entry {
    peer: PeerId,
    /// [`STATIC`], [`UNOWNED`] or the owning tenant's index.
    by: u16,
    /// The sweep round it was last seen in.
    seen: u32,
}

/// Per-tenant learning counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantFdb {
    /// Learned entries it holds.
    pub learned: u32,
    /// Its bound ([`FdbConfig::per_tenant`] unless set).
    pub bound: u32,
    /// New MACs not learned because it was at its bound (or the table at its own): counted once
    /// per (VNI, MAC, VTEP) seen, not per packet.
    pub refused: u64,
    /// Entries that aged out.
    pub aged: u64,
}

/// A cached unicast result: (table generation, VNI, destination MAC, peer, the tenant it holds
/// for).
type Hit = (u64, u32, u64, PeerId, TenantId);

/// Most distinct peers the table interns.
pub const MAX_PEERS: usize = 65536;

/// The forwarding table.
#[derive(Debug, Clone)]
pub struct Fdb {
    cfg: FdbConfig,
    peers: Vec<Peer>,
    peer_ids: FxHashMap<Peer, PeerId>,
    macs: FxHashMap<(u32, u64), Entry>,
    /// Direct-mapped filter of recent learn calls: a packet whose (VNI, MAC, peer) was just
    /// learned skips the table probe, and takes the peer's id from here. Any table change, and
    /// every sweep, clears it (so the next packet of a flow refreshes its entry's age).
    recent: Box<[(u32, PeerId, u64, u128); 64]>,
    /// The last sender [`Fdb::sender`] interned, by [`Peer::key`].
    last_sender: (u128, PeerId),
    vnis: FxHashMap<u32, VniRoutes>,
    /// Learned entries in all.
    learned: usize,
    tenants: Box<[TenantFdb]>,
    /// Counters of the entries learned on VNIs no tenant owns.
    unowned: TenantFdb,
    /// Sweeps so far, and when the next is due.
    round: u32,
    next_sweep: Instant,
    /// Direct-mapped cache of unicast results (learned, static or the VNI's default) for a
    /// tenant, valid while `gen` matches: any change to the MAC table or the VNI routes bumps
    /// `gen` and so invalidates it at once.
    hits: Box<[Hit; 256]>,
    gen: u64,
}

impl Fdb {
    /// A table with `cfg`'s bounds.
    pub fn new(cfg: FdbConfig) -> Self {
        let fresh = TenantFdb { bound: cfg.per_tenant, ..TenantFdb::default() };
        Fdb {
            cfg,
            peers: Vec::with_capacity(1024),
            peer_ids: FxHashMap::default(),
            // Grown as entries are learned: a table sized for its bound up front would hold
            // tens of MB for a node that learns a few MACs.
            macs: FxHashMap::default(),
            recent: Box::new([(u32::MAX, PeerId::NONE, 0, 0); 64]),
            last_sender: (Peer::default().key(), PeerId::NONE),
            vnis: FxHashMap::default(),
            learned: 0,
            tenants: vec![fresh; MAX_TENANTS].into_boxed_slice(),
            unowned: TenantFdb { bound: u32::MAX, ..TenantFdb::default() },
            round: 0,
            next_sweep: Instant::ZERO + cfg.age / AGE_SWEEPS,
            hits: Box::new([(u64::MAX, 0, 0, PeerId(0), TenantId(0)); 256]),
            gen: 0,
        }
    }

    /// The table's bounds and aging.
    pub fn config(&self) -> FdbConfig {
        self.cfg
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

    /// Makes `owner` the tenant of `vni` (`None`: no tenant's; packets of any tenant route on
    /// it, as on a table nobody configured). A VNI that changes hands forgets what it learned.
    pub fn set_owner(&mut self, vni: u32, owner: Option<TenantId>) {
        let r = self.vnis.entry(vni).or_default();
        if r.owner == owner {
            return;
        }
        r.owner = owner;
        self.forget_learned(|v, _| v == vni);
        self.changed();
    }

    /// The tenant that owns `vni`, if one does.
    pub fn owner(&self, vni: u32) -> Option<TenantId> {
        self.vnis.get(&vni).and_then(|r| r.owner)
    }

    /// Gives tenant `t` its own bound on learned entries (`None`: the table's default). Entries
    /// it holds over a lowered bound stay until they age out; it learns no more until under it.
    pub fn set_tenant_bound(&mut self, t: TenantId, bound: Option<u32>) {
        if let Some(c) = self.tenants.get_mut(t.index()) {
            c.bound = bound.unwrap_or(self.cfg.per_tenant);
        }
    }

    /// Tenant `t`'s learning counters.
    pub fn tenant(&self, t: TenantId) -> TenantFdb {
        self.tenants.get(t.index()).copied().unwrap_or_default()
    }

    /// Learned entries in all.
    pub fn learned(&self) -> usize {
        self.learned
    }

    /// Removes the learned entries `gone(vni, entry)` names, with their counts.
    fn forget_learned(&mut self, gone: impl Fn(u32, &Entry) -> bool) {
        let (tenants, unowned, learned) = (&mut self.tenants, &mut self.unowned, &mut self.learned);
        let before = *learned;
        self.macs.retain(|&(v, _), e| {
            if e.by == STATIC || !gone(v, e) {
                return true;
            }
            let c = if e.by == UNOWNED { &mut *unowned } else { &mut tenants[e.by as usize] };
            c.learned -= 1;
            *learned -= 1;
            false
        });
        if *learned != before {
            self.changed();
        }
    }

    /// Every cached result is stale.
    fn changed(&mut self) {
        self.recent.fill((u32::MAX, PeerId::NONE, 0, 0));
        self.gen += 1;
    }

    /// The counters of whoever learns on `vni`.
    fn learner(&mut self, by: u16) -> &mut TenantFdb {
        if by == UNOWNED {
            &mut self.unowned
        } else {
            &mut self.tenants[by as usize]
        }
    }

    /// Adds a static entry. Fails only when the peer table is full.
    pub fn add_static(&mut self, vni: u32, mac: MacAddr, peer: Peer) -> Option<()> {
        let id = self.intern(peer)?;
        self.changed();
        let old = self.macs.insert((vni, mac.as_u64()), Entry { peer: id, by: STATIC, seen: self.round });
        if let Some(e) = old.filter(|e| e.by != STATIC) {
            self.learner(e.by).learned -= 1;
            self.learned -= 1;
        }
        Some(())
    }

    /// Removes a static entry (a learned one for that MAC stays: it is not configuration).
    pub fn remove_static(&mut self, vni: u32, mac: MacAddr) {
        if self.macs.get(&(vni, mac.as_u64())).is_some_and(|e| e.by == STATIC) {
            self.macs.remove(&(vni, mac.as_u64()));
            self.changed();
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
    /// when the peer table is full). The entry counts against the VNI's owner.
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
        if id == PeerId::NONE {
            return id;
        }
        let round = self.round;
        match self.macs.get_mut(&(vni, m)) {
            Some(e) if e.by == STATIC => {}
            Some(e) => {
                e.seen = round;
                if e.peer != id {
                    e.peer = id;
                    self.gen += 1;
                }
            }
            None => {
                let by = self.owner(vni).map_or(UNOWNED, |t| t.0);
                let full = self.learned >= self.cfg.max_learned;
                let c = self.learner(by);
                if full || c.learned >= c.bound {
                    c.refused += 1;
                    return id;
                }
                c.learned += 1;
                self.learned += 1;
                self.macs.insert((vni, m), Entry { peer: id, by, seen: round });
                self.gen += 1;
            }
        }
        id
    }

    /// When [`Fdb::sweep`] next has work.
    pub fn sweep_at(&self) -> Instant {
        self.next_sweep
    }

    /// Ages the table: when due (every [`FdbConfig::age`] / 8), forgets the learned entries no
    /// packet refreshed for `age`. Cheap when not due.
    pub fn sweep(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        let period = self.cfg.age / AGE_SWEEPS;
        self.next_sweep = now + period.max(Duration::from_millis(1));
        self.round = self.round.wrapping_add(1);
        let round = self.round;
        let (tenants, unowned) = (&mut self.tenants, &mut self.unowned);
        let mut aged = 0usize;
        self.macs.retain(|_, e| {
            if e.by == STATIC || round.wrapping_sub(e.seen) <= AGE_SWEEPS {
                return true;
            }
            let c = if e.by == UNOWNED { &mut *unowned } else { &mut tenants[e.by as usize] };
            c.learned -= 1;
            c.aged += 1;
            aged += 1;
            false
        });
        self.learned -= aged;
        // Every flow's next packet goes past the filter again, and refreshes its entry.
        self.changed();
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

    /// The route for a packet of `tenant` on `vni` to inner destination `dst` (`None` when
    /// unreadable): [`Route::Foreign`] if another tenant owns `vni`.
    #[inline]
    pub fn route(&mut self, tenant: TenantId, vni: u32, dst: Option<MacAddr>) -> Route<'_> {
        if let Some(m) = dst.filter(|m| !m.is_multicast()) {
            let mu = m.as_u64();
            let slot = ((mu ^ ((vni as u64) << 48)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
            let h = &self.hits[slot];
            if h.0 == self.gen && h.1 == vni && h.2 == mu && h.4 == tenant {
                return Route::Unicast(h.3);
            }
            return self.route_slow(tenant, vni, mu, slot);
        }
        self.route_vni(tenant, vni)
    }

    #[inline(never)]
    fn route_slow(&mut self, tenant: TenantId, vni: u32, mu: u64, slot: usize) -> Route<'_> {
        let r = self.vnis.get(&vni);
        if r.and_then(|r| r.owner).is_some_and(|o| o != tenant) {
            return Route::Foreign;
        }
        let found = match self.macs.get(&(vni, mu)) {
            Some(e) => Some(e.peer),
            None => r.and_then(|r| r.default),
        };
        if let Some(p) = found {
            self.hits[slot] = (self.gen, vni, mu, p, tenant);
            return Route::Unicast(p);
        }
        self.route_vni(tenant, vni)
    }

    /// The route of a packet whose destination is unknown on `vni`.
    fn route_vni(&self, tenant: TenantId, vni: u32) -> Route<'_> {
        match self.vnis.get(&vni) {
            Some(r) if r.owner.is_some_and(|o| o != tenant) => Route::Foreign,
            Some(VniRoutes { default: Some(p), .. }) => Route::Unicast(*p),
            Some(r) if !r.flood.is_empty() => Route::Flood(&r.flood),
            _ => Route::None,
        }
    }

    /// The MAC entries, for `snic status` and tests: (vni, mac, peer, static).
    pub fn entries(&self) -> impl Iterator<Item = (u32, MacAddr, Peer, bool)> + '_ {
        self.macs.iter().map(|((v, m), e)| {
            let b = m.to_be_bytes();
            (*v, MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]]), self.peers[e.peer.0 as usize], e.by == STATIC)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    /// The tenant of the tests that do not set owners (their VNIs are nobody's).
    const T: TenantId = TenantId(0);

    fn table(max_learned: usize) -> Fdb {
        Fdb::new(FdbConfig { max_learned, ..FdbConfig::default() })
    }

    fn mac(n: u32) -> MacAddr {
        let b = n.to_be_bytes();
        MacAddr([2, 0, b[0], b[1], b[2], b[3]])
    }

    fn peer(n: u8) -> Peer {
        Peer { addr: format!("192.0.2.{n}:4789").parse().unwrap(), mac: MacAddr([2, 0, 0, 0, 0, n]) }
    }

    fn unicast(f: &mut Fdb, vni: u32, m: Option<MacAddr>) -> Option<Peer> {
        unicast_for(f, T, vni, m)
    }

    fn unicast_for(f: &mut Fdb, t: TenantId, vni: u32, m: Option<MacAddr>) -> Option<Peer> {
        match f.route(t, vni, m) {
            Route::Unicast(id) => Some(*f.peer(id)),
            _ => None,
        }
    }

    fn flood(f: &mut Fdb, vni: u32, m: Option<MacAddr>) -> Vec<Peer> {
        match f.route(T, vni, m) {
            Route::Flood(ids) => {
                let ids = ids.to_vec();
                ids.iter().map(|i| *f.peer(*i)).collect()
            }
            _ => vec![],
        }
    }

    #[test]
    fn configured_entries_come_out_again() {
        let mut f = table(4);
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
        let mut f = table(2);
        let a = MacAddr([2, 0, 0, 0, 0, 0xa]);
        let b = MacAddr([2, 0, 0, 0, 0, 0xb]);
        assert_eq!(f.route(T, 1, Some(a)), Route::None);
        f.add_flood(1, peer(1)).unwrap();
        f.add_flood(1, peer(2)).unwrap();
        assert_eq!(flood(&mut f, 1, Some(a)), vec![peer(1), peer(2)]);
        f.learn(1, a, peer(1));
        assert_eq!(unicast(&mut f, 1, Some(a)), Some(peer(1)));
        assert_eq!(f.route(T, 2, Some(a)), Route::None, "learning is per VNI");
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
        let mut f = table(4);
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
        assert_eq!(f.route(T, 3, Some(late)), Route::None, "but not learned");
        for i in f.peers.len()..MAX_PEERS {
            f.intern(Peer { addr: SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 4789)), mac: MacAddr::default() })
                .expect("room");
        }
        assert_eq!(f.sender(peer(9)), PeerId::NONE, "peer table full");
        assert_eq!(f.get(PeerId::NONE), None);
        assert_eq!(f.get(id), Some(&peer(1)));
        let b = MacAddr([2, 0, 0, 0, 0, 0xb]);
        assert_eq!(f.learn(1, b, peer(9)), PeerId::NONE);
        assert_eq!(f.route(T, 1, Some(b)), Route::None, "nothing learned toward no peer");
        assert_eq!(f.sender(peer(1)), id, "known peers keep their ids");
    }

    #[test]
    fn a_packet_routes_only_on_its_own_tenants_vnis() {
        let (blue, green) = (TenantId(1), TenantId(2));
        let mut f = table(16);
        f.set_owner(100, Some(blue));
        f.set_owner(200, Some(green));
        f.add_flood(100, peer(1)).unwrap();
        f.set_default(200, Some(peer(2))).unwrap();
        let a = MacAddr([2, 0, 0, 0, 0, 0xa]);
        f.learn(100, a, peer(1));
        assert_eq!(unicast_for(&mut f, blue, 100, Some(a)), Some(peer(1)), "blue's own, now cached");
        assert_eq!(f.route(green, 100, Some(a)), Route::Foreign, "not through the cache either");
        assert_eq!(f.route(green, 100, None), Route::Foreign, "nor flooded");
        assert_eq!(f.route(blue, 200, Some(a)), Route::Foreign, "nor to the default of another's VNI");
        assert_eq!(f.route(blue, 200, None), Route::Foreign);
        assert_eq!(unicast_for(&mut f, green, 200, None), Some(peer(2)));
        assert_eq!(f.route(blue, 300, None), Route::None, "a VNI nobody configured goes nowhere");
        // A VNI that changes hands forgets what it learned for the old owner.
        f.set_owner(100, Some(green));
        assert_eq!(f.tenant(blue).learned, 0);
        assert_eq!(f.entries().count(), 0);
        assert_eq!(f.route(blue, 100, Some(a)), Route::Foreign);
    }

    #[test]
    fn a_tenant_at_its_bound_learns_no_more_and_never_takes_anothers_room() {
        let (hostile, victim) = (TenantId(1), TenantId(2));
        let mut f = Fdb::new(FdbConfig { max_learned: 64, per_tenant: 8, ..FdbConfig::default() });
        f.set_owner(100, Some(hostile));
        f.set_owner(101, Some(hostile));
        f.set_owner(200, Some(victim));
        f.add_flood(100, peer(1)).unwrap();
        f.add_flood(100, peer(3)).unwrap();
        f.add_flood(200, peer(2)).unwrap();
        f.add_flood(200, peer(4)).unwrap();
        // The hostile tenant floods source MACs on both its VNIs, far past its bound.
        for i in 0..10_000 {
            f.learn(100 + (i & 1), mac(i), peer(1));
        }
        let h = f.tenant(hostile);
        assert_eq!((h.learned, h.bound), (8, 8));
        assert_eq!(h.refused, 10_000 - 8);
        // Unknown unicast of the tenant at its bound floods its own VNI only.
        let late = mac(9_998);
        let flooded: Vec<_> = match f.route(hostile, 100, Some(late)) {
            Route::Flood(ids) => ids.to_vec(),
            r => panic!("{r:?}"),
        };
        assert_eq!(flooded.iter().map(|i| *f.peer(*i)).collect::<Vec<_>>(), vec![peer(1), peer(3)]);
        // The victim learns its MACs as if the hostile tenant were not there.
        for i in 0..8 {
            f.learn(200, mac(1_000_000 + i), peer(2));
        }
        assert_eq!(f.tenant(victim), TenantFdb { learned: 8, bound: 8, refused: 0, aged: 0 });
        assert_eq!(unicast_for(&mut f, victim, 200, Some(mac(1_000_003))), Some(peer(2)));
        // Its own bound, set by the operator.
        f.set_tenant_bound(victim, Some(9));
        f.learn(200, mac(2_000_000), peer(2));
        f.learn(200, mac(2_000_001), peer(2));
        assert_eq!((f.tenant(victim).learned, f.tenant(victim).refused), (9, 1));
        assert_eq!(f.learned(), 17);
    }

    #[test]
    fn the_whole_table_is_bounded_too() {
        let mut f = Fdb::new(FdbConfig { max_learned: 4, per_tenant: 100, ..FdbConfig::default() });
        f.set_owner(1, Some(TenantId(1)));
        for i in 0..10 {
            f.learn(1, mac(i), peer(1));
        }
        assert_eq!(f.learned(), 4);
        assert_eq!(f.tenant(TenantId(1)).refused, 6);
    }

    #[test]
    fn learned_entries_age_out_unless_refreshed() {
        let age = Duration::from_secs(80);
        let mut f = Fdb::new(FdbConfig { age, ..FdbConfig::default() });
        let t = TenantId(1);
        f.set_owner(1, Some(t));
        let (idle, busy, fixed) = (mac(1), mac(2), mac(3));
        f.add_static(1, fixed, peer(3)).unwrap();
        f.learn(1, idle, peer(1));
        f.learn(1, busy, peer(2));
        let step = age / AGE_SWEEPS;
        let mut now = Instant::ZERO;
        // Past `age` by less than a sweep: both still there; `busy` is refreshed as it goes.
        for _ in 0..AGE_SWEEPS {
            now = now + step;
            f.sweep(now);
            f.learn(1, busy, peer(2));
        }
        assert_eq!(unicast_for(&mut f, t, 1, Some(idle)), Some(peer(1)), "not yet: aged within an eighth more");
        now = now + step;
        f.sweep(now);
        f.learn(1, busy, peer(2));
        assert_eq!(f.route(t, 1, Some(idle)), Route::None, "forgotten after age and a sweep");
        assert_eq!(unicast_for(&mut f, t, 1, Some(busy)), Some(peer(2)), "refreshed by its packets");
        assert_eq!(unicast_for(&mut f, t, 1, Some(fixed)), Some(peer(3)), "static entries never age");
        assert_eq!((f.tenant(t).learned, f.tenant(t).aged), (1, 1));
        f.sweep(now + step / 2);
        assert_eq!(f.sweep_at(), now + step, "not due: nothing done");
    }
}
