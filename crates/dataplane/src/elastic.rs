//! Elastic NTs on one node (paper 000 §4.3–§4.4): a fixed number of regions, chains pre-launched
//! at deploy, launched on demand when their first packet arrives, context-switched with
//! stop-and-launch, kept as victims, and auto-scaled with load.
//!
//! The policy is `snic-core`'s (`snic_core::elastic::Elasticity`, in the node's
//! `snic_core::node::NodeCore`: where a chain runs, when an instance is added
//! or removed, which one stops; the scheduler's instance lifecycle for moving flows without
//! loss or reordering; which instance is in which region and the launches under way,
//! `snic_core::launches`); this module holds the node's side of it — the NTs built for a
//! launch until it runs, NT state saved by stopped chains, and what happened, for `snic
//! status` — and the chains' NT specs, from which NTs are built. The node drives it
//! (`node::elastic`).
//!
//! In software a region is an execution slot: one chain instance, its NTs built and loaded, on
//! the dispatcher's thread or a worker's. A launch builds the NTs (the real instantiation
//! cost, measured) and waits an optional emulated reconfiguration delay (0 by default; 5 ms
//! reproduces the paper's partial reconfiguration). A stopped chain's NTs keep their state in
//! memory: a victim keeps its whole region; an evicted chain's NTs are saved and restored at its
//! next launch (the paper's "store their states in on-board memory").

use snic_core::ids::ChainId;
use snic_core::pool::owner::Slots;
use snic_nt::{Nt, NtSpec, SpecError};

/// Elasticity parameters (the node config's `elastic:` block): the core's.
pub use snic_core::elastic::ElasticConfig;

/// What happened, one event, and the counters and recent events: the node's core keeps them
/// ([`snic_core::node::NodeCore::events`]).
pub use snic_core::events::{ElasticStats, Event, EventKind};

/// Why a chain was launched (the core's).
pub use snic_core::launches::Launched;

/// The node's elastic state. See the module docs.
pub struct Elastic {
    /// Per region: the NTs built for the launch into it under way, until it runs.
    pub(crate) built: Vec<Option<Vec<Box<dyn Nt>>>>,
    /// The policy's acts of one epoch (kept to reuse its room).
    pub(crate) acts: Vec<snic_core::elastic::Act>,
    /// A buffer for the packets that wait no more (those waiting are the core's,
    /// [`snic_core::node::NodeCore::wait_for_launch`]).
    pub(crate) released: Vec<u32>,
    /// Per chain: NT state saved by evicted instances, most recent last (bounded).
    pub(crate) saved: Vec<Vec<Vec<Box<dyn Nt>>>>,
    /// Per chain: its NTs' specs (none once it has gone).
    specs: Vec<Vec<NtSpec>>,
}

/// Saved NT states kept per chain.
pub(crate) const SAVED_PER_CHAIN: usize = 4;

impl Elastic {
    /// For `regions` regions.
    pub(crate) fn new(regions: usize) -> Self {
        Elastic {
            built: (0..regions).map(|_| None).collect(),
            acts: Vec::new(),
            released: Vec::new(),
            saved: Vec::new(),
            specs: Vec::new(),
        }
    }

    /// A chain goes away (or its id is reused): no saved state.
    pub(crate) fn forget_chain(&mut self, chain: ChainId) {
        if let Some(saved) = self.saved.get_mut(chain.index()) {
            saved.clear();
        }
    }

    /// Chain `id` (new, or a gone chain's id reused) has NTs `specs`.
    pub(crate) fn add_chain(&mut self, id: ChainId, specs: Vec<NtSpec>) {
        if id.index() < self.specs.len() {
            self.specs[id.index()] = specs;
        } else {
            self.saved.push(Vec::new());
            self.specs.push(specs);
        }
    }

    /// A gone chain's specs go.
    pub(crate) fn chain_gone(&mut self, chain: ChainId) {
        self.specs[chain.index()] = Vec::new();
    }

    /// Chain `chain`'s NT specs (empty for one that has gone).
    pub(crate) fn specs(&self, chain: ChainId) -> &[NtSpec] {
        self.specs.get(chain.index()).map_or(&[], Vec::as_slice)
    }

    /// What the NTs of `chain` that `runs` (by position) write ([`snic_nt::Access`]).
    pub(crate) fn writes(&self, chain: ChainId, runs: impl Fn(usize) -> bool) -> u8 {
        let specs = self.specs(chain).iter().enumerate();
        specs.filter(|(i, _)| runs(*i)).fold(0, |w, (_, s)| w | s.access().writes)
    }

    /// Chain `chain`'s NTs, freshly built from its specs; in a pool behind a switch (`slot`),
    /// a SNAT allocates from this node's block of ports.
    pub(crate) fn build(&self, chain: ChainId, slot: Option<Slots>) -> Result<Vec<Box<dyn Nt>>, SpecError> {
        let build = |spec: &NtSpec| match slot {
            Some(s) => snic_nt::build(&*spec.in_slot(s)?),
            None => snic_nt::build(spec),
        };
        self.specs(chain).iter().map(build).collect()
    }

    /// Keeps `nts` (a stopped instance's NTs, with their state) for `chain`'s next launch; the
    /// oldest saved state goes past [`SAVED_PER_CHAIN`].
    pub(crate) fn save(&mut self, chain: ChainId, nts: Vec<Box<dyn Nt>>) {
        let saved = &mut self.saved[chain.index()];
        if saved.len() == SAVED_PER_CHAIN {
            saved.remove(0);
        }
        saved.push(nts);
    }

    /// The most recently saved state of `chain`, taken.
    pub(crate) fn take_saved(&mut self, chain: ChainId) -> Option<Vec<Box<dyn Nt>>> {
        self.saved.get_mut(chain.index()).and_then(Vec::pop)
    }
}
