//! Chains and DAG routes that go away while the node runs (a control-plane change applied in
//! place): nothing in flight is cut short, and their ids come back for later ones.
//!
//! A replaced or removed DAG route stays in the scheduler until no packet is on it (the store
//! counts buffers per route): a packet always finishes the route it entered on. A removed
//! chain ([`Node::remove_chain`]) launches no more instances; once no route, old or new, steps
//! through it and no launch of it is under way, its instances stop, finish what they hold and
//! are torn down with their NTs' state, and their regions are freed. Then the chain is gone and
//! [`Node::add_chain`] may reuse its id. Both are checked once an epoch.

use super::{Backend, LaunchError, Node};
use snic_core::ids::ChainId;
use snic_core::sched::InstanceState;
use snic_nt::NtSpec;

/// Where a declared chain is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Life {
    /// Runs, launches, scales.
    Live,
    /// Removed: its instances finish what routes still bring them, then stop.
    Retiring,
    /// No instance, no route: the id is free.
    Gone,
}

/// True while `chain` is declared and not being taken away, by its entry in `life`.
pub(super) fn live(life: &[Life], chain: ChainId) -> bool {
    life.get(chain.index()) == Some(&Life::Live)
}

impl<B: Backend> Node<B> {
    /// Takes a chain away (see the module docs). DAG routes that use it should be replaced or
    /// removed first: until they are, and until their packets have finished, it keeps running.
    pub fn remove_chain(&mut self, chain: ChainId) {
        let Some(l) = self.life.get_mut(chain.index()) else { return };
        if *l != Life::Live {
            return;
        }
        *l = Life::Retiring;
        self.retiring += 1;
        // No saved state, no endpoint fallback, no load, no scaling history.
        self.elastic.forget_chain(chain);
        self.core.elastic.add_chain(chain);
        self.advance_retired();
    }

    /// True while `chain` is declared and not being taken away.
    pub fn is_live(&self, chain: ChainId) -> bool {
        live(&self.life, chain)
    }

    /// Chains declared and not taken away.
    pub fn live_chains(&self) -> usize {
        self.life.iter().filter(|&&l| l == Life::Live).count()
    }

    /// A live chain's NT specs.
    pub(super) fn live_specs(&self, chain: ChainId) -> Result<&[NtSpec], LaunchError> {
        match self.chains.get(chain.index()) {
            Some(specs) if self.is_live(chain) => Ok(specs),
            _ => Err(LaunchError::UnknownChain(chain)),
        }
    }

    /// Routes whose packets have all finished leave the scheduler; retiring chains that nothing
    /// uses any more stop, and are gone once their instances are.
    pub(super) fn advance_retired(&mut self) {
        self.dags.free_routes(&self.store, &mut self.sched);
        if self.retiring == 0 {
            return;
        }
        for c in 0..self.life.len() {
            let chain = ChainId(c as u16);
            if self.life[c] != Life::Retiring || self.sched.routes_use(chain) {
                continue;
            }
            // A launch under way (or one evicting this chain's instance) finishes first.
            let launching =
                self.elastic.pending.iter().any(|p| p.chain == chain || p.evict.is_some_and(|e| self.sched.chain_of(e) == chain));
            if launching {
                continue;
            }
            // (A stop refused while the chain's instances change is tried again next epoch.)
            self.stop_chain(chain);
            if !self.sched.chain_in_use(chain) {
                self.life[c] = Life::Gone;
                self.retiring -= 1;
                self.chains[c] = Vec::new();
                self.core.meter.remove_chain(chain);
            }
        }
    }

    /// Stops every running instance of `chain` and takes down those that are parked in a
    /// region (idle, or victims), freeing the region; their NTs' state is saved for the chain's
    /// next launch if it is live (see [`Node::teardown`]). Instances still draining are taken
    /// down once parked.
    pub(super) fn stop_chain(&mut self, chain: ChainId) {
        for inst in self.sched.instances_of(chain).to_vec() {
            if self.sched.state(inst) == InstanceState::Running && self.sched.stop_instance(inst).is_ok() {
                self.core.meter.set_active(inst, false);
            }
        }
        let parked: Vec<(usize, _)> = (self.elastic.slots.iter().enumerate())
            .filter_map(|(s, r)| r.0.map(|i| (s, i)))
            .filter(|&(_, i)| self.sched.chain_of(i) == chain && self.sched.state(i) == InstanceState::Parked)
            .collect();
        for (slot, inst) in parked {
            self.teardown(inst);
            self.core.elastic.free(slot);
        }
    }
}
