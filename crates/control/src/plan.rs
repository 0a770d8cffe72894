//! From desired state to what a node runs: chains, placement, routes, rules.
//!
//! **Chains** are formed along DAG paths (paper §4.3): each DAG is put in a topological order,
//! and consecutive NTs not yet placed become one chain. An NT already placed by another DAG —
//! a shared NT, time-shared by its tenants — is reused where it is, and the DAG's route visits its
//! chain with a mask that skips the chain's other NTs. Consecutive NTs of a DAG that sit in one
//! chain in increasing order form one step (one visit).
//!
//! **Placement**: each chain gets one instance, pre-launched into a free region at deploy. With a
//! fixed region per chain, more chains than regions is a capacity error; a node with elastic NTs
//! (on-demand launch, context switching) plans with no such limit (`regions = usize::MAX`) and
//! launches what does not fit when its packets arrive.

use crate::manifest::{DagSpec, Error, ErrorCode, Kind, RuleAction, Spec};
use crate::state::State;
use snic_core::dag::{DagRoute, NtMask, Step, MAX_BRANCHES};
use snic_core::ids::ChainId;
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::{Action, IpPrefix, Mat, PortRange, Rule};
use snic_nt::NtSpec;
use snic_wire::ethernet::MacAddr;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// A tenant as the node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantPlan {
    /// Name.
    pub name: String,
    /// Id.
    pub id: TenantId,
    /// Weight.
    pub weight: u32,
    /// Packet-store quota, if any.
    pub store_buffers: Option<u32>,
    /// VNIs.
    pub vnis: Vec<u32>,
    /// Its bound on learned MACs, if its own.
    pub fdb_macs: Option<u32>,
}

/// A chain: NTs that run together in one region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainPlan {
    /// NT names, in order.
    pub nts: Vec<String>,
    /// Their configurations.
    pub specs: Vec<NtSpec>,
    /// Every DAG that visits the chain declared that its endpoint can run it.
    pub endpoint_fallback: bool,
}

/// A DAG's route through the chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagPlan {
    /// Name.
    pub name: String,
    /// Owner.
    pub tenant: TenantId,
    /// UID.
    pub uid: DagUid,
    /// Visits: chain index into [`Plan::chains`] and the NTs run there.
    pub steps: Vec<(usize, NtMask)>,
    /// Step ranges (`start..end`) that run in parallel (fork/join), for a DAG with
    /// `parallel: true`.
    pub groups: Vec<(usize, usize)>,
}

impl DagPlan {
    /// The route the data plane runs, with plan chain `c` deployed as `chain(c)`.
    pub fn route(&self, chain: impl Fn(usize) -> ChainId) -> DagRoute {
        let steps = self.steps.iter().map(|&(c, mask)| Step { chain: chain(c), mask }).collect();
        DagRoute::with_groups(steps, &self.groups).expect("the planner forms groups of 2..=MAX_BRANCHES steps, in order")
    }
}

impl Plan {
    /// The chains of DAG `d`'s *compact* candidate — one chain holding all its NTs, the
    /// planned chains' NTs concatenated in route order — if it has one: its route visits at
    /// least two chains, each only by this DAG and whole (no NT skipped), with at most 64 NTs
    /// in all. A node with elastic NTs may switch the DAG to it when regions are short.
    pub fn compact_chains(&self, d: &DagPlan) -> Option<Vec<usize>> {
        let mut chains: Vec<usize> = Vec::new();
        for &(c, mask) in &d.steps {
            if mask != NtMask::all(self.chains[c].nts.len()) {
                return None;
            }
            if !chains.contains(&c) {
                chains.push(c);
            }
        }
        let shared = self.dags.iter().any(|o| o.uid != d.uid && o.steps.iter().any(|(c, _)| chains.contains(c)));
        let nts: usize = chains.iter().map(|&c| self.chains[c].nts.len()).sum();
        (chains.len() >= 2 && !shared && nts <= 64).then_some(chains)
    }
}

/// What a node asks a peer to run for it (paper 000 §5, remote launch): one of its DAGs, with
/// the chains the DAG visits and the tenant it belongs to, in the plan's terms. The peer
/// charges it to a tenant of its own that stands for the home node's, launches the chain the
/// packets need first, and runs the rest on demand.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostRequest {
    /// The tenant's name at home.
    pub tenant: String,
    /// Its weight.
    pub weight: u32,
    /// Its packet-store quota at home, if any.
    pub store_buffers: Option<u32>,
    /// The DAG's name at home.
    pub dag: String,
    /// The chains the DAG visits: NT names and configurations.
    pub chains: Vec<(Vec<String>, Vec<NtSpec>)>,
    /// Its visits: chain index into `chains`, NT mask.
    pub steps: Vec<(usize, u64)>,
    /// Its parallel groups (`start..end` step ranges).
    pub groups: Vec<(usize, usize)>,
    /// The step redirected packets enter first: its chain is launched with the DAG.
    #[serde(default)]
    pub entry: usize,
    /// The flood lists (broadcast and unknown unicast) of the tenant's VNIs at home: a
    /// redirected packet whose destination the home node could not resolve is flooded to them
    /// by the peer, as the home node would have.
    #[serde(default)]
    pub floods: Vec<(u32, Vec<SocketAddr>)>,
    /// The tenant's VNIs at home: the peer runs a redirected packet in the hosted DAG only if
    /// its VNI is one of them (a packet runs only in a DAG of its own tenant).
    #[serde(default)]
    pub vnis: Vec<u32>,
}

/// Most chains in a [`HostRequest`] (and NTs per chain: a mask has 64 bits).
const MAX_HOSTED_CHAINS: usize = 64;

/// Most flood-list entries in a [`HostRequest`], over all its VNIs.
const MAX_HOSTED_FLOODS: usize = 4096;

impl HostRequest {
    /// Checks what a peer sent before anything is built from it: chain indices and masks in
    /// range, groups well formed. The NTs' configurations are checked when they are built.
    pub fn validate(&self) -> Result<(), String> {
        if self.chains.is_empty() || self.chains.len() > MAX_HOSTED_CHAINS || self.steps.is_empty() {
            return Err(format!(
                "{} chains and {} steps: need 1..={MAX_HOSTED_CHAINS} and at least one",
                self.chains.len(),
                self.steps.len()
            ));
        }
        for (nts, specs) in &self.chains {
            if nts.len() != specs.len() || nts.is_empty() || nts.len() > 64 {
                return Err(format!("a chain of {} names and {} configurations (1..=64, as many of each)", nts.len(), specs.len()));
            }
        }
        for &(c, mask) in &self.steps {
            let n =
                self.chains.get(c).map(|(nts, _)| nts.len()).ok_or_else(|| format!("step visits chain {c} of {}", self.chains.len()))?;
            if mask == 0 || mask & !NtMask::all(n).0 != 0 {
                return Err(format!("step's NT mask {mask:#x} is empty or outside chain {c}'s {n} NTs"));
            }
        }
        if self.entry >= self.steps.len() {
            return Err(format!("entry step {} of {} steps", self.entry, self.steps.len()));
        }
        if self.vnis.len() > crate::state::MAX_VNIS_PER_TENANT || self.vnis.iter().any(|&v| v >= 1 << 24) {
            return Err(format!("{} VNIs: at most {}, each under 2^24", self.vnis.len(), crate::state::MAX_VNIS_PER_TENANT));
        }
        let floods: usize = self.floods.iter().map(|(_, v)| v.len()).sum();
        if floods > MAX_HOSTED_FLOODS {
            return Err(format!("{floods} flood-list entries: at most {MAX_HOSTED_FLOODS}"));
        }
        let steps = self.steps.iter().map(|&(c, m)| Step { chain: ChainId(c as u16), mask: NtMask(m) }).collect();
        DagRoute::with_groups(steps, &self.groups).map(|_| ()).map_err(|e| e.to_string())
    }

    /// Its flood lists as forwarding entries, as the peer installs them (and removes them).
    pub fn flood_routes(&self) -> impl Iterator<Item = RoutePlan> + '_ {
        self.floods.iter().flat_map(|(vni, vteps)| {
            vteps.iter().map(|&vtep| RoutePlan { vni: *vni, vtep, vtep_mac: MacAddr::default(), entry: RouteEntry::Flood })
        })
    }

    /// The route, with chain `c` of the request deployed as `chain(c)` (after
    /// [`HostRequest::validate`]).
    pub fn route(&self, chain: impl Fn(usize) -> ChainId) -> Result<DagRoute, String> {
        let steps = self.steps.iter().map(|&(c, m)| Step { chain: chain(c), mask: NtMask(m) }).collect();
        DagRoute::with_groups(steps, &self.groups).map_err(|e| e.to_string())
    }
}

impl Plan {
    /// What a peer needs to run DAG `dag` for this node.
    pub fn host_request(&self, dag: &str) -> Option<HostRequest> {
        let d = self.dags.iter().find(|d| d.name == dag)?;
        let t = self.tenants.iter().find(|t| t.id == d.tenant)?;
        let mut used: Vec<usize> = Vec::new();
        for (c, _) in &d.steps {
            if !used.contains(c) {
                used.push(*c);
            }
        }
        let index = |c: usize| used.iter().position(|&u| u == c).unwrap_or(0);
        Some(HostRequest {
            tenant: t.name.clone(),
            weight: t.weight,
            store_buffers: t.store_buffers,
            dag: d.name.clone(),
            chains: used.iter().map(|&c| (self.chains[c].nts.clone(), self.chains[c].specs.clone())).collect(),
            steps: d.steps.iter().map(|&(c, m)| (index(c), m.0)).collect(),
            groups: d.groups.clone(),
            entry: 0,
            floods: t
                .vnis
                .iter()
                .map(|&vni| {
                    let flood = |r: &&RoutePlan| r.vni == vni && r.entry == RouteEntry::Flood;
                    (vni, self.routes.iter().filter(flood).map(|r| r.vtep).collect::<Vec<_>>())
                })
                .filter(|(_, v)| !v.is_empty())
                .collect(),
            vnis: t.vnis.clone(),
        })
    }
}

/// A forwarding entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RouteEntry {
    /// Static MAC.
    Mac(MacAddr),
    /// VNI default.
    Default,
    /// Flood list member.
    Flood,
}

/// A route.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RoutePlan {
    /// VNI.
    pub vni: u32,
    /// VTEP address.
    pub vtep: SocketAddr,
    /// VTEP MAC (frame backends).
    pub vtep_mac: MacAddr,
    /// What kind of entry.
    pub entry: RouteEntry,
}

/// Everything a node needs to run the desired state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Tenants.
    pub tenants: Vec<TenantPlan>,
    /// Chains, one pre-launched instance each.
    pub chains: Vec<ChainPlan>,
    /// DAG routes.
    pub dags: Vec<DagPlan>,
    /// MAT rules.
    pub rules: Vec<Rule>,
    /// Forwarding entries.
    pub routes: Vec<RoutePlan>,
    /// Per VNI, the outer source addresses its traffic may come from: its tenant's declared
    /// endpoints and its Routes' VTEPs. VNIs of a tenant with neither are absent (open).
    pub sources: Vec<(u32, Vec<IpPrefix>)>,
}

impl Plan {
    /// The steering rule of a node of `threads` dispatcher threads running this plan
    /// ([`snic_core::steer`]): each NAT's translations, claimed on the VNIs of every tenant
    /// whose DAGs visit its chain.
    pub fn steering(&self, threads: u16) -> snic_core::steer::Steering {
        let mut claims = Vec::new();
        for (ci, c) in self.chains.iter().enumerate() {
            let kinds: Vec<_> = c.specs.iter().flat_map(NtSpec::steering).collect();
            if kinds.is_empty() {
                continue;
            }
            let mut vnis: Vec<u32> = self
                .dags
                .iter()
                .filter(|d| d.steps.iter().any(|s| s.0 == ci))
                .filter_map(|d| self.tenants.iter().find(|t| t.id == d.tenant))
                .flat_map(|t| t.vnis.iter().copied())
                .collect();
            vnis.sort_unstable();
            vnis.dedup();
            claims.extend(kinds.into_iter().map(|kind| snic_core::steer::NatClaim { vnis: vnis.clone(), kind }));
        }
        snic_core::steer::Steering { threads, claims }
    }

    /// The NTs of this plan that keep state instances cannot split (a cache, writes waiting
    /// for replicas: [`NtSpec::single_instance`]), by name.
    pub fn single_instance_nts(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .chains
            .iter()
            .flat_map(|c| c.nts.iter().zip(&c.specs))
            .filter(|(_, s)| s.single_instance())
            .map(|(n, _)| n.as_str())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The memory each tenant's NTs hold by their configuration ([`NtSpec::memory_bytes`]),
    /// bytes, for every tenant of the plan: a chain's is split evenly between the tenants whose
    /// DAGs visit it. Fair sharing weighs it in each tenant's dominant share.
    pub fn tenant_memory(&self) -> Vec<(TenantId, f64)> {
        let mut out: Vec<(TenantId, f64)> = self.tenants.iter().map(|t| (t.id, 0.0)).collect();
        for (ci, c) in self.chains.iter().enumerate() {
            let bytes: f64 = c.specs.iter().map(|s| s.memory_bytes() as f64).sum();
            let mut users: Vec<TenantId> = self.dags.iter().filter(|d| d.steps.iter().any(|s| s.0 == ci)).map(|d| d.tenant).collect();
            users.sort_by_key(|t| t.index());
            users.dedup();
            for u in &users {
                if let Some(e) = out.iter_mut().find(|e| e.0 == *u) {
                    e.1 += bytes / users.len() as f64;
                }
            }
        }
        out
    }

    /// The MAT this plan runs: its rules, and the VNIs' allowed sources.
    pub fn mat(&self) -> Mat {
        let mut m = Mat::from_rules(self.rules.iter().copied());
        for (vni, ps) in &self.sources {
            m.set_sources(*vni, ps.clone());
        }
        m
    }
}

/// The DAG's NTs in a topological order (ties in `nodes` order), or `None` on a cycle.
pub fn topo_order(d: &DagSpec) -> Option<Vec<&str>> {
    let Some(edges) = &d.edges else { return Some(d.nodes.iter().map(String::as_str).collect()) };
    let idx = |n: &str| d.nodes.iter().position(|x| x == n);
    let mut indeg = vec![0usize; d.nodes.len()];
    for [_, b] in edges {
        indeg[idx(b)?] += 1;
    }
    let mut done = vec![false; d.nodes.len()];
    let mut out = Vec::with_capacity(d.nodes.len());
    while out.len() < d.nodes.len() {
        let next = (0..d.nodes.len()).find(|&i| !done[i] && indeg[i] == 0)?;
        done[next] = true;
        out.push(d.nodes[next].as_str());
        for [a, b] in edges {
            if *a == d.nodes[next] {
                indeg[idx(b)?] -= 1;
            }
        }
    }
    Some(out)
}

/// Every chain a DAG could be run with: each contiguous run of its NTs in topological order
/// (n·(n+1)/2 for n NTs), longest first. The paper pre-generates a bitstream for each such
/// combination at deploy time, because generating one is slow; here a candidate is only a
/// validated list of NTs, instantiated when the launcher picks it. `None` on a cycle.
pub fn chain_candidates(d: &DagSpec) -> Option<Vec<Vec<String>>> {
    let order = topo_order(d)?;
    let n = order.len();
    let mut out = Vec::with_capacity(n * (n + 1) / 2);
    for len in (1..=n).rev() {
        for start in 0..=n - len {
            out.push(order[start..start + len].iter().map(|s| s.to_string()).collect());
        }
    }
    Some(out)
}

/// Plans a valid state for a node with `regions` regions.
pub fn plan(state: &State, regions: usize) -> Result<Plan, Error> {
    let ids = state.ids();
    let mut p = Plan::default();
    for o in state.list(Kind::Tenant) {
        if let Spec::Tenant(t) = &o.spec {
            p.tenants.push(TenantPlan {
                name: o.name.clone(),
                id: TenantId(ids.tenants[&o.name]),
                weight: t.weight,
                store_buffers: t.quotas.store_buffers,
                vnis: t.vnis.clone(),
                fdb_macs: t.quotas.fdb_macs,
            });
        }
    }
    let tid = |name: &str| TenantId(ids.tenants[name]);
    // NT name -> (chain, position).
    let mut placed: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for o in state.list(Kind::Dag) {
        let Spec::Dag(d) = &o.spec else { continue };
        let order = topo_order(d).expect("validated acyclic");
        // Stages: one NT each in topological order, or — for a DAG that asks for NT-level
        // parallelism — the inferred stages, whose NTs run side by side.
        let stages: Vec<Vec<&str>> = if d.parallel {
            let access = |n: &str| match &state.get(Kind::Nt, n)?.spec {
                Spec::Nt(nt) => Some(nt.config.access()),
                _ => None,
            };
            let st = crate::parallel::stages(d, access).expect("validated acyclic, NTs exist");
            let name = |n: &String| *order.iter().find(|o| **o == n).expect("an NT of the DAG");
            // A stage wider than a join can take runs as several groups in turn.
            st.iter().flat_map(|s| s.chunks(MAX_BRANCHES)).map(|s| s.iter().map(name).collect()).collect()
        } else {
            order.iter().map(|n| vec![*n]).collect()
        };
        let mut run: Vec<&str> = Vec::new();
        let flush = |run: &mut Vec<&str>, p: &mut Plan, placed: &mut BTreeMap<String, (usize, usize)>| {
            if run.is_empty() {
                return;
            }
            let c = p.chains.len();
            let specs = run
                .iter()
                .map(|n| match &state.get(Kind::Nt, n).expect("validated").spec {
                    Spec::Nt(nt) => nt.config.clone(),
                    _ => unreachable!("validated NT"),
                })
                .collect();
            for (i, n) in run.iter().enumerate() {
                placed.insert(n.to_string(), (c, i));
            }
            p.chains.push(ChainPlan { nts: run.iter().map(|s| s.to_string()).collect(), specs, endpoint_fallback: true });
            run.clear();
        };
        for stage in &stages {
            if stage.len() > 1 {
                // Each branch of a parallel stage is a chain of its own.
                flush(&mut run, &mut p, &mut placed);
                for n in stage {
                    if !placed.contains_key(*n) {
                        run.push(n);
                        flush(&mut run, &mut p, &mut placed);
                    }
                }
                continue;
            }
            let n = stage[0];
            if placed.contains_key(n) {
                flush(&mut run, &mut p, &mut placed);
            } else {
                run.push(n);
            }
        }
        flush(&mut run, &mut p, &mut placed);
        let mut steps: Vec<(usize, NtMask, usize)> = Vec::new();
        let mut groups = Vec::new();
        for stage in &stages {
            if stage.len() > 1 {
                let start = steps.len();
                for n in stage {
                    let (c, pos) = placed[*n];
                    steps.push((c, NtMask(1 << pos), pos));
                }
                groups.push((start, steps.len()));
                continue;
            }
            let (c, pos) = placed[stage[0]];
            let mergeable = groups.last().is_none_or(|&(_, end)| end < steps.len());
            match steps.last_mut() {
                Some((lc, mask, last_pos)) if mergeable && *lc == c && pos > *last_pos => {
                    mask.0 |= 1 << pos;
                    *last_pos = pos;
                }
                _ => steps.push((c, NtMask(1 << pos), pos)),
            }
        }
        for &(c, _, _) in &steps {
            p.chains[c].endpoint_fallback &= d.endpoint_fallback;
        }
        p.dags.push(DagPlan {
            name: o.name.clone(),
            tenant: tid(&d.tenant),
            uid: DagUid(ids.dags[&o.name]),
            steps: steps.into_iter().map(|(c, m, _)| (c, m)).collect(),
            groups,
        });
    }
    if p.chains.len() > regions {
        return Err(Error {
            code: ErrorCode::Capacity,
            kind: "node".into(),
            name: "regions".into(),
            field: "regions".into(),
            reason: format!("the DAGs need {} chains but the node has {regions} regions", p.chains.len()),
        });
    }
    let owners = state.vni_owners();
    for o in state.list(Kind::Rule) {
        let Spec::Rule(r) = &o.spec else { continue };
        let owner = tid(owners.get(&r.vni).expect("validated VNI owner"));
        let action = match &r.action {
            RuleAction::Dag(d) => Action::Dag { tenant: owner, dag: DagUid(ids.dags[d]) },
            RuleAction::PassThrough => Action::PassThrough { tenant: owner },
            RuleAction::Drop => Action::Drop,
        };
        p.rules.push(Rule {
            vni: r.vni,
            proto: r.proto,
            dst: r.dst,
            dst_ports: r.dst_ports.unwrap_or(PortRange::ANY),
            priority: r.priority,
            action,
        });
    }
    for o in state.list(Kind::Route) {
        let Spec::Route(r) = &o.spec else { continue };
        let mac = |m: &Option<String>| m.as_deref().map(|s| s.parse::<MacAddr>().expect("validated MAC"));
        let entry = match (mac(&r.mac), r.default) {
            (Some(m), _) => RouteEntry::Mac(m),
            (None, true) => RouteEntry::Default,
            (None, false) => RouteEntry::Flood,
        };
        p.routes.push(RoutePlan { vni: r.vni, vtep: r.vtep, vtep_mac: mac(&r.vtep_mac).unwrap_or_default(), entry });
    }
    // Each tenant's trusted sources: declared endpoints, then its routes' VTEPs, for all its VNIs.
    for o in state.list(Kind::Tenant) {
        let Spec::Tenant(t) = &o.spec else { continue };
        let mut set: Vec<IpPrefix> = t.endpoints.clone();
        for r in &p.routes {
            let host = IpPrefix::new(r.vtep.ip(), if r.vtep.is_ipv4() { 32 } else { 128 }).expect("a full-length prefix");
            if t.vnis.contains(&r.vni) && !set.iter().any(|s| s.contains(&r.vtep.ip())) {
                set.push(host);
            }
        }
        if !set.is_empty() {
            for v in &t.vnis {
                p.sources.push((*v, set.clone()));
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {

    /// A tenant's NT memory follows its NTs' configuration; a tenant with none holds none.
    #[test]
    fn a_tenants_memory_is_what_its_nts_configuration_holds() {
        let y = r#"
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
metadata: {name: cache}
spec: {tenant: blue, config: {kind: kv_cache, backend: "10.0.0.2:11211", bytes: 8388608}}
---
apiVersion: snic/v1
kind: NT
metadata: {name: count}
spec: {tenant: green, config: {kind: counter}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: b}
spec: {tenant: blue, nodes: [cache]}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: g}
spec: {tenant: green, nodes: [count]}
"#;
        let state = crate::state::State::default().apply(crate::manifest::parse(y).unwrap()).unwrap();
        let p = super::plan(&state, 8).unwrap();
        let m = p.tenant_memory();
        let of = |name: &str| {
            let id = p.tenants.iter().find(|t| t.name == name).unwrap().id;
            m.iter().find(|(t, _)| *t == id).unwrap().1
        };
        assert!(of("blue") >= 8388608.0 * 4.0 / 3.0, "the ring and its index at least: {m:?}");
        assert_eq!(of("green"), 0.0);
    }

    #[test]
    fn chain_candidates_are_every_contiguous_run() {
        let d = DagSpec {
            tenant: "t".into(),
            nodes: vec!["a".into(), "b".into(), "c".into()],
            edges: None,
            endpoint_fallback: false,
            parallel: false,
        };
        let c = chain_candidates(&d).unwrap();
        let s: Vec<String> = c.iter().map(|x| x.join(">")).collect();
        assert_eq!(s, ["a>b>c", "a>b", "b>c", "a", "b", "c"]);
        let cyc = DagSpec { edges: Some(vec![["a".into(), "b".into()], ["b".into(), "a".into()]]), ..d };
        assert!(chain_candidates(&cyc).is_none());
    }
    use super::*;
    use crate::manifest::parse;

    fn state(extra: &str) -> State {
        let base = r#"
apiVersion: snic/v1
kind: Tenant
metadata: {name: a}
spec: {vnis: [1]}
---
apiVersion: snic/v1
kind: Tenant
metadata: {name: b}
spec: {vnis: [2]}
---
apiVersion: snic/v1
kind: NT
metadata: {name: nt1}
spec: {tenant: a, config: {kind: counter}}
---
apiVersion: snic/v1
kind: NT
metadata: {name: nt2}
spec: {tenant: a, shared_with: ['*'], config: {kind: dummy}}
---
apiVersion: snic/v1
kind: NT
metadata: {name: nt3}
spec: {tenant: b, config: {kind: counter}}
---
apiVersion: snic/v1
kind: NT
metadata: {name: nt4}
spec: {tenant: b, shared_with: [a], config: {kind: dummy}}
"#;
        State::default().apply(parse(&format!("{base}{extra}")).unwrap()).unwrap()
    }

    #[test]
    fn a_parallel_dag_gets_a_chain_per_branch_and_a_group() {
        // nt1 and nt2 unordered, both before nt3: with `parallel`, [nt1 | nt2] → nt3.
        let dag = |parallel: bool| {
            format!(
                "---\napiVersion: snic/v1\nkind: DAG\nmetadata: {{name: d}}\nspec: {{tenant: a, nodes: [nt1, nt2, nt3x], edges: [[nt1, nt3x], [nt2, nt3x]], parallel: {parallel}}}\n---\napiVersion: snic/v1\nkind: NT\nmetadata: {{name: nt3x}}\nspec: {{tenant: a, config: {{kind: counter}}}}\n"
            )
        };
        let p = plan(&state(&dag(true)), 8).unwrap();
        let names: Vec<Vec<String>> = p.chains.iter().map(|c| c.nts.clone()).collect();
        assert_eq!(names, [vec!["a/nt1"], vec!["a/nt2"], vec!["a/nt3x"]]);
        assert_eq!(p.dags[0].groups, [(0, 2)]);
        assert_eq!(p.dags[0].steps.len(), 3);
        let route = p.dags[0].route(|c| ChainId(c as u16));
        assert_eq!(route.fork_at(0), (2, 2));
        assert_eq!(route.fork_at(1), (0, 2));
        // Its compact candidate: the three chains as one, in route order.
        let p = plan(&state(&dag(true)), 8).unwrap();
        assert_eq!(p.compact_chains(&p.dags[0]), Some(vec![0, 1, 2]));
        // Without it: one chain, no group, nothing to compact.
        let p = plan(&state(&dag(false)), 8).unwrap();
        assert_eq!(p.chains.len(), 1);
        assert!(p.dags[0].groups.is_empty());
        assert_eq!(p.compact_chains(&p.dags[0]), None);
    }

    #[test]
    fn a_host_request_carries_the_dag_whole_and_a_bad_one_is_refused() {
        let dag = "---\napiVersion: snic/v1\nkind: DAG\nmetadata: {name: d}\nspec: {tenant: a, nodes: [nt1, nt2, nt3x], edges: [[nt1, nt3x], [nt2, nt3x]], parallel: true}\n---\napiVersion: snic/v1\nkind: NT\nmetadata: {name: nt3x}\nspec: {tenant: a, config: {kind: counter}}\n";
        let route = |name: &str, vni: u32, vtep: &str, flood: bool| {
            format!(
                "---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: {name}}}\nspec: {{vni: {vni}, vtep: '{vtep}', flood: {flood}}}\n"
            )
        };
        // Tenant a's flood list goes with its DAG; its unicast routes and b's flood list do not.
        let routes = [route("f1", 1, "10.0.0.1:4789", true), route("f2", 1, "10.0.0.2:4789", true), route("b1", 2, "10.0.0.3:4789", true)];
        let mac = "---\napiVersion: snic/v1\nkind: Route\nmetadata: {name: m1}\nspec: {vni: 1, vtep: '10.0.0.4:4789', mac: '02:00:00:00:00:01'}\n";
        let p = plan(&state(&format!("{dag}{}{mac}", routes.concat())), 8).unwrap();
        assert_eq!(p.host_request("nope"), None);
        let r = p.host_request("a/d").unwrap();
        assert_eq!((r.tenant.as_str(), r.dag.as_str(), r.chains.len(), r.groups.as_slice()), ("a", "a/d", 3, &[(0, 2)][..]));
        let vtep = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(r.floods, vec![(1, vec![vtep("10.0.0.1:4789"), vtep("10.0.0.2:4789")])]);
        // What a peer receives is what was sent, and builds the same route.
        let back: HostRequest = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        back.validate().unwrap();
        let route = |r: &HostRequest| r.route(|c| ChainId(c as u16)).unwrap();
        assert_eq!(route(&back), p.dags[0].route(|c| ChainId(c as u16)));
        let bad = |f: fn(&mut HostRequest)| {
            let mut b = r.clone();
            f(&mut b);
            b.validate()
        };
        assert!(bad(|b| b.steps[0].0 = 9).unwrap_err().contains("chain 9"));
        assert!(bad(|b| b.steps[0].1 = 0b10).unwrap_err().contains("mask"));
        assert!(bad(|b| b.groups = vec![(0, 9)]).is_err());
        assert!(bad(|b| b.entry = 9).is_err(), "an entry step past the end");
        assert!(bad(|b| b.chains[0].0.push("extra".into())).is_err());
        assert!(bad(|b| b.steps.clear()).is_err());
        assert!(bad(|b| b.floods = vec![(1, vec!["10.0.0.1:4789".parse().unwrap(); 4097])]).unwrap_err().contains("flood"));
    }

    #[test]
    fn paper_figure_7_chains_with_shared_nts() {
        // user1: NT1 -> NT2 -> NT4; user2: NT3 -> NT4 and NT2 (shared NT2 and NT4).
        let s = state(
            r#"
---
apiVersion: snic/v1
kind: DAG
metadata: {name: d1}
spec: {tenant: a, nodes: [nt1, nt2, b/nt4]}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: d2}
spec: {tenant: b, nodes: [nt3, nt4, a/nt2], edges: [[nt3, nt4], [a/nt2, nt4]]}
"#,
        );
        let p = plan(&s, 8).unwrap();
        let names: Vec<Vec<&str>> = p.chains.iter().map(|c| c.nts.iter().map(String::as_str).collect()).collect();
        assert_eq!(names, vec![vec!["a/nt1", "a/nt2", "b/nt4"], vec!["b/nt3"]]);
        let d1 = &p.dags[0];
        assert_eq!(d1.steps, vec![(0, NtMask(0b111))], "d1 runs its chain whole");
        // d2 in topological order: nt3, nt2, nt4 -> chain 1 (nt3), then chain 0 skipping nt1.
        let d2 = &p.dags[1];
        assert_eq!(d2.steps, vec![(1, NtMask(0b1)), (0, NtMask(0b110))]);
        // d2 visits two chains but shares one (and skips its nt1): no compact candidate.
        assert_eq!(p.compact_chains(d2), None);
        assert!(matches!(plan(&s, 1), Err(e) if e.code == ErrorCode::Capacity));
    }

    #[test]
    fn order_against_the_chain_visits_it_twice() {
        let s = state(
            r#"
---
apiVersion: snic/v1
kind: DAG
metadata: {name: d1}
spec: {tenant: a, nodes: [nt1, nt2]}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: d2}
spec: {tenant: a, nodes: [nt2, nt1]}
"#,
        );
        let p = plan(&s, 8).unwrap();
        assert_eq!(p.chains.len(), 1);
        assert_eq!(p.dags[1].steps, vec![(0, NtMask(0b10)), (0, NtMask(0b01))]);
    }
}
