//! One snapshot of a node of several dispatcher threads (`data_cores`): what status and
//! `/metrics` show is the node, whatever its threads.
//!
//! - **Counters and rates** (packets, bytes, drops by reason, store buffers held, datagrams and
//!   messages, elastic counters, rebuilds) are summed.
//! - **Latency** quantiles are the worst thread's (a quantile of a union is not a sum; the
//!   worst bounds it).
//! - **Fair sharing**: the board runs one DRF for the node, so a tenant's dominant resource and
//!   the fraction of its demand granted are one, read from the thread it offers most to; its
//!   offered rate, measured demand, allocation and ingress limit are each thread's part, summed.
//! - **Resources**: one of each the node has once (the link), each thread's own (its core, its
//!   store) added up.
//! - **Regions** are listed per thread (`thread`); chains by their pool key, instances and load
//!   summed.
//! - **Forwarding table**: MACs learned, the largest of any thread (a MAC is learned on each
//!   thread its flows land on), refusals and ageing summed.
//! - **Health**: the oldest thread's publication, so that one stalled thread shows.

use super::worker::{ChainSnap, EventSnap, ResourceSnap, Snapshot, TenantSnap};

/// Adds per-name values of `from` into `into`, keeping `into`'s order and appending new names.
fn add_named<K: PartialEq + Clone>(into: &mut Vec<(K, u64)>, from: &[(K, u64)]) {
    for (k, v) in from {
        match into.iter_mut().find(|(n, _)| n == k) {
            Some(x) => x.1 += v,
            None => into.push((k.clone(), *v)),
        }
    }
}

fn add_named_f(into: &mut Vec<(String, f64)>, from: &[(String, f64)]) {
    for (k, v) in from {
        match into.iter_mut().find(|(n, _)| n == k) {
            Some(x) => x.1 += v,
            None => into.push((k.clone(), *v)),
        }
    }
}

fn add_tenant(into: &mut TenantSnap, t: &TenantSnap) {
    into.rx_packets += t.rx_packets;
    into.rx_bytes += t.rx_bytes;
    into.tx_packets += t.tx_packets;
    into.tx_bytes += t.tx_bytes;
    into.rx_pps += t.rx_pps;
    into.tx_pps += t.tx_pps;
    add_named(&mut into.drops, &t.drops);
    into.store_buffers += t.store_buffers;
    into.latency_p50_ns = into.latency_p50_ns.max(t.latency_p50_ns);
    into.latency_p99_ns = into.latency_p99_ns.max(t.latency_p99_ns);
    into.fdb.learned = into.fdb.learned.max(t.fdb.learned);
    into.fdb.refused += t.fdb.refused;
    into.fdb.aged += t.fdb.aged;
    let (a, b) = (&mut into.fair, &t.fair);
    if b.offered_pps > a.offered_pps {
        (a.dominant, a.dominant_share, a.fraction) = (b.dominant.clone(), b.dominant_share, b.fraction);
    }
    a.limit_pps = match (a.limit_pps, b.limit_pps) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
    };
    a.limited_epochs = a.limited_epochs.max(b.limited_epochs);
    a.offered_pps += b.offered_pps;
    add_named_f(&mut a.demand, &b.demand);
    add_named_f(&mut a.allocation, &b.allocation);
}

/// The node's snapshot from its threads' (thread 0 first).
pub fn merge(threads: Vec<Snapshot>) -> Snapshot {
    let mut it = threads.into_iter();
    let Some(mut out) = it.next() else { return Snapshot::default() };
    for s in it {
        for t in &s.tenants {
            match out.tenants.iter_mut().find(|x| x.id == t.id) {
                Some(x) => add_tenant(x, t),
                None => out.tenants.push(t.clone()),
            }
        }
        out.regions.extend(s.regions);
        add_named(&mut out.unattributed_drops, &s.unattributed_drops);
        out.latency_p50_ns = out.latency_p50_ns.max(s.latency_p50_ns);
        out.latency_p99_ns = out.latency_p99_ns.max(s.latency_p99_ns);
        out.rebuilds += s.rebuilds;
        out.rx_messages += s.rx_messages;
        out.rx_datagrams += s.rx_datagrams;
        out.rx_via_kernel += s.rx_via_kernel;
        out.tx_via_kernel += s.tx_via_kernel;
        out.tx_joined_writes += s.tx_joined_writes;
        out.tx_joined_datagrams += s.tx_joined_datagrams;
        out.tx_joined_refused += s.tx_joined_refused;
        for r in &s.resources {
            match out.resources.iter_mut().find(|x| x.name == r.name) {
                Some(x) if !x.node_wide => x.capacity += r.capacity,
                Some(_) => {}
                None => out.resources.push(ResourceSnap { ..r.clone() }),
            }
        }
        out.epochs = out.epochs.max(s.epochs);
        add_named(&mut out.elastic.counters, &s.elastic.counters);
        out.elastic.build_us = out.elastic.build_us.max(s.elastic.build_us);
        out.elastic.events.extend(s.elastic.events);
        for c in &s.chains {
            match out.chains.iter_mut().find(|x| x.key == c.key) {
                Some(x) => (x.instances, x.load) = (x.instances + c.instances, x.load + c.load),
                None => out.chains.push(ChainSnap { ..c.clone() }),
            }
        }
        out.published = match (out.published, s.published) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
    }
    out.elastic.events.sort_by(|a: &EventSnap, b: &EventSnap| a.at_ms.total_cmp(&b.at_ms));
    let shown = out.elastic.events.len().saturating_sub(super::worker::EVENTS_SHOWN);
    out.elastic.events.drain(..shown);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::worker::{FairSnap, RegionSnap};
    use std::time::{Duration, Instant};

    fn tenant(id: u16, rx: u64, offered: f64, limit: Option<f64>, p99: u64) -> TenantSnap {
        TenantSnap {
            id,
            rx_packets: rx,
            rx_pps: rx as f64,
            drops: vec![("rate_limit", rx / 10)],
            latency_p99_ns: p99,
            fair: FairSnap {
                dominant: Some(format!("dispatcher{id}")),
                fraction: offered / 1000.0,
                offered_pps: offered,
                limit_pps: limit,
                demand: vec![("ingress".into(), offered)],
                ..FairSnap::default()
            },
            ..TenantSnap::default()
        }
    }

    #[test]
    fn two_threads_add_up_to_one_node() {
        let t0 = Instant::now();
        let resources = |core: f64| {
            vec![
                ResourceSnap { name: "ingress".into(), capacity: 10.0, node_wide: true },
                ResourceSnap { name: "dispatcher".into(), capacity: core, node_wide: false },
            ]
        };
        let region = |thread| RegionSnap { thread, region: 0, ..RegionSnap::default() };
        let a = Snapshot {
            tenants: vec![tenant(1, 100, 300.0, Some(200.0), 5_000)],
            regions: vec![region(0)],
            resources: resources(1.0),
            published: Some(t0 + Duration::from_millis(5)),
            ..Snapshot::default()
        };
        let b = Snapshot {
            tenants: vec![tenant(1, 50, 600.0, None, 9_000), tenant(2, 7, 1.0, None, 1)],
            regions: vec![region(1)],
            resources: resources(1.0),
            published: Some(t0),
            ..Snapshot::default()
        };
        let m = merge(vec![a, b]);
        let one = &m.tenants[0];
        assert_eq!((one.rx_packets, one.drops.clone(), one.latency_p99_ns), (150, vec![("rate_limit", 15)], 9_000));
        assert_eq!(one.fair.offered_pps, 900.0);
        assert_eq!(one.fair.limit_pps, Some(200.0), "a thread without a limit adds none");
        assert_eq!(one.fair.fraction, 0.6, "the fraction of the thread it offers most to");
        assert_eq!(one.fair.demand, vec![("ingress".to_string(), 900.0)]);
        assert_eq!(m.tenants[1].id, 2);
        let caps: Vec<_> = m.resources.iter().map(|r| (r.name.as_str(), r.capacity)).collect();
        assert_eq!(caps, vec![("ingress", 10.0), ("dispatcher", 2.0)], "the link once, the cores added");
        assert_eq!(m.regions.iter().map(|r| r.thread).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(m.published, Some(t0), "the oldest thread's");
    }
}
