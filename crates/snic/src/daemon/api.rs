//! The HTTP/JSON API. Errors are JSON `{"error": {code, kind, name, field, reason}}` with a
//! stable `code`; bodies over 4 MiB get 413; nothing a client sends can crash or wedge the daemon.
//!
//! - A manifest must be sent as `application/yaml` (also `application/x-yaml`, `text/yaml`) or
//!   `application/json`; anything else gets 415, so a web page cannot post one as a CORS "simple
//!   request" (form or `text/plain`).
//! - A body must arrive within `api_body_timeout_ms` (node.yaml; 10 s by default; 408 otherwise).
//! - Parsing, validation and planning run off the async runtime (`spawn_blocking`) and outside
//!   the control lock, so `status`, `get` and `/metrics` answer while a large apply is checked;
//!   applies and deletes are serialized by their own lock. A panic in that work fails only its
//!   request (500 `internal`): the stored and running state are replaced only at the end of a
//!   successful commit, so no request can leave them half-changed.
//!
//! | method | path | |
//! |---|---|---|
//! | POST | `/v1/apply` | body: manifest (YAML or JSON, multi-document); all or nothing |
//! | GET | `/v1/objects/{kind}` | list, as manifest documents |
//! | GET | `/v1/objects/{kind}/{name}` | one (an NT, DAG or rule: `TENANT/NAME`, or a tenant's own `NAME`) |
//! | DELETE | `/v1/objects/{kind}/{name}` | refused while in use |
//! | GET | `/v1/status` | regions with chains and load, tenants with rates and drops |
//! | GET | `/metrics` | Prometheus |

// Handlers return the error response itself (axum's idiom); its size does not matter on the
// control path.
#![allow(clippy::result_large_err)]

use super::etcd::StoreError;
use super::persist::Store;
use super::worker::DataPlane;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::{Json, Router};
use serde_json::json;
use snic_control::auth::{self, Principal};
use snic_control::manifest::{self, ErrorCode, Kind};
use snic_control::plan::{self, Plan};
use snic_control::quota;
use snic_control::state::State;
use snic_core::config::LimitsSection;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Largest request body accepted.
pub const MAX_BODY: usize = 4 << 20;

/// Content types a manifest may be sent as.
const MANIFEST_TYPES: [&str; 5] = ["application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "application/json"];

/// The control thread's state.
pub struct Control {
    /// Desired state, as applied and stored.
    pub state: State,
    /// Its plan, as running.
    pub plan: Plan,
    /// Persistence: this node's database, or the pool's etcd.
    pub db: Store,
    /// Regions of this node.
    pub regions: usize,
    /// The most chains a plan may have (no limit when chains come and go).
    pub plan_regions: usize,
    /// The data plane.
    pub dp: DataPlane,
    /// The pool thread, when node.yaml has a `pool:` section.
    pub pool: Option<super::pool::Pool>,
}

/// What the handlers share: the control state, and the lock that serializes changes to it
/// (held across an apply's validation and planning; the state lock only for reading and for the
/// final commit).
pub struct Shared {
    ctl: Mutex<Control>,
    writer: Mutex<()>,
    body_timeout: Duration,
    /// The operator token's SHA-256 (hex), when node.yaml has `auth:`; `None`: no credentials,
    /// every request acts as the operator (the API then listens on loopback only).
    operator: Option<String>,
    /// What one tenant may hold (node.yaml `limits:`).
    limits: LimitsSection,
    /// Requests per tenant credential: a token bucket each (GCRA), keyed by tenant name.
    limiter: governor::DefaultKeyedRateLimiter<String>,
    /// Requests refused per tenant for its rate, and when each tenant's last refusal was logged.
    limited: Mutex<std::collections::HashMap<String, (u64, std::time::Instant)>>,
}

impl Shared {
    /// Shares `ctl` between the handlers.
    pub fn new(ctl: Control, body_timeout: Duration, operator: Option<String>, limits: LimitsSection) -> Arc<Shared> {
        let period = Duration::from_secs_f64(1.0 / limits.api_requests_per_s);
        let burst = std::num::NonZeroU32::new(limits.api_burst).unwrap_or(std::num::NonZeroU32::MIN);
        // (A period under 1 ns — a rate over 10^9/s — is no limit at all.)
        let quota = governor::Quota::with_period(period).unwrap_or_else(|| governor::Quota::per_second(std::num::NonZeroU32::MAX));
        Arc::new(Shared {
            ctl: Mutex::new(ctl),
            writer: Mutex::new(()),
            body_timeout,
            operator,
            limits,
            limiter: governor::RateLimiter::keyed(quota.allow_burst(burst)),
            limited: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Requests refused per tenant for its API rate (`snic_tenant_api_limited`).
    pub fn api_limited(&self) -> Vec<(String, u64)> {
        self.limited.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(t, (n, _))| (t.clone(), *n)).collect()
    }

    /// The node's default quotas on a tenant's objects.
    fn quota_limits(&self) -> quota::Limits {
        let l = &self.limits;
        quota::Limits {
            nts: l.nts_per_tenant,
            dags: l.dags_per_tenant,
            rules: l.rules_per_tenant,
            wasm_nts: l.wasm_nts_per_tenant,
            wasm_packet_us: l.wasm_packet_us_max,
            wasm_init_ms: l.wasm_init_ms_max,
        }
    }

    /// Whether tenant `t` may make a request now: its credential's token bucket.
    fn admit(&self, t: &str) -> Result<(), Duration> {
        let Err(not_until) = self.limiter.check_key(&t.to_string()) else { return Ok(()) };
        let wait = not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
        let mut m = self.limited.lock().unwrap_or_else(PoisonError::into_inner);
        let now = std::time::Instant::now();
        let e = m.entry(t.to_string()).or_insert((0, now - Duration::from_secs(3600)));
        e.0 += 1;
        // One line per tenant in 10 s at most: a flood of requests is not a flood of log lines.
        if now.duration_since(e.1) >= Duration::from_secs(10) {
            e.1 = now;
            tracing::warn!(tenant = %t, refused = e.0, rate = self.limits.api_requests_per_s, burst = self.limits.api_burst, "a tenant's API requests are over its rate: refused with 429");
        }
        Err(wait)
    }

    /// The control state. A panic while it was held cannot have left it half-changed (state and
    /// plan are replaced only at the end of a commit), so a poisoned lock is taken over.
    pub fn lock(&self) -> MutexGuard<'_, Control> {
        self.ctl.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives the control state back once the API has stopped.
    pub fn into_inner(self) -> Control {
        self.ctl.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

type SharedRef = Arc<Shared>;

/// The API's routes.
pub fn router(ctl: SharedRef) -> Router {
    Router::new()
        .route("/v1/apply", post(apply))
        .route("/v1/objects/{kind}", get(list))
        // `{*name}`: an NT's, DAG's or rule's full name is `TENANT/NAME`.
        .route("/v1/objects/{kind}/{*name}", get(get_one).delete(delete))
        .route("/v1/status", get(status))
        .route("/v1/health", get(health))
        .route("/v1/drain", post(drain).delete(undrain))
        .route("/v1/pool/place", post(place))
        .route("/metrics", get(super::metrics::metrics))
        .fallback(|| async { err(StatusCode::NOT_FOUND, "not_found", "", "", "path", "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            err(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "", "", "method", "this endpoint does not take that method")
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(ctl.clone(), authenticate))
        .layer(axum::middleware::from_fn(refuse_oversized))
        .with_state(ctl)
}

/// Who the request is from (docs/operations.md, "Credentials"): without credentials
/// configured, the operator; with them, the bearer token's principal — or 401
/// `unauthenticated`. `/v1/health` needs none (it tells only whether the node is up).
async fn authenticate(AxState(shared): AxState<SharedRef>, mut req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let who = match &shared.operator {
        None => Principal::Operator,
        Some(_) if req.uri().path() == "/v1/health" => Principal::Operator,
        Some(op) => {
            let token = req
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .filter(|t| !t.is_empty());
            let Some(token) = token else {
                return unauthenticated("no credential: send `Authorization: Bearer TOKEN` (snic --token, SNIC_TOKEN or --credentials)");
            };
            match auth::principal(&shared.lock().state, op, token) {
                Some(p) => p,
                None => return unauthenticated("the credential is not the operator's or a tenant's"),
            }
        }
    };
    if let Principal::Tenant(t) = &who {
        if let Err(wait) = shared.admit(t) {
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            let mut r = err(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "",
                "",
                "authorization",
                &format!(
                    "tenant {t:?} is over its API rate ({} requests/s, bursts of {}; node.yaml limits.api_requests_per_s): retry in {secs} s",
                    shared.limits.api_requests_per_s, shared.limits.api_burst
                ),
            );
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
            return r;
        }
    }
    req.extensions_mut().insert(who);
    next.run(req).await
}

fn unauthenticated(reason: &str) -> Response {
    let mut r = err(StatusCode::UNAUTHORIZED, "unauthenticated", "", "", "authorization", reason);
    r.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Bearer"));
    r
}

/// The NTs of the state by whether tenant `me` owns them: (its own, the others'), by name. What
/// of the node's figures its credential may read follows from them.
pub(crate) fn nts_of<'a>(state: &'a State, me: &str) -> (Vec<&'a str>, Vec<&'a str>) {
    let (mine, others): (Vec<_>, Vec<_>) = state.list(Kind::Nt).partition(|o| auth::owner(state, o) == Some(me));
    (mine.iter().map(|o| o.name.as_str()).collect(), others.iter().map(|o| o.name.as_str()).collect())
}

/// A fair-sharing resource a tenant's credential may see: any but another tenant's NT (the
/// node's own resources — links, store, cores, memory — and its own NTs).
pub(crate) fn resource_shown(others: &[&str], r: &str) -> bool {
    !others.contains(&r)
}

/// 403 `forbidden` for what only the operator may do.
fn operator_only(who: &Principal, what: &str) -> Result<(), Response> {
    match who {
        Principal::Operator => Ok(()),
        Principal::Tenant(t) => Err(err(
            StatusCode::FORBIDDEN,
            "forbidden",
            "",
            "",
            "authorization",
            &format!("{what} is the operator's; this credential is tenant {t:?}'s"),
        )),
    }
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
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
    };
    (status, Json(json!({ "error": e }))).into_response()
}

fn internal(e: anyhow::Error) -> Response {
    err(StatusCode::INTERNAL_SERVER_ERROR, "internal", "", "", "", &format!("{e:#}"))
}

/// Computes the next state from the current one with `next`, plans it and commits both;
/// `done` answers from the committed control state. Validation and planning run on a copy,
/// outside the state lock: readers are served meanwhile, and the writer lock [`change`] holds
/// keeps the copy current.
fn update(s: &Shared, next: impl FnOnce(&State) -> Result<State, manifest::Error>, done: impl FnOnce(&Control) -> Response) -> Response {
    let t0 = std::time::Instant::now();
    let (current, plan_regions) = {
        let c = s.lock();
        (c.state.clone(), c.plan_regions)
    };
    let next = match next(&current) {
        Ok(n) => n,
        Err(e) => {
            tracing::info!(reason = %e, "change refused");
            return manifest_err(e);
        }
    };
    let t1 = std::time::Instant::now();
    let p = match plan::plan(&next, plan_regions) {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(reason = %e, "change refused");
            return manifest_err(e);
        }
    };
    let t2 = std::time::Instant::now();
    let mut c = s.lock();
    match commit(&mut c, next, p) {
        Ok(times) => {
            let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
            tracing::info!(
                validate_ms = ms(t1 - t0),
                plan_ms = ms(t2 - t1),
                save_ms = ms(times.0),
                deploy_ms = ms(times.1),
                objects = c.state.objects().count(),
                chains = c.plan.chains.len(),
                "state changed"
            );
            done(&c)
        }
        Err(r) => r,
    }
}

/// Runs a change (apply, delete) off the async runtime, one at a time, and turns a panic into a
/// 500 for this request alone.
async fn change(shared: &SharedRef, f: impl FnOnce(&Shared) -> Response + Send + 'static) -> Response {
    let s = shared.clone();
    let r = tokio::task::spawn_blocking(move || {
        let _writer = s.writer.lock().unwrap_or_else(PoisonError::into_inner);
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&s)))
    })
    .await;
    match r {
        Ok(Ok(resp)) => resp,
        Ok(Err(_)) | Err(_) => {
            tracing::error!("a request panicked; it was refused and the state is unchanged");
            err(StatusCode::INTERNAL_SERVER_ERROR, "internal", "", "", "", "the request failed inside the node; nothing was changed")
        }
    }
}

/// Reads a manifest body: an accepted content type, UTF-8, within `timeout`.
async fn manifest_body(headers: &axum::http::HeaderMap, body: Body, timeout: Duration) -> Result<String, Response> {
    let ct = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if !MANIFEST_TYPES.contains(&mime.as_str()) {
        return Err(err(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "",
            "",
            "content-type",
            &format!("send manifests as application/yaml or application/json (got `{ct}`)"),
        ));
    }
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_BODY)).await {
        Err(_) => {
            return Err(err(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "",
                "",
                "body",
                &format!("the body did not arrive within {} ms", timeout.as_millis()),
            ))
        }
        Ok(Err(_)) => {
            return Err(err(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "",
                "",
                "body",
                &format!("requests are limited to {MAX_BODY} bytes (or the body could not be read)"),
            ))
        }
        Ok(Ok(b)) => b,
    };
    String::from_utf8(bytes.to_vec())
        .map_err(|e| err(StatusCode::BAD_REQUEST, "invalid_manifest", "document", "", "body", &format!("not UTF-8: {e}")))
}

/// Stores and deploys a new state and its plan; on a deployment failure the stored state is
/// rolled back. State and plan are replaced last, once both succeeded.
/// Saves and deploys the next state; returns how long each took.
fn commit(c: &mut Control, next: State, p: Plan) -> Result<(Duration, Duration), Response> {
    let t0 = std::time::Instant::now();
    c.db.save_change(&c.state, &next).map_err(|e| {
        tracing::error!(error = %format!("{e:#}"), "saving the state failed; nothing changed");
        match e.downcast_ref::<StoreError>() {
            Some(StoreError::Conflict) => err(StatusCode::CONFLICT, "state_changed", "", "", "", &e.to_string()),
            Some(StoreError::Unavailable(_)) => err(
                StatusCode::SERVICE_UNAVAILABLE,
                "state_store_unavailable",
                "",
                "",
                "",
                &format!("{e}; nothing was changed, and the node keeps running what it has"),
            ),
            None => internal(e),
        }
    })?;
    let t1 = std::time::Instant::now();
    // Where the new plan's VTEPs are reached, before it runs (routes.rs).
    c.dp.set_interfaces(super::routes::resolve(&super::routes::prefixes(&p)));
    if let Err(e) = c.dp.deploy(p.clone()) {
        let _ = c.db.save_change(&next, &c.state);
        if let super::worker::DeployError::NoAnswer = e {
            // Whether the data plane runs the change is not known: the answer, the stored state
            // and what runs could disagree. Stop, so that the supervisor starts the node again
            // from the stored state (the one before this change).
            tracing::error!("{e}; the stored state was rolled back and the node exits so that it restarts from it");
            std::process::exit(70);
        }
        tracing::error!(error = %e, "deploying the change failed; the stored state was rolled back");
        return Err(internal(anyhow::Error::new(e)));
    }
    c.state = next;
    c.plan = p;
    Ok((t1 - t0, t1.elapsed()))
}

/// The pool's desired state may have changed (etcd said so): if its revision moved, deploys it
/// here — planned and deployed as an apply is, not stored again. Serialized with applies.
pub fn reload(s: &Shared) {
    let _writer = s.writer.lock().unwrap_or_else(PoisonError::into_inner);
    let (next, plan_regions) = {
        let c = s.lock();
        match c.db.changed() {
            Ok(Some(n)) => (n, c.plan_regions),
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "loading the pool's desired state failed; running what this node has");
                return;
            }
        }
    };
    let p = match plan::plan(&next, plan_regions) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(reason = %e, "the pool's desired state does not fit this node; running what it has");
            return;
        }
    };
    let mut c = s.lock();
    c.dp.set_interfaces(super::routes::resolve(&super::routes::prefixes(&p)));
    match c.dp.deploy(p.clone()) {
        Ok(()) => {
            c.state = next;
            c.plan = p;
            tracing::info!(objects = c.state.objects().count(), chains = c.plan.chains.len(), "state changed by the pool (etcd)");
        }
        Err(e) => tracing::error!(error = %format!("{e:#}"), "deploying the pool's desired state failed; running what this node has"),
    }
}

async fn apply(
    AxState(shared): AxState<SharedRef>,
    Extension(who): Extension<Principal>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    let body = match manifest_body(&headers, body, shared.body_timeout).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let limits = shared.quota_limits();
    change(&shared, move |s| {
        let objs = match manifest::parse(&body) {
            Ok(o) => o,
            Err(e) => return manifest_err(e),
        };
        // What was applied, by full name (`TENANT/NAME` for NTs, DAGs and rules).
        let applied = std::cell::RefCell::new(Vec::new());
        update(
            s,
            |current| {
                auth::may_apply(current, &who, &objs)?;
                let objs = current.scope_all(objs)?;
                *applied.borrow_mut() = objs.iter().map(|o| json!({"kind": o.kind.as_str(), "name": o.name})).collect();
                let next = current.apply(objs)?;
                quota::check(current, &next, &limits)?;
                next.start_new_modules(current)?;
                Ok(next)
            },
            |c| Json(json!({"applied": applied.take(), "chains": c.plan.chains.len(), "regions": c.regions})).into_response(),
        )
    })
    .await
}

fn kind_of(k: &str) -> Result<Kind, Response> {
    Kind::from_cli(k).ok_or_else(|| err(StatusCode::NOT_FOUND, "not_found", k, "", "kind", "unknown kind (tenant, nt, dag, rule, route)"))
}

async fn list(AxState(shared): AxState<SharedRef>, Extension(who): Extension<Principal>, Path(kind): Path<String>) -> Response {
    let k = match kind_of(&kind) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let c = shared.lock();
    Json(c.state.list(k).filter(|o| auth::visible(&c.state, &who, o)).map(|o| o.to_document()).collect::<Vec<_>>()).into_response()
}

async fn get_one(
    AxState(shared): AxState<SharedRef>,
    Extension(who): Extension<Principal>,
    Path((kind, name)): Path<(String, String)>,
) -> Response {
    let k = match kind_of(&kind) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let name = auth::full_name(&who, k, &name);
    let c = shared.lock();
    // Another tenant's object is not found: its existence is not the caller's business.
    match c.state.get(k, &name).filter(|o| auth::visible(&c.state, &who, o)) {
        Some(o) => Json(o.to_document()).into_response(),
        None => err(StatusCode::NOT_FOUND, "not_found", k.as_str(), &name, "metadata.name", "no such object"),
    }
}

async fn delete(
    AxState(shared): AxState<SharedRef>,
    Extension(who): Extension<Principal>,
    Path((kind, name)): Path<(String, String)>,
) -> Response {
    let k = match kind_of(&kind) {
        Ok(k) => k,
        Err(r) => return r,
    };
    let name = auth::full_name(&who, k, &name);
    change(&shared, move |s| {
        update(
            s,
            |current| {
                auth::may_delete(current, &who, k, &name)?;
                current.delete(k, &name)
            },
            |_| Json(json!({"deleted": {"kind": k.as_str(), "name": name}})).into_response(),
        )
    })
    .await
}

/// `POST /v1/pool/place` `{"dag": NAME, "peer": POOL_ADDRESS}`: launches the DAG on that
/// member of the pool (remote launch) and redirects its packets there. The peer answers with
/// its data address and its number for the DAG, or why not (no room, a bad request).
async fn place(AxState(shared): AxState<SharedRef>, Extension(who): Extension<Principal>, body: Body) -> Response {
    if let Err(r) = operator_only(&who, "placing a DAG on a peer") {
        return r;
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Place {
        dag: String,
        peer: std::net::SocketAddr,
    }
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => return err(StatusCode::BAD_REQUEST, "invalid_request", "", "", "body", "the body could not be read"),
    };
    let p: Place = match serde_json::from_slice(&bytes) {
        Ok(p) => p,
        Err(e) => {
            return err(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "",
                "",
                "body",
                &format!("expected {{\"dag\": NAME, \"peer\": ADDRESS}}: {e}"),
            )
        }
    };
    let (req, uid, pool, dp) = {
        let c = shared.lock();
        let Some(pool) = c.pool.as_ref() else {
            return err(StatusCode::CONFLICT, "no_pool", "", "", "", "this node is not in a pool (node.yaml has no pool: section)");
        };
        let pool = match pool.link() {
            Ok(l) => l,
            Err(e) => return internal(e),
        };
        let found = c.plan.host_request(&p.dag).zip(c.plan.dags.iter().find(|d| d.name == p.dag).map(|d| d.uid));
        let Some((req, uid)) = found else {
            return err(StatusCode::NOT_FOUND, "not_found", "DAG", &p.dag, "dag", "no such DAG");
        };
        (req, uid, pool, c.dp.link())
    };
    let (dag, t0) = (p.dag.clone(), std::time::Instant::now());
    let r = tokio::task::spawn_blocking(move || {
        let (data, hosted, gen) = pool.place(p.peer, req).map_err(|e| (StatusCode::BAD_GATEWAY, "peer_refused", e))?;
        dp.redirect(uid, data, hosted, gen).map_err(|e| (StatusCode::CONFLICT, "not_redirected", e))?;
        Ok::<_, (StatusCode, &str, String)>((data, hosted))
    })
    .await;
    match r {
        Ok(Ok((data, hosted))) => {
            let took_ms = (t0.elapsed().as_secs_f64() * 1e4).round() / 10.0;
            tracing::info!(dag, peer = %p.peer, data = %data, hosted, took_ms, "pool: DAG placed on a peer");
            Json(
                json!({"placed": {"dag": dag, "peer": p.peer.to_string(), "data": data.to_string(), "hosted": hosted, "took_ms": took_ms}}),
            )
            .into_response()
        }
        Ok(Err((st, code, reason))) => err(st, code, "DAG", &dag, "peer", &reason),
        Err(e) => internal(anyhow::anyhow!("placing: {e}")),
    }
}

/// Whether this node should get traffic: 200 while its data plane runs, 503 when it does not
/// or when it drains (a health checker in front of the pool, `snic tor`, takes it out of the
/// switch's group).
async fn health(AxState(shared): AxState<SharedRef>) -> Response {
    let c = shared.lock();
    let (up, age, draining) = c.dp.health(std::time::Instant::now());
    // A draining node stays in the switch's group until its peers have been told its flows
    // twice (two gossip rounds: a lost datagram is made up for), so that none of them meets a
    // peer that does not know to bring it back.
    let announced = draining.is_some_and(|flows| flows == 0 || c.pool.as_ref().is_some_and(|p| p.pin_rounds() >= 2));
    drop(c);
    let healthy = up && !announced;
    let code = if healthy { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "healthy": healthy,
        "data_plane": {"up": up, "last_update_ms": age.as_millis().min(u64::MAX as u128) as u64},
        "draining": draining.map(|flows| json!({"flows": flows, "announced": announced})),
    });
    (code, Json(body)).into_response()
}

/// Starts draining this node (docs/pool.md, "Draining a node"): the health check fails, the
/// ToR withdraws it, and peers bring the flows whose state it holds back to it until none is
/// left. 200 `{"draining": true}`.
async fn drain(AxState(shared): AxState<SharedRef>, Extension(who): Extension<Principal>) -> Response {
    set_drain(&shared, &who, true)
}

/// Stops draining: the health check passes again.
async fn undrain(AxState(shared): AxState<SharedRef>, Extension(who): Extension<Principal>) -> Response {
    set_drain(&shared, &who, false)
}

fn set_drain(shared: &SharedRef, who: &Principal, on: bool) -> Response {
    if let Err(r) = operator_only(who, "draining the node") {
        return r;
    }
    let link = shared.lock().dp.link();
    match link.drain(on) {
        Ok(()) => Json(json!({"draining": on})).into_response(),
        Err(e) => err(StatusCode::SERVICE_UNAVAILABLE, "data_plane_unavailable", "", "", "data_plane", &e),
    }
}

async fn status(AxState(shared): AxState<SharedRef>, Extension(who): Extension<Principal>) -> Response {
    let c = shared.lock();
    let snap = c.dp.snapshot();
    let nts = match &who {
        Principal::Tenant(me) => Some(nts_of(&c.state, me)),
        Principal::Operator => None,
    };
    let tenants: Vec<_> = c
        .plan
        .tenants
        .iter()
        .filter(|t| matches!(&who, Principal::Operator) || matches!(&who, Principal::Tenant(n) if *n == t.name))
        .map(|t| {
            let mut s = snap.tenants.iter().find(|s| s.id == t.id.0).cloned().unwrap_or_default();
            if let Some((_, others)) = &nts {
                s.fair.demand.retain(|(r, _)| resource_shown(others, r));
                s.fair.allocation.retain(|(r, _)| resource_shown(others, r));
            }
            json!({"name": t.name, "id": t.id.0, "weight": t.weight, "vnis": t.vnis, "stats": s})
        })
        .collect();
    let (up, age) = snap.health(std::time::Instant::now());
    if let (Principal::Tenant(me), Some((mine, _))) = (&who, &nts) {
        // A tenant sees itself, and the regions running its own NTs with their counters.
        let regions: Vec<_> = snap
            .regions
            .iter()
            .filter(|r| r.chain.iter().any(|n| mine.contains(&n.as_str())))
            .map(|r| {
                // A chain may hold another tenant's shared NT: only this tenant's NTs show.
                let mut r = r.clone();
                r.nts.retain(|n| mine.contains(&n.0.as_str()));
                r.counters.retain(|n| mine.contains(&n.0.as_str()));
                r.chain.retain(|n| mine.contains(&n.as_str()));
                r
            })
            .collect();
        return Json(json!({
            "data_plane": {"up": up, "last_update_ms": age.as_millis().min(u64::MAX as u128) as u64},
            "tenant": me,
            "tenants": tenants,
            "regions": {"instances": regions},
        }))
        .into_response();
    }
    Json(json!({
        "data_plane": {"up": up, "last_update_ms": age.as_millis().min(u64::MAX as u128) as u64},
        "regions": {"total": c.regions, "used": c.plan.chains.len(), "instances": snap.regions},
        "tenants": tenants,
        "unattributed_drops": snap.unattributed_drops,
        "latency_ns": {"p50": snap.latency_p50_ns, "p99": snap.latency_p99_ns},
        "rebuilds": snap.rebuilds,
        "receive": {"messages": snap.rx_messages, "datagrams": snap.rx_datagrams, "via_kernel": snap.rx_via_kernel},
        "transmit": {"via_kernel": snap.tx_via_kernel, "joined": {"writes": snap.tx_joined_writes, "datagrams": snap.tx_joined_datagrams, "refused": snap.tx_joined_refused}},
        "fairness": {"epochs": snap.epochs, "resources": snap.resources},
        "elastic": snap.elastic,
        "pool": c.pool.as_ref().map(|p| p.snap()),
        "hosted": snap.hosted,
        "redirects": snap.redirects,
        "pass_through": {"packets": snap.pass_through_packets, "bytes": snap.pass_through_bytes},
        "owners": snap.owners,
        "draining": snap.draining.then(|| json!({"flows": snap.pins.len()})),
    }))
    .into_response()
}
