//! The simulator and the node agree on the paper's Fig. 7 / Fig. 20 step: the same allocation
//! after user2's load steps up, from the same fairness controller — the simulator driving it
//! directly, the node (in-memory port, virtual clock) through its data path.

use snic_core::fair::FairConfig;
use snic_core::ids::TenantId;
use snic_core::node::NodeCoreConfig;
use snic_dataplane::NodeConfig;
use snic_perf::testbed::Fig7;
use std::time::Duration;

const UNIT: f64 = 100_000.0;

#[test]
fn simulator_and_node_give_the_same_fig20_allocation() {
    let text = include_str!("../../../scenarios/fig20.toml");
    let s = snic_sim::Scenario::parse(text).unwrap();
    let r = s.run(0, |_, _| {}).unwrap();
    let sim: Vec<f64> = r.results[0]["tenants"].as_array().unwrap().iter().map(|t| t["after_units"].as_f64().unwrap()).collect();
    // DRF's answer: dominant shares equal on NT2 (user1) and NT3 (user2): 100/17 and 70/17.
    assert!((sim[0] - 100.0 / 17.0).abs() < 0.05 && (sim[1] - 70.0 / 17.0).abs() < 0.05, "{sim:?}");

    // The node runs on a virtual clock, and times its NTs' work on that clock too (a real-time
    // cost times a virtual rate made the dispatcher bind on a loaded machine, once in CI): its
    // answer does not depend on the machine.
    if let Err(e) = node_allocation(&sim) {
        panic!("the node's allocation differs from the simulator's: {e}");
    }
}

/// The link binding: fair sharing counts a 0.8 Gbit/s link, 8.8 units of the figure's packets.
/// Before the step, user1 offers 8 units and user2 2: the link is full, user2 within its share,
/// so user1 is limited to what the link has left (egress binds; a flood's reception, the fixed
/// part, cannot be throttled away). The simulator, fed the same packet size and link, must give
/// the node's allocation.
#[test]
fn simulator_and_node_agree_when_the_link_binds() {
    let bytes = snic_perf::testbed::datagram(100, 1000, 64).len();
    let text = include_str!("../../../scenarios/fig20.toml")
        .replace("unit_pps = 100000", &format!("unit_pps = 100000\npacket_bytes = {bytes}"))
        .replace("epoch_us = 100", "epoch_us = 100\nlink_gbps = 0.8");
    let s = snic_sim::Scenario::parse(&text).unwrap();
    let r = s.run(0, |_, _| {}).unwrap();
    let tenants = r.results[0]["tenants"].as_array().unwrap();
    let sim: Vec<f64> = tenants.iter().map(|t| t["before_units"].as_f64().unwrap()).collect();
    let link_units = 0.8e9 / 8.0 / (bytes as f64 * UNIT);
    assert!((sim[0] - (link_units - 2.0)).abs() < 0.05 && (sim[1] - 2.0).abs() < 0.05, "{sim:?}, link {link_units} units");

    let fair = FairConfig { epoch: Duration::from_micros(100), ..FairConfig::default() };
    let mut f =
        Fig7::new(NodeConfig { core: NodeCoreConfig { fair, link_bps: 0.8e9, ..NodeCoreConfig::default() }, ..Default::default() }, UNIT)
            .unwrap();
    let step = Duration::from_micros(10);
    f.drive([8.0, 2.0], Duration::from_millis(24), step, |_| {});
    let got = f.drive([8.0, 2.0], Duration::from_millis(6), step, |_| {});
    let node: Vec<f64> = got.iter().map(|&n| n as f64 / 0.006 / UNIT).collect();
    for i in 0..2 {
        assert!((node[i] - sim[i]).abs() / sim[i] < 0.02, "user{}: node {node:?} vs simulator {sim:?}", i + 1);
    }
}

fn node_allocation(sim: &[f64]) -> Result<(), String> {
    let fair = FairConfig { epoch: Duration::from_micros(100), ..FairConfig::default() };
    let mut f = Fig7::new(NodeConfig { core: NodeCoreConfig { fair, ..NodeCoreConfig::default() }, ..Default::default() }, UNIT).unwrap();
    let step = Duration::from_micros(10);
    f.drive([8.0, 2.0], Duration::from_millis(30), step, |_| {});
    f.drive([8.0, 6.0], Duration::from_millis(20), step, |_| {});
    let got = f.drive([8.0, 6.0], Duration::from_millis(10), step, |_| {});
    let node: Vec<f64> = got.iter().map(|&n| n as f64 / 0.01 / UNIT).collect();
    for i in 0..2 {
        if (node[i] - sim[i]).abs() / sim[i] >= 0.02 {
            return Err(format!("user{}: node {:?} vs simulator {:?}", i + 1, node, sim));
        }
    }
    // And the limits the node set are the simulator's allocation.
    let l1 = f.node.core().meter().limit(TenantId(1)).unwrap() / UNIT;
    if (l1 - sim[0]).abs() / sim[0] >= 0.02 {
        return Err(format!("limit {l1} vs {}", sim[0]));
    }
    Ok(())
}

/// The dispatcher binding: receiving a packet costs the dispatcher 200 ns and the rest of an
/// admitted packet's way 300 ns, on one core; user1 offers 1.6 Mpps and user2 0.8 Mpps through
/// NTs that cost nothing — 1.2 cores' worth at full admission, more than the core the
/// dispatcher has, and the 0.8 core fair sharing hands out. Every packet read costs its
/// reception, over its limit or not (the fixed part of the demand); DRF shares the rest. The
/// node runs on a virtual clock with those I/O costs (the paced source of `snic bench fair
/// --virtual`); the simulator, given the same costs, must give the node's allocation.
#[test]
fn simulator_and_node_agree_when_the_dispatcher_binds() {
    use snic_core::dag::{DagRoute, NtMask, Step};
    use snic_core::ids::DagUid;
    use snic_core::mat::Mat;
    use snic_dataplane::node::{Clock, ManualClock};
    use snic_dataplane::store::Peer;
    use snic_dataplane::Node;
    use snic_nt::NtSpec;
    use snic_perf::paced::{IoCost, Paced, StreamSpec};
    use snic_perf::testbed::{dag_rule, datagram, isolation::run_virtual};
    use std::sync::Arc;

    const RX_NS: u64 = 200;
    const TX_NS: u64 = 300;
    let offered = [16.0, 8.0];
    let bytes = datagram(100, 1000, 64).len();
    let text = format!(
        r#"
name = "dispatcher"
experiment = "fairness"
duration_s = 0.04

[fairness]
unit_pps = 100000
packet_bytes = {bytes}
rx_ns = {RX_NS}.0
rest_ns = {TX_NS}.0
nts = [ {{ name = "a", capacity = 1000.0 }}, {{ name = "b", capacity = 1000.0 }} ]
tenants = [
  {{ name = "user1", path = ["a"], load = [[0.0, {}]] }},
  {{ name = "user2", path = ["b"], load = [[0.0, {}]] }},
]

[node.fairness]
epoch_us = 100
"#,
        offered[0], offered[1]
    );
    let r = snic_sim::Scenario::parse(&text).unwrap().run(0, |_, _| {}).unwrap();
    let tenants = r.results[0]["tenants"].as_array().unwrap();
    let sim: Vec<f64> = tenants.iter().map(|t| t["after_units"].as_f64().unwrap()).collect();
    let dominant: Vec<&str> = tenants.iter().map(|t| t["dominant"].as_str().unwrap_or("-")).collect();
    assert_eq!(dominant, ["dispatcher", "dispatcher"], "{tenants:?}");
    // The dispatcher binds: together they get less than they offer, user1 less than offered.
    assert!(sim[0] + sim[1] < 0.9 * (offered[0] + offered[1]) && sim[0] < offered[0], "{sim:?}");

    let clock = ManualClock::default();
    let src = "192.0.2.1:4789".parse().unwrap();
    let streams =
        (0..2).map(|i| StreamSpec { datagram: datagram(100 * (i as u32 + 1), 1000, 64), pps: offered[i] * UNIT, src }).collect::<Vec<_>>();
    let backend = Paced::new(streams, 1024, Box::new(clock.clone())).with_io_cost(IoCost { rx_ns: RX_NS, tx_ns: TX_NS });
    let fair = FairConfig { epoch: Duration::from_micros(100), ..FairConfig::default() };
    let cfg = NodeConfig { core: NodeCoreConfig { fair, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, backend, Box::new(clock.clone())).unwrap();
    let mut mat = Mat::new();
    for t in 1..=2u16 {
        let chain = node.add_chain(vec![NtSpec::Dummy]);
        node.launch(chain).unwrap();
        node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain, mask: NtMask::all(1) }]));
        mat.insert(dag_rule(100 * t as u32, TenantId(t), DagUid(t as u32)));
        node.fdb_mut().set_default(100 * t as u32, Some(Peer { addr: "192.0.2.9:4789".parse().unwrap(), ..Peer::default() }));
        node.set_tenant(TenantId(t), 1.0);
    }
    node.mat_handle().store(Arc::new(mat));
    let idle = Duration::from_micros(1);
    run_virtual(&mut node, &clock, Duration::from_millis(30), idle);
    node.backend_mut().reset_stats();
    let t0 = clock.now();
    run_virtual(&mut node, &clock, Duration::from_millis(10), idle);
    let secs = clock.now().saturating_since(t0).as_secs_f64();
    let got: Vec<f64> = node.backend().stats().iter().map(|s| s.delivered as f64 / secs / UNIT).collect();
    for i in 0..2 {
        assert!((got[i] - sim[i]).abs() / sim[i] < 0.02, "user{}: node {got:?} vs simulator {sim:?}", i + 1);
    }
}
