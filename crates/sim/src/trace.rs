//! Workload traces: a CSV of `time_s, endpoint, bytes[, tenant]` (a header line is skipped),
//! summed into each endpoint's bytes per time bin. Read by `snic sim` (a `trace` workload) and
//! by `snic cost --trace`.

use std::collections::BTreeMap;
use std::path::Path;

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read or is not CSV.
    #[error("{path}: {source}")]
    Csv {
        /// The file.
        path: String,
        /// The cause.
        source: csv::Error,
    },
    /// A record is not `time_s, endpoint, bytes`.
    #[error("{path}: line {line}: {reason}")]
    Record {
        /// The file.
        path: String,
        /// 1-based.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Nothing in it.
    #[error("{0}: no records")]
    Empty(String),
    /// Some endpoints have a tenant and others none.
    #[error("{0}: some endpoints have a tenant and others none: name one for all or for none")]
    MixedTenants(String),
}

/// Most bins a trace may span.
pub const MAX_BINS: usize = 100_000_000;

/// Each endpoint's bytes per bin of `bin_ms`, endpoints in name order.
pub fn read(path: &Path, bin_ms: f64) -> Result<Vec<Vec<f64>>, TraceError> {
    read_with_tenants(path, bin_ms).map(|(series, _)| series)
}

/// Each endpoint's bytes per bin, and its tenant.
pub type WithTenants = (Vec<Vec<f64>>, Vec<Option<String>>);

/// As [`read`], with each endpoint's tenant (the optional fourth column; an endpoint keeps
/// one tenant throughout, and a trace names a tenant for all its endpoints or for none).
pub fn read_with_tenants(path: &Path, bin_ms: f64) -> Result<WithTenants, TraceError> {
    let p = path.display().to_string();
    let csv_err = |source| TraceError::Csv { path: p.clone(), source };
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).flexible(true).trim(csv::Trim::All).from_path(path).map_err(csv_err)?;
    // Per endpoint: its tenant (as its first record names it) and its bytes per bin.
    let mut endpoints: BTreeMap<String, (Option<String>, Vec<f64>)> = BTreeMap::new();
    for (i, rec) in rdr.records().enumerate() {
        let rec = rec.map_err(csv_err)?;
        let bad = |reason: String| TraceError::Record { path: p.clone(), line: i + 1, reason };
        let field = |k: usize| rec.get(k).unwrap_or("");
        let Ok(t) = field(0).parse::<f64>() else {
            if i == 0 {
                continue; // a header
            }
            return Err(bad(format!("time `{}` is not a number of seconds", field(0))));
        };
        let bytes: f64 = field(2).parse().map_err(|_| bad(format!("bytes `{}` is not a number", field(2))))?;
        if !(crate::non_negative(t) && crate::non_negative(bytes)) {
            return Err(bad("time and bytes must be zero or more".into()));
        }
        let bin = (t * 1e3 / bin_ms) as usize;
        if bin >= MAX_BINS {
            return Err(bad(format!("time {t} s is more than {MAX_BINS} bins of {bin_ms} ms")));
        }
        let tenant = Some(field(3)).filter(|t| !t.is_empty());
        let (known, s) = endpoints.entry(field(1).to_string()).or_insert_with(|| (tenant.map(str::to_string), Vec::new()));
        if known.as_deref() != tenant {
            return Err(bad(format!(
                "endpoint `{}` is in tenant {:?} here and {:?} before (one tenant per endpoint; all records or none name it)",
                field(1),
                tenant.unwrap_or("(none)"),
                known.as_deref().unwrap_or("(none)")
            )));
        }
        if s.len() <= bin {
            s.resize(bin + 1, 0.0);
        }
        s[bin] += bytes;
    }
    if endpoints.is_empty() {
        return Err(TraceError::Empty(p));
    }
    let (tenants, series): (Vec<Option<String>>, Vec<Vec<f64>>) = endpoints.into_values().unzip();
    if tenants.iter().any(Option::is_some) && tenants.iter().any(Option::is_none) {
        return Err(TraceError::MixedTenants(p));
    }
    Ok((series, tenants))
}
