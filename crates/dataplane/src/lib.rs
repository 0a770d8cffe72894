//! # snic-dataplane: one sNIC node's data plane
//!
//! The runtime that moves packets through the sans-IO policy of `snic-core` and the NTs of
//! `snic-nt`. The data flow of one packet, and the module that does each step:
//!
//! ```text
//! backend (rx) → node: parse + MAT → meter (ingress limit) → store (charge tenant) → sched (credits) → region (chain)
//!              → node: next chain or egress → fdb (route, learn) → egress (encap) → backend (tx)
//! ```
//!
//! The modules are layered along that path, the driver on top; each imports only the layers
//! below it, and nothing imports the node:
//!
//! ```text
//! node (the driver: node.rs, node/*)                      — applies snic-core's decisions
//! │  (node/ingress: parse, MAT, checks, charge; node/exec: where regions run;
//! │   node/transmit: the way out; node/redirect: the pool's packets)
//! ├─ receive / transmit: backend (udp, mem)                — I/O
//! ├─ execute: worker → region; elastic (specs, NTs outside regions) — chains on threads
//! ├─ transmit: egress → fdb                                — routes and outer headers
//! ├─ stats                                                 — counters
//! └─ store (buffers, descriptors, batch size) → drops      — the packet store
//! clock                                                    — time, for the driver
//! ```
//!
//! - [`backend`]: where packets come from and go: an in-memory port (tests) and batched
//!   UDP sockets (`recvmmsg`/`sendmmsg`), behind the [`backend::Backend`] trait so AF_XDP can be
//!   added.
//! - [`store`]: the fixed packet store and descriptors, with per-tenant quotas.
//! - [`region`] and [`worker`]: regions run one chain instance each over batches of descriptors,
//!   inline on the dispatcher thread or on worker threads fed by SPSC rings; the node moves a
//!   region between them (`node::placement`, as `snic_core::placement` decides) to keep long
//!   chains apart from short ones.
//! - [`fdb`] and [`egress`]: per-VNI forwarding (static entries and learning) and outer
//!   re-encapsulation toward the destination VTEP.
//! - [`elastic`]: the chains' NT specs and the NTs outside regions (built for a launch under
//!   way, saved by stopped instances); `snic_core::elastic` decides launches, resumes, scale events and victims.
//! - `snic_core::meter` decides demand, fair shares and ingress limits; the node hands it its
//!   counters once an epoch (`node::EpochCounters`) and asks it at ingress. `snic_core::walk`
//!   decides a packet's next step.
//! - [`node`]: the dispatcher that ties them together, one `poll(now)` at a time.
//! - [`stats`]: counters per tenant and per drop reason ([`Drop`]), and a latency histogram.
//! - [`clock`]: the monotonic clock, and a manual one for virtual time.
//!
//! The per-packet path does not allocate: every buffer, queue and table is sized at start.
#![warn(missing_docs)]

pub mod backend;
pub mod clock;
mod drops;
pub mod egress;
pub mod elastic;
pub mod fdb;
pub mod node;
pub mod region;
pub mod stats;
pub mod store;
pub mod worker;

pub use drops::{Drop, MAX_PASS_THROUGH};
pub use node::{Node, NodeConfig};
