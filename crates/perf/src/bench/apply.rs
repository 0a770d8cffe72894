//! `snic bench apply`: what a small apply costs a running node, against what is deployed.
//!
//! For each deployed state (nothing; one firewall of 10,000 rules; one NAT of 2^20 flows; 1,000
//! tenants with a rule each) a node is started (`snic run`, loopback, a temporary state
//! directory), the state is applied, and then a small change is applied and deleted `runs`
//! times through the HTTP API, as `snic apply` / `snic delete` do: one tenant and one rule
//! (`rule`), or one tenant with an NT, a DAG of it and a rule to it (`dag`: a new chain is
//! launched, and stopped at the delete). Reported: the time to deploy the state, and the median
//! and worst small apply and delete.

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Options of `snic bench apply`.
#[derive(Args)]
pub struct ApplyArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Small applies (and deletes) per state.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// States to measure, comma-separated: empty, rules10k, nat1m, tenants1000, or all.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    state: Vec<String>,
    /// Small changes to measure, comma-separated: rule (a tenant and a rule), dag (a tenant, an
    /// NT, a DAG and a rule: a new chain).
    #[arg(long, default_value = "rule,dag", value_delimiter = ',', value_parser = ["rule", "dag"])]
    change: Vec<String>,
    /// The snic binary that runs the node (default: this one), to measure another build
    /// against this one with the same client.
    #[arg(long)]
    node_bin: Option<std::path::PathBuf>,
}

#[derive(Serialize)]
struct ApplyResult {
    bench: &'static str,
    state: String,
    state_objects: usize,
    state_apply_ms: f64,
    change: String,
    small_apply_ms_median: f64,
    small_apply_ms_max: f64,
    small_delete_ms_median: f64,
    runs: u32,
}

const STATES: [&str; 4] = ["empty", "rules10k", "nat1m", "tenants1000"];

fn doc(kind: &str, name: &str, spec: &str) -> String {
    format!("---\napiVersion: snic/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n")
}

/// The manifest of a deployed state, and its object count.
fn state_manifest(state: &str) -> anyhow::Result<(String, usize)> {
    let one_dag = |config: &str| {
        [
            doc("Tenant", "big", "{vnis: [100]}"),
            doc("NT", "big-nt", &format!("{{tenant: big, config: {config}}}")),
            doc("DAG", "big-path", "{tenant: big, nodes: [big-nt]}"),
            doc("Rule", "big-all", "{vni: 100, action: {dag: big-path}}"),
        ]
        .concat()
    };
    Ok(match state {
        "empty" => (String::new(), 0),
        "rules10k" => {
            let rules: Vec<String> =
                (0..10_000).map(|i| format!("{{proto: 6, dst: '10.{}.{}.0/24', action: deny}}", i / 256, i % 256)).collect();
            (one_dag(&format!("{{kind: firewall, default: allow, rules: [{}]}}", rules.join(", "))), 4)
        }
        "nat1m" => (one_dag("{kind: nat, snat: {inside: 10.1.0.0/16, public: 192.0.2.1}, max_flows: 1048576}"), 4),
        "tenants1000" => {
            let mut m = String::new();
            for i in 0..1000 {
                m += &doc("Tenant", &format!("t{i}"), &format!("{{vnis: [{}]}}", 1000 + i));
                m += &doc("Rule", &format!("t{i}"), &format!("{{vni: {}, action: pass_through}}", 1000 + i));
            }
            (m, 2000)
        }
        s => bail!("unknown state {s:?} (empty, rules10k, nat1m, tenants1000)"),
    })
}

/// A node started for the bench; killed when dropped.
struct Daemon {
    child: Child,
    api: String,
    dir: std::path::PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(bin: &std::path::Path) -> anyhow::Result<Daemon> {
    let dir = std::env::temp_dir().join(format!("snic-bench-apply-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join("node.yaml");
    std::fs::write(&cfg, format!("data: 127.0.0.1:0\napi: 127.0.0.1:0\nstate_dir: {}\nvtep_port: null\n", dir.join("state").display()))?;
    let mut child = Command::new(bin)
        .args(["run", "--config", cfg.to_str().context("temporary path")?])
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("SNIC_BENCH_LOG").is_some() { Stdio::inherit() } else { Stdio::null() })
        .spawn()
        .context("starting a node")?;
    let mut line = String::new();
    let out = child.stdout.take().context("the node's stdout")?;
    std::io::BufReader::new(out).read_line(&mut line)?;
    // "snic: data 127.0.0.1:P (VXLAN/UDP), api http://127.0.0.1:Q, state ..."
    let Some(api) = line.split_whitespace().find(|w| w.starts_with("http://")) else {
        let _ = child.kill();
        bail!("the node did not start: {line:?}");
    };
    Ok(Daemon { api: api.trim_end_matches(',').to_string(), child, dir })
}

fn post(agent: &ureq::Agent, api: &str, body: &str) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut r = agent.post(&format!("{api}/v1/apply")).header("content-type", "application/yaml").send(body.to_string())?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    if !r.status().is_success() {
        bail!("apply refused: {}", r.body_mut().read_to_string()?);
    }
    Ok(ms)
}

fn delete(agent: &ureq::Agent, api: &str, kind: &str, name: &str) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut r = agent.delete(&format!("{api}/v1/objects/{kind}/{name}")).call()?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    if !r.status().is_success() {
        bail!("delete refused: {}", r.body_mut().read_to_string()?);
    }
    Ok(ms)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `snic bench apply`.
pub fn run(a: ApplyArgs) -> anyhow::Result<()> {
    let states: Vec<&str> = if a.state.iter().any(|s| s == "all") { STATES.to_vec() } else { a.state.iter().map(String::as_str).collect() };
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let small = |change: &str| match change {
        "rule" => [doc("Tenant", "probe", "{vnis: [99]}"), doc("Rule", "probe", "{vni: 99, action: pass_through}")].concat(),
        _ => [
            doc("Tenant", "probe", "{vnis: [99]}"),
            doc("NT", "probe", "{tenant: probe, config: {kind: counter}}"),
            doc("DAG", "probe", "{tenant: probe, nodes: [probe]}"),
            doc("Rule", "probe", "{vni: 99, action: {dag: probe}}"),
        ]
        .concat(),
    };
    let objects = |change: &str| if change == "rule" { &["rules", "tenants"][..] } else { &["rules", "dags", "nts", "tenants"][..] };
    let bin = match a.node_bin {
        Some(b) => b,
        None => std::env::current_exe()?,
    };
    for state in states {
        let (manifest, objects_in_state) = state_manifest(state)?;
        let d = start(&bin)?;
        let state_apply_ms = if manifest.is_empty() { 0.0 } else { post(&agent, &d.api, &manifest)? };
        for change in &a.change {
            let (mut applies, mut deletes) = (Vec::new(), Vec::new());
            let body = small(change);
            for _ in 0..a.runs {
                applies.push(post(&agent, &d.api, &body)?);
                let mut ms = 0.0;
                for kind in objects(change) {
                    ms += delete(&agent, &d.api, kind, "probe")?;
                }
                deletes.push(ms);
            }
            let max = applies.iter().copied().fold(0.0, f64::max);
            let r = ApplyResult {
                bench: "apply",
                state: state.to_string(),
                state_objects: objects_in_state,
                state_apply_ms,
                change: change.clone(),
                small_apply_ms_median: median(&mut applies),
                small_apply_ms_max: max,
                small_delete_ms_median: median(&mut deletes),
                runs: a.runs,
            };
            super::emit(a.json, &r, |r| {
                format!(
                    "{:<12} ({:>5} objects, deployed in {:>8.1} ms), {:>4}: small apply median {:>6.1} ms, worst {:>6.1} ms; its delete {:>6.1} ms",
                    r.state, r.state_objects, r.state_apply_ms, r.change, r.small_apply_ms_median, r.small_apply_ms_max, r.small_delete_ms_median
                )
            })?;
        }
    }
    Ok(())
}
