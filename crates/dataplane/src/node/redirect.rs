//! Redirect, the data plane's part: sending a redirected chain's packets to the peer that runs
//! it, and running the DAGs this node hosts for its peers (docs/pool.md, "Redirect"). Which
//! packets go where is the core's ([`snic_core::pool::redirect`]); the header is
//! `snic_wire::redirect`'s. Here: the pool's key, sealing and opening, the buffers.
//!
//! Every redirected datagram carries a tag: AES-128-GCM with no plaintext (GMAC) over all of it
//! from the nonce on, under a key derived from the pool secret (HKDF-SHA256). A datagram whose
//! tag does not verify is dropped and counted (`unauthenticated_redirect`) before anything of
//! it is read. Datagram framing (UDP sockets, the daemon's backend) only: with Ethernet framing
//! the node neither redirects nor accepts redirected packets.

use super::ingress::Source;
use super::transmit::{Link, Transmit};
use super::Node;
use crate::backend::{Backend, Framing, RxMeta};
use crate::fdb::Route;
use crate::store::Peer;
use crate::Drop;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use snic_core::dag::DagRoute;
use snic_core::ids::{ChainId, DagUid, TenantId};
use snic_core::mat::Mat;
use snic_core::node::{NodeCore, PoolReach};
use snic_core::pool::redirect::{HostTable, Hosted, NotRun, Redirect};
use snic_core::time::Instant;
use snic_core::walk::Walk;
use snic_nt::HEADROOM;
use snic_wire::layout;
use snic_wire::redirect::{RedirectError, RedirectRepr, AUTHENTICATED_FROM, HEADER_LEN, NONCE, TAG};
use std::net::SocketAddr;

/// The node's side of the pool's data path ([`Node::pool_link`]).
#[derive(Default)]
pub struct PoolLink {
    pub(super) key: Option<LessSafeKey>,
    /// The nonce's sender part (random per node start) and counter.
    sender: u32,
    counter: u64,
    /// This node's generation in the pool (new at every start): the redirected packets it runs
    /// name it ([`snic_core::pool::redirect::runs_here`]).
    gen: u64,
    /// Packets sent to a peer, per chain.
    sent: Vec<u64>,
    hosted: HostTable,
    /// Per sending node (its nonce's sender part), the window of counters seen: anti-replay.
    seen: rustc_hash::FxHashMap<u32, snic_core::replay::Window>,
    /// Redirected packets forwarded toward the node that runs them (this node a pass-through
    /// node on the way), and their bytes.
    pass_through: (u64, u64),
    /// A buffer for what the core notes of the pool ([`snic_core::pool::placements::PoolNote`]).
    pub(super) notes: Vec<snic_core::pool::placements::PoolNote>,
    /// Chains coming home with their state, and state collected for peers.
    pub(super) handback: super::handback::Handback,
    /// The per-packet check runs: a key, datagram framing, and a chain redirected.
    pub(crate) on: bool,
    /// Packets peers forwarded to this node as their state's owner, received this poll: they
    /// enter after the batch (taking them in the middle of it would make receiving recursive
    /// and keep the usual path from being inlined). At most a batch.
    pub(super) owned: Vec<(u32, RxMeta)>,
}

/// Most sending nodes whose windows a node keeps. Only members make new senders (each start
/// of a node takes a random one), so the table holds the pool's nodes and their restarts; when
/// it is full a window goes to make room (most likely a restarted node's old one).
const MAX_SENDERS: usize = 4096;

impl PoolLink {
    /// This node's generation in the pool.
    pub fn generation(&self) -> u64 {
        self.gen
    }

    /// Packets of `chain` sent to a peer so far (they count as transmitted too).
    pub fn redirected(&self, chain: ChainId) -> u64 {
        self.sent.get(chain.index()).copied().unwrap_or(0)
    }

    /// Packets received so far for the DAG hosted as `route` (`None`: not hosted): a DAG given
    /// back waits until what its home sent has arrived
    /// ([`snic_core::pool::redirect::Fence`]).
    pub fn hosted_received(&self, route: u32) -> Option<u64> {
        self.hosted.get(route).map(|h| h.packets)
    }

    /// The DAGs this node hosts for its peers.
    pub fn hosted(&self) -> impl Iterator<Item = (u32, &Hosted)> + '_ {
        self.hosted.iter()
    }

    /// Redirected packets this node forwarded as a pass-through node, and their bytes.
    pub fn pass_through(&self) -> (u64, u64) {
        self.pass_through
    }

    /// Keys the link with `secret`, under a new random sender id (its counter from 0), and
    /// gives the node a random generation if it has none.
    fn set_secret(&mut self, secret: Option<&[u8]>) {
        self.key = secret.map(derive);
        let mut s = [0u8; 4];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut s).expect("the system's random source");
        (self.sender, self.counter) = (u32::from_ne_bytes(s), 0);
        if self.gen == 0 {
            let mut g = [0u8; 8];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut g).expect("the system's random source");
            self.gen = u64::from_ne_bytes(g);
        }
    }

    /// True if `(sender, counter)` of an authenticated redirected packet is new (anti-replay,
    /// [`snic_core::replay`]): a duplicate or replay of one already received is not.
    fn admit(&mut self, sender: u32, counter: u64) -> bool {
        if !self.seen.contains_key(&sender) && self.seen.len() >= MAX_SENDERS {
            if let Some(k) = self.seen.keys().next().copied() {
                self.seen.remove(&k);
            }
        }
        self.seen.entry(sender).or_default().admit(counter)
    }

    /// True if a packet at `off` in its buffer can be sealed for a peer: a key, and room in
    /// front of it for the header.
    fn can_seal(&self, off: usize) -> bool {
        self.key.is_some() && off >= HEADER_LEN
    }

    /// Writes `repr`, under this node's sender and its next counter, in front of the `len`
    /// bytes at `off` in `buf` and seals the whole ([`PoolLink::can_seal`] first): where the
    /// datagram now starts.
    fn seal_front(&mut self, buf: &mut [u8], off: usize, len: usize, mut repr: RedirectRepr) -> usize {
        self.counter += 1;
        (repr.sender, repr.counter) = (self.sender, self.counter);
        let start = off - HEADER_LEN;
        let h: &mut [u8; HEADER_LEN] = (&mut buf[start..off]).try_into().expect("HEADER_LEN bytes");
        repr.emit(h);
        seal(self.key.as_ref().expect("checked by can_seal"), &mut buf[start..off + len]);
        start
    }
}

/// The key for redirected packets, from the pool secret.
fn derive(secret: &[u8]) -> LessSafeKey {
    let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"snic pool redirect v1");
    let prk = salt.extract(secret);
    let okm = prk.expand(&[b"aes-128-gcm"], &AES_128_GCM).expect("16 bytes is a valid HKDF-SHA256 output length");
    LessSafeKey::new(UnboundKey::from(okm))
}

/// Seals `d` (a header then the VXLAN datagram): the tag over `d[AUTHENTICATED_FROM..]`.
fn seal(key: &LessSafeKey, d: &mut [u8]) {
    let mut n = [0u8; 12];
    n.copy_from_slice(&d[NONCE]);
    let tag = key
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::from(&d[AUTHENTICATED_FROM..]), &mut [])
        .expect("an empty plaintext is within AES-GCM's limits");
    d[TAG].copy_from_slice(tag.as_ref());
}

/// True if `d`'s tag verifies.
fn verify(key: &LessSafeKey, d: &[u8]) -> bool {
    let mut n = [0u8; 12];
    n.copy_from_slice(&d[NONCE]);
    let mut tag = [0u8; 16];
    tag.copy_from_slice(&d[TAG]);
    key.open_in_place(Nonce::assume_unique_for_key(n), Aad::from(&d[AUTHENTICATED_FROM..]), &mut tag).is_ok()
}

impl<B: Backend> Node<B> {
    /// Keys the pool's redirects with `secret` (the pool secret; `None`: this node neither
    /// redirects nor accepts redirected packets).
    pub fn set_pool_secret(&mut self, secret: Option<&[u8]>) {
        self.pool.set_secret(secret);
        self.update_pool_on();
    }

    /// This node's generation in the pool (the membership's: new at every start). Its peers name
    /// it in the packets they redirect here, from the answer to their launch; a packet named for
    /// another generation is not run here (`not_hosted`). A node keyed without one gets a random
    /// one.
    pub fn set_pool_generation(&mut self, gen: u64) {
        self.pool.gen = gen;
    }

    /// The node's side of the pool's data path, read-only: its generation, what it sent to
    /// peers and received for them, what it passed on.
    pub fn pool_link(&self) -> &PoolLink {
        &self.pool
    }

    /// True if this node can send packets to its peers and take theirs: a pool key, and
    /// datagram framing.
    pub(super) fn pooled(&self) -> bool {
        self.pool.key.is_some() && self.framing == Framing::Datagram
    }

    pub(super) fn update_pool_on(&mut self) {
        let reach = if self.pooled() { PoolReach::Peers } else { PoolReach::Alone };
        self.core.set_pool_reach(reach);
        self.pool.on = reach == PoolReach::Peers && self.core.redirects().active();
    }

    /// Sends chain `chain`'s packets — `share` of its flows, in 1/1024ths of all
    /// ([`snic_core::pool::redirect::SHARE_ALL`]: all) — to the peer whose data address is
    /// `peer`, for the routes that peer hosts ([`Node::redirect_route`]); the others stay here.
    pub fn redirect_chain(&mut self, chain: ChainId, peer: SocketAddr, share: u16) {
        self.core.redirect_chain(chain, Redirect { peer, share });
        self.update_pool_on();
    }

    /// `peer`, of generation `gen`, hosts DAG `dag` (the MAT's UID) as its DAG `hosted`:
    /// redirected packets of `dag` name it. False if `dag` is not deployed here (or is
    /// switching between forms: ask again).
    pub fn redirect_route(&mut self, dag: DagUid, peer: SocketAddr, hosted: u32, gen: u64) -> bool {
        let Some(route) = self.core.dags().arriving(dag) else { return false };
        self.core.redirect_route(route, peer, hosted, gen);
        true
    }

    /// Stops redirecting `chain`: its packets run here again (launched on demand if need be).
    pub fn stop_redirect(&mut self, chain: ChainId) -> Option<Redirect> {
        let r = self.core.stop_redirect(chain);
        self.update_pool_on();
        r
    }

    /// Forgets what `peer` hosts (it died or left): the chains redirected to it, which now run
    /// here again.
    pub fn forget_peer(&mut self, peer: SocketAddr) -> Vec<ChainId> {
        let chains = self.core.forget_peer(peer);
        self.update_pool_on();
        chains
    }

    /// The flows `chain` records while it spills ([`snic_core::pool::spill`]): their count at
    /// home and on the peer, and the packets of new flows that found the table full.
    pub fn spill_flows(&self, chain: ChainId) -> Option<((usize, usize), u64)> {
        self.core.redirects().paths(chain).map(|p| (p.flows(), p.unpinned()))
    }

    /// Hosts a DAG for the peer whose data address is `home`: its packets, redirected from
    /// there, are charged to local tenant `tenant` and take `route` from the step they name.
    /// Its number, for the peer's redirected packets.
    pub fn host_dag(&mut self, home: SocketAddr, tenant: TenantId, route: DagRoute) -> u32 {
        let r = self.core.add_hosted(route);
        self.pool.hosted.insert(r, Hosted { home, tenant, since: self.clock.now(), packets: 0 });
        r
    }

    /// Stops hosting `route`: what arrives for it from now is dropped (`not_hosted`); what runs
    /// it finishes.
    pub fn unhost_dag(&mut self, route: u32) -> Option<Hosted> {
        let h = self.pool.hosted.remove(route)?;
        self.core.remove_hosted(route);
        Some(h)
    }

    /// The draining peer at data address `owner` holds the state of these flows (by hash):
    /// their packets go back to it ([`snic_core::pool::owner`], "Draining").
    pub fn pool_pins(&mut self, owner: SocketAddr, hashes: &[u64]) {
        let now = self.clock.now();
        self.core.pin_owner(now, owner, hashes);
    }

    /// Starts draining (`true`) or stops: while it drains, the driver names the flows whose
    /// state this node holds ([`Node::flow_hashes`]) to its peers, which bring them back here.
    pub fn set_draining(&mut self, on: bool) {
        self.core.set_draining(on);
    }

    /// The flows whose state this node's running NTs hold, by hash, both directions of each
    /// (asks every worker thread: off the packet path).
    pub fn flow_hashes(&self) -> Result<Vec<u64>, crate::worker::WorkerError> {
        self.exec.flow_hashes(self.clock.now())
    }

    /// If the chain `idx` enters is redirected (for its flow and route), seals it for the peer
    /// and queues it: true ([`PoolLink::redirect`]).
    #[cold]
    #[inline(never)]
    pub(super) fn redirect(&mut self, idx: u32, now: Instant) -> bool {
        let (tx, mut l, pool, core, _) = self.parts();
        pool.redirect(&mut l, tx, core, idx, now)
    }

    /// In a pool behind a switch: if another node holds the NT state of the packet `idx`, it
    /// goes there ([`PoolLink::send_to_owner`]): true.
    #[cold]
    #[inline(never)]
    pub(super) fn send_to_owner(&mut self, idx: u32, dag: DagUid) -> bool {
        let (tx, mut l, pool, core, _) = self.parts();
        pool.send_to_owner(&mut l, tx, core, idx, dag)
    }

    /// A datagram that is not VXLAN (`e`): a peer's redirected packet — run here from the step
    /// it names, passed on, or taken as its state's owner ([`PoolLink::ingress`]) — or a drop
    /// for `e`.
    #[cold]
    #[inline(never)]
    pub(super) fn ingress_other(&mut self, idx: u32, m: RxMeta, e: snic_wire::ParseError, now: Instant) {
        // SAFETY: the dispatcher owns `idx` (just received).
        let (buf, _) = unsafe { self.slots.get(idx) };
        if !snic_wire::redirect::is_redirect(&buf[HEADROOM..HEADROOM + m.len as usize]) {
            return self.drop_unattributed(idx, Drop::Parse(e));
        }
        let (tx, mut l, pool, core, _) = self.parts();
        if pool.ingress(&mut l, tx, core, idx, m, now) {
            let e = self.walk_enter(idx, now);
            self.entered(idx, e, now);
        }
    }

    /// The packets received this poll as their state's owner ([`PoolLink::ingress`]): each as
    /// if received from its tenant's VTEP, and never forwarded again.
    #[cold]
    #[inline(never)]
    pub(super) fn ingress_owned(&mut self, now: Instant, mat: &Mat) {
        let mut owned = std::mem::take(&mut self.pool.owned);
        for &(idx, m) in &owned {
            self.ingress(idx, m, now, mat, Source::Owner);
        }
        owned.clear();
        self.pool.owned = owned;
    }
}

impl PoolLink {
    /// If the chain `idx` enters is redirected (for its flow and route), seals it for the peer
    /// and queues it: true. A branch of a parallel group always runs here, as does a packet
    /// whose NTs left no room in front of it for the header.
    fn redirect<B: Backend>(&mut self, l: &mut Link<'_, B>, tx: &mut Transmit, core: &mut NodeCore, idx: u32, now: Instant) -> bool {
        // SAFETY: the dispatcher owns `idx`.
        let (buf, d) = unsafe { l.slots.get(idx) };
        if d.walk.join_at != 0 {
            return false;
        }
        let Some(chain) = core.sched().chain_at(d.walk.dag, d.walk.pos) else { return false };
        let (off, len) = (d.meta.off as usize, d.meta.len as usize);
        if !self.can_seal(off) {
            return false;
        }
        // (From here the packet goes: the target counts it as sent.)
        let Some(t) = core.redirect_target(chain, d.walk.dag.0, d.flow_hash, now) else { return false };
        // Where the home node would deliver it: the peer delivers there.
        let delivery = match l.fdb.route(d.meta.tenant, d.meta.vni, d.meta.inner.as_ref().map(|i| i.dst_mac)) {
            Route::Unicast(p) => Some(l.fdb.peer(p).addr),
            _ => None,
        };
        // A peer the pool's links do not join to this node: through the nodes between.
        let (to, destination) = route_to(core, t.peer);
        let repr = RedirectRepr {
            sender: 0,
            counter: 0,
            route: t.route,
            incarnation: t.incarnation,
            pos: d.walk.pos,
            hops: 0,
            delivery,
            destination,
            owner: false,
        };
        let start = self.seal_front(buf, off, len, repr);
        let c = chain.index();
        if self.sent.len() <= c {
            self.sent.resize(c + 1, 0);
        }
        self.sent[c] += 1;
        tx.queue(l, idx, start, len + HEADER_LEN, to);
        true
    }

    /// In a pool behind a switch ([`snic_core::pool::owner`]): if another node holds the NT
    /// state of the packet `idx` (of DAG `dag`, the MAT's UID: the same on every node sharing
    /// the desired state), it goes there whole, sealed, before anything runs here. True: it
    /// went (it counts as this tenant's transmitted packet).
    fn send_to_owner<B: Backend>(&mut self, l: &mut Link<'_, B>, tx: &mut Transmit, core: &mut NodeCore, idx: u32, dag: DagUid) -> bool {
        // SAFETY: the dispatcher owns `idx`.
        let (buf, d) = unsafe { l.slots.get(idx) };
        let Some(inner) = d.meta.inner.as_ref() else { return false };
        let Some(owner) = core.owners().owner(dag, inner.key.dst, inner.key.dst_port, d.flow_hash) else { return false };
        let (off, len) = (d.meta.off as usize, d.meta.len as usize);
        if !self.can_seal(off) {
            return false;
        }
        let (to, destination) = route_to(core, owner);
        let repr = RedirectRepr {
            sender: 0,
            counter: 0,
            route: dag.0,
            incarnation: 0,
            pos: 0,
            hops: 0,
            // The tenant's VTEP it came from: the owner takes it as if from there.
            // (None, so dropped there, only if this node's peer table was full.)
            delivery: l.fdb.get(d.src).map(|p| p.addr),
            destination,
            owner: true,
        };
        let start = self.seal_front(buf, off, len, repr);
        core.owner_forwarded();
        tx.queue(l, idx, start, len + HEADER_LEN, to);
        true
    }

    /// A datagram that starts like a redirected packet: checks it is one of the pool's, then
    /// passes it on toward its destination, takes it as its state's owner (after the poll's
    /// batch), or — for a DAG hosted here — charges it to the hosting tenant and readies it to
    /// enter the step it names: true (the caller enters it).
    fn ingress<B: Backend>(
        &mut self,
        l: &mut Link<'_, B>,
        tx: &mut Transmit,
        core: &mut NodeCore,
        idx: u32,
        m: RxMeta,
        now: Instant,
    ) -> bool {
        // SAFETY: the dispatcher owns `idx` (just received).
        let (buf, d) = unsafe { l.slots.get(idx) };
        let stored = m.len as usize;
        let data = &buf[HEADROOM..HEADROOM + stored];
        let h = match RedirectRepr::parse(data) {
            Ok(h) => h,
            Err(RedirectError::Truncated) => return l.drop_unattributed(idx, Drop::Parse(snic_wire::ParseError::Truncated)),
            Err(_) => return l.drop_unattributed(idx, Drop::Unauthenticated),
        };
        if !self.key.as_ref().is_some_and(|k| verify(k, data)) {
            return l.drop_unattributed(idx, Drop::Unauthenticated);
        }
        if let Some(dest) = h.destination {
            return self.pass_on(l, tx, core, idx, m, h, dest, now);
        }
        if h.owner {
            return self.ingress_as_owner(l, core, idx, m, h);
        }
        let (off, len) = (HEADROOM + HEADER_LEN, stored - HEADER_LEN);
        let vni = match layout::parse_vxlan(&buf[off..off + len]) {
            Ok(v) => v,
            Err(e) => return l.drop_unattributed(idx, Drop::Parse(e)),
        };
        let tenant = match self.hosted.admit(self.gen, h.route, h.incarnation, l.fdb.owner(vni)) {
            Ok(t) => t,
            Err(NotRun::NotHosted | NotRun::OtherIncarnation) => return l.drop_unattributed(idx, Drop::NotHosted),
            Err(NotRun::OtherTenant(t)) => return l.drop_uncharged(idx, t, Drop::ForeignVni),
        };
        if !self.admit(h.sender, h.counter) {
            return l.drop_unattributed(idx, Drop::ReplayedRedirect);
        }
        // (What home sent arrived: a DAG given back waits for this count, `Fence`.)
        self.hosted.count(h.route);
        d.meta.inner = layout::parse_inner(&buf[off + snic_wire::vxlan::HEADER_LEN..off + len]).ok();
        if !super::ingress::charge_rx(core, l.store, l.stats, idx, tenant, stored, len, now) {
            return false;
        }
        // The home node resolved the destination: deliver where it would have.
        if let (Some(inner), Some(to)) = (&d.meta.inner, h.delivery) {
            l.fdb.learn(vni, inner.dst_mac, Peer { addr: to, mac: Default::default() });
        }
        d.meta.off = off as u16;
        d.meta.len = len as u16;
        d.meta.vni = vni;
        d.meta.tenant = tenant;
        d.src = l.fdb.sender(Peer { addr: m.src, mac: Default::default() });
        d.flow_hash = super::ingress::flow_hash(buf, &d.meta.inner, off, len);
        d.rx_ns = m.arrival(now);
        d.verdict = None;
        d.charged = true;
        d.walk = Walk::at(DagUid(h.route), h.pos);
        l.store.tag_route(idx, h.route);
        true
    }

    /// A packet a peer forwarded to this node as the owner of its NT state: taken, after the
    /// poll's batch ([`Node::ingress_owned`]), as if received from the tenant's VTEP the header
    /// names (its rules, its source check, its charge, learning), from the start of this
    /// node's DAG, and never forwarded again. (False: it does not enter now.)
    fn ingress_as_owner<B>(&mut self, l: &mut Link<'_, B>, core: &mut NodeCore, idx: u32, m: RxMeta, h: RedirectRepr) -> bool {
        if !self.admit(h.sender, h.counter) {
            return l.drop_unattributed(idx, Drop::ReplayedRedirect);
        }
        let Some(vtep) = h.delivery else { return l.drop_unattributed(idx, Drop::Unauthenticated) };
        // SAFETY: the dispatcher owns `idx` (just received).
        let (buf, _) = unsafe { l.slots.get(idx) };
        let stored = m.len as usize;
        // Where a received datagram starts (the header is read: its bytes go).
        buf.copy_within(HEADROOM + HEADER_LEN..HEADROOM + stored, HEADROOM);
        core.owner_received();
        self.owned.push((idx, RxMeta { len: (stored - HEADER_LEN) as u16, src: vtep, ..m }));
        false
    }

    /// This node is a pass-through node on the way to `dest` (the pool's links join the home
    /// node and `dest` through it): the datagram goes on toward `dest`, nothing of it runs
    /// here. It was authenticated; it is checked against replay, sealed again under this
    /// node's nonce (one more hop), and charged meanwhile to the node's own account (tenant 0,
    /// which no tenant of a manifest is). (False: it does not enter here.)
    #[allow(clippy::too_many_arguments)]
    fn pass_on<B: Backend>(
        &mut self,
        l: &mut Link<'_, B>,
        tx: &mut Transmit,
        core: &NodeCore,
        idx: u32,
        m: RxMeta,
        mut h: RedirectRepr,
        dest: SocketAddr,
        now: Instant,
    ) -> bool {
        if h.hops >= crate::drops::MAX_PASS_THROUGH {
            return l.drop_unattributed(idx, Drop::PassThroughHops);
        }
        if !self.admit(h.sender, h.counter) {
            return l.drop_unattributed(idx, Drop::ReplayedRedirect);
        }
        let stored = m.len as usize;
        let own = TenantId(0);
        if let Err(why) = l.store.charge(idx, own, HEADROOM..HEADROOM + stored) {
            return l.drop_unattributed(idx, why);
        }
        let next = core.pool().via(dest);
        (h.hops, h.destination) = (h.hops + 1, next.map(|_| dest));
        // SAFETY: the dispatcher owns `idx` (just received).
        let (buf, d) = unsafe { l.slots.get(idx) };
        // (Verified under the key: one more hop, sealed again under this node's nonce.)
        self.seal_front(buf, HEADROOM + HEADER_LEN, stored - HEADER_LEN, h);
        d.meta.off = HEADROOM as u16;
        d.meta.len = stored as u16;
        d.meta.tenant = own;
        d.meta.inner = None;
        d.rx_ns = m.arrival(now);
        d.verdict = None;
        d.charged = true;
        self.pass_through.0 += 1;
        self.pass_through.1 += stored as u64;
        tx.queue(l, idx, HEADROOM, stored, next.unwrap_or(dest));
        false
    }
}

/// Where a datagram for the node at data address `peer` goes first, and the destination its
/// header names when that is a pass-through node (the pool's links join the two only through
/// others): `(peer, None)` when it goes straight there.
fn route_to(core: &NodeCore, peer: SocketAddr) -> (SocketAddr, Option<SocketAddr>) {
    match core.pool().via(peer) {
        Some(next) => (next, Some(peer)),
        None => (peer, None),
    }
}
