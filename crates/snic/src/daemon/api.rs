//! The HTTP/JSON API. Errors are JSON `{"error": {code, kind, name, field, reason}}` with a
//! stable `code`; bodies over 1 MiB get 413; nothing a client sends can crash the daemon.
//!
//! | method | path | |
//! |---|---|---|
//! | POST | `/v1/apply` | body: manifest (YAML or JSON, multi-document); all or nothing |
//! | GET | `/v1/objects/{kind}` | list, as manifest documents |
//! | GET | `/v1/objects/{kind}/{name}` | one |
//! | DELETE | `/v1/objects/{kind}/{name}` | refused while in use |
//! | GET | `/v1/status` | regions with chains and load, tenants with rates and drops |
//! | GET | `/metrics` | Prometheus |

// Handlers return the error response itself (axum's idiom); its size does not matter on the
// control path.
#![allow(clippy::result_large_err)]

use super::persist::Db;
use super::worker::DataPlane;
use axum::extract::{DefaultBodyLimit, Path, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use snic_control::manifest::{self, ErrorCode, Kind};
use snic_control::plan::{self, Plan};
use snic_control::state::State;
use std::sync::{Arc, Mutex};

/// Largest request body accepted.
pub const MAX_BODY: usize = 1 << 20;

/// The control thread's state.
pub struct Control {
    /// Desired state, as applied and stored.
    pub state: State,
    /// Its plan, as running.
    pub plan: Plan,
    /// Persistence.
    pub db: Db,
    /// Regions of this node.
    pub regions: usize,
    /// The most chains a plan may have (no limit when chains come and go).
    pub plan_regions: usize,
    /// The data plane.
    pub dp: DataPlane,
}

type Shared = Arc<Mutex<Control>>;

/// The API's routes.
pub fn router(ctl: Shared) -> Router {
    Router::new()
        .route("/v1/apply", post(apply))
        .route("/v1/objects/{kind}", get(list))
        .route("/v1/objects/{kind}/{name}", get(get_one).delete(delete))
        .route("/v1/status", get(status))
        .route("/metrics", get(super::metrics::metrics))
        .fallback(|| async { err(StatusCode::NOT_FOUND, "not_found", "", "", "path", "no such endpoint") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn(refuse_oversized))
        .with_state(ctl)
}

/// Refuses a request whose announced length is over the limit before reading any of it (the
/// body limit alone waits for the bytes to arrive; chunked bodies still meet it).
async fn refuse_oversized(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let announced = req.headers().get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|s| s.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return err(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "",
            "",
            "body",
            &format!("requests are limited to {MAX_BODY} bytes"),
        );
    }
    next.run(req).await
}

fn err(status: StatusCode, code: &str, kind: &str, name: &str, field: &str, reason: &str) -> Response {
    (status, Json(json!({"error": {"code": code, "kind": kind, "name": name, "field": field, "reason": reason}}))).into_response()
}

fn manifest_err(e: manifest::Error) -> Response {
    let status = match e.code {
        ErrorCode::InvalidManifest => StatusCode::BAD_REQUEST,
        ErrorCode::UnknownReference | ErrorCode::Cycle | ErrorCode::Duplicate => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::VniConflict | ErrorCode::InUse | ErrorCode::Capacity => StatusCode::CONFLICT,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
    };
    (status, Json(json!({ "error": e }))).into_response()
}

fn internal(e: anyhow::Error) -> Response {
    err(StatusCode::INTERNAL_SERVER_ERROR, "internal", "", "", "", &format!("{e:#}"))
}

fn lock(ctl: &Shared) -> Result<std::sync::MutexGuard<'_, Control>, Response> {
    ctl.lock().map_err(|_| err(StatusCode::INTERNAL_SERVER_ERROR, "internal", "", "", "", "control state poisoned"))
}

/// Stores and deploys a new state; on a deployment failure the stored state is rolled back.
fn commit(c: &mut Control, next: State) -> Result<(), Response> {
    let p = plan::plan(&next, c.plan_regions).map_err(manifest_err)?;
    c.db.save(&next).map_err(internal)?;
    if let Err(e) = c.dp.deploy(p.clone()) {
        let _ = c.db.save(&c.state);
        return Err(internal(e));
    }
    c.state = next;
    c.plan = p;
    Ok(())
}

async fn apply(AxState(ctl): AxState<Shared>, body: String) -> Response {
    let objs = match manifest::parse(&body) {
        Ok(o) => o,
        Err(e) => return manifest_err(e),
    };
    let applied: Vec<_> = objs.iter().map(|o| json!({"kind": o.kind.as_str(), "name": o.name})).collect();
    let mut c = match lock(&ctl) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let next = match c.state.apply(objs) {
        Ok(s) => s,
        Err(e) => return manifest_err(e),
    };
    match commit(&mut c, next) {
        Ok(()) => Json(json!({"applied": applied, "chains": c.plan.chains.len(), "regions": c.regions})).into_response(),
        Err(r) => r,
    }
}

fn kind_of(k: &str) -> Result<Kind, Response> {
    Kind::from_cli(k).ok_or_else(|| err(StatusCode::NOT_FOUND, "not_found", k, "", "kind", "unknown kind (tenant, nt, dag, rule, route)"))
}

async fn list(AxState(ctl): AxState<Shared>, Path(kind): Path<String>) -> Response {
    let k = match kind_of(&kind) {
        Ok(k) => k,
        Err(r) => return r,
    };
    match lock(&ctl) {
        Ok(c) => Json(c.state.list(k).map(|o| o.to_document()).collect::<Vec<_>>()).into_response(),
        Err(r) => r,
    }
}

async fn get_one(AxState(ctl): AxState<Shared>, Path((kind, name)): Path<(String, String)>) -> Response {
    let k = match kind_of(&kind) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let c = match lock(&ctl) {
        Ok(c) => c,
        Err(r) => return r,
    };
    match c.state.get(k, &name) {
        Some(o) => Json(o.to_document()).into_response(),
        None => err(StatusCode::NOT_FOUND, "not_found", k.as_str(), &name, "metadata.name", "no such object"),
    }
}

async fn delete(AxState(ctl): AxState<Shared>, Path((kind, name)): Path<(String, String)>) -> Response {
    let k = match kind_of(&kind) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let mut c = match lock(&ctl) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let next = match c.state.delete(k, &name) {
        Ok(s) => s,
        Err(e) => return manifest_err(e),
    };
    match commit(&mut c, next) {
        Ok(()) => Json(json!({"deleted": {"kind": k.as_str(), "name": name}})).into_response(),
        Err(r) => r,
    }
}

async fn status(AxState(ctl): AxState<Shared>) -> Response {
    let c = match lock(&ctl) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let snap = c.dp.snapshot.lock().map(|s| s.clone()).unwrap_or_default();
    let tenants: Vec<_> = c
        .plan
        .tenants
        .iter()
        .map(|t| {
            let s = snap.tenants.iter().find(|s| s.id == t.id.0).cloned().unwrap_or_default();
            json!({"name": t.name, "id": t.id.0, "weight": t.weight, "vnis": t.vnis, "stats": s})
        })
        .collect();
    let (up, age) = snap.health(std::time::Instant::now());
    Json(json!({
        "data_plane": {"up": up, "last_update_ms": age.as_millis().min(u64::MAX as u128) as u64},
        "regions": {"total": c.regions, "used": c.plan.chains.len(), "instances": snap.regions},
        "tenants": tenants,
        "unattributed_drops": snap.unattributed_drops,
        "latency_ns": {"p50": snap.latency_p50_ns, "p99": snap.latency_p99_ns},
        "rebuilds": snap.rebuilds,
        "fairness": {"epochs": snap.epochs, "resources": snap.resources},
        "elastic": snap.elastic,
    }))
    .into_response()
}
