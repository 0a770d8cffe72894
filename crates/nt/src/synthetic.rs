//! The `synthetic` NT: an NT with a calibrated cost, for fairness and scaling experiments (the
//! paper's synthetic workloads, §7.2). It busy-waits `cost_ns` per packet — real CPU time that
//! the data plane measures like any other NT's — and may declare a fixed throughput, modelling
//! an engine whose speed is not the CPU's (an FPGA NT, an accelerator): fair sharing then uses
//! the declared capacity instead of the measured cost.

use crate::{Ctx, Nt, Pkt, Verdict};
use std::time::{Duration, Instant};

/// Configuration of a synthetic NT.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Busy-wait per packet, in nanoseconds (0: no work).
    #[serde(default)]
    pub cost_ns: u64,
    /// Declared throughput of one instance, in packets per second.
    #[serde(default)]
    pub capacity_pps: Option<u64>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Synthetic {
    cost: Duration,
    capacity: Option<f64>,
}

impl Synthetic {
    /// A synthetic NT.
    pub fn new(c: &SyntheticConfig) -> Self {
        Synthetic { cost: Duration::from_nanos(c.cost_ns), capacity: c.capacity_pps.map(|p| p as f64) }
    }
}

impl Nt for Synthetic {
    fn kind(&self) -> &'static str {
        "synthetic"
    }
    fn process(&mut self, _cx: &Ctx, _pkt: &mut Pkt<'_>) -> Verdict {
        if !self.cost.is_zero() {
            let t0 = Instant::now();
            while t0.elapsed() < self.cost {
                std::hint::spin_loop();
            }
        }
        Verdict::Continue
    }
    fn capacity_pps(&self) -> Option<f64> {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{udp, TestPkt};

    #[test]
    fn costs_what_it_says_and_declares_its_capacity() {
        let mut nt = Synthetic::new(&SyntheticConfig { cost_ns: 200_000, capacity_pps: Some(5000) });
        let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 10);
        let before = p.buf.clone();
        let t0 = Instant::now();
        assert_eq!(nt.process(&Ctx { now: snic_core::time::Instant::ZERO }, &mut p.pkt()), Verdict::Continue);
        assert!(t0.elapsed() >= Duration::from_micros(200));
        assert_eq!(p.buf, before, "a synthetic NT does not touch the packet");
        assert_eq!(nt.capacity_pps(), Some(5000.0));
    }
}
