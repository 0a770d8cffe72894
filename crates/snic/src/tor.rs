//! `snic tor`: the health checker of a pool behind a switch, run on the ToR (a Linux router).
//! It probes every node's `GET /v1/health` and keeps the ToR's resilient next-hop group for the
//! pool's anycast address to the nodes that answer (docs/pool.md, "Node failure and return").
//! The policy — how many misses take a node out, how many answers put it back — is
//! `snic_core::pool::health`; this is its driver: HTTP probes, `ip nexthop replace`, logs.

use anyhow::{bail, Context};
use clap::Args;
use snic_core::pool::health::{Change, Health, HealthConfig};
use std::process::Command;
use std::time::{Duration, Instant};

/// Keep a ToR's resilient next-hop group to the healthy nodes of a pool behind it.
#[derive(Args)]
pub struct TorArgs {
    /// The resilient next-hop group routing the pool's anycast address
    /// (`ip nexthop add id GROUP group 1/2/3 type resilient buckets 64`).
    #[arg(long)]
    group: u32,
    /// A node: its next-hop id in the group and its API (`2=http://10.0.2.2:7878`). Once per
    /// node.
    #[arg(long = "member", required = true, value_parser = parse_member)]
    members: Vec<(u32, String)>,
    /// How often every node is probed, ms.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// How long a probe waits for the answer, ms.
    #[arg(long, default_value_t = 100)]
    timeout_ms: u64,
    /// Failed probes in a row that take a node out of the group.
    #[arg(long, default_value_t = HealthConfig::default().down_after)]
    down_after: u32,
    /// Good probes in a row that put it back.
    #[arg(long, default_value_t = HealthConfig::default().up_after)]
    up_after: u32,
}

fn parse_member(s: &str) -> Result<(u32, String), String> {
    let (id, url) = s.split_once('=').ok_or("expected ID=URL, e.g. 2=http://10.0.2.2:7878")?;
    let id = id.trim().parse().map_err(|_| format!("`{id}` is not a next-hop id"))?;
    if !url.starts_with("http://") {
        return Err(format!("`{url}` is not an http:// URL of a node's API"));
    }
    Ok((id, url.trim_end_matches('/').to_string()))
}

/// Runs until killed (SIGTERM, SIGINT).
pub fn run(a: TorArgs) -> anyhow::Result<()> {
    if a.members.is_empty() || a.interval_ms == 0 || a.timeout_ms == 0 || a.down_after == 0 || a.up_after == 0 {
        bail!("--member, --interval-ms, --timeout-ms, --down-after and --up-after must be given and at least 1");
    }
    let show = ip(&["nexthop", "show", "id", &a.group.to_string()]).with_context(|| format!("next-hop group {}", a.group))?;
    if !show.contains("type resilient") {
        bail!(
            "next-hop group {} is not resilient ({}): a plain multipath group re-hashes every node's flows when one goes",
            a.group,
            show.trim()
        );
    }
    let start = Instant::now();
    let log = |what: &str| eprintln!("{:>9.3} tor: {what}", start.elapsed().as_secs_f64());
    log(&format!("keeping group {} to the healthy of {} nodes ({})", a.group, a.members.len(), show.trim()));
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_millis(a.timeout_ms))).build().into();
    let mut health = Health::new(a.members.iter().map(|m| m.0), HealthConfig { down_after: a.down_after, up_after: a.up_after });
    let interval = Duration::from_millis(a.interval_ms);
    loop {
        let round = Instant::now();
        let results: Vec<bool> = std::thread::scope(|s| {
            let probes: Vec<_> = a.members.iter().map(|(_, url)| s.spawn(|| probe(&agent, url))).collect();
            probes.into_iter().map(|p| p.join().unwrap_or(false)).collect()
        });
        let mut changed = false;
        for (i, ok) in results.into_iter().enumerate() {
            match health.handle_probe(i, ok) {
                Some(Change::Down(id)) => {
                    log(&format!("node {id} ({}) down: {} probes unanswered", a.members[i].1, a.down_after));
                    changed = true;
                }
                Some(Change::Up(id)) => {
                    log(&format!("node {id} ({}) healthy again: {} probes answered", a.members[i].1, a.up_after));
                    changed = true;
                }
                None => {}
            }
        }
        if changed {
            match health.group() {
                Some(ids) => {
                    let group = ids.iter().map(u32::to_string).collect::<Vec<_>>().join("/");
                    match ip(&["nexthop", "replace", "id", &a.group.to_string(), "group", &group, "type", "resilient"]) {
                        Ok(_) => log(&format!("group {} is now {group}", a.group)),
                        Err(e) => log(&format!("could not set group {} to {group}: {e:#}", a.group)),
                    }
                }
                None => log(&format!("every node is down: group {} keeps its last members", a.group)),
            }
        }
        std::thread::sleep(interval.saturating_sub(round.elapsed()));
    }
}

/// True if the node's API says it is healthy.
fn probe(agent: &ureq::Agent, url: &str) -> bool {
    agent.get(format!("{url}/v1/health")).call().is_ok_and(|r| r.status() == 200)
}

/// Runs `ip args`: its output, or its error.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip").args(args).output().context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
