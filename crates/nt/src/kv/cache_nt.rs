//! The `kv_cache` NT: a tenant's cache in front of its memcached server, on the path between
//! its clients and the server (paper §6.1, "Disaggregated Key-Value Store": the sNIC caches
//! recently read and written pairs so reads need not reach the memory node).
//!
//! It watches the memcached UDP datagrams of its tenant's packets to and from `backend`:
//! - a `get` whose keys are all cached is answered here: the request becomes the reply's first
//!   datagram in place (addresses and ports swapped, the `VALUE`s written where the request
//!   was) and goes back to the client; an answer longer than one datagram (1,400 bytes, as
//!   memcached cuts them) sends the rest from the region's outbox. The server never sees it;
//! - any other `get` goes on to the server, and its answer fills the cache on the way back
//!   (read back together from several datagrams, or from memcached's one message per key),
//!   unless a write to one of its keys passed since the `get` did;
//! - a `set`/`add`/`replace` forgets the key at once and stores the new value invisible; the
//!   server's `STORED` shows it (write-through). `delete`, `touch`, `incr`, … forget the key;
//!   `flush_all` forgets everything.
//!
//! Why a client never reads a value older than one it was acknowledged: every write passes the
//! NT before the server, and from then on the key is absent until a newer acknowledged value or
//! a read the server answered after that write; a read answered before it does not fill (the
//! write counters below), and a value is kept at most `max_age_ms`.
//!

use super::cache::{key_hash, Cache, Policy, Pos};
use super::proto::{self, Frame, Request, Response, FRAME_LEN, MAX_DATAGRAM};
use super::udp::{self, turn_around, Udp4};
use crate::{bump, Ctx, Nt, Pkt, Verdict};
use serde::{Deserialize, Serialize};
use snic_wire::layout::parse_inner;
use std::net::{IpAddr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Configuration of a `kv_cache` NT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvCacheConfig {
    /// The memcached server (its UDP address) the cache stands in front of.
    pub backend: SocketAddrV4,
    /// Bytes of keys and values kept (default 16 MiB).
    #[serde(default = "default_bytes")]
    pub bytes: usize,
    /// Eviction policy (`clock`, the default, or `fifo`).
    #[serde(default)]
    pub policy: Policy,
    /// The longest a value is kept, ms (default 10 s): values the server expires or evicts on
    /// its own are served at most this long.
    #[serde(default = "default_max_age")]
    pub max_age_ms: u64,
}

fn default_bytes() -> usize {
    16 << 20
}
fn default_max_age() -> u64 {
    10_000
}

/// Counts of a [`KvCache`], shared with the control plane.
#[derive(Debug, Default)]
pub struct KvCacheStats {
    /// `get` keys answered from the cache.
    pub hits: AtomicU64,
    /// `get` keys that went to the server.
    pub misses: AtomicU64,
    /// Values stored from the server's answers to reads.
    pub fills: AtomicU64,
    /// Writes the server acknowledged and the cache now shows.
    pub writes_shown: AtomicU64,
    /// Keys forgotten because a request changed them.
    pub invalidations: AtomicU64,
    /// Requests to the server that did not parse (passed on: the server answers the error).
    pub malformed: AtomicU64,
}

impl crate::NtCounters for KvCacheStats {
    fn each(&self, f: &mut dyn FnMut(&'static str, u64, bool)) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        f("hits", l(&self.hits), false);
        f("misses", l(&self.misses), false);
        f("fills", l(&self.fills), false);
        f("writes_shown", l(&self.writes_shown), false);
        f("invalidations", l(&self.invalidations), false);
        f("malformed", l(&self.malformed), false);
    }
}

/// A request on its way to the server, remembered until its answer comes back.
#[derive(Debug, Clone, Copy, Default)]
struct Pending {
    /// Client address, port and request id, hashed; 0: empty.
    tag: u64,
    at_ns: u64,
    /// The write counter when a `get` passed; for a write, its own number.
    epoch: u64,
    /// A write's key hash, and its invisible record (a `set`, `add` or `replace`).
    write: Option<(u64, Option<Pos>)>,
}

/// The last write to the keys of one counter slot.
#[derive(Debug, Clone, Copy, Default)]
struct Write {
    /// Its number.
    epoch: u64,
    /// The number its answer passed at (`NOT_ANSWERED` before): a read that passed before
    /// that may have been answered before or after the write, so its answer does not fill.
    answered: u64,
    /// Until when it may still be on its way to the server if its answer never passes (lost,
    /// or its pending slot taken by another request).
    in_flight_until: u64,
}

const NOT_ANSWERED: u64 = u64::MAX;

/// Requests remembered at once (direct-mapped: a newer one may push an older one out, whose
/// answer then neither fills nor shows anything — safe, only a lost hit).
const PENDING: usize = 4096;
/// Write counters (direct-mapped by key hash: two keys sharing one only make fills rarer).
const WRITES: usize = 1 << 14;
/// An answer later than this after its request is not matched to it.
const PENDING_NS: u64 = 1_000_000_000;
/// memcached's limit between relative and absolute expiry times.
const RELATIVE_EXPTIME: i64 = 60 * 60 * 24 * 30;
/// The longest answer the NT serves or reads back together, bytes of text.
const ANSWER_MAX: usize = 64 * 1024;
/// Text bytes in one datagram of a long answer.
const CHUNK: usize = MAX_DATAGRAM - FRAME_LEN;
/// Datagrams of one answer at most.
const MAX_PARTS: usize = ANSWER_MAX.div_ceil(CHUNK);
/// Answers in several datagrams put back together at once.
const REASM: usize = 4;

/// Datagrams an answer of `len` bytes of text takes.
fn datagrams(len: usize) -> usize {
    len.div_ceil(CHUNK).max(1)
}

/// Answers in several datagrams being put back together, a few at once (a newer one takes the
/// place of the oldest; the one it pushed out then fills nothing: safe, a lost hit).
struct Reasm {
    slots: Vec<ReasmSlot>,
    /// The last whole message.
    out: Vec<u8>,
}

struct ReasmSlot {
    tag: u64,
    total: u16,
    got: u64,
    at_ns: u64,
    lens: [u16; MAX_PARTS],
    data: Box<[u8]>,
}

impl Reasm {
    fn new() -> Reasm {
        let slot = || ReasmSlot {
            tag: 0,
            total: 0,
            got: 0,
            at_ns: 0,
            lens: [0; MAX_PARTS],
            data: vec![0u8; MAX_PARTS * MAX_DATAGRAM].into_boxed_slice(),
        };
        Reasm { slots: (0..REASM).map(|_| slot()).collect(), out: Vec::with_capacity(MAX_PARTS * MAX_DATAGRAM) }
    }

    /// Takes part `f` (text `text`) of the message of `tag`; true when the message is whole,
    /// then in `out`.
    fn take(&mut self, tag: u64, f: Frame, text: &[u8], now: u64) -> bool {
        if f.total as usize > MAX_PARTS || text.len() > MAX_DATAGRAM {
            return false;
        }
        let i = match self.slots.iter().position(|s| s.tag == tag && s.total == f.total) {
            Some(i) => i,
            None => {
                let i = (0..REASM).min_by_key(|&i| self.slots[i].at_ns).expect("REASM > 0");
                let s = &mut self.slots[i];
                (s.tag, s.total, s.got, s.at_ns) = (tag, f.total, 0, now);
                i
            }
        };
        let s = &mut self.slots[i];
        let k = f.seq as usize;
        s.data[k * MAX_DATAGRAM..k * MAX_DATAGRAM + text.len()].copy_from_slice(text);
        s.lens[k] = text.len() as u16;
        s.got |= 1 << k;
        if s.got.count_ones() != s.total as u32 {
            return false;
        }
        self.out.clear();
        for k in 0..s.total as usize {
            self.out.extend_from_slice(&s.data[k * MAX_DATAGRAM..k * MAX_DATAGRAM + s.lens[k] as usize]);
        }
        s.tag = 0;
        true
    }
}

/// See the module docs.
pub struct KvCache {
    backend: SocketAddrV4,
    cache: Cache,
    max_age_ns: u64,
    pending: Box<[Pending]>,
    writes: Box<[Write]>,
    epoch: u64,
    flushed_at: u64,
    flush_in_flight_until: u64,
    reasm: Reasm,
    /// An answer being written, before it is cut into datagrams.
    answer: Box<[u8]>,
    stats: Arc<KvCacheStats>,
}

impl std::fmt::Debug for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvCache").field("backend", &self.backend).field("cache", &self.cache).finish()
    }
}

fn tag(client: IpAddr, port: u16, id: u16) -> u64 {
    let ip = match client {
        IpAddr::V4(a) => u32::from(a) as u64,
        IpAddr::V6(a) => u128::from(a) as u64,
    };
    // Never 0 (the empty tag).
    (ip << 32 | (port as u64) << 16 | id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
}

impl KvCache {
    /// A cache NT.
    pub fn new(c: &KvCacheConfig) -> KvCache {
        KvCache {
            backend: c.backend,
            cache: Cache::new(c.bytes, c.policy),
            max_age_ns: c.max_age_ms.saturating_mul(1_000_000),
            pending: vec![Pending::default(); PENDING].into_boxed_slice(),
            writes: vec![Write::default(); WRITES].into_boxed_slice(),
            epoch: 0,
            flushed_at: 0,
            flush_in_flight_until: 0,
            reasm: Reasm::new(),
            answer: vec![0u8; ANSWER_MAX].into_boxed_slice(),
            stats: Arc::default(),
        }
    }

    /// The memory an NT of configuration `c` holds, bytes: its ring, index (a third of the
    /// ring), waiting requests, write counters, answers being put together and written.
    pub fn memory(c: &KvCacheConfig) -> u64 {
        let ring = c.bytes.max(4096) as u64;
        ring + ring / 3
            + (PENDING * std::mem::size_of::<Pending>()) as u64
            + (WRITES * std::mem::size_of::<Write>()) as u64
            + (REASM * MAX_PARTS * MAX_DATAGRAM) as u64
            + ANSWER_MAX as u64
    }

    /// A handle on the counts.
    pub fn stats(&self) -> Arc<KvCacheStats> {
        self.stats.clone()
    }

    fn slot(t: u64) -> usize {
        (t >> 52) as usize % PENDING
    }

    fn write_slot(hash: u64) -> usize {
        (hash >> 40) as usize % WRITES
    }

    /// A request that changes `key` passed at `now`: the key is forgotten and the write
    /// numbered; its answer, if one comes (`t`), ends its flight.
    fn written(&mut self, key: &[u8], now: u64, t: Option<u64>) -> u64 {
        self.epoch += 1;
        let h = key_hash(key);
        self.writes[Self::write_slot(h)] =
            Write { epoch: self.epoch, answered: NOT_ANSWERED, in_flight_until: now.saturating_add(PENDING_NS) };
        self.cache.remove(key);
        bump(&self.stats.invalidations, 1);
        if let Some(t) = t {
            self.pending[Self::slot(t)] = Pending { tag: t, at_ns: now, epoch: self.epoch, write: Some((h, None)) };
        }
        self.epoch
    }

    /// True if an answer to a read of `key` that passed at number `epoch` (time `read_at`) may
    /// be cached: no write to it since, and none on its way then — that is, the last write
    /// before it had been answered before it passed (by the order they passed in, not their
    /// times: one batch has one time), or cannot be on its way any more.
    fn may_fill(&self, key: &[u8], epoch: u64, read_at: u64) -> bool {
        let w = self.writes[Self::write_slot(key_hash(key))];
        w.epoch.max(self.flushed_at) <= epoch
            && (w.answered <= epoch || w.in_flight_until <= read_at)
            && self.flush_in_flight_until <= read_at
    }

    /// A request from a client to the server: true if it was answered here (the packet is now
    /// the reply).
    fn request(&mut self, now: u64, client: (IpAddr, u16), dgram: &[u8], room: usize) -> Option<Reply> {
        let (f, text) = Frame::parse(dgram)?;
        if f.total != 1 {
            return None;
        }
        let req = match proto::parse_request(text) {
            Ok(r) => r,
            Err(_) => {
                bump(&self.stats.malformed, 1);
                return None;
            }
        };
        let t = tag(client.0, client.1, f.id);
        match req {
            Request::Get { keys, cas: false } => {
                let mut n = 0u64;
                let mut len = 0usize;
                let mut all = true;
                for k in proto::keys(keys) {
                    n += 1;
                    match self.cache.get(k, now) {
                        Some(h) => len += proto::values_len([(k, h.flags, h.value.len())]) - 5,
                        None => all = false,
                    }
                }
                // Served if it all fits the datagrams this batch can still send.
                if all && len + 5 <= ANSWER_MAX && datagrams(len + 5) <= 1 + room {
                    bump(&self.stats.hits, n);
                    let at = keys.as_ptr() as usize - dgram.as_ptr() as usize;
                    return Some(Reply { id: f.id, len: len + 5, keys: at..at + keys.len() });
                }
                bump(&self.stats.misses, n);
                self.pending[Self::slot(t)] = Pending { tag: t, at_ns: now, epoch: self.epoch.max(self.flushed_at), write: None };
            }
            Request::Get { cas: true, .. } | Request::Other => {}
            Request::Store { key, flags, exptime, value, noreply, .. } => {
                let epoch = self.written(key, now, (!noreply).then_some(t));
                if noreply {
                    return None;
                }
                let age = self.age(exptime)?;
                if let Some(pos) = self.cache.insert(key, flags, value, now.saturating_add(age), false) {
                    self.pending[Self::slot(t)].write = Some((key_hash(key), Some(pos)));
                    debug_assert_eq!(self.pending[Self::slot(t)].epoch, epoch);
                }
            }
            Request::Delete { key, noreply } | Request::Touch { key, noreply, .. } => {
                self.written(key, now, (!noreply).then_some(t));
            }
            Request::Mutate { keys } => {
                // One answer for several keys (`gat`) ends only the last one's flight; the
                // others end theirs after PENDING_NS.
                for k in proto::keys(keys) {
                    self.written(k, now, Some(t));
                }
            }
            Request::Flush => self.flush(now),
        }
        None
    }

    /// How long a value written with `exptime` may be kept; `None`: not at all (already
    /// expired, or an absolute time the NT does not hold against a wall clock).
    fn age(&self, exptime: i64) -> Option<u64> {
        match exptime {
            0 => Some(self.max_age_ns),
            1..=RELATIVE_EXPTIME => Some(self.max_age_ns.min(exptime as u64 * 1_000_000_000)),
            _ => None,
        }
    }

    /// An answer from the server to a client.
    fn response(&mut self, now: u64, client: (IpAddr, u16), dgram: &[u8]) {
        let Some((f, text)) = Frame::parse(dgram) else { return };
        let t = tag(client.0, client.1, f.id);
        let s = Self::slot(t);
        let p = self.pending[s];
        if p.tag != t || now.saturating_sub(p.at_ns) > PENDING_NS {
            return;
        }
        if p.write.is_none() {
            // A read's answer: one message, or the parts of one, or one message per key.
            if f.total == 1 {
                self.read_answer(now, s, text);
            } else if self.reasm.take(t, f, text, now) {
                let whole = std::mem::take(&mut self.reasm.out);
                self.read_answer(now, s, &whole);
                self.reasm.out = whole;
            }
            return;
        }
        self.pending[s] = Pending::default();
        if f.total != 1 {
            return;
        }
        if let Some((h, _)) = p.write {
            // Whatever the answer, the server has seen the write: reads that pass from now on
            // are answered after it.
            let w = &mut self.writes[Self::write_slot(h)];
            if w.epoch == p.epoch {
                self.epoch += 1;
                w.answered = self.epoch;
            }
        }
        if let (Response::Stored, Some((h, Some(pos)))) = (proto::response_kind(text), p.write) {
            if self.cache.show(h, pos) {
                bump(&self.stats.writes_shown, 1);
            }
        }
    }

    /// One whole message of the answer to the read waiting in pending slot `s`: its values
    /// fill the cache (if no write to their key passed since the read); the read stops
    /// waiting at `END`, or at the first malformed message.
    fn read_answer(&mut self, now: u64, s: usize, text: &[u8]) {
        let p = self.pending[s];
        // Only a well-formed message fills: checked whole before anything is stored.
        let checked = proto::value_blocks(text, |_| {});
        if checked != Ok(false) {
            // The answer ended (or cannot be read on): the read stops waiting.
            self.pending[s] = Pending::default();
        }
        if checked.is_err() {
            return;
        }
        let mut fills = 0;
        let _ = proto::value_blocks(text, |v| {
            if self.may_fill(v.key, p.epoch, p.at_ns)
                && self.cache.insert(v.key, v.flags, v.data, now.saturating_add(self.max_age_ns), true).is_some()
            {
                fills += 1;
            }
        });
        bump(&self.stats.fills, fills);
    }

    /// Writes the answer to a `get` of `keys`, all cached, into `self.answer`; its length.
    fn answer_text(&mut self, now: u64, keys: &[u8]) -> Option<usize> {
        let mut at = 0;
        for k in proto::keys(keys) {
            let h = self.cache.get(k, now)?;
            let b = &mut self.answer;
            at += proto::emit_value_line(&mut b[at..], k, h.flags, h.value.len())?;
            b.get_mut(at..at + h.value.len())?.copy_from_slice(h.value);
            at += h.value.len();
            b.get_mut(at..at + 2)?.copy_from_slice(b"\r\n");
            at += 2;
        }
        self.answer.get_mut(at..at + 5)?.copy_from_slice(b"END\r\n");
        Some(at + 5)
    }
}

impl KvCache {
    /// A packet the data plane could not parse to its ports: if it is the first fragment of a
    /// request to the server (a `set` too large for one IP packet), what its command line
    /// names is written.
    fn fragment(&mut self, now: u64, pkt: &Pkt<'_>) {
        let Some(d) = pkt.buf.get(pkt.meta.off as usize..pkt.meta.off as usize + pkt.meta.len as usize) else { return };
        let Some(f) = udp::fragment(d).filter(|f| f.first && f.more && f.dst == *self.backend.ip()) else { return };
        let Some(h) = d.get(f.u.l4..f.u.pay) else { return };
        let (sport, dport) = (u16::from_be_bytes([h[0], h[1]]), u16::from_be_bytes([h[2], h[3]]));
        if dport != self.backend.port() {
            return;
        }
        let Some((fr, text)) = d.get(f.u.pay..f.u.end).and_then(Frame::parse) else { return };
        let src = f.src;
        let t = tag(IpAddr::V4(src), sport, fr.id);
        match proto::changes(text) {
            proto::Changes::Nothing => {}
            proto::Changes::Keys(keys) => {
                for k in proto::keys(keys) {
                    self.written(k, now, Some(t));
                }
            }
            proto::Changes::All => self.flush(now),
        }
    }

    fn flush(&mut self, now: u64) {
        self.epoch += 1;
        self.flushed_at = self.epoch;
        self.flush_in_flight_until = now.saturating_add(PENDING_NS);
        self.cache.clear();
    }
}

/// A `get` answered from the cache: its id, the answer's length (frame header excluded) and
/// where the request's keys are in its datagram.
struct Reply {
    id: u16,
    len: usize,
    keys: std::ops::Range<usize>,
}

impl Nt for KvCache {
    fn kind(&self) -> &'static str {
        "kv_cache"
    }

    fn counters(&self) -> Option<Arc<dyn crate::NtCounters>> {
        Some(self.stats.clone())
    }

    fn process(&mut self, cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        let now = cx.now.as_nanos();
        if pkt.meta.inner.is_none() {
            self.fragment(now, pkt);
            return Verdict::Continue;
        }
        let Some(u) = Udp4::of(pkt) else { return Verdict::Continue };
        let k = pkt.meta.inner.expect("Udp4::of checked").key;
        let backend = (IpAddr::V4(*self.backend.ip()), self.backend.port());
        if (k.src, k.src_port) == backend {
            self.response(now, (k.dst, k.dst_port), &pkt.buf[u.pay..u.end]);
            return Verdict::Continue;
        }
        if (k.dst, k.dst_port) != backend {
            return Verdict::Continue;
        }
        let room = cx.out.map_or(0, |o| o.room());
        let Some(r) = self.request(now, (k.src, k.src_port), &pkt.buf[u.pay..u.end], room) else { return Verdict::Continue };
        let keys = &pkt.buf[u.pay + r.keys.start..u.pay + r.keys.end];
        if self.answer_text(now, keys) != Some(r.len) {
            // Cannot happen (sized and looked up just now); if it did, the request goes on.
            return Verdict::Continue;
        }
        // The first datagram in place of the request, the rest sent after the batch.
        let n = datagrams(r.len);
        let first = r.len.min(CHUNK);
        let end = u.pay + FRAME_LEN + first;
        Frame { id: r.id, seq: 0, total: n as u16 }.emit(&mut pkt.buf[u.pay..]);
        pkt.buf[u.pay + FRAME_LEN..end].copy_from_slice(&self.answer[..first]);
        turn_around(pkt.buf, &u, end);
        let off = pkt.meta.off as usize;
        pkt.meta.len = (end - off) as u16;
        pkt.meta.inner = parse_inner(&pkt.buf[u.eth..end]).ok();
        if n > 1 {
            let (out, head, parts) = (cx.out.expect("room was counted"), &pkt.buf[off..u.pay], u.shifted(off, 0));
            for seq in 1..n {
                let chunk = &self.answer[seq * CHUNK..r.len.min((seq + 1) * CHUNK)];
                out.push(pkt.meta.vni, pkt.meta.tenant, |b| {
                    b[..head.len()].copy_from_slice(head);
                    Frame { id: r.id, seq: seq as u16, total: n as u16 }.emit(&mut b[parts.pay..]);
                    let end = parts.pay + FRAME_LEN + chunk.len();
                    b[parts.pay + FRAME_LEN..end].copy_from_slice(chunk);
                    udp::finish(b, &parts, end);
                    Some(end)
                });
            }
        }
        Verdict::Continue
    }

    fn emits(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{udp, TestPkt};
    use crate::Outbox;
    use snic_core::time::Instant;

    const CLIENT: &str = "10.0.0.1";
    const SERVER: &str = "10.0.0.2";

    fn nt(policy: Policy) -> KvCache {
        KvCache::new(&KvCacheConfig { backend: "10.0.0.2:11211".parse().unwrap(), bytes: 1 << 16, policy, max_age_ms: 1000 })
    }

    /// A datagram from `src` to `dst` carrying a memcached frame (id, one datagram) and `text`.
    fn dgram(src: (&str, u16), dst: (&str, u16), id: u16, text: &[u8]) -> TestPkt {
        let mut p = TestPkt::new(src.0, dst.0, udp(src.1, dst.1), FRAME_LEN + text.len());
        let l = p.meta.inner.unwrap();
        let pay = p.meta.off as usize + 8 + l.l4_off as usize + 8;
        Frame { id, seq: 0, total: 1 }.emit(&mut p.buf[pay..]);
        p.buf[pay + FRAME_LEN..pay + FRAME_LEN + text.len()].copy_from_slice(text);
        p
    }

    fn request(id: u16, text: &[u8]) -> TestPkt {
        dgram((CLIENT, 40000), (SERVER, 11211), id, text)
    }

    fn answer(id: u16, text: &[u8]) -> TestPkt {
        dgram((SERVER, 11211), (CLIENT, 40000), id, text)
    }

    fn at(ms: u64) -> Ctx<'static> {
        Ctx::real(Instant::from_nanos(ms * 1_000_000))
    }

    /// Runs `p` through `c`; returns the packet's UDP payload after, and whether it was turned
    /// around (now from the server to the client).
    fn run(c: &mut KvCache, ms: u64, mut p: TestPkt) -> (Vec<u8>, bool, TestPkt) {
        let before = p.meta.inner.unwrap().key;
        assert_eq!(c.process(&at(ms), &mut p.pkt()), Verdict::Continue);
        let l = p.reparse();
        let pay = p.meta.off as usize + 8 + l.l4_off as usize + 8;
        let end = p.meta.off as usize + 8 + l.l3_end as usize;
        let turned = l.key.src == before.dst && l.key.dst == before.src && l.key.src_port == before.dst_port;
        (p.buf[pay..end].to_vec(), turned, p)
    }

    fn text(payload: &[u8]) -> &[u8] {
        &payload[FRAME_LEN..]
    }

    #[test]
    fn a_miss_goes_on_its_answer_fills_and_the_next_get_is_answered_here() {
        let mut c = nt(Policy::Clock);
        let (_, turned, _) = run(&mut c, 0, request(1, b"get k\r\n"));
        assert!(!turned, "a miss goes to the server");
        run(&mut c, 1, answer(1, b"VALUE k 3 5\r\nhello\r\nEND\r\n"));
        let (pay, turned, p) = run(&mut c, 2, request(2, b"get k\r\n"));
        assert!(turned, "a hit is answered from here");
        assert_eq!(&pay[..2], &[0, 2], "the request's id");
        assert_eq!(text(&pay), b"VALUE k 3 5\r\nhello\r\nEND\r\n");
        assert!(p.checksums_ok());
        let l = p.reparse();
        assert_eq!((l.src_mac.0[5], l.dst_mac.0[5]), (2, 1), "Ethernet addresses swapped");
        let s = c.stats();
        assert_eq!((s.hits.load(Ordering::Relaxed), s.misses.load(Ordering::Relaxed), s.fills.load(Ordering::Relaxed)), (1, 1, 1));
    }

    /// memcached does not read a request's reserved header bytes, and Debian's memcaslap leaves
    /// whatever its buffer held there: such requests are read (and answered) all the same.
    #[test]
    fn requests_with_reserved_bytes_set_are_read_as_memcached_reads_them() {
        let mut c = nt(Policy::Clock);
        let dirty = |mut p: TestPkt| {
            let pay = Udp4::of(&p.pkt()).unwrap().pay;
            p.buf[pay + 6] = 1;
            p
        };
        run(&mut c, 0, dirty(request(1, b"set k 0 0 2\r\nv1\r\n")));
        run(&mut c, 1, answer(1, b"STORED\r\n"));
        let (pay, turned, _) = run(&mut c, 2, dirty(request(2, b"get k\r\n")));
        assert!(turned, "a cached value was not served to a request with reserved bytes set");
        assert_eq!(text(&pay), b"VALUE k 0 2\r\nv1\r\nEND\r\n");
        assert_eq!(&pay[6..8], &[0, 0], "the answer's reserved bytes");
    }

    #[test]
    fn several_keys_are_answered_only_when_all_are_cached() {
        let mut c = nt(Policy::Fifo);
        run(&mut c, 0, request(1, b"get a b\r\n"));
        run(&mut c, 0, answer(1, b"VALUE a 0 1\r\nA\r\nEND\r\n"));
        let (_, turned, _) = run(&mut c, 1, request(2, b"get a b\r\n"));
        assert!(!turned, "b is not cached");
        run(&mut c, 1, answer(2, b"VALUE a 0 1\r\nA\r\nVALUE b 0 2\r\nBB\r\nEND\r\n"));
        let (pay, turned, _) = run(&mut c, 2, request(3, b"get b a\r\n"));
        assert!(turned);
        assert_eq!(text(&pay), b"VALUE b 0 2\r\nBB\r\nVALUE a 0 1\r\nA\r\nEND\r\n");
    }

    #[test]
    fn a_write_shows_only_once_the_server_stored_it() {
        let mut c = nt(Policy::Clock);
        run(&mut c, 0, request(1, b"get k\r\n"));
        run(&mut c, 0, answer(1, b"VALUE k 0 2\r\nv1\r\nEND\r\n"));
        run(&mut c, 1, request(2, b"set k 0 0 2\r\nv2\r\n"));
        let (_, turned, _) = run(&mut c, 2, request(3, b"get k\r\n"));
        assert!(!turned, "after a write passed, its key is not served until the server stored it");
        run(&mut c, 3, answer(3, b"VALUE k 0 2\r\nv2\r\nEND\r\n"));
        run(&mut c, 3, answer(2, b"STORED\r\n"));
        let (pay, turned, _) = run(&mut c, 4, request(4, b"get k\r\n"));
        assert!(turned);
        assert_eq!(text(&pay), b"VALUE k 0 2\r\nv2\r\nEND\r\n");
    }

    /// The race a write-through cache must not lose: a read answered by the server before a
    /// write, arriving after the write passed, must not put the old value back.
    #[test]
    fn an_answer_to_a_read_older_than_a_write_does_not_fill() {
        let mut c = nt(Policy::Clock);
        run(&mut c, 0, request(1, b"get k\r\n"));
        run(&mut c, 1, request(2, b"set k 0 0 2\r\nv2\r\n"));
        run(&mut c, 2, answer(1, b"VALUE k 0 2\r\nv1\r\nEND\r\n"));
        let (_, turned, _) = run(&mut c, 3, request(3, b"get k\r\n"));
        assert!(!turned, "the old value was cached after the write passed");
        // A write the server refused shows nothing either.
        run(&mut c, 4, answer(2, b"NOT_STORED\r\n"));
        assert!(!run(&mut c, 5, request(4, b"get k\r\n")).1);
    }

    /// A read that passes while a write is on its way may reach the server first: its answer
    /// (the old value) must not fill, though it passed after the write.
    #[test]
    fn a_read_passing_while_a_write_is_in_flight_does_not_fill() {
        let mut c = nt(Policy::Clock);
        run(&mut c, 0, request(1, b"set k 0 0 2\r\nv2\r\n"));
        run(&mut c, 1, dgram(("10.0.0.3", 5000), (SERVER, 11211), 7, b"get k\r\n"));
        run(&mut c, 2, dgram((SERVER, 11211), ("10.0.0.3", 5000), 7, b"VALUE k 0 2\r\nv1\r\nEND\r\n"));
        assert!(!run(&mut c, 3, request(2, b"get k\r\n")).1, "the old value was cached");
        run(&mut c, 4, answer(1, b"STORED\r\n"));
        let (pay, turned, _) = run(&mut c, 5, request(3, b"get k\r\n"));
        assert!(turned);
        assert_eq!(text(&pay), b"VALUE k 0 2\r\nv2\r\nEND\r\n");
        // Acknowledged: reads fill again.
        run(&mut c, 6, request(4, b"delete k\r\n"));
        run(&mut c, 6, answer(4, b"DELETED\r\n"));
        run(&mut c, 7, request(5, b"get k\r\n"));
        run(&mut c, 7, answer(5, b"VALUE k 0 2\r\nv3\r\nEND\r\n"));
        assert!(run(&mut c, 8, request(6, b"get k\r\n")).1);
    }

    /// The same read, its answer (the old value) arriving only after the server acknowledged
    /// the write: it must not fill either, nor replace the value the acknowledgement showed —
    /// a client told "stored" would read the old value back from the cache.
    #[test]
    fn a_read_that_passed_during_a_writes_flight_does_not_fill_after_the_acknowledgement() {
        let mut c = nt(Policy::Clock);
        run(&mut c, 0, request(1, b"set k 0 0 2\r\nv2\r\n"));
        run(&mut c, 1, dgram(("10.0.0.3", 5000), (SERVER, 11211), 7, b"get k\r\n"));
        run(&mut c, 2, answer(1, b"STORED\r\n"));
        run(&mut c, 3, dgram((SERVER, 11211), ("10.0.0.3", 5000), 7, b"VALUE k 0 2\r\nv1\r\nEND\r\n"));
        let (pay, turned, _) = run(&mut c, 4, request(2, b"get k\r\n"));
        assert!(turned, "the acknowledged value is no longer served");
        assert_eq!(text(&pay), b"VALUE k 0 2\r\nv2\r\nEND\r\n", "an answer older than an acknowledged write was cached");
        // The same with the read and the acknowledgement at one instant, the read first (one
        // batch): the order they passed in decides, not their times.
        run(&mut c, 5, request(3, b"delete k\r\n"));
        run(&mut c, 6, dgram(("10.0.0.3", 5000), (SERVER, 11211), 8, b"get k\r\n"));
        run(&mut c, 6, answer(3, b"DELETED\r\n"));
        run(&mut c, 7, dgram((SERVER, 11211), ("10.0.0.3", 5000), 8, b"VALUE k 0 2\r\nv2\r\nEND\r\n"));
        assert!(!run(&mut c, 8, request(4, b"get k\r\n")).1, "a value read while its delete was in flight was cached");
    }

    /// A `set` too large for one IP packet reaches the NT as fragments it cannot parse to
    /// ports: the first one names the key, which is forgotten.
    #[test]
    fn a_fragmented_write_forgets_its_key() {
        let mut c = nt(Policy::Clock);
        run(&mut c, 0, request(1, b"get big\r\n"));
        run(&mut c, 0, answer(1, b"VALUE big 0 1\r\nx\r\nEND\r\n"));
        assert!(run(&mut c, 0, request(2, b"get big\r\n")).1);
        let mut p = request(3, b"set big 0 0 3000\r\nxxxxxxxx");
        let l3 = p.meta.off as usize + 8 + p.meta.inner.unwrap().l3_off as usize;
        p.buf[l3 + 6] |= 0x20;
        p.meta.inner = None;
        assert_eq!(c.process(&at(1), &mut p.pkt()), Verdict::Continue);
        assert!(!run(&mut c, 2, request(4, b"get big\r\n")).1, "the fragmented set did not invalidate");
        // A later fragment (offset > 0) or one to another server changes nothing.
        run(&mut c, 2000, request(5, b"get big\r\n"));
        run(&mut c, 2000, answer(5, b"VALUE big 0 1\r\ny\r\nEND\r\n"));
        let mut p = request(6, b"set big 0 0 3000\r\nxxxxxxxx");
        p.buf[l3 + 6] = 0x20;
        p.buf[l3 + 7] = 0x10;
        p.meta.inner = None;
        c.process(&at(2001), &mut p.pkt());
        assert!(run(&mut c, 2002, request(7, b"get big\r\n")).1);
    }

    #[test]
    fn deletes_noreply_writes_and_flushes_forget() {
        let mut c = nt(Policy::Clock);
        let fill = |c: &mut KvCache, id, ms| {
            run(c, ms, request(id, b"get k\r\n"));
            run(c, ms, answer(id, b"VALUE k 0 1\r\nx\r\nEND\r\n"));
            assert!(run(c, ms, request(id + 1, b"get k\r\n")).1, "cached");
        };
        for (i, forget) in [&b"delete k\r\n"[..], b"set k 0 0 1 noreply\r\ny\r\n", b"incr k 1\r\n", b"touch k 5\r\n", b"flush_all\r\n"]
            .into_iter()
            .enumerate()
        {
            // Each round after the last one's writes stopped being in flight.
            let (id, ms) = (10 * i as u16, 2000 * i as u64);
            fill(&mut c, id, ms);
            run(&mut c, ms, request(id + 2, forget));
            assert!(!run(&mut c, ms, request(id + 3, b"get k\r\n")).1, "{}", String::from_utf8_lossy(forget));
        }
    }

    #[test]
    fn values_expire_and_bad_requests_pass_on_counted() {
        let mut c = nt(Policy::Clock);
        run(&mut c, 0, request(1, b"get k\r\n"));
        run(&mut c, 0, answer(1, b"VALUE k 0 1\r\nx\r\nEND\r\n"));
        assert!(run(&mut c, 999, request(2, b"get k\r\n")).1);
        assert!(!run(&mut c, 1000, request(3, b"get k\r\n")).1, "kept at most max_age_ms");
        let (pay, turned, _) = run(&mut c, 0, request(4, b"bogus\r\n"));
        assert!(!turned);
        assert_eq!(text(&pay), b"bogus\r\n", "passed on untouched: the server answers ERROR");
        assert_eq!(c.stats().malformed.load(Ordering::Relaxed), 1);
        // Not to the server: left alone, whatever it carries.
        let (pay, turned, _) = run(&mut c, 0, dgram((CLIENT, 1), ("10.0.0.9", 11211), 5, b"get k\r\n"));
        assert!(!turned);
        assert_eq!(text(&pay), b"get k\r\n");
    }

    #[test]
    fn an_answer_that_does_not_fit_one_datagram_goes_to_the_server() {
        let mut c = nt(Policy::Clock);
        let v = vec![b'v'; 1000];
        let mut a = b"VALUE a 0 1000\r\n".to_vec();
        a.extend_from_slice(&v);
        a.extend_from_slice(b"\r\nEND\r\n");
        let mut b = a.clone();
        b[6] = b'b';
        run(&mut c, 0, request(1, b"get a\r\n"));
        run(&mut c, 0, answer(1, &a));
        run(&mut c, 0, request(2, b"get b\r\n"));
        run(&mut c, 0, answer(2, &b));
        assert!(run(&mut c, 1, request(3, b"get a\r\n")).1);
        assert!(!run(&mut c, 1, request(4, b"get a b\r\n")).1, "2 KB do not fit one datagram, and there is no outbox");
    }

    /// Part `seq` of `total` of an answer from the server.
    fn part(id: u16, seq: u16, total: u16, text: &[u8]) -> TestPkt {
        let mut p = answer(id, text);
        let u = Udp4::of(&p.pkt()).unwrap();
        Frame { id, seq, total }.emit(&mut p.buf[u.pay..]);
        p
    }

    /// A value over several datagrams: read back together from the server's parts (in any
    /// order), then served in parts, the first in place of the request and the rest sent.
    #[test]
    fn a_long_value_is_filled_from_several_datagrams_and_served_in_several() {
        let mut c = nt(Policy::Clock);
        let out = Outbox::new(16);
        let value: Vec<u8> = (0..4000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let mut whole = b"VALUE big 5 4000\r\n".to_vec();
        whole.extend_from_slice(&value);
        whole.extend_from_slice(b"\r\nEND\r\n");
        let cx = |ms: u64| Ctx::real_with(Instant::from_nanos(ms * 1_000_000), &out);
        let mut req = request(1, b"get big\r\n");
        c.process(&cx(0), &mut req.pkt());
        let chunks: Vec<&[u8]> = whole.chunks(1392).collect();
        assert_eq!(chunks.len(), 3);
        for seq in [2u16, 0, 1] {
            c.process(&cx(1), &mut part(1, seq, 3, chunks[seq as usize]).pkt());
        }
        assert_eq!(c.stats().fills.load(Ordering::Relaxed), 1, "read back together and cached");
        let mut req = request(2, b"get big\r\n");
        c.process(&cx(2), &mut req.pkt());
        let l = req.reparse();
        assert_eq!(l.key.dst.to_string(), CLIENT, "answered here");
        assert!(req.checksums_ok());
        let pay = req.meta.off as usize + 8 + l.l4_off as usize + 8;
        let first = req.buf[pay..req.meta.off as usize + 8 + l.l3_end as usize].to_vec();
        let mut parts = vec![first];
        out.drain(|d, _, _| {
            let l = parse_inner(&d[8..]).unwrap();
            assert_eq!(l.key.dst.to_string(), CLIENT);
            assert!(snic_wire::build::verify_l4_checksum(
                &d[8 + l.l3_off as usize..8 + l.l3_end as usize],
                (l.l4_off - l.l3_off) as usize,
                17
            ));
            parts.push(d[8 + l.l4_off as usize + 8..8 + l.l3_end as usize].to_vec());
        });
        assert_eq!(parts.len(), 3);
        let mut text = vec![];
        for (i, p) in parts.iter().enumerate() {
            let (f, t) = Frame::parse(p).unwrap();
            assert_eq!((f.id, f.seq, f.total), (2, i as u16, 3));
            text.extend_from_slice(t);
        }
        assert_eq!(text, whole);
    }

    /// memcached answers a read of several keys over UDP with one message per key; each fills.
    #[test]
    fn one_message_per_key_fills_each() {
        let mut c = nt(Policy::Clock);
        run(&mut c, 0, request(1, b"get a b\r\n"));
        run(&mut c, 0, answer(1, b"VALUE a 0 1\r\nA\r\n"));
        run(&mut c, 0, answer(1, b"VALUE b 0 1\r\nB\r\nEND\r\n"));
        let (pay, turned, _) = run(&mut c, 1, request(2, b"get a b\r\n"));
        assert!(turned);
        assert_eq!(text(&pay), b"VALUE a 0 1\r\nA\r\nVALUE b 0 1\r\nB\r\nEND\r\n");
    }

    proptest::proptest! {
        /// Clients write two keys (one write to a key at a time, versions 1, 2, … in order)
        /// and read them; memcached takes requests and sends answers back in any order, as
        /// its threads do. Whatever the interleaving, a read the NT answers returns the
        /// version acknowledged last before it passed, or a later one.
        #[test]
        fn a_read_answered_here_is_never_older_than_an_acknowledged_write(
            steps in proptest::collection::vec((0u8..4, 0u8..8), 1..80),
        ) {
            enum Req { Write(usize, u32), Read(usize) }
            let key = |k: usize| ["a", "b"][k];
            let mut c = nt(Policy::Clock);
            let (mut now, mut id) = (0u64, 0u16);
            // The server's versions, the newest acknowledged and the newest issued per key,
            // and whether a write to a key is on its way.
            let (mut server, mut acked, mut issued, mut writing) = ([0u32; 2], [0u32; 2], [0u32; 2], [false; 2]);
            let mut at_server: Vec<(u16, Req)> = vec![];
            // Answers on their way back: request id, text, and the write (key, version) a
            // `STORED` acknowledges.
            struct Answer { id: u16, text: Vec<u8>, write: Option<(usize, u32)> }
            let mut answers: Vec<Answer> = vec![];
            for (kind, arg) in steps {
                now += (arg % 2) as u64;
                let k = (arg % 2) as usize;
                match kind {
                    0 if !writing[k] => {
                        id += 1;
                        issued[k] += 1;
                        writing[k] = true;
                        let v = format!("v{}", issued[k]);
                        run(&mut c, now, request(id, format!("set {} 0 0 {}\r\n{v}\r\n", key(k), v.len()).as_bytes()));
                        at_server.push((id, Req::Write(k, issued[k])));
                    }
                    1 => {
                        id += 1;
                        let (pay, turned, _) = run(&mut c, now, request(id, format!("get {}\r\n", key(k)).as_bytes()));
                        if turned {
                            let t = String::from_utf8(text(&pay).to_vec()).unwrap();
                            let got: u32 = t.split("\r\nv").nth(1).and_then(|r| r.split('\r').next()).unwrap().parse().unwrap();
                            proptest::prop_assert!(got >= acked[k], "served v{got} of {} after v{} was acknowledged", key(k), acked[k]);
                        } else {
                            at_server.push((id, Req::Read(k)));
                        }
                    }
                    2 if !at_server.is_empty() => {
                        let (rid, r) = at_server.remove(arg as usize % at_server.len());
                        match r {
                            Req::Write(k, v) => {
                                server[k] = v;
                                answers.push(Answer { id: rid, text: b"STORED\r\n".to_vec(), write: Some((k, v)) });
                            }
                            Req::Read(k) => {
                                let text = match server[k] {
                                    0 => "END\r\n".to_string(),
                                    v => format!("VALUE {} 0 {}\r\nv{v}\r\nEND\r\n", key(k), format!("v{v}").len()),
                                };
                                answers.push(Answer { id: rid, text: text.into_bytes(), write: None });
                            }
                        }
                    }
                    3 if !answers.is_empty() => {
                        let a = answers.remove(arg as usize % answers.len());
                        run(&mut c, now, answer(a.id, &a.text));
                        if let Some((k, v)) = a.write {
                            acked[k] = acked[k].max(v);
                            writing[k] = false;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}
