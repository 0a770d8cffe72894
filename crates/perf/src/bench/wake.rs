//! `snic bench wake`: how late the node's idle wait wakes. A node with nothing to receive
//! sleeps in its backend until the next thing it must do (`Node::poll_timeout`: the end of an
//! epoch, a launch becoming ready); the sooner after that deadline it wakes, the closer its
//! epochs and launches keep to their times. Each case sleeps `--waits` times for the timeout
//! given in the UDP backend on an idle loopback socket, and reports how much later than asked
//! it returned: with `epoll_pwait2` (to the nanosecond, timer slack 5 µs — the node's way) and
//! with the whole-millisecond `epoll_wait` a kernel before 5.11 falls back to. The figures are
//! the machine's and its load's: they are reported, never asserted.

use super::emit;
use clap::Args;
use serde::Serialize;
use snic_dataplane::backend::udp::{UdpBackend, WaitClock};
use snic_dataplane::backend::Backend;
use std::time::{Duration, Instant};

/// Options of `snic bench wake`.
#[derive(Args)]
pub struct WakeArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Timeouts to sleep for, in microseconds, comma-separated.
    #[arg(long, default_value = "50,100,500,1000", value_delimiter = ',')]
    timeout_us: Vec<u64>,
    /// Sleeps per case.
    #[arg(long, default_value_t = 1000)]
    waits: usize,
}

#[derive(Serialize)]
struct WakeResult {
    bench: &'static str,
    /// `fine` (epoll_pwait2) or `millis` (epoll_wait, rounded up to whole milliseconds).
    clock: &'static str,
    timeout_us: u64,
    waits: usize,
    /// How much later than the timeout the wait returned: median, 99th percentile, worst.
    late_p50_us: f64,
    late_p99_us: f64,
    late_max_us: f64,
}

/// Runs the cases.
pub fn run(a: &WakeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.waits > 0, "--waits must be at least 1");
    anyhow::ensure!(a.timeout_us.iter().all(|&t| (1..=1_000_000).contains(&t)), "--timeout-us must be within 1..=1000000");
    let mut b = UdpBackend::bind("127.0.0.1:0".parse()?)?;
    for (clock, name) in [(WaitClock::Fine, "fine"), (WaitClock::Millis, "millis")] {
        b.set_wait_clock(clock);
        for &us in &a.timeout_us {
            let timeout = Duration::from_micros(us);
            let mut late: Vec<f64> = (0..a.waits)
                .map(|_| {
                    let t0 = Instant::now();
                    b.wait(timeout);
                    t0.elapsed().saturating_sub(timeout).as_secs_f64() * 1e6
                })
                .collect();
            late.sort_by(f64::total_cmp);
            let at = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize];
            // (A kernel without epoll_pwait2 turns the backend to whole milliseconds for good.)
            let clock = if b.wait_clock() == WaitClock::Fine { name } else { "millis" };
            let r = WakeResult {
                bench: "wake",
                clock,
                timeout_us: us,
                waits: a.waits,
                late_p50_us: at(0.5),
                late_p99_us: at(0.99),
                late_max_us: late[late.len() - 1],
            };
            emit(a.json, &r, |r| {
                format!(
                    "{:>6} {:>5} µs: late p50 {:>7.1} µs, p99 {:>7.1} µs, max {:>7.1} µs ({} waits)",
                    r.clock, r.timeout_us, r.late_p50_us, r.late_p99_us, r.late_max_us, r.waits
                )
            })?;
        }
    }
    Ok(())
}
