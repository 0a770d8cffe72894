//! # snic-control: the declarative control plane
//!
//! Users describe what they want as objects — [`manifest::Kind::Tenant`], `NT`, `DAG`, `Rule`,
//! `Route` — in YAML or JSON documents in kubectl's shape (`apiVersion`, `kind`, `metadata.name`,
//! `spec`). This crate parses them ([`manifest`]), keeps the desired state and checks it as a
//! whole ([`state`]: references resolve, NTs are visible to the DAG's tenant, a VNI has one owner,
//! DAGs are acyclic), and turns it into what a node runs ([`plan`]: tenant ids, DAG UIDs, chains
//! formed along DAG paths with shared NTs time-shared, the DAGs' routes through those chains with
//! the NTs each skips, MAT rules and forwarding entries).
//!
//! It performs no I/O and does not touch the data plane: the daemon applies a [`plan::Plan`] to a
//! node. Errors name the object, the field and the reason, with a stable code.
//!
//! ```
//! use snic_control::{manifest, state::State, plan};
//! let docs = manifest::parse(r#"
//! apiVersion: snic/v1
//! kind: Tenant
//! metadata: {name: blue}
//! spec: {vnis: [100]}
//! ---
//! apiVersion: snic/v1
//! kind: NT
//! metadata: {name: blue-fw}
//! spec: {tenant: blue, config: {kind: firewall, default: allow}}
//! ---
//! apiVersion: snic/v1
//! kind: DAG
//! metadata: {name: blue-path}
//! spec: {tenant: blue, nodes: [blue-fw]}
//! ---
//! apiVersion: snic/v1
//! kind: Rule
//! metadata: {name: blue-all}
//! spec: {vni: 100, action: {dag: blue-path}}
//! "#).unwrap();
//! let state = State::default().apply(docs).unwrap();
//! let p = plan::plan(&state, 8).unwrap();
//! assert_eq!(p.chains.len(), 1);
//! ```
#![warn(missing_docs)]

pub mod auth;
pub mod manifest;
pub mod parallel;
pub mod plan;
pub mod quota;
pub mod state;

pub use manifest::{Error, ErrorCode};

/// The harness shared by the cargo-fuzz target `manifest` and the corpus-replay test: arbitrary
/// bytes through parse → apply (validate) → plan, on an empty state and on one holding the demo.
/// It must never panic; every outcome is a value or an [`Error`].
#[doc(hidden)]
pub fn fuzz_manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(objs) = manifest::parse(text) else { return };
    let demo = state::State::default()
        .apply(manifest::parse(include_str!("../../../examples/demo.yaml")).expect("the demo parses"))
        .expect("the demo is valid");
    for base in [state::State::default(), demo] {
        if let Ok(next) = base.apply(objs.clone()) {
            let _ = plan::plan(&next, 8);
            if let Ok(p) = plan::plan(&next, usize::MAX) {
                for d in &p.dags {
                    let _ = p.compact_chains(d);
                    let _ = d.route(|c| snic_core::ids::ChainId(c as u16));
                }
            }
            for o in objs.iter() {
                let _ = next.delete(o.kind, &o.name);
            }
        }
    }
}
