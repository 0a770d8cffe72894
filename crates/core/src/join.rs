//! The synchronization buffer of NT-level parallelism (paper 000 §4.2): a packet forked to the
//! steps of a parallel group comes back here from each branch; when the last branch arrives the
//! packet continues — or is dropped if any branch dropped it.
//!
//! Generic over what a branch hands back (the data plane: a descriptor index; the simulator: its
//! own record). A fixed number of slots, allocated at start: [`JoinTable::open`] refuses when
//! they are all in use (the caller drops the packet, so memory stays bounded).

use crate::dag::MAX_BRANCHES;

/// A slot of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinId(pub u32);

#[derive(Debug, Clone)]
struct Slot<T> {
    open: bool,
    remaining: u8,
    dropped: bool,
    items: [Option<T>; MAX_BRANCHES],
}

/// The synchronization buffer. See the module docs.
#[derive(Debug, Clone)]
pub struct JoinTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
}

/// A packet whose branches have all arrived.
#[derive(Debug, PartialEq, Eq)]
pub struct Joined<T> {
    /// Some branch dropped it.
    pub dropped: bool,
    /// What each branch handed back, by branch number.
    pub items: [Option<T>; MAX_BRANCHES],
}

/// What a joined packet comes to ([`Joined::merge`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Merged<T> {
    /// Some branch dropped it: every copy's buffer goes.
    Dropped {
        /// The copy whose NT verdict is the drop's reason (none when a branch that failed was
        /// counted already).
        counted: Option<T>,
    },
    /// It goes on in one copy; the other copies go.
    Goes {
        /// The copy of the branch that writes the packet (headers or payload: at most one
        /// branch of a group may), else the first.
        keep: T,
        /// The copy whose branch writes the VNI, if one does: the packet takes its VNI.
        vni: Option<T>,
    },
}

impl<T: Copy + PartialEq> Joined<T> {
    /// The copies that ran (`failed` marks a branch that never did), in branch order.
    pub fn live(&self, failed: T) -> impl Iterator<Item = T> + Clone + '_ {
        self.items.iter().flatten().copied().filter(move |&c| c != failed)
    }

    /// What the packet comes to: dropped (counted once: by a failed branch, else by the first
    /// copy with an NT verdict, `verdict`), or going on in one copy's buffer with another's VNI
    /// (`writes(c)`: copy `c`'s branch writes (the packet's bytes, its VNI)). `None`: no copy
    /// ran.
    pub fn merge(&self, failed: T, verdict: impl Fn(T) -> bool, writes: impl Fn(T) -> (bool, bool)) -> Option<Merged<T>> {
        let first = self.live(failed).next()?;
        if self.dropped {
            let counted = match self.items.iter().flatten().any(|&c| c == failed) {
                true => None,
                false => self.live(failed).find(|&c| verdict(c)),
            };
            return Some(Merged::Dropped { counted });
        }
        let (mut keep, mut vni) = (first, None);
        for c in self.live(failed) {
            let (bytes, v) = writes(c);
            if bytes {
                keep = c;
            }
            if v {
                vni = Some(c);
            }
        }
        Some(Merged::Goes { keep, vni })
    }
}

impl<T: Copy> JoinTable<T> {
    /// A table of `capacity` slots (packets being joined at once).
    pub fn new(capacity: usize) -> Self {
        let slot = Slot { open: false, remaining: 0, dropped: false, items: [None; MAX_BRANCHES] };
        JoinTable { slots: vec![slot; capacity], free: (0..capacity as u32).rev().collect() }
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// A packet forks into `branches` (2..=MAX_BRANCHES); `None` if no slot is free or the
    /// count is out of range.
    pub fn open(&mut self, branches: u8) -> Option<JoinId> {
        if !(2..=MAX_BRANCHES as u8).contains(&branches) {
            return None;
        }
        let i = self.free.pop()?;
        let s = &mut self.slots[i as usize];
        *s = Slot { open: true, remaining: branches, dropped: false, items: [None; MAX_BRANCHES] };
        Some(JoinId(i))
    }

    /// Branch `branch` of `id` is back with `item` (`dropped`: it dropped the packet). When it
    /// is the last, the slot is freed and the result returned. An unknown slot or a branch that
    /// arrives twice is ignored (`None`).
    pub fn arrive(&mut self, id: JoinId, branch: usize, item: T, dropped: bool) -> Option<Joined<T>> {
        let s = self.slots.get_mut(id.0 as usize)?;
        if !s.open || branch >= MAX_BRANCHES || s.items[branch].is_some() {
            return None;
        }
        s.items[branch] = Some(item);
        s.dropped |= dropped;
        s.remaining -= 1;
        if s.remaining > 0 {
            return None;
        }
        s.open = false;
        self.free.push(id.0);
        Some(Joined { dropped: s.dropped, items: s.items })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_when_every_branch_is_back_and_any_drop_drops() {
        let mut j: JoinTable<u32> = JoinTable::new(2);
        let a = j.open(3).unwrap();
        let b = j.open(2).unwrap();
        assert_eq!(j.open(2), None, "bounded: no slot left");
        assert_eq!(j.arrive(a, 1, 11, false), None);
        assert_eq!(j.arrive(a, 1, 11, false), None, "a branch counts once");
        assert_eq!(j.arrive(b, 0, 20, false), None);
        assert_eq!(j.arrive(a, 0, 10, false), None);
        let done = j.arrive(a, 2, 12, false).unwrap();
        assert!(!done.dropped);
        assert_eq!(&done.items[..3], &[Some(10), Some(11), Some(12)]);
        assert_eq!(j.in_use(), 1);
        let done = j.arrive(b, 1, 21, true).unwrap();
        assert!(done.dropped, "one branch dropped it: the packet is dropped");
        assert_eq!(j.in_use(), 0);
        assert_eq!(j.open(1), None, "a group has at least two branches");
        assert_eq!(j.open(MAX_BRANCHES as u8 + 1), None);
    }

    #[test]
    fn a_joined_packet_goes_on_in_the_writing_branch_with_the_vni_writers_vni() {
        const F: u32 = u32::MAX;
        let joined = |dropped, items: &[u32]| {
            let mut it = [None; MAX_BRANCHES];
            for (i, &c) in items.iter().enumerate() {
                it[i] = Some(c);
            }
            Joined { dropped, items: it }
        };
        let writes = |c: u32| (c == 11, c == 12);
        let j = joined(false, &[10, 11, 12]);
        assert_eq!(j.merge(F, |_| false, writes), Some(Merged::Goes { keep: 11, vni: Some(12) }));
        assert_eq!(j.merge(F, |_| false, |_| (false, false)), Some(Merged::Goes { keep: 10, vni: None }), "nobody writes: the first");
        let d = joined(true, &[10, 11, 12]);
        assert_eq!(d.merge(F, |c| c >= 11, writes), Some(Merged::Dropped { counted: Some(11) }), "the first verdict counts");
        let failed = joined(true, &[10, F]);
        assert_eq!(failed.merge(F, |_| true, writes), Some(Merged::Dropped { counted: None }), "a failed branch was counted");
        assert_eq!(joined(true, &[F, F]).merge(F, |_| true, writes), None, "no copy ran");
    }
}
