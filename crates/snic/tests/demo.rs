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
    // Every packet is accounted for, however the machine scheduled the threads: what the
    // endpoints sent was read by the node or lost in its socket before (loopback), ...
    assert_eq!(v["drained"], true, "{v}");
    let n = |t: &serde_json::Value, k: &str| t[k].as_u64().unwrap_or_else(|| panic!("{k}: {t}"));
    let sent: u64 = tenants.iter().map(|t| n(t, "sent_packets")).sum();
    let read: u64 = tenants.iter().map(|t| n(t, "received_packets")).sum();
    assert_eq!(sent, read + n(&v, "lost_before_node"), "{v}");
    for t in tenants {
        let (sent, read, tx) = (n(t, "sent_packets"), n(t, "received_packets"), n(t, "transmitted_packets"));
        let (delivered, dropped) = (n(t, "delivered_packets"), n(t, "dropped_packets"));
        assert!(sent > 0 && read > 0, "{t}");
        // ... the node transmitted or dropped each packet it read, once, and each packet it
        // transmitted reached the tenant's endpoint, transformed as its chain promises.
        assert_eq!(read, tx + dropped, "{t}");
        assert_eq!(delivered, tx, "{t}");
        assert_eq!(n(t, "unverified_packets"), 0, "every delivered packet carries its chain's rewrite: {t}");
        // Fair sharing measured the tenant's demand and granted all of it, or — on a machine
        // slow or busy enough that the node's resources bind (a debug build beside two CPU
        // hogs: the dispatcher 96% busy with green alone) — at least the tenant's equal half
        // of its dominant resource, as weighted DRF guarantees each of two equal tenants.
        let (share, fraction) = (t["dominant_share"].as_f64().unwrap(), t["fair_fraction"].as_f64().unwrap());
        assert!(t["dominant"].is_string() && share > 0.0, "{t}");
        assert!(fraction == 1.0 || (fraction > 0.0 && fraction < 1.0 && share >= 0.5 - 1e-9), "{t}");
        match t["name"].as_str().unwrap() {
            "blue" => {
                // One packet in ten is TCP to port 22, which the firewall denies; the others pass.
                let by =
                    |r: &str| t["drops_by_reason"].as_array().unwrap().iter().find(|d| d[0] == r).map_or(0, |d| d[1].as_u64().unwrap());
                let deny = by("firewall_deny");
                assert_eq!(deny, dropped, "only the firewall drops: {t}");
                // (Exactly so unless the node's socket lost some, which it counts.)
                let slack = 9 + n(&v, "lost_before_node");
                assert!(deny > 0 && deny * 9 <= tx + slack && tx <= deny * 9 + slack, "one in ten denied: {t}");
            }
            "green" => assert_eq!(dropped, 0, "{t}"),
            other => panic!("unexpected tenant {other}"),
        }
    }
}

/// `snic demo --pool`: three child nodes; blue's chain runs on a peer while A has no room and
/// comes home once green stops; every delivered packet carries its chain's rewrite, and every
/// node the demo started is gone when it ends.
#[test]
fn the_pool_demo_places_blue_on_a_peer_and_moves_it_back() {
    let out = Command::new(env!("CARGO_BIN_EXE_snic"))
        .args(["demo", "--pool", "--seconds", "1", "--rate", "300", "--json"])
        .output()
        .expect("snic runs");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON summary");
    let n = |t: &serde_json::Value, k: &str| t[k].as_u64().unwrap_or_else(|| panic!("{k}: {t}"));
    assert_eq!(v["blue_placed_on"], "B", "the peer with the most free regions: {v}");
    assert_eq!(v["blue_moved_back"], true, "{v}");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!((n(&nodes[0], "remote_launches"), n(&nodes[0], "moves_back")), (1, 1), "{v}");
    assert!(n(&nodes[1], "hosted_packets_seen") > 0 && n(&nodes[2], "hosted_packets_seen") == 0, "{v}");
    for t in v["tenants"].as_array().unwrap() {
        assert_eq!(n(t, "unverified_packets"), 0, "every delivered packet carries its chain's rewrite: {t}");
        assert!(n(t, "delivered_packets") + n(t, "denied_by_policy") <= n(t, "sent_packets"), "{t}");
        let by = |node: &str| t["delivered_by"].as_array().unwrap().iter().find(|d| d[0] == node).map(|d| d[1].as_u64().unwrap());
        match t["name"].as_str().unwrap() {
            // Blue: delivered by B while its chain ran there, by A before and after.
            "blue" => assert!(by("A") > Some(0) && by("B") > Some(0) && by("C") == Some(0), "{t}"),
            "green" => assert!(by("A") > Some(0) && by("B") == Some(0), "{t}"),
            other => panic!("unexpected tenant {other}"),
        }
    }
    // The nodes were stopped: their addresses are free again.
    for node in nodes {
        let data: std::net::SocketAddr = node["data"].as_str().unwrap().parse().unwrap();
        assert!(std::net::UdpSocket::bind(data).is_ok(), "node {} still holds {data}", node["name"]);
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

/// `snic bench` hands its arguments, `--help` included, to the snic-bench binary beside it, and
/// says what is missing when that binary is not there.
#[test]
fn bench_runs_the_bench_binary_beside_snic_and_says_so_when_it_is_missing() {
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["bench", "--help"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: snic bench") && help.contains("dataplane"), "{help}");

    let dir = std::env::temp_dir().join(format!("snic-alone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let alone = dir.join("snic");
    std::fs::copy(env!("CARGO_BIN_EXE_snic"), &alone).unwrap();
    let out = Command::new(&alone).args(["bench", "crypto"]).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("snic-bench binary, which is not beside"), "{err}");
}

#[test]
fn plan_shows_placement_and_rejects_bad_manifests_by_name() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["plan", "-f", manifest, "-o", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["chains"].as_array().unwrap().len(), 2);
    assert_eq!(v["chains"][0]["nts"], serde_json::json!(["blue/blue-firewall", "blue/blue-nat"]));

    let bad = std::env::temp_dir().join(format!("snic-bad-{}.yaml", std::process::id()));
    std::fs::write(&bad, "apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: red}\nspec: {vnis: [100]}\n---\napiVersion: snic/v1\nkind: Tenant\nmetadata: {name: blue}\nspec: {vnis: [100]}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["plan", "-f", bad.to_str().unwrap()]).output().unwrap();
    std::fs::remove_file(&bad).ok();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Tenant \"red\"") && err.contains("spec.vnis[0]") && err.contains("already belongs to tenant `blue`"), "{err}");
}
