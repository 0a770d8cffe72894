//! `/metrics`: Prometheus text from the data plane's last snapshot (published every 250 ms), so a
//! scrape never touches the packet path.

use super::api::Shared;
use axum::extract::State as AxState;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};
use snic_control::auth::Principal;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

type Labels = Vec<(String, String)>;

/// A labelled metric family, registered.
fn family<M: Default>(reg: &mut Registry, name: &str, help: &str) -> Family<Labels, M>
where
    Family<Labels, M>: Metric + Clone,
{
    let f = Family::<Labels, M>::default();
    reg.register(name, help, f.clone());
    f
}

type FGauge = Gauge<f64, AtomicU64>;

fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The handler.
pub async fn metrics(AxState(shared): AxState<Arc<Shared>>, Extension(who): Extension<Principal>) -> Response {
    let c = shared.lock();
    let snap = c.dp.snapshot();
    let mut reg = Registry::default();
    let rx_p = family::<Counter>(&mut reg, "snic_tenant_rx_packets", "Packets received per tenant");
    let rx_b = family::<Counter>(&mut reg, "snic_tenant_rx_bytes", "VXLAN bytes received per tenant");
    let tx_p = family::<Counter>(&mut reg, "snic_tenant_tx_packets", "Packets transmitted per tenant");
    let tx_b = family::<Counter>(&mut reg, "snic_tenant_tx_bytes", "VXLAN bytes transmitted per tenant");
    let drops = family::<Counter>(&mut reg, "snic_tenant_drops", "Drops per tenant and reason");
    let store = family::<Gauge>(&mut reg, "snic_tenant_store_buffers", "Packet-store buffers held per tenant");
    let unattr = family::<Counter>(&mut reg, "snic_unattributed_drops", "Drops before a tenant was known, per reason");
    let elastic = family::<Counter>(&mut reg, "snic_elastic_events", "Elastic NT events since start: launches, resumes (victim hits), context switches, scale outs and ins, deschedules, packets sent for the endpoint, region shortfalls, DAG chain switches, region moves, chains placed on peers (remote launches), remote launches refused, chains moved back, chains that spilled a share of their new flows to a peer");
    let queue = family::<Gauge>(&mut reg, "snic_region_queue_depth", "Packets waiting per region");
    let credits = family::<Gauge>(&mut reg, "snic_region_credits", "Free credits per region");
    let region_p = family::<Counter>(&mut reg, "snic_region_packets", "Packets run per region");
    let nt_p = family::<Counter>(&mut reg, "snic_nt_packets", "Packets processed per NT (skipped packets not counted)");
    let nt_d = family::<Counter>(&mut reg, "snic_nt_drops", "Packets dropped per NT");
    let nt_c =
        family::<Counter>(&mut reg, "snic_nt_counter", "An NT's own counters (a cache's hits, a replication's timeouts; docs/kv.md)");
    let lat = family::<Gauge>(&mut reg, "snic_latency_ns", "Receive-to-transmit latency quantiles");
    let cap =
        family::<FGauge>(&mut reg, "snic_resource_capacity", "Capacity of each resource fair sharing divides (docs/fairness.md for units)");
    let dshare = family::<FGauge>(&mut reg, "snic_tenant_dominant_share", "Granted share of the tenant's dominant resource (label: which)");
    let frac = family::<FGauge>(&mut reg, "snic_tenant_fair_fraction", "Fraction of the tenant's measured demand granted by weighted DRF");
    let limit = family::<FGauge>(&mut reg, "snic_tenant_ingress_limit_pps", "Ingress limit in packets/s (absent when not limited)");
    let limited = family::<Counter>(&mut reg, "snic_tenant_limited_epochs", "Fair-sharing epochs that ended with the tenant limited");
    let demand = family::<FGauge>(
        &mut reg,
        "snic_tenant_demand",
        "Measured demand per tenant and resource, per second (store: buffers), scaled down whole to at most each resource's capacity",
    );
    let tlat = family::<Gauge>(&mut reg, "snic_tenant_latency_ns", "Receive-to-transmit latency quantiles per tenant (sampled)");
    let alloc = family::<FGauge>(&mut reg, "snic_tenant_allocation", "DRF allocation per tenant and resource, same units as the demand");
    let fdb = family::<Gauge>(
        &mut reg,
        "snic_tenant_fdb_macs",
        "MACs the node holds learned per tenant (kind=learned) and its bound (kind=bound)",
    );
    let fdb_n = family::<Counter>(
        &mut reg,
        "snic_tenant_fdb_events",
        "Per tenant: new MACs not learned at its bound (event=refused) and MACs aged out (event=aged)",
    );
    let api_lim = family::<Counter>(&mut reg, "snic_tenant_api_limited", "API requests refused (429) per tenant for its rate");
    let up = Gauge::<i64>::default();
    reg.register("snic_dataplane_up", "Whether the data plane publishes its figures (0 once it has not for 2 s)", up.clone());
    up.set(snap.health(std::time::Instant::now()).0 as i64);
    for t in &c.plan.tenants {
        let Some(s) = snap.tenants.iter().find(|s| s.id == t.id.0) else { continue };
        let tl = l(&[("tenant", &t.name)]);
        rx_p.get_or_create(&tl).inc_by(s.rx_packets);
        rx_b.get_or_create(&tl).inc_by(s.rx_bytes);
        tx_p.get_or_create(&tl).inc_by(s.tx_packets);
        tx_b.get_or_create(&tl).inc_by(s.tx_bytes);
        store.get_or_create(&tl).set(s.store_buffers as i64);
        for (reason, n) in &s.drops {
            drops.get_or_create(&l(&[("tenant", &t.name), ("reason", reason)])).inc_by(*n);
        }
        tlat.get_or_create(&l(&[("tenant", &t.name), ("quantile", "0.5")])).set(s.latency_p50_ns as i64);
        tlat.get_or_create(&l(&[("tenant", &t.name), ("quantile", "0.99")])).set(s.latency_p99_ns as i64);
        fdb.get_or_create(&l(&[("tenant", &t.name), ("kind", "learned")])).set(s.fdb.learned.into());
        fdb.get_or_create(&l(&[("tenant", &t.name), ("kind", "bound")])).set(s.fdb.bound.into());
        fdb_n.get_or_create(&l(&[("tenant", &t.name), ("event", "refused")])).inc_by(s.fdb.refused);
        fdb_n.get_or_create(&l(&[("tenant", &t.name), ("event", "aged")])).inc_by(s.fdb.aged);
        let f = &s.fair;
        dshare.get_or_create(&l(&[("tenant", &t.name), ("resource", f.dominant.as_deref().unwrap_or(""))])).set(f.dominant_share);
        frac.get_or_create(&tl).set(f.fraction);
        if let Some(p) = f.limit_pps {
            limit.get_or_create(&tl).set(p);
        }
        limited.get_or_create(&tl).inc_by(f.limited_epochs);
        for ((r, d), (_, a)) in f.demand.iter().zip(&f.allocation) {
            let rl = l(&[("tenant", &t.name), ("resource", r)]);
            demand.get_or_create(&rl).set(*d);
            alloc.get_or_create(&rl).set(*a);
        }
    }
    for (t, n) in shared.api_limited() {
        api_lim.get_or_create(&l(&[("tenant", &t)])).inc_by(n);
    }
    for r in &snap.resources {
        cap.get_or_create(&l(&[("resource", &r.name)])).set(r.capacity);
    }
    for (reason, n) in &snap.unattributed_drops {
        unattr.get_or_create(&l(&[("reason", reason)])).inc_by(*n);
    }
    // A node of several dispatcher threads numbers regions per thread: its series say which.
    let threads = snap.regions.iter().any(|r| r.thread > 0);
    for r in &snap.regions {
        let (region, thread) = (r.region.to_string(), r.thread.to_string());
        let on = |labels: &[(&str, &str)]| {
            let mut v = labels.to_vec();
            if threads {
                v.push(("thread", thread.as_str()));
            }
            l(&v)
        };
        let rl = on(&[("region", &region), ("chain", &r.chain.join(","))]);
        queue.get_or_create(&rl).set(r.queued as i64);
        credits.get_or_create(&rl).set(r.credits as i64);
        region_p.get_or_create(&rl).inc_by(r.packets);
        for (nt, p, d) in &r.nts {
            let nl = on(&[("nt", nt), ("region", &region)]);
            nt_p.get_or_create(&nl).inc_by(*p);
            nt_d.get_or_create(&nl).inc_by(*d);
        }
        for (nt, counter, v) in &r.counters {
            nt_c.get_or_create(&on(&[("nt", nt), ("region", &region), ("counter", counter)])).inc_by(*v);
        }
    }
    for (event, n) in &snap.elastic.counters {
        elastic.get_or_create(&l(&[("event", event)])).inc_by(*n);
    }
    if let Some(p) = c.pool.as_ref().map(|p| p.snap()) {
        let members = Gauge::<i64>::default();
        reg.register("snic_pool_members", "Pool members this node sees up (itself excluded)", members.clone());
        members.set(p.members.len() as i64);
        let dg = family::<Counter>(&mut reg, "snic_pool_datagrams", "Pool datagrams by direction, and those dropped by reason");
        dg.get_or_create(&l(&[("direction", "in")])).inc_by(p.datagrams_in);
        dg.get_or_create(&l(&[("direction", "out")])).inc_by(p.datagrams_out);
        for (reason, n) in [
            ("malformed", p.refused_malformed),
            ("unauthenticated", p.refused_unauthenticated),
            ("replayed", p.refused_replayed),
            ("version", p.refused_version),
            ("invalid", p.refused_invalid),
        ] {
            dg.get_or_create(&l(&[("direction", "dropped"), ("reason", reason)])).inc_by(n);
        }
        let free = family::<Gauge>(&mut reg, "snic_pool_member_free_regions", "Free regions per member, from its last load report");
        let mem = family::<Gauge>(
            &mut reg,
            "snic_pool_member_mem_free_mib",
            "Free packet-store memory per member, MiB, from its last load report",
        );
        let age = family::<Gauge>(&mut reg, "snic_pool_member_report_age_ms", "Age of each member's last load report, ms");
        for m in &p.members {
            let ml = l(&[("member", &m.addr)]);
            if let Some(f) = m.free_regions {
                free.get_or_create(&ml).set(f.into());
            }
            if let Some(f) = m.mem_free_mib {
                mem.get_or_create(&ml).set(f.into());
            }
            if let Some(a) = m.report_age_ms {
                age.get_or_create(&ml).set(a as i64);
            }
        }
    }
    let pass = family::<Counter>(
        &mut reg,
        "snic_pass_through",
        "Redirected packets this node passed on toward the node that runs them, and their bytes",
    );
    pass.get_or_create(&l(&[("unit", "packets")])).inc_by(snap.pass_through_packets);
    pass.get_or_create(&l(&[("unit", "bytes")])).inc_by(snap.pass_through_bytes);
    let kernel = family::<Counter>(
        &mut reg,
        "snic_via_kernel_packets",
        "AF_XDP: packets received through the kernel's stack (outer fragments it reassembled) and sent through it (next hop not yet resolved)",
    );
    kernel.get_or_create(&l(&[("direction", "received")])).inc_by(snap.rx_via_kernel);
    kernel.get_or_create(&l(&[("direction", "sent")])).inc_by(snap.tx_via_kernel);
    let joined = family::<Counter>(
        &mut reg,
        "snic_tx_joined",
        "egress_tap: runs of one TCP flow sent joined into one super-packet (writes), the datagrams they carried, and joined runs the kernel refused (sent as datagrams instead)",
    );
    joined.get_or_create(&l(&[("unit", "writes")])).inc_by(snap.tx_joined_writes);
    joined.get_or_create(&l(&[("unit", "datagrams")])).inc_by(snap.tx_joined_datagrams);
    joined.get_or_create(&l(&[("unit", "refused")])).inc_by(snap.tx_joined_refused);
    if let Some(o) = &snap.owners {
        let own = family::<Counter>(
            &mut reg,
            "snic_owner_packets",
            "Behind a switch: packets sent to the node holding their NT state, and received as their owner",
        );
        own.get_or_create(&l(&[("direction", "forwarded")])).inc_by(o.forwarded);
        own.get_or_create(&l(&[("direction", "received")])).inc_by(o.received);
    }
    lat.get_or_create(&l(&[("quantile", "0.5")])).set(snap.latency_p50_ns as i64);
    lat.get_or_create(&l(&[("quantile", "0.99")])).set(snap.latency_p99_ns as i64);
    let mut out = String::new();
    if encode(&mut out, &reg).is_err() {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    if let Principal::Tenant(me) = &who {
        // A tenant's credential reads its own series only: those labelled with it or with one of
        // its NTs (the families' descriptions stay).
        // Resources named after NTs show only for its own NTs (a shared chain's other NTs are
        // another tenant's business).
        let (mine, others) = super::api::nts_of(&c.state, me);
        let tenant = format!("tenant=\"{me}\"");
        // A label's value (`{key="v"` or `,key="v"`: `nt=` is also the end of `tenant=`).
        let label = |line: &str, key: &str| {
            let at = [format!("{{{key}=\""), format!(",{key}=\"")].iter().find_map(|k| line.find(k.as_str()).map(|i| i + k.len()))?;
            line[at..].split('"').next().map(str::to_string)
        };
        let shown = |line: &str| {
            if line.starts_with('#') {
                return true;
            }
            if let Some(nt) = label(line, "nt") {
                return mine.contains(&nt.as_str());
            }
            line.contains(&tenant) && label(line, "resource").is_none_or(|r| super::api::resource_shown(&others, &r))
        };
        out = out.lines().filter(|l| shown(l)).map(|l| format!("{l}\n")).collect();
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out).into_response()
}
