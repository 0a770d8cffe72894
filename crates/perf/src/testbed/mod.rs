//! Canonical experiment setups shared by tests, `snic bench` and (later) `snic sim`, so that
//! each reports on the same scenario instead of its own copy of it.
//!
//! - [`Fig7`]: the paper's Fig. 7 / Fig. 20 fairness scenario on an in-memory port.
//! - [`isolation`]: FairNIC's isolation scenarios (head-of-line blocking, three antagonists),
//!   on the real clock or on a virtual one with a machine model.

pub mod isolation;
pub mod overload;

use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::fair::TenantShare;
use snic_core::ids::{DagUid, TenantId};
use snic_core::mat::{Action, Mat, PortRange, Rule};
use snic_dataplane::backend::mem::MemPort;
use snic_dataplane::backend::Framing;
use snic_dataplane::node::{Clock, LaunchError, ManualClock};
use snic_dataplane::store::Peer;
use snic_dataplane::worker::WorkerError;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::synthetic::SyntheticConfig;
use snic_nt::NtSpec;
use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The AES-128 key the benchmarks' and scenarios' AES-GCM senders use.
pub const KEY: &str = "000102030405060708090a0b0c0d0e0f";

/// Polls `node` flat out for about `d` of real time (the clock is read every 256 polls);
/// returns the time it took.
pub fn spin<B: snic_dataplane::backend::Backend>(node: &mut Node<B>, d: Duration) -> Duration {
    let t0 = std::time::Instant::now();
    loop {
        for _ in 0..256 {
            node.poll();
        }
        if t0.elapsed() >= d {
            return t0.elapsed();
        }
    }
}

/// A VXLAN datagram of `vni` carrying UDP from port `sport` with `payload` bytes.
pub fn datagram(vni: u32, sport: u16, payload: usize) -> Vec<u8> {
    let spec = FrameSpec {
        outer: None,
        vni,
        inner_src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        inner_dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src: [10, 0, 0, 1].into(),
        dst: [10, 0, 0, 2].into(),
        l4: L4Spec::Udp { src_port: sport, dst_port: 80 },
        payload_len: payload,
        payload_byte: 0,
    };
    let mut b = vec![0u8; 64 + payload];
    let n = build(&spec, &mut b).expect("the buffer fits the frame");
    b.truncate(n);
    b
}

/// A firewall NT that denies UDP to `port` and allows the rest.
pub fn deny_udp_port(port: u16) -> NtSpec {
    use snic_nt::firewall::{FirewallConfig, FwRule, Policy};
    let deny = FwRule {
        src: None,
        dst: None,
        proto: Some(17),
        src_ports: PortRange::ANY,
        dst_ports: PortRange::single(port),
        action: Policy::Deny,
    };
    NtSpec::Firewall(FirewallConfig { rules: vec![deny], ..Default::default() })
}

/// A NAT NT translating sources in 10.0.0.0/24 to 203.0.113.1, ports 1024 and up.
pub fn snat() -> NtSpec {
    NtSpec::Nat(snic_nt::nat::NatConfig {
        snat: Some(snic_nt::nat::Snat {
            inside: "10.0.0.0/24".parse().expect("a valid prefix"),
            public: [203, 0, 113, 1].into(),
            ports: PortRange { lo: 1024, hi: 65535 },
        }),
        ..Default::default()
    })
}

/// The MAT rule "every packet of `vni` runs `dag`, for `tenant`".
pub fn dag_rule(vni: u32, tenant: TenantId, dag: DagUid) -> Rule {
    Rule { vni, proto: None, dst: None, dst_ports: PortRange::ANY, priority: 0, action: Action::Dag { tenant, dag } }
}

/// Deploys the one-tenant setup benchmarks use: tenant 1 (weight 1) on VNI 100 runs DAG 1 along
/// `route`, and everything on VNI 100 leaves for the VTEP `out`.
pub fn one_tenant<B: snic_dataplane::backend::Backend>(node: &mut Node<B>, route: DagRoute, out: Peer) {
    node.set_tenant(TenantId(1), 1.0);
    node.set_dag(DagUid(1), route);
    let mut mat = Mat::new();
    mat.insert(dag_rule(100, TenantId(1), DagUid(1)));
    node.mat_handle().store(Arc::new(mat));
    node.fdb_mut().set_default(100, Some(out));
}

/// Why a testbed could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// The node could not start.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// A chain could not launch.
    #[error(transparent)]
    Launch(#[from] LaunchError),
}

/// The paper's Fig. 7 scenario (§4.4, evaluated in Fig. 20): chains NT1→NT2 and NT3→NT4 with
/// per-instance throughputs of 10, 10, 7 and 10 units; user1 (tenant 1, VNI 100) visits NT1, NT2
/// and NT4; user2 (tenant 2, VNI 200) NT3, NT4 and NT2 — NT2 and NT4 are shared. The NTs are
/// synthetic engines of declared throughput, so the allocation depends on the policy alone, and
/// the node runs on a [`ManualClock`].
pub struct Fig7 {
    /// The node.
    pub node: Node<MemPort>,
    /// Its clock.
    pub clock: ManualClock,
    /// Packets per second per unit of the figure.
    pub unit_pps: f64,
    owed: [f64; 2],
    seq: u16,
}

impl Fig7 {
    /// Builds the scenario with `cfg` (its fair-sharing settings matter; framing is datagram).
    pub fn new(cfg: NodeConfig, unit_pps: f64) -> Result<Self, TestbedError> {
        let clock = ManualClock::default();
        let cfg = NodeConfig { vtep_port: None, ..cfg };
        let mut node = Node::new(cfg, MemPort::new(Framing::Datagram), Box::new(clock.clone()))?;
        let engine = |units: f64| NtSpec::Synthetic(SyntheticConfig::declared((units * unit_pps) as u64, false));
        let c1 = node.add_chain(vec![engine(10.0), engine(10.0)]);
        let c2 = node.add_chain(vec![engine(7.0), engine(10.0)]);
        node.label_chain(c1, &["nt1".into(), "nt2".into()]);
        node.label_chain(c2, &["nt3".into(), "nt4".into()]);
        node.launch(c1)?;
        node.launch(c2)?;
        node.set_dag(DagUid(1), DagRoute::new(vec![Step { chain: c1, mask: NtMask::all(2) }, Step { chain: c2, mask: NtMask(0b10) }]));
        node.set_dag(DagUid(2), DagRoute::new(vec![Step { chain: c2, mask: NtMask::all(2) }, Step { chain: c1, mask: NtMask(0b10) }]));
        let mut mat = Mat::new();
        for (vni, t, d) in [(100, 1, 1), (200, 2, 2)] {
            mat.insert(dag_rule(vni, TenantId(t), DagUid(d)));
            node.fdb_mut().set_default(vni, Some(Peer { addr: SocketAddr::from(([192, 0, 2, 9], 4789)), mac: MacAddr::default() }));
        }
        node.mat_handle().store(Arc::new(mat));
        node.set_tenant(TenantId(1), 1.0);
        node.set_tenant(TenantId(2), 1.0);
        Ok(Fig7 { node, clock, unit_pps, owed: [0.0; 2], seq: 0 })
    }

    /// Offers `load` units (user1, user2) for `dur` of virtual time in steps of `step`, polling
    /// the node to idle after each; `each` sees the node after every step. Returns the packets
    /// each user got through.
    pub fn drive(&mut self, load: [f64; 2], dur: Duration, step: Duration, mut each: impl FnMut(&Node<MemPort>)) -> [u64; 2] {
        let before = [1, 2].map(|t| self.node.stats().tenants[t].tx_packets);
        let end = self.clock.now() + dur;
        let src = SocketAddr::from(([192, 0, 2, 1], 4789));
        while self.clock.now() < end {
            self.clock.advance(step);
            for (i, vni) in [100, 200].into_iter().enumerate() {
                self.owed[i] += load[i] * self.unit_pps * step.as_secs_f64();
                while self.owed[i] >= 1.0 {
                    self.owed[i] -= 1.0;
                    self.seq = self.seq.wrapping_add(1);
                    self.node.backend_mut().rx.push_back((datagram(vni, 1000 + self.seq % 64, 64), src));
                }
            }
            while self.node.poll() > 0 {}
            self.node.backend_mut().tx.clear();
            each(&self.node);
        }
        let after = [1, 2].map(|t| self.node.stats().tenants[t].tx_packets);
        [after[0] - before[0], after[1] - before[1]]
    }

    /// A user's share as of the last epoch (`user` 1 or 2).
    pub fn share(&self, user: u16) -> Option<TenantShare> {
        self.node.core().meter().fairness().shares().iter().find(|s| s.tenant == TenantId(user)).cloned()
    }
}
