//! FairNIC's isolation scenarios on one node (paper 003, Fig. 1 and §6.4), shared by
//! `snic bench fair` and the tests.
//!
//! A well-behaved tenant, the *victim* (tenant 1, VNI 100), shares the node with an
//! *antagonist* (tenant 2, VNI 200); both arrive through a [`Paced`] source at fixed rates.
//!
//! | scenario    | victim                          | antagonist                                   |
//! |-------------|---------------------------------|----------------------------------------------|
//! | `hol`       | 64 B at 4 Mpps, NT of 100 ns    | 64 B at 4 Mpps, NT of 800 ns (8× the cost)   |
//! | `expensive` | 64 B at 1 Mpps, NT of 200 ns    | 64 B at 100 kpps, NT of 20 µs (100×)         |
//! | `flood64`   | 1400 B at 0.5 Mpps, NT of 300 ns | 64 B at 20 Mpps through `dummy`             |
//! | `engine`    | 256 B at 0.5 Mpps               | 1400 B at 5 Mpps, through the same AES-GCM engine |
//! | `weighted`  | weight 1: 64 B at 30 kpps       | weight 3: 64 B at 30 kpps, through the same NT of 40 µs (25 kpps) |
//! | `expensive-wasm` | as `expensive` (100 kpps on the real clock), its NT a tenant's wasm module of 200 units of fuel | as `expensive`, a wasm module of 20,000 units (100×) |
//! | `wasm-hog`  | as `expensive-wasm`             | 64 B at 20 kpps into a wasm module that never finishes a packet, cut at its time bound ([`Params::wasm_bound`]) |
//!
//! `weighted` is the low-rate case: a few packets per tenant an epoch, both over the shared NT's
//! capacity; DRF splits it 1:3 (`throughput_ratio` 1/3).
//!
//! Modes: `alone` (the victim only), `off` (both; fair sharing measures but does not enforce,
//! no engine buckets, and the chains' instances take turns by packets, not by time), `buckets`
//! (engine buckets only), `on` (ingress limits and engine buckets, one receive ring shared by
//! both), `queues` (`on` with a receive ring per tenant).
//!
//! Each scenario runs on one of two clocks ([`Timing`]):
//! - **real**: the machine's own costs (what `snic bench fair` reports by default); figures
//!   differ 1.5–3× between machines of one kind and with the machine's load, so compare only
//!   runs taken together on one machine;
//! - **virtual**: a [`Machine`] model — the NTs' costs are synthetic (the engine is a
//!   synthetic one with a cost per byte; a wasm module's work is a nanosecond a unit of fuel),
//!   receiving and transmitting a packet cost the
//!   dispatcher [`Machine::io`], an empty poll [`Machine::idle_poll`], and each worker thread is a
//!   virtual core of its own ([`snic_dataplane::worker`]). The real data path runs, and the outcome is
//!   exact and the same on any machine, however loaded: what the tests assert on.

use super::{dag_rule, datagram, spin, TestbedError, KEY};
use crate::paced::{IoCost, Paced, StreamSpec};
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::fair::{jain, FairConfig};
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::Mat;
use snic_core::node::NodeCoreConfig;
use snic_core::sched::SchedConfig;
use snic_dataplane::node::ManualClock;
use snic_dataplane::node::{Clock, MonotonicClock, Place};
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::crypto::{CryptoConfig, Direction, TenantKey};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use snic_wire::ethernet::MacAddr;
use std::sync::Arc;
use std::time::Duration;

/// A scenario (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Head-of-line blocking: two tenants over capacity, one with 8× the other's capacity.
    Hol,
    /// An NT 100× as costly per packet.
    Expensive,
    /// A flood of 64-byte packets.
    Flood64,
    /// Large requests to a shared AES-GCM engine.
    Engine,
    /// Weights 1 and 3 on one shared expensive NT at a few kpps.
    Weighted,
    /// The same at Mpps: weights 1 and 3 on one shared NT of 400 ns, 3 Mpps each.
    WeightedMpps,
    /// `Expensive` with tenants' wasm modules for NTs.
    ExpensiveWasm,
    /// A wasm module that never finishes a packet, beside the victim's.
    WasmHog,
}

impl Scenario {
    /// Every scenario, in report order.
    pub const ALL: [Scenario; 8] = [
        Scenario::Hol,
        Scenario::Expensive,
        Scenario::Flood64,
        Scenario::Engine,
        Scenario::Weighted,
        Scenario::WeightedMpps,
        Scenario::ExpensiveWasm,
        Scenario::WasmHog,
    ];

    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Hol => "hol",
            Scenario::Expensive => "expensive",
            Scenario::Flood64 => "flood64",
            Scenario::Engine => "engine",
            Scenario::Weighted => "weighted",
            Scenario::WeightedMpps => "weighted-mpps",
            Scenario::ExpensiveWasm => "expensive-wasm",
            Scenario::WasmHog => "wasm-hog",
        }
    }

    /// The scenario named `s`.
    pub fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s)
    }

    /// How long a virtual run warms up before its figures settle: the NTs' costs are measured
    /// (their first 256 packets), DRF sets the limits, and what the antagonist queued before
    /// them drains. With `expensive` that backlog is the scheduler's 1,024 packets of 20 µs
    /// (queues are bounded in packets, not time), served beside the victim at its limit's
    /// margin: the victim is whole again after ~175 ms.
    pub fn settle(self) -> Duration {
        match self {
            Scenario::Expensive | Scenario::ExpensiveWasm | Scenario::WasmHog => Duration::from_millis(200),
            // At 60 kpps the demand estimates need tens of milliseconds of packets.
            Scenario::Weighted => Duration::from_millis(500),
            _ => Duration::from_millis(50),
        }
    }

    /// The modes it is run in: the engine scenario also with the engine's buckets alone.
    pub fn modes(self) -> &'static [Mode] {
        match self {
            Scenario::Engine => &[Mode::Alone, Mode::Off, Mode::Buckets, Mode::On, Mode::Queues],
            _ => &[Mode::Alone, Mode::Off, Mode::On, Mode::Queues],
        }
    }
}

/// Which mechanisms a run has (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The victim only.
    Alone,
    /// Both tenants; nothing enforced (no limits, no engine buckets, instances take turns by
    /// packets rather than time).
    Off,
    /// Engine buckets only.
    Buckets,
    /// Ingress limits and engine buckets, one shared receive ring.
    On,
    /// `On` with a receive ring per tenant.
    Queues,
}

impl Mode {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Alone => "alone",
            Mode::Off => "off",
            Mode::Buckets => "buckets",
            Mode::On => "on",
            Mode::Queues => "queues",
        }
    }

    fn enforce(self) -> bool {
        matches!(self, Mode::On | Mode::Queues)
    }
}

/// The machine a virtual run models (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Machine {
    /// Per-packet reception and transmission costs of the dispatcher.
    pub io: IoCost,
    /// What a poll that finds nothing to do takes.
    pub idle_poll: Duration,
    /// The AES-GCM engine's cost: per packet (ns) and per byte (ps).
    pub engine_ns: u64,
    /// See `engine_ns`.
    pub engine_ps_per_byte: u64,
    /// The node's core taken away by other work on the machine, if it is (see [`Stalls`]).
    pub stalls: Option<Stalls>,
}

/// Other work on the machine takes the node's core for `off` at the start of every `every` of
/// virtual time (a CPU hog sharing the core under the kernel's scheduler: slices of a few
/// milliseconds each). Arrivals go on meanwhile and wait in the receive rings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stalls {
    /// The period.
    pub every: Duration,
    /// How long of each period the node does not run.
    pub off: Duration,
}

impl Stalls {
    /// The share of the core the node keeps.
    pub fn duty(&self) -> f64 {
        1.0 - self.off.as_secs_f64() / self.every.as_secs_f64()
    }
}

impl Default for Machine {
    /// Costs of the order measured on this project's machines (BENCHMARKS.md, `dispatcher_ns`
    /// and `snic bench crypto`): receiving a packet 40 ns, the rest of its way 20 ns; AES-GCM
    /// 50 ns + 0.25 ns a byte (32 Gbit/s at 1400 B); an empty poll 1 µs.
    fn default() -> Self {
        Machine {
            io: IoCost { rx_ns: 50, tx_ns: 20 },
            idle_poll: Duration::from_micros(1),
            engine_ns: 50,
            engine_ps_per_byte: 250,
            stalls: None,
        }
    }
}

/// The clock a run is on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Timing {
    /// The real clock: the machine's real costs.
    Real,
    /// A virtual clock and the machine model.
    Virtual(Machine),
}

/// How a scenario is run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Real or virtual.
    pub timing: Timing,
    /// Time before measuring (demand measured, DRF settled, regions placed).
    pub warmup: Duration,
    /// Time measured.
    pub measure: Duration,
    /// EPOCH_LEN.
    pub epoch: Duration,
    /// Worker threads for regions (0: on the dispatcher's core).
    pub workers: usize,
    /// The antagonist's chain on worker 0 and the victim's on the dispatcher from the start.
    pub isolate: bool,
    /// `fairness.core_target`.
    pub core_target: f64,
    /// Auto placement.
    pub auto_place: bool,
    /// Packets each receive ring holds.
    pub ring: usize,
    /// The time bound of the `wasm-hog` antagonist's module, units of fuel a packet.
    pub wasm_bound: u64,
    /// Its wall-time bound, µs a packet (`max_packet_us`).
    pub wasm_packet_us: u64,
}

impl Params {
    /// A virtual run of `s` on the default [`Machine`]: the scenario's settling time of
    /// warm-up ([`Scenario::settle`]), 50 ms measured (500 epochs), 100 µs epochs, no worker threads, auto
    /// placement on.
    pub fn virtual_for(s: Scenario) -> Self {
        Params {
            timing: Timing::Virtual(Machine::default()),
            warmup: s.settle(),
            measure: Duration::from_millis(50),
            epoch: Duration::from_micros(100),
            workers: 0,
            isolate: false,
            core_target: FairConfig::default().core_target,
            auto_place: true,
            ring: 1024,
            wasm_bound: 100_000,
            wasm_packet_us: 200,
        }
    }
}

/// What a run measured, over the measured time.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    /// The scenario's name.
    pub scenario: &'static str,
    /// The mode's name.
    pub mode: &'static str,
    /// `real` or `virtual`.
    pub clock: &'static str,
    /// The victim's offered and delivered rates, packets per second.
    pub victim_offered_pps: f64,
    /// See `victim_offered_pps`.
    pub victim_delivered_pps: f64,
    /// Delivered / offered: the victim asks for less than half the node, so its fair share is
    /// all it offers.
    pub victim_kept: f64,
    /// Victim's delivered rate over the antagonist's (the `hol` scenario's figure).
    pub throughput_ratio: f64,
    /// The victim's arrival-to-transmit latency, ns.
    pub victim_p50_ns: u64,
    /// See `victim_p50_ns`.
    pub victim_p99_ns: u64,
    /// Victim arrivals lost at a full receive ring.
    pub victim_ring_drops: u64,
    /// The antagonist's offered and delivered rates.
    pub antagonist_offered_pps: f64,
    /// See `antagonist_offered_pps`.
    pub antagonist_delivered_pps: f64,
    /// Antagonist arrivals lost at a full receive ring.
    pub antagonist_ring_drops: u64,
    /// The antagonist's ingress limit at the end, if limited.
    pub antagonist_limit_pps: Option<f64>,
    /// Jain's index of the two tenants' dominant shares (DRF's view; a satisfied victim has a
    /// smaller share by design).
    pub jain_dominant: f64,
    /// Each tenant's dominant resource as of the last epoch.
    pub victim_dominant: Option<String>,
    /// See `victim_dominant`.
    pub antagonist_dominant: Option<String>,
    /// Per resource: (name, capacity, victim demand, victim allocation, antagonist demand,
    /// antagonist fixed part, antagonist allocation), as of the last epoch.
    pub resources: Vec<(String, f64, f64, f64, f64, f64, f64)>,
    /// The dispatcher's measured costs: receiving a packet, and the rest of an admitted one, ns.
    pub dispatcher_ns: (f64, f64),
    /// The node's drops by reason, victim and antagonist (the receive rings' are counted apart).
    pub victim_drops: Vec<(&'static str, u64)>,
    /// See `victim_drops`.
    pub antagonist_drops: Vec<(&'static str, u64)>,
    /// Where the victim's and the antagonist's regions ran at the end ("dispatcher" or
    /// "worker N"), and the regions moved between cores during the run (`auto_place`).
    pub victim_place: String,
    /// See `victim_place`.
    pub antagonist_place: String,
    /// See `victim_place`.
    pub moves: u64,
}

struct Setup {
    victim_chain: Vec<NtSpec>,
    /// `None`: the antagonist uses the victim's chain (a shared engine).
    antagonist_chain: Option<Vec<NtSpec>>,
    /// Payload bytes and packets per second.
    victim: (usize, f64),
    antagonist: (usize, f64),
    /// Fair-sharing weights of the victim and the antagonist.
    weights: (f64, f64),
}

fn synthetic(ns: u64) -> NtSpec {
    NtSpec::Synthetic(SyntheticConfig::costing(ns))
}

/// The wasm scenarios' victim rate: 1 Mpps on the machine model (200 ns a packet), 100 kpps on
/// the real clock (where the interpreter takes several times that).
fn wasm_victim_pps(timing: Timing) -> f64 {
    match timing {
        Timing::Virtual(_) => 1_000_000.0,
        Timing::Real => 100_000.0,
    }
}

fn setup(s: Scenario, timing: Timing, wasm_bound: (u64, u64)) -> Setup {
    match s {
        // FairNIC Fig. 1 (head-of-line blocking): two tenants both offering far more than the
        // node takes, the first with 8x the processing capacity (its NT costs 1/8 as much).
        // Without isolation both get the same rate; with it, throughput follows capacity.
        Scenario::Hol => Setup {
            victim_chain: vec![synthetic(100)],
            antagonist_chain: Some(vec![synthetic(800)]),
            victim: (64, 4_000_000.0),
            antagonist: (64, 4_000_000.0),
            weights: (1.0, 1.0),
        },
        // 200 ns vs 20 us per packet; the antagonist offers two cores' worth.
        Scenario::Expensive => Setup {
            victim_chain: vec![synthetic(200)],
            antagonist_chain: Some(vec![synthetic(20_000)]),
            victim: (64, 1_000_000.0),
            antagonist: (64, 100_000.0),
            weights: (1.0, 1.0),
        },
        // 1400-byte frames at 0.5 Mpps through a 300 ns NT, against 64-byte frames at 20 Mpps
        // (more than a node takes through its whole path).
        Scenario::Flood64 => Setup {
            victim_chain: vec![synthetic(300)],
            antagonist_chain: Some(vec![NtSpec::Dummy]),
            victim: (1400 - 42, 500_000.0),
            antagonist: (64 - 42, 20_000_000.0),
            weights: (1.0, 1.0),
        },
        // One shared AES-GCM engine: 256-byte requests at 0.5 Mpps against 1400-byte ones at
        // 5 Mpps. On a virtual clock the engine is a synthetic one with the machine's costs.
        Scenario::Engine => {
            let engine = match timing {
                Timing::Real => NtSpec::AesGcm(CryptoConfig {
                    direction: Direction::Encrypt,
                    keys: (1..=2).map(|t| TenantKey { tenant: t, spi: t as u32, key_hex: KEY.into() }).collect(),
                    max_senders: 16,
                }),
                Timing::Virtual(m) => NtSpec::Synthetic(SyntheticConfig {
                    cost_ps_per_byte: m.engine_ps_per_byte,
                    engine: true,
                    ..SyntheticConfig::costing(m.engine_ns)
                }),
            };
            Setup {
                victim_chain: vec![engine],
                antagonist_chain: None,
                victim: (256 - 42, 500_000.0),
                antagonist: (1400 - 42, 5_000_000.0),
                weights: (1.0, 1.0),
            }
        }
        // Two tenants of weights 1 and 3 on one expensive NT, both over its capacity, at rates
        // where each has a few packets an epoch.
        Scenario::Weighted => Setup {
            victim_chain: vec![synthetic(40_000)],
            antagonist_chain: None,
            victim: (64, 30_000.0),
            antagonist: (64, 30_000.0),
            weights: (1.0, 3.0),
        },
        Scenario::WeightedMpps => Setup {
            victim_chain: vec![synthetic(400)],
            antagonist_chain: None,
            victim: (64, 3_000_000.0),
            antagonist: (64, 3_000_000.0),
            weights: (1.0, 3.0),
        },
        // Tenants' own code: 200 vs 20,000 units of fuel a packet. On the real clock the
        // interpreter takes about 1 µs for the victim's packet, so it offers 100 kpps there.
        Scenario::ExpensiveWasm => Setup {
            victim_chain: vec![crate::wasm::costing(200, 1_000_000)],
            antagonist_chain: Some(vec![crate::wasm::costing(20_000, 1_000_000)]),
            victim: (64, wasm_victim_pps(timing)),
            antagonist: (64, 100_000.0),
            weights: (1.0, 1.0),
        },
        // Every antagonist packet runs until its time bound cuts it (and is dropped).
        Scenario::WasmHog => Setup {
            victim_chain: vec![crate::wasm::costing(200, 1_000_000)],
            antagonist_chain: Some(vec![crate::wasm::hog(wasm_bound.0, wasm_bound.1)]),
            victim: (64, wasm_victim_pps(timing)),
            antagonist: (64, 20_000.0),
            weights: (1.0, 1.0),
        },
    }
}

/// The clock a run is on, and how it moves.
enum RunClock {
    Real(MonotonicClock),
    Virtual(ManualClock, Duration, Option<Stalls>),
}

impl RunClock {
    fn boxed(&self) -> Box<dyn Clock> {
        match self {
            RunClock::Real(c) => Box::new(*c),
            RunClock::Virtual(c, ..) => Box::new(c.clone()),
        }
    }

    /// Drives `node` for `d`; returns the time that passed.
    fn drive<B: snic_dataplane::backend::Backend>(&self, node: &mut Node<B>, d: Duration) -> Duration {
        match self {
            RunClock::Real(_) => spin(node, d),
            RunClock::Virtual(c, idle, stalls) => {
                let t0 = c.now();
                run_virtual_stalled(node, c, d, *idle, *stalls);
                c.now().saturating_since(t0)
            }
        }
    }
}

/// Drives a node on virtual clock `clock` for `d`: polls, and moves time on by `idle` whenever
/// a poll finds nothing to do (the node's work moves it otherwise).
pub fn run_virtual<B: snic_dataplane::backend::Backend>(node: &mut Node<B>, clock: &ManualClock, d: Duration, idle: Duration) {
    run_virtual_stalled(node, clock, d, idle, None);
}

/// [`run_virtual`] on a core that other work takes away as `stalls` says: during a stall the
/// node does not poll and time moves on.
pub fn run_virtual_stalled<B: snic_dataplane::backend::Backend>(
    node: &mut Node<B>,
    clock: &ManualClock,
    d: Duration,
    idle: Duration,
    stalls: Option<Stalls>,
) {
    let end = clock.now() + d;
    while clock.now() < end {
        if let Some(s) = stalls {
            let (every, off) = (s.every.as_nanos() as u64, s.off.as_nanos() as u64);
            let phase = clock.now().as_nanos() % every.max(1);
            if phase < off {
                clock.take_core(Duration::from_nanos(off - phase));
                continue;
            }
        }
        if node.poll() == 0 {
            clock.advance(idle);
        }
    }
}

/// Runs scenario `s` in mode `m`.
pub fn run(s: Scenario, m: Mode, p: &Params) -> Result<Outcome, TestbedError> {
    let setup = setup(s, p.timing, (p.wasm_bound, p.wasm_packet_us));
    let src = "192.0.2.1:4789".parse().expect("an address");
    let antagonist_pps = if m == Mode::Alone { 0.0 } else { setup.antagonist.1 };
    let streams = vec![
        StreamSpec { datagram: datagram(100, 1000, setup.victim.0), pps: setup.victim.1, src },
        StreamSpec { datagram: datagram(200, 2000, setup.antagonist.0), pps: antagonist_pps, src },
    ];
    let fair = FairConfig { epoch: p.epoch, enforce: m.enforce(), core_target: p.core_target, ..FairConfig::default() };
    let cfg = NodeConfig {
        core: NodeCoreConfig {
            fair,
            // The in-memory "link" is the memory bus: far faster than a NIC's.
            link_bps: 400e9,
            workers: p.workers,
            auto_place: p.auto_place,
            // Nothing enforced: the chains' instances take turns by packets, not by time.
            sched: if m == Mode::Off { SchedConfig { quantum_ns: 0.0, ..SchedConfig::default() } } else { SchedConfig::default() },
            ..NodeCoreConfig::default()
        },
        vtep_port: None,
        engine_buckets: m.enforce() || m == Mode::Buckets,
        // Pinning is for the real clock's measurements; virtual cores need no core.
        pin_cores: p.workers > 0 && p.timing == Timing::Real,
        ..Default::default()
    };
    let (clock, io) = match p.timing {
        Timing::Real => (RunClock::Real(MonotonicClock::default()), IoCost::default()),
        Timing::Virtual(machine) => (RunClock::Virtual(ManualClock::default(), machine.idle_poll, machine.stalls), machine.io),
    };
    let backend =
        if m == Mode::Queues { Paced::with_queues(streams, p.ring, clock.boxed()) } else { Paced::new(streams, p.ring, clock.boxed()) }
            .with_io_cost(io);
    let mut node = Node::new(cfg, backend, clock.boxed())?;
    if m == Mode::Queues {
        // Queue i holds stream i's packets: tenant i + 1's.
        node.set_rx_queue_tenant(0, Some(TenantId(1)));
        node.set_rx_queue_tenant(1, Some(TenantId(2)));
    }
    let (victim_at, antagonist_at) = if p.isolate { (Some(Place::Dispatcher), Some(Place::Worker(0))) } else { (None, None) };
    let c1 = node.add_chain(setup.victim_chain.clone());
    let i1 = match victim_at {
        Some(at) => node.launch_on(c1, at)?,
        None => node.launch(c1)?,
    };
    let (c2, i2) = match &setup.antagonist_chain {
        Some(specs) => {
            let c = node.add_chain(specs.clone());
            let i = match antagonist_at {
                Some(at) => node.launch_on(c, at)?,
                None => node.launch(c)?,
            };
            (c, i)
        }
        None => (c1, i1),
    };
    let mut mat = Mat::new();
    let n2 = setup.antagonist_chain.as_ref().map_or(setup.victim_chain.len(), Vec::len);
    for (t, chain, n, w) in [(1u16, c1, setup.victim_chain.len(), setup.weights.0), (2, c2, n2, setup.weights.1)] {
        node.set_dag(DagUid(t as u32), DagRoute::new(vec![Step { chain, mask: NtMask::all(n) }]));
        mat.insert(dag_rule(100 * t as u32, TenantId(t), DagUid(t as u32)));
        let out = Peer { addr: "192.0.2.9:4789".parse().expect("an address"), mac: MacAddr::default() };
        node.fdb_mut().set_default(100 * t as u32, Some(out));
        node.set_tenant(TenantId(t), w);
    }
    node.mat_handle().store(Arc::new(mat));
    clock.drive(&mut node, p.warmup);
    node.backend_mut().reset_stats();
    let secs = clock.drive(&mut node, p.measure).as_secs_f64();
    Ok(outcome(&node, s, m, &clock, secs, (i1, i2)))
}

fn outcome(
    node: &Node<Paced>,
    s: Scenario,
    m: Mode,
    clock: &RunClock,
    secs: f64,
    (i1, i2): (snic_core::ids::InstanceId, snic_core::ids::InstanceId),
) -> Outcome {
    let st = node.backend().stats();
    let fair = node.core().meter().fairness();
    let name = |d: Option<usize>| d.and_then(|d| fair.resources().get(d)).map(|r| r.name.clone());
    let share = |t: u16| fair.shares().iter().find(|x| x.tenant == TenantId(t));
    let doms: Vec<f64> = (1..=2).filter_map(share).map(|x| x.dominant_share).collect();
    let (v, x) = (&st[0], &st[1]);
    let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    Outcome {
        scenario: s.name(),
        mode: m.name(),
        clock: match clock {
            RunClock::Real(_) => "real",
            RunClock::Virtual(..) => "virtual",
        },
        victim_offered_pps: per_s(v.offered),
        victim_delivered_pps: per_s(v.delivered),
        victim_kept: if v.offered > 0 { v.delivered as f64 / v.offered as f64 } else { 0.0 },
        throughput_ratio: if x.delivered > 0 { v.delivered as f64 / x.delivered as f64 } else { 0.0 },
        victim_p50_ns: v.latency.quantile(0.5),
        victim_p99_ns: v.latency.quantile(0.99),
        victim_ring_drops: v.ring_drops,
        antagonist_offered_pps: per_s(x.offered),
        antagonist_delivered_pps: per_s(x.delivered),
        antagonist_ring_drops: x.ring_drops,
        antagonist_limit_pps: node.core().meter().limit(TenantId(2)),
        jain_dominant: jain(&doms),
        victim_dominant: name(share(1).and_then(|x| x.dominant)),
        antagonist_dominant: name(share(2).and_then(|x| x.dominant)),
        resources: match (share(1), share(2)) {
            (Some(v), Some(x)) => fair
                .resources()
                .iter()
                .enumerate()
                .map(|(k, r)| (r.name.clone(), r.capacity, v.demand[k], v.allocation[k], x.demand[k], x.fixed[k], x.allocation[k]))
                .collect(),
            _ => Vec::new(),
        },
        dispatcher_ns: node.core().meter().dispatcher_ns(),
        victim_drops: node.stats().tenants[1].drops_by_reason(),
        antagonist_drops: node.stats().tenants[2].drops_by_reason(),
        victim_place: place_name(node.place_of(i1)),
        antagonist_place: place_name(node.place_of(i2)),
        moves: node.core().events().moves,
    }
}

/// "dispatcher", "worker N" or "none".
pub fn place_name(p: Option<Place>) -> String {
    match p {
        Some(Place::Dispatcher) => "dispatcher".into(),
        Some(Place::Worker(w)) => format!("worker {w}"),
        None => "none".into(),
    }
}
