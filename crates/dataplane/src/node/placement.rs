//! Moving a region to another core, and the policy that asks for it.
//!
//! [`snic_core::placement`] decides (long chains apart from short ones, never on the
//! dispatcher's thread), looked at by the node's core every [`PLACEMENT_PERIOD`]
//! ([`snic_core::node::NodeCore::handle_placement`]), and the core holds the move under way
//! ([`snic_core::node::moving`]); this module carries it out. Dispatch to the instance is held
//! (its packets keep queueing), and once every batch it had on its old core is back, its region —
//! the NT objects, with their state — goes to the new core: taken from the dispatcher's thread
//! or asked back from its worker, then installed on the other worker or kept on the
//! dispatcher's thread. Workers answer between batches, so the dispatcher waits for at most the
//! batch a worker is running, and it keeps taking finished batches while it waits. Nothing is
//! lost or reordered: the instance's queue simply waits.

use super::{Backend, Node, Place};
use crate::worker::WorkerError;
use snic_core::ids::InstanceId;
use snic_core::time::Instant;

/// How often the node looks at where its instances run (the policy's).
pub use snic_core::placement::PLACEMENT_PERIOD;

/// Why a move was refused (the core's).
pub use snic_core::node::moving::MoveError;

impl<B: Backend> Node<B> {
    /// Where instance `inst`'s region runs (`None`: no such instance).
    pub fn place_of(&self, inst: InstanceId) -> Option<Place> {
        self.exec.placement.get(inst.index()).copied()
    }

    /// Moves instance `inst`'s region, NT state included, to `to`: dispatch to it is held
    /// until its batches in flight are back (its packets wait in its queue), then the region
    /// moves (see the module docs). One move at a time; the node makes its own moves with
    /// `auto_place` on.
    pub fn move_instance(&mut self, inst: InstanceId, to: Place) -> Result<(), MoveError> {
        let now = self.clock.now();
        self.core.begin_move(now, inst, self.place_of(inst), to, self.exec.workers.len())
    }

    /// Each poll during a move: once the instance has nothing in flight, moves its region.
    pub(super) fn advance_move(&mut self, now: Instant) {
        if let Some((inst, to)) = self.core.move_due() {
            // (An error: a worker thread died, and the region with it.)
            let ok = self.transfer(inst, to, now).is_ok();
            self.core.moved(now, ok);
        }
    }

    /// Moves an idle region (an error means a worker thread died), taking finished batches
    /// while a worker answers.
    fn transfer(&mut self, inst: InstanceId, to: Place, now: Instant) -> Result<(), WorkerError> {
        let taken = self.exec.take_later(inst)?;
        let Some(region) = taken.wait(|| _ = self.drain_completions(now))? else { return Err(WorkerError::Gone) };
        self.exec.put_later(region, to)?.wait(|| _ = self.drain_completions(now))?;
        self.exec.placement[inst.index()] = to;
        Ok(())
    }

    /// Asks the core whether a region should move now (it looks every [`PLACEMENT_PERIOD`]),
    /// and starts the move it proposes.
    pub(super) fn placement_look(&mut self, now: Instant) {
        if let Some(m) = self.core.handle_placement(now, &self.exec.placement, self.exec.workers.len()) {
            // The policy proposes running instances, existing workers and new places only.
            let r = self.move_instance(m.id, m.to);
            debug_assert!(r.is_ok(), "placement proposed an impossible move: {r:?}");
        }
    }
}
