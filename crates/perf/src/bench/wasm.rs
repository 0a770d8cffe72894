//! `snic bench wasm`: a tenant's own NT against the built-in one. The same firewall rules run
//! as the built-in `firewall` NT and as examples/wasm/firewall.c compiled with clang and run by
//! the `wasm` NT on each engine this build has (wasmi; wasmtime with the cargo feature), each
//! through the full in-memory path of `snic bench dataplane`; then what
//! launching a module costs (compiling it, and instantiating a compiled one: the software
//! analogue of bitstream generation and partial reconfiguration).

use super::{emit, run_chain, DataplaneArgs};
use crate::gen::RxWrites;
use anyhow::Context;
use clap::Args;
use serde::Serialize;
use snic_core::mat::PortRange;
use snic_nt::firewall::{FirewallConfig, FwRule, Policy};
use snic_nt::wasm::{compile_c, engine, EngineKind, Wasm, WasmConfig};
use snic_nt::NtSpec;
use std::path::PathBuf;
use std::time::Instant;

/// Options of `snic bench wasm`.
#[derive(Args)]
pub struct WasmArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Inner frame sizes in bytes, comma-separated.
    #[arg(long, default_value = "64", value_delimiter = ',')]
    size: Vec<usize>,
    /// Measured seconds per case (after one second of warm-up).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Distinct flows in the offered traffic.
    #[arg(long, default_value_t = 1024)]
    flows: u16,
    /// Firewall rules (none match the traffic: the default policy decides, after every rule
    /// was tried — by the built-in NT once per flow, by the C module, which keeps no flow
    /// cache, on every packet).
    #[arg(long, default_value_t = 20)]
    fw_rules: usize,
    /// The C source of the firewall module, compiled with clang.
    #[arg(long, default_value = "examples/wasm/firewall.c")]
    source: PathBuf,
    /// Launches timed (compile, instantiate).
    #[arg(long, default_value_t = 20)]
    launches: usize,
}

#[derive(Serialize)]
struct WasmResult {
    bench: &'static str,
    nt: &'static str,
    engine: &'static str,
    packet_size: usize,
    fw_rules: usize,
    mpps: f64,
    /// The whole path per packet (1 / throughput on one core).
    ns_per_packet: f64,
    /// The NT alone per packet, as the node measured it.
    nt_ns_per_packet: f64,
    dropped: u64,
}

#[derive(Serialize)]
struct LaunchResult {
    bench: &'static str,
    engine: &'static str,
    module_bytes: usize,
    /// Compiling the module (validation, translation, the ABI check), median, µs.
    compile_us: f64,
    /// Instantiating a compiled module and running its `snic_init`, median, µs.
    instantiate_us: f64,
    launches: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The rules, for both NTs: TCP to port 22 denied from networks the traffic never comes from.
fn rules(n: usize) -> (Vec<FwRule>, String) {
    let mut text = String::from("default allow\n");
    let rules = (0..n)
        .map(|i| {
            let net = format!("172.{}.{}.0/24", 16 + (i / 256) % 16, i % 256);
            text += &format!("deny 6 {net} * * 22\n");
            FwRule {
                src: Some(net.parse().expect("a prefix")),
                dst: None,
                proto: Some(6),
                src_ports: PortRange::ANY,
                dst_ports: PortRange::single(22),
                action: Policy::Deny,
            }
        })
        .collect();
    (rules, text)
}

/// Runs the bench.
pub fn run(a: &WasmArgs) -> anyhow::Result<()> {
    let module = compile_c(&a.source).map_err(anyhow::Error::msg).with_context(|| {
        format!("building the firewall module from {} (run from the repository root, or give --source)", a.source.display())
    })?;
    let (fw, text) = rules(a.fw_rules);
    let builtin = NtSpec::Firewall(FirewallConfig { rules: fw, default: Policy::Allow, non_ip: Policy::Allow, flow_cache: 4096 });
    let engines: Vec<EngineKind> = [EngineKind::Wasmi, EngineKind::Wasmtime].into_iter().filter(|e| e.built()).collect();
    let name = |e: EngineKind| match e {
        EngineKind::Wasmi => "wasmi",
        EngineKind::Wasmtime => "wasmtime",
    };
    let mut specs = vec![("builtin", builtin)];
    for &e in &engines {
        let mut c = WasmConfig::of(&module, &text);
        c.engine = e;
        specs.push((name(e), NtSpec::Wasm(c)));
    }
    let d = DataplaneArgs {
        json: a.json,
        chain: String::new(),
        size: a.size.clone(),
        seconds: a.seconds,
        flows: a.flows,
        fw_rules: a.fw_rules,
        workers: 0,
        batch: 32,
        credits: vec![super::default_credits()],
        packets: None,
        idle_tenants: 0,
        rx_writes: RxWrites::Frame,
        pair_seal: false,
        data_cores: 1,
    };
    for &size in &a.size {
        for (engine, spec) in &specs {
            let (r, nt_ns) = run_chain(&d, "firewall", vec![spec.clone()], size, d.credits[0])?;
            let out = WasmResult {
                bench: "wasm",
                nt: "firewall",
                engine,
                packet_size: size,
                fw_rules: a.fw_rules,
                mpps: r.mpps,
                ns_per_packet: 1e3 / r.mpps,
                nt_ns_per_packet: nt_ns,
                dropped: r.dropped,
            };
            emit(a.json, &out, |o| {
                format!(
                    "firewall {:>8} {:>5} B {:>3} rules  {:>6.2} Mpps  {:>7.1} ns/packet  NT {:>7.1} ns/packet",
                    o.engine, o.packet_size, o.fw_rules, o.mpps, o.ns_per_packet, o.nt_ns_per_packet
                )
            })?;
        }
    }
    for &e in &engines {
        let (compile_us, instantiate_us) = launch(&module, &text, e, a.launches.max(1))?;
        let out = LaunchResult {
            bench: "wasm_launch",
            engine: name(e),
            module_bytes: module.len(),
            compile_us,
            instantiate_us,
            launches: a.launches.max(1),
        };
        emit(a.json, &out, |o| {
            format!(
                "launch {:>8}: {} B module, compile {:.1} µs, instantiate {:.1} µs (median of {})",
                o.engine, o.module_bytes, o.compile_us, o.instantiate_us, o.launches
            )
        })?;
    }
    Ok(())
}

/// Median compile and instantiate times (µs) of `runs` launches on engine `e`: each compiles a
/// fresh copy (a custom section makes the bytes new, so the cache does not answer), then
/// instantiates the compiled module (and runs its `snic_init`).
fn launch(module: &[u8], text: &str, e: EngineKind, runs: usize) -> anyhow::Result<(f64, f64)> {
    let mut cfg = WasmConfig::of(module, text);
    cfg.engine = e;
    let (mut compile, mut instantiate) = (Vec::new(), Vec::new());
    let err = |e: snic_nt::wasm::WasmError| anyhow::anyhow!("{e}");
    for i in 0..runs {
        let mut bytes = module.to_vec();
        // A custom section (id 0): name "snic-bench", then the run's number.
        let payload = [&[10u8][..], b"snic-bench", &(i as u64).to_le_bytes()].concat();
        bytes.push(0);
        bytes.push(payload.len() as u8);
        bytes.extend_from_slice(&payload);
        let (c, i) = match e {
            EngineKind::Wasmi => {
                let t0 = Instant::now();
                let compiled = engine::compile(&bytes).map_err(err)?;
                let c = t0.elapsed();
                let t0 = Instant::now();
                drop(Wasm::instantiate(&compiled, &cfg).map_err(err)?);
                (c, t0.elapsed())
            }
            #[cfg(feature = "wasmtime")]
            EngineKind::Wasmtime => {
                // (The ABI check runs in wasmi first, as on deploy; it is part of compiling.)
                let t0 = Instant::now();
                let compiled = snic_nt::wasm::wasmtime_engine::compile(&bytes).map_err(err)?;
                let c = t0.elapsed();
                let t0 = Instant::now();
                drop(Wasm::instantiate_wasmtime(&compiled, &cfg).map_err(err)?);
                (c, t0.elapsed())
            }
            #[cfg(not(feature = "wasmtime"))]
            EngineKind::Wasmtime => anyhow::bail!("this build has no wasmtime"),
        };
        compile.push(c.as_secs_f64() * 1e6);
        instantiate.push(i.as_secs_f64() * 1e6);
    }
    Ok((median(compile), median(instantiate)))
}
