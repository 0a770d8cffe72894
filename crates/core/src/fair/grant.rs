//! The allocation half of an epoch: weighted DRF over the tenants' smoothed demand, and for each
//! tenant the share of its offered packets that its allocation pays for ("admit"). A node with
//! one dispatcher allocates on its own resources ([`Grants`]); a node with several hands every
//! thread's demand to one [`super::board::Board`], which allocates once for the whole node.

use super::Resource;
use crate::drf::{Allocation, Drf, TenantDemand};
use crate::ids::TenantId;

/// A tenant's smoothed demand, as the allocation reads it (in the order of the resources).
#[derive(Debug, Clone, PartialEq)]
pub struct Wants {
    /// The tenant.
    pub tenant: TenantId,
    /// Its DRF weight.
    pub weight: f64,
    /// Demand per resource, fixed part included.
    pub demand: Vec<f64>,
    /// The fixed part (what comes with every offered packet, admitted or not).
    pub fixed: Vec<f64>,
}

impl Default for Wants {
    fn default() -> Self {
        Wants { tenant: TenantId(0), weight: 1.0, demand: Vec::new(), fixed: Vec::new() }
    }
}

/// What the allocation grants a tenant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Grant {
    /// Granted amount per resource.
    pub amounts: Vec<f64>,
    /// The dominant resource, if the tenant has demand.
    pub dominant: Option<usize>,
    /// The granted share of it.
    pub dominant_share: f64,
    /// The fraction of its demand granted (1: met).
    pub fraction: f64,
    /// The share of its offered packets whose variable use fits the allocation once the fixed
    /// use is paid, on every resource that binds: its ingress limit is this share of its rate.
    pub admit: f64,
}

/// Who allocates at an epoch's end: `out[i]` is `wants[i]`'s grant, on `resources`.
pub trait Allocate: Send {
    /// Allocates `resources` among `wants` into `out` (resized to `wants`).
    fn allocate(&mut self, resources: &[Resource], wants: &[Wants], out: &mut Vec<Grant>);
}

/// DRF and admission on one set of capacities, with its scratch memory.
#[derive(Debug, Default)]
pub struct Grants {
    drf: Drf,
    demands: Vec<TenantDemand>,
    allocs: Vec<Allocation>,
    capacities: Vec<f64>,
    binding: Vec<bool>,
    users: Vec<Use>,
}

/// How the tenants use one resource, after DRF.
#[derive(Debug, Clone, Copy, Default)]
struct Use {
    users: usize,
    fixed: f64,
    allocated: f64,
    any_satisfied: bool,
}

/// Whether a resource may limit admission. Only a resource DRF has filled can: on one with room
/// left, a tenant's allocation is a side effect of its bottleneck elsewhere, and holding it to
/// it would only idle the node. Limits exist to protect other tenants, so a resource only one
/// tenant uses limits nobody either (a lone tenant over capacity is served as fast as the node
/// can). And when receiving alone (the fixed parts) fills a resource, throttling cannot relieve
/// it — over-limit packets are received all the same — so it is worth doing only to protect a
/// tenant that is within its share; between tenants all over theirs it would idle the node too.
fn binds(u: &Use, capacity: f64) -> bool {
    let full = u.allocated >= capacity * (1.0 - 1e-6);
    full && u.users >= 2 && (u.fixed < capacity || u.any_satisfied)
}

impl Grants {
    /// Allocates `capacities` among `wants` into `out` (see [`Allocate`]).
    pub fn grant(&mut self, capacities: &[f64], wants: &[Wants], out: &mut Vec<Grant>) {
        let r = capacities.len();
        self.demands.resize_with(wants.len(), || TenantDemand { weight: 1.0, demand: Vec::new() });
        for (d, w) in self.demands.iter_mut().zip(wants) {
            d.weight = w.weight;
            d.demand.clear();
            d.demand.extend_from_slice(&w.demand);
        }
        self.drf.allocate(capacities, &self.demands[..wants.len()], &mut self.allocs);
        // Which resources may limit admission (see `binds`).
        // Per resource: tenants using it, their fixed use, whether one of them is satisfied
        // (one pass over the tenants, resources innermost).
        self.users.clear();
        self.users.resize(r, Use::default());
        for (w, al) in wants.iter().zip(&self.allocs) {
            let sat = al.fraction >= 1.0 - 1e-6;
            for (((u, &d), &f), &a) in self.users.iter_mut().zip(&w.demand).zip(&w.fixed).zip(&al.amounts) {
                if d > 0.0 {
                    u.users += 1;
                    u.fixed += f;
                    u.allocated += a;
                    u.any_satisfied |= sat;
                }
            }
        }
        self.binding.clear();
        self.binding.extend(self.users.iter().zip(capacities).map(|(u, &c)| binds(u, c)));
        out.resize_with(wants.len(), Grant::default);
        for ((w, al), g) in wants.iter().zip(&self.allocs).zip(out.iter_mut()) {
            g.amounts.clear();
            g.amounts.extend_from_slice(&al.amounts);
            g.dominant = al.dominant;
            g.dominant_share = al.dominant_share;
            // DRF's arithmetic can land a hair under 1 for a tenant whose demand is met.
            g.fraction = if al.dominant.is_none() || al.fraction >= 1.0 - 1e-9 { 1.0 } else { al.fraction };
            // The share of offered packets whose variable use fits what is left of the
            // allocation once the fixed use is paid, on every resource.
            g.admit = if g.fraction >= 1.0 - 1e-6 {
                1.0
            } else {
                w.demand
                    .iter()
                    .zip(&w.fixed)
                    .zip(&g.amounts)
                    .zip(&self.binding)
                    .filter(|(((d, f), _), b)| **b && *d - *f > 1e-12)
                    .map(|(((d, f), al), _)| ((al - f) / (d - f)).clamp(0.0, 1.0))
                    .fold(1.0, f64::min)
            };
        }
    }
}

impl Allocate for Grants {
    fn allocate(&mut self, resources: &[Resource], wants: &[Wants], out: &mut Vec<Grant>) {
        let mut caps = std::mem::take(&mut self.capacities);
        caps.clear();
        caps.extend(resources.iter().map(|r| r.capacity));
        self.grant(&caps, wants, out);
        self.capacities = caps;
    }
}
