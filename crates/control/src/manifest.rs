//! Manifest documents: parsing and the typed objects.
//!
//! Schema `snic/v1`. Every document has `apiVersion: snic/v1`, a `kind`, `metadata.name` and a
//! `spec` whose fields depend on the kind (see docs/manifests.md). Unknown fields anywhere are
//! errors, so a typo never silently does nothing.

use serde::{Deserialize, Serialize};
use snic_core::mat::{IpPrefix, PortRange};
use snic_nt::NtSpec;
use std::collections::BTreeMap;

/// The schema version this build understands.
pub const API_VERSION: &str = "snic/v1";

/// Object kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// A tenant: name, weight, VNIs, quotas.
    Tenant,
    /// A network task with its configuration.
    #[serde(rename = "NT")]
    Nt,
    /// A tenant's DAG of NTs.
    #[serde(rename = "DAG")]
    Dag,
    /// A match-action rule.
    Rule,
    /// A forwarding entry.
    Route,
}

impl Kind {
    /// Parses a kind name as `snic get` accepts it (case-insensitive, plural allowed).
    pub fn from_cli(s: &str) -> Option<Kind> {
        let l = s.to_ascii_lowercase();
        Some(match l.trim_end_matches('s') {
            "tenant" => Kind::Tenant,
            "nt" => Kind::Nt,
            "dag" => Kind::Dag,
            "rule" => Kind::Rule,
            "route" => Kind::Route,
            _ => return None,
        })
    }

    /// The name used in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tenant => "Tenant",
            Kind::Nt => "NT",
            Kind::Dag => "DAG",
            Kind::Rule => "Rule",
            Kind::Route => "Route",
        }
    }

    /// Whether objects of this kind are named in their tenant's scope (`TENANT/NAME`): NTs,
    /// DAGs and rules, which tenants write themselves. Two tenants may each have an NT `fw`;
    /// Tenants and Routes, the operator's, are named node-wide.
    pub fn tenant_scoped(self) -> bool {
        matches!(self, Kind::Nt | Kind::Dag | Kind::Rule)
    }
}

/// The full name of `tenant`'s object `name`: `name` as it is if already `TENANT/NAME`, else
/// `tenant/name`. (A reference — a DAG's node, a rule's DAG — is completed the same way, with the
/// referring object's tenant.)
pub fn in_scope(tenant: &str, name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("{tenant}/{name}")
    }
}

/// Stable error codes (API errors carry them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not YAML/JSON, wrong type, unknown field, bad value.
    InvalidManifest,
    /// A name that refers to no object (or to one the tenant may not use).
    UnknownReference,
    /// A DAG with a cycle.
    Cycle,
    /// A VNI claimed by two tenants.
    VniConflict,
    /// Two objects of one kind with one name in the same apply.
    Duplicate,
    /// The object is used by another and cannot be deleted.
    InUse,
    /// No such object.
    NotFound,
    /// The node cannot hold what is asked (regions, tenants).
    Capacity,
    /// The credential may not do this (another tenant's object, an operator's kind).
    Forbidden,
}

/// A manifest or state error: which object, which field, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{kind} {name:?}: `{field}`: {reason}")]
pub struct Error {
    /// Stable code.
    pub code: ErrorCode,
    /// Object kind (or `document` when the kind is unknown).
    pub kind: String,
    /// Object name (or the document's position).
    pub name: String,
    /// Field path (`spec.nodes[1]`).
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl Error {
    /// An error about an object.
    pub fn new(code: ErrorCode, kind: Kind, name: &str, field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error { code, kind: kind.as_str().into(), name: name.into(), field: field.into(), reason: reason.into() }
    }
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Weight for fair sharing (weighted DRF); default 1.
    #[serde(default = "one")]
    pub weight: u32,
    /// VNIs the tenant owns; no other tenant may use them.
    #[serde(default)]
    pub vnis: Vec<u32>,
    /// Quotas.
    #[serde(default)]
    pub quotas: Quotas,
    /// The tenant's endpoints: outer source addresses (VTEPs, or prefixes of them) its VXLAN
    /// traffic may come from, besides the VTEPs of its Routes. When the tenant has either, a
    /// frame on its VNIs from any other address is dropped (`foreign_vtep`) before it teaches
    /// the node anything; with neither, its VNIs are open (docs/endpoints.md, "Trust").
    #[serde(default)]
    pub endpoints: Vec<IpPrefix>,
    /// The SHA-256 (hex) of the tenant's API credential, set by the operator: a request bearing
    /// that token acts as this tenant, on its own NTs, DAGs and rules only
    /// (docs/operations.md, "Credentials"). `snic token` makes a token and its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
}

fn one() -> u32 {
    1
}

/// Per-tenant quotas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Packet-store buffers the tenant may hold at once (default: no limit beyond the store).
    #[serde(default)]
    pub store_buffers: Option<u32>,
    /// MAC addresses the node learns on the tenant's VNIs at most (default: node.yaml
    /// `limits.fdb_macs_per_tenant`). At the bound the tenant's unknown unicast is flooded on
    /// its own VNIs; no other tenant's entries are touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fdb_macs: Option<u32>,
    /// NTs the tenant may have (default: node.yaml `limits.nts_per_tenant`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nts: Option<u32>,
    /// DAGs the tenant may have (default: `limits.dags_per_tenant`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dags: Option<u32>,
    /// Rules on the tenant's VNIs (default: `limits.rules_per_tenant`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<u32>,
    /// WebAssembly NTs the tenant may have (default: `limits.wasm_nts_per_tenant`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm_nts: Option<u32>,
}

/// A network task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NtObjSpec {
    /// The owning tenant.
    pub tenant: String,
    /// Other tenants that may use this NT in their DAGs (time-shared); `["*"]` for all.
    #[serde(default)]
    pub shared_with: Vec<String>,
    /// Whether the NT reads or writes the payload (informational today; the paper's declaration).
    #[serde(default)]
    pub payload: bool,
    /// On-board memory the NT needs, MiB (informational until paged NT memory lands).
    #[serde(default)]
    pub memory_mib: u32,
    /// The NT's kind and configuration.
    pub config: NtSpec,
}

/// A DAG of NTs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DagSpec {
    /// The owning tenant.
    pub tenant: String,
    /// NT names. Without `edges`, they run in this order.
    pub nodes: Vec<String>,
    /// `[from, to]` pairs: `from` runs before `to`. Omitted: the `nodes` order.
    #[serde(default)]
    pub edges: Option<Vec<[String; 2]>>,
    /// The tenant's endpoint can run these NTs itself: when the node has no region for one of
    /// the DAG's chains (and before stopping another chain for it), its packets are sent on
    /// unprocessed. Applies to a chain only if every DAG that uses it says so.
    #[serde(default)]
    pub endpoint_fallback: bool,
    /// Run NTs that no edge orders and whose reads and writes do not conflict at the same time
    /// on each packet (fork/join; NT-level parallelism). Each such NT gets a chain of its own.
    #[serde(default)]
    pub parallel: bool,
}

/// What a rule does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum RuleAction {
    /// Run this DAG (of the VNI's tenant).
    Dag(String),
    /// Forward without NTs.
    PassThrough,
    /// Drop.
    Drop,
}

/// A MAT rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// The VNI (its owner is the rule's tenant).
    pub vni: u32,
    /// Inner IP protocol number.
    #[serde(default)]
    pub proto: Option<u8>,
    /// Inner destination prefix.
    #[serde(default)]
    pub dst: Option<IpPrefix>,
    /// Inner destination ports.
    #[serde(default)]
    pub dst_ports: Option<PortRange>,
    /// Tie-break among equal prefixes; higher wins.
    #[serde(default)]
    pub priority: u16,
    /// What to do.
    pub action: RuleAction,
}

/// A forwarding entry: exactly one of `mac`, `default`, `flood`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// The VNI.
    pub vni: u32,
    /// The VTEP (`ip:port`).
    pub vtep: std::net::SocketAddr,
    /// A static MAC entry: this inner MAC is behind `vtep`.
    #[serde(default)]
    pub mac: Option<String>,
    /// `vtep` is where unknown or unreadable destinations of the VNI go.
    #[serde(default)]
    pub default: bool,
    /// `vtep` gets a copy of broadcast and unknown unicast.
    #[serde(default)]
    pub flood: bool,
    /// The VTEP's MAC, for frame backends (defaults to zero).
    #[serde(default)]
    pub vtep_mac: Option<String>,
}

/// A typed object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Spec {
    /// Tenant.
    Tenant(TenantSpec),
    /// NT.
    Nt(NtObjSpec),
    /// DAG.
    Dag(DagSpec),
    /// Rule.
    Rule(RuleSpec),
    /// Route.
    Route(RouteSpec),
}

/// One parsed document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Object {
    /// Kind.
    pub kind: Kind,
    /// `metadata.name`.
    pub name: String,
    /// The spec.
    pub spec: Spec,
}

impl Object {
    /// The object as a manifest document (`apiVersion`, `kind`, `metadata`, `spec`); parsing it
    /// back with [`object_from_value`] gives the same object.
    pub fn to_document(&self) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": self.kind.as_str(),
            "metadata": {"name": self.name},
            "spec": self.spec,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: Metadata,
    spec: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    labels: BTreeMap<String, String>,
}

fn doc_err(i: usize, field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error {
        code: ErrorCode::InvalidManifest,
        kind: "document".into(),
        name: format!("#{}", i + 1),
        field: field.into(),
        reason: reason.into(),
    }
}

/// Valid object names: DNS-label-like, 1..=63 of `[a-z0-9-]`, not starting or ending with `-`.
pub fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 63
        && !n.starts_with('-')
        && !n.ends_with('-')
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn typed<T: serde::de::DeserializeOwned>(kind: Kind, name: &str, v: serde_json::Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "spec".to_string() } else { format!("spec.{path}") };
        Error::new(ErrorCode::InvalidManifest, kind, name, field, e.into_inner().to_string())
    })
}

/// Parses one object from a JSON value (a document already decoded).
pub fn object_from_value(i: usize, v: serde_json::Value) -> Result<Object, Error> {
    let env: Envelope = serde_path_to_error::deserialize(v).map_err(|e| doc_err(i, e.path().to_string(), e.into_inner().to_string()))?;
    if env.api_version != API_VERSION {
        return Err(doc_err(i, "apiVersion", format!("`{}` is not supported (expected `{API_VERSION}`)", env.api_version)));
    }
    let kind = match env.kind.as_str() {
        "Tenant" => Kind::Tenant,
        "NT" => Kind::Nt,
        "DAG" => Kind::Dag,
        "Rule" => Kind::Rule,
        "Route" => Kind::Route,
        k => return Err(doc_err(i, "kind", format!("unknown kind `{k}` (expected Tenant, NT, DAG, Rule or Route)"))),
    };
    let name = env.metadata.name;
    // NTs, DAGs and rules may be written `TENANT/NAME` (as the API lists them) or `NAME`.
    let scoped_ok = || kind.tenant_scoped() && name.split_once('/').is_some_and(|(t, n)| valid_name(t) && valid_name(n));
    if !valid_name(&name) && !scoped_ok() {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            kind,
            &name,
            "metadata.name",
            if kind.tenant_scoped() {
                "must be 1-63 characters of a-z, 0-9 and '-', not starting or ending with '-' (or TENANT/NAME, each such)"
            } else {
                "must be 1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'"
            },
        ));
    }
    let spec = match kind {
        Kind::Tenant => Spec::Tenant(typed(kind, &name, env.spec)?),
        Kind::Nt => Spec::Nt(typed(kind, &name, env.spec)?),
        Kind::Dag => Spec::Dag(typed(kind, &name, env.spec)?),
        Kind::Rule => Spec::Rule(typed(kind, &name, env.spec)?),
        Kind::Route => Spec::Route(typed(kind, &name, env.spec)?),
    };
    Ok(Object { kind, name, spec })
}

/// Most levels of nesting a manifest may have (block or flow). A manifest needs about six; the
/// bound keeps a hostile body's parse linear in its size (docs/manifests.md, "Bounds").
pub const MAX_DEPTH: usize = 32;

/// Most YAML nodes (scalars, sequences, mappings) in one request body.
pub const MAX_NODES: usize = 200_000;

/// Most documents in one request body.
pub const MAX_DOCUMENTS: usize = 10_000;

/// How snic reads YAML (manifests and node.yaml): YAML 1.2 core scalars (`n`, `no`, `on` are
/// strings, `0755` is a string), duplicate keys refused, and limits enforced while the parser
/// reads, so an input over them stops the parse where the limit is crossed (in time linear in the
/// input read so far).
pub fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            flow_nesting_limit: MAX_DEPTH,
            max_nodes: MAX_NODES,
            max_documents: MAX_DOCUMENTS,
            max_aliases: 1_000,
            max_anchors: 1_000,
        },
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
    }
}

/// Parses a multi-document YAML stream (JSON is YAML too). Empty documents are skipped; a
/// document's position (`#N` in errors) counts the non-empty ones.
pub fn parse(text: &str) -> Result<Vec<Object>, Error> {
    let values: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(text, yaml_options()).map_err(|e| {
        let e = e.without_snippet();
        let at = e.location().map(|l| format!("line {} column {}", l.line(), l.column())).unwrap_or_default();
        let reason = e.to_string();
        let reason = reason.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
        Error { code: ErrorCode::InvalidManifest, kind: "document".into(), name: String::new(), field: at, reason }
    })?;
    values.into_iter().filter(|v| !v.is_null()).enumerate().map(|(i, v)| object_from_value(i, v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> Error {
        parse(text).unwrap_err()
    }

    #[test]
    fn errors_name_object_field_and_reason() {
        let e = err("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: blue}\nspec: {vnis: [100], wieght: 2}\n");
        assert_eq!((e.kind.as_str(), e.name.as_str(), e.code), ("Tenant", "blue", ErrorCode::InvalidManifest));
        assert!(e.reason.contains("unknown field `wieght`"), "{e}");
        let e = err("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: blue}\nspec: {vnis: [one]}\n");
        assert_eq!(e.field, "spec.vnis[0]", "{e}");
        let e = err("apiVersion: snic/v1\nkind: NT\nmetadata: {name: fw}\nspec: {tenant: blue, config: {kind: firewall, rules: [{src: '10.0.0.0/33', action: deny}]}}\n");
        assert!(e.field.starts_with("spec.config"), "{e}");
        assert!(e.reason.contains("too long"), "{e}");
        let e = err("apiVersion: snic/v2\nkind: Tenant\nmetadata: {name: blue}\nspec: {}\n");
        assert_eq!(e.field, "apiVersion");
        let e = err("apiVersion: snic/v1\nkind: Teapot\nmetadata: {name: blue}\nspec: {}\n");
        assert_eq!(e.field, "kind");
        let e = err("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: Blue_1}\nspec: {}\n");
        assert_eq!(e.field, "metadata.name");
        let e = err("{not yaml");
        assert_eq!(e.code, ErrorCode::InvalidManifest);
    }

    #[test]
    fn documents_round_trip() {
        let text = include_str!("../../../examples/demo.yaml");
        for o in parse(text).unwrap() {
            assert_eq!(object_from_value(0, o.to_document()).unwrap(), o);
        }
    }

    #[test]
    fn multi_document_yaml_and_json() {
        let docs = parse("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: a}\nspec: {}\n---\n---\n{\"apiVersion\":\"snic/v1\",\"kind\":\"Tenant\",\"metadata\":{\"name\":\"b\"},\"spec\":{\"weight\":3}}\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(
            docs[1].spec,
            Spec::Tenant(TenantSpec { weight: 3, vnis: vec![], quotas: Quotas::default(), endpoints: vec![], token_sha256: None })
        );
    }
}
