//! Worker threads that host regions.
//!
//! The dispatcher hands a worker a batch of descriptor indices for one of its regions through
//! an SPSC ring (`rtrb`, ≈3 ns per item in chunks on this kind of machine, DEPENDENCIES.md) and
//! gets the same batch back through another ring when the chain has run. Moving a batch through a
//! ring moves ownership of its indices (see `store`). Regions are installed through a control
//! channel with an acknowledgement, so a region exists before its first batch arrives.
//!
//! On a virtual clock each worker is a virtual core ([`WorkTimer::virtual_core`]): a batch
//! starts when it was sent or when the core finished the previous one, whichever is later, its
//! NTs spend their modelled work on that core, and it comes back stamped with the virtual time
//! it finished ([`Work::done_ns`]). The dispatcher takes it only once its own time has reached
//! that ([`WorkerHandle::poll_done_by`]), after waiting for the thread to have run everything
//! sent ([`WorkerHandle::wait_all_back`]): what it sees depends on virtual time alone, never on
//! how fast the thread ran.

use crate::region::Region;
use crate::store::Slots;
use snic_core::ids::InstanceId;
use snic_core::time::Instant;
use snic_nt::WorkTimer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

pub use crate::store::MAX_BATCH;

/// A batch of descriptors for one region.
#[derive(Clone, Copy)]
pub struct Work {
    /// The instance (region) to run.
    pub instance: InstanceId,
    /// Number of valid entries in `idx`.
    pub n: u16,
    /// The dispatcher's clock when it sent the batch.
    pub now: Instant,
    /// On a virtual clock: the dispatcher's virtual time when it sent the batch, then the
    /// worker's when it finished it (0 on the real clock).
    pub sent_ns: u64,
    /// See `sent_ns`.
    pub done_ns: u64,
    /// Descriptor indices.
    pub idx: [u32; MAX_BATCH],
}

impl Work {
    /// A batch of `idx` for `instance`, sent at `now` (`sent_ns` on a virtual clock).
    pub fn new(instance: InstanceId, idx: &[u32], now: Instant, sent_ns: u64) -> Self {
        let mut w = Work { instance, n: idx.len() as u16, now, sent_ns, done_ns: 0, idx: [0; MAX_BATCH] };
        w.idx[..idx.len()].copy_from_slice(idx);
        w
    }

    /// The indices.
    pub fn indices(&self) -> &[u32] {
        &self.idx[..self.n as usize]
    }
}

enum Ctl {
    Install(Region, mpsc::Sender<()>),
    Remove(InstanceId, mpsc::Sender<Option<Region>>),
    FlowHashes(Instant, mpsc::Sender<Vec<u64>>),
}

/// The dispatcher's handle on one worker thread.
pub struct WorkerHandle {
    to: rtrb::Producer<Work>,
    from: rtrb::Consumer<Work>,
    ctl: mpsc::Sender<Ctl>,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
    /// Batches submitted and not yet back.
    outstanding: usize,
    /// The worker runs on a virtual core.
    virtual_core: bool,
}

/// Why a worker operation failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The thread could not be spawned.
    #[error("cannot spawn worker thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// The worker did not answer (it died).
    #[error("worker thread is not responding")]
    Gone,
    /// The backend could not take the packet store (an AF_XDP socket registering it).
    #[error("the I/O backend cannot use the packet store: {0}")]
    Backend(std::io::Error),
}

impl WorkerHandle {
    /// Spawns worker `id`, pinned to `core` if given, with rings of `ring` batches; `timer` is
    /// its core (`WorkTimer::Real`, or a virtual core of its own).
    pub fn spawn(
        id: usize,
        slots: Arc<Slots>,
        core: Option<core_affinity::CoreId>,
        ring: usize,
        timer: WorkTimer,
    ) -> Result<Self, WorkerError> {
        let virtual_core = timer.is_virtual();
        let (to, work_in) = rtrb::RingBuffer::<Work>::new(ring);
        let (work_out, from) = rtrb::RingBuffer::<Work>::new(ring);
        let (ctl, ctl_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let join = std::thread::Builder::new().name(format!("snic-worker-{id}")).spawn(move || {
            if let Some(c) = core {
                core_affinity::set_for_current(c);
            }
            worker_loop(slots, work_in, work_out, ctl_rx, st, timer)
        })?;
        Ok(WorkerHandle { to, from, ctl, stop, join: Some(join), outstanding: 0, virtual_core })
    }

    /// Installs a region; returns once the worker has it.
    pub fn install(&self, region: Region) -> Result<(), WorkerError> {
        self.install_later(region)?.recv_timeout(Duration::from_secs(5)).map_err(|_| WorkerError::Gone)
    }

    /// Removes a region and returns it.
    pub fn remove(&self, instance: InstanceId) -> Result<Option<Region>, WorkerError> {
        self.remove_later(instance)?.recv_timeout(Duration::from_secs(5)).map_err(|_| WorkerError::Gone)
    }

    /// Asks the worker to install a region; the answer comes once it has (after the batch it
    /// is running, if any). For a caller that keeps taking finished batches while it waits.
    pub fn install_later(&self, region: Region) -> Result<mpsc::Receiver<()>, WorkerError> {
        let (ack, rx) = mpsc::channel();
        self.ctl.send(Ctl::Install(region, ack)).map_err(|_| WorkerError::Gone)?;
        Ok(rx)
    }

    /// Asks the worker to give a region back; see [`WorkerHandle::install_later`].
    pub fn remove_later(&self, instance: InstanceId) -> Result<mpsc::Receiver<Option<Region>>, WorkerError> {
        let (ack, rx) = mpsc::channel();
        self.ctl.send(Ctl::Remove(instance, ack)).map_err(|_| WorkerError::Gone)?;
        Ok(rx)
    }

    /// The flows whose state its regions' NTs hold, by hash ([`snic_nt::Nt::flow_hashes`]).
    pub fn flow_hashes(&self, now: Instant) -> Result<Vec<u64>, WorkerError> {
        let (ack, rx) = mpsc::channel();
        self.ctl.send(Ctl::FlowHashes(now, ack)).map_err(|_| WorkerError::Gone)?;
        rx.recv_timeout(Duration::from_secs(5)).map_err(|_| WorkerError::Gone)
    }

    /// Sends a batch; gives it back if the ring is full. (The batch is returned by value on
    /// purpose: it is plain indices, and boxing would allocate per batch.)
    #[inline]
    #[allow(clippy::result_large_err)]
    pub fn submit(&mut self, w: Work) -> Result<(), Work> {
        self.to.push(w).map_err(|rtrb::PushError::Full(w)| w)?;
        self.outstanding += 1;
        Ok(())
    }

    /// Batches submitted and not yet back.
    #[inline]
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// A finished batch, if any.
    #[inline]
    pub fn poll_done(&mut self) -> Option<Work> {
        let w = self.from.pop().ok()?;
        self.outstanding -= 1;
        Some(w)
    }

    /// True if the worker runs on a virtual core.
    pub fn is_virtual(&self) -> bool {
        self.virtual_core
    }

    /// Waits (in real time, up to 10 s) until the thread has run and sent back every batch
    /// submitted, or filled the ring it sends them back on (it waits for room then, in order);
    /// false if it did neither (it died). On a virtual clock this makes what the dispatcher
    /// sees independent of the thread's speed.
    pub fn wait_all_back(&self) -> bool {
        let t0 = std::time::Instant::now();
        let mut spins = 0u32;
        while self.from.slots() < self.outstanding.min(self.from.buffer().capacity()) {
            if self.join.as_ref().is_none_or(|j| j.is_finished()) || t0.elapsed() > Duration::from_secs(10) {
                return false;
            }
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        true
    }

    /// The virtual time the oldest finished batch was done, if one is back.
    pub fn next_done_ns(&self) -> Option<u64> {
        self.from.peek().ok().map(|w| w.done_ns)
    }

    /// A finished batch that was done by virtual time `ns`, if any.
    #[inline]
    pub fn poll_done_by(&mut self, ns: u64) -> Option<Work> {
        if self.next_done_ns()? > ns {
            return None;
        }
        self.poll_done()
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

fn worker_loop(
    slots: Arc<Slots>,
    mut inq: rtrb::Consumer<Work>,
    mut outq: rtrb::Producer<Work>,
    ctl: mpsc::Receiver<Ctl>,
    stop: Arc<AtomicBool>,
    core: WorkTimer,
) {
    let mut regions: Vec<Option<Region>> = Vec::new();
    let mut idle = 0u32;
    while !stop.load(Ordering::Acquire) {
        match inq.pop() {
            Ok(mut w) => {
                idle = 0;
                // A virtual core idle since its last batch starts this one when it was sent.
                core.idle_until(w.sent_ns);
                if let Some(Some(r)) = regions.get_mut(w.instance.index()) {
                    // SAFETY: the dispatcher handed these indices over through the ring and
                    // does not touch them until the batch comes back.
                    unsafe { r.run(&slots, w.indices(), w.now, &core) };
                }
                if core.is_virtual() {
                    w.done_ns = core.now_ns();
                }
                loop {
                    match outq.push(w) {
                        Ok(()) => break,
                        Err(rtrb::PushError::Full(back)) => {
                            if stop.load(Ordering::Acquire) {
                                return;
                            }
                            w = back;
                            std::hint::spin_loop();
                        }
                    }
                }
                // Between batches too: a region moving off this worker must not wait until the
                // worker runs dry (one channel read, a few ns, per batch).
                control(&ctl, &mut regions);
            }
            Err(_) => {
                control(&ctl, &mut regions);
                idle = idle.saturating_add(1);
                if idle > 2048 {
                    std::thread::sleep(Duration::from_micros(50));
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// Carries out the dispatcher's pending control messages.
fn control(ctl: &mpsc::Receiver<Ctl>, regions: &mut Vec<Option<Region>>) {
    while let Ok(c) = ctl.try_recv() {
        match c {
            Ctl::Install(r, ack) => {
                let i = r.instance.index();
                if regions.len() <= i {
                    regions.resize_with(i + 1, || None);
                }
                regions[i] = Some(r);
                let _ = ack.send(());
            }
            Ctl::Remove(inst, ack) => {
                let r = regions.get_mut(inst.index()).and_then(Option::take);
                let _ = ack.send(r);
            }
            Ctl::FlowHashes(now, ack) => {
                let mut out = Vec::new();
                for r in regions.iter().flatten() {
                    r.flow_hashes(now, &mut out);
                }
                let _ = ack.send(out);
            }
        }
    }
}
