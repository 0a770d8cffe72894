//! Where the node's regions run: those on the dispatcher's thread, the worker threads, and the
//! instance each holds; installing, taking down and moving a region, and running or sending a
//! batch to it. Which region goes where is the core's ([`snic_core::placement`],
//! [`snic_core::launches`]); this carries it out.

use super::{LaunchError, Place};
use crate::region::{Region, RegionCounters};
use crate::store::Slots;
use crate::worker::{Work, WorkerError, WorkerHandle};
use snic_core::ids::InstanceId;
use snic_core::node::NodeCore;
use snic_core::sched::InstanceState;
use snic_core::time::Instant;
use snic_nt::WorkTimer;
use std::sync::mpsc::TryRecvError;
use std::sync::Arc;
use std::time::Duration;

/// The regions: those on the dispatcher's thread, the worker threads, and where each instance
/// runs.
pub(super) struct Exec {
    inline: Vec<Option<Region>>,
    pub(super) workers: Vec<WorkerHandle>,
    /// Where each instance's region runs.
    pub(super) placement: Vec<Place>,
    next: usize,
    /// Counters of each launched region, by instance.
    pub(super) counters: Vec<Option<Arc<RegionCounters>>>,
    /// Scratch for the in-flight caps, per instance: its worker if active there, and its cap.
    on_worker: Vec<Option<usize>>,
    caps: Vec<f64>,
}

impl Exec {
    /// `workers` worker threads (none: every region on the dispatcher's thread), each on a core
    /// of its own if `pin` (the dispatcher keeps the first, and is pinned to it); on a virtual
    /// clock (`timer`'s, at `now`) each worker is a virtual core of its own.
    pub(super) fn start(workers: usize, pin: bool, slots: &Arc<Slots>, timer: &WorkTimer, now: Instant) -> Result<Exec, WorkerError> {
        let cores = if pin && workers > 0 { process_cores().to_vec() } else { Vec::new() };
        let mut handles = Vec::with_capacity(workers);
        for w in 0..workers {
            let core = (!cores.is_empty()).then(|| cores[(w + 1) % cores.len()]);
            let timer = if timer.is_virtual() { WorkTimer::virtual_core(now.as_nanos()) } else { WorkTimer::Real };
            handles.push(WorkerHandle::spawn(w, slots.clone(), core, 1024, timer)?);
        }
        if let Some(c) = cores.first() {
            core_affinity::set_for_current(*c);
        }
        Ok(Exec {
            inline: Vec::new(),
            workers: handles,
            placement: Vec::new(),
            next: 0,
            counters: Vec::new(),
            on_worker: Vec::new(),
            caps: Vec::new(),
        })
    }

    /// Keeps instance `i`'s region on the dispatcher's thread.
    pub(super) fn put_inline(&mut self, i: usize, region: Region) {
        if self.inline.len() <= i {
            self.inline.resize_with(i + 1, || None);
        }
        self.inline[i] = Some(region);
    }

    /// Where instance `inst`'s region runs.
    pub(super) fn place_of(&self, inst: InstanceId) -> Place {
        self.placement.get(inst.index()).copied().unwrap_or(Place::Dispatcher)
    }

    /// A batch worker `w` finished: on the real clock, any that came back; on a virtual clock,
    /// one done by the dispatcher's time, once the thread has run all it was sent (see
    /// [`crate::worker`]).
    pub(super) fn next_done(&mut self, w: usize, timer: &WorkTimer) -> Option<Work> {
        let worker = &mut self.workers[w];
        if !worker.is_virtual() {
            return worker.poll_done();
        }
        worker.wait_all_back();
        worker.poll_done_by(timer.now_ns())
    }

    /// Worker `w`'s ring is full: on a virtual clock the dispatcher waits (its time moves on)
    /// until the worker's oldest batch is done; then the caller takes what came back.
    pub(super) fn wait_for_room(&mut self, w: usize, timer: &WorkTimer) {
        let worker = &mut self.workers[w];
        if worker.is_virtual() {
            worker.wait_all_back();
            if let Some(done) = worker.next_done_ns() {
                timer.spend(done.saturating_sub(timer.now_ns()));
            }
        }
    }

    /// True while worker threads hold batches that a poll could take at `now_ns`: on the real
    /// clock, any that have not come back; on a virtual clock, any done by then (a batch its
    /// worker finishes later in virtual time waits for the clock to get there).
    pub(super) fn busy(&self, now_ns: u64) -> bool {
        self.workers.iter().any(|w| {
            if !w.is_virtual() {
                return w.outstanding() > 0;
            }
            w.wait_all_back();
            w.next_done_ns().is_some_and(|d| d <= now_ns)
        })
    }

    /// Caps the work in flight of instances that share a worker (the policy:
    /// [`snic_core::placement::inflight_caps`], at the scheduler's `quantum_ns`).
    pub(super) fn bound_shared(&mut self, core: &mut NodeCore, quantum_ns: f64) {
        if self.workers.is_empty() {
            return;
        }
        let sched = core.sched();
        let active = |i: usize| {
            matches!(sched.state(InstanceId(i as u16)), InstanceState::Running | InstanceState::Launching | InstanceState::Draining)
        };
        self.on_worker.clear();
        self.on_worker.extend(self.placement.iter().enumerate().map(|(i, p)| match p {
            Place::Worker(k) if active(i) => Some(*k),
            _ => None,
        }));
        snic_core::placement::inflight_caps(&self.on_worker, quantum_ns, &mut self.caps);
        for (i, (cap, p)) in self.caps.iter().zip(&self.placement).enumerate() {
            if matches!(p, Place::Worker(_)) {
                core.set_inflight_cap(InstanceId(i as u16), *cap);
            }
        }
    }

    /// Where the next launch without a chosen place goes: the dispatcher's thread without
    /// workers, else the workers in turn.
    pub(super) fn next_place(&mut self) -> Place {
        if self.workers.is_empty() {
            return Place::Dispatcher;
        }
        self.next += 1;
        Place::Worker((self.next - 1) % self.workers.len())
    }

    /// Fails for a worker that does not exist.
    pub(super) fn check(&self, place: Place) -> Result<(), LaunchError> {
        match place {
            Place::Worker(w) if w >= self.workers.len() => Err(LaunchError::NoWorker(w)),
            _ => Ok(()),
        }
    }

    /// Puts `region` (instance `inst`'s) in `place`.
    pub(super) fn install(&mut self, inst: InstanceId, region: Region, place: Place) -> Result<(), WorkerError> {
        let i = inst.index();
        if self.counters.len() <= i {
            self.counters.resize(i + 1, None);
        }
        self.counters[i] = Some(region.counters());
        match place {
            Place::Dispatcher => self.put_inline(i, region),
            Place::Worker(w) => self.workers[w].install(region)?,
        }
        if self.placement.len() <= i {
            self.placement.resize(i + 1, Place::Dispatcher);
        }
        self.placement[i] = place;
        Ok(())
    }

    /// Takes instance `inst`'s region down, if there is one (a worker that does not answer has
    /// none to give).
    pub(super) fn take(&mut self, inst: InstanceId) -> Option<Region> {
        match self.place_of(inst) {
            Place::Dispatcher => self.inline.get_mut(inst.index()).and_then(Option::take),
            Place::Worker(w) => self.workers[w].remove(inst).ok().flatten(),
        }
    }

    /// Instance `inst`'s region, off the dispatcher's thread (for a move): at once, or the
    /// worker's answer to wait for.
    pub(super) fn take_later(&mut self, inst: InstanceId) -> Result<Later<Option<Region>>, WorkerError> {
        Ok(match self.place_of(inst) {
            Place::Dispatcher => Later::Now(self.inline.get_mut(inst.index()).and_then(Option::take)),
            Place::Worker(w) => Later::Wait(self.workers[w].remove_later(inst)?),
        })
    }

    /// Puts a moved region in `to`: at once, or the worker's answer to wait for (then
    /// [`Exec::placement`] says where it is).
    pub(super) fn put_later(&mut self, region: Region, to: Place) -> Result<Later<()>, WorkerError> {
        let i = region.instance.index();
        Ok(match to {
            Place::Dispatcher => {
                self.put_inline(i, region);
                Later::Now(())
            }
            Place::Worker(w) => Later::Wait(self.workers[w].install_later(region)?),
        })
    }

    /// The counters of instance `inst`'s region.
    pub(super) fn counters(&self, inst: InstanceId) -> Option<&Arc<RegionCounters>> {
        self.counters.get(inst.index()).and_then(Option::as_ref)
    }

    /// The instances whose NTs wait on timers ([`snic_nt::Nt::tick`]).
    pub(super) fn waiting(&self) -> impl Iterator<Item = InstanceId> + '_ {
        let waits = |c: &Option<Arc<RegionCounters>>| c.as_ref().and_then(|c| c.outbox.as_ref()).is_some_and(|o| o.is_waiting());
        self.counters.iter().enumerate().filter(move |(_, c)| waits(c)).map(|(i, _)| InstanceId(i as u16))
    }

    /// True while a worker holds a batch it has not given back.
    pub(super) fn outstanding(&self) -> bool {
        self.workers.iter().any(|w| w.outstanding() > 0)
    }

    /// Runs `batch` in instance `inst`'s region on the dispatcher's thread (if it is there):
    /// the NT time it took when `timed`, else 0.
    #[inline]
    pub(super) fn run_inline(
        &mut self,
        slots: &Slots,
        inst: InstanceId,
        batch: &[u32],
        now: Instant,
        timer: &WorkTimer,
        timed: bool,
    ) -> u64 {
        let Some(Some(r)) = self.inline.get_mut(inst.index()) else { return 0 };
        let t0 = timed.then(|| timer.now_ns());
        // SAFETY: the dispatcher owns every index in the batch, each once (the scheduler
        // queues an index at most once).
        unsafe { r.run(slots, batch, now, timer) };
        t0.map_or(0, |t0| timer.now_ns().saturating_sub(t0))
    }

    /// The flows whose state the running NTs hold, by hash, both directions of each (asks
    /// every worker thread).
    pub(super) fn flow_hashes(&self, now: Instant) -> Result<Vec<u64>, WorkerError> {
        let mut out = Vec::new();
        for r in self.inline.iter().flatten() {
            r.flow_hashes(now, &mut out);
        }
        for w in &self.workers {
            out.extend(w.flow_hashes(now)?);
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

/// A worker's answer, or what needed none.
pub(super) enum Later<T> {
    Now(T),
    Wait(std::sync::mpsc::Receiver<T>),
}

impl<T> Later<T> {
    /// The answer, doing `meanwhile` while it waits (a worker whose finished batches are not
    /// taken cannot get to its control messages); a worker that does not answer within 5 s
    /// is gone.
    pub(super) fn wait(self, mut meanwhile: impl FnMut()) -> Result<T, WorkerError> {
        let rx = match self {
            Later::Now(v) => return Ok(v),
            Later::Wait(rx) => rx,
        };
        let t0 = std::time::Instant::now();
        loop {
            match rx.try_recv() {
                Ok(v) => return Ok(v),
                Err(TryRecvError::Disconnected) => return Err(WorkerError::Gone),
                Err(TryRecvError::Empty) if t0.elapsed() > Duration::from_secs(5) => return Err(WorkerError::Gone),
                Err(TryRecvError::Empty) => {
                    meanwhile();
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// Pins the calling thread to the `k`-th core this process may run on (counting round); false if
/// the cores cannot be read or the pin failed. A node's dispatcher threads (`data_cores`) each
/// take one.
pub fn pin_current(k: usize) -> bool {
    let cores = process_cores();
    !cores.is_empty() && core_affinity::set_for_current(cores[k % cores.len()])
}

/// The cores this process may run on, read once. `core_affinity::get_core_ids` reads the
/// calling thread's affinity, and a node with pinned cores pins the thread that builds it: read
/// afresh, a second node built on that thread would see one core and put every worker on the
/// dispatcher's.
pub(super) fn process_cores() -> &'static [core_affinity::CoreId] {
    static CORES: std::sync::OnceLock<Vec<core_affinity::CoreId>> = std::sync::OnceLock::new();
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}
