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
