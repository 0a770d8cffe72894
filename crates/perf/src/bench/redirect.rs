//! `snic bench redirect`: what sending a chain's packets to a peer costs against running them
//! at home, over real UDP sockets on loopback, in the same run.
//!
//! - *local*: endpoint A → node H (runs the chain) → endpoint B;
//! - *redirected*: A → H (the chain redirected) → peer P (hosts the DAG, runs the chain) → B;
//! - *pass-through*: as redirected, but the pool's links join H and P only through a third
//!   node T (the intermediate topology): A → H → T (verifies, seals again, passes on) → P → B.
//!
//! Each node runs on its own thread as the daemon runs it (poll; idle in the socket's wait when
//! there is nothing to do). Two phases per path: latency at a low paced rate (A stamps each
//! packet with its send time, B reads it: one clock; each node wakes from its idle wait for
//! each packet, as a lightly loaded daemon does), then throughput with A sending as fast as it
//! can for the same time (what B receives, per second). The machine's cores are shared by A, B
//! and the nodes (three threads on the local path, four redirected, five through T): the throughput phase
//! measures the whole loopback path on this machine, not a node.

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::Mat;
use snic_core::pool::redirect::SHARE_ALL;
use snic_dataplane::backend::udp::UdpBackend;
use snic_dataplane::backend::Backend as _;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::stats::Histogram;
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::NtSpec;
use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Options of `snic bench redirect`.
#[derive(Args)]
pub struct RedirectArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// The chain: dummy, or fw-nat (a 100-rule firewall then SNAT).
    #[arg(long, default_value = "fw-nat")]
    chain: String,
    /// Inner frame size in bytes.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Packets per second in the latency phase (paced by sleeping: A leaves the cores to the
    /// nodes).
    #[arg(long, default_value_t = 5_000)]
    rate: u64,
    /// Seconds per phase.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
}

#[derive(Serialize)]
struct Line {
    bench: &'static str,
    path: &'static str,
    chain: String,
    packet_size: usize,
    rate_pps: u64,
    p50_us: f64,
    p99_us: f64,
    latency_samples: u64,
    delivered_mpps: f64,
    offered_mpps: f64,
}

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);
/// Where A's stamp sits in the VXLAN datagram: VXLAN 8 + Ethernet 14 + IPv4 20 + UDP 8.
const STAMP_AT: usize = 50;

fn specs(chain: &str) -> anyhow::Result<Vec<NtSpec>> {
    Ok(match chain {
        "dummy" => vec![NtSpec::Dummy],
        // The vpc chain's firewall (100 rules none of the traffic matches) and SNAT.
        "fw-nat" => super::chain_specs("vpc", 100)?.into_iter().take(2).collect(),
        c => bail!("unknown chain {c:?}: dummy or fw-nat"),
    })
}

fn bind() -> anyhow::Result<(UdpBackend, SocketAddr)> {
    let b = UdpBackend::bind("127.0.0.1:0".parse()?).context("binding a node's socket on loopback")?;
    let a = b.local_addr()?;
    Ok((b, a))
}

fn node(b: UdpBackend) -> anyhow::Result<Node<UdpBackend>> {
    Ok(Node::new(NodeConfig { vtep_port: None, ..Default::default() }, b, Box::new(MonotonicClock::default()))?)
}

fn route(c: snic_core::ids::ChainId, n: usize) -> DagRoute {
    DagRoute::new(vec![Step { chain: c, mask: NtMask::all(n) }])
}

/// The paths measured, in order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Local,
    Redirected,
    PassThrough,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Local => "local",
            Path::Redirected => "redirected",
            Path::PassThrough => "pass-through",
        }
    }
}

/// The nodes of one path, B's address, and where A sends.
fn setup(specs: &[NtSpec], path: Path, sink: SocketAddr) -> anyhow::Result<(Vec<Node<UdpBackend>>, SocketAddr)> {
    const SECRET: &[u8] = b"snic bench redirect: a pool secret";
    let (hb, ha) = bind()?;
    let mut h = node(hb)?;
    h.set_tenant(TenantId(1), 1.0);
    let c = h.add_chain(specs.to_vec());
    h.set_dag(DagUid(1), route(c, specs.len()));
    let mut mat = Mat::new();
    mat.insert(crate::testbed::dag_rule(100, TenantId(1), DagUid(1)));
    h.mat_handle().store(Arc::new(mat));
    h.fdb_mut().add_static(100, MAC_B, Peer { addr: sink, mac: MacAddr::default() });
    if path == Path::Local {
        h.launch(c)?;
        return Ok((vec![h], ha));
    }
    let (pb, pa) = bind()?;
    let mut p = node(pb)?;
    p.set_tenant(TenantId(1), 1.0);
    let pc = p.add_chain(specs.to_vec());
    p.launch(pc)?;
    let hosted = p.host_dag(ha, TenantId(1), route(pc, specs.len()));
    // The hosted tenant's VNI is its own at the peer: a redirected packet runs only in a DAG of
    // its own tenant.
    p.fdb_mut().set_owner(100, Some(TenantId(1)));
    p.set_pool_secret(Some(SECRET));
    h.set_pool_secret(Some(SECRET));
    h.redirect_chain(c, pa, SHARE_ALL);
    anyhow::ensure!(h.redirect_route(DagUid(1), pa, hosted, p.pool_link().generation()), "the DAG is deployed");
    if path == Path::Redirected {
        return Ok((vec![h, p], ha));
    }
    // The pool's links H – T – P (pool addresses stand for the nodes; only H routes), and the
    // data addresses H knows from the members' reports.
    let (tb, ta) = bind()?;
    let mut t = node(tb)?;
    t.set_pool_secret(Some(SECRET));
    let pool = |i: u16| SocketAddr::from(([127, 0, 0, 1], i));
    h.set_pool_links(pool(1), &[[pool(1), pool(2)], [pool(2), pool(3)]]);
    for (i, data) in [(2, ta), (3, pa)] {
        h.pool_report(pool(i), snic_core::pool::LoadReport { gen: 1, seq: 1, data: Some(data), ..Default::default() });
    }
    anyhow::ensure!(h.core().pool().via(pa) == Some(ta), "the route through T");
    Ok((vec![h, t, p], ha))
}

fn spawn(mut n: Node<UdpBackend>, stop: Arc<AtomicBool>) -> JoinHandle<Node<UdpBackend>> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if n.poll() == 0 {
                n.idle(Duration::from_millis(5));
            }
        }
        n
    })
}

/// B: receives until `stop`, recording the latency of stamped packets (stamp ≠ 0) and counting
/// all; gives (histogram, packets).
fn sink(sock: UdpSocket, origin: Instant, stop: Arc<AtomicBool>) -> JoinHandle<(Histogram, u64)> {
    std::thread::spawn(move || {
        let (mut h, mut n) = (Histogram::default(), 0u64);
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            let Ok(len) = sock.recv(&mut buf) else { continue };
            n += 1;
            if len >= STAMP_AT + 8 {
                let t = u64::from_le_bytes(buf[STAMP_AT..STAMP_AT + 8].try_into().unwrap_or_default());
                if t != 0 {
                    h.record((origin.elapsed().as_nanos() as u64).saturating_sub(t));
                }
            }
        }
        (h, n)
    })
}

fn frame(size: usize) -> anyhow::Result<Vec<u8>> {
    let spec = FrameSpec {
        outer: None,
        vni: 100,
        inner_src_mac: MAC_A,
        inner_dst_mac: MAC_B,
        src: "10.0.0.5".parse()?,
        dst: "10.0.0.9".parse()?,
        l4: L4Spec::Udp { src_port: 4000, dst_port: 80 },
        payload_len: size.saturating_sub(42).max(8),
        payload_byte: 0,
    };
    let mut v = vec![0u8; 2048];
    let n = build(&spec, &mut v).context("building the test frame")?;
    v.truncate(n);
    Ok(v)
}

/// One path: latency at `rate`, then throughput, each `seconds` long.
fn measure(a: &RedirectArgs, path: Path) -> anyhow::Result<Line> {
    let specs = specs(&a.chain)?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    b.set_read_timeout(Some(Duration::from_millis(20)))?;
    let (nodes, to) = setup(&specs, path, b.local_addr()?)?;
    let stop_nodes = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = nodes.into_iter().map(|n| spawn(n, stop_nodes.clone())).collect();
    let src = UdpSocket::bind("127.0.0.1:0")?;
    let mut d = frame(a.size)?;
    let origin = Instant::now();
    let phase = Duration::from_secs_f64(a.seconds);
    // Latency: paced, stamped; 200 ms of warm-up first (stamp 0: counted, not timed).
    let stop_sink = Arc::new(AtomicBool::new(false));
    let rx = sink(b.try_clone()?, origin, stop_sink.clone());
    let gap = Duration::from_secs_f64(1.0 / a.rate.max(1) as f64);
    let warm = Duration::from_millis(200);
    let (t0, mut next, mut flow) = (Instant::now(), Instant::now(), 0u16);
    while t0.elapsed() < warm + phase {
        // Sleeping, not spinning, between packets: A must leave the cores to the nodes and B.
        if let Some(w) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        next += gap;
        let stamp = if t0.elapsed() >= warm { origin.elapsed().as_nanos() as u64 } else { 0 };
        d[STAMP_AT..STAMP_AT + 8].copy_from_slice(&stamp.to_le_bytes());
        // 64 flows (the source port, in the inner UDP header before the stamp).
        flow = (flow + 1) % 64;
        d[STAMP_AT - 8..STAMP_AT - 6].copy_from_slice(&(4000 + flow).to_be_bytes());
        let _ = src.send_to(&d, to);
    }
    std::thread::sleep(Duration::from_millis(100));
    stop_sink.store(true, Ordering::Relaxed);
    let (hist, _) = rx.join().map_err(|_| anyhow::anyhow!("the sink panicked"))?;
    // Throughput: as fast as A can send, unstamped, for the same time.
    d[STAMP_AT..STAMP_AT + 8].fill(0);
    let stop_sink = Arc::new(AtomicBool::new(false));
    let rx = sink(b, origin, stop_sink.clone());
    let (t0, mut sent) = (Instant::now(), 0u64);
    while t0.elapsed() < phase {
        for _ in 0..64 {
            flow = (flow + 1) % 64;
            d[STAMP_AT - 8..STAMP_AT - 6].copy_from_slice(&(4000 + flow).to_be_bytes());
            if src.send_to(&d, to).is_ok() {
                sent += 1;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(100));
    stop_sink.store(true, Ordering::Relaxed);
    let (_, got) = rx.join().map_err(|_| anyhow::anyhow!("the sink panicked"))?;
    stop_nodes.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().map_err(|_| anyhow::anyhow!("a node panicked"))?;
    }
    Ok(Line {
        bench: "redirect",
        path: path.name(),
        chain: a.chain.clone(),
        packet_size: a.size,
        rate_pps: a.rate,
        p50_us: hist.quantile(0.5) as f64 / 1e3,
        p99_us: hist.quantile(0.99) as f64 / 1e3,
        latency_samples: hist.count(),
        delivered_mpps: got as f64 / secs / 1e6,
        offered_mpps: sent as f64 / secs / 1e6,
    })
}

/// Runs `snic bench redirect`.
pub fn run(a: &RedirectArgs) -> anyhow::Result<()> {
    for path in [Path::Local, Path::Redirected, Path::PassThrough] {
        let l = measure(a, path)?;
        if a.json {
            println!("{}", serde_json::to_string(&l)?);
        } else {
            println!(
                "{:<12} {} {} B: latency p50 {:.1} µs p99 {:.1} µs ({} samples at {} pps); delivered {:.3} of {:.3} Mpps offered",
                l.path, l.chain, l.packet_size, l.p50_us, l.p99_us, l.latency_samples, l.rate_pps, l.delivered_mpps, l.offered_mpps
            );
        }
    }
    Ok(())
}
