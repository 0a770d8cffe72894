//! Weights, latency and goodput at overload (issue 49), on a virtual clock: three tenants of
//! weights 1, 2 and 5 each offer the same multiple of the node's capacity, through each of three
//! bottlenecks (`snic_perf::testbed::overload`): every tenant's own NT on the dispatcher's core,
//! one expensive NT they share, and the receive path. Exact on any machine; the real-clock
//! figures are `scripts/bench-overload.sh`'s (BENCHMARKS.md).

use snic_perf::testbed::overload::{run, Bottleneck, Overload, OverloadOutcome};

const WEIGHTS: [f64; 3] = [1.0, 2.0, 5.0];

fn at(b: Bottleneck, multiple: f64) -> OverloadOutcome {
    run(&Overload::virtual_run(b, &WEIGHTS, multiple)).unwrap_or_else(|e| panic!("{} at {multiple}x: {e}", b.name()))
}

/// Each tenant gets its weighted max-min fair share within 10%, the excess is dropped at its own
/// ingress (never in the scheduler, after it cost the node), its limit moves less than 10%
/// from one epoch to the next, and no packet waits long: at 1x, 3x and 10x capacity.
fn holds(b: Bottleneck) {
    let mut goodput = Vec::new();
    for m in [1.0, 3.0, 10.0] {
        let r = at(b, m);
        // The figures BENCHMARKS.md quotes (`-- --nocapture` shows them).
        let shares: Vec<String> = r.tenants.iter().map(|t| format!("{:.3}", t.over_fair_share)).collect();
        let p99 = r.tenants.iter().map(|t| t.p99_ns).max().unwrap_or(0) as f64 / 1e6;
        let swing = r.tenants.iter().map(|t| t.limit_swing).fold(0.0, f64::max);
        eprintln!(
            "{} {m}x: over fair share {} goodput {:.0} of capacity {:.0} pkt/s, p99 {p99:.1} ms, limit swing {swing:.3}",
            b.name(),
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
            assert!(t.p99_ns < 25_000_000, "{} at {m}x: p99 {} ns: {r:?}", b.name(), t.p99_ns);
        }
        goodput.push(r.goodput_pps);
    }
    assert!(goodput[2] >= 0.95 * goodput[0], "{}: goodput at 10x {:.0} against {:.0} at 1x", b.name(), goodput[2], goodput[0]);
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
/// node can then carry lose no packet, and none waits much longer than a stall. (At 3x and 10x
/// the weights do not hold yet under stalls: issue 49.)
#[test]
fn tenants_within_their_share_lose_nothing_when_the_node_loses_its_core_for_milliseconds() {
    use snic_perf::testbed::isolation::{Machine, Stalls, Timing};
    use std::time::Duration;
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
