//! The `synthetic` NT: an NT with a calibrated cost, for fairness and scaling experiments (the
//! paper's synthetic workloads, §7.2). It busy-waits `cost_ns` per packet — real CPU time that
//! the data plane measures like any other NT's — and may declare a fixed throughput, modelling
//! an engine whose speed is not the CPU's (an FPGA NT, an accelerator): fair sharing then uses
//! the declared capacity instead of the measured cost.

use crate::{Ctx, DropReason, Nt, Pkt, Verdict};
use snic_core::fair::TokenBucket;
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
    /// Hold the instance to its declared throughput on the node's clock (1 ms of burst) and
    /// drop the rest as `nt_overloaded`: an engine that cannot go faster and has no queue of
    /// its own. For experiments on a virtual clock (scaling), where time costs nothing.
    #[serde(default)]
    pub enforce: bool,
}

/// See the module docs.
#[derive(Debug)]
pub struct Synthetic {
    cost: Duration,
    capacity: Option<f64>,
    limit: Option<TokenBucket>,
}

impl Synthetic {
    /// A synthetic NT.
    pub fn new(c: &SyntheticConfig) -> Self {
        let capacity = c.capacity_pps.map(|p| p as f64);
        let limit = capacity.filter(|_| c.enforce).map(|pps| {
            let mut b = TokenBucket::unlimited();
            b.set(snic_core::time::Instant::ZERO, Some(pps), (pps * 1e-3).max(1.0));
            b
        });
        Synthetic { cost: Duration::from_nanos(c.cost_ns), capacity, limit }
    }
}

impl Nt for Synthetic {
    fn kind(&self) -> &'static str {
        "synthetic"
    }
    fn process(&mut self, cx: &Ctx, _pkt: &mut Pkt<'_>) -> Verdict {
        if let Some(b) = &mut self.limit {
            if !b.take(cx.now) {
                return Verdict::Drop(DropReason::Overloaded);
            }
        }
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
        let mut nt = Synthetic::new(&SyntheticConfig { cost_ns: 200_000, capacity_pps: Some(5000), enforce: false });
        let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 10);
        let before = p.buf.clone();
        let t0 = Instant::now();
        assert_eq!(nt.process(&Ctx { now: snic_core::time::Instant::ZERO }, &mut p.pkt()), Verdict::Continue);
        assert!(t0.elapsed() >= Duration::from_micros(200));
        assert_eq!(p.buf, before, "a synthetic NT does not touch the packet");
        assert_eq!(nt.capacity_pps(), Some(5000.0));
    }

    #[test]
    fn an_enforced_capacity_drops_what_exceeds_it() {
        // 10 kpps with 1 ms of burst (10 packets): over 10 ms of clock, 100 + 10 at most.
        let mut nt = Synthetic::new(&SyntheticConfig { cost_ns: 0, capacity_pps: Some(10_000), enforce: true });
        let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 10);
        let mut ok = 0;
        for i in 0..5000u64 {
            // 500 kpps offered over 10 ms.
            let cx = Ctx { now: snic_core::time::Instant(i * 2_000) };
            ok += (nt.process(&cx, &mut p.pkt()) == Verdict::Continue) as u64;
        }
        assert!((105..=111).contains(&ok), "{ok}");
        // A burst of 10: at one instant, the eleventh packet is over.
        let cx = Ctx { now: snic_core::time::Instant(30_000_000) };
        for _ in 0..10 {
            assert_eq!(nt.process(&cx, &mut p.pkt()), Verdict::Continue);
        }
        assert_eq!(nt.process(&cx, &mut p.pkt()), Verdict::Drop(DropReason::Overloaded));
    }
}
