//! The pool's messages and their versioned codec (docs/pool.md, "Versions and rolling
//! upgrades").
//!
//! Every pool message travels in one frame, the same in every version: `SNP`, the version
//! byte, the kind byte, the sender's generation and a counter (8 bytes each, little-endian), the
//! payload, and a 32-byte tag the driver computes over all of it under the pool's secret
//! ([`Header`]; the daemon seals and opens with HMAC-SHA256). Only the payloads change from one
//! version to the next:
//!
//! | kind | message | version 4 | version 5 |
//! |---|---|---|---|
//! | 0 | [`Message::Membership`] | the membership machine's bytes | the same |
//! | 1 | [`Message::Load`] | [`LoadReport`], postcard | the same |
//! | 2 | [`Message::Host`] | JSON `{id, data, request}` | postcard `(id, data, request as JSON)` |
//! | 3 | [`Message::Hosted`] | JSON `{id, result}` | postcard |
//! | 4 | [`Message::Unhost`] | u32 little-endian | postcard (varint) |
//! | 5 | [`Message::Pins`] | postcard | the same |
//! | 6 | [`Message::Hello`] | — | empty: "I speak version 5" |
//!
//! (The request to host a DAG is the control plane's type, `R` here: its NT specifications are
//! tagged by a field, which only a self-describing format carries, hence JSON inside.)
//!
//! A node speaks [`OLDEST`]`..=`[`NEWEST`]. It refuses, and counts, a message of any other
//! version, and [`Versions`] chooses what it sends each peer: the newest version heard from the
//! peer's current incarnation, or [`OLDEST`] until it has heard one; to a peer not yet heard at
//! [`NEWEST`] it sends a [`Message::Hello`] each gossip period, which a peer that speaks it
//! answers in kind from then on. Two adjacent versions thus interoperate — an upgraded node talks
//! to an old one in the old version, to an upgraded one in the new — which is what a rolling
//! upgrade needs.

use crate::pool::LoadReport;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// The oldest version this node speaks.
pub const OLDEST: u8 = 4;
/// The newest version this node speaks.
pub const NEWEST: u8 = 5;
/// Every frame starts with these.
pub const MAGIC: &[u8; 3] = b"SNP";
/// Magic, version, kind, generation, counter.
pub const HEADER: usize = 3 + 1 + 1 + 8 + 8;

/// Kinds of message (the frame's kind byte).
pub mod kind {
    /// The membership protocol's messages.
    pub const MEMBERSHIP: u8 = 0;
    /// A load report.
    pub const LOAD: u8 = 1;
    /// A request to host a DAG.
    pub const HOST: u8 = 2;
    /// Its answer.
    pub const HOSTED: u8 = 3;
    /// The home node no longer needs a DAG hosted.
    pub const UNHOST: u8 = 4;
    /// A draining node names the flows whose state it holds.
    pub const PINS: u8 = 5;
    /// "I speak version 5" (version 5 on).
    pub const HELLO: u8 = 6;
}

/// A frame's header (the tag follows the payload; the driver computes and checks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The version the payload is written in.
    pub version: u8,
    /// What the payload is ([`kind`]).
    pub kind: u8,
    /// The sender's generation (a restart takes a newer one).
    pub gen: u64,
    /// The sender's counter in that generation (anti-replay).
    pub counter: u64,
}

impl Header {
    /// Appends the header to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.push(self.version);
        out.push(self.kind);
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
    }

    /// The header of `frame` (without its tag) and the payload after it; `None` if `frame` is
    /// not one. The version is not checked here: a frame of another version reads the same.
    pub fn read(frame: &[u8]) -> Option<(Header, &[u8])> {
        if frame.len() < HEADER || &frame[..3] != MAGIC {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(frame[at..at + 8].try_into().unwrap_or_default());
        Some((Header { version: frame[3], kind: frame[4], gen: word(5), counter: word(13) }, &frame[HEADER..]))
    }
}

/// True if this node speaks `version`.
pub fn speaks(version: u8) -> bool {
    (OLDEST..=NEWEST).contains(&version)
}

/// A request to host a DAG (`R`: the control plane's description of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostAsk<R> {
    /// The asker's number for the request (the answer names it).
    pub id: u64,
    /// The home node's data address (unspecified IP: the datagram's source IP).
    pub data: SocketAddr,
    /// The DAG.
    pub request: R,
}

/// The answer: the host's data address and its number for the DAG, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostedAnswer {
    /// The request's id.
    pub id: u64,
    /// Hosted (the host's data address, unspecified IP: the datagram's source; its number for
    /// the DAG), or why not.
    pub result: Result<(SocketAddr, u32), String>,
}

/// A draining node's flows, whose state it holds: bring them to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pins {
    /// The draining node's data address (unspecified IP: the datagram's source).
    pub data: SocketAddr,
    /// The flows' hashes.
    pub flows: Vec<u64>,
}

/// One pool message. See the module docs for each kind's payload in each version.
#[derive(Debug, Clone, PartialEq)]
pub enum Message<R> {
    /// The membership protocol's bytes (`crate::pool::Membership` reads them).
    Membership(Vec<u8>),
    /// A load report.
    Load(LoadReport),
    /// A request to host a DAG.
    Host(HostAsk<R>),
    /// Its answer.
    Hosted(HostedAnswer),
    /// The home node no longer needs its DAG of this number (at the host) hosted.
    Unhost(u32),
    /// A draining node's flows.
    Pins(Pins),
    /// The sender speaks version 5 (not in version 4).
    Hello,
}

/// Why a message cannot be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// A version this node does not speak.
    #[error("pool protocol version {0} is not spoken here (this node speaks {OLDEST} to {NEWEST})")]
    Version(u8),
    /// A kind the version does not have.
    #[error("pool protocol version {version} has no message of kind {kind}")]
    Kind {
        /// The version.
        version: u8,
        /// The kind.
        kind: u8,
    },
    /// The payload is not a message of its kind.
    #[error("a malformed message of kind {kind} (version {version}): {why}")]
    Malformed {
        /// The version.
        version: u8,
        /// The kind.
        kind: u8,
        /// What the decoder said.
        why: String,
    },
}

/// Version 5's request to host: the request itself stays JSON (see the module docs).
#[derive(Serialize, Deserialize)]
struct HostV5 {
    id: u64,
    data: SocketAddr,
    request: Vec<u8>,
}

impl<R: Serialize + DeserializeOwned> Message<R> {
    /// Its kind byte.
    pub fn kind(&self) -> u8 {
        match self {
            Message::Membership(_) => kind::MEMBERSHIP,
            Message::Load(_) => kind::LOAD,
            Message::Host(_) => kind::HOST,
            Message::Hosted(_) => kind::HOSTED,
            Message::Unhost(_) => kind::UNHOST,
            Message::Pins(_) => kind::PINS,
            Message::Hello => kind::HELLO,
        }
    }

    /// Its payload in `version`.
    pub fn encode(&self, version: u8) -> Result<Vec<u8>, CodecError> {
        if !speaks(version) {
            return Err(CodecError::Version(version));
        }
        let kind = self.kind();
        let bad = |why: String| CodecError::Malformed { version, kind, why };
        match (self, version) {
            (Message::Membership(b), _) => Ok(b.clone()),
            (Message::Load(r), _) => postcard::to_allocvec(r).map_err(|e| bad(e.to_string())),
            (Message::Pins(p), _) => postcard::to_allocvec(p).map_err(|e| bad(e.to_string())),
            (Message::Host(h), 4) => serde_json::to_vec(h).map_err(|e| bad(e.to_string())),
            (Message::Hosted(h), 4) => serde_json::to_vec(h).map_err(|e| bad(e.to_string())),
            (Message::Unhost(n), 4) => Ok(n.to_le_bytes().to_vec()),
            (Message::Hello, 4) => Err(CodecError::Kind { version, kind }),
            (Message::Host(h), _) => {
                let request = serde_json::to_vec(&h.request).map_err(|e| bad(e.to_string()))?;
                postcard::to_allocvec(&HostV5 { id: h.id, data: h.data, request }).map_err(|e| bad(e.to_string()))
            }
            (Message::Hosted(h), _) => postcard::to_allocvec(h).map_err(|e| bad(e.to_string())),
            (Message::Unhost(n), _) => postcard::to_allocvec(n).map_err(|e| bad(e.to_string())),
            (Message::Hello, _) => Ok(Vec::new()),
        }
    }

    /// The message of `kind` whose payload, in `version`, is `payload`.
    pub fn decode(version: u8, kind: u8, payload: &[u8]) -> Result<Message<R>, CodecError> {
        if !speaks(version) {
            return Err(CodecError::Version(version));
        }
        let bad = |why: String| CodecError::Malformed { version, kind, why };
        Ok(match (kind, version) {
            (kind::MEMBERSHIP, _) => Message::Membership(payload.to_vec()),
            (kind::LOAD, _) => Message::Load(postcard_whole(payload).map_err(bad)?),
            (kind::PINS, _) => Message::Pins(postcard_whole(payload).map_err(bad)?),
            (kind::HOST, 4) => Message::Host(serde_json::from_slice(payload).map_err(|e| bad(e.to_string()))?),
            (kind::HOSTED, 4) => Message::Hosted(serde_json::from_slice(payload).map_err(|e| bad(e.to_string()))?),
            (kind::UNHOST, 4) => {
                Message::Unhost(u32::from_le_bytes(payload.try_into().map_err(|_| bad(format!("{} bytes, not 4", payload.len())))?))
            }
            (kind::HOST, _) => {
                let h: HostV5 = postcard_whole(payload).map_err(bad)?;
                let request = serde_json::from_slice(&h.request).map_err(|e| bad(e.to_string()))?;
                Message::Host(HostAsk { id: h.id, data: h.data, request })
            }
            (kind::HOSTED, _) => Message::Hosted(postcard_whole(payload).map_err(bad)?),
            (kind::UNHOST, _) => Message::Unhost(postcard_whole(payload).map_err(bad)?),
            (kind::HELLO, 5..) if payload.is_empty() => Message::Hello,
            (kind::HELLO, 5..) => return Err(bad("a hello carries nothing".into())),
            _ => return Err(CodecError::Kind { version, kind }),
        })
    }
}

/// A postcard value that is the whole of `p` (trailing bytes refused).
fn postcard_whole<T: DeserializeOwned>(p: &[u8]) -> Result<T, String> {
    match postcard::take_from_bytes(p) {
        Ok((v, [])) => Ok(v),
        Ok((_, rest)) => Err(format!("{} bytes after the message", rest.len())),
        Err(e) => Err(e.to_string()),
    }
}

/// Which version to send each peer: the newest heard from its current incarnation (see the
/// module docs). Bounded by the members a driver tells it of ([`Versions::heard`] only for
/// authenticated messages; [`Versions::forget`] when a member goes).
#[derive(Debug, Clone, Default)]
pub struct Versions {
    /// Per peer: the generation heard, and the newest version heard in it.
    peers: BTreeMap<SocketAddr, (u64, u8)>,
}

impl Versions {
    /// None heard.
    pub fn new() -> Self {
        Self::default()
    }

    /// `peer`, in generation `gen`, sent a message in `version` (one this node speaks). A newer
    /// generation starts again: a peer restarted on an older binary is spoken to in its version.
    pub fn heard(&mut self, peer: SocketAddr, gen: u64, version: u8) {
        debug_assert!(speaks(version));
        let e = self.peers.entry(peer).or_insert((gen, version));
        if gen > e.0 {
            *e = (gen, version);
        } else if gen == e.0 {
            e.1 = e.1.max(version);
        }
    }

    /// The version to send `peer` messages in.
    pub fn to(&self, peer: SocketAddr) -> u8 {
        self.peers.get(&peer).map_or(OLDEST, |&(_, v)| v)
    }

    /// True if `peer` is owed a [`Message::Hello`]: it has not been heard at [`NEWEST`].
    pub fn greet(&self, peer: SocketAddr) -> bool {
        self.to(peer) < NEWEST
    }

    /// `peer` left the pool.
    pub fn forget(&mut self, peer: SocketAddr) {
        self.peers.remove(&peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type M = Message<serde_json::Value>;

    fn a(p: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], p))
    }

    fn all() -> Vec<M> {
        vec![
            Message::Membership(vec![1, 2, 3]),
            Message::Load(LoadReport { gen: 3, seq: 4, free_regions: 2, data: Some(a(4789)), ..Default::default() }),
            Message::Host(HostAsk {
                id: 7,
                data: a(4789),
                request: serde_json::json!({"dag": "d", "chains": [[["fw"], [{"kind": "dummy"}]]]}),
            }),
            Message::Hosted(HostedAnswer { id: 7, result: Ok((a(4790), 3)) }),
            Message::Hosted(HostedAnswer { id: 8, result: Err("no room".into()) }),
            Message::Unhost(0xdead_beef),
            Message::Pins(Pins { data: a(4789), flows: vec![1, u64::MAX] }),
            Message::Hello,
        ]
    }

    #[test]
    fn every_message_survives_each_version_that_has_it() {
        for v in OLDEST..=NEWEST {
            for m in all() {
                match m.encode(v) {
                    Ok(p) => assert_eq!(M::decode(v, m.kind(), &p), Ok(m.clone()), "version {v}"),
                    Err(e) => assert_eq!((v, &m, e), (4, &Message::Hello, CodecError::Kind { version: 4, kind: kind::HELLO })),
                }
            }
        }
    }

    #[test]
    fn version_4_is_what_the_version_4_daemon_wrote() {
        // The payloads of the release that spoke only version 4, byte for byte.
        let host = M::Host(HostAsk { id: 1, data: a(4789), request: serde_json::json!({"dag": "d"}) });
        assert_eq!(host.encode(4).unwrap(), br#"{"id":1,"data":"10.0.0.1:4789","request":{"dag":"d"}}"#);
        let hosted = M::Hosted(HostedAnswer { id: 1, result: Ok((a(4790), 2)) });
        assert_eq!(hosted.encode(4).unwrap(), br#"{"id":1,"result":{"Ok":["10.0.0.1:4790",2]}}"#);
        assert_eq!(M::Unhost(5).encode(4).unwrap(), [5, 0, 0, 0]);
        // Version 5 writes them otherwise (and smaller).
        assert_ne!(hosted.encode(5).unwrap(), hosted.encode(4).unwrap());
        assert!(hosted.encode(5).unwrap().len() < hosted.encode(4).unwrap().len());
    }

    #[test]
    fn other_versions_kinds_and_garbage_are_refused_with_the_reason() {
        assert_eq!(M::decode(3, kind::LOAD, &[]), Err(CodecError::Version(3)));
        assert_eq!(M::decode(6, kind::LOAD, &[]), Err(CodecError::Version(6)));
        assert_eq!(M::Hello.encode(6), Err(CodecError::Version(6)));
        assert_eq!(M::decode(5, 9, &[]), Err(CodecError::Kind { version: 5, kind: 9 }));
        assert_eq!(M::decode(4, kind::HELLO, &[]), Err(CodecError::Kind { version: 4, kind: kind::HELLO }));
        for v in OLDEST..=NEWEST {
            for k in [kind::LOAD, kind::HOST, kind::HOSTED, kind::UNHOST, kind::PINS] {
                assert!(matches!(M::decode(v, k, &[0xff; 3]), Err(CodecError::Malformed { .. })), "kind {k} version {v}");
            }
        }
        let mut p = M::Unhost(1).encode(5).unwrap();
        p.push(0);
        assert!(matches!(M::decode(5, kind::UNHOST, &p), Err(CodecError::Malformed { .. })), "trailing bytes");
        assert!(CodecError::Version(6).to_string().contains("speaks 4 to 5"));
    }

    #[test]
    fn a_header_reads_back_whatever_its_version() {
        for version in [OLDEST, NEWEST, 200] {
            let h = Header { version, kind: kind::PINS, gen: 9, counter: u64::MAX };
            let mut out = Vec::new();
            h.write(&mut out);
            out.extend_from_slice(b"xy");
            assert_eq!(Header::read(&out), Some((h, &b"xy"[..])));
        }
        assert_eq!(Header::read(b"SNP"), None);
        assert_eq!(Header::read(&[0u8; HEADER]), None);
    }

    /// A node of the release before (it speaks 4 only), modelled by what it accepts.
    fn old_accepts(version: u8) -> bool {
        version == 4
    }

    #[test]
    fn an_upgraded_node_speaks_the_old_version_to_an_old_peer_and_the_new_one_to_an_upgraded_peer() {
        let (old, new, me) = (a(1), a(2), a(3));
        let mut mine = Versions::new();
        let mut theirs = Versions::new();
        // Before anything is heard: the oldest, to everyone, and a hello owed to each.
        assert_eq!((mine.to(old), mine.to(new)), (4, 4));
        assert!(mine.greet(old) && mine.greet(new));
        // The hellos: the old peer refuses its own (a version it does not speak) and keeps
        // speaking 4; the upgraded one hears 5 and answers in 5.
        assert!(!old_accepts(5));
        mine.heard(old, 1, 4);
        theirs.heard(me, 1, 5);
        assert_eq!(theirs.to(me), 5);
        mine.heard(new, 1, 4);
        mine.heard(new, 1, 5);
        assert_eq!((mine.to(old), mine.to(new)), (4, 5));
        assert!(mine.greet(old) && !mine.greet(new));
        // A late version-4 message of the upgraded peer does not take it back to 4.
        mine.heard(new, 1, 4);
        assert_eq!(mine.to(new), 5);
        // The upgraded peer is rolled back (a restart: a newer generation) to the old binary.
        mine.heard(new, 2, 4);
        assert_eq!(mine.to(new), 4);
        assert!(mine.greet(new));
        // ... and an older generation's late message changes nothing.
        mine.heard(new, 1, 5);
        assert_eq!(mine.to(new), 4);
        mine.forget(new);
        assert_eq!(mine.to(new), 4);
    }
}
