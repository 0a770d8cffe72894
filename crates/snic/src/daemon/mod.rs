//! `snic run`: the daemon. One data-plane thread drives the node (`worker`); the control thread
//! — the paper's SoftCore — serves the HTTP/JSON API (`api`) and Prometheus metrics (`metrics`),
//! keeps the desired state (persisted with redb, `persist`) and hands each new plan to the data
//! plane. SIGINT and SIGTERM stop both cleanly.
//!
//! What happens inside is logged with `tracing` to stderr (text, or JSON lines with
//! `--log-format json`), at the level `--log` / `RUST_LOG` sets: the configuration, every change
//! of state and what it did to the node, launches and context switches, moves, tenants limited
//! and freed by fair sharing, failures. Nothing is logged per packet.

pub mod api;
pub mod config;
pub mod etcd;
pub mod handback;
mod merge;
pub mod metrics;
pub mod persist;
pub mod pool;
mod pool_work;
pub mod routes;
mod tls;
pub mod worker;

use anyhow::Context;
use clap::{Args, ValueEnum};
use snic_control::plan;
use std::path::PathBuf;
use std::sync::Arc;

/// Options of `snic run`.
#[derive(Args)]
pub struct RunArgs {
    /// Node configuration file (YAML); flags below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address of the HTTP/JSON API and /metrics.
    #[arg(long)]
    api: Option<String>,
    /// UDP address endpoints send VXLAN to.
    #[arg(long)]
    data: Option<String>,
    /// Directory of the persistent state.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// What to log: a level (error, warn, info, debug, trace) or per-module directives
    /// (`info,snic::daemon::worker=debug`). Launches and scale events are debug; context
    /// switches, moves, changes and fair-sharing limits info.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log: String,
    /// Log lines as text (for a terminal) or JSON, one object a line (for journald or a log
    /// shipper).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

/// Sends `tracing` events to stderr, filtered by `filter`.
fn init_logs(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(filter).with_context(|| format!("--log / RUST_LOG `{filter}`"))?;
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let r = match format {
        LogFormat::Text => b.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => b.json().flatten_event(true).with_current_span(false).try_init(),
    };
    // (Already set: a test that runs the daemon in-process twice keeps the first.)
    let _ = r;
    Ok(())
}

/// Runs the daemon until SIGINT/SIGTERM.
pub fn run(a: RunArgs) -> anyhow::Result<()> {
    init_logs(&a.log, a.log_format)?;
    let mut settings = match &a.config {
        Some(p) => config::load(p)?,
        None => config::NodeSettings::default(),
    };
    if let Some(v) = a.api {
        settings.api = v.parse().context("--api")?;
    }
    if let Some(v) = a.data {
        settings.data = v.parse().context("--data")?;
    }
    if let Some(v) = a.state_dir {
        settings.state_dir = v;
    }
    let where_from = a.config.as_ref().map_or_else(|| "(defaults)".into(), |p| p.display().to_string());
    let cfg = settings.validate().with_context(|| format!("{where_from}: invalid node configuration"))?;
    let s = &cfg.settings;
    tracing::info!(
        config = where_from,
        data = %s.data,
        api = %s.api,
        state_dir = %s.state_dir.display(),
        regions = s.regions,
        workers = s.workers,
        data_cores = s.data_cores,
        rx_queues = ?s.rx_queues,
        elastic = s.elastic.enabled,
        link_gbps = s.fairness.link_gbps,
        "starting"
    );
    // The desired state: the pool's, in etcd, or this node's own.
    let (changed_tx, changed_rx) = std::sync::mpsc::channel();
    let db = match cfg.pool.as_ref().filter(|p| !p.etcd.is_empty()) {
        Some(p) => persist::Store::Etcd(etcd::Etcd::start(p.etcd.clone(), p.etcd_prefix.clone(), changed_tx)?),
        None => persist::Store::Local(persist::Db::open(&s.state_dir)?),
    };
    let state = db.load().context("loading the desired state")?;
    let shared_state = matches!(db, persist::Store::Etcd(_));
    let from = if shared_state { "etcd" } else { "state_dir" };
    tracing::info!(objects = state.objects().count(), from, "state loaded");
    let plan = plan::plan(&state, cfg.plan_regions()).context("the stored state no longer fits this node")?;
    let (dp, data_addr) = worker::DataPlane::start(&cfg, plan.clone(), routes::resolve(&routes::prefixes(&plan)))?;
    let pool = match &cfg.pool {
        Some(p) => {
            let facts = pool::NodeFacts { regions: s.regions, store_buffers: s.store_buffers, link_gbps: s.fairness.link_gbps };
            let pool = pool::Pool::start(p, facts, dp.snapshot.clone(), dp.link(), data_addr)?;
            dp.set_pool(pool.link()?);
            Some(pool)
        }
        None => None,
    };
    let pool_addr = pool.as_ref().map(|p| p.addr);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Credentials: the operator's token from its file; without any, loopback only.
    let operator = match &s.auth {
        Some(a) => {
            let token = std::fs::read_to_string(&a.operator_token_file)
                .with_context(|| format!("auth.operator_token_file: reading {}", a.operator_token_file.display()))?;
            if token.trim().len() < 16 {
                anyhow::bail!(
                    "auth.operator_token_file: the token in {} is shorter than 16 characters (snic token makes one)",
                    a.operator_token_file.display()
                );
            }
            Some(snic_control::auth::token_sha256(&token))
        }
        None => None,
    };
    let tls = s.api_tls.as_ref().map(tls::acceptor).transpose()?;
    let mut api_at = s.api;
    if operator.is_none() && !api_at.ip().is_loopback() {
        let lo: std::net::IpAddr =
            if api_at.is_ipv4() { std::net::Ipv4Addr::LOCALHOST.into() } else { std::net::Ipv6Addr::LOCALHOST.into() };
        tracing::warn!(configured = %s.api, listening = %std::net::SocketAddr::new(lo, api_at.port()), "no API credentials configured (node.yaml auth:): the API listens on loopback only");
        api_at.set_ip(lo);
    }
    let ctl = api::Shared::new(
        api::Control { state, plan, db, regions: s.regions, plan_regions: cfg.plan_regions(), dp, pool },
        std::time::Duration::from_millis(s.api_body_timeout_ms),
        operator.clone(),
        s.limits.clone(),
    );
    if shared_state {
        // Deploys what other nodes apply (the watch says when the state may have changed).
        let weak = Arc::downgrade(&ctl);
        std::thread::Builder::new().name("snic-reload".into()).spawn(move || {
            while changed_rx.recv().is_ok() {
                // One reload for a burst of events.
                while changed_rx.try_recv().is_ok() {}
                let Some(shared) = weak.upgrade() else { return };
                // A state no node would have written (edited by hand in etcd) must not stop
                // this node from following the pool: a panic fails this reload alone.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| api::reload(&shared))).is_err() {
                    tracing::error!("loading the pool's desired state failed inside the node; running what it has");
                }
            }
        })?;
    }
    // Routes change (an interface comes, an endpoint moves): look up where tenants' VTEPs are
    // reached every few seconds, off the data plane's thread and outside the control lock.
    let routes_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let routes_thread = {
        let (weak, stop) = (Arc::downgrade(&ctl), routes_stop.clone());
        std::thread::Builder::new().name("snic-routes".into()).spawn(move || {
            let mut last = None;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::park_timeout(routes::REFRESH);
                let Some(shared) = weak.upgrade() else { return };
                let prefixes = routes::prefixes(&shared.lock().plan);
                let now = routes::resolve(&prefixes);
                if last.as_ref() != Some(&now) {
                    shared.lock().dp.set_interfaces(now.clone());
                    last = Some(now);
                }
            }
        })?
    };
    let served = ctl.clone();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(api_at).await.with_context(|| format!("binding the API on {api_at}"))?;
        let api_addr = listener.local_addr()?;
        // One line a supervisor or a test can read to learn the bound addresses.
        let pool = pool_addr.map_or_else(String::new, |a| format!(", pool {a}"));
        let creds = if operator.is_some() { "credentials required" } else { "no credentials: loopback only" };
        let scheme = if tls.is_some() { "https" } else { "http" };
        println!("snic: data {data_addr} (VXLAN/UDP), api {scheme}://{api_addr} ({creds}), state {}{pool}", s.state_dir.display());
        tracing::info!(data = %data_addr, api = %api_addr, tls = tls.is_some(), credentials = operator.is_some(), "serving");
        let app = api::router(served);
        match tls {
            Some(tls) => tls::serve(listener, tls, app, shutdown_signal()).await?,
            None => axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?,
        }
        tracing::info!("shutting down");
        anyhow::Ok(())
    })?;
    routes_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    routes_thread.thread().unpark();
    let _ = routes_thread.join();
    // A request still being answered when the server stopped (its blocking work, the reload
    // of the pool's state a stale apply started) holds the shared state a moment longer: wait
    // for it, a bounded while (a loaded machine's CI saw the daemon exit 1 here).
    let t0 = std::time::Instant::now();
    let mut ctl = ctl;
    let ctl = loop {
        match Arc::try_unwrap(ctl) {
            Ok(c) => break c.into_inner(),
            Err(back) if t0.elapsed() < std::time::Duration::from_secs(10) => {
                ctl = back;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(_) => anyhow::bail!("the API's requests did not finish within 10 s of the shutdown"),
        }
    };
    if let Some(p) = ctl.pool {
        p.stop();
    }
    ctl.dp.stop();
    Ok(())
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
