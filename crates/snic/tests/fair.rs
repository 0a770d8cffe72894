//! Isolation against antagonists (paper 003 §6.4), through `snic bench fair`: a well-behaved
//! tenant sharing one core and one receive ring with an antagonist keeps its throughput when
//! the fairness mechanisms are on. (Latency and the figures themselves are in BENCHMARKS.md.)

use std::process::Command;

/// One benchmark at a time: each measures throughput on the machine's cores, and two at once
/// on a two-core machine measure each other (the victim alone kept 0.985 of its load, the
/// antagonist's allocation fell to zero, when they overlapped).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
#[cfg_attr(debug_assertions, ignore = "needs an optimized build; scripts/test.sh runs it with --release")]
fn the_victim_keeps_its_share_against_each_antagonist() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for scenario in ["expensive", "flood64", "engine"] {
        let out = Command::new(env!("CARGO_BIN_EXE_snic"))
            .args(["bench", "fair", "--scenario", scenario, "--seconds", "0.5", "--warmup", "0.5", "--json"])
            .output()
            .expect("snic runs");
        assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        let runs: Vec<serde_json::Value> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON lines")).collect();
        let mode = |m: &str| runs.iter().find(|r| r["mode"] == m).unwrap_or_else(|| panic!("no {m} run: {runs:?}")).clone();
        let (alone, on) = (mode("alone"), mode("on"));
        assert!(alone["victim_kept"].as_f64().unwrap() > 0.99, "{alone}");
        // The victim asks for less than half the node: its fair share is all it offers.
        assert!(on["victim_kept"].as_f64().unwrap() >= 0.9, "{scenario}: {on}");
        assert!(on["antagonist_limit_pps"].as_f64().is_some(), "the antagonist is limited at ingress: {on}");
        assert!(on["antagonist_delivered_pps"].as_f64().unwrap() > 0.0, "and still served (work conserving): {on}");
        assert_eq!(on["victim_dominant"], "dispatcher", "{on}");
    }
}

#[test]
#[cfg_attr(debug_assertions, ignore = "needs an optimized build; scripts/test.sh runs it with --release")]
fn throughput_follows_capacity_not_arrivals() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // FairNIC's Fig. 1: without isolation, two tenants over capacity get the same rate whatever
    // their processing capacity; with it, the one with 8x the capacity gets several times more.
    let out = Command::new(env!("CARGO_BIN_EXE_snic"))
        .args(["bench", "fair", "--scenario", "hol", "--seconds", "0.5", "--warmup", "0.5", "--json"])
        .output()
        .expect("snic runs");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let runs: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON lines")).collect();
    let ratio = |m: &str| runs.iter().find(|r| r["mode"] == m).unwrap()["throughput_ratio"].as_f64().unwrap();
    assert!(ratio("off") < 1.5, "head-of-line blocking without isolation: {runs:?}");
    assert!(ratio("on") > 3.0, "throughput follows capacity with it: {runs:?}");
}
