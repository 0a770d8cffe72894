//! `snic bench launch`: what launching a chain instance costs — instantiating its NTs (tables
//! allocated and zeroed, keys expanded) and handing the region to the scheduler; the software
//! analogue of partial reconfiguration (paper: ~5 ms per region).

use super::{chain_specs, emit};
use clap::Args;
use serde::Serialize;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::{Node, NodeConfig};
use std::time::Instant;

/// Options of `snic bench launch`.
#[derive(Args)]
pub struct LaunchArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Launches measured per chain (the median is reported).
    #[arg(long, default_value_t = 21)]
    runs: usize,
}

#[derive(Serialize)]
struct LaunchResult {
    bench: &'static str,
    chain: &'static str,
    nts: usize,
    p50_ns: u64,
    max_ns: u64,
    runs: usize,
}

/// Measures the dummy and vpc chains of `snic bench dataplane`.
pub fn run(a: LaunchArgs) -> anyhow::Result<()> {
    for chain in ["dummy", "vpc"] {
        let specs = chain_specs(chain, 100)?;
        let mut node = Node::new(NodeConfig::default(), MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default()))?;
        let c = node.add_chain(specs.clone());
        node.launch(c)?; // warm the allocator
        let mut t: Vec<u64> = (0..a.runs.max(1))
            .map(|_| {
                let t0 = Instant::now();
                node.launch(c).map(|_| t0.elapsed().as_nanos() as u64)
            })
            .collect::<Result<_, _>>()?;
        t.sort_unstable();
        let r = LaunchResult { bench: "launch", chain, nts: specs.len(), p50_ns: t[t.len() / 2], max_ns: t[t.len() - 1], runs: t.len() };
        emit(a.json, &r, |r| format!("launch {:<6} ({} NTs): p50 {:>9} ns  max {:>9} ns", r.chain, r.nts, r.p50_ns, r.max_ns))?;
    }
    Ok(())
}
