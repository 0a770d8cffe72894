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
    /// Also write the JSON report to DIR/<scenario>.json.
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
                eprint!("\rsim {}: {pct:>3}% of {total} endpoints", s.name);
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
    }
    if a.json {
        println!("{json}");
        return Ok(());
    }
    println!(
        "scenario {} (seed {}): {} endpoints, {} s simulated in {:.2} s",
        report.scenario,
        report.seed,
        report.endpoints,
        report.duration_s,
        t0.elapsed().as_secs_f64()
    );
    for r in &report.results {
        println!("  {:<18} {:>10.3} Gbit/s  ({:>5.1}% of no consolidation)", r.scheme, r.provisioned_gbps, 100.0 * r.vs_no_consolidation);
    }
    println!(
        "  rack-level capExConsolidRatio {:.4}  (snic cost --capex-consolid-ratio {:.4})",
        report.capex_consolid_ratio, report.capex_consolid_ratio
    );
    Ok(())
}
