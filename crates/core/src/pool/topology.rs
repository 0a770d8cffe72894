//! The pool's links, as node.yaml gives them (a ring, or any graph), and each node's hop
//! distance to its peers: the pool agent prefers the nearest peer (paper §5, the intermediate
//! topology, where a redirected packet crosses the nodes in between).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;

/// Hops from `me` to every node the undirected `links` reach (breadth first; `me` excluded).
pub fn hops(me: SocketAddr, links: &[[SocketAddr; 2]]) -> BTreeMap<SocketAddr, u32> {
    let mut adj: BTreeMap<SocketAddr, Vec<SocketAddr>> = BTreeMap::new();
    for &[a, b] in links {
        adj.entry(a).or_default().push(b);
        adj.entry(b).or_default().push(a);
    }
    let mut dist = BTreeMap::from([(me, 0u32)]);
    let mut todo = VecDeque::from([me]);
    while let Some(n) = todo.pop_front() {
        let d = dist[&n];
        for &m in adj.get(&n).into_iter().flatten() {
            if let std::collections::btree_map::Entry::Vacant(e) = dist.entry(m) {
                e.insert(d + 1);
                todo.push_back(m);
            }
        }
    }
    dist.remove(&me);
    dist
}

/// For every node the undirected `links` reach from `me` without crossing a node of `down`,
/// the first node on a shortest path to it (ties: the lowest address first), where that is not
/// the node itself: the pass-through nodes a redirected packet crosses (paper §5, the
/// intermediate topology). A neighbour, or a node the links do not reach, has no entry: the
/// packet goes straight to it.
pub fn next_hops(me: SocketAddr, links: &[[SocketAddr; 2]], down: &BTreeSet<SocketAddr>) -> BTreeMap<SocketAddr, SocketAddr> {
    let mut adj: BTreeMap<SocketAddr, BTreeSet<SocketAddr>> = BTreeMap::new();
    for &[a, b] in links.iter().filter(|[a, b]| !down.contains(a) && !down.contains(b)) {
        adj.entry(a).or_default().insert(b);
        adj.entry(b).or_default().insert(a);
    }
    // Breadth first, neighbours in address order: the first path found to a node is a
    // shortest one, and the lowest-addressed among them at every step.
    let mut first: BTreeMap<SocketAddr, SocketAddr> = BTreeMap::new();
    let mut todo: VecDeque<SocketAddr> = VecDeque::new();
    for &n in adj.get(&me).into_iter().flatten() {
        first.insert(n, n);
        todo.push_back(n);
    }
    while let Some(n) = todo.pop_front() {
        let via = first[&n];
        for &m in adj.get(&n).into_iter().flatten() {
            if m != me && !first.contains_key(&m) {
                first.insert(m, via);
                todo.push_back(m);
            }
        }
    }
    first.retain(|to, via| to != via);
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 7946))
    }

    #[test]
    fn a_ring_of_five_is_one_hop_each_way_and_two_across() {
        let ring: Vec<[SocketAddr; 2]> = (1..=5).map(|i| [a(i), a(i % 5 + 1)]).collect();
        let h = hops(a(1), &ring);
        assert_eq!(h.get(&a(2)), Some(&1));
        assert_eq!(h.get(&a(5)), Some(&1));
        assert_eq!(h.get(&a(3)), Some(&2));
        assert_eq!(h.get(&a(4)), Some(&2));
        assert_eq!(h.len(), 4);
        // A node the links do not reach has no distance.
        assert!(!hops(a(1), &[[a(2), a(3)]]).contains_key(&a(2)));
    }

    #[test]
    fn in_a_ring_of_five_a_packet_crosses_the_neighbour_on_the_shorter_side_and_avoids_a_dead_one() {
        let ring: Vec<[SocketAddr; 2]> = (1..=5).map(|i| [a(i), a(i % 5 + 1)]).collect();
        let none = BTreeSet::new();
        let n = next_hops(a(1), &ring, &none);
        // Neighbours (2, 5) are reached directly; 3 through 2, 4 through 5.
        assert_eq!(n, BTreeMap::from([(a(3), a(2)), (a(4), a(5))]));
        // Node 2 down: 3 is three hops the other way, through 5.
        let n = next_hops(a(1), &ring, &BTreeSet::from([a(2)]));
        assert_eq!(n, BTreeMap::from([(a(3), a(5)), (a(4), a(5))]));
        // A line 1-2-3-4: everything beyond 2 goes through 2; without links, nothing.
        let line = [[a(1), a(2)], [a(2), a(3)], [a(3), a(4)]];
        assert_eq!(next_hops(a(1), &line, &none), BTreeMap::from([(a(3), a(2)), (a(4), a(2))]));
        assert!(next_hops(a(1), &[], &none).is_empty());
        // Ties go to the lowest address: in a square 1-2-4-3-1, 4 is two hops both ways.
        let square = [[a(1), a(2)], [a(2), a(4)], [a(4), a(3)], [a(3), a(1)]];
        assert_eq!(next_hops(a(1), &square, &none).get(&a(4)), Some(&a(2)));
    }
}
