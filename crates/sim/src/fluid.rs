//! The fluid queue both the `autoscale` and the `victim_cache` experiments serve bytes with:
//! time in bins, a FIFO backlog per server, bounded, and delays weighted by bytes.

/// A FIFO fluid queue.
#[derive(Debug, Default, Clone)]
pub(crate) struct Server {
    pub(crate) backlog: f64,
}

/// Delays weighted by bytes (a histogram, so an hour of bins takes no more memory than a
/// second), and the bytes dropped.
pub(crate) struct Delays {
    hist: hdrhistogram::Histogram<u64>,
    sum: f64,
    bytes: f64,
    pub(crate) dropped: f64,
    pub(crate) offered: f64,
}

/// Largest delay the histogram tells apart, ns (longer ones are counted as this).
const MAX_DELAY_NS: u64 = 3_600_000_000_000;

impl Default for Delays {
    fn default() -> Self {
        Delays {
            hist: hdrhistogram::Histogram::new_with_bounds(1, MAX_DELAY_NS, 2).expect("valid bounds"),
            sum: 0.0,
            bytes: 0.0,
            dropped: 0.0,
            offered: 0.0,
        }
    }
}

impl Delays {
    fn record(&mut self, delay_ms: f64, bytes: f64) {
        let ns = if delay_ms.is_finite() { (delay_ms * 1e6).clamp(1.0, MAX_DELAY_NS as f64) as u64 } else { MAX_DELAY_NS };
        // Weighted by bytes (rounded up, so a sliver of a byte still counts once).
        let _ = self.hist.record_n(ns, bytes.ceil() as u64);
        self.sum += ns as f64 / 1e6 * bytes;
        self.bytes += bytes;
    }

    pub(crate) fn mean(&self) -> f64 {
        if self.bytes > 0.0 {
            self.sum / self.bytes
        } else {
            0.0
        }
    }

    pub(crate) fn quantile(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1e6
    }
}

impl Server {
    /// One bin: `arrivals` bytes, `capacity` bytes per bin (0: nothing serves this bin, e.g.
    /// a chain being launched), queue bound `bound` bytes. Served bytes wait for the backlog
    /// ahead of them and half their bin's arrivals; bytes that find nothing serving wait the
    /// bin, then that at `nominal` bytes per bin (what will serve them once it runs).
    pub(crate) fn bin(&mut self, arrivals: f64, capacity: f64, nominal: f64, bound: f64, bin_ms: f64, d: &mut Delays) {
        d.offered += arrivals;
        if arrivals <= 0.0 && self.backlog <= 0.0 {
            return;
        }
        if capacity <= 0.0 {
            let kept = arrivals.min((bound - self.backlog).max(0.0));
            d.dropped += arrivals - kept;
            if kept > 0.0 {
                let delay = if nominal > 0.0 { bin_ms + (self.backlog + kept / 2.0) / nominal * bin_ms } else { f64::INFINITY };
                d.record(delay, kept);
            }
            self.backlog += kept;
            return;
        }
        let delay = (self.backlog + arrivals / 2.0) / capacity * bin_ms;
        let left = (self.backlog + arrivals - capacity).max(0.0);
        let over = (left - bound).max(0.0);
        d.dropped += over;
        if arrivals > over {
            d.record(delay, arrivals - over);
        }
        self.backlog = left - over;
    }
}
