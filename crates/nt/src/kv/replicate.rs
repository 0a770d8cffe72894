//! The `kv_replicate` NT: a tenant's writes to its memcached server made on K servers, and
//! acknowledged only once all K stored them (paper §6.1: the sNIC replicates a write to the
//! memory nodes and answers the client for them).
//!
//! Clients address the first replica. For each write to it (`set`, `add`, `replace`, `delete`,
//! `touch`, `incr`/`decr`, `append`/`prepend`, `cas`):
//! - the request goes on to the first replica, and a copy to each other one (the same datagram,
//!   its destination changed; the client's address kept, so every replica answers the client);
//! - the NT holds the answers: the first K−1 go no further; when the K-th arrives and all K
//!   said the same, it goes to the client in the first replica's name; if they differ, the
//!   client gets `SERVER_ERROR replicas disagree`. Never an acknowledgement before all K;
//! - a replica that does not answer within `timeout_ms` is sent the request again, up to
//!   `retries` times, for writes that may be repeated (`set`, `delete`, `touch`); then — or at
//!   once for the others — the client gets `SERVER_ERROR replica timeout`, counted.
//!
//! Reads (`get`, `gets`) go to one replica, in turn; the answer comes back in the first
//! replica's name. Writes with `noreply` are copied and not waited for. Requests waiting are
//! bounded (`max_pending`); past it a write is refused at once with `SERVER_ERROR`. A write too
//! large for one IP packet arrives in fragments: each is copied to every replica, and the
//! first one (the request's headers) makes the write wait for its answers; it is not retried.
//!
//! The NT learns each replica's Ethernet address from the packets it sends; until then, copies
//! to it go to the broadcast address (delivered by the VNI's flood list).

use super::proto::{self, Frame, Request, StoreCmd, FRAME_LEN};
use super::udp::{self, Udp4};
use crate::outbox::MAX_FRAME;
use crate::{bump, Ctx, DropReason, Nt, Pkt, Verdict};
use serde::{Deserialize, Serialize};
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::parse_inner;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Configuration of a `kv_replicate` NT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvReplicateConfig {
    /// The replicas' UDP addresses; clients address the first.
    pub replicas: Vec<SocketAddrV4>,
    /// How long to wait for a replica's answer before sending again, ms (default 200).
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// How many times a write is sent again to a replica that did not answer (default 2).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Writes waiting for their replicas at most (default 1024; each keeps its datagram,
    /// ≤ 1.6 KB).
    #[serde(default = "default_pending")]
    pub max_pending: usize,
}

fn default_timeout() -> u64 {
    200
}
fn default_retries() -> u32 {
    2
}
fn default_pending() -> usize {
    1024
}

/// Counts of a [`KvReplicate`].
#[derive(Debug, Default)]
pub struct KvReplicateStats {
    /// Writes acknowledged to the client after all replicas stored them.
    pub acked: AtomicU64,
    /// Writes answered with an error: replicas disagreed.
    pub disagreed: AtomicU64,
    /// Writes answered with an error: a replica never answered.
    pub timeouts: AtomicU64,
    /// Copies sent again to a replica that had not answered.
    pub retries: AtomicU64,
    /// Writes refused at once: too many waiting, or too large to copy.
    pub refused: AtomicU64,
    /// Reads sent to a replica other than the first.
    pub reads_moved: AtomicU64,
}

impl crate::NtCounters for KvReplicateStats {
    fn each(&self, f: &mut dyn FnMut(&'static str, u64, bool)) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        f("acked", l(&self.acked), false);
        f("disagreed", l(&self.disagreed), true);
        f("timeouts", l(&self.timeouts), true);
        f("retries", l(&self.retries), false);
        f("refused", l(&self.refused), true);
        f("reads_moved", l(&self.reads_moved), false);
    }
}

/// A write waiting for its replicas.
#[derive(Debug, Clone, Copy, Default)]
struct Waiting {
    tag: u64,
    /// Replicas that answered, a bit each.
    answered: u32,
    /// The first answer's hash: every other must match it.
    answer: u64,
    deadline: u64,
    retries_left: u32,
    /// The request's VXLAN datagram (kept in the arena at this slot) and its length, VNI,
    /// tenant and parts.
    len: usize,
    vni: u32,
    tenant: snic_core::ids::TenantId,
    parts: Option<Udp4>,
    gen: u32,
}

/// See the module docs.
pub struct KvReplicate {
    replicas: Vec<SocketAddrV4>,
    macs: Vec<Option<MacAddr>>,
    timeout_ns: u64,
    retries: u32,
    slots: Vec<Waiting>,
    arena: Box<[u8]>,
    free: Vec<u32>,
    index: HashMap<u64, u32>,
    deadlines: VecDeque<(u64, u32, u32)>,
    next_read: usize,
    /// Writes answered lately (direct-mapped by tag, so the last thousand or so): a replica's
    /// answer to one of them comes late (a retry's, or after the client was told of a timeout)
    /// and goes no further. A new request under the same tag (a client's ids wrap) clears it.
    done: Box<[u64]>,
    stats: Arc<KvReplicateStats>,
}

/// Writes remembered as answered lately.
const DONE: usize = 1024;

fn done_slot(tag: u64) -> usize {
    (tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % DONE
}

impl std::fmt::Debug for KvReplicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvReplicate").field("replicas", &self.replicas).field("waiting", &self.index.len()).finish()
    }
}

fn tag(client: Ipv4Addr, port: u16, id: u16) -> u64 {
    (u32::from(client) as u64) << 32 | (port as u64) << 16 | id as u64
}

fn answer_hash(text: &[u8]) -> u64 {
    super::cache::key_hash(text)
}

const TIMEOUT: &[u8] = b"SERVER_ERROR replica timeout\r\n";
const DISAGREE: &[u8] = b"SERVER_ERROR replicas disagree\r\n";
const BUSY: &[u8] = b"SERVER_ERROR too many writes waiting for replicas\r\n";
const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large to replicate\r\n";

impl KvReplicate {
    /// A replication NT.
    pub fn new(c: &KvReplicateConfig) -> KvReplicate {
        let n = c.max_pending.max(1);
        let mut index = HashMap::new();
        index.reserve(n);
        KvReplicate {
            replicas: c.replicas.clone(),
            macs: vec![None; c.replicas.len()],
            timeout_ns: c.timeout_ms.saturating_mul(1_000_000),
            retries: c.retries,
            slots: vec![Waiting::default(); n],
            arena: vec![0u8; n * MAX_FRAME].into_boxed_slice(),
            free: (0..n as u32).rev().collect(),
            index,
            deadlines: VecDeque::with_capacity(n * (c.retries as usize + 1)),
            next_read: 0,
            done: vec![0; DONE].into_boxed_slice(),
            stats: Arc::default(),
        }
    }

    /// The memory an NT of configuration `c` holds, bytes: the waiting writes' datagrams and
    /// records (`max_pending` of them) and the answered ones remembered.
    pub fn memory(c: &KvReplicateConfig) -> u64 {
        (c.max_pending.max(1) * (MAX_FRAME + std::mem::size_of::<Waiting>() + 48) + DONE * 8) as u64
    }

    /// A handle on the counts.
    pub fn stats(&self) -> Arc<KvReplicateStats> {
        self.stats.clone()
    }

    fn replica_of(&self, ip: IpAddr, port: u16) -> Option<usize> {
        let IpAddr::V4(ip) = ip else { return None };
        self.replicas.iter().position(|r| *r.ip() == ip && r.port() == port)
    }

    fn all(&self) -> u32 {
        (1u32 << self.replicas.len()) - 1
    }

    /// Sends the waiting write in `slot` to replica `j` (a copy from the arena).
    fn send_copy(&self, cx: &Ctx<'_>, slot: u32, j: usize) -> bool {
        let w = &self.slots[slot as usize];
        let (Some(out), Some(parts)) = (cx.out, w.parts) else { return false };
        let src = &self.arena[slot as usize * MAX_FRAME..slot as usize * MAX_FRAME + w.len];
        let (ip, mac) = (*self.replicas[j].ip(), self.macs[j].unwrap_or(MacAddr::BROADCAST));
        out.push(w.vni, w.tenant, |b| {
            b[..src.len()].copy_from_slice(src);
            udp::set_dst(b, &parts, ip, mac);
            Some(src.len())
        })
    }

    /// Sends the client of the waiting write in `slot` the error `text`, in the first
    /// replica's name (built from the kept request).
    fn send_error(&self, cx: &Ctx<'_>, slot: u32, text: &[u8]) -> bool {
        let w = &self.slots[slot as usize];
        let (Some(out), Some(u)) = (cx.out, w.parts) else { return false };
        let src = &self.arena[slot as usize * MAX_FRAME..slot as usize * MAX_FRAME + w.len];
        let Some((f, _)) = Frame::parse(&src[u.pay..u.end]) else { return false };
        out.push(w.vni, w.tenant, |b| {
            b[..u.pay].copy_from_slice(&src[..u.pay]);
            // Whole (the request may have been a first fragment).
            b[u.l3 + 6..u.l3 + 8].copy_from_slice(&[0, 0]);
            let end = u.pay + FRAME_LEN + text.len();
            Frame { id: f.id, seq: 0, total: 1 }.emit(&mut b[u.pay..]);
            b[u.pay + FRAME_LEN..end].copy_from_slice(text);
            udp::turn_around(b, &u, end);
            Some(end)
        })
    }

    fn forget_done(&mut self, t: u64) {
        let d = &mut self.done[done_slot(t)];
        if *d == t {
            *d = 0;
        }
    }

    fn release(&mut self, slot: u32) {
        let w = &mut self.slots[slot as usize];
        self.index.remove(&w.tag);
        self.done[done_slot(w.tag)] = w.tag;
        w.gen = w.gen.wrapping_add(1);
        w.parts = None;
        self.free.push(slot);
    }

    /// A write from a client to the first replica, in `pkt` (parts `u`): kept and copied.
    /// `Some(text)`: refuse it with this answer instead.
    fn write(&mut self, cx: &Ctx<'_>, pkt: &Pkt<'_>, u: Udp4, t: u64, may_retry: bool) -> Option<&'static [u8]> {
        let refused = self.keep(cx, pkt, u, t, may_retry);
        if refused.is_none() {
            let slot = self.index[&t];
            for j in 1..self.replicas.len() {
                // One not sent now is sent again at its timeout.
                self.send_copy(cx, slot, j);
            }
        }
        refused
    }

    /// Keeps the write in `pkt` (parts `u`), from client request `t`, waiting for its answers.
    /// `Some(text)`: no room; refuse it with this answer instead.
    fn keep(&mut self, cx: &Ctx<'_>, pkt: &Pkt<'_>, u: Udp4, t: u64, may_retry: bool) -> Option<&'static [u8]> {
        let Some(slot) = self.free.pop() else {
            bump(&self.stats.refused, 1);
            return Some(BUSY);
        };
        let (start, len) = (pkt.meta.off as usize, pkt.meta.len as usize);
        if len > MAX_FRAME {
            self.free.push(slot);
            bump(&self.stats.refused, 1);
            return Some(TOO_LARGE);
        }
        self.arena[slot as usize * MAX_FRAME..slot as usize * MAX_FRAME + len].copy_from_slice(&pkt.buf[start..start + len]);
        let now = cx.now.as_nanos();
        let w = &mut self.slots[slot as usize];
        *w = Waiting {
            tag: t,
            answered: 0,
            answer: 0,
            deadline: now.saturating_add(self.timeout_ns),
            retries_left: if may_retry { self.retries } else { 0 },
            len,
            vni: pkt.meta.vni,
            tenant: pkt.meta.tenant,
            parts: Some(u.shifted(start, 0)),
            gen: w.gen,
        };
        self.deadlines.push_back((w.deadline, slot, w.gen));
        if let Some(old) = self.index.insert(t, slot) {
            // The client reused a request id still waiting: the old write is given up.
            self.release_quiet(old);
        }
        None
    }

    fn release_quiet(&mut self, slot: u32) {
        let w = &mut self.slots[slot as usize];
        w.gen = w.gen.wrapping_add(1);
        w.parts = None;
        self.free.push(slot);
    }

    /// An answer from replica `j` to a client: `Continue` it (the last, in the first replica's
    /// name), or hold it (`Drop`).
    fn answer(&mut self, pkt: &mut Pkt<'_>, u: Udp4, j: usize, client: Ipv4Addr, port: u16) -> Verdict {
        let Some((f, text)) = Frame::parse(&pkt.buf[u.pay..u.end]) else { return Verdict::Continue };
        let t = tag(client, port, f.id);
        if self.done[done_slot(t)] == t {
            return Verdict::Drop(DropReason::KvAnswerLate);
        }
        let Some(&slot) = self.index.get(&t) else {
            // A read's answer (or a late one): in the first replica's name.
            if j != 0 {
                udp::set_src(pkt.buf, &u, *self.replicas[0].ip(), self.macs[0]);
                reparse(pkt, u);
            }
            return Verdict::Continue;
        };
        if f.total != 1 {
            // A write's answer is one line; anything longer is no agreement.
            return self.disagree(pkt, u, f, slot);
        }
        let h = answer_hash(text);
        let all = self.all();
        let w = &mut self.slots[slot as usize];
        if w.answered == 0 {
            w.answer = h;
        } else if w.answer != h {
            return self.disagree(pkt, u, f, slot);
        }
        w.answered |= 1 << j;
        if w.answered != all {
            return Verdict::Drop(DropReason::KvAnswerHeld);
        }
        self.release(slot);
        bump(&self.stats.acked, 1);
        udp::set_src(pkt.buf, &u, *self.replicas[0].ip(), self.macs[0]);
        reparse(pkt, u);
        Verdict::Continue
    }

    /// Replicas answered differently: this answer becomes the client's error.
    fn disagree(&mut self, pkt: &mut Pkt<'_>, u: Udp4, f: Frame, slot: u32) -> Verdict {
        self.release(slot);
        bump(&self.stats.disagreed, 1);
        // In the first replica's name, then the text (which sets the lengths it changes).
        udp::set_src(pkt.buf, &u, *self.replicas[0].ip(), self.macs[0]);
        rewrite_text(pkt, u, f.id, DISAGREE);
        Verdict::Continue
    }
}

/// The descriptor's parsed frame after a rewrite in place: egress routes by its Ethernet
/// destination, and later NTs read its addresses.
fn reparse(pkt: &mut Pkt<'_>, u: Udp4) {
    pkt.meta.inner = parse_inner(&pkt.buf[u.eth..u.end]).ok();
}

/// Replaces the memcached message in `pkt` by `text` (id `id`, one datagram).
fn rewrite_text(pkt: &mut Pkt<'_>, u: Udp4, id: u16, text: &[u8]) {
    let end = u.pay + FRAME_LEN + text.len();
    Frame { id, seq: 0, total: 1 }.emit(&mut pkt.buf[u.pay..]);
    pkt.buf[u.pay + FRAME_LEN..end].copy_from_slice(text);
    udp::finish(pkt.buf, &u, end);
    pkt.meta.len = (end - pkt.meta.off as usize) as u16;
    pkt.meta.inner = parse_inner(&pkt.buf[u.eth..end]).ok();
}

/// Answers the request in `pkt` with `text` itself (turned around, in place; a first fragment
/// becomes a whole datagram).
fn refuse(pkt: &mut Pkt<'_>, u: Udp4, id: u16, text: &[u8]) {
    pkt.buf[u.l3 + 6..u.l3 + 8].copy_from_slice(&[0, 0]);
    let end = u.pay + FRAME_LEN + text.len();
    Frame { id, seq: 0, total: 1 }.emit(&mut pkt.buf[u.pay..]);
    pkt.buf[u.pay + FRAME_LEN..end].copy_from_slice(text);
    udp::turn_around(pkt.buf, &u, end);
    pkt.meta.len = (end - pkt.meta.off as usize) as u16;
    pkt.meta.inner = parse_inner(&pkt.buf[u.eth..end]).ok();
}

impl Nt for KvReplicate {
    fn kind(&self) -> &'static str {
        "kv_replicate"
    }

    fn counters(&self) -> Option<Arc<dyn crate::NtCounters>> {
        Some(self.stats.clone())
    }

    fn emits(&self) -> bool {
        true
    }

    fn process(&mut self, cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        let v = self.handle(cx, pkt);
        if let Some(o) = cx.out {
            o.set_waiting(!self.index.is_empty());
        }
        v
    }

    fn tick(&mut self, cx: &Ctx<'_>) {
        let now = cx.now.as_nanos();
        while let Some(&(deadline, slot, gen)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            let w = self.slots[slot as usize];
            if w.gen != gen || w.parts.is_none() || w.deadline != deadline {
                continue;
            }
            if w.retries_left > 0 {
                for j in 0..self.replicas.len() {
                    if w.answered & (1 << j) == 0 && self.send_copy(cx, slot, j) {
                        bump(&self.stats.retries, 1);
                    }
                }
                let w = &mut self.slots[slot as usize];
                w.retries_left -= 1;
                w.deadline = now.saturating_add(self.timeout_ns);
                self.deadlines.push_back((w.deadline, slot, gen));
            } else {
                if !self.send_error(cx, slot, TIMEOUT) {
                    // No room to send the error now: try again next tick.
                    self.deadlines.push_front((deadline, slot, gen));
                    break;
                }
                bump(&self.stats.timeouts, 1);
                self.release(slot);
            }
        }
        if let Some(o) = cx.out {
            o.set_waiting(!self.index.is_empty());
        }
    }
}

impl KvReplicate {
    fn handle(&mut self, cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        if pkt.meta.inner.is_none() {
            return self.fragment(cx, pkt);
        }
        let Some(u) = Udp4::of(pkt) else {
            self.learn(pkt);
            return Verdict::Continue;
        };
        self.learn(pkt);
        let k = pkt.meta.inner.expect("Udp4::of checked").key;
        if let Some(j) = self.replica_of(k.src, k.src_port) {
            let IpAddr::V4(client) = k.dst else { return Verdict::Continue };
            return self.answer(pkt, u, j, client, k.dst_port);
        }
        if self.replica_of(k.dst, k.dst_port) != Some(0) {
            return Verdict::Continue;
        }
        let IpAddr::V4(client) = k.src else { return Verdict::Continue };
        let Some((f, text)) = Frame::parse(&pkt.buf[u.pay..u.end]) else { return Verdict::Continue };
        if f.total != 1 {
            return Verdict::Continue;
        }
        let t = tag(client, k.src_port, f.id);
        // A new request under the id of one answered before: its answers are not late.
        self.forget_done(t);
        let (noreply, may_retry) = match proto::parse_request(text) {
            Ok(Request::Get { .. }) => {
                let j = self.next_read % self.replicas.len();
                self.next_read = self.next_read.wrapping_add(1);
                if j != 0 {
                    bump(&self.stats.reads_moved, 1);
                    udp::set_dst(pkt.buf, &u, *self.replicas[j].ip(), self.macs[j].unwrap_or(MacAddr::BROADCAST));
                    reparse(pkt, u);
                }
                return Verdict::Continue;
            }
            Ok(Request::Store { cmd, noreply, .. }) => (noreply, cmd == StoreCmd::Set),
            Ok(Request::Delete { noreply, .. } | Request::Touch { noreply, .. }) => (noreply, true),
            Ok(Request::Mutate { .. }) => (false, false),
            Ok(Request::Flush) => (text.windows(7).any(|w| w == b"noreply"), false),
            Ok(Request::Other) | Err(_) => return Verdict::Continue,
        };
        if noreply {
            // Copies, not waited for (the client asked for no answer).
            if let Some(out) = cx.out {
                let (start, len) = (pkt.meta.off as usize, pkt.meta.len as usize);
                let parts = u.shifted(start, 0);
                for j in 1..self.replicas.len() {
                    let (ip, mac) = (*self.replicas[j].ip(), self.macs[j].unwrap_or(MacAddr::BROADCAST));
                    let src = &pkt.buf[start..start + len];
                    out.push(pkt.meta.vni, pkt.meta.tenant, |b| {
                        b.get_mut(..len)?.copy_from_slice(src);
                        udp::set_dst(b, &parts, ip, mac);
                        Some(len)
                    });
                }
            }
            return Verdict::Continue;
        }
        if let Some(text) = self.write(cx, pkt, u, t, may_retry) {
            refuse(pkt, u, f.id, text);
        }
        Verdict::Continue
    }

    /// Learns a replica's Ethernet address from a frame it sent.
    fn learn(&mut self, pkt: &Pkt<'_>) {
        let Some(inner) = pkt.meta.inner else { return };
        let IpAddr::V4(src) = inner.key.src else { return };
        if let Some(j) = self.replicas.iter().position(|r| *r.ip() == src) {
            self.macs[j] = Some(inner.src_mac);
        }
    }

    /// A fragment to the first replica's address (a write too large for one IP packet): it
    /// goes on, and a copy goes to every other replica (only its destination changed, and the
    /// UDP checksum the first fragment carries). The first fragment, which carries the
    /// request's headers, makes the write wait for its answers like any; it is not retried
    /// (its other fragments are not kept). With no room to wait, the first fragment is dropped
    /// (no replica can put the datagram together) and the client told.
    fn fragment(&mut self, cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        let (start, len) = (pkt.meta.off as usize, pkt.meta.len as usize);
        let Some(d) = pkt.buf.get(start..start + len) else { return Verdict::Continue };
        let Some(frag) = udp::fragment(d).filter(|f| f.dst == *self.replicas[0].ip()) else { return Verdict::Continue };
        let (u, first) = (frag.u, frag.first);
        if first {
            let Some(h) = d.get(u.l4..u.pay) else { return Verdict::Continue };
            let (sport, dport) = (u16::from_be_bytes([h[0], h[1]]), u16::from_be_bytes([h[2], h[3]]));
            let Some((f, text)) = d.get(u.pay..u.end).and_then(Frame::parse) else { return Verdict::Continue };
            if dport != self.replicas[0].port() {
                return Verdict::Continue;
            }
            let line = text.split(|&c| c == b'\n').next().unwrap_or_default().trim_ascii_end();
            let writes = !matches!(proto::changes(text), proto::Changes::Nothing);
            if writes && !line.ends_with(b" noreply") {
                let u0 = u.shifted(0, start);
                let t = tag(frag.src, sport, f.id);
                self.forget_done(t);
                if let Some(text) = self.keep(cx, pkt, u0, t, false) {
                    refuse(pkt, u0, f.id, text);
                    return Verdict::Continue;
                }
            }
        }
        let Some(out) = cx.out else { return Verdict::Continue };
        let d = &pkt.buf[start..start + len];
        for j in 1..self.replicas.len() {
            let (ip, mac) = (*self.replicas[j].ip(), self.macs[j].unwrap_or(MacAddr::BROADCAST));
            // One not sent means that replica cannot put the datagram together: it does not
            // answer, and the client gets an error at the timeout.
            out.push(pkt.meta.vni, pkt.meta.tenant, |b| {
                b[..len].copy_from_slice(d);
                udp::set_fragment_dst(b, &u, first, ip, mac);
                Some(len)
            });
        }
        Verdict::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Outbox;
    use crate::testutil::{udp as l4udp, TestPkt};
    use snic_core::time::Instant;

    const CLIENT: &str = "10.0.0.1";
    const R: [&str; 3] = ["10.0.0.2", "10.0.0.3", "10.0.0.4"];

    fn nt() -> KvReplicate {
        KvReplicate::new(&KvReplicateConfig {
            replicas: R.iter().map(|r| format!("{r}:11211").parse().unwrap()).collect(),
            timeout_ms: 100,
            retries: 1,
            max_pending: 4,
        })
    }

    fn dgram(src: (&str, u16), dst: (&str, u16), id: u16, text: &[u8]) -> TestPkt {
        let mut p = TestPkt::new(src.0, dst.0, l4udp(src.1, dst.1), FRAME_LEN + text.len());
        let u = Udp4::of(&p.pkt()).unwrap();
        Frame { id, seq: 0, total: 1 }.emit(&mut p.buf[u.pay..]);
        p.buf[u.pay + FRAME_LEN..u.pay + FRAME_LEN + text.len()].copy_from_slice(text);
        udp::finish(&mut p.buf, &u, u.end);
        p
    }

    fn at(ms: u64, out: &Outbox) -> Ctx<'_> {
        Ctx::real_with(Instant::from_nanos(ms * 1_000_000), out)
    }

    /// The datagrams `out` holds: (destination, source, text).
    fn sent(out: &Outbox) -> Vec<(String, String, Vec<u8>)> {
        let mut v = vec![];
        out.drain(|d, _, _| {
            let l = parse_inner(&d[8..]).unwrap();
            let pay = 8 + l.l4_off as usize + 8;
            let end = 8 + l.l3_end as usize;
            v.push((
                format!("{}:{}", l.key.dst, l.key.dst_port),
                format!("{}:{}", l.key.src, l.key.src_port),
                d[pay + FRAME_LEN..end].to_vec(),
            ));
        });
        v
    }

    fn text_of(p: &TestPkt) -> (String, String, Vec<u8>) {
        let l = p.reparse();
        let pay = p.meta.off as usize + 8 + l.l4_off as usize + 8;
        let end = p.meta.off as usize + 8 + l.l3_end as usize;
        (format!("{}:{}", l.key.dst, l.key.dst_port), format!("{}:{}", l.key.src, l.key.src_port), p.buf[pay + FRAME_LEN..end].to_vec())
    }

    fn answer(r: usize, id: u16, text: &[u8]) -> TestPkt {
        dgram((R[r], 11211), (CLIENT, 4000), id, text)
    }

    #[test]
    fn a_write_goes_to_every_replica_and_is_acknowledged_only_after_all() {
        let (mut n, out) = (nt(), Outbox::new(16));
        let mut req = dgram((CLIENT, 4000), (R[0], 11211), 9, b"set k 0 0 1\r\nx\r\n");
        assert_eq!(n.process(&at(0, &out), &mut req.pkt()), Verdict::Continue, "the request goes on to the first");
        let copies = sent(&out);
        assert_eq!(copies.len(), 2);
        for (c, r) in copies.iter().zip(["10.0.0.3:11211", "10.0.0.4:11211"]) {
            assert_eq!((c.0.as_str(), c.1.as_str(), &c.2[..]), (r, "10.0.0.1:4000", &b"set k 0 0 1\r\nx\r\n"[..]));
        }
        assert!(out.is_waiting());
        for r in [1, 0] {
            let mut a = answer(r, 9, b"STORED\r\n");
            assert_eq!(n.process(&at(1, &out), &mut a.pkt()), Verdict::Drop(DropReason::KvAnswerHeld), "no early ack");
        }
        let mut last = answer(2, 9, b"STORED\r\n");
        assert_eq!(n.process(&at(2, &out), &mut last.pkt()), Verdict::Continue);
        assert_eq!(
            text_of(&last),
            ("10.0.0.1:4000".into(), "10.0.0.2:11211".into(), b"STORED\r\n".to_vec()),
            "in the first replica's name"
        );
        assert!(last.checksums_ok());
        assert!(!out.is_waiting());
        assert_eq!(n.stats().acked.load(Ordering::Relaxed), 1);
    }

    /// A write as Debian's memcaslap sends it — reserved header bytes set, a key starting with
    /// control bytes — is one memcached stores: it is replicated like any other, not passed to
    /// the first replica alone.
    #[test]
    fn a_write_with_reserved_bytes_and_control_bytes_in_its_key_is_replicated() {
        let (mut n, out) = (nt(), Outbox::new(16));
        let mut req = dgram((CLIENT, 4000), (R[0], 11211), 9, b"set \x10\x10k 0 0 1\r\nx\r\n");
        let pay = Udp4::of(&req.pkt()).unwrap().pay;
        req.buf[pay + 6] = 1;
        n.process(&at(0, &out), &mut req.pkt());
        assert_eq!(sent(&out).len(), 2, "copies to the other two replicas");
        assert!(out.is_waiting(), "the client's answer waits for all three");
    }

    #[test]
    fn replicas_that_disagree_give_the_client_an_error() {
        let (mut n, out) = (nt(), Outbox::new(16));
        n.process(&at(0, &out), &mut dgram((CLIENT, 4000), (R[0], 11211), 1, b"add k 0 0 1\r\nx\r\n").pkt());
        n.process(&at(1, &out), &mut answer(0, 1, b"STORED\r\n").pkt());
        let mut a = answer(1, 1, b"NOT_STORED\r\n");
        assert_eq!(n.process(&at(1, &out), &mut a.pkt()), Verdict::Continue);
        assert_eq!(text_of(&a).2, DISAGREE);
        assert!(a.checksums_ok());
        // The third's answer, late: the client was answered; it goes no further.
        let mut late = answer(2, 1, b"STORED\r\n");
        assert_eq!(n.process(&at(2, &out), &mut late.pkt()), Verdict::Drop(DropReason::KvAnswerLate));
    }

    #[test]
    fn a_silent_replica_is_retried_then_the_client_gets_an_error() {
        let (mut n, out) = (nt(), Outbox::new(16));
        n.process(&at(0, &out), &mut dgram((CLIENT, 4000), (R[0], 11211), 5, b"set k 0 0 1\r\nx\r\n").pkt());
        sent(&out);
        n.process(&at(1, &out), &mut answer(0, 5, b"STORED\r\n").pkt());
        n.process(&at(1, &out), &mut answer(1, 5, b"STORED\r\n").pkt());
        n.tick(&at(50, &out));
        assert!(sent(&out).is_empty(), "not yet");
        n.tick(&at(100, &out));
        let again = sent(&out);
        assert_eq!(again.len(), 1, "only the silent one: {again:?}");
        assert_eq!(again[0].0, "10.0.0.4:11211");
        n.tick(&at(200, &out));
        let err = sent(&out);
        assert_eq!(err, [("10.0.0.1:4000".into(), "10.0.0.2:11211".into(), TIMEOUT.to_vec())]);
        assert_eq!(n.stats().timeouts.load(Ordering::Relaxed), 1);
        assert!(!out.is_waiting());
        // A write that must not be repeated (incr) is not retried.
        n.process(&at(300, &out), &mut dgram((CLIENT, 4000), (R[0], 11211), 6, b"incr n 1\r\n").pkt());
        sent(&out);
        n.tick(&at(400, &out));
        assert_eq!(sent(&out).iter().map(|s| s.2.clone()).collect::<Vec<_>>(), [TIMEOUT.to_vec()]);
    }

    #[test]
    fn reads_go_round_robin_and_come_back_in_the_first_replicas_name() {
        let (mut n, out) = (nt(), Outbox::new(16));
        let mut dsts = vec![];
        for id in 0..3 {
            let mut g = dgram((CLIENT, 4000), (R[0], 11211), id, b"get k\r\n");
            n.process(&at(0, &out), &mut g.pkt());
            assert!(g.checksums_ok());
            assert_eq!(g.meta.inner, Some(g.reparse()), "the descriptor follows the rewrite (egress routes by it)");
            dsts.push(text_of(&g).0);
        }
        assert_eq!(dsts, ["10.0.0.2:11211", "10.0.0.3:11211", "10.0.0.4:11211"]);
        let mut a = answer(2, 2, b"END\r\n");
        assert_eq!(n.process(&at(1, &out), &mut a.pkt()), Verdict::Continue);
        assert_eq!(text_of(&a).1, "10.0.0.2:11211");
        assert_eq!(a.meta.inner, Some(a.reparse()));
        assert!(sent(&out).is_empty(), "reads are not copied");
    }

    /// A write in IP fragments: every fragment is copied to the other replicas (their
    /// checksums right for their new address), and the answers are held until all three.
    #[test]
    fn a_fragmented_write_is_copied_fragment_by_fragment_and_waits_for_all() {
        let (mut n, out) = (nt(), Outbox::new(16));
        let text = b"set big 0 0 3000\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
        let mut first = dgram((CLIENT, 4000), (R[0], 11211), 3, text);
        let u = Udp4::of(&first.pkt()).unwrap();
        let l3 = u.l3;
        let whole_sum = u16::from_be_bytes([first.buf[u.l4 + 6], first.buf[u.l4 + 7]]);
        first.buf[l3 + 6] |= 0x20; // more fragments
        udp::finish(&mut first.buf, &u, u.end);
        first.buf[u.l4 + 6..u.l4 + 8].copy_from_slice(&whole_sum.to_be_bytes());
        first.meta.inner = None;
        let mut later = dgram((CLIENT, 4000), (R[0], 11211), 3, b"yyyyyyyy");
        later.buf[l3 + 6] = 0x00;
        later.buf[l3 + 7] = 0xb9; // offset 185 × 8
        later.meta.inner = None;
        assert_eq!(n.process(&at(0, &out), &mut first.pkt()), Verdict::Continue);
        assert_eq!(n.process(&at(0, &out), &mut later.pkt()), Verdict::Continue);
        let mut copies = vec![];
        out.drain(|d, _, _| copies.push(d.to_vec()));
        assert_eq!(copies.len(), 4, "two fragments to two replicas");
        for (c, (r, frag)) in copies.iter().zip([(R[1], 0), (R[2], 0), (R[1], 1), (R[2], 1)]) {
            let ip = &c[8 + 14..];
            assert_eq!(std::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]).to_string(), r);
            assert_eq!(snic_wire::checksum::checksum(&ip[..20]), 0, "IP header checksum");
            if frag == 0 {
                // The UDP checksum of the whole datagram, as it would be to the new address.
                let mut whole = c.clone();
                whole[8 + 14 + 6] = 0;
                let mut want = whole.clone();
                let wu = Udp4 { eth: 8, l3: 22, l4: 42, pay: 50, end: whole.len() };
                udp::finish(&mut want, &wu, wu.end);
                assert_eq!(&c[42 + 6..42 + 8], &want[42 + 6..42 + 8]);
            }
        }
        for r in [0, 1] {
            assert_eq!(n.process(&at(1, &out), &mut answer(r, 3, b"STORED\r\n").pkt()), Verdict::Drop(DropReason::KvAnswerHeld));
        }
        assert_eq!(n.process(&at(1, &out), &mut answer(2, 3, b"STORED\r\n").pkt()), Verdict::Continue);
        // Not retried: a silent replica means an error at the timeout.
        n.process(&at(2, &out), &mut first.pkt());
        out.drain(|_, _, _| {});
        n.tick(&at(200, &out));
        let mut texts = vec![];
        out.drain(|d, _, _| {
            let l = parse_inner(&d[8..]).unwrap();
            texts.push(d[8 + l.l4_off as usize + 8 + FRAME_LEN..8 + l.l3_end as usize].to_vec());
        });
        assert_eq!(texts, [TIMEOUT.to_vec()], "the error is a whole datagram the client can read");
    }

    #[derive(Debug, Clone)]
    enum Event {
        /// Replica `j` answers: STORED, or something else.
        Answer(usize, bool),
        /// Time passes, ms.
        Tick(u64),
    }

    fn event() -> impl proptest::strategy::Strategy<Value = Event> {
        use proptest::prelude::*;
        prop_oneof![(0usize..3, proptest::bool::weighted(0.9)).prop_map(|(j, ok)| Event::Answer(j, ok)), (1u64..150).prop_map(Event::Tick)]
    }

    proptest::proptest! {
        /// Whatever the replicas answer, how often, how late: the client gets exactly one answer
        /// to a write once its time is up, and `STORED` only if every replica had answered
        /// `STORED` (duplicates, retries' answers, late answers and timeouts in any order).
        #[test]
        fn a_write_gets_one_answer_and_an_ack_only_after_all(events in proptest::collection::vec(event(), 0..30)) {
            let (mut n, out) = (nt(), Outbox::new(64));
            let mut now = 0;
            n.process(&at(now, &out), &mut dgram((CLIENT, 4000), (R[0], 11211), 7, b"set k 0 0 1\r\nx\r\n").pkt());
            out.drain(|_, _, _| {});
            let (mut to_client, mut stored_by) = (vec![], [false; 3]);
            let take = |out: &Outbox, to_client: &mut Vec<Vec<u8>>| out.drain(|d, _, _| {
                let l = parse_inner(&d[8..]).unwrap();
                if l.key.dst.to_string() == CLIENT {
                    to_client.push(d[8 + l.l4_off as usize + 8 + FRAME_LEN..8 + l.l3_end as usize].to_vec());
                }
            });
            for e in events.iter().chain([Event::Tick(10_000), Event::Tick(10_000)].iter()) {
                match *e {
                    Event::Answer(j, ok) => {
                        let mut a = answer(j, 7, if ok { b"STORED\r\n" } else { b"NOT_STORED\r\n" });
                        if n.process(&at(now, &out), &mut a.pkt()) == Verdict::Continue {
                            let t = text_of(&a);
                            proptest::prop_assert_eq!(&t.1, "10.0.0.2:11211");
                            to_client.push(t.2);
                        }
                        stored_by[j] |= ok;
                        if to_client.last().is_some_and(|t| t == b"STORED\r\n") {
                            proptest::prop_assert!(stored_by.iter().all(|s| *s), "acknowledged before all: {stored_by:?}");
                        }
                    }
                    Event::Tick(ms) => {
                        now += ms;
                        n.tick(&at(now, &out));
                    }
                }
                take(&out, &mut to_client);
            }
            proptest::prop_assert_eq!(to_client.len(), 1, "answers to the client: {:?}", to_client);
            proptest::prop_assert!(!out.is_waiting());
        }
    }

    /// A client's request ids wrap: a read under the id of a write answered long ago is
    /// answered, not taken for that write's late answer.
    #[test]
    fn a_new_request_under_an_old_id_is_not_late() {
        let (mut n, out) = (nt(), Outbox::new(16));
        n.process(&at(0, &out), &mut dgram((CLIENT, 4000), (R[0], 11211), 5, b"delete k\r\n").pkt());
        for r in 0..3 {
            n.process(&at(1, &out), &mut answer(r, 5, b"DELETED\r\n").pkt());
        }
        assert_eq!(n.process(&at(2, &out), &mut answer(1, 5, b"DELETED\r\n").pkt()), Verdict::Drop(DropReason::KvAnswerLate));
        n.process(&at(3, &out), &mut dgram((CLIENT, 4000), (R[0], 11211), 5, b"get k\r\n").pkt());
        assert_eq!(n.process(&at(4, &out), &mut answer(0, 5, b"END\r\n").pkt()), Verdict::Continue);
    }

    #[test]
    fn too_many_waiting_writes_are_refused_at_once() {
        let (mut n, out) = (nt(), Outbox::new(64));
        for id in 0..4 {
            n.process(&at(0, &out), &mut dgram((CLIENT, 4000), (R[0], 11211), id, b"delete k\r\n").pkt());
        }
        let mut fifth = dgram((CLIENT, 4000), (R[0], 11211), 4, b"delete k\r\n");
        assert_eq!(n.process(&at(0, &out), &mut fifth.pkt()), Verdict::Continue);
        assert_eq!(text_of(&fifth), ("10.0.0.1:4000".into(), "10.0.0.2:11211".into(), BUSY.to_vec()), "answered here");
        assert_eq!(n.stats().refused.load(Ordering::Relaxed), 1);
    }
}
