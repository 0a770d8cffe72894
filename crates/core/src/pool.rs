//! The pool: nodes that share their load (paper 000 §5, "Distributed sNIC").
//!
//! - [`membership`]: who is in the pool (SWIM, with `foca`), and who died;
//! - [`report`]: what each node tells the others about its load;
//! - [`agent`]: where a chain runs when its home node has no room (a peer that runs it with
//!   spare bandwidth, else the nearest peer with a free region), and when it comes home.
//!
//! All sans-IO: the daemon drives them with a UDP socket and the real clock, the simulator
//! many of them on one virtual clock.

pub mod agent;
pub mod membership;
pub mod report;

pub use agent::{AgentConfig, PoolAct, PoolAgent};
pub use membership::{MemberEvent, MemberId, Membership, MembershipConfig};
pub use report::{ChainKey, ChainSpare, LoadReport};
