//! The paper's CapEx model (paper 000 Appendix A.2) and a 5-year TCO with energy (paper 001
//! §5.2): what a rack's network costs per endpoint without disaggregation (`traditional`), with
//! a pool of sNICs or of multi-host NICs between the endpoints and the ToR switch (`-ring`), or
//! beside the endpoints on the switch (`-direct`).
//!
//! A multi-host NIC provisions for the sum of its endpoints' peaks; an sNIC, which scales its
//! NTs with load, for the peak of their sum: `capExConsolidRatio` (peak-of-sum ÷ sum-of-peaks,
//! [`peak_ratio`] computes it from a workload) scales the part of the device that runs NTs
//! (`NTCostRatio`), the rest is shell. Pure arithmetic, no I/O.

/// The model's parameters; [`Default`] is the paper's table (A.2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostParams {
    /// Endpoints in the rack (N). Per-endpoint figures do not depend on it.
    pub endpoints: f64,
    /// One ToR switch port (FS 100 Gb/s switch).
    pub switch_port_usd: f64,
    /// A full NIC (Mellanox ConnectX-5).
    pub nic_usd: f64,
    /// A high-speed cable (FS 100 Gb/s DAC).
    pub cable_usd: f64,
    /// A down-scaled endpoint NIC (physical and link layers only), as a fraction of a NIC.
    pub ds_nic_ratio: f64,
    /// A down-scaled, less reliable cable to the pool, as a fraction of a cable.
    pub ds_cable_ratio: f64,
    /// Endpoints per pool device (M = N / consolidRatio).
    pub consolid_ratio: f64,
    /// Fraction of a pool device's cost that runs NTs (the rest is shell).
    pub nt_cost_ratio: f64,
    /// Peak-of-sum ÷ sum-of-peaks of the endpoints' load.
    pub capex_consolid_ratio: f64,
}

impl Default for CostParams {
    fn default() -> Self {
        CostParams {
            endpoints: 32.0,
            switch_port_usd: 250.0,
            nic_usd: 500.0,
            cable_usd: 100.0,
            ds_nic_ratio: 0.2,
            ds_cable_ratio: 0.6,
            consolid_ratio: 4.0,
            nt_cost_ratio: 0.9,
            capex_consolid_ratio: 0.23,
        }
    }
}

/// Energy for a TCO over a server lifetime (paper 001: 5 years, $0.162 per kWh).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Energy {
    /// Years of operation.
    pub years: f64,
    /// Electricity price.
    pub usd_per_kwh: f64,
    /// Power of a full NIC.
    pub nic_watts: f64,
    /// Power of a down-scaled endpoint NIC.
    pub ds_nic_watts: f64,
    /// Power of a multi-host NIC serving `consolid_ratio` endpoints (an sNIC draws
    /// `capExRatio` of it: it is provisioned for the peak of the sum).
    pub pool_watts: f64,
}

/// One deployment model's cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCost {
    /// `traditional`, `snic-ring`, `snic-direct`, `mhnic-ring` or `mhnic-direct`.
    pub name: &'static str,
    /// The rack's network CapEx.
    pub capex_usd: f64,
    /// CapEx per endpoint.
    pub per_endpoint_usd: f64,
    /// 1 − this model's per-endpoint cost ÷ traditional's.
    pub savings_vs_traditional: f64,
    /// With [`Energy`]: CapEx + electricity over the lifetime, per endpoint, and its savings.
    pub tco_per_endpoint_usd: Option<f64>,
    /// TCO savings against traditional.
    pub tco_savings_vs_traditional: Option<f64>,
}

impl CostParams {
    /// `capExRatio = (1 − NTCostRatio) + NTCostRatio × capExConsolidRatio`.
    pub fn capex_ratio(&self) -> f64 {
        (1.0 - self.nt_cost_ratio) + self.nt_cost_ratio * self.capex_consolid_ratio
    }

    /// A multi-host NIC: the NICs of the endpoints it serves.
    pub fn mhnic_usd(&self) -> f64 {
        self.nic_usd * self.consolid_ratio
    }

    /// An sNIC: a multi-host NIC scaled by `capExRatio`.
    pub fn snic_usd(&self) -> f64 {
        self.mhnic_usd() * self.capex_ratio()
    }

    /// Checks the ranges; the message names the parameter.
    pub fn validate(&self) -> Result<(), String> {
        let pos = [("endpoints", self.endpoints), ("consolid_ratio", self.consolid_ratio)];
        for (n, v) in pos {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{n} must be positive (got {v})"));
            }
        }
        let money = [("switch_port_usd", self.switch_port_usd), ("nic_usd", self.nic_usd), ("cable_usd", self.cable_usd)];
        for (n, v) in money {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{n} must be zero or more (got {v})"));
            }
        }
        let ratios = [
            ("ds_nic_ratio", self.ds_nic_ratio),
            ("ds_cable_ratio", self.ds_cable_ratio),
            ("nt_cost_ratio", self.nt_cost_ratio),
            ("capex_consolid_ratio", self.capex_consolid_ratio),
        ];
        for (n, v) in ratios {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(format!("{n} must be between 0 and 1 (got {v})"));
            }
        }
        Ok(())
    }

    /// Every model, `traditional` first.
    pub fn models(&self, energy: Option<&Energy>) -> Vec<ModelCost> {
        let n = self.endpoints;
        let m = n / self.consolid_ratio;
        let (port, nic, cable) = (self.switch_port_usd, self.nic_usd, self.cable_usd);
        let (ds_nic, ds_cable) = (nic * self.ds_nic_ratio, cable * self.ds_cable_ratio);
        let pool = |device: f64| m * (device + cable + port);
        // (name, CapEx, devices' power in watts: per endpoint NICs + pool devices)
        let mut rows: Vec<(&'static str, f64, f64)> = Vec::new();
        let w = energy.map(|e| (e.nic_watts, e.ds_nic_watts, e.pool_watts));
        let (nic_w, ds_w, pool_w) = w.unwrap_or((0.0, 0.0, 0.0));
        rows.push(("traditional", n * (nic + cable + port), n * nic_w));
        for (kind, device, device_w) in [("snic", self.snic_usd(), pool_w * self.capex_ratio()), ("mhnic", self.mhnic_usd(), pool_w)] {
            let watts = n * ds_w + m * device_w;
            let ring = n * (ds_nic + ds_cable) + pool(device);
            let direct = n * (ds_nic + cable + port) + pool(device);
            let (r, d) = if kind == "snic" { ("snic-ring", "snic-direct") } else { ("mhnic-ring", "mhnic-direct") };
            rows.push((r, ring, watts));
            rows.push((d, direct, watts));
        }
        let hours = energy.map_or(0.0, |e| e.years * 365.0 * 24.0);
        let tco = |capex: f64, watts: f64| energy.map(|e| (capex + watts / 1000.0 * hours * e.usd_per_kwh) / n);
        let base = rows[0].1 / n;
        let base_tco = tco(rows[0].1, rows[0].2);
        rows.into_iter()
            .map(|(name, capex, watts)| {
                let per = capex / n;
                let t = tco(capex, watts);
                ModelCost {
                    name,
                    capex_usd: capex,
                    per_endpoint_usd: per,
                    savings_vs_traditional: 1.0 - per / base,
                    tco_per_endpoint_usd: t,
                    tco_savings_vs_traditional: t.zip(base_tco).map(|(t, b)| 1.0 - t / b),
                }
            })
            .collect()
    }
}

/// Peak-of-sum and sum-of-peaks of per-endpoint load series (`load[endpoint][bin]`, bins
/// aligned; missing bins count as 0), and their ratio — `capExConsolidRatio` (1 when there is
/// no load).
pub fn peak_ratio(load: &[Vec<f64>]) -> (f64, f64, f64) {
    let bins = load.iter().map(Vec::len).max().unwrap_or(0);
    let sum_of_peaks: f64 = load.iter().map(|s| s.iter().copied().fold(0.0, f64::max)).sum();
    let peak_of_sum = (0..bins).map(|b| load.iter().map(|s| s.get(b).copied().unwrap_or(0.0)).sum::<f64>()).fold(0.0, f64::max);
    let ratio = if sum_of_peaks > 0.0 { peak_of_sum / sum_of_peaks } else { 1.0 };
    (peak_of_sum, sum_of_peaks, ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(m: &'a [ModelCost], name: &str) -> &'a ModelCost {
        m.iter().find(|x| x.name == name).unwrap()
    }

    #[test]
    fn the_paper_s_defaults_give_its_savings() {
        let m = CostParams::default().models(None);
        // Hand-computed: traditional 500 + 100 + 250 = 850 per endpoint. capExRatio =
        // 0.1 + 0.9 × 0.23 = 0.307; an sNIC 2000 × 0.307 = 614; its share per endpoint
        // (614 + 100 + 250) / 4 = 241. Ring: 100 + 60 + 241 = 401 → 52.82%. Direct:
        // 100 + 100 + 250 + 241 = 691 → 18.71%.
        assert!((get(&m, "traditional").per_endpoint_usd - 850.0).abs() < 1e-9);
        assert!((get(&m, "snic-ring").per_endpoint_usd - 401.0).abs() < 1e-9);
        assert!((get(&m, "snic-direct").per_endpoint_usd - 691.0).abs() < 1e-9);
        assert_eq!((get(&m, "snic-ring").savings_vs_traditional * 1000.0).round(), 528.0);
        assert_eq!((get(&m, "snic-direct").savings_vs_traditional * 1000.0).round(), 187.0);
        // Multi-host NICs provision for the sum of peaks: (2000 + 350) / 4 = 587.5 each.
        assert!((get(&m, "mhnic-ring").per_endpoint_usd - 747.5).abs() < 1e-9);
        assert!((get(&m, "mhnic-direct").per_endpoint_usd - 1037.5).abs() < 1e-9);
        assert!(m.iter().all(|x| x.tco_per_endpoint_usd.is_none()));
    }

    #[test]
    fn per_endpoint_costs_do_not_depend_on_the_rack_size_and_ratios_matter() {
        let a = CostParams::default().models(None);
        let b = CostParams { endpoints: 1000.0, ..Default::default() }.models(None);
        for (x, y) in a.iter().zip(&b) {
            assert!((x.per_endpoint_usd - y.per_endpoint_usd).abs() < 1e-9);
        }
        // No consolidation potential (every endpoint peaks at once): an sNIC costs a
        // multi-host NIC.
        let p = CostParams { capex_consolid_ratio: 1.0, ..Default::default() };
        let m = p.models(None);
        assert!((get(&m, "snic-ring").per_endpoint_usd - get(&m, "mhnic-ring").per_endpoint_usd).abs() < 1e-9);
        assert!(CostParams { nt_cost_ratio: 1.5, ..Default::default() }.validate().unwrap_err().contains("nt_cost_ratio"));
    }

    #[test]
    fn tco_adds_the_lifetime_energy() {
        // 5 years at $0.162/kWh; a NIC 20 W, a down-scaled NIC 4 W, a multi-host NIC 80 W.
        let e = Energy { years: 5.0, usd_per_kwh: 0.162, nic_watts: 20.0, ds_nic_watts: 4.0, pool_watts: 80.0 };
        let m = CostParams::default().models(Some(&e));
        let kwh = |w: f64| w / 1000.0 * 5.0 * 8760.0 * 0.162;
        let t = get(&m, "traditional").tco_per_endpoint_usd.unwrap();
        assert!((t - (850.0 + kwh(20.0))).abs() < 1e-6);
        // sNIC ring: 401 + a down-scaled NIC + a quarter of an sNIC drawing 0.307 × 80 W.
        let s = get(&m, "snic-ring").tco_per_endpoint_usd.unwrap();
        assert!((s - (401.0 + kwh(4.0) + kwh(80.0 * 0.307) / 4.0)).abs() < 1e-6);
        assert!(get(&m, "snic-ring").tco_savings_vs_traditional.unwrap() > 0.0);
    }

    #[test]
    fn peak_of_sum_over_sum_of_peaks() {
        // Two endpoints peaking at different times: sum of peaks 20, peak of sum 12.
        let (pos, sop, r) = peak_ratio(&[vec![10.0, 1.0, 0.0], vec![2.0, 10.0]]);
        assert_eq!((pos, sop), (12.0, 20.0));
        assert!((r - 0.6).abs() < 1e-12);
        // Peaking together: no consolidation potential.
        assert_eq!(peak_ratio(&[vec![5.0, 0.0], vec![5.0, 0.0]]).2, 1.0);
        assert_eq!(peak_ratio(&[]).2, 1.0);
    }
}
