//! One scripted pool scenario through both drivers of the node's core — the simulator's fluid
//! node ([`PoolSim`]) and the data plane's `Node` on the in-memory backend — with the peers
//! played by the script: their action traces (every request the core made of its peers and
//! every note it gave its driver, in order) are identical. The pool's decisions and the rule
//! for taking a host's answer live once, in the core; this test keeps the two drivers from
//! growing their own again (issue 50).
//!
//! The scenario: a node of one region and two chains. Chain 0 takes the region; chain 1's
//! traffic finds none, and the member with the most free regions is asked to host it. An
//! answer from a member that was not asked is not taken (that member is told it need not
//! host); the one asked refuses; the other is asked, and hosts. Chain 0 goes quiet: once home
//! has had room a whole MONITOR_PERIOD, chain 1 comes home. Chain 0's traffic again: it is
//! placed, and its peer dies — it runs here again. Placed again, its peer restarts unseen (a
//! report of a newer generation): what the peer ran is lost, as if it had gone down and up.

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::elastic::ElasticConfig;
use snic_core::events::{ElasticStats, EventKind};
use snic_core::fair::FairConfig;
use snic_core::ids::{ChainId, DagUid, TenantId};
use snic_core::mat::Mat;
use snic_core::node::placing::PoolTraced;
use snic_core::node::NodeCoreConfig;
use snic_core::pool::placements::{HostAnswer, PoolNote, PoolRequest};
use snic_core::pool::{AgentConfig, LoadReport, MemberEvent};
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::node::ManualClock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use snic_sim::pool_node::{PoolSetup, PoolSim};
use snic_wire::ethernet::MacAddr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

/// What the script does to a node, whichever driver runs it.
trait Driver {
    /// `ms` milliseconds, chain `c` getting traffic where `on[c]` (a quarter of an instance's
    /// worth).
    fn run(&mut self, on: [bool; 2], ms: u32);
    /// What the node asked of its (scripted) peers since the last call.
    fn requests(&mut self) -> Vec<PoolRequest>;
    fn answer(&mut self, chain: ChainId, route: u32, peer: SocketAddr, answer: HostAnswer);
    fn returned(&mut self, chain: ChainId);
    fn member(&mut self, event: MemberEvent);
    fn report(&mut self, from: SocketAddr, report: LoadReport);
    fn trace(&self) -> Vec<PoolTraced>;
    /// What the node's core recorded.
    fn events(&self) -> ElasticStats;
}

fn elastic() -> ElasticConfig {
    ElasticConfig { regions: 1, autoscale: true, monitor_period: 20 * MS, launch_delay: 2 * MS, ..ElasticConfig::default() }
}

fn agent() -> AgentConfig {
    // Reports live longer than the script's longest wait: what the node knows of its peers is
    // what the script told it, whichever driver's clock runs further.
    AgentConfig { monitor_period: 20 * MS, report_ttl: Duration::from_secs(10), ..AgentConfig::default() }
}

/// The simulator's node: node 0 of a pool of one, its peers outside (the script's).
struct Sim(PoolSim);

impl Sim {
    fn new() -> Self {
        let mut sim = PoolSim::new(PoolSetup {
            nodes: 1,
            elastic: elastic(),
            agent: agent(),
            pooled: true,
            links: Vec::new(),
            instance_gbps: 8.0,
            bin: MS,
            gossip_bins: 1,
            flows: 4,
            flow_bins: 1e6,
            seed: 1,
        });
        sim.add_chain(0);
        sim.add_chain(0);
        sim.trace_pool(0);
        Sim(sim)
    }
}

impl Driver for Sim {
    fn run(&mut self, on: [bool; 2], ms: u32) {
        let offered = on.map(|o| if o { 0.002 } else { 0.0 });
        for _ in 0..ms {
            self.0.step(&offered);
        }
    }
    fn requests(&mut self) -> Vec<PoolRequest> {
        self.0.outside().into_iter().map(|(_, r)| r).collect()
    }
    fn answer(&mut self, chain: ChainId, route: u32, peer: SocketAddr, answer: HostAnswer) {
        self.0.answer(0, chain, route, peer, answer);
    }
    fn returned(&mut self, chain: ChainId) {
        self.0.returned(0, chain);
    }
    fn member(&mut self, event: MemberEvent) {
        self.0.member(0, event);
    }
    fn report(&mut self, from: SocketAddr, report: LoadReport) {
        self.0.hear_report(0, from, report);
    }
    fn trace(&self) -> Vec<PoolTraced> {
        self.0.pool_trace(0).to_vec()
    }
    fn events(&self) -> ElasticStats {
        self.0.events(0).clone()
    }
}

/// The data plane's node on the in-memory backend and a virtual clock.
struct Plane {
    node: Node<MemPort>,
    clock: ManualClock,
}

impl Plane {
    fn new() -> Self {
        let clock = ManualClock::default();
        let core = NodeCoreConfig {
            elastic: elastic(),
            pool: agent(),
            fair: FairConfig { epoch: MS, ..FairConfig::default() },
            ..NodeCoreConfig::default()
        };
        let cfg = NodeConfig { core, vtep_port: None, ..NodeConfig::default() };
        let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone())).unwrap();
        node.set_pool_secret(Some(b"a pool secret of 32 bytes, more!"));
        let mut mat = Mat::new();
        for i in 0..2u32 {
            // An NT of 1 Mpps: a quarter of its worth is 250 packets a millisecond.
            let c = node.add_chain(vec![NtSpec::Synthetic(SyntheticConfig::declared(1_000_000, false))]);
            assert_eq!(c, ChainId(i as u16));
            // (Named as the simulator names its workload chains: the same pool-wide key.)
            node.label_chain(c, &[format!("w{i}")]);
            // (DAG i for chain i: the simulator's numbering.)
            node.set_dag(DagUid(i), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
            let (vni, t) = (100 + i, TenantId(i as u16 + 1));
            mat.insert(snic_perf::testbed::dag_rule(vni, t, DagUid(i)));
            node.fdb_mut().set_default(vni, Some(Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), mac: MacAddr::default() }));
            node.set_tenant(t, 1.0);
        }
        node.mat_handle().store(Arc::new(mat));
        node.trace_pool(true);
        Plane { node, clock }
    }
}

impl Driver for Plane {
    fn run(&mut self, on: [bool; 2], ms: u32) {
        for _ in 0..ms {
            for (i, _) in on.iter().enumerate().filter(|(_, o)| **o) {
                for k in 0..250u16 {
                    let d = snic_perf::testbed::datagram(100 + i as u32, 1 + k % 4, 6);
                    self.node.backend_mut().rx.push_back((d, SocketAddr::from(([192, 0, 2, 1], 4789))));
                }
            }
            self.clock.advance(MS);
            while self.node.poll() > 0 {}
            self.node.backend_mut().tx.clear();
        }
    }
    fn requests(&mut self) -> Vec<PoolRequest> {
        std::iter::from_fn(|| self.node.poll_pool()).collect()
    }
    fn answer(&mut self, chain: ChainId, route: u32, peer: SocketAddr, answer: HostAnswer) {
        self.node.pool_answer(chain, route, peer, answer);
    }
    fn returned(&mut self, chain: ChainId) {
        self.node.pool_returned(chain, Ok(Vec::new()));
    }
    fn member(&mut self, event: MemberEvent) {
        self.node.pool_member(event);
    }
    fn report(&mut self, from: SocketAddr, report: LoadReport) {
        if self.node.pool_heard(from, report.gen) != snic_core::pool::Heard::Stale {
            self.node.pool_report(from, report);
        }
    }
    fn trace(&self) -> Vec<PoolTraced> {
        self.node.core().pool_trace().to_vec()
    }
    fn events(&self) -> ElasticStats {
        self.node.core().events().clone()
    }
}

/// Member `i`'s pool and data addresses.
fn member(i: u8) -> (SocketAddr, SocketAddr) {
    (SocketAddr::from(([198, 51, 100, i], 7946)), SocketAddr::from(([198, 51, 100, i], 4789)))
}

fn report(gen: u64, seq: u64, free: u16) -> LoadReport {
    LoadReport { gen, seq, free_regions: free, ..Default::default() }
}

/// Runs `on` a millisecond at a time until the node asks something of its peers (at most
/// `limit` ms): the first request.
fn until_request(d: &mut dyn Driver, on: [bool; 2], limit: u32, what: &str) -> PoolRequest {
    for _ in 0..limit {
        d.run(on, 1);
        let mut r = d.requests();
        if !r.is_empty() {
            assert_eq!(r.len(), 1, "{what}: one request at a time: {r:?}");
            return r.remove(0);
        }
    }
    panic!("{what}: no request in {limit} ms; trace {:?}", d.trace())
}

/// The scenario of the module docs, on `d`.
fn scenario(d: &mut dyn Driver) -> Vec<PoolTraced> {
    let (p, q) = (member(1), member(2));
    d.member(MemberEvent::Up(p.0));
    d.member(MemberEvent::Up(q.0));
    d.report(p.0, report(1, 1, 1));
    d.report(q.0, report(1, 1, 3));
    // Chain 0 takes the one region.
    d.run([true, false], 5);
    assert!(d.requests().is_empty());
    // 1. Chain 1 finds no room: Q, with the most free regions, is asked.
    let PoolRequest::Place { chain, route, peer, .. } = until_request(d, [true, true], 10, "chain 1 placed") else { panic!() };
    assert_eq!((chain, peer), (ChainId(1), q.0));
    // 2. P, not asked, says it hosts: not taken, and told it need not.
    d.answer(chain, route, p.0, HostAnswer::Hosted { data: p.1, hosted: 9, gen: 1 });
    assert_eq!(d.requests(), vec![PoolRequest::Unhost { peer: p.0, hosted: 9 }]);
    // 3. Q refuses: P is asked next, and hosts.
    d.answer(chain, route, q.0, HostAnswer::Refused);
    let PoolRequest::Place { peer, .. } = until_request(d, [true, true], 10, "the next member asked") else { panic!() };
    assert_eq!(peer, p.0);
    d.answer(chain, route, p.0, HostAnswer::Hosted { data: p.1, hosted: 5, gen: 1 });
    d.run([true, true], 5);
    // 4. Chain 0 goes quiet: its region becomes room, and a MONITOR_PERIOD later chain 1
    // comes home.
    let r = until_request(d, [false, true], 200, "chain 1 comes home");
    assert!(matches!(r, PoolRequest::Return { chain: ChainId(1), hosted: 5, .. }), "{r:?}");
    d.returned(ChainId(1));
    d.run([false, true], 5);
    // 5. Chain 0's traffic again, chain 1 holding the region: chain 0 goes to P (Q full).
    d.report(q.0, report(1, 2, 0));
    let PoolRequest::Place { chain, route, peer, .. } = until_request(d, [true, true], 100, "chain 0 placed") else { panic!() };
    assert_eq!((chain, peer), (ChainId(0), p.0));
    d.answer(chain, route, p.0, HostAnswer::Hosted { data: p.1, hosted: 6, gen: 1 });
    d.run([true, true], 3);
    // 6. P dies: chain 0 runs here again (asked nowhere: P is gone, Q full).
    d.member(MemberEvent::Down(p.0));
    d.run([false, true], 3);
    // 7. P is back; chain 0 is placed on it again, and P restarts unseen: its report of a newer
    // generation says what it ran is gone.
    d.member(MemberEvent::Up(p.0));
    d.report(p.0, report(1, 3, 1));
    let PoolRequest::Place { chain, route, peer, .. } = until_request(d, [true, true], 100, "chain 0 placed again") else { panic!() };
    assert_eq!((chain, peer), (ChainId(0), p.0));
    d.answer(chain, route, p.0, HostAnswer::Hosted { data: p.1, hosted: 7, gen: 1 });
    d.run([true, true], 3);
    d.report(p.0, report(2, 1, 1));
    d.run([false, true], 3);
    d.trace()
}

/// The trace with what each driver measures in its own units taken out: the packets sent to a
/// peer, which a `Return` carries (a fluid flow's bin counts as one) — checked non-zero.
fn decisions(trace: Vec<PoolTraced>) -> Vec<PoolTraced> {
    trace
        .into_iter()
        .map(|t| match t {
            PoolTraced::Request(PoolRequest::Return { chain, key, peer, hosted, sent }) => {
                assert!(sent > 0, "chain {chain:?} came home having sent nothing to its peer");
                PoolTraced::Request(PoolRequest::Return { chain, key, peer, hosted, sent: 0 })
            }
            t => t,
        })
        .collect()
}

#[test]
fn the_simulator_and_the_data_plane_carry_out_the_same_pool_actions() {
    let (mut s, mut p) = (Sim::new(), Plane::new());
    let sim = decisions(scenario(&mut s));
    let plane = decisions(scenario(&mut p));
    // Both cores recorded the same pool events, in the same order, and counted them alike (the
    // core records what it notes; neither driver maps notes to events).
    let pool_events = |d: &dyn Driver| {
        let e = d.events();
        let kinds = e.events.iter().filter(|e| is_pool(&e.kind)).map(|e| (e.chain, e.kind)).collect::<Vec<_>>();
        (kinds, e.remote_launches, e.remote_refusals, e.answers_ignored, e.spills)
    };
    let (se, pe) = (pool_events(&s), pool_events(&p));
    assert!(!se.0.is_empty() && se.1 > 0 && se.2 > 0 && se.3 > 0, "{se:?}");
    assert_eq!(se, pe, "the two drivers' cores recorded different pool events");
    // What the scenario is about is in the trace (not only the requests the script saw).
    let notes: Vec<PoolNote> = sim.iter().filter_map(|t| if let PoolTraced::Note(n) = t { Some(*n) } else { None }).collect();
    let count = |f: fn(&PoolNote) -> bool| notes.iter().filter(|n| f(n)).count();
    assert_eq!(count(|n| matches!(n, PoolNote::Ignored { .. })), 1, "{notes:?}");
    assert_eq!(count(|n| matches!(n, PoolNote::Refused { .. })), 1, "{notes:?}");
    assert_eq!(count(|n| matches!(n, PoolNote::Placed { .. })), 3, "{notes:?}");
    assert_eq!(count(|n| matches!(n, PoolNote::MovingBack { .. })), 1, "{notes:?}");
    assert_eq!(count(|n| matches!(n, PoolNote::PeerLost { .. })), 2, "the peer that died and the one that restarted: {notes:?}");
    assert_eq!(sim, plane, "the simulator's node and the data plane's did not carry out the same pool actions");
}

/// An event the core records as it notes a pool decision.
fn is_pool(k: &EventKind) -> bool {
    matches!(
        k,
        EventKind::PlaceAsked { .. }
            | EventKind::Placed { .. }
            | EventKind::SpillAsked { .. }
            | EventKind::Spilled { .. }
            | EventKind::SpillShare { .. }
            | EventKind::Unspilled { .. }
            | EventKind::PlaceRefused { .. }
            | EventKind::MovingBack { .. }
            | EventKind::PeerLost { .. }
    )
}
