//! Fair sharing on measured demand, enforced at ingress (paper §4.4 "Scheduling with fairness").
//!
//! Every epoch the driver reports, per tenant, what it observed on every resource: the bytes it
//! offered at ingress, the NT time its packets asked for at the scheduler (whether or not a
//! credit was free), its egress bytes, its packet-store occupancy. [`Fairness::end_epoch`] turns
//! the observations into demand *rates*, smooths them, runs weighted DRF ([`crate::drf`]) and
//! sets each tenant's ingress limit so that what it admits uses no more than its allocation; a
//! tenant whose demand is met is not limited. Only ingress is throttled — the paper's choice:
//! the other resources follow from what is admitted.
//!
//! **Two parts of demand.** Some use comes with every packet that arrives, admitted or not:
//! the link's ingress bandwidth, the work of receiving and classifying it. The limiter cannot
//! reduce it, so the driver reports it as the *fixed* part; the rest (NT time, egress, buffers,
//! the remaining dispatcher work) is *variable*: it shrinks with what is admitted. A tenant's
//! demand is the sum, and DRF charges it all — a flood pays for its own reception. The limit
//! then admits the fraction `f` of offered packets for which fixed + `f` × variable stays
//! within the allocation on every resource that binds (a resource binds when another tenant
//! uses it too, and throttling can relieve it; see `binds`).
//!
//! **Intended load.** What the scheduler sees of a throttled tenant is what the ingress limiter
//! let through, not what the tenant wanted. Left alone, throttling would shrink the measured
//! demand, DRF would then grant more, the limit would lift, and the allocation would oscillate.
//! So variable observations are scaled by `offered / admitted` packets of the epoch: the load
//! the tenant would have put on each resource had it not been throttled. (The paper's "even if
//! there is no credit for the NT, we still capture the intended load", carried through the
//! ingress limiter as well.)
//!
//! Everything here is driven by `now` arguments; nothing reads a clock.

mod board;
mod grant;

pub use board::{Board, OnBoard};
pub use grant::{Allocate, Grant, Grants, Wants};

use crate::ids::TenantId;
use crate::time::Instant;
use core::time::Duration;

/// How a resource is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// An amount per epoch, turned into a rate per second (bandwidth, NT time).
    Rate,
    /// A level sampled at the epoch's end (buffer occupancy, memory).
    Level,
}

/// One resource of the node.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Resource {
    /// Name (metrics label), e.g. `ingress_bytes`, `nt:firewall`.
    pub name: String,
    /// Rate or level.
    pub kind: Kind,
    /// Capacity: per second for rates, absolute for levels.
    pub capacity: f64,
    /// Whether the node has one of it or each dispatcher thread its own (see [`Board`]).
    #[serde(skip)]
    pub scope: Scope,
}

/// Whose a resource is, on a node with several dispatcher threads ([`Board`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every thread's (its core, its packet store, its regions' instances): each thread
    /// reports its own, and DRF sees one per thread.
    #[default]
    Thread,
    /// The node's, shared by its threads (the link): each reports its tenants' use of it,
    /// and DRF sees their sum against one capacity.
    Node,
}

/// Fair-sharing parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairConfig {
    /// EPOCH_LEN: how often demand is measured and DRF re-run.
    pub epoch: Duration,
    /// Weight of the newest epoch in the demand average (1 = no smoothing).
    pub smoothing: f64,
    /// Depth of an ingress limiter, as time at its rate (bursts up to this are admitted).
    pub burst: Duration,
    /// Smallest depth of an ingress limiter, in packets: bursts that the queues can absorb are
    /// not dropped at ingress.
    pub min_burst_packets: f64,
    /// Apply the ingress limits; false measures and allocates only.
    pub enforce: bool,
    /// The share of each core (the dispatcher's, each worker's) that fair sharing hands out, in
    /// (0, 1]: the rest is headroom for work no tenant is charged for (dropping over-limit
    /// packets, bursts) and for catching up after the core was taken away. The lower, the
    /// sooner a tenant within its share gets through after a stall, and the less a
    /// work-conserving antagonist gets.
    pub core_target: f64,
    /// Memory the node gives tenants' NT state (a cache's bytes, a NAT's flow table, writes
    /// waiting for replicas), bytes: the capacity of the `memory` resource.
    pub nt_memory: f64,
    /// Scale the dispatcher's capacity by the share of its core its thread gets, as the driver
    /// reports it ([`crate::meter::Meter::core_share`]). Off by default: on the real node beside
    /// other work in CI, a tenant within its share lost a few packets in its own receive queue,
    /// first seen with it on; the cause was bursts read as rates (see `end_epoch`'s windows),
    /// with it on or off, and turning it on is still to be measured (issue 50's note).
    pub measure_core: bool,
}

impl Default for FairConfig {
    /// 100 µs epochs (docs/fairness.md: DRF for 64 tenants × 16 resources takes ~3 µs, so
    /// this costs ~3% of the dispatcher; at 20 µs, the paper's hardware value, 15%), a quarter
    /// weight for the newest epoch, bursts of 1 ms at the limited rate and at least 32 packets
    /// (as many as a tenant may always queue at a chain, `sched::MIN_QUEUE`: a burst the limiter
    /// admits past what the chain's queue holds would only be dropped there, after costing its
    /// reception), 80% of each core handed out, 4 GiB of NT state.
    fn default() -> Self {
        FairConfig {
            epoch: Duration::from_micros(100),
            smoothing: 0.25,
            burst: Duration::from_millis(1),
            min_burst_packets: crate::sched::MIN_QUEUE as f64,
            enforce: true,
            core_target: 0.8,
            nt_memory: 4.0 * (1u64 << 30) as f64,
            measure_core: false,
        }
    }
}

/// What the driver observed for one tenant during the epoch. Both slices are in the resources'
/// order, per epoch for rates and the level now for levels, and zeroed before the driver fills
/// them.
#[derive(Debug)]
pub struct Observed<'a> {
    /// Use that came with every offered packet, before the limiter (see the module docs).
    pub fixed: &'a mut [f64],
    /// Use by admitted packets, as seen behind the limiter.
    pub amounts: &'a mut [f64],
    /// Packets the tenant offered at ingress (before the limiter).
    pub offered_packets: u64,
    /// Packets the limiter admitted.
    pub admitted_packets: u64,
}

/// One tenant's state and the result of the last epoch.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TenantShare {
    /// The tenant.
    pub tenant: TenantId,
    /// DRF weight.
    pub weight: f64,
    /// Smoothed demand per resource (rates per second, levels absolute), fixed part included.
    pub demand: Vec<f64>,
    /// The fixed part of `demand`.
    pub fixed: Vec<f64>,
    /// Granted amount per resource.
    pub allocation: Vec<f64>,
    /// Fraction of the demand granted, 0..=1 (1 when there is no demand).
    pub fraction: f64,
    /// Index of the dominant resource, if the tenant has demand.
    pub dominant: Option<usize>,
    /// Granted share of the dominant resource.
    pub dominant_share: f64,
    /// Smoothed packets per second offered at ingress.
    pub offered_pps: f64,
    /// Ingress limit in packets per second (admitted packets); `None` when unlimited.
    pub limit_pps: Option<f64>,
    /// Epochs that ended with the tenant limited, since it was added: a tenant within its share
    /// that counts any was, for a moment, measured over it (status and metrics show it).
    pub limited_epochs: u64,
    /// Observations of variable use not yet folded into `demand` (see `Window`).
    #[serde(skip)]
    window: Window,
}

impl TenantShare {
    /// Its demand in the unit of each resource, as reported (status, metrics): scaled down,
    /// whole, until no part exceeds its resource's capacity (`capacities` in the order of
    /// [`Fairness::resources`]). The policy keeps the offered load — limits are a share of it —
    /// and DRF allocates either the same ([`crate::drf::within_capacity`]).
    pub fn demand_within(&self, capacities: &[f64]) -> Vec<f64> {
        crate::drf::within_capacity(&self.demand, capacities)
    }
}

/// Variable use observed over the epochs since it was last folded into the demand. One epoch's
/// `offered / admitted` is a sound scale only with enough admitted packets behind it: at a few
/// kpps an epoch admits zero, one or two, and the epochs that admit one are not typical ones
/// (with a receive queue per tenant, packets lost in it were counted 2 an epoch when none was
/// admitted and 5.3 when one was, against 3 on average, and the estimate ran 45% high). So
/// epochs are gathered until [`MIN_ADMITTED`] packets were admitted (or [`MAX_WINDOW`] epochs
/// passed), and the window's use is scaled by its offered over admitted packets: a ratio of
/// sums, not an average of per-epoch ratios. At Mpps every epoch is a window of its own.
///
/// The fixed part and the offered rate, which the limit is a fraction of, are windowed too
/// ([`Offered`]), until [`MIN_ADMITTED`] packets were *offered*: folded epoch by epoch, a
/// tenant at a few kpps (none, one or two packets an epoch) had an offered rate that jumped
/// between 0 and 20,000 pkt/s with every epoch, and so had its limit (issue 49). A window with
/// nothing offered at all is folded — the tenant's demand decays — only once it is longer than
/// the tenant's packets are apart, many times over ([`IDLE_GAPS`]): a quiet stretch between two
/// packets is not idleness.
#[derive(Debug, Clone, Default, PartialEq)]
struct Window {
    amounts: Vec<f64>,
    /// The offered side's window.
    off: Offered,
    offered: u64,
    admitted: u64,
    epochs: u32,
    secs: f64,
    /// The offered rate the variable part of the demand was measured at: smoothed with it,
    /// window by window, so that the two agree (a limit is the variable part's share over
    /// what it costs a packet, their ratio; see `Fairness::end_epoch`).
    var_pps: f64,
}

/// The fixed use and offered packets observed since they were last folded (see [`Window`]).
#[derive(Debug, Clone, Default, PartialEq)]
struct Offered {
    fixed: Vec<f64>,
    offered: u64,
    /// Epochs in a row at its end with nothing offered.
    quiet: u32,
    epochs: u32,
    secs: f64,
}

/// Packets the offered side's window must hold before it is folded: counts of packets lost
/// before reception come in lumps (a socket's counter read when its queue is, a receive ring's
/// as it is read), and a window of 16 read the offered rate ±20%; 64 reads it within about 10%.
pub const MIN_OFFERED: u64 = 64;

/// Packets a window must admit before its scale `offered / admitted` is trusted.
pub const MIN_ADMITTED: u64 = 16;
/// Epochs a window may gather at most: a tenant admitted less than [`MIN_ADMITTED`] packets in
/// this many epochs has its demand estimated on what there is.
pub const MAX_WINDOW: u32 = 128;
/// A window in which nothing was offered is folded (the tenant's demand decays) once it spans
/// this many of the tenant's mean gaps between packets (at least one epoch, at most
/// [`MAX_WINDOW`]): a tenant at 1 kpps on 100 µs epochs goes 8 ms without a packet before it is
/// taken to be idle (a stretch that long without one happens once in e^8 ≈ 3,000).
pub const IDLE_GAPS: f64 = 8.0;

/// Most a tenant's ingress limit moves from one epoch to the next, relative to it (see
/// `Fairness::end_epoch`).
pub const LIMIT_SLEW: f64 = 0.08;

/// Packets a limited tenant's own receive queue holds at least, however low its limit: a
/// receive batch, and bursts of a few.
pub const MIN_RX_DEPTH: usize = 32;

/// How many packets a tenant's own receive queue should hold so that a packet waits there no
/// longer than `max_wait`: a limited tenant's queue is read at its limit, so its depth is that
/// much time at the limit (at least [`MIN_RX_DEPTH`]); an unlimited tenant's (`None`) is the
/// backend's default. A queue left as deep as the socket's buffers (thousands of packets)
/// held a tenant limited to 1,000 pkt/s for seconds before it was read (issue 49); bounded, the
/// excess is lost at the tenant's own ingress — in the kernel, at no cost to the node — and
/// what is read is recent.
///
/// `core_share` is the share of its core the dispatcher gets ([`crate::meter::Meter::core_share`],
/// 1 unless `measure_core`): after a stretch off the core a limited tenant's bucket admits its
/// limit over that share ([`FairConfig::burst_for`]), and its queue must hold what the bucket
/// will admit, or the kernel drops it first (`rx_queue_full`) — a tenant limited for one epoch
/// of a dip in the share lost packets there that its bucket would have taken.
pub fn rx_depth(limit_pps: Option<f64>, max_wait: Duration, core_share: f64) -> Option<usize> {
    let share = core_share.clamp(f64::MIN_POSITIVE, 1.0);
    limit_pps.map(|l| ((l / share * max_wait.as_secs_f64()).ceil() as usize).max(MIN_RX_DEPTH))
}

/// The per-epoch fairness controller. See the module docs.
#[derive(Debug)]
pub struct Fairness {
    cfg: FairConfig,
    resources: Vec<Resource>,
    shares: Vec<TenantShare>,
    next_epoch: Instant,
    epoch_start: Instant,
    epochs: u64,
    scratch: Vec<f64>,
    scratch_fixed: Vec<f64>,
    /// The visited tenants' demand, and what the allocation grants them (in `visit`'s order).
    wants: Vec<Wants>,
    grants: Vec<Grant>,
    /// The allocation when the node's threads do not share one ([`Fairness::end_epoch_with`]).
    local: Grants,
    /// Share index by tenant index (`u32::MAX`: not registered).
    index_of: Vec<u32>,
    /// Shares with something to account for (demand, a window, a limit): visited every epoch.
    live: Vec<usize>,
    /// The shares this epoch visits (`live` and the tenants the driver saw), and a mark per
    /// share; `activated`: the driver named its active tenants this epoch (otherwise every
    /// share is visited).
    visit: Vec<usize>,
    in_visit: Vec<bool>,
    activated: bool,
}

impl Fairness {
    /// A controller with no resources and no tenants; the first epoch ends at `now + epoch`.
    pub fn new(cfg: FairConfig, now: Instant) -> Self {
        Fairness {
            cfg,
            resources: Vec::new(),
            shares: Vec::new(),
            next_epoch: now + cfg.epoch,
            epoch_start: now,
            epochs: 0,
            scratch: Vec::new(),
            scratch_fixed: Vec::new(),
            wants: Vec::new(),
            grants: Vec::new(),
            local: Grants::default(),
            index_of: Vec::new(),
            live: Vec::new(),
            visit: Vec::new(),
            in_visit: Vec::new(),
            activated: false,
        }
    }

    /// Names the tenants that were active this epoch (their counters moved; before
    /// [`Fairness::end_epoch`]), and returns every tenant the epoch will visit: those and the
    /// ones that still have demand, a partial window or a limit. Idle tenants are not visited,
    /// so an epoch costs what the active tenants cost, not the configured ones. A driver that
    /// never calls this has every tenant visited.
    pub fn activate(&mut self, touched: impl IntoIterator<Item = TenantId>) -> impl Iterator<Item = TenantId> + '_ {
        if !self.activated {
            self.activated = true;
            self.in_visit.resize(self.shares.len(), false);
            for &i in &self.live {
                if !self.in_visit[i] {
                    self.in_visit[i] = true;
                    self.visit.push(i);
                }
            }
        }
        for t in touched {
            if let Some(&i) = self.index_of.get(t.index()).filter(|&&i| i != u32::MAX) {
                let i = i as usize;
                if !self.in_visit[i] {
                    self.in_visit[i] = true;
                    self.visit.push(i);
                }
            }
        }
        self.visit.iter().map(|&i| self.shares[i].tenant)
    }

    /// Rebuilds the tenant → share index (after shares were added or removed).
    fn reindex(&mut self) {
        self.index_of.iter_mut().for_each(|i| *i = u32::MAX);
        for (i, s) in self.shares.iter().enumerate() {
            if self.index_of.len() <= s.tenant.index() {
                self.index_of.resize(s.tenant.index() + 1, u32::MAX);
            }
            self.index_of[s.tenant.index()] = i as u32;
        }
        // Every share is visited once more: the live set is rebuilt by the next epoch.
        self.live = (0..self.shares.len()).collect();
        self.visit.clear();
        self.in_visit.clear();
        self.in_visit.resize(self.shares.len(), false);
        self.activated = false;
    }

    /// The parameters.
    pub fn config(&self) -> &FairConfig {
        &self.cfg
    }

    /// Declares the node's resources. Smoothed demand restarts when the set changes.
    pub fn set_resources(&mut self, resources: Vec<Resource>) {
        if resources.iter().map(|r| &r.name).ne(self.resources.iter().map(|r| &r.name)) {
            for s in &mut self.shares {
                s.demand = vec![0.0; resources.len()];
                s.fixed = vec![0.0; resources.len()];
                s.allocation = vec![0.0; resources.len()];
                s.dominant = None;
                s.window = Window::default();
            }
        }
        self.resources = resources;
    }

    /// Changes resource `i`'s capacity (its demands stand).
    pub fn set_capacity(&mut self, i: usize, capacity: f64) {
        if let Some(r) = self.resources.get_mut(i) {
            r.capacity = capacity;
        }
    }

    /// The resources.
    pub fn resources(&self) -> &[Resource] {
        &self.resources
    }

    /// Adds a tenant, or changes its weight.
    pub fn set_tenant(&mut self, tenant: TenantId, weight: f64) {
        match self.index_of.get(tenant.index()).filter(|&&i| i != u32::MAX) {
            Some(&i) => self.shares[i as usize].weight = weight,
            None => self.shares.push(TenantShare {
                tenant,
                weight,
                demand: vec![0.0; self.resources.len()],
                fixed: vec![0.0; self.resources.len()],
                allocation: vec![0.0; self.resources.len()],
                fraction: 1.0,
                dominant: None,
                dominant_share: 0.0,
                offered_pps: 0.0,
                limit_pps: None,
                limited_epochs: 0,
                window: Window::default(),
            }),
        }
        self.reindex();
    }

    /// Forgets a tenant.
    pub fn remove_tenant(&mut self, tenant: TenantId) {
        self.shares.retain(|s| s.tenant != tenant);
        self.reindex();
    }

    /// The tenants and the last epoch's results.
    pub fn shares(&self) -> &[TenantShare] {
        &self.shares
    }

    /// Epochs completed.
    pub fn epochs(&self) -> u64 {
        self.epochs
    }

    /// True when the current epoch is over.
    #[inline]
    pub fn due(&self, now: Instant) -> bool {
        now >= self.next_epoch
    }

    /// When the current epoch ends.
    pub fn next_epoch(&self) -> Instant {
        self.next_epoch
    }

    /// True if no tenant has demand, a limit or a window of epochs under way, and none is to be
    /// visited: an epoch would change nothing until the driver sees traffic again.
    pub fn quiet(&self) -> bool {
        self.live.is_empty() && self.visit.is_empty()
    }

    /// Closes the epoch at `now`: `observe` fills each tenant's observations, then demand is
    /// smoothed, DRF runs and the limits are set. Returns the tenants' new shares.
    pub fn end_epoch(&mut self, now: Instant, observe: impl FnMut(TenantId, &mut Observed<'_>)) -> &[TenantShare] {
        self.end_epoch_with(now, observe, None)
    }

    /// [`Fairness::end_epoch`], the allocation made by `shared` when it is given (the node's
    /// [`Board`], for a node whose dispatcher threads each run a `Fairness` of their own) and on
    /// this one's resources otherwise. Either way each tenant's limit is the share of *its rate
    /// here* that the allocation admits: a tenant on two threads is limited on each to that share
    /// of what it sends there.
    pub fn end_epoch_with(
        &mut self,
        now: Instant,
        mut observe: impl FnMut(TenantId, &mut Observed<'_>),
        shared: Option<&mut dyn Allocate>,
    ) -> &[TenantShare] {
        let secs = now.saturating_since(self.epoch_start).as_secs_f64();
        self.epoch_start = now;
        self.next_epoch = now + self.cfg.epoch;
        self.epochs += 1;
        if !self.activated {
            // The driver did not say who was active: visit everyone.
            self.visit.clear();
            self.visit.extend(0..self.shares.len());
        }
        if secs <= 0.0 {
            // Nothing observed: the live set is what it was.
            self.end_visit();
            return &self.shares;
        }
        let (r, a) = (self.resources.len(), self.cfg.smoothing.clamp(0.0, 1.0));
        self.wants.resize_with(self.visit.len(), Wants::default);
        for (&i, d) in self.visit.iter().zip(&mut self.wants) {
            let s = &mut self.shares[i];
            self.scratch.clear();
            self.scratch.resize(r, 0.0);
            self.scratch_fixed.clear();
            self.scratch_fixed.resize(r, 0.0);
            let mut o = Observed { fixed: &mut self.scratch_fixed, amounts: &mut self.scratch, offered_packets: 0, admitted_packets: 0 };
            observe(s.tenant, &mut o);
            let (offered, admitted) = (o.offered_packets, o.admitted_packets);
            let w = &mut s.window;
            w.amounts.resize(r, 0.0);
            w.amounts.iter_mut().zip(self.scratch.iter()).for_each(|(w, x)| *w += x);
            (w.offered, w.admitted, w.epochs, w.secs) = (w.offered + offered, w.admitted + admitted, w.epochs + 1, w.secs + secs);
            let o = &mut w.off;
            o.fixed.resize(r, 0.0);
            o.fixed.iter_mut().zip(self.scratch_fixed.iter()).for_each(|(w, x)| *w += x);
            (o.offered, o.epochs, o.secs) = (o.offered + offered, o.epochs + 1, o.secs + secs);
            o.quiet = if offered == 0 { o.quiet + 1 } else { 0 };
            // Fold each window once it holds enough packets (admitted for the variable part,
            // offered for the fixed part and the offered rate), when nothing was wanted for long
            // enough to call the tenant idle (its demand then decays), or when it is as long as
            // it gets.
            let gap_epochs = if s.offered_pps > 0.0 { 1.0 / (s.offered_pps * secs) } else { 0.0 };
            let idle_after = (IDLE_GAPS * gap_epochs).clamp(1.0, MAX_WINDOW as f64);
            // A window of MIN_ADMITTED packets spans at least as many of the tenant's mean gaps
            // (by its offered rate): a burst — a paced sender catching up after it lost its core,
            // read by the node in a poll or two — is what the ingress bucket's depth absorbs,
            // not a rate. Read as one, a 2.5 kpps tenant's 25-packet burst in 200 µs made its
            // demand 30 kpps, over its share beside a flood, and it was limited and lost packets
            // (issue 50: the kernel-VXLAN test's blue).
            let spans = s.offered_pps == 0.0 || w.secs * s.offered_pps >= MIN_ADMITTED as f64;
            let fold = (w.admitted >= MIN_ADMITTED && spans) || (w.offered == 0 && w.epochs as f64 >= idle_after) || w.epochs >= MAX_WINDOW;
            // (A window that went quiet as long as an idle one is folded too: what it holds is
            // the last of the tenant's packets.)
            let fold_off = o.offered >= MIN_OFFERED || o.quiet as f64 >= idle_after || o.epochs >= MAX_WINDOW;
            // Scale what was seen behind the limiter up to what was wanted; with nothing
            // admitted there is nothing to scale, so the variable part keeps its average.
            let scale = if w.admitted > 0 { w.offered.max(w.admitted) as f64 / w.admitted as f64 } else { 1.0 };
            let blind = w.admitted == 0 && w.offered > 0;
            // A window's weight in the average: that of its epochs one by one.
            let aw = 1.0 - (1.0 - a).powi(w.epochs as i32);
            let ao = 1.0 - (1.0 - a).powi(w.off.epochs as i32);
            for (k, res) in self.resources.iter().enumerate() {
                let old_var = (s.demand[k] - s.fixed[k]).max(0.0);
                if fold_off {
                    let o = &w.off;
                    let per = if res.kind == Kind::Rate { o.secs } else { o.epochs as f64 };
                    s.fixed[k] += ao * (o.fixed[k] / per - s.fixed[k]);
                }
                // A demand that has decayed to nothing is nothing (not a denormal).
                let tiny = res.capacity.abs() * 1e-12;
                if s.fixed[k] < tiny {
                    s.fixed[k] = 0.0;
                }
                let var = if !fold || blind {
                    old_var
                } else {
                    let per = if res.kind == Kind::Rate { w.secs } else { w.epochs as f64 };
                    old_var + aw * (w.amounts[k] * scale / per - old_var)
                };
                s.demand[k] = if s.fixed[k] + var < tiny { s.fixed[k] } else { s.fixed[k] + var };
            }
            if fold && !blind && w.secs > 0.0 {
                w.var_pps += aw * (w.offered.max(w.admitted) as f64 / w.secs - w.var_pps);
            }
            if fold {
                w.amounts.iter_mut().for_each(|x| *x = 0.0);
                (w.offered, w.admitted, w.epochs, w.secs) = (0, 0, 0, 0.0);
            }
            if fold_off {
                let o = &mut w.off;
                s.offered_pps += ao * (o.offered as f64 / o.secs - s.offered_pps);
                o.fixed.iter_mut().for_each(|x| *x = 0.0);
                (o.offered, o.quiet, o.epochs, o.secs) = (0, 0, 0, 0.0);
            }
            (d.tenant, d.weight) = (s.tenant, s.weight);
            d.demand.clear();
            d.demand.extend_from_slice(&s.demand);
            d.fixed.clear();
            d.fixed.extend_from_slice(&s.fixed);
        }
        let wants = &self.wants[..self.visit.len()];
        match shared {
            Some(a) => a.allocate(&self.resources, wants, &mut self.grants),
            None => self.local.allocate(&self.resources, wants, &mut self.grants),
        }
        for (&i, g) in self.visit.iter().zip(&self.grants) {
            let s = &mut self.shares[i];
            s.allocation.clear();
            s.allocation.extend_from_slice(&g.amounts);
            s.dominant = g.dominant;
            s.dominant_share = g.dominant_share;
            s.fraction = g.fraction;
            let admit = g.admit;
            // The limit is what the allocation pays for: the variable part's share (`admit`)
            // of the rate that part was measured at. (Of `offered_pps`, smoothed over other
            // windows, it was off by their ratio: a tenant at 2.5 kpps whose offered window
            // had just folded a quiet stretch was limited to a few packets a second, issue 49.)
            let pps = if s.window.var_pps > 0.0 { s.window.var_pps } else { s.offered_pps };
            let target = (admit < 1.0 - 1e-6).then_some(admit * pps);
            s.limit_pps = match (s.limit_pps, target) {
                // A limit moves toward its target by at most LIMIT_SLEW of the larger of the two an
                // epoch: the target carries the demand estimate's noise (windows of a few dozen
                // packets), and a limit that jumps with it shakes every tenant behind the same
                // resources. A big change still takes only a few epochs (halving: nine).
                // (Admitting nothing — a flood whose reception alone is over its share — takes
                // effect at once.)
                (Some(old), Some(t)) if t > 0.0 => {
                    let step = LIMIT_SLEW * old.max(t);
                    Some(t.clamp(old - step, old + step))
                }
                (_, t) => t,
            };
            s.limited_epochs += s.limit_pps.is_some() as u64;
        }
        self.end_visit();
        &self.shares
    }

    /// The visited shares that are still not idle are the live ones.
    fn end_visit(&mut self) {
        self.live.clear();
        for &i in &self.visit {
            let s = &mut self.shares[i];
            let idle = s.limit_pps.is_none() && s.window.epochs == 0 && s.window.off.epochs == 0 && s.demand.iter().all(|&d| d == 0.0);
            if idle {
                s.offered_pps = 0.0;
            } else {
                self.live.push(i);
            }
            if let Some(m) = self.in_visit.get_mut(i) {
                *m = false;
            }
        }
        self.visit.clear();
        self.activated = false;
    }

    /// The bucket depth for a limit of `pps`.
    pub fn burst_for(&self, pps: f64) -> f64 {
        (pps * self.cfg.burst.as_secs_f64()).max(self.cfg.min_burst_packets)
    }
}

/// A token bucket in packets, refilled by `now`: the ingress limiter of one tenant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    /// Tokens per nanosecond; meaningless when unlimited.
    per_ns: f64,
    depth: f64,
    tokens: f64,
    last: Instant,
    limited: bool,
}

impl Default for TokenBucket {
    fn default() -> Self {
        Self::unlimited()
    }
}

impl TokenBucket {
    /// A bucket that admits everything.
    pub const fn unlimited() -> Self {
        TokenBucket { per_ns: 0.0, depth: 0.0, tokens: 0.0, last: Instant::ZERO, limited: false }
    }

    /// Sets the rate (per second) and depth; `None` lifts the limit. A bucket that stays
    /// limited keeps its tokens (up to the new depth). One that becomes limited again has the
    /// tokens it had when the limit was lifted plus what the new rate earns since, up to the
    /// depth (full the first time): a limit that is lifted and set again epoch after epoch hands
    /// out its rate, not a full burst each time (which at 100 µs epochs admitted a tenant limited
    /// to 5 kpps at 55 kpps).
    pub fn set(&mut self, now: Instant, per_second: Option<f64>, depth: f64) {
        match per_second {
            None => {
                if self.limited {
                    // Remember when the limit was lifted (`last`), for the next one.
                    *self = TokenBucket { limited: false, last: now, ..*self };
                }
            }
            Some(r) => {
                let per_ns = r.max(0.0) / 1e9;
                if self.limited {
                    self.refill(now);
                    self.tokens = self.tokens.min(depth);
                } else {
                    let since = now.0.saturating_sub(self.last.0);
                    let earned = if self.last == Instant::ZERO { depth } else { self.tokens + since as f64 * per_ns };
                    self.tokens = earned.min(depth);
                }
                self.per_ns = per_ns;
                self.depth = depth;
                self.last = now;
                self.limited = true;
            }
        }
    }

    /// True if a limit is set.
    pub fn is_limited(&self) -> bool {
        self.limited
    }

    /// The rate per second, if limited.
    pub fn rate(&self) -> Option<f64> {
        self.limited.then_some(self.per_ns * 1e9)
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.0.saturating_sub(self.last.0);
        if dt > 0 {
            self.tokens = (self.tokens + dt as f64 * self.per_ns).min(self.depth);
            self.last = now;
        }
    }

    /// Whole tokens available at `now` (`None`: no limit): how many packets a per-tenant
    /// receive queue may hand over without any being over the limit.
    pub fn available(&mut self, now: Instant) -> Option<u32> {
        if !self.limited {
            return None;
        }
        self.refill(now);
        Some(self.tokens.max(0.0).min(u32::MAX as f64) as u32)
    }

    /// When the bucket will hold `want` whole tokens (at most its depth, at least one), if
    /// limited: `now` if it does already. A receive queue held for its limit is read again
    /// then, a batch at once, not a packet per wake-up.
    pub fn ready_at(&self, now: Instant, want: f64) -> Option<Instant> {
        if !self.limited {
            return None;
        }
        let tokens = (self.tokens + now.0.saturating_sub(self.last.0) as f64 * self.per_ns).min(self.depth);
        let want = want.min(self.depth).max(1.0);
        if tokens >= want {
            return Some(now);
        }
        if self.per_ns <= 0.0 {
            return Some(Instant::from_nanos(u64::MAX));
        }
        let ns = ((want - tokens) / self.per_ns).ceil().min(u64::MAX as f64 / 2.0) as u64;
        Some(Instant::from_nanos(now.as_nanos().saturating_add(ns)))
    }

    /// Takes one token at `now`; false if the bucket is empty (the packet is over the limit).
    #[inline]
    pub fn take(&mut self, now: Instant) -> bool {
        if !self.limited {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Jain's fairness index of `xs`: 1 when all are equal, `1/n` when one has everything.
pub fn jain(xs: &[f64]) -> f64 {
    let (s, q) = xs.iter().fold((0.0, 0.0), |(s, q), x| (s + x, q + x * x));
    if q == 0.0 {
        1.0
    } else {
        s * s / (xs.len() as f64 * q)
    }
}

#[cfg(test)]
mod tests;
