//! Applying a control-plane [`Plan`] to a node: quotas, chains launched into regions, DAG routes,
//! the MAT and forwarding entries.

use anyhow::Context;
use snic_control::plan::{ChainPlan, Plan, RouteEntry, RoutePlan, TenantPlan};
use snic_core::ids::{ChainId, InstanceId};

use snic_dataplane::backend::Backend;
use snic_dataplane::node::LaunchError;
use snic_dataplane::store::Peer;
use snic_dataplane::Node;
use std::sync::Arc;

/// Gives each DAG that has a compact candidate ([`Plan::compact_chains`]) its compact form,
/// on a node with elastic NTs and rechaining on.
pub fn compact_forms<B: Backend>(node: &mut Node<B>, plan: &Plan) -> anyhow::Result<()> {
    let cfg = node.core().elastic().config();
    if cfg.regions == 0 || !cfg.rechain {
        return Ok(());
    }
    for d in &plan.dags {
        let Some(chains) = plan.compact_chains(d) else { continue };
        let specs = chains.iter().flat_map(|&c| plan.chains[c].specs.iter().cloned()).collect();
        let names: Vec<String> = chains.iter().flat_map(|&c| plan.chains[c].nts.iter().cloned()).collect();
        node.set_compact_form(d.uid, specs, &names).with_context(|| format!("DAG {}'s compact form", d.name))?;
    }
    Ok(())
}

/// A planned chain, deployed: the node's id for it and the instance (region) pre-launched —
/// `None` for a chain that found no free region on a node with elastic NTs (it is launched when
/// its packets arrive).
pub type Deployed = (ChainId, Option<InstanceId>);

/// Deploys `plan` on a node that runs nothing yet; returns each planned chain as deployed (in
/// the plan's order).
pub fn deploy<B: Backend>(node: &mut Node<B>, plan: &Plan) -> anyhow::Result<Vec<Deployed>> {
    for t in &plan.tenants {
        set_tenant(node, t);
    }
    let chains = plan.chains.iter().enumerate().map(|(i, c)| add_chain(node, i, c)).collect::<anyhow::Result<Vec<_>>>()?;
    for d in &plan.dags {
        node.set_dag(d.uid, d.route(|c| chains[c].0));
    }
    compact_forms(node, plan)?;
    node.mat_handle().store(Arc::new(plan.mat()));
    for r in &plan.routes {
        add_route(node, r)?;
    }
    Ok(chains)
}

/// Declares planned chain `i` on the node and launches it (into a free region, with elastic
/// NTs; when it has none, the chain launches when its packets arrive).
pub fn add_chain<B: Backend>(node: &mut Node<B>, i: usize, c: &ChainPlan) -> anyhow::Result<Deployed> {
    let id = node.add_chain(c.specs.clone());
    node.label_chain(id, &c.nts);
    node.set_endpoint_fallback(id, c.endpoint_fallback.into());
    match node.launch(id) {
        Ok(inst) => Ok((id, Some(inst))),
        Err(LaunchError::NoFreeRegion) => Ok((id, None)),
        Err(e) => {
            node.remove_chain(id);
            Err(anyhow::Error::new(e).context(format!("launching chain {i} ({})", c.nts.join(" → "))))
        }
    }
}

/// Registers a tenant (or changes it): weight, packet-store quota (the whole store without
/// one), its VNIs in the forwarding table (a packet leaves only on its own tenant's) and its
/// bound on learned MACs.
pub fn set_tenant<B: Backend>(node: &mut Node<B>, t: &TenantPlan) {
    node.set_tenant(t.id, t.weight as f64);
    let all = node.store_mut().capacity() as u32;
    node.store_mut().set_quota(t.id, t.store_buffers.unwrap_or(all));
    let fdb = node.fdb_mut();
    for &v in &t.vnis {
        fdb.set_owner(v, Some(t.id));
    }
    fdb.set_tenant_bound(t.id, t.fdb_macs);
}

/// Forgets a tenant: no weight, no limit, no quota of its own, no VNIs.
pub fn remove_tenant<B: Backend>(node: &mut Node<B>, t: &TenantPlan) {
    node.remove_tenant(t.id);
    let all = node.store_mut().capacity() as u32;
    node.store_mut().set_quota(t.id, all);
    disown_vnis(node, t, &[]);
}

/// Takes from tenant `t` in the forwarding table the VNIs it had and `now` does not list.
pub fn disown_vnis<B: Backend>(node: &mut Node<B>, t: &TenantPlan, now: &[u32]) {
    let fdb = node.fdb_mut();
    for &v in t.vnis.iter().filter(|v| !now.contains(v)) {
        if fdb.owner(v) == Some(t.id) {
            fdb.set_owner(v, None);
        }
    }
    if now.is_empty() {
        fdb.set_tenant_bound(t.id, None);
    }
}

/// Installs a forwarding entry.
pub fn add_route<B: Backend>(node: &mut Node<B>, r: &RoutePlan) -> anyhow::Result<()> {
    let peer = Peer { addr: r.vtep, mac: r.vtep_mac };
    let fdb = node.fdb_mut();
    let ok = match r.entry {
        RouteEntry::Mac(m) => fdb.add_static(r.vni, m, peer),
        RouteEntry::Default => fdb.set_default(r.vni, Some(peer)),
        RouteEntry::Flood => fdb.add_flood(r.vni, peer),
    };
    ok.context("the forwarding table's peer table is full")
}

/// Removes a forwarding entry (MACs learned meanwhile stay until relearned or the node is
/// rebuilt).
pub fn remove_route<B: Backend>(node: &mut Node<B>, r: &RoutePlan) {
    let fdb = node.fdb_mut();
    match r.entry {
        RouteEntry::Mac(m) => fdb.remove_static(r.vni, m),
        RouteEntry::Default => {
            fdb.set_default(r.vni, None);
        }
        RouteEntry::Flood => fdb.remove_flood(r.vni, Peer { addr: r.vtep, mac: r.vtep_mac }),
    }
}
