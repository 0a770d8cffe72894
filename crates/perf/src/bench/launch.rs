//! `snic bench launch`: what launching a chain instance costs — instantiating its NTs (tables
//! allocated and zeroed, keys expanded) and handing the region to the scheduler; the software
//! analogue of partial reconfiguration (paper: ~5 ms per region) — and what a packet waits when
//! its chain is not running: launched on demand into a free region, launched by stop-and-launch
//! in the only region (the running chain stops, saves its NTs' state, and goes), or resumed from
//! the victim cache. Each case is timed from the packet's arrival to its transmission, on a
//! node with one region (two for on-demand) and an emulated reconfiguration delay (`--delay-ms`,
//! default 0: the software's own cost).
//!
//! And what switching a DAG between chain candidates costs (`snic_core::rechain`): the vpc
//! chain's NTs as one chain each (the planned form, one region per NT) and as one compact
//! chain. `rechain_compact` / `rechain_expand` time a packet that arrives just as the switch
//! starts: held until the old route is empty, the old chains stopped and their NTs' state
//! moved, the new form's chains launched on demand, then through them; `warm_planned` and
//! `warm_compact` a packet through each form once it runs.

use super::{chain_specs, emit};
use crate::testbed::{dag_rule, datagram};
use clap::Args;
use serde::Serialize;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::{ChainId, DagUid, TenantId};
use snic_core::mat::Mat;
use snic_core::node::NodeCoreConfig;
use snic_core::rechain::Form;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::elastic::ElasticConfig;
use snic_dataplane::node::MonotonicClock;
use snic_dataplane::store::Peer;
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
    /// `context_switch`, `victim_resume` (a packet whose chain was not running), and for the
    /// vpc chain `warm_planned`, `warm_compact`, `rechain_compact`, `rechain_expand`.
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
    rechain_cases(&a, "vpc")
}

/// Switches DAG 1 of a node built by [`split_node`] to `to` as a packet arrives; the time until
/// that packet is out through the new form.
fn switch_with_packet(node: &mut Node<MemPort>, to: Form) -> anyhow::Result<u64> {
    let t0 = Instant::now();
    anyhow::ensure!(node.switch_form(DagUid(1), to), "the DAG could not switch to {to:?}");
    let t = out_since(node, 0, t0)?;
    anyhow::ensure!(
        node.core().dags().form(DagUid(1)) == Some(to) && !node.core().dags().is_switching(DagUid(1)),
        "the switch did not complete: {:?} {:?}",
        node.core().dags().form(DagUid(1)),
        node.core().events().events
    );
    Ok(t)
}

/// A node whose DAG 1 (VNI 100) runs `chain`'s NTs one chain each, with the compact form of
/// them all; one region per NT.
fn split_node(chain: &str, delay_ms: f64) -> anyhow::Result<Node<MemPort>> {
    let specs = chain_specs(chain, 100)?;
    // The switches are the bench's, not the policy's.
    let elastic =
        ElasticConfig { regions: specs.len(), launch_delay: Duration::from_secs_f64(delay_ms / 1e3), rechain: false, ..Default::default() };
    let cfg = NodeConfig { core: NodeCoreConfig { elastic, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(MonotonicClock::default()))?;
    let steps = specs.iter().map(|s| Step { chain: node.add_chain(vec![s.clone()]), mask: NtMask::all(1) }).collect();
    node.set_dag(DagUid(1), DagRoute::new(steps));
    let names: Vec<String> = specs.iter().map(|s| s.kind().to_string()).collect();
    node.set_compact_form(DagUid(1), specs, &names)?;
    let mut mat = Mat::new();
    mat.insert(dag_rule(100, TenantId(1), DagUid(1)));
    node.mat_handle().store(Arc::new(mat));
    node.fdb_mut().set_default(100, Some(Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), ..Default::default() }));
    node.set_tenant(TenantId(1), 1.0);
    Ok(node)
}

fn rechain_cases(a: &LaunchArgs, chain: &'static str) -> anyhow::Result<()> {
    let nts = chain_specs(chain, 100)?.len();
    let (mut planned, mut compact, mut to_compact, mut to_planned) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..a.runs.max(1) {
        let mut node = split_node(chain, a.delay_ms)?;
        one_packet(&mut node, 0)?; // launches the planned chains on demand
                                   // (Each measurement after an empty poll, which runs any epoch that fell due meanwhile.)
        node.poll();
        planned.push(one_packet(&mut node, 0)?);
        node.poll();
        to_compact.push(switch_with_packet(&mut node, Form::Compact)?);
        node.poll();
        compact.push(one_packet(&mut node, 0)?);
        node.poll();
        to_planned.push(switch_with_packet(&mut node, Form::Planned)?);
    }
    report(a.json, "warm_planned", chain, nts, planned)?;
    report(a.json, "warm_compact", chain, nts, compact)?;
    report(a.json, "rechain_compact", chain, nts, to_compact)?;
    report(a.json, "rechain_expand", chain, nts, to_planned)
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
    let cfg = NodeConfig { core: NodeCoreConfig { elastic, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
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
    out_since(node, i, Instant::now())
}

/// One packet of chain `i` in, polled until it is out: ns since `t0`.
fn out_since(node: &mut Node<MemPort>, i: usize, t0: Instant) -> anyhow::Result<u64> {
    let pkt = datagram(100 + i as u32, 1000, 64);
    let src = SocketAddr::from(([192, 0, 2, 1], 4789));
    node.backend_mut().tx.clear();
    node.backend_mut().rx.push_back((pkt, src));
    while node.backend().tx.is_empty() {
        node.poll();
        anyhow::ensure!(t0.elapsed() < Duration::from_secs(5), "a packet did not come out within 5 s");
    }
    Ok(t0.elapsed().as_nanos() as u64)
}

/// Polls with no traffic until the running chain is descheduled (after a whole idle
/// MONITOR_PERIOD: how long that takes in real time depends on how much of a core the thread
/// gets), at most 5 s.
fn idle(node: &mut Node<MemPort>) -> anyhow::Result<()> {
    let (t0, before) = (Instant::now(), node.core().events().deschedules);
    while node.core().events().deschedules == before {
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(5),
            "the idle chain was not descheduled within 5 s (regions {:?}, instances {:?}, last events {:?})",
            node.core().elastic().regions(),
            node.core().launches().region_instances().collect::<Vec<_>>(),
            node.core().events().events.iter().rev().take(6).collect::<Vec<_>>()
        );
        node.poll();
    }
    Ok(())
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
        let launched = Instant::now();
        one_packet(&mut node, 0)?;
        warm.push(one_packet(&mut node, 0)?);
        // A chain runs a MONITOR_PERIOD before a context switch may stop it: chain 0 keeps its
        // traffic until then, so that what is timed is the stop-and-launch, not the hold.
        while launched.elapsed() < node.core().elastic().monitor_period() {
            one_packet(&mut node, 0)?;
        }
        switch.push(one_packet(&mut node, 1)?);
        idle(&mut node)?;
        resume.push(one_packet(&mut node, 1)?);
        anyhow::ensure!(node.core().events().resumes > 0, "no victim hit");
        idle(&mut node)?;
        switch.push(one_packet(&mut node, 0)?);
    }
    report(a.json, "warm", chain, nts, warm)?;
    report(a.json, "on_demand", chain, nts, on_demand)?;
    report(a.json, "context_switch", chain, nts, switch)?;
    report(a.json, "victim_resume", chain, nts, resume)
}
