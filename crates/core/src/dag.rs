//! A deployed DAG, compiled into the sequence of chains a packet visits.
//!
//! A chain holds up to 64 NTs; a packet of a DAG that uses only some of them skips the rest
//! (paper §4.2: "skipping of arbitrary NT(s) in a chain"), so each step carries the mask of NTs
//! the packet runs. A DAG whose NTs span several chains returns to the scheduler between chains.
//!
//! Steps may form *parallel groups* (NT-level parallelism, paper §4.2): the steps of a group run
//! on copies of the packet at the same time (forked when the packet reaches the group's first
//! step) and join before the step after the group.

use crate::ids::ChainId;

/// Which NTs of a chain a packet runs: bit *i* set means it runs the chain's *i*-th NT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NtMask(pub u64);

impl NtMask {
    /// All of the first `n` NTs.
    pub fn all(n: usize) -> NtMask {
        if n >= 64 {
            NtMask(u64::MAX)
        } else {
            NtMask((1u64 << n) - 1)
        }
    }
    /// True if the packet runs NT `i`.
    #[inline]
    pub fn runs(self, i: usize) -> bool {
        i < 64 && self.0 & (1 << i) != 0
    }
    /// Number of NTs run.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }
    /// Its first NT alone (PANIC-style scheduling runs one NT per scheduler visit).
    #[inline]
    pub fn first(self) -> NtMask {
        NtMask(self.0 & self.0.wrapping_neg())
    }
    /// Its NTs up to NT `i`, that one included: what a packet that skips the rest of its chain
    /// after NT `i` ran.
    #[inline]
    pub fn up_to(self, i: usize) -> NtMask {
        NtMask(self.0 & (u64::MAX >> (63 - i.min(63))))
    }
    /// Its NTs after the last NT of `ran` (none if `ran` is empty).
    #[inline]
    pub fn after(self, ran: NtMask) -> NtMask {
        NtMask(self.0 & !(ran.0 | ran.0.wrapping_sub(1)))
    }
}

/// One chain visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The chain.
    pub chain: ChainId,
    /// The NTs of the chain this DAG runs.
    pub mask: NtMask,
}

/// The chains a DAG's packets visit, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagRoute {
    steps: Vec<Step>,
    /// Per step: (branches, join_at) — the group's size if the step starts a parallel group
    /// (else 0), and the position after its group if the step is in one (else 0).
    fork: Vec<(u8, u8)>,
    /// The route has a parallel group (most do not: their packets skip the lookup).
    parallel: bool,
}

/// Most steps in one parallel group.
pub const MAX_BRANCHES: usize = 8;

/// Why a parallel group was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// Groups must have 2..=MAX_BRANCHES steps, lie within the route, in order, not overlap.
    #[error("parallel group {0}..{1} is empty, too large, out of range or overlaps another")]
    Bad(usize, usize),
}

impl DagRoute {
    /// A route through `steps` (at least one), one after another.
    pub fn new(steps: Vec<Step>) -> Self {
        let fork = vec![(0, 0); steps.len()];
        DagRoute { steps, fork, parallel: false }
    }

    /// A route whose step ranges `groups` (`start..end`) each run in parallel.
    pub fn with_groups(steps: Vec<Step>, groups: &[(usize, usize)]) -> Result<Self, GroupError> {
        let mut r = Self::new(steps);
        let mut prev_end = 0;
        for &(start, end) in groups {
            let n = end.saturating_sub(start);
            if start < prev_end || !(2..=MAX_BRANCHES).contains(&n) || end > r.steps.len() || end > u8::MAX as usize {
                return Err(GroupError::Bad(start, end));
            }
            r.fork[start].0 = n as u8;
            for f in &mut r.fork[start..end] {
                f.1 = end as u8;
            }
            prev_end = end;
            r.parallel = true;
        }
        Ok(r)
    }

    /// The steps.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The parallel groups, as step ranges.
    pub fn groups(&self) -> Vec<(usize, usize)> {
        (0..self.steps.len()).filter(|&i| self.fork[i].0 > 0).map(|i| (i, self.fork[i].1 as usize)).collect()
    }

    /// At step `pos`: the size of the group it starts (0: none), and the position after the
    /// group it is in (0: none).
    #[inline(always)]
    pub fn fork_at(&self, pos: usize) -> (u8, u8) {
        if !self.parallel {
            return (0, 0);
        }
        self.fork.get(pos).copied().unwrap_or((0, 0))
    }
}
