//! Who may do what through the API (docs/operations.md, "Credentials").
//!
//! Two kinds of credential, both bearer tokens: the **operator**'s (node.yaml
//! `auth.operator_token_file`), which may do everything, and a **tenant**'s, whose SHA-256 the
//! operator puts in the tenant's object (`spec.token_sha256`). A tenant's credential reads and
//! writes only that tenant's NTs, DAGs and rules, and reads its own Tenant object and the routes
//! of its VNIs: it cannot create tenants or routes, change its own weight, quotas or VNIs, or
//! see another tenant's objects, status or metrics. Decisions only: the API applies them.

use crate::manifest::{Error, ErrorCode, Kind, Object, Spec};
use crate::state::State;

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The node's operator.
    Operator,
    /// A tenant, by name.
    Tenant(String),
}

/// The SHA-256 of a token, lowercase hex: what a Tenant's `token_sha256` holds.
pub fn token_sha256(token: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, token.trim().as_bytes()).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The principal a bearer `token` stands for: the operator if its hash is `operator_sha256`, the
/// tenant whose `token_sha256` it matches, or nobody.
pub fn principal(state: &State, operator_sha256: &str, token: &str) -> Option<Principal> {
    let h = token_sha256(token);
    if h == operator_sha256 {
        return Some(Principal::Operator);
    }
    state.list(Kind::Tenant).find_map(|o| match &o.spec {
        Spec::Tenant(t) if t.token_sha256.as_deref() == Some(h.as_str()) => Some(Principal::Tenant(o.name.clone())),
        _ => None,
    })
}

/// The tenant an object belongs to: a Tenant itself, an NT's or a DAG's `spec.tenant`, and for a
/// Rule or a Route the tenant that owns its VNI in `state` (none if no tenant does).
pub fn owner<'a>(state: &'a State, o: &'a Object) -> Option<&'a str> {
    let vni_owner = |vni: u32| {
        state.list(Kind::Tenant).find_map(|t| match &t.spec {
            Spec::Tenant(s) if s.vnis.contains(&vni) => Some(t.name.as_str()),
            _ => None,
        })
    };
    match &o.spec {
        Spec::Tenant(_) => Some(&o.name),
        Spec::Nt(n) => Some(&n.tenant),
        Spec::Dag(d) => Some(&d.tenant),
        Spec::Rule(r) => vni_owner(r.vni),
        Spec::Route(r) => vni_owner(r.vni),
    }
}

/// True if `who` may read `o`.
pub fn visible(state: &State, who: &Principal, o: &Object) -> bool {
    match who {
        Principal::Operator => true,
        Principal::Tenant(t) => owner(state, o) == Some(t.as_str()),
    }
}

fn forbidden(o: &Object, field: &str, reason: &str) -> Error {
    Error { code: ErrorCode::Forbidden, kind: o.kind.as_str().into(), name: o.name.clone(), field: field.into(), reason: reason.into() }
}

/// Kinds a tenant's credential may write.
fn tenants_kind(k: Kind) -> bool {
    matches!(k, Kind::Nt | Kind::Dag | Kind::Rule)
}

/// Whether `who` may apply `objs` to `state` (all of them, or the whole apply is refused).
pub fn may_apply(state: &State, who: &Principal, objs: &[Object]) -> Result<(), Error> {
    let Principal::Tenant(me) = who else { return Ok(()) };
    for o in objs {
        if !tenants_kind(o.kind) {
            return Err(forbidden(
                o,
                "kind",
                "a tenant's credential applies its own NTs, DAGs and rules; tenants and routes are the operator's",
            ));
        }
        // No check of the name: NTs, DAGs and rules are named in their tenant's scope
        // (`State::scoped`), so whatever another tenant named its objects is not in the way, and
        // an apply never tells whether it exists.
        let (field, ok) = match &o.spec {
            Spec::Nt(n) => ("spec.tenant", n.tenant == *me),
            Spec::Dag(d) => ("spec.tenant", d.tenant == *me),
            // The VNI's owner as it stands: a tenant cannot give itself VNIs.
            Spec::Rule(_) => ("spec.vni", owner(state, o) == Some(me.as_str())),
            _ => unreachable!("checked: a tenant's kind"),
        };
        if !ok {
            return Err(forbidden(o, field, &format!("this credential is tenant {me:?}'s; the object must be its own")));
        }
    }
    Ok(())
}

/// The full name `who` means by `name` for an object of `kind`: a tenant names its NTs, DAGs
/// and rules by `NAME` or `TENANT/NAME`; the operator by `TENANT/NAME`.
pub fn full_name(who: &Principal, kind: Kind, name: &str) -> String {
    match who {
        Principal::Tenant(t) if kind.tenant_scoped() => crate::manifest::in_scope(t, name),
        _ => name.to_string(),
    }
}

/// Whether `who` may delete `kind`/`name`: a tenant only its own NTs, DAGs and rules. Another
/// tenant's object is reported as not found (its existence is not the caller's business).
pub fn may_delete(state: &State, who: &Principal, kind: Kind, name: &str) -> Result<(), Error> {
    let Principal::Tenant(_) = who else { return Ok(()) };
    let not_found = || Error {
        code: ErrorCode::NotFound,
        kind: kind.as_str().into(),
        name: name.into(),
        field: "metadata.name".into(),
        reason: "no such object".into(),
    };
    let o = state.get(kind, name).filter(|o| visible(state, who, o)).ok_or_else(not_found)?;
    if !tenants_kind(kind) {
        return Err(forbidden(o, "kind", "a tenant's credential deletes its own NTs, DAGs and rules only"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse;

    fn state() -> State {
        let blue = token_sha256("blue-secret");
        let green = token_sha256("green-secret");
        State::default()
            .apply(
                parse(&format!(
                    r#"
apiVersion: snic/v1
kind: Tenant
metadata: {{name: blue}}
spec: {{vnis: [100], token_sha256: "{blue}"}}
---
apiVersion: snic/v1
kind: Tenant
metadata: {{name: green}}
spec: {{vnis: [200], token_sha256: "{green}"}}
---
apiVersion: snic/v1
kind: NT
metadata: {{name: blue-fw}}
spec: {{tenant: blue, config: {{kind: firewall}}}}
---
apiVersion: snic/v1
kind: NT
metadata: {{name: green-count}}
spec: {{tenant: green, config: {{kind: counter}}}}
---
apiVersion: snic/v1
kind: Route
metadata: {{name: green-r}}
spec: {{vni: 200, vtep: "10.0.0.9:4789", default: true}}
"#
                ))
                .unwrap(),
            )
            .unwrap()
    }

    fn doc(kind: &str, name: &str, spec: &str) -> Vec<Object> {
        parse(&format!("apiVersion: snic/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n")).unwrap()
    }

    #[test]
    fn tokens_name_their_principal() {
        let s = state();
        let op = token_sha256("op");
        assert_eq!(principal(&s, &op, "op"), Some(Principal::Operator));
        assert_eq!(principal(&s, &op, "blue-secret\n"), Some(Principal::Tenant("blue".into())), "a trailing newline is not part of it");
        assert_eq!(principal(&s, &op, "green-secret"), Some(Principal::Tenant("green".into())));
        assert_eq!(principal(&s, &op, "guess"), None);
        assert_eq!(principal(&s, &op, ""), None);
    }

    #[test]
    fn a_tenant_writes_only_its_own_nts_dags_and_rules() {
        let s = state();
        let blue = Principal::Tenant("blue".into());
        for ok in [
            doc("NT", "blue-count", "{tenant: blue, config: {kind: counter}}"),
            doc("NT", "blue-fw", "{tenant: blue, config: {kind: firewall, default: deny}}"),
            doc("DAG", "blue-path", "{tenant: blue, nodes: [blue-fw]}"),
            doc("Rule", "blue-all", "{vni: 100, action: pass_through}"),
            // green has an NT of that name: in blue's scope, it is another object.
            doc("NT", "green-count", "{tenant: blue, config: {kind: counter}}"),
        ] {
            may_apply(&s, &blue, &ok).unwrap();
        }
        for (bad, field) in [
            (doc("Tenant", "blue", "{vnis: [100], weight: 100}"), "kind"),
            (doc("Tenant", "red", "{vnis: [300]}"), "kind"),
            (doc("Route", "blue-r", "{vni: 100, vtep: '10.0.0.1:4789', default: true}"), "kind"),
            (doc("NT", "mine", "{tenant: green, config: {kind: counter}}"), "spec.tenant"),
            (doc("DAG", "theirs", "{tenant: green, nodes: [green-count]}"), "spec.tenant"),
            (doc("Rule", "steal", "{vni: 200, action: drop}"), "spec.vni"),
            (doc("Rule", "unowned", "{vni: 999, action: drop}"), "spec.vni"),
        ] {
            let e = may_apply(&s, &blue, &bad).unwrap_err();
            assert_eq!((e.code, e.field.as_str()), (ErrorCode::Forbidden, field), "{bad:?}");
        }
        may_apply(&s, &Principal::Operator, &doc("Tenant", "blue", "{vnis: [100], weight: 100}")).unwrap();
    }

    #[test]
    fn a_tenant_sees_and_deletes_only_its_own() {
        let s = state();
        let blue = Principal::Tenant("blue".into());
        let seen: Vec<_> = s.objects().filter(|o| visible(&s, &blue, o)).map(|o| o.name.as_str()).collect();
        assert_eq!(seen, ["blue", "blue/blue-fw"]);
        let green = Principal::Tenant("green".into());
        let seen: Vec<_> = s.objects().filter(|o| visible(&s, &green, o)).map(|o| o.name.as_str()).collect();
        assert_eq!(seen, ["green", "green/green-count", "green-r"], "its routes are its to read");
        let name = |who: &Principal, n: &str| full_name(who, Kind::Nt, n);
        may_delete(&s, &blue, Kind::Nt, &name(&blue, "blue-fw")).unwrap();
        may_delete(&s, &blue, Kind::Nt, &name(&blue, "blue/blue-fw")).unwrap();
        for theirs in ["green-count", "green/green-count", "green/nothing"] {
            let e = may_delete(&s, &blue, Kind::Nt, &name(&blue, theirs)).unwrap_err();
            assert_eq!((e.code, e.reason.as_str()), (ErrorCode::NotFound, "no such object"), "{theirs}");
        }
        may_delete(&s, &green, Kind::Nt, &name(&green, "green-count")).unwrap();
        may_delete(&s, &Principal::Operator, Kind::Nt, &name(&Principal::Operator, "green/green-count")).unwrap();
        assert_eq!(may_delete(&s, &blue, Kind::Tenant, "blue").unwrap_err().code, ErrorCode::Forbidden);
        assert_eq!(may_delete(&s, &green, Kind::Route, "green-r").unwrap_err().code, ErrorCode::Forbidden);
        may_delete(&s, &Principal::Operator, Kind::Tenant, "green").unwrap();
    }
}
