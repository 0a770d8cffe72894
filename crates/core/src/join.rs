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
}
