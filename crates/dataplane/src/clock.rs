//! The data plane's clocks: the monotonic one a daemon runs on, and a manual one for virtual time.

use snic_core::meter::CoreTime;
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

    /// The calling thread's time on its core so far (see [`CoreTime`]), if this clock can tell.
    fn core_time(&self) -> Option<CoreTime> {
        None
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

    /// The kernel's account of the calling thread (`/proc/thread-self/schedstat`: ns on the CPU,
    /// ns runnable on a run queue), read with one `pread` of a file each thread opens once;
    /// `None` where the kernel keeps no such account.
    fn core_time(&self) -> Option<CoreTime> {
        use std::os::unix::fs::FileExt;
        thread_local! {
            static SCHEDSTAT: Option<std::fs::File> = std::fs::File::open("/proc/thread-self/schedstat").ok();
        }
        SCHEDSTAT.with(|f| {
            let mut buf = [0u8; 96];
            let n = f.as_ref()?.read_at(&mut buf, 0).ok()?;
            parse_schedstat(&buf[..n])
        })
    }
}

/// `schedstat`'s first two fields: time on the CPU and time waiting on a run queue, ns.
fn parse_schedstat(text: &[u8]) -> Option<CoreTime> {
    let mut it = std::str::from_utf8(text).ok()?.split_ascii_whitespace().map(str::parse::<u64>);
    Some(CoreTime { run_ns: it.next()?.ok()?, wait_ns: it.next()?.ok()? })
}

/// A clock that only moves when told to: the node on virtual time, as the tests and the
/// virtual-clock benchmarks drive it. Clones share the time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    /// Nanoseconds since the origin.
    now: Arc<AtomicU64>,
    /// Of them, those the driver took the node's core away for ([`ManualClock::take_core`]).
    taken: Arc<AtomicU64>,
}

impl ManualClock {
    /// Moves time forward.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Moves time forward while other work has the node's core (a CPU hog under the kernel's
    /// scheduler): the node's [`Clock::core_time`] counts it as waiting for its core.
    pub fn take_core(&self, d: Duration) {
        self.taken.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        self.advance(d);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant(self.now.load(Ordering::Relaxed))
    }

    fn work_timer(&self) -> WorkTimer {
        WorkTimer::Virtual(self.now.clone())
    }

    /// Every virtual nanosecond the core was not taken away is the node's.
    fn core_time(&self) -> Option<CoreTime> {
        let (now, taken) = (self.now.load(Ordering::Relaxed), self.taken.load(Ordering::Relaxed));
        Some(CoreTime { run_ns: now.saturating_sub(taken), wait_ns: taken })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_run_and_wait_time() {
        assert_eq!(parse_schedstat(b"282670 2779373 2\n"), Some(CoreTime { run_ns: 282_670, wait_ns: 2_779_373 }));
        assert_eq!(parse_schedstat(b"12\n"), None);
        assert_eq!(parse_schedstat(b""), None);
        assert_eq!(parse_schedstat(b"x 1 2"), None);
    }

    #[test]
    fn the_real_clock_reads_this_threads_time_and_it_only_grows() {
        let c = MonotonicClock::default();
        let Some(a) = c.core_time() else {
            // (A kernel without schedstat: nothing to read, and the node takes its core as its own.)
            assert!(std::fs::metadata("/proc/thread-self/schedstat").is_err());
            return;
        };
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = c.core_time().unwrap();
        assert!(b.run_ns > a.run_ns && b.wait_ns >= a.wait_ns, "{a:?} -> {b:?}");
    }

    #[test]
    fn a_virtual_clock_counts_the_taken_core_as_waiting() {
        let c = ManualClock::default();
        c.advance(Duration::from_millis(7));
        c.take_core(Duration::from_millis(3));
        assert_eq!(c.core_time(), Some(CoreTime { run_ns: 7_000_000, wait_ns: 3_000_000 }));
        assert_eq!(c.now(), Instant(10_000_000));
    }
}
