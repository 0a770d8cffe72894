//! What times the work of NTs, and spends the work that is modelled rather than done.
//!
//! On the real clock, an NT's cost is the CPU time it takes, and a modelled cost (a synthetic
//! NT's, an emulated I/O cost) is spent by busy-waiting. On a virtual clock each core has its
//! own count of nanoseconds: modelled work moves that core's time on, real work takes none of
//! it. A node on a virtual clock is then a model of its cores that runs the real data path and
//! gives the same answer on any machine, however fast or loaded: what its tests rely on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub enum WorkTimer {
    /// The monotonic clock.
    #[default]
    Real,
    /// A virtual core's nanoseconds: work takes no time on it unless it is spent.
    Virtual(Arc<AtomicU64>),
}

impl WorkTimer {
    /// A virtual core of its own, starting at `ns`.
    pub fn virtual_core(ns: u64) -> Self {
        WorkTimer::Virtual(Arc::new(AtomicU64::new(ns)))
    }

    /// True on a virtual clock.
    #[inline]
    pub fn is_virtual(&self) -> bool {
        matches!(self, WorkTimer::Virtual(_))
    }

    /// Nanoseconds since an arbitrary origin (a virtual core: its own time).
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self {
            WorkTimer::Real => {
                static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
                ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
            }
            WorkTimer::Virtual(ns) => ns.load(Ordering::Relaxed),
        }
    }

    /// Spends `ns` of modelled work: busy-waits that long on the real clock; moves a virtual
    /// core's time on.
    #[inline]
    pub fn spend(&self, ns: u64) {
        if ns == 0 {
            return;
        }
        match self {
            WorkTimer::Real => {
                let t0 = std::time::Instant::now();
                let d = std::time::Duration::from_nanos(ns);
                while t0.elapsed() < d {
                    std::hint::spin_loop();
                }
            }
            WorkTimer::Virtual(c) => {
                c.fetch_add(ns, Ordering::Relaxed);
            }
        }
    }

    /// A virtual core that was idle catches up with `ns` (the time work arrives): its time is
    /// at least `ns` afterwards. Nothing on the real clock.
    #[inline]
    pub fn idle_until(&self, ns: u64) {
        if let WorkTimer::Virtual(c) = self {
            c.fetch_max(ns, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_core_moves_only_when_work_is_spent_or_arrives_later() {
        let w = WorkTimer::virtual_core(100);
        assert!(w.is_virtual());
        w.spend(50);
        assert_eq!(w.now_ns(), 150);
        w.idle_until(120);
        assert_eq!(w.now_ns(), 150, "busy past the arrival: no change");
        w.idle_until(400);
        assert_eq!(w.now_ns(), 400);
        let clone = w.clone();
        clone.spend(1);
        assert_eq!(w.now_ns(), 401, "clones share the core");
    }

    #[test]
    fn real_work_is_spent_by_waiting() {
        let w = WorkTimer::Real;
        let t0 = std::time::Instant::now();
        w.spend(200_000);
        assert!(t0.elapsed() >= std::time::Duration::from_micros(200));
        w.idle_until(u64::MAX);
        assert!(w.now_ns() < u64::MAX, "the real clock is not moved");
    }
}
