//! Weighted Dominant Resource Fairness on measured demand (paper §4.4; Ghodsi et al., NSDI'11).
//!
//! Every epoch the node measures, per tenant, the demand for every resource — each NT's
//! throughput, ingress and egress bandwidth, packet-store space, memory — including load that
//! waited for credits. [`Drf::allocate`] turns demands, capacities and weights into allocations:
//! each tenant receives a fraction `f` of its demand vector (resources in the proportions it
//! asked for), and the fractions are set by progressive filling: every tenant not yet frozen
//! raises its *weighted dominant share* (`f · D / w`, with `D` its largest demand-to-capacity
//! ratio) at the same pace; a tenant freezes when its demand is met or when a resource it uses
//! runs out. What a frozen tenant leaves unused keeps flowing to the others (work conserving).
//!
//! The implementation jumps from event to event (a resource saturates, a demand is met) instead
//! of stepping: at most `tenants + resources` events, each O(tenants + resources), with scratch
//! memory kept between calls. [`reference()`] is the slow, obviously correct statement the tests
//! hold it to.

/// One tenant's input.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantDemand {
    /// Weight (> 0); a tenant of weight 2 gets twice the dominant share of one of weight 1.
    pub weight: f64,
    /// Demand per resource, in the resource's units (same length as the capacities).
    pub demand: Vec<f64>,
}

/// One tenant's result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Allocation {
    /// Fraction of the demand granted, 0..=1.
    pub fraction: f64,
    /// Granted amount per resource (`fraction · demand`).
    pub amounts: Vec<f64>,
    /// Index of the dominant resource (largest demand relative to capacity), if any demand.
    pub dominant: Option<usize>,
    /// Dominant share granted: `amounts[dominant] / capacity[dominant]`.
    pub dominant_share: f64,
}

/// `demand` in the unit of each resource: the vector scaled down, whole, until no part of it
/// exceeds its resource's capacity (a tenant offering ten times a core wants the core, not ten
/// cores). [`Drf::allocate`] gives such a demand the same amounts as the demand itself: a
/// tenant's allocation is a fraction of its demand vector and never exceeds the capacity of its
/// dominant resource.
pub fn within_capacity(demand: &[f64], capacity: &[f64]) -> Vec<f64> {
    let over = demand.iter().zip(capacity).filter(|&(_, &c)| c > 0.0).map(|(&d, &c)| d / c).fold(1.0, f64::max);
    demand.iter().map(|d| d / over).collect()
}

/// The allocator, with its scratch memory.
#[derive(Debug, Default, Clone)]
pub struct Drf {
    rate: Vec<f64>,
    used: Vec<f64>,
    frozen: Vec<bool>,
    level_rate: Vec<f64>,
    dom: Vec<f64>,
}

const EPS: f64 = 1e-12;

impl Drf {
    /// A new allocator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Computes allocations into `out` (resized to the tenants). Capacities ≤ 0 are treated as
    /// exhausted; a demand on them can only be met as zero.
    pub fn allocate(&mut self, capacity: &[f64], tenants: &[TenantDemand], out: &mut Vec<Allocation>) {
        let (n, r) = (tenants.len(), capacity.len());
        out.resize_with(n, Allocation::default);
        self.rate.clear();
        self.rate.resize(r, 0.0);
        self.used.clear();
        self.used.resize(r, 0.0);
        self.frozen.clear();
        self.frozen.resize(n, false);
        self.level_rate.clear();
        self.dom.clear();
        // Per tenant: D (dominant demand share) and how fast f grows with the level t:
        // share_i(t) = w_i t, so f_i(t) = w_i t / D_i.
        for (i, t) in tenants.iter().enumerate() {
            let mut d = 0.0f64;
            let mut dom = None;
            for (k, (&q, &c)) in t.demand.iter().zip(capacity).enumerate() {
                if q > 0.0 {
                    let s = if c > 0.0 { q / c } else { f64::INFINITY };
                    if s > d {
                        d = s;
                        dom = Some(k);
                    }
                }
            }
            let a = &mut out[i];
            a.amounts.clear();
            a.amounts.resize(r, 0.0);
            a.fraction = 0.0;
            a.dominant = dom;
            a.dominant_share = 0.0;
            self.dom.push(d);
            if d <= 0.0 || !d.is_finite() || t.weight <= 0.0 {
                self.frozen[i] = true;
                self.level_rate.push(0.0);
                continue;
            }
            let g = t.weight / d; // df/dt
            self.level_rate.push(g);
            for (k, &q) in t.demand.iter().enumerate() {
                self.rate[k] += g * q;
            }
        }
        let mut t = 0.0f64;
        loop {
            // Next event: a resource runs out, or an active tenant's demand is met.
            let mut dt = f64::INFINITY;
            for ((&rate, &used), &cap) in self.rate.iter().zip(&self.used).zip(capacity) {
                if rate > EPS {
                    dt = dt.min((cap - used).max(0.0) / rate);
                }
            }
            for i in 0..n {
                if !self.frozen[i] {
                    dt = dt.min((1.0 - self.level_rate[i] * t) / self.level_rate[i]);
                }
            }
            if !dt.is_finite() {
                break;
            }
            let dt = dt.max(0.0);
            t += dt;
            for k in 0..r {
                self.used[k] += self.rate[k] * dt;
            }
            // Freeze tenants whose demand is met or who use a resource that ran out.
            let mut any = false;
            for i in 0..n {
                if self.frozen[i] {
                    continue;
                }
                let f = self.level_rate[i] * t;
                let sat = f >= 1.0 - 1e-12
                    || tenants[i].demand.iter().enumerate().any(|(k, &q)| q > 0.0 && self.used[k] >= capacity[k] * (1.0 - 1e-12) - EPS);
                if sat {
                    self.frozen[i] = true;
                    any = true;
                    let f = f.min(1.0);
                    out[i].fraction = f;
                    for (k, &q) in tenants[i].demand.iter().enumerate() {
                        self.rate[k] -= self.level_rate[i] * q;
                    }
                }
            }
            if !any {
                break;
            }
        }
        // A tenant can still be active here only at a numerical edge (the last event froze
        // nobody): it keeps the level reached.
        for ((a, &frozen), &g) in out.iter_mut().zip(&self.frozen).zip(&self.level_rate) {
            if !frozen {
                a.fraction = (g * t).min(1.0);
            }
        }
        for (i, ten) in tenants.iter().enumerate() {
            let a = &mut out[i];
            for (k, &q) in ten.demand.iter().enumerate() {
                a.amounts[k] = a.fraction * q;
            }
            a.dominant_share = a.fraction * self.dom[i].min(f64::MAX);
            if !a.dominant_share.is_finite() {
                a.dominant_share = 0.0;
            }
        }
    }
}

/// The slow, obviously correct statement of [`Drf::allocate`]: raise every unfrozen tenant's
/// weighted dominant share together by the largest step that keeps every capacity and every
/// demand respected (found by bisection), freeze who is met or blocked, repeat.
pub fn reference(capacity: &[f64], tenants: &[TenantDemand]) -> Vec<f64> {
    let n = tenants.len();
    let dom: Vec<f64> = tenants
        .iter()
        .map(|t| {
            t.demand
                .iter()
                .zip(capacity)
                .filter(|(q, _)| **q > 0.0)
                .map(|(q, c)| if *c > 0.0 { q / c } else { f64::INFINITY })
                .fold(0.0, f64::max)
        })
        .collect();
    let mut f = vec![0.0f64; n];
    let mut frozen: Vec<bool> = (0..n).map(|i| dom[i] <= 0.0 || !dom[i].is_finite() || tenants[i].weight <= 0.0).collect();
    let used = |f: &[f64], k: usize| -> f64 { tenants.iter().zip(f).map(|(t, fi)| fi * t.demand[k]).sum() };
    for _ in 0..=n {
        if frozen.iter().all(|x| *x) {
            break;
        }
        let step = |s: f64, f: &[f64]| -> Vec<f64> {
            (0..n).map(|i| if frozen[i] { f[i] } else { f[i] + s * tenants[i].weight / dom[i] }).collect()
        };
        let feasible = |g: &[f64]| {
            g.iter().all(|x| *x <= 1.0 + 1e-13) && (0..capacity.len()).all(|k| used(g, k) <= capacity[k] * (1.0 + 1e-13) + 1e-13)
        };
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        while feasible(&step(hi, &f)) && hi < 1e18 {
            hi *= 2.0;
        }
        for _ in 0..200 {
            let mid = (lo + hi) / 2.0;
            if feasible(&step(mid, &f)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        f = step(lo, &f);
        for i in 0..n {
            if frozen[i] {
                continue;
            }
            let met = f[i] >= 1.0 - 1e-9;
            let blocked = (0..capacity.len()).any(|k| tenants[i].demand[k] > 0.0 && used(&f, k) >= capacity[k] * (1.0 - 1e-9));
            if met || blocked {
                frozen[i] = true;
                f[i] = f[i].min(1.0);
            }
        }
    }
    f
}

#[cfg(test)]
mod tests;
