//! The `synthetic` NT: an NT with a calibrated cost, for fairness and scaling experiments (the
//! paper's synthetic workloads, §7.2). It spends `cost_ns` per packet, plus
//! `cost_ps_per_byte` for each byte of the packet, on the core it runs on
//! ([`WorkTimer::spend`](crate::WorkTimer::spend)): real CPU time on the real clock, which the
//! data plane measures like any other NT's; exactly that much of its core's time on a virtual
//! clock, where tests get the same costs on any machine. It may declare a fixed throughput,
//! modelling an engine whose speed is not the CPU's (an FPGA NT, an accelerator): fair sharing
//! then uses the declared capacity instead of the measured cost. With `engine: true` it is an
//! engine in the data plane's sense (its cost grows with bytes; shared by tenants, it gets
//! per-tenant token buckets), standing in for AES-GCM or compression on a virtual clock.

use crate::{Ctx, DropReason, Nt, Pkt, Verdict};
use snic_core::fair::TokenBucket;

/// Configuration of a synthetic NT.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Work per packet, in nanoseconds (0: no work).
    #[serde(default)]
    pub cost_ns: u64,
    /// Work per byte of the packet (its VXLAN datagram), in picoseconds (0: none).
    #[serde(default)]
    pub cost_ps_per_byte: u64,
    /// An engine: shared by several tenants, it gets per-tenant token buckets in bytes.
    #[serde(default)]
    pub engine: bool,
    /// Declared throughput of one instance, in packets per second.
    #[serde(default)]
    pub capacity_pps: Option<u64>,
    /// Hold the instance to its declared throughput on the node's clock (1 ms of burst) and
    /// drop the rest as `nt_overloaded`: an engine that cannot go faster and has no queue of
    /// its own. For experiments on a virtual clock (scaling), where time costs nothing.
    #[serde(default)]
    pub enforce: bool,
}

impl SyntheticConfig {
    /// An NT that costs `cost_ns` a packet and nothing else.
    pub fn costing(cost_ns: u64) -> Self {
        SyntheticConfig { cost_ns, cost_ps_per_byte: 0, engine: false, capacity_pps: None, enforce: false }
    }

    /// An engine of declared throughput `pps` that costs no time (enforced or not).
    pub fn declared(pps: u64, enforce: bool) -> Self {
        SyntheticConfig { cost_ns: 0, cost_ps_per_byte: 0, engine: false, capacity_pps: Some(pps), enforce }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Synthetic {
    cost_ns: u64,
    cost_ps_per_byte: u64,
    engine: bool,
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
        Synthetic { cost_ns: c.cost_ns, cost_ps_per_byte: c.cost_ps_per_byte, engine: c.engine, capacity, limit }
    }
}

impl Nt for Synthetic {
    fn kind(&self) -> &'static str {
        "synthetic"
    }
    fn process(&mut self, cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        if let Some(b) = &mut self.limit {
            if !b.take(cx.now) {
                return Verdict::Drop(DropReason::Overloaded);
            }
        }
        let bytes = self.cost_ps_per_byte.saturating_mul(pkt.meta.len as u64) / 1000;
        cx.work.spend(self.cost_ns.saturating_add(bytes));
        Verdict::Continue
    }
    fn capacity_pps(&self) -> Option<f64> {
        self.capacity
    }
    fn is_engine(&self) -> bool {
        self.engine
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{udp, TestPkt};
    use crate::WorkTimer;
    use snic_core::time::Instant;

    #[test]
    fn costs_what_it_says_and_declares_its_capacity() {
        let mut nt = Synthetic::new(&SyntheticConfig { capacity_pps: Some(5000), ..SyntheticConfig::costing(200_000) });
        let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 10);
        let before = p.buf.clone();
        let t0 = std::time::Instant::now();
        assert_eq!(nt.process(&Ctx::real(Instant::ZERO), &mut p.pkt()), Verdict::Continue);
        assert!(t0.elapsed() >= std::time::Duration::from_micros(200));
        assert_eq!(p.buf, before, "a synthetic NT does not touch the packet");
        assert_eq!(nt.capacity_pps(), Some(5000.0));
        assert!(!nt.is_engine());
    }

    #[test]
    fn on_a_virtual_core_it_spends_exactly_its_cost_per_packet_and_per_byte() {
        let cfg = SyntheticConfig { cost_ps_per_byte: 500, engine: true, ..SyntheticConfig::costing(300) };
        let mut nt = Synthetic::new(&cfg);
        let core = WorkTimer::virtual_core(1_000);
        let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 950);
        assert_eq!(p.meta.len, 1000, "VXLAN 8 + Ethernet 14 + IPv4 20 + UDP 8 + 950 of payload");
        nt.process(&Ctx { now: Instant::ZERO, work: &core, out: None }, &mut p.pkt());
        assert_eq!(core.now_ns(), 1_000 + 300 + 500, "300 ns + 1000 B × 0.5 ns");
        assert!(nt.is_engine());
    }

    #[test]
    fn an_enforced_capacity_drops_what_exceeds_it() {
        // 10 kpps with 1 ms of burst (10 packets): over 10 ms of clock, 100 + 10 at most.
        let mut nt = Synthetic::new(&SyntheticConfig::declared(10_000, true));
        let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 10);
        let mut ok = 0;
        for i in 0..5000u64 {
            // 500 kpps offered over 10 ms.
            let cx = Ctx::real(Instant(i * 2_000));
            ok += (nt.process(&cx, &mut p.pkt()) == Verdict::Continue) as u64;
        }
        assert!((105..=111).contains(&ok), "{ok}");
        // A burst of 10: at one instant, the eleventh packet is over.
        let cx = Ctx::real(Instant(30_000_000));
        for _ in 0..10 {
            assert_eq!(nt.process(&cx, &mut p.pkt()), Verdict::Continue);
        }
        assert_eq!(nt.process(&cx, &mut p.pkt()), Verdict::Drop(DropReason::Overloaded));
    }
}
