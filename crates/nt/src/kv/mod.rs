//! Application NTs that act for endpoints in front of a key-value store (paper §6.1): they
//! speak memcached's UDP protocol ([`proto`]) and keep what they learn in a fixed budget
//! ([`cache`]). [`cache_nt`] is the `kv_cache` NT, [`replicate`] the `kv_replicate` NT.

pub mod cache;
pub mod cache_nt;
pub mod proto;
pub mod replicate;
pub mod udp;

/// The `memcache` fuzz target's harness (kept here so `cargo test` replays the same code on the
/// seeds without cargo-fuzz): parses `data` as a datagram every way the NTs do, and runs it
/// through a `kv_cache` NT as a request to its server and as the server's answer. Panics on
/// nothing; a panic is a bug.
#[doc(hidden)]
pub fn fuzz_memcache(data: &[u8]) {
    use crate::{Ctx, Nt, Pkt, PktMeta, HEADROOM};
    use snic_core::ids::TenantId;
    use snic_core::time::Instant;
    use snic_wire::build::{build, FrameSpec, L4Spec};
    use snic_wire::layout::parse_inner;

    let _ = proto::Frame::parse(data);
    let _ = proto::parse_request(data);
    let _ = proto::values(data, |_| {});
    let text = data.get(proto::FRAME_LEN..).unwrap_or_default();
    let _ = proto::parse_request(text);
    let _ = proto::values(text, |_| {});
    let len = data.len().min(1500);
    let mut nt = cache_nt::KvCache::new(&cache_nt::KvCacheConfig {
        backend: "10.0.0.2:11211".parse().expect("literal"),
        bytes: 1 << 14,
        policy: cache::Policy::Clock,
        max_age_ms: 1000,
    });
    let mut buf = vec![0u8; 2048];
    for (i, (src, dst, sp, dp)) in
        [("10.0.0.1", "10.0.0.2", 4000, 11211), ("10.0.0.2", "10.0.0.1", 11211, 4000), ("10.0.0.1", "10.0.0.2", 4000, 11211)]
            .into_iter()
            .enumerate()
    {
        let spec = FrameSpec {
            outer: None,
            vni: 1,
            inner_src_mac: Default::default(),
            inner_dst_mac: Default::default(),
            src: src.parse().expect("literal"),
            dst: dst.parse().expect("literal"),
            l4: L4Spec::Udp { src_port: sp, dst_port: dp },
            payload_len: len,
            payload_byte: 0,
        };
        let Some(n) = build(&spec, &mut buf[HEADROOM..]) else { return };
        let pay = HEADROOM + n - len;
        buf[pay..pay + len].copy_from_slice(&data[..len]);
        let inner = parse_inner(&buf[HEADROOM + 8..HEADROOM + n]).ok();
        let mut meta = PktMeta { off: HEADROOM as u16, len: n as u16, vni: 1, tenant: TenantId(1), inner };
        nt.process(&Ctx::real(Instant::from_nanos(i as u64)), &mut Pkt { buf: &mut buf, meta: &mut meta, at: Default::default() });
        assert!(meta.off as usize + meta.len as usize <= buf.len());
    }
}
