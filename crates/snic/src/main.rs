//! `snic`: the one user-facing binary of the snic software SuperNIC.
//!
//! Subcommands grow with the project; today: `demo` (a node with two tenants on loopback) and
//! `bench` (data-plane and crypto benchmarks, JSON lines with `--json`).

mod alloc_count;
mod bench;
mod demo;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

/// snic: a software SuperNIC — tenants' network tasks consolidated on a shared pool of nodes.
#[derive(Parser)]
#[command(name = "snic", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Measure snic (and its limits) on this machine. Prints one JSON object per case with --json.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Run a node with two tenants and in-process endpoints on loopback, and show what happens.
    Demo(demo::DemoArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Bench(b) => bench::run(b),
        Cmd::Demo(d) => demo::run(d),
    }
}
