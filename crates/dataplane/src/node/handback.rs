//! A chain comes home from a peer with its NTs' state (paper §5: "pause new traffic, migrate
//! state, resume"), both sides.
//!
//! Home ([`super::pool`] decides the move back): the chain's packets stop going to the peer and
//! wait here ([`PoolRequest::Return`](super::PoolRequest::Return)). The peer takes the DAG
//! down — what it had received runs to the end first — and its chains' instances, as each
//! stops, give their NTs' state ([`Node::export_chain`], [`Node::poll_exported`]). Home builds
//! the chain's NTs, restores every instance's state into them ([`Node::pool_returned`]), and
//! keeps them for the chain's launch, which the waiting packets start: a NAT keeps its
//! mappings, a counter its counts, and no packet runs here before the peer has run all it was
//! sent. A state that does not come (the peer does not answer, or dies) does not hold the
//! packets: the chain starts afresh, and the event says so.
//!
//! State moves as bytes ([`snic_nt::Nt::save_state`]): times in it are relative, so it means
//! the same on a node whose clock started elsewhere. It travels between the nodes' drivers
//! ([`ChainState`], serde).

use super::{Backend, Node};
use crate::elastic::EventKind;
use serde::{Deserialize, Serialize};
use snic_core::ids::ChainId;
use snic_core::pool::ChainKey;
use snic_core::time::Instant;
use snic_nt::Nt;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// The NT state of a chain's instances, as it moves between nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainState {
    /// The chain, pool-wide (its NTs' names): the home node's chain of the same key takes it.
    pub key: ChainKey,
    /// Per instance the chain had (running, or stopped with its state saved), per NT in chain
    /// order: its saved state, if it keeps one.
    pub instances: Vec<Vec<Option<Vec<u8>>>>,
}

/// Chains whose state is being collected (the peer's side; the chains coming home that wait
/// for theirs are the core's: [`snic_core::pool::placements::Placements::returning`]).
#[derive(Default)]
pub(crate) struct Handback {
    pub(super) exporting: Vec<(ChainId, ChainState)>,
    pub(super) exported: VecDeque<(ChainId, ChainState)>,
}

pub(super) fn save_all(nts: &[Box<dyn Nt>], now: Instant) -> Vec<Option<Vec<u8>>> {
    nts.iter().map(|n| n.save_state(now)).collect()
}

impl Handback {
    /// An instance of `chain` stopped with `nts`: their state, if the chain's is being
    /// collected.
    pub(super) fn collect(&mut self, chain: ChainId, nts: &[Box<dyn Nt>], now: Instant) {
        if let Some((_, state)) = self.exporting.iter_mut().find(|e| e.0 == chain) {
            state.instances.push(save_all(nts, now));
        }
    }

    /// `chain`'s state is whole if `stopped` (no instance of it runs or launches): it goes out.
    pub(super) fn finish(&mut self, chain: ChainId, stopped: impl FnOnce() -> bool) {
        let Some(i) = self.exporting.iter().position(|e| e.0 == chain) else { return };
        if stopped() {
            let e = self.exporting.swap_remove(i);
            self.exported.push_back(e);
        }
    }
}

/// Restores into `nts` every instance's state of `states` (each per NT, in chain order): the
/// entries restored. A state that does not parse is left out: its NT starts without it.
pub(super) fn restore_into(nts: &mut [Box<dyn Nt>], states: &[&Vec<Option<Vec<u8>>>], now: Instant) -> u32 {
    let mut n = 0;
    for inst in states {
        for (nt, s) in nts.iter_mut().zip(inst.iter()) {
            n += s.as_ref().and_then(|s| nt.restore_state(s, now).ok()).unwrap_or(0);
        }
    }
    n as u32
}

impl<B: Backend> Node<B> {
    /// Takes `chain` away (as [`Node::remove_chain`]) and collects its NTs' state as its
    /// instances stop: what they have finishes first. The state comes out of
    /// [`Node::poll_exported`] once the last instance has stopped. Routes that use the chain
    /// (the hosted DAG) should be removed first.
    pub fn export_chain(&mut self, chain: ChainId) {
        let key = self.chain_key(chain);
        self.regions().begin_export(chain, key);
        if self.core.is_live(chain) {
            self.remove_chain(chain);
            self.regions().export_if_stopped(chain);
        }
    }

    /// A chain's state, collected ([`Node::export_chain`]), for the driver.
    pub fn poll_exported(&mut self) -> Option<(ChainId, ChainState)> {
        self.pool.handback.exported.pop_front()
    }

    /// The answer to [`PoolRequest::Return`](super::PoolRequest::Return) for `chain`: the
    /// peer's state of the DAG's chains (or why it did not come). The chain's own state is
    /// restored into its NTs for its launch here, and its waiting packets go on. An answer for
    /// a chain not coming home (it was answered already, or its peer died) is ignored.
    pub fn pool_returned(&mut self, chain: ChainId, result: Result<Vec<ChainState>, String>) {
        let now = self.clock.now();
        let Some((data, since)) = self.core.pool_returned(chain) else { return };
        let restored = result.ok().map(|states| self.regions().restore(chain, &states));
        self.came_home(chain, data, since, restored, now);
    }

    /// `chain` came home from the peer at data address `data`, coming since `since`, with
    /// `restored` entries of its state (`None`: none came): its waiting packets go on.
    pub(super) fn came_home(&mut self, chain: ChainId, data: SocketAddr, since: Instant, restored: Option<u32>, now: Instant) {
        let took = now.saturating_since(since).as_nanos() as u64;
        self.core.record(now, chain, None, EventKind::MovedBack { peer: data, restored }, took);
        self.release_waiting(Some(chain), now);
    }
}
