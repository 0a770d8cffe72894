//! Replays the memcache fuzz corpus (`fuzz/corpus/memcache`) through the fuzz harness
//! (`snic_nt::kv::fuzz_memcache`), with every truncation and some byte changes of each seed, so
//! `cargo test` runs the code the cargo-fuzz target does, without cargo-fuzz.

#[test]
fn memcache_corpus_and_its_neighbours_never_panic() {
    let seeds = snic_wire::fuzz_seeds("memcache");
    assert!(seeds.len() >= 10, "the seed corpus is missing ({} files)", seeds.len());
    for (p, data) in seeds {
        for cut in 0..=data.len() {
            for b in [None, Some(b' '), Some(b'\n'), Some(b'9'), Some(0xff)] {
                let mut m = data[..cut].to_vec();
                if let (Some(b), Some(last)) = (b, m.last_mut()) {
                    *last = b;
                }
                let r = std::panic::catch_unwind(|| snic_nt::kv::fuzz_memcache(&m));
                assert!(r.is_ok(), "{} cut at {cut}, last byte {b:?}: panicked", p.display());
            }
        }
    }
}
