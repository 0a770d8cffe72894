//! A node's declared chains and where each is in its life: live, going away, or gone.
//!
//! A chain taken away while the node runs (a control-plane change applied in place) cuts
//! nothing in flight short: it launches no more instances, and once no route, old or new,
//! steps through it and no launch of it is under way, its instances are stopped (they finish
//! what they hold; the driver tears them down with their NTs' state and frees their regions).
//! Once no instance of it is left it is gone, and its id is given to the next chain declared.
//! The driver checks once an epoch ([`ChainLife::to_stop`], [`ChainLife::settle`]).

use crate::ids::ChainId;
use crate::sched::Scheduler;

/// Where a declared chain is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Runs, launches, scales.
    Live,
    /// Taken away: its instances finish what routes still bring them, then stop.
    Retiring,
    /// No instance, no route: the id is free.
    Gone,
}

/// The declared chains' lives, by chain id. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct ChainLife {
    life: Vec<Life>,
    retiring: usize,
}

impl ChainLife {
    /// No chains.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ids declared so far (live, retiring or gone).
    pub fn len(&self) -> usize {
        self.life.len()
    }

    /// True if no chain was ever declared.
    pub fn is_empty(&self) -> bool {
        self.life.is_empty()
    }

    /// The id a new chain should take: a gone chain's, if any (the scheduler must agree to
    /// reuse it), else `None` (a new id, [`ChainLife::declared`]).
    pub fn reusable(&self) -> Option<ChainId> {
        self.life.iter().position(|&l| l == Life::Gone).map(|c| ChainId(c as u16))
    }

    /// Chain `c` is declared (a new id, or a gone one reused): it is live.
    pub fn declared(&mut self, c: ChainId) {
        if self.life.len() <= c.index() {
            self.life.resize(c.index() + 1, Life::Gone);
        }
        self.life[c.index()] = Life::Live;
    }

    /// True while `c` is declared and not being taken away.
    #[inline]
    pub fn is_live(&self, c: ChainId) -> bool {
        self.life.get(c.index()) == Some(&Life::Live)
    }

    /// Chains declared and not being taken away.
    pub fn live_count(&self) -> usize {
        self.life.iter().filter(|&&l| l == Life::Live).count()
    }

    /// True while some chain is going away.
    pub fn retiring(&self) -> bool {
        self.retiring > 0
    }

    /// Takes `c` away; false if it was not live.
    pub fn retire(&mut self, c: ChainId) -> bool {
        match self.life.get_mut(c.index()) {
            Some(l) if *l == Life::Live => {
                *l = Life::Retiring;
                self.retiring += 1;
                true
            }
            _ => false,
        }
    }

    /// The retiring chains whose instances should stop now: no route uses them and no launch
    /// of them is under way (`launching`).
    pub fn to_stop<'a, T: Copy>(
        &'a self,
        sched: &'a Scheduler<T>,
        launching: impl Fn(ChainId) -> bool + 'a,
    ) -> impl Iterator<Item = ChainId> + 'a {
        (0..self.life.len())
            .filter(|&c| self.retiring > 0 && self.life[c] == Life::Retiring)
            .map(|c| ChainId(c as u16))
            .filter(move |&c| !sched.routes_use(c) && !launching(c))
    }

    /// A retiring chain with no route and no instance left is gone; true if `c` just went.
    pub fn settle<T: Copy>(&mut self, c: ChainId, sched: &Scheduler<T>) -> bool {
        if self.life.get(c.index()) != Some(&Life::Retiring) || sched.chain_in_use(c) {
            return false;
        }
        self.life[c.index()] = Life::Gone;
        self.retiring -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::{DagRoute, NtMask, Step};
    use crate::ids::DagUid;
    use crate::sched::SchedConfig;

    #[test]
    fn a_retired_chain_stops_once_unrouted_and_unlaunched_and_its_id_is_reused_once_gone() {
        let mut s: Scheduler<u32> = Scheduler::new(SchedConfig::plain());
        let mut l = ChainLife::new();
        let c = s.add_chain(1);
        l.declared(c);
        let inst = s.add_instance(c, 4).unwrap();
        s.set_dag(DagUid(0), DagRoute::new(vec![Step { chain: c, mask: NtMask::all(1) }]));
        assert!(l.retire(c) && !l.retire(c) && !l.is_live(c) && l.retiring());
        assert_eq!(l.to_stop(&s, |_| false).count(), 0, "a route still uses it");
        s.remove_dag(DagUid(0));
        assert_eq!(l.to_stop(&s, |_| true).count(), 0, "a launch of it is under way");
        assert_eq!(l.to_stop(&s, |_| false).collect::<Vec<_>>(), vec![c]);
        assert!(!l.settle(c, &s), "its instance is still there");
        s.stop_instance(inst).unwrap();
        s.remove_instance(inst).unwrap();
        assert!(l.settle(c, &s) && !l.retiring());
        assert_eq!((l.reusable(), l.live_count()), (Some(c), 0));
        l.declared(c);
        assert!(l.is_live(c) && l.reusable().is_none());
    }
}
