//! `snic`: the one user-facing binary of the snic software SuperNIC.
//!
//! Subcommands: `run` (a node), `apply`/`get`/`delete`/`status`/`drain` (its API), `plan` (offline
//! placement), `tor` (the health checker on a pool's ToR), `demo` (a node with two tenants on loopback), `bench` (benchmarks, JSON lines with
//! `--json`, run by the `snic-bench` binary beside this one), `cost` (the paper's cost model) and `sim` (the simulator).

mod client;
mod cost_cmd;
mod daemon;
mod demo;
mod demo_pool;
mod deploy;
mod plan_cmd;
mod sim_cmd;
mod tor;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;

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
    ///
    /// `snic bench --help` lists the benchmarks; they run in the snic-bench binary beside snic.
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
    /// Run a node with two tenants and in-process endpoints on loopback, and show what happens.
    Demo(demo::DemoArgs),
    /// Validate manifests and show how a node would place them (chains, regions, DAG routes).
    Plan(plan_cmd::PlanArgs),
    /// Run a node: the data plane, the control thread, the HTTP/JSON API and /metrics.
    Run(daemon::RunArgs),
    /// Apply manifests to a running node (all or nothing).
    Apply(client::ApplyArgs),
    /// Show objects of a running node.
    Get(client::GetArgs),
    /// Delete an object from a running node.
    Delete(client::DeleteArgs),
    /// Show a running node's regions, tenants, rates and drops.
    Status(client::StatusArgs),
    /// Withdraw a node of a pool behind a switch with no flow lost: its health check fails,
    /// peers bring its flows back to it, and this waits until none is left.
    Drain(client::DrainArgs),
    /// The paper's per-endpoint network cost model (CapEx, optionally TCO with energy) for
    /// traditional NICs, sNIC pools and multi-host NIC pools.
    Cost(cost_cmd::CostArgs),
    /// Run a scenario on the simulator (the policy core at rack and data-center scale).
    Sim(sim_cmd::SimArgs),
    /// On the ToR of a pool behind a switch: keep its resilient next-hop group to the nodes
    /// whose health check answers.
    Tor(tor::TorArgs),
    /// Make an API credential: a random token (give it to its holder, or put it in the
    /// operator's token file) and its SHA-256 (a tenant's `spec.token_sha256`).
    Token(client::TokenArgs),
}

fn main() {
    if let Err(e) = run() {
        // One line, with the causes: users read this, not a backtrace.
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    // Like other command-line tools, end quietly when the reader of our output goes away
    // (`snic demo | head`): Rust ignores SIGPIPE by default and would panic on the write.
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is always valid.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Bench(b) => bench(b),
        Cmd::Demo(d) => demo::run(d),
        Cmd::Plan(p) => plan_cmd::run(p),
        Cmd::Cost(c) => cost_cmd::run(c),
        Cmd::Sim(s) => sim_cmd::run(s),
        Cmd::Tor(t) => tor::run(t),
        Cmd::Token(t) => client::token(t),
        Cmd::Drain(d) => client::drain(d),
        Cmd::Run(r) => daemon::run(r),
        Cmd::Apply(a) => client::apply(a),
        Cmd::Get(a) => client::get(a),
        Cmd::Delete(a) => client::delete(a),
        Cmd::Status(a) => client::status(a),
    }
}

/// `snic bench …`: everything after `bench`, for the snic-bench binary.
#[derive(Args)]
struct BenchArgs {
    /// The benchmark and its options (`snic bench --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Runs `snic-bench` from the directory this binary is in, in this process's place. The
/// benchmarks live outside the daemon's binary, with the counting allocator they report from.
fn bench(b: BenchArgs) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding the snic binary's directory")?;
    let bench = exe.with_file_name("snic-bench");
    if !bench.is_file() {
        anyhow::bail!(
            "`snic bench` runs the snic-bench binary, which is not beside {} (cargo build --release -p snic builds both)",
            exe.display()
        );
    }
    let e = std::process::Command::new(&bench).args(&b.args).exec();
    Err(e).with_context(|| format!("running {}", bench.display()))
}
