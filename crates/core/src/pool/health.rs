//! Which nodes of a pool behind a switch the ToR should send to (docs/pool.md, "Node failure
//! and return"): the health checker's policy. Its driver (`snic tor`) probes each node and
//! edits the ToR's resilient next-hop group with what this returns.
//!
//! A node is taken out after `down_after` failed probes in a row and put back after
//! `up_after` good ones in a row (a node that answers one probe in three stays out: no
//! flapping). The group is never emptied: with every node down, the last group stays (the
//! switch has nowhere better to send to).

/// The checker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// Failed probes in a row that take a node out.
    pub down_after: u32,
    /// Good probes in a row that put it back.
    pub up_after: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig { down_after: 3, up_after: 3 }
    }
}

/// A change of one node's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The node (by its next-hop id) is out of the group.
    Down(u32),
    /// It is back in.
    Up(u32),
}

#[derive(Debug, Clone)]
struct Member {
    id: u32,
    up: bool,
    /// Probes in a row that disagree with `up`.
    streak: u32,
}

/// The nodes' states. See the module docs.
#[derive(Debug, Clone)]
pub struct Health {
    cfg: HealthConfig,
    members: Vec<Member>,
}

impl Health {
    /// Nodes by their next-hop ids, all in the group to begin with (as the operator set it up).
    pub fn new(ids: impl IntoIterator<Item = u32>, cfg: HealthConfig) -> Self {
        Health { cfg, members: ids.into_iter().map(|id| Member { id, up: true, streak: 0 }).collect() }
    }

    /// The result of a probe of member `i` (in the order given): the change it makes, if any.
    pub fn handle_probe(&mut self, i: usize, ok: bool) -> Option<Change> {
        let m = self.members.get_mut(i)?;
        if ok == m.up {
            m.streak = 0;
            return None;
        }
        m.streak += 1;
        let need = if m.up { self.cfg.down_after } else { self.cfg.up_after };
        if m.streak < need.max(1) {
            return None;
        }
        m.up = ok;
        m.streak = 0;
        Some(if ok { Change::Up(m.id) } else { Change::Down(m.id) })
    }

    /// The next-hop ids the group should hold: the members up, or `None` if none is (keep
    /// the group as it is).
    pub fn group(&self) -> Option<Vec<u32>> {
        let up: Vec<u32> = self.members.iter().filter(|m| m.up).map(|m| m.id).collect();
        (!up.is_empty()).then_some(up)
    }

    /// True if member `i` is in the group.
    pub fn is_up(&self, i: usize) -> bool {
        self.members.get(i).is_some_and(|m| m.up)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_goes_out_after_three_misses_and_back_after_three_answers() {
        let mut h = Health::new([1, 2, 3], HealthConfig::default());
        assert_eq!(h.group(), Some(vec![1, 2, 3]));
        assert_eq!(h.handle_probe(1, false), None);
        assert_eq!(h.handle_probe(1, false), None);
        assert_eq!(h.handle_probe(1, false), Some(Change::Down(2)));
        assert_eq!(h.group(), Some(vec![1, 3]));
        assert_eq!(h.handle_probe(1, false), None, "already out");
        assert_eq!(h.handle_probe(1, true), None);
        assert_eq!(h.handle_probe(1, true), None);
        assert_eq!(h.handle_probe(1, true), Some(Change::Up(2)));
        assert_eq!(h.group(), Some(vec![1, 2, 3]));
    }

    #[test]
    fn a_flapping_node_stays_out_and_the_group_is_never_emptied() {
        let mut h = Health::new([1, 2], HealthConfig { down_after: 2, up_after: 3 });
        for _ in 0..2 {
            h.handle_probe(0, false);
        }
        assert!(!h.is_up(0));
        // It answers two probes in three: never three in a row.
        for k in 0..30 {
            assert_eq!(h.handle_probe(0, k % 3 != 2), None);
        }
        assert_eq!(h.group(), Some(vec![2]));
        h.handle_probe(1, false);
        assert_eq!(h.handle_probe(1, false), Some(Change::Down(2)));
        assert_eq!(h.group(), None, "every node down: the group stays as it was");
        assert_eq!(h.handle_probe(7, true), None, "no such member");
    }
}
