//! Fuzzes memcached's UDP protocol as the KV NTs read it (frame header, requests, `VALUE`
//! answers), and a `kv_cache` NT fed the bytes as a request and as its server's answer. The
//! harness lives in `snic_nt::kv::fuzz_memcache`, so `crates/nt/tests/fuzz_corpus.rs` replays
//! the seeds through the same code in every `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    snic_nt::kv::fuzz_memcache(data);
});
