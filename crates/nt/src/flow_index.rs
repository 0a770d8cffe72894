//! A fixed-size index from flow keys to slot numbers, one cache line a probe, that can be
//! prefetched.
//!
//! Stateful NTs keep their flows in a slab and look them up by key on every packet. A general
//! hash map sized for the most flows a table may hold (65,536 by default) spreads the few
//! thousand flows a busy NT sees over megabytes, and each lookup waits on two or three cache
//! misses (the map's control bytes, its bucket, the slab). This index stores only 8-byte
//! entries — the key's 32-bit hash and the value — in one open-addressed array probed linearly,
//! so a lookup usually reads one line of it, and that line is known from the hash alone: the NT
//! can prefetch it for a packet a few places ahead in its batch ([`FlowIndex::prefetch`]), while
//! it works on the current one. The keys stay in the caller's slab: a lookup asks the caller to
//! confirm a candidate (`eq`), which it does only when the stored hash matches.
//!
//! Removal shifts the entries behind back (Knuth's algorithm R), so there are no tombstones and
//! probe sequences never grow with churn. The array has at least twice as many entries as keys
//! it may hold, allocated once: nothing allocates after construction.

/// Asks the CPU to bring in the cache lines `r` spans (a hint: it reads nothing, and a lookup
/// that follows finds them loaded or on their way).
#[inline]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = r as *const T as *const u8;
        for off in (0..core::mem::size_of::<T>().max(1)).step_by(64) {
            // SAFETY: a prefetch is a hint that reads nothing (any address may be given); SSE,
            // which it needs, is part of every x86-64 CPU.
            unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.wrapping_add(off) as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// An empty entry (no value is `u32::MAX`: callers' values are below it).
const EMPTY: u64 = u64::MAX;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct FlowIndex {
    entries: Box<[u64]>,
    mask: usize,
    len: usize,
    capacity: usize,
}

#[inline]
fn entry(hash: u64, value: u32) -> u64 {
    (hash as u32 as u64) << 32 | value as u64
}

#[inline]
fn value_of(e: u64) -> u32 {
    e as u32
}

#[inline]
fn hash_of(e: u64) -> u32 {
    (e >> 32) as u32
}

impl FlowIndex {
    /// Entries an index for `capacity` keys has.
    fn size(capacity: usize) -> usize {
        (2 * capacity.max(1)).next_power_of_two()
    }

    /// The bytes an index for `capacity` keys allocates.
    pub(crate) fn bytes(capacity: usize) -> usize {
        Self::size(capacity) * core::mem::size_of::<u64>()
    }

    /// An index for up to `capacity` keys.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let size = Self::size(capacity);
        FlowIndex { entries: vec![EMPTY; size].into_boxed_slice(), mask: size - 1, len: 0, capacity }
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        hash as u32 as usize & self.mask
    }

    /// Asks the CPU to bring in the line a lookup of `hash` reads first.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        prefetch(&self.entries[self.home(hash)]);
    }

    /// The value of the key with `hash` for which `eq` says yes.
    #[inline]
    pub(crate) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let h = hash as u32;
        let mut i = self.home(hash);
        loop {
            let e = self.entries[i];
            if e == EMPTY {
                return None;
            }
            if hash_of(e) == h && eq(value_of(e)) {
                return Some(value_of(e));
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Adds `value` under `hash` (the caller made sure its key is not there). False when the
    /// index holds `capacity` keys already.
    pub(crate) fn insert(&mut self, hash: u64, value: u32) -> bool {
        debug_assert!(value != u32::MAX);
        if self.len >= self.capacity {
            return false;
        }
        let mut i = self.home(hash);
        while self.entries[i] != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.entries[i] = entry(hash, value);
        self.len += 1;
        true
    }

    /// Removes `value`, added under `hash`. False if it is not there.
    pub(crate) fn remove(&mut self, hash: u64, value: u32) -> bool {
        let want = entry(hash, value);
        let mut i = self.home(hash);
        loop {
            match self.entries[i] {
                EMPTY => return false,
                e if e == want => break,
                _ => i = (i + 1) & self.mask,
            }
        }
        self.entries[i] = EMPTY;
        self.len -= 1;
        // Entries after the hole that would no longer be found (their home is not in the
        // cyclic range (hole, their place]) move into it.
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let e = self.entries[j];
            if e == EMPTY {
                return true;
            }
            let home = hash_of(e) as usize & self.mask;
            let stays = if i <= j { i < home && home <= j } else { i < home || home <= j };
            if !stays {
                self.entries[i] = e;
                self.entries[j] = EMPTY;
                i = j;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        Remove(u16),
    }

    /// Keys' hashes: few distinct homes in a small table, so that clusters form, wrap around
    /// the end and get holes punched in them.
    fn hash(k: u16) -> u64 {
        ((k as u64 % 7) * 9 + 13) | (k as u64) << 40
    }

    proptest! {
        /// Against a map: whatever the inserts and removals, every key present is found with
        /// its value, every key absent is not, and the length agrees.
        #[test]
        fn it_finds_exactly_what_a_map_holds(ops in proptest::collection::vec(
            prop_oneof![(0u16..40).prop_map(Op::Insert), (0u16..40).prop_map(Op::Remove)], 0..400)) {
            let mut idx = FlowIndex::with_capacity(16);
            let mut model: HashMap<u16, u32> = HashMap::new();
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(k) if !model.contains_key(&k) => {
                        let ok = idx.insert(hash(k), n as u32);
                        prop_assert_eq!(ok, model.len() < 16);
                        if ok {
                            model.insert(k, n as u32);
                        }
                    }
                    Op::Insert(_) => {}
                    Op::Remove(k) => {
                        let v = model.remove(&k);
                        prop_assert_eq!(idx.remove(hash(k), v.unwrap_or(u32::MAX - 1)), v.is_some());
                    }
                }
                prop_assert_eq!(idx.len(), model.len());
                for k in 0..40u16 {
                    let want = model.get(&k).copied();
                    prop_assert_eq!(idx.find(hash(k), |v| want == Some(v)), want, "key {}", k);
                }
            }
        }
    }

    #[test]
    fn a_full_index_refuses_and_takes_again_after_a_removal() {
        let mut idx = FlowIndex::with_capacity(2);
        assert!(idx.insert(1, 10) && idx.insert(1, 11));
        assert!(!idx.insert(2, 12), "full");
        assert!(idx.remove(1, 10));
        assert_eq!(idx.find(1, |v| v == 11), Some(11), "the shifted entry is still found");
        assert!(idx.insert(2, 12));
        idx.prefetch(2);
        assert_eq!(idx.find(2, |v| v == 12), Some(12));
    }
}
