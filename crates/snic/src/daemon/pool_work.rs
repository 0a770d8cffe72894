//! The data-plane thread's side of the pool: hosting peers' DAGs (and giving them back with
//! their state), and carrying out what the node's pool agent asks — remote launches, moves
//! home — with the answers given back to the node as they come, never waited for.

use super::handback::Returned;
use super::pool::{Hosting, PoolLink};
use super::worker::{chain_name, HostedSnap};
use snic_control::plan::{HostRequest, Plan, TenantPlan};
use snic_core::ids::{ChainId, DagUid, TenantId};
use snic_core::pool::placements::HostAnswer;
use snic_core::pool::redirect::{Fence, FenceState};
use snic_core::pool::MemberEvent;
use snic_core::time::Instant;
use snic_dataplane::backend::Backend;
use snic_dataplane::backend::Waker;
use snic_dataplane::node::{ChainState, PoolRequest};
use snic_dataplane::Node;
use std::net::SocketAddr;
use std::sync::mpsc;

/// A DAG hosted for a peer: its home's data address, the request, the local tenant standing
/// in for the home's, its route here.
type Hosted = (SocketAddr, HostRequest, TenantId, u32);

/// A remote launch asked of a peer for a chain the node has no room for, waiting for its
/// answer.
struct Placing {
    chain: ChainId,
    route: u32,
    /// The peer's pool address.
    peer: SocketAddr,
    answer: mpsc::Receiver<Hosting>,
}

/// A chain coming home, waiting for the peer's answer with its state.
struct Returning {
    chain: ChainId,
    answer: mpsc::Receiver<Returned>,
}

/// A DAG to give back once the packets its home sent it have arrived: its home's data
/// address, its route here, the fence, who waits.
struct Fenced {
    home: SocketAddr,
    route: u32,
    fence: Fence,
    reply: mpsc::Sender<Returned>,
}

/// A DAG being given back to its home: the chains whose state is still being collected, the
/// states collected, who waits for them.
struct GivingBack {
    chains: Vec<ChainId>,
    states: Vec<ChainState>,
    reply: mpsc::Sender<Returned>,
}

/// The pool's work on the data-plane thread.
#[derive(Default)]
pub(super) struct PoolWork {
    /// Wakes the data-plane thread when an answer comes.
    waker: Option<Waker>,
    hosted: Vec<Hosted>,
    link: Option<PoolLink>,
    /// The members up, as membership said: a node built anew (a rebuild) is told them again.
    members: std::collections::BTreeSet<SocketAddr>,
    placing: Vec<Placing>,
    returning: Vec<Returning>,
    fenced: Vec<Fenced>,
    giving_back: Vec<GivingBack>,
}

impl PoolWork {
    pub(super) fn new(waker: Option<Waker>) -> Self {
        PoolWork { waker, ..Default::default() }
    }

    /// The pool thread, to reach peers.
    pub(super) fn set_link<B: Backend>(&mut self, node: Option<&mut Node<B>>, link: PoolLink) {
        // Peers name this node's generation in the packets they redirect here.
        if let Some(n) = node {
            n.set_pool_generation(link.gen);
        }
        self.link = Some(link);
    }

    /// A membership change, for the node's pool agent (and kept for a node built anew).
    pub(super) fn member<B: Backend>(&mut self, node: Option<&mut Node<B>>, event: MemberEvent) {
        match event {
            MemberEvent::Up(a) => {
                self.members.insert(a);
            }
            MemberEvent::Down(a) => {
                self.members.remove(&a);
            }
            MemberEvent::Rejoined => {}
        }
        if let Some(n) = node {
            n.pool_member(event);
        }
    }

    /// `node` replaces the one the pool knew (a rebuild): it takes the pool's generation (peers
    /// name it in what they redirect here) and learns the members that are up; their load
    /// reports come with the next gossip.
    pub(super) fn attach<B: Backend>(&self, node: &mut Node<B>) {
        if let Some(l) = &self.link {
            node.set_pool_generation(l.gen);
        }
        for &m in &self.members {
            node.pool_member(MemberEvent::Up(m));
        }
    }

    /// Hosts `req` for `home` on `node`: a local tenant for it, its chains (the entry step's
    /// launched, the others on demand), its route. Its number here.
    pub(super) fn host<B: Backend>(&mut self, node: &mut Node<B>, plan: &Plan, home: SocketAddr, req: HostRequest) -> Result<u32, String> {
        req.validate()?;
        // One stand-in per home tenant: its DAGs hosted here are charged together.
        let t = match self.hosted.iter().find(|h| h.0 == home && h.1.tenant == req.tenant) {
            Some(h) => h.2,
            None => self.guest_tenant(plan).ok_or("no tenant id left for a guest")?,
        };
        // The stand-in owns the home tenant's VNIs here — but never one another tenant owns: the
        // VNIs are unique in a pool, and a home that says otherwise does not take them (its
        // redirected packets on them are dropped, `foreign_vni`).
        let mut req = req;
        let name = req.tenant.clone();
        req.vnis.retain(|&v| {
            let taken = node.fdb().owner(v).is_some_and(|o| o != t);
            if taken {
                tracing::warn!(
                    vni = v,
                    tenant = name,
                    "pool: a hosted tenant's VNI is another tenant's here: its redirected packets on it are dropped"
                );
            }
            !taken
        });
        crate::deploy::set_tenant(node, &stand_in(&req, t));
        let ids: Vec<ChainId> = req
            .chains
            .iter()
            .map(|(nts, specs)| {
                let c = node.add_chain(specs.clone());
                node.label_chain(c, nts);
                c
            })
            .collect();
        let shared = self.hosted.iter().any(|h| h.2 == t);
        let undo = |node: &mut Node<B>| {
            for c in &ids {
                node.remove_chain(*c);
            }
            if !shared {
                crate::deploy::remove_tenant(node, &stand_in(&req, t));
            }
        };
        let first = ids[req.steps[req.entry].0];
        if let Err(e) = node.launch_for_peer(first) {
            undo(node);
            return Err(format!("cannot launch its entry chain: {e}"));
        }
        let route = match req.route(|c| ids[c]) {
            Ok(r) => r,
            Err(e) => {
                undo(node);
                return Err(e);
            }
        };
        let r = node.host_dag(home, t, route);
        tracing::info!(home = %home, tenant = req.tenant, dag = req.dag, local_tenant = t.0, route = r, "pool: hosting a DAG for a peer");
        // The hosted VNIs' flood lists (kept in the request: what unhosting removes).
        req.floods.retain(|(vni, _)| {
            let local = plan.tenants.iter().any(|t| t.vnis.contains(vni));
            if local {
                tracing::warn!(
                    vni,
                    tenant = req.tenant,
                    "pool: a hosted tenant's VNI is also a local tenant's: its broadcasts go where the local tenant's do"
                );
            }
            !local
        });
        for r in req.flood_routes() {
            if let Err(e) = crate::deploy::add_route(node, &r) {
                tracing::warn!(vni = r.vni, vtep = %r.vtep, error = %e, "pool: a hosted VNI's flood list is incomplete");
            }
        }
        self.hosted.push((home, req, t, r));
        Ok(r)
    }

    /// The local tenant a peer's DAG is charged to: the highest id neither the plan nor another
    /// hosted DAG uses.
    fn guest_tenant(&self, plan: &Plan) -> Option<TenantId> {
        (1..snic_control::state::MAX_TENANTS)
            .rev()
            .map(TenantId)
            .find(|t| !plan.tenants.iter().any(|p| p.id == *t) && !self.hosted.iter().any(|h| h.2 == *t))
    }

    /// The peer at data address `peer` is down: the chains redirected to it run here again, and
    /// the DAGs hosted for it go (their chains and their tenant).
    pub(super) fn peer_down<B: Backend>(&mut self, node: &mut Node<B>, peer: SocketAddr) {
        for c in node.forget_peer(peer) {
            tracing::warn!(peer = %peer, chain = chain_name(node, c), "pool: the peer running a chain is down; it runs here again");
        }
        for (home, req, _, _) in self.unhost_where(node, |h| h.0 == peer, false) {
            tracing::warn!(home = %home, tenant = req.tenant, dag = req.dag, "pool: the peer a DAG was hosted for is down; it goes");
        }
    }

    /// The data plane is rebuilt (a change failed half way): the DAGs `old` (the node
    /// replaced) had peers host for it are given up — the peers stop them, and the new node
    /// places its chains afresh — and the DAGs hosted here for peers are gone with the old
    /// node: their homes' redirected packets are dropped here (`not_hosted`) until they move
    /// them.
    pub(super) fn rebuilt<B: Backend>(&mut self, old: &Node<B>) {
        for (peer, hosted) in old.placed_dags() {
            tracing::warn!(peer = %peer, hosted, "pool: the data plane was rebuilt; the DAG a peer hosted for it is given up (placed again on demand)");
            if let Some(l) = &self.link {
                l.unhost(peer, hosted);
            }
        }
        self.placing.clear();
        self.returning.clear();
        self.fenced.clear();
        self.giving_back.clear();
        for (home, req, _, route) in std::mem::take(&mut self.hosted) {
            tracing::warn!(home = %home, tenant = req.tenant, dag = req.dag, route, "pool: the data plane was rebuilt; a DAG hosted for a peer is gone with it");
        }
    }

    /// The home node at data address `home` no longer needs its DAG hosted here as `route`.
    pub(super) fn unhost<B: Backend>(&mut self, node: &mut Node<B>, home: SocketAddr, route: u32) {
        for (home, req, _, r) in self.unhost_where(node, |h| h.0 == home && h.3 == route, false) {
            tracing::info!(home = %home, tenant = req.tenant, dag = req.dag, route = r, "pool: the home node took its DAG back; no longer hosting it");
        }
    }

    /// The home node at data address `home` takes its DAG hosted here as `route` back, having
    /// sent it `sent` packets: once they have arrived (or [`Fence`] stops waiting) it stops
    /// here, what it has runs to the end, and `reply` gets its chains' state once their
    /// instances have stopped (an error at once if it is not hosted here).
    pub(super) fn give_back<B: Backend>(
        &mut self,
        node: &mut Node<B>,
        home: SocketAddr,
        route: u32,
        sent: u64,
        reply: mpsc::Sender<Returned>,
    ) {
        if !self.hosted.iter().any(|h| h.0 == home && h.3 == route) {
            let _ = reply.send(Err(format!("no DAG {route} is hosted here for {home}")));
            return;
        }
        self.fenced.push(Fenced { home, route, fence: Fence::new(sent, node.now()), reply });
        self.check_fences(node);
    }

    /// Gives back the DAGs whose home's packets have all arrived, or waited long enough.
    fn check_fences<B: Backend>(&mut self, node: &mut Node<B>) {
        let now = node.now();
        for f in std::mem::take(&mut self.fenced) {
            let received = node.pool_link().hosted_received(f.route).unwrap_or(0);
            match f.fence.check(received, now) {
                FenceState::Wait => self.fenced.push(f),
                FenceState::Ready => self.stop_and_export(node, f.home, f.route, f.reply),
                FenceState::TimedOut { missing } => {
                    tracing::warn!(home = %f.home, route = f.route, missing, "pool: packets the home node sent a DAG it takes back did not arrive in time; giving it back without them");
                    self.stop_and_export(node, f.home, f.route, f.reply);
                }
            }
        }
    }

    /// How long until a DAG given back stops waiting for its home's packets, if one waits.
    pub(super) fn next_deadline(&self, now: Instant) -> Option<std::time::Duration> {
        self.fenced.iter().map(|f| f.fence.until.saturating_since(now)).min()
    }

    /// Stops the DAG hosted for `home` as `route` and collects its chains' state for `reply`.
    fn stop_and_export<B: Backend>(&mut self, node: &mut Node<B>, home: SocketAddr, route: u32, reply: mpsc::Sender<Returned>) {
        let Some((_, req, _, _)) = self.hosted.iter().find(|h| h.0 == home && h.3 == route) else {
            let _ = reply.send(Err(format!("no DAG {route} is hosted here for {home}")));
            return;
        };
        tracing::info!(home = %home, tenant = req.tenant, dag = req.dag, route, "pool: the home node takes its DAG back; stopping it and collecting its state");
        let chains = route_chains(node, route);
        self.unhost_where(node, |h| h.0 == home && h.3 == route, true);
        self.giving_back.push(GivingBack { chains, states: Vec::new(), reply });
    }

    /// Stops hosting the DAGs `which` picks: their chains (with their state collected if
    /// `export`) and their stand-in tenants go. Returns them.
    fn unhost_where<B: Backend>(&mut self, node: &mut Node<B>, which: impl Fn(&Hosted) -> bool, export: bool) -> Vec<Hosted> {
        let (gone, kept): (Vec<Hosted>, Vec<Hosted>) = std::mem::take(&mut self.hosted).into_iter().partition(which);
        self.hosted = kept;
        for (_, req, t, r) in &gone {
            let chains = route_chains(node, *r);
            node.unhost_dag(*r);
            for c in chains {
                if export {
                    node.export_chain(c);
                } else {
                    node.remove_chain(c);
                }
            }
            // (The stand-in stays while another DAG of its tenant is hosted here.)
            if !self.hosted.iter().any(|h| h.2 == *t) {
                crate::deploy::remove_tenant(node, &stand_in(req, *t));
            }
        }
        // The hosted VNIs' flood lists, unless another hosted DAG has the VNI.
        for (_, req, _, _) in &gone {
            for r in req.flood_routes() {
                if !self.hosted.iter().any(|h| h.1.floods.iter().any(|f| f.0 == r.vni)) {
                    crate::deploy::remove_route(node, &r);
                }
            }
        }
        gone
    }

    /// Carries out what the node asks of the pool (remote launches, moves home, unhosting),
    /// and gives it the answers that came; sends the state of DAGs given back once collected.
    /// The answers given to the node.
    pub(super) fn poll<B: Backend>(&mut self, node: &mut Node<B>, plan: &Plan) -> usize {
        while let Some(r) = node.poll_pool() {
            self.request(node, plan, r);
        }
        self.check_fences(node);
        let waiting = self.placing.len() + self.returning.len();
        self.placing.retain(|p| {
            let Some(answer) = answered(&p.answer, "the pool thread has stopped") else { return true };
            match answer {
                Ok((data, hosted, gen)) => node.pool_answer(p.chain, p.route, p.peer, HostAnswer::Hosted { data, hosted, gen }),
                Err(e) => {
                    tracing::warn!(chain = chain_name(node, p.chain), peer = %p.peer, reason = e.as_str(), "pool: the peer did not host the chain");
                    node.pool_answer(p.chain, p.route, p.peer, HostAnswer::Refused);
                }
            }
            false
        });
        self.returning.retain(|r| {
            let Some(answer) = answered(&r.answer, "the thread moving it stopped") else { return true };
            if let Err(e) = &answer {
                tracing::warn!(chain = chain_name(node, r.chain), reason = e.as_str(), "pool: the chain's state did not come home");
            }
            node.pool_returned(r.chain, answer);
            false
        });
        while let Some((chain, state)) = node.poll_exported() {
            if let Some(g) = self.giving_back.iter_mut().find(|g| g.chains.contains(&chain)) {
                g.chains.retain(|c| *c != chain);
                g.states.push(state);
            }
        }
        self.giving_back.retain_mut(|g| {
            if !g.chains.is_empty() {
                return true;
            }
            let _ = g.reply.send(Ok(std::mem::take(&mut g.states)));
            false
        });
        waiting.saturating_sub(self.placing.len() + self.returning.len())
    }

    fn request<B: Backend>(&mut self, node: &mut Node<B>, plan: &Plan, r: PoolRequest) {
        match r {
            PoolRequest::Place { chain, route, dag, pos, peer } => {
                let d = plan.dags.iter().find(|d| d.uid == dag);
                let req = d.and_then(|d| plan.host_request(&d.name)).map(|r| HostRequest { entry: pos as usize, ..r });
                match (&self.link, req) {
                    // (The node's events say what happens, in the log too: `log_news`.)
                    (Some(l), Some(req)) => self.placing.push(Placing { chain, route, peer, answer: l.place_async(peer, req) }),
                    _ => node.pool_answer(chain, route, peer, HostAnswer::Refused),
                }
            }
            PoolRequest::Return { chain, peer, hosted, sent, .. } => match &self.link {
                Some(l) => self.returning.push(Returning { chain, answer: l.fetch_state(peer, hosted, sent, self.waker.clone()) }),
                None => node.pool_returned(chain, Err("no pool".into())),
            },
            PoolRequest::Unhost { peer, hosted } => {
                if let Some(l) = &self.link {
                    l.unhost(peer, hosted);
                }
            }
        }
    }

    /// The DAGs hosted for peers, with their packet counts, for status.
    pub(super) fn hosted_snap<B: Backend>(&self, node: &Node<B>) -> Vec<HostedSnap> {
        self.hosted
            .iter()
            .map(|(home, req, t, r)| HostedSnap {
                home: home.to_string(),
                tenant: req.tenant.clone(),
                dag: req.dag.clone(),
                route: *r,
                local_tenant: t.0,
                packets: node.pool_link().hosted().find(|(x, _)| x == r).map_or(0, |(_, h)| h.packets),
            })
            .collect()
    }
}

/// The answer on `rx`, if it came (`gone`: the error if its sender went without one).
fn answered<T>(rx: &mpsc::Receiver<Result<T, String>>, gone: &str) -> Option<Result<T, String>> {
    match rx.try_recv() {
        Ok(a) => Some(a),
        Err(mpsc::TryRecvError::Empty) => None,
        Err(mpsc::TryRecvError::Disconnected) => Some(Err(gone.into())),
    }
}

/// The chains a hosted route steps through.
fn route_chains<B: Backend>(node: &Node<B>, route: u32) -> Vec<ChainId> {
    let mut chains: Vec<ChainId> =
        node.core().sched().route(DagUid(route)).map(|rt| rt.steps().iter().map(|s| s.chain).collect()).unwrap_or_default();
    chains.sort_by_key(|c| c.index());
    chains.dedup();
    chains
}

/// The local tenant `t` standing in for the home node's tenant of `req`.
fn stand_in(req: &HostRequest, t: TenantId) -> TenantPlan {
    TenantPlan {
        name: req.tenant.clone(),
        id: t,
        weight: req.weight,
        store_buffers: req.store_buffers,
        vnis: req.vnis.clone(),
        fdb_macs: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snic_dataplane::backend::udp::UdpBackend;
    use snic_dataplane::node::MonotonicClock;
    use snic_dataplane::NodeConfig;

    fn node() -> Node<UdpBackend> {
        let backend = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        Node::new(NodeConfig::default(), backend, Box::new(MonotonicClock::default())).unwrap()
    }

    /// A data plane built anew (a rebuild after a change failed half way) is told the members
    /// that are up: without them its pool agent would place nothing on a peer until membership
    /// next changed.
    #[test]
    fn a_node_built_anew_learns_the_members_up() {
        let (a, b): (SocketAddr, SocketAddr) = ("192.0.2.1:7946".parse().unwrap(), "192.0.2.2:7946".parse().unwrap());
        let mut first = node();
        let mut work = PoolWork::default();
        for e in [MemberEvent::Up(a), MemberEvent::Up(b), MemberEvent::Down(a)] {
            work.member(Some(&mut first), e);
        }
        let up = |n: &Node<UdpBackend>| n.core().pool().peers(n.now()).map(|(p, _)| p).collect::<Vec<_>>();
        assert_eq!(up(&first), vec![b]);
        let mut rebuilt = node();
        assert!(up(&rebuilt).is_empty());
        work.attach(&mut rebuilt);
        assert_eq!(up(&rebuilt), vec![b], "the rebuilt node knows the member up, not the one gone");
    }
}
