//! What a node tells the pool about itself, at least every gossip period: what the paper's
//! SoftCores exchange (§5) — free regions, each chain's spare capacity, memory, port bandwidth
//! and its hop distance to each peer.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// A chain's pool-wide name: the same NTs (by their names in the desired state) on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ChainKey(pub u64);

impl ChainKey {
    /// The key of the chain of these NTs, in order: FNV-1a over their names, each ended by a
    /// zero byte (stable across nodes, builds and versions).
    pub fn of_names<S: AsRef<str>>(nts: &[S]) -> ChainKey {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for n in nts {
            for &b in n.as_ref().as_bytes().iter().chain(&[0u8]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        ChainKey(h)
    }
}

/// One chain a node runs, and its spare capacity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChainSpare {
    /// The chain.
    pub key: ChainKey,
    /// Spare capacity of its instances, in instances' worth (1.0: a whole idle instance).
    pub spare: f32,
}

impl ChainSpare {
    /// What a node reports of chain `key`, which runs on `instances` instances carrying `load`
    /// (instances' worth): their spare capacity, if any.
    pub fn of(key: ChainKey, instances: usize, load: f64) -> Option<ChainSpare> {
        let spare = (instances as f64 - load).max(0.0) as f32;
        (instances > 0 && spare > 0.0).then_some(ChainSpare { key, spare })
    }
}

/// A node's load report. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The sender's generation (a restarted node starts its sequence again).
    pub gen: u64,
    /// Increases with every report of one generation (an older one arriving late is ignored).
    pub seq: u64,
    /// Regions neither running nor launching a chain (victims count: they can be evicted).
    pub free_regions: u16,
    /// The chains it runs that could take more load.
    pub chains: Vec<ChainSpare>,
    /// Packet-store memory not in use, MiB.
    pub mem_free_mib: u32,
    /// Port bandwidth not in use, Gbit/s.
    pub port_spare_gbps: f32,
    /// Its hop distance to each peer it has a path to.
    pub hops: Vec<(SocketAddr, u8)>,
    /// Its data address: where redirected packets for it go (an unspecified IP: the address
    /// the report came from).
    pub data: Option<SocketAddr>,
    /// Its state slot, in a pool behind a switch ([`crate::pool::owner`]).
    pub slot: Option<u16>,
}

impl LoadReport {
    /// Spare capacity for `key`, if the node runs it.
    pub fn spare(&self, key: ChainKey) -> Option<f64> {
        self.chains.iter().find(|c| c.key == key).map(|c| c.spare as f64)
    }

    /// Encodes it for the wire (postcard).
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// Decodes a report; `None` if the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<LoadReport> {
        postcard::from_bytes(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_survives_the_wire_and_garbage_is_refused() {
        let r = LoadReport {
            gen: 3,
            seq: 9,
            free_regions: 2,
            chains: vec![ChainSpare { key: ChainKey(42), spare: 0.5 }],
            mem_free_mib: 512,
            port_spare_gbps: 12.5,
            hops: vec![(SocketAddr::from(([10, 0, 0, 2], 7946)), 1)],
            data: Some(SocketAddr::from(([10, 0, 0, 2], 4789))),
            slot: Some(1),
        };
        assert_eq!(LoadReport::decode(&r.encode()), Some(r));
        assert_eq!(LoadReport::decode(&[0xff; 3]), None);
    }

    #[test]
    fn a_chain_key_follows_its_nts_names_in_order() {
        let k = ChainKey::of_names(&["fw", "nat"]);
        assert_eq!(k, ChainKey::of_names(&["fw".to_string(), "nat".to_string()]));
        assert_ne!(k, ChainKey::of_names(&["nat", "fw"]));
        assert_ne!(ChainKey::of_names(&["ab", "c"]), ChainKey::of_names(&["a", "bc"]));
        // FNV-1a of "a\0": fixed forever (nodes of different builds agree).
        assert_eq!(ChainKey::of_names(&["a"]).0, 0x089b_e207_b544_f1e4);
    }
}
