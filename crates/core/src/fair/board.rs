//! One node's fair sharing over several dispatcher threads (`data_cores`). Each thread runs a
//! meter of its own — its tenants' packets, its core, its store, its regions — and closes its
//! epochs on its own clock; at each epoch's end it hands the board its tenants' smoothed demand
//! ([`Board::allocate`], through [`super::Allocate`]). The board keeps every thread's latest and
//! runs DRF once over all of them, on the node's resources: one of each [`Scope::Node`] resource
//! (the link: the threads' uses of it summed), and each thread's own [`Scope::Thread`] resources
//! side by side (thread 0's core is not thread 1's: a tenant whose flows all land on one thread
//! fills that core only). A tenant's grant is one fraction of its whole demand vector, so the
//! thread's part of it — and the limit it sets, `admit` × the tenant's rate on that thread — is
//! the tenant's allocation in proportion to where its packets are: a tenant split over two
//! threads gets its weight, not twice it.
//!
//! The board holds no locks and reads no clock: the driver keeps it behind a mutex and calls it
//! from each thread at that thread's epochs (what another thread reported is at most one of its
//! epochs old). With one thread it allocates exactly what the thread's own [`super::Grants`]
//! would.

use super::{Grant, Grants, Resource, Scope, Wants};
use std::sync::{Arc, Mutex};

/// The node's allocation over its dispatcher threads. See the module docs.
#[derive(Debug, Default)]
pub struct Board {
    threads: Vec<Reported>,
    grants: Grants,
    /// The node's resources of the last allocation: capacity, and for each thread where its
    /// resources sit (scratch).
    capacities: Vec<f64>,
    places: Vec<Vec<usize>>,
    /// Every tenant's demand over the node, its slot by tenant index (`u32::MAX`: none).
    wants: Vec<Wants>,
    slot: Vec<u32>,
    out: Vec<Grant>,
}

/// What a thread reported at its last epoch.
#[derive(Debug, Default)]
struct Reported {
    resources: Vec<Resource>,
    wants: Vec<Wants>,
}

const NONE: u32 = u32::MAX;

impl Board {
    /// A board for `threads` dispatcher threads, numbered from 0.
    pub fn new(threads: usize) -> Self {
        Board { threads: (0..threads).map(|_| Reported::default()).collect(), ..Board::default() }
    }

    /// A board for `threads` threads behind one mutex, and each thread's way to it.
    pub fn shared(threads: usize) -> Vec<OnBoard> {
        let board = Arc::new(Mutex::new(Board::new(threads)));
        (0..threads).map(|thread| OnBoard { board: board.clone(), thread, threads }).collect()
    }

    /// Thread `thread` closed an epoch with `wants` on its `resources`: DRF over every thread's
    /// latest, and `thread`'s part of each of its tenants' grants in `out` (`out[i]` for
    /// `wants[i]`, in the order of `resources`). A thread out of range allocates on its own.
    pub fn allocate(&mut self, thread: usize, resources: &[Resource], wants: &[Wants], out: &mut Vec<Grant>) {
        let Some(me) = self.threads.get_mut(thread) else {
            return super::Allocate::allocate(&mut self.grants, resources, wants, out);
        };
        if me.resources.len() == resources.len() && me.resources.iter().zip(resources).all(|(a, b)| a.name == b.name) {
            me.resources.iter_mut().zip(resources).for_each(|(a, b)| (a.capacity, a.kind, a.scope) = (b.capacity, b.kind, b.scope));
        } else {
            me.resources = resources.to_vec();
        }
        me.wants.truncate(wants.len());
        for (i, w) in wants.iter().enumerate() {
            match me.wants.get_mut(i) {
                // (Field by field: a derived `clone_from` allocates anew, two vectors an epoch.)
                Some(m) => {
                    (m.tenant, m.weight) = (w.tenant, w.weight);
                    m.demand.clear();
                    m.demand.extend_from_slice(&w.demand);
                    m.fixed.clear();
                    m.fixed.extend_from_slice(&w.fixed);
                }
                None => me.wants.push(w.clone()),
            }
        }
        self.lay_out(thread);
        self.sum();
        self.grants.grant(&self.capacities, &self.wants, &mut self.out);
        self.part(thread, out);
    }

    /// Where each thread's resources sit among the node's: the Node-scope ones of `thread`'s
    /// list first (matched by name in the others'), then every thread's Thread-scope ones.
    fn lay_out(&mut self, thread: usize) {
        self.capacities.clear();
        let base = &self.threads[thread].resources;
        self.capacities.extend(base.iter().filter(|r| r.scope == Scope::Node).map(|r| r.capacity));
        // The slot of the Node-scope resource named `name` in `base`'s order.
        let node_slot = |name: &str| base.iter().filter(|r| r.scope == Scope::Node).position(|r| r.name == name);
        self.places.resize_with(self.threads.len(), Vec::new);
        for (t, places) in self.threads.iter().zip(&mut self.places) {
            places.clear();
            for r in &t.resources {
                let at = match r.scope {
                    // (A link this thread does not list: not the node's as `thread` sees it.)
                    Scope::Node => node_slot(&r.name).unwrap_or(usize::MAX),
                    Scope::Thread => {
                        self.capacities.push(r.capacity);
                        self.capacities.len() - 1
                    }
                };
                places.push(at);
            }
        }
    }

    /// Every tenant's demand over the node: its Node-scope use summed over the threads, its use
    /// of each thread's own resources where they sit.
    fn sum(&mut self) {
        let n = self.capacities.len();
        for w in &self.wants {
            if let Some(s) = self.slot.get_mut(w.tenant.index()) {
                *s = NONE;
            }
        }
        let mut used = 0;
        for (t, places) in self.threads.iter().zip(&self.places) {
            for w in &t.wants {
                let k = w.tenant.index();
                if self.slot.len() <= k {
                    self.slot.resize(k + 1, NONE);
                }
                if self.slot[k] == NONE {
                    self.slot[k] = used as u32;
                    if self.wants.len() <= used {
                        self.wants.push(Wants::default());
                    }
                    let s = &mut self.wants[used];
                    (s.tenant, s.weight) = (w.tenant, w.weight);
                    s.demand.clear();
                    s.demand.resize(n, 0.0);
                    s.fixed.clear();
                    s.fixed.resize(n, 0.0);
                    used += 1;
                }
                let s = &mut self.wants[self.slot[k] as usize];
                for ((&at, &d), &f) in places.iter().zip(&w.demand).zip(&w.fixed) {
                    if at < n {
                        s.demand[at] += d;
                        s.fixed[at] += f;
                    }
                }
            }
        }
        self.wants.truncate(used);
    }

    /// `thread`'s part of its tenants' grants: a fraction of the node's for Node-scope
    /// resources (its share of the tenant's demand on them), its own resources' as granted.
    fn part(&self, thread: usize, out: &mut Vec<Grant>) {
        let (me, places) = (&self.threads[thread], &self.places[thread]);
        out.resize_with(me.wants.len(), Grant::default);
        for (w, g) in me.wants.iter().zip(out.iter_mut()) {
            let all = &self.wants[self.slot[w.tenant.index()] as usize];
            let node = &self.out[self.slot[w.tenant.index()] as usize];
            g.amounts.clear();
            for (k, &at) in places.iter().enumerate() {
                let a = match me.resources[k].scope {
                    Scope::Node if at < all.demand.len() && all.demand[at] > 0.0 => node.amounts[at] * w.demand[k] / all.demand[at],
                    Scope::Node => 0.0,
                    Scope::Thread => node.amounts[at],
                };
                g.amounts.push(a);
            }
            // The dominant resource in this thread's terms: itself, or the resource of the same
            // name here when it is another thread's.
            g.dominant = node.dominant.and_then(|d| self.local_index(thread, d));
            (g.dominant_share, g.fraction, g.admit) = (node.dominant_share, node.fraction, node.admit);
        }
    }

    /// The index in `thread`'s resources of the node's resource `d`, or of the resource of its
    /// name there.
    fn local_index(&self, thread: usize, d: usize) -> Option<usize> {
        if let Some(k) = self.places[thread].iter().position(|&at| at == d) {
            return Some(k);
        }
        let (t, k) = self.threads.iter().zip(&self.places).find_map(|(t, p)| p.iter().position(|&at| at == d).map(|k| (t, k)))?;
        let name = &t.resources[k].name;
        self.threads[thread].resources.iter().position(|r| &r.name == name)
    }
}

/// One thread's way to the node's board: what its meter allocates with
/// ([`crate::meter::Meter::share_fairness`]).
#[derive(Debug, Clone)]
pub struct OnBoard {
    /// The node's board, shared by its threads.
    pub board: Arc<Mutex<Board>>,
    /// This thread's number on it.
    pub thread: usize,
    /// The node's threads.
    pub threads: usize,
}

impl OnBoard {
    /// This thread's part of a stateful NT's port range: its block within the node's pool
    /// block (`pool`, or the whole range), so that no two threads allocate the same port.
    pub fn ports(&self, pool: Option<crate::pool::owner::Slots>) -> crate::pool::owner::Slots {
        let p = pool.unwrap_or(crate::pool::owner::Slots { slot: 0, count: 1 });
        let n = self.threads.max(1) as u16;
        // Block s·n + k of count·n is block k of block s split n ways (both start at
        // floor(i·span/count), the same rational).
        crate::pool::owner::Slots { slot: p.slot * n + self.thread as u16, count: p.count * n }
    }
}

impl super::Allocate for OnBoard {
    fn allocate(&mut self, resources: &[Resource], wants: &[Wants], out: &mut Vec<Grant>) {
        // (A thread that panicked holding the board left it consistent: every call rebuilds
        // what it reads.)
        let mut b = self.board.lock().unwrap_or_else(|e| e.into_inner());
        b.allocate(self.thread, resources, wants, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fair::{Allocate, Kind};
    use crate::ids::TenantId;

    fn res(name: &str, capacity: f64, scope: Scope) -> Resource {
        Resource { name: name.into(), kind: Kind::Rate, capacity, scope }
    }

    fn wants(t: u16, demand: &[f64]) -> Wants {
        Wants { tenant: TenantId(t), weight: 1.0, demand: demand.to_vec(), fixed: vec![0.0; demand.len()] }
    }

    /// A link of 100 and a core of 10 per thread.
    fn resources() -> Vec<Resource> {
        vec![res("ingress", 100.0, Scope::Node), res("dispatcher", 10.0, Scope::Thread)]
    }

    #[test]
    fn a_tenant_on_two_threads_gets_its_weight_of_the_link_not_twice_it() {
        let mut board = Board::new(2);
        let r = resources();
        // a sends 80 of link on each thread, b 80 on thread 0 only; cores are not the limit.
        let (mut out0, mut out1) = (Vec::new(), Vec::new());
        board.allocate(1, &r, &[wants(0, &[80.0, 1.0])], &mut out1);
        board.allocate(0, &r, &[wants(0, &[80.0, 1.0]), wants(1, &[80.0, 1.0])], &mut out0);
        board.allocate(1, &r, &[wants(0, &[80.0, 1.0])], &mut out1);
        let a = out0[0].amounts[0] + out1[0].amounts[0];
        let b = out0[1].amounts[0];
        assert!((a - 50.0).abs() < 1e-6 && (b - 50.0).abs() < 1e-6, "link split a {a} b {b}");
        // a's half of the link is split where its packets are, and each thread admits the
        // same share of what a sends there.
        assert!((out0[0].amounts[0] - 25.0).abs() < 1e-6, "{:?}", out0[0]);
        assert!((out0[0].admit - 50.0 / 160.0).abs() < 1e-6 && (out1[0].admit - out0[0].admit).abs() < 1e-12);
        // Each thread on its own would have given a 50 on thread 0 and 80 on thread 1.
        let (mut alone, mut g) = (Vec::new(), Grants::default());
        g.allocate(&r, &[wants(0, &[80.0, 1.0])], &mut alone);
        assert_eq!(alone[0].fraction, 1.0, "alone on thread 1, a is not limited");
    }

    #[test]
    fn each_threads_core_is_its_own() {
        let mut board = Board::new(2);
        let r = resources();
        let (mut out0, mut out1) = (Vec::new(), Vec::new());
        // a and b both want 20 of a core on thread 0; c wants 5 on thread 1.
        board.allocate(1, &r, &[wants(2, &[1.0, 5.0])], &mut out1);
        board.allocate(0, &r, &[wants(0, &[1.0, 20.0]), wants(1, &[1.0, 20.0])], &mut out0);
        board.allocate(1, &r, &[wants(2, &[1.0, 5.0])], &mut out1);
        assert!((out0[0].amounts[1] - 5.0).abs() < 1e-6 && (out0[1].amounts[1] - 5.0).abs() < 1e-6, "{out0:?}");
        assert_eq!(out1[0].fraction, 1.0, "c's core has room: {out1:?}");
        assert_eq!(out0[0].dominant, Some(1), "the dominant resource is named in the thread's terms");
    }

    #[test]
    fn one_thread_allocates_what_its_own_grants_would() {
        let r = resources();
        let w = [wants(0, &[90.0, 6.0]), wants(1, &[30.0, 9.0]), wants(4, &[5.0, 0.5])];
        let (mut board, mut mine, mut theirs) = (Board::new(1), Vec::new(), Vec::new());
        board.allocate(0, &r, &w, &mut mine);
        Grants::default().allocate(&r, &w, &mut theirs);
        assert_eq!(mine, theirs);
    }

    #[test]
    fn a_tenant_gone_from_a_thread_leaves_its_demand_there() {
        let mut board = Board::new(2);
        let r = resources();
        let (mut out0, mut out1) = (Vec::new(), Vec::new());
        board.allocate(1, &r, &[wants(0, &[80.0, 1.0])], &mut out1);
        board.allocate(0, &r, &[wants(1, &[80.0, 1.0])], &mut out0);
        assert!(out0[0].fraction < 1.0, "a's 80 on thread 1 and b's 80 share the link");
        // a stops on thread 1: its next report has no demand there.
        board.allocate(1, &r, &[], &mut out1);
        board.allocate(0, &r, &[wants(1, &[80.0, 1.0])], &mut out0);
        assert_eq!(out0[0].fraction, 1.0, "b alone on the link");
    }
}
