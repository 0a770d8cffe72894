//! Counters and a latency histogram. The dispatcher is their only writer; readers get
//! snapshots (`Clone`).

use crate::drops::Drop;
use crate::store::MAX_TENANTS;

/// Per-tenant counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantStats {
    /// Packets received (charged to the tenant).
    pub rx_packets: u64,
    /// Bytes received (VXLAN datagram bytes).
    pub rx_bytes: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted (VXLAN datagram bytes).
    pub tx_bytes: u64,
    /// Drops by reason ([`Drop::index`]).
    pub drops: [u64; Drop::COUNT],
}

impl Default for TenantStats {
    fn default() -> Self {
        TenantStats { rx_packets: 0, rx_bytes: 0, tx_packets: 0, tx_bytes: 0, drops: [0; Drop::COUNT] }
    }
}

/// Drop counts by reason name, non-zero only.
pub fn named_drops(drops: &[u64; Drop::COUNT]) -> Vec<(&'static str, u64)> {
    (0..Drop::COUNT).filter(|&k| drops[k] > 0).map(|k| (Drop::name(k), drops[k])).collect()
}

impl TenantStats {
    /// Drops by reason name, non-zero only.
    pub fn drops_by_reason(&self) -> Vec<(&'static str, u64)> {
        named_drops(&self.drops)
    }

    /// Total drops.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Packets the node read for this tenant: admitted (`rx_packets`) or refused at admission
    /// (over its ingress limit, no room in the store, from a foreign or forged VTEP). Without flooding (one copy per packet),
    /// each is transmitted or dropped once: `read() == tx_packets + dropped()` less the
    /// packets lost in the tenant's own receive queue (`rx_queue_full`), which it never read.
    pub fn read(&self) -> u64 {
        self.rx_packets
            + [Drop::RateLimit, Drop::TenantQuota, Drop::StoreFull, Drop::ForeignVtep, Drop::SpoofedVtep]
                .iter()
                .map(|d| self.drops[d.index()])
                .sum::<u64>()
    }
}

/// Node counters.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Per tenant, indexed by tenant id.
    pub tenants: Vec<TenantStats>,
    /// Drops before a tenant was known (parse errors, no rule).
    pub unattributed: [u64; Drop::COUNT],
    /// Ingress-to-transmit latency of the packets transmitted in one poll in 32 (a sample).
    pub latency: Histogram,
    /// The same per tenant, for the tenants registered with the node (`None` otherwise), from
    /// the same sample.
    pub tenant_latency: Vec<Option<Box<Histogram>>>,
    /// Tenants whose counters moved since [`Stats::clear_touched`], each once (so that per-epoch
    /// work can visit the active tenants only, not every configured one).
    touched: Vec<snic_core::ids::TenantId>,
    is_touched: Vec<bool>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            tenants: vec![TenantStats::default(); MAX_TENANTS],
            unattributed: [0; Drop::COUNT],
            latency: Histogram::default(),
            tenant_latency: vec![None; MAX_TENANTS],
            touched: Vec::with_capacity(MAX_TENANTS),
            is_touched: vec![false; MAX_TENANTS],
        }
    }
}

impl Stats {
    /// `t`'s counters, to change them (the only way the node writes them: it notes `t` as
    /// touched).
    #[inline(always)]
    pub fn tenant_mut(&mut self, t: snic_core::ids::TenantId) -> &mut TenantStats {
        let i = t.index();
        if !self.is_touched[i] {
            self.is_touched[i] = true;
            self.touched.push(t);
        }
        &mut self.tenants[i]
    }

    /// Counts `packets` received for `t`, `bytes` (their VXLAN datagrams) in all.
    #[inline(always)]
    pub fn count_rx(&mut self, t: snic_core::ids::TenantId, packets: u64, bytes: u64) {
        let ts = self.tenant_mut(t);
        ts.rx_packets += packets;
        ts.rx_bytes += bytes;
    }

    /// The tenants whose counters moved since the last [`Stats::clear_touched`].
    pub fn touched(&self) -> &[snic_core::ids::TenantId] {
        &self.touched
    }

    /// Starts a new list of touched tenants.
    pub fn clear_touched(&mut self) {
        for t in self.touched.drain(..) {
            self.is_touched[t.index()] = false;
        }
    }

    /// Sum over tenants.
    pub fn total(&self) -> TenantStats {
        let mut t = TenantStats::default();
        for s in &self.tenants {
            t.rx_packets += s.rx_packets;
            t.rx_bytes += s.rx_bytes;
            t.tx_packets += s.tx_packets;
            t.tx_bytes += s.tx_bytes;
            for (a, b) in t.drops.iter_mut().zip(s.drops.iter()) {
                *a += b;
            }
        }
        t
    }

    /// Counters and histograms start again from zero; the tenants whose latency is recorded
    /// stay so.
    pub fn reset(&mut self) {
        let tracked: Vec<bool> = self.tenant_latency.iter().map(Option::is_some).collect();
        *self = Stats::default();
        for (h, on) in self.tenant_latency.iter_mut().zip(tracked) {
            *h = on.then(Box::default);
        }
    }

    /// Starts (a fresh histogram, unless it is recorded already) or stops recording `t`'s latency.
    pub fn track_latency(&mut self, t: snic_core::ids::TenantId, on: bool) {
        if let Some(h) = self.tenant_latency.get_mut(t.index()) {
            // (A tenant already tracked keeps its histogram: a weight change is not a restart.)
            if !on || h.is_none() {
                *h = on.then(Box::default);
            }
        }
    }

    /// Drops by reason name (tenants and unattributed), non-zero only.
    pub fn drops_by_reason(&self) -> Vec<(&'static str, u64)> {
        let mut d = self.total().drops;
        d.iter_mut().zip(&self.unattributed).for_each(|(a, b)| *a += b);
        named_drops(&d)
    }
}

/// A log-linear histogram of nanosecond values: 16 sub-buckets per power of two (≤ 6.25%
/// relative error), fixed size, 2 ns to record.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; 64 * 16]>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: Box::new([0; 64 * 16]), total: 0 }
    }
}

impl core::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Histogram").field("total", &self.total).field("p50", &self.quantile(0.5)).finish()
    }
}

impl Histogram {
    #[inline]
    fn bucket(v: u64) -> usize {
        if v < 16 {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros() as usize; // >= 4
        let sub = ((v >> (exp - 4)) & 15) as usize;
        (exp - 3) * 16 + sub
    }

    fn lower_bound(b: usize) -> u64 {
        if b < 16 {
            return b as u64;
        }
        let exp = b / 16 + 3;
        let sub = (b % 16) as u64;
        (16 + sub) << (exp - 4)
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[Self::bucket(v)] += 1;
        self.total += 1;
    }

    /// Adds what `other` recorded (another dispatcher thread's).
    pub fn merge(&mut self, other: &Histogram) {
        self.counts.iter_mut().zip(other.counts.iter()).for_each(|(a, b)| *a += b);
        self.total += other.total;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1): the lower bound of the bucket holding it.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let want = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Self::lower_bound(b);
            }
        }
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Quantiles are within one bucket (6.25%) below the exact order statistic.
        #[test]
        fn quantiles_close_to_exact(mut vals in proptest::collection::vec(1u64..10_000_000, 1..500), q in 0.0f64..1.0) {
            let mut h = Histogram::default();
            for &v in &vals { h.record(v); }
            vals.sort();
            let k = ((q * vals.len() as f64).ceil() as usize).clamp(1, vals.len());
            let exact = vals[k - 1];
            let got = h.quantile(q);
            prop_assert!(got <= exact && exact as f64 <= got as f64 * 1.0625 + 1.0, "q={} exact={} got={}", q, exact, got);
        }
    }
}
