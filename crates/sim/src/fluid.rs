//! The fluid queue both the `autoscale` and the `victim_cache` experiments serve bytes with:
//! time in bins, a FIFO backlog per server, bounded, and delays weighted by bytes.
//!
//! Within a bin, bytes arrive at an even rate and the server drains at its capacity's, so a byte
//! waits for the backlog found on arrival — exactly, not "half the bin's arrivals" as if they
//! came at once: a server whose capacity covers every bin never queues, whatever its bin's
//! length. On top, each byte pays its packet's service at one instance (`service_ms`): the NT
//! stage's latency without queueing, the same under every scheme. Bursts shorter than a bin are
//! not modelled.

/// The packet every scenario's bytes travel in, unless it says otherwise: an MTU frame.
pub(crate) fn packet_bytes() -> f64 {
    1500.0
}

/// One packet's service at an instance of `instance_gbps`, ms.
pub(crate) fn service_ms(packet_bytes: f64, instance_gbps: f64) -> f64 {
    packet_bytes * 8.0 / (instance_gbps * 1e9) * 1e3
}

/// The mean, over bytes arriving evenly through a bin, of the backlog each finds: the bin
/// starts with `backlog`, `arrivals` come in and up to `capacity` leave (all in bytes per bin).
fn mean_backlog_found(backlog: f64, arrivals: f64, capacity: f64) -> f64 {
    let drain = capacity - arrivals;
    if drain <= 0.0 || backlog >= drain {
        // Never empties within the bin: it moves linearly from `backlog` by `-drain`.
        backlog - drain / 2.0
    } else {
        // Empties at `backlog / drain` of the bin and stays empty.
        backlog * (backlog / drain) / 2.0
    }
}

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
    /// a chain being launched), queue bound `bound` bytes, a packet's service `service_ms`.
    /// Served bytes wait for the backlog they find (see the module docs); bytes that find
    /// nothing serving wait for the bin's end, then for the backlog ahead of them at `nominal`
    /// bytes per bin (what will serve them once it runs).
    #[allow(clippy::too_many_arguments)] // one bin's inputs and the accumulator
    pub(crate) fn bin(&mut self, arrivals: f64, capacity: f64, nominal: f64, bound: f64, bin_ms: f64, service_ms: f64, d: &mut Delays) {
        d.offered += arrivals;
        if arrivals <= 0.0 && self.backlog <= 0.0 {
            return;
        }
        if capacity <= 0.0 {
            let kept = arrivals.min((bound - self.backlog).max(0.0));
            d.dropped += arrivals - kept;
            if kept > 0.0 {
                let delay =
                    if nominal > 0.0 { bin_ms / 2.0 + (self.backlog + kept / 2.0) / nominal * bin_ms + service_ms } else { f64::INFINITY };
                d.record(delay, kept);
            }
            self.backlog += kept;
            return;
        }
        let delay = mean_backlog_found(self.backlog, arrivals, capacity) / capacity * bin_ms + service_ms;
        let left = (self.backlog + arrivals - capacity).max(0.0);
        let over = (left - bound).max(0.0);
        d.dropped += over;
        if arrivals > over {
            d.record(delay, arrivals - over);
        }
        self.backlog = left - over;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_whose_capacity_covers_its_bins_only_serves() {
        let mut s = Server::default();
        let mut d = Delays::default();
        for a in [10.0, 90.0, 100.0, 0.0, 50.0] {
            s.bin(a, 100.0, 100.0, 1e9, 1.0, 0.006, &mut d);
        }
        assert_eq!(s.backlog, 0.0);
        assert!((d.mean() - 0.006).abs() < 1e-6, "{}", d.mean());
    }

    #[test]
    fn bytes_wait_for_the_backlog_they_find() {
        // Twice the capacity for a bin: the backlog grows from 0 to 100 (mean 50 found), then
        // drains from 100 to 0 over the next, empty bin... with no arrivals there, nobody waits.
        let mut d = Delays::default();
        let mut s = Server::default();
        s.bin(200.0, 100.0, 100.0, 1e9, 1.0, 0.0, &mut d);
        assert_eq!(s.backlog, 100.0);
        assert!((d.mean() - 0.5).abs() < 1e-6, "{}", d.mean());
        // Half the capacity arrives on a backlog of 20: it empties at 40% of the bin; the
        // arrivals find 20 → 0, mean 20 × 0.4 / 2 = 4 bytes, 0.04 ms at 100 bytes per ms.
        let mut d = Delays::default();
        let mut s = Server { backlog: 20.0 };
        s.bin(50.0, 100.0, 100.0, 1e9, 1.0, 0.0, &mut d);
        assert_eq!(s.backlog, 0.0);
        assert!((d.mean() - 0.04).abs() < 1e-6, "{}", d.mean());
    }
}
