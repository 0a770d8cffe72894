//! # snic-core: the sans-IO policy core
//!
//! Everything in snic that *decides* lives here, as state machines fed with [`time::Instant`]
//! and events, returning actions. Nothing in this crate reads a clock, sleeps, spawns a thread,
//! touches a socket or a file, or draws from an unseeded RNG. The daemon's data plane drives
//! these machines with real time and real packets; `snic sim` will drive the very same code
//! with a virtual clock (DESIGN.md, "The policy core is sans-IO").
//!
//! Key types:
//! - [`mat::Mat`]: the match-action table that maps (VNI, inner protocol, inner destination
//!   prefix, port range) to a tenant's DAG, to pass-through, or to drop (paper §4.1).
//! - [`dag::DagRoute`]: a deployed DAG compiled into the chains a packet visits, with the NTs it
//!   skips in each (paper §4.2).
//! - [`sched::Scheduler`]: the central credit scheduler — a packet enters a chain instance only
//!   when a credit for the whole chain is free, waits in its tenant's queue otherwise, and keeps
//!   its flow on one instance (paper §4.2).
//! - [`drf`] and [`fair`]: weighted DRF and the per-epoch fairness controller (measured demand
//!   in, ingress limits out); [`meter`]: the demand model that turns a node's counters into
//!   that demand, and the ingress limiters; [`dwrr`] and [`engine`]: FairNIC's egress and
//!   engine isolation.
//! - [`config`]: node.yaml's tree (sections, defaults, validation), which the daemon reads and
//!   a simulator scenario embeds; each machine is built from its own section.
//! - [`cost`]: the paper's CapEx model (Appendix A.2) and a lifetime TCO with energy.
//! - [`join`]: the synchronization buffer where a packet forked to parallel NTs joins again.
//! - [`launcher`]: where a chain runs when packets need it — share, victim-cache resume,
//!   launch, remote, endpoint, stop-and-launch (paper §4.3–§4.4); [`autoscale`]: scale out and
//!   in on load held for a whole MONITOR_PERIOD; [`elastic`]: the two composed into one node's
//!   elasticity policy (loads in once an epoch, launches, resumes and stops out); [`rechain`]: which of a DAG's chain
//!   candidates it runs as (its planned chains, or one compact chain when regions are short);
//!   [`placement`]: which core an instance runs on (long chains apart from short ones);
//!   [`dags`]: the DAG table — the route each DAG's arrivals take, and a switch of route
//!   (between forms, or a replaced route) held until the old route is empty; [`chains`]: a
//!   declared chain's life (live, going away once nothing uses it, gone and its id reused).
//! - [`node`]: a node's core, composed ([`node::NodeCore`]): its packet path (the scheduler,
//!   the join table, a packet's next step: [`node::packets`]) and its epoch (counters in,
//!   demand, limits and the elasticity policy's acts out).
//! - [`walk`]: a packet's walk along its route — after each step: the next, a fork, a join,
//!   egress or a drop; the on-demand path when a step has no instance.
//!
//! ```
//! use snic_core::{dag::{DagRoute, Step, NtMask}, ids::*, sched::{Scheduler, SchedConfig}, time::Instant};
//! let mut s: Scheduler<u32> = Scheduler::new(SchedConfig::plain());
//! let chain = s.add_chain(2);                 // a chain of two NTs
//! let inst = s.add_instance(chain, 4).unwrap(); // one instance (one region) with 4 credits
//! s.set_dag(DagUid(7), DagRoute::new(vec![Step { chain, mask: NtMask::all(2) }]));
//! let step = s.handle_packet(Instant::ZERO, TenantId(1), DagUid(7), 0, 0xfeed, 42).unwrap();
//! assert!(step.last);
//! let mut out = Vec::new();
//! assert_eq!(s.poll_dispatch(&mut out, 32), Some(inst));
//! assert_eq!(out, vec![42]);
//! s.handle_completion(inst, 1);
//! ```
#![warn(missing_docs)]

pub mod autoscale;
pub mod chains;
pub mod config;
pub mod cost;
pub mod dag;
pub mod dags;
pub mod drf;
pub mod dwrr;
pub mod elastic;
pub mod engine;
pub mod events;
pub mod fair;
pub mod ids;
pub mod join;
pub mod launcher;
pub mod launches;
pub mod mat;
pub mod meter;
pub mod node;
pub mod placement;
pub mod pool;
pub mod rechain;
pub mod replay;
pub mod sched;
pub mod steer;
pub mod time;
pub mod walk;
