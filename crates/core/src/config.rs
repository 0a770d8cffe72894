//! The node's configuration tree: node.yaml's sections, their defaults, and their validation,
//! in one place.
//!
//! [`NodeSettings`] is node.yaml as written (every field has a default; unknown fields are
//! errors). [`NodeSettings::validate`] checks it once and gives [`Config`]: each machine's
//! own typed section — [`FairConfig`] and the link for the meter, [`ElasticConfig`] for the
//! elasticity policy — built from the section of the same name. The daemon reads node.yaml into
//! it; a simulator scenario embeds the same tree under `[node]` (`[node.elastic]`,
//! `[node.fairness]`), so that a scenario and a node.yaml read alike and a node's defaults are
//! a scenario's.

use crate::elastic::ElasticConfig;
use crate::fair::FairConfig;
use crate::pool::MembershipConfig;
use core::time::Duration;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why a configuration was refused: the setting, and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn ensure(ok: bool, msg: &str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError(msg.to_string()))
    }
}

/// node.yaml. See docs/operations.md for each setting.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSettings {
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
    /// Worker threads for regions (0: on the data-plane thread); with `data_cores` above 1,
    /// each dispatcher thread's own.
    pub workers: usize,
    /// Dispatcher threads, each pinned to a core of its own with its own receive queues and
    /// its own instance of every chain, the kernel steering each datagram to one by its flow
    /// (docs/dataplane.md, "Several dispatcher threads"); fair sharing stays one for the node.
    pub data_cores: usize,
    /// With workers: move regions between cores so that long chains (≥ 5 µs and 10× the
    /// cheapest per packet) run apart from short ones and never on the data-plane thread.
    pub auto_place: bool,
    /// Packet-store buffers.
    pub store_buffers: usize,
    /// UDP port learned endpoints are answered on (kernel VXLAN: 4789); null answers the
    /// datagram's source port.
    pub vtep_port: Option<u16>,
    /// Fair sharing (weighted DRF on measured demand, enforced at ingress).
    pub fairness: FairnessSection,
    /// Receive queues: `per_tenant` (a socket per tenant on the data address, the kernel
    /// steering each datagram by its VNI, so that one tenant's flood waits and is dropped in its
    /// own queue) or `shared` (one socket for everyone).
    pub rx_queues: RxQueues,
    /// How packets come and go: `udp` (sockets on `data`; the default, no privileges) or
    /// `{af_xdp: {interface, queue, mode}}` (an AF_XDP socket on one interface queue; root).
    pub io: Io,
    /// With `io: udp`: a tap device (its name) that runs of one TCP flow leave through joined
    /// into one super-packet, which the kernel carries whole to the endpoint (UDP tunnel GSO,
    /// Linux 6.17+; root; docs/dataplane.md, "Sending runs whole"). Absent: every datagram
    /// leaves through the data socket.
    pub egress_tap: Option<String>,
    /// Elastic NTs: on-demand launch, context switching, victims, auto-scaling.
    pub elastic: ElasticSection,
    /// The pool this node belongs to (absent: the node is alone).
    pub pool: Option<PoolSection>,
    /// API credentials (absent: no credentials, and the API listens on loopback only).
    pub auth: Option<AuthSection>,
    /// TLS on the API (absent: plain HTTP).
    pub api_tls: Option<TlsSection>,
    /// What one tenant may hold or do on this node (docs/operations.md, "Limits").
    pub limits: LimitsSection,
}

/// The `limits:` section: bounds on what one tenant may hold or do, so that no tenant — hostile
/// or careless, with its own credential — can exhaust a table, the API or the node's time for the
/// others. A Tenant's `quotas` may set its own for the object counts and the forwarding table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// MAC addresses the node learns per tenant (a Tenant's `quotas.fdb_macs` overrides it).
    pub fdb_macs_per_tenant: u32,
    /// MAC addresses the node learns in all (the table's memory bound: about 50 bytes each).
    pub fdb_macs: usize,
    /// Seconds a learned MAC is kept without a packet from it.
    pub fdb_age_s: u64,
    /// NTs one tenant may have (`quotas.nts` overrides it).
    pub nts_per_tenant: u32,
    /// DAGs one tenant may have (`quotas.dags`).
    pub dags_per_tenant: u32,
    /// Rules on one tenant's VNIs (`quotas.rules`).
    pub rules_per_tenant: u32,
    /// WebAssembly NTs (modules) one tenant may have (`quotas.wasm_nts`).
    pub wasm_nts_per_tenant: u32,
    /// API requests per second one tenant's credential may make (a token bucket; the operator's
    /// are not limited). Over it: 429 with `Retry-After`.
    pub api_requests_per_s: f64,
    /// Requests a tenant's credential may make at once above that rate.
    pub api_burst: u32,
    /// The largest `max_packet_us` a tenant's `wasm` NT may ask for: the wall time one packet
    /// may take in it (its default is 200 µs).
    pub wasm_packet_us_max: u64,
    /// The largest `max_init_ms` a `wasm` NT may ask for: the wall time its start may take
    /// (default 100 ms).
    pub wasm_init_ms_max: u64,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            fdb_macs_per_tenant: 1024,
            fdb_macs: 1 << 20,
            fdb_age_s: 300,
            nts_per_tenant: 256,
            dags_per_tenant: 256,
            rules_per_tenant: 1024,
            wasm_nts_per_tenant: 16,
            api_requests_per_s: 20.0,
            api_burst: 40,
            wasm_packet_us_max: 1000,
            wasm_init_ms_max: 1000,
        }
    }
}

impl LimitsSection {
    fn validate(&self) -> Result<(), ConfigError> {
        ensure(self.fdb_macs >= self.fdb_macs_per_tenant as usize, "limits.fdb_macs must be at least limits.fdb_macs_per_tenant")?;
        ensure(self.fdb_age_s >= 1, "limits.fdb_age_s must be at least 1")?;
        ensure(self.api_requests_per_s.is_finite() && self.api_requests_per_s > 0.0, "limits.api_requests_per_s must be positive")?;
        ensure(self.api_burst >= 1, "limits.api_burst must be at least 1")?;
        ensure(self.wasm_packet_us_max >= 1, "limits.wasm_packet_us_max must be at least 1")?;
        ensure(self.wasm_init_ms_max >= 1, "limits.wasm_init_ms_max must be at least 1")
    }
}

/// The `api_tls:` section: the API serves HTTPS with this certificate (rustls).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The certificate chain, PEM (the node's certificate first).
    pub cert_file: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// The `auth:` section: who may use the API (docs/operations.md, "Credentials").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// A file holding the operator's token (one line, at least 16 characters): it may do
    /// everything. Tenants' tokens are set per tenant (`Tenant.spec.token_sha256`).
    pub operator_token_file: PathBuf,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            data: SocketAddr::from(([0, 0, 0, 0], snic_wire::vxlan::PORT)),
            api: SocketAddr::from(([127, 0, 0, 1], 7878)),
            api_body_timeout_ms: 10_000,
            state_dir: PathBuf::from("snic-state"),
            regions: 8,
            workers: 0,
            data_cores: 1,
            auto_place: true,
            store_buffers: 8192,
            vtep_port: Some(snic_wire::vxlan::PORT),
            fairness: FairnessSection::default(),
            rx_queues: RxQueues::PerTenant,
            io: Io::Udp,
            egress_tap: None,
            elastic: ElasticSection::default(),
            pool: None,
            auth: None,
            api_tls: None,
            limits: LimitsSection::default(),
        }
    }
}

/// Most dispatcher threads (`data_cores`).
pub const MAX_DATA_CORES: usize = 64;

/// How datagrams are received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RxQueues {
    /// A socket per tenant (SO_REUSEPORT group steered by VNI).
    PerTenant,
    /// One socket.
    Shared,
}

/// The `io:` setting: the node's packet I/O backend (docs/dataplane.md, "Backends").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Io {
    /// UDP sockets on `data` (receive runs with UDP_GRO, send with GSO).
    Udp,
    /// An AF_XDP socket on one receive queue of one interface; `data` gives its port (and its
    /// address, or 0.0.0.0 for the interface's first IPv4 address).
    AfXdp(AfXdpSection),
}

/// `io: {af_xdp: ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AfXdpSection {
    /// The interface endpoints' VXLAN arrives on.
    pub interface: String,
    /// Its receive queue (default 0).
    #[serde(default)]
    pub queue: u32,
    /// Where the XDP program runs: `native` (in the driver; default) or `generic`.
    #[serde(default)]
    pub mode: XdpMode,
}

/// Where an XDP program runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XdpMode {
    /// In the driver, before the kernel allocates anything.
    #[default]
    Native,
    /// After the kernel made an skb: any interface, slower.
    Generic,
}

/// The `fairness:` section.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FairnessSection {
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
    /// Memory for tenants' NT state, MiB: the capacity of the `memory` resource, which each
    /// tenant's NTs hold by their configuration (docs/fairness.md).
    pub nt_memory_mib: u64,
    /// Hand out `core_target` of the share of its core the data-plane thread gets (the
    /// kernel's schedstat), not of a whole core (docs/fairness.md). Off by default, for now.
    pub measure_core: bool,
}

impl Default for FairnessSection {
    fn default() -> Self {
        let f = FairConfig::default();
        FairnessSection {
            epoch_us: f.epoch.as_micros() as u64,
            smoothing: f.smoothing,
            burst_us: f.burst.as_micros() as u64,
            enforce: f.enforce,
            link_gbps: 25.0,
            core_target: f.core_target,
            nt_memory_mib: (f.nt_memory / (1u64 << 20) as f64) as u64,
            measure_core: f.measure_core,
        }
    }
}

impl FairnessSection {
    /// The fairness controller's configuration and the link's speed (bit/s), after checking
    /// the ranges.
    pub fn validate(&self) -> Result<(FairConfig, f64), ConfigError> {
        ensure(self.epoch_us >= 1, "fairness.epoch_us must be at least 1")?;
        ensure(self.smoothing > 0.0 && self.smoothing <= 1.0, "fairness.smoothing must be in (0, 1]")?;
        ensure(self.link_gbps.is_finite() && self.link_gbps > 0.0, "fairness.link_gbps must be positive")?;
        ensure(self.core_target > 0.0 && self.core_target <= 1.0, "fairness.core_target must be in (0, 1]")?;
        ensure(self.nt_memory_mib >= 1, "fairness.nt_memory_mib must be at least 1")?;
        let cfg = FairConfig {
            epoch: Duration::from_micros(self.epoch_us),
            smoothing: self.smoothing,
            burst: Duration::from_micros(self.burst_us),
            enforce: self.enforce,
            core_target: self.core_target,
            nt_memory: self.nt_memory_mib as f64 * (1u64 << 20) as f64,
            measure_core: self.measure_core,
            ..FairConfig::default()
        };
        Ok((cfg, self.link_gbps * 1e9))
    }
}

/// The `elastic:` section.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ElasticSection {
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
    /// scale event, and a chain with no load this long is descheduled (raised to the launch
    /// time if shorter).
    pub monitor_period_ms: f64,
    /// Load per instance (fraction of its throughput) above which it is overloaded.
    pub high: f64,
    /// A running instance below this load is shared with a new tenant rather than launching
    /// another.
    pub share_below: f64,
    /// Keep descheduled chains loaded as victims.
    pub victims: bool,
    /// Switch a DAG whose NTs are spread over chains of its own to one compact chain while
    /// regions are short, and back when they are not (see docs/elastic.md).
    pub rechain: bool,
}

impl Default for ElasticSection {
    fn default() -> Self {
        let e = ElasticConfig::default();
        ElasticSection {
            enabled: false,
            launch_delay_ms: e.launch_delay.as_secs_f64() * 1e3,
            autoscale: e.autoscale,
            monitor_period_ms: e.monitor_period.as_secs_f64() * 1e3,
            high: e.high,
            share_below: e.share_below,
            victims: e.victims,
            rechain: e.rechain,
        }
    }
}

impl ElasticSection {
    /// The elasticity policy's configuration for a node of `regions` regions, after checking
    /// the ranges.
    pub fn validate(&self, regions: usize) -> Result<ElasticConfig, ConfigError> {
        let ms = |name: &str, v: f64| {
            ensure(v.is_finite() && (0.0..=60_000.0).contains(&v), &format!("elastic.{name} must be between 0 and 60000 ms"))?;
            Ok(Duration::from_secs_f64(v / 1e3))
        };
        ensure(self.high > 0.0 && self.high <= 1.0, "elastic.high must be in (0, 1]")?;
        ensure(self.share_below >= 0.0 && self.share_below <= 1.0, "elastic.share_below must be in [0, 1]")?;
        ensure(!self.autoscale || self.enabled, "elastic.autoscale needs elastic.enabled")?;
        ensure(!self.enabled || regions > 0, "elastic.enabled needs at least one region")?;
        Ok(ElasticConfig {
            regions: if self.enabled { regions } else { 0 },
            launch_delay: ms("launch_delay_ms", self.launch_delay_ms)?,
            autoscale: self.autoscale,
            monitor_period: ms("monitor_period_ms", self.monitor_period_ms)?,
            high: self.high,
            share_below: self.share_below,
            victims: self.victims,
            rechain: self.rechain,
            ..ElasticConfig::default()
        })
    }
}

/// The `pool:` section: the nodes this one shares load with (docs/pool.md).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    /// This node's pool address (UDP): membership and load reports. Peers must reach it, so
    /// not an unspecified address (`0.0.0.0`); port 0 takes a free port (printed at start).
    pub listen: SocketAddr,
    /// Pool addresses to join through (any members; unanswered ones are asked again).
    #[serde(default)]
    pub seeds: Vec<SocketAddr>,
    /// A file holding the pool's shared secret (at least 16 bytes): every pool datagram is
    /// authenticated with it, and one that is not is dropped and counted.
    pub secret_file: PathBuf,
    /// How often this node reports its load to every member, ms.
    #[serde(default = "gossip_ms")]
    pub gossip_period_ms: u64,
    /// How often it probes a random member, ms.
    #[serde(default = "probe_ms")]
    pub probe_period_ms: u64,
    /// How long a probe waits for a direct answer, ms.
    #[serde(default = "probe_rtt_ms")]
    pub probe_rtt_ms: u64,
    /// How long a suspect member has to answer before it is down, ms.
    #[serde(default = "suspect_ms")]
    pub suspect_after_ms: u64,
    /// The pool's links between pool addresses (a ring, or any graph), each once, either way:
    /// a peer nearer in hops is preferred. None: every member is one hop away (a switch).
    #[serde(default)]
    pub links: Vec<[SocketAddr; 2]>,
    /// A flow a chain spilled to a peer, not seen this long, has ended; once none of the
    /// peer's has been seen this long the spill ends, ms.
    #[serde(default = "flow_idle_ms")]
    pub flow_idle_ms: u64,
    /// Flows a spilling chain records (each keeps its side), at most.
    #[serde(default = "spill_flows")]
    pub spill_flows: usize,
    /// etcd endpoints (`http://HOST:PORT`) keeping the pool's one desired state: an apply on
    /// any node writes it there in one transaction and every node deploys what changed.
    /// Empty: this node keeps its own state (in `state_dir`).
    #[serde(default)]
    pub etcd: Vec<String>,
    /// The key prefix of the pool's objects in etcd (one pool per prefix).
    #[serde(default = "etcd_prefix")]
    pub etcd_prefix: String,
    /// Behind a switch (one anycast address, flows hashed over the nodes): the number of state
    /// slots the pool's stateful NTs' port ranges are split into, the same on every node (at
    /// least the number of nodes). Absent: not split.
    #[serde(default)]
    pub slots: Option<u16>,
    /// This node's slot, below `slots`, unique in the pool: its SNATs allocate from that
    /// block of their ports, and return traffic to another block goes to the node holding it.
    #[serde(default)]
    pub slot: Option<u16>,
}

fn etcd_prefix() -> String {
    "/snic/".into()
}

fn flow_idle_ms() -> u64 {
    crate::pool::AgentConfig::default().flow_idle.as_millis() as u64
}
fn spill_flows() -> usize {
    crate::pool::AgentConfig::default().spill_flows
}
fn gossip_ms() -> u64 {
    MembershipConfig::default().gossip_period.as_millis() as u64
}
fn probe_ms() -> u64 {
    MembershipConfig::default().probe_period.as_millis() as u64
}
fn probe_rtt_ms() -> u64 {
    MembershipConfig::default().probe_rtt.as_millis() as u64
}
fn suspect_ms() -> u64 {
    MembershipConfig::default().suspect_after.as_millis() as u64
}

/// The pool section, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// This node's pool address.
    pub listen: SocketAddr,
    /// Where to join.
    pub seeds: Vec<SocketAddr>,
    /// The secret's file.
    pub secret_file: PathBuf,
    /// How often load is reported.
    pub gossip_period: Duration,
    /// The membership protocol's timing.
    pub membership: MembershipConfig,
    /// Hops to each peer the links reach (empty without links).
    pub hops: std::collections::BTreeMap<SocketAddr, u32>,
    /// The pool's links (pass-through routes: [`crate::pool::PoolAgent::set_links`]).
    pub links: Vec<[SocketAddr; 2]>,
    /// A spilled flow not seen this long has ended.
    pub flow_idle: Duration,
    /// Flows a spilling chain records, at most.
    pub spill_flows: usize,
    /// etcd endpoints keeping the pool's desired state (empty: the node's own store).
    pub etcd: Vec<String>,
    /// Their key prefix.
    pub etcd_prefix: String,
    /// This node's state slot, behind a switch ([`crate::pool::owner`]).
    pub slots: Option<crate::pool::owner::Slots>,
}

impl PoolSection {
    /// Checks the section.
    pub fn validate(&self) -> Result<PoolConfig, ConfigError> {
        ensure(!self.listen.ip().is_unspecified(), "pool.listen must be an address peers can reach (not 0.0.0.0)")?;
        ensure((10..=10_000).contains(&self.gossip_period_ms), "pool.gossip_period_ms must be between 10 and 10000")?;
        ensure(
            self.probe_rtt_ms >= 1 && self.probe_rtt_ms < self.probe_period_ms,
            "pool.probe_rtt_ms must be at least 1 and below pool.probe_period_ms",
        )?;
        ensure(
            self.probe_period_ms <= 60_000 && (1..=60_000).contains(&self.suspect_after_ms),
            "pool.probe_period_ms and pool.suspect_after_ms must be at most 60000",
        )?;
        ensure(self.links.iter().all(|[a, b]| a != b), "pool.links: a link joins two different addresses")?;
        ensure(
            self.links.is_empty() || self.links.iter().flatten().any(|&a| a == self.listen),
            "pool.links must include this node's pool.listen address",
        )?;
        ensure((1..=3_600_000).contains(&self.flow_idle_ms), "pool.flow_idle_ms must be between 1 and 3600000")?;
        ensure((1..=4_194_304).contains(&self.spill_flows), "pool.spill_flows must be between 1 and 4194304")?;
        for e in &self.etcd {
            let hostport = e.strip_prefix("http://").or_else(|| e.strip_prefix("https://"));
            ensure(
                hostport.is_some_and(|h| !h.is_empty() && !h.contains('/')),
                &format!("pool.etcd: `{e}` is not an endpoint like http://127.0.0.1:2379"),
            )?;
        }
        ensure(
            self.etcd_prefix.starts_with('/') && self.etcd_prefix.ends_with('/') && self.etcd_prefix.len() > 1,
            "pool.etcd_prefix must start and end with `/` (e.g. /snic/)",
        )?;
        let slots = match (self.slot, self.slots) {
            (None, None) => None,
            (Some(slot), Some(count)) => {
                ensure(
                    (1..=crate::pool::owner::MAX_SLOTS).contains(&count) && slot < count,
                    &format!("pool.slots must be between 1 and {} and pool.slot below it", crate::pool::owner::MAX_SLOTS),
                )?;
                Some(crate::pool::owner::Slots { slot, count })
            }
            _ => return Err(ConfigError("pool.slot and pool.slots go together (behind a switch, each node its own slot)".into())),
        };
        let ms = Duration::from_millis;
        Ok(PoolConfig {
            slots,
            etcd: self.etcd.clone(),
            etcd_prefix: self.etcd_prefix.clone(),
            flow_idle: ms(self.flow_idle_ms),
            spill_flows: self.spill_flows,
            hops: crate::pool::topology::hops(self.listen, &self.links),
            links: self.links.clone(),
            listen: self.listen,
            seeds: self.seeds.iter().copied().filter(|&s| s != self.listen).collect(),
            secret_file: self.secret_file.clone(),
            gossip_period: ms(self.gossip_period_ms),
            membership: MembershipConfig {
                probe_period: ms(self.probe_period_ms),
                probe_rtt: ms(self.probe_rtt_ms),
                suspect_after: ms(self.suspect_after_ms),
                gossip_period: ms(self.gossip_period_ms),
                expected_members: (self.seeds.len() as u32 + 1).max(2),
            },
        })
    }
}

/// A node's configuration, validated: the settings as given, and each machine's typed section.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// node.yaml as given (addresses, paths, counts).
    pub settings: NodeSettings,
    /// The fairness controller's section.
    pub fair: FairConfig,
    /// The link's speed, bit/s each way (the meter's ingress and egress capacity).
    pub link_bps: f64,
    /// The elasticity policy's section.
    pub elastic: ElasticConfig,
    /// The pool's section, if the node is in one.
    pub pool: Option<PoolConfig>,
}

impl NodeSettings {
    /// Checks every section once and builds each machine's configuration from its own.
    pub fn validate(self) -> Result<Config, ConfigError> {
        let (fair, link_bps) = self.fairness.validate()?;
        let elastic = self.elastic.validate(self.regions)?;
        let pool = self.pool.as_ref().map(PoolSection::validate).transpose()?;
        self.limits.validate()?;
        ensure((1..=MAX_DATA_CORES).contains(&self.data_cores), &format!("data_cores must be 1 to {MAX_DATA_CORES}"))?;
        if self.data_cores > 1 {
            ensure(self.io == Io::Udp, "data_cores above 1 needs io: udp (the AF_XDP backend opens one interface queue: one thread)")?;
            ensure(
                self.pool.is_none(),
                "data_cores above 1 is not built for a node in a pool yet (its pool agent, redirects and hosted DAGs run on one thread): use data_cores: 1 with pool",
            )?;
            ensure(
                self.limits.fdb_macs / self.data_cores >= self.limits.fdb_macs_per_tenant as usize,
                "limits.fdb_macs split over data_cores must leave each thread at least limits.fdb_macs_per_tenant",
            )?;
            ensure(
                self.store_buffers / self.data_cores >= 256,
                "store_buffers split over data_cores must leave each thread at least 256 buffers",
            )?;
        }
        if let Some(tap) = &self.egress_tap {
            ensure((1..16).contains(&tap.len()) && !tap.contains(['/', ' ']), "egress_tap must be an interface name of 1 to 15 bytes")?;
            ensure(self.io == Io::Udp, "egress_tap is for io: udp (the AF_XDP backend sends frames itself)")?;
            ensure(self.data_cores == 1, "egress_tap is built for data_cores: 1 (one tap queue)")?;
            ensure(self.data.is_ipv4(), "egress_tap carries an IPv4 underlay: data must be an IPv4 address (0.0.0.0 for any)")?;
        }
        if let Io::AfXdp(x) = &self.io {
            ensure(!x.interface.is_empty(), "io.af_xdp.interface must name an interface")?;
            ensure(self.data.is_ipv4(), "io: af_xdp carries an IPv4 underlay: data must be an IPv4 address")?;
        }
        Ok(Config { fair, link_bps, elastic, pool, settings: self })
    }
}

impl Config {
    /// The region limit the planner applies: none when chains come and go.
    pub fn plan_regions(&self) -> usize {
        if self.settings.elastic.enabled {
            usize::MAX
        } else {
            self.settings.regions
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_machines_defaults_and_validate() {
        let c = NodeSettings::default().validate().unwrap();
        assert_eq!(c.fair, FairConfig::default());
        assert_eq!(c.elastic, ElasticConfig::default(), "elastic off: no region limit");
        assert_eq!(c.plan_regions(), 8);
    }

    #[test]
    fn each_section_is_checked_and_names_the_setting() {
        let bad = |f: fn(&mut NodeSettings)| {
            let mut s = NodeSettings::default();
            f(&mut s);
            s.validate().unwrap_err().0
        };
        assert!(bad(|s| s.fairness.smoothing = 0.0).contains("fairness.smoothing"));
        assert!(bad(|s| s.fairness.link_gbps = f64::NAN).contains("fairness.link_gbps"));
        assert!(bad(|s| s.elastic.autoscale = true).contains("elastic.autoscale needs elastic.enabled"));
        assert!(bad(|s| s.elastic.high = 1.5).contains("elastic.high"));
        assert!(bad(|s| s.elastic.launch_delay_ms = -1.0).contains("elastic.launch_delay_ms"));
        assert!(bad(|s| {
            s.elastic.enabled = true;
            s.regions = 0
        })
        .contains("at least one region"));
        let xdp = |i: &str| Io::AfXdp(AfXdpSection { interface: i.into(), queue: 0, mode: XdpMode::Native });
        assert!(bad(|s| s.io = Io::AfXdp(AfXdpSection { interface: String::new(), queue: 0, mode: XdpMode::Native }))
            .contains("io.af_xdp.interface"));
        let mut s = NodeSettings { io: xdp("eth1"), ..Default::default() };
        s.clone().validate().unwrap();
        assert!(bad(|s| s.data_cores = 0).contains("data_cores must be 1 to 64"));
        s.data_cores = 2;
        assert!(s.validate().unwrap_err().0.contains("data_cores above 1 needs io: udp"));
        assert!(bad(|s| {
            s.data_cores = 2;
            s.store_buffers = 300
        })
        .contains("store_buffers split over data_cores"));
        let two = NodeSettings { data_cores: 2, ..Default::default() }.validate().unwrap();
        assert_eq!(two.settings.data_cores, 2);
        fn tap(s: &mut NodeSettings) {
            s.egress_tap = Some("snictap0".into());
        }
        NodeSettings { egress_tap: Some("snictap0".into()), ..Default::default() }.validate().unwrap();
        assert!(bad(|s| s.egress_tap = Some(String::new())).contains("egress_tap must be an interface name"));
        assert!(bad(|s| s.egress_tap = Some("a-name-too-long-for-linux".into())).contains("egress_tap must be an interface name"));
        assert!(bad(|s| {
            tap(s);
            s.data_cores = 2
        })
        .contains("egress_tap is built for data_cores: 1"));
        assert!(bad(|s| {
            tap(s);
            s.data = "[::]:4789".parse().unwrap()
        })
        .contains("egress_tap carries an IPv4 underlay"));
        let mut x = NodeSettings { io: xdp("eth1"), ..Default::default() };
        tap(&mut x);
        assert!(x.validate().unwrap_err().0.contains("egress_tap is for io: udp"));
    }

    #[test]
    fn io_reads_as_a_word_or_a_section() {
        let s: NodeSettings = serde_json::from_str(r#"{"io": "udp"}"#).unwrap();
        assert_eq!(s.io, Io::Udp);
        let s: NodeSettings = serde_json::from_str(r#"{"io": {"af_xdp": {"interface": "veth0", "mode": "generic"}}}"#).unwrap();
        assert_eq!(s.io, Io::AfXdp(AfXdpSection { interface: "veth0".into(), queue: 0, mode: XdpMode::Generic }));
        assert!(serde_json::from_str::<NodeSettings>(r#"{"io": {"af_xdp": {"iface": "veth0"}}}"#).is_err());
    }

    #[test]
    fn an_elastic_node_gets_its_regions_and_its_policy_the_section() {
        let s = NodeSettings {
            regions: 4,
            elastic: ElasticSection { enabled: true, autoscale: true, launch_delay_ms: 5.0, monitor_period_ms: 2.0, ..Default::default() },
            ..Default::default()
        };
        let c = s.validate().unwrap();
        assert_eq!(c.elastic.regions, 4);
        assert_eq!(c.elastic.launch_delay, Duration::from_millis(5));
        assert_eq!(c.elastic.monitor_period, Duration::from_millis(2));
        assert!(c.elastic.autoscale);
        assert_eq!(c.plan_regions(), usize::MAX);
    }

    #[test]
    fn a_pool_section_is_checked_and_gives_the_membership_its_timing() {
        let pool = |listen: &str| PoolSection {
            listen: listen.parse().unwrap(),
            seeds: vec!["10.0.0.1:7946".parse().unwrap(), "10.0.0.2:7946".parse().unwrap()],
            secret_file: PathBuf::from("pool.key"),
            gossip_period_ms: 100,
            flow_idle_ms: 10_000,
            spill_flows: 65_536,
            probe_period_ms: 300,
            probe_rtt_ms: 100,
            suspect_after_ms: 700,
            links: Vec::new(),
            etcd: Vec::new(),
            etcd_prefix: "/snic/".into(),
            slots: None,
            slot: None,
        };
        let with = |p: PoolSection| NodeSettings { pool: Some(p), ..Default::default() }.validate();
        let c = with(pool("10.0.0.1:7946")).unwrap().pool.unwrap();
        assert_eq!(c.seeds, vec!["10.0.0.2:7946".parse::<SocketAddr>().unwrap()], "a node is not its own seed");
        assert_eq!((c.membership.probe_period, c.membership.suspect_after), (Duration::from_millis(300), Duration::from_millis(700)));
        assert!(with(pool("0.0.0.0:7946")).unwrap_err().0.contains("pool.listen"));
        assert!(with(PoolSection { probe_rtt_ms: 300, ..pool("10.0.0.1:7946") }).unwrap_err().0.contains("pool.probe_rtt_ms"));
        assert!(with(PoolSection { gossip_period_ms: 1, ..pool("10.0.0.1:7946") }).unwrap_err().0.contains("pool.gossip_period_ms"));
        assert!(with(PoolSection { flow_idle_ms: 0, ..pool("10.0.0.1:7946") }).unwrap_err().0.contains("pool.flow_idle_ms"));
        assert!(with(PoolSection { spill_flows: 0, ..pool("10.0.0.1:7946") }).unwrap_err().0.contains("pool.spill_flows"));
        assert!(NodeSettings::default().validate().unwrap().pool.is_none(), "alone by default");
        let (me, b, c): (SocketAddr, SocketAddr, SocketAddr) =
            ("10.0.0.1:7946".parse().unwrap(), "10.0.0.2:7946".parse().unwrap(), "10.0.0.3:7946".parse().unwrap());
        let line = with(PoolSection { links: vec![[me, b], [b, c]], ..pool("10.0.0.1:7946") }).unwrap().pool.unwrap();
        assert_eq!((line.hops[&b], line.hops[&c]), (1, 2));
        assert!(with(PoolSection { links: vec![[b, c]], ..pool("10.0.0.1:7946") }).unwrap_err().0.contains("pool.listen"));
        assert!(with(PoolSection { links: vec![[me, me]], ..pool("10.0.0.1:7946") }).unwrap_err().0.contains("two different"));
        let etcd = |e: &str| PoolSection { etcd: vec![e.into()], ..pool("10.0.0.1:7946") };
        assert_eq!(with(etcd("http://10.0.0.9:2379")).unwrap().pool.unwrap().etcd, vec!["http://10.0.0.9:2379".to_string()]);
        assert!(with(etcd("10.0.0.9:2379")).unwrap_err().0.contains("pool.etcd"));
        assert!(with(PoolSection { etcd_prefix: "snic".into(), ..pool("10.0.0.1:7946") }).unwrap_err().0.contains("pool.etcd_prefix"));
        let slot = |slot: Option<u16>, slots: Option<u16>| with(PoolSection { slot, slots, ..pool("10.0.0.1:7946") });
        let s = slot(Some(2), Some(3)).unwrap().pool.unwrap().slots;
        assert_eq!(s, Some(crate::pool::owner::Slots { slot: 2, count: 3 }));
        assert!(slot(Some(3), Some(3)).unwrap_err().0.contains("pool.slot below it"));
        assert!(slot(Some(0), Some(0)).unwrap_err().0.contains("pool.slots"));
        assert!(slot(Some(0), None).unwrap_err().0.contains("go together"));
        assert!(slot(None, None).unwrap().pool.unwrap().slots.is_none());
    }
}
