//! Worker threads that host regions.
//!
//! The dispatcher hands a worker a batch of descriptor indices for one of its regions through
//! an SPSC ring (`rtrb`, ≈3 ns per item in chunks on this kind of machine, DEPENDENCIES.md) and
//! gets the same batch back through another ring when the chain has run. Moving a batch through a
//! ring moves ownership of its indices (see `store`). Regions are installed through a control
//! channel with an acknowledgement, so a region exists before its first batch arrives.

use crate::region::Region;
use crate::store::Slots;
use snic_core::ids::InstanceId;
use snic_core::time::Instant;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// Most descriptors in one batch.
pub const MAX_BATCH: usize = 64;

/// A batch of descriptors for one region.
#[derive(Clone, Copy)]
pub struct Work {
    /// The instance (region) to run.
    pub instance: InstanceId,
    /// Number of valid entries in `idx`.
    pub n: u16,
    /// The dispatcher's clock when it sent the batch.
    pub now: Instant,
    /// Descriptor indices.
    pub idx: [u32; MAX_BATCH],
}

impl Work {
    /// The indices.
    pub fn indices(&self) -> &[u32] {
        &self.idx[..self.n as usize]
    }
}

enum Ctl {
    Install(Region, mpsc::Sender<()>),
    Remove(InstanceId, mpsc::Sender<Option<Region>>),
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
}

impl WorkerHandle {
    /// Spawns worker `id`, pinned to `core` if given, with rings of `ring` batches.
    pub fn spawn(id: usize, slots: Arc<Slots>, core: Option<core_affinity::CoreId>, ring: usize) -> Result<Self, WorkerError> {
        let (to, work_in) = rtrb::RingBuffer::<Work>::new(ring);
        let (work_out, from) = rtrb::RingBuffer::<Work>::new(ring);
        let (ctl, ctl_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let join = std::thread::Builder::new().name(format!("snic-worker-{id}")).spawn(move || {
            if let Some(c) = core {
                core_affinity::set_for_current(c);
            }
            worker_loop(slots, work_in, work_out, ctl_rx, st)
        })?;
        Ok(WorkerHandle { to, from, ctl, stop, join: Some(join), outstanding: 0 })
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
) {
    let mut regions: Vec<Option<Region>> = Vec::new();
    let mut idle = 0u32;
    while !stop.load(Ordering::Acquire) {
        match inq.pop() {
            Ok(w) => {
                idle = 0;
                if let Some(Some(r)) = regions.get_mut(w.instance.index()) {
                    // SAFETY: the dispatcher handed these indices over through the ring and
                    // does not touch them until the batch comes back.
                    unsafe { r.run(&slots, w.indices(), w.now) };
                }
                let mut w = w;
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
        }
    }
}
