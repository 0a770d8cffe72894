//! A deployed DAG, compiled into the sequence of chains a packet visits.
//!
//! A chain holds up to 64 NTs; a packet of a DAG that uses only some of them skips the rest
//! (paper §4.2: "skipping of arbitrary NT(s) in a chain"), so each step carries the mask of NTs
//! the packet runs. A DAG whose NTs span several chains returns to the scheduler between chains.

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
}

impl DagRoute {
    /// A route through `steps` (at least one).
    pub fn new(steps: Vec<Step>) -> Self {
        DagRoute { steps }
    }
    /// The steps.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }
}
