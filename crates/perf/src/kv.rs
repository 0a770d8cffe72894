//! A memcached client over UDP, and the YCSB-style driver of `snic bench kv` (no YCSB binding
//! speaks memcached over UDP). The client frames each request with memcached's 8-byte UDP
//! header and puts a response's datagrams back together by sequence number; the driver keeps
//! a fixed number of requests outstanding on one socket (closed loop) and times each.

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use snic_nt::kv::proto::{self, Frame, FRAME_LEN};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// A response being put back together.
#[derive(Default)]
struct Partial {
    parts: Vec<Option<Vec<u8>>>,
    got: usize,
}

impl Partial {
    /// Takes datagram `f` carrying `text`; the whole response once every part is in.
    fn take(&mut self, f: Frame, text: &[u8]) -> Option<Vec<u8>> {
        if self.parts.len() != f.total as usize {
            *self = Partial { parts: vec![None; f.total as usize], got: 0 };
        }
        let slot = &mut self.parts[f.seq as usize];
        if slot.is_none() {
            *slot = Some(text.to_vec());
            self.got += 1;
        }
        (self.got == self.parts.len()).then(|| self.parts.drain(..).flatten().flatten().collect())
    }
}

/// A memcached UDP client: one request at a time ([`Client::call`]) or many in flight
/// ([`Client::send`] and [`Client::recv`]).
pub struct Client {
    sock: UdpSocket,
    server: SocketAddr,
    next_id: u16,
    partial: HashMap<u16, Partial>,
    /// Reads in flight and the text of their answer so far: memcached 1.6 answers a read of
    /// several keys with one message per key (each `seq 0 of 1`), the last ending in `END`.
    reads: HashMap<u16, Vec<u8>>,
    buf: Vec<u8>,
    /// UDP payload bytes sent and received.
    pub bytes: u64,
}

impl Client {
    /// A client of `server` on `sock` (bound; any namespace).
    pub fn new(sock: UdpSocket, server: SocketAddr) -> Client {
        Client { sock, server, next_id: 0, partial: HashMap::new(), reads: HashMap::new(), buf: vec![0u8; 65536], bytes: 0 }
    }

    /// A client of `server` on a new socket bound to any local port.
    pub fn connect(server: SocketAddr) -> anyhow::Result<Client> {
        let sock = UdpSocket::bind(if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })?;
        Ok(Client::new(sock, server))
    }

    /// Sends `text` as one request; returns its id.
    pub fn send(&mut self, text: &[u8]) -> anyhow::Result<u16> {
        self.send_to(text, self.server)
    }

    /// Sends `text` as one request to `server` (not the client's own: a client that writes its
    /// replicas itself); returns its id.
    pub fn send_to(&mut self, text: &[u8], server: SocketAddr) -> anyhow::Result<u16> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut d = vec![0u8; FRAME_LEN + text.len()];
        Frame { id, seq: 0, total: 1 }.emit(&mut d);
        d[FRAME_LEN..].copy_from_slice(text);
        self.sock.send_to(&d, server).context("sending to the server")?;
        self.bytes += d.len() as u64;
        self.partial.remove(&id);
        if text.starts_with(b"get ") || text.starts_with(b"gets ") {
            self.reads.insert(id, Vec::new());
        } else {
            self.reads.remove(&id);
        }
        Ok(id)
    }

    /// The next whole response within `timeout`: its id and text; `None` on timeout.
    pub fn recv(&mut self, timeout: Duration) -> anyhow::Result<Option<(u16, Vec<u8>)>> {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.sock.set_read_timeout(Some(left))?;
            let n = match self.sock.recv_from(&mut self.buf) {
                Ok((n, _)) => n,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            self.bytes += n as u64;
            let Some((f, text)) = Frame::parse(&self.buf[..n]) else { continue };
            let message = if f.total == 1 {
                text.to_vec()
            } else {
                match self.partial.entry(f.id).or_default().take(f, text) {
                    Some(whole) => {
                        self.partial.remove(&f.id);
                        whole
                    }
                    None => continue,
                }
            };
            let Some(so_far) = self.reads.get_mut(&f.id) else { return Ok(Some((f.id, message))) };
            so_far.extend_from_slice(&message);
            let done = so_far.ends_with(b"END\r\n")
                || so_far.ends_with(b"ERROR\r\n")
                || so_far.starts_with(b"CLIENT_ERROR")
                || so_far.starts_with(b"SERVER_ERROR");
            if done {
                let whole = self.reads.remove(&f.id).unwrap_or_default();
                return Ok(Some((f.id, whole)));
            }
        }
    }

    /// Sends `text` and waits up to `timeout` for its response (other ids are skipped).
    pub fn call(&mut self, text: &[u8], timeout: Duration) -> anyhow::Result<Vec<u8>> {
        let id = self.send(text)?;
        let until = Instant::now() + timeout;
        loop {
            match self.recv(until.saturating_duration_since(Instant::now()))? {
                Some((i, t)) if i == id => return Ok(t),
                Some(_) => {}
                None => {
                    bail!("no answer from {} within {timeout:?} to {:?}", self.server, String::from_utf8_lossy(&text[..text.len().min(40)]))
                }
            }
        }
    }

    /// `get key`: its flags and value, `None` if the server has none.
    pub fn get(&mut self, key: &[u8]) -> anyhow::Result<Option<(u32, Vec<u8>)>> {
        let mut req = b"get ".to_vec();
        req.extend_from_slice(key);
        req.extend_from_slice(b"\r\n");
        let text = self.call(&req, Duration::from_secs(1))?;
        let mut found = None;
        proto::values(&text, |v| found = Some((v.flags, v.data.to_vec())))
            .map_err(|e| anyhow::anyhow!("malformed answer to get ({e:?}): {:?}", String::from_utf8_lossy(&text)))?;
        Ok(found)
    }

    /// `set key flags 0 len`: the server's answer line (`STORED` when it stored it).
    pub fn set(&mut self, key: &[u8], flags: u32, value: &[u8]) -> anyhow::Result<String> {
        let text = self.call(&set_request(key, flags, value), Duration::from_secs(1))?;
        Ok(String::from_utf8_lossy(&text).trim_end().to_string())
    }

    /// The server's `stats`, name → value.
    pub fn stats(&mut self) -> anyhow::Result<HashMap<String, String>> {
        let text = self.call(b"stats\r\n", Duration::from_secs(1))?;
        Ok(String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("STAT ")?.splitn(2, ' ');
                Some((w.next()?.to_string(), w.next()?.to_string()))
            })
            .collect())
    }
}

/// The text of `set key flags 0 len\r\nvalue\r\n`.
pub fn set_request(key: &[u8], flags: u32, value: &[u8]) -> Vec<u8> {
    let mut req = format!("set {} {flags} 0 {}\r\n", String::from_utf8_lossy(key), value.len()).into_bytes();
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    req
}

/// A YCSB core workload's read share: A 50/50, B 95/5, C read only.
pub fn read_share(workload: char) -> anyhow::Result<f64> {
    Ok(match workload {
        'A' => 0.5,
        'B' => 0.95,
        'C' => 1.0,
        w => bail!("workload {w}: A, B or C"),
    })
}

/// What a run of the driver measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    /// Operations completed per second.
    pub ops_per_s: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Operations completed.
    pub ops: u64,
    /// Requests never answered (re-sent as new operations).
    pub lost: u64,
    /// Reads completed.
    pub reads: u64,
    /// Answers that were errors (`SERVER_ERROR`, `CLIENT_ERROR`, `ERROR`, `NOT_STORED`).
    pub errors: u64,
    /// Reads whose key the server did not have (evicted there, or never loaded).
    pub read_misses: u64,
    /// UDP payload bytes the client sent and received per operation.
    pub client_bytes_per_op: f64,
}

/// The driver's workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Keys `key0..keyN`.
    pub keys: u64,
    /// Zipfian constant (YCSB: 0.99).
    pub zipf: f64,
    /// Share of operations that read.
    pub read_share: f64,
    /// Value sizes, uniform in this range (bytes).
    pub value_min: usize,
    /// See `value_min`.
    pub value_max: usize,
    /// Seed of the operation stream.
    pub seed: u64,
}

/// The run phase's operations: reads and writes in the workload's mix, keys drawn zipfian and
/// scrambled over the key space (as YCSB's scrambled zipfian: popular keys spread out).
pub struct Ops {
    /// Draws values' sizes too.
    pub rng: rand::rngs::StdRng,
    zipf: Zipf<f64>,
    keys: u64,
    read_share: f64,
}

impl Ops {
    /// The stream of `w`, from its seed.
    pub fn new(w: &Workload) -> anyhow::Result<Ops> {
        Ok(Ops {
            rng: rand::rngs::StdRng::seed_from_u64(w.seed),
            zipf: Zipf::new(w.keys as f64, w.zipf).context("zipf parameters")?,
            keys: w.keys,
            read_share: w.read_share,
        })
    }

    /// The next operation: a read or not, and its key.
    pub fn draw(&mut self) -> (bool, u64) {
        let k = (self.zipf.sample(&mut self.rng) as u64 - 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) % self.keys;
        (self.rng.random_bool(self.read_share), k)
    }
}

/// Key `i`'s name.
pub fn key(i: u64) -> Vec<u8> {
    format!("key{i}").into_bytes()
}

/// A value for key `i` of the size the workload draws; its first bytes name the key and the
/// version, so a test can tell which write it reads.
pub fn value(rng: &mut impl Rng, w: &Workload, i: u64) -> Vec<u8> {
    let n = rng.random_range(w.value_min..=w.value_max);
    let mut v = format!("{i}:").into_bytes();
    v.resize(n.max(v.len()), b'v');
    v
}

/// Load phase: every key set once, `window` requests in flight. Returns sets acknowledged.
pub fn load(c: &mut Client, w: &Workload, window: usize) -> anyhow::Result<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(w.seed ^ 0x10ad);
    let mut next = 0u64;
    let mut inflight: HashMap<u16, (u64, Instant)> = HashMap::new();
    let mut stored = 0u64;
    let deadline = Instant::now() + Duration::from_secs(600);
    while next < w.keys || !inflight.is_empty() {
        while inflight.len() < window && next < w.keys {
            let v = value(&mut rng, w, next);
            let id = c.send(&set_request(&key(next), 0, &v))?;
            inflight.insert(id, (next, Instant::now()));
            next += 1;
        }
        if Instant::now() > deadline {
            bail!("load phase: not done within 10 minutes ({stored} of {} stored)", w.keys);
        }
        match c.recv(Duration::from_millis(200))? {
            Some((id, text)) => {
                if inflight.remove(&id).is_some() && text == b"STORED\r\n" {
                    stored += 1;
                }
            }
            None => {
                // Lost: set again (bounded by the deadline above).
                let lost: Vec<_> = inflight.drain().map(|(_, (k, _))| k).collect();
                for k in lost {
                    let v = value(&mut rng, w, k);
                    let id = c.send(&set_request(&key(k), 0, &v))?;
                    inflight.insert(id, (k, Instant::now()));
                }
            }
        }
    }
    Ok(stored)
}

/// An operation in flight: a read, or a write waiting for this many answers.
struct InFlight {
    read: bool,
    at: Instant,
    waiting: usize,
    error: bool,
}

/// Run phase: `seconds` (at most `max_ops` operations) of the workload, `window` operations in
/// flight, each timed from send to its whole answer. With `replicas` (the client writes its
/// copies itself), a write goes to every replica and is done when all answered, a read goes to
/// one in turn; without, everything goes to the client's server.
pub fn run(c: &mut Client, w: &Workload, window: usize, seconds: f64, max_ops: u64, replicas: &[SocketAddr]) -> anyhow::Result<RunReport> {
    let mut stream = Ops::new(w)?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3)?;
    // Request id → the operation's slot; slots in flight.
    let mut ids: HashMap<u16, usize> = HashMap::new();
    let mut slots: Vec<Option<InFlight>> = (0..window).map(|_| None).collect();
    let (mut ops, mut lost, mut misses, mut issued, mut reads, mut errors) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut next_read = 0usize;
    let bytes0 = c.bytes;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(seconds);
    loop {
        let now = Instant::now();
        while now < end && issued < max_ops {
            let Some(slot) = slots.iter().position(Option::is_none) else { break };
            let (read, k) = stream.draw();
            let at = Instant::now();
            if read {
                let mut r = b"get ".to_vec();
                r.extend_from_slice(&key(k));
                r.extend_from_slice(b"\r\n");
                let id = match replicas.len() {
                    0 => c.send(&r)?,
                    n => {
                        next_read += 1;
                        c.send_to(&r, replicas[next_read % n])?
                    }
                };
                ids.insert(id, slot);
                slots[slot] = Some(InFlight { read, at, waiting: 1, error: false });
            } else {
                let req = set_request(&key(k), 0, &value(&mut stream.rng, w, k));
                if replicas.is_empty() {
                    ids.insert(c.send(&req)?, slot);
                } else {
                    for r in replicas {
                        ids.insert(c.send_to(&req, *r)?, slot);
                    }
                }
                slots[slot] = Some(InFlight { read, at, waiting: replicas.len().max(1), error: false });
            }
            issued += 1;
        }
        if ids.is_empty() {
            break;
        }
        match c.recv(Duration::from_millis(500))? {
            Some((id, text)) => {
                let Some(slot) = ids.remove(&id) else { continue };
                let Some(op) = slots[slot].as_mut() else { continue };
                op.waiting -= 1;
                op.error |= text.ends_with(b"ERROR\r\n")
                    || text.starts_with(b"SERVER_ERROR")
                    || text.starts_with(b"CLIENT_ERROR")
                    || text == b"NOT_STORED\r\n";
                if op.read && text == b"END\r\n" {
                    misses += 1;
                }
                if op.waiting == 0 {
                    hist.saturating_record(op.at.elapsed().as_micros().max(1) as u64);
                    ops += 1;
                    reads += op.read as u64;
                    errors += op.error as u64;
                    slots[slot] = None;
                }
            }
            None => {
                lost += slots.iter().flatten().count() as u64;
                ids.clear();
                slots.iter_mut().for_each(|s| *s = None);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(RunReport {
        ops_per_s: ops as f64 / secs,
        p50_us: hist.value_at_quantile(0.5) as f64,
        p99_us: hist.value_at_quantile(0.99) as f64,
        ops,
        lost,
        reads,
        errors,
        read_misses: misses,
        client_bytes_per_op: (c.bytes - bytes0) as f64 / ops.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_in_several_datagrams_is_put_back_in_order() {
        let mut p = Partial::default();
        let f = |seq| Frame { id: 1, seq, total: 3 };
        assert_eq!(p.take(f(2), b"c"), None);
        assert_eq!(p.take(f(0), b"a"), None);
        assert_eq!(p.take(f(0), b"a"), None, "a duplicate counts once");
        assert_eq!(p.take(f(1), b"b"), Some(b"abc".to_vec()));
    }

    #[test]
    fn workloads_are_ycsbs() {
        assert_eq!(read_share('B').unwrap(), 0.95);
        assert!(read_share('D').is_err());
        assert_eq!(set_request(b"k", 3, b"ab"), b"set k 3 0 2\r\nab\r\n");
    }
}
