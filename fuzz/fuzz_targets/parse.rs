//! Fuzzes every parse the data plane does on untrusted bytes (outer Ethernet/IP/UDP/VXLAN,
//! VXLAN datagrams, inner frames) and checks the fast paths against the general parses.
//! The harness itself lives in `snic_wire::layout::fuzz_parse`, so the corpus-replay test in
//! `crates/wire/tests/fuzz_corpus.rs` runs exactly the same code without cargo-fuzz.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    snic_wire::layout::fuzz_parse(data);
});
