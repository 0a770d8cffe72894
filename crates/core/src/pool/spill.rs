//! Overflow by flow share: a chain that outgrows its home node spills a share of its *new*
//! flows to a peer, and every flow keeps the side it started on while it lives (paper 000 §5:
//! "redirect traffic to other sNICs if it is overloaded"; the home node keeps the chain).
//!
//! A chain that needs more instances than home has regions for — overloaded a whole
//! MONITOR_PERIOD with no free region nor victim — goes through these phases
//! ([`Phase`]):
//!
//! 1. **Learning**, from the first epoch of that overload: the home node records the chain's
//!    flows as it runs them ([`FlowPaths`]): they are home's, and stay home.
//! 2. **Asked**: once the overload has lasted a whole MONITOR_PERIOD (and learning as long),
//!    the pool agent chooses a peer for the excess as the launch order gives it (a peer that
//!    runs the chain with spare bandwidth for the excess, else the nearest with a free region)
//!    and the driver asks it to host the chain's DAG ([`PoolAct::Spill`]). The share is the
//!    excess ÷ the load, rounded up to sixteenths.
//! 3. **Spilled**: a *new* flow whose hash falls in the share goes to the peer, and is
//!    recorded there; a known flow goes where it went before. The NTs' per-flow state (a NAT's
//!    mappings) stays where its flow runs: nothing to move.
//! 4. **Draining**, once the chain's whole load (home's plus what goes to the peer) has fitted
//!    home's instances a whole MONITOR_PERIOD: new flows stay home ([`PoolAct::SpillShare`]
//!    with share 0); the peer's flows keep going there while they live. Overload again for a
//!    whole period: spilled again, to the same peer, with the same share.
//! 5. When the peer's last flow has been idle [`AgentConfig::flow_idle`], the spill ends
//!    ([`PoolAct::Unspill`]): the peer may stop hosting.
//!
//! A share's size is fixed while it lasts (growing it would move flows that run at home).
//! Memory is bounded: at most [`AgentConfig::spill_flows`] flows per chain are recorded; a new
//! flow past that goes by its hash alone, and is counted. A peer that dies takes its flows'
//! state with it: they run at home again ([`PoolAct::Lost`]). Sans-IO.

use crate::ids::ChainId;
use crate::pool::agent::{AgentConfig, PoolAct, PoolAgent};
use crate::pool::redirect::{Redirect, Redirects, SHARE_ALL};
use crate::pool::report::ChainKey;
use crate::time::Instant;
use core::time::Duration;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// One recorded flow: its side and when it was last seen.
#[derive(Debug, Clone, Copy)]
struct Pin {
    peer: bool,
    last: Instant,
}

/// A chain's flows and the side each runs on (home, or the peer it spills to). See the module
/// docs.
#[derive(Debug, Clone, Default)]
pub struct FlowPaths {
    flows: FxHashMap<u64, Pin>,
    cap: usize,
    /// Packets of new flows that found the table full (their side follows the share alone).
    unpinned: u64,
    /// Packets since the last [`FlowPaths::take_packets`]: home, peer.
    packets: [u64; 2],
}

impl FlowPaths {
    /// An empty table for at most `cap` flows.
    pub fn new(cap: usize) -> Self {
        FlowPaths { cap, ..Self::default() }
    }

    /// The side of flow `flow_hash` (true: the peer), seen `now`: a known flow's, or for a new
    /// flow `new_peer` (recorded while there is room).
    #[inline]
    pub fn side(&mut self, flow_hash: u64, now: Instant, new_peer: bool) -> bool {
        let peer = match self.flows.get_mut(&flow_hash) {
            Some(p) => {
                p.last = now;
                p.peer
            }
            None => {
                if self.flows.len() < self.cap {
                    self.flows.insert(flow_hash, Pin { peer: new_peer, last: now });
                } else {
                    self.unpinned += 1;
                }
                new_peer
            }
        };
        self.packets[peer as usize] += 1;
        peer
    }

    /// Forgets flows not seen for `idle`.
    pub fn expire(&mut self, now: Instant, idle: Duration) {
        self.flows.retain(|_, p| now.saturating_since(p.last) < idle);
    }

    /// Flows recorded: at home, on the peer.
    pub fn flows(&self) -> (usize, usize) {
        let peer = self.flows.values().filter(|p| p.peer).count();
        (self.flows.len() - peer, peer)
    }

    /// Packets of new flows that found the table full.
    pub fn unpinned(&self) -> u64 {
        self.unpinned
    }

    /// Packets run at home and sent to the peer since the last call.
    pub fn take_packets(&mut self) -> [u64; 2] {
        std::mem::take(&mut self.packets)
    }
}

/// Where a chain's spill is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Overloaded with no room: its flows are recorded.
    Learning,
    /// `peer` (pool address) is asked to host it, for `share` of its new flows.
    Asked {
        /// The peer's pool address.
        peer: SocketAddr,
        /// Of [`SHARE_ALL`].
        share: u16,
    },
    /// New flows in `share` go to `peer` (pool address).
    Spilled {
        /// The peer's pool address.
        peer: SocketAddr,
        /// Of [`SHARE_ALL`].
        share: u16,
    },
    /// New flows stay home; the peer's keep going there until they end.
    Draining {
        /// The peer's pool address.
        peer: SocketAddr,
        /// The share it had (and has again if the overload comes back).
        share: u16,
    },
}

#[derive(Debug, Clone, Copy)]
struct State {
    phase: Phase,
    /// Since when it is in its phase.
    since: Instant,
    /// Since when its whole load has fitted home (Spilled), or it has been overloaded again
    /// (Draining).
    turn_since: Option<Instant>,
    /// The fraction of its packets that went to the peer, smoothed.
    peer_frac: f64,
    last_expire: Instant,
    /// Since when its flows are recorded.
    learning_since: Instant,
}

/// What an epoch tells the spill policy about one chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Look {
    /// Since when the auto-scaler has seen it overloaded (its whole load above what its
    /// instances carry), if it is.
    pub over_since: Option<Instant>,
    /// A launch could take a region here without stopping a running chain.
    pub room: bool,
    /// Its whole load, smoothed (instances' worth).
    pub load: f64,
    /// What its instances here carry before they count as overloaded (instances' worth).
    pub capacity: f64,
}

/// Weight of the newest epoch in a chain's smoothed peer fraction.
const FRAC_SMOOTHING: f64 = 0.25;

/// Shares are sixteenths of all flows.
const SHARE_STEP: u16 = SHARE_ALL / 16;

/// The share that sends `excess` of `load` away: rounded up to a sixteenth, at most 15/16
/// (home keeps its instances' worth).
pub fn share_for(excess: f64, load: f64) -> u16 {
    if load <= 0.0 || excess <= 0.0 {
        return 0;
    }
    let sixteenths = (excess / load * 16.0).ceil().clamp(1.0, 15.0) as u16;
    sixteenths * SHARE_STEP
}

/// Every chain's spill. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Spills {
    chains: BTreeMap<ChainId, State>,
}

impl Spills {
    /// None.
    pub fn new() -> Self {
        Self::default()
    }

    /// `chain`'s phase, if it spills or may.
    pub fn phase(&self, chain: ChainId) -> Option<Phase> {
        self.chains.get(&chain).map(|s| s.phase)
    }

    /// True if no chain spills or learns.
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty()
    }

    /// `chain`'s whole load from what ran at home (`home`, instances' worth): scaled by the
    /// share of its packets that went to the peer this epoch (smoothed). Call once an epoch,
    /// before the elasticity policy sees the load.
    pub fn whole_load(&mut self, chain: ChainId, home: f64, redirects: &mut Redirects) -> f64 {
        let Some(s) = self.chains.get_mut(&chain) else { return home };
        let [h, p] = redirects.paths_mut(chain).map_or([0, 0], FlowPaths::take_packets);
        if h + p > 0 {
            s.peer_frac += FRAC_SMOOTHING * (p as f64 / (h + p) as f64 - s.peer_frac);
        }
        // (All of it on the peer this epoch: home's share of the work is what it measured.)
        home / (1.0 - s.peer_frac).max(1.0 / 16.0)
    }

    /// One epoch of `chain` (pool-wide key `key()`), after the elasticity policy's: moves it
    /// through its phases, pushing what the driver must do onto `acts`.
    #[allow(clippy::too_many_arguments)]
    pub fn epoch(
        &mut self,
        now: Instant,
        chain: ChainId,
        key: impl FnOnce() -> ChainKey,
        look: Look,
        agent: &PoolAgent,
        redirects: &mut Redirects,
        acts: &mut Vec<PoolAct>,
    ) {
        let cfg: AgentConfig = *agent.config();
        let period = cfg.monitor_period;
        let held = |since: Option<Instant>| since.is_some_and(|t| now.saturating_since(t) >= period);
        let Some(s) = self.chains.get_mut(&chain) else {
            if look.over_since.is_some() && !look.room {
                self.chains.insert(
                    chain,
                    State { phase: Phase::Learning, since: now, turn_since: None, peer_frac: 0.0, last_expire: now, learning_since: now },
                );
                redirects.learn(chain, cfg.spill_flows);
            }
            return;
        };
        match s.phase {
            Phase::Learning => {
                if look.over_since.is_none() || look.room {
                    // The load fell, or a region is free: the auto-scaler looks after it here.
                    self.end(chain, redirects);
                } else if held(look.over_since) && held(Some(s.learning_since)) {
                    let excess = look.load - look.capacity;
                    let share = share_for(excess, look.load);
                    let key = key();
                    if let Some(peer) = agent.remote_for(now, key, excess).filter(|_| share > 0) {
                        (s.phase, s.since) = (Phase::Asked { peer, share }, now);
                        acts.push(PoolAct::Spill { chain, key, peer, share });
                    }
                }
            }
            Phase::Asked { .. } => {}
            Phase::Spilled { peer, share } => {
                s.turn_since = if look.over_since.is_none() { s.turn_since.or(Some(now)) } else { None };
                if held(s.turn_since) && held(Some(s.since)) {
                    (s.phase, s.since, s.turn_since) = (Phase::Draining { peer, share }, now, None);
                    redirects.set_share(chain, 0);
                    acts.push(PoolAct::SpillShare { chain, peer, share: 0 });
                }
            }
            Phase::Draining { peer, share } => {
                s.turn_since = if look.over_since.is_some() && !look.room { s.turn_since.or(Some(now)) } else { None };
                if held(s.turn_since) {
                    (s.phase, s.since, s.turn_since) = (Phase::Spilled { peer, share }, now, None);
                    redirects.set_share(chain, share);
                    acts.push(PoolAct::SpillShare { chain, peer, share });
                } else if now.saturating_since(s.last_expire) >= period {
                    s.last_expire = now;
                    let Some(paths) = redirects.paths_mut(chain) else { return };
                    paths.expire(now, cfg.flow_idle);
                    if paths.flows().1 == 0 {
                        self.end(chain, redirects);
                        acts.push(PoolAct::Unspill { chain, key: key(), peer });
                    }
                }
            }
        }
        if let Some(s) = self.chains.get_mut(&chain) {
            // Flows that ended no longer hold a place in the table.
            if now.saturating_since(s.last_expire) >= cfg.flow_idle {
                s.last_expire = now;
                if let Some(paths) = redirects.paths_mut(chain) {
                    paths.expire(now, cfg.flow_idle);
                }
            }
        }
    }

    /// The peer asked for `chain` hosts it, at data address `data`: new flows in the share go
    /// there from now.
    pub fn placed(&mut self, now: Instant, chain: ChainId, data: SocketAddr, redirects: &mut Redirects) {
        let Some(s) = self.chains.get_mut(&chain) else { return };
        let Phase::Asked { peer, share } = s.phase else { return };
        (s.phase, s.since, s.turn_since) = (Phase::Spilled { peer, share }, now, None);
        redirects.set(chain, Redirect { peer: data, share });
    }

    /// The peer asked for `chain` refused (or did not answer): it learns on, and the agent
    /// chooses again next epoch (not that peer, until it reports anew).
    pub fn failed(&mut self, now: Instant, chain: ChainId) {
        if let Some(s) = self.chains.get_mut(&chain).filter(|s| matches!(s.phase, Phase::Asked { .. })) {
            (s.phase, s.since) = (Phase::Learning, now);
        }
    }

    /// `peer` (pool address) died or left: the chains it took flows of run wholly at home again
    /// (those that spilled there give [`PoolAct::Lost`] with `key(chain)`).
    pub fn lost(&mut self, peer: SocketAddr, key: impl Fn(ChainId) -> ChainKey, redirects: &mut Redirects, acts: &mut Vec<PoolAct>) {
        for (chain, phase) in self.end_where(|_, phase| phase.peer() == Some(peer), redirects) {
            if !matches!(phase, Phase::Asked { .. }) {
                acts.push(PoolAct::Lost { key: key(chain), peer });
            }
        }
    }

    /// Chains that are no longer live stop spilling (those placed give [`PoolAct::Unspill`]).
    pub fn retain_live(
        &mut self,
        live: impl Fn(ChainId) -> bool,
        key: impl Fn(ChainId) -> ChainKey,
        redirects: &mut Redirects,
        acts: &mut Vec<PoolAct>,
    ) {
        for (chain, phase) in self.end_where(|chain, _| !live(chain), redirects) {
            if let Phase::Spilled { peer, .. } | Phase::Draining { peer, .. } = phase {
                acts.push(PoolAct::Unspill { chain, key: key(chain), peer });
            }
        }
    }

    /// Ends `chain`'s spill: its flows are no longer recorded nor redirected.
    fn end(&mut self, chain: ChainId, redirects: &mut Redirects) {
        self.chains.remove(&chain);
        redirects.forget_paths(chain);
        redirects.clear(chain);
    }

    /// Ends the spills of the chains `which` picks; what each was.
    fn end_where(&mut self, which: impl Fn(ChainId, Phase) -> bool, redirects: &mut Redirects) -> Vec<(ChainId, Phase)> {
        let gone: Vec<(ChainId, Phase)> = self.chains.iter().map(|(c, s)| (*c, s.phase)).filter(|&(c, p)| which(c, p)).collect();
        for &(chain, _) in &gone {
            self.end(chain, redirects);
        }
        gone
    }
}

impl Phase {
    /// The peer (pool address) asked, or taking flows; none while learning.
    pub fn peer(&self) -> Option<SocketAddr> {
        match *self {
            Phase::Learning => None,
            Phase::Asked { peer, .. } | Phase::Spilled { peer, .. } | Phase::Draining { peer, .. } => Some(peer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{LoadReport, MemberEvent};

    const MS: u64 = 1_000_000;
    const C: ChainId = ChainId(0);
    const KEY: ChainKey = ChainKey(9);

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 7946))
    }

    fn data(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 4789))
    }

    /// An agent with one peer that has a free region; MONITOR_PERIOD 10 ms, flows idle after
    /// 30 ms.
    fn agent() -> PoolAgent {
        let mut a = PoolAgent::new(AgentConfig {
            monitor_period: Duration::from_millis(10),
            report_ttl: Duration::from_secs(100),
            flow_idle: Duration::from_millis(30),
            spill_flows: 1000,
        });
        let mut acts = Vec::new();
        a.handle_member(MemberEvent::Up(addr(2)), &mut acts);
        a.handle_report(at(0), addr(2), LoadReport { gen: 1, seq: 1, free_regions: 1, ..Default::default() });
        a
    }

    fn over(since: u64, load: f64) -> Look {
        Look { over_since: Some(at(since)), room: false, load, capacity: 0.9 }
    }

    fn fits(load: f64) -> Look {
        Look { over_since: None, room: false, load, capacity: 0.9 }
    }

    /// Flow `i`'s hash (spread over the share's top bits).
    fn flow(i: u64) -> u64 {
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    struct Bed {
        s: Spills,
        a: PoolAgent,
        r: Redirects,
        acts: Vec<PoolAct>,
    }

    impl Bed {
        fn new() -> Self {
            let mut r = Redirects::new();
            r.set_route(0, data(2), 7, 1);
            Bed { s: Spills::new(), a: agent(), r, acts: Vec::new() }
        }
        fn epoch(&mut self, ms: u64, look: Look) -> Vec<PoolAct> {
            self.acts.clear();
            self.s.epoch(at(ms), C, || KEY, look, &self.a, &mut self.r, &mut self.acts);
            self.acts.clone()
        }
        /// Sends one packet of each flow in `flows`: those that went to the peer.
        fn send(&mut self, ms: u64, flows: std::ops::Range<u64>) -> Vec<u64> {
            flows.filter(|&f| self.r.target(C, 0, flow(f), at(ms)).is_some()).collect()
        }
    }

    #[test]
    fn shares_are_the_excess_rounded_up_to_sixteenths_and_home_keeps_a_sixteenth() {
        assert_eq!(share_for(1.1, 2.0), 9 * 64);
        assert_eq!(share_for(0.01, 2.0), 64);
        assert_eq!(share_for(5.0, 5.0), 15 * 64);
        assert_eq!((share_for(0.0, 1.0), share_for(1.0, 0.0)), (0, 0));
    }

    #[test]
    fn the_flow_table_is_bounded_and_forgets_idle_flows() {
        let mut p = FlowPaths::new(2);
        assert!(!p.side(1, at(0), false));
        assert!(p.side(2, at(0), true));
        assert!(p.side(3, at(0), true), "a new flow past the bound follows its share");
        assert!(!p.side(3, at(1), false), "…and is not recorded: it may change side");
        assert_eq!((p.flows(), p.unpinned()), ((1, 1), 2));
        assert!(!p.side(1, at(5), true), "a known flow keeps its side");
        p.expire(at(6), Duration::from_millis(3));
        assert_eq!(p.flows(), (1, 0));
        assert_eq!(p.take_packets(), [3, 2]);
        assert_eq!(p.take_packets(), [0, 0]);
    }

    /// The whole life of a spill: flows seen while overloaded stay home; a whole period of
    /// overload later the peer is asked for the excess; once it hosts, new flows in the share
    /// go there and every flow keeps its side; the load fits a whole period: new flows stay
    /// home while the peer's finish there; overload again: the same share again; the peer's
    /// flows end: the spill ends.
    #[test]
    fn a_spill_learns_asks_sends_new_flows_drains_and_ends_each_flow_keeping_its_side() {
        let mut b = Bed::new();
        // 1. Overloaded with no room: learning. Flows 0..20 run (at home).
        assert_eq!(b.epoch(0, over(0, 2.0)), vec![]);
        assert_eq!(b.s.phase(C), Some(Phase::Learning));
        assert_eq!(b.send(0, 0..20), Vec::<u64>::new());
        // Not before a whole period.
        for ms in 1..10 {
            assert_eq!(b.epoch(ms, over(0, 2.0)), vec![], "ms {ms}");
        }
        let share = share_for(1.1, 2.0);
        assert_eq!(b.epoch(10, over(0, 2.0)), vec![PoolAct::Spill { chain: C, key: KEY, peer: addr(2), share }]);
        // 2. The peer refuses: learning again, the next epoch asks no one (it refused).
        b.s.failed(at(11), C);
        b.a.refused(addr(2));
        assert_eq!(b.epoch(12, over(0, 2.0)), vec![]);
        b.a.handle_report(at(13), addr(2), LoadReport { gen: 1, seq: 2, free_regions: 1, ..Default::default() });
        assert_eq!(b.epoch(13, over(0, 2.0)).len(), 1, "asked again once it reports anew");
        b.s.placed(at(14), C, data(2), &mut b.r);
        assert_eq!(b.s.phase(C), Some(Phase::Spilled { peer: addr(2), share }));
        // 3. Known flows stay; new flows in the share go to the peer, about its share.
        assert_eq!(b.send(15, 0..20), Vec::<u64>::new(), "flows seen before stay home");
        let spilled = b.send(15, 20..1000);
        assert!((400..700).contains(&spilled.len()), "about 9/16 of 980 new flows: {}", spilled.len());
        assert_eq!(b.send(16, 20..1000), spilled, "each flow keeps its side");
        // The whole load: home measured 1.0 while 9/16 of the packets went to the peer.
        for _ in 0..40 {
            b.send(16, 0..1000);
            b.s.whole_load(C, 1.0, &mut b.r);
        }
        let whole = b.s.whole_load(C, 1.0, &mut b.r);
        assert!((2.0..2.6).contains(&whole), "home's 1.0 over its share of the packets: {whole}");
        // 4. It fits home for a whole period: new flows stay home, the peer's go on.
        for ms in 17..27 {
            assert_eq!(b.epoch(ms, fits(0.5)), vec![], "ms {ms}");
        }
        assert_eq!(b.epoch(27, fits(0.5)), vec![PoolAct::SpillShare { chain: C, peer: addr(2), share: 0 }]);
        assert_eq!(b.send(28, 1000..1500), Vec::<u64>::new(), "no new flow goes to the peer");
        assert_eq!(b.send(28, 0..1000), spilled, "the peer's flows go on there");
        // 5. Overloaded again for a whole period: the same share again.
        b.epoch(29, over(29, 2.0));
        assert_eq!(b.epoch(39, over(29, 2.0)), vec![PoolAct::SpillShare { chain: C, peer: addr(2), share }]);
        assert!(!b.send(40, 2000..2100).is_empty(), "new flows spill again");
        for ms in 41..52 {
            b.epoch(ms, fits(0.5));
        }
        assert_eq!(b.s.phase(C), Some(Phase::Draining { peer: addr(2), share }));
        // 6. The peer's flows go on until they have been idle flow_idle: then it ends.
        let mut ms = 52;
        while ms < 80 {
            b.send(ms, 0..1000);
            assert_eq!(b.epoch(ms, fits(0.5)), vec![], "ms {ms}: the peer's flows were seen less than 30 ms ago");
            ms += 1;
        }
        let ended = (80..200).find(|&ms| !b.epoch(ms, fits(0.5)).is_empty()).expect("the spill ends");
        assert!(ended >= 79 + 30, "not before its flows have been idle flow_idle: {ended}");
        assert_eq!(b.acts, vec![PoolAct::Unspill { chain: C, key: KEY, peer: addr(2) }]);
        assert!(b.s.is_empty() && !b.r.active(), "nothing recorded, nothing redirected");
    }

    #[test]
    fn a_load_that_falls_or_a_free_region_ends_learning_and_a_dead_peer_takes_its_flows() {
        let mut b = Bed::new();
        b.epoch(0, over(0, 2.0));
        b.epoch(5, fits(0.5));
        assert!(b.s.is_empty() && !b.r.active(), "the load fell before a whole period");
        b.epoch(6, over(6, 2.0));
        b.epoch(7, Look { room: true, ..over(6, 2.0) });
        assert!(b.s.is_empty(), "a region freed: the auto-scaler scales out here");
        b.epoch(8, over(8, 2.0));
        assert_eq!(b.epoch(18, over(8, 2.0)).len(), 1);
        b.s.placed(at(19), C, data(2), &mut b.r);
        assert!(!b.send(20, 0..100).is_empty());
        b.acts.clear();
        b.s.lost(addr(2), |_| KEY, &mut b.r, &mut b.acts);
        assert_eq!(b.acts, vec![PoolAct::Lost { key: KEY, peer: addr(2) }]);
        assert_eq!(b.send(21, 0..100), Vec::<u64>::new(), "every flow runs at home again");
        assert!(b.s.is_empty());
        // A chain removed while it spills: the peer may stop hosting.
        b.epoch(30, over(30, 2.0));
        b.a.handle_report(at(30), addr(2), LoadReport { gen: 1, seq: 3, free_regions: 1, ..Default::default() });
        b.epoch(40, over(30, 2.0));
        b.s.placed(at(41), C, data(2), &mut b.r);
        b.acts.clear();
        b.s.retain_live(|_| false, |_| KEY, &mut b.r, &mut b.acts);
        assert_eq!(b.acts, vec![PoolAct::Unspill { chain: C, key: KEY, peer: addr(2) }]);
        assert!(!b.r.active());
    }
}
