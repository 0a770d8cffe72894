//! DRF against the reference, and DRF's properties.

use super::*;
use proptest::prelude::*;

fn run(cap: &[f64], t: &[TenantDemand]) -> Vec<Allocation> {
    let mut out = Vec::new();
    Drf::new().allocate(cap, t, &mut out);
    out
}

fn td(w: f64, d: &[f64]) -> TenantDemand {
    TenantDemand { weight: w, demand: d.to_vec() }
}

#[test]
fn ghodsi_example() {
    // NSDI'11 §4: 9 CPUs, 18 GB; A wants <1 CPU, 4 GB> per task, B <3 CPU, 1 GB>. With demand
    // "unbounded" (many tasks), DRF gives A 3 tasks and B 2 tasks: A <3, 12>, B <6, 2>.
    let a = run(&[9.0, 18.0], &[td(1.0, &[100.0, 400.0]), td(1.0, &[300.0, 100.0])]);
    assert!((a[0].amounts[0] - 3.0).abs() < 1e-9 && (a[0].amounts[1] - 12.0).abs() < 1e-9, "{a:?}");
    assert!((a[1].amounts[0] - 6.0).abs() < 1e-9 && (a[1].amounts[1] - 2.0).abs() < 1e-9, "{a:?}");
    assert!((a[0].dominant_share - 2.0 / 3.0).abs() < 1e-9 && (a[1].dominant_share - 2.0 / 3.0).abs() < 1e-9);
}

#[test]
fn weights_and_work_conservation() {
    // One resource of 10; tenant 0 (weight 2) and 1 (weight 1) want 20 each: 20/3 and 10/3.
    let a = run(&[10.0], &[td(2.0, &[20.0]), td(1.0, &[20.0])]);
    assert!((a[0].amounts[0] - 20.0 / 3.0).abs() < 1e-9 && (a[1].amounts[0] - 10.0 / 3.0).abs() < 1e-9, "{a:?}");
    // A tenant that wants little leaves the rest to the other.
    let a = run(&[10.0], &[td(1.0, &[2.0]), td(1.0, &[20.0])]);
    assert!((a[0].amounts[0] - 2.0).abs() < 1e-9 && (a[1].amounts[0] - 8.0).abs() < 1e-9, "{a:?}");
    // No demand, no allocation; zero capacity blocks only who needs it.
    let a = run(&[10.0, 0.0], &[td(1.0, &[0.0, 0.0]), td(1.0, &[5.0, 1.0]), td(1.0, &[5.0, 0.0])]);
    assert_eq!(a[0].fraction, 0.0);
    assert_eq!(a[1].fraction, 0.0);
    assert!((a[2].amounts[0] - 5.0).abs() < 1e-9);
}

fn case() -> impl Strategy<Value = (Vec<f64>, Vec<TenantDemand>)> {
    (1usize..5, 1usize..7).prop_flat_map(|(r, n)| {
        (
            proptest::collection::vec(1.0f64..100.0, r),
            proptest::collection::vec(
                (
                    prop_oneof![Just(1.0f64), Just(2.0), 0.5f64..4.0],
                    proptest::collection::vec(prop_oneof![1 => Just(0.0f64), 4 => 0.0f64..80.0], r),
                )
                    .prop_map(|(w, d)| TenantDemand { weight: w, demand: d }),
                n,
            ),
        )
    })
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1e-9)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Equal to the bisection reference within 1e-6 relative.
    #[test]
    fn matches_reference((cap, t) in case()) {
        let a = run(&cap, &t);
        let f = reference(&cap, &t);
        for i in 0..t.len() {
            prop_assert!(close(a[i].fraction, f[i]) || (a[i].fraction - f[i]).abs() < 1e-9, "tenant {}: {} vs {}", i, a[i].fraction, f[i]);
        }
    }

    /// A demand reported in the unit of its resources (scaled down to its dominant resource's
    /// capacity) is allocated exactly what the demand itself is.
    #[test]
    fn a_demand_within_capacity_is_allocated_the_same((cap, t) in case(), over in 1.0f64..20.0) {
        // Some tenants offering far more than the node has.
        let big: Vec<TenantDemand> = t.iter().enumerate().map(|(i, x)| {
            let f = if i % 2 == 0 { over } else { 1.0 };
            td(x.weight, &x.demand.iter().map(|q| q * f).collect::<Vec<_>>())
        }).collect();
        let within: Vec<TenantDemand> = big.iter().map(|x| td(x.weight, &within_capacity(&x.demand, &cap))).collect();
        for x in &within {
            for (k, c) in cap.iter().enumerate() {
                prop_assert!(*c <= 0.0 || x.demand[k] <= c * (1.0 + 1e-12), "resource {} over capacity", k);
            }
        }
        let (a, b) = (run(&cap, &big), run(&cap, &within));
        for i in 0..t.len() {
            for (k, c) in cap.iter().enumerate() {
                let (x, y) = (a[i].amounts[k], b[i].amounts[k]);
                prop_assert!((x - y).abs() <= 1e-6 * c.abs().max(1e-9), "tenant {} resource {}: {} vs {}", i, k, x, y);
            }
        }
    }

    /// Feasible, and Pareto efficient: a tenant short of its demand uses a saturated resource.
    #[test]
    fn feasible_and_pareto((cap, t) in case()) {
        let a = run(&cap, &t);
        for (k, c) in cap.iter().enumerate() {
            let used: f64 = a.iter().map(|x| x.amounts[k]).sum();
            prop_assert!(used <= c * (1.0 + 1e-9), "resource {} over capacity", k);
        }
        for (i, x) in a.iter().enumerate() {
            if x.fraction < 1.0 - 1e-9 && t[i].demand.iter().any(|q| *q > 0.0) {
                let blocked = (0..cap.len()).any(|k| t[i].demand[k] > 0.0 && a.iter().map(|y| y.amounts[k]).sum::<f64>() >= cap[k] * (1.0 - 1e-6));
                prop_assert!(blocked, "tenant {} could grow", i);
            }
        }
    }

    /// Sharing incentive: each tenant gets at least what a static weighted split of every resource
    /// would give it.
    #[test]
    fn sharing_incentive((cap, t) in case()) {
        let a = run(&cap, &t);
        let w: f64 = t.iter().map(|x| x.weight).sum();
        for (i, x) in a.iter().enumerate() {
            if t[i].demand.iter().all(|q| *q == 0.0) {
                continue; // a fraction of nothing
            }
            let static_f = t[i].demand.iter().zip(&cap).filter(|(q, _)| **q > 0.0).map(|(q, c)| (t[i].weight / w) * c / q).fold(1.0, f64::min);
            prop_assert!(x.fraction >= static_f - 1e-6, "tenant {}: {} < {}", i, x.fraction, static_f);
        }
    }

    /// Envy-free (weighted): no tenant could meet more of its demand with another's allocation
    /// scaled by their weights.
    #[test]
    fn envy_free((cap, t) in case()) {
        let a = run(&cap, &t);
        for i in 0..t.len() {
            for j in 0..t.len() {
                if i == j { continue; }
                let g = t[i].demand.iter().enumerate().filter(|(_, q)| **q > 0.0).map(|(k, q)| t[i].weight / t[j].weight * a[j].amounts[k] / q).fold(f64::INFINITY, f64::min);
                if g.is_finite() {
                    prop_assert!(a[i].fraction >= g.min(1.0) - 1e-6, "tenant {} envies {}: {} < {}", i, j, a[i].fraction, g);
                }
            }
        }
    }

    /// Strategy-proof: inflating some of one's demand gets no more of what one really uses.
    #[test]
    fn inflating_demand_does_not_pay((cap, t) in case(), who in any::<prop::sample::Index>(), k in any::<prop::sample::Index>(), by in 1.0f64..5.0) {
        let i = who.index(t.len());
        let truthful = run(&cap, &t)[i].fraction;
        let mut lie = t.clone();
        let k = k.index(cap.len());
        lie[i].demand[k] = lie[i].demand[k] * by + 1.0;
        let got = run(&cap, &lie);
        // What the liar can use of its true demand: the smallest ratio of grant to true need.
        let useful = t[i].demand.iter().enumerate().filter(|(_, q)| **q > 0.0).map(|(r, q)| got[i].amounts[r] / q).fold(f64::INFINITY, f64::min);
        if useful.is_finite() {
            prop_assert!(useful.min(1.0) <= truthful + 1e-6, "lying paid: {} > {}", useful, truthful);
        }
    }
}
