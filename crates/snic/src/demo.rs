//! `snic demo`: one node, two tenants, in-process endpoints speaking VXLAN over loopback UDP,
//! traffic for a bounded time, a live per-tenant table and a summary. Needs no root and sends
//! nothing beyond 127.0.0.1.
//!
//! It deploys `examples/demo.yaml` (embedded) through the control plane. Tenant `blue` (VNI 100)
//! runs firewall → NAT: its endpoint A sends UDP to B on port 5001
//! (allowed, source-NATed to 203.0.113.1) and, one packet in ten, TCP to port 22 (denied).
//! Tenant `green` (VNI 200) runs counter → vni_map: its traffic is re-mapped into VNI 300, where
//! its receiver sits (a VPC mapping). Receivers check that each transformation really happened.

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use snic_control::{manifest, plan, state::State};
use snic_core::ids::TenantId;
use snic_dataplane::backend::udp::{set_buffers, UdpBackend};
use snic_dataplane::backend::Backend;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::stats::TenantStats;
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::{parse_inner, parse_vxlan};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Options of `snic demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// How long to run traffic [default: 10; with --pool, how long each phase is held: 4].
    #[arg(long)]
    seconds: Option<u64>,
    /// Packets per second each tenant's sender offers [default: 20000; 2000 with --pool].
    #[arg(long)]
    rate: Option<u64>,
    /// Print only the summary, as JSON.
    #[arg(long)]
    json: bool,
    /// Three nodes in a pool instead of one (child `snic run` processes on loopback): the
    /// first has one region, held by green, so blue's chain is launched on a peer and
    /// redirected there; green stops and blue's chain moves back with its state. `--seconds`
    /// is then how long each phase runs once reached.
    #[arg(long)]
    pool: bool,
}

/// The two tenants of `examples/demo.yaml`, as the demo's endpoints see them.
pub(crate) struct Tenant {
    pub(crate) name: &'static str,
    pub(crate) vni: u32,
    pub(crate) out_vni: u32,
}

pub(crate) const TENANTS: [Tenant; 2] = [Tenant { name: "blue", vni: 100, out_vni: 100 }, Tenant { name: "green", vni: 200, out_vni: 300 }];

/// What the deployment gave each tenant.
struct Placed {
    id: TenantId,
    chain: String,
    region: u16,
}

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
pub(crate) const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);

#[derive(Default)]
pub(crate) struct Receiver {
    pub(crate) packets: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// Packets that arrived without the transformation the tenant's chain promises.
    pub(crate) wrong: AtomicU64,
    /// Packets from each of these senders (the pool demo's nodes).
    pub(crate) by_source: Vec<(SocketAddr, AtomicU64)>,
}

#[derive(Serialize)]
struct TenantSummary {
    name: &'static str,
    vni: u32,
    chain: String,
    /// Sent by the tenant's endpoint; received by the node; transmitted by the node; received
    /// by the tenant's other endpoint; dropped by the node (with reasons). The node's own
    /// counts add up: received = transmitted + dropped.
    sent_packets: u64,
    received_packets: u64,
    transmitted_packets: u64,
    delivered_packets: u64,
    dropped_packets: u64,
    drops_by_reason: Vec<(&'static str, u64)>,
    unverified_packets: u64,
    gbps: f64,
    /// Fair sharing at the end: the tenant's dominant resource, its share of it, and the
    /// fraction of its measured demand that DRF granted.
    dominant: Option<String>,
    dominant_share: f64,
    fair_fraction: f64,
}

#[derive(Serialize)]
struct Summary {
    seconds: f64,
    node: String,
    /// Packets lost in the node's socket before it read them (loopback, a full buffer), all
    /// tenants together: sent = received + this, summed over tenants, once drained.
    lost_before_node: u64,
    /// Everything sent was accounted for (received or lost before the node, and everything
    /// the node transmitted reached its receiver) before the drain deadline.
    drained: bool,
    tenants: Vec<TenantSummary>,
}

pub(crate) fn frame(vni: u32, l4: L4Spec, payload: usize) -> Vec<u8> {
    let spec = FrameSpec {
        outer: None,
        vni,
        inner_src_mac: MAC_A,
        inner_dst_mac: MAC_B,
        src: "10.1.0.5".parse().expect("literal"),
        dst: "10.2.0.9".parse().expect("literal"),
        l4,
        payload_len: payload,
        payload_byte: 0x42,
    };
    let mut b = vec![0u8; 2048];
    let n = build(&spec, &mut b).expect("frame fits");
    b.truncate(n);
    b
}

/// The configuration the demo deploys: `examples/demo.yaml`, embedded.
pub const DEMO_MANIFEST: &str = include_str!("../../../examples/demo.yaml");

fn build_node(receivers: &[SocketAddr; 2]) -> anyhow::Result<(Node<UdpBackend>, Vec<Placed>)> {
    let backend = UdpBackend::bind("127.0.0.1:0".parse()?).context("binding the node's UDP socket on loopback")?;
    // In-process endpoints send and receive on one socket, so answer them on their source port.
    let cfg = NodeConfig { vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, backend, Box::new(MonotonicClock::default()))?;
    let state = State::default().apply(manifest::parse(DEMO_MANIFEST)?)?;
    let plan = plan::plan(&state, 8)?;
    let instances = crate::deploy::deploy(&mut node, &plan)?;
    let mut placed = Vec::new();
    for t in &TENANTS {
        let id = TenantId(*state.ids().tenants.get(t.name).context("the demo manifest names tenants blue and green")?);
        let dag = plan.dags.iter().find(|d| d.tenant == id).context("each demo tenant has a DAG")?;
        let chain = dag.steps.iter().map(|(c, _)| plan.chains[*c].nts.join(" → ")).collect::<Vec<_>>().join(" ⇒ ");
        let region = instances[dag.steps[0].0].1.context("the demo node has a region for every chain")?;
        placed.push(Placed { id, chain, region: region.0 });
    }
    // Routes to the in-process endpoints (their ports are the OS's choice, so not in the manifest).
    for (t, r) in TENANTS.iter().zip(receivers) {
        node.fdb_mut().add_static(t.out_vni, MAC_B, Peer { addr: *r, mac: MacAddr::default() }).context("peer table full")?;
    }
    Ok((node, placed))
}

/// Sends tenant `t`'s traffic to `node` at `rate` until `until` or `stop`; counts in `sent`.
pub(crate) fn sender(
    sock: UdpSocket,
    node: SocketAddr,
    t: &'static Tenant,
    rate: u64,
    until: Instant,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) {
    let allowed = frame(t.vni, L4Spec::Udp { src_port: 4000, dst_port: 5001 }, 512);
    let denied = frame(t.vni, L4Spec::Tcp { src_port: 4001, dst_port: 22, flags: 0x02 }, 0);
    let start = Instant::now();
    let mut n = 0u64;
    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
        // Pace to `rate`: send what is due, then sleep a little.
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        while n < due {
            let f = if t.name == "blue" && n % 10 == 9 { &denied } else { &allowed };
            if sock.send_to(f, node).is_ok() {
                n += 1;
                sent.store(n, Ordering::Relaxed);
            } else {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Receives tenant `t`'s packets until `stop`, checking each was transformed as promised.
pub(crate) fn receiver(sock: UdpSocket, t: &'static Tenant, stop: Arc<AtomicBool>, r: Arc<Receiver>) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
        if let Some((_, c)) = r.by_source.iter().find(|(a, _)| *a == from) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let d = &buf[..n];
        let ok = match (parse_vxlan(d), d.get(8..).map(parse_inner)) {
            (Ok(vni), Some(Ok(l))) if t.name == "blue" => {
                vni == 100 && l.key.src == IpAddr::from([203, 0, 113, 1]) && l.key.dst_port == 5001
            }
            (Ok(vni), Some(Ok(_))) => vni == t.out_vni,
            _ => false,
        };
        r.packets.fetch_add(1, Ordering::Relaxed);
        r.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if !ok {
            r.wrong.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    if a.pool {
        return crate::demo_pool::run(a.seconds.unwrap_or(4), a.rate.unwrap_or(2_000), a.json);
    }
    let (seconds, rate) = (a.seconds.unwrap_or(10), a.rate.unwrap_or(20_000));
    let recv_socks = [UdpSocket::bind("127.0.0.1:0")?, UdpSocket::bind("127.0.0.1:0")?];
    let recv_addrs = [recv_socks[0].local_addr()?, recv_socks[1].local_addr()?];
    let (mut node, placed) = build_node(&recv_addrs)?;
    let node_addr = node.backend().local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    // Each tenant's counters, and the node socket's losses, as of the node thread's last look.
    let snapshot: Arc<Mutex<([TenantStats; 2], u64)>> = Arc::new(Mutex::new(Default::default()));

    // Each tenant's (dominant resource, dominant share, granted fraction), as last seen while
    // its traffic flowed (demand fades within a few epochs once the senders stop, and a light
    // sender's can between its packets): kept per tenant.
    type FairView = Vec<(TenantId, Option<String>, f64, f64)>;
    let fair_view: Arc<Mutex<FairView>> = Arc::new(Mutex::new(Vec::new()));
    let (st, snap, fv) = (stop.clone(), snapshot.clone(), fair_view.clone());
    let ids = [placed[0].id.index(), placed[1].id.index()];
    let node_thread = std::thread::Builder::new().name("snic-node".into()).spawn(move || {
        let mut last = Instant::now();
        while !st.load(Ordering::Relaxed) {
            if node.poll() == 0 {
                node.backend_mut().wait(Duration::from_millis(1));
            }
            if last.elapsed() >= Duration::from_millis(50) {
                last = Instant::now();
                let s = node.stats();
                *snap.lock().expect("snapshot lock") =
                    ([s.tenants[ids[0]].clone(), s.tenants[ids[1]].clone()], node.backend().rx_dropped());
                let f = node.core().meter().fairness();
                let name = |d: Option<usize>| d.and_then(|d| f.resources().get(d)).map(|r| r.name.clone());
                let mut view = fv.lock().expect("fair lock");
                for x in f.shares().iter().filter(|x| x.dominant.is_some()) {
                    let seen = (x.tenant, name(x.dominant), x.dominant_share, x.fraction);
                    match view.iter_mut().find(|v| v.0 == x.tenant) {
                        Some(v) => *v = seen,
                        None => view.push(seen),
                    }
                }
            }
        }
        node
    })?;

    let until = Instant::now() + Duration::from_secs(seconds);
    let receivers: Vec<Arc<Receiver>> = (0..2).map(|_| Arc::new(Receiver::default())).collect();
    let sent: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut threads = Vec::new();
    for (i, rs) in recv_socks.into_iter().enumerate() {
        // Room for bursts while a receiver thread is off its core, as the node's socket has.
        set_buffers(&rs, 4 << 20);
        let (st, r) = (stop.clone(), receivers[i].clone());
        threads.push(std::thread::spawn(move || receiver(rs, &TENANTS[i], st, r)));
    }
    let mut senders = Vec::new();
    for (i, s) in sent.iter().enumerate() {
        let sock = UdpSocket::bind("127.0.0.1:0")?;
        let (s, st) = (s.clone(), stop.clone());
        senders.push(std::thread::spawn(move || sender(sock, node_addr, &TENANTS[i], rate, until, st, s)));
    }

    if !a.json {
        println!("snic demo: node on {node_addr} (loopback UDP, VXLAN), {} s, {} pkt/s offered per tenant", seconds, rate);
        println!("  configuration: examples/demo.yaml (embedded), deployed through the control plane");
        for ((t, r), p) in TENANTS.iter().zip(&recv_addrs).zip(&placed) {
            println!("  tenant {:<5} VNI {} → [{}] in region {} → endpoint {} on VNI {}", t.name, t.vni, p.chain, p.region, r, t.out_vni);
        }
        println!("\n{:>4}  {:<6} {:>10} {:>10} {:>9} {:>10}  region", "t(s)", "tenant", "rx pkt/s", "tx pkt/s", "drops", "delivered");
    }
    let t0 = Instant::now();
    let mut prev = [(0u64, 0u64); 2];
    while Instant::now() < until {
        std::thread::sleep(Duration::from_secs(1).min(until.saturating_duration_since(Instant::now())));
        if a.json {
            continue;
        }
        let snap = snapshot.lock().expect("snapshot lock").0.clone();
        for (i, t) in TENANTS.iter().enumerate() {
            let s = &snap[i];
            println!(
                "{:>4.0}  {:<6} {:>10} {:>10} {:>9} {:>10}  {} [{}]",
                t0.elapsed().as_secs_f64(),
                t.name,
                s.rx_packets - prev[i].0,
                s.tx_packets - prev[i].1,
                s.dropped(),
                receivers[i].packets.load(Ordering::Relaxed),
                placed[i].region,
                placed[i].chain
            );
            prev[i] = (s.rx_packets, s.tx_packets);
        }
    }
    for s in senders {
        let _ = s.join();
    }
    // Drain: until every packet sent is accounted for — received by the node or lost in its
    // socket, and what the node transmitted received by its endpoint — or 5 s pass.
    let accounted = || {
        let (s, lost) = snapshot.lock().expect("snapshot lock").clone();
        let sent_all: u64 = sent.iter().map(|x| x.load(Ordering::Relaxed)).sum();
        let in_all = s[0].read() + s[1].read() + lost;
        in_all >= sent_all && (0..2).all(|i| receivers[i].packets.load(Ordering::Relaxed) >= s[i].tx_packets)
    };
    let drain_until = Instant::now() + Duration::from_secs(5);
    while !accounted() && Instant::now() < drain_until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let drained = accounted();
    stop.store(true, Ordering::Relaxed);
    let node = node_thread.join().map_err(|_| anyhow::anyhow!("node thread panicked"))?;
    for t in threads {
        let _ = t.join();
    }
    let secs = t0.elapsed().as_secs_f64();
    let stats = node.stats();
    let fair = fair_view.lock().expect("fair lock").clone();
    let summary = Summary {
        seconds: secs,
        node: node_addr.to_string(),
        lost_before_node: node.backend().rx_dropped(),
        drained,
        tenants: TENANTS
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let s = &stats.tenants[placed[i].id.index()];
                let share = fair.iter().find(|x| x.0 == placed[i].id);
                let by_reason = s.drops_by_reason();
                TenantSummary {
                    name: t.name,
                    vni: t.vni,
                    chain: placed[i].chain.clone(),
                    sent_packets: sent[i].load(Ordering::Relaxed),
                    received_packets: s.read(),
                    transmitted_packets: s.tx_packets,
                    delivered_packets: receivers[i].packets.load(Ordering::Relaxed),
                    dropped_packets: s.dropped(),
                    drops_by_reason: by_reason,
                    unverified_packets: receivers[i].wrong.load(Ordering::Relaxed),
                    gbps: receivers[i].bytes.load(Ordering::Relaxed) as f64 * 8.0 / secs / 1e9,
                    dominant: share.and_then(|s| s.1.clone()),
                    dominant_share: share.map_or(0.0, |s| s.2),
                    fair_fraction: share.map_or(1.0, |s| s.3),
                }
            })
            .collect(),
    };
    if a.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!("\nsummary after {:.1} s:", summary.seconds);
        for t in &summary.tenants {
            println!(
                "  {:<5} sent {:>8}  delivered {:>8}  dropped {:>7} {:?}  unverified {}  {:.3} Gbit/s",
                t.name, t.sent_packets, t.delivered_packets, t.dropped_packets, t.drops_by_reason, t.unverified_packets, t.gbps
            );
        }
        println!("  fair sharing (weighted DRF on measured demand, docs/fairness.md):");
        for t in &summary.tenants {
            println!(
                "    {:<5} dominant resource {:<14} share {:.4}  granted {:.0}% of its demand",
                t.name,
                t.dominant.as_deref().unwrap_or("-"),
                t.dominant_share,
                100.0 * t.fair_fraction
            );
        }
        let lat = &stats.latency;
        println!("  node latency (receive → transmit): p50 {} ns, p99 {} ns", lat.quantile(0.5), lat.quantile(0.99));
    }
    Ok(())
}
