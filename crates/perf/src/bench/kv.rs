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
    hit_rate: f64,
    client_bytes_per_op: f64,
    ops: u64,
    lost: u64,
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
        let stored = kv::load(&mut c, &base, a.window)?;
        if !a.json {
            println!("load: {stored} of {} keys stored", a.keys);
        }
    }
    for &wl in &a.workload {
        let w = Workload { read_share: kv::read_share(wl)?, ..base.clone() };
        let before = cmd_get(&mut c)?;
        let r = kv::run(&mut c, &w, a.window, a.seconds, a.max_ops)?;
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
            hit_rate: (1.0 - server_gets as f64 / reads).clamp(0.0, 1.0),
            client_bytes_per_op: r.client_bytes_per_op,
            ops: r.ops,
            lost: r.lost,
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
                "kv {wl} via {}: {:.0} ops/s, p50 {} µs, p99 {} µs, hit rate {:.3}, {:.0} client bytes/op ({} lost)",
                a.path, line.ops_per_s, line.p50_us, line.p99_us, line.hit_rate, line.client_bytes_per_op, line.lost
            );
        }
    }
    Ok(())
}
