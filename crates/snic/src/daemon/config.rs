//! The node configuration file of `snic run --config`: node.yaml, whose tree, defaults and
//! validation are the core's (`snic_core::config`); this module only reads the file.

use anyhow::Context;
pub use snic_core::config::{Config, NodeSettings, RxQueues};
use std::path::Path;

/// Reads node.yaml (YAML, the manifests' parser and limits). The settings are checked once,
/// with the command line's overrides, by [`NodeSettings::validate`].
pub fn load(p: &Path) -> anyhow::Result<NodeSettings> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    serde_saphyr::from_str_with_options(&text, snic_control::manifest::yaml_options())
        .with_context(|| format!("{}: invalid node configuration", p.display()))
}

/// The pool secret in `pool.secret_file` (surrounding whitespace trimmed): at least 16 bytes.
pub fn read_pool_secret(p: &snic_core::config::PoolConfig) -> anyhow::Result<Vec<u8>> {
    let secret = std::fs::read(&p.secret_file).with_context(|| format!("reading pool.secret_file {}", p.secret_file.display()))?;
    let secret = secret.trim_ascii();
    anyhow::ensure!(secret.len() >= 16, "pool.secret_file {}: the secret must be at least 16 bytes", p.secret_file.display());
    Ok(secret.to_vec())
}
