//! Run-time choice between a DAG's chain candidates (paper 000 §4.3: bitstreams are generated
//! at deploy for every NT combination a DAG allows, so that the node can choose among them
//! while it runs).
//!
//! A DAG whose NTs the planner spread over several chains of its own (the branches of a
//! parallel stage, or runs split by an NT another DAG shares) can also run as one *compact*
//! chain holding all of them in a topological order: fewer regions (one instead of `k`) and
//! fewer scheduler visits, at the price of the parallelism. The node starts every DAG in its
//! planned form and this policy moves it between the two:
//!
//! - **compact** when the node has been short of regions for a whole MONITOR_PERIOD (packets
//!   kept needing a region and found none free: context switches, endpoint fallback) and the
//!   DAG's load fits one instance of the compact chain. Of the DAGs that qualify, the one
//!   whose compaction frees the most regions goes first.
//! - **expand** back to the planned form once the pressure has been gone for a whole
//!   MONITOR_PERIOD and enough regions are unused (free, or holding victims) for the planned
//!   chains beside the compact one.
//!
//! At most one switch per MONITOR_PERIOD on the node, so each can show its effect on the
//! pressure before the next; a switch happens only on a condition that held a whole period,
//! never on a spike. Sans-IO: the driver reports what it measured with `now`.

use crate::ids::DagUid;
use crate::time::Instant;
use core::time::Duration;

/// Which candidate a DAG runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The planner's chains (`k` of them).
    Planned,
    /// One chain holding all the DAG's NTs.
    Compact,
}

/// A DAG that can switch, as the driver sees it this epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DagView {
    /// The DAG.
    pub dag: DagUid,
    /// What it runs as now.
    pub form: Form,
    /// Chains of its planned form.
    pub planned_chains: usize,
    /// Its load as one compact chain would carry it, in instances' worth (the sum of its
    /// chains' loads: each NT's work per packet is the same wherever it runs).
    pub compact_load: f64,
    /// False while the DAG cannot switch (a switch under way, or a chain scaled to several
    /// instances, whose NT states cannot become one).
    pub ready: bool,
}

/// What the node should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    /// The DAG.
    pub dag: DagUid,
    /// The form it should run as.
    pub to: Form,
}

/// The policy's state. See the module docs.
#[derive(Debug, Clone)]
pub struct Rechainer {
    monitor_period: Duration,
    high: f64,
    /// Since when the node has been short of regions (reset once a period passes without).
    pressure_since: Option<Instant>,
    last_pressure: Option<Instant>,
    last_switch: Option<Instant>,
}

impl Rechainer {
    /// A policy that acts on conditions held for `monitor_period`, compacting a DAG only if its
    /// compact load stays at or below `high` (the auto-scaler's overload threshold).
    pub fn new(monitor_period: Duration, high: f64) -> Self {
        Rechainer { monitor_period, high, pressure_since: None, last_pressure: None, last_switch: None }
    }

    /// MONITOR_PERIOD (raised by the node to the measured launch time, as the auto-scaler's).
    pub fn set_monitor_period(&mut self, p: Duration) {
        self.monitor_period = p;
    }

    /// The effective MONITOR_PERIOD.
    pub fn monitor_period(&self) -> Duration {
        self.monitor_period
    }

    /// A switch the policy did not decide (an operator's) happened at `now`: the next waits a
    /// whole MONITOR_PERIOD, as after the policy's own.
    pub fn switched(&mut self, now: Instant) {
        self.last_switch = Some(now);
    }

    /// True while the node counts as short of regions.
    pub fn under_pressure(&self) -> bool {
        self.pressure_since.is_some()
    }

    /// One epoch: `pressure` says whether packets needed a region and found none free since
    /// the last call; `unused_regions` counts regions that are free or hold victims; `dags`
    /// are the DAGs that have a compact form. Returns the switch due, if any.
    pub fn observe(&mut self, now: Instant, pressure: bool, unused_regions: usize, dags: &[DagView]) -> Option<Switch> {
        let period = self.monitor_period;
        if pressure {
            self.pressure_since = self.pressure_since.or(Some(now));
            self.last_pressure = Some(now);
        } else if self.last_pressure.is_some_and(|t| now.saturating_since(t) >= period) {
            self.pressure_since = None;
        }
        if self.last_switch.is_some_and(|t| now.saturating_since(t) < period) {
            return None;
        }
        let held = self.pressure_since.is_some_and(|t| now.saturating_since(t) >= period);
        let calm = self.last_pressure.is_none_or(|t| now.saturating_since(t) >= period);
        let pick = if held {
            // The DAG that frees the most regions, then the lightest, then the lowest UID.
            dags.iter()
                .filter(|d| d.ready && d.form == Form::Planned && d.planned_chains >= 2 && d.compact_load <= self.high)
                .min_by(|a, b| {
                    b.planned_chains.cmp(&a.planned_chains).then(a.compact_load.total_cmp(&b.compact_load)).then(a.dag.cmp(&b.dag))
                })
                .map(|d| Switch { dag: d.dag, to: Form::Compact })
        } else if calm {
            // The DAG whose planned form needs the fewest extra regions, if they are there.
            dags.iter()
                .filter(|d| d.ready && d.form == Form::Compact && d.planned_chains - 1 <= unused_regions)
                .min_by(|a, b| a.planned_chains.cmp(&b.planned_chains).then(a.dag.cmp(&b.dag)))
                .map(|d| Switch { dag: d.dag, to: Form::Planned })
        } else {
            None
        };
        if pick.is_some() {
            self.last_switch = Some(now);
            if pick.is_some_and(|s| s.to == Form::Compact) {
                // Judge the next compaction on pressure seen after this one.
                self.pressure_since = None;
            }
        }
        pick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }
    fn view(dag: u32, form: Form, k: usize, load: f64) -> DagView {
        DagView { dag: DagUid(dag), form, planned_chains: k, compact_load: load, ready: true }
    }
    fn policy() -> Rechainer {
        Rechainer::new(Duration::from_millis(10), 0.9)
    }

    #[test]
    fn compacts_only_after_pressure_held_a_whole_period() {
        let mut r = policy();
        let dags = [view(1, Form::Planned, 3, 0.5)];
        for ms in 0..10 {
            assert_eq!(r.observe(at(ms), true, 0, &dags), None, "at {ms} ms");
        }
        assert_eq!(r.observe(at(10), true, 0, &dags), Some(Switch { dag: DagUid(1), to: Form::Compact }));
    }

    #[test]
    fn a_spike_of_pressure_changes_nothing() {
        let mut r = policy();
        let dags = [view(1, Form::Planned, 3, 0.5)];
        assert_eq!(r.observe(at(0), true, 0, &dags), None);
        // A whole period without pressure forgets it.
        for ms in 1..=10 {
            assert_eq!(r.observe(at(ms), false, 0, &dags), None);
        }
        assert!(!r.under_pressure());
        assert_eq!(r.observe(at(15), true, 0, &dags), None, "pressure starts over");
        assert_eq!(r.observe(at(24), true, 0, &dags), None);
        assert!(r.observe(at(25), true, 0, &dags).is_some());
    }

    #[test]
    fn pressure_with_gaps_shorter_than_a_period_counts_as_held() {
        let mut r = policy();
        let dags = [view(1, Form::Planned, 2, 0.5)];
        assert_eq!(r.observe(at(0), true, 0, &dags), None);
        assert_eq!(r.observe(at(5), false, 0, &dags), None);
        assert_eq!(r.observe(at(9), true, 0, &dags), None);
        assert!(r.observe(at(12), false, 0, &dags).is_some(), "pressure since 0 ms, last seen 3 ms ago");
    }

    #[test]
    fn a_dag_whose_load_needs_more_than_one_instance_stays_planned() {
        let mut r = policy();
        let dags = [view(1, Form::Planned, 3, 1.2), view(2, Form::Planned, 2, 0.95)];
        for ms in 0..=30 {
            assert_eq!(r.observe(at(ms), true, 0, &dags), None);
        }
    }

    #[test]
    fn the_dag_that_frees_most_regions_goes_first_then_the_lightest() {
        let mut r = policy();
        let dags = [view(1, Form::Planned, 2, 0.1), view(2, Form::Planned, 4, 0.6), view(3, Form::Planned, 4, 0.3)];
        r.observe(at(0), true, 0, &dags);
        assert_eq!(r.observe(at(10), true, 0, &dags), Some(Switch { dag: DagUid(3), to: Form::Compact }));
    }

    #[test]
    fn at_most_one_switch_per_period_and_each_judged_on_fresh_pressure() {
        let mut r = policy();
        let mut dags = vec![view(1, Form::Planned, 3, 0.2), view(2, Form::Planned, 3, 0.3)];
        r.observe(at(0), true, 0, &dags);
        assert_eq!(r.observe(at(10), true, 0, &dags).map(|s| s.dag), Some(DagUid(1)));
        dags[0].form = Form::Compact;
        let mut next = None;
        for ms in 11..=40 {
            if let Some(s) = r.observe(at(ms), true, 0, &dags) {
                next = Some((ms, s));
                break;
            }
        }
        assert_eq!(next, Some((21, Switch { dag: DagUid(2), to: Form::Compact })), "pressure held again from 11 ms");
    }

    #[test]
    fn not_ready_dags_are_left_alone() {
        let mut r = policy();
        let mut d = view(1, Form::Planned, 3, 0.2);
        d.ready = false;
        r.observe(at(0), true, 0, &[d]);
        assert_eq!(r.observe(at(10), true, 0, &[d]), None);
    }

    #[test]
    fn expands_once_calm_for_a_period_with_room_for_the_planned_chains() {
        let mut r = policy();
        let planned = [view(1, Form::Planned, 3, 0.2)];
        r.observe(at(0), true, 0, &planned);
        assert!(r.observe(at(10), true, 0, &planned).is_some());
        let compact = [view(1, Form::Compact, 3, 0.2)];
        // Pressure ends at 12 ms; calm from 22 ms; but only one unused region until 30 ms.
        r.observe(at(12), true, 0, &compact);
        for ms in 13..30 {
            assert_eq!(r.observe(at(ms), false, 1, &compact), None, "at {ms} ms");
        }
        assert_eq!(r.observe(at(30), false, 2, &compact), Some(Switch { dag: DagUid(1), to: Form::Planned }));
    }

    #[test]
    fn no_oscillation_under_steady_pressure() {
        // The pressure stays whatever the DAG runs as: it compacts once and stays compact.
        let mut r = policy();
        let mut dags = [view(1, Form::Planned, 2, 0.3)];
        let mut switches = 0;
        for ms in 0..200 {
            if let Some(s) = r.observe(at(ms), true, 5, &dags) {
                dags[0].form = s.to;
                switches += 1;
            }
        }
        assert_eq!((switches, dags[0].form), (1, Form::Compact));
    }
}
