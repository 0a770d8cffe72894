//! `snic sim`: runs a scenario file on the simulator (`snic-sim`) and prints its report.

use anyhow::Context;
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;

/// Options of `snic sim`.
#[derive(Args)]
pub struct SimArgs {
    /// The scenario (TOML; see docs/sim.md and scenarios/).
    scenario: PathBuf,
    /// Seed of every random stream (default: the scenario's).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the report as JSON: {"scenario":…,"seed":…,"results":[{"scheme":…,…}],…}.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to `DIR/<scenario>.json` and its figure to `DIR/<scenario>.svg`.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Runs it.
pub fn run(a: SimArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&a.scenario).with_context(|| format!("reading {}", a.scenario.display()))?;
    let s = snic_sim::Scenario::parse(&text).with_context(|| a.scenario.display().to_string())?;
    let seed = a.seed.unwrap_or(s.seed);
    let tty = std::io::stderr().is_terminal();
    let t0 = std::time::Instant::now();
    let mut last = 0;
    let report = s
        .run(seed, |done, total| {
            // A progress line on a terminal, at most one per 5%.
            let pct = done * 100 / total.max(1);
            if tty && (pct >= last + 5 || done == total) {
                last = pct;
                eprint!("\rsim {}: {pct:>3}%", s.name);
                if done == total {
                    eprintln!();
                }
            }
        })
        .with_context(|| a.scenario.display().to_string())?;
    let json = serde_json::to_string(&report)?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let f = dir.join(format!("{}.json", report.scenario));
        std::fs::write(&f, format!("{json}\n")).with_context(|| format!("writing {}", f.display()))?;
        if let Some(svg) = report.figure.svg()? {
            let f = dir.join(format!("{}.svg", report.scenario));
            std::fs::write(&f, svg).with_context(|| format!("writing {}", f.display()))?;
        }
    }
    if a.json {
        println!("{json}");
        return Ok(());
    }
    println!(
        "scenario {} ({}, seed {}): {} s simulated in {:.2} s",
        report.scenario,
        report.experiment,
        report.seed,
        report.duration_s,
        t0.elapsed().as_secs_f64()
    );
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    for r in &report.results {
        if r.get("provisioned_gbps").is_some() {
            let scheme = r["scheme"].as_str().unwrap_or("");
            println!(
                "  {scheme:<18} {:>10.3} Gbit/s  ({:>5.1}% of no consolidation)",
                f(&r["provisioned_gbps"]),
                100.0 * f(&r["vs_no_consolidation"])
            );
        }
        if r.get("slowdown").is_some() {
            println!(
                "  {:<18} c={:<4} slowdown {:>8.3} (end to end {:>6.3})  delay mean {:>8.3} ms p50 {:>8.3} ms p99 {:>8.3} ms  dropped {:>6.2}%  CapEx {:>3} inst  OpEx {:>6.2}× static-max  scale events {}",
                r["scheme"].as_str().unwrap_or(""),
                f(&r["correlation"]),
                f(&r["slowdown"]),
                f(&r["e2e_slowdown"]),
                f(&r["mean_delay_ms"]),
                f(&r["p50_delay_ms"]),
                f(&r["p99_delay_ms"]),
                100.0 * f(&r["dropped"]),
                r["capex_instances"],
                f(&r["opex_vs_static_max"]),
                r["scale_events"]
            );
        }
        if r.get("usage_ratio").is_some() {
            println!(
                "  {} endpoints per node, NTs of {} Gbit/s: separate {} instances, {:.1} inst·s; consolidated ≤ {} instances, {:.1} inst·s ({:.1}%); slowdown {:.2} (end to end {:.2})",
                r["endpoints_per_node"],
                f(&r["nt_gbps"]),
                r["separate_instances"],
                f(&r["separate_instance_s"]),
                r["consolidated_instances"],
                f(&r["consolidated_instance_s"]),
                100.0 * f(&r["usage_ratio"]),
                f(&r["consolidated_slowdown"]),
                f(&r["consolidated_e2e_slowdown"])
            );
        }
        if r.get("keep_ratio").is_some() {
            println!(
                "  {} regions ({:.2} chains/region), keep {:>4.0}% of descheduled chains: launches {:>5}  victim hits {:>4}  delay mean {:>7.3} ms ({:.3}× no victims) p99 {:>6.2} ms  OpEx {:.3}× no victims  dropped {:.2}%",
                r["regions"],
                f(&r["overcommit"]),
                100.0 * f(&r["keep_ratio"]),
                r["launches"],
                r["resumes"],
                f(&r["mean_delay_ms"]),
                f(&r["slowdown_vs_no_victims"]),
                f(&r["p99_delay_ms"]),
                f(&r["opex_vs_no_victims"]),
                100.0 * f(&r["dropped"])
            );
        }
        if r.get("visits_per_packet").is_some() {
            println!(
                "  {} NTs {:<13} load {:<4} latency p50 {:>9} ns p99 {:>9} ns  {:>4.1} visits/pkt  scheduler busy {:>5.1}%  delivered {:>6.3} Mpps  dropped {:>5.2}%  reordered {}",
                r["nts"],
                r["mode"].as_str().unwrap_or(""),
                f(&r["load"]),
                r["p50_ns"],
                r["p99_ns"],
                f(&r["visits_per_packet"]),
                100.0 * f(&r["sched_busy"]),
                f(&r["delivered_pps"]) / 1e6,
                100.0 * f(&r["dropped"]),
                r["reordered"]
            );
        }
        if r.get("bg_throughput").is_some() {
            println!(
                "  {:<6} background {:.2}: foreground {:.3}, background {:.3} of offered (all served by {:.2} s)  on peers {:>4.1}%  placed {} back {} spills {} context switches {}  OpEx {:.0} J ({:.3}× single)",
                r["topology"].as_str().unwrap_or(""),
                f(&r["bg_load"]),
                f(&r["fg_throughput"]),
                f(&r["bg_throughput"]),
                f(&r["makespan_s"]),
                100.0 * f(&r["on_peers"]),
                r["placements"],
                r["moves_back"],
                r["spills"],
                r["context_switches"],
                f(&r["opex_j"]),
                f(&r["opex_vs_single"])
            );
        }
        if r.get("refusals_per_remote").is_some() {
            println!(
                "  {:<6} load {:.2}: {} chains, {:>5.1}% here, {:>5.1}% on a peer, {:>5.1}% turned away ({:.2} refusals per placement)  latency p50 {:.1} µs p99 {:.1} µs max {:.1} µs",
                r["topology"].as_str().unwrap_or(""),
                f(&r["load"]),
                r["chains"],
                100.0 * f(&r["local"]),
                100.0 * f(&r["remote"]),
                100.0 * f(&r["rejected"]),
                f(&r["refusals_per_remote"]),
                f(&r["p50_us"]),
                f(&r["p99_us"]),
                f(&r["max_us"])
            );
        }
        if r.get("detect_max_s").is_some() {
            println!(
                "  {:>3} nodes, {:>3}‰ lost: formed in {:.2} s; a death seen by all in {:.2} s (median), {:.2} s (worst); missed {}, false downs {}; {:.1} datagrams/node/s",
                r["nodes"],
                r["loss_per_mille"],
                f(&r["converge_s"]),
                f(&r["detect_p50_s"]),
                f(&r["detect_max_s"]),
                r["missed"],
                r["false_downs"],
                f(&r["datagrams_per_node_s"])
            );
        }
        for t in r["tenants"].as_array().into_iter().flatten() {
            println!(
                "  {:<10} before {:>7.3} units  after {:>7.3} units  dominant {} ({:.3})",
                t["tenant"].as_str().unwrap_or(""),
                f(&t["before_units"]),
                f(&t["after_units"]),
                t["dominant"].as_str().unwrap_or("-"),
                f(&t["dominant_share"])
            );
        }
        if r.get("convergence_us").is_some() {
            println!(
                "  settles within 5% {:.0} µs after the last step; Jain's index of dominant shares {:.3}",
                f(&r["convergence_us"]),
                f(&r["jain_dominant"])
            );
        }
    }
    if let (Some(n), Some(c)) = (report.endpoints, report.capex_consolid_ratio) {
        println!("  {n} endpoints; rack-level capExConsolidRatio {c:.4}  (snic cost --capex-consolid-ratio {c:.4})");
    }
    Ok(())
}
