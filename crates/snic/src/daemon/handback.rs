//! Moving a chain home with its NTs' state, between daemons (docs/pool.md, "Moving back").
//!
//! The home node asks the peer for its DAG back over TCP, on the peer's pool address (the same
//! address and port as the pool's UDP socket): one connection per move. The request names how
//! many packets home sent the DAG: redirected packets still on the way (UDP, another path than
//! the request's) arrive and run there first, and the peer waits for them at most
//! [`FENCE_WAIT`](snic_core::pool::redirect::FENCE_WAIT). The peer then stops the DAG
//! — what it had received runs to the end — and answers on that connection with the state of
//! its chains' NTs ([`snic_dataplane::node::ChainState`]), which can be megabytes (a NAT's
//! flows): too much for a pool datagram, hence TCP.
//!
//! Both messages are sealed as pool datagrams are (`SNP`, version, kind 5 or 6, the payload in
//! postcard, HMAC-SHA256 under the pool secret), each framed by its length (u32 LE). The
//! request carries a random nonce and its wall-clock time; the peer refuses a request older
//! than [`FRESH`] or whose nonce it has seen (a replay), and the answer carries the nonce back,
//! so that an answer cannot be replayed into another move. Anything that does not verify is
//! dropped and logged, and the connection closed.

use super::pool::{open, reachable, seal};
use super::worker::DpLink;
use anyhow::Context;
use ring::hmac;
use serde::{Deserialize, Serialize};
use snic_core::pool::message::{self, Header};
use snic_dataplane::backend::Waker;
use snic_dataplane::node::ChainState;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Kinds of sealed message: a request for a DAG back, the answer with its state.
const RETURN: u8 = 5;
const STATE: u8 = 6;
/// Largest request, and largest answer, accepted.
const MAX_REQUEST: usize = 4096;
const MAX_STATE: usize = 256 << 20;
/// How long a peer may take to stop a DAG and send its state (its instances finish what they
/// have first).
pub const RETURN_TIMEOUT: Duration = Duration::from_secs(10);
/// Connecting, and each write.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// A request older than this (or from further in the future: clocks differ) is refused.
const FRESH: Duration = Duration::from_secs(60);
/// Requests served at once, at most.
const MAX_SERVING: usize = 8;
/// Nonces remembered (against replays within [`FRESH`]).
const NONCES: usize = 4096;

/// The DAG `hosted` back, for the home node whose data address is `home`.
#[derive(Debug, Serialize, Deserialize)]
struct ReturnMsg {
    nonce: u64,
    home: SocketAddr,
    hosted: u32,
    /// Packets home sent the DAG, in all: the peer gives it back once they have arrived.
    sent: u64,
    sent_ms: u64,
}

/// The answer: the state of the DAG's chains, or why not.
#[derive(Serialize, Deserialize)]
struct StateMsg {
    nonce: u64,
    result: Returned,
}

/// What a peer gives back: the state of the DAG's chains, or why not.
pub type Returned = Result<Vec<ChainState>, String>;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn write_frame(s: &mut impl Write, key: &hmac::Key, kind: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(payload.len() + 64);
    // (Their payloads are the same in every version spoken: sealed in the oldest.)
    seal(key, Header { version: message::OLDEST, kind, gen: 0, counter: 0 }, payload, &mut buf);
    s.write_all(&(buf.len() as u32).to_le_bytes())?;
    s.write_all(&buf)
}

/// Reads one frame of at most `max` bytes and opens it as a message of `kind`: its payload.
fn read_frame(s: &mut impl Read, key: &hmac::Key, kind: u8, max: usize) -> Result<Vec<u8>, String> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).map_err(|e| format!("reading: {e}"))?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(format!("a message of {len} bytes, more than {max}"));
    }
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).map_err(|e| format!("reading: {e}"))?;
    match open(key, &buf) {
        Ok(o) if o.header.kind == kind => Ok(o.payload.to_vec()),
        Ok(o) => Err(format!("a message of kind {}, not {kind}", o.header.kind)),
        Err(e) => Err(format!("refused: {e:?}")),
    }
}

/// Reads a request to give a DAG back and checks it: sealed under the pool's key, fresh at
/// `now_ms`, its nonce not seen before (it is remembered).
fn read_request(s: &mut impl Read, key: &hmac::Key, seen: &Mutex<VecDeque<u64>>, now_ms: u64) -> Result<ReturnMsg, String> {
    let m: ReturnMsg =
        read_frame(s, key, RETURN, MAX_REQUEST).and_then(|p| postcard::from_bytes(&p).map_err(|e| format!("a malformed request: {e}")))?;
    if now_ms.abs_diff(m.sent_ms) > FRESH.as_millis() as u64 {
        return Err("a stale request".into());
    }
    let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if seen.contains(&m.nonce) {
        return Err("a replayed request".into());
    }
    if seen.len() == NONCES {
        seen.pop_front();
    }
    seen.push_back(m.nonce);
    Ok(m)
}

/// Asks the peer at pool address `peer` for DAG `hosted` back (this node's data address:
/// `home`; it sent the DAG `sent` packets), without waiting: the answer comes on the receiver,
/// within [`RETURN_TIMEOUT`] and a few seconds, and `wake` is woken then.
pub fn fetch(
    key: hmac::Key,
    home: SocketAddr,
    peer: SocketAddr,
    (hosted, sent): (u32, u64),
    wake: Option<Waker>,
) -> mpsc::Receiver<Returned> {
    let (tx, rx) = mpsc::channel();
    let ask = move || -> Returned {
        let mut s = TcpStream::connect_timeout(&peer, IO_TIMEOUT).map_err(|e| format!("connecting to {peer}: {e}"))?;
        s.set_read_timeout(Some(RETURN_TIMEOUT)).and_then(|_| s.set_write_timeout(Some(IO_TIMEOUT))).map_err(|e| e.to_string())?;
        let mut nonce = [0u8; 8];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce).map_err(|_| "no random source")?;
        let nonce = u64::from_le_bytes(nonce);
        let req = postcard::to_allocvec(&ReturnMsg { nonce, home, hosted, sent, sent_ms: now_ms() }).map_err(|e| e.to_string())?;
        write_frame(&mut s, &key, RETURN, &req).map_err(|e| format!("sending to {peer}: {e}"))?;
        let payload = read_frame(&mut s, &key, STATE, MAX_STATE)?;
        let m: StateMsg = postcard::from_bytes(&payload).map_err(|e| format!("a malformed answer: {e}"))?;
        if m.nonce != nonce {
            return Err("an answer to another request".into());
        }
        m.result
    };
    let spawned = std::thread::Builder::new().name("snic-fetch".into()).spawn(move || {
        let _ = tx.send(ask());
        if let Some(w) = wake {
            w.wake();
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "pool: cannot start a thread to move a chain home");
    }
    rx
}

/// Binds the pool's address for UDP (gossip, control) and TCP (chains moving home) on one
/// port. With port 0 the kernel picks a free UDP port, whose TCP twin may be taken by another
/// process: then another UDP port is tried, a bounded number of times.
pub fn bind_pool(listen: SocketAddr) -> anyhow::Result<(std::net::UdpSocket, TcpListener)> {
    const TRIES: usize = 32;
    for _ in 0..TRIES {
        let udp = std::net::UdpSocket::bind(listen).with_context(|| format!("binding pool.listen {listen} (UDP)"))?;
        let addr = udp.local_addr()?;
        match TcpListener::bind(addr) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if listen.port() == 0 && e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e).with_context(|| format!("binding pool.listen {addr} (TCP, to move chains home)")),
        }
    }
    anyhow::bail!("binding pool.listen {listen}: no port free for both UDP and TCP in {TRIES} tries")
}

/// The peer's side: a TCP listener on the pool address that gives DAGs back with their state.
pub struct StateServer {
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
    join: Option<JoinHandle<()>>,
}

impl StateServer {
    /// Serves on `listener` (the pool's address, TCP: see [`bind_pool`]).
    pub fn start(listener: TcpListener, key: hmac::Key, link: DpLink) -> anyhow::Result<StateServer> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (s, seen, serving) = (stop.clone(), Arc::new(Mutex::new(VecDeque::new())), Arc::new(AtomicUsize::new(0)));
        let join = std::thread::Builder::new().name("snic-state".into()).spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                if serving.load(Ordering::Relaxed) >= MAX_SERVING {
                    tracing::warn!("pool: too many chains moving home at once; refusing one");
                    continue;
                }
                serving.fetch_add(1, Ordering::Relaxed);
                let (key, link, seen, serving) = (key.clone(), link.clone(), seen.clone(), serving.clone());
                let spawned = std::thread::Builder::new().name("snic-give-back".into()).spawn(move || {
                    serve(conn, &key, &link, &seen);
                    serving.fetch_sub(1, Ordering::Relaxed);
                });
                if spawned.is_err() {
                    tracing::warn!("pool: cannot start a thread to give a chain back");
                }
            }
        })?;
        Ok(StateServer { stop, addr, join: Some(join) })
    }

    /// Stops listening.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A connection ends the listener's wait.
        let _ = TcpStream::connect_timeout(&reachable(self.addr, std::net::Ipv4Addr::LOCALHOST.into()), IO_TIMEOUT);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// One request: checked, then the data plane gives the DAG back and its state goes to the
/// home node.
fn serve(mut conn: TcpStream, key: &hmac::Key, link: &DpLink, seen: &Mutex<VecDeque<u64>>) {
    let from = conn.peer_addr().ok();
    let _ = conn.set_read_timeout(Some(IO_TIMEOUT));
    let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
    let m = match read_request(&mut conn, key, seen, now_ms()) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(from = ?from, reason = e.as_str(), "pool: refused a request to give a DAG back");
            return;
        }
    };
    let home = from.map_or(m.home, |f| reachable(m.home, f.ip()));
    let result = link.give_back(home, m.hosted, m.sent);
    match &result {
        Ok(states) => {
            tracing::info!(home = %home, hosted = m.hosted, chains = states.len(), "pool: gave a DAG back to its home node, with its state")
        }
        Err(e) => tracing::warn!(home = %home, hosted = m.hosted, reason = e.as_str(), "pool: could not give a DAG back"),
    }
    let sent = postcard::to_allocvec(&StateMsg { nonce: m.nonce, result })
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|bytes| write_frame(&mut conn, key, STATE, &bytes));
    if let Err(e) = sent {
        tracing::warn!(home = %home, error = %e, "pool: sending a DAG's state home");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(key: &hmac::Key, nonce: u64, sent_ms: u64) -> Vec<u8> {
        let m = ReturnMsg { nonce, home: "127.0.0.1:4789".parse().unwrap(), hosted: 3, sent: 40, sent_ms };
        let mut out = Vec::new();
        write_frame(&mut out, key, RETURN, &postcard::to_allocvec(&m).unwrap()).unwrap();
        out
    }

    #[test]
    fn a_request_is_taken_only_sealed_under_the_pool_key_fresh_and_once() {
        let key = hmac::Key::new(hmac::HMAC_SHA256, b"the pool secret, 32 bytes long..");
        let other = hmac::Key::new(hmac::HMAC_SHA256, b"another secret, also 32 bytes...");
        let seen = Mutex::new(VecDeque::new());
        let now = 1_800_000_000_000;
        let ok = read_request(&mut &request(&key, 7, now - 1_000)[..], &key, &seen, now).unwrap();
        assert_eq!((ok.nonce, ok.hosted, ok.sent), (7, 3, 40));
        let refused = |bytes: Vec<u8>| read_request(&mut &bytes[..], &key, &seen, now).unwrap_err();
        assert!(refused(request(&key, 7, now)).contains("replayed"));
        assert!(refused(request(&other, 8, now)).contains("Unauthenticated"));
        assert!(refused(request(&key, 9, now - 61_000)).contains("stale"));
        assert!(refused(request(&key, 10, now + 61_000)).contains("stale"));
        let mut tampered = request(&key, 11, now);
        let n = tampered.len();
        tampered[n - 40] ^= 1;
        assert!(refused(tampered).contains("Unauthenticated"));
        // An answer is not a request, and a frame longer than a request is not read.
        let mut answer = Vec::new();
        write_frame(&mut answer, &key, STATE, b"x").unwrap();
        assert!(refused(answer).contains("kind 6"));
        assert!(refused((MAX_REQUEST as u32 + 1).to_le_bytes().to_vec()).contains("more than"));
        assert_eq!(read_request(&mut &request(&key, 12, now)[..], &key, &seen, now).map(|m| m.nonce), Ok(12));
    }
}
