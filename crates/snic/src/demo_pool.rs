//! `snic demo --pool`: three nodes in a pool on loopback, the two tenants of `snic demo`, and
//! what the pool does with them, printed as it happens. Needs no root and sends nothing beyond
//! 127.0.0.1.
//!
//! The nodes are child `snic run` processes of this binary (so what runs is the daemon an
//! operator runs, with its pool thread, gossip, remote launch, redirect and move back), each
//! with a config in a scratch directory; they are stopped by PID (SIGTERM, then SIGKILL) when
//! the demo ends, whichever way it ends. Node A has one region, B four, C two; all three are in
//! one pool (shared secret, A the seed). The phases, each reached by what the nodes report
//! (bounded waits), then held `--seconds`:
//!
//! 1. green's traffic holds A's only region;
//! 2. blue arrives: no room at A, so A asks a peer (B: the most free regions) to host blue's
//!    DAG and redirects blue's packets there; B runs blue's firewall and SNAT and delivers;
//! 3. green stops: A has room a whole MONITOR_PERIOD, blue's chain moves back to A with its
//!    NAT state (its packets wait for it), and A delivers blue again.
//!
//! The receivers count what each node delivered and check every packet was transformed as the
//! tenant's chain promises (blue's SNAT, green's VNI map).

use crate::client::call;
use crate::demo::{receiver, sender, Receiver, DEMO_MANIFEST, MAC_B, TENANTS};
use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The nodes: name and regions.
const NODES: [(&str, u32); 3] = [("A", 1), ("B", 4), ("C", 2)];

/// The longest the demo waits for a phase to be reached.
const PHASE_LIMIT: Duration = Duration::from_secs(30);

/// A node: a child `snic run`.
struct NodeProc {
    name: &'static str,
    regions: u32,
    child: Child,
    data: SocketAddr,
    pool: SocketAddr,
    api: String,
    /// Kept open: the node's stdout.
    _stdout: BufReader<ChildStdout>,
}

/// The three nodes and their scratch directory; stopping them (by PID) and removing it on drop.
struct Pool {
    dir: PathBuf,
    nodes: Vec<NodeProc>,
    /// Keep the directory (the nodes' logs) when the demo fails.
    keep: bool,
}

impl Drop for Pool {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            // SAFETY: sends SIGTERM to our own child process, not yet reaped.
            unsafe { libc::kill(n.child.id() as i32, libc::SIGTERM) };
        }
        for n in &mut self.nodes {
            let t0 = Instant::now();
            while matches!(n.child.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
        if self.keep {
            eprintln!("snic demo --pool: the nodes' logs are in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Pool {
    /// Starts the three nodes, B and C joining through A.
    fn start(dir: PathBuf) -> anyhow::Result<Pool> {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let secret = dir.join("pool.key");
        let mut key = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
            .map_err(|_| anyhow::anyhow!("no random bytes for the pool secret"))?;
        std::fs::write(&secret, key.iter().map(|b| format!("{b:02x}")).collect::<String>())?;
        let mut pool = Pool { dir, nodes: Vec::new(), keep: true };
        for (name, regions) in NODES {
            let seed = pool.nodes.first().map(|a| a.pool.to_string()).unwrap_or_default();
            let n = start_node(&pool.dir, name, regions, &seed, &secret)?;
            pool.nodes.push(n);
        }
        Ok(pool)
    }

    fn node(&self, name: &str) -> &NodeProc {
        self.nodes.iter().find(|n| n.name == name).expect("one of NODES")
    }

    /// The node that sent from `data`, by name.
    fn name_of(&self, data: &str) -> &'static str {
        self.nodes.iter().find(|n| n.data.to_string() == data).map_or("?", |n| n.name)
    }
}

fn start_node(dir: &Path, name: &'static str, regions: u32, seed: &str, secret: &Path) -> anyhow::Result<NodeProc> {
    let cfg = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &cfg,
        format!(
            "data: 127.0.0.1:0\napi: 127.0.0.1:0\nstate_dir: {}\nvtep_port: null\nregions: {regions}\n\
             elastic: {{enabled: true, autoscale: true, monitor_period_ms: 1000}}\n\
             pool:\n  listen: 127.0.0.1:0\n  secret_file: {}\n  seeds: [{seed}]\n",
            dir.join(name).display(),
            secret.display()
        ),
    )?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let exe = std::env::current_exe().context("finding this snic binary to start the nodes")?;
    let mut child = Command::new(exe)
        .args(["run", "--config"])
        .arg(&cfg)
        .args(["--log", "info"])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting node {name}"))?;
    let mut out = BufReader::new(child.stdout.take().context("the node's stdout")?);
    let mut line = String::new();
    out.read_line(&mut line)?;
    // "snic: data 127.0.0.1:P (VXLAN/UDP), api http://127.0.0.1:Q, state DIR, pool 127.0.0.1:R"
    let parsed = (|| {
        let data = line.split_whitespace().nth(2)?.parse().ok()?;
        let api = line.split_whitespace().find(|w| w.starts_with("http://"))?.trim_end_matches(',').to_string();
        let pool = line.split_once(", pool ")?.1.trim().parse().ok()?;
        Some((data, api, pool))
    })();
    let Some((data, api, pool)) = parsed else {
        let _ = child.kill();
        let _ = child.wait();
        let log = dir.join(format!("{name}.log"));
        let last = std::fs::read_to_string(&log).ok().and_then(|l| l.lines().last().map(String::from)).unwrap_or_default();
        bail!("node {name} did not start (it said {line:?}; its log ends {last:?}); its log: {}", log.display());
    };
    Ok(NodeProc { name, regions, child, data, pool, api, _stdout: out })
}

fn status(n: &NodeProc) -> anyhow::Result<Value> {
    call("GET", format!("{}/v1/status", n.api), None)
}

/// Elastic counter `name` in a status.
fn counter(v: &Value, name: &str) -> u64 {
    v["elastic"]["counters"].as_array().and_then(|c| c.iter().find(|c| c[0] == name)).and_then(|c| c[1].as_u64()).unwrap_or(0)
}

/// Blue's chain's redirect at the home node, if any: the peer's data address.
fn blue_redirect(v: &Value) -> Option<String> {
    v["redirects"].as_array()?.iter().find(|r| r["chain"].as_str().is_some_and(|c| c.starts_with("blue")))?["peer"]
        .as_str()
        .map(String::from)
}

fn runs(v: &Value, first_nt: &str) -> bool {
    v["regions"]["instances"].as_array().is_some_and(|r| r.iter().any(|r| r["state"] == "running" && r["chain"][0] == first_nt))
}

/// One tenant's endpoints: a sender to node A and a receiver.
struct Traffic {
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    recv: Arc<Receiver>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What the live view has printed so far.
struct Live {
    json: bool,
    t0: Instant,
    last: Instant,
    /// Per tenant: (sent, delivered by each node) at the last line.
    prev: Vec<(u64, Vec<u64>)>,
    /// A's events already printed: (ms, text).
    seen: Vec<(u64, String)>,
    /// Per node, the most packets seen on each of its redirects and hosted DAGs (a status
    /// shows only the current ones): summed for the summary.
    carried: Vec<std::collections::HashMap<String, u64>>,
}

impl Live {
    /// Reads every node's status (returned, in [`NODES`]' order), prints A's new events, and
    /// once a second a line per tenant: offered and delivered packets per second, by the node
    /// that delivered them.
    fn tick(&mut self, pool: &Pool, traffic: &[Option<Traffic>; 2], phase: &str) -> anyhow::Result<Vec<Value>> {
        let statuses = pool.nodes.iter().map(status).collect::<anyhow::Result<Vec<Value>>>()?;
        for (i, v) in statuses.iter().enumerate() {
            let entries = |k: &str, id: &dyn Fn(&Value) -> String| {
                v[k].as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| (format!("{k} {}", id(e)), e["packets"].as_u64().unwrap_or(0)))
                    .collect::<Vec<_>>()
            };
            let mut all = entries("redirects", &|e| format!("{} {}", e["chain"], e["peer"]));
            all.extend(entries("hosted", &|e| format!("{} {}", e["home"], e["route"])));
            for (k, p) in all {
                let m = self.carried[i].entry(k).or_default();
                *m = (*m).max(p);
            }
        }
        for e in statuses[0]["elastic"]["events"].as_array().into_iter().flatten() {
            let key =
                (e["at_ms"].as_u64().unwrap_or(0), format!("{} {}", e["chain"].as_str().unwrap_or(""), e["event"].as_str().unwrap_or("")));
            if self.seen.contains(&key) {
                continue;
            }
            if !self.json && (key.1.contains("peer") || key.1.contains("pool") || key.1.contains("context switch")) {
                let peer = |s: &str| {
                    pool.nodes.iter().fold(s.to_string(), |s, n| s.replace(&n.data.to_string(), &format!("{} ({})", n.name, n.data)))
                };
                println!(
                    "{:>6.1}  A: [{}] {}",
                    self.t0.elapsed().as_secs_f64(),
                    e["chain"].as_str().unwrap_or(""),
                    peer(e["event"].as_str().unwrap_or(""))
                );
            }
            self.seen.push(key);
        }
        if self.json || self.last.elapsed() < Duration::from_secs(1) {
            return Ok(statuses);
        }
        let dt = self.last.elapsed().as_secs_f64();
        self.last = Instant::now();
        for (i, t) in TENANTS.iter().enumerate() {
            let Some(tr) = &traffic[i] else { continue };
            let sent = tr.sent.load(Ordering::Relaxed);
            let by: Vec<u64> = tr.recv.by_source.iter().map(|(_, c)| c.load(Ordering::Relaxed)).collect();
            let (psent, pby) = &self.prev[i];
            let rates: Vec<String> =
                by.iter().zip(pby).zip(&pool.nodes).map(|((b, p), n)| format!("{} {:>6.0}", n.name, (b - p) as f64 / dt)).collect();
            println!(
                "{:>6.1}  {:<22} {:<5} offered {:>6.0}/s  delivered by {}",
                self.t0.elapsed().as_secs_f64(),
                phase,
                t.name,
                (sent - psent) as f64 / dt,
                rates.join("  ")
            );
            self.prev[i] = (sent, by);
        }
        Ok(statuses)
    }

    /// Ticks every 100 ms until `done` holds for A's status (or fails after [`PHASE_LIMIT`]).
    fn until(
        &mut self,
        pool: &Pool,
        traffic: &[Option<Traffic>; 2],
        phase: &str,
        mut done: impl FnMut(&Value) -> bool,
    ) -> anyhow::Result<()> {
        let t0 = Instant::now();
        while !done(&self.tick(pool, traffic, phase)?[0]) {
            if t0.elapsed() > PHASE_LIMIT {
                bail!("{phase}: not reached within {PHASE_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Ticks for `d`.
    fn hold(&mut self, pool: &Pool, traffic: &[Option<Traffic>; 2], phase: &str, d: Duration) -> anyhow::Result<()> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.tick(pool, traffic, phase)?;
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }
}

/// Starts tenant `i`'s sender (to node A) and receiver (counting by node).
fn start_traffic(i: usize, recv: UdpSocket, pool: &Pool, rate: u64) -> anyhow::Result<Traffic> {
    snic_dataplane::backend::udp::set_buffers(&recv, 4 << 20);
    let by_source = pool.nodes.iter().map(|n| (n.data, AtomicU64::new(0))).collect();
    let r = Arc::new(Receiver { by_source, ..Default::default() });
    let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    let a = pool.node("A").data;
    let until = Instant::now() + Duration::from_secs(3600);
    let (st, rr, st2, s2) = (stop.clone(), r.clone(), stop.clone(), sent.clone());
    let threads = vec![
        std::thread::spawn(move || receiver(recv, &TENANTS[i], st, rr)),
        std::thread::spawn(move || sender(sock, a, &TENANTS[i], rate, until, st2, s2)),
    ];
    Ok(Traffic { sent, stop, recv: r, threads })
}

#[derive(Serialize)]
struct NodeSummary {
    name: &'static str,
    data: String,
    pool: String,
    regions: u32,
    /// Packets of its own tenants it received and transmitted (a redirected packet counts as
    /// transmitted at home), and dropped with reasons.
    rx_packets: u64,
    tx_packets: u64,
    dropped_packets: u64,
    /// Packets it redirected to peers, and received for DAGs it hosted for peers, as its
    /// status showed them (sampled every 100 ms: a redirect's last packets before it ends can
    /// be missed; the tenants' figures are exact).
    redirected_packets_seen: u64,
    hosted_packets_seen: u64,
    remote_launches: u64,
    moves_back: u64,
}

#[derive(Serialize)]
struct TenantSummary {
    name: &'static str,
    sent_packets: u64,
    /// Sent to be denied by the tenant's own firewall (blue's TCP to port 22, one in ten).
    denied_by_policy: u64,
    delivered_packets: u64,
    /// Delivered packets by the node that delivered them.
    delivered_by: Vec<(&'static str, u64)>,
    /// Sent, not denied by policy, not delivered (lost in a socket or by the pool).
    lost_packets: u64,
    /// Delivered without the transformation the tenant's chain promises.
    unverified_packets: u64,
}

#[derive(Serialize)]
struct Summary {
    seconds: f64,
    /// The node blue's chain was launched on, and whether it moved back to A.
    blue_placed_on: Option<&'static str>,
    blue_moved_back: bool,
    /// How long blue's packets waited for its state at the move back (A's measure).
    move_back_pause_us: Option<f64>,
    nodes: Vec<NodeSummary>,
    tenants: Vec<TenantSummary>,
}

/// Runs the pool demo: phases held `seconds` each, `rate` packets/s per tenant.
pub fn run(seconds: u64, rate: u64, json: bool) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("snic-demo-pool-{}", std::process::id()));
    let mut pool = Pool::start(dir)?;
    let hold = Duration::from_secs(seconds);
    if !json {
        println!("snic demo --pool: three nodes on loopback (child `snic run` processes), {rate} pkt/s offered per tenant");
        for n in &pool.nodes {
            println!("  node {}: {} region(s), data {}, pool {}, api {}", n.name, n.regions, n.data, n.pool, n.api);
        }
        println!("  tenants of examples/demo.yaml, applied to A: blue [firewall → NAT], green [counter → VNI map]\n");
    }
    let mut live = Live {
        json,
        t0: Instant::now(),
        last: Instant::now(),
        prev: vec![(0, vec![0; 3]); 2],
        seen: Vec::new(),
        carried: vec![Default::default(); 3],
    };
    let mut traffic: [Option<Traffic>; 2] = [None, None];
    let result = (|| -> anyhow::Result<Summary> {
        live.until(&pool, &traffic, "forming the pool", |a| {
            let m = a["pool"]["members"].as_array().cloned().unwrap_or_default();
            m.len() == 2 && m.iter().all(|m| m["free_regions"].as_u64() >= Some(1))
        })?;
        // Routes to the in-process receivers (their ports are the OS's choice).
        let socks = [UdpSocket::bind("127.0.0.1:0")?, UdpSocket::bind("127.0.0.1:0")?];
        let route = |name: &str, vni: u32, s: &UdpSocket| -> anyhow::Result<String> {
            Ok(format!(
                "apiVersion: snic/v1\nkind: Route\nmetadata: {{name: {name}}}\nspec: {{vni: {vni}, mac: '{MAC_B}', vtep: '{}'}}\n",
                s.local_addr()?
            ))
        };
        let all = format!("{DEMO_MANIFEST}\n---\n{}---\n{}", route("blue-b", 100, &socks[0])?, route("green-g", 300, &socks[1])?);
        let green: Vec<&str> = all.split("\n---\n").filter(|d| d.contains("green")).collect();
        let a = pool.node("A");
        call("POST", format!("{}/v1/apply", a.api), Some(green.join("\n---\n")))?;
        let [bs, gs] = socks;
        traffic[1] = Some(start_traffic(1, gs, &pool, rate)?);
        live.until(&pool, &traffic, "green takes A's region", |a| runs(a, "green/green-counter"))?;
        live.hold(&pool, &traffic, "green holds A", hold)?;
        call("POST", format!("{}/v1/apply", a.api), Some(all.clone()))?;
        traffic[0] = Some(start_traffic(0, bs, &pool, rate)?);
        let mut placed = None;
        live.until(&pool, &traffic, "blue: no room at A", |a| {
            placed = blue_redirect(a);
            placed.is_some()
        })?;
        let placed_on = placed.as_deref().map(|d| pool.name_of(d));
        live.hold(&pool, &traffic, "blue redirected", hold)?;
        if let Some(g) = &traffic[1] {
            g.stop.store(true, Ordering::Relaxed);
        }
        let moved = |v: &Value| {
            v["elastic"]["events"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["event"].as_str().is_some_and(|s| s.starts_with("moved back")))
                .cloned()
        };
        live.until(&pool, &traffic, "green stopped, waiting", |a| moved(a).is_some())?;
        live.hold(&pool, &traffic, "blue home again", hold)?;
        // The senders stop; what is in flight drains (at most 2 s).
        for t in traffic.iter().flatten() {
            t.stop.store(true, Ordering::Relaxed);
        }
        let delivered = |t: &[Option<Traffic>; 2]| t.iter().flatten().map(|t| t.recv.packets.load(Ordering::Relaxed)).sum::<u64>();
        let t0 = Instant::now();
        let mut last = delivered(&traffic);
        while t0.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(200));
            let now = delivered(&traffic);
            if now == last {
                break;
            }
            last = now;
        }
        let statuses = live.tick(&pool, &traffic, "drained")?;
        let pause = moved(&statuses[0]).and_then(|e| e["took_us"].as_f64());
        let mut nodes = Vec::new();
        for (i, (n, v)) in pool.nodes.iter().zip(&statuses).enumerate() {
            let carried = |k: &str| live.carried[i].iter().filter(|(key, _)| key.starts_with(k)).map(|(_, p)| p).sum::<u64>();
            let sum = |f: &dyn Fn(&Value) -> u64| v["tenants"].as_array().into_iter().flatten().map(|t| f(&t["stats"])).sum::<u64>();
            let drops = |s: &Value| s["drops"].as_array().into_iter().flatten().filter_map(|d| d[1].as_u64()).sum::<u64>();
            nodes.push(NodeSummary {
                name: n.name,
                data: n.data.to_string(),
                pool: n.pool.to_string(),
                regions: n.regions,
                rx_packets: sum(&|s| s["rx_packets"].as_u64().unwrap_or(0)),
                tx_packets: sum(&|s| s["tx_packets"].as_u64().unwrap_or(0)),
                dropped_packets: sum(&drops),
                redirected_packets_seen: carried("redirects"),
                hosted_packets_seen: carried("hosted"),
                remote_launches: counter(v, "remote_launches"),
                moves_back: counter(v, "moves_back"),
            });
        }
        let tenants = TENANTS
            .iter()
            .zip(&traffic)
            .filter_map(|(t, tr)| tr.as_ref().map(|tr| (t, tr)))
            .map(|(t, tr)| {
                let sent = tr.sent.load(Ordering::Relaxed);
                let denied = if t.name == "blue" { sent / 10 } else { 0 };
                let delivered = tr.recv.packets.load(Ordering::Relaxed);
                TenantSummary {
                    name: t.name,
                    sent_packets: sent,
                    denied_by_policy: denied,
                    delivered_packets: delivered,
                    delivered_by: pool
                        .nodes
                        .iter()
                        .zip(&tr.recv.by_source)
                        .map(|(n, (_, c))| (n.name, c.load(Ordering::Relaxed)))
                        .collect(),
                    lost_packets: sent.saturating_sub(denied + delivered),
                    unverified_packets: tr.recv.wrong.load(Ordering::Relaxed),
                }
            })
            .collect();
        let blue_moved_back = nodes[0].moves_back > 0;
        Ok(Summary {
            seconds: live.t0.elapsed().as_secs_f64(),
            blue_placed_on: placed_on,
            blue_moved_back,
            move_back_pause_us: pause,
            nodes,
            tenants,
        })
    })();
    for t in traffic.iter_mut().flatten() {
        t.stop.store(true, Ordering::Relaxed);
        for h in t.threads.drain(..) {
            let _ = h.join();
        }
    }
    let summary = result?;
    pool.keep = false;
    if json {
        println!("{}", serde_json::to_string(&summary)?);
        return Ok(());
    }
    println!("\nsummary after {:.1} s:", summary.seconds);
    println!(
        "  blue's chain ran on {} while A had no room; moved back to A: {}{}",
        summary.blue_placed_on.unwrap_or("-"),
        if summary.blue_moved_back { "yes" } else { "no" },
        summary.move_back_pause_us.map_or(String::new(), |p| format!(" (its packets waited {:.2} ms for its state)", p / 1000.0))
    );
    for n in &summary.nodes {
        println!(
            "  node {}  rx {:>8}  tx {:>8}  dropped {:>6}  redirected ~{:>8}  hosted ~{:>8}  remote launches {}  moves back {}",
            n.name,
            n.rx_packets,
            n.tx_packets,
            n.dropped_packets,
            n.redirected_packets_seen,
            n.hosted_packets_seen,
            n.remote_launches,
            n.moves_back
        );
    }
    for t in &summary.tenants {
        let by: Vec<String> = t.delivered_by.iter().map(|(n, c)| format!("{n} {c}")).collect();
        println!(
            "  {:<5} sent {:>8}  denied by its firewall {:>6}  delivered {:>8} (by {})  lost {}  unverified {}",
            t.name,
            t.sent_packets,
            t.denied_by_policy,
            t.delivered_packets,
            by.join(", "),
            t.lost_packets,
            t.unverified_packets
        );
    }
    Ok(())
}
