//! NT-level parallelism (paper 000 §4.2): which NTs of a DAG may run on one packet at the same
//! time. Two NTs may if no path of the DAG orders them and neither writes what the other reads
//! or writes ([`snic_nt::Access`]), and at most one of a stage writes the packet's bytes. [`stages`] groups a DAG's NTs into stages, in order: the NTs
//! of a stage run in parallel on copies of the descriptor and join before the next stage (the
//! paper's synchronization buffer). Executing stages is the data plane's; this is the inference.

use crate::manifest::DagSpec;
use crate::plan::topo_order;
use snic_nt::Access;

/// Two NTs cannot share a stage if they conflict, or if both write the packet's bytes (headers
/// or payload): a join keeps one branch's bytes.
fn clash(a: Access, b: Access) -> bool {
    let bytes = Access::HEADERS | Access::PAYLOAD;
    a.conflicts(b) || (a.writes & bytes != 0 && b.writes & bytes != 0)
}

/// The DAG's NTs in stages (each a list of NT names, parallel within a stage), or `None` if
/// the DAG has a cycle or names an NT `access` does not know.
pub fn stages(d: &DagSpec, access: impl Fn(&str) -> Option<Access>) -> Option<Vec<Vec<String>>> {
    let order = topo_order(d)?;
    let n = order.len();
    let at = |name: &str| order.iter().position(|x| *x == name);
    // reach[i][j]: a path leads from order[i] to order[j]. Without edges, `nodes` is a sequence.
    let mut reach = vec![vec![false; n]; n];
    match &d.edges {
        Some(edges) => {
            for [a, b] in edges {
                reach[at(a)?][at(b)?] = true;
            }
        }
        None => (1..n).for_each(|i| reach[i - 1][i] = true),
    }
    // Transitive closure (Warshall).
    for k in 0..n {
        let via = reach[k].clone();
        for row in reach.iter_mut().filter(|r| r[k]) {
            for (x, &y) in row.iter_mut().zip(&via) {
                *x |= y;
            }
        }
    }
    let acc: Vec<Access> = order.iter().map(|x| access(x)).collect::<Option<_>>()?;
    // In topological order, each NT goes to the earliest stage after all its predecessors'
    // whose NTs it does not conflict with (list scheduling).
    let mut stage_of = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = Vec::new();
    for j in 0..n {
        let after = (0..j).filter(|&i| reach[i][j]).map(|i| stage_of[i] + 1).max().unwrap_or(0);
        let s = (after..out.len()).find(|&s| out[s].iter().all(|&i| !clash(acc[i], acc[j]))).unwrap_or(out.len());
        if s == out.len() {
            out.push(Vec::new());
        }
        out[s].push(j);
        stage_of[j] = s;
    }
    Some(out.into_iter().map(|s| s.into_iter().map(|i| order[i].to_string()).collect()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_nt::NtSpec;

    fn dag(nodes: &[&str], edges: Option<&[[&str; 2]]>) -> DagSpec {
        DagSpec {
            tenant: "t".into(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            edges: edges.map(|e| e.iter().map(|[a, b]| [a.to_string(), b.to_string()]).collect()),
            endpoint_fallback: false,
            parallel: false,
        }
    }

    fn kinds(name: &str) -> Option<Access> {
        let spec = match name {
            n if n.starts_with("fw") => NtSpec::Firewall(Default::default()),
            n if n.starts_with("nat") => NtSpec::Nat(Default::default()),
            n if n.starts_with("aes") => return Some(Access { reads: 3, writes: 3 }),
            n if n.starts_with("count") => NtSpec::Counter,
            n if n.starts_with("vni") => NtSpec::VniMap { map: vec![], default: None },
            _ => return None,
        };
        Some(spec.access())
    }

    #[test]
    fn independent_readers_run_together_and_writers_do_not() {
        // The paper's Fig. 7 user1: NT1 → NT2, NT3 unordered with both.
        let d = dag(&["fw1", "count2", "count3"], Some(&[["fw1", "count2"]]));
        assert_eq!(stages(&d, kinds).unwrap(), vec![vec!["fw1", "count3"], vec!["count2"]]);
        // Without edges the nodes are a sequence: nothing in parallel.
        let d = dag(&["fw1", "count2"], None);
        assert_eq!(stages(&d, kinds).unwrap(), vec![vec!["fw1"], vec!["count2"]]);
        // A NAT writes the headers a firewall reads: unordered, yet not together.
        let d = dag(&["fw1", "nat1"], Some(&[]));
        assert_eq!(stages(&d, kinds).unwrap(), vec![vec!["fw1"], vec!["nat1"]]);
        // A VNI map touches nothing the firewall does.
        let d = dag(&["fw1", "vni1"], Some(&[]));
        assert_eq!(stages(&d, kinds).unwrap(), vec![vec!["fw1", "vni1"]]);
    }

    #[test]
    fn stages_respect_every_path_and_the_order_is_a_topological_one() {
        // fw → nat → aes, with a counter and a VNI map hanging off the firewall.
        let d =
            dag(&["fw1", "nat1", "aes1", "count1", "vni1"], Some(&[["fw1", "nat1"], ["nat1", "aes1"], ["fw1", "count1"], ["fw1", "vni1"]]));
        let s = stages(&d, kinds).unwrap();
        let stage = |n: &str| s.iter().position(|st| st.iter().any(|x| x == n)).unwrap();
        for [a, b] in [["fw1", "nat1"], ["nat1", "aes1"], ["fw1", "count1"], ["fw1", "vni1"]] {
            assert!(stage(a) < stage(b), "{a} before {b}: {s:?}");
        }
        // The VNI map touches nothing the NAT does: beside it. The counter reads the headers the
        // NAT and the encryptor write: after both.
        assert_eq!(stage("vni1"), stage("nat1"), "{s:?}");
        assert!(stage("count1") > stage("aes1"), "{s:?}");
    }

    #[test]
    fn two_writers_of_the_packet_bytes_never_share_a_stage() {
        // A header writer and a payload-only writer touch different bytes, but a join keeps one
        // branch's bytes: they run one after the other.
        let payload_writer = |n: &str| match n {
            "pw" => Some(Access { reads: Access::PAYLOAD, writes: Access::PAYLOAD }),
            n => kinds(n),
        };
        let d = dag(&["nat1", "pw"], Some(&[]));
        assert_eq!(stages(&d, payload_writer).unwrap(), vec![vec!["nat1"], vec!["pw"]]);
    }

    #[test]
    fn unknown_nts_and_cycles_give_none() {
        assert!(stages(&dag(&["fw1", "mystery"], None), kinds).is_none());
        assert!(stages(&dag(&["fw1", "count1"], Some(&[["fw1", "count1"], ["count1", "fw1"]])), kinds).is_none());
    }
}
