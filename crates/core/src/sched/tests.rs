//! Scheduler tests, including a property test against a slow reference model.

use super::*;
use crate::dag::Step;
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};

fn one_chain(credits: &[u32]) -> (Scheduler<(u16, u64, u32)>, Vec<InstanceId>) {
    let mut s = Scheduler::new(SchedConfig { max_queue_per_tenant: 8, ..SchedConfig::plain() });
    let c = s.add_chain(3);
    let ids = credits.iter().map(|&k| s.add_instance(c, k).unwrap()).collect();
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask(0b101) }]));
    (s, ids)
}

#[test]
fn waits_for_credit_then_dispatches() {
    let (mut s, ids) = one_chain(&[1]);
    let t = TenantId(0);
    let a = s.handle_packet(Instant::ZERO, t, DagUid(1), 0, 0, (0, 0, 0)).unwrap();
    assert_eq!(a.mask, NtMask(0b101));
    assert!(a.last);
    s.handle_packet(Instant::ZERO, t, DagUid(1), 0, 0, (0, 0, 1)).unwrap();
    let mut out = Vec::new();
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(ids[0]));
    assert_eq!(out.len(), 1);
    assert_eq!(s.poll_dispatch(&mut out, 32), None, "no credit left");
    s.handle_completion(ids[0], 1);
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(ids[0]));
    assert_eq!(out, vec![(0, 0, 1)]);
}

#[test]
fn panic_mode_visits_the_steps_nts_one_at_a_time_in_order() {
    // The step runs NTs 0 and 2 of a 3-NT chain.
    let (s, _) = one_chain(&[1]);
    let first = s.step_mask(DagUid(1), 0).unwrap().first();
    assert_eq!(first, NtMask(0b001));
    let second = s.panic_next(DagUid(1), 0, first).unwrap();
    assert_eq!(second, NtMask(0b100), "NT 1 is skipped: the DAG does not use it");
    assert_eq!(s.panic_next(DagUid(1), 0, second), None, "the step is done");
    assert_eq!(s.panic_next(DagUid(9), 0, first), None, "unknown DAG");
    assert_eq!(NtMask(0b1011).after(NtMask(0)), NtMask(0), "nothing ran: nothing is after it");
}

#[test]
fn errors_leave_state_unchanged() {
    let (mut s, ids) = one_chain(&[4]);
    assert_eq!(s.handle_packet(Instant::ZERO, TenantId(0), DagUid(9), 0, 0, (0, 0, 0)), Err(Reject::UnknownDag));
    assert_eq!(s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 1, 0, (0, 0, 0)), Err(Reject::BadPosition));
    assert_eq!(s.queued(ids[0]), 0);
    for i in 0..8 {
        s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 0, 0, (0, 0, i)).unwrap();
    }
    assert_eq!(s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 0, 0, (0, 0, 8)), Err(Reject::QueueFull));
    assert_eq!(s.queued(ids[0]), 8);
    // Another tenant still gets in: the full queue is per tenant.
    assert!(s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, (1, 0, 0)).is_ok());
}

#[test]
fn tenants_served_round_robin() {
    let (mut s, ids) = one_chain(&[4]);
    for i in 0..4 {
        s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 0, 0, (0, 0, i)).unwrap();
    }
    s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, (1, 0, 0)).unwrap();
    let mut out = Vec::new();
    s.poll_dispatch(&mut out, 32);
    assert!(out.contains(&(1, 0, 0)), "tenant 1 is not starved by tenant 0's backlog: {out:?}");
    let _ = ids;
}

/// A shared instance that is the bottleneck serves backlogged tenants in proportion to their
/// weights, whatever the batch size (a turn may span dispatches).
#[test]
fn a_shared_instance_serves_backlogged_tenants_by_weight() {
    let mut s = Scheduler::new(SchedConfig { max_queue_per_tenant: 1000, ..SchedConfig::plain() });
    let c = s.add_chain(1);
    let id = s.add_instance(c, 5).unwrap();
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask(0b1) }]));
    s.set_weight(TenantId(1), 1);
    s.set_weight(TenantId(2), 3);
    for i in 0..1000 {
        for t in [1, 2] {
            s.handle_packet(Instant::ZERO, TenantId(t), DagUid(1), 0, 0, (t, 0, i)).unwrap();
        }
    }
    let (mut out, mut served) = (Vec::new(), [0usize; 3]);
    for _ in 0..80 {
        assert_eq!(s.poll_dispatch(&mut out, 32), Some(id));
        out.iter().for_each(|it| served[it.0 as usize] += 1);
        s.handle_completion(id, out.len() as u32);
    }
    assert_eq!(served[1] + served[2], 400);
    assert_eq!((served[1], served[2]), (100, 300), "weights 1:3");
    // Weight 1 for both: one each a turn.
    s.set_weight(TenantId(2), 1);
    let mut n = [0usize; 3];
    for _ in 0..40 {
        s.poll_dispatch(&mut out, 32);
        out.iter().for_each(|it| n[it.0 as usize] += 1);
        s.handle_completion(id, out.len() as u32);
    }
    assert!(n[1].abs_diff(n[2]) <= 3, "{n:?}");
}

/// Tenants of weights 1 and 3 flood a shared instance whose queues are bounded in time (5 ms
/// of 20 µs packets): each tenant's queue holds what it is served in 5 ms (the weight-1
/// tenant a quarter of the instance, 62 packets; the weight-3 tenant 187), so after a stall
/// that filled both, both drain in the same time and the split stays 1:3 to the end. Bounded
/// alike (250 each), the heavier drained first and the lighter then had the instance alone.
#[test]
fn queues_at_a_shared_instance_hold_each_tenant_the_same_time() {
    let mut s = Scheduler::new(SchedConfig { max_queue_per_tenant: 4096, max_queue_ns: 5e6, ..SchedConfig::plain() });
    let c = s.add_chain(1);
    let id = s.add_instance(c, 1000).unwrap();
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask(0b1) }]));
    s.set_cost(id, 20_000.0);
    s.set_weight(TenantId(1), 1);
    s.set_weight(TenantId(2), 3);
    let mut queued = [0usize; 3];
    for i in 0..1000 {
        for t in [1u16, 2] {
            queued[t as usize] += s.handle_packet(Instant::ZERO, TenantId(t), DagUid(1), 0, 0, (t, 0, i)).is_ok() as usize;
        }
    }
    assert_eq!((queued[1], queued[2]), (62, 187), "5 ms each at a quarter and three quarters of 50 kpps");
    // Served by weight until both are empty: the light tenant never has the instance alone
    // for more than a turn.
    let (mut out, mut served, mut alone) = (Vec::new(), [0usize; 3], 0);
    while s.poll_dispatch(&mut out, 4).is_some() {
        out.iter().for_each(|it| served[it.0 as usize] += 1);
        if served[2] == queued[2] && served[1] < queued[1] {
            alone += out.len();
        }
        s.handle_completion(id, out.len() as u32);
    }
    assert_eq!(served, [0, 62, 187]);
    assert!(alone <= 2, "the weight-1 tenant had the instance alone for {alone} packets");
}

/// Draining visits the DAGs that had arrivals, each once, across routes replaced or removed.
#[test]
fn arrivals_are_drained_once_per_dag_that_had_them() {
    let (mut s, _) = one_chain(&[64]);
    let c = ChainId(0);
    s.set_dag(DagUid(2), DagRoute::new(vec![Step { chain: c, mask: NtMask(0b1) }]));
    let drain = |s: &mut Scheduler<(u16, u64, u32)>| {
        let mut v = Vec::new();
        s.drain_arrivals(|t, _, counts| v.push((t, counts.to_vec())));
        v
    };
    for i in 0..3 {
        s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, (1, 0, i)).unwrap();
    }
    assert_eq!(drain(&mut s), vec![(TenantId(1), vec![3])]);
    assert_eq!(drain(&mut s), vec![], "nothing arrived since");
    // Arrivals, then the route is replaced: counts start over, arrivals after it are reported.
    s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, (1, 0, 9)).unwrap();
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask(0b1) }]));
    s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, (1, 0, 10)).unwrap();
    s.handle_packet(Instant::ZERO, TenantId(2), DagUid(2), 0, 0, (2, 0, 0)).unwrap();
    assert_eq!(drain(&mut s), vec![(TenantId(1), vec![1]), (TenantId(2), vec![1])]);
    // Removed after arrivals: nothing to report.
    s.handle_packet(Instant::ZERO, TenantId(2), DagUid(2), 0, 0, (2, 0, 1)).unwrap();
    s.remove_dag(DagUid(2));
    assert_eq!(drain(&mut s), vec![]);
}

#[test]
fn no_instance_rejected() {
    let mut s: Scheduler<u32> = Scheduler::new(SchedConfig::plain());
    let c = s.add_chain(1);
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
    assert_eq!(s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 0, 0, 1), Err(Reject::NoInstance));
}

/// Operations of the property test. A flow belongs to one tenant (its VNI is part of the match),
/// so flow identifiers are drawn per tenant.
#[derive(Debug, Clone)]
enum Op {
    Arrive { tenant: u16, flow: u64 },
    Dispatch { max: usize },
    Complete { inst: usize, n: u32 },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u16..3, 0u64..6).prop_map(|(tenant, flow)| Op::Arrive { tenant, flow: (((tenant as u64) << 8) | flow).wrapping_mul(0x9e37_79b9_7f4a_7c15) }),
        2 => (1usize..6).prop_map(|max| Op::Dispatch { max }),
        2 => (0usize..3, 1u32..4).prop_map(|(inst, n)| Op::Complete { inst, n }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Against a reference model: credits are never exceeded; a flow always lands on the same
    /// instance and leaves in arrival order; per-tenant bounds hold; and the scheduler is
    /// work-conserving — when it says nothing can be dispatched, no instance has both a credit
    /// and a waiting item; finally everything accepted is dispatched exactly once.
    #[test]
    fn matches_reference_model(credits in proptest::collection::vec(1u32..4, 1..4), ops in proptest::collection::vec(op_strategy(), 1..200)) {
        let (mut s, ids) = one_chain(&credits);
        // Reference: outstanding (dispatched, not completed) per instance, queued per instance.
        let mut outstanding = vec![0u32; ids.len()];
        let mut queued: Vec<HashMap<u16, usize>> = vec![HashMap::new(); ids.len()];
        let mut flow_inst: HashMap<u64, InstanceId> = HashMap::new();
        let mut next_seq: HashMap<u64, u32> = HashMap::new();
        let mut last_seen: HashMap<u64, u32> = HashMap::new();
        let mut accepted = 0usize;
        let mut dispatched = 0usize;
        let mut out = Vec::new();
        let check = |s: &mut Scheduler<(u16, u64, u32)>, out: &mut Vec<(u16, u64, u32)>, max: usize, outstanding: &mut Vec<u32>, queued: &mut Vec<HashMap<u16, usize>>, dispatched: &mut usize, last_seen: &mut HashMap<u64, u32>| -> Result<bool, TestCaseError> {
            match s.poll_dispatch(out, max) {
                Some(id) => {
                    let i = id.index();
                    prop_assert!(!out.is_empty() && out.len() <= max);
                    outstanding[i] += out.len() as u32;
                    prop_assert!(outstanding[i] <= credits[i], "credits exceeded");
                    for &(t, f, seq) in out.iter() {
                        let q = queued[i].get_mut(&t).unwrap();
                        *q -= 1;
                        if let Some(&prev) = last_seen.get(&f) { prop_assert!(seq > prev, "flow reordered"); }
                        last_seen.insert(f, seq);
                    }
                    *dispatched += out.len();
                    Ok(true)
                }
                None => {
                    for i in 0..ids.len() {
                        let waiting: usize = queued[i].values().sum();
                        prop_assert!(!(waiting > 0 && outstanding[i] < credits[i]), "not work-conserving");
                    }
                    Ok(false)
                }
            }
        };
        for op in ops {
            match op {
                Op::Arrive { tenant, flow } => {
                    let seq = *next_seq.entry(flow).or_insert(0);
                    match s.handle_packet(Instant::ZERO, TenantId(tenant), DagUid(1), 0, flow, (tenant, flow, seq)) {
                        Ok(a) => {
                            let prev = *flow_inst.entry(flow).or_insert(a.instance);
                            prop_assert_eq!(prev, a.instance, "flow moved between instances");
                            *queued[a.instance.index()].entry(tenant).or_insert(0) += 1;
                            prop_assert!(queued[a.instance.index()][&tenant] <= 8);
                            next_seq.insert(flow, seq + 1);
                            accepted += 1;
                        }
                        Err(Reject::QueueFull) => {
                            let i = (((flow >> 32) * ids.len() as u64) >> 32) as usize;
                            prop_assert!(queued[i].get(&tenant).copied().unwrap_or(0) >= 8, "spurious QueueFull");
                        }
                        Err(e) => prop_assert!(false, "unexpected {:?}", e),
                    }
                }
                Op::Dispatch { max } => { check(&mut s, &mut out, max, &mut outstanding, &mut queued, &mut dispatched, &mut last_seen)?; }
                Op::Complete { inst, n } => {
                    let i = inst % ids.len();
                    let n = n.min(outstanding[i]);
                    outstanding[i] -= n;
                    s.handle_completion(ids[i], n);
                }
            }
        }
        // Drain: complete everything outstanding and dispatch until idle.
        loop {
            for i in 0..ids.len() { s.handle_completion(ids[i], outstanding[i]); outstanding[i] = 0; }
            if !check(&mut s, &mut out, 64, &mut outstanding, &mut queued, &mut dispatched, &mut last_seen)? {
                break;
            }
        }
        prop_assert_eq!(accepted, dispatched, "everything accepted is dispatched exactly once");
    }
}

#[test]
fn arrivals_count_intended_load_with_or_without_credit() {
    // A queue of 8 and one credit: 8 queued, 4 rejected — all 12 were wanted.
    let (mut s, _) = one_chain(&[1]);
    let t = TenantId(3);
    let mut rejected = 0;
    for i in 0..12 {
        if s.handle_packet(Instant::ZERO, t, DagUid(1), 0, 0, (0, 0, i)).is_err() {
            rejected += 1;
        }
    }
    assert_eq!(rejected, 4);
    let mut seen = Vec::new();
    s.drain_arrivals(|tenant, route, counts| seen.push((tenant, route.steps().len(), counts.to_vec())));
    assert_eq!(seen, vec![(t, 1, vec![12])]);
    // Drained: nothing more to report until new arrivals.
    s.drain_arrivals(|_, _, _| panic!("counts were not reset"));
}

#[test]
fn instances_share_by_time_while_others_wait() {
    // A 10 us quantum.
    let mut s: Scheduler<u32> = Scheduler::new(SchedConfig { quantum_ns: 10_000.0, ..SchedConfig::plain() });
    let (c1, c2) = (s.add_chain(1), s.add_chain(1));
    let (i1, i2) = (s.add_instance(c1, 1000).unwrap(), s.add_instance(c2, 1000).unwrap());
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c1, mask: NtMask::all(1) }]));
    s.set_dag(DagUid(2), DagRoute::new(vec![Step { chain: c2, mask: NtMask::all(1) }]));
    // Instance 1's items cost 20 us, instance 2's 200 ns.
    s.set_cost(i1, 20_000.0);
    s.set_cost(i2, 200.0);
    let mut out = Vec::new();
    for k in 0..10 {
        s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, k).unwrap();
    }
    // Alone: the whole batch, whatever the cost.
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(i1));
    assert_eq!(out.len(), 10);
    for k in 0..1000 {
        s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, k).unwrap();
        s.handle_packet(Instant::ZERO, TenantId(2), DagUid(2), 0, 0, k).unwrap();
    }
    // Together (both stay backlogged): over many turns each gets about the same time.
    let mut time = [0.0f64; 2];
    for _ in 0..30 {
        let Some(i) = s.poll_dispatch(&mut out, 64) else { break };
        time[i.index()] += out.len() as f64 * if i == i1 { 20_000.0 } else { 200.0 };
        s.handle_completion(i, out.len() as u32);
    }
    assert!((time[0] / time[1] - 1.0).abs() < 0.35, "time shares {time:?}");
    let _ = i2;
}

/// One chain with one instance of `credits` credits whose items cost `cost_ns`, and items 0..10
/// of tenant 1 queued for it.
fn one_instance_with_ten_items(cfg: SchedConfig, credits: u32, cost_ns: f64) -> (Scheduler<u32>, InstanceId) {
    let mut s: Scheduler<u32> = Scheduler::new(cfg);
    let c = s.add_chain(1);
    let i = s.add_instance(c, credits).unwrap();
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
    s.set_cost(i, cost_ns);
    for k in 0..10 {
        s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, k).unwrap();
    }
    (s, i)
}

#[test]
fn with_quantum_alone_a_lone_instance_gets_a_quantum_of_work_per_batch() {
    let cfg = SchedConfig { quantum_ns: 10_000.0, quantum_alone: true, ..SchedConfig::plain() };
    let (mut s, i) = one_instance_with_ten_items(cfg, 1000, 4_000.0);
    let mut out = Vec::new();
    // 10 us of 4 us items: two, then the deficit carries over (2 us + 10 us: three).
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(i));
    assert_eq!(out.len(), 2);
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(i));
    assert_eq!(out.len(), 3);
    // An item costlier than the quantum waits until its calls have gathered its time: one call
    // in five for 50 us items, the others back to the caller (which receives meanwhile: a
    // tenant's module cut at 100 us a packet ran alone four items a poll, and its neighbour's
    // packets waited unread behind them, issue 49).
    s.set_cost(i, 50_000.0);
    for round in 0..2 {
        for call in 0..4 {
            assert_eq!(s.poll_dispatch(&mut out, 32), None, "round {round}, call {call}");
            assert!(s.has_ready(), "the caller is told to call again");
        }
        assert_eq!(s.poll_dispatch(&mut out, 32), Some(i));
        assert_eq!(out.len(), 1);
    }
}

#[test]
fn without_quantum_alone_a_lone_instance_takes_its_batch() {
    let cfg = SchedConfig { quantum_ns: 10_000.0, quantum_alone: false, ..SchedConfig::plain() };
    let (mut s, i) = one_instance_with_ten_items(cfg, 1000, 50_000.0);
    let mut out = Vec::new();
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(i));
    assert_eq!(out.len(), 10);
    assert!(!s.has_ready());
}

#[test]
fn an_inflight_cap_bounds_dispatched_work_until_completions_return() {
    let (mut s, i) = one_instance_with_ten_items(SchedConfig::plain(), 256, 20_000.0);
    s.set_inflight_cap(i, 40_000.0);
    let mut out = Vec::new();
    // 40 us of 20 us items: two in flight, then nothing until one completes.
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(i));
    assert_eq!(out.len(), 2);
    assert_eq!(s.poll_dispatch(&mut out, 32), None);
    s.handle_completion(i, 1);
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(i));
    assert_eq!(out.len(), 1);
    // Lifted: the rest at once.
    s.set_inflight_cap(i, 0.0);
    assert_eq!(s.poll_dispatch(&mut out, 32), Some(i));
    assert_eq!(out.len(), 7);
}

/// Operations of the instance-change property test.
#[derive(Debug, Clone)]
enum Life {
    Arrive { tenant: u16, flow: u64 },
    Dispatch { max: usize },
    Complete { inst: usize, n: usize },
    Add { launching: bool },
    Run { inst: usize },
    Stop { inst: usize },
    Resume { inst: usize },
    Remove { inst: usize },
}

fn life_strategy() -> impl Strategy<Value = Life> {
    prop_oneof![
        8 => (0u16..2, 0u64..6).prop_map(|(tenant, flow)| Life::Arrive { tenant, flow: (((tenant as u64) << 8) | flow).wrapping_mul(0x9e37_79b9_7f4a_7c15) }),
        4 => (1usize..6).prop_map(|max| Life::Dispatch { max }),
        4 => (0usize..6, 1usize..4).prop_map(|(inst, n)| Life::Complete { inst, n }),
        1 => any::<bool>().prop_map(|launching| Life::Add { launching }),
        1 => (0usize..6).prop_map(|inst| Life::Run { inst }),
        1 => (0usize..6).prop_map(|inst| Life::Stop { inst }),
        1 => (0usize..6).prop_map(|inst| Life::Resume { inst }),
        1 => (0usize..6).prop_map(|inst| Life::Remove { inst }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Instances launch, run, stop, resume and go away while packets flow. Regions are modelled
    /// as FIFOs of dispatched items completing in order. Whatever the sequence: nothing is
    /// dispatched to an instance that is not running or draining; within a flow, items complete
    /// in arrival order; with bounds large enough, nothing is rejected; and once everything is
    /// launched and drained, every accepted item has completed exactly once.
    #[test]
    fn instance_changes_lose_and_reorder_nothing(first_launching in any::<bool>(), ops in proptest::collection::vec(life_strategy(), 1..300)) {
        let mut s: Scheduler<(u64, u32)> = Scheduler::new(SchedConfig { max_queue_per_tenant: 1 << 20, max_held: 1 << 20, ..SchedConfig::plain() });
        let c = s.add_chain(1);
        s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
        let credits = 3;
        let first = if first_launching { s.add_launching(c, credits) } else { s.add_instance(c, credits) }.unwrap();
        let mut ids = vec![first];
        let mut inflight: HashMap<InstanceId, VecDeque<(u64, u32)>> = HashMap::new();
        let mut next_seq: HashMap<u64, u32> = HashMap::new();
        let mut done: HashMap<u64, u32> = HashMap::new();
        let (mut accepted, mut completed) = (0usize, 0usize);
        let mut out = Vec::new();
        let mut complete = |s: &mut Scheduler<(u64, u32)>, inflight: &mut HashMap<InstanceId, VecDeque<(u64, u32)>>, id: InstanceId, n: usize| -> Result<(), TestCaseError> {
            let q = inflight.entry(id).or_default();
            let n = n.min(q.len());
            for _ in 0..n {
                let (f, seq) = q.pop_front().unwrap();
                let expect = done.entry(f).or_insert(0);
                prop_assert_eq!(seq, *expect, "flow {:x} completed out of order", f);
                *expect += 1;
                completed += 1;
            }
            s.handle_completion(id, n as u32);
            Ok(())
        };
        let dispatch = |s: &mut Scheduler<(u64, u32)>, out: &mut Vec<(u64, u32)>, inflight: &mut HashMap<InstanceId, VecDeque<(u64, u32)>>, max: usize| -> Result<bool, TestCaseError> {
            let Some(id) = s.poll_dispatch(out, max) else { return Ok(false) };
            prop_assert!(matches!(s.state(id), InstanceState::Running | InstanceState::Draining), "dispatched to {:?}", s.state(id));
            let q = inflight.entry(id).or_default();
            q.extend(out.iter().copied());
            prop_assert!(q.len() <= credits as usize, "credits exceeded");
            Ok(true)
        };
        for op in ops {
            match op {
                Life::Arrive { tenant, flow } => {
                    let seq = *next_seq.entry(flow).or_insert(0);
                    match s.handle_packet(Instant::ZERO, TenantId(tenant), DagUid(1), 0, flow, (flow, seq)) {
                        Ok(_) => { next_seq.insert(flow, seq + 1); accepted += 1; }
                        Err(Reject::NoInstance) => prop_assert!(s.instances_of(c).is_empty()),
                        Err(e) => prop_assert!(false, "rejected: {:?}", e),
                    }
                }
                Life::Dispatch { max } => { dispatch(&mut s, &mut out, &mut inflight, max)?; }
                Life::Complete { inst, n } => { let id = ids[inst % ids.len()]; complete(&mut s, &mut inflight, id, n)?; }
                Life::Add { launching } => {
                    let r = if launching { s.add_launching(c, credits) } else { s.add_instance(c, credits) };
                    match r {
                        Ok(id) => if !ids.contains(&id) { ids.push(id) },
                        Err(e) => prop_assert_eq!(e, Change::Busy),
                    }
                }
                Life::Run { inst } => { let _ = s.set_running(ids[inst % ids.len()]); }
                Life::Stop { inst } => { let _ = s.stop_instance(ids[inst % ids.len()]); }
                Life::Resume { inst } => { let _ = s.resume_instance(ids[inst % ids.len()]); }
                Life::Remove { inst } => { let _ = s.remove_instance(ids[inst % ids.len()]); }
            }
            while s.take_parked().is_some() {}
        }
        // Launch whatever waits, and drain.
        for &id in &ids { let _ = s.set_running(id); }
        for _ in 0..10_000 {
            for &id in &ids { complete(&mut s, &mut inflight, id, usize::MAX)?; }
            if !dispatch(&mut s, &mut out, &mut inflight, 64)? && inflight.values().all(VecDeque::is_empty) {
                break;
            }
        }
        prop_assert_eq!(s.held(c), None, "a transition never ended");
        prop_assert_eq!(accepted, completed, "accepted items lost");
    }
}

#[test]
fn a_moving_flow_waits_for_its_old_instance_and_others_do_not() {
    let mut s: Scheduler<(u64, u32)> = Scheduler::new(SchedConfig::plain());
    let c = s.add_chain(1);
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
    let a = s.add_instance(c, 8).unwrap();
    // Two flows: with two instances, one hashes to the first, the other to the second.
    let (f0, f1) = (0u64, u64::MAX);
    let mut out = Vec::new();
    for seq in 0..3 {
        s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 0, f0, (f0, seq)).unwrap();
        s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 0, f1, (f1, seq)).unwrap();
    }
    assert_eq!(s.poll_dispatch(&mut out, 4), Some(a));
    // Scale out while 4 items run in `a` and 2 wait there.
    let b = s.add_instance(c, 8).unwrap();
    assert_eq!(s.add_instance(c, 8), Err(Change::Busy), "one change at a time");
    // f1 moves to b: it is held; f0 stays on a and is queued at once.
    assert_eq!(s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 0, f1, (f1, 3)).unwrap().instance, b);
    assert_eq!(s.handle_packet(Instant::ZERO, TenantId(0), DagUid(1), 0, f0, (f0, 3)).unwrap().instance, a);
    assert_eq!(s.held(c), Some(1));
    assert_eq!(s.queued(b), 0);
    // `a` finishes its first 4; its 2 older queued items still stand before the barrier.
    s.handle_completion(a, 4);
    assert_eq!(s.held(c), Some(1));
    assert_eq!(s.poll_dispatch(&mut out, 2), Some(a));
    assert_eq!(out, vec![(f0, 2), (f1, 2)]);
    s.handle_completion(a, 2);
    // Now f1's earlier packets are done: the held one goes to b, and the transition is over.
    assert_eq!(s.held(c), None);
    assert_eq!(s.queued(b), 1);
    assert_eq!(s.poll_dispatch(&mut out, 8).map(|i| (i, out.clone())), Some((a, vec![(f0, 3)])));
    assert_eq!(s.poll_dispatch(&mut out, 8).map(|i| (i, out.clone())), Some((b, vec![(f1, 3)])));
}

#[test]
fn a_launching_instance_buffers_then_serves_its_packets_first_and_a_stopped_one_parks() {
    let mut s: Scheduler<u32> = Scheduler::new(SchedConfig::plain());
    let (c1, c2) = (s.add_chain(1), s.add_chain(1));
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c1, mask: NtMask::all(1) }]));
    s.set_dag(DagUid(2), DagRoute::new(vec![Step { chain: c2, mask: NtMask::all(1) }]));
    let other = s.add_instance(c2, 8).unwrap();
    let l = s.add_launching(c1, 8).unwrap();
    s.handle_packet(Instant::ZERO, TenantId(0), DagUid(2), 0, 0, 100).unwrap();
    for k in 0..3 {
        s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, k).unwrap();
    }
    let mut out = Vec::new();
    assert_eq!(s.poll_dispatch(&mut out, 8), Some(other), "launching: not dispatched");
    assert_eq!(s.poll_dispatch(&mut out, 8), None);
    s.handle_packet(Instant::ZERO, TenantId(0), DagUid(2), 0, 0, 101).unwrap();
    s.set_running(l).unwrap();
    assert_eq!(s.poll_dispatch(&mut out, 8), Some(l), "served first once it runs");
    assert_eq!(out, vec![0, 1, 2]);
    // Stop it with its 3 items in flight: draining, then parked once they complete.
    s.stop_instance(l).unwrap();
    assert_eq!(s.state(l), InstanceState::Draining);
    assert_eq!(s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, 9), Err(Reject::NoInstance));
    assert_eq!(s.take_parked(), None);
    s.handle_completion(l, 3);
    assert_eq!((s.take_parked(), s.state(l)), (Some(l), InstanceState::Parked));
    // Resumed without a launch; then removed and its slot reused.
    s.resume_instance(l).unwrap();
    assert_eq!(s.instances_of(c1), &[l]);
    s.stop_instance(l).unwrap();
    s.take_parked();
    s.remove_instance(l).unwrap();
    assert_eq!(s.add_instance(c2, 8), Ok(l), "slot reused");
}

#[test]
fn an_instance_that_will_never_run_gives_back_what_waited_in_it_and_its_flows() {
    let mut s: Scheduler<u32> = Scheduler::new(SchedConfig::plain());
    let c = s.add_chain(1);
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
    let at = |s: &mut Scheduler<u32>, hash: u64, item: u32| s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, hash, item);
    // Alone and launching: what waited comes back in order, the chain has no instance.
    let l = s.add_launching(c, 8).unwrap();
    for k in 0..3 {
        at(&mut s, k, k as u32).unwrap();
    }
    let mut lost = Vec::new();
    s.abandon_launch(l, &mut lost).unwrap();
    assert_eq!((lost.as_slice(), s.state(l)), (&[0, 1, 2][..], InstanceState::Free));
    assert_eq!(at(&mut s, 0, 9), Err(Reject::NoInstance), "no instance left: the next packet asks for a launch");
    let mut out = Vec::new();
    assert_eq!(s.poll_dispatch(&mut out, 8), None, "nothing of it is dispatched");
    // Beside a running instance: the flows it had go to the other at once.
    let a = s.add_instance(c, 8).unwrap();
    let l = s.add_launching(c, 8).unwrap();
    let mut to_l = Vec::new();
    let spread = |k: u64| k * (u64::MAX / 16);
    for k in 0..16u64 {
        at(&mut s, spread(k), 100 + k as u32).unwrap();
        if s.poll_dispatch(&mut out, 8) == Some(a) {
            s.handle_completion(a, out.len() as u32);
        } else {
            to_l.push(100 + k as u32);
        }
    }
    assert!(!to_l.is_empty() && to_l.len() < 16, "the hash splits the flows: {to_l:?}");
    lost.clear();
    s.abandon_launch(l, &mut lost).unwrap();
    assert_eq!(lost, to_l, "what waited in it, in order");
    assert_eq!(s.instances_of(c), &[a]);
    for k in 0..16u64 {
        at(&mut s, spread(k), 200).unwrap();
        assert_eq!(s.poll_dispatch(&mut out, 8), Some(a), "flow {k} goes to the running instance");
        s.handle_completion(a, 1);
    }
    // A running instance that has dispatched is not abandoned (it is stopped instead).
    assert_eq!(s.abandon_launch(a, &mut lost), Err(Change::WrongState(InstanceState::Running)));
    // One just added, never dispatched to (a scale-out whose region failed), is.
    let b = s.add_instance(c, 8).unwrap();
    assert_eq!(s.abandon_launch(b, &mut lost), Ok(()));
    assert_eq!(s.instances_of(c), &[a]);
}

#[test]
fn a_paused_instance_queues_but_does_not_dispatch() {
    let (mut s, ids) = one_chain(&[8]);
    s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, (1, 0, 0)).unwrap();
    let mut out = Vec::new();
    assert_eq!(s.poll_dispatch(&mut out, 1), Some(ids[0]));
    assert_eq!(s.inflight(ids[0]), 1);
    s.set_paused(ids[0], true);
    s.handle_packet(Instant::ZERO, TenantId(1), DagUid(1), 0, 0, (1, 0, 1)).unwrap();
    assert_eq!(s.poll_dispatch(&mut out, 8), None, "paused");
    s.handle_completion(ids[0], 1);
    assert_eq!(s.inflight(ids[0]), 0);
    assert_eq!(s.poll_dispatch(&mut out, 8), None, "a completion does not wake a paused instance");
    assert_eq!(s.queued(ids[0]), 1);
    s.set_paused(ids[0], false);
    assert_eq!(s.poll_dispatch(&mut out, 8), Some(ids[0]));
    assert_eq!(out, vec![(1, 0, 1)]);
}

/// Batches handed out (instance and items), and arrivals counted (tenant and per step).
type Drained = (Vec<(InstanceId, Vec<(u16, u64, u32)>)>, Vec<(TenantId, Vec<u64>)>);

/// Everything a scheduler hands out until it has nothing left, completing each batch at once,
/// and the arrivals it counted.
fn drain_all(s: &mut Scheduler<(u16, u64, u32)>) -> Drained {
    let (mut batches, mut out) = (Vec::new(), Vec::new());
    while let Some(id) = s.poll_dispatch(&mut out, 5) {
        s.handle_completion(id, out.len() as u32);
        batches.push((id, out.clone()));
    }
    let mut arrivals = Vec::new();
    s.drain_arrivals(|t, _, n| arrivals.push((t, n.to_vec())));
    (batches, arrivals)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// A run of packets enters as its packets would one by one: the same items queued at the
    /// same instances in the same order, the same ones refused by the per-tenant bound, the
    /// same batches handed out after, the same arrivals counted.
    #[test]
    fn a_run_enters_as_its_packets_one_by_one(
        instances in 1usize..4,
        runs in proptest::collection::vec((0u16..3, proptest::collection::vec(0u64..6, 1..12)), 1..12),
    ) {
        let (mut by_run, _) = one_chain(&vec![4; instances]);
        let (mut one_by_one, _) = one_chain(&vec![4; instances]);
        let mut seq = 0u32;
        for (t, flows) in &runs {
            let tenant = TenantId(*t);
            let items: Vec<(u16, u64, u32)> = flows.iter().map(|&f| { seq += 1; (*t, f << 40, seq) }).collect();
            let mut refused = Vec::new();
            let a = by_run.handle_run(Instant::ZERO, tenant, DagUid(1), 0, &items, |i| i.1, &mut refused).expect("a plain step");
            prop_assert_eq!(a.mask, NtMask(0b101));
            prop_assert!(a.last);
            let mut expected = Vec::new();
            for &i in &items {
                match one_by_one.handle_packet(Instant::ZERO, tenant, DagUid(1), 0, i.1, i) {
                    Ok(_) => {}
                    Err(Reject::QueueFull) => expected.push(i),
                    Err(e) => prop_assert!(false, "unexpected {:?}", e),
                }
            }
            prop_assert_eq!(&refused, &expected);
        }
        prop_assert_eq!(drain_all(&mut by_run), drain_all(&mut one_by_one));
    }
}

#[test]
fn a_run_goes_packet_by_packet_where_the_step_is_not_plain() {
    let mut refused = Vec::new();
    let items = [(0u16, 0u64, 1u32), (0, 0, 2)];
    let (mut s, ids) = one_chain(&[4]);
    // Unknown DAG, a position past the route, an empty run: nothing changes.
    assert!(s.handle_run(Instant::ZERO, TenantId(0), DagUid(9), 0, &items, |i| i.1, &mut refused).is_none());
    assert!(s.handle_run(Instant::ZERO, TenantId(0), DagUid(1), 1, &items, |i| i.1, &mut refused).is_none());
    assert!(s.handle_run(Instant::ZERO, TenantId(0), DagUid(1), 0, &[], |i| i.1, &mut refused).is_none());
    assert_eq!(s.queued(ids[0]), 0);
    // No instance: the driver's on-demand path answers, packet by packet.
    let mut s: Scheduler<(u16, u64, u32)> = Scheduler::new(SchedConfig::plain());
    let c = s.add_chain(1);
    s.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
    assert!(s.handle_run(Instant::ZERO, TenantId(0), DagUid(1), 0, &items, |i| i.1, &mut refused).is_none());
    // A first step that starts a parallel group: each packet forks.
    let mut s: Scheduler<(u16, u64, u32)> = Scheduler::new(SchedConfig::plain());
    let steps: Vec<Step> = (0..2)
        .map(|_| {
            let c = s.add_chain(1);
            s.add_instance(c, 4).unwrap();
            Step { chain: c, mask: NtMask::all(1) }
        })
        .collect();
    s.set_dag(DagUid(1), DagRoute::with_groups(steps, &[(0, 2)]).unwrap());
    assert!(s.handle_run(Instant::ZERO, TenantId(0), DagUid(1), 0, &items, |i| i.1, &mut refused).is_none());
    assert!(refused.is_empty());
    let (batches, arrivals) = drain_all(&mut s);
    assert!(batches.is_empty() && arrivals.is_empty(), "nothing queued, nothing counted");
}
