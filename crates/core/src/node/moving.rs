//! A region moving to another core, the core's side: one move at a time, asked for by the
//! placement policy ([`NodeCore::handle_placement`]) or an operator. The core checks the move,
//! holds dispatch to the instance (its packets keep queueing) and, once every batch it had on
//! its old core is back, hands the move to the driver ([`NodeCore::move_due`]), which moves
//! the region — its NTs, with their state — and says how it went ([`NodeCore::moved`]). An
//! instance stopped meanwhile drains where it is: the move is called off.

use super::NodeCore;
use crate::events::EventKind;
use crate::ids::InstanceId;
use crate::placement::{Moving, Place};
use crate::sched::InstanceState;
use crate::time::Instant;

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

/// The move under way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MoveUnderWay {
    pub(crate) inst: InstanceId,
    pub(crate) to: Place,
    pub(crate) since: Instant,
}

impl NodeCore {
    /// Whether a move is under way.
    pub fn moving(&self) -> Moving {
        match self.moving {
            Some(_) => Moving::UnderWay,
            None => Moving::None,
        }
    }

    /// Moves instance `inst`'s region, which runs `at` now, to `to` on a node of `workers`
    /// worker threads: dispatch to it is held until its batches in flight are back.
    pub fn begin_move(&mut self, now: Instant, inst: InstanceId, at: Option<Place>, to: Place, workers: usize) -> Result<(), MoveError> {
        if self.moving.is_some() {
            return Err(MoveError::Busy);
        }
        if inst.index() >= self.sched.instance_count() || self.sched.state(inst) != InstanceState::Running {
            return Err(MoveError::NotRunning(inst));
        }
        if let Place::Worker(w) = to {
            if w >= workers {
                return Err(MoveError::NoWorker(w));
            }
        }
        if at == Some(to) {
            return Err(MoveError::Already(inst));
        }
        self.pause_instance(inst, true);
        self.moving = Some(MoveUnderWay { inst, to, since: now });
        Ok(())
    }

    /// Each poll during a move: the instance and where its region goes, once it has nothing
    /// in flight — the driver moves it now and reports [`NodeCore::moved`]. `None` while it
    /// waits, or once the instance stopped meanwhile (its chain descheduled or switched: it
    /// drains where it is, and the move is called off).
    pub fn move_due(&mut self) -> Option<(InstanceId, Place)> {
        let m = self.moving?;
        if self.sched.state(m.inst) != InstanceState::Running {
            self.moving = None;
            self.pause_instance(m.inst, false);
            return None;
        }
        (self.sched.inflight(m.inst) == 0).then_some((m.inst, m.to))
    }

    /// The driver moved the region of the move [`NodeCore::move_due`] handed out (`ok`), or
    /// could not (a worker thread died, and the region with it): the event is recorded, and
    /// dispatch to the instance goes on.
    pub fn moved(&mut self, now: Instant, ok: bool) {
        let Some(m) = self.moving.take() else { return };
        let chain = self.sched.chain_of(m.inst);
        if ok {
            self.set_chain_on_worker(chain, m.to != Place::Dispatcher);
            self.placed(m.inst);
            let took = now.as_nanos().saturating_sub(m.since.as_nanos());
            self.record(now, chain, None, EventKind::Moved { instance: m.inst, to: m.to }, took);
        } else {
            self.record(now, chain, None, EventKind::MoveFailed { instance: m.inst, to: m.to }, 0);
        }
        self.pause_instance(m.inst, false);
    }
}
