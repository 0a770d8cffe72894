//! Elastic NTs in the node, on a virtual clock: pre-launch, on-demand launch with buffering,
//! stop-and-launch with NT state saved and restored, the victim cache, auto-scaling and
//! placement on the pool (remote launch, move back) — with every packet checked for loss and
//! for order within its flow.

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{ChainId, DagUid, TenantId};
use snic_core::launcher::{EndpointFallback, RegionState};
use snic_core::mat::Mat;
use snic_core::node::NodeCoreConfig;
use snic_core::pool::{LoadReport, MemberEvent};
use snic_core::sched::Reject;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::elastic::{ElasticConfig, EventKind, Launched};
use snic_dataplane::node::LaunchError;
use snic_dataplane::node::{ChainState, HostAnswer, ManualClock, PoolRequest};
use snic_dataplane::store::Peer;
use snic_dataplane::Drop;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use snic_perf::testbed::dag_rule;
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::{parse_inner, parse_vxlan};
use snic_wire::redirect::{RedirectRepr, HEADER_LEN};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

/// A node whose chain `i` serves tenant `i + 1` on VNI `100 + i`.
struct Bed {
    node: Node<MemPort>,
    clock: ManualClock,
    /// Next sequence number per (vni, source port).
    seq: HashMap<(u32, u16), u32>,
    /// Last sequence number delivered per flow, and packets delivered per VNI.
    seen: HashMap<(u32, u16), u32>,
    delivered: HashMap<u32, u64>,
    sent: HashMap<u32, u64>,
    /// Packets redirected to each peer (counted as delivered too: the peer runs them).
    redirected: HashMap<SocketAddr, u64>,
    /// When set, the NAT mapping every flow must leave with: public port → the flow's source
    /// port (its order is checked under that); a packet that leaves SNATed on another port
    /// fails the test.
    nat_ports: HashMap<u16, u16>,
    /// The flows (by the source port in their payload) with a packet run here, and sent to a
    /// peer.
    flows_here: std::collections::BTreeSet<u16>,
    flows_sent: std::collections::BTreeSet<u16>,
}

fn engine(pps: u64) -> NtSpec {
    NtSpec::Synthetic(SyntheticConfig::declared(pps, false))
}

/// The public address of [`nat`].
const NAT_PUBLIC: [u8; 4] = [203, 0, 113, 1];

fn nat() -> NtSpec {
    snic_perf::testbed::snat()
}

impl Bed {
    fn new(elastic: ElasticConfig, chains: Vec<Vec<NtSpec>>, prelaunch: bool) -> Self {
        Self::with_workers(elastic, chains, prelaunch, 0)
    }

    fn with_workers(elastic: ElasticConfig, chains: Vec<Vec<NtSpec>>, prelaunch: bool, workers: usize) -> Self {
        Self::with_config(
            NodeConfig { core: NodeCoreConfig { elastic, workers, ..NodeCoreConfig::default() }, ..Default::default() },
            chains,
            prelaunch,
        )
    }

    fn with_config(cfg: NodeConfig, chains: Vec<Vec<NtSpec>>, prelaunch: bool) -> Self {
        let clock = ManualClock::default();
        let cfg = NodeConfig { vtep_port: None, ..cfg };
        let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone())).unwrap();
        let mut mat = Mat::new();
        let mut ids = Vec::new();
        for (i, specs) in chains.into_iter().enumerate() {
            let n = specs.len();
            let c = node.add_chain(specs);
            ids.push(c);
            let (vni, t) = (100 + i as u32, TenantId(i as u16 + 1));
            node.set_dag(DagUid(i as u32 + 1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(n) }]));
            mat.insert(dag_rule(vni, t, DagUid(i as u32 + 1)));
            node.fdb_mut().set_default(vni, Some(Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), mac: MacAddr::default() }));
            node.set_tenant(t, 1.0);
        }
        node.mat_handle().store(Arc::new(mat));
        if prelaunch {
            for &c in &ids {
                match node.launch(c) {
                    Ok(_) | Err(LaunchError::NoFreeRegion) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
        Bed {
            node,
            clock,
            seq: HashMap::new(),
            seen: HashMap::new(),
            delivered: HashMap::new(),
            sent: HashMap::new(),
            redirected: HashMap::new(),
            nat_ports: HashMap::new(),
            flows_here: Default::default(),
            flows_sent: Default::default(),
        }
    }

    /// One packet of flow `sport` on chain `i`, its sequence number in the payload.
    fn push(&mut self, i: usize, sport: u16) {
        let vni = 100 + i as u32;
        let seq = self.seq.entry((vni, sport)).or_insert(0);
        // The payload: the flow's source port (a NAT rewrites the header's), its sequence.
        let mut b = snic_perf::testbed::datagram(vni, sport, 6);
        let n = b.len();
        b[n - 6..n - 4].copy_from_slice(&sport.to_be_bytes());
        b[n - 4..].copy_from_slice(&seq.to_be_bytes());
        *seq += 1;
        *self.sent.entry(vni).or_insert(0) += 1;
        self.node.backend_mut().rx.push_back((b, SocketAddr::from(([192, 0, 2, 1], 4789))));
    }

    /// Polls to idle and checks what came out: per flow (told by the source port it leaves
    /// with: a NAT maps each flow to one port) in order, nothing twice.
    fn poll(&mut self) {
        // Worker threads run in real time: wait for their batches before time moves on.
        loop {
            while self.node.poll() > 0 {}
            if !self.node.workers_busy() {
                break;
            }
            std::thread::yield_now();
        }
        for (sent, dst) in std::mem::take(&mut self.node.backend_mut().tx) {
            // A redirected packet: the VXLAN datagram behind the header.
            let (bytes, redirected) = match RedirectRepr::parse(&sent) {
                Ok(_) => {
                    *self.redirected.entry(dst).or_insert(0) += 1;
                    (&sent[HEADER_LEN..], true)
                }
                Err(_) => (&sent[..], false),
            };
            let vni = parse_vxlan(bytes).unwrap();
            let inner = parse_inner(&bytes[8..]).unwrap();
            let n = bytes.len();
            let seq = u32::from_be_bytes(bytes[n - 4..].try_into().unwrap());
            let flow = u16::from_be_bytes(bytes[n - 6..n - 4].try_into().unwrap());
            if redirected { &mut self.flows_sent } else { &mut self.flows_here }.insert(flow);
            let mut sport = inner.key.src_port;
            if !redirected && !self.nat_ports.is_empty() && inner.key.src == IpAddr::from(NAT_PUBLIC) {
                assert_eq!(self.nat_ports.get(&sport), Some(&flow), "flow {flow} left on port {sport}, not the mapping it had");
                sport = flow;
            }
            let key = (vni, sport);
            if let Some(&last) = self.seen.get(&key) {
                assert!(seq > last, "flow {key:?}: {seq} after {last}");
            } else {
                assert_eq!(seq, 0, "flow {key:?} lost its first packets");
            }
            self.seen.insert(key, seq);
            *self.delivered.entry(vni).or_insert(0) += 1;
        }
    }

    /// `per_ms` packets per millisecond on chain `i` over `flows` flows, for `ms` ms.
    fn run(&mut self, i: usize, per_ms: usize, flows: u16, ms: u64) {
        for _ in 0..ms {
            for k in 0..per_ms {
                self.push(i, 1 + (k as u16 % flows));
            }
            self.clock.advance(MS);
            self.poll();
        }
    }

    /// `per_ms` packets per millisecond on chain `i`, over the flows in `flows` in turn, for
    /// `ms` ms.
    fn run_flows(&mut self, i: usize, per_ms: usize, flows: impl IntoIterator<Item = u16>, ms: u64) {
        let all: Vec<u16> = flows.into_iter().collect();
        for t in 0..ms as usize {
            for k in 0..per_ms {
                self.push(i, all[(t * per_ms + k) % all.len()]);
            }
            self.clock.advance(MS);
            self.poll();
        }
    }

    fn idle(&mut self, ms: u64) {
        for _ in 0..ms {
            self.clock.advance(MS);
            self.poll();
        }
    }

    fn lost(&self, i: usize) -> u64 {
        let vni = 100 + i as u32;
        self.sent.get(&vni).copied().unwrap_or(0) - self.delivered.get(&vni).copied().unwrap_or(0)
    }

    fn kinds(&self) -> Vec<(usize, EventKind)> {
        self.node.core().events().events.iter().map(|e| (e.chain.index(), e.kind)).collect()
    }
}

fn cfg(regions: usize, delay_ms: u64) -> ElasticConfig {
    ElasticConfig { regions, launch_delay: Duration::from_millis(delay_ms), ..Default::default() }
}

#[test]
fn prelaunch_fills_free_regions_and_packets_wait_for_a_launch_in_order() {
    let mut b = Bed::new(cfg(2, 5), vec![vec![engine(1_000_000)]; 3], true);
    // Two regions: chains 0 and 1 pre-launched, chain 2 waits for its first packet.
    let st = b.node.core().events();
    assert_eq!(st.prelaunches, 2);
    assert!(matches!(b.node.core().elastic().regions()[0], RegionState::Launching { .. }));
    // Packets sent during the 5 ms launch wait, and come out in order once it runs.
    b.run(0, 20, 4, 3);
    assert_eq!(b.delivered.get(&100), None, "not before the launch completes");
    b.run(0, 20, 4, 3);
    assert_eq!(b.lost(0), 0);
    let ran = b.node.core().events().events.iter().find(|e| e.kind == EventKind::Running { after: Launched::Prelaunch }).copied().unwrap();
    assert_eq!(ran.took_ns, 5_000_000, "the emulated delay, on the virtual clock");
}

#[test]
fn on_demand_order_victims_and_stop_and_launch_with_state_saved() {
    // Two regions, three chains; chain 2 runs a NAT whose mappings must survive a context switch.
    let mut b = Bed::new(cfg(2, 5), vec![vec![engine(1_000_000)], vec![engine(1_000_000)], vec![nat()]], false);
    // 1. A free region: chain 0 launches on demand; its packets wait 5 ms, then all come out.
    b.run(0, 10, 2, 8);
    assert_eq!(b.lost(0), 0);
    assert_eq!(b.node.core().events().launches, 1);
    // 2. Chain 2 (NAT) takes the second free region; flow 1 gets public port 1024. (Chain 0
    // keeps its traffic: a chain that gets nothing for a whole period is descheduled.)
    for _ in 0..4 {
        b.run(0, 10, 2, 1);
        b.run(2, 1, 1, 1);
    }
    assert_eq!(b.lost(2), 0);
    assert_eq!(b.node.core().events().launches, 2);
    // 3. Chain 2 goes idle: after a whole MONITOR_PERIOD it is descheduled, kept as a victim.
    b.run(0, 10, 2, 12);
    assert_eq!(b.node.core().events().deschedules, 1);
    assert!(b.node.core().elastic().regions().iter().any(|r| matches!(r, RegionState::Victim { chain, .. } if chain.index() == 2)));
    // 4. It is needed again: a victim hit, no launch, packets served at once.
    let launches = b.node.core().events().launches;
    b.run(2, 1, 1, 1);
    assert_eq!(b.node.core().events().resumes, 1);
    assert_eq!(b.node.core().events().launches, launches, "resumed without a launch");
    assert_eq!(b.lost(2), 0, "no launch delay");
    // 5. Idle again (a victim), then chain 1 needs a region: no free one, no pool, no endpoint
    // fallback — stop-and-launch replaces the victim (victims go first), not running chain 0.
    b.run(0, 10, 2, 12);
    b.run(1, 10, 2, 8);
    assert_eq!(b.lost(1), 0);
    assert!(b.kinds().contains(&(1, EventKind::ContextSwitch { evicted: ChainId(2) })));
    assert_eq!(b.lost(0), 0, "the running chain was not touched");
    // 6. Chain 2 again: its NT state was saved at eviction and is restored at relaunch — a new
    // flow gets the *next* public port (1025), not the first one again.
    b.run(0, 10, 2, 12); // chain 1 idle → victim
    b.push(2, 7);
    b.run(2, 0, 1, 8);
    assert_eq!(b.lost(2), 0);
    let ports: Vec<u16> = b.seen.keys().filter(|(v, _)| *v == 102).map(|&(_, p)| p).collect();
    if std::env::var_os("SHOW").is_some() {
        eprintln!("{:?}", b.kinds());
    }
    assert!(ports.contains(&1025), "state restored: the NAT remembered port 1024 was taken ({ports:?})");
}

/// A node's load report counts victims' regions as free (they make way for a launch), so a
/// peer asked to host a chain must take one: found when the pool simulator ran the nodes' own
/// cores (a peer whose regions held only victims refused every placement). Deploy-time
/// pre-launch still never evicts; hosting never stops a running chain.
#[test]
fn a_chain_hosted_for_a_peer_takes_a_victims_region_but_never_a_running_chains() {
    let mut b = Bed::new(cfg(2, 5), vec![vec![engine(1_000_000)]; 3], false);
    // Chain 0 runs; chain 2 runs, then idles into a victim.
    b.run(0, 10, 2, 8);
    for _ in 0..4 {
        b.run(0, 10, 2, 1);
        b.run(2, 1, 1, 1);
    }
    b.run(0, 10, 2, 12);
    let victim = |b: &Bed, c: usize| {
        b.node.core().elastic().regions().iter().any(|r| matches!(r, RegionState::Victim { chain, .. } if chain.index() == c))
    };
    assert!(victim(&b, 2), "{:?}", b.node.core().elastic().regions());
    assert!(matches!(b.node.launch(ChainId(1)), Err(LaunchError::NoFreeRegion)), "pre-launch never evicts");
    b.node.launch_for_peer(ChainId(1)).expect("the victim makes way");
    assert!(b.kinds().contains(&(1, EventKind::ContextSwitch { evicted: ChainId(2) })));
    b.run(1, 10, 2, 8);
    b.run(0, 10, 2, 1);
    assert_eq!((b.lost(0), b.lost(1)), (0, 0), "the hosted chain runs; the running one was not touched");
    // Both regions run chains: a second request is refused, and nothing changes.
    let before = b.node.core().elastic().regions().to_vec();
    assert!(matches!(b.node.launch_for_peer(ChainId(2)), Err(LaunchError::NoFreeRegion)));
    assert_eq!(b.node.core().elastic().regions(), &before[..]);
}

/// Isolation: packets that wait for a region (every one mid-launch) are bounded per tenant, so
/// a tenant that floods chains it cannot get launched does not refuse another tenant's.
#[test]
fn one_tenants_flood_waiting_for_a_region_leaves_room_for_anothers() {
    let sched = snic_core::sched::SchedConfig { max_queue_per_tenant: 16, ..NodeCoreConfig::default().sched };
    let core = NodeCoreConfig { elastic: cfg(2, 5), sched, ..NodeCoreConfig::default() };
    // Chains 0 and 1 launch into both regions for 5 ms; chains 2 and 3 (tenants 3 and 4) wait.
    let mut b = Bed::with_config(NodeConfig { core, ..Default::default() }, vec![vec![engine(1_000_000)]; 4], true);
    for k in 0..400 {
        b.push(2, 1 + (k % 8));
    }
    for k in 0..10 {
        b.push(3, 1 + k);
    }
    b.poll();
    let refused = |b: &Bed, t: usize| b.node.stats().tenants[t].drops[Drop::Sched(Reject::NoInstance).index()];
    // (Four times its queue bound may wait: the rest is refused.)
    assert_eq!(refused(&b, 3), 400 - 64, "the flooding tenant waits for at most its bound");
    assert_eq!(refused(&b, 4), 0, "the other tenant's packets wait too");
    assert_eq!(b.delivered.get(&103), None, "no region has run yet");
}

#[test]
fn endpoint_fallback_comes_before_a_context_switch() {
    let mut b = Bed::new(cfg(1, 0), vec![vec![engine(1_000_000)]; 2], true);
    b.node.set_endpoint_fallback(ChainId(1), EndpointFallback::Allowed);
    b.run(0, 10, 2, 2);
    b.run(1, 10, 2, 2);
    // Chain 1 had no region: its packets went out unprocessed, for the endpoint to process.
    assert_eq!(b.lost(1), 0);
    assert_eq!(b.node.core().events().endpoint_packets, 20);
    assert_eq!(b.node.core().events().context_switches, 0);
    // Without the fallback, the last resort: stop-and-launch.
    b.node.set_endpoint_fallback(ChainId(1), EndpointFallback::Never);
    b.run(1, 10, 2, 2);
    assert_eq!(b.node.core().events().context_switches, 1);
    assert_eq!(b.lost(1), 0);
}

#[test]
fn autoscaling_follows_a_square_wave_without_loss_or_reordering() {
    square_wave(0);
}

#[test]
fn autoscaling_with_regions_on_worker_threads() {
    // Instances spread over two workers: completions come back asynchronously.
    square_wave(2);
}

fn square_wave(workers: usize) {
    // One chain whose instance carries 10 kpps; load alternates 25 kpps and 4 kpps every 40 ms,
    // over 32 flows. MONITOR_PERIOD 5 ms, launches 5 ms, four regions.
    let mut b = Bed::with_workers(ElasticConfig { autoscale: true, ..cfg(4, 5) }, vec![vec![engine(10_000)]], true, workers);
    for _ in 0..4 {
        b.run(0, 25, 32, 40);
        b.run(0, 4, 32, 40);
    }
    b.idle(10);
    assert!(b.node.drain(Duration::from_secs(5)));
    b.poll();
    let st = b.node.core().events();
    if std::env::var_os("SHOW").is_some() {
        for e in &st.events {
            eprintln!("{} ms region {:?} {:?} took {}", e.at_ns / 1_000_000, e.region, e.kind, e.took_ns);
        }
    }
    assert!(st.scale_outs >= 2 && st.scale_ins >= 2, "scale events: out {} in {}", st.scale_outs, st.scale_ins);
    assert!(st.resumes >= 1, "later scale-outs resume victims instead of launching");
    assert_eq!(b.lost(0), 0, "no packet lost across scale events");
    // At most one scale decision per MONITOR_PERIOD; a scale-out launches what the load
    // needs at once: 25 kpps on instances of 10 kpps at 90% is three instances, two more.
    let mut times: Vec<u64> =
        st.events.iter().filter(|e| matches!(e.kind, EventKind::ScaleOut | EventKind::ScaleIn)).map(|e| e.at_ns).collect();
    let first_out = st.events.iter().find(|e| e.kind == EventKind::ScaleOut).map(|e| e.at_ns);
    assert_eq!(st.events.iter().filter(|e| e.kind == EventKind::ScaleOut && Some(e.at_ns) == first_out).count(), 2, "{times:?}");
    times.dedup();
    for w in times.windows(2) {
        assert!(w[1] - w[0] >= 5_000_000, "two scale decisions within a period: {times:?}");
    }
}

/// Tenant 1's DAG runs a NAT and an engine as two chains (its planned form) or as one compact
/// chain; tenant 3 has a chain of its own. Two regions.
fn two_forms(workers: usize) -> Bed {
    let chains = vec![vec![nat()], vec![engine(1_000_000)], vec![engine(1_000_000)]];
    let mut b = Bed::with_workers(ElasticConfig { launch_delay: MS, ..cfg(2, 0) }, chains, true, workers);
    b.node.remove_dag(DagUid(2));
    let route = DagRoute::new(vec![Step { chain: ChainId(0), mask: NtMask::all(1) }, Step { chain: ChainId(1), mask: NtMask::all(1) }]);
    b.node.set_dag(DagUid(1), route);
    b.node.set_compact_form(DagUid(1), vec![nat(), engine(1_000_000)], &["nat".into(), "engine".into()]).unwrap();
    b
}

/// Public ports the NAT gave tenant 1's flows.
fn nat_ports(b: &Bed) -> Vec<u16> {
    let mut p: Vec<u16> = b.seen.keys().filter(|(v, _)| *v == 100).map(|&(_, p)| p).collect();
    p.sort();
    p
}

#[test]
fn region_pressure_compacts_a_dag_and_calm_expands_it_with_nt_state_kept() {
    compact_and_expand(0);
}

#[test]
fn compact_and_expand_with_regions_on_worker_threads() {
    compact_and_expand(2);
}

fn compact_and_expand(workers: usize) {
    use snic_core::rechain::Form;
    let mut b = two_forms(workers);
    b.idle(2);
    // Tenant 1 alone: its two chains run in the two regions; flows 1..=3 get ports 1024..=1026.
    b.run(0, 6, 3, 10);
    assert_eq!(b.node.core().dags().form(DagUid(1)), Some(Form::Planned));
    assert_eq!(nat_ports(&b), [1024, 1025, 1026]);
    // Tenant 3 arrives: three chains want two regions, and stop-and-launch thrashes until the
    // pressure has lasted a MONITOR_PERIOD; then tenant 1's DAG becomes one chain.
    for _ in 0..40 {
        b.run(0, 6, 3, 1);
        b.run(2, 6, 3, 1);
    }
    assert_eq!(b.node.core().dags().form(DagUid(1)), Some(Form::Compact), "{:?}", b.kinds());
    let st = b.node.core().events();
    assert_eq!(st.rechains, 1);
    let switches = st.context_switches;
    assert!(switches >= 2, "regions were short first ({switches} context switches)");
    // From then on both fit: no more context switches, nothing lost, nothing reordered.
    for _ in 0..40 {
        b.run(0, 6, 3, 1);
        b.run(2, 6, 3, 1);
    }
    assert_eq!(b.node.core().events().context_switches, switches);
    assert_eq!(b.node.core().events().rechains, 1, "no oscillation under steady pressure");
    // The NAT's state moved into the compact chain: a new flow gets the next port.
    b.push(0, 4);
    b.idle(1);
    assert_eq!(nat_ports(&b), [1024, 1025, 1026, 1027]);
    // Tenant 3 stops: once calm for a period with a region unused (its chain a victim), the DAG
    // goes back to its planned chains, with the NAT's state again.
    b.run(0, 6, 4, 40);
    assert_eq!(b.node.core().dags().form(DagUid(1)), Some(Form::Planned));
    assert_eq!(b.node.core().events().rechains, 2);
    b.push(0, 5);
    b.idle(2);
    assert_eq!(nat_ports(&b), [1024, 1025, 1026, 1027, 1028]);
    assert!(b.node.drain(Duration::from_secs(1)));
    b.poll();
    let drops = |t: usize| snic_dataplane::stats::named_drops(&b.node.stats().tenants[t].drops);
    assert_eq!((b.lost(0), b.lost(2)), (0, 0), "drops {:?} {:?} events {:?}", drops(1), drops(3), b.kinds());
    let took: Vec<u64> =
        b.node.core().events().events.iter().filter(|e| matches!(e.kind, EventKind::Rechained { .. })).map(|e| e.took_ns).collect();
    assert_eq!(took.len(), 2);
    if std::env::var_os("SHOW").is_some() {
        for e in &b.node.core().events().events {
            eprintln!("{} us region {:?} chain {} {:?} took {}", e.at_ns / 1000, e.region, e.chain.index(), e.kind, e.took_ns);
        }
    }
}

#[test]
fn a_node_without_elasticity_does_not_switch_forms() {
    use snic_core::rechain::Form;
    // Regions fixed at deploy (no pool): chains cannot come and go, so no switch may start
    // (its new chains could never launch and its held packets would be lost).
    let mut b = Bed::new(cfg(0, 0), vec![vec![nat()], vec![engine(1_000_000)]], true);
    let route = DagRoute::new(vec![Step { chain: ChainId(0), mask: NtMask::all(1) }, Step { chain: ChainId(1), mask: NtMask::all(1) }]);
    b.node.set_dag(DagUid(1), route);
    b.node.remove_dag(DagUid(2));
    b.node.set_compact_form(DagUid(1), vec![nat(), engine(1_000_000)], &["nat".into(), "engine".into()]).unwrap();
    assert!(!b.node.switch_form(DagUid(1), Form::Compact));
    b.run(0, 5, 2, 3);
    assert_eq!((b.lost(0), b.node.core().dags().form(DagUid(1))), (0, Some(Form::Planned)));
}

/// A control-plane change in place: DAG 1 moves from chain 0 to a new chain while packets are
/// on its old route (sent to a worker, not back yet). Nothing is lost or reordered (`Bed::poll`
/// checks every flow's order), the old chain stops once its packets are done, its region is
/// freed and its id is reused.
#[test]
fn a_dag_moved_to_a_new_chain_under_traffic_loses_and_reorders_nothing_and_the_old_chain_goes() {
    let slow = || NtSpec::Synthetic(SyntheticConfig::costing(200_000));
    // Regions alternate between two workers, each with a virtual time of its own: chain 0 runs
    // on worker 0, the new chain on worker 1, where it could overtake chain 0's backlog.
    let chains = vec![vec![slow()], vec![engine(1_000_000)], vec![engine(1_000_000)]];
    let mut b = Bed::with_workers(cfg(4, 0), chains, true, 2);
    b.run(0, 2, 2, 3);
    // 32 packets on the old route: dispatched to worker 0, which needs 6.4 ms of virtual time
    // for them.
    for k in 0..32 {
        b.push(0, 1 + k % 4);
    }
    b.node.poll();
    let new = b.node.add_chain(vec![engine(1_000_000)]);
    assert_ne!(new, ChainId(0));
    b.node.launch(new).unwrap();
    b.node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: new, mask: NtMask::all(1) }]));
    assert!(b.node.core().dags().is_switching(DagUid(1)), "arrivals wait while the old route has packets");
    b.node.remove_chain(ChainId(0));
    assert!(!b.node.core().is_live(ChainId(0)));
    b.run(0, 10, 4, 10);
    b.idle(5);
    assert_eq!(b.lost(0), 0, "nothing lost across the change");
    assert!(!b.node.core().dags().is_switching(DagUid(1)));
    // The old chain is gone: no region holds it, one region is free, and its id comes back.
    let regions = b.node.core().elastic().regions();
    assert!(
        !regions
            .iter()
            .any(|r| matches!(r, RegionState::Running { chain, .. } | RegionState::Victim { chain, .. } if *chain == ChainId(0))),
        "{regions:?}"
    );
    assert_eq!(regions.iter().filter(|r| matches!(r, RegionState::Free)).count(), 1, "{regions:?}");
    assert_eq!(b.node.core().live_chains(), 3);
    let again = b.node.add_chain(vec![engine(1_000_000)]);
    assert_eq!(again, ChainId(0), "a gone chain's id is reused");
    // The reused chain runs a DAG like any other.
    b.node.launch(again).unwrap();
    b.node.set_dag(DagUid(2), DagRoute::new(vec![Step { chain: again, mask: NtMask::all(1) }]));
    b.run(1, 10, 2, 3);
    assert_eq!(b.lost(1), 0);
}

/// A chain removed while a DAG still uses it keeps running for that DAG: removal waits for the
/// routes that step through it.
#[test]
fn a_removed_chain_serves_the_routes_that_still_use_it() {
    let mut b = Bed::new(cfg(2, 0), vec![vec![engine(1_000_000)], vec![engine(1_000_000)]], true);
    b.node.remove_chain(ChainId(0));
    b.run(0, 10, 2, 3);
    assert_eq!(b.lost(0), 0, "DAG 1 still routes through chain 0");
    // Its route replaced, it goes.
    b.node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: ChainId(1), mask: NtMask::all(1) }]));
    b.run(0, 10, 2, 3);
    assert_eq!(b.lost(0), 0);
    assert!(b.node.core().elastic().regions().iter().any(|r| matches!(r, RegionState::Free)), "{:?}", b.node.core().elastic().regions());
}

/// The same with a DAG that runs its compact form: its arrivals took the compact route, so a
/// new planned route waits for the compact route's packets (not the planned one's, which has
/// none).
#[test]
fn a_dag_in_its_compact_form_waits_for_its_compact_route_when_replaced() {
    use snic_core::rechain::Form;
    let slow = || NtSpec::Synthetic(SyntheticConfig::costing(200_000));
    let chains = vec![vec![slow()], vec![engine(1_000_000)], vec![engine(1_000_000)]];
    // (No rechaining policy: the form is switched by hand and must stay.)
    let mut b = Bed::with_workers(ElasticConfig { launch_delay: MS, rechain: false, ..cfg(4, 0) }, chains, true, 2);
    b.node.remove_dag(DagUid(2));
    let planned = DagRoute::new(vec![Step { chain: ChainId(0), mask: NtMask::all(1) }, Step { chain: ChainId(1), mask: NtMask::all(1) }]);
    b.node.set_dag(DagUid(1), planned);
    b.node.set_compact_form(DagUid(1), vec![slow(), engine(1_000_000)], &["slow".into(), "engine".into()]).unwrap();
    assert!(b.node.switch_form(DagUid(1), Form::Compact));
    b.run(0, 2, 2, 10);
    assert_eq!(b.node.core().dags().form(DagUid(1)), Some(Form::Compact));
    for k in 0..32 {
        b.push(0, 1 + k % 4);
    }
    b.node.poll();
    b.node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: ChainId(2), mask: NtMask::all(1) }]));
    assert!(b.node.core().dags().is_switching(DagUid(1)), "arrivals wait for the compact route's packets");
    b.run(0, 10, 4, 10);
    b.idle(5);
    assert_eq!(b.lost(0), 0);
    assert!(!b.node.core().dags().is_switching(DagUid(1)));
}

/// The pool's members, by pool address, and the data address each answers a placement with.
fn member(i: u8) -> (SocketAddr, SocketAddr) {
    (SocketAddr::from(([198, 51, 100, i], 7946)), SocketAddr::from(([198, 51, 100, i], 4789)))
}

fn report(seq: u64, free: u16) -> LoadReport {
    LoadReport { gen: 1, seq, free_regions: free, ..Default::default() }
}

/// The node's side of the pool on the virtual clock (paper §4.3, §5): one region, held by busy
/// chain 0. Chain 1's packets find no room: the node asks the member with the most free
/// regions to host it, once, while the packets wait; that member refuses and the next is
/// asked; it hosts, and the waiting packets are redirected to it, none lost, in order. While
/// home has no room the chain stays there; chain 0 going idle gives room, and a whole
/// MONITOR_PERIOD later chain 1 comes home (the peer told to unhost), its packets run here,
/// none lost. Chain 0, placed in its turn, takes only the answer it asked for (the house's one
/// rule, in the core); its peer dies: it runs here again.
#[test]
fn a_chain_with_no_room_goes_to_a_peer_asked_in_order_and_comes_home_when_room_lasts() {
    let mut b = Bed::new(ElasticConfig { regions: 1, autoscale: true, ..cfg(1, 0) }, vec![vec![engine(1_000_000)]; 2], true);
    b.node.set_pool_secret(Some(b"a pool secret of 32 bytes, more!"));
    let (m1, m2) = (member(1), member(2));
    for (m, free) in [(m1, 1), (m2, 3)] {
        b.node.pool_member(MemberEvent::Up(m.0));
        b.node.pool_report(m.0, report(1, free));
    }
    b.run(0, 10, 2, 3);
    // 1. No room for chain 1: the member with the most free regions is asked, once.
    b.run(1, 5, 2, 1);
    let Some(PoolRequest::Place { chain, route, dag, pos, peer }) = b.node.poll_pool() else { panic!("a remote launch is asked") };
    assert_eq!((chain, dag, pos, peer), (ChainId(1), DagUid(2), 0, m2.0));
    b.run(1, 5, 2, 2);
    assert_eq!(b.node.poll_pool(), None, "asked once while its packets wait");
    assert_eq!(b.delivered.get(&101), None, "they wait for the answer");
    // 2. It refuses: the next member is asked.
    b.node.pool_answer(chain, route, m2.0, HostAnswer::Refused);
    b.run(0, 10, 2, 1);
    let Some(PoolRequest::Place { peer, .. }) = b.node.poll_pool() else { panic!("the next member is asked") };
    assert_eq!(peer, m1.0);
    // 3. It hosts: every waiting packet and those after go there, in order.
    b.node.pool_answer(chain, route, m1.0, HostAnswer::Hosted { data: m1.1, hosted: 5, gen: 1 });
    for _ in 0..8 {
        b.run(0, 10, 2, 1);
        b.run(1, 5, 2, 1);
    }
    assert_eq!(b.lost(1), 0);
    assert_eq!(b.redirected.get(&m1.1).copied(), b.sent.get(&101).copied(), "all of chain 1's packets ran on the peer");
    assert!(b.kinds().contains(&(1, EventKind::Placed { peer: m1.1 })));
    assert_eq!(b.node.poll_pool(), None, "no room at home: it stays");
    // 4. Chain 0 stops: its region frees (a victim), and after a whole MONITOR_PERIOD of room
    // chain 1 comes home: the peer is told, the packets run here.
    let at_peer = b.redirected[&m1.1];
    b.run(1, 5, 2, 30);
    let Some(PoolRequest::Return { chain, peer, hosted, sent, .. }) = b.node.poll_pool() else {
        panic!("the peer is asked for the chain back")
    };
    assert_eq!((chain, peer, hosted), (ChainId(1), m1.0, 5));
    assert_eq!(Some(sent), b.redirected.get(&m1.1).copied(), "the peer is told how many packets to wait for: all it was sent");
    assert!(b.kinds().contains(&(1, EventKind::MovingBack { peer: m1.1 })));
    // (Its NTs keep no state: the peer sends none.)
    b.node.pool_returned(chain, Ok(Vec::new()));
    assert!(b.kinds().contains(&(1, EventKind::MovedBack { peer: m1.1, restored: Some(0) })));
    b.run(1, 5, 2, 5);
    assert_eq!(b.lost(1), 0, "none lost moving back");
    assert!(b.delivered[&101] > b.redirected[&m1.1], "chain 1 runs at home");
    assert!(b.redirected[&m1.1] >= at_peer);
    // 5. Chain 0's traffic again: chain 1 holds the region now, so chain 0 is placed on the
    // member with a free region. An answer for chain 1, which nobody asked for (nor of m2), is
    // not taken: the peer is told it need not host it. Then chain 0's peer dies: it runs here
    // again.
    b.run(0, 10, 2, 20);
    b.node.pool_report(m1.0, report(2, 1));
    b.node.pool_report(m2.0, report(2, 0));
    b.run(1, 5, 2, 1);
    let Some(PoolRequest::Place { chain, route, peer, .. }) = b.node.poll_pool() else { panic!("placed again") };
    assert_eq!((chain, peer), (ChainId(0), m1.0), "the chain without the region, on the member with a free region");
    b.node.pool_answer(ChainId(1), route, m1.0, HostAnswer::Hosted { data: m1.1, hosted: 7, gen: 1 });
    b.node.pool_answer(chain, route, m2.0, HostAnswer::Hosted { data: m2.1, hosted: 8, gen: 1 });
    assert_eq!(b.node.poll_pool(), Some(PoolRequest::Unhost { peer: m1.0, hosted: 7 }), "not asked: told to stop");
    assert_eq!(b.node.poll_pool(), Some(PoolRequest::Unhost { peer: m2.0, hosted: 8 }), "not asked of m2: told to stop");
    assert_eq!(b.node.core().events().answers_ignored, 2);
    assert!(b.node.core().redirects().iter().next().is_none(), "nothing redirected on an answer not asked for");
    b.node.pool_answer(chain, route, m1.0, HostAnswer::Hosted { data: m1.1, hosted: 6, gen: 1 });
    assert!(b.kinds().contains(&(0, EventKind::Placed { peer: m1.1 })));
    b.run(0, 10, 2, 2);
    b.node.pool_member(MemberEvent::Down(m1.0));
    assert!(b.kinds().contains(&(0, EventKind::PeerLost { peer: m1.1 })), "{:?}", b.kinds());
    assert!(b.node.core().redirects().iter().next().is_none(), "no redirect to a dead peer");
    // The core counted what it decided, as it recorded it (placed twice, refused once, home once).
    let ev = b.node.core().events();
    assert_eq!((ev.remote_launches, ev.remote_refusals, ev.moves_back, ev.spills), (2, 1, 1, 0));
}

/// Overflow by flow share (paper §5; the home node keeps the chain): chain 0 — a 10 kpps engine
/// and a NAT, in the node's one region — gets twice what an instance carries. A whole
/// MONITOR_PERIOD later a peer is asked to host it for a share of its new flows. Then the flows
/// seen before stay here with their NAT mappings, and new flows split between here and the
/// peer, each on one side only (`Bed::poll` also fails a flow whose first packets went missing,
/// as they would if a flow changed side or NAT mapping). The load falls: a period later new
/// flows stay here while the peer's keep going there; once those have been idle `flow_idle`,
/// the peer is told it may stop hosting. Nothing lost.
#[test]
fn an_overloaded_chain_spills_new_flows_to_a_peer_and_every_flow_keeps_its_side() {
    use snic_core::pool::AgentConfig;
    let pool = AgentConfig { flow_idle: Duration::from_millis(50), ..Default::default() };
    let elastic = ElasticConfig { regions: 1, autoscale: true, ..cfg(1, 0) };
    let mut b = Bed::with_config(
        NodeConfig { core: NodeCoreConfig { elastic, pool, ..NodeCoreConfig::default() }, ..Default::default() },
        vec![vec![engine(10_000), nat()]],
        true,
    );
    b.node.set_pool_secret(Some(b"a pool secret of 32 bytes, more!"));
    let m1 = member(1);
    b.node.pool_member(MemberEvent::Up(m1.0));
    b.node.pool_report(m1.0, report(1, 2));
    // 1. 20 packets a ms over flows 1..=8: twice what the instance carries, no room here.
    let mut asked = None;
    for ms in 0..50 {
        b.run_flows(0, 20, 1..=8, 1);
        if let Some(r) = b.node.poll_pool() {
            asked = Some((ms, r));
            break;
        }
    }
    let Some((ms, PoolRequest::Place { chain, route, dag, pos, peer })) = asked else { panic!("a peer is asked: {:?}", b.kinds()) };
    assert!(ms >= 5, "not before a whole MONITOR_PERIOD of overload ({ms} ms)");
    assert_eq!((chain, dag, pos, peer), (ChainId(0), DagUid(1), 0, m1.0));
    assert!(matches!(b.kinds().last(), Some((0, EventKind::SpillAsked { .. }))));
    // (Flows 1..=8 are seen no more until the peer hosts: only what was learnt keeps them here.)
    b.run_flows(0, 20, 9..=16, 2);
    assert_eq!(b.node.poll_pool(), None, "asked once");
    assert!(b.flows_sent.is_empty(), "nothing leaves while the peer is asked");
    b.node.pool_answer(chain, route, m1.0, HostAnswer::Hosted { data: m1.1, hosted: 5, gen: 1 });
    let (_, r) = b.node.core().redirects().iter().next().expect("a share of the chain's flows is redirected");
    assert!(r.share > 0 && r.share < 1024, "a share, not all: {}", r.share);
    assert!(b.kinds().contains(&(0, EventKind::Spilled { peer: m1.1, share: r.share })));
    // 2. New flows 17..=200 join.
    b.run_flows(0, 40, 1..=200, 20);
    assert!(b.flows_sent.len() > 40 && b.flows_here.len() > 40, "new flows on both sides: {} sent", b.flows_sent.len());
    assert!((1..=16).all(|f| !b.flows_sent.contains(&f)), "the flows seen before stay here");
    assert!(b.flows_here.is_disjoint(&b.flows_sent), "each flow on one side");
    assert_eq!(b.lost(0), 0);
    // 3. The load falls to 4 a ms over flows 1..=40; once the smoothed load has fitted a whole
    // period, new flows stay here, while
    // the peer's among 1..=40 go on there.
    let on_peer: Vec<u16> = (1..=40).filter(|f| b.flows_sent.contains(f)).collect();
    assert!(!on_peer.is_empty());
    b.run_flows(0, 4, 1..=40, 30);
    assert!(b.kinds().contains(&(0, EventKind::SpillShare { peer: m1.1, share: 0 })), "{:?}", b.kinds());
    let sent = b.redirected[&m1.1];
    b.run_flows(0, 8, 201..=240, 5);
    b.run_flows(0, 4, 1..=40, 10);
    assert!((201..=240).all(|f| !b.flows_sent.contains(&f)), "no new flow goes to the peer");
    assert!(b.redirected[&m1.1] > sent, "the peer's flows go on there");
    assert_eq!(b.node.poll_pool(), None, "the peer still runs flows");
    // 4. Only flows here go on: once the peer's have been idle 50 ms, the peer may stop.
    let here: Vec<u16> = b.flows_here.iter().copied().filter(|f| *f <= 40 || *f > 200).collect();
    let mut unhost = None;
    for _ in 0..120 {
        b.run_flows(0, 4, here.iter().copied(), 1);
        if let Some(r) = b.node.poll_pool() {
            unhost = Some(r);
            break;
        }
    }
    assert_eq!(unhost, Some(PoolRequest::Unhost { peer: m1.0, hosted: 5 }));
    assert!(b.kinds().contains(&(0, EventKind::Unspilled { peer: m1.1 })));
    assert!(b.node.core().redirects().iter().next().is_none(), "nothing redirected");
    assert!(b.flows_here.is_disjoint(&b.flows_sent), "each flow on one side");
    assert_eq!(b.lost(0), 0);
    assert_eq!(b.node.core().events().spills, 1);
}

/// Moving home with the NTs' state (paper §5: pause new traffic, migrate state, resume): chain
/// 1 is a NAT, placed on a peer whose NAT mapped its four flows in reverse order (a NAT started
/// afresh here would map them otherwise). When it comes home its packets stop going to the
/// peer and wait, none run here, until the peer's state arrives; restored, every flow leaves
/// on the port the peer gave it, in order, none lost, and the event gives the pause. Placed
/// again and coming home again, the peer dies before it answers: the packets do not wait for
/// a state that will not come, and the event says it came home without it.
#[test]
fn a_chain_moving_home_waits_for_its_nat_state_and_every_flow_keeps_its_mapping() {
    use snic_nt::{Ctx, Pkt, PktMeta, HEADROOM};
    let mut b = Bed::new(ElasticConfig { regions: 1, autoscale: true, ..cfg(1, 0) }, vec![vec![engine(1_000_000)], vec![nat()]], true);
    b.node.set_pool_secret(Some(b"a pool secret of 32 bytes, more!"));
    let m1 = member(1);
    b.node.pool_member(MemberEvent::Up(m1.0));
    b.node.pool_report(m1.0, report(1, 2));
    b.run(0, 10, 2, 3);
    b.run(1, 4, 4, 1);
    let Some(PoolRequest::Place { chain, route, peer, .. }) = b.node.poll_pool() else { panic!("a remote launch is asked") };
    assert_eq!((chain, peer), (ChainId(1), m1.0));
    b.node.pool_answer(chain, route, m1.0, HostAnswer::Hosted { data: m1.1, hosted: 5, gen: 1 });
    for _ in 0..4 {
        b.run(0, 10, 2, 1);
        b.run(1, 4, 4, 1);
    }
    assert_eq!(b.redirected[&m1.1], b.sent[&101], "chain 1 runs on the peer");
    // The peer's NAT, which ran those flows: 4, 3, 2, 1 in that order.
    let mut at_peer = snic_nt::build(&nat()).unwrap();
    for sport in (1..=4u16).rev() {
        let d = snic_perf::testbed::datagram(101, sport, 4);
        let mut buf = vec![0u8; HEADROOM + d.len()];
        buf[HEADROOM..].copy_from_slice(&d);
        let mut meta =
            PktMeta { off: HEADROOM as u16, len: d.len() as u16, vni: 101, tenant: TenantId(2), inner: parse_inner(&d[8..]).ok() };
        at_peer.process(&Ctx::real(snic_core::time::Instant::ZERO), &mut Pkt { buf: &mut buf, meta: &mut meta, at: Default::default() });
        b.nat_ports.insert(parse_inner(&buf[HEADROOM + 8..]).unwrap().key.src_port, sport);
    }
    assert!(!b.nat_ports.contains_key(&1024) || b.nat_ports[&1024] != 1, "the peer's mapping is not the one a fresh NAT makes");
    // Chain 0 stops; a whole MONITOR_PERIOD of room later chain 1 comes home.
    b.run(1, 4, 4, 30);
    let Some(PoolRequest::Return { chain, key, peer, hosted, .. }) = b.node.poll_pool() else {
        panic!("the peer is asked for the chain back")
    };
    assert_eq!((chain, peer, hosted), (ChainId(1), m1.0, 5));
    let (sent, redirected) = (b.sent[&101], b.redirected[&m1.1]);
    b.run(1, 4, 4, 5);
    assert_eq!(b.delivered[&101], redirected, "its packets wait for the state: none ran here");
    assert_eq!(b.redirected[&m1.1], redirected, "and none went to the peer");
    assert!(b.sent[&101] > sent);
    b.clock.advance(MS);
    let state = at_peer.save_state(snic_core::time::Instant::ZERO);
    b.node.pool_returned(chain, Ok(vec![ChainState { key, instances: vec![vec![state]] }]));
    b.run(1, 4, 4, 10);
    assert_eq!(b.lost(1), 0, "none lost, every flow on its own port and in order (Bed::poll)");
    assert!(b.delivered[&101] > redirected, "chain 1 runs at home");
    let event = |f: fn(&EventKind) -> bool| b.node.core().events().events.iter().find(|e| f(&e.kind)).copied().unwrap();
    let (moving, back) = (event(|k| matches!(k, EventKind::MovingBack { .. })), event(|k| matches!(k, EventKind::MovedBack { .. })));
    assert_eq!(back.kind, EventKind::MovedBack { peer: m1.1, restored: Some(4) });
    assert_eq!(back.took_ns, back.at_ns - moving.at_ns, "the pause: from the decision to the state");
    assert!(back.took_ns >= 6_000_000);
    assert_eq!(b.node.core().events().moves_back, 1);
    // Chain 0's traffic again: chain 1 holds the region, so chain 0 is placed on the peer this
    // time. Chain 1 idles (room), chain 0 comes home, and its peer dies before it answers.
    b.run(0, 10, 2, 20);
    let Some(PoolRequest::Place { chain, route, .. }) = b.node.poll_pool() else { panic!("chain 0 placed") };
    assert_eq!(chain, ChainId(0));
    b.node.pool_answer(chain, route, m1.0, HostAnswer::Hosted { data: m1.1, hosted: 6, gen: 1 });
    b.run(0, 10, 2, 40);
    let r = b.node.poll_pool();
    assert!(matches!(r, Some(PoolRequest::Return { chain: ChainId(0), hosted: 6, .. })), "{r:?} {:?}", b.kinds());
    let delivered = b.delivered[&100];
    b.node.pool_member(MemberEvent::Down(m1.0));
    b.run(0, 10, 2, 10);
    assert!(b.kinds().contains(&(0, EventKind::MovedBack { peer: m1.1, restored: None })));
    assert!(b.delivered[&100] > delivered, "it runs at home");
    assert_eq!(b.lost(0), 0);
}

/// The peer's side of a move home: chain 0 (a NAT, on a worker thread) is taken away with its
/// state while packets are on their way through it. What it had runs to the end, none lost;
/// once its instance has stopped, its NAT's state comes out, and it holds every flow.
#[test]
fn a_chain_exported_finishes_its_packets_then_gives_its_nts_state() {
    let mut b = Bed::with_workers(cfg(2, 0), vec![vec![nat()], vec![engine(1_000_000)]], true, 1);
    b.run(0, 8, 4, 3);
    for k in 0..16 {
        b.push(0, 1 + k % 4);
    }
    while b.node.poll() > 0 {}
    b.node.remove_dag(DagUid(1));
    b.node.export_chain(ChainId(0));
    assert!(!b.node.core().is_live(ChainId(0)));
    b.idle(5);
    assert_eq!(b.lost(0), 0, "what it had ran to the end");
    let Some((chain, state)) = b.node.poll_exported() else { panic!("the state once its instance stopped") };
    assert_eq!(chain, ChainId(0));
    assert_eq!(b.node.poll_exported(), None);
    assert_eq!(state.instances.len(), 1);
    let mut fresh = snic_nt::build(&nat()).unwrap();
    let saved = state.instances[0][0].as_ref().expect("a NAT has state");
    assert_eq!(fresh.restore_state(saved, snic_core::time::Instant::ZERO), Ok(4), "every flow");
    // A chain taken away that is not there gives an empty state at once.
    b.node.export_chain(ChainId(0));
    assert!(matches!(b.node.poll_exported(), Some((ChainId(0), s)) if s.instances.is_empty()));
}
