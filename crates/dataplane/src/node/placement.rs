//! Moving a region to another core, and the policy that asks for it.
//!
//! [`snic_core::placement`] decides (long chains apart from short ones, never on the
//! dispatcher's thread), looked at by the node's core every [`PLACEMENT_PERIOD`]
//! ([`snic_core::node::NodeCore::handle_placement`]); this module carries a move out. Dispatch to the instance is held (its
//! packets keep queueing), and once every batch it had on its old core is back, its region —
//! the NT objects, with their state — goes to the new core: taken from the dispatcher's thread
//! or asked back from its worker, then installed on the other worker or kept on the
//! dispatcher's thread. Workers answer between batches, so the dispatcher waits for at most the
//! batch a worker is running, and it keeps taking finished batches while it waits. Nothing is
//! lost or reordered: the instance's queue simply waits.

use super::{Backend, Node, Place};
use crate::elastic::EventKind;
use crate::worker::WorkerError;
use snic_core::ids::InstanceId;
use snic_core::placement::Moving as MoveState;
use snic_core::sched::InstanceState;
use snic_core::time::Instant;
use std::sync::mpsc;
use std::time::Duration;

/// How often the node looks at where its instances run (the policy's).
pub use snic_core::placement::PLACEMENT_PERIOD;

/// Why a move was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MoveError {
    /// No such instance, or it is not running.
    #[error("instance {0:?} is not running")]
    NotRunning(InstanceId),
    /// No worker thread of that number.
    #[error("no worker thread {0}")]
    NoWorker(usize),
    /// The instance runs there already.
    #[error("instance {0:?} runs there already")]
    Already(InstanceId),
    /// Another move is under way (one at a time).
    #[error("another move is under way")]
    Busy,
}

/// The node's side of placement: the move under way.
#[derive(Default)]
pub(super) struct Placement {
    moving: Option<Moving>,
}

#[derive(Clone, Copy)]
struct Moving {
    inst: InstanceId,
    to: Place,
    since: Instant,
}

impl Placement {
    /// Whether a move waits for the instance's batches.
    #[inline]
    pub(super) fn moving(&self) -> MoveState {
        if self.moving.is_some() {
            MoveState::UnderWay
        } else {
            MoveState::None
        }
    }
}

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
        if self.placement.moving.is_some() {
            return Err(MoveError::Busy);
        }
        if inst.index() >= self.core.sched().instance_count() || self.core.sched().state(inst) != InstanceState::Running {
            return Err(MoveError::NotRunning(inst));
        }
        if let Place::Worker(w) = to {
            if w >= self.exec.workers.len() {
                return Err(MoveError::NoWorker(w));
            }
        }
        if self.place_of(inst) == Some(to) {
            return Err(MoveError::Already(inst));
        }
        self.core.pause_instance(inst, true);
        self.placement.moving = Some(Moving { inst, to, since: self.clock.now() });
        Ok(())
    }

    /// Each poll during a move: once the instance has nothing in flight, moves its region.
    pub(super) fn advance_move(&mut self, now: Instant) {
        let Some(m) = self.placement.moving else { return };
        if self.core.sched().state(m.inst) != InstanceState::Running {
            // Stopped meanwhile (its chain descheduled or switched): it must drain where it is.
            self.placement.moving = None;
            self.core.pause_instance(m.inst, false);
            return;
        }
        if self.core.sched().inflight(m.inst) > 0 {
            return;
        }
        self.placement.moving = None;
        let chain = self.core.sched().chain_of(m.inst);
        match self.transfer(m.inst, m.to, now) {
            Ok(()) => {
                let kind = EventKind::Moved { instance: m.inst, to: m.to };
                self.core.record(now, chain, None, kind, now.as_nanos().saturating_sub(m.since.as_nanos()));
            }
            // A worker thread died: the region went with it.
            Err(_) => self.core.record(now, chain, None, EventKind::MoveFailed { instance: m.inst, to: m.to }, 0),
        }
        self.core.pause_instance(m.inst, false);
    }

    /// Moves an idle region (an error means a worker thread died).
    fn transfer(&mut self, inst: InstanceId, to: Place, now: Instant) -> Result<(), WorkerError> {
        let i = inst.index();
        let from = self.exec.placement[i];
        let region = match from {
            Place::Dispatcher => self.exec.inline.get_mut(i).and_then(Option::take),
            Place::Worker(w) => {
                let rx = self.exec.workers[w].remove_later(inst)?;
                self.wait_for_worker(rx, now)?
            }
        };
        let Some(region) = region else { return Err(WorkerError::Gone) };
        match to {
            Place::Dispatcher => self.exec.put_inline(i, region),
            Place::Worker(w) => {
                let rx = self.exec.workers[w].install_later(region)?;
                self.wait_for_worker(rx, now)?;
            }
        }
        self.exec.placement[i] = to;
        self.core.set_chain_on_worker(self.core.sched().chain_of(inst), to != Place::Dispatcher);
        self.core.placed(inst);
        Ok(())
    }

    /// Waits for a worker's answer, taking finished batches meanwhile (a worker whose finished
    /// batches are not taken cannot get to its control messages).
    fn wait_for_worker<T>(&mut self, rx: mpsc::Receiver<T>, now: Instant) -> Result<T, WorkerError> {
        let t0 = std::time::Instant::now();
        loop {
            match rx.try_recv() {
                Ok(v) => return Ok(v),
                Err(mpsc::TryRecvError::Disconnected) => return Err(WorkerError::Gone),
                Err(mpsc::TryRecvError::Empty) if t0.elapsed() > Duration::from_secs(5) => return Err(WorkerError::Gone),
                Err(mpsc::TryRecvError::Empty) => {
                    self.drain_completions(now);
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Asks the core whether a region should move now (it looks every [`PLACEMENT_PERIOD`]),
    /// and starts the move it proposes.
    pub(super) fn placement_look(&mut self, now: Instant) {
        let (workers, moving) = (self.exec.workers.len(), self.placement.moving());
        if let Some(m) = self.core.handle_placement(now, &self.exec.placement, workers, moving) {
            // The policy proposes running instances, existing workers and new places only.
            let r = self.move_instance(m.id, m.to);
            debug_assert!(r.is_ok(), "placement proposed an impossible move: {r:?}");
        }
    }
}
