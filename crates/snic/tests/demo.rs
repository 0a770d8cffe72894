//! Runs `snic demo --json` end to end (loopback only) and checks what it reports.

use std::process::Command;

#[test]
fn demo_delivers_each_tenants_traffic_transformed() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_snic")).args(["demo", "--seconds", "2", "--rate", "5000", "--json"]).output().expect("snic runs");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    let tenants = v["tenants"].as_array().unwrap();
    assert_eq!(tenants.len(), 2);
    for t in tenants {
        let sent = t["sent_packets"].as_u64().unwrap();
        let delivered = t["delivered_packets"].as_u64().unwrap();
        let dropped = t["dropped_packets"].as_u64().unwrap();
        assert!(sent > 1000, "{t}");
        assert_eq!(t["unverified_packets"], 0, "every delivered packet carries its chain's rewrite: {t}");
        // Fair sharing measured the tenant's demand; a lightly loaded node grants all of it.
        assert!(t["dominant"].is_string() && t["dominant_share"].as_f64().unwrap() > 0.0, "{t}");
        assert_eq!(t["fair_fraction"], 1.0, "{t}");
        // Loopback UDP may lose a few datagrams under load; the node itself accounts for the rest.
        assert!(delivered + dropped <= sent && delivered + dropped >= sent * 98 / 100, "{t}");
        match t["name"].as_str().unwrap() {
            "blue" => {
                // One packet in ten is TCP to port 22, which the firewall denies.
                let deny = t["drops_by_reason"].as_array().unwrap().iter().find(|r| r[0] == "firewall_deny").expect("firewall drops")[1]
                    .as_u64()
                    .unwrap();
                assert!(deny * 10 >= sent * 95 / 100 && deny * 10 <= sent * 105 / 100, "{t}");
            }
            "green" => assert_eq!(dropped, 0, "{t}"),
            other => panic!("unexpected tenant {other}"),
        }
    }
}

#[test]
fn bad_arguments_are_rejected_with_help() {
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["demo", "--seconds", "soon"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value"));
    let out =
        Command::new(env!("CARGO_BIN_EXE_snic")).args(["bench", "dataplane", "--chain", "teleport", "--seconds", "0.1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown chain"));
}

#[test]
fn plan_shows_placement_and_rejects_bad_manifests_by_name() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["plan", "-f", manifest, "-o", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["chains"].as_array().unwrap().len(), 2);
    assert_eq!(v["chains"][0]["nts"], serde_json::json!(["blue-firewall", "blue-nat"]));

    let bad = std::env::temp_dir().join(format!("snic-bad-{}.yaml", std::process::id()));
    std::fs::write(&bad, "apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: red}\nspec: {vnis: [100]}\n---\napiVersion: snic/v1\nkind: Tenant\nmetadata: {name: blue}\nspec: {vnis: [100]}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["plan", "-f", bad.to_str().unwrap()]).output().unwrap();
    std::fs::remove_file(&bad).ok();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Tenant \"red\"") && err.contains("spec.vnis[0]") && err.contains("already belongs to tenant `blue`"), "{err}");
}
