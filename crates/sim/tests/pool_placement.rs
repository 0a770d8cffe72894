//! The `pool_placement` experiment (paper Fig. 11) with the daemon's pool agent: a pool turns
//! away fewer chains than a lone node, the ring's extra hops show in latency (nearest peers
//! first, never past half the ring), and a switch-attached pool's latency is one hop for all.

use snic_sim::pool_place::PlacementSpec;

#[test]
fn a_pool_places_what_a_node_cannot_and_the_ring_pays_in_hops() {
    let spec = PlacementSpec { nodes: 8, regions: 4, loads: vec![0.5, 0.9], hold_ms: 200.0, gossip_ms: 100.0, base_us: 2.0, hop_us: 1.0 };
    spec.validate().unwrap();
    let rows = spec.run(7, 30.0);
    for load in [0.5, 0.9] {
        let row = |t: &str| rows.iter().find(|r| r.topology == t && r.load == load).unwrap().clone();
        let (single, ring, switch) = (row("single"), row("ring"), row("switch"));
        assert_eq!(single.remote, 0.0);
        assert!(single.rejected > 0.05, "at {load} a lone node turns chains away: {single:?}");
        for pool in [&ring, &switch] {
            assert!(pool.remote > 0.0 && pool.rejected < single.rejected / 2.0, "{pool:?} vs {single:?}");
        }
        // Ring: home is 2 µs, each hop 1 µs, and no node is more than 4 hops away in a ring of 8.
        assert!(ring.p50_us >= 2.0 && ring.max_us <= 6.0 && ring.max_us > 2.0, "{ring:?}");
        assert_eq!((switch.p50_us, switch.max_us), (3.0, 3.0), "{switch:?}");
    }
    // More load, farther peers.
    let p99 = |load: f64| rows.iter().find(|r| r.topology == "ring" && r.load == load).unwrap().p99_us;
    assert!(p99(0.9) > p99(0.5), "{rows:?}");
}

#[test]
fn bad_sections_are_refused_with_the_setting() {
    let ok = PlacementSpec { nodes: 8, regions: 4, loads: vec![0.5], hold_ms: 200.0, gossip_ms: 100.0, base_us: 2.0, hop_us: 1.0 };
    assert!(PlacementSpec { nodes: 1, ..ok.clone() }.validate().unwrap_err().contains("nodes"));
    assert!(PlacementSpec { loads: vec![0.0], ..ok.clone() }.validate().unwrap_err().contains("loads"));
    assert!(PlacementSpec { gossip_ms: 0.0, ..ok }.validate().unwrap_err().contains("gossip_ms"));
}
