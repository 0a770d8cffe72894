//! Replays the fuzz corpus (`fuzz/corpus/parse`) through the fuzz harness, plus deterministic
//! mutations of every seed, so the harness runs in every `cargo test` even where cargo-fuzz
//! cannot (it needs sanitizer flags). A seeded xorshift keeps the mutations reproducible.

use snic_wire::layout::fuzz_parse;
use std::path::PathBuf;

fn corpus() -> Vec<(PathBuf, Vec<u8>)> {
    snic_wire::fuzz_seeds("parse")
}

#[test]
fn corpus_replays_without_panic() {
    let c = corpus();
    assert!(c.len() >= 8, "the seed corpus is missing ({} files)", c.len());
    for (p, b) in &c {
        let r = std::panic::catch_unwind(|| fuzz_parse(b));
        assert!(r.is_ok(), "harness panicked on {}", p.display());
    }
}

#[test]
fn mutated_seeds_never_panic() {
    let mut x: u64 = 0x5eed_1234_abcd_0001;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (_, seed) in corpus() {
        for _ in 0..2000 {
            let mut b = seed.clone();
            match next() % 4 {
                0 => {
                    let n = (next() % 8 + 1) as usize;
                    for _ in 0..n {
                        if !b.is_empty() {
                            let i = (next() as usize) % b.len();
                            b[i] ^= next() as u8;
                        }
                    }
                }
                1 => {
                    let cut = (next() as usize) % (b.len() + 1);
                    b.truncate(cut);
                }
                2 => {
                    // Set a length-like field to an extreme.
                    if b.len() > 4 {
                        let i = (next() as usize) % (b.len() - 1);
                        let v = if next() % 2 == 0 { 0xffffu16 } else { 0 };
                        b[i..i + 2].copy_from_slice(&v.to_be_bytes());
                    }
                }
                _ => {
                    let n = (next() % 64) as usize;
                    b.extend((0..n).map(|_| next() as u8));
                }
            }
            fuzz_parse(&b);
        }
    }
}
