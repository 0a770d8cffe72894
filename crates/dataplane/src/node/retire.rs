//! Chains and DAG routes that go away while the node runs (a control-plane change applied in
//! place): nothing in flight is cut short, and their ids come back for later ones. When is the
//! core's ([`snic_core::chains`], [`snic_core::dags`]); this module stops the instances and
//! frees what they held.

use super::{Backend, Node};
use snic_core::ids::ChainId;

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

    /// Routes whose packets have all finished leave the scheduler; retiring chains that nothing
    /// uses any more stop, and are gone once their instances are.
    pub(super) fn advance_retired(&mut self) {
        let store = &self.store;
        self.core.free_routes(|r| store.in_route(r) as usize);
        if !self.core.chains_retiring() {
            return;
        }
        // A launch under way (or one evicting the chain's instance) finishes first.
        let stop = self.core.chains_to_stop();
        for chain in stop {
            // (A stop refused while the chain's instances change is tried again next epoch.)
            self.stop_chain(chain);
            if self.core.settle_chain(chain) {
                self.elastic.chain_gone(chain);
            }
        }
    }

    /// Stops `chain`'s instances and takes down those parked in a region, now
    /// ([`snic_core::node::NodeCore::stop_chain`]); their NTs' state is saved for the chain's
    /// next launch if it is live.
    pub(super) fn stop_chain(&mut self, chain: ChainId) {
        self.core.stop_chain(chain);
        self.carry_out_launches(self.clock.now());
    }
}
