//! Replays the manifest fuzz corpus (`fuzz/corpus/manifest`) through the fuzz harness — parse,
//! validate, plan, delete — and mutations of each seed, so `cargo test` runs the same code the
//! cargo-fuzz target does, without cargo-fuzz.

use std::path::PathBuf;

fn corpus() -> Vec<(PathBuf, Vec<u8>)> {
    snic_wire::fuzz_seeds("manifest")
}

#[test]
fn manifest_corpus_replays_without_panic() {
    let c = corpus();
    assert!(c.len() >= 6, "the seed corpus is missing ({} files)", c.len());
    for (p, data) in &c {
        let r = std::panic::catch_unwind(|| snic_control::fuzz_manifest(data));
        assert!(r.is_ok(), "{} panicked", p.display());
    }
}

/// Every truncation and single-byte change of every seed: the neighbourhood a fuzzer starts in.
#[test]
fn manifest_seed_mutations_do_not_panic() {
    for (p, data) in corpus() {
        let step = (data.len() / 16).max(1);
        for cut in (0..data.len()).step_by(step) {
            snic_control::fuzz_manifest(&data[..cut]);
            for b in [b'[', b'-', b'0', b'*'] {
                let mut m = data.clone();
                m[cut] = b;
                let r = std::panic::catch_unwind(|| snic_control::fuzz_manifest(&m));
                assert!(r.is_ok(), "{} with byte {cut} = {:?} panicked", p.display(), b as char);
            }
        }
    }
}
