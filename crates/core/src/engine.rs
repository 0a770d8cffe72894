//! Per-tenant token buckets in front of a shared engine (an AES or compression NT used by
//! several tenants), with work-conserving borrowing — FairNIC's accelerator isolation (paper
//! 003 §4.4), made sans-IO.
//!
//! The engine sustains `capacity` cost units per second (bytes, for engines whose cost grows with
//! the request). Each active tenant is guaranteed an equal share (regions do not know tenant
//! weights): a local bucket refilled at `capacity / active tenants`. Tokens a tenant leaves
//! unused — its bucket already holds a window's worth — spill into a common pool; a tenant that
//! goes quiet stops counting as active. A tenant whose own bucket is empty may
//! borrow from the pool, up to a personal allowance per window that grows additively while
//! borrowing succeeds and halves when the pool runs dry (AIMD), so borrowers converge to an even
//! split of the spare capacity and back off when an owner returns. A request that finds neither
//! its own tokens nor a borrowable one is refused: the caller drops it and counts it.

use crate::ids::TenantId;
use crate::time::Instant;
use core::time::Duration;

/// Shaper parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineConfig {
    /// Length of a window: buckets hold one window of their rate; allowances adapt per window.
    pub window: Duration,
    /// Additive increase of a borrower's allowance, as a fraction of the engine's capacity per
    /// window.
    pub increase: f64,
    /// A tenant that has not used the engine for this many windows is inactive: its share goes
    /// to the pool.
    pub idle_windows: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { window: Duration::from_millis(1), increase: 0.05, idle_windows: 4 }
    }
}

#[derive(Debug, Clone)]
struct User {
    tenant: TenantId,
    tokens: f64,
    /// Borrowing allowance per window, and what is left of it in this window.
    allowance: f64,
    allowance_left: f64,
    borrowed_this_window: bool,
    last_use: u64,
}

/// One shared engine's shaper. See the module docs.
#[derive(Debug, Clone)]
pub struct EngineShaper {
    cfg: EngineConfig,
    capacity: f64,
    users: Vec<User>,
    /// How many of `users` are active (kept so that a request does not count them: that was
    /// ~30 instructions a packet on a chain with an engine).
    active_users: usize,
    pool: f64,
    pool_ran_dry: bool,
    last: Instant,
    window_start: Instant,
    window: u64,
    throttled: u64,
}

impl EngineShaper {
    /// A shaper for an engine of `capacity` units per second (0: unknown yet, nothing refused).
    pub fn new(cfg: EngineConfig, capacity: f64, now: Instant) -> Self {
        EngineShaper {
            cfg,
            capacity,
            users: Vec::new(),
            active_users: 0,
            pool: 0.0,
            pool_ran_dry: false,
            last: now,
            window_start: now,
            window: 0,
            throttled: 0,
        }
    }

    /// Updates the capacity (a re-measurement).
    pub fn set_capacity(&mut self, capacity: f64) {
        self.capacity = capacity.max(0.0);
    }

    /// Requests refused so far.
    pub fn throttled(&self) -> u64 {
        self.throttled
    }

    #[inline]
    fn user(&mut self, t: TenantId) -> usize {
        match self.users.iter().position(|u| u.tenant == t) {
            Some(i) => i,
            None => self.add_user(t),
        }
    }

    #[cold]
    #[inline(never)]
    fn add_user(&mut self, t: TenantId) -> usize {
        let w = self.cfg.window.as_secs_f64();
        // A newcomer starts with a full window of its share.
        let share = self.capacity / (self.users.len() + 1) as f64;
        self.users.push(User {
            tenant: t,
            tokens: share * w,
            allowance: 0.0,
            allowance_left: 0.0,
            borrowed_this_window: false,
            last_use: self.window,
        });
        self.active_users += 1;
        self.users.len() - 1
    }

    fn active(&self, u: &User) -> bool {
        self.window.saturating_sub(u.last_use) < self.cfg.idle_windows as u64
    }

    /// Refills buckets and the pool up to `now`, closing windows on the way.
    #[inline]
    fn advance(&mut self, now: Instant) {
        // Packets of one batch share the poll's time: the first did the work (no time passed,
        // no window closed since).
        if now == self.last {
            return;
        }
        self.refill(now);
    }

    /// (Out of line: it runs once a poll, and inlined it made every request save registers.)
    #[inline(never)]
    fn refill(&mut self, now: Instant) {
        let w = self.cfg.window.as_secs_f64();
        let window = self.window;
        while now.saturating_since(self.window_start) >= self.cfg.window {
            self.window_start = self.window_start + self.cfg.window;
            self.window += 1;
            // AIMD on the borrowing allowances.
            let inc = self.cfg.increase * self.capacity * w;
            for u in &mut self.users {
                if self.pool_ran_dry && u.borrowed_this_window {
                    u.allowance /= 2.0;
                } else if u.borrowed_this_window || u.allowance == 0.0 {
                    u.allowance += inc;
                }
                u.allowance_left = u.allowance;
                u.borrowed_this_window = false;
            }
            self.pool_ran_dry = false;
        }
        if self.window != window {
            // Users may have gone idle.
            self.active_users = self.users.iter().filter(|u| self.active(u)).count();
        }
        let dt = now.saturating_since(self.last).as_secs_f64();
        self.last = now;
        if dt <= 0.0 {
            return;
        }
        let active = self.active_users as f64;
        let mut spare = self.capacity * dt;
        for i in 0..self.users.len() {
            if !self.active(&self.users[i]) {
                continue;
            }
            let u = &mut self.users[i];
            let rate = self.capacity / active;
            u.tokens += rate * dt;
            spare -= rate * dt;
            // Tokens beyond a window's worth are not hoarded: they spill into the pool.
            let cap = rate * w;
            if u.tokens > cap {
                spare += u.tokens - cap;
                u.tokens = cap;
            }
        }
        self.pool = (self.pool + spare.max(0.0)).min(self.capacity * w);
    }

    /// A request of `cost` units from `t` at `now`: true if it may use the engine. (Inlined
    /// into the region's loop: a call a packet cost ~40 instructions on `vpc`.)
    #[inline]
    pub fn admit(&mut self, t: TenantId, cost: f64, now: Instant) -> bool {
        if self.capacity <= 0.0 {
            return true;
        }
        self.advance(now);
        let i = self.user(t);
        if !self.active(&self.users[i]) {
            self.active_users += 1;
        }
        self.users[i].last_use = self.window;
        debug_assert_eq!(self.active_users, self.users.iter().filter(|u| self.active(u)).count());
        // Alone on the engine, nobody needs protecting.
        if self.active_users < 2 {
            return true;
        }
        self.admit_shared(i, cost)
    }

    /// [`EngineShaper::admit`] for user `i` when several share the engine.
    #[inline(never)]
    fn admit_shared(&mut self, i: usize, cost: f64) -> bool {
        let u = &mut self.users[i];
        if u.tokens >= cost {
            u.tokens -= cost;
            return true;
        }
        // Borrow the rest from the pool, within this window's allowance.
        let need = cost - u.tokens.max(0.0);
        if need <= u.allowance_left && need <= self.pool {
            u.tokens = 0.0;
            u.allowance_left -= need;
            u.borrowed_this_window = true;
            self.pool -= need;
            return true;
        }
        if need > self.pool {
            self.pool_ran_dry = true;
        }
        u.borrowed_this_window |= need > u.allowance_left;
        self.throttled += 1;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offers each tenant `load[t]` units per second in requests of `size` for `secs`; returns
    /// what each got admitted, per second.
    fn run(s: &mut EngineShaper, load: &[f64], size: f64, secs: f64, t0: &mut u64) -> Vec<f64> {
        let step = 10_000u64; // 10 us
        let mut owed = vec![0.0; load.len()];
        let mut got = vec![0.0; load.len()];
        let steps = (secs * 1e9 / step as f64) as u64;
        for _ in 0..steps {
            *t0 += step;
            for (i, l) in load.iter().enumerate() {
                owed[i] += l * step as f64 / 1e9;
                while owed[i] >= size {
                    owed[i] -= size;
                    if s.admit(TenantId(i as u16), size, Instant(*t0)) {
                        got[i] += size;
                    }
                }
            }
        }
        got.iter().map(|g| g / secs).collect()
    }

    #[test]
    fn each_tenant_keeps_its_share_under_a_flood() {
        // 10 GB/s engine; tenant 0 wants 3, tenant 1 floods 30.
        let mut s = EngineShaper::new(EngineConfig::default(), 10e9, Instant::ZERO);
        let mut t = 0;
        run(&mut s, &[3e9, 30e9], 1400.0, 0.05, &mut t);
        let got = run(&mut s, &[3e9, 30e9], 1400.0, 0.2, &mut t);
        assert!(got[0] > 0.97 * 3e9, "the modest tenant keeps its load: {got:?}");
        // Work conserving: the flood gets what is left, not only its half.
        assert!(got[1] > 0.85 * 7e9 && got[0] + got[1] < 1.02 * 10e9, "{got:?}");
    }

    #[test]
    fn borrowers_split_the_spare_and_back_off_for_an_owner() {
        let mut s = EngineShaper::new(EngineConfig::default(), 10e9, Instant::ZERO);
        let mut t = 0;
        // Three tenants; tenant 2 is quiet: 0 and 1 both flood and share its part too.
        run(&mut s, &[30e9, 30e9, 0.0], 1000.0, 0.1, &mut t);
        let got = run(&mut s, &[30e9, 30e9, 0.0], 1000.0, 0.3, &mut t);
        assert!(got[0] + got[1] > 0.9 * 10e9, "the idle share is borrowed: {got:?}");
        assert!((got[0] / got[1] - 1.0).abs() < 0.15, "evenly: {got:?}");
        // Tenant 2 comes back for its third: it gets it.
        run(&mut s, &[30e9, 30e9, 3e9], 1000.0, 0.05, &mut t);
        let got = run(&mut s, &[30e9, 30e9, 3e9], 1000.0, 0.2, &mut t);
        assert!(got[2] > 0.95 * 3e9, "{got:?}");
        assert!(got.iter().sum::<f64>() < 1.02 * 10e9, "{got:?}");
        assert!(s.throttled() > 0);
    }

    #[test]
    fn unknown_capacity_refuses_nothing() {
        let mut s = EngineShaper::new(EngineConfig::default(), 0.0, Instant::ZERO);
        assert!((0..1000).all(|i| s.admit(TenantId(1), 1e9, Instant(i))));
    }
}
