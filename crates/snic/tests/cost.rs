//! `snic cost`: the paper's figures with its defaults, a ratio computed from a trace, and clear
//! errors.

use std::process::Command;

fn cost(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).arg("cost").args(args).output().expect("snic runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn savings(json: &str, model: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["models"].as_array().unwrap().iter().find(|m| m["name"] == model).unwrap()["savings_vs_traditional"].as_f64().unwrap()
}

#[test]
fn defaults_reproduce_the_paper_s_capex_savings() {
    let (ok, out, err) = cost(&["--json"]);
    assert!(ok, "{err}");
    // Paper 000 §7 / A.2: 52% (ring) and 18% (direct), 52.8% and 18.7% unrounded.
    assert_eq!((savings(&out, "snic-ring") * 1000.0).round(), 528.0);
    assert_eq!((savings(&out, "snic-direct") * 1000.0).round(), 187.0);
    // Overrides apply: with no consolidation potential an sNIC pool saves what a multi-host
    // NIC pool saves.
    let (_, out, _) = cost(&["--json", "--capex-consolid-ratio", "1"]);
    assert!((savings(&out, "snic-ring") - savings(&out, "mhnic-ring")).abs() < 1e-12);
}

#[test]
fn a_trace_gives_the_consolidation_ratio() {
    let dir = std::env::temp_dir().join(format!("snic-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("trace.csv");
    // Two endpoints peaking in different milliseconds: peaks 1000 and 800 B, the sum peaks at
    // 1000 + 100 = 1100 B: ratio 1100 / 1800.
    std::fs::write(&f, "time_s,endpoint,bytes\n0.0001,a,600\n0.0005,a,400\n0.0005,b,100\n0.0021,b,800\n0.0022,a,50\n").unwrap();
    let (ok, out, err) = cost(&["--json", "--trace", f.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    assert!(ok, "{err}");
    assert!((v["capex_consolid_ratio"].as_f64().unwrap() - 1100.0 / 1800.0).abs() < 1e-12, "{v}");
    assert_eq!(v["trace"]["endpoints"], 2);
    std::fs::write(&f, "0.1,a,lots\n").unwrap();
    let (ok, _, err) = cost(&["--trace", f.to_str().unwrap()]);
    assert!(!ok && err.contains("line 1") && err.contains("bytes"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    let (ok, _, err) = cost(&["--nt-cost-ratio", "2"]);
    assert!(!ok && err.contains("nt_cost_ratio must be between 0 and 1"), "{err}");
    let (ok, _, err) = cost(&["--tco"]);
    assert!(!ok && err.contains("--nic-watts"), "{err}");
}
