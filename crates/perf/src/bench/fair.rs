//! `snic bench fair`: fair sharing and isolation.
//!
//! - `fig7`: the paper's Fig. 7 / Fig. 20 step on a virtual clock ([`Fig7`]): allocations before
//!   and after user2's load steps up, the time until the ingress limits settle within 5% of the
//!   DRF point, and Jain's index of the dominant shares.
//! - `hol`: FairNIC's Fig. 1 — two tenants over capacity, one with 8x the processing capacity:
//!   without isolation both get the same rate (head-of-line blocking), with it 8x apart.
//! - `expensive`, `flood64`, `engine`: a well-behaved victim (tenant 1) against an antagonist
//!   (tenant 2) — an NT 100× as costly per packet, a flood of 64-byte packets, large requests to a
//!   shared AES-GCM engine — one core, both sharing one receive ring. Each runs the victim alone,
//!   then both without the fairness mechanisms (measurement on, ingress limits and engine
//!   buckets off) and with them; the engine scenario also with the engine's token buckets alone.
//!   Mode `queues` is `on` with a receive ring per tenant instead of a shared one (a NIC or
//!   socket group steering each tenant to its own queue): the node takes from each only what the
//!   tenant's limit admits.
//!
//! The scenarios are `crate::testbed::isolation`'s. By default they run on the real
//! clock and measure this machine (figures differ 1.5–3× between machines of one kind and with
//! their load: compare runs taken together). With `--virtual` they run on a virtual clock with a
//! machine model instead: exact, the same on any machine — what the tests assert on.

use super::emit;
use crate::paced::IoCost;
use crate::testbed::isolation::{self, Machine, Mode, Outcome, Params, Scenario, Timing};
use crate::testbed::Fig7;
use anyhow::bail;
use clap::Args;
use serde::Serialize;
use snic_core::fair::{jain, FairConfig};
use snic_core::ids::TenantId;
use snic_core::node::NodeCoreConfig;
use snic_dataplane::clock::Clock;
use snic_dataplane::{Node, NodeConfig};
use std::time::Duration;

/// Options of `snic bench fair`.
#[derive(Args)]
pub struct FairArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Scenario: fig7, hol, expensive, flood64, engine, weighted, weighted-mpps, expensive-wasm,
    /// wasm-hog, or all.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Measured seconds per run (antagonist scenarios), after the warm-up [default: 2, or 0.1
    /// with --virtual].
    #[arg(long)]
    seconds: Option<f64>,
    /// Warm-up seconds per run (demand measured, DRF settled) [default: 1, or the scenario's
    /// settling time with --virtual].
    #[arg(long)]
    warmup: Option<f64>,
    /// Run the antagonist scenarios on a virtual clock with a machine model (synthetic NT and
    /// engine costs, the I/O costs below): exact and machine-independent, not this machine's
    /// speed.
    #[arg(long = "virtual")]
    r#virtual: bool,
    /// With --virtual: what receiving a packet costs the dispatcher, ns.
    #[arg(long, default_value_t = 50, requires = "virtual")]
    rx_ns: u64,
    /// With --virtual: what the rest of a packet's way costs the dispatcher, ns.
    #[arg(long, default_value_t = 20, requires = "virtual")]
    tx_ns: u64,
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
    /// The `wasm-hog` antagonist's time bound, units of fuel a packet (its max_fuel_per_packet).
    #[arg(long, default_value_t = 100_000)]
    wasm_bound: u64,
    /// The `wasm-hog` antagonist's wall-time bound, µs a packet (its max_packet_us).
    #[arg(long, default_value_t = 200)]
    wasm_packet_us: u64,
}

/// Runs the chosen scenarios.
pub fn run(a: FairArgs) -> anyhow::Result<()> {
    if !(a.core_target > 0.0 && a.core_target <= 1.0) {
        bail!("--core-target must be in (0, 1], got {}", a.core_target);
    }
    for (what, v) in [("--seconds", a.seconds), ("--warmup", a.warmup)] {
        if v.is_some_and(|v| !(0.0..=3600.0).contains(&v)) {
            bail!("{what} must be between 0 and 3600 seconds");
        }
    }
    if a.seconds == Some(0.0) {
        bail!("--seconds must be more than 0");
    }
    if !(snic_nt::wasm::bounds::MIN_FUEL..=snic_nt::wasm::bounds::MAX_FUEL).contains(&a.wasm_bound) {
        bail!("--wasm-bound must be within {}..={}", snic_nt::wasm::bounds::MIN_FUEL, snic_nt::wasm::bounds::MAX_FUEL);
    }
    if !(1..=snic_nt::wasm::bounds::MAX_PACKET_US).contains(&a.wasm_packet_us) {
        bail!("--wasm-packet-us must be within 1..={}", snic_nt::wasm::bounds::MAX_PACKET_US);
    }
    let all = ["fig7", "hol", "expensive", "flood64", "engine", "weighted", "weighted-mpps", "expensive-wasm", "wasm-hog"];
    let chosen: Vec<&str> = match a.scenario.as_str() {
        "all" => all.to_vec(),
        s if all.contains(&s) => vec![s],
        s => bail!("unknown scenario `{s}` (expected {} or all)", all.join(", ")),
    };
    for name in chosen {
        if name == "fig7" {
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
        let s = Scenario::parse(name).expect("a scenario named in `all`");
        let modes = s.modes();
        let mut runs: Vec<Vec<Outcome>> = modes.iter().map(|_| Vec::new()).collect();
        for _ in 0..a.repeat.max(1) {
            for (m, &mode) in modes.iter().enumerate() {
                let r = antagonist(&a, s, mode)?;
                emit(a.json, &r, |r| {
                    let r = &r.outcome;
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
                runs[m].push(r.outcome);
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
                    scenario: s.name().to_string(),
                    mode: mode.name(),
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
    let mut f = Fig7::new(NodeConfig { core: NodeCoreConfig { fair, ..NodeCoreConfig::default() }, ..Default::default() }, UNIT)?;
    let step = Duration::from_micros(10);
    let ten = Duration::from_millis(10);
    f.drive([8.0, 2.0], Duration::from_millis(20), step, |_| {});
    let b = f.drive([8.0, 2.0], ten, step, |_| {});
    let target = [100.0 / 17.0, 70.0 / 17.0];
    let t_step = f.clock.now().as_nanos();
    let e_step = f.node.core().meter().fairness().epochs();
    let mut last_out: Option<(u64, u64)> = None;
    let within = |n: &Node<_>| {
        let m = n.core().meter();
        (0..2).all(|i| m.limit(TenantId(i as u16 + 1)).is_some_and(|l| ((l / UNIT) - target[i]).abs() / target[i] <= 0.05))
    };
    let clock = f.clock.clone();
    f.drive([8.0, 6.0], Duration::from_millis(20), step, |n| {
        if !within(n) {
            last_out = Some((clock.now().as_nanos(), n.core().meter().fairness().epochs()));
        }
    });
    let c = f.drive([8.0, 6.0], ten, step, |n| {
        if !within(n) {
            last_out = Some((clock.now().as_nanos(), n.core().meter().fairness().epochs()));
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

/// One antagonist run, as printed.
#[derive(Serialize)]
struct AntagonistResult {
    bench: &'static str,
    #[serde(flatten)]
    outcome: Outcome,
}

fn antagonist(a: &FairArgs, s: Scenario, mode: Mode) -> anyhow::Result<AntagonistResult> {
    let machine = Machine { io: IoCost { rx_ns: a.rx_ns, tx_ns: a.tx_ns }, ..Machine::default() };
    let timing = if a.r#virtual { Timing::Virtual(machine) } else { Timing::Real };
    let p = Params {
        timing,
        warmup: Duration::from_secs_f64(a.warmup.unwrap_or(if a.r#virtual { s.settle().as_secs_f64() } else { 1.0 })),
        measure: Duration::from_secs_f64(a.seconds.unwrap_or(if a.r#virtual { 0.1 } else { 2.0 })),
        epoch: Duration::from_micros(a.epoch_us),
        workers: a.workers,
        isolate: a.isolate,
        core_target: a.core_target,
        auto_place: !a.manual_place,
        ring: 1024,
        wasm_bound: a.wasm_bound,
        wasm_packet_us: a.wasm_packet_us,
    };
    Ok(AntagonistResult { bench: "fair", outcome: isolation::run(s, mode, &p)? })
}
