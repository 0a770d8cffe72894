//! Isolation against antagonists (paper 003 §6.4), through `snic bench fair`: a well-behaved
//! tenant sharing one core and one receive ring with an antagonist keeps its throughput when
//! the fairness mechanisms are on. (Latency and the figures themselves are in BENCHMARKS.md.)
//!
//! These are throughput measurements on a shared, noisy machine: a scenario passes if its
//! checks hold in one of `ATTEMPTS` runs (a broken mechanism fails them all), and a failure
//! reports every attempt.

use std::process::Command;

/// One benchmark at a time: each measures throughput on the machine's cores, and two at once
/// on a two-core machine measure each other (the victim alone kept 0.985 of its load, the
/// antagonist's allocation fell to zero, when they overlapped).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs of a scenario before it counts as failed.
const ATTEMPTS: usize = 3;
/// Measured seconds of a run.
const SECONDS: f64 = 0.5;

/// `snic bench fair --scenario s` plus `extra` arguments: its JSON lines.
fn bench(scenario: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_snic"))
        .args(["bench", "fair", "--scenario", scenario, "--seconds", &SECONDS.to_string(), "--warmup", "0.5", "--json"])
        .args(extra)
        .output()
        .expect("snic runs");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON lines")).collect()
}

/// Runs `scenario` until `check` passes, at most `ATTEMPTS` times; panics with every failure.
fn holds(scenario: &str, check: impl Fn(&[serde_json::Value]) -> Result<(), String>) {
    holds_with(scenario, &[], check)
}

/// [`holds`] with extra arguments to the bench.
fn holds_with(scenario: &str, extra: &[&str], check: impl Fn(&[serde_json::Value]) -> Result<(), String>) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut failures = Vec::new();
    for _ in 0..ATTEMPTS {
        match check(&bench(scenario, extra)) {
            Ok(()) => return,
            Err(e) => failures.push(e),
        }
    }
    panic!("{scenario}: failed {ATTEMPTS} runs in {ATTEMPTS}:\n{}", failures.join("\n"));
}

fn mode(runs: &[serde_json::Value], m: &str) -> Result<serde_json::Value, String> {
    runs.iter().find(|r| r["mode"] == m).cloned().ok_or_else(|| format!("no {m} run: {runs:?}"))
}

fn ensure(ok: bool, what: String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what)
    }
}

#[test]
#[cfg_attr(debug_assertions, ignore = "needs an optimized build; scripts/test.sh runs it with --release")]
fn the_victim_keeps_its_share_against_each_antagonist() {
    for scenario in ["expensive", "flood64", "engine"] {
        holds(scenario, |runs| {
            let (alone, on, queues) = (mode(runs, "alone")?, mode(runs, "on")?, mode(runs, "queues")?);
            let f = |v: &serde_json::Value, k: &str| v[k].as_f64();
            ensure(f(&alone, "victim_kept").unwrap_or(0.0) > 0.99, format!("alone: {alone}"))?;
            // With a receive queue per tenant the antagonist's excess waits (and is lost) in its
            // own queue: whatever reception costs, the victim keeps its share and the antagonist
            // is still served.
            ensure(f(&queues, "victim_kept").unwrap_or(0.0) >= 0.9, format!("per-tenant queues: victim kept under 90%: {queues}"))?;
            ensure(
                f(&queues, "antagonist_delivered_pps").unwrap_or(0.0) > 0.0,
                format!("per-tenant queues: not work conserving: {queues}"),
            )?;
            let limit = f(&on, "antagonist_limit_pps");
            ensure(limit.is_some(), format!("the antagonist is not limited at ingress: {on}"))?;
            // The dispatcher row: capacity, antagonist's fixed part (its reception) and grant.
            let disp = on["resources"].as_array().into_iter().flatten().find(|r| r[0] == "dispatcher").cloned().unwrap_or_default();
            let g = |i: usize| disp[i].as_f64().unwrap_or(0.0);
            let (capacity, fixed, alloc) = (g(1), g(5), g(6));
            if fixed >= capacity {
                // Receiving the flood alone fills the dispatcher (a slow moment of the machine:
                // reception measured at 50 ns a packet instead of 24). No limit can help — the
                // packets are received all the same — and the victim loses packets at the shared
                // ring with the flood (docs/fairness.md, Limits). What the node still owes: it
                // admits none of the flood, and does not limit the victim.
                ensure(limit == Some(0.0), format!("reception fills the dispatcher, yet the flood is admitted: {on}"))?;
                let victim_limited: f64 = on["victim_drops"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|d| d[0] == "rate_limit")
                    .filter_map(|d| d[1].as_f64())
                    .sum();
                let offered = f(&on, "victim_offered_pps").unwrap_or(0.0) * SECONDS;
                return ensure(victim_limited <= 0.01 * offered, format!("the victim is limited: {on}"));
            }
            // The victim asks for less than half the node: its fair share is all it offers.
            ensure(f(&on, "victim_kept").unwrap_or(0.0) >= 0.9, format!("victim kept under 90%: {on}"))?;
            // Work conserving: the antagonist is still served — unless receiving its flood
            // alone already takes more of the dispatcher than DRF grants it (its fixed part; a
            // noisy machine measured reception at 33 ns a packet instead of 24), when any packet
            // admitted would come out of the victim's share and the node admits none.
            if fixed < alloc {
                ensure(f(&on, "antagonist_delivered_pps").unwrap_or(0.0) > 0.0, format!("not work conserving: {on}"))?;
            } else {
                ensure(limit == Some(0.0), format!("reception alone is over its share, yet admitted: {on}"))?;
            }
            ensure(on["victim_dominant"] == "dispatcher", format!("victim's dominant resource: {on}"))
        });
    }
}

#[test]
#[cfg_attr(debug_assertions, ignore = "needs an optimized build; scripts/test.sh runs it with --release")]
fn a_costly_chain_gets_the_worker_and_the_victim_the_dispatcher_on_their_own() {
    // One worker: both chains are launched on it. The node measures the antagonist's 20 µs
    // packets against the victim's 200 ns, and moves the victim's chain to the dispatcher's
    // thread (auto placement) within the warm-up; placement alone isolates, so the victim keeps
    // its throughput even without the fairness mechanisms.
    holds_with("expensive", &["--workers", "1"], |runs| {
        for m in ["off", "on", "queues"] {
            let r = mode(runs, m)?;
            ensure(r["victim_place"] == "dispatcher" && r["antagonist_place"] == "worker 0", format!("{m}: placement: {r}"))?;
            ensure(r["moves"].as_u64() == Some(1), format!("{m}: one move, no thrash: {r}"))?;
            ensure(r["victim_kept"].as_f64().unwrap_or(0.0) >= 0.9, format!("{m}: victim kept under 90%: {r}"))?;
            ensure(r["antagonist_delivered_pps"].as_f64().unwrap_or(0.0) > 0.0, format!("{m}: antagonist starved: {r}"))?;
        }
        let alone = mode(runs, "alone")?;
        ensure(alone["moves"].as_u64() == Some(0), format!("alone: nothing to separate, yet moved: {alone}"))
    });
}

#[test]
#[cfg_attr(debug_assertions, ignore = "needs an optimized build; scripts/test.sh runs it with --release")]
fn throughput_follows_capacity_not_arrivals() {
    // FairNIC's Fig. 1: without isolation, two tenants over capacity get the same rate whatever
    // their processing capacity; with it, the one with 8x the capacity gets several times more.
    holds("hol", |runs| {
        let ratio = |m: &str| mode(runs, m).map(|r| r["throughput_ratio"].as_f64().unwrap_or(0.0));
        ensure(ratio("off")? < 1.5, format!("no head-of-line blocking without isolation? {runs:?}"))?;
        ensure(ratio("on")? > 3.0, format!("throughput does not follow capacity with isolation: {runs:?}"))
    });
}
