//! Who is in the pool: SWIM membership ([`foca`]), sans-IO, on the driver's clock.
//!
//! Each node probes a random member every probe period; a member that answers neither the
//! probe nor the indirect probes other members send for it is *suspect*, and *down* once the
//! suspicion has lasted `suspect_after` without being refuted. Changes spread piggybacked on
//! the probes and by periodic gossip. A node restarted (or wrongly declared down) rejoins with
//! a newer generation of its identity, which wins over the old one.
//!
//! foca is sans-IO, so this machine is too: the driver feeds it datagrams
//! ([`Membership::handle_data`]) and the time ([`Membership::handle_timeout`] at
//! [`Membership::poll_timeout`]), and takes what to send ([`Membership::poll_transmit`]) and
//! what changed ([`Membership::poll_event`]). The daemon drives it with a UDP socket and the
//! real clock; the simulator drives many on one virtual clock, over a network that delays,
//! loses and partitions. Its randomness comes from a seed the driver gives.

use crate::time::Instant;
use core::time::Duration;
use foca::{Config, Foca, Identity, NoCustomBroadcast, Notification, PeriodicParams, PostcardCodec, Timer};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU8, NonZeroUsize};

/// A pool member's identity: its pool address and the generation it runs (a restarted node
/// takes a newer one; the newest wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemberId {
    /// Where its pool messages go.
    pub addr: SocketAddr,
    /// Its generation (0: a seed address whose generation is not known yet).
    pub gen: u64,
}

impl Identity for MemberId {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(MemberId { addr: self.addr, gen: self.gen.wrapping_add(1).max(1) })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.gen > adversary.gen
    }
}

/// The membership protocol's timing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MembershipConfig {
    /// How often a node probes a random member.
    pub probe_period: Duration,
    /// How long it waits for a direct answer before asking others to probe.
    pub probe_rtt: Duration,
    /// How long a suspect member has to refute the suspicion before it is down.
    pub suspect_after: Duration,
    /// How often a node gossips membership changes to a few members.
    pub gossip_period: Duration,
    /// Members expected (sizes how often a change is retransmitted).
    pub expected_members: u32,
}

impl Default for MembershipConfig {
    /// A dead member is down within about `probe_period + probe_rtt + suspect_after` of its
    /// death once some member probes it (≈ 1.3 s here): within the pool's 2 s.
    fn default() -> Self {
        MembershipConfig {
            probe_period: Duration::from_millis(300),
            probe_rtt: Duration::from_millis(100),
            suspect_after: Duration::from_millis(700),
            gossip_period: Duration::from_millis(100),
            expected_members: 8,
        }
    }
}

impl MembershipConfig {
    fn foca(&self) -> Config {
        let mut c = Config::new_lan(NonZeroU32::new(self.expected_members.max(1)).unwrap_or(NonZeroU32::MIN));
        c.probe_period = self.probe_period;
        c.probe_rtt = self.probe_rtt;
        c.suspect_to_down_after = self.suspect_after;
        // Remember down members (a node that comes back rejoins with a newer generation), and
        // keep announcing to them: a partition heals by itself.
        c.remove_down_after = None;
        if let Some(p) = c.periodic_gossip.as_mut() {
            p.frequency = self.gossip_period;
        }
        if let Some(p) = c.periodic_announce_to_down_members.as_mut() {
            p.frequency = Duration::from_secs(2);
        }
        // A change is piggybacked this many times: enough that, with datagrams lost, every
        // member hears of a death from others rather than by probing the dead node itself
        // (once per round of the pool's members).
        c.max_transmissions = NonZeroU8::new(12).unwrap_or(NonZeroU8::MIN);
        // Announcing to a member returns what it knows: once a second, a pool formed from one
        // seed fills in quickly.
        c.periodic_announce = Some(PeriodicParams { frequency: Duration::from_secs(1), num_members: NonZeroUsize::MIN });
        c.max_packet_size = NonZeroUsize::new(1200).unwrap_or(NonZeroUsize::MIN);
        c
    }
}

/// What changed in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberEvent {
    /// A member is up (joined, or came back).
    Up(SocketAddr),
    /// A member is down (died, left, or cut off).
    Down(SocketAddr),
    /// This node was declared down by the others and rejoined with a newer generation.
    Rejoined,
}

/// What a member's generation, heard in one of its datagrams, says ([`Incarnations::observe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// The first word from it, or its generation as before.
    Known,
    /// A newer generation than the one known: it restarted since. Whatever this node knew of
    /// the earlier incarnation — the chains it ran for this node, the numbers it gave them, the
    /// DAGs this node hosts for it — is gone, as if it had gone down, even if the membership
    /// protocol never saw it down (a restart within the failure-detection time).
    Restarted,
    /// An older generation than the one known: a datagram of an earlier incarnation, still on
    /// its way. It says nothing of the member now.
    Stale,
}

/// The incarnation each member was last heard with: **the rule that tells a restarted peer from
/// the one a node knew**. Every driver feeds it the generation of every authenticated datagram
/// of a member (its membership messages, load reports, answers), and on
/// [`Heard::Restarted`] handles the member as down and up again; both the daemon and the
/// simulator call it.
#[derive(Debug, Clone, Default)]
pub struct Incarnations {
    gens: BTreeMap<SocketAddr, u64>,
}

impl Incarnations {
    /// None known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Member `addr` spoke with generation `gen`.
    pub fn observe(&mut self, addr: SocketAddr, gen: u64) -> Heard {
        match self.gens.insert(addr, gen) {
            None => Heard::Known,
            Some(g) if g == gen => Heard::Known,
            Some(g) if g > gen => {
                self.gens.insert(addr, g);
                Heard::Stale
            }
            Some(_) => Heard::Restarted,
        }
    }

    /// The generation `addr` was last heard with.
    pub fn gen(&self, addr: SocketAddr) -> Option<u64> {
        self.gens.get(&addr).copied()
    }
}

/// Why a datagram was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("membership message refused: {0}")]
pub struct MembershipError(String);

/// What foca asks for during one call, kept until the driver takes it.
#[derive(Default)]
struct Out {
    sends: VecDeque<(SocketAddr, Vec<u8>)>,
    timers: Vec<(Duration, Timer<MemberId>)>,
    events: VecDeque<MemberEvent>,
}

impl foca::Runtime<MemberId> for Out {
    fn notify(&mut self, n: Notification<'_, MemberId>) {
        match n {
            Notification::MemberUp(m) => self.events.push_back(MemberEvent::Up(m.addr)),
            Notification::MemberDown(m) => self.events.push_back(MemberEvent::Down(m.addr)),
            Notification::Rejoin(_) => self.events.push_back(MemberEvent::Rejoined),
            _ => {}
        }
    }
    fn send_to(&mut self, to: MemberId, data: &[u8]) {
        self.sends.push_back((to.addr, data.to_vec()));
    }
    fn submit_after(&mut self, event: Timer<MemberId>, after: Duration) {
        self.timers.push((after, event));
    }
}

/// One node's membership machine. See the module docs.
pub struct Membership {
    foca: Foca<MemberId, PostcardCodec, StdRng, NoCustomBroadcast>,
    out: Out,
    /// Timers foca asked for, by due time (then order of asking).
    timers: BTreeMap<(Instant, u64), Timer<MemberId>>,
    seq: u64,
    /// Where to ask to join, and when to ask again while no member has answered.
    seeds: Vec<SocketAddr>,
    next_join: Option<Instant>,
}

/// While no member has answered, a joining node asks its seeds again this often (a lost
/// announcement must not leave a node alone for good).
const JOIN_RETRY: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership").field("me", self.foca.identity()).field("members", &self.foca.num_members()).finish()
    }
}

impl Membership {
    /// The machine of the node `me`, its random choices drawn from `seed`.
    pub fn new(me: MemberId, cfg: &MembershipConfig, seed: u64) -> Self {
        Membership {
            foca: Foca::new(me, cfg.foca(), StdRng::seed_from_u64(seed), PostcardCodec),
            out: Out::default(),
            timers: BTreeMap::new(),
            seq: 0,
            seeds: Vec::new(),
            next_join: None,
        }
    }

    /// This node's identity (its generation changes when it rejoins).
    pub fn me(&self) -> MemberId {
        *self.foca.identity()
    }

    /// Asks to join the pool through these addresses (seeds: any members, or all the peers a
    /// node knows), again every second while no member has answered.
    pub fn join(&mut self, now: Instant, seeds: &[SocketAddr]) {
        let me = self.me().addr;
        self.seeds = seeds.iter().copied().filter(|&a| a != me).collect();
        self.announce_to_seeds(now);
    }

    fn announce_to_seeds(&mut self, now: Instant) {
        for i in 0..self.seeds.len() {
            // (Only an encoding failure could make it fail; nothing is sent then.)
            let _ = self.foca.announce(MemberId { addr: self.seeds[i], gen: 0 }, &mut self.out);
        }
        self.next_join = (!self.seeds.is_empty()).then(|| now + JOIN_RETRY);
        self.settle(now);
    }

    /// A datagram of the membership protocol arrived.
    pub fn handle_data(&mut self, now: Instant, data: &[u8]) -> Result<(), MembershipError> {
        let r = self.foca.handle_data(data, &mut self.out).map_err(|e| MembershipError(e.to_string()));
        self.settle(now);
        r
    }

    /// Runs the timers due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.next_join.is_some_and(|t| t <= now) {
            if self.foca.num_members() == 0 {
                self.announce_to_seeds(now);
            } else {
                self.next_join = None;
            }
        }
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let timer = entry.remove();
            let _ = self.foca.handle_timer(timer, &mut self.out);
            self.settle(now);
        }
    }

    /// Leaves the pool (the others see it down at once, without waiting for suspicion).
    pub fn leave(&mut self, now: Instant) {
        let _ = self.foca.leave_cluster(&mut self.out);
        self.settle(now);
    }

    /// When [`Membership::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.keys().next().map(|k| k.0).into_iter().chain(self.next_join).min()
    }

    /// A datagram to send: to whom, and its bytes.
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.out.sends.pop_front()
    }

    /// A change in the pool.
    pub fn poll_event(&mut self) -> Option<MemberEvent> {
        self.out.events.pop_front()
    }

    /// The members this node believes up (itself excluded).
    pub fn members(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.foca.iter_members().map(|m| m.id().addr)
    }

    /// Timers foca asked for during the last call, placed on the clock.
    fn settle(&mut self, now: Instant) {
        for (after, t) in self.out.timers.drain(..) {
            self.seq += 1;
            self.timers.insert((now + after, self.seq), t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_generation_is_a_restart_and_an_older_one_is_stale() {
        let (a, b): (SocketAddr, SocketAddr) = ("10.0.0.1:7946".parse().unwrap(), "10.0.0.2:7946".parse().unwrap());
        let mut i = Incarnations::new();
        assert_eq!(i.observe(a, 100), Heard::Known, "first heard");
        assert_eq!(i.observe(a, 100), Heard::Known);
        assert_eq!(i.observe(b, 5), Heard::Known, "each member apart");
        assert_eq!(i.observe(a, 250), Heard::Restarted, "restarted, however soon");
        assert_eq!(i.observe(a, 100), Heard::Stale, "a datagram of the old one, late");
        assert_eq!(i.gen(a), Some(250), "a stale datagram changes nothing");
        assert_eq!(i.observe(a, 250), Heard::Known);
    }
}
