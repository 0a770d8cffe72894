//! Chains and DAG routes that go away while the node runs (a control-plane change applied in
//! place): nothing in flight is cut short, and their ids come back for later ones. When is the
//! core's ([`snic_core::chains`], [`snic_core::dags`]); this module stops the instances and
//! frees what they held.

use super::{Backend, LaunchError, Node};
use snic_core::ids::ChainId;
use snic_core::sched::InstanceState;
use snic_nt::NtSpec;

impl<B: Backend> Node<B> {
    /// Takes a chain away (see [`snic_core::chains`]). DAG routes that use it should be
    /// replaced or removed first: until they are, and until their packets have finished, it
    /// keeps running.
    pub fn remove_chain(&mut self, chain: ChainId) {
        if !self.core.retire_chain(chain) {
            return;
        }
        self.elastic.forget_chain(chain);
        self.advance_retired();
    }

    /// A live chain's NT specs.
    pub(super) fn live_specs(&self, chain: ChainId) -> Result<&[NtSpec], LaunchError> {
        match self.chains.get(chain.index()) {
            Some(specs) if self.core.is_live(chain) => Ok(specs),
            _ => Err(LaunchError::UnknownChain(chain)),
        }
    }

    /// Routes whose packets have all finished leave the scheduler; retiring chains that nothing
    /// uses any more stop, and are gone once their instances are.
    pub(super) fn advance_retired(&mut self) {
        let store = &self.store;
        self.core.free_routes(|r| store.in_route(r) as usize);
        if !self.core.chains_retiring() {
            return;
        }
        // A launch under way (or one evicting the chain's instance) finishes first.
        let elastic = &self.elastic;
        let stop = self.core.chains_to_stop(|sched, c| elastic.launching(sched, c));
        for chain in stop {
            // (A stop refused while the chain's instances change is tried again next epoch.)
            self.stop_chain(chain);
            if self.core.settle_chain(chain) {
                self.chains[chain.index()] = Vec::new();
            }
        }
    }

    /// Stops every running instance of `chain` and takes down those that are parked in a
    /// region (idle, or victims), freeing the region; their NTs' state is saved for the chain's
    /// next launch if it is live (see [`Node::teardown`]). Instances still draining are taken
    /// down once parked.
    pub(super) fn stop_chain(&mut self, chain: ChainId) {
        for inst in self.core.sched().instances_of(chain).to_vec() {
            if self.core.sched().state(inst) == InstanceState::Running {
                let _ = self.core.stop_instance(inst);
            }
        }
        let parked: Vec<(usize, _)> = (self.elastic.slots.iter().enumerate())
            .filter_map(|(s, r)| r.0.map(|i| (s, i)))
            .filter(|&(_, i)| self.core.sched().chain_of(i) == chain && self.core.sched().state(i) == InstanceState::Parked)
            .collect();
        for (slot, inst) in parked {
            self.teardown(inst);
            self.core.region_freed(slot);
        }
    }
}
