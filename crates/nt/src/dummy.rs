//! The `dummy` NT: reads the inner headers and nothing else, like the paper's dummy NT used to
//! measure the data path (§7.1). Its cost is the data plane's own cost.

use crate::{Ctx, Nt, Pkt, Verdict};

/// Reads the inner flow key and folds it into a checksum the optimizer cannot drop.
#[derive(Debug, Default)]
pub struct Dummy {
    seen: u64,
}

impl Dummy {
    /// A new dummy NT.
    pub fn new() -> Self {
        Self::default()
    }
    /// A running fold of everything read (keeps the reads observable).
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

impl Nt for Dummy {
    fn kind(&self) -> &'static str {
        "dummy"
    }

    /// Partial checksums pass through it (it reads the inner Ethernet header only).
    fn takes_partial_checksums(&self) -> bool {
        true
    }
    #[inline]
    fn process(&mut self, _cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        let s = pkt.meta.off as usize + snic_wire::vxlan::HEADER_LEN;
        // Touch the header bytes in the buffer: the inner destination MAC and EtherType.
        let h = &pkt.buf[s..s + 14];
        let w = u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[12], h[13]]);
        self.seen = self.seen.rotate_left(5) ^ w;
        Verdict::Continue
    }
}
