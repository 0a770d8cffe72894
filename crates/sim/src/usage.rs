//! The `consolidation_usage` experiment (paper Fig. 22, Appendix A.3): the NT resources a node
//! consolidating 2 or 4 endpoints uses, against each endpoint running its own NTs, for NTs of
//! different speeds. Each case is the `autoscale` experiment's `no-disaggregation` and `snic`
//! schemes on one node's endpoints (the daemon's auto-scaler and launcher drive the node).

use crate::autoscale::AutoscaleSpec;
use crate::workload::Workload;
use serde::{Deserialize, Serialize};
use snic_core::elastic::ElasticConfig;

/// The scenario's `[consolidation_usage]` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    /// Endpoints per node, one case each (the paper: 2 and 4).
    pub endpoints_per_node: Vec<usize>,
    /// NT instance speeds, Gbit/s, one case each.
    pub nt_gbps: Vec<f64>,
}

/// One case.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UsageFigures {
    /// `snic`.
    pub scheme: &'static str,
    /// Endpoints the node consolidates.
    pub endpoints_per_node: usize,
    /// NT instance speed, Gbit/s.
    pub nt_gbps: f64,
    /// Instances the endpoints hold when each runs its own NTs (each for its own peak).
    pub separate_instances: usize,
    /// Regions the consolidating node may use (its peak need).
    pub consolidated_instances: usize,
    /// Instance-seconds in use, each endpoint on its own.
    pub separate_instance_s: f64,
    /// Instance-seconds in use, consolidated and auto-scaled.
    pub consolidated_instance_s: f64,
    /// `consolidated_instance_s ÷ separate_instance_s`.
    pub usage_ratio: f64,
    /// The consolidated node's NT-stage delay relative to separate NTs'.
    pub consolidated_slowdown: f64,
    /// The same on the byte's whole way (the `autoscale` experiment's `e2e_slowdown`).
    pub consolidated_e2e_slowdown: f64,
}

impl UsageSpec {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoints_per_node.is_empty() || self.endpoints_per_node.contains(&0) {
            return Err("consolidation_usage.endpoints_per_node: at least one, each at least 1".into());
        }
        if self.nt_gbps.is_empty() || self.nt_gbps.iter().any(|&g| !crate::positive(g)) {
            return Err("consolidation_usage.nt_gbps: at least one, each positive".into());
        }
        Ok(())
    }

    /// Every (endpoints per node, NT speed) case.
    /// The node follows `elastic` (the scenario's `[node.elastic]`).
    pub fn run(&self, workload: &Workload, elastic: &ElasticConfig, seed: u64, bins: usize, bin_ms: f64, flow: bool) -> Vec<UsageFigures> {
        let mut out = Vec::new();
        for &k in &self.endpoints_per_node {
            for &g in &self.nt_gbps {
                let spec = AutoscaleSpec {
                    instance_gbps: g,
                    regions: None,
                    buffer_ms: crate::autoscale::buffer(),
                    correlations: Vec::new(),
                    path_us: crate::autoscale::path_us(),
                    pool_hop_us: crate::autoscale::pool_hop_us(),
                    packet_bytes: crate::fluid::packet_bytes(),
                };
                let rows = spec.run(workload, elastic, seed, 1, k, bins, bin_ms, flow, |_, _| {});
                let get = |s: &str| rows.iter().find(|r| r.scheme == s).expect("every scheme runs");
                let (sep, con) = (get("no-disaggregation"), get("snic"));
                out.push(UsageFigures {
                    scheme: "snic",
                    endpoints_per_node: k,
                    nt_gbps: g,
                    separate_instances: sep.capex_instances,
                    consolidated_instances: con.capex_instances,
                    separate_instance_s: sep.opex_instance_s,
                    consolidated_instance_s: con.opex_instance_s,
                    usage_ratio: if sep.opex_instance_s > 0.0 { con.opex_instance_s / sep.opex_instance_s } else { 1.0 },
                    consolidated_slowdown: con.slowdown,
                    consolidated_e2e_slowdown: con.e2e_slowdown,
                });
            }
        }
        out
    }
}
