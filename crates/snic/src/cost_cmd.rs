//! `snic cost`: the paper's per-endpoint CapEx model (Appendix A.2) for `traditional`,
//! `snic-ring`, `snic-direct`, `mhnic-ring` and `mhnic-direct`, with every parameter overridable,
//! `capExConsolidRatio` optionally computed from a workload trace (peak-of-sum ÷ sum-of-peaks),
//! and optionally paper 001's lifetime TCO with energy.

use anyhow::bail;
use clap::Args;
use serde::Serialize;
use snic_core::cost::{peak_ratio, CostParams, Energy};
use std::path::PathBuf;

/// Options of `snic cost`. Defaults are the paper's table (A.2).
#[derive(Args)]
pub struct CostArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Endpoints in the rack (per-endpoint figures do not depend on it).
    #[arg(long, default_value_t = 32.0)]
    endpoints: f64,
    /// Cost of a ToR switch port, USD.
    #[arg(long, default_value_t = 250.0)]
    switch_port_usd: f64,
    /// Cost of a full NIC, USD.
    #[arg(long, default_value_t = 500.0)]
    nic_usd: f64,
    /// Cost of a high-speed cable, USD.
    #[arg(long, default_value_t = 100.0)]
    cable_usd: f64,
    /// A down-scaled endpoint NIC as a fraction of a NIC.
    #[arg(long, default_value_t = 0.2)]
    ds_nic_ratio: f64,
    /// A down-scaled cable as a fraction of a cable.
    #[arg(long, default_value_t = 0.6)]
    ds_cable_ratio: f64,
    /// Endpoints per pool device.
    #[arg(long, default_value_t = 4.0)]
    consolid_ratio: f64,
    /// Fraction of a pool device's cost that runs NTs.
    #[arg(long, default_value_t = 0.9)]
    nt_cost_ratio: f64,
    /// Peak-of-sum ÷ sum-of-peaks of the endpoints' load (ignored with --trace).
    #[arg(long, default_value_t = 0.23)]
    capex_consolid_ratio: f64,
    /// A workload trace (CSV: time_s, endpoint, bytes[, tenant], header optional) from which
    /// capExConsolidRatio is computed.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Time bin for the trace's peaks, ms (peaks are of bytes per bin).
    #[arg(long, default_value_t = 1.0)]
    bin_ms: f64,
    /// Add paper 001's lifetime TCO: CapEx plus the devices' electricity. Needs --nic-watts.
    #[arg(long)]
    tco: bool,
    /// Years of operation for --tco.
    #[arg(long, default_value_t = 5.0)]
    years: f64,
    /// Electricity price for --tco, USD per kWh.
    #[arg(long, default_value_t = 0.162)]
    usd_per_kwh: f64,
    /// Power of a full NIC, W (no default: the papers measure only a SmartNIC).
    #[arg(long)]
    nic_watts: Option<f64>,
    /// Power of a down-scaled endpoint NIC, W (default: nic watts × ds-nic-ratio).
    #[arg(long)]
    ds_nic_watts: Option<f64>,
    /// Power of a multi-host NIC serving consolid-ratio endpoints, W (default: nic watts ×
    /// consolid-ratio; an sNIC draws capExRatio of it).
    #[arg(long)]
    pool_watts: Option<f64>,
}

#[derive(Serialize)]
struct ModelOut {
    name: &'static str,
    per_endpoint_usd: f64,
    savings_vs_traditional: f64,
    rack_capex_usd: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tco_per_endpoint_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tco_savings_vs_traditional: Option<f64>,
}

#[derive(Serialize)]
struct TraceOut {
    file: String,
    endpoints: usize,
    bins: usize,
    bin_ms: f64,
    peak_of_sum_bytes: f64,
    sum_of_peaks_bytes: f64,
}

#[derive(Serialize)]
struct Out {
    models: Vec<ModelOut>,
    capex_ratio: f64,
    capex_consolid_ratio: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<TraceOut>,
}

/// Prints the models.
pub fn run(a: CostArgs) -> anyhow::Result<()> {
    if !(a.bin_ms.is_finite() && a.bin_ms > 0.0) {
        bail!("--bin-ms must be positive");
    }
    let mut p = CostParams {
        endpoints: a.endpoints,
        switch_port_usd: a.switch_port_usd,
        nic_usd: a.nic_usd,
        cable_usd: a.cable_usd,
        ds_nic_ratio: a.ds_nic_ratio,
        ds_cable_ratio: a.ds_cable_ratio,
        consolid_ratio: a.consolid_ratio,
        nt_cost_ratio: a.nt_cost_ratio,
        capex_consolid_ratio: a.capex_consolid_ratio,
    };
    let trace = match &a.trace {
        Some(path) => {
            let load = snic_sim::trace::read(path, a.bin_ms)?;
            let (pos, sop, ratio) = peak_ratio(&load);
            p.capex_consolid_ratio = ratio;
            Some(TraceOut {
                file: path.display().to_string(),
                endpoints: load.len(),
                bins: load.iter().map(Vec::len).max().unwrap_or(0),
                bin_ms: a.bin_ms,
                peak_of_sum_bytes: pos,
                sum_of_peaks_bytes: sop,
            })
        }
        None => None,
    };
    p.validate().map_err(anyhow::Error::msg)?;
    let energy = if a.tco {
        let Some(nic) = a.nic_watts else {
            bail!("--tco needs --nic-watts (paper 001 measures only the SmartNIC: 29 W idle, up to 5.4 W more when busy)")
        };
        let e = Energy {
            years: a.years,
            usd_per_kwh: a.usd_per_kwh,
            nic_watts: nic,
            ds_nic_watts: a.ds_nic_watts.unwrap_or(nic * a.ds_nic_ratio),
            pool_watts: a.pool_watts.unwrap_or(nic * a.consolid_ratio),
        };
        let ok = [e.years, e.usd_per_kwh, e.nic_watts, e.ds_nic_watts, e.pool_watts].iter().all(|v| v.is_finite() && *v >= 0.0);
        if !ok {
            bail!("--years, --usd-per-kwh and the watts must be zero or more");
        }
        Some(e)
    } else {
        None
    };
    let models = p
        .models(energy.as_ref())
        .into_iter()
        .map(|m| ModelOut {
            name: m.name,
            per_endpoint_usd: m.per_endpoint_usd,
            savings_vs_traditional: m.savings_vs_traditional,
            rack_capex_usd: m.capex_usd,
            tco_per_endpoint_usd: m.tco_per_endpoint_usd,
            tco_savings_vs_traditional: m.tco_savings_vs_traditional,
        })
        .collect();
    let out = Out { models, capex_ratio: p.capex_ratio(), capex_consolid_ratio: p.capex_consolid_ratio, trace };
    if a.json {
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    if let Some(t) = &out.trace {
        println!(
            "workload {}: {} endpoints, {} bins of {} ms; peak of sum {:.0} B, sum of peaks {:.0} B",
            t.file, t.endpoints, t.bins, t.bin_ms, t.peak_of_sum_bytes, t.sum_of_peaks_bytes
        );
    }
    println!(
        "capExConsolidRatio {:.4}, capExRatio {:.4} (an sNIC costs that much of a multi-host NIC)",
        out.capex_consolid_ratio, out.capex_ratio
    );
    let tco = energy.map(|e| format!("  {:>5.0}-year TCO per endpoint (savings)", e.years)).unwrap_or_default();
    println!("{:<14} {:>14} {:>10}{tco}", "MODEL", "USD/endpoint", "SAVINGS");
    for m in &out.models {
        let t = m
            .tco_per_endpoint_usd
            .zip(m.tco_savings_vs_traditional)
            .map(|(t, s)| format!("  {:>12.2} ({:>6.1}%)", t, 100.0 * s))
            .unwrap_or_default();
        println!("{:<14} {:>14.2} {:>9.1}%{t}", m.name, m.per_endpoint_usd, 100.0 * m.savings_vs_traditional);
    }
    Ok(())
}
