//! `snic bench fair`: fair sharing and isolation.
//!
//! - `fig7`: the paper's Fig. 7 / Fig. 20 step on a virtual clock ([`Fig7`]): allocations before
//!   and after user2's load steps up, the time until the ingress limits settle within 5% of the
//!   DRF point, and Jain's index of the dominant shares.
//! - `hol`: FairNIC's Fig. 1 — two tenants over capacity, one with 8x the processing capacity:
//!   without isolation both get the same rate (head-of-line blocking), with it 8x apart.
//! - `expensive`, `flood64`, `engine`: a well-behaved victim (tenant 1) against an antagonist
//!   (tenant 2) — an NT 100× as costly per packet, a flood of 64-byte packets, large requests to a
//!   shared AES-GCM engine — on the real clock, one core, both sharing one receive ring
//!   ([`Paced`]). Each runs the victim alone, then both without the fairness mechanisms
//!   (measurement on, ingress limits and engine buckets off) and with them; the engine
//!   scenario also with the engine's token buckets alone. Mode `queues` is `on` with a receive
//!   ring per tenant instead of a shared one (a NIC or socket group steering each tenant to its
//!   own queue): the node takes from each only what the tenant's limit admits.

use super::{emit, spin};
use anyhow::bail;
use clap::Args;
use serde::Serialize;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::fair::{jain, FairConfig};
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::Mat;
use snic_dataplane::backend::paced::{Paced, StreamSpec};
use snic_dataplane::node::{MonotonicClock, Place};
use snic_dataplane::store::Peer;
use snic_dataplane::testbed::{dag_rule, datagram, Fig7};
use snic_dataplane::{Node, NodeConfig};
use snic_nt::crypto::{CryptoConfig, Direction, TenantKey};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use snic_wire::ethernet::MacAddr;
use std::sync::Arc;
use std::time::Duration;

/// Options of `snic bench fair`.
#[derive(Args)]
pub struct FairArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Scenario: fig7, expensive, flood64, engine, or all.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Measured seconds per run (antagonist scenarios), after the warm-up.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Warm-up seconds per run (demand measured, DRF settled).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// EPOCH_LEN in microseconds.
    #[arg(long, default_value_t = 100)]
    epoch_us: u64,
    /// Worker threads for regions (0: regions run on the dispatcher's core).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Give the antagonist's chain a core of its own: it runs on worker 0, the victim's on the
    /// dispatcher (needs --workers 1 or more; scenarios with a shared chain ignore it).
    #[arg(long)]
    isolate: bool,
    /// The share of each core fair sharing hands out (fairness.core_target).
    #[arg(long, default_value_t = 0.8)]
    core_target: f64,
    /// Leave regions where they were launched (auto placement off): for comparison.
    #[arg(long)]
    manual_place: bool,
    /// Runs of each antagonist scenario's modes, interleaved (alone, off, on, ... then again);
    /// with more than one, a summary line per mode gives the medians and the victim's p99 over
    /// its median p99 alone. This machine's scheduling noise moves a single run's p99 by
    /// several times.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
}

/// Runs the chosen scenarios.
pub fn run(a: FairArgs) -> anyhow::Result<()> {
    if !(a.core_target > 0.0 && a.core_target <= 1.0) {
        bail!("--core-target must be in (0, 1], got {}", a.core_target);
    }
    let all = ["fig7", "hol", "expensive", "flood64", "engine"];
    let chosen: Vec<&str> = match a.scenario.as_str() {
        "all" => all.to_vec(),
        s if all.contains(&s) => vec![s],
        s => bail!("unknown scenario `{s}` (expected {} or all)", all.join(", ")),
    };
    for s in chosen {
        if s == "fig7" {
            let r = fig7(&a)?;
            emit(a.json, &r, |r| {
                format!(
                    "fig7: before user1 {:.2} user2 {:.2} units; after user1 {:.2} user2 {:.2} (DRF {:.2} / {:.2}); settled in {:.0} us ({} epochs); Jain {:.4}",
                    r.before_units[0],
                    r.before_units[1],
                    r.after_units[0],
                    r.after_units[1],
                    r.target_units[0],
                    r.target_units[1],
                    r.convergence_us,
                    r.convergence_epochs,
                    r.jain_dominant
                )
            })?;
            continue;
        }
        // The engine scenario also runs the engine's token buckets without DRF's ingress limits.
        let modes: &[&'static str] =
            if s == "engine" { &["alone", "off", "buckets", "on", "queues"] } else { &["alone", "off", "on", "queues"] };
        let mut runs: Vec<Vec<AntagonistResult>> = modes.iter().map(|_| Vec::new()).collect();
        for _ in 0..a.repeat.max(1) {
            for (m, &mode) in modes.iter().enumerate() {
                let r = antagonist(&a, s, mode)?;
                emit(a.json, &r, |r| {
                    format!(
                        "{:<9} {:<5} victim {:>8.0}/{:>8.0} pps ({:>5.1}%) p50 {:>8} ns p99 {:>9} ns | antagonist {:>9.0}/{:>9.0} pps | Jain {:.3} | {} / {}",
                        r.scenario,
                        r.mode,
                        r.victim_delivered_pps,
                        r.victim_offered_pps,
                        100.0 * r.victim_kept,
                        r.victim_p50_ns,
                        r.victim_p99_ns,
                        r.antagonist_delivered_pps,
                        r.antagonist_offered_pps,
                        r.jain_dominant,
                        r.victim_place,
                        r.antagonist_place
                    )
                })?;
                runs[m].push(r);
            }
        }
        if a.repeat > 1 {
            let alone_p99 = median(runs[0].iter().map(|r| r.victim_p99_ns as f64));
            for (m, &mode) in modes.iter().enumerate() {
                let rs = &runs[m];
                let p99 = median(rs.iter().map(|r| r.victim_p99_ns as f64));
                let sum = Summary {
                    bench: "fair",
                    summary: true,
                    scenario: s.to_string(),
                    mode,
                    runs: rs.len(),
                    victim_kept_median: median(rs.iter().map(|r| r.victim_kept)),
                    victim_kept_min: rs.iter().map(|r| r.victim_kept).fold(f64::INFINITY, f64::min),
                    victim_p99_median_ns: p99,
                    victim_p99_runs_ns: rs.iter().map(|r| r.victim_p99_ns).collect(),
                    p99_over_alone: if alone_p99 > 0.0 { p99 / alone_p99 } else { 0.0 },
                    antagonist_delivered_median_pps: median(rs.iter().map(|r| r.antagonist_delivered_pps)),
                };
                emit(a.json, &sum, |x| {
                    format!(
                        "{:<9} {:<5} median of {}: victim kept {:.1}% (min {:.1}%), p99 {:.1} us = {:.2}x alone; antagonist {:.0} pps",
                        x.scenario,
                        x.mode,
                        x.runs,
                        100.0 * x.victim_kept_median,
                        100.0 * x.victim_kept_min,
                        x.victim_p99_median_ns / 1e3,
                        x.p99_over_alone,
                        x.antagonist_delivered_median_pps
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// Medians over `--repeat` runs of one mode.
#[derive(Serialize)]
struct Summary {
    bench: &'static str,
    summary: bool,
    scenario: String,
    mode: &'static str,
    runs: usize,
    victim_kept_median: f64,
    victim_kept_min: f64,
    victim_p99_median_ns: f64,
    victim_p99_runs_ns: Vec<u64>,
    /// Median p99 over the median p99 of mode `alone`.
    p99_over_alone: f64,
    antagonist_delivered_median_pps: f64,
}

fn median(xs: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = xs.collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[derive(Serialize)]
struct Fig7Result {
    bench: &'static str,
    scenario: &'static str,
    epoch_us: u64,
    unit_pps: f64,
    /// Admitted rates in units over the last 10 ms before the step (user1, user2).
    before_units: [f64; 2],
    /// Admitted rates in units over the last 10 ms of the run.
    after_units: [f64; 2],
    /// The DRF point: 100/17 and 70/17 units.
    target_units: [f64; 2],
    /// Virtual time from the step until both ingress limits stay within 5% of the DRF point
    /// (resolution: the 10 us driving step), and the epochs that took.
    convergence_us: f64,
    convergence_epochs: u64,
    jain_dominant: f64,
}

fn fig7(a: &FairArgs) -> anyhow::Result<Fig7Result> {
    const UNIT: f64 = 100_000.0;
    let epoch = Duration::from_micros(a.epoch_us);
    let fair = FairConfig { epoch, ..FairConfig::default() };
    let mut f = Fig7::new(NodeConfig { fair, ..Default::default() }, UNIT)?;
    let step = Duration::from_micros(10);
    let ten = Duration::from_millis(10);
    f.drive([8.0, 2.0], Duration::from_millis(20), step, |_| {});
    let b = f.drive([8.0, 2.0], ten, step, |_| {});
    let target = [100.0 / 17.0, 70.0 / 17.0];
    let t_step = f.clock.0.load(std::sync::atomic::Ordering::Relaxed);
    let e_step = f.node.meter().fairness().epochs();
    let mut last_out: Option<(u64, u64)> = None;
    let within = |n: &Node<_>| {
        let m = n.meter();
        (0..2).all(|i| m.limit(TenantId(i as u16 + 1)).is_some_and(|l| ((l / UNIT) - target[i]).abs() / target[i] <= 0.05))
    };
    let clock = f.clock.clone();
    f.drive([8.0, 6.0], Duration::from_millis(20), step, |n| {
        if !within(n) {
            last_out = Some((clock.0.load(std::sync::atomic::Ordering::Relaxed), n.meter().fairness().epochs()));
        }
    });
    let c = f.drive([8.0, 6.0], ten, step, |n| {
        if !within(n) {
            last_out = Some((clock.0.load(std::sync::atomic::Ordering::Relaxed), n.meter().fairness().epochs()));
        }
    });
    // Settled at the first epoch after the last time a limit was outside 5%.
    let (t_conv, e_conv) = last_out.map_or((t_step, e_step), |(t, e)| (t, e + 1));
    let shares: Vec<f64> = (1..=2).filter_map(|u| f.share(u)).map(|s| s.dominant_share).collect();
    let per_unit = |n: u64| n as f64 / ten.as_secs_f64() / UNIT;
    Ok(Fig7Result {
        bench: "fair",
        scenario: "fig7",
        epoch_us: a.epoch_us,
        unit_pps: UNIT,
        before_units: b.map(per_unit),
        after_units: c.map(per_unit),
        target_units: target,
        convergence_us: (t_conv.saturating_sub(t_step)) as f64 / 1e3,
        convergence_epochs: e_conv.saturating_sub(e_step),
        jain_dominant: jain(&shares),
    })
}

#[derive(Serialize)]
struct AntagonistResult {
    bench: &'static str,
    scenario: String,
    mode: &'static str,
    victim_offered_pps: f64,
    victim_delivered_pps: f64,
    /// Delivered / offered: the victim asks for less than half the node, so its fair share is
    /// all it offers.
    victim_kept: f64,
    /// Victim's delivered rate over the antagonist's (the `hol` scenario's figure).
    throughput_ratio: f64,
    victim_p50_ns: u64,
    victim_p99_ns: u64,
    victim_ring_drops: u64,
    antagonist_offered_pps: f64,
    antagonist_delivered_pps: f64,
    antagonist_limit_pps: Option<f64>,
    /// Jain's index of the two tenants' dominant shares (DRF's view; a satisfied victim has a
    /// smaller share by design).
    jain_dominant: f64,
    victim_dominant: Option<String>,
    antagonist_dominant: Option<String>,
    /// Per resource: (name, capacity, victim demand, victim allocation, antagonist demand,
    /// antagonist fixed part, antagonist allocation), as of the last epoch.
    resources: Vec<(String, f64, f64, f64, f64, f64, f64)>,
    /// The dispatcher's measured costs: receiving a packet, and the rest of an admitted one, ns.
    dispatcher_ns: (f64, f64),
    /// The node's drops by reason, victim and antagonist (the receive ring's are counted apart).
    victim_drops: Vec<(&'static str, u64)>,
    antagonist_drops: Vec<(&'static str, u64)>,
    /// Where the victim's and the antagonist's regions ran at the end ("dispatcher" or
    /// "worker N"), and the regions moved between cores during the run (`auto_place`).
    victim_place: String,
    antagonist_place: String,
    moves: u64,
}

struct Setup {
    /// (chain specs, shared) — `shared`: both tenants use the first chain.
    victim_chain: Vec<NtSpec>,
    antagonist_chain: Option<Vec<NtSpec>>,
    victim: (usize, f64),
    antagonist: (usize, f64),
}

fn synthetic(ns: u64) -> NtSpec {
    NtSpec::Synthetic(SyntheticConfig { cost_ns: ns, capacity_pps: None, enforce: false })
}

fn setup(s: &str) -> Setup {
    match s {
        // FairNIC Fig. 1 (head-of-line blocking): two tenants both offering far more than the
        // node takes, the first with 8x the processing capacity (its NT costs 1/8 as much).
        // Without isolation both get the same rate; with it, throughput follows capacity.
        "hol" => Setup {
            victim_chain: vec![synthetic(100)],
            antagonist_chain: Some(vec![synthetic(800)]),
            victim: (64, 4_000_000.0),
            antagonist: (64, 4_000_000.0),
        },
        // 200 ns vs 20 us per packet; the antagonist offers two cores' worth.
        "expensive" => Setup {
            victim_chain: vec![synthetic(200)],
            antagonist_chain: Some(vec![synthetic(20_000)]),
            victim: (64, 1_000_000.0),
            antagonist: (64, 100_000.0),
        },
        // 1400-byte frames at 0.5 Mpps through a 300 ns NT, against 64-byte frames at 20 Mpps
        // (more than the node can take through its whole path, ~14 Mpps here).
        "flood64" => Setup {
            victim_chain: vec![synthetic(300)],
            antagonist_chain: Some(vec![NtSpec::Dummy]),
            victim: (1400 - 42, 500_000.0),
            antagonist: (64 - 42, 20_000_000.0),
        },
        // One shared AES-GCM engine: 256-byte requests at 0.5 Mpps against 1400-byte ones at 5 Mpps.
        _ => Setup {
            victim_chain: vec![NtSpec::AesGcm(CryptoConfig {
                direction: Direction::Encrypt,
                keys: vec![
                    TenantKey { tenant: 1, spi: 1, key_hex: super::KEY.into() },
                    TenantKey { tenant: 2, spi: 2, key_hex: super::KEY.into() },
                ],
                max_senders: 16,
            })],
            antagonist_chain: None,
            victim: (256 - 42, 500_000.0),
            antagonist: (1400 - 42, 5_000_000.0),
        },
    }
}

fn antagonist(a: &FairArgs, scenario: &str, mode: &'static str) -> anyhow::Result<AntagonistResult> {
    let s = setup(scenario);
    let src = "192.0.2.1:4789".parse()?;
    let antagonist_pps = if mode == "alone" { 0.0 } else { s.antagonist.1 };
    let streams = vec![
        StreamSpec { datagram: datagram(100, 1000, s.victim.0), pps: s.victim.1, src },
        StreamSpec { datagram: datagram(200, 2000, s.antagonist.0), pps: antagonist_pps, src },
    ];
    let on = mode == "on" || mode == "queues";
    let fair = FairConfig { epoch: Duration::from_micros(a.epoch_us), enforce: on, core_target: a.core_target, ..FairConfig::default() };
    // The in-memory "link" is the memory bus: far faster than a NIC's.
    let engine_buckets = on || mode == "buckets";
    let cfg = NodeConfig {
        vtep_port: None,
        fair,
        link_bps: 400e9,
        engine_buckets,
        workers: a.workers,
        pin_cores: a.workers > 0,
        auto_place: !a.manual_place,
        ..Default::default()
    };
    let clock = MonotonicClock::default();
    let backend = if mode == "queues" { Paced::with_queues(streams, 1024, clock) } else { Paced::new(streams, 1024, clock) };
    let mut node = Node::new(cfg, backend, Box::new(clock))?;
    if mode == "queues" {
        // Queue i holds stream i's packets: tenant i + 1's.
        node.set_rx_queue_tenant(0, Some(TenantId(1)));
        node.set_rx_queue_tenant(1, Some(TenantId(2)));
    }
    let (victim_at, antagonist_at) = if a.isolate { (Some(Place::Inline), Some(Place::Worker(0))) } else { (None, None) };
    let c1 = node.add_chain(s.victim_chain.clone());
    let i1 = match victim_at {
        Some(p) => node.launch_on(c1, p)?,
        None => node.launch(c1)?,
    };
    let (c2, i2) = match &s.antagonist_chain {
        Some(specs) => {
            let c = node.add_chain(specs.clone());
            let i = match antagonist_at {
                Some(p) => node.launch_on(c, p)?,
                None => node.launch(c)?,
            };
            (c, i)
        }
        None => (c1, i1),
    };
    let mut mat = Mat::new();
    for (t, chain, n) in [(1u16, c1, s.victim_chain.len()), (2, c2, s.antagonist_chain.as_ref().map_or(s.victim_chain.len(), Vec::len))] {
        node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain, mask: NtMask::all(n) }]));
        mat.insert(dag_rule(100 * t as u32, TenantId(t), DagUid(t as u32)));
        node.fdb_mut().set_default(100 * t as u32, Some(Peer { addr: "192.0.2.9:4789".parse()?, mac: MacAddr::default() }));
        node.set_tenant(TenantId(t), 1.0);
    }
    node.mat_handle().store(Arc::new(mat));
    spin(&mut node, Duration::from_secs_f64(a.warmup));
    node.backend_mut().reset_stats();
    let secs = spin(&mut node, Duration::from_secs_f64(a.seconds)).as_secs_f64();
    let st = node.backend().stats();
    let fair = node.meter().fairness();
    let name = |d: Option<usize>| d.and_then(|d| fair.resources().get(d)).map(|r| r.name.clone());
    let share = |t: u16| fair.shares().iter().find(|x| x.tenant == TenantId(t));
    let doms: Vec<f64> = (1..=2).filter_map(share).map(|x| x.dominant_share).collect();
    let (v, x) = (&st[0], &st[1]);
    Ok(AntagonistResult {
        bench: "fair",
        scenario: scenario.to_string(),
        mode,
        victim_offered_pps: v.offered as f64 / secs,
        victim_delivered_pps: v.delivered as f64 / secs,
        victim_kept: if v.offered > 0 { v.delivered as f64 / v.offered as f64 } else { 0.0 },
        throughput_ratio: if x.delivered > 0 { v.delivered as f64 / x.delivered as f64 } else { 0.0 },
        victim_p50_ns: v.latency.quantile(0.5),
        victim_p99_ns: v.latency.quantile(0.99),
        victim_ring_drops: v.ring_drops,
        antagonist_offered_pps: x.offered as f64 / secs,
        antagonist_delivered_pps: x.delivered as f64 / secs,
        antagonist_limit_pps: node.meter().limit(TenantId(2)),
        jain_dominant: jain(&doms),
        victim_dominant: name(share(1).and_then(|x| x.dominant)),
        antagonist_dominant: name(share(2).and_then(|x| x.dominant)),
        resources: match (share(1), share(2)) {
            (Some(v), Some(x)) => fair
                .resources()
                .iter()
                .enumerate()
                .map(|(k, r)| (r.name.clone(), r.capacity, v.demand[k], v.allocation[k], x.demand[k], x.fixed[k], x.allocation[k]))
                .collect(),
            _ => Vec::new(),
        },
        dispatcher_ns: node.meter().dispatcher_ns(),
        victim_place: place_name(node.place_of(i1)),
        antagonist_place: place_name(node.place_of(i2)),
        moves: node.elastic().stats().moves,
        victim_drops: node.stats().tenants[1].drops_by_reason(),
        antagonist_drops: node.stats().tenants[2].drops_by_reason(),
    })
}

fn place_name(p: Option<Place>) -> String {
    match p {
        Some(Place::Inline) => "dispatcher".into(),
        Some(Place::Worker(w)) => format!("worker {w}"),
        None => "none".into(),
    }
}
