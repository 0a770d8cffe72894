//! `snic sim`: a small scenario's report is byte-identical to its golden file (same seed, same
//! JSON), the seed changes it, and scenarios that cannot run say why.

use std::process::Command;

fn sim(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).arg("sim").args(args).output().expect("snic runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

const SMALL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sim-small.toml");

#[test]
fn a_small_scenario_matches_its_golden_report() {
    let (ok, out, err) = sim(&[SMALL, "--json"]);
    assert!(ok, "{err}");
    let golden = include_str!("data/sim-small.json");
    assert_eq!(out, golden, "same scenario and seed must give byte-identical JSON");
    let (_, other, _) = sim(&[SMALL, "--json", "--seed", "43"]);
    assert_ne!(other, golden);
    let v: serde_json::Value = serde_json::from_str(&other).unwrap();
    assert_eq!(v["seed"], 43, "the seed is always reported");
    // --out writes the report and its figure.
    let dir = std::env::temp_dir().join(format!("snic-sim-out-{}", std::process::id()));
    let (ok, _, err) = sim(&[SMALL, "--out", dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("sim-small.json")).unwrap(), golden);
    assert!(std::fs::read_to_string(dir.join("sim-small.svg")).unwrap().starts_with("<svg"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One small scenario per experiment that drives the policy core (the auto-scaler and
/// launcher, the launcher's victim cache, the credit scheduler and join table, the pool's
/// membership protocol and pool agent), each kept as a
/// golden report: any change to what they compute shows here, and must be looked at and the
/// golden file regenerated on purpose (`snic sim tests/data/<name>.toml --json > ...json`).
#[test]
fn small_policy_scenarios_match_their_golden_reports() {
    let golden = [
        ("sim-small-autoscale", include_str!("data/sim-small-autoscale.json")),
        ("sim-small-victim", include_str!("data/sim-small-victim.json")),
        ("sim-small-chaining", include_str!("data/sim-small-chaining.json")),
        ("sim-small-membership", include_str!("data/sim-small-membership.json")),
        ("sim-small-placement", include_str!("data/sim-small-placement.json")),
    ];
    for (name, want) in golden {
        let path = format!("{}/tests/data/{name}.toml", env!("CARGO_MANIFEST_DIR"));
        let (ok, out, err) = sim(&[&path, "--json"]);
        assert!(ok, "{name}: {err}");
        assert_eq!(out, want, "{name}: same scenario and seed must give the golden report");
    }
}

#[test]
fn scenarios_that_cannot_run_say_why() {
    let dir = std::env::temp_dir().join(format!("snic-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("fig22.toml");
    let text = std::fs::read_to_string(SMALL).unwrap().replace("experiment = \"consolidation\"", "experiment = \"consolidation_usage\"");
    std::fs::write(&f, text).unwrap();
    let (ok, _, err) = sim(&[f.to_str().unwrap()]);
    assert!(!ok && err.contains("needs [topology], [workload] and [consolidation_usage]"), "{err}");
    std::fs::write(&f, "name = 1").unwrap();
    let (ok, _, err) = sim(&[f.to_str().unwrap()]);
    assert!(!ok && err.contains("invalid scenario"), "{err}");
    // The node's sections are checked as node.yaml's are, and name the setting.
    let autoscale = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sim-small-autoscale.toml");
    let text = std::fs::read_to_string(autoscale).unwrap();
    std::fs::write(&f, text.replace("monitor_period_ms = 5.0", "monitor_period_ms = 5.0\nhigh = 1.5")).unwrap();
    let (ok, _, err) = sim(&[f.to_str().unwrap()]);
    assert!(!ok && err.contains("[node]: elastic.high must be in (0, 1]"), "{err}");
    // A policy key in an experiment's section is refused: it belongs to [node.elastic].
    std::fs::write(&f, text.replace("instance_gbps = 2.0", "instance_gbps = 2.0\nlaunch_ms = 5.0")).unwrap();
    let (ok, _, err) = sim(&[f.to_str().unwrap()]);
    assert!(!ok && err.contains("unknown field `launch_ms`"), "{err}");
    // A pool of one node is not a pool.
    let membership = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sim-small-membership.toml");
    let text = std::fs::read_to_string(membership).unwrap();
    std::fs::write(&f, text.replace("nodes = [4, 6]", "nodes = [1]")).unwrap();
    let (ok, _, err) = sim(&[f.to_str().unwrap()]);
    assert!(!ok && err.contains("membership: nodes must list pool sizes from 2 to 4096"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
