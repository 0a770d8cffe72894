//! `snic bench fair` prints what it claims. The isolation properties themselves are asserted
//! on a virtual clock, in-process, by crates/dataplane/tests/isolation.rs; the real-clock
//! figures are this machine's and go to BENCHMARKS.md. Here: every mode of a scenario is run
//! and reported with its fields, on the real clock (short runs; no figure is judged) and on the
//! virtual one, whose figures are exact.

use std::process::Command;

fn bench(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["bench", "fair", "--json"]).args(args).output().expect("snic runs");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("JSON lines")).collect()
}

/// The fields every antagonist run reports, with values that make sense on any machine.
fn well_formed(r: &serde_json::Value, scenario: &str, clock: &str) {
    assert_eq!((r["bench"].as_str(), r["scenario"].as_str(), r["clock"].as_str()), (Some("fair"), Some(scenario), Some(clock)), "{r}");
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {r}"));
    assert!(f("victim_offered_pps") > 0.0, "{r}");
    assert!((0.0..=1.0).contains(&f("victim_kept")), "{r}");
    assert!(f("victim_delivered_pps") <= f("victim_offered_pps") * 1.0001, "{r}");
    assert!(r["victim_p50_ns"].as_u64() <= r["victim_p99_ns"].as_u64(), "{r}");
    for k in ["antagonist_offered_pps", "antagonist_delivered_pps", "jain_dominant", "throughput_ratio"] {
        assert!(f(k) >= 0.0, "{k}: {r}");
    }
    for k in ["victim_place", "antagonist_place"] {
        assert!(r[k].is_string(), "{k}: {r}");
    }
    assert!(r["resources"].as_array().is_some_and(|a| !a.is_empty() || r["mode"] == "alone"), "{r}");
}

#[test]
fn every_mode_is_run_and_reported_on_the_real_clock() {
    let runs = bench(&["--scenario", "expensive", "--seconds", "0.05", "--warmup", "0.05"]);
    let modes: Vec<&str> = runs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["alone", "off", "on", "queues"]);
    for r in &runs {
        well_formed(r, "expensive", "real");
    }
    assert_eq!(runs[0]["antagonist_offered_pps"], 0.0, "alone: no antagonist");
}

#[test]
fn the_virtual_clock_gives_exact_figures_from_the_same_scenarios() {
    let runs = bench(&["--virtual", "--scenario", "engine", "--seconds", "0.02"]);
    let modes: Vec<&str> = runs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["alone", "off", "buckets", "on", "queues"]);
    for r in &runs {
        well_formed(r, "engine", "virtual");
    }
    // Exact: the victim asks for less than the node and gets all of it alone.
    assert_eq!(runs[0]["victim_kept"], 1.0, "{}", runs[0]);
    // The same command twice prints the same figures.
    assert_eq!(runs, bench(&["--virtual", "--scenario", "engine", "--seconds", "0.02"]));
}

#[test]
fn fig7_converges_to_the_drf_point() {
    // A virtual-clock scenario: exact.
    let runs = bench(&["--scenario", "fig7"]);
    let r = &runs[0];
    let (after, target) = (r["after_units"].as_array().unwrap(), r["target_units"].as_array().unwrap());
    for i in 0..2 {
        let (a, t) = (after[i].as_f64().unwrap(), target[i].as_f64().unwrap());
        assert!((a - t).abs() / t < 0.05, "user{}: {a} units against DRF's {t}: {r}", i + 1);
    }
    assert!(r["jain_dominant"].as_f64().unwrap() > 0.99, "{r}");
}

#[test]
fn bad_options_are_refused_with_the_reason() {
    for (args, reason) in [
        (&["--scenario", "teapot"][..], "unknown scenario"),
        (&["--core-target", "2"][..], "--core-target must be in (0, 1]"),
        (&["--seconds", "0"][..], "--seconds must be more than 0"),
        (&["--warmup", "1e9"][..], "--warmup must be between"),
        (&["--rx-ns", "10"][..], "--virtual"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["bench", "fair"]).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(reason), "{args:?}: {err}");
    }
}
