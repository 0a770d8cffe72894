//! `snic plan -f <manifest>...`: validates manifests as a whole and prints the placement a node
//! would deploy — without a daemon. Exit status 1 and an error naming the object, the field and
//! the reason when anything is wrong.

use clap::Args;
use snic_control::manifest::{Kind, Spec};
use snic_control::{manifest, plan, state::State};

/// Options of `snic plan`.
#[derive(Args)]
pub struct PlanArgs {
    /// Manifest files (YAML or JSON, multi-document); `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<String>,
    /// Regions the node has.
    #[arg(long, default_value_t = 8)]
    regions: usize,
    /// Output format: text or json.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    output: String,
}

/// The DAG's NTs in stages that may run in parallel (`snic_control::parallel`).
fn parallel_stages(state: &State, dag: &str) -> Option<Vec<Vec<String>>> {
    let Spec::Dag(d) = &state.get(Kind::Dag, dag)?.spec else { return None };
    snic_control::parallel::stages(d, |nt| match &state.get(Kind::Nt, nt)?.spec {
        Spec::Nt(n) => Some(n.config.access()),
        _ => None,
    })
}

/// Runs the command.
pub fn run(a: PlanArgs) -> anyhow::Result<()> {
    let mut objects = Vec::new();
    for f in &a.files {
        let text = if f == "-" {
            std::io::read_to_string(std::io::stdin())?
        } else {
            std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("{f}: {e}"))?
        };
        objects.extend(manifest::parse(&text).map_err(|e| anyhow::anyhow!("{f}: {e}"))?);
    }
    let state = State::default().apply(objects)?;
    let p = plan::plan(&state, a.regions)?;
    if a.output == "json" {
        let v = serde_json::json!({
            "tenants": p.tenants.iter().map(|t| serde_json::json!({"name": t.name, "id": t.id.0, "weight": t.weight, "vnis": t.vnis})).collect::<Vec<_>>(),
            "chains": p.chains.iter().enumerate().map(|(i, c)| serde_json::json!({"chain": i, "region": i, "nts": c.nts})).collect::<Vec<_>>(),
            "dags": p.dags.iter().map(|d| serde_json::json!({"name": d.name, "uid": d.uid.0, "tenant": d.tenant.0,
                "steps": d.steps.iter().map(|(c, m)| serde_json::json!({"chain": c, "runs": p.chains[*c].nts.iter().enumerate().filter(|(i, _)| m.runs(*i)).map(|(_, n)| n.clone()).collect::<Vec<_>>()})).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "rules": p.rules.len(),
            "routes": p.routes.len(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("tenants:");
    for t in &p.tenants {
        println!("  {:<16} id {:<4} weight {:<3} VNIs {:?}", t.name, t.id.0, t.weight, t.vnis);
    }
    println!("chains ({} of {} regions):", p.chains.len(), a.regions);
    for (i, c) in p.chains.iter().enumerate() {
        println!("  region {i}: {}", c.nts.join(" → "));
    }
    println!("DAGs:");
    for d in &p.dags {
        let steps: Vec<String> = d
            .steps
            .iter()
            .map(|(c, m)| {
                let run: Vec<&str> = p.chains[*c].nts.iter().enumerate().filter(|(i, _)| m.runs(*i)).map(|(_, n)| n.as_str()).collect();
                format!("region {c} [{}]", run.join(", "))
            })
            .collect();
        println!("  {:<16} uid {:<4} {}", d.name, d.uid.0, steps.join(" ⇒ "));
        if let Some(Spec::Dag(spec)) = state.get(Kind::Dag, &d.name).map(|o| &o.spec) {
            if let Some(c) = plan::chain_candidates(spec) {
                println!("  {:<16}          chain candidates: {} (every contiguous run of its NTs)", "", c.len());
            }
        }
        if let Some(cs) = p.compact_chains(d) {
            let nts: Vec<&str> = cs.iter().flat_map(|&c| p.chains[c].nts.iter().map(String::as_str)).collect();
            println!(
                "  {:<16}          compact form: {} (one region; elastic nodes switch to it while regions are short)",
                "",
                nts.join(" → ")
            );
        }
        if !d.groups.is_empty() {
            let g: Vec<String> = d.groups.iter().map(|(a, b)| format!("steps {a}..{b}")).collect();
            println!("  {:<16}          fork/join: {} run in parallel on each packet", "", g.join(", "));
        } else if let Some(s) = parallel_stages(&state, &d.name) {
            if s.iter().any(|st| st.len() > 1) {
                let st: Vec<String> = s.iter().map(|st| format!("[{}]", st.join(" | "))).collect();
                println!("  {:<16}          may run in parallel (NT-level; `parallel: true` on the DAG): {}", "", st.join(" → "));
            }
        }
    }
    println!("rules: {}, routes: {}", p.rules.len(), p.routes.len());
    Ok(())
}
