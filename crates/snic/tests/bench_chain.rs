//! The benchmarks print what they claim: each test checks a bench's output for its shape and
//! for what holds on any machine (the chains a mode uses, lower bounds set by the work itself,
//! exact results of virtual-clock benches), never its times or rates: those are the figures
//! BENCHMARKS.md compares, taken in one run on one machine.

use std::process::Command;

/// `snic ARGS`, which must succeed: its JSON lines.
fn bench_json(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(args).output().expect("snic runs");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `snic ARGS`, which must fail: its stderr.
fn bench_refuses(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(args).output().expect("snic runs");
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn chain_modes_cut_the_sequence_as_stated() {
    let runs = bench_json(&["bench", "chain", "--nts", "2,5", "--pps", "20000", "--seconds", "0.2", "--json"]);
    assert_eq!(runs.len(), 8);
    for r in &runs {
        let (n, chains, visits) = (r["nts"].as_u64().unwrap(), r["chains"].as_u64().unwrap(), r["visits"].as_u64().unwrap());
        let want = match r["mode"].as_str().unwrap() {
            "single" => (1, 1),
            "half" => (2, 2),
            "panic" => (1, n),
            "split" => (n, n),
            m => panic!("unknown mode {m}"),
        };
        assert_eq!((chains, visits), want, "{r}");
        assert!(r["delivered"].as_u64().unwrap() > 0, "{r}");
        assert!(r["p50_ns"].as_u64().unwrap() <= r["p99_ns"].as_u64().unwrap(), "{r}");
    }
    assert!(bench_refuses(&["bench", "chain", "--nts", "1"]).contains("at least 2"));
}

#[test]
fn launch_cost_is_reported_per_chain() {
    let runs = bench_json(&["bench", "launch", "--runs", "3", "--json"]);
    let cases = ["build", "warm", "on_demand", "context_switch", "victim_resume"];
    let got: Vec<(&str, &str)> = runs.iter().map(|r| (r["chain"].as_str().unwrap(), r["case"].as_str().unwrap())).collect();
    let mut want: Vec<(&str, &str)> = ["dummy", "vpc"].iter().flat_map(|c| cases.iter().map(move |k| (*c, *k))).collect();
    // Switching the vpc chain's DAG between one chain per NT and one compact chain.
    want.extend(["warm_planned", "warm_compact", "rechain_compact", "rechain_expand"].map(|k| ("vpc", k)));
    assert_eq!(got, want);
    for r in &runs {
        assert!(r["p50_ns"].as_u64().unwrap() > 0 && r["p50_ns"].as_u64() <= r["max_ns"].as_u64(), "{r}");
    }
    // An emulated 3 ms reconfiguration: a packet that needs a launch waits at least that long,
    // on any machine. (That a victim's packet does not wait for one is a property of the
    // launcher, checked on the virtual clock in crates/dataplane/tests/elastic.rs.)
    let runs = bench_json(&["bench", "launch", "--runs", "1", "--json", "--delay-ms", "3"]);
    let p50 = |case: &str| runs.iter().find(|r| r["chain"] == "dummy" && r["case"] == case).unwrap()["p50_ns"].as_u64().unwrap();
    assert!(p50("on_demand") >= 3_000_000 && p50("context_switch") >= 3_000_000, "{runs:?}");
}

#[test]
fn scale_bench_puts_autoscaling_between_static_max_and_static_avg() {
    let runs = bench_json(&["bench", "scale", "--json"]);
    let get = |scheme: &str| runs.iter().find(|r| r["scheme"] == scheme).unwrap_or_else(|| panic!("{scheme}: {runs:?}")).clone();
    let (max, avg, auto) = (get("static-max"), get("static-avg"), get("autoscale"));
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    // Provisioned for the peak: everything delivered, the most region-time.
    assert!(f(&max, "delivered_frac") > 0.99, "{max}");
    // The auto-scaler delivers more than the average allocation, for less region-time than the
    // peak allocation, and never decides to scale twice within a MONITOR_PERIOD.
    assert!(f(&auto, "delivered_frac") > f(&avg, "delivered_frac"), "{auto} vs {avg}");
    assert!(f(&auto, "region_ms") < 0.8 * f(&max, "region_ms"), "{auto} vs {max}");
    assert!(auto["scale_outs"].as_u64().unwrap() >= 2 && auto["scale_ins"].as_u64().unwrap() >= 2, "{auto}");
    assert!(f(&auto, "min_gap_ms") >= f(&auto, "monitor_period_ms"), "{auto}");
    assert_eq!(max["scale_outs"], 0);
}

#[test]
fn parallel_bench_reports_every_mode_with_its_stages() {
    let runs = bench_json(&["bench", "parallel", "--json", "--nts", "1,4", "--seconds", "0.2", "--workers", "1"]);
    let got: Vec<(u64, &str, u64)> =
        runs.iter().map(|r| (r["nts"].as_u64().unwrap(), r["mode"].as_str().unwrap(), r["stages"].as_u64().unwrap())).collect();
    assert_eq!(got, [(1, "parallel", 1), (1, "half", 1), (1, "sequential", 1), (4, "parallel", 1), (4, "half", 2), (4, "sequential", 4)]);
    for r in &runs {
        assert!(r["delivered"].as_u64().unwrap() > 0, "{r}");
        assert!(r["p50_ns"].as_u64().unwrap() >= 5000, "each NT costs 5 µs, a lower bound on any machine: {r}");
    }
    assert!(bench_refuses(&["bench", "parallel", "--nts", "9"]).contains("1 to 8"));
}

#[test]
fn redirect_bench_carries_packets_through_every_path() {
    let runs = bench_json(&["bench", "redirect", "--seconds", "0.2", "--rate", "2000", "--chain", "dummy", "--json"]);
    let paths: Vec<&str> = runs.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["local", "redirected", "pass-through"]);
    for r in &runs {
        // Stamped packets crossed the path (redirected: sealed at home, verified at the peer;
        // pass-through: verified and sealed again by the node between).
        assert!(r["latency_samples"].as_u64().unwrap() > 0 && r["delivered_mpps"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(bench_refuses(&["bench", "redirect", "--chain", "vpc"]).contains("unknown chain"));
}

/// The data-plane bench says what it ran: the vpc chain's cipher alone, and a generator that
/// wrote headers only, are named in its output, and every packet went through.
#[test]
fn dataplane_names_the_cipher_alone_chain_and_the_generators_writes() {
    for writes in ["frame", "headers"] {
        let runs = bench_json(&[
            "bench",
            "dataplane",
            "--chain",
            "aes-gcm",
            "--size",
            "1400",
            "--packets",
            "2000",
            "--rx-writes",
            writes,
            "--json",
        ]);
        assert_eq!(runs.len(), 1, "{runs:?}");
        let r = &runs[0];
        assert_eq!((r["chain"].as_str(), r["rx_writes"].as_str()), (Some("aes-gcm"), Some(writes)), "{r}");
        assert!(r["packets"].as_u64().unwrap() >= 2000 && r["dropped"] == 0 && r["allocs_during_run"] == 0, "{r}");
    }
    assert!(bench_refuses(&["bench", "dataplane", "--rx-writes", "some", "--seconds", "0.1"]).contains("invalid value"));
}

/// A timed data-plane run also gives its rate in each whole 100 ms of the run (a counted run,
/// which is not timed, none): as many slices as fit in the run, each with packets in it.
#[test]
fn a_timed_dataplane_run_gives_its_rate_slice_by_slice() {
    let timed = bench_json(&["bench", "dataplane", "--chain", "dummy", "--size", "64", "--seconds", "0.5", "--json"]);
    let slices: Vec<f64> = timed[0]["slice_mpps"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert!((1..=5).contains(&slices.len()) && slices.iter().all(|&x| x > 0.0), "{slices:?}");
    assert_eq!(timed[0]["allocs_during_run"], 0, "taking the slices allocates nothing: {}", timed[0]);
    let counted = bench_json(&["bench", "dataplane", "--chain", "dummy", "--size", "64", "--packets", "1000", "--json"]);
    assert_eq!(counted[0]["slice_mpps"], serde_json::json!([]), "{}", counted[0]);
}

/// `--pair-seal` follows each slice of the node with one of the seal of the packet's size: as
/// many seal slices as node slices (the run may end on a node slice), ratios in order, nothing
/// allocated; a counted run cannot be paired and is refused.
#[test]
fn a_paired_run_gives_the_node_against_the_seal_slice_by_slice() {
    let runs = bench_json(&["bench", "dataplane", "--chain", "aes-gcm", "--size", "1400", "--seconds", "0.5", "--pair-seal", "--json"]);
    let r = &runs[0];
    let p = &r["paired_seal"];
    let node = r["slice_mpps"].as_array().unwrap().len();
    let seal: Vec<f64> = p["slice_mops"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    assert!(node >= 1 && (node - 1..=node).contains(&seal.len()) && seal.iter().all(|&x| x > 0.0), "{r}");
    assert_eq!(p["bytes"], 1400, "{r}");
    let (p10, p50, p90) = (p["ratio_p10"].as_f64().unwrap(), p["ratio_p50"].as_f64().unwrap(), p["ratio_p90"].as_f64().unwrap());
    assert!(0.0 < p10 && p10 <= p50 && p50 <= p90, "{r}");
    assert_eq!(r["allocs_during_run"], 0, "{r}");
    let unpaired = bench_json(&["bench", "dataplane", "--chain", "dummy", "--size", "64", "--seconds", "0.15", "--json"]);
    assert!(unpaired[0].get("paired_seal").is_none(), "{}", unpaired[0]);
    assert!(bench_refuses(&["bench", "dataplane", "--packets", "100", "--pair-seal"]).contains("not timed"));
}
