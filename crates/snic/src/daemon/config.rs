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
    /// Where the applied objects are stored.
    pub state_dir: PathBuf,
    /// Regions (chain instances) the node may run.
    pub regions: usize,
    /// Worker threads for regions (0: on the data-plane thread).
    pub workers: usize,
    /// Packet-store buffers.
    pub store_buffers: usize,
    /// UDP port learned endpoints are answered on (kernel VXLAN: 4789); null answers the
    /// datagram's source port.
    pub vtep_port: Option<u16>,
}

impl Default for NodeFile {
    fn default() -> Self {
        // The data plane's own defaults, so the two cannot drift apart.
        let dp = snic_dataplane::NodeConfig::default();
        NodeFile {
            data: "0.0.0.0:4789".parse().expect("literal"),
            api: "127.0.0.1:7878".parse().expect("literal"),
            state_dir: PathBuf::from("snic-state"),
            regions: 8,
            workers: dp.workers,
            store_buffers: dp.store_buffers,
            vtep_port: dp.vtep_port,
        }
    }
}

impl NodeFile {
    /// Reads a YAML file.
    pub fn load(p: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        yaml_serde::from_str(&text).with_context(|| format!("{}: invalid node configuration", p.display()))
    }
}
