//! The kubectl-style client of a running daemon: `snic apply -f`, `snic get`, `snic delete`,
//! `snic status`. The server is `--server`, else `$SNIC_SERVER`, else http://127.0.0.1:7878.

use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;

/// Where the daemon's API is, and the credential to show it (docs/operations.md,
/// "Credentials").
#[derive(Args, Clone)]
pub struct Server {
    /// The daemon's API URL [default: the credentials file's `server`, or http://127.0.0.1:7878].
    #[arg(long, env = "SNIC_SERVER", global = true)]
    server: Option<String>,
    /// The API credential: the operator's token or a tenant's.
    #[arg(long, env = "SNIC_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// A credentials file (YAML `server:`, `token:` and `ca_file:`, as a kubeconfig holds
    /// them); --server, --token and --ca-file override it.
    #[arg(long, env = "SNIC_CREDENTIALS", global = true)]
    credentials: Option<std::path::PathBuf>,
    /// The certificate (PEM) an https:// server's certificate must be signed by (or be), when it
    /// is not one of the Mozilla roots: a node's own CA or self-signed certificate.
    #[arg(long, env = "SNIC_CA_FILE", global = true)]
    ca_file: Option<std::path::PathBuf>,
}

/// A credentials file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Credentials {
    #[serde(default)]
    server: Option<String>,
    #[serde(default)]
    token: Option<String>,
    /// Relative to the credentials file.
    #[serde(default)]
    ca_file: Option<std::path::PathBuf>,
}

impl Server {
    /// The URL, the token and the CA file, from the flags, the environment and the credentials
    /// file.
    fn resolve(&self) -> anyhow::Result<(String, Option<String>, Option<std::path::PathBuf>)> {
        let file = match &self.credentials {
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| format!("reading the credentials file {}", p.display()))?;
                let mut c = serde_saphyr::from_str::<Credentials>(&text)
                    .map_err(|e| anyhow::anyhow!("the credentials file {}: {e}", p.display()))?;
                c.ca_file = c.ca_file.map(|f| p.parent().map_or(f.clone(), |d| d.join(f)));
                c
            }
            None => Credentials { server: None, token: None, ca_file: None },
        };
        let url = self.server.clone().or(file.server).unwrap_or_else(|| "http://127.0.0.1:7878".into());
        Ok((url, self.token.clone().or(file.token), self.ca_file.clone().or(file.ca_file)))
    }

    /// Sends a request to `path` on the daemon with the credential.
    fn call(&self, method: &str, path: &str, body: Option<String>) -> anyhow::Result<Value> {
        let (url, token, ca) = self.resolve()?;
        call_on(&agent(ca.as_deref())?, method, format!("{url}{path}"), body, token.as_deref())
    }
}

/// Options of `snic apply`.
#[derive(Args)]
pub struct ApplyArgs {
    /// Manifest files (YAML or JSON, multi-document); `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<String>,
    #[command(flatten)]
    server: Server,
}

/// Options of `snic get`.
#[derive(Args)]
pub struct GetArgs {
    /// Kind: tenant, nt, dag, rule, route (plural allowed).
    kind: String,
    /// Name; all of the kind if omitted.
    name: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json", "yaml"])]
    output: String,
    #[command(flatten)]
    server: Server,
}

/// Options of `snic delete`.
#[derive(Args)]
pub struct DeleteArgs {
    /// Kind.
    kind: String,
    /// Name.
    name: String,
    #[command(flatten)]
    server: Server,
}

/// Options of `snic status`.
#[derive(Args)]
pub struct StatusArgs {
    /// Output format.
    #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
    output: String,
    #[command(flatten)]
    server: Server,
}

/// Options of `snic token`.
#[derive(Args)]
pub struct TokenArgs {
    /// Print JSON (`{"token": ..., "sha256": ...}`).
    #[arg(long)]
    json: bool,
}

/// `snic token`: 32 random bytes as hex, and the SHA-256 a Tenant object carries.
pub fn token(a: TokenArgs) -> anyhow::Result<()> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut b).map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    let token: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let sha = snic_control::auth::token_sha256(&token);
    if a.json {
        println!("{}", serde_json::json!({"token": token, "sha256": sha}));
    } else {
        println!("token:  {token}\nsha256: {sha}\n(the token goes to its holder or the operator's token file; a tenant's spec.token_sha256 gets the sha256)");
    }
    Ok(())
}

/// Options of `snic drain`.
#[derive(Args)]
pub struct DrainArgs {
    /// Only start draining: do not wait for the node's flows to end.
    #[arg(long)]
    no_wait: bool,
    /// Stop waiting after this many seconds (the node keeps draining).
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Stop draining: the node's health check passes again and the ToR takes it back.
    #[arg(long, conflicts_with = "no_wait")]
    cancel: bool,
    #[command(flatten)]
    server: Server,
}

/// `snic drain`: withdraws the node from a pool behind a switch with no flow lost, and waits
/// until it holds no flow's state (docs/pool.md, "Draining a node").
pub fn drain(a: DrainArgs) -> anyhow::Result<()> {
    if a.cancel {
        a.server.call("DELETE", "/v1/drain", None)?;
        println!("no longer draining: the health check passes again");
        return Ok(());
    }
    a.server.call("POST", "/v1/drain", Some(String::new()))?;
    println!(
        "draining: the health check fails from now, so the ToR withdraws the node; its peers bring back the flows whose state it holds"
    );
    if a.no_wait {
        return Ok(());
    }
    let t0 = std::time::Instant::now();
    let mut last = None;
    loop {
        let v = a.server.call("GET", "/v1/status", None)?;
        // (Until the data plane publishes that it drains, its count is not the drain's.)
        if let Some(flows) = v["draining"]["flows"].as_u64() {
            if last != Some(flows) {
                println!("{flows} flow directions hold state here");
                last = Some(flows);
            }
            if flows == 0 {
                println!("drained: no flow's state is left here; the node can stop");
                return Ok(());
            }
        }
        if t0.elapsed().as_secs() >= a.timeout_s {
            bail!(
                "still draining after {} s ({} flow directions hold state here); the node keeps draining (`snic drain --cancel` stops it)",
                a.timeout_s,
                last.unwrap_or(0)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// An HTTP(S) client; with `ca`, https:// servers are checked against that certificate instead of
/// the Mozilla roots.
fn agent(ca: Option<&std::path::Path>) -> anyhow::Result<ureq::Agent> {
    use ureq::tls::{Certificate, RootCerts, TlsConfig};
    let mut b = ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(std::time::Duration::from_secs(30)));
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).with_context(|| format!("reading the CA file {}", ca.display()))?;
        let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_, _>>()
            .with_context(|| format!("the CA file {} is not PEM", ca.display()))?;
        if certs.is_empty() {
            anyhow::bail!("the CA file {} holds no certificate", ca.display());
        }
        b = b.tls_config(TlsConfig::builder().root_certs(RootCerts::Specific(std::sync::Arc::new(certs))).build());
    }
    Ok(b.build().into())
}

/// Sends a request; returns the JSON body of a 2xx, or fails with the API's error.
pub(crate) fn call(method: &str, url: String, body: Option<String>) -> anyhow::Result<Value> {
    call_on(&agent(None)?, method, url, body, None)
}

/// [`call`] through agent `a`, with a bearer token.
fn call_on(a: &ureq::Agent, method: &str, url: String, body: Option<String>, token: Option<&str>) -> anyhow::Result<Value> {
    let auth = token.map(|t| format!("Bearer {}", t.trim()));
    let res = match (method, body) {
        ("POST", Some(b)) => {
            let r = a.post(&url).header("content-type", "application/yaml");
            match &auth {
                Some(h) => r.header("authorization", h),
                None => r,
            }
            .send(b)
        }
        ("DELETE", _) => {
            let r = a.delete(&url);
            match &auth {
                Some(h) => r.header("authorization", h),
                None => r,
            }
            .call()
        }
        _ => {
            let r = a.get(&url);
            match &auth {
                Some(h) => r.header("authorization", h),
                None => r,
            }
            .call()
        }
    };
    let mut res = res.with_context(|| format!("cannot reach the snic daemon at {url}"))?;
    let status = res.status();
    let text = res.body_mut().read_to_string().context("reading the response")?;
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if !status.is_success() {
        let e = &v["error"];
        if e.is_object() {
            bail!(
                "{} ({}): {} {:?}: `{}`: {}",
                status.as_u16(),
                e["code"].as_str().unwrap_or("?"),
                e["kind"].as_str().unwrap_or(""),
                e["name"].as_str().unwrap_or(""),
                e["field"].as_str().unwrap_or(""),
                e["reason"].as_str().unwrap_or("")
            );
        }
        bail!("{}: {v}", status.as_u16());
    }
    Ok(v)
}

/// `snic apply`.
pub fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let mut docs = Vec::new();
    for f in &a.files {
        let (text, dir) = if f == "-" {
            (std::io::read_to_string(std::io::stdin())?, std::path::PathBuf::from("."))
        } else {
            let dir = std::path::Path::new(f).parent().map_or_else(|| ".".into(), |p| p.to_path_buf());
            (std::fs::read_to_string(f).with_context(|| format!("reading {f}"))?, dir)
        };
        docs.push(inline_modules(text, &dir).with_context(|| format!("in {f}"))?);
    }
    let v = a.server.call("POST", "/v1/apply", Some(docs.join("\n---\n")))?;
    for o in v["applied"].as_array().into_iter().flatten() {
        println!("{}/{} applied", o["kind"].as_str().unwrap_or("?"), o["name"].as_str().unwrap_or("?"));
    }
    Ok(())
}

/// A `wasm` NT's `module_file` (relative to the manifest's directory) read and sent as its
/// bytes, `module` (base64): the node cannot read the client's files. Manifests without one are
/// sent as they were written.
fn inline_modules(text: String, dir: &std::path::Path) -> anyhow::Result<String> {
    use base64::Engine as _;
    if !text.contains("module_file") {
        return Ok(text);
    }
    let mut values: Vec<Value> = serde_saphyr::from_multiple_with_options(&text, snic_control::manifest::yaml_options())
        .map_err(|e| anyhow::anyhow!("{}", e.without_snippet()))?;
    for v in values.iter_mut() {
        let Some(cfg) = v.pointer_mut("/spec/config").and_then(Value::as_object_mut) else { continue };
        let Some(file) = cfg.remove("module_file") else { continue };
        let name = file.as_str().context("`module_file` must be a path")?;
        let path = dir.join(name);
        let bytes = std::fs::read(&path).with_context(|| format!("reading the module {}", path.display()))?;
        cfg.insert("module".into(), Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)));
    }
    let docs: Vec<String> = values.iter().filter(|v| !v.is_null()).map(serde_json::to_string).collect::<Result<_, _>>()?;
    Ok(docs.join("\n---\n"))
}

/// `snic get`.
pub fn get(a: GetArgs) -> anyhow::Result<()> {
    let url = match &a.name {
        Some(n) => format!("/v1/objects/{}/{n}", a.kind),
        None => format!("/v1/objects/{}", a.kind),
    };
    let v = a.server.call("GET", &url, None)?;
    match a.output.as_str() {
        "json" => println!("{}", serde_json::to_string_pretty(&v)?),
        "yaml" => {
            let docs: Vec<Value> = if v.is_array() { v.as_array().cloned().unwrap_or_default() } else { vec![v] };
            let parts: Vec<String> = docs.iter().map(serde_saphyr::to_string).collect::<Result<_, _>>()?;
            print!("{}", parts.join("---\n"));
        }
        _ => {
            println!("{:<10} {:<24} SPEC", "KIND", "NAME");
            let docs: Vec<Value> = if v.is_array() { v.as_array().cloned().unwrap_or_default() } else { vec![v] };
            for d in docs {
                println!("{:<10} {:<24} {}", d["kind"].as_str().unwrap_or(""), d["metadata"]["name"].as_str().unwrap_or(""), d["spec"]);
            }
        }
    }
    Ok(())
}

/// `snic delete`.
pub fn delete(a: DeleteArgs) -> anyhow::Result<()> {
    a.server.call("DELETE", &format!("/v1/objects/{}/{}", a.kind, a.name), None)?;
    println!("{}/{} deleted", a.kind, a.name);
    Ok(())
}

/// `snic status`.
pub fn status(a: StatusArgs) -> anyhow::Result<()> {
    let v = a.server.call("GET", "/v1/status", None)?;
    let down = v["data_plane"]["up"].as_bool() == Some(false);
    let health = || {
        if down {
            anyhow::bail!(
                "the data plane is down: no update for {} ms; the node forwards nothing (see its log)",
                v["data_plane"]["last_update_ms"]
            )
        }
        Ok(())
    };
    if a.output == "json" {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return health();
    }
    let el = &v["elastic"];
    if el["enabled"].as_bool() == Some(true) {
        println!(
            "regions: {} (elastic: launch delay {} ms, MONITOR_PERIOD {} ms, build {:.1} µs); {} chains planned",
            v["regions"]["total"],
            el["launch_delay_ms"],
            el["monitor_period_ms"],
            el["build_us"].as_f64().unwrap_or(0.0),
            v["regions"]["used"]
        );
    } else {
        println!("regions: {} of {} used", v["regions"]["used"], v["regions"]["total"]);
    }
    let instances = v["regions"]["instances"].as_array().map_or(&[][..], |a| a.as_slice());
    // (With several dispatcher threads, each runs its own instances: say whose.)
    let threads = instances.iter().any(|r| r["thread"].as_u64().unwrap_or(0) > 0);
    for r in instances {
        let chain: Vec<&str> = r["chain"].as_array().into_iter().flatten().filter_map(|c| c.as_str()).collect();
        let thread = if threads { format!("thread {} ", r["thread"]) } else { String::new() };
        println!(
            "  {thread}instance {:<3} {:<9} [{}]  on {}  queued {}  free credits {}",
            r["region"],
            r["state"].as_str().unwrap_or(""),
            chain.join(" → "),
            r["place"].as_str().unwrap_or("?"),
            r["queued"],
            r["credits"]
        );
    }
    // Counters and events: elastic NTs, and regions moved between cores (with worker threads).
    let moved = el["counters"].as_array().into_iter().flatten().any(|c| c[0] == "moves" && c[1].as_u64().unwrap_or(0) > 0);
    if el["enabled"].as_bool() == Some(true) || moved {
        let counts: Vec<String> =
            el["counters"].as_array().into_iter().flatten().map(|c| format!("{} {}", c[0].as_str().unwrap_or(""), c[1])).collect();
        println!("  {}", counts.join(", "));
        let events = el["events"].as_array().cloned().unwrap_or_default();
        for e in events.iter().skip(events.len().saturating_sub(8)) {
            println!(
                "  {:>10.3} ms  {:<40} [{}] region {}  {:.1} µs",
                e["at_ms"].as_f64().unwrap_or(0.0),
                e["event"].as_str().unwrap_or(""),
                e["chain"].as_str().unwrap_or(""),
                e["region"],
                e["took_us"].as_f64().unwrap_or(0.0)
            );
        }
    }
    println!("tenants:");
    println!(
        "  {:<16} {:>10} {:>10} {:>12} {:>12} {:>9} {:>10}",
        "NAME", "rx pkt/s", "tx pkt/s", "rx packets", "tx packets", "dropped", "p99 ns"
    );
    for t in v["tenants"].as_array().into_iter().flatten() {
        let s = &t["stats"];
        let dropped: u64 = s["drops"].as_array().into_iter().flatten().filter_map(|d| d[1].as_u64()).sum();
        println!(
            "  {:<16} {:>10.0} {:>10.0} {:>12} {:>12} {:>9} {:>10}",
            t["name"].as_str().unwrap_or(""),
            s["rx_pps"].as_f64().unwrap_or(0.0),
            s["tx_pps"].as_f64().unwrap_or(0.0),
            s["rx_packets"].as_u64().unwrap_or(0),
            s["tx_packets"].as_u64().unwrap_or(0),
            dropped,
            s["latency_p99_ns"].as_u64().unwrap_or(0)
        );
    }
    println!("fairness (weighted DRF on measured demand; {} epochs so far):", v["fairness"]["epochs"]);
    println!(
        "  {:<16} {:>6} {:<20} {:>9} {:>9} {:>12}  DEMAND → ALLOCATION",
        "NAME", "WEIGHT", "DOMINANT", "SHARE", "GRANTED", "LIMIT pkt/s"
    );
    for t in v["tenants"].as_array().into_iter().flatten() {
        let f = &t["stats"]["fair"];
        let pairs: Vec<String> = f["demand"]
            .as_array()
            .into_iter()
            .flatten()
            .zip(f["allocation"].as_array().into_iter().flatten())
            .filter(|(d, _)| d[1].as_f64().unwrap_or(0.0) > 0.0)
            .map(|(d, a)| {
                format!("{} {:.3}→{:.3}", d[0].as_str().unwrap_or(""), d[1].as_f64().unwrap_or(0.0), a[1].as_f64().unwrap_or(0.0))
            })
            .collect();
        println!(
            "  {:<16} {:>6} {:<20} {:>9.3} {:>8.1}% {:>12}  {}",
            t["name"].as_str().unwrap_or(""),
            t["weight"].as_u64().unwrap_or(1),
            f["dominant"].as_str().unwrap_or("-"),
            f["dominant_share"].as_f64().unwrap_or(0.0),
            100.0 * f["fraction"].as_f64().unwrap_or(1.0),
            f["limit_pps"].as_f64().map_or("-".to_string(), |p| format!("{p:.0}")),
            pairs.join(", ")
        );
    }
    println!("latency p50 {} ns, p99 {} ns", v["latency_ns"]["p50"], v["latency_ns"]["p99"]);
    let p = &v["pool"];
    if p.is_object() {
        let n = |k: &str| p[k].as_u64().unwrap_or(0);
        println!(
            "pool: {} (generation {}); datagrams in {}, out {}; dropped: {} malformed, {} unauthenticated, {} replayed, {} of another version, {} invalid",
            p["me"].as_str().unwrap_or("?"),
            n("generation"),
            n("datagrams_in"),
            n("datagrams_out"),
            n("refused_malformed"),
            n("refused_unauthenticated"),
            n("refused_replayed"),
            n("refused_version"),
            n("refused_invalid")
        );
        println!(
            "  {:<24} {:>5} {:>10} {:>12} {:>10} {:>12} {:>7} {:>8}",
            "MEMBER", "HOPS", "REPORT ms", "FREE REGIONS", "MEM MiB", "PORT Gb/s", "CHAINS", "PROTOCOL"
        );
        let opt = |x: &Value| x.as_f64().map_or("-".to_string(), |f| format!("{f:.0}"));
        for m in p["members"].as_array().into_iter().flatten() {
            println!(
                "  {:<24} {:>5} {:>10} {:>12} {:>10} {:>12} {:>7} {:>8}",
                m["addr"].as_str().unwrap_or("?"),
                opt(&m["hops"]),
                opt(&m["report_age_ms"]),
                opt(&m["free_regions"]),
                opt(&m["mem_free_mib"]),
                m["port_spare_gbps"].as_f64().map_or("-".to_string(), |f| format!("{f:.1}")),
                m["chains"].as_array().map_or(0, Vec::len),
                opt(&m["version"])
            );
        }
    }
    health()
}
