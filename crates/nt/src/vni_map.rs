//! The `vni_map` NT: re-encapsulates a packet into another VNI (the VPC mapping of paper §6.2:
//! a tenant's virtual network mapped onto the network the next hop expects).

use crate::{Ctx, Nt, Pkt, Verdict};
use rustc_hash::FxHashMap;
use snic_wire::vxlan;

/// Rewrites the VNI: `map` first, else `default`, else unchanged.
#[derive(Debug, Clone, Default)]
pub struct VniMap {
    map: FxHashMap<u32, u32>,
    default: Option<u32>,
}

impl VniMap {
    /// A mapper.
    pub fn new(map: impl IntoIterator<Item = (u32, u32)>, default: Option<u32>) -> Self {
        VniMap { map: map.into_iter().collect(), default }
    }
}

impl Nt for VniMap {
    fn kind(&self) -> &'static str {
        "vni_map"
    }

    /// Partial checksums pass through it (it rewrites the VNI only).
    fn takes_partial_checksums(&self) -> bool {
        true
    }

    fn process(&mut self, _cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        if let Some(&to) = self.map.get(&pkt.meta.vni).or(self.default.as_ref()) {
            let off = pkt.meta.off as usize;
            vxlan::set_vni(&mut pkt.buf[off..off + vxlan::HEADER_LEN], to);
            pkt.meta.vni = to;
        }
        Verdict::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use snic_core::time::Instant;

    #[test]
    fn rewrites_header_and_descriptor() {
        let mut m = VniMap::new([(100, 200)], Some(300));
        let cx = Ctx::real(Instant::ZERO);
        let mut p = TestPkt::new("10.0.0.1", "10.0.0.2", udp(1, 2), 0);
        m.process(&cx, &mut p.pkt());
        assert_eq!(p.meta.vni, 200);
        let off = p.meta.off as usize;
        assert_eq!(snic_wire::layout::parse_vxlan(&p.buf[off..off + 8]).unwrap(), 200);
        m.process(&cx, &mut p.pkt());
        assert_eq!(p.meta.vni, 300, "unmapped VNI goes to the default");
    }
}
