//! `snic bench chain`: the latency of a sequence of NTs run as one chain, as two half chains,
//! and PANIC-style — the node's scheduler mode in which each packet returns to the central
//! scheduler after every NT (paper 000 Fig. 14); `split` is the same trips made by a DAG of
//! one-NT chains. Light load (no queueing), one core, real clock; latency from arrival in the
//! receive ring to transmission.

use super::{emit, paced_latency};
use crate::paced::{Paced, StreamSpec};
use crate::testbed::{datagram, one_tenant};
use anyhow::bail;
use clap::Args;
use serde::Serialize;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::node::NodeCoreConfig;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::NtSpec;
use snic_wire::ethernet::MacAddr;

/// Options of `snic bench chain`.
#[derive(Args)]
pub struct ChainArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// NT counts, comma-separated (each at least 2).
    #[arg(long, default_value = "2,3,4,5,6,7", value_delimiter = ',')]
    nts: Vec<usize>,
    /// Offered load, packets per second (light: the figure is the path, not queueing).
    #[arg(long, default_value_t = 200_000.0)]
    pps: f64,
    /// Measured seconds per case, after half a second of warm-up.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
}

#[derive(Serialize)]
struct ChainResult {
    bench: &'static str,
    nts: usize,
    mode: &'static str,
    chains: usize,
    /// Trips through the central scheduler per packet.
    visits: usize,
    p50_ns: u64,
    p99_ns: u64,
    delivered: u64,
}

/// Runs every NT count in every mode.
pub fn run(a: ChainArgs) -> anyhow::Result<()> {
    for &n in &a.nts {
        if n < 2 {
            bail!("--nts: a sequence needs at least 2 NTs (got {n})");
        }
        for mode in ["single", "half", "panic", "split"] {
            let r = case(&a, n, mode)?;
            emit(a.json, &r, |r| {
                format!("chain {} NTs {:<6} ({} chains): p50 {:>6} ns  p99 {:>6} ns", r.nts, r.mode, r.chains, r.p50_ns, r.p99_ns)
            })?;
        }
    }
    Ok(())
}

fn case(a: &ChainArgs, n: usize, mode: &'static str) -> anyhow::Result<ChainResult> {
    // How the n NTs are cut into chains.
    let sizes: Vec<usize> = match mode {
        "single" | "panic" => vec![n],
        "half" => vec![n / 2, n - n / 2],
        _ => vec![1; n],
    };
    let clock = MonotonicClock::default();
    let src = "192.0.2.1:4789".parse()?;
    let streams = vec![StreamSpec { datagram: datagram(100, 1000, 64), pps: a.pps, src }];
    let cfg =
        NodeConfig { core: NodeCoreConfig { panic: mode == "panic", ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, Paced::new(streams, 1024, Box::new(clock)), Box::new(clock))?;
    let mut steps = Vec::new();
    for &k in &sizes {
        let c = node.add_chain(vec![NtSpec::Dummy; k]);
        node.launch(c)?;
        steps.push(Step { chain: c, mask: NtMask::all(k) });
    }
    one_tenant(&mut node, DagRoute::new(steps), Peer { addr: "192.0.2.9:4789".parse()?, mac: MacAddr::default() });
    let (p50_ns, p99_ns, delivered) = paced_latency(&mut node, a.seconds);
    Ok(ChainResult {
        bench: "chain",
        nts: n,
        mode,
        chains: sizes.len(),
        visits: if mode == "panic" { n } else { sizes.len() },
        p50_ns,
        p99_ns,
        delivered,
    })
}
