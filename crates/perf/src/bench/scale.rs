//! `snic bench scale`: auto-scaling under a square wave (paper 000 §4.4, §7.2), in the node on a
//! virtual clock: one chain whose instances are each held to a declared throughput (a
//! synthetic NT that drops what exceeds it), offered a load that alternates between a high and
//! a low level. Compared on the same wave: the auto-scaler, a static allocation for the peak
//! (static-max) and one for the average (static-avg). Reports what each delivered, the
//! region-time it held (instances running × time: the OpEx the paper counts), and the scale
//! events with the shortest gap between two of them (never below MONITOR_PERIOD: no
//! oscillation).

use super::emit;
use crate::testbed::{datagram, one_tenant};
use clap::Args;
use serde::Serialize;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::ChainId;
use snic_core::node::NodeCoreConfig;
use snic_core::sched::InstanceState;
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::elastic::{ElasticConfig, EventKind};
use snic_dataplane::node::ManualClock;
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use std::net::SocketAddr;
use std::time::Duration;

/// Options of `snic bench scale`.
#[derive(Args)]
pub struct ScaleArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Throughput of one instance, packets per second.
    #[arg(long, default_value_t = 10_000)]
    capacity_pps: u64,
    /// The wave's high level, packets per second.
    #[arg(long, default_value_t = 25_000)]
    high_pps: u64,
    /// The wave's low level, packets per second.
    #[arg(long, default_value_t = 4_000)]
    low_pps: u64,
    /// Half a period of the wave (time at each level), ms.
    #[arg(long, default_value_t = 50)]
    half_period_ms: u64,
    /// Length of the run (virtual time), ms.
    #[arg(long, default_value_t = 1000)]
    duration_ms: u64,
    /// Emulated launch delay, ms (the paper's partial reconfiguration: 5).
    #[arg(long, default_value_t = 5.0)]
    launch_delay_ms: f64,
    /// MONITOR_PERIOD, ms.
    #[arg(long, default_value_t = 5.0)]
    monitor_period_ms: f64,
    /// Regions on the node.
    #[arg(long, default_value_t = 4)]
    regions: usize,
    /// Tear descheduled instances down instead of keeping them as victims (every scale-out
    /// then pays a launch).
    #[arg(long)]
    no_victims: bool,
    /// Also print, per scheme, the delivered rate and running instances every millisecond.
    #[arg(long)]
    series: bool,
}

#[derive(Serialize)]
struct ScaleResult {
    bench: &'static str,
    scheme: &'static str,
    /// Instances at the start (static schemes keep them).
    instances: usize,
    offered: u64,
    delivered: u64,
    delivered_frac: f64,
    /// Σ running instances × time, instance-milliseconds.
    region_ms: f64,
    /// Region-time relative to static-max.
    region_frac: f64,
    scale_outs: u64,
    scale_ins: u64,
    /// Scale-outs served by resuming a victim (no launch).
    resumes: u64,
    /// Shortest time between two scale decisions, ms (null with fewer than two; the instances
    /// one scale-out adds together are one decision).
    min_gap_ms: Option<f64>,
    monitor_period_ms: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    series: Vec<(u64, f64, usize)>,
}

/// Runs the three schemes on the same wave.
pub fn run(a: ScaleArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.capacity_pps > 0 && a.high_pps >= a.low_pps, "need a positive capacity and high ≥ low");
    anyhow::ensure!(a.half_period_ms > 0 && a.duration_ms > 0, "need a positive half period and duration");
    let per = |pps: u64| pps.div_ceil(a.capacity_pps).max(1) as usize;
    let static_max = per(a.high_pps);
    let static_avg = per((a.high_pps + a.low_pps).div_ceil(2));
    anyhow::ensure!(a.regions >= static_max, "--regions must hold static-max's {static_max} instances");
    let mut results = Vec::new();
    for (scheme, instances, autoscale) in [("static-max", static_max, false), ("static-avg", static_avg, false), ("autoscale", 1, true)] {
        results.push(one(&a, scheme, instances, autoscale)?);
    }
    let max_region = results[0].region_ms;
    for mut r in results {
        r.region_frac = if max_region > 0.0 { r.region_ms / max_region } else { 0.0 };
        emit(a.json, &r, |r| {
            format!(
                "scale {:<10} start {} inst: delivered {:>6.1}%  region-time {:>7.1} inst·ms ({:>5.1}% of static-max)  scale out {} (victim resumes {}) in {}  min gap {}",
                r.scheme,
                r.instances,
                100.0 * r.delivered_frac,
                r.region_ms,
                100.0 * r.region_frac,
                r.scale_outs,
                r.resumes,
                r.scale_ins,
                r.min_gap_ms.map_or("-".into(), |g| format!("{g:.1} ms"))
            )
        })?;
    }
    Ok(())
}

fn one(a: &ScaleArgs, scheme: &'static str, instances: usize, autoscale: bool) -> anyhow::Result<ScaleResult> {
    let clock = ManualClock::default();
    let elastic = ElasticConfig {
        regions: a.regions,
        launch_delay: Duration::from_secs_f64(a.launch_delay_ms / 1e3),
        monitor_period: Duration::from_secs_f64(a.monitor_period_ms / 1e3),
        autoscale,
        victims: !a.no_victims,
        ..Default::default()
    };
    let cfg = NodeConfig { core: NodeCoreConfig { elastic, ..NodeCoreConfig::default() }, vtep_port: None, ..Default::default() };
    let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone()))?;
    let nt = NtSpec::Synthetic(SyntheticConfig::declared(a.capacity_pps, true));
    let chain = node.add_chain(vec![nt]);
    let route = DagRoute::new(vec![Step { chain, mask: NtMask::all(1) }]);
    one_tenant(&mut node, route, Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), ..Default::default() });
    for _ in 0..instances {
        node.launch(chain)?;
    }
    // The instances launch before the wave starts.
    let delay = Duration::from_secs_f64(a.launch_delay_ms / 1e3);
    clock.advance(delay);
    while node.poll() > 0 {}
    let src = SocketAddr::from(([192, 0, 2, 1], 4789));
    let frames: Vec<Vec<u8>> = (0..64).map(|f| datagram(100, 1000 + f, 64)).collect();
    let step = Duration::from_micros(100);
    let steps = a.duration_ms * 10;
    let (mut owed, mut offered, mut delivered, mut region_ns) = (0.0f64, 0u64, 0u64, 0f64);
    let mut series = Vec::new();
    let mut ms_delivered = 0u64;
    for k in 0..steps {
        let t_ms = k / 10;
        let level = if (t_ms / a.half_period_ms).is_multiple_of(2) { a.high_pps } else { a.low_pps };
        owed += level as f64 * step.as_secs_f64();
        while owed >= 1.0 {
            owed -= 1.0;
            node.backend_mut().rx.push_back((frames[(offered % 64) as usize].clone(), src));
            offered += 1;
        }
        clock.advance(step);
        while node.poll() > 0 {}
        let out = node.backend().tx.len() as u64;
        node.backend_mut().tx.clear();
        delivered += out;
        ms_delivered += out;
        let running = running(&node, chain);
        region_ns += running as f64 * step.as_nanos() as f64;
        if a.series && k % 10 == 9 {
            series.push((t_ms, ms_delivered as f64 * 1e3, running));
            ms_delivered = 0;
        }
    }
    let st = node.core().events();
    let mut times: Vec<u64> =
        st.events.iter().filter(|e| matches!(e.kind, EventKind::ScaleOut | EventKind::ScaleIn)).map(|e| e.at_ns).collect();
    times.dedup();
    let min_gap_ms = times.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e6).reduce(f64::min);
    Ok(ScaleResult {
        bench: "scale",
        scheme,
        instances,
        offered,
        delivered,
        delivered_frac: if offered > 0 { delivered as f64 / offered as f64 } else { 1.0 },
        region_ms: region_ns / 1e6,
        region_frac: 0.0,
        scale_outs: st.scale_outs,
        scale_ins: st.scale_ins,
        resumes: st.resumes,
        min_gap_ms,
        monitor_period_ms: node.core().elastic().monitor_period().as_secs_f64() * 1e3,
        series,
    })
}

/// Instances of `chain` running now (launching ones do not serve yet).
fn running(node: &Node<MemPort>, chain: ChainId) -> usize {
    node.core().sched().instances_of(chain).iter().filter(|&&i| node.core().sched().state(i) == InstanceState::Running).count()
}
