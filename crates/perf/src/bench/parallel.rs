//! `snic bench parallel`: NT-level parallelism (paper 000 §4.2, Fig. 15) — the latency of 1..6
//! independent NTs run all in parallel (one fork/join group, each NT its own chain), half in
//! parallel (groups of two, one after another) and sequentially (one chain). The NTs are
//! synthetic with a fixed cost, so parallel branches save time only when their regions run on
//! different cores: `--workers` spreads the regions over worker threads (with 0, every region
//! runs on the dispatcher's core and the figure is fork/join's overhead). Light load, real
//! clock; latency from arrival in the receive ring to transmission.

use super::{emit, paced_latency};
use crate::paced::{Paced, StreamSpec};
use crate::testbed::{datagram, one_tenant};
use anyhow::bail;
use clap::Args;
use serde::Serialize;
use snic_core::dag::{DagRoute, NtMask, Step, MAX_BRANCHES};
use snic_core::node::NodeCoreConfig;
use snic_dataplane::node::{MonotonicClock, Place};
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;

/// Options of `snic bench parallel`.
#[derive(Args)]
pub struct ParallelArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// NT counts, comma-separated (1..=8).
    #[arg(long, default_value = "1,2,3,4,5,6", value_delimiter = ',')]
    nts: Vec<usize>,
    /// Cost of each NT per packet, ns (busy work).
    #[arg(long, default_value_t = 5000)]
    cost_ns: u64,
    /// Worker threads (0: every region on the dispatcher's core). Regions take turns: the
    /// dispatcher's core, then each worker — so with one worker on a two-core machine, the two
    /// branches of a group run on different cores.
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Offered load, packets per second (light: the figure is the path, not queueing).
    #[arg(long, default_value_t = 20_000.0)]
    pps: f64,
    /// Measured seconds per case, after half a second of warm-up.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
}

#[derive(Serialize)]
struct ParallelResult {
    bench: &'static str,
    nts: usize,
    mode: &'static str,
    workers: usize,
    cost_ns: u64,
    /// Stages a packet goes through one after another.
    stages: usize,
    p50_ns: u64,
    p99_ns: u64,
    delivered: u64,
}

/// Runs every NT count in every mode.
pub fn run(a: ParallelArgs) -> anyhow::Result<()> {
    for &n in &a.nts {
        if !(1..=MAX_BRANCHES).contains(&n) {
            bail!("--nts: 1 to {MAX_BRANCHES} NTs (got {n})");
        }
        for mode in ["parallel", "half", "sequential"] {
            let r = case(&a, n, mode)?;
            emit(a.json, &r, |r| {
                format!(
                    "parallel {} NTs {:<10} ({} stages, {} workers): p50 {:>7} ns  p99 {:>7} ns",
                    r.nts, r.mode, r.stages, r.workers, r.p50_ns, r.p99_ns
                )
            })?;
        }
    }
    Ok(())
}

fn case(a: &ParallelArgs, n: usize, mode: &'static str) -> anyhow::Result<ParallelResult> {
    // Stages of the n NTs: each stage's NTs run in parallel.
    let stages: Vec<usize> = match mode {
        "parallel" => vec![n],
        "half" => (0..n).step_by(2).map(|i| (n - i).min(2)).collect(),
        _ => vec![1; n],
    };
    let clock = MonotonicClock::default();
    let src = "192.0.2.1:4789".parse()?;
    let streams = vec![StreamSpec { datagram: datagram(100, 1000, 64), pps: a.pps, src }];
    let cfg =
        NodeConfig { core: NodeCoreConfig { workers: a.workers, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, Paced::new(streams, 1024, Box::new(clock)), Box::new(clock))?;
    // Region k runs on the dispatcher (k = 0 mod workers+1) or on a worker.
    let mut next = 0usize;
    let mut place = || {
        let p = match next % (a.workers + 1) {
            0 => Place::Dispatcher,
            w => Place::Worker(w - 1),
        };
        next += 1;
        p
    };
    let nt = NtSpec::Synthetic(SyntheticConfig::costing(a.cost_ns));
    let (mut steps, mut groups) = (Vec::new(), Vec::new());
    if mode == "sequential" {
        // The best a sequence does: one chain, one region visit.
        let c = node.add_chain(vec![nt; n]);
        node.launch_on(c, place())?;
        steps.push(Step { chain: c, mask: NtMask::all(n) });
    } else {
        for &k in &stages {
            let start = steps.len();
            for _ in 0..k {
                let c = node.add_chain(vec![nt.clone()]);
                node.launch_on(c, place())?;
                steps.push(Step { chain: c, mask: NtMask::all(1) });
            }
            if k > 1 {
                groups.push((start, steps.len()));
            }
        }
    }
    one_tenant(&mut node, DagRoute::with_groups(steps, &groups)?, Peer { addr: "192.0.2.9:4789".parse()?, ..Default::default() });
    let (p50_ns, p99_ns, delivered) = paced_latency(&mut node, a.seconds);
    Ok(ParallelResult {
        bench: "parallel",
        nts: n,
        mode,
        workers: a.workers,
        cost_ns: a.cost_ns,
        stages: if mode == "sequential" { n } else { stages.len() },
        p50_ns,
        p99_ns,
        delivered,
    })
}
