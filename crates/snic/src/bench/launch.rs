//! `snic bench launch`: what launching a chain instance costs — instantiating its NTs (tables
//! allocated and zeroed, keys expanded) and handing the region to the scheduler; the software
//! analogue of partial reconfiguration (paper: ~5 ms per region) — and what a packet waits when
//! its chain is not running: launched on demand into a free region, launched by stop-and-launch
//! in the only region (the running chain stops, saves its NTs' state, and goes), or resumed from
//! the victim cache. Each case is timed from the packet's arrival to its transmission, on a
//! node with one region (two for on-demand) and an emulated reconfiguration delay (`--delay-ms`,
//! default 0: the software's own cost).

use super::{chain_specs, emit};
use clap::Args;
use serde::Serialize;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{ChainId, DagUid, TenantId};
use snic_core::mat::Mat;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::elastic::ElasticConfig;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::store::Peer;
use snic_dataplane::testbed::{dag_rule, datagram};
use snic_dataplane::{Node, NodeConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `snic bench launch`.
#[derive(Args)]
pub struct LaunchArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Launches measured per chain (the median is reported).
    #[arg(long, default_value_t = 21)]
    runs: usize,
    /// Emulated reconfiguration delay per launch, in ms (5 reproduces the paper's PR).
    #[arg(long, default_value_t = 0.0)]
    delay_ms: f64,
}

#[derive(Serialize)]
struct LaunchResult {
    bench: &'static str,
    /// `build` (the NTs alone), `warm` (a packet through the running chain), `on_demand`,
    /// `context_switch`, `victim_resume` (a packet whose chain was not running).
    case: &'static str,
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
        let t: Vec<u64> = (0..a.runs.max(1))
            .map(|_| {
                let t0 = Instant::now();
                node.launch(c).map(|_| t0.elapsed().as_nanos() as u64)
            })
            .collect::<Result<_, _>>()?;
        report(a.json, "build", chain, specs.len(), t)?;
        packet_cases(&a, chain)?;
    }
    Ok(())
}

fn report(json: bool, case: &'static str, chain: &'static str, nts: usize, mut t: Vec<u64>) -> anyhow::Result<()> {
    t.sort_unstable();
    let r = LaunchResult { bench: "launch", case, chain, nts, p50_ns: t[t.len() / 2], max_ns: t[t.len() - 1], runs: t.len() };
    emit(json, &r, |r| format!("launch {:<14} {:<6} ({} NTs): p50 {:>9} ns  max {:>9} ns", r.case, r.chain, r.nts, r.p50_ns, r.max_ns))
}

/// A node with `regions` regions and two chains of kind `chain` (VNI 100 → chain 0, VNI 101 →
/// chain 1, both tenant 1), nothing launched.
fn elastic_node(chain: &str, regions: usize, delay_ms: f64) -> anyhow::Result<(Node<MemPort>, [ChainId; 2])> {
    let elastic = ElasticConfig { regions, launch_delay: Duration::from_secs_f64(delay_ms / 1e3), ..Default::default() };
    let cfg = NodeConfig { vtep_port: None, elastic, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default()))?;
    let mut mat = Mat::new();
    let mut ids = [ChainId(0); 2];
    for (i, id) in ids.iter_mut().enumerate() {
        let specs = chain_specs(chain, 100)?;
        let n = specs.len();
        *id = node.add_chain(specs);
        let (vni, dag) = (100 + i as u32, DagUid(1 + i as u32));
        node.set_dag(dag, DagRoute::new(vec![Step { chain: *id, mask: NtMask::all(n) }]));
        mat.insert(dag_rule(vni, TenantId(1), dag));
        node.fdb_mut().set_default(vni, Some(Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), ..Default::default() }));
    }
    node.mat_handle().store(Arc::new(mat));
    node.set_tenant(TenantId(1), 1.0);
    Ok((node, ids))
}

/// One packet of chain `i` in, polled until it is out: the time it took, ns.
fn one_packet(node: &mut Node<MemPort>, i: usize) -> anyhow::Result<u64> {
    let pkt = datagram(100 + i as u32, 1000, 64);
    let src = SocketAddr::from(([192, 0, 2, 1], 4789));
    node.backend_mut().tx.clear();
    let t0 = Instant::now();
    node.backend_mut().rx.push_back((pkt, src));
    while node.backend().tx.is_empty() {
        node.poll();
        anyhow::ensure!(t0.elapsed() < Duration::from_secs(5), "a packet did not come out within 5 s");
    }
    Ok(t0.elapsed().as_nanos() as u64)
}

/// Polls for `d` with no traffic (epochs run; an idle chain is descheduled after a whole
/// MONITOR_PERIOD).
fn idle(node: &mut Node<MemPort>, d: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < d {
        node.poll();
    }
}

fn packet_cases(a: &LaunchArgs, chain: &'static str) -> anyhow::Result<()> {
    let runs = a.runs.max(1);
    let nts = chain_specs(chain, 100)?.len();
    let (mut warm, mut on_demand, mut switch, mut resume) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        // On demand into a free region.
        let (mut node, _) = elastic_node(chain, 2, a.delay_ms)?;
        on_demand.push(one_packet(&mut node, 0)?);
        // One region: chain 0 runs; a packet for chain 1 stops it (stop-and-launch); then
        // chain 1 idles into a victim and is resumed; then chain 0 comes back by evicting it.
        let (mut node, _) = elastic_node(chain, 1, a.delay_ms)?;
        one_packet(&mut node, 0)?;
        warm.push(one_packet(&mut node, 0)?);
        switch.push(one_packet(&mut node, 1)?);
        let period = node.elastic().monitor_period();
        idle(&mut node, period * 2);
        anyhow::ensure!(node.elastic().stats().deschedules > 0, "the idle chain was not descheduled");
        resume.push(one_packet(&mut node, 1)?);
        anyhow::ensure!(node.elastic().stats().resumes > 0, "no victim hit");
        idle(&mut node, period * 2);
        switch.push(one_packet(&mut node, 0)?);
    }
    report(a.json, "warm", chain, nts, warm)?;
    report(a.json, "on_demand", chain, nts, on_demand)?;
    report(a.json, "context_switch", chain, nts, switch)?;
    report(a.json, "victim_resume", chain, nts, resume)
}
