//! The PANIC-style scheduler mode: a packet returns to the central scheduler after every NT.

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::Mat;
use snic_core::node::NodeCoreConfig;
use snic_core::sched::SchedConfig;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::NtSpec;
use snic_perf::testbed::{dag_rule, datagram};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Runs 100 packets through a chain of counter, dummy, counter whose DAG skips the dummy;
/// returns (region visits, per-NT packets, delivered).
fn run(panic_mode: bool) -> (u64, Vec<u64>, usize) {
    let cfg = NodeConfig {
        core: NodeCoreConfig {
            panic: panic_mode,
            sched: SchedConfig { credits: 8, ..SchedConfig::default() },
            ..NodeCoreConfig::default()
        },
        vtep_port: None,
        ..Default::default()
    };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default())).unwrap();
    let c = node.add_chain(vec![NtSpec::Counter, NtSpec::Dummy, NtSpec::Counter]);
    let inst = node.launch(c).unwrap();
    node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask(0b101) }]));
    let mut mat = Mat::new();
    mat.insert(dag_rule(100, TenantId(1), DagUid(1)));
    node.mat_handle().store(Arc::new(mat));
    node.fdb_mut().set_default(100, Some(Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), ..Default::default() }));
    for i in 0..100u16 {
        node.backend_mut().rx.push_back((datagram(100, 1000 + i % 4, 16), SocketAddr::from(([192, 0, 2, 1], 4789))));
    }
    while !node.backend().rx.is_empty() {
        node.poll();
    }
    assert!(node.drain(Duration::from_secs(5)));
    let rc = node.region_counters(inst).unwrap();
    let nt = rc.nt_packets.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    (rc.packets.load(Ordering::Relaxed), nt, node.backend().tx.len())
}

#[test]
fn every_nt_is_its_own_trip_through_the_scheduler() {
    // One visit per packet normally; one per NT the DAG runs in PANIC mode. Either way each NT
    // sees each packet once, the skipped one never, and everything comes out.
    assert_eq!(run(false), (100, vec![100, 0, 100], 100));
    assert_eq!(run(true), (200, vec![100, 0, 100], 100));
}
