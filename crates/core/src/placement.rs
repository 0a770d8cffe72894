//! Where each chain instance runs: keep long chains away from short ones.
//!
//! A region runs a batch to completion, and a core runs one batch at a time: a packet of a
//! chain that costs 20 µs holds its core for 20 µs, and any packet of a 200 ns chain that waits
//! on the same core waits that long — no quantum can cut a packet in two. Scheduling within one
//! core bounds how *much* of the core a costly chain takes (deficit round robin by time, the
//! ingress limits), not how *long* the others wait. So the node keeps the two apart in space,
//! the way Perséphone's DARC reserves cores for short requests (SOSP '21) and FairNIC gives
//! tenants cores of their own: long instances run on worker threads of their own, never on the
//! dispatcher's thread (where they would also hold up receiving for everyone), and short ones on
//! the dispatcher's thread or on the other workers.
//!
//! [`Placer::decide`] looks at each active instance's measured cost per packet and load, and
//! proposes at most one move per look. An instance is *long* when a packet costs at least
//! [`PlacementConfig::long_ns`] and [`PlacementConfig::ratio`] times the cheapest active
//! instance's; an instance is moved only once its class has been the same for
//! [`PlacementConfig::hold`] looks in a row, so a cost that wavers around the line moves nothing.
//! Nothing moves while every instance is of one class, or without worker threads.
//!
//! Sans-IO: the node (or a test) feeds views and carries out the moves.

use crate::ids::InstanceId;

/// How often a node looks at where its instances run.
pub const PLACEMENT_PERIOD: core::time::Duration = core::time::Duration::from_millis(10);

/// Where a region runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// On the dispatcher's thread.
    Dispatcher,
    /// On worker thread `n`.
    Worker(usize),
}

/// Placement parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacementConfig {
    /// A packet costing at least this (ns) makes its instance long, if also [`Self::ratio`]
    /// times the cheapest.
    pub long_ns: f64,
    /// How many times the cheapest active instance's cost a long one costs at least.
    pub ratio: f64,
    /// Looks in a row an instance must keep its class before it is moved.
    pub hold: u32,
}

impl Default for PlacementConfig {
    /// Long from 5 µs a packet (half the scheduler's 10 µs quantum: such packets cannot be
    /// interleaved with others at quantum granularity) and 10× the cheapest; three looks.
    fn default() -> Self {
        PlacementConfig { long_ns: 5_000.0, ratio: 10.0, hold: 3 }
    }
}

/// One active instance as the placer sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View {
    /// The instance.
    pub id: InstanceId,
    /// Measured cost of one packet through its chain, ns (0: not measured yet, counted short).
    pub cost_ns: f64,
    /// Its load, in cores (busy fraction of one core).
    pub load: f64,
    /// Where it runs now.
    pub at: Place,
}

/// A proposed move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The instance to move.
    pub id: InstanceId,
    /// Its new place.
    pub to: Place,
}

/// Whether the driver is carrying out a move (one at a time: while one is under way the policy
/// does not look).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moving {
    /// No move under way.
    None,
    /// A move waits for its instance's batches, or its region is moving.
    UnderWay,
}

/// The placement policy's state: each instance's class and how long it has kept it.
#[derive(Debug, Default)]
pub struct Placer {
    cfg: PlacementConfig,
    /// Per instance index: (long, looks in a row with that class).
    streak: Vec<(bool, u32)>,
}

impl Placer {
    /// A placer with `cfg`.
    pub fn new(cfg: PlacementConfig) -> Self {
        Placer { cfg, streak: Vec::new() }
    }

    /// The configuration.
    pub fn config(&self) -> &PlacementConfig {
        &self.cfg
    }

    /// Forgets an instance's history (it stopped, or its slot is reused).
    pub fn forget(&mut self, id: InstanceId) {
        if let Some(s) = self.streak.get_mut(id.index()) {
            *s = (false, 0);
        }
    }

    /// One look at the active instances (`views`) on a node with `workers` worker threads: the
    /// move to make now, if any.
    pub fn decide(&mut self, views: &[View], workers: usize) -> Option<Move> {
        let cheapest = views.iter().map(|v| v.cost_ns).filter(|&c| c > 0.0).fold(f64::INFINITY, f64::min);
        let is_long = |v: &View| v.cost_ns >= self.cfg.long_ns && v.cost_ns >= self.cfg.ratio * cheapest;
        for v in views {
            let i = v.id.index();
            if self.streak.len() <= i {
                self.streak.resize(i + 1, (false, 0));
            }
            let long = is_long(v);
            let s = &mut self.streak[i];
            *s = if s.0 == long && s.1 > 0 { (long, s.1.saturating_add(1)) } else { (long, 1) };
        }
        if workers == 0 {
            return None;
        }
        let (mut long_load, mut short_load, mut longs, mut shorts) = (0.0, 0.0, 0, 0);
        for v in views {
            if is_long(v) {
                long_load += v.load;
                longs += 1;
            } else {
                short_load += v.load;
                shorts += 1;
            }
        }
        if longs == 0 || shorts == 0 {
            return None;
        }
        // Workers [0, short_workers) serve short instances (and the dispatcher's thread, which
        // is all they get with one worker), the rest long ones: in proportion to load, each
        // class at least one where there are two workers or more.
        let short_workers = if workers == 1 {
            0
        } else {
            let total = long_load + short_load;
            let share = if total > 0.0 { short_load / total } else { 0.5 };
            ((share * workers as f64).round() as usize).clamp(1, workers - 1)
        };
        let allowed = |long: bool, s: Place| match s {
            Place::Dispatcher => !long,
            Place::Worker(w) => (w >= short_workers) == long,
        };
        let load_at = |s: Place| views.iter().filter(|v| v.at == s).map(|v| v.load).sum::<f64>();
        let v = views.iter().find(|v| {
            let (long, looks) = self.streak[v.id.index()];
            looks >= self.cfg.hold && !allowed(long, v.at)
        })?;
        let long = self.streak[v.id.index()].0;
        let to = if long || short_workers > 0 {
            let range = if long { short_workers..workers } else { 0..short_workers };
            range.map(Place::Worker).min_by(|a, b| load_at(*a).total_cmp(&load_at(*b)))?
        } else {
            Place::Dispatcher
        };
        Some(Move { id: v.id, to })
    }
}

/// Quanta of work an instance may have in flight on a worker it shares with other instances.
pub const WORKER_INFLIGHT_QUANTA: f64 = 4.0;

/// Each instance's cap on work in flight, ns (0: no cap), from the worker each active instance
/// runs on (`None`: inactive, or on the dispatcher's thread). A worker runs the batches handed
/// to it in order: where several active instances share one, each may have at most
/// [`WORKER_INFLIGHT_QUANTA`] quanta of work in flight there, so that a costly chain cannot put
/// milliseconds of its work ahead of the others'. An instance alone on its worker keeps every
/// credit (no one to protect; full pipelining).
pub fn inflight_caps(on: &[Option<usize>], quantum_ns: f64, caps: &mut Vec<f64>) {
    // (No allocation: the driver calls this every epoch. Instances are few.)
    let shared = |w: usize| on.iter().filter(|&&x| x == Some(w)).nth(1).is_some();
    caps.clear();
    caps.extend(on.iter().map(|w| match w {
        Some(w) if shared(*w) => WORKER_INFLIGHT_QUANTA * quantum_ns,
        _ => 0.0,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u16, cost_ns: f64, load: f64, at: Place) -> View {
        View { id: InstanceId(id), cost_ns, load, at }
    }

    /// Looks until a move comes, at most `n` times.
    fn look(p: &mut Placer, views: &[View], workers: usize, n: u32) -> (u32, Option<Move>) {
        for k in 1..=n {
            if let Some(m) = p.decide(views, workers) {
                return (k, Some(m));
            }
        }
        (n, None)
    }

    #[test]
    fn one_worker_short_goes_to_the_dispatcher_after_hold_looks() {
        let mut p = Placer::new(PlacementConfig::default());
        // Both on the one worker: the short one moves to the dispatcher's thread.
        let v = [view(0, 200.0, 0.2, Place::Worker(0)), view(1, 20_000.0, 0.5, Place::Worker(0))];
        let (k, m) = look(&mut p, &v, 1, 10);
        assert_eq!(m, Some(Move { id: InstanceId(0), to: Place::Dispatcher }));
        assert_eq!(k, 3, "moved on the third look, not before");
        // Once apart, nothing more moves.
        let v = [view(0, 200.0, 0.2, Place::Dispatcher), view(1, 20_000.0, 0.5, Place::Worker(0))];
        assert_eq!(look(&mut p, &v, 1, 10).1, None);
    }

    #[test]
    fn long_instance_leaves_the_dispatcher() {
        let mut p = Placer::new(PlacementConfig::default());
        let v = [view(0, 200.0, 0.2, Place::Dispatcher), view(1, 20_000.0, 0.5, Place::Dispatcher)];
        assert_eq!(look(&mut p, &v, 1, 10).1, Some(Move { id: InstanceId(1), to: Place::Worker(0) }));
    }

    #[test]
    fn nothing_moves_without_workers_or_with_one_class() {
        let mut p = Placer::new(PlacementConfig::default());
        let mixed = [view(0, 200.0, 0.2, Place::Dispatcher), view(1, 20_000.0, 0.5, Place::Dispatcher)];
        assert_eq!(look(&mut p, &mixed, 0, 10).1, None, "no worker thread to move to");
        let mut p = Placer::new(PlacementConfig::default());
        let all_long = [view(0, 20_000.0, 0.2, Place::Worker(0)), view(1, 30_000.0, 0.5, Place::Worker(0))];
        assert_eq!(look(&mut p, &all_long, 1, 10).1, None, "alike chains share as before");
        let all_short = [view(0, 200.0, 0.2, Place::Worker(0)), view(1, 1_500.0, 0.5, Place::Worker(0))];
        assert_eq!(look(&mut p, &all_short, 1, 10).1, None);
        // 6 µs is over long_ns but only 3× the cheapest: not long.
        let close = [view(0, 2_000.0, 0.2, Place::Worker(0)), view(1, 6_000.0, 0.5, Place::Worker(0))];
        assert_eq!(look(&mut p, &close, 1, 10).1, None);
    }

    #[test]
    fn unmeasured_costs_count_short_and_do_not_set_the_scale() {
        let mut p = Placer::new(PlacementConfig::default());
        let v = [view(0, 0.0, 0.0, Place::Worker(0)), view(1, 20_000.0, 0.5, Place::Worker(0))];
        assert_eq!(look(&mut p, &v, 1, 10).1, None, "one measured instance: nothing to compare with");
    }

    #[test]
    fn wavering_cost_does_not_move() {
        let mut p = Placer::new(PlacementConfig::default());
        for k in 0..20 {
            let c = if k % 2 == 0 { 4_000.0 } else { 6_000.0 };
            let v = [view(0, 200.0, 0.2, Place::Dispatcher), view(1, c, 0.5, Place::Dispatcher)];
            assert_eq!(p.decide(&v, 1), None, "look {k}");
        }
    }

    #[test]
    fn several_workers_split_by_load_and_spread_within_a_class() {
        let mut p = Placer::new(PlacementConfig::default());
        // 4 workers, short load 1.0 and long load 1.0: workers 0-1 short, 2-3 long.
        let mut v = vec![
            view(0, 300.0, 0.5, Place::Worker(0)),
            view(1, 300.0, 0.5, Place::Worker(1)),
            view(2, 50_000.0, 0.5, Place::Worker(0)),
            view(3, 50_000.0, 0.5, Place::Worker(1)),
        ];
        let mut moves = Vec::new();
        for _ in 0..20 {
            if let Some(m) = p.decide(&v, 4) {
                moves.push(m);
                v.iter_mut().find(|x| x.id == m.id).unwrap().at = m.to;
            }
        }
        assert_eq!(
            moves,
            vec![Move { id: InstanceId(2), to: Place::Worker(2) }, Move { id: InstanceId(3), to: Place::Worker(3) }],
            "each long one to the least loaded long worker; short ones stay"
        );
        assert!(v.iter().all(|x| x.at != Place::Dispatcher));
    }

    #[test]
    fn forgotten_instance_starts_its_streak_again() {
        let mut p = Placer::new(PlacementConfig::default());
        let v = [view(0, 200.0, 0.2, Place::Worker(0)), view(1, 20_000.0, 0.5, Place::Worker(0))];
        p.decide(&v, 1);
        p.decide(&v, 1);
        p.forget(InstanceId(0));
        p.forget(InstanceId(1));
        assert_eq!(p.decide(&v, 1), None);
        assert_eq!(p.decide(&v, 1), None);
        assert!(p.decide(&v, 1).is_some());
    }

    #[test]
    fn only_instances_sharing_a_worker_are_capped() {
        let mut caps = Vec::new();
        // Instances 0 and 2 share worker 0; 1 is alone on worker 1; 3 is inactive (or inline).
        inflight_caps(&[Some(0), Some(1), Some(0), None], 10_000.0, &mut caps);
        assert_eq!(caps, vec![40_000.0, 0.0, 40_000.0, 0.0]);
        // One of the two goes: the other has its worker to itself again.
        inflight_caps(&[Some(0), Some(1), None, None], 10_000.0, &mut caps);
        assert_eq!(caps, vec![0.0; 4]);
    }
}
