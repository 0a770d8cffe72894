//! The pool's membership machines (`snic_core::pool::membership`), several on one virtual
//! clock, over a network that delays, loses and partitions (STYLE.md §6): joining through one
//! seed, a death noticed within the pool's 2 s, a partition that heals by itself, a restarted
//! node that comes back, garbage refused.

use snic_core::pool::{MemberId, Membership, MembershipConfig};
use snic_core::time::Instant;
use snic_sim::pool::{addr, Net};
use std::time::Duration;

const LATENCY: Duration = Duration::from_micros(200);

fn at(secs: f64) -> Instant {
    Instant::from_nanos((secs * 1e9) as u64)
}

fn pool(n: usize, seed: u64) -> Net {
    Net::new(n, MembershipConfig { expected_members: n as u32, ..Default::default() }, LATENCY, seed)
}

#[test]
fn five_nodes_join_through_one_seed_and_a_dead_one_is_noticed_within_two_seconds() {
    let mut net = pool(5, 1);
    net.join_all();
    net.run_until(at(3.0));
    assert!(net.converged());
    for i in 0..5 {
        assert_eq!(net.nodes[i].m.members().count(), 4);
    }
    net.kill(3);
    let died = net.now;
    net.run_until(at(6.0));
    for i in [0, 1, 2, 4] {
        let seen = net.nodes[i].down_at.get(&addr(3)).copied().unwrap_or_else(|| panic!("node {i} never saw node 3 die"));
        assert!(seen.saturating_since(died) <= Duration::from_secs(2), "node {i} saw it after {:?}", seen.saturating_since(died));
        assert_eq!((net.nodes[i].up.len(), net.nodes[i].false_downs), (3, 0), "node {i}: only the dead one is down");
    }
}

#[test]
fn a_node_whose_announcement_is_lost_asks_again() {
    let mut net = pool(3, 2);
    // Node 2 is cut off while it announces itself, then the network heals.
    net.side = vec![0, 0, 1];
    net.join_all();
    net.run_until(at(0.5));
    assert!(net.nodes[2].up.is_empty());
    net.side = vec![0; 3];
    net.run_until(at(3.0));
    assert!(net.converged(), "{:?}", net.nodes.iter().map(|n| n.up.clone()).collect::<Vec<_>>());
}

#[test]
fn a_death_is_noticed_under_loss_and_a_restarted_node_comes_back() {
    let mut net = pool(4, 3);
    net.loss_per_mille = 50;
    net.join_all();
    net.run_until(at(5.0));
    assert!(net.converged());
    net.kill(2);
    net.run_until(at(8.0));
    for i in [0, 1, 3] {
        assert!(net.nodes[i].down_at.contains_key(&addr(2)), "node {i} missed the death");
    }
    net.restart(2, 2);
    net.run_until(at(12.0));
    assert!(net.converged(), "{:?}", net.nodes.iter().map(|n| n.up.clone()).collect::<Vec<_>>());
}

#[test]
fn a_partition_splits_the_pool_and_heals_by_itself() {
    let mut net = pool(5, 4);
    net.join_all();
    net.run_until(at(3.0));
    net.side = vec![0, 0, 1, 1, 1];
    net.run_until(at(8.0));
    for i in 0..5 {
        let want: std::collections::BTreeSet<_> = (0..5).filter(|&j| j != i && net.side[j] == net.side[i]).map(addr).collect();
        assert_eq!(net.nodes[i].up, want, "node {i} sees its side only");
    }
    net.side = vec![0; 5];
    net.run_until(at(16.0));
    assert!(net.converged(), "{:?}", net.nodes.iter().map(|n| n.up.clone()).collect::<Vec<_>>());
}

#[test]
fn garbage_is_refused_with_an_error() {
    let mut m = Membership::new(MemberId { addr: addr(0), gen: 1 }, &MembershipConfig::default(), 1);
    assert!(m.handle_data(Instant::ZERO, &[0xde, 0xad, 0xbe, 0xef]).is_err());
    assert!(m.poll_transmit().is_none());
}
