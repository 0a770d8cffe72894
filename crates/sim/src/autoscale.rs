//! The `autoscale` experiment (paper Fig. 12): performance slowdown against OpEx for the ways
//! of provisioning a rack's NT capacity, on the same workload, at flow granularity.
//!
//! **Model.** Time runs in bins. Each endpoint sends bytes per bin ([`crate::workload`]); its
//! traffic needs one NT whose instance (a region) serves `instance_gbps`. A *server* (an
//! endpoint's own NIC, or the rack's pool) has a capacity per bin and a FIFO fluid queue bounded
//! by `buffer_ms` of that capacity (bytes beyond it are dropped). Within a bin bytes arrive
//! evenly and wait for the backlog they find, then pay their packet's service at an instance
//! ([`crate::fluid`]). Slowdown is a scheme's mean delay over bytes divided by no
//! disaggregation's.
//!
//! **Schemes.** `no-disaggregation`: each endpoint has its own instances, enough for its own
//! peak bin. `multi-host-nic`: the same capacity in one rack device, each endpoint on its fixed
//! sub-link (the sum of peaks; no sharing). `static-max`: the rack's pool with enough instances
//! for the rack's peak bin; `static-avg`: for its average. `snic`: the rack's pool scaled by
//! `snic-core`'s elasticity policy (auto-scaler and launcher) — the daemon's code — with the
//! scenario's `[node.elastic]` (launches taking `launch_delay_ms`), descheduled instances kept as victims; `as-instant`: the instances the load
//! needs, every bin, at no cost (the unrealistic bound).
//!
//! **Costs.** CapEx: instances provisioned (for `snic`, the regions it may use). OpEx:
//! instance-time of instances actually serving (paper §7.2: only regions that are accessed
//! count), relative to static-max.

use crate::fluid::{Delays, Server};
use crate::workload::{Spikes, Workload};
use serde::{Deserialize, Serialize};
use snic_core::elastic::{Act, ElasticConfig, Elasticity};
use snic_core::ids::ChainId;
use snic_core::launcher::RegionState;
use snic_core::time::Instant;
use std::time::Duration;

/// The scenario's `[autoscale]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleSpec {
    /// Throughput of one NT instance, Gbit/s.
    pub instance_gbps: f64,
    /// Regions of the rack's pool (default: static-max's instances).
    #[serde(default)]
    pub regions: Option<usize>,
    /// Queue bound, ms of a server's capacity.
    #[serde(default = "buffer")]
    pub buffer_ms: f64,
    /// Spike correlations to compare (each a variant of the scenario's workload).
    #[serde(default)]
    pub correlations: Vec<f64>,
    /// The rest of a byte's way with no disaggregation, µs (host stacks, wire, switch; the NT
    /// stage's queueing comes on top): the base of `e2e_slowdown`.
    #[serde(default = "path_us")]
    pub path_us: f64,
    /// What reaching the rack's pool adds to that way, µs (the detour to a shared NIC pool;
    /// multi-host NICs and own NICs pay none).
    #[serde(default = "pool_hop_us")]
    pub pool_hop_us: f64,
    /// The packet the bytes travel in, bytes: its service at one instance is every scheme's
    /// latency without queueing (default 1500).
    #[serde(default = "crate::fluid::packet_bytes")]
    pub packet_bytes: f64,
}

/// Default rest of the way: a round trip within a rack.
pub(crate) fn path_us() -> f64 {
    10.0
}

/// Default detour to the rack's pool: one more switch traversal each way.
pub(crate) fn pool_hop_us() -> f64 {
    2.0
}

/// Default overload threshold per instance (the node's).
/// Default queue bound, ms of a server's capacity.
pub(crate) fn buffer() -> f64 {
    10.0
}

/// One scheme's figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SchemeFigures {
    /// The scheme.
    pub scheme: &'static str,
    /// The spike correlation of the workload variant.
    pub correlation: f64,
    /// Mean delay over bytes ÷ no disaggregation's (the NT stage's queueing alone).
    pub slowdown: f64,
    /// End to end: (`path_us` + the pool's detour + mean delay) ÷ (`path_us` + no
    /// disaggregation's mean delay).
    pub e2e_slowdown: f64,
    /// Mean delay over bytes, ms.
    pub mean_delay_ms: f64,
    /// Median delay over bytes, ms.
    pub p50_delay_ms: f64,
    /// 99th percentile of delay over bytes, ms.
    pub p99_delay_ms: f64,
    /// Bytes dropped at a full queue, fraction of bytes offered.
    pub dropped: f64,
    /// Instances provisioned.
    pub capex_instances: usize,
    /// Instance-seconds of instances serving traffic.
    pub opex_instance_s: f64,
    /// `opex_instance_s` ÷ static-max's.
    pub opex_vs_static_max: f64,
    /// Scale events (snic only).
    pub scale_events: u64,
}

/// Where bins come from: a stored series (request granularity) or generators (flow
/// granularity), replayed identically on every pass.
pub enum Bins<'a> {
    /// `load[endpoint][bin]`.
    Series(&'a [Vec<f64>]),
    /// Flow generators of a workload, rebuilt from the seed for each pass.
    Flow {
        /// The workload.
        workload: &'a Workload,
        /// Its seed.
        seed: u64,
    },
}

impl Bins<'_> {
    /// Calls `f(bin, arrivals per endpoint)` for every bin.
    fn each(&self, endpoints: usize, bins: usize, bin_s: f64, mut f: impl FnMut(usize, &[f64])) {
        let mut row = vec![0.0; endpoints];
        match self {
            Bins::Series(load) => {
                for b in 0..bins {
                    for (x, s) in row.iter_mut().zip(load.iter()) {
                        *x = s.get(b).copied().unwrap_or(0.0);
                    }
                    f(b, &row);
                }
            }
            Bins::Flow { workload, seed } => {
                let (mut gens, mut shared) = workload.flows(*seed, endpoints, bin_s);
                for b in 0..bins {
                    crate::workload::advance(&mut shared, b, bin_s);
                    for (x, g) in row.iter_mut().zip(gens.iter_mut()) {
                        *x = g.next(shared.as_ref());
                    }
                    f(b, &row);
                }
            }
        }
    }
}

impl AutoscaleSpec {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), String> {
        use crate::{non_negative as non_neg, positive as pos};
        if !pos(self.instance_gbps) || !pos(self.buffer_ms) {
            return Err("autoscale: instance_gbps and buffer_ms must be positive".into());
        }
        if self.correlations.iter().any(|c| !(0.0..=1.0).contains(c)) {
            return Err("autoscale.correlations must lie in [0, 1]".into());
        }
        if self.regions == Some(0) {
            return Err("autoscale.regions must be at least 1".into());
        }
        if !non_neg(self.path_us) || !non_neg(self.pool_hop_us) {
            return Err("autoscale: path_us and pool_hop_us must be zero or more".into());
        }
        if !pos(self.packet_bytes) {
            return Err("autoscale.packet_bytes must be positive".into());
        }
        Ok(())
    }

    /// A packet's service at one instance, ms.
    fn service_ms(&self) -> f64 {
        crate::fluid::service_ms(self.packet_bytes, self.instance_gbps)
    }

    /// Runs every scheme on each correlation variant of `workload` (`racks` racks of
    /// `per_rack` endpoints, each rack with its own pool whose `snic` scheme follows `elastic`,
    /// the scenario's `[node.elastic]`; `bins` bins of `bin_ms`), at request
    /// granularity (`flow` false: every request drawn) or flow granularity. `progress(done,
    /// total)` is called about every 1% of the run.
    #[allow(clippy::too_many_arguments)] // the run's dimensions, each one number
    pub fn run(
        &self,
        workload: &Workload,
        elastic: &ElasticConfig,
        seed: u64,
        racks: usize,
        per_rack: usize,
        bins: usize,
        bin_ms: f64,
        flow: bool,
        mut progress: impl FnMut(usize, usize),
    ) -> Vec<SchemeFigures> {
        let variants: Vec<Workload> = if self.correlations.is_empty() {
            vec![workload.clone()]
        } else {
            self.correlations
                .iter()
                .map(|&c| match workload {
                    Workload::Etc { rate_scale, spikes } => {
                        Workload::Etc { rate_scale: *rate_scale, spikes: Spikes { correlation: c, ..*spikes } }
                    }
                    w => w.clone(),
                })
                .collect()
        };
        let mut out = Vec::new();
        // Two passes over the bins per variant.
        let total = variants.len() * 2 * bins;
        let step = (bins / 100).max(1);
        let endpoints = racks * per_rack;
        for (k, w) in variants.iter().enumerate() {
            let corr = match w {
                Workload::Etc { spikes, .. } => spikes.correlation,
                _ => 0.0,
            };
            let mut tick = |pass: usize, b: usize| {
                if b.is_multiple_of(step) {
                    progress((2 * k + pass) * bins + b, total);
                }
            };
            let shape = Shape { racks, per_rack, bins, bin_ms, elastic: *elastic };
            if flow {
                out.extend(self.schemes(&Bins::Flow { workload: w, seed }, shape, corr, &mut tick));
            } else {
                let load = w.series(seed, endpoints, bins, bin_ms / 1e3, |_| {});
                out.extend(self.schemes(&Bins::Series(&load), shape, corr, &mut tick));
            }
        }
        progress(total, total);
        out
    }

    fn schemes(&self, src: &Bins<'_>, shape: Shape, corr: f64, tick: &mut dyn FnMut(usize, usize)) -> Vec<SchemeFigures> {
        let Shape { racks, per_rack, bins, bin_ms, elastic } = shape;
        let endpoints = racks * per_rack;
        let per_inst = self.instance_gbps * 1e9 / 8.0 * bin_ms / 1e3; // bytes per bin
        let bound = |cap: f64| cap * self.buffer_ms / bin_ms;
        let need = |bytes: f64| (bytes / per_inst).ceil().max(1.0) as usize;
        let bin_s = bin_ms / 1e3;
        // Pass 1: what static provisioning sizes for — each endpoint's peak, each rack's peak
        // and average.
        let (mut own_peak, mut peak, mut sum) = (vec![0.0f64; endpoints], vec![0.0f64; racks], vec![0.0f64; racks]);
        src.each(endpoints, bins, bin_s, |b, row| {
            tick(0, b);
            for (p, &a) in own_peak.iter_mut().zip(row) {
                *p = p.max(a);
            }
            for (r, rack) in row.chunks(per_rack).enumerate() {
                let total: f64 = rack.iter().sum();
                peak[r] = peak[r].max(total);
                sum[r] += total;
            }
        });
        let own: Vec<usize> = own_peak.iter().map(|&p| need(p)).collect();
        let launch = elastic.launch_delay;
        let mut pools: Vec<RackPool> = (0..racks)
            .map(|r| {
                let k_max = need(peak[r]);
                RackPool::new(&elastic, k_max, need(sum[r] / bins.max(1) as f64), self.regions.unwrap_or(k_max))
            })
            .collect();
        // Pass 2: every scheme on the same bins.
        let mut own_srv = vec![Server::default(); endpoints];
        let (mut d_own, mut opex_own) = (Delays::default(), 0.0);
        // static-max, static-avg, snic, as-instant: delays over every rack's bytes, OpEx summed.
        let mut d: [Delays; 4] = Default::default();
        let mut opex = [0.0f64; 4];
        src.each(endpoints, bins, bin_s, |b, row| {
            tick(1, b);
            for ((srv, &a), &k) in own_srv.iter_mut().zip(row).zip(&own) {
                let cap = k as f64 * per_inst;
                srv.bin(a, cap, per_inst, bound(cap), bin_ms, self.service_ms(), &mut d_own);
                if a > 0.0 {
                    opex_own += k as f64 * bin_s;
                }
            }
            let now = Instant::ZERO + launch + Duration::from_secs_f64(b as f64 * bin_s);
            for (pool, rack) in pools.iter_mut().zip(row.chunks(per_rack)) {
                pool.bin(self, rack.iter().sum(), per_inst, now, bin_ms, &mut d, &mut opex);
            }
        });
        let capex: usize = own.iter().sum();
        let k_max: usize = pools.iter().map(|p| p.k_max).sum();
        let k_avg: usize = pools.iter().map(|p| p.k_avg).sum();
        let regions: usize = pools.iter().map(|p| p.regions).sum();
        let most: usize = pools.iter().map(|p| p.most).sum();
        let events: u64 = pools.iter().map(|p| p.events).sum();
        let [d_max, d_avg, d_snic, d_inst] = &d;
        let [o_max, o_avg, o_snic, o_inst] = opex;
        let base = d_own.mean();
        let (path_ms, hop_ms) = (self.path_us / 1e3, self.pool_hop_us / 1e3);
        let figures = |scheme: &'static str, d: &Delays, capex: usize, opex: f64, events: u64| SchemeFigures {
            scheme,
            correlation: corr,
            slowdown: if base > 0.0 { d.mean() / base } else { 1.0 },
            e2e_slowdown: {
                let detour = if matches!(scheme, "no-disaggregation" | "multi-host-nic") { 0.0 } else { hop_ms };
                if path_ms + base > 0.0 {
                    (path_ms + detour + d.mean()) / (path_ms + base)
                } else {
                    1.0
                }
            },
            mean_delay_ms: d.mean(),
            p50_delay_ms: d.quantile(0.5),
            p99_delay_ms: d.quantile(0.99),
            dropped: if d.offered > 0.0 { d.dropped / d.offered } else { 0.0 },
            capex_instances: capex,
            opex_instance_s: opex,
            opex_vs_static_max: if o_max > 0.0 { opex / o_max } else { 0.0 },
            scale_events: events,
        };
        vec![
            figures("no-disaggregation", &d_own, capex, opex_own, 0),
            // Fixed sub-links: each endpoint keeps its own peak's capacity, in one device.
            figures("multi-host-nic", &d_own, capex, opex_own, 0),
            figures("static-max", d_max, k_max, o_max, 0),
            figures("static-avg", d_avg, k_avg, o_avg, 0),
            figures("snic", d_snic, regions, o_snic, events),
            // (Summed per rack: each rack's most at any bin.)
            figures("as-instant", d_inst, most, o_inst, 0),
        ]
    }
}

/// A run's dimensions.
#[derive(Clone, Copy)]
struct Shape {
    racks: usize,
    per_rack: usize,
    bins: usize,
    bin_ms: f64,
    /// The scenario's `[node.elastic]`.
    elastic: ElasticConfig,
}

/// One rack's pool: its queue under each pooled scheme, and the snic scheme's elasticity policy
/// (`snic-core`'s [`Elasticity`], the one the daemon's node drives).
struct RackPool {
    k_max: usize,
    k_avg: usize,
    regions: usize,
    policy: Elasticity,
    acts: Vec<Act>,
    /// static-max, static-avg, snic, as-instant.
    servers: [Server; 4],
    events: u64,
    most: usize,
}

const CHAIN: ChainId = ChainId(0);

impl RackPool {
    fn new(elastic: &ElasticConfig, k_max: usize, k_avg: usize, regions: usize) -> Self {
        let launch = elastic.launch_delay;
        let mut policy = Elasticity::new(ElasticConfig {
            regions,
            autoscale: true,
            // The rack's chain always has its first instance.
            deschedule_idle: false,
            ..*elastic
        });
        policy.add_chain(CHAIN);
        policy.prelaunch(CHAIN, Instant::ZERO);
        policy.tick(Instant::ZERO + launch);
        RackPool { k_max, k_avg, regions, policy, acts: Vec::new(), servers: Default::default(), events: 0, most: 0 }
    }

    /// One bin of `total` bytes arriving at the rack's pool.
    #[allow(clippy::too_many_arguments)] // one bin's inputs and the shared accumulators
    fn bin(
        &mut self,
        spec: &AutoscaleSpec,
        total: f64,
        per_inst: f64,
        now: Instant,
        bin_ms: f64,
        d: &mut [Delays; 4],
        opex: &mut [f64; 4],
    ) {
        let bin_s = bin_ms / 1e3;
        self.policy.tick(now);
        let k_snic = self.policy.regions().iter().filter(|r| matches!(r, RegionState::Running { .. })).count();
        let k_inst = ((total / per_inst / self.policy.config().high).ceil() as usize).max(1);
        self.most = self.most.max(k_inst);
        for (((srv, d), opex), k) in
            self.servers.iter_mut().zip(d.iter_mut()).zip(opex.iter_mut()).zip([self.k_max, self.k_avg, k_snic, k_inst])
        {
            let cap = k as f64 * per_inst;
            srv.bin(total, cap, per_inst, cap * spec.buffer_ms / bin_ms, bin_ms, spec.service_ms(), d);
            if total > 0.0 || srv.backlog > 0.0 {
                *opex += k as f64 * bin_s;
            }
        }
        // The load the chain carries, in instances' worth, to the policy the node runs.
        self.policy.epoch(now, CHAIN, total / per_inst, &mut self.acts);
        for act in self.acts.drain(..) {
            self.events += 1;
            if let Act::Stop { region, .. } = act {
                // A fluid instance has nothing to finish: it stays loaded, a victim.
                self.policy.stopped(region, now, true);
            }
        }
    }
}
