//! Identifiers shared by the core, the data plane and the control plane.

use serde::{Deserialize, Serialize};

/// A tenant (the paper's "application"/"user").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct TenantId(pub u16);

/// The UID the node assigns to a deployed NT DAG (paper §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct DagUid(pub u32);

/// A chain: NTs placed together and run as one unit in a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChainId(pub u16);

/// One running instance of a chain, occupying one region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InstanceId(pub u16);

impl TenantId {
    /// As an index into per-tenant tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl InstanceId {
    /// As an index into per-instance tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl ChainId {
    /// As an index into per-chain tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}
