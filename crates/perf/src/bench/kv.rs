//! `snic bench kv`: the YCSB-style driver over memcached UDP against a server, directly or
//! through snic (`scripts/bench-kv.sh` builds the namespaces, the server and the node, and
//! runs this in the client's namespace once per path).

use crate::kv::{self, Client, Workload};
use anyhow::Context;
use clap::Args;
use serde::Serialize;
use std::net::SocketAddr;

/// Options of `snic bench kv`.
#[derive(Args)]
pub struct KvArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// The memcached server's UDP address.
    #[arg(long)]
    server: SocketAddr,
    /// YCSB workloads to run, in order: A (50% reads), B (95%), C (100%).
    #[arg(long, default_value = "C", value_delimiter = ',')]
    workload: Vec<char>,
    /// What the traffic goes through, as the report names it: direct, snic, snic-cache,
    /// snic-replicate.
    #[arg(long, default_value = "direct")]
    path: String,
    /// Keys in the key space.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Zipfian constant of the key popularity.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Smallest value, bytes.
    #[arg(long, default_value_t = 100)]
    value_min: usize,
    /// Largest value, bytes.
    #[arg(long, default_value_t = 4096)]
    value_max: usize,
    /// Requests kept in flight.
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// Seconds of each run phase.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Operations at most in each run phase.
    #[arg(long, default_value_t = 10_000_000)]
    max_ops: u64,
    /// Skip the load phase (the server already holds the keys).
    #[arg(long)]
    no_load: bool,
    /// Seed of the operation stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The client writes its copies itself: every write to each of these servers (done when
    /// all answered), reads to one in turn. The load phase goes to `--server` and each of them.
    #[arg(long, value_delimiter = ',')]
    replicas: Vec<SocketAddr>,
    /// Do not report a hit rate (the reads do not all go to `--server`: replication spreads
    /// them over the replicas).
    #[arg(long)]
    no_hit_rate: bool,
}

#[derive(Serialize)]
struct Line<'a> {
    bench: &'static str,
    workload: String,
    path: &'a str,
    ops_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    /// Reads answered without reaching the server (from the server's `cmd_get` count).
    hit_rate: Option<f64>,
    client_bytes_per_op: f64,
    ops: u64,
    lost: u64,
    errors: u64,
    read_misses: u64,
    keys: u64,
    value_min: usize,
    value_max: usize,
    window: usize,
}

fn cmd_get(c: &mut Client) -> anyhow::Result<u64> {
    let s = c.stats().context("reading the server's stats")?;
    s.get("cmd_get").and_then(|v| v.parse().ok()).context("the server's stats have no cmd_get")
}

/// Runs the bench.
pub fn run(a: &KvArgs) -> anyhow::Result<()> {
    let mut c = Client::connect(a.server)?;
    let base = Workload { keys: a.keys, zipf: a.zipf, read_share: 1.0, value_min: a.value_min, value_max: a.value_max, seed: a.seed };
    anyhow::ensure!(a.value_min <= a.value_max && a.keys > 0 && a.window > 0, "need value_min <= value_max, keys > 0, window > 0");
    if !a.no_load {
        let mut stored = kv::load(&mut c, &base, a.window)?;
        for r in a.replicas.iter().filter(|r| **r != a.server) {
            stored += kv::load(&mut Client::connect(*r)?, &base, a.window)?;
        }
        if !a.json {
            println!("load: {stored} sets stored");
        }
    }
    for &wl in &a.workload {
        let w = Workload { read_share: kv::read_share(wl)?, ..base.clone() };
        let before = cmd_get(&mut c)?;
        let r = kv::run(&mut c, &w, a.window, a.seconds, a.max_ops, &a.replicas)?;
        // The stats request itself is not a get; every read the server saw is (a lost read
        // the server answered counts there and not here: `lost` says how many).
        let server_gets = cmd_get(&mut c)? - before;
        let reads = r.reads.max(1) as f64;
        let line = Line {
            bench: "kv",
            workload: wl.to_string(),
            path: &a.path,
            ops_per_s: r.ops_per_s,
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            hit_rate: (!a.no_hit_rate).then(|| (1.0 - server_gets as f64 / reads).clamp(0.0, 1.0)),
            client_bytes_per_op: r.client_bytes_per_op,
            ops: r.ops,
            lost: r.lost,
            errors: r.errors,
            read_misses: r.read_misses,
            keys: a.keys,
            value_min: a.value_min,
            value_max: a.value_max,
            window: a.window,
        };
        if a.json {
            println!("{}", serde_json::to_string(&line)?);
        } else {
            println!(
                "kv {wl} via {}: {:.0} ops/s, p50 {} µs, p99 {} µs, hit rate {}, {:.0} client bytes/op ({} lost, {} errors)",
                a.path,
                line.ops_per_s,
                line.p50_us,
                line.p99_us,
                line.hit_rate.map_or("-".into(), |h| format!("{h:.3}")),
                line.client_bytes_per_op,
                line.lost,
                line.errors
            );
        }
    }
    Ok(())
}

/// Options of `snic bench kv-policy`.
#[derive(Args)]
pub struct KvPolicyArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Cache sizes, bytes.
    #[arg(long, default_value = "1048576,4194304,16777216,67108864", value_delimiter = ',')]
    bytes: Vec<usize>,
    /// YCSB workloads.
    #[arg(long, default_value = "A,B,C", value_delimiter = ',')]
    workload: Vec<char>,
    /// Keys in the key space.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Operations replayed per case (after as many to warm the cache).
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Smallest value, bytes.
    #[arg(long, default_value_t = 100)]
    value_min: usize,
    /// Largest value, bytes.
    #[arg(long, default_value_t = 4096)]
    value_max: usize,
}

#[derive(Serialize)]
struct PolicyLine {
    bench: &'static str,
    workload: String,
    policy: &'static str,
    cache_bytes: usize,
    hit_rate: f64,
    reads: u64,
}

/// `snic bench kv-policy`: the `kv_cache`'s two eviction policies on the same stream of
/// operations, as the NT uses its cache (a read that misses fills; a write writes through),
/// without the network: their hit rates, deterministic.
pub fn run_policy(a: &KvPolicyArgs) -> anyhow::Result<()> {
    use snic_nt::kv::cache::{Cache, Policy};
    for &wl in &a.workload {
        let w =
            Workload { keys: a.keys, zipf: 0.99, read_share: kv::read_share(wl)?, value_min: a.value_min, value_max: a.value_max, seed: 1 };
        for &bytes in &a.bytes {
            for (name, policy) in [("fifo", Policy::Fifo), ("clock", Policy::Clock)] {
                let mut cache = Cache::new(bytes, policy);
                let mut ops = kv::Ops::new(&w)?;
                let (mut reads, mut hits) = (0u64, 0u64);
                for i in 0..2 * a.ops {
                    let (read, k) = ops.draw();
                    let key = kv::key(k);
                    let measured = i >= a.ops;
                    if read && cache.get(&key, 0).is_some() {
                        hits += measured as u64;
                    } else {
                        let v = kv::value(&mut ops.rng, &w, k);
                        cache.insert(&key, 0, &v, u64::MAX, true);
                    }
                    reads += (read && measured) as u64;
                }
                let line = PolicyLine {
                    bench: "kv-policy",
                    workload: wl.to_string(),
                    policy: name,
                    cache_bytes: bytes,
                    hit_rate: hits as f64 / reads.max(1) as f64,
                    reads,
                };
                if a.json {
                    println!("{}", serde_json::to_string(&line)?);
                } else {
                    println!("kv-policy {wl} {name:>5} {:>9} B: hit rate {:.3}", bytes, line.hit_rate);
                }
            }
        }
    }
    Ok(())
}
