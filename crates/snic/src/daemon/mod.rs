//! `snic run`: the daemon. One data-plane thread drives the node (`worker`); the control thread
//! — the paper's SoftCore — serves the HTTP/JSON API (`api`) and Prometheus metrics (`metrics`),
//! keeps the desired state (persisted with redb, `persist`) and hands each new plan to the data
//! plane. SIGINT and SIGTERM stop both cleanly.

pub mod api;
pub mod config;
pub mod metrics;
pub mod persist;
pub mod worker;

use anyhow::Context;
use clap::Args;
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
}

/// Runs the daemon until SIGINT/SIGTERM.
pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let mut cfg = match &a.config {
        Some(p) => config::NodeFile::load(p)?,
        None => config::NodeFile::default(),
    };
    if let Some(v) = a.api {
        cfg.api = v.parse().context("--api")?;
    }
    if let Some(v) = a.data {
        cfg.data = v.parse().context("--data")?;
    }
    if let Some(v) = a.state_dir {
        cfg.state_dir = v;
    }
    let db = persist::Db::open(&cfg.state_dir)?;
    let state = db.load()?;
    let plan = plan::plan(&state, cfg.elastic.plan_regions(cfg.regions)).context("the stored state no longer fits this node")?;
    let (dp, data_addr) = worker::DataPlane::start(&cfg, plan.clone())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let ctl = api::Shared::new(
        api::Control { state, plan, db, regions: cfg.regions, plan_regions: cfg.elastic.plan_regions(cfg.regions), dp },
        std::time::Duration::from_millis(cfg.api_body_timeout_ms),
    );
    let served = ctl.clone();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.api).await.with_context(|| format!("binding the API on {}", cfg.api))?;
        let api_addr = listener.local_addr()?;
        // One line a supervisor or a test can read to learn the bound addresses.
        println!("snic: data {data_addr} (VXLAN/UDP), api http://{api_addr}, state {}", cfg.state_dir.display());
        let app = api::router(served);
        axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?;
        eprintln!("snic: shutting down");
        anyhow::Ok(())
    })?;
    let ctl = Arc::try_unwrap(ctl).map_err(|_| anyhow::anyhow!("API still running"))?.into_inner();
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
