//! NT specifications: the serde form a manifest gives, and [`build`] to instantiate one.

use crate::counter::Counter;
use crate::crypto::{Crypto, CryptoConfig, CryptoConfigError};
use crate::dummy::Dummy;
use crate::firewall::{Firewall, FirewallConfig};
use crate::nat::{Nat, NatConfig};
use crate::synthetic::{Synthetic, SyntheticConfig};
use crate::vni_map::VniMap;
use crate::Nt;
use serde::{Deserialize, Serialize};

/// One VNI mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VniPair {
    /// Incoming VNI.
    pub from: u32,
    /// Outgoing VNI.
    pub to: u32,
}

/// An NT kind with its configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum NtSpec {
    /// Touches only the header.
    Dummy,
    /// Counts packets and bytes.
    Counter,
    /// Ordered 5-tuple rules.
    Firewall(FirewallConfig),
    /// SNAT/DNAT.
    Nat(NatConfig),
    /// AES-GCM encryption or decryption.
    AesGcm(CryptoConfig),
    /// VNI re-mapping.
    VniMap {
        /// VNI → VNI pairs.
        #[serde(default)]
        map: Vec<VniPair>,
        /// VNI for anything not in `map`.
        #[serde(default)]
        default: Option<u32>,
    },
    /// A calibrated cost (experiments).
    Synthetic(SyntheticConfig),
}

/// Why an NT spec cannot be instantiated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Crypto configuration error.
    #[error(transparent)]
    Crypto(#[from] CryptoConfigError),
    /// A VNI above 2^24 - 1.
    #[error("VNI {0} does not fit in 24 bits")]
    BadVni(u32),
    /// A size that must be positive is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

/// What part of a packet an NT touches, for deciding which NTs may run on one packet at the
/// same time (NT-level parallelism, paper §4.2): two NTs conflict if one writes what the other
/// reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// Parts read (`Access::HEADERS | ...`).
    pub reads: u8,
    /// Parts written.
    pub writes: u8,
}

impl Access {
    /// The inner Ethernet/IP/L4 headers.
    pub const HEADERS: u8 = 1;
    /// The inner payload.
    pub const PAYLOAD: u8 = 2;
    /// The VNI (the descriptor's, and the VXLAN header's on egress).
    pub const VNI: u8 = 4;

    /// True if the two cannot run on one packet at once.
    pub fn conflicts(self, other: Access) -> bool {
        self.writes & (other.reads | other.writes) != 0 || other.writes & self.reads != 0
    }
}

impl NtSpec {
    /// What the NT reads and writes of a packet.
    pub fn access(&self) -> Access {
        let (h, p, v) = (Access::HEADERS, Access::PAYLOAD, Access::VNI);
        match self {
            NtSpec::Dummy | NtSpec::Counter | NtSpec::Firewall(_) => Access { reads: h, writes: 0 },
            NtSpec::Nat(_) => Access { reads: h, writes: h },
            // Encrypting or decrypting replaces the whole inner frame.
            NtSpec::AesGcm(_) => Access { reads: h | p, writes: h | p },
            NtSpec::VniMap { .. } => Access { reads: v, writes: v },
            NtSpec::Synthetic(_) => Access::default(),
        }
    }

    /// The kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            NtSpec::Dummy => "dummy",
            NtSpec::Counter => "counter",
            NtSpec::Firewall(_) => "firewall",
            NtSpec::Nat(_) => "nat",
            NtSpec::AesGcm(_) => "aes_gcm",
            NtSpec::VniMap { .. } => "vni_map",
            NtSpec::Synthetic(_) => "synthetic",
        }
    }
}

/// Instantiates an NT. Called at launch time (the software analogue of partial reconfiguration).
pub fn build(spec: &NtSpec) -> Result<Box<dyn Nt>, SpecError> {
    Ok(match spec {
        NtSpec::Dummy => Box::new(Dummy::new()),
        NtSpec::Counter => Box::new(Counter::new()),
        NtSpec::Firewall(c) => Box::new(Firewall::new(c.clone())),
        NtSpec::Nat(c) => {
            if c.max_flows == 0 {
                return Err(SpecError::Zero("nat.max_flows"));
            }
            Box::new(Nat::new(c.clone()))
        }
        NtSpec::AesGcm(c) => Box::new(Crypto::new(c)?),
        NtSpec::VniMap { map, default } => {
            for v in map.iter().flat_map(|p| [p.from, p.to]).chain(default.iter().copied()) {
                if v >= 1 << 24 {
                    return Err(SpecError::BadVni(v));
                }
            }
            Box::new(VniMap::new(map.iter().map(|p| (p.from, p.to)), *default))
        }
        NtSpec::Synthetic(c) => {
            if c.capacity_pps == Some(0) {
                return Err(SpecError::Zero("synthetic.capacity_pps"));
            }
            Box::new(Synthetic::new(c))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_build() {
        let specs: Vec<NtSpec> = serde_json::from_str(
            r#"[{"kind":"dummy"},{"kind":"counter"},
                {"kind":"firewall","rules":[{"proto":6,"action":"deny"}],"default":"allow"},
                {"kind":"nat","snat":{"inside":"10.0.0.0/8","public":"203.0.113.1"}},
                {"kind":"aes_gcm","direction":"encrypt","keys":[{"tenant":1,"spi":1,"key_hex":"000102030405060708090a0b0c0d0e0f"}]},
                {"kind":"vni_map","map":[{"from":100,"to":200}]},
                {"kind":"synthetic","cost_ns":100,"capacity_pps":1000}]"#,
        )
        .unwrap();
        let kinds: Vec<_> = specs.iter().map(|s| build(s).unwrap().kind()).collect();
        assert_eq!(kinds, ["dummy", "counter", "firewall", "nat", "aes_gcm", "vni_map", "synthetic"]);
    }

    #[test]
    fn bad_specs_rejected() {
        assert!(serde_json::from_str::<NtSpec>(r#"{"kind":"teleporter"}"#).is_err());
        assert!(serde_json::from_str::<NtSpec>(r#"{"kind":"nat","bogus":1}"#).is_err());
        let s: NtSpec = serde_json::from_str(r#"{"kind":"vni_map","default":16777216}"#).unwrap();
        assert_eq!(build(&s).err(), Some(SpecError::BadVni(16777216)));
    }
}
