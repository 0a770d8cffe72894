//! The node configuration file of `snic run --config`.

use anyhow::Context;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Node settings. Every field has a default; unknown fields are errors.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeFile {
    /// UDP address endpoints send VXLAN to (their VXLAN device's `remote`).
    pub data: SocketAddr,
    /// HTTP/JSON API and /metrics. Keep it on a management network.
    pub api: SocketAddr,
    /// Time an API client has to send a request's whole body, ms (a body that stops arriving
    /// gets 408 and its connection is closed).
    pub api_body_timeout_ms: u64,
    /// Where the applied objects are stored.
    pub state_dir: PathBuf,
    /// Regions (chain instances) the node may run.
    pub regions: usize,
    /// Worker threads for regions (0: on the data-plane thread).
    pub workers: usize,
    /// With workers: move regions between cores so that long chains (≥ 5 µs and 10× the
    /// cheapest per packet) run apart from short ones and never on the data-plane thread.
    pub auto_place: bool,
    /// Packet-store buffers.
    pub store_buffers: usize,
    /// UDP port learned endpoints are answered on (kernel VXLAN: 4789); null answers the
    /// datagram's source port.
    pub vtep_port: Option<u16>,
    /// Fair sharing (weighted DRF on measured demand, enforced at ingress).
    pub fairness: FairFile,
    /// Receive queues: `per_tenant` (a socket per tenant on the data address, the kernel
    /// steering each datagram by its VNI, so that one tenant's flood waits and is dropped in its
    /// own queue) or `shared` (one socket for everyone).
    pub rx_queues: RxQueues,
    /// Elastic NTs: on-demand launch, context switching, victims, auto-scaling.
    pub elastic: ElasticFile,
}

/// How datagrams are received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RxQueues {
    /// A socket per tenant (SO_REUSEPORT group steered by VNI).
    PerTenant,
    /// One socket.
    Shared,
}

/// The `elastic:` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ElasticFile {
    /// On: `regions` is a pool chains come and go from — chains that do not fit are launched
    /// when their packets arrive (stop-and-launch as the last resort), idle chains are kept as
    /// victims. Off: one region per chain, fixed at deploy, and a plan needing more is refused.
    pub enabled: bool,
    /// Emulated reconfiguration delay added to every launch, in milliseconds (5 reproduces the
    /// paper's partial reconfiguration).
    pub launch_delay_ms: f64,
    /// Scale chains out and in with their load.
    pub autoscale: bool,
    /// MONITOR_PERIOD in milliseconds: an overload or underload must last this long before a
    /// scale event (raised to the launch time if shorter).
    pub monitor_period_ms: f64,
    /// Load per instance (fraction of its throughput) above which it is overloaded.
    pub high: f64,
    /// Keep descheduled chains loaded as victims.
    pub victims: bool,
    /// Switch a DAG whose NTs are spread over chains of its own to one compact chain while
    /// regions are short, and back when they are not (see docs/elastic.md).
    pub rechain: bool,
}

impl Default for ElasticFile {
    fn default() -> Self {
        let e = snic_dataplane::elastic::ElasticConfig::default();
        ElasticFile {
            enabled: false,
            launch_delay_ms: e.launch_delay.as_secs_f64() * 1e3,
            autoscale: e.autoscale,
            monitor_period_ms: e.monitor_period.as_secs_f64() * 1e3,
            high: e.high,
            victims: e.victims,
            rechain: e.rechain,
        }
    }
}

impl ElasticFile {
    /// The data plane's form for a node of `regions` regions, after checking the ranges.
    pub fn to_config(&self, regions: usize) -> anyhow::Result<snic_dataplane::elastic::ElasticConfig> {
        let ms = |name: &str, v: f64| {
            anyhow::ensure!(v.is_finite() && (0.0..=60_000.0).contains(&v), "elastic.{name} must be between 0 and 60000 ms");
            Ok(std::time::Duration::from_secs_f64(v / 1e3))
        };
        anyhow::ensure!(self.high > 0.0 && self.high <= 1.0, "elastic.high must be in (0, 1]");
        anyhow::ensure!(!self.autoscale || self.enabled, "elastic.autoscale needs elastic.enabled");
        anyhow::ensure!(!self.enabled || regions > 0, "elastic.enabled needs at least one region");
        Ok(snic_dataplane::elastic::ElasticConfig {
            regions: if self.enabled { regions } else { 0 },
            launch_delay: ms("launch_delay_ms", self.launch_delay_ms)?,
            autoscale: self.autoscale,
            monitor_period: ms("monitor_period_ms", self.monitor_period_ms)?,
            high: self.high,
            victims: self.victims,
            rechain: self.rechain,
            ..Default::default()
        })
    }

    /// The region limit the planner applies: none when chains come and go.
    pub fn plan_regions(&self, regions: usize) -> usize {
        if self.enabled {
            usize::MAX
        } else {
            regions
        }
    }
}

/// The `fairness:` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FairFile {
    /// EPOCH_LEN in microseconds: how often demand is measured and DRF re-run.
    pub epoch_us: u64,
    /// Weight of the newest epoch in the demand average (0 < x ≤ 1; 1: no smoothing).
    pub smoothing: f64,
    /// Burst an ingress limiter admits, as microseconds at its rate.
    pub burst_us: u64,
    /// Apply the limits (false: measure and report only).
    pub enforce: bool,
    /// The link speed in Gbit/s: capacity of the ingress and egress resources.
    pub link_gbps: f64,
    /// The share of each core handed out to tenants, in (0, 1] (docs/fairness.md, Tuning).
    pub core_target: f64,
}

impl Default for FairFile {
    fn default() -> Self {
        let (f, dp) = (snic_core::fair::FairConfig::default(), snic_dataplane::NodeConfig::default());
        FairFile {
            epoch_us: f.epoch.as_micros() as u64,
            smoothing: f.smoothing,
            burst_us: f.burst.as_micros() as u64,
            enforce: f.enforce,
            link_gbps: dp.link_bps / 1e9,
            core_target: f.core_target,
        }
    }
}

impl FairFile {
    /// The data plane's form, after checking the ranges.
    pub fn to_config(&self) -> anyhow::Result<snic_core::fair::FairConfig> {
        anyhow::ensure!(self.epoch_us >= 1, "fairness.epoch_us must be at least 1");
        anyhow::ensure!(self.smoothing > 0.0 && self.smoothing <= 1.0, "fairness.smoothing must be in (0, 1]");
        anyhow::ensure!(self.link_gbps > 0.0, "fairness.link_gbps must be positive");
        anyhow::ensure!(self.core_target > 0.0 && self.core_target <= 1.0, "fairness.core_target must be in (0, 1]");
        Ok(snic_core::fair::FairConfig {
            epoch: std::time::Duration::from_micros(self.epoch_us),
            smoothing: self.smoothing,
            burst: std::time::Duration::from_micros(self.burst_us),
            enforce: self.enforce,
            core_target: self.core_target,
            ..Default::default()
        })
    }
}

impl Default for NodeFile {
    fn default() -> Self {
        // The data plane's own defaults, so the two cannot drift apart.
        let dp = snic_dataplane::NodeConfig::default();
        NodeFile {
            data: "0.0.0.0:4789".parse().expect("literal"),
            api: "127.0.0.1:7878".parse().expect("literal"),
            api_body_timeout_ms: 10_000,
            state_dir: PathBuf::from("snic-state"),
            regions: 8,
            workers: dp.workers,
            auto_place: dp.auto_place,
            store_buffers: dp.store_buffers,
            vtep_port: dp.vtep_port,
            fairness: FairFile::default(),
            rx_queues: RxQueues::PerTenant,
            elastic: ElasticFile::default(),
        }
    }
}

impl NodeFile {
    /// Reads a YAML file.
    pub fn load(p: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let f: Self = serde_saphyr::from_str_with_options(&text, snic_control::manifest::yaml_options())
            .with_context(|| format!("{}: invalid node configuration", p.display()))?;
        let invalid = || format!("{}: invalid node configuration", p.display());
        f.fairness.to_config().with_context(invalid)?;
        f.elastic.to_config(f.regions).with_context(invalid)?;
        Ok(f)
    }
}
