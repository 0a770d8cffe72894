//! The daemon's side of the pool: one thread with a UDP socket on `pool.listen` that drives the
//! core's membership machine (`snic_core::pool::membership`) on the real clock, reports this
//! node's load to every member each gossip period, takes the members' reports into the pool
//! agent (`snic_core::pool::agent`), and publishes what it knows for `snic status`.
//!
//! The decisions — which peer hosts a chain this node has no room for, when it comes home — are
//! the data plane's pool agent's (in the node's core): this thread hands it every member's load
//! report and every member change, and carries its remote launches. What `snic status` shows of
//! the members' reports is that agent's, as the data plane last published it.
//!
//! Every pool datagram is a frame of the core's pool protocol (`snic_core::pool::message`: the
//! header, the messages and their codec in each version it speaks) sealed with the pool's
//! secret: its HMAC-SHA256 (32 bytes) follows the payload. (5/6, over TCP, a DAG given back with
//! its state: [`super::handback`].) A datagram that is not one, or whose tag does not verify,
//! or that was seen before (a replay: per sender, an older generation, or a counter already
//! seen or older than the last 64), or of a version this node does not speak, is dropped and
//! counted; nothing in it reaches the core. Each member is sent the version the core's
//! `Versions` chooses for it, and greeted in the newest while it has not been heard in it.

use ring::hmac;
use serde::Serialize;
use snic_control::plan::HostRequest;
use snic_core::config::PoolConfig;
use snic_core::pool::message::{self, CodecError, Header, HostAsk, HostedAnswer, Pins, Versions};
use snic_core::pool::{ChainKey, ChainSpare, Heard, Incarnations, LoadReport, MemberEvent, MemberId, Membership};
use snic_core::time::Instant;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::worker::{DpLink, Snapshot};

/// HMAC-SHA256, whole (checked by the library's own constant-time verification).
const TAG: usize = 32;
/// Flow hashes per PINS datagram (8 bytes each: the datagram stays under 1,200 bytes).
const PINS_PER_DATAGRAM: usize = 140;
/// A pool message: its request to host a DAG is the control plane's.
type Message = message::Message<HostRequest>;
/// How long a remote launch may take, request to answer.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Remote launches waiting for their answer, at most.
const MAX_PENDING: usize = 64;

/// Where a peer hosts a DAG: its data address, its number for the DAG, and its generation (the
/// incarnation that gave the number: redirected packets name it).
pub type Hosting = Result<(SocketAddr, u32, u64), String>;

/// What the other threads ask of the pool thread.
enum PoolCmd {
    /// Ask the member at pool address `peer` to host a DAG.
    Place(SocketAddr, Box<HostRequest>, mpsc::Sender<Hosting>),
    /// Tell the member at pool address `peer` it need not host its DAG of this number.
    Unhost(SocketAddr, u32),
}

/// A handle on the pool thread for the API.
pub struct PoolLink {
    cmds: mpsc::Sender<PoolCmd>,
    /// The pool socket, to wake the thread: an empty datagram to itself.
    wake: UdpSocket,
    addr: SocketAddr,
    /// The pool's key and this node's data address, to move chains home.
    key: hmac::Key,
    data: SocketAddr,
    /// This node's generation in the pool (new at every start).
    pub gen: u64,
}

impl PoolLink {
    /// Asks the member at pool address `peer` to host `req` (remote launch) and waits for the
    /// answer: its data address and its number for the DAG.
    pub fn place(&self, peer: SocketAddr, req: HostRequest) -> Hosting {
        let rx = self.place_async(peer, req);
        rx.recv_timeout(LAUNCH_TIMEOUT + Duration::from_secs(1)).map_err(|_| "the pool thread did not answer".to_string())?
    }

    /// [`PoolLink::place`] without waiting: the answer comes on the receiver (within
    /// LAUNCH_TIMEOUT; a receiver whose sender is gone means the pool thread stopped).
    pub fn place_async(&self, peer: SocketAddr, req: HostRequest) -> mpsc::Receiver<Hosting> {
        let (tx, rx) = mpsc::channel();
        self.tell(PoolCmd::Place(peer, Box::new(req), tx));
        rx
    }

    /// Hands `cmd` to the pool thread and wakes it.
    fn tell(&self, cmd: PoolCmd) {
        if self.cmds.send(cmd).is_ok() {
            let _ = self.wake.send_to(&[], self.addr);
        }
    }

    /// Tells the member at pool address `peer` that it need not host its DAG `hosted` for this
    /// node any more (fire and forget: a peer that does not hear it keeps an idle DAG, whose
    /// region its auto-scaler frees).
    pub fn unhost(&self, peer: SocketAddr, hosted: u32) {
        self.tell(PoolCmd::Unhost(peer, hosted));
    }

    /// Asks the member at pool address `peer` for its DAG `hosted` back (once the `sent`
    /// packets this node sent it have arrived), with the state of its chains' NTs, without
    /// waiting (see [`super::handback`]).
    pub fn fetch_state(
        &self,
        peer: SocketAddr,
        hosted: u32,
        sent: u64,
        wake: Option<snic_dataplane::backend::Waker>,
    ) -> mpsc::Receiver<super::handback::Returned> {
        super::handback::fetch(self.key.clone(), self.data, peer, (hosted, sent), wake)
    }
}

/// The unspecified IP of `a` replaced by `ip` (a socket bound to all addresses is reached at
/// the one its datagrams come from).
pub(super) fn reachable(a: SocketAddr, ip: std::net::IpAddr) -> SocketAddr {
    if a.ip().is_unspecified() {
        SocketAddr::new(ip, a.port())
    } else {
        a
    }
}
/// Largest pool datagram accepted.
const MAX_DATAGRAM: usize = 65_000;

/// Seals `payload` under `header` into a pool datagram.
pub(super) fn seal(key: &hmac::Key, header: Header, payload: &[u8], out: &mut Vec<u8>) {
    out.clear();
    header.write(out);
    out.extend_from_slice(payload);
    let tag = hmac::sign(key, out);
    out.extend_from_slice(tag.as_ref());
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// Not a pool datagram.
    Malformed,
    /// Its tag does not verify: not from a member of this pool.
    Unauthenticated,
    /// From a member, in a version this node does not speak.
    Version(u8),
}

/// An opened datagram.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Opened<'a> {
    pub(super) header: Header,
    pub(super) payload: &'a [u8],
}

/// Opens a pool datagram: authenticated first (the frame is the same in every version), then
/// its version checked.
pub(super) fn open<'a>(key: &hmac::Key, d: &'a [u8]) -> Result<Opened<'a>, Refused> {
    let (body, tag) = d.split_at(d.len().saturating_sub(TAG));
    let (header, payload) = Header::read(body).filter(|_| tag.len() == TAG).ok_or(Refused::Malformed)?;
    hmac::verify(key, body, tag).map_err(|_| Refused::Unauthenticated)?;
    if !message::speaks(header.version) {
        return Err(Refused::Version(header.version));
    }
    Ok(Opened { header, payload })
}

/// Anti-replay, per sender (as IPsec's): its generation, and the window of its counters.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    gen: u64,
    counters: snic_core::replay::Window,
}

impl Window {
    /// True if `(gen, counter)` is new: a newer generation (a restart), or a counter the
    /// window admits.
    fn accept(&mut self, gen: u64, counter: u64) -> bool {
        if gen != self.gen {
            if gen < self.gen {
                return false;
            }
            *self = Window { gen, counters: snic_core::replay::Window::starting_at(counter) };
            return true;
        }
        self.counters.admit(counter)
    }
}

/// What `snic status` shows of the pool.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PoolSnap {
    /// This node's pool address.
    pub me: String,
    /// Its generation (a restart takes a newer one).
    pub generation: u64,
    /// Members up, with their last load report.
    pub members: Vec<MemberSnap>,
    /// Datagrams received and sent.
    pub datagrams_in: u64,
    /// Sent.
    pub datagrams_out: u64,
    /// Dropped: not pool datagrams.
    pub refused_malformed: u64,
    /// Dropped: not authenticated by the pool's secret (not from a member).
    pub refused_unauthenticated: u64,
    /// Dropped: seen before (a replayed datagram).
    pub refused_replayed: u64,
    /// Dropped: from a member, in a version this node does not speak.
    pub refused_version: u64,
    /// Load reports that could not be decoded, or membership messages the protocol refused.
    pub refused_invalid: u64,
    /// Member changes seen: (when, ms since start; `up` or `down`; address).
    pub events: Vec<(u64, &'static str, String)>,
    /// Remote launches: asked of peers, hosted for peers, refused to peers.
    pub launches_asked: u64,
    /// Hosted for peers.
    pub launches_hosted: u64,
    /// Refused to peers (no room, a bad request).
    pub launches_refused: u64,
}

/// One member as this node sees it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MemberSnap {
    /// Its pool address.
    pub addr: String,
    /// Age of its last load report, ms (none yet: null).
    pub report_age_ms: Option<u64>,
    /// Its free regions.
    pub free_regions: Option<u16>,
    /// Its packet-store memory not in use, MiB.
    pub mem_free_mib: Option<u32>,
    /// Its port bandwidth not in use, Gbit/s.
    pub port_spare_gbps: Option<f32>,
    /// Hops from this node (from `pool.links`; null: the links do not reach it).
    pub hops: Option<u32>,
    /// The chains it runs with spare capacity: (key, spare in instances' worth).
    pub chains: Vec<(u64, f32)>,
    /// The pool protocol's version this node speaks to it.
    pub version: u8,
}

/// Member events kept for status.
const EVENTS: usize = 64;
/// The snapshot for status is refreshed at least this often (and at every member change).
const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// What the load report is made of, beside the data plane's snapshot.
pub struct NodeFacts {
    /// Regions of the node.
    pub regions: usize,
    /// Packet-store buffers, and bytes each.
    pub store_buffers: usize,
    /// The link's speed, Gbit/s.
    pub link_gbps: f64,
}

/// The pool thread.
pub struct Pool {
    cmds: mpsc::Sender<PoolCmd>,
    /// Gives DAGs hosted here back to their home nodes, with their state.
    server: Option<super::handback::StateServer>,
    key: hmac::Key,
    data: SocketAddr,
    wake: UdpSocket,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
    /// What it publishes (after every change, and each gossip period).
    pub snapshot: Arc<Mutex<PoolSnap>>,
    /// Gossip rounds in a row in which it named this draining node's flows to every member (0
    /// when it has none to name).
    pin_rounds: Arc<AtomicU64>,
    /// The address it bound.
    pub addr: SocketAddr,
    /// This node's generation.
    gen: u64,
}

impl Pool {
    /// Binds `cfg.listen`, reads the secret and starts the thread.
    pub fn start(cfg: &PoolConfig, facts: NodeFacts, dp: Arc<Mutex<Snapshot>>, link: DpLink, data: SocketAddr) -> anyhow::Result<Pool> {
        let secret = super::config::read_pool_secret(cfg)?;
        let key = hmac::Key::new(hmac::HMAC_SHA256, &secret);
        let (sock, listener) = super::handback::bind_pool(cfg.listen)?;
        let addr = sock.local_addr()?;
        // A generation newer than any earlier run's: the wall clock's milliseconds.
        let gen = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_millis() as u64).max(1);
        let seed = gen ^ u64::from(addr.port()) << 48;
        let membership = Membership::new(MemberId { addr, gen }, &cfg.membership, seed);
        let stats = PoolSnap { me: addr.to_string(), generation: gen, ..Default::default() };
        let snapshot = Arc::new(Mutex::new(stats.clone()));
        let stop = Arc::new(AtomicBool::new(false));
        let server = super::handback::StateServer::start(listener, key.clone(), link.clone())?;
        let (cmds, cmd_rx) = mpsc::channel();
        let wake = sock.try_clone()?;
        let pin_rounds = Arc::new(AtomicU64::new(0));
        let mut t = Thread {
            pin_rounds: pin_rounds.clone(),
            cmds: cmd_rx,
            link,
            data,
            pending: std::collections::HashMap::new(),
            next_id: 0,
            partners: std::collections::HashMap::new(),
            heard: Incarnations::new(),
            versions: Versions::new(),
            refused_versions: std::collections::BTreeSet::new(),
            sock,
            key: key.clone(),
            membership,
            hops: cfg.hops.iter().map(|(a, h)| (*a, (*h).min(u8::MAX as u32) as u8)).collect(),
            slot: cfg.slots.map(|s| s.slot),
            gossip: cfg.gossip_period,
            seeds: cfg.seeds.clone(),
            start: std::time::Instant::now(),
            gen,
            seq: 0,
            facts,
            dp,
            prev_tx: None,
            snap: snapshot.clone(),
            stats,
            buf: Vec::with_capacity(MAX_DATAGRAM),
            sent: 0,
            published: std::time::Instant::now(),
            windows: std::collections::HashMap::new(),
            stop: stop.clone(),
        };
        let join = std::thread::Builder::new().name("snic-pool".into()).spawn(move || t.run())?;
        tracing::info!(pool = %addr, seeds = ?cfg.seeds, generation = gen, "pool: joining");
        Ok(Pool { cmds, server: Some(server), key, data, wake, stop, join: Some(join), snapshot, pin_rounds, addr, gen })
    }

    /// A handle for the API.
    pub fn link(&self) -> anyhow::Result<PoolLink> {
        Ok(PoolLink {
            cmds: self.cmds.clone(),
            wake: self.wake.try_clone()?,
            addr: self.addr,
            key: self.key.clone(),
            data: self.data,
            gen: self.gen,
        })
    }

    /// Gossip rounds in a row in which this draining node's flows were named to every member.
    pub fn pin_rounds(&self) -> u64 {
        self.pin_rounds.load(Ordering::Relaxed)
    }

    /// What it knows now.
    pub fn snap(&self) -> PoolSnap {
        self.snapshot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Leaves the pool (the members see this node down at once) and stops the thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}

struct Thread {
    /// See [`Pool::pin_rounds`].
    pin_rounds: Arc<AtomicU64>,
    cmds: mpsc::Receiver<PoolCmd>,
    /// The data plane (to host what peers ask).
    link: DpLink,
    /// This node's data address.
    data: SocketAddr,
    /// Remote launches asked, by id: when, and who waits.
    pending: std::collections::HashMap<u64, (std::time::Instant, mpsc::Sender<Hosting>)>,
    next_id: u64,
    /// Members that host DAGs for this node, or this node for them: pool address → data
    /// address (told to the data plane when the member goes down).
    partners: std::collections::HashMap<SocketAddr, SocketAddr>,
    /// The generation each member was last heard with: the pool's rule that tells a restarted
    /// member from the one this node knew (`snic_core::pool::Incarnations`).
    heard: Incarnations,
    /// The version each member is spoken to in.
    versions: Versions,
    /// (Member, version) refusals already logged (bounded: each is logged once).
    refused_versions: std::collections::BTreeSet<(SocketAddr, u8)>,
    sock: UdpSocket,
    key: hmac::Key,
    membership: Membership,
    /// Its hop distance to each peer the links reach (reported).
    hops: Vec<(SocketAddr, u8)>,
    /// Its state slot, behind a switch (reported).
    slot: Option<u16>,
    gossip: Duration,
    seeds: Vec<SocketAddr>,
    start: std::time::Instant,
    gen: u64,
    seq: u64,
    facts: NodeFacts,
    dp: Arc<Mutex<Snapshot>>,
    /// Bytes transmitted and when, at the last report (for the port's spare bandwidth).
    prev_tx: Option<(u64, std::time::Instant)>,
    snap: Arc<Mutex<PoolSnap>>,
    stats: PoolSnap,
    buf: Vec<u8>,
    /// Datagrams sealed so far (their counter).
    sent: u64,
    /// When the snapshot was last published.
    published: std::time::Instant,
    /// Per sender, what it has sent that was seen (authenticated senders only: pool members).
    windows: std::collections::HashMap<SocketAddr, Window>,
    stop: Arc<AtomicBool>,
}

impl Thread {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.start.elapsed().as_nanos() as u64)
    }

    fn run(&mut self) {
        let now = self.now();
        let seeds = std::mem::take(&mut self.seeds);
        self.membership.join(now, &seeds);
        self.flush();
        let mut next_report = now;
        let mut datagram = vec![0u8; MAX_DATAGRAM];
        // (At most 50 ms between checks of `stop`.)
        while !self.stop.load(Ordering::Relaxed) {
            let now = self.now();
            let due = self.membership.poll_timeout().map_or(next_report, |t| t.min(next_report));
            let wait = due.saturating_since(now).clamp(Duration::from_millis(1), Duration::from_millis(50));
            let _ = self.sock.set_read_timeout(Some(wait));
            match self.sock.recv_from(&mut datagram) {
                // An empty datagram from itself: a command is waiting (`PoolLink`).
                Ok((0, from)) if from == self.own_addr() => {}
                Ok((n, from)) => self.datagram(&datagram[..n.min(MAX_DATAGRAM)], from),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => tracing::warn!(error = %e, "pool: receiving"),
            }
            while let Ok(cmd) = self.cmds.try_recv() {
                match cmd {
                    PoolCmd::Place(peer, req, reply) => self.ask(peer, *req, reply),
                    PoolCmd::Unhost(peer, hosted) => {
                        if self.is_member(peer) {
                            self.send(peer, &Message::Unhost(hosted));
                        }
                    }
                }
            }
            self.pending.retain(|_, (at, reply)| {
                let late = at.elapsed() > LAUNCH_TIMEOUT;
                if late {
                    let _ = reply.send(Err("the peer did not answer".into()));
                    self.link.wake();
                }
                !late
            });
            let now = self.now();
            self.membership.handle_timeout(now);
            if now >= next_report {
                self.report();
                self.pins();
                next_report = now + self.gossip;
            }
            self.flush();
        }
        self.membership.leave(self.now());
        self.flush();
        tracing::info!("pool: left");
    }

    /// True if `addr` is a member of the pool (membership says who is).
    fn is_member(&self, addr: SocketAddr) -> bool {
        self.membership.members().any(|m| m == addr)
    }

    /// This thread's own pool address.
    fn own_addr(&self) -> SocketAddr {
        self.membership.me().addr
    }

    fn datagram(&mut self, d: &[u8], from: SocketAddr) {
        self.stats.datagrams_in += 1;
        let (h, payload) = match open(&self.key, d) {
            Ok(o) if self.windows.entry(from).or_default().accept(o.header.gen, o.header.counter) => (o.header, o.payload),
            Ok(_) => return self.stats.refused_replayed += 1,
            Err(Refused::Malformed) => return self.stats.refused_malformed += 1,
            Err(Refused::Unauthenticated) => return self.stats.refused_unauthenticated += 1,
            Err(Refused::Version(v)) => return self.refused_version(from, v),
        };
        // (An older generation never gets here: the replay window refused it above.)
        if self.heard.observe(from, h.gen) == Heard::Restarted {
            self.restarted(from);
        }
        self.versions.heard(from, h.gen, h.version);
        let m = match Message::decode(h.version, h.kind, payload) {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(from = %from, error = %e, "pool: refused a message");
                return self.stats.refused_invalid += 1;
            }
        };
        let now = self.now();
        let member = self.is_member(from);
        let ok = match m {
            Message::Membership(bytes) => self.membership.handle_data(now, &bytes).is_ok(),
            // Everything else only from a member: membership says who is in the pool.
            _ if !member => false,
            Message::Load(mut r) => {
                r.data = r.data.map(|d| reachable(d, from.ip()));
                self.link.pool_report(from, r);
                true
            }
            Message::Host(m) => {
                self.host(m, from);
                true
            }
            Message::Hosted(m) => {
                if let Some((_, reply)) = self.pending.remove(&m.id) {
                    let result = m.result.map(|(data, r)| (reachable(data, from.ip()), r, h.gen));
                    if let Ok((data, _, _)) = result {
                        self.partners.insert(from, data);
                    }
                    let _ = reply.send(result);
                    self.link.wake();
                }
                true
            }
            Message::Pins(p) => {
                self.link.pool_pins(reachable(p.data, from.ip()), p.flows);
                true
            }
            Message::Unhost(hosted) => {
                if let Some(&home) = self.partners.get(&from) {
                    self.link.unhost(home, hosted);
                }
                true
            }
            // (Taken above: the version it came in is now the one spoken to the sender.)
            Message::Hello => true,
        };
        if !ok {
            self.stats.refused_invalid += 1;
        }
    }

    /// A member sent a version this node does not speak: counted, and logged once per member
    /// and version (the operator's cue that a rolling upgrade skipped a version).
    fn refused_version(&mut self, from: SocketAddr, v: u8) {
        self.stats.refused_version += 1;
        if self.refused_versions.len() < 64 && self.refused_versions.insert((from, v)) {
            tracing::warn!(member = %from, error = %CodecError::Version(v), "pool: refused a member's datagrams: upgrade nodes one version at a time");
        }
    }

    /// Asks `peer` to host a DAG; `reply` gets the answer.
    fn ask(&mut self, peer: SocketAddr, request: HostRequest, reply: mpsc::Sender<Hosting>) {
        if !self.is_member(peer) {
            self.answer(&reply, Err(format!("{peer} is not a member of the pool")));
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.answer(&reply, Err("too many remote launches under way".into()));
            return;
        }
        self.next_id += 1;
        let id = self.next_id;
        let m = Message::Host(HostAsk { id, data: self.data, request });
        let version = self.versions.to(peer);
        let bytes = match m.encode(version) {
            Ok(b) if message::HEADER + b.len() + TAG <= MAX_DATAGRAM => b,
            Ok(b) => return self.answer(&reply, Err(format!("the request is {} bytes, more than a pool datagram holds", b.len()))),
            Err(e) => return self.answer(&reply, Err(format!("the request cannot be encoded: {e}"))),
        };
        self.stats.launches_asked += 1;
        tracing::info!(peer = %peer, id, "pool: asking a peer to host a DAG");
        self.pending.insert(id, (std::time::Instant::now(), reply));
        self.send_payload(peer, version, m.kind(), &bytes);
    }

    /// Answers a remote launch asked by the data plane, and wakes it to take the answer.
    fn answer(&self, reply: &mpsc::Sender<Hosting>, answer: Hosting) {
        let _ = reply.send(answer);
        self.link.wake();
    }

    /// A member asks this node to host a DAG: the data plane launches it or says why not.
    fn host(&mut self, m: HostAsk<HostRequest>, from: SocketAddr) {
        let home = reachable(m.data, from.ip());
        let (tenant, dag) = (m.request.tenant.clone(), m.request.dag.clone());
        let result = self.link.host(home, m.request).map(|r| (self.data, r));
        match &result {
            Ok(_) => {
                self.stats.launches_hosted += 1;
                self.partners.insert(from, home);
            }
            Err(e) => {
                self.stats.launches_refused += 1;
                tracing::warn!(home = %home, tenant, dag, reason = e.as_str(), "pool: refused to host a DAG for a peer");
            }
        }
        self.send(from, &Message::Hosted(HostedAnswer { id: m.id, result }));
    }

    /// Member `a` restarted (its datagrams carry a newer generation), however soon: maybe
    /// before the membership protocol saw it down, maybe never seen down at all. What its
    /// earlier incarnation ran for this node, the numbers it gave, and what this node hosted for
    /// it, are gone: handled as its going down and coming back.
    fn restarted(&mut self, a: SocketAddr) {
        tracing::warn!(member = %a, "pool: member restarted (a newer generation): what it ran and hosted for this node is gone, as if it had gone down");
        if let Some(data) = self.partners.remove(&a) {
            self.link.peer_down(data);
        }
        for e in [MemberEvent::Down(a), MemberEvent::Up(a)] {
            self.link.member(e);
        }
        if self.stats.events.len() == EVENTS {
            self.stats.events.remove(0);
        }
        self.stats.events.push((self.start.elapsed().as_millis() as u64, "restarted", a.to_string()));
    }

    /// Sends what the membership machine asks for, takes its events, publishes.
    fn flush(&mut self) {
        while let Some((to, bytes)) = self.membership.poll_transmit() {
            self.send(to, &Message::Membership(bytes));
        }
        let mut changed = false;
        while let Some(e) = self.membership.poll_event() {
            changed = true;
            let at = self.start.elapsed().as_millis() as u64;
            let (what, addr) = match e {
                MemberEvent::Up(a) => {
                    tracing::info!(member = %a, "pool: member up");
                    ("up", a.to_string())
                }
                MemberEvent::Down(a) => {
                    tracing::warn!(member = %a, "pool: member down");
                    if let Some(data) = self.partners.remove(&a) {
                        self.link.peer_down(data);
                    }
                    self.versions.forget(a);
                    ("down", a.to_string())
                }
                MemberEvent::Rejoined => {
                    tracing::warn!("pool: this node was declared down and rejoined");
                    ("rejoined", self.membership.me().addr.to_string())
                }
            };
            if self.stats.events.len() == EVENTS {
                self.stats.events.remove(0);
            }
            self.stats.events.push((at, what, addr));
            self.link.member(e);
        }
        // Member changes at once; counters and reports at most every 50 ms (a flood of
        // datagrams must not turn into a flood of snapshots).
        if changed || self.published.elapsed() >= PUBLISH_EVERY {
            self.publish();
            self.published = std::time::Instant::now();
        }
    }

    /// Sends `m` to `to` in the version spoken to it.
    fn send(&mut self, to: SocketAddr, m: &Message) {
        self.send_in(to, self.versions.to(to), m);
    }

    /// Sends `m` to `to` in `version`.
    fn send_in(&mut self, to: SocketAddr, version: u8, m: &Message) {
        match m.encode(version) {
            Ok(p) => self.send_payload(to, version, m.kind(), &p),
            Err(e) => tracing::warn!(to = %to, error = %e, "pool: a message not sent"),
        }
    }

    fn send_payload(&mut self, to: SocketAddr, version: u8, kind: u8, payload: &[u8]) {
        let mut buf = std::mem::take(&mut self.buf);
        self.sent += 1;
        seal(&self.key, Header { version, kind, gen: self.gen, counter: self.sent }, payload, &mut buf);
        match self.sock.send_to(&buf, to) {
            Ok(_) => self.stats.datagrams_out += 1,
            Err(e) => tracing::debug!(to = %to, error = %e, "pool: sending"),
        }
        self.buf = buf;
    }

    /// While this node drains: the flows whose state it holds, to every member (again every
    /// gossip period: a lost datagram is made up for, and a peer forgets flows no longer named).
    fn pins(&mut self) {
        let flows = {
            let snap = self.dp.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if snap.pins.is_empty() {
                self.pin_rounds.store(0, Ordering::Relaxed);
                return;
            }
            snap.pins.clone()
        };
        let members: Vec<SocketAddr> = self.membership.members().collect();
        for chunk in flows.chunks(PINS_PER_DATAGRAM) {
            let pins = Message::Pins(Pins { data: self.data, flows: chunk.to_vec() });
            for &m in &members {
                self.send(m, &pins);
            }
        }
        self.pin_rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// This node's load, to every member.
    fn report(&mut self) {
        // What the report needs, read under the lock (the snapshot itself is not copied).
        let (busy, held, tx, chains) = {
            let snap = self.dp.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let chains: Vec<ChainSpare> = snap
                .chains
                .iter()
                // Each running chain's spare capacity: its instances less its load.
                .filter_map(|c| ChainSpare::of(ChainKey(c.key), c.instances, c.load))
                .collect();
            (
                snap.regions.iter().filter(|r| r.state != "victim").count(),
                snap.tenants.iter().map(|t| t.store_buffers as u64).sum::<u64>(),
                snap.tenants.iter().map(|t| t.tx_bytes).sum::<u64>(),
                chains,
            )
        };
        let free_bytes = (self.facts.store_buffers as u64).saturating_sub(held) * snic_dataplane::store::BUF_SIZE as u64;
        let now = std::time::Instant::now();
        let used_gbps = match self.prev_tx.replace((tx, now)) {
            Some((b, t)) if now > t => tx.saturating_sub(b) as f64 * 8.0 / now.duration_since(t).as_secs_f64() / 1e9,
            _ => 0.0,
        };
        self.seq += 1;
        let r = LoadReport {
            gen: self.gen,
            seq: self.seq,
            free_regions: self.facts.regions.saturating_sub(busy).min(u16::MAX as usize) as u16,
            chains,
            mem_free_mib: (free_bytes >> 20) as u32,
            port_spare_gbps: (self.facts.link_gbps - used_gbps).max(0.0) as f32,
            hops: self.hops.clone(),
            data: Some(self.data),
            slot: self.slot,
        };
        let r = Message::Load(r);
        let members: Vec<SocketAddr> = self.membership.members().collect();
        for m in members {
            self.send(m, &r);
            // A member not heard in the newest version is greeted in it: if it speaks it, it
            // answers in it, and is spoken to in it from then on.
            if self.versions.greet(m) {
                self.send_in(m, message::NEWEST, &Message::Hello);
            }
        }
    }

    fn publish(&mut self) {
        let mut s = self.stats.clone();
        s.generation = self.membership.me().gen;
        // The members' reports as the data plane's pool agent had them when it last published
        // (their age then, and since).
        let peers: std::collections::BTreeMap<SocketAddr, super::worker::PoolPeerSnap> = {
            let snap = self.dp.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let since = snap.published.map_or(Duration::ZERO, |t| t.elapsed());
            snap.pool_peers
                .iter()
                .map(|p| (p.addr, super::worker::PoolPeerSnap { report_age: p.report_age.map(|a| a + since), ..p.clone() }))
                .collect()
        };
        s.members = self
            .membership
            .members()
            .map(|a| {
                let p = peers.get(&a);
                let r = p.and_then(|p| p.report.as_ref());
                MemberSnap {
                    addr: a.to_string(),
                    report_age_ms: p.and_then(|p| p.report_age).map(|d| d.as_millis() as u64),
                    free_regions: r.map(|r| r.free_regions),
                    mem_free_mib: r.map(|r| r.mem_free_mib),
                    port_spare_gbps: r.map(|r| r.port_spare_gbps),
                    hops: p.map(|p| p.hops).filter(|&h| h != u32::MAX),
                    chains: r.map(|r| r.chains.iter().map(|c| (c.key.0, c.spare)).collect()).unwrap_or_default(),
                    version: self.versions.to(a),
                }
            })
            .collect();
        *self.snap.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_datagram_opens_only_under_its_own_secret_and_intact() {
        let (k, other) = (hmac::Key::new(hmac::HMAC_SHA256, b"0123456789abcdef"), hmac::Key::new(hmac::HMAC_SHA256, b"fedcba9876543210"));
        let mut d = Vec::new();
        let h = Header { version: message::NEWEST, kind: message::kind::LOAD, gen: 7, counter: 3 };
        seal(&k, h, b"hello", &mut d);
        assert_eq!(open(&k, &d), Ok(Opened { header: h, payload: &b"hello"[..] }));
        assert_eq!(open(&other, &d), Err(Refused::Unauthenticated));
        for i in [3, 4, 6, 14, message::HEADER] {
            let mut bent = d.clone();
            bent[i] ^= 1;
            assert_eq!(open(&k, &bent), Err(Refused::Unauthenticated), "byte {i} changed");
        }
        assert_eq!(open(&k, b"SNP"), Err(Refused::Malformed));
        assert_eq!(open(&k, &[0u8; 60]), Err(Refused::Malformed));
        // A member's datagram in a version this node does not speak: authenticated, then refused
        // for its version (never read).
        for version in [message::OLDEST - 1, message::NEWEST + 1] {
            seal(&k, Header { version, ..h }, b"hello", &mut d);
            assert_eq!(open(&k, &d), Err(Refused::Version(version)));
            assert_eq!(open(&other, &d), Err(Refused::Unauthenticated), "a stranger learns nothing of versions");
        }
    }

    #[test]
    fn a_replayed_datagram_is_refused_and_reordering_within_the_window_is_not() {
        let mut w = Window::default();
        assert!(w.accept(5, 10));
        assert!(!w.accept(5, 10), "the same datagram again");
        assert!(w.accept(5, 12) && w.accept(5, 11), "late by one, within the window");
        assert!(!w.accept(5, 11));
        assert!(w.accept(5, 200));
        assert!(!w.accept(5, 100), "older than the window");
        assert!(!w.accept(4, 1_000), "an older generation");
        assert!(w.accept(6, 1), "a restarted sender starts again");
        assert!(!w.accept(5, 201));
    }
}
