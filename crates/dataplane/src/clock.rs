//! The data plane's clocks: the monotonic one a daemon runs on, and a manual one for virtual time.

use snic_core::time::Instant;
use snic_nt::WorkTimer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A source of time for the data plane.
pub trait Clock: Send {
    /// Now.
    fn now(&self) -> Instant;

    /// What times the work of NTs (their cost per packet, which fair sharing and placement
    /// weigh): the real clock, unless the node runs on a virtual one — then the same virtual
    /// time, so that the costs and the rates they are multiplied by are in one time.
    fn work_timer(&self) -> WorkTimer {
        WorkTimer::Real
    }
}

/// The monotonic clock, with its origin at construction.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock(std::time::Instant);

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock(std::time::Instant::now())
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
}

/// A clock that only moves when told to (nanoseconds in the shared cell): the node on virtual
/// time, as the tests and the virtual-clock benchmarks drive it.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(pub Arc<AtomicU64>);

impl ManualClock {
    /// Moves time forward.
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant(self.0.load(Ordering::Relaxed))
    }

    fn work_timer(&self) -> WorkTimer {
        WorkTimer::Virtual(self.0.clone())
    }
}
