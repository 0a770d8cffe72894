//! `snic-bench`: the benchmarks behind `snic bench` (the `snic` binary hands the command to this
//! one). It alone runs under the counting allocator, so that a benchmark can report how many
//! allocations its measured path made; the daemon's binary does not pay for the count.

use clap::Parser;
use snic_perf::{alloc_count, bench};

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

/// Measure snic (and its limits) on this machine. Prints one JSON object per case with --json.
#[derive(Parser)]
#[command(name = "snic bench", bin_name = "snic bench", version)]
struct Cli {
    #[command(subcommand)]
    cmd: bench::BenchCmd,
}

fn main() {
    // As `snic` does: end quietly when the reader of our output goes away.
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is always valid.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if let Err(e) = bench::run(Cli::parse().cmd) {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
}
