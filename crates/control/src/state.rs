//! The desired state: every applied object, checked as a whole.
//!
//! A [`State`] is a value. [`State::apply`] and [`State::delete`] return a *new* state or an
//! error, leaving `self` untouched, so an apply is atomic: all of a manifest or none of it.
//! Tenant ids and DAG UIDs are assigned here, once per name, and never reused.

use crate::manifest::{in_scope, Error, ErrorCode, Kind, Object, RuleAction, Spec};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Ids assigned to names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ids {
    /// Tenant name → tenant id (from 1).
    pub tenants: BTreeMap<String, u16>,
    /// DAG name → UID (from 1).
    pub dags: BTreeMap<String, u32>,
    next_tenant: u16,
    next_dag: u32,
}

/// Most tenants a node accounts for (the data plane's per-tenant tables).
pub const MAX_TENANTS: u16 = 1023;

/// Largest tenant weight.
pub const MAX_WEIGHT: u32 = 1000;

/// Most VNIs one tenant owns.
pub const MAX_VNIS_PER_TENANT: usize = 4096;

/// Most endpoint prefixes one tenant declares.
pub const MAX_ENDPOINTS_PER_TENANT: usize = 4096;

/// Most NTs in one DAG (a chain's skip mask has 64 bits).
pub const MAX_DAG_NTS: usize = 64;

/// Largest `memory_mib` an NT may declare (1 TiB).
pub const MAX_NT_MEMORY_MIB: u32 = 1 << 20;

/// The desired state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct State {
    objects: BTreeMap<(Kind, String), Object>,
    ids: Ids,
}

impl State {
    /// An object.
    pub fn get(&self, kind: Kind, name: &str) -> Option<&Object> {
        self.objects.get(&(kind, name.to_string()))
    }

    /// All objects of a kind, by name.
    pub fn list(&self, kind: Kind) -> impl Iterator<Item = &Object> {
        self.objects.range((kind, String::new())..).take_while(move |((k, _), _)| *k == kind).map(|(_, o)| o)
    }

    /// Every object, by kind then name.
    pub fn objects(&self) -> impl Iterator<Item = &Object> {
        self.objects.values()
    }

    /// Assigned ids.
    pub fn ids(&self) -> &Ids {
        &self.ids
    }

    /// Rebuilds a state from stored objects and ids (persistence), validating it.
    pub fn restore(objects: Vec<Object>, mut ids: Ids) -> Result<State, Error> {
        let (tenants, rest): (Vec<_>, Vec<_>) = objects.into_iter().partition(|o| !o.kind.tenant_scoped());
        let mut s = State { objects: tenants.into_iter().map(|o| ((o.kind, o.name.clone()), o)).collect(), ids: Ids::default() };
        // A store written before names were scoped by tenant holds `NAME`: it becomes
        // `TENANT/NAME` here, and a DAG keeps its UID.
        let owners = s.vni_owners();
        let rest = rest.into_iter().map(|o| State::scoped(o, &owners)).collect::<Result<Vec<_>, _>>()?;
        for o in rest {
            if let Some((_, short)) = o.name.split_once('/').filter(|_| o.kind == Kind::Dag) {
                if let Some(uid) = ids.dags.remove(short) {
                    ids.dags.insert(o.name.clone(), uid);
                }
            }
            s.objects.insert((o.kind, o.name.clone()), o);
        }
        s.ids = ids;
        s.validate()?;
        // Every tenant and DAG has its id, and no two share one (a store written by something
        // else than a node — an etcd edited by hand — may say otherwise).
        let ids = &s.ids;
        s.check_ids(Kind::Tenant, |n| ids.tenants.get(n).map(|&i| i as u32))?;
        s.check_ids(Kind::Dag, |n| ids.dags.get(n).copied())?;
        Ok(s)
    }

    /// Every object of `kind` has an id (`id_of` its name), and no two the same.
    fn check_ids(&self, kind: Kind, id_of: impl Fn(&str) -> Option<u32>) -> Result<(), Error> {
        let mut taken = BTreeSet::new();
        for o in self.list(kind) {
            let why = match id_of(&o.name) {
                None => "has no id in the stored ids",
                Some(id) if !taken.insert(id) => "shares its id with another object in the stored ids",
                Some(_) => continue,
            };
            return Err(Error::new(ErrorCode::InvalidManifest, kind, &o.name, "metadata.name", why));
        }
        Ok(())
    }

    /// The state with `objs` created or replaced, if the result is valid.
    pub fn apply(&self, objs: Vec<Object>) -> Result<State, Error> {
        let objs = self.scope_all(objs)?;
        let mut next = self.clone();
        let mut seen = BTreeSet::new();
        for o in &objs {
            if !seen.insert((o.kind, o.name.clone())) {
                return Err(Error::new(ErrorCode::Duplicate, o.kind, &o.name, "metadata.name", "appears twice in this manifest"));
            }
        }
        for o in objs {
            match o.kind {
                Kind::Tenant if !next.ids.tenants.contains_key(&o.name) => {
                    if next.ids.next_tenant >= MAX_TENANTS {
                        return Err(Error::new(
                            ErrorCode::Capacity,
                            o.kind,
                            &o.name,
                            "metadata.name",
                            format!("a node holds at most {MAX_TENANTS} tenants"),
                        ));
                    }
                    next.ids.next_tenant += 1;
                    next.ids.tenants.insert(o.name.clone(), next.ids.next_tenant);
                }
                Kind::Dag if !next.ids.dags.contains_key(&o.name) => {
                    next.ids.next_dag += 1;
                    next.ids.dags.insert(o.name.clone(), next.ids.next_dag);
                }
                _ => {}
            }
            next.objects.insert((o.kind, o.name.clone()), o);
        }
        next.validate()?;
        Ok(next)
    }

    /// Starts once each tenant module this state has and `before` did not (new, or changed): its
    /// start function and `snic_init` run in a sandbox, bounded by its `max_init_ms`, and a
    /// module that fails is refused here rather than on the node. What [`State::apply`] checks
    /// (every time, for the whole state) never runs a tenant's code; this runs it once, for the
    /// apply that brings it, after that apply's other checks — never for a module already in
    /// the state, so no apply waits on another tenant's module.
    pub fn start_new_modules(&self, before: &State) -> Result<(), Error> {
        for o in self.list(Kind::Nt).filter(|o| before.get(Kind::Nt, &o.name) != Some(*o)) {
            if let Spec::Nt(n) = &o.spec {
                if let snic_nt::NtSpec::Wasm(c) = &n.config {
                    c.check()
                        .map_err(|e| Error::new(ErrorCode::InvalidManifest, Kind::Nt, &o.name, "spec.config.module", e.to_string()))?;
                }
            }
        }
        Ok(())
    }

    /// The state without one object, if nothing else uses it.
    pub fn delete(&self, kind: Kind, name: &str) -> Result<State, Error> {
        let mut next = self.clone();
        if next.objects.remove(&(kind, name.to_string())).is_none() {
            let why = if kind.tenant_scoped() && !name.contains('/') {
                "no such object (NTs, DAGs and rules are named TENANT/NAME)"
            } else {
                "no such object"
            };
            return Err(Error::new(ErrorCode::NotFound, kind, name, "metadata.name", why));
        }
        if let Err(e) = next.validate() {
            return Err(Error::new(ErrorCode::InUse, kind, name, "metadata.name", format!("still used: {e}")));
        }
        Ok(next)
    }

    /// `objs`, a manifest to apply here, with every NT, DAG and rule named in full
    /// ([`State::scoped`]); tenants first, as a rule is named in the scope of its VNI's owner,
    /// which the manifest may change. [`State::apply`] does this itself; what it returns names
    /// the objects as the state will.
    pub fn scope_all(&self, objs: Vec<Object>) -> Result<Vec<Object>, Error> {
        let (tenants, rest): (Vec<_>, Vec<_>) = objs.into_iter().partition(|o| o.kind == Kind::Tenant);
        let mut with_tenants = self.clone();
        for o in &tenants {
            with_tenants.objects.insert((o.kind, o.name.clone()), o.clone());
        }
        let owners = with_tenants.vni_owners();
        let rest = rest.into_iter().map(|o| State::scoped(o, &owners)).collect::<Result<Vec<_>, _>>()?;
        Ok(tenants.into_iter().chain(rest).collect())
    }

    /// The tenant in whose scope `o` is named: an NT's or DAG's `spec.tenant`, a rule's VNI's
    /// owner (none if no tenant owns it); none for Tenants and Routes.
    /// (`owners`: [`State::vni_owners`].)
    fn scope_of<'a>(o: &'a Object, owners: &BTreeMap<u32, &'a str>) -> Option<&'a str> {
        match &o.spec {
            Spec::Nt(n) => Some(&n.tenant),
            Spec::Dag(d) => Some(&d.tenant),
            Spec::Rule(r) => owners.get(&r.vni).copied(),
            Spec::Tenant(_) | Spec::Route(_) => None,
        }
    }

    /// `o` with its full name and references (a DAG's nodes and edges, a rule's DAG) completed in
    /// its tenant's scope. A name written `TENANT/NAME` must name its own tenant; a reference
    /// may name another's (an NT shared with this tenant). A rule on a VNI nobody owns keeps its
    /// name, and [`State::validate`] refuses it. (`owners`: [`State::vni_owners`], computed once
    /// for a whole manifest.)
    fn scoped(mut o: Object, owners: &BTreeMap<u32, &str>) -> Result<Object, Error> {
        let Some(tenant) = State::scope_of(&o, owners).map(str::to_string) else { return Ok(o) };
        if let Some((t, _)) = o.name.split_once('/') {
            if t != tenant {
                let why = match o.kind {
                    Kind::Rule => format!("a rule is named in the scope of its VNI's owner, tenant `{tenant}`, not `{t}`"),
                    _ => format!("an object is named in the scope of its spec.tenant, `{tenant}`, not `{t}`"),
                };
                return Err(Error::new(ErrorCode::InvalidManifest, o.kind, &o.name, "metadata.name", why));
            }
        }
        o.name = in_scope(&tenant, &o.name);
        match &mut o.spec {
            Spec::Dag(d) => {
                for n in d.nodes.iter_mut().chain(d.edges.iter_mut().flatten().flatten()) {
                    *n = in_scope(&tenant, n);
                }
            }
            Spec::Rule(r) => {
                if let RuleAction::Dag(d) = &mut r.action {
                    *d = in_scope(&tenant, d);
                }
            }
            _ => {}
        }
        Ok(o)
    }

    /// VNI → owning tenant, for every tenant.
    pub fn vni_owners(&self) -> BTreeMap<u32, &str> {
        let mut m = BTreeMap::new();
        for o in self.list(Kind::Tenant) {
            if let Spec::Tenant(t) = &o.spec {
                for v in &t.vnis {
                    m.entry(*v).or_insert(o.name.as_str());
                }
            }
        }
        m
    }

    fn visible(&self, nt: &str, tenant: &str) -> Result<(), String> {
        match self.get(Kind::Nt, nt).map(|o| &o.spec) {
            Some(Spec::Nt(n)) if n.tenant == tenant || n.shared_with.iter().any(|t| t == tenant || t == "*") => Ok(()),
            // Another tenant's NT answers exactly as a missing one: whether it exists is not
            // this tenant's business (docs/operations.md, "Credentials").
            _ => Err(format!("no NT named `{nt}` that tenant `{tenant}` owns or is shared with")),
        }
    }

    /// Checks every cross-object constraint.
    /// Every size, count and range is checked against its documented bound (docs/manifests.md,
    /// "Bounds") without building anything, in time linear in the state's size.
    pub fn validate(&self) -> Result<(), Error> {
        let owners = self.vni_owners();
        let tenant_of_vni = |v: u32| owners.get(&v).copied();
        let mut vni_owner: BTreeMap<u32, &str> = BTreeMap::new();
        for o in self.objects.values() {
            let (k, n) = (o.kind, o.name.as_str());
            let bad = |code, field: String, reason: String| Err(Error::new(code, k, n, field, reason));
            let tenant_exists = |t: &str| self.get(Kind::Tenant, t).is_some();
            // NTs, DAGs and rules are named in their tenant's scope (a rule's tenant is its VNI's
            // owner, so moving a VNI to another tenant needs its rules deleted first).
            if let Some(t) = State::scope_of(o, &owners) {
                if n.split_once('/').map(|(s, _)| s) != Some(t) {
                    return bad(
                        ErrorCode::InvalidManifest,
                        "metadata.name".into(),
                        format!("not named in tenant `{t}`'s scope (`{t}/NAME`)"),
                    );
                }
            }
            match &o.spec {
                Spec::Tenant(t) => {
                    if t.vnis.len() > MAX_VNIS_PER_TENANT {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec.vnis".into(),
                            format!("{} VNIs is over the limit of {MAX_VNIS_PER_TENANT}", t.vnis.len()),
                        );
                    }
                    for (i, v) in t.vnis.iter().enumerate() {
                        if *v >= 1 << 24 {
                            return bad(ErrorCode::InvalidManifest, format!("spec.vnis[{i}]"), format!("VNI {v} does not fit in 24 bits"));
                        }
                        if let Some(other) = vni_owner.insert(*v, n) {
                            return bad(
                                ErrorCode::VniConflict,
                                format!("spec.vnis[{i}]"),
                                format!("VNI {v} already belongs to tenant `{other}`"),
                            );
                        }
                    }
                    if t.endpoints.len() > MAX_ENDPOINTS_PER_TENANT {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec.endpoints".into(),
                            format!("{} endpoints is over the limit of {MAX_ENDPOINTS_PER_TENANT}", t.endpoints.len()),
                        );
                    }
                    if t.weight == 0 || t.weight > MAX_WEIGHT {
                        return bad(ErrorCode::InvalidManifest, "spec.weight".into(), format!("{} is outside 1..={MAX_WEIGHT}", t.weight));
                    }
                    if let Some(h) = &t.token_sha256 {
                        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                            return bad(
                                ErrorCode::InvalidManifest,
                                "spec.token_sha256".into(),
                                "64 lowercase hex digits, the SHA-256 of the tenant's token (snic token)".into(),
                            );
                        }
                        if let Some(other) = self
                            .list(Kind::Tenant)
                            .find(|x| x.name != o.name && matches!(&x.spec, Spec::Tenant(s) if s.token_sha256.as_ref() == Some(h)))
                        {
                            return bad(
                                ErrorCode::InvalidManifest,
                                "spec.token_sha256".into(),
                                format!("tenant `{}` has the same credential", other.name),
                            );
                        }
                    }
                    if t.quotas.store_buffers == Some(0) {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec.quotas.store_buffers".into(),
                            "a quota of 0 buffers would drop every packet; omit it for no quota".into(),
                        );
                    }
                }
                Spec::Nt(nt) => {
                    if !tenant_exists(&nt.tenant) {
                        return bad(ErrorCode::UnknownReference, "spec.tenant".into(), format!("no tenant named `{}`", nt.tenant));
                    }
                    for (i, t) in nt.shared_with.iter().enumerate() {
                        if t != "*" && !tenant_exists(t) {
                            return bad(ErrorCode::UnknownReference, format!("spec.shared_with[{i}]"), format!("no tenant named `{t}`"));
                        }
                    }
                    if let snic_nt::NtSpec::VniMap { map, default } = &nt.config {
                        // An NT maps packets only into its own tenant's VNIs (docs/endpoints.md,
                        // "Trust"): the data plane drops anything leaving on another's anyway.
                        if !nt.shared_with.is_empty() {
                            return bad(
                                ErrorCode::InvalidManifest,
                                "spec.shared_with".into(),
                                "a vni_map maps into its own tenant's VNIs: it cannot be shared".into(),
                            );
                        }
                        let targets = map.iter().enumerate().map(|(i, p)| (format!("spec.config.map[{i}].to"), p.to));
                        for (field, v) in targets.chain(default.map(|v| ("spec.config.default".to_string(), v))) {
                            if tenant_of_vni(v) != Some(nt.tenant.as_str()) {
                                return bad(
                                    ErrorCode::InvalidManifest,
                                    field,
                                    format!("VNI {v} is not one of tenant `{}`'s VNIs", nt.tenant),
                                );
                            }
                        }
                    }
                    if matches!(nt.config, snic_nt::NtSpec::Wasm(_)) && !nt.shared_with.is_empty() {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec.shared_with".into(),
                            "a wasm NT runs its own tenant's packets only: it cannot be shared".into(),
                        );
                    }
                    if nt.memory_mib > MAX_NT_MEMORY_MIB {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec.memory_mib".into(),
                            format!("{} is over the limit of {MAX_NT_MEMORY_MIB}", nt.memory_mib),
                        );
                    }
                    if let Err(e) = nt.config.validate() {
                        let field = e.field().map_or_else(|| "spec.config".to_string(), |f| format!("spec.config.{f}"));
                        let reason = match &e {
                            snic_nt::SpecError::Bound { reason, .. } => reason.clone(),
                            snic_nt::SpecError::Wasm(w) => w.to_string(),
                            e => e.to_string(),
                        };
                        return bad(ErrorCode::InvalidManifest, field, reason);
                    }
                }
                Spec::Dag(d) => {
                    if !tenant_exists(&d.tenant) {
                        return bad(ErrorCode::UnknownReference, "spec.tenant".into(), format!("no tenant named `{}`", d.tenant));
                    }
                    if d.nodes.is_empty() {
                        return bad(ErrorCode::InvalidManifest, "spec.nodes".into(), "a DAG needs at least one NT".into());
                    }
                    if d.nodes.len() > MAX_DAG_NTS {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec.nodes".into(),
                            format!("{} NTs is over the limit of {MAX_DAG_NTS}", d.nodes.len()),
                        );
                    }
                    let edges = d.edges.as_ref().map_or(0, Vec::len);
                    if edges > MAX_DAG_NTS * MAX_DAG_NTS {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec.edges".into(),
                            format!("{edges} edges is more than a DAG of {MAX_DAG_NTS} NTs can have"),
                        );
                    }
                    for (i, nt) in d.nodes.iter().enumerate() {
                        if d.nodes[..i].contains(nt) {
                            return bad(ErrorCode::Duplicate, format!("spec.nodes[{i}]"), format!("`{nt}` appears twice"));
                        }
                        if let Err(r) = self.visible(nt, &d.tenant) {
                            return bad(ErrorCode::UnknownReference, format!("spec.nodes[{i}]"), r);
                        }
                    }
                    for (i, [a, b]) in d.edges.iter().flatten().enumerate() {
                        for x in [a, b] {
                            if !d.nodes.contains(x) {
                                return bad(
                                    ErrorCode::UnknownReference,
                                    format!("spec.edges[{i}]"),
                                    format!("`{x}` is not one of the DAG's nodes"),
                                );
                            }
                        }
                    }
                    if crate::plan::topo_order(d).is_none() {
                        return bad(ErrorCode::Cycle, "spec.edges".into(), "the edges form a cycle".into());
                    }
                }
                Spec::Rule(r) if r.dst_ports.is_some_and(|p| p.lo > p.hi) => {
                    let p = r.dst_ports.unwrap_or_default();
                    return bad(
                        ErrorCode::InvalidManifest,
                        "spec.dst_ports".into(),
                        format!("empty range: lo {} is above hi {}", p.lo, p.hi),
                    );
                }
                Spec::Rule(r) => match tenant_of_vni(r.vni) {
                    None => return bad(ErrorCode::UnknownReference, "spec.vni".into(), format!("no tenant owns VNI {}", r.vni)),
                    Some(owner) => {
                        if let crate::manifest::RuleAction::Dag(dag) = &r.action {
                            match self.get(Kind::Dag, dag).map(|o| &o.spec) {
                                Some(Spec::Dag(d)) if d.tenant == owner => {}
                                // Another tenant's DAG answers as a missing one.
                                _ => {
                                    return bad(
                                        ErrorCode::UnknownReference,
                                        "spec.action.dag".into(),
                                        format!("no DAG named `{dag}` of tenant `{owner}`, the owner of VNI {}", r.vni),
                                    )
                                }
                            }
                        }
                    }
                },
                Spec::Route(rt) => {
                    if tenant_of_vni(rt.vni).is_none() {
                        return bad(ErrorCode::UnknownReference, "spec.vni".into(), format!("no tenant owns VNI {}", rt.vni));
                    }
                    if rt.vtep.port() == 0 || rt.vtep.ip().is_unspecified() || rt.vtep.ip().is_multicast() {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec.vtep".into(),
                            format!("{} is not a VTEP: it needs a unicast address and a port other than 0", rt.vtep),
                        );
                    }
                    let n_kinds = rt.mac.is_some() as u8 + rt.default as u8 + rt.flood as u8;
                    if n_kinds != 1 {
                        return bad(
                            ErrorCode::InvalidManifest,
                            "spec".into(),
                            "exactly one of `mac`, `default: true`, `flood: true`".into(),
                        );
                    }
                    for (f, m) in [("spec.mac", &rt.mac), ("spec.vtep_mac", &rt.vtep_mac)] {
                        if let Some(m) = m {
                            if m.parse::<snic_wire::ethernet::MacAddr>().is_err() {
                                return bad(
                                    ErrorCode::InvalidManifest,
                                    f.into(),
                                    format!("`{m}` is not a MAC address (xx:xx:xx:xx:xx:xx)"),
                                );
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse;

    const BASE: &str = r#"
apiVersion: snic/v1
kind: Tenant
metadata: {name: blue}
spec: {vnis: [100]}
---
apiVersion: snic/v1
kind: Tenant
metadata: {name: green}
spec: {vnis: [200]}
---
apiVersion: snic/v1
kind: NT
metadata: {name: blue-fw}
spec: {tenant: blue, config: {kind: firewall}}
---
apiVersion: snic/v1
kind: NT
metadata: {name: shared-count}
spec: {tenant: blue, shared_with: [green], config: {kind: counter}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: blue-path}
spec: {tenant: blue, nodes: [blue-fw, shared-count]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: blue-all}
spec: {vni: 100, action: {dag: blue-path}}
"#;

    fn base() -> State {
        State::default().apply(parse(BASE).unwrap()).unwrap()
    }

    fn reject(extra: &str) -> Error {
        let s = base();
        let e = s.apply(parse(extra).unwrap()).unwrap_err();
        assert_eq!(s, base(), "a failed apply changes nothing");
        e
    }

    #[test]
    fn ids_are_stable_and_never_reused() {
        let s = base();
        assert_eq!(s.ids().tenants["blue"], 1);
        assert_eq!(s.ids().tenants["green"], 2);
        let s = s.apply(parse(BASE).unwrap()).unwrap();
        assert_eq!(s.ids().tenants["green"], 2, "re-applying keeps ids");
        let s = s.delete(Kind::Rule, "blue/blue-all").unwrap().delete(Kind::Dag, "blue/blue-path").unwrap();
        let s = s
            .apply(parse("apiVersion: snic/v1\nkind: DAG\nmetadata: {name: blue-path}\nspec: {tenant: blue, nodes: [blue-fw]}\n").unwrap())
            .unwrap();
        assert_eq!(s.ids().dags["blue/blue-path"], 1, "a name keeps its UID");
    }

    #[test]
    fn each_tenant_names_its_own_objects() {
        // green names its NT, DAG and rule as blue named its own: no collision, and each DAG
        // runs its own tenant's NT.
        let s = base()
            .apply(
                parse(
                    r#"
apiVersion: snic/v1
kind: NT
metadata: {name: blue-fw}
spec: {tenant: green, config: {kind: counter}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: blue-path}
spec: {tenant: green, nodes: [blue-fw, blue/shared-count], edges: [[blue-fw, blue/shared-count]]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: blue-all}
spec: {vni: 200, action: {dag: blue-path}}
"#,
                )
                .unwrap(),
            )
            .unwrap();
        let names: Vec<_> = s.list(Kind::Nt).map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["blue/blue-fw", "blue/shared-count", "green/blue-fw"]);
        let Some(Spec::Dag(d)) = s.get(Kind::Dag, "green/blue-path").map(|o| &o.spec) else { panic!("green's DAG") };
        assert_eq!(d.nodes, ["green/blue-fw", "blue/shared-count"], "its own NT, and blue's shared one by full name");
        assert_eq!(d.edges.as_deref(), Some(&[["green/blue-fw".to_string(), "blue/shared-count".to_string()]][..]));
        let Some(Spec::Rule(r)) = s.get(Kind::Rule, "green/blue-all").map(|o| &o.spec) else { panic!("green's rule") };
        assert_eq!(r.action, RuleAction::Dag("green/blue-path".into()));
        assert_ne!(s.ids().dags["green/blue-path"], s.ids().dags["blue/blue-path"]);
        // The full name written out is the same object; re-applying it changes nothing.
        let again = s.apply(
            parse("apiVersion: snic/v1\nkind: NT\nmetadata: {name: green/blue-fw}\nspec: {tenant: green, config: {kind: counter}}\n")
                .unwrap(),
        );
        assert_eq!(again.unwrap(), s);
        // A name in another tenant's scope is refused the same way whether or not it exists.
        let in_blues = |name: &str| {
            let e = reject(&format!(
                "apiVersion: snic/v1\nkind: NT\nmetadata: {{name: {name}}}\nspec: {{tenant: green, config: {{kind: counter}}}}\n"
            ));
            (e.code, e.field, e.reason)
        };
        assert_eq!(in_blues("blue/blue-fw"), in_blues("blue/nothing-here"));
        assert_eq!(in_blues("blue/blue-fw").0, ErrorCode::InvalidManifest);
        // A reference to another tenant's NT that is not shared reads as one that does not exist.
        let uses = |nt: &str| {
            let e = reject(&format!("apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: d}}\nspec: {{tenant: green, nodes: [{nt}]}}\n"));
            (e.code, e.field, e.reason.replace(nt, "X"))
        };
        assert_eq!(uses("blue/blue-fw"), uses("blue/nothing-here"));
        let rule = |dag: &str| {
            let e =
                reject(&format!("apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: r}}\nspec: {{vni: 200, action: {{dag: {dag}}}}}\n"));
            (e.code, e.field, e.reason.replace(dag, "X"))
        };
        assert_eq!(rule("blue/blue-path"), rule("blue/nothing-here"));
    }

    #[test]
    fn a_store_from_before_scoped_names_is_read_with_full_names_and_its_uids() {
        let old = base();
        let short = |n: &str| n.split_once('/').map_or(n, |(_, s)| s).to_string();
        // What a store written before scoped names held: bare names, DAG UIDs by bare name.
        let objects: Vec<Object> = old
            .objects()
            .cloned()
            .map(|mut o| {
                o.name = short(&o.name);
                match &mut o.spec {
                    Spec::Dag(d) => d.nodes.iter_mut().for_each(|n| *n = short(n)),
                    Spec::Rule(r) => {
                        if let RuleAction::Dag(d) = &mut r.action {
                            *d = short(d);
                        }
                    }
                    _ => {}
                }
                o
            })
            .collect();
        let mut ids = old.ids().clone();
        ids.dags = ids.dags.iter().map(|(k, v)| (short(k), *v)).collect();
        assert_eq!(State::restore(objects, ids).unwrap(), old);
        // A stored object named in another tenant's scope (an edited store) is refused.
        let mut bad: Vec<Object> = old.objects().cloned().collect();
        bad.iter_mut().find(|o| o.name == "blue/blue-fw").unwrap().name = "green/blue-fw".into();
        assert!(State::restore(bad, old.ids().clone()).is_err());
    }

    #[test]
    fn a_vni_with_rules_moves_to_another_tenant_only_without_them() {
        let e = reject("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: blue}\nspec: {vnis: []}\n---\napiVersion: snic/v1\nkind: Tenant\nmetadata: {name: green}\nspec: {vnis: [200, 100]}\n");
        assert_eq!((e.kind.as_str(), e.name.as_str(), e.field.as_str()), ("Rule", "blue/blue-all", "metadata.name"));
    }

    #[test]
    fn a_wasm_nt_is_checked_at_deploy_and_never_shared() {
        use base64::Engine as _;
        let module = wat::parse_str(
            r#"(module (memory (export "memory") 1) (data (i32.const 4) "\00\08\00\00")
                 (func (export "snic_packet") (result i32) i32.const 0)
                 (func (export "snic_process") (param i32) (result i32) i32.const 0))"#,
        )
        .unwrap();
        let nt = |shared: &str, module: &str| {
            format!("apiVersion: snic/v1\nkind: NT\nmetadata: {{name: own}}\nspec: {{tenant: blue, {shared} config: {{kind: wasm, module: \"{module}\"}}}}\n")
        };
        let good = base64::engine::general_purpose::STANDARD.encode(&module);
        base().apply(parse(&nt("", &good)).unwrap()).unwrap();
        let e = reject(&nt("shared_with: [green],", &good));
        assert_eq!(
            (e.field.as_str(), e.reason.as_str()),
            ("spec.shared_with", "a wasm NT runs its own tenant's packets only: it cannot be shared")
        );
        let e = reject(&nt("", &base64::engine::general_purpose::STANDARD.encode(b"#!/bin/sh")));
        assert_eq!(e.field, "spec.config.module");
        assert!(e.reason.starts_with("not a WebAssembly module"), "{e}");
    }

    #[test]
    fn a_module_is_started_once_by_the_apply_that_brings_it_never_by_anothers() {
        use base64::Engine as _;
        // snic_init returns 7: the module validates, and fails when it starts.
        let module = wat::parse_str(
            r#"(module (memory (export "memory") 1) (data (i32.const 4) "\00\08\00\00")
                 (func (export "snic_packet") (result i32) i32.const 0)
                 (func (export "snic_init") (result i32) i32.const 7)
                 (func (export "snic_process") (param i32) (result i32) i32.const 0))"#,
        )
        .unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&module);
        let nt = format!(
            "apiVersion: snic/v1\nkind: NT\nmetadata: {{name: own}}\nspec: {{tenant: blue, config: {{kind: wasm, module: \"{b64}\"}}}}\n"
        );
        let s = base();
        let with = s.apply(parse(&nt).unwrap()).expect("validating never starts a module");
        let e = with.start_new_modules(&s).unwrap_err();
        assert_eq!((e.name.as_str(), e.field.as_str()), ("blue/own", "spec.config.module"));
        assert!(e.reason.contains("snic_init returned 7"), "{e}");
        // Another object's apply around it does not start it again (it would fail if it did).
        let later = with
            .apply(
                parse("apiVersion: snic/v1\nkind: NT\nmetadata: {name: other}\nspec: {tenant: green, config: {kind: counter}}\n").unwrap(),
            )
            .unwrap();
        later.start_new_modules(&with).unwrap();
    }

    #[test]
    fn a_vni_map_maps_only_into_its_own_tenants_vnis() {
        let nt = |cfg: &str, shared: &str| {
            format!("apiVersion: snic/v1\nkind: NT\nmetadata: {{name: m}}\nspec: {{tenant: green, {shared} config: {{kind: vni_map, {cfg}}}}}\n")
        };
        let s =
            base().apply(parse("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: green}\nspec: {vnis: [200, 201]}\n").unwrap()).unwrap();
        s.apply(parse(&nt("map: [{from: 200, to: 201}], default: 200", "")).unwrap()).unwrap();
        for (cfg, field) in [
            ("map: [{from: 200, to: 201}, {from: 201, to: 100}]", "spec.config.map[1].to"),
            ("default: 100", "spec.config.default"),
            ("map: [{from: 200, to: 999}]", "spec.config.map[0].to"),
        ] {
            let e = s.apply(parse(&nt(cfg, "")).unwrap()).unwrap_err();
            assert_eq!((e.code, e.field.as_str()), (ErrorCode::InvalidManifest, field), "{cfg}");
        }
        // Another tenant's VNI and one nobody owns are refused in the same words.
        let theirs = s.apply(parse(&nt("default: 100", "")).unwrap()).unwrap_err().reason;
        let nobodys = s.apply(parse(&nt("default: 999", "")).unwrap()).unwrap_err().reason;
        assert_eq!(theirs.replace("100", "X"), nobodys.replace("999", "X"));
        let e = s.apply(parse(&nt("default: 200", "shared_with: [blue],")).unwrap()).unwrap_err();
        assert_eq!(e.field, "spec.shared_with");
        // A VNI a vni_map maps into cannot be taken from its tenant while the map stands.
        let s = s.apply(parse(&nt("default: 201", "")).unwrap()).unwrap();
        let e = s.apply(parse("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: green}\nspec: {vnis: [200]}\n").unwrap()).unwrap_err();
        assert_eq!(e.field, "spec.config.default");
    }

    /// Found by the etcd test: two nodes writing without the revision guard left ids that
    /// named a tenant twice or not at all, and planning such a state panicked. A state whose
    /// ids do not cover its objects once each is refused when it is restored.
    #[test]
    fn a_stored_state_whose_ids_miss_or_repeat_is_refused() {
        let s = base();
        let objects = || s.objects().cloned().collect::<Vec<_>>();
        assert_eq!(State::restore(objects(), s.ids().clone()).unwrap(), s);
        let mut missing = s.ids().clone();
        missing.tenants.remove("green");
        let e = State::restore(objects(), missing).unwrap_err();
        assert_eq!((e.name.as_str(), e.reason.as_str()), ("green", "has no id in the stored ids"));
        let mut twice = s.ids().clone();
        twice.tenants.insert("green".into(), 1);
        let e = State::restore(objects(), twice).unwrap_err();
        assert!(e.reason.contains("shares its id"), "{e}");
    }

    #[test]
    fn bad_references_cycles_and_conflicts_are_rejected_whole() {
        let e = reject("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: red}\nspec: {vnis: [300, 100]}\n");
        assert_eq!((e.code, e.field.as_str()), (ErrorCode::VniConflict, "spec.vnis[1]"), "{e}");
        let e = reject("apiVersion: snic/v1\nkind: DAG\nmetadata: {name: d}\nspec: {tenant: blue, nodes: [blue-fw, nope]}\n");
        assert_eq!((e.code, e.field.as_str(), e.name.as_str()), (ErrorCode::UnknownReference, "spec.nodes[1]", "blue/d"), "{e}");
        // Another tenant's NT (or DAG) answers exactly as one that does not exist.
        let theirs = reject("apiVersion: snic/v1\nkind: DAG\nmetadata: {name: g}\nspec: {tenant: green, nodes: [blue/blue-fw]}\n");
        let missing = reject("apiVersion: snic/v1\nkind: DAG\nmetadata: {name: g}\nspec: {tenant: green, nodes: [blue/no-fw]}\n");
        assert_eq!(theirs.reason.replace("blue-fw", "X"), missing.reason.replace("no-fw", "X"));
        assert_eq!((theirs.code, &theirs.field), (missing.code, &missing.field));
        let theirs = reject("apiVersion: snic/v1\nkind: Rule\nmetadata: {name: r}\nspec: {vni: 200, action: {dag: blue/blue-path}}\n");
        let missing = reject("apiVersion: snic/v1\nkind: Rule\nmetadata: {name: r}\nspec: {vni: 200, action: {dag: blue/no-path}}\n");
        assert_eq!(theirs.reason.replace("blue-path", "X"), missing.reason.replace("no-path", "X"));
        // A shared NT is visible to the tenant it is shared with.
        base()
            .apply(
                parse("apiVersion: snic/v1\nkind: DAG\nmetadata: {name: g}\nspec: {tenant: green, nodes: [blue/shared-count]}\n").unwrap(),
            )
            .unwrap();
        let e = reject("apiVersion: snic/v1\nkind: DAG\nmetadata: {name: c}\nspec: {tenant: blue, nodes: [blue-fw, shared-count], edges: [[blue-fw, shared-count], [shared-count, blue-fw]]}\n");
        assert_eq!(e.code, ErrorCode::Cycle);
        let e = reject("apiVersion: snic/v1\nkind: Rule\nmetadata: {name: r}\nspec: {vni: 200, action: {dag: blue/blue-path}}\n");
        assert_eq!((e.code, e.field.as_str()), (ErrorCode::UnknownReference, "spec.action.dag"), "{e}");
        // Half good, half bad: none of it lands.
        let e = reject("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: red}\nspec: {vnis: [300]}\n---\napiVersion: snic/v1\nkind: Rule\nmetadata: {name: r}\nspec: {vni: 999, action: drop}\n");
        assert_eq!(e.field, "spec.vni");
        let e = reject("apiVersion: snic/v1\nkind: NT\nmetadata: {name: k}\nspec: {tenant: blue, config: {kind: aes_gcm, direction: encrypt, keys: [{tenant: 1, spi: 1, key_hex: abc}]}}\n");
        assert_eq!(e.field, "spec.config", "{e}");
        let e = reject(
            "apiVersion: snic/v1\nkind: Route\nmetadata: {name: x}\nspec: {vni: 100, vtep: '127.0.0.1:4789', default: true, flood: true}\n",
        );
        assert_eq!(e.field, "spec");
    }

    /// Nonsense is refused with the object, the field and the reason, whatever else is valid.
    #[test]
    fn out_of_bounds_and_inverted_values_are_refused_with_their_field() {
        let nt = |name: &str, cfg: &str| {
            format!("apiVersion: snic/v1\nkind: NT\nmetadata: {{name: {name}}}\nspec: {{tenant: blue, config: {cfg}}}\n")
        };
        let cases: Vec<(String, &str, &str)> = vec![
            (nt("f", "{kind: firewall, flow_cache: 18446744073709551615}"), "f", "spec.config.flow_cache"),
            (nt("f", "{kind: firewall, rules: [{dst_ports: {lo: 90, hi: 80}, action: deny}]}"), "f", "spec.config.rules[0].dst_ports"),
            (nt("n", "{kind: nat, max_flows: 1000000000000}"), "n", "spec.config.max_flows"),
            (nt("n", "{kind: nat, max_flows: 0}"), "n", "spec.config"),
            (nt("n", "{kind: nat, snat: {inside: 10.0.0.0/8, public: 1.2.3.4, ports: {lo: 0, hi: 0}}}"), "n", "spec.config.snat.ports"),
            (
                nt("n", "{kind: nat, snat: {inside: 10.0.0.0/8, public: 1.2.3.4, ports: {lo: 2000, hi: 1000}}}"),
                "n",
                "spec.config.snat.ports",
            ),
            (
                nt("n", "{kind: nat, dnat: [{public: 1.2.3.4, proto: 6, port: 80, to: 10.0.0.1, to_port: 0}]}"),
                "n",
                "spec.config.dnat[0].to_port",
            ),
            (nt("n", "{kind: nat, udp_timeout_s: 0}"), "n", "spec.config.udp_timeout_s"),
            (nt("k", "{kind: aes_gcm, direction: decrypt, keys: [], max_senders: 1000000000000}"), "k", "spec.config.max_senders"),
            (nt("s", "{kind: synthetic, cost_ns: 1000000000000000}"), "s", "spec.config.cost_ns"),
            (nt("s", "{kind: synthetic, capacity_pps: 0}"), "s", "spec.config"),
            (
                "apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: q}\nspec: {quotas: {store_buffers: 0}}\n".into(),
                "q",
                "spec.quotas.store_buffers",
            ),
            ("apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: q}\nspec: {weight: 1000001}\n".into(), "q", "spec.weight"),
            (
                "apiVersion: snic/v1\nkind: Rule\nmetadata: {name: r}\nspec: {vni: 100, dst_ports: {lo: 9, hi: 1}, action: drop}\n".into(),
                "r",
                "spec.dst_ports",
            ),
            (
                "apiVersion: snic/v1\nkind: Route\nmetadata: {name: r}\nspec: {vni: 100, vtep: '10.0.0.1:0', default: true}\n".into(),
                "r",
                "spec.vtep",
            ),
            (
                "apiVersion: snic/v1\nkind: Route\nmetadata: {name: r}\nspec: {vni: 100, vtep: '0.0.0.0:4789', default: true}\n".into(),
                "r",
                "spec.vtep",
            ),
        ];
        for (doc, name, field) in cases {
            let e = reject(&doc);
            // NTs, DAGs and rules are named in their tenant's scope.
            let short = e.name.rsplit('/').next().unwrap_or_default();
            assert_eq!((e.code, short, e.field.as_str()), (ErrorCode::InvalidManifest, name, field), "{doc}: {e}");
            assert!(!e.reason.is_empty());
        }
        // The largest values inside the bounds are accepted (and nothing is built to check them).
        base().apply(parse(&nt("big", "{kind: nat, max_flows: 1048576}")).unwrap()).unwrap();
    }

    #[test]
    fn delete_refuses_what_is_in_use() {
        let e = base().delete(Kind::Nt, "blue/blue-fw").unwrap_err();
        assert_eq!(e.code, ErrorCode::InUse);
        assert_eq!(base().delete(Kind::Nt, "nope").unwrap_err().code, ErrorCode::NotFound);
    }
}
