//! # snic-perf: measuring snic, outside the production crates
//!
//! What the benchmarks and the tests drive the data plane with, and the benchmarks themselves;
//! none of it is linked into the `snic` binary the daemon runs from.
//!
//! - [`bench`]: `snic bench` — measurements printed as text or JSON lines. The `snic` binary
//!   hands `snic bench …` to the `snic-bench` binary, which alone runs under the counting
//!   allocator.
//! - [`alloc_count`]: a global allocator that counts allocations, so that a benchmark reports
//!   (rather than assumes) that the measured per-packet path allocated nothing.
//! - [`gen`]: an allocation-free load generator backend (template frames in, a counting sink out).
//! - [`paced`]: a backend that offers packets at given rates and models the machine's I/O costs,
//!   on the real clock or a virtual one.
//! - [`kv`]: a memcached UDP client and the YCSB-style driver of `snic bench kv`.
//! - [`testbed`]: canonical experiment setups (the paper's Fig. 7, FairNIC's isolation scenarios)
//!   shared by tests, benchmarks and the simulator's node-against-simulator checks.
#![warn(missing_docs)]

pub mod alloc_count;
pub mod bench;
pub mod gen;
pub mod kv;
pub mod paced;
pub mod testbed;
pub mod wasm;
