//! Weights, latency and goodput at overload (issue 49), on a virtual clock: three tenants of
//! weights 1, 2 and 5 each offer the same multiple of the node's capacity, through each of three
//! bottlenecks (`snic_perf::testbed::overload`): every tenant's own NT on the dispatcher's core,
//! one expensive NT they share, and the receive path. Exact on any machine; the real-clock
//! figures are `scripts/bench-overload.sh`'s (BENCHMARKS.md).

use snic_perf::testbed::isolation::Stalls;
use snic_perf::testbed::overload::{run, Bottleneck, Overload};
use std::time::Duration;

const WEIGHTS: [f64; 3] = [1.0, 2.0, 5.0];

/// Each tenant gets its weighted max-min fair share within 10%, the excess is dropped at its own
/// ingress (never in the scheduler, after it cost the node), its limit moves less than 10%
/// from one epoch to the next, and no packet waits long: at 1x, 3x and 10x capacity.
fn holds(b: Bottleneck) {
    holds_on(b, None, &[1.0, 3.0, 10.0], true)
}

/// [`holds`] on a core that other work takes away as `stalls` says (the capacity is then what
/// the node can carry on what it keeps of its core), at the `multiples` given, the latency
/// bound checked if `bound_p99`.
fn holds_on(b: Bottleneck, stalls: Option<Stalls>, multiples: &[f64], bound_p99: bool) {
    use snic_perf::testbed::isolation::{Machine, Timing};
    let mut goodput = Vec::new();
    for &m in multiples {
        let mut o = Overload::virtual_run(b, &WEIGHTS, m);
        o.timing = Timing::Virtual(Machine { stalls, ..Machine::default() });
        o.measure_core = stalls.is_some();
        let r = run(&o).unwrap_or_else(|e| panic!("{} at {m}x: {e}", b.name()));
        // The figures BENCHMARKS.md quotes (`-- --nocapture` shows them).
        let shares: Vec<String> = r.tenants.iter().map(|t| format!("{:.3}", t.over_fair_share)).collect();
        let p99 = r.tenants.iter().map(|t| t.p99_ns).max().unwrap_or(0) as f64 / 1e6;
        let swing = r.tenants.iter().map(|t| t.limit_swing).fold(0.0, f64::max);
        eprintln!(
            "{} {m}x{}: over fair share {} goodput {:.0} of capacity {:.0} pkt/s, p99 {p99:.1} ms, limit swing {swing:.3}",
            b.name(),
            stalls.map_or(String::new(), |s| format!(" ({:?} of every {:?} taken)", s.off, s.every)),
            shares.join(" : "),
            r.goodput_pps,
            r.capacity_pps
        );
        assert!(r.weight_error < 0.10, "{} at {m}x: weights off by {:.2}: {r:?}", b.name(), r.weight_error);
        for t in &r.tenants {
            let deep = t.drops.iter().filter(|d| d.0 != "rx_queue_full" && d.0 != "rate_limit").map(|d| d.1).sum::<u64>();
            assert_eq!(deep, 0, "{} at {m}x: excess dropped past the tenant's ingress: {r:?}", b.name());
            assert!(t.limit_swing < 0.10, "{} at {m}x: a limit moved {:.2} in an epoch: {r:?}", b.name(), t.limit_swing);
            // A limited tenant's receive queue holds 5 ms at its limit, or 32 packets; its queue
            // at the chain 5 ms of work: tens of milliseconds at the slowest (2.5 kpps), never
            // the hundreds a queue bounded in packets alone held.
            assert!(!bound_p99 || t.p99_ns < 25_000_000, "{} at {m}x: p99 {} ns: {r:?}", b.name(), t.p99_ns);
        }
        goodput.push(r.goodput_pps);
    }
    let (first, last) = (goodput[0], goodput[goodput.len() - 1]);
    assert!(
        last >= 0.95 * first,
        "{}: goodput at {}x {last:.0} against {first:.0} at {}x",
        b.name(),
        multiples[multiples.len() - 1],
        multiples[0]
    );
}

#[test]
fn weights_latency_and_goodput_hold_when_each_tenants_own_nt_fills_the_dispatcher() {
    holds(Bottleneck::Dispatcher);
}

#[test]
fn weights_latency_and_goodput_hold_on_one_shared_expensive_nt() {
    holds(Bottleneck::Nt);
}

#[test]
fn weights_latency_and_goodput_hold_when_the_receive_path_is_the_bottleneck() {
    holds(Bottleneck::Receive);
}

/// Other work takes two thirds of the node's core (2 of every 3 ms: two CPU hogs on a machine
/// of two cores, the node's thread one of three that want them). The node reads how much of
/// its core it keeps ([`snic_core::meter::Meter::core_share`], `measure_core` on) and hands out
/// that much: at 3x
/// and 10x what it can then carry, the weights and the goodput hold as on a core of its own,
/// limits are steady, and the excess is refused at ingress, not in the scheduler's queues (issue
/// 50: beside two hogs a flood filled them while the meter saw no tenant over capacity; without
/// the core's share these fail so, with `queue_full` drops). Not asserted here, and open: at
/// exactly 1x the limits come and go (offered load is then the capacity), and on the shared NT
/// the slowest tenant (840 pkt/s) waits up to 38 ms at 3x (its receive queue's least depth, 32
/// packets, at its limit) and 450 ms at 10x.
const HOGS: Stalls = Stalls { every: Duration::from_millis(3), off: Duration::from_millis(2) };

#[test]
fn weights_latency_and_goodput_hold_beside_other_work_when_each_tenants_own_nt_fills_the_dispatcher() {
    holds_on(Bottleneck::Dispatcher, Some(HOGS), &[3.0, 10.0], true);
}

#[test]
fn weights_and_goodput_hold_beside_other_work_on_one_shared_expensive_nt() {
    holds_on(Bottleneck::Nt, Some(HOGS), &[3.0, 10.0], false);
}

#[test]
fn weights_latency_and_goodput_hold_beside_other_work_when_the_receive_path_is_the_bottleneck() {
    holds_on(Bottleneck::Receive, Some(HOGS), &[3.0, 10.0], true);
}

/// With the limits off, the scheduler's round robin by time is weighted by the waiting tenants'
/// weights: one shared NT still splits 1:2:5 (the second line behind the limits).
#[test]
fn without_limits_a_shared_nt_still_splits_by_weight() {
    let mut o = Overload::virtual_run(Bottleneck::Nt, &WEIGHTS, 3.0);
    o.enforce = false;
    let r = run(&o).unwrap();
    assert!(r.weight_error < 0.10, "{r:?}");
}

/// Other work on the machine takes the node's core for half of every period (3 of 6 ms, 6 of
/// 12, 12 of 24: a CPU hog under the kernel's scheduler): tenants offering a fifth of what the
/// node can then carry lose no packet, and none waits much longer than a stall. (At 3x and 10x,
/// the `beside_other_work` tests above.)
#[test]
fn tenants_within_their_share_lose_nothing_when_the_node_loses_its_core_for_milliseconds() {
    use snic_perf::testbed::isolation::{Machine, Timing};
    for (every, off) in [(6, 3), (12, 6), (24, 12)] {
        let stalls = Stalls { every: Duration::from_millis(every), off: Duration::from_millis(off) };
        for b in Bottleneck::ALL {
            let mut o = Overload::virtual_run(b, &WEIGHTS, 0.2);
            o.timing = Timing::Virtual(Machine { stalls: Some(stalls), ..Machine::default() });
            let r = run(&o).unwrap();
            for t in &r.tenants {
                assert!(t.drops.is_empty() && t.ring_drops == 0, "{} with {stalls:?}: {r:?}", b.name());
                // (Packets that arrive early in a stall wait most of it: the stalls happened.)
                let p99 = t.p99_ns;
                assert!(p99 > off * 500_000 && p99 < (off + 1) * 1_000_000, "{} with {stalls:?}: p99 {p99} ns: {r:?}", b.name());
                assert!((t.delivered_pps - t.offered_pps).abs() <= 0.02 * t.offered_pps, "{} with {stalls:?}: {r:?}", b.name());
            }
        }
    }
}
