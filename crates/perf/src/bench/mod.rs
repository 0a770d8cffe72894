//! `snic bench`: measurements printed as JSON lines.

mod apply;
mod chain;
mod fair;
mod kv;
mod launch;
mod parallel;
mod redirect;
mod scale;
mod wake;
mod wasm;

use crate::alloc_count;
use crate::gen::{Generator, RxWrites};
pub(crate) use crate::testbed::spin;
use crate::testbed::{one_tenant, KEY};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde::Serialize;
use snic_core::dag::{DagRoute, NtMask, Step};
use snic_core::ids::TenantId;
use snic_core::mat::PortRange;
use snic_core::node::NodeCoreConfig;
use snic_core::sched::SchedConfig;
use snic_dataplane::backend::Framing;
use snic_dataplane::node::{Clock, MonotonicClock};
use snic_dataplane::store::Peer;
use snic_dataplane::{Node, NodeConfig};
use snic_nt::crypto::{CryptoConfig, Direction, TenantKey};
use snic_nt::firewall::{FirewallConfig, FwRule, Policy};
use snic_nt::nat::{NatConfig, Snat};
use snic_nt::NtSpec;
use snic_wire::build::{build, FrameSpec, L4Spec, OuterSpec};
use snic_wire::ethernet::MacAddr;
use std::time::{Duration, Instant};

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCmd {
    /// Full data path in memory (parse, MAT, store, scheduler, chain, egress) on one core.
    Dataplane(DataplaneArgs),
    /// The crypto library's own AES-GCM seal rate on one core: the ceiling of the vpc chain.
    Crypto(CryptoArgs),
    /// Weighted DRF computation time for 16, 64 and 256 tenants over 16 resources.
    Drf(DrfArgs),
    /// Fair sharing and isolation: the Fig. 7 step (allocation shift, convergence) and a
    /// well-behaved tenant against antagonists, alone / without / with the mechanisms.
    Fair(fair::FairArgs),
    /// Latency of 2..7 NTs as one chain, as two half chains, and PANIC-style (every NT its own
    /// chain, back to the scheduler after each).
    Chain(chain::ChainArgs),
    /// What launching a chain instance (its NTs instantiated into a region) costs, and what a
    /// packet waits for an on-demand launch, a context switch or a victim resume.
    Launch(launch::LaunchArgs),
    /// NT-level parallelism: 1..6 independent NTs all in parallel (fork/join), half in parallel
    /// and in sequence.
    Parallel(parallel::ParallelArgs),
    /// What a small apply (one tenant, one rule) costs a running node against what it holds
    /// (nothing, 10,000 firewall rules, a NAT of 2^20 flows, 1,000 tenants), through the API.
    Apply(apply::ApplyArgs),
    /// Auto-scaling under a square-wave load against static-max and static-avg allocations
    /// (virtual clock): delivered throughput, region-time, scale events.
    Scale(scale::ScaleArgs),
    /// The pool's redirect against local processing, over UDP on loopback: added latency
    /// (p50/p99 at a paced rate) and delivered throughput of a chain run on a peer.
    Redirect(redirect::RedirectArgs),
    /// A YCSB-style driver (workloads A/B/C, zipfian keys) over memcached UDP against a server,
    /// directly or through snic; scripts/bench-kv.sh builds the namespaces and runs it per path.
    Kv(kv::KvArgs),
    /// The kv_cache's eviction policies (FIFO, CLOCK) on the same YCSB-style stream, without
    /// the network: hit rates by cache size.
    KvPolicy(kv::KvPolicyArgs),
    /// A tenant's own NT: the same firewall built in and as a wasm module (examples/wasm,
    /// compiled with clang) through the full in-memory path, and what launching a module costs.
    Wasm(wasm::WasmArgs),
    /// How late the node's idle wait wakes: the UDP backend's sleep for 50 µs … 1 ms, timed to
    /// the nanosecond (epoll_pwait2, the node's way) and in whole milliseconds (the fallback).
    Wake(wake::WakeArgs),
}

/// Options of `snic bench drf`.
#[derive(Args)]
pub struct DrfArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Tenant counts, comma-separated.
    #[arg(long, default_value = "16,64,256", value_delimiter = ',')]
    tenants: Vec<usize>,
    /// Resources per tenant.
    #[arg(long, default_value_t = 16)]
    resources: usize,
    /// Measured seconds per case.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Seed of the random demands.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Options of `snic bench dataplane`.
#[derive(Args)]
pub struct DataplaneArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Chains to measure: dummy, vpc (firewall → NAT → AES-GCM encrypt), aes-gcm (the vpc
    /// chain's cipher alone), or all (dummy and vpc).
    #[arg(long, default_value = "all")]
    chain: String,
    /// Inner frame sizes in bytes (the tenant's Ethernet frame inside VXLAN), comma-separated.
    #[arg(long, default_value = "64,1400", value_delimiter = ',')]
    size: Vec<usize>,
    /// Measured seconds per case (after one second of warm-up).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Distinct flows in the offered traffic.
    #[arg(long, default_value_t = 1024)]
    flows: u16,
    /// Firewall rules in the vpc chain (none match the traffic, so each new flow scans them all).
    #[arg(long, default_value_t = 100)]
    fw_rules: usize,
    /// Worker threads for regions (0: regions run on the dispatcher's core).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Receive and dispatch batch size.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// The scheduler's initial credits per instance (the descriptors its region may hold at
    /// once), comma-separated: each value is a case, with every size (the paper's Fig. 9 sweeps
    /// credits against packet size).
    #[arg(long, default_value = "256", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=65536))]
    credits: Vec<u32>,
    /// Run exactly this many packets (after a warm-up of the same count) instead of timing;
    /// for instruction counting under callgrind. The node's time then moves 100 ns a packet
    /// sent, not with the machine's clock, so that epochs and sweeps come as often a packet as
    /// in a timed run.
    #[arg(long)]
    packets: Option<u64>,
    /// Idle tenants registered beside the active one (each with its VNI, rule and DAG on the
    /// same chain, and no traffic), up to 1022: what configured tenants cost the data path.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1022))]
    idle_tenants: u16,
    /// What the generator writes into each receive buffer for frames over 256 bytes: `frame`
    /// (all of it, as a NIC's DMA would, at the CPU's cost) or `headers` (the headers only, the
    /// payload left as the buffer holds it, as DPDK's net_null does; the difference is the
    /// generator's share of the run).
    #[arg(long, value_enum, default_value_t = RxWrites::Frame)]
    rx_writes: RxWrites,
    /// Alternate the timed run, 100 ms at a time, with the crypto library's AES-128-GCM seal of
    /// one packet's size on one hot buffer (the loop `snic bench crypto` times), and report the
    /// node's rate against the seal's, pair by pair: the two halves of a pair see the machine at
    /// the same speed, where separate runs minutes apart may not. Doubles the run's time.
    #[arg(long)]
    pair_seal: bool,
    /// Dispatcher threads (node.yaml `data_cores`): each a node of its own over a generator of
    /// its own, pinned to a core of its own, all sharing one fair-sharing board; the rate is
    /// their sum over the same timed window. Not with --packets, --pair-seal or --workers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    data_cores: u16,
}

/// Options of `snic bench crypto`.
#[derive(Args)]
pub struct CryptoArgs {
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Buffer sizes, comma-separated.
    #[arg(long, default_value = "64,1400", value_delimiter = ',')]
    size: Vec<usize>,
    /// Measured seconds per size.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
}

/// Warms a node fed by a paced source up for half a second, then measures for `seconds`: the
/// first stream's latency p50 and p99 (ns) and packets delivered.
pub(crate) fn paced_latency(node: &mut Node<crate::paced::Paced>, seconds: f64) -> (u64, u64, u64) {
    spin(node, Duration::from_millis(500));
    node.backend_mut().reset_stats();
    spin(node, Duration::from_secs_f64(seconds));
    let st = &node.backend().stats()[0];
    (st.latency.quantile(0.5), st.latency.quantile(0.99), st.delivered)
}

/// Prints one result: a JSON line, or the human line `text` makes.
pub(crate) fn emit<T: Serialize>(json: bool, r: &T, text: impl FnOnce(&T) -> String) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        println!("{}", text(r));
    }
    Ok(())
}

/// Dispatch.
pub fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Dataplane(a) => dataplane(a),
        BenchCmd::Crypto(a) => crypto(a),
        BenchCmd::Drf(a) => drf(a),
        BenchCmd::Fair(a) => fair::run(a),
        BenchCmd::Chain(a) => chain::run(a),
        BenchCmd::Launch(a) => launch::run(a),
        BenchCmd::Scale(a) => scale::run(a),
        BenchCmd::Apply(a) => apply::run(a),
        BenchCmd::Parallel(a) => parallel::run(a),
        BenchCmd::Redirect(a) => redirect::run(&a),
        BenchCmd::Kv(a) => kv::run(&a),
        BenchCmd::KvPolicy(a) => kv::run_policy(&a),
        BenchCmd::Wasm(a) => wasm::run(&a),
        BenchCmd::Wake(a) => wake::run(&a),
    }
}

#[derive(Serialize)]
struct DrfResult {
    bench: &'static str,
    tenants: usize,
    resources: usize,
    ns_per_run: f64,
    /// The fairness controller's whole epoch (smoothing, DRF, limits) on the same demands.
    epoch_ns: f64,
    seed: u64,
}

fn drf(a: DrfArgs) -> anyhow::Result<()> {
    use snic_core::drf::{Drf, TenantDemand};
    // xorshift: reproducible demands from the printed seed.
    let mut x = a.seed.max(1);
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    for &n in &a.tenants {
        let cap: Vec<f64> = (0..a.resources).map(|_| 50.0 + 100.0 * rnd()).collect();
        // Each tenant uses a few resources (its NTs and the shared ones), as measured demand.
        let tenants: Vec<TenantDemand> = (0..n)
            .map(|_| TenantDemand {
                weight: [1.0, 1.0, 2.0, 4.0][(rnd() * 4.0) as usize % 4],
                demand: (0..a.resources).map(|_| if rnd() < 0.4 { 40.0 * rnd() } else { 0.0 }).collect(),
            })
            .collect();
        let mut drf = Drf::new();
        let mut out = Vec::new();
        drf.allocate(&cap, &tenants, &mut out); // warm the scratch memory
        let t0 = Instant::now();
        let mut runs = 0u64;
        while t0.elapsed().as_secs_f64() < a.seconds {
            for _ in 0..64 {
                drf.allocate(std::hint::black_box(&cap), std::hint::black_box(&tenants), &mut out);
            }
            runs += 64;
        }
        let ns_per_run = t0.elapsed().as_nanos() as f64 / runs as f64;
        // The whole per-epoch controller on the same demands (observations in, smoothing, DRF,
        // limits out): what an epoch costs the node's dispatcher besides reading its counters.
        use snic_core::fair::{Fairness, Kind, Resource};
        use snic_core::time::Instant as At;
        let mut f = Fairness::new(Default::default(), At::ZERO);
        f.set_resources(
            cap.iter()
                .enumerate()
                .map(|(k, &c)| Resource { name: format!("r{k}"), kind: Kind::Rate, capacity: c, scope: Default::default() })
                .collect(),
        );
        for (i, t) in tenants.iter().enumerate() {
            f.set_tenant(TenantId(i as u16), t.weight);
        }
        let epoch = 100_000u64;
        let mut now = 0u64;
        let mut epochs = 0u64;
        let t0 = Instant::now();
        while t0.elapsed().as_secs_f64() < a.seconds {
            for _ in 0..64 {
                now += epoch;
                f.end_epoch(At(now), |t, o| {
                    // The demand per epoch of 100 us, all of it admitted.
                    for (x, d) in o.amounts.iter_mut().zip(&tenants[t.index()].demand) {
                        *x = d * 1e-4;
                    }
                    o.offered_packets = 1000;
                    o.admitted_packets = 1000;
                });
            }
            epochs += 64;
        }
        let r = DrfResult {
            bench: "drf",
            tenants: n,
            resources: a.resources,
            ns_per_run,
            epoch_ns: t0.elapsed().as_nanos() as f64 / epochs as f64,
            seed: a.seed,
        };
        emit(a.json, &r, |r| {
            format!(
                "drf {:>4} tenants x {:>2} resources: {:>9.0} ns per run, {:>9.0} ns per epoch (controller)",
                r.tenants, r.resources, r.ns_per_run, r.epoch_ns
            )
        })?;
    }
    Ok(())
}

#[derive(Serialize)]
struct DataplaneResult {
    bench: &'static str,
    chain: String,
    idle_tenants: u16,
    packet_size: usize,
    /// What the generator wrote into each buffer (`--rx-writes`).
    rx_writes: RxWrites,
    cores: usize,
    /// Dispatcher threads (`--data-cores`).
    data_cores: u16,
    /// The scheduler's initial credits per instance (`--credits`).
    credits: u32,
    mpps: f64,
    /// The rate in each whole tenth of a second of a timed run, Mpps (none in a counted run):
    /// how steady the machine was. On a shared guest it moves between speeds within one run.
    slice_mpps: Vec<f64>,
    /// With `--pair-seal`: the seal's slices, each right after the node's of the same index.
    #[serde(skip_serializing_if = "Option::is_none")]
    paired_seal: Option<PairedSeal>,
    gbps: f64,
    p50_ns: u64,
    p99_ns: u64,
    wire_bytes: usize,
    packets: u64,
    dropped: u64,
    /// Drops by reason (non-zero only).
    drop_reasons: Vec<(&'static str, u64)>,
    allocs_during_run: u64,
    rss_mib: f64,
}

/// The node against the seal, slice by slice (`--pair-seal`).
#[derive(Serialize)]
struct PairedSeal {
    /// Bytes each seal encrypts (the packet size).
    bytes: usize,
    /// The seal's rate in each of its slices, Mops.
    slice_mops: Vec<f64>,
    /// The node's Mpps over the seal's Mops in each pair: the 10th, 50th and 90th percentiles.
    ratio_p10: f64,
    ratio_p50: f64,
    ratio_p90: f64,
}

impl PairedSeal {
    fn new(bytes: usize, node: &[f64], seal: Vec<f64>) -> Self {
        let mut r: Vec<f64> = node.iter().zip(&seal).map(|(n, s)| n / s).collect();
        r.sort_by(f64::total_cmp);
        let q = |p: f64| if r.is_empty() { 0.0 } else { r[((r.len() - 1) as f64 * p).round() as usize] };
        PairedSeal { bytes, ratio_p10: q(0.1), ratio_p50: q(0.5), ratio_p90: q(0.9), slice_mops: seal }
    }
}

fn chain_specs(chain: &str, fw_rules: usize) -> anyhow::Result<Vec<NtSpec>> {
    let seal = || {
        NtSpec::AesGcm(CryptoConfig {
            direction: Direction::Encrypt,
            keys: vec![TenantKey { tenant: 1, spi: 1, key_hex: KEY.into() }],
            max_senders: 16,
        })
    };
    Ok(match chain {
        "dummy" => vec![NtSpec::Dummy],
        "vpc" => {
            // Rules that never match the offered traffic (other source networks), so every new
            // flow pays a full scan and the default policy decides.
            let rules = (0..fw_rules)
                .map(|i| {
                    Ok(FwRule {
                        src: Some(format!("172.{}.{}.0/24", 16 + (i / 256) % 16, i % 256).parse().map_err(anyhow::Error::msg)?),
                        dst: None,
                        proto: Some(6),
                        src_ports: PortRange::ANY,
                        dst_ports: PortRange::single(22),
                        action: Policy::Deny,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            vec![
                NtSpec::Firewall(FirewallConfig { rules, default: Policy::Allow, non_ip: Policy::Allow, flow_cache: 4096 }),
                NtSpec::Nat(NatConfig {
                    snat: Some(Snat {
                        inside: "10.0.0.0/8".parse().map_err(anyhow::Error::msg)?,
                        public: [203, 0, 113, 1].into(),
                        ports: PortRange { lo: 1024, hi: 65535 },
                    }),
                    ..Default::default()
                }),
                seal(),
            ]
        }
        // The vpc chain's cipher alone: what the rest of the vpc chain costs, by difference.
        "aes-gcm" => vec![seal()],
        other => bail!("unknown chain `{other}` (expected dummy, vpc, aes-gcm or all)"),
    })
}

/// Per-flow headers and the shared payload (see `Generator`).
fn templates(inner_size: usize, flows: u16) -> anyhow::Result<(Vec<Vec<u8>>, Vec<u8>)> {
    const MIN: usize = 14 + 20 + 8;
    if !(MIN..=1500).contains(&inner_size) {
        bail!("inner frame size {inner_size} outside {MIN}..=1500");
    }
    let payload_len = inner_size - MIN;
    let headers = (0..flows.max(1))
        .map(|f| {
            let spec = FrameSpec {
                outer: Some(OuterSpec {
                    src_mac: MacAddr([2, 0, 0, 0, 1, 1]),
                    dst_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                    src_ip: [192, 0, 2, 10].into(),
                    dst_ip: [192, 0, 2, 1].into(),
                    src_port: 50000 + f,
                }),
                vni: 100,
                inner_src_mac: MacAddr([2, 0, 0, 0, 9, 1]),
                inner_dst_mac: MacAddr([2, 0, 0, 0, 9, 2]),
                src: [10, 0, (f >> 8) as u8, f as u8].into(),
                dst: [198, 51, 100, 7].into(),
                l4: L4Spec::Udp { src_port: 10000 + f, dst_port: 5001 },
                payload_len,
                payload_byte: 0xab,
            };
            let mut b = vec![0u8; 2048];
            let n = build(&spec, &mut b).context("template does not fit")?;
            b.truncate(n - payload_len);
            Ok(b)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((headers, vec![0xab; payload_len]))
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}

fn dataplane(a: DataplaneArgs) -> anyhow::Result<()> {
    if a.pair_seal && a.packets.is_some() {
        bail!("--pair-seal times slices of the run against the seal; a counted run (--packets) is not timed");
    }
    let chains: Vec<&str> = match a.chain.as_str() {
        "all" => vec!["dummy", "vpc"],
        c => vec![c],
    };
    for chain in chains {
        for (&credits, &size) in a.credits.iter().flat_map(|c| a.size.iter().map(move |s| (c, s))) {
            let r = dataplane_case(&a, chain, size, credits)?;
            emit(a.json, &r, |r| {
                let paired = match &r.paired_seal {
                    Some(p) => format!(
                        "  against the {} B seal, paired slices: {:.3} (p10 {:.3}, p90 {:.3})",
                        p.bytes, p.ratio_p50, p.ratio_p10, p.ratio_p90
                    ),
                    None => String::new(),
                };
                let slices = match r.slice_mpps.iter().copied().reduce(f64::min).zip(r.slice_mpps.iter().copied().reduce(f64::max)) {
                    Some((lo, hi)) => format!(" ({lo:.2}-{hi:.2} in 100 ms slices)"),
                    None => String::new(),
                };
                let credits = if a.credits.len() > 1 || r.credits != default_credits() {
                    format!("  {:>5} credits", r.credits)
                } else {
                    String::new()
                };
                format!(
                    "{:>6} {:>5} B {:>4} idle{}  {:>6.2} Mpps{}  {:>6.2} Gbit/s  p50 {:>6} ns  p99 {:>6} ns  drops {}  allocs {}  rss {:.0} MiB{}{}",
                    r.chain,
                    r.packet_size,
                    r.idle_tenants,
                    credits,
                    r.mpps,
                    slices,
                    r.gbps,
                    r.p50_ns,
                    r.p99_ns,
                    r.dropped,
                    r.allocs_during_run,
                    r.rss_mib,
                    if r.rx_writes == RxWrites::Headers { "  (generator writes headers only)" } else { "" },
                    paired
                )
            })?;
        }
    }
    Ok(())
}

/// The length of the slices a timed run's rate is also given in.
const SLICE: Duration = Duration::from_millis(100);

/// Polls `node` for `d` of its own time, as [`spin`] does, and pushes the packets sent in each
/// `slice` of it (a rate, Mpps) onto `out`. With `seal`, each slice of the node is followed by
/// one of the seal, whose rate (Mops) goes onto the seal's list; the node's time then leaves
/// out the seal's. Returns the node's time.
fn spin_sliced(
    node: &mut Node<Generator>,
    d: Duration,
    slice: Duration,
    out: &mut Vec<f64>,
    mut seal: Option<(&mut Seal, &mut Vec<f64>)>,
) -> anyhow::Result<Duration> {
    let mut ran = Duration::ZERO;
    let (mut at, mut sent) = (Instant::now(), node.backend().tx_packets);
    loop {
        // The clock is read every 16 polls (512 packets at the default batch: a read is some
        // 25 ns, next to nothing a packet), so that a slice ends close to its length even in a
        // debug build on a loaded machine, where 256 polls took 100 ms.
        for _ in 0..16 {
            node.poll();
        }
        let lap = at.elapsed();
        let (full, done) = (lap >= slice, ran + lap >= d);
        if full || done {
            if full {
                out.push((node.backend().tx_packets - sent) as f64 / lap.as_secs_f64() / 1e6);
            }
            ran += lap;
            if done {
                return Ok(ran);
            }
            if let Some((s, v)) = seal.as_mut() {
                let (ops, took) = s.spin(slice)?;
                v.push(ops as f64 / took.as_secs_f64() / 1e6);
            }
            (at, sent) = (Instant::now(), node.backend().tx_packets);
        }
    }
}

/// The crypto library's AES-128-GCM seal, in place, of one hot buffer: what `snic bench crypto`
/// times, and `--pair-seal` alternates with the node.
struct Seal {
    key: ring::aead::LessSafeKey,
    buf: Vec<u8>,
    seq: u64,
}

impl Seal {
    fn new(size: usize) -> anyhow::Result<Self> {
        use ring::aead::{LessSafeKey, UnboundKey, AES_128_GCM};
        let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[7u8; 16]).map_err(|_| anyhow::anyhow!("bad key"))?);
        Ok(Seal { key, buf: vec![0x5a; size], seq: 0 })
    }

    /// Seals for at least `d`, 1,024 at a time: the seals done and the time they took.
    fn spin(&mut self, d: Duration) -> anyhow::Result<(u64, Duration)> {
        use ring::aead::{Aad, Nonce};
        let t0 = Instant::now();
        let (mut ops, mut fold) = (0u64, 0u8);
        while t0.elapsed() < d {
            for _ in 0..1024 {
                self.seq += 1;
                let mut n = [0u8; 12];
                n[4..].copy_from_slice(&self.seq.to_be_bytes());
                let hdr = [0u8; 16];
                let tag = (self.key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(n), Aad::from(&hdr), &mut self.buf))
                    .map_err(|_| anyhow::anyhow!("seal failed"))?;
                fold ^= tag.as_ref()[0];
            }
            ops += 1024;
        }
        std::hint::black_box(fold);
        Ok((ops, t0.elapsed()))
    }
}

fn dataplane_case(a: &DataplaneArgs, chain: &str, size: usize, credits: u32) -> anyhow::Result<DataplaneResult> {
    Ok(run_chain(a, chain, chain_specs(chain, a.fw_rules)?, size, credits)?.0)
}

/// The scheduler's default credits per instance.
pub(crate) fn default_credits() -> u32 {
    NodeCoreConfig::default().sched.credits
}

/// The clock of a counted run (`--packets`): it reads the machine's clock, so that a read costs
/// what it costs in a timed run, but tells time by the packets sent, [`PacketClock::NS_PER_PACKET`]
/// each. Under callgrind, some 50 times slower than the machine, the machine's time would end a
/// fair-sharing epoch (1 ms) at every poll and run the NAT's sweep every few packets; packet time
/// runs those as often a packet as a timed run near 10 Mpps does, so instruction counts are the
/// path's, not the instrumentation's.
#[derive(Clone, Default)]
struct PacketClock {
    real: MonotonicClock,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl PacketClock {
    const NS_PER_PACKET: u64 = 100;

    /// `n` packets have been sent since the start.
    fn sent(&self, n: u64) {
        self.sent.store(n, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clock for PacketClock {
    fn now(&self) -> snic_core::time::Instant {
        std::hint::black_box(self.real.now());
        snic_core::time::Instant::from_nanos(self.sent.load(std::sync::atomic::Ordering::Relaxed) * Self::NS_PER_PACKET)
    }
}

/// A node over the in-memory generator with one tenant on a chain of `specs` (and
/// `--idle-tenants` beside it), its chain launched; and the wire size of a packet.
fn bench_node(
    a: &DataplaneArgs,
    specs: Vec<NtSpec>,
    size: usize,
    credits: u32,
    clock: Box<dyn Clock>,
    data_core: Option<snic_core::fair::OnBoard>,
) -> anyhow::Result<(Node<Generator>, snic_core::ids::ChainId, usize)> {
    let (headers, payload) = templates(size, a.flows)?;
    let wire = headers[0].len() + payload.len();
    let gen = Generator::new(Framing::Ethernet, headers, payload, "192.0.2.10:4789".parse()?, u64::MAX).with_writes(a.rx_writes);
    let local = Peer { addr: "192.0.2.1:4789".parse()?, mac: MacAddr([2, 0, 0, 0, 0, 1]) };
    let cfg = NodeConfig {
        core: NodeCoreConfig {
            workers: a.workers,
            sched: SchedConfig { credits, ..NodeCoreConfig::default().sched },
            ..NodeCoreConfig::default()
        },
        local,
        pin_cores: a.workers > 0,
        batch: a.batch,
        data_core,
        ..Default::default()
    };
    let mut node = Node::new(cfg, gen, clock)?;
    let n = specs.len();
    let c = node.add_chain(specs);
    node.launch(c)?;
    // Registered for fair sharing, as a deployed tenant is (its per-epoch cost is measured too);
    // everything on VNI 100 goes to the peer VTEP (the far sNIC of the VPC).
    let far = Peer { addr: "192.0.2.2:4789".parse()?, mac: MacAddr([2, 0, 0, 0, 0, 2]) };
    one_tenant(&mut node, DagRoute::new(vec![Step { chain: c, mask: NtMask::all(n) }]), far);
    if a.idle_tenants > 0 {
        let mut mat = (*node.mat_handle().load_full()).clone();
        for i in 0..a.idle_tenants {
            let (t, uid) = (TenantId(i + 2), snic_core::ids::DagUid(i as u32 + 2));
            node.set_tenant(t, 1.0);
            node.set_dag(uid, DagRoute::new(vec![Step { chain: c, mask: NtMask::all(n) }]));
            mat.insert(crate::testbed::dag_rule(1000 + i as u32, t, uid));
        }
        node.mat_handle().store(std::sync::Arc::new(mat));
    }
    Ok((node, c, wire))
}

/// The full in-memory path through a chain of `specs`, as `snic bench dataplane` runs it; also
/// the chain's measured cost per packet (ns, NTs only).
fn run_chain(a: &DataplaneArgs, chain: &str, specs: Vec<NtSpec>, size: usize, credits: u32) -> anyhow::Result<(DataplaneResult, f64)> {
    if a.data_cores > 1 {
        return run_chain_cores(a, chain, specs, size, credits);
    }
    // Counted runs (`--packets`, under callgrind) tell time by packets sent; timed runs by the
    // machine's clock.
    let packet_time = PacketClock::default();
    let clock: Box<dyn Clock> = if a.packets.is_some() { Box::new(packet_time.clone()) } else { Box::new(MonotonicClock::default()) };
    let (mut node, c, wire) = bench_node(a, specs, size, credits, clock, None)?;
    let count = |node: &mut Node<Generator>, n: u64| {
        let t0 = Instant::now();
        let target = node.backend().tx_packets + n;
        while node.backend().tx_packets < target {
            node.poll();
            packet_time.sent(node.backend().tx_packets);
        }
        t0.elapsed()
    };
    match a.packets {
        Some(n) => count(&mut node, n),
        None => spin(&mut node, Duration::from_secs(1)),
    };
    // Room for every slice before the run is counted: a push that grew it would count as an
    // allocation of the packet path's.
    let mut slice_mpps = Vec::with_capacity((a.seconds / SLICE.as_secs_f64()) as usize + 2);
    let mut seal = match a.pair_seal {
        true => Some((Seal::new(size)?, Vec::with_capacity(slice_mpps.capacity()))),
        false => None,
    };
    node.reset_stats();
    let tx0 = node.backend().tx_packets;
    let allocs0 = alloc_count::allocations();
    let elapsed = match a.packets {
        Some(n) => count(&mut node, n),
        None => spin_sliced(&mut node, Duration::from_secs_f64(a.seconds), SLICE, &mut slice_mpps, seal.as_mut().map(|(s, v)| (s, v)))?,
    };
    let allocs = alloc_count::allocations() - allocs0;
    let s = node.stats();
    let pkts = node.backend().tx_packets - tx0;
    let mpps = pkts as f64 / elapsed.as_secs_f64() / 1e6;
    let dropped = s.total().dropped() + s.unattributed.iter().sum::<u64>();
    let nt_ns = node.core().meter().chain_cost_ns(c);
    let r = DataplaneResult {
        bench: "dataplane",
        chain: chain.to_string(),
        idle_tenants: a.idle_tenants,
        packet_size: size,
        rx_writes: a.rx_writes,
        cores: 1 + a.workers,
        data_cores: 1,
        credits,
        mpps,
        paired_seal: seal.map(|(_, v)| PairedSeal::new(size, &slice_mpps, v)),
        slice_mpps,
        gbps: mpps * 1e6 * size as f64 * 8.0 / 1e9,
        p50_ns: s.latency.quantile(0.5),
        p99_ns: s.latency.quantile(0.99),
        wire_bytes: wire,
        packets: pkts,
        dropped,
        drop_reasons: s.drops_by_reason(),
        allocs_during_run: allocs,
        rss_mib: rss_mib(),
    };
    Ok((r, nt_ns))
}

/// [`run_chain`] on `--data-cores` dispatcher threads: each builds its node on its own core,
/// warms up for a second, and all run the same timed window together (a barrier before and
/// after); the rate is the packets all sent over the longest thread's time.
fn run_chain_cores(
    a: &DataplaneArgs,
    chain: &str,
    specs: Vec<NtSpec>,
    size: usize,
    credits: u32,
) -> anyhow::Result<(DataplaneResult, f64)> {
    if a.packets.is_some() || a.pair_seal || a.workers > 0 {
        bail!("--data-cores above 1 runs a timed window on dispatcher threads alone: not with --packets, --pair-seal or --workers");
    }
    let n = a.data_cores as usize;
    let boards = snic_core::fair::Board::shared(n);
    let (ready, done, counted) = (std::sync::Barrier::new(n), std::sync::Barrier::new(n), std::sync::Barrier::new(n));
    struct Ran {
        pkts: u64,
        elapsed: Duration,
        stats: snic_dataplane::stats::Stats,
        slices: Vec<f64>,
        wire: usize,
        nt_ns: f64,
        pinned: bool,
        /// Allocations in the process over the window (thread 0 reads them).
        allocs: u64,
    }
    let ran: Vec<anyhow::Result<Ran>> = std::thread::scope(|sc| {
        let threads: Vec<_> = boards
            .into_iter()
            .enumerate()
            .map(|(k, on)| {
                let (specs, ready, done, counted) = (specs.clone(), &ready, &done, &counted);
                sc.spawn(move || -> anyhow::Result<Ran> {
                    let pinned = snic_dataplane::node::pin_current(k);
                    let built = bench_node(a, specs, size, credits, Box::new(MonotonicClock::default()), Some(on));
                    // (Every thread reaches every barrier, built or not, so that none waits for ever.)
                    let (mut node, c, wire) = match built {
                        Ok(b) => b,
                        Err(e) => {
                            ready.wait();
                            done.wait();
                            counted.wait();
                            return Err(e);
                        }
                    };
                    spin(&mut node, Duration::from_secs(1));
                    let mut slices = Vec::with_capacity((a.seconds / SLICE.as_secs_f64()) as usize + 2);
                    node.reset_stats();
                    ready.wait();
                    let allocs0 = alloc_count::allocations();
                    let tx0 = node.backend().tx_packets;
                    let elapsed = spin_sliced(&mut node, Duration::from_secs_f64(a.seconds), SLICE, &mut slices, None);
                    done.wait();
                    // (Read before any thread copies its counters out, which allocates.)
                    let allocs = if k == 0 { alloc_count::allocations() - allocs0 } else { 0 };
                    counted.wait();
                    let elapsed = elapsed?;
                    let pkts = node.backend().tx_packets - tx0;
                    let nt_ns = node.core().meter().chain_cost_ns(c);
                    Ok(Ran { pkts, elapsed, stats: node.stats().clone(), slices, wire, nt_ns, pinned, allocs })
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a dispatcher thread panicked")))).collect()
    });
    let ran = ran.into_iter().collect::<anyhow::Result<Vec<Ran>>>()?;
    if ran.iter().any(|r| !r.pinned) {
        eprintln!("bench dataplane: could not pin every dispatcher thread to a core of its own");
    }
    let pkts: u64 = ran.iter().map(|r| r.pkts).sum();
    let elapsed = ran.iter().map(|r| r.elapsed).max().unwrap_or_default();
    let mpps = pkts as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6;
    let mut latency = snic_dataplane::stats::Histogram::default();
    ran.iter().for_each(|r| latency.merge(&r.stats.latency));
    let dropped: u64 = ran.iter().map(|r| r.stats.total().dropped() + r.stats.unattributed.iter().sum::<u64>()).sum();
    let mut reasons: Vec<(&'static str, u64)> = Vec::new();
    for (name, k) in ran.iter().flat_map(|r| r.stats.drops_by_reason()) {
        match reasons.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += k,
            None => reasons.push((name, k)),
        }
    }
    // The node's rate in each slice: the threads' slices, index by index.
    let slices = (0..ran.iter().map(|r| r.slices.len()).min().unwrap_or(0)).map(|i| ran.iter().map(|r| r.slices[i]).sum()).collect();
    let r = DataplaneResult {
        bench: "dataplane",
        chain: chain.to_string(),
        idle_tenants: a.idle_tenants,
        packet_size: size,
        rx_writes: a.rx_writes,
        cores: n,
        data_cores: a.data_cores,
        credits,
        mpps,
        paired_seal: None,
        slice_mpps: slices,
        gbps: mpps * 1e6 * size as f64 * 8.0 / 1e9,
        p50_ns: latency.quantile(0.5),
        p99_ns: latency.quantile(0.99),
        wire_bytes: ran[0].wire,
        packets: pkts,
        dropped,
        drop_reasons: reasons,
        allocs_during_run: ran.iter().map(|r| r.allocs).sum(),
        rss_mib: rss_mib(),
    };
    Ok((r, ran.iter().map(|r| r.nt_ns).sum::<f64>() / n as f64))
}

#[derive(Serialize)]
struct CryptoResult {
    bench: &'static str,
    library: &'static str,
    algorithm: &'static str,
    bytes: usize,
    cores: usize,
    mpps: f64,
    gbps: f64,
}

fn crypto(a: CryptoArgs) -> anyhow::Result<()> {
    for &size in &a.size {
        let (ops, took) = Seal::new(size)?.spin(Duration::from_secs_f64(a.seconds))?;
        let secs = took.as_secs_f64();
        let r = CryptoResult {
            bench: "aes_gcm",
            library: "ring 0.17",
            algorithm: "AES-128-GCM seal",
            bytes: size,
            cores: 1,
            mpps: ops as f64 / secs / 1e6,
            gbps: ops as f64 * size as f64 * 8.0 / secs / 1e9,
        };
        emit(a.json, &r, |r| format!("aes-128-gcm {:>5} B  {:>6.2} Mops/s  {:>6.2} Gbit/s", r.bytes, r.mpps, r.gbps))?;
    }
    Ok(())
}
