//! The pool: nodes that share their load (paper 000 §5, "Distributed sNIC").
//!
//! - [`membership`]: who is in the pool (SWIM, with `foca`), and who died;
//! - [`report`]: what each node tells the others about its load;
//! - [`message`]: the pool's messages and their versioned codec (how two versions interoperate);
//! - [`redirect`]: which packets go to a peer, and what a node runs for its peers;
//! - [`agent`]: where a chain runs when its home node has no room (a peer that runs it with
//!   spare bandwidth, else the nearest peer with a free region), and when it comes home;
//! - [`spill`]: a chain that outgrows its home node sends a share of its new flows to a peer,
//!   each flow keeping its side while it lives;
//! - [`owner`]: in a pool behind a switch, the node that holds a flow's state (a SNAT's
//!   return traffic goes to the node whose block of ports it was given);
//! - [`health`]: which nodes of a pool behind a switch the ToR sends to (the health checker);
//! - [`topology`]: the pool's links and each node's hop distance to its peers;
//! - [`on_demand`]: the whole launch order, the node's elasticity policy and the agent composed.
//!
//! All sans-IO: the daemon drives them with a UDP socket and the real clock, the simulator
//! many of them on one virtual clock.

pub mod agent;
pub mod health;
pub mod membership;
pub mod message;
pub mod owner;
pub mod placements;
pub mod redirect;
pub mod report;
pub mod spill;
pub mod topology;

pub use agent::{AgentConfig, PoolAct, PoolAgent};
pub use membership::{Heard, Incarnations, MemberEvent, MemberId, Membership, MembershipConfig};
pub use report::{ChainKey, ChainSpare, LoadReport};

use crate::elastic::{Elasticity, PeerRoom};
use crate::ids::ChainId;
use crate::launcher::Decision;
use crate::time::Instant;
use std::net::SocketAddr;

/// Where a chain that packets need runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// On this node: the elasticity policy's decision (share, resume, wait, launch, endpoint,
    /// context switch, busy).
    Here(Decision),
    /// On this peer: launch it there (or share its instance) and redirect the chain's packets.
    Peer(SocketAddr),
}

/// The paper's whole on-demand launch order (§4.3, §5) for `chain` (pool-wide `key`), which
/// packets need and which has no active instance here: share a local instance with spare
/// bandwidth → resume a local victim → a free local region → a peer that runs the chain with
/// spare bandwidth → the nearest peer with a free region → the tenant's endpoint → a local
/// context switch. The load asked of a peer is the chain's smoothed load (at least a tenth of an
/// instance: a chain new to the node has none yet). A chain the agent already placed on a live
/// peer goes there while local room is lacking.
pub fn on_demand(elastic: &mut Elasticity, agent: &PoolAgent, chain: ChainId, key: ChainKey, now: Instant) -> Placement {
    let load = elastic.smoothed_load(chain).max(0.1);
    let peer = agent.remote_for(now, key, load);
    let room = if peer.is_some() { PeerRoom::Available } else { PeerRoom::None };
    match elastic.on_demand(chain, now, room) {
        Decision::Remote => peer.map_or(Placement::Here(Decision::Busy), Placement::Peer),
        d => Placement::Here(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elastic::{ElasticConfig, EndpointFallback};
    use crate::pool::report::ChainSpare;
    use core::time::Duration;

    #[test]
    fn the_pool_comes_after_local_room_and_before_the_endpoint_and_a_context_switch() {
        let now = Instant::from_nanos(1);
        let mut e = Elasticity::new(ElasticConfig { regions: 1, ..Default::default() });
        let (a, b) = (ChainId(0), ChainId(1));
        e.add_chain(a);
        e.add_chain(b);
        let (ka, kb) = (ChainKey(10), ChainKey(11));
        let mut agent = PoolAgent::new(AgentConfig::default());
        let peer: SocketAddr = "10.0.0.2:7946".parse().unwrap();
        let mut acts = Vec::new();
        agent.handle_member(MemberEvent::Up(peer), &mut acts);
        agent.handle_report(now, peer, LoadReport { gen: 1, seq: 1, free_regions: 1, ..Default::default() });
        // A free local region first.
        assert!(matches!(on_demand(&mut e, &agent, a, ka, now), Placement::Here(Decision::Launch { .. })));
        e.tick(now + Duration::from_secs(1));
        // No local room: the peer with a free region, before a context switch.
        assert_eq!(on_demand(&mut e, &agent, b, kb, now), Placement::Peer(peer));
        // The peer full, and not running the chain: the tenant's endpoint, then a context switch.
        agent.handle_report(
            now,
            peer,
            LoadReport { gen: 1, seq: 2, free_regions: 0, chains: vec![ChainSpare { key: ka, spare: 0.9 }], ..Default::default() },
        );
        e.set_endpoint_fallback(b, EndpointFallback::Allowed);
        assert_eq!(on_demand(&mut e, &agent, b, kb, now), Placement::Here(Decision::Endpoint));
        e.set_endpoint_fallback(b, EndpointFallback::Never);
        // (Once a's region has held it a MONITOR_PERIOD.)
        let later = now + Duration::from_secs(1);
        agent.handle_report(
            later,
            peer,
            LoadReport { gen: 1, seq: 3, free_regions: 0, chains: vec![ChainSpare { key: ka, spare: 0.9 }], ..Default::default() },
        );
        assert!(matches!(on_demand(&mut e, &agent, b, kb, later), Placement::Here(Decision::ContextSwitch { .. })));
    }
}
