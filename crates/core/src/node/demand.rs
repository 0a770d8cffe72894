//! Where a chain runs when something needs it — packets that found no instance, a peer asking
//! this node to host it, deploy, the auto-scaler — decided and carried out by the core as far
//! as the core can: it resumes a victim, stops an instance, records the event, and for a
//! launch hands the driver a [`LaunchPlan`]. The driver builds the chain's NTs (the real
//! instantiation cost, or the state a stopped instance saved) and begins the launch with
//! [`NodeCore::launch_planned`]; the launch machine ([`super::launching`]) takes it from there.

use super::placing::OnDemand as Placing;
use super::NodeCore;
use crate::elastic::Act;
use crate::events::EventKind;
use crate::ids::{ChainId, InstanceId};
use crate::launcher::Decision;
use crate::launches::{Launch, Launched};
use crate::pool::placements::PoolNote;
use crate::sched::Change;
use crate::time::Instant;

/// A launch the core decided, waiting for the driver to build the chain's NTs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchPlan {
    /// The chain.
    pub chain: ChainId,
    /// The region it launches into.
    pub region: usize,
    /// The instance in the region that stops first (a running chain's, or a victim's).
    pub evict: Option<InstanceId>,
    /// What for.
    pub why: Launched,
    /// Its event, recorded when it begins.
    kind: EventKind,
}

/// What packets that found no instance of their chain do ([`NodeCore::on_demand`]), or what
/// a peer's request to host a chain comes to ([`NodeCore::host_chain`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    /// The chain has an instance now (a victim resumed, or one running): schedule them again.
    Retry,
    /// Build the chain's NTs and begin this launch ([`NodeCore::launch_planned`]); the packets
    /// then buffer in its instance.
    Launch(LaunchPlan),
    /// Send them on unprocessed: the tenant's endpoint runs the chain.
    Endpoint,
    /// Let them wait: every region is mid-launch, or a peer was asked to host the chain.
    Wait,
    /// No room anywhere: drop them.
    Nothing,
}

/// What an auto-scaling act came to ([`NodeCore::scale`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaled {
    /// Build the chain's NTs and begin this launch (one more instance).
    Launch(LaunchPlan),
    /// An instance stopped: its flows move to the others, and stops and launches under way
    /// advance ([`NodeCore::advance_launches`]).
    Stopped,
    /// Done in the core (a victim resumed), or nothing to do.
    Done,
}

impl NodeCore {
    /// Packets on route `route` need `chain` at step `pos`, and it has no active instance: the
    /// paper's on-demand order — share or resume what is loaded, a free region, a peer (asked
    /// while the packets wait, [`NodeCore::place_on_demand`]), the tenant's endpoint, and last a
    /// context switch. Without elasticity, or for a chain going away: nothing.
    pub fn on_demand(&mut self, now: Instant, chain: ChainId, route: u32, pos: u8, notes: &mut Vec<PoolNote>) -> Demand {
        if !self.elastic.on() || !self.is_live(chain) {
            return Demand::Nothing;
        }
        let decision = match self.place_on_demand(now, chain, route, pos, notes) {
            Placing::Here(d) => d,
            Placing::Wait => return Demand::Wait,
            Placing::Nothing => return Demand::Nothing,
        };
        match decision {
            Decision::Share { region } | Decision::Resume { region } => self.resume_for(now, chain, region, Resumed::ForPackets),
            Decision::Launch { region } => Demand::Launch(self.plan(chain, region, None)),
            Decision::ContextSwitch { region, evicted } => Demand::Launch(self.plan(chain, region, Some(evicted))),
            Decision::Endpoint => {
                self.endpoint_packet(now, chain);
                Demand::Endpoint
            }
            // Every region is mid-launch: one runs soon.
            Decision::Wait { .. } | Decision::Busy => Demand::Wait,
            // (`place_on_demand` turned it into a request to a peer.)
            Decision::Remote => Demand::Nothing,
        }
    }

    /// A peer asks this node to host `chain` (a DAG placed here, or a share of its flows): it
    /// launches where a launch can go without stopping a running chain — a free region, or a
    /// victim's, as the node's load report counted them free ([`NodeCore::host`]); else nothing.
    pub fn host_chain(&mut self, now: Instant, chain: ChainId) -> Demand {
        match self.host(chain, now) {
            Some(Decision::Launch { region }) => Demand::Launch(self.plan(chain, region, None)),
            Some(Decision::ContextSwitch { region, evicted }) => Demand::Launch(self.plan(chain, region, Some(evicted))),
            Some(Decision::Resume { region }) => self.resume_for(now, chain, region, Resumed::ForPackets),
            _ => Demand::Nothing,
        }
    }

    /// Pre-launch at deploy: `chain` gets a free region if there is one (`None`: it launches
    /// when its first packet arrives).
    pub fn prelaunch_plan(&mut self, chain: ChainId, now: Instant) -> Option<LaunchPlan> {
        let region = self.prelaunch(chain, now)?;
        Some(LaunchPlan { chain, region, evict: None, why: Launched::Prelaunch, kind: EventKind::Prelaunch })
    }

    /// Carries out one of the epoch's elasticity acts ([`NodeCore::handle_epoch`]): a victim
    /// resumed to scale out, an instance stopped (its flows move to the others), or — for the
    /// driver to build — one more instance's launch.
    pub fn scale(&mut self, now: Instant, act: Act) -> Scaled {
        match act {
            Act::Resume { chain, region } => {
                self.resume_for(now, chain, region, Resumed::ScaleOut);
                Scaled::Done
            }
            Act::Launch { chain, region, .. } => {
                let evict = self.launches.instance_in(region);
                Scaled::Launch(LaunchPlan { chain, region, evict, why: Launched::ScaleOut, kind: EventKind::ScaleOut })
            }
            Act::Stop { chain, region, last } => {
                let Some(inst) = self.launches.instance_in(region) else { return Scaled::Done };
                if self.stop_instance(inst).is_err() {
                    return Scaled::Done;
                }
                self.record(now, chain, Some(region), if last { EventKind::Deschedule } else { EventKind::ScaleIn }, 0);
                Scaled::Stopped
            }
        }
    }

    /// The driver built the NTs for `plan` in `build_ns` (0: a stopped instance's saved state):
    /// the launch begins ([`NodeCore::begin_launch`]) and its event is recorded. A launch for
    /// packets gets its instance now, so that they buffer in it (`Some`); a scale-out joins the
    /// chain's instances only once it runs. Refused (the scheduler has no room for another
    /// instance, or the chain is unknown): the region is empty again, and the driver keeps the
    /// NTs it built.
    pub fn launch_planned(&mut self, now: Instant, plan: LaunchPlan, build_ns: u64) -> Result<Option<InstanceId>, Change> {
        let inst = match plan.why {
            Launched::ScaleOut => None,
            _ => match self.add_launching(plan.chain) {
                Ok(i) => Some(i),
                Err(e) => {
                    self.region_freed(plan.region);
                    return Err(e);
                }
            },
        };
        let LaunchPlan { chain, region, evict, why, kind } = plan;
        self.begin_launch(Launch { chain, region, inst, why, evict, requested: now });
        self.record(now, chain, Some(region), kind, build_ns);
        Ok(inst)
    }

    /// A launch of `chain` into `region` for packets, stopping what the region holds first when
    /// the decision was a context switch (`evicted`: the chain it stops).
    fn plan(&self, chain: ChainId, region: usize, evicted: Option<ChainId>) -> LaunchPlan {
        let evict = evicted.and_then(|_| self.launches.instance_in(region));
        let why = if evict.is_some() { Launched::ContextSwitch } else { Launched::OnDemand };
        let kind = evicted.map_or(EventKind::Launch, |evicted| EventKind::ContextSwitch { evicted });
        LaunchPlan { chain, region, evict, why, kind }
    }

    /// The victim in `region` runs again (for packets, or to scale out).
    fn resume_for(&mut self, now: Instant, chain: ChainId, region: usize, why: Resumed) -> Demand {
        let Some(inst) = self.launches.instance_in(region) else { return Demand::Nothing };
        if self.resume_instance(inst).is_err() {
            return Demand::Nothing;
        }
        self.record(now, chain, Some(region), EventKind::Resume, 0);
        if why == Resumed::ScaleOut {
            self.record(now, chain, Some(region), EventKind::ScaleOut, 0);
        }
        Demand::Retry
    }
}

/// Why a victim runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resumed {
    /// Its chain's packets need it (or a peer's).
    ForPackets,
    /// The auto-scaler adds an instance.
    ScaleOut,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elastic::ElasticConfig;
    use crate::launcher::RegionState;
    use crate::node::setup::Instances;
    use crate::node::NodeCoreConfig;

    fn one_region() -> (NodeCore, ChainId, ChainId) {
        let cfg = NodeCoreConfig { elastic: ElasticConfig { regions: 1, ..ElasticConfig::default() }, ..NodeCoreConfig::default() };
        let mut core = NodeCore::new(cfg, Instant::ZERO);
        let a = core.add_chain(&["a"], Instances::Many);
        let b = core.add_chain(&["b"], Instances::Many);
        (core, a, b)
    }

    #[test]
    fn packets_for_a_chain_with_no_instance_get_a_launch_planned_then_wait_for_it() {
        let (mut core, a, b) = one_region();
        let mut notes = Vec::new();
        let Demand::Launch(plan) = core.on_demand(Instant::ZERO, a, 0, 0, &mut notes) else { panic!("a free region: a launch") };
        assert_eq!((plan.chain, plan.region, plan.evict, plan.why), (a, 0, None, Launched::OnDemand));
        let inst = core.launch_planned(Instant::ZERO, plan, 1_000).unwrap();
        assert!(inst.is_some(), "its packets buffer in its instance");
        let last = core.events().events.back().copied().unwrap();
        assert_eq!((last.chain, last.region, last.kind, last.took_ns), (a, Some(0), EventKind::Launch, 1_000));
        assert_eq!(core.events().launches, 1);
        // (The chain has an instance now, launching: its next packets find it. Another chain's
        // wait for the only region, mid-launch.)
        assert_eq!(core.on_demand(Instant::ZERO, b, 0, 0, &mut notes), Demand::Wait);
        assert!(notes.is_empty(), "no pool: nothing noted");
    }

    #[test]
    fn a_launch_whose_region_cannot_be_installed_gives_back_its_packets_and_region() {
        use crate::dag::{DagRoute, NtMask, Step};
        use crate::ids::{DagUid, TenantId};
        use crate::launches::LaunchStep;
        use crate::walk::{Entered, Walk};
        let (mut core, a, _) = one_region();
        core.sched.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: a, mask: NtMask::all(1) }]));
        let mut notes = Vec::new();
        let Demand::Launch(plan) = core.on_demand(Instant::ZERO, a, 1, 0, &mut notes) else { panic!("a free region: a launch") };
        let inst = core.launch_planned(Instant::ZERO, plan, 0).unwrap().expect("an instance for its packets");
        for item in [7, 8] {
            let e = core.handle_arrival(&mut Walk::start(DagUid(1)), Instant::ZERO, TenantId(1), item as u64, item);
            assert!(matches!(e, Entered::Queued { .. }), "{e:?}");
        }
        let mut at = Instant::ZERO;
        let step = loop {
            core.advance_launches(at);
            if let Some(s) = core.poll_launch() {
                break s;
            }
            at = Instant::from_nanos(at.as_nanos() + 1_000_000);
            assert!(at < Instant::from_nanos(10_000_000_000), "the launch never reached its install");
        };
        let LaunchStep::Install { inst: i, region, .. } = step else { panic!("{step:?}") };
        assert_eq!((i, region), (inst, 0));
        // The worker does not answer: the driver cannot install it.
        let mut lost = Vec::new();
        core.launch_failed(region, inst, &mut lost);
        assert_eq!(lost, vec![7, 8], "what waited in it comes back, for the driver to drop");
        assert_eq!(core.elastic().regions()[0], RegionState::Free, "the region is free again");
        assert_eq!(core.sched().instances_of(a), &[] as &[crate::ids::InstanceId]);
        let again = core.on_demand(at, a, 1, 0, &mut notes);
        assert!(matches!(again, Demand::Launch(_)), "the chain's next packet asks for a launch again: {again:?}");
    }

    #[test]
    fn a_launch_the_scheduler_refuses_gives_its_region_back() {
        let (mut core, _, _) = one_region();
        // A chain the scheduler does not know: no instance for it.
        let plan = LaunchPlan { chain: ChainId(9), region: 0, evict: None, why: Launched::OnDemand, kind: EventKind::Launch };
        assert!(core.prelaunch(ChainId(9), Instant::ZERO).is_some(), "the policy gave it the region");
        assert_eq!(core.launch_planned(Instant::ZERO, plan, 0), Err(Change::UnknownChain));
        assert_eq!(core.elastic().regions()[0], RegionState::Free, "the region is free again");
        assert_eq!(core.events().launches, 0, "no launch began");
    }
}
