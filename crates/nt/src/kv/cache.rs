//! A key-value cache in a fixed memory budget, allocated once: keys and values live in a ring
//! of bytes written like a log (each record appended at the head, evicted at the tail), an index
//! maps a key's hash to its record. Nothing allocates after [`Cache::new`].
//!
//! Two eviction policies over the same log:
//! - [`Policy::Fifo`], the paper's: the oldest record goes.
//! - [`Policy::Clock`]: a record read since it was written gets a second chance: at the tail
//!   it is moved to the head with its mark cleared instead of evicted (CLOCK in a log, as
//!   log-structured caches do it). Popular keys stay; a scan of one-time keys passes through.
//!
//! A record may be written invisible ([`Cache::insert`] with `visible: false`) and shown later
//! ([`Cache::show`]): a write-through cache stores a `set`'s value when the request passes and
//! shows it only once the backend acknowledged it.

use rustc_hash::FxHasher;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// How the cache chooses what to evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// First in, first out.
    Fifo,
    /// CLOCK: a record read since it was written is kept once more.
    #[default]
    Clock,
}

/// A record's header: tag, mark bits, key length, value length, client flags, expiry.
const HDR: usize = 20;
const TAG_PAD: u8 = 0;
const TAG_REC: u8 = 1;
const REF: u8 = 1;
const VISIBLE: u8 = 2;

/// Where a record is: its position in the log (monotonic; the ring offset is this modulo the
/// ring's size). Stable while the record lives.
pub type Pos = u64;

/// The hash a key is indexed by.
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(key);
    h.write_u8(0xff);
    h.finish()
}

/// Counts kept by a cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Records evicted to make room.
    pub evictions: u64,
    /// Records given a second chance (CLOCK).
    pub second_chances: u64,
}

/// See the module docs.
pub struct Cache {
    policy: Policy,
    ring: Box<[u8]>,
    head: u64,
    tail: u64,
    index: HashMap<u64, Pos, BuildHasherDefault<FxHasher>>,
    max_entries: usize,
    scratch: Box<[u8]>,
    stats: CacheStats,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("policy", &self.policy).field("bytes", &self.ring.len()).field("entries", &self.index.len()).finish()
    }
}

/// A record read from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit<'a> {
    /// The client's flags.
    pub flags: u32,
    /// The value.
    pub value: &'a [u8],
}

fn round8(n: usize) -> usize {
    (n + 7) & !7
}

impl Cache {
    /// A cache of `bytes` (its ring; the index takes about 24 bytes an entry on top, for at
    /// most `bytes / 64` entries). `bytes` is at least 4096.
    pub fn new(bytes: usize, policy: Policy) -> Cache {
        let bytes = round8(bytes.max(4096));
        let max_entries = bytes / 64;
        let mut index = HashMap::default();
        index.reserve(max_entries);
        Cache {
            policy,
            ring: vec![0u8; bytes].into_boxed_slice(),
            head: 0,
            tail: 0,
            index,
            max_entries,
            scratch: vec![0u8; Self::max_record_for(bytes)].into_boxed_slice(),
            stats: CacheStats::default(),
        }
    }

    fn max_record_for(bytes: usize) -> usize {
        bytes / 4
    }

    /// The largest key plus value a record can hold: a quarter of the ring.
    pub fn max_item(&self) -> usize {
        Self::max_record_for(self.ring.len()) - HDR - 8
    }

    /// Records indexed.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True if nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes of the log in use (live, dead and padding).
    pub fn used(&self) -> usize {
        (self.head - self.tail) as usize
    }

    /// The ring's size.
    pub fn capacity(&self) -> usize {
        self.ring.len()
    }

    /// Counts so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    fn off(&self, pos: Pos) -> usize {
        (pos % self.ring.len() as u64) as usize
    }

    fn record_len(&self, off: usize) -> usize {
        let r = &self.ring[off..];
        let k = u16::from_le_bytes([r[2], r[3]]) as usize;
        let v = u32::from_le_bytes([r[4], r[5], r[6], r[7]]) as usize;
        round8(HDR + k + v)
    }

    fn key_at(&self, off: usize) -> &[u8] {
        let k = u16::from_le_bytes([self.ring[off + 2], self.ring[off + 3]]) as usize;
        &self.ring[off + HDR..off + HDR + k]
    }

    /// The record of `key`, if it is indexed, visible and not expired at `now_ns`; marks it read.
    pub fn get(&mut self, key: &[u8], now_ns: u64) -> Option<Hit<'_>> {
        let pos = *self.index.get(&key_hash(key))?;
        let off = self.off(pos);
        if self.key_at(off) != key {
            return None;
        }
        let r = &self.ring[off..];
        let expires = u64::from_le_bytes(r[12..20].try_into().expect("8 bytes"));
        if r[1] & VISIBLE == 0 || expires <= now_ns {
            return None;
        }
        self.ring[off + 1] |= REF;
        let r = &self.ring[off..];
        let k = u16::from_le_bytes([r[2], r[3]]) as usize;
        let v = u32::from_le_bytes([r[4], r[5], r[6], r[7]]) as usize;
        let flags = u32::from_le_bytes([r[8], r[9], r[10], r[11]]);
        Some(Hit { flags, value: &self.ring[off + HDR + k..off + HDR + k + v] })
    }

    /// Forgets `key` (its record stays in the log, dead, until the tail passes it).
    pub fn remove(&mut self, key: &[u8]) {
        self.index.remove(&key_hash(key));
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.index.clear();
        self.tail = self.head;
    }

    /// Stores `key` → (`flags`, `value`) until `expires_ns`, replacing what `key` had; visible
    /// to [`Cache::get`] at once or only after [`Cache::show`]. Returns where it is, or `None`
    /// (and `key` forgotten) if key and value are larger than [`Cache::max_item`] or the key is
    /// longer than 65535 bytes.
    pub fn insert(&mut self, key: &[u8], flags: u32, value: &[u8], expires_ns: u64, visible: bool) -> Option<Pos> {
        let h = key_hash(key);
        self.index.remove(&h);
        if key.len() > u16::MAX as usize || key.len() + value.len() > self.max_item() {
            return None;
        }
        while self.index.len() >= self.max_entries {
            self.evict_one();
        }
        let need = round8(HDR + key.len() + value.len());
        let pos = self.reserve(need)?;
        let off = self.off(pos);
        let r = &mut self.ring[off..off + need];
        r[0] = TAG_REC;
        r[1] = if visible { VISIBLE } else { 0 };
        r[2..4].copy_from_slice(&(key.len() as u16).to_le_bytes());
        r[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
        r[8..12].copy_from_slice(&flags.to_le_bytes());
        r[12..20].copy_from_slice(&expires_ns.to_le_bytes());
        r[HDR..HDR + key.len()].copy_from_slice(key);
        r[HDR + key.len()..HDR + key.len() + value.len()].copy_from_slice(value);
        self.index.insert(h, pos);
        Some(pos)
    }

    /// Makes the record written at `pos` for the key of hash `hash` visible, if it is still that
    /// key's record (not replaced, removed or evicted since). Returns whether it did.
    pub fn show(&mut self, hash: u64, pos: Pos) -> bool {
        if self.index.get(&hash) != Some(&pos) {
            return false;
        }
        let off = self.off(pos);
        self.ring[off + 1] |= VISIBLE;
        true
    }

    /// `need` contiguous bytes at the head if they are free (padding to the ring's end first if
    /// they would wrap); their position. Evicts nothing.
    fn try_append(&mut self, need: usize) -> Option<Pos> {
        let len = self.ring.len();
        let off = self.off(self.head);
        let pad = if off + need > len { len - off } else { 0 };
        if len - self.used() < pad + need {
            return None;
        }
        if pad > 0 {
            self.ring[off] = TAG_PAD;
            self.head += pad as u64;
        }
        let p = self.head;
        self.head += need as u64;
        Some(p)
    }

    /// Room for `need` contiguous bytes at the head, evicting at the tail; the position.
    fn reserve(&mut self, need: usize) -> Option<Pos> {
        debug_assert!(need <= self.scratch.len());
        loop {
            if let Some(p) = self.try_append(need) {
                return Some(p);
            }
            if self.head == self.tail {
                return None;
            }
            self.evict_one();
        }
    }

    /// Takes the record (or padding) at the tail out of the log: evicted, or — CLOCK, read since
    /// written — moved to the head unmarked.
    fn evict_one(&mut self) {
        if self.head == self.tail {
            return;
        }
        let len = self.ring.len();
        let off = self.off(self.tail);
        if self.ring[off] == TAG_PAD {
            self.tail += (len - off) as u64;
            return;
        }
        let n = self.record_len(off);
        let h = key_hash(self.key_at(off));
        let live = self.index.get(&h) == Some(&self.tail);
        self.tail += n as u64;
        if !live {
            return;
        }
        self.index.remove(&h);
        if self.policy == Policy::Clock && self.ring[off + 1] & REF != 0 && self.ring[off + 1] & VISIBLE != 0 {
            // Copied out first: the head's room may overlap where it was.
            self.scratch[..n].copy_from_slice(&self.ring[off..off + n]);
            if let Some(p) = self.try_append(n) {
                let o = self.off(p);
                self.ring[o..o + n].copy_from_slice(&self.scratch[..n]);
                self.ring[o + 1] &= !REF;
                self.index.insert(h, p);
                self.stats.second_chances += 1;
                return;
            }
        }
        self.stats.evictions += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap as Model;

    #[test]
    fn a_value_comes_back_until_it_expires_or_is_replaced() {
        let mut c = Cache::new(4096, Policy::Fifo);
        c.insert(b"k", 7, b"hello", 100, true).unwrap();
        assert_eq!(c.get(b"k", 50), Some(Hit { flags: 7, value: b"hello" }));
        assert_eq!(c.get(b"k", 100), None, "expired");
        c.insert(b"k", 1, b"x", 1000, true).unwrap();
        assert_eq!(c.get(b"k", 50).unwrap().value, b"x");
        c.remove(b"k");
        assert_eq!(c.get(b"k", 50), None);
    }

    #[test]
    fn an_invisible_record_shows_only_when_told_and_only_if_still_current() {
        let mut c = Cache::new(4096, Policy::Clock);
        let p = c.insert(b"k", 0, b"v1", u64::MAX, false).unwrap();
        assert_eq!(c.get(b"k", 0), None);
        assert!(c.show(key_hash(b"k"), p));
        assert_eq!(c.get(b"k", 0).unwrap().value, b"v1");
        let p1 = c.insert(b"k", 0, b"v2", u64::MAX, false).unwrap();
        let p2 = c.insert(b"k", 0, b"v3", u64::MAX, false).unwrap();
        assert!(!c.show(key_hash(b"k"), p1), "replaced since");
        assert!(c.show(key_hash(b"k"), p2));
        assert_eq!(c.get(b"k", 0).unwrap().value, b"v3");
    }

    #[test]
    fn too_large_an_item_is_refused_and_forgets_the_key() {
        let mut c = Cache::new(4096, Policy::Clock);
        c.insert(b"k", 0, b"small", u64::MAX, true).unwrap();
        assert!(c.insert(b"k", 0, &[0u8; 2000], u64::MAX, true).is_none());
        assert_eq!(c.get(b"k", 0), None, "a refused write must not leave the old value");
    }

    /// A key read between writes survives a stream of one-time keys under CLOCK, not FIFO.
    #[test]
    fn clock_keeps_a_hot_key_that_fifo_evicts() {
        for (policy, kept) in [(Policy::Fifo, false), (Policy::Clock, true)] {
            let mut c = Cache::new(8192, policy);
            c.insert(b"hot", 0, &[1u8; 100], u64::MAX, true).unwrap();
            for i in 0..1000u32 {
                c.insert(format!("cold{i}").as_bytes(), 0, &[2u8; 100], u64::MAX, true).unwrap();
                if i % 20 == 0 {
                    c.get(b"hot", 0);
                }
            }
            assert_eq!(c.get(b"hot", 0).is_some(), kept, "{policy:?}");
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u16, bool),
        Get(u8),
        Remove(u8),
        Show(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..40, 0u16..1200, any::<bool>()).prop_map(|(k, n, v)| Op::Insert(k, n, v)),
            (0u8..40).prop_map(Op::Get),
            (0u8..40).prop_map(Op::Remove),
            (0u8..40).prop_map(Op::Show),
        ]
    }

    proptest! {
        /// FIFO against the slow reference of its definition: what is cached is always the
        /// most recently written keys — a suffix of the keys in the order of their last write,
        /// never one older key kept while a newer one went.
        #[test]
        fn fifo_keeps_a_suffix_of_the_writes(writes in proptest::collection::vec((0u8..60, 0u16..900), 1..300)) {
            let mut c = Cache::new(8192, Policy::Fifo);
            let mut order: Vec<u8> = vec![];
            for (k, n) in writes {
                c.insert(&[k], 0, &vec![1u8; n as usize], u64::MAX, true).unwrap();
                order.retain(|&o| o != k);
                order.push(k);
                let present: Vec<bool> = order.iter().map(|&o| c.get(&[o], 0).is_some()).collect();
                let first = present.iter().position(|&p| p).expect("the last write is cached");
                prop_assert!(present[first..].iter().all(|&p| p), "order {order:?}, present {present:?}");
            }
        }

        /// Against a map of what was last written: a hit is always the last value written for
        /// the key (visible), the log never outgrows the ring, and the index stays bounded.
        #[test]
        fn a_hit_is_always_the_last_visible_write(ops in proptest::collection::vec(op(), 1..400), clock in any::<bool>()) {
            let mut c = Cache::new(8192, if clock { Policy::Clock } else { Policy::Fifo });
            let mut model: Model<u8, (Vec<u8>, bool, Option<Pos>)> = Model::new();
            let mut gen = 0u8;
            for o in ops {
                match o {
                    Op::Insert(k, n, vis) => {
                        gen = gen.wrapping_add(1);
                        let v = vec![gen; n as usize];
                        let p = c.insert(&[k], k as u32, &v, u64::MAX, vis);
                        match p {
                            Some(p) => { model.insert(k, (v, vis, Some(p))); }
                            None => { model.remove(&k); }
                        }
                    }
                    Op::Get(k) => {
                        if let Some(h) = c.get(&[k], 0) {
                            let (v, vis, _) = model.get(&k).expect("a hit for a key never written or removed");
                            prop_assert!(*vis, "an invisible record was read");
                            prop_assert_eq!(h.value, &v[..]);
                            prop_assert_eq!(h.flags, k as u32);
                        }
                    }
                    Op::Remove(k) => { c.remove(&[k]); model.remove(&k); }
                    Op::Show(k) => {
                        if let Some((_, vis, Some(p))) = model.get_mut(&k) {
                            if c.show(key_hash(&[k]), *p) { *vis = true; }
                        }
                    }
                }
                prop_assert!(c.used() <= c.capacity());
                prop_assert!(c.len() <= c.max_entries);
            }
        }
    }
}
