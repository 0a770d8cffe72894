//! Regions moving between cores: a short chain leaves the worker it shared with a long one
//! (auto placement), and moves by hand; packets are neither lost nor reordered, and the NTs
//! keep their state. Virtual clock: the long chain's 20 µs a packet is spent on its worker's
//! virtual core, and the placement policy works on those measured costs, the same on any
//! machine.

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::fair::FairConfig;
use snic_core::ids::{DagUid, InstanceId, TenantId};
use snic_core::mat::Mat;
use snic_core::node::NodeCoreConfig;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::elastic::{ElasticConfig, EventKind};
use snic_dataplane::node::ManualClock;
use snic_dataplane::node::{Clock, MoveError, Place};
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use snic_perf::testbed::{dag_rule, datagram, snat};
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::{parse_inner, parse_vxlan};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Virtual time per round of traffic.
const ROUND: Duration = Duration::from_micros(10);

struct Bed {
    node: Node<MemPort>,
    clock: ManualClock,
    short: InstanceId,
    long: Option<InstanceId>,
    /// Per VNI: packets sent, and per flow the next sequence number.
    sent: HashMap<u32, u64>,
    seq: HashMap<(u32, u16), u32>,
    /// Per (VNI, source port after NAT): the last sequence number delivered.
    seen: HashMap<(u32, u16), u32>,
    delivered: HashMap<u32, u64>,
    nat_ports: BTreeSet<u16>,
}

impl Bed {
    /// Tenant 1 (VNI 100): SNAT, a short chain. Tenant 2 (VNI 200), if `long`: a 20 µs chain.
    fn new(workers: usize, auto_place: bool, long: bool) -> Self {
        Self::with_elastic(workers, auto_place, long, ElasticConfig::default())
    }

    fn with_elastic(workers: usize, auto_place: bool, long: bool, elastic: ElasticConfig) -> Self {
        // Fair sharing measures (the placement policy reads its costs) but does not limit: the
        // test counts every packet.
        let fair = FairConfig { enforce: false, ..FairConfig::default() };
        let cfg = NodeConfig {
            core: NodeCoreConfig { workers, auto_place, fair, elastic, ..NodeCoreConfig::default() },
            vtep_port: None,
            ..Default::default()
        };
        let clock = ManualClock::default();
        let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone())).unwrap();
        let c1 = node.add_chain(vec![snat()]);
        let short = node.launch(c1).unwrap();
        // (Launched first: with a region pool, it takes region 0.)
        let mut mat = Mat::new();
        let mut dags = vec![(1u16, c1)];
        let long = long.then(|| {
            let c2 = node.add_chain(vec![NtSpec::Synthetic(SyntheticConfig::costing(20_000))]);
            dags.push((2, c2));
            node.launch(c2).unwrap()
        });
        for (t, chain) in dags {
            node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain, mask: NtMask::all(1) }]));
            mat.insert(dag_rule(100 * t as u32, TenantId(t), DagUid(t as u32)));
            node.fdb_mut().set_default(100 * t as u32, Some(Peer { addr: "192.0.2.9:4789".parse().unwrap(), mac: MacAddr::default() }));
            node.set_tenant(TenantId(t), 1.0);
        }
        node.mat_handle().store(Arc::new(mat));
        Bed {
            node,
            clock,
            short,
            long,
            sent: HashMap::new(),
            seq: HashMap::new(),
            seen: HashMap::new(),
            delivered: HashMap::new(),
            nat_ports: BTreeSet::new(),
        }
    }

    /// One packet of flow `flow` on `vni`, its sequence number in its last 4 bytes.
    fn push(&mut self, vni: u32, flow: u16) {
        let s = self.seq.entry((vni, flow)).or_insert(0);
        let mut d = datagram(vni, flow, 16);
        let n = d.len();
        d[n - 4..].copy_from_slice(&s.to_be_bytes());
        *s += 1;
        *self.sent.entry(vni).or_insert(0) += 1;
        self.node.backend_mut().rx.push_back((d, "192.0.2.1:4789".parse().unwrap()));
    }

    /// One round: `ROUND` of virtual time passes, the node polls until it has nothing left to
    /// do now; then what came out is checked: per flow in order, none lost at its start.
    fn poll(&mut self) {
        self.clock.advance(ROUND);
        while self.node.poll() > 0 || self.node.workers_busy() {}
        for (bytes, _) in std::mem::take(&mut self.node.backend_mut().tx) {
            let vni = parse_vxlan(&bytes).unwrap();
            let port = parse_inner(&bytes[8..]).unwrap().key.src_port;
            let n = bytes.len();
            let seq = u32::from_be_bytes(bytes[n - 4..].try_into().unwrap());
            match self.seen.insert((vni, port), seq) {
                Some(last) => assert!(seq > last, "flow {vni}/{port}: {seq} after {last}"),
                None => assert_eq!(seq, 0, "flow {vni}/{port} lost its first packets"),
            }
            if vni == 100 {
                self.nat_ports.insert(port);
            }
            *self.delivered.entry(vni).or_insert(0) += 1;
        }
    }

    /// Traffic for `d` of virtual time, or until `until` holds: each round four packets of
    /// tenant 1 over `flows` flows, and with a long chain one packet of tenant 2 every 50 µs
    /// (40% of a core at 20 µs a packet).
    fn traffic(&mut self, d: Duration, flows: std::ops::RangeInclusive<u16>, until: impl Fn(&Self) -> bool) {
        self.traffic_of(d, Some(flows), until)
    }

    /// [`Bed::traffic`], without tenant 1 when `flows` is `None`.
    fn traffic_of(&mut self, d: Duration, flows: Option<std::ops::RangeInclusive<u16>>, until: impl Fn(&Self) -> bool) {
        let end = self.clock.now() + d;
        let mut next_long = self.clock.now();
        let mut k = 0u16;
        while self.clock.now() < end && !until(self) {
            // Backpressure: the test is about moves, not overload.
            let room = |b: &Self, i: InstanceId| b.node.core().sched().queued(i) < 256 && b.node.backend().rx.len() < 256;
            for _ in 0..4 {
                let Some(flows) = &flows else { break };
                if !room(self, self.short) {
                    break;
                }
                self.push(100, flows.start() + k % (flows.end() - flows.start() + 1));
                k = k.wrapping_add(1);
            }
            if self.long.is_some_and(|l| room(self, l)) && self.clock.now() >= next_long {
                self.push(200, 1);
                next_long = next_long + Duration::from_micros(50);
            }
            self.poll();
        }
    }

    /// Packets of tenant 1's flow `flow` sent so far.
    fn sent_of(&self, flow: u16) -> u32 {
        self.seq.get(&(100, flow)).copied().unwrap_or(0)
    }

    /// Polls until everything sent came out (or 1 s of virtual time passes), and checks that it
    /// did: nothing lost.
    fn drain_losing_nothing(&mut self) {
        let end = self.clock.now() + Duration::from_secs(1);
        while self.delivered != self.sent && self.clock.now() < end {
            self.poll();
        }
        assert_eq!(
            self.delivered,
            self.sent,
            "nothing lost: {:?} {:?}",
            self.node.stats().tenants[1].drops_by_reason(),
            self.node.stats().tenants[2].drops_by_reason()
        );
    }
}

#[test]
fn short_chain_leaves_the_worker_it_shared_with_a_long_one() {
    let mut b = Bed::new(1, true, true);
    let long = b.long.unwrap();
    assert_eq!(b.node.place_of(b.short), Some(Place::Worker(0)), "both launched on the one worker");
    assert_eq!(b.node.place_of(long), Some(Place::Worker(0)));
    // Flows 1-3 until the move (measured costs, three 10 ms looks: tens of ms).
    b.traffic(Duration::from_secs(1), 1..=3, |b| b.node.place_of(b.short) == Some(Place::Dispatcher) && b.sent_of(3) >= 20);
    assert_eq!(b.node.place_of(b.short), Some(Place::Dispatcher), "the short chain moved to the dispatcher's thread");
    assert_eq!(b.node.place_of(long), Some(Place::Worker(0)), "the long chain stays on the worker");
    // Two new flows after the move: the NAT kept its table and hands out the next ports.
    b.traffic(Duration::from_secs(1), 4..=5, |b| b.sent_of(4) >= 20 && b.sent_of(5) >= 20);
    b.drain_losing_nothing();
    assert_eq!(b.nat_ports, (1024..=1028).collect(), "NAT state moved with the region");
    // Once apart, they stay apart: one move, no thrash.
    let st = b.node.core().events();
    assert_eq!(st.moves, 1, "{:?}", st.events);
    assert!(st.events.iter().any(|e| e.kind == EventKind::Moved { instance: b.short, to: Place::Dispatcher }));
}

#[test]
fn moves_by_hand_and_refusals() {
    let mut b = Bed::new(1, false, false);
    let i = b.short;
    assert_eq!(b.node.move_instance(i, Place::Worker(0)), Err(MoveError::Already(i)));
    assert_eq!(b.node.move_instance(i, Place::Worker(3)), Err(MoveError::NoWorker(3)));
    assert_eq!(b.node.move_instance(InstanceId(9), Place::Dispatcher), Err(MoveError::NotRunning(InstanceId(9))));
    b.traffic(Duration::from_secs(1), 1..=2, |b| b.sent_of(2) >= 20);
    // To the dispatcher's thread while packets flow; a second move waits its turn.
    b.node.move_instance(i, Place::Dispatcher).unwrap();
    assert_eq!(b.node.move_instance(i, Place::Worker(0)), Err(MoveError::Busy));
    b.traffic(Duration::from_secs(1), 3..=3, |b| b.node.place_of(b.short) == Some(Place::Dispatcher) && b.sent_of(3) >= 20);
    assert_eq!(b.node.place_of(i), Some(Place::Dispatcher));
    // And back, with another new flow on each side of the move.
    b.node.move_instance(i, Place::Worker(0)).unwrap();
    b.traffic(Duration::from_secs(1), 4..=4, |b| b.node.place_of(b.short) == Some(Place::Worker(0)) && b.sent_of(4) >= 20);
    assert_eq!(b.node.place_of(i), Some(Place::Worker(0)));
    b.traffic(Duration::from_secs(1), 5..=5, |b| b.sent_of(5) >= 20);
    b.drain_losing_nothing();
    assert_eq!(b.nat_ports, (1024..=1028).collect(), "NAT state moved both ways");
    assert_eq!(b.node.core().events().moves, 2);
    // Without auto placement the node never moves anything on its own.
    let events = &b.node.core().events().events;
    assert_eq!(events.iter().filter(|e| matches!(e.kind, EventKind::Moved { .. })).count(), 2);
}

#[test]
fn nothing_moves_without_worker_threads() {
    let mut b = Bed::new(0, true, true);
    b.traffic(Duration::from_millis(100), 1..=3, |_| false);
    b.drain_losing_nothing();
    assert_eq!(b.node.core().events().moves, 0);
    assert_eq!(b.node.place_of(b.short), Some(Place::Dispatcher));
}

#[test]
fn a_moved_region_goes_idle_is_stopped_and_comes_back_with_its_state() {
    // A pool of two regions without the victim cache: the short chain, once moved to the
    // dispatcher's thread, is stopped when idle (its NTs saved from there) and relaunched when
    // its tenant sends again; the NAT's table comes back with it.
    let elastic = ElasticConfig { regions: 2, victims: false, ..ElasticConfig::default() };
    let mut b = Bed::with_elastic(1, true, true, elastic);
    b.traffic(Duration::from_secs(1), 1..=3, |b| b.node.place_of(b.short) == Some(Place::Dispatcher) && b.sent_of(3) >= 20);
    assert_eq!(b.node.place_of(b.short), Some(Place::Dispatcher), "{:?}", b.node.core().events().events);
    let stopped = |b: &Bed| b.node.core().sched().state(b.short) != snic_core::sched::InstanceState::Running;
    b.traffic_of(Duration::from_secs(1), None, stopped);
    assert!(stopped(&b), "idle short chain not stopped: {:?}", b.node.core().events().events);
    b.traffic(Duration::from_secs(1), 4..=5, |b| b.sent_of(4) >= 20 && b.sent_of(5) >= 20);
    b.drain_losing_nothing();
    assert_eq!(b.nat_ports, (1024..=1028).collect(), "NAT state saved from the dispatcher's thread and restored");
    let kinds: Vec<_> = b.node.core().events().events.iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&EventKind::Deschedule), "{kinds:?}");
}
