//! Per-tenant quotas on objects: how many NTs, DAGs, rules and WebAssembly modules one tenant may
//! hold, so that a tenant with its own credential cannot grow the desired state — and the
//! node's memory, the plan's time, every later apply — without bound (docs/operations.md,
//! "Limits").
//!
//! A quota is the Tenant's own (`spec.quotas`) or the node's default ([`Limits`], from
//! node.yaml `limits:`). An apply is refused only when it *raises* a tenant's count past its
//! quota, so lowering a quota never blocks changes that shrink or keep the count. Decisions
//! only: the daemon calls [`check`] on an apply's result before it commits.

use crate::manifest::{Error, ErrorCode, Kind, Spec};
use crate::state::State;
use std::collections::BTreeMap;

/// The node's default quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// NTs per tenant.
    pub nts: u32,
    /// DAGs per tenant.
    pub dags: u32,
    /// Rules on a tenant's VNIs.
    pub rules: u32,
    /// WebAssembly NTs per tenant.
    pub wasm_nts: u32,
    /// The largest `max_packet_us` a `wasm` NT may have.
    pub wasm_packet_us: u64,
    /// The largest `max_init_ms` a `wasm` NT may have.
    pub wasm_init_ms: u64,
}

/// What one tenant holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Held {
    nts: u32,
    dags: u32,
    rules: u32,
    wasm_nts: u32,
}

fn held(state: &State) -> BTreeMap<&str, Held> {
    let mut m: BTreeMap<&str, Held> = BTreeMap::new();
    let owners = state.vni_owners();
    for o in state.objects() {
        let (t, field): (&str, fn(&mut Held) -> &mut u32) = match &o.spec {
            Spec::Nt(n) if matches!(n.config, snic_nt::NtSpec::Wasm(_)) => {
                m.entry(&n.tenant).or_default().wasm_nts += 1;
                (&n.tenant, |h| &mut h.nts)
            }
            Spec::Nt(n) => (&n.tenant, |h| &mut h.nts),
            Spec::Dag(d) => (&d.tenant, |h| &mut h.dags),
            Spec::Rule(r) => match owners.get(&r.vni) {
                Some(t) => (t, |h| &mut h.rules),
                None => continue,
            },
            _ => continue,
        };
        *field(m.entry(t).or_default()) += 1;
    }
    m
}

/// Whether `next` (an apply's result from `before`) keeps every tenant within its quotas, or
/// leaves a count it raised no higher than its quota.
pub fn check(before: &State, next: &State, limits: &Limits) -> Result<(), Error> {
    // A tenant's module asks for no more of the node's time than the operator allows.
    for o in next.list(Kind::Nt).filter(|o| before.get(Kind::Nt, &o.name) != Some(*o)) {
        let Spec::Nt(n) = &o.spec else { continue };
        let snic_nt::NtSpec::Wasm(c) = &n.config else { continue };
        for (field, v, most, setting) in [
            ("max_packet_us", c.max_packet_us, limits.wasm_packet_us, "wasm_packet_us_max"),
            ("max_init_ms", c.max_init_ms, limits.wasm_init_ms, "wasm_init_ms_max"),
        ] {
            if v > most {
                return Err(Error::new(
                    ErrorCode::InvalidManifest,
                    Kind::Nt,
                    &o.name,
                    format!("spec.config.{field}"),
                    format!("{v} is over this node's limit of {most} (node.yaml limits.{setting})"),
                ));
            }
        }
    }
    let (was, is) = (held(before), held(next));
    for (tenant, h) in &is {
        let Some(Spec::Tenant(spec)) = next.get(Kind::Tenant, tenant).map(|o| &o.spec) else { continue };
        let q = &spec.quotas;
        let w = was.get(tenant).copied().unwrap_or_default();
        let counts = [
            (Kind::Nt, "NTs", "nts", h.nts, w.nts, q.nts.unwrap_or(limits.nts)),
            (Kind::Dag, "DAGs", "dags", h.dags, w.dags, q.dags.unwrap_or(limits.dags)),
            (Kind::Rule, "rules", "rules", h.rules, w.rules, q.rules.unwrap_or(limits.rules)),
            (Kind::Nt, "WebAssembly NTs", "wasm_nts", h.wasm_nts, w.wasm_nts, q.wasm_nts.unwrap_or(limits.wasm_nts)),
        ];
        for (kind, what, field, now, then, quota) in counts {
            if now > quota && now > then {
                return Err(Error::new(
                    ErrorCode::Capacity,
                    kind,
                    tenant,
                    format!("quotas.{field}"),
                    format!(
                        "tenant `{tenant}` would hold {now} {what}; its quota is {quota} (the Tenant's spec.quotas.{field}, else node.yaml limits.{field}_per_tenant)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::parse;

    const LIMITS: Limits = Limits { nts: 3, dags: 2, rules: 2, wasm_nts: 1, wasm_packet_us: 1000, wasm_init_ms: 1000 };

    fn base(quotas: &str) -> State {
        State::default()
            .apply(
                parse(&format!(
                    "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: blue}}\nspec: {{vnis: [100, 101, 102], quotas: {{{quotas}}}}}\n---\napiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: green}}\nspec: {{vnis: [200]}}\n"
                ))
                .unwrap(),
            )
            .unwrap()
    }

    fn nt(name: &str, tenant: &str) -> String {
        format!("apiVersion: snic/v1\nkind: NT\nmetadata: {{name: {name}}}\nspec: {{tenant: {tenant}, config: {{kind: counter}}}}\n---\n")
    }

    fn apply(s: &State, docs: &str) -> Result<State, Error> {
        let next = s.apply(parse(docs).unwrap())?;
        check(s, &next, &LIMITS)?;
        Ok(next)
    }

    #[test]
    fn a_tenant_is_held_to_its_quota_and_others_are_not_touched() {
        let s = base("");
        let s = apply(&s, &(nt("a", "blue") + &nt("b", "blue") + &nt("c", "blue"))).unwrap();
        let e = apply(&s, &nt("d", "blue")).unwrap_err();
        assert_eq!((e.code, e.name.as_str(), e.field.as_str()), (ErrorCode::Capacity, "blue", "quotas.nts"), "{e}");
        assert!(e.reason.contains("would hold 4 NTs; its quota is 3"), "{e}");
        // Green is not affected by blue's count.
        let s2 = apply(&s, &(nt("g1", "green") + &nt("g2", "green") + &nt("g3", "green"))).unwrap();
        // Replacing an NT keeps the count: allowed at the quota.
        apply(&s2, &nt("a", "blue").replace("counter", "dummy")).unwrap();
        // Rules count against the VNI's owner.
        let rule = |n: &str, vni: u32| {
            format!("apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: {n}}}\nspec: {{vni: {vni}, action: drop}}\n---\n")
        };
        let s3 = apply(&s, &(rule("r1", 100) + &rule("r2", 101))).unwrap();
        assert_eq!(apply(&s3, &rule("r3", 102)).unwrap_err().field, "quotas.rules");
        apply(&s3, &rule("r3", 200)).unwrap();
    }

    #[test]
    fn a_tenants_own_quota_overrides_the_nodes_and_lowering_it_blocks_only_growth() {
        let s = base("nts: 5");
        let four = nt("a", "blue") + &nt("b", "blue") + &nt("c", "blue") + &nt("d", "blue");
        let s = apply(&s, &four).unwrap();
        // The operator lowers blue's quota below what it holds: allowed, nothing is removed.
        let s = apply(&s, "apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: blue}\nspec: {vnis: [100, 101, 102], quotas: {nts: 1}}\n")
            .unwrap();
        assert_eq!(apply(&s, &nt("e", "blue")).unwrap_err().field, "quotas.nts");
        apply(&s, &nt("a", "blue").replace("counter", "dummy")).unwrap();
        let s = s.delete(Kind::Nt, "blue/d").unwrap();
        assert_eq!(apply(&s, &nt("d", "blue")).unwrap_err().field, "quotas.nts", "3 + 1 is still over 1");
    }
}
