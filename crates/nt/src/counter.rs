//! The `counter` NT: a monitor that counts packets and bytes by inner protocol. The counts are
//! shared (`Arc` of relaxed atomics, one writer) so the control plane can read them while the
//! data plane runs.

use crate::{bump, Ctx, Nt, Pkt, StateError, Verdict};
use snic_core::time::Instant;
use snic_wire::ip_proto;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counts kept by a [`Counter`].
#[derive(Debug, Default)]
pub struct CounterStats {
    /// Packets seen.
    pub packets: AtomicU64,
    /// Inner-frame bytes seen.
    pub bytes: AtomicU64,
    /// TCP packets.
    pub tcp: AtomicU64,
    /// UDP packets.
    pub udp: AtomicU64,
    /// ICMP packets.
    pub icmp: AtomicU64,
    /// Other (non-IP, other protocols, opaque).
    pub other: AtomicU64,
}

/// The counter NT.
#[derive(Debug, Default)]
pub struct Counter {
    stats: Arc<CounterStats>,
}

impl Counter {
    /// A new counter.
    pub fn new() -> Self {
        Self::default()
    }
    /// A handle to read the counts.
    pub fn stats(&self) -> Arc<CounterStats> {
        self.stats.clone()
    }
}

impl crate::NtCounters for CounterStats {
    fn each(&self, f: &mut dyn FnMut(&'static str, u64, bool)) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (name, c) in [
            ("packets", &self.packets),
            ("bytes", &self.bytes),
            ("tcp", &self.tcp),
            ("udp", &self.udp),
            ("icmp", &self.icmp),
            ("other", &self.other),
        ] {
            f(name, l(c), false);
        }
    }
}

impl Nt for Counter {
    fn kind(&self) -> &'static str {
        "counter"
    }

    /// Partial checksums pass through it (it counts, reads nothing).
    fn takes_partial_checksums(&self) -> bool {
        true
    }

    fn counters(&self) -> Option<Arc<dyn crate::NtCounters>> {
        Some(self.stats.clone())
    }
    fn process(&mut self, _cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        let s = &self.stats;
        bump(&s.packets, 1);
        bump(&s.bytes, (pkt.meta.len as u64).saturating_sub(snic_wire::vxlan::HEADER_LEN as u64));
        let c = match pkt.meta.inner.map(|i| i.key.proto) {
            Some(ip_proto::TCP) => &s.tcp,
            Some(ip_proto::UDP) => &s.udp,
            Some(ip_proto::ICMP) | Some(ip_proto::ICMPV6) => &s.icmp,
            _ => &s.other,
        };
        bump(c, 1);
        Verdict::Continue
    }

    /// The counts: a counter that moves keeps counting from where it was.
    fn save_state(&self, _now: Instant) -> Option<Vec<u8>> {
        postcard::to_allocvec(&self.stats.fields().map(|c| c.load(Ordering::Relaxed))).ok()
    }

    fn restore_state(&mut self, state: &[u8], _now: Instant) -> Result<usize, StateError> {
        let counts: [u64; 6] = postcard::from_bytes(state).map_err(|e| StateError::Malformed("counter", e.to_string()))?;
        for (c, n) in self.stats.fields().into_iter().zip(counts) {
            bump(c, n);
        }
        Ok(counts.len())
    }
}

impl CounterStats {
    fn fields(&self) -> [&AtomicU64; 6] {
        [&self.packets, &self.bytes, &self.tcp, &self.udp, &self.icmp, &self.other]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn counts_by_protocol() {
        let mut c = Counter::new();
        let st = c.stats();
        let cx = Ctx::real(Instant::ZERO);
        let mut a = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 10);
        let mut b = TestPkt::new("10.0.0.1", "10.0.0.2", tcp(1, 2, 0x02), 0);
        assert_eq!(c.process(&cx, &mut a.pkt()), Verdict::Continue);
        assert_eq!(c.process(&cx, &mut b.pkt()), Verdict::Continue);
        assert_eq!(st.packets.load(Ordering::Relaxed), 2);
        assert_eq!(st.udp.load(Ordering::Relaxed), 1);
        assert_eq!(st.tcp.load(Ordering::Relaxed), 1);
        assert_eq!(st.bytes.load(Ordering::Relaxed), (14 + 20 + 8 + 10) + (14 + 20 + 20));
        // Moved to another instance that has counted a packet of its own: the counts add up.
        let mut moved = Counter::new();
        moved.process(&cx, &mut a.pkt());
        let state = c.save_state(Instant::ZERO).expect("a counter has state");
        assert_eq!(moved.restore_state(&state, Instant::ZERO), Ok(6));
        assert_eq!(moved.stats().packets.load(Ordering::Relaxed), 3);
        assert_eq!(moved.stats().udp.load(Ordering::Relaxed), 2);
        assert!(moved.restore_state(&[1], Instant::ZERO).is_err());
    }
}
