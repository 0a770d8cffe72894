//! The pool's links, as node.yaml gives them (a ring, or any graph), and each node's hop
//! distance to its peers: the pool agent prefers the nearest peer (paper §5, the intermediate
//! topology, where a redirected packet crosses the nodes in between).

use std::collections::{BTreeMap, VecDeque};
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
}
