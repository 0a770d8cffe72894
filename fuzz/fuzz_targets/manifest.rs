//! Fuzzes what the API does with a request body: parse (YAML/JSON, with the parser's budgets),
//! apply (every cross-object check and every bound), plan, and delete. The harness lives in
//! `snic_control::fuzz_manifest`, so the corpus-replay test in
//! `crates/control/tests/fuzz_corpus.rs` runs exactly the same code without cargo-fuzz.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    snic_control::fuzz_manifest(data);
});
