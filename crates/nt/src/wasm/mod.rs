//! The `wasm` NT: a tenant's own packet processing, as a WebAssembly module run in a sandbox.
//!
//! The paper's tenants deploy their own NTs as FPGA netlists, launched by partial
//! reconfiguration; here a tenant deploys a WebAssembly module ([`abi`], docs/wasm.md), compiled
//! when it is deployed (cached by content: a relaunch, a second instance or a context switch
//! instantiates again but does not compile again) and instantiated per NT instance, each with its
//! own linear memory. What the node enforces, per packet and per instance:
//!
//! - **time**: each packet runs on a fuel budget (`max_fuel_per_packet`, about one wasm
//!   instruction a unit); a packet that uses it up is dropped (`wasm_time_limit`) and its time
//!   is charged to the tenant like any NT's (the region measures it). An NT over its budget more
//!   than `max_overruns_per_s` times in a second is stopped: every later packet is dropped
//!   (`wasm_stopped`) until the NT is deployed again, and its `stopped` counter (an alarm) says so;
//! - **memory**: linear memory and tables are limited per instance (`max_memory_bytes`); growth
//!   past it fails inside the guest (`memory.grow` returns -1). The limit is the tenant's memory
//!   demand in fair sharing ([`crate::NtSpec::memory_bytes`]);
//! - **faults**: a trap drops the packet (`wasm_trap`) and nothing else; the instance keeps its
//!   state and takes the next packet;
//! - **isolation**: a module sees only the packets of its own chain (a `wasm` NT is never shared
//!   between tenants, control plane), one at a time, copied into its memory; nothing of another
//!   instance or tenant is reachable from it.

pub mod abi;
mod cache;
pub mod engine;
#[cfg(feature = "wasmtime")]
pub mod wasmtime_engine;

use crate::{bump, Ctx, DropReason, Nt, NtCounters, Pkt, Verdict};
use base64::Engine as _;
use engine::Fault;
use serde::{Deserialize, Serialize};
use snic_wire::layout::InnerL3;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Bounds of a `wasm` NT's configuration (docs/manifests.md).
pub mod bounds {
    /// The module's bytes: what etcd's 1.5 MiB request limit holds with the base64 around it.
    pub const MODULE_BYTES: usize = 1 << 20;
    /// The `config` text, bytes.
    pub const CONFIG_BYTES: usize = 64 << 10;
    /// `max_memory_bytes`: at least one 64 KiB page...
    pub const MIN_MEMORY: u64 = 64 << 10;
    /// ... and at most 1 GiB.
    pub const MAX_MEMORY: u64 = 1 << 30;
    /// `max_fuel_per_packet`: at least this much...
    pub const MIN_FUEL: u64 = 1_000;
    /// ... and at most this (about a second interpreted).
    pub const MAX_FUEL: u64 = 1_000_000_000;
    /// `max_packet_us`: at most 100 ms (a node's `limits.wasm_packet_us_max` is lower).
    pub const MAX_PACKET_US: u64 = 100_000;
    /// `max_init_ms`: at most 10 s (a node's `limits.wasm_init_ms_max` is lower).
    pub const MAX_INIT_MS: u64 = 10_000;
}

/// Compiles a C NT to a module with Debian's clang and lld, as a tenant would (docs/wasm.md):
/// `clang --target=wasm32 -O2 -nostdlib -Wl,--no-entry`. For tests and benchmarks, which build
/// the examples in `examples/wasm/`; the error names the missing tool.
pub fn compile_c(source: &std::path::Path) -> Result<Vec<u8>, String> {
    let out = std::env::temp_dir().join(format!(
        "snic-{}-{}.wasm",
        std::process::id(),
        source.file_stem().and_then(|s| s.to_str()).unwrap_or("nt")
    ));
    let run = std::process::Command::new("clang")
        .args(["--target=wasm32", "-O2", "-nostdlib", "-Wl,--no-entry", "-o"])
        .arg(&out)
        .arg(source)
        .output()
        .map_err(|e| format!("running clang ({e}): install clang and lld (scripts/test.sh does: apt-get install clang lld)"))?;
    if !run.status.success() {
        return Err(format!("clang failed on {}: {}", source.display(), String::from_utf8_lossy(&run.stderr)));
    }
    let bytes = std::fs::read(&out).map_err(|e| format!("reading {}: {e}", out.display()));
    let _ = std::fs::remove_file(&out);
    bytes
}

impl WasmConfig {
    /// A configuration of `module` with `config` and the defaults.
    pub fn of(module: &[u8], config: &str) -> WasmConfig {
        WasmConfig {
            module: base64::engine::general_purpose::STANDARD.encode(module),
            module_file: None,
            config: config.into(),
            max_memory_bytes: default_memory(),
            max_fuel_per_packet: default_fuel(),
            max_overruns_per_s: default_overruns(),
            max_packet_us: default_packet_us(),
            max_init_ms: default_init_ms(),
            engine: EngineKind::default(),
        }
    }
}

/// What an engine starts an instance with.
pub struct Setup {
    /// The NT's `config` text.
    pub config: Arc<[u8]>,
    /// Its memory limit, bytes.
    pub max_memory: usize,
    /// The module's counters (`snic.counter_add`).
    pub counters: Arc<[AtomicU64; abi::COUNTERS]>,
    /// Fuel for its start function and `snic_init`.
    pub init_fuel: u64,
}

/// One instance of a module in an engine: its memory and its `snic_process`.
pub trait Guest: Send {
    /// The module's linear memory, as it is now.
    fn memory(&mut self) -> &mut [u8];
    /// Calls `snic_process(len)` at time `now_ns` with `fuel` to spend.
    fn process(&mut self, len: u32, now_ns: u64, fuel: u64) -> Result<i32, Fault>;
    /// Fuel left after the last call.
    fn fuel_left(&self) -> u64;
}

/// The engine that runs a module (docs/wasm.md, "Engines").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// The wasmi interpreter: every build has it.
    #[default]
    Wasmi,
    /// wasmtime (Cranelift): a node built with the cargo feature `wasmtime`.
    Wasmtime,
}

impl EngineKind {
    /// True if this build has the engine.
    pub fn built(self) -> bool {
        match self {
            EngineKind::Wasmi => true,
            EngineKind::Wasmtime => cfg!(feature = "wasmtime"),
        }
    }
}

/// A `wasm` NT's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WasmConfig {
    /// The module, base64 (`snic apply` fills it in from `module_file`).
    #[serde(default)]
    pub module: String,
    /// A file holding the module, relative to the manifest: read by `snic apply`, which sends
    /// its bytes as `module`. A node given `module_file` refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_file: Option<String>,
    /// Text given to the module (`snic.config_read`), e.g. its rules.
    #[serde(default)]
    pub config: String,
    /// Most linear memory (and table space) one instance may have, bytes.
    #[serde(default = "default_memory")]
    pub max_memory_bytes: u64,
    /// Most fuel one packet may use (about one wasm instruction a unit).
    #[serde(default = "default_fuel")]
    pub max_fuel_per_packet: u64,
    /// Packets over the fuel budget in one second after which the NT is stopped.
    #[serde(default = "default_overruns")]
    pub max_overruns_per_s: u32,
    /// Most wall time one packet may take, µs, whatever its fuel: the node gives a packet no
    /// more fuel than the module spends in this long (docs/wasm.md, "Time").
    #[serde(default = "default_packet_us")]
    pub max_packet_us: u64,
    /// Most wall time starting an instance (its start function and `snic_init`) may take, ms.
    #[serde(default = "default_init_ms")]
    pub max_init_ms: u64,
    /// The engine: `wasmi` (every build) or `wasmtime` (a node built with it).
    #[serde(default)]
    pub engine: EngineKind,
}

fn default_memory() -> u64 {
    16 << 20
}
fn default_fuel() -> u64 {
    100_000
}
fn default_overruns() -> u32 {
    100
}
fn default_packet_us() -> u64 {
    200
}
fn default_init_ms() -> u64 {
    100
}

/// Why a module cannot be deployed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WasmError {
    /// `module` is not base64.
    #[error("not base64: {0}")]
    Base64(String),
    /// No module given.
    #[error("no module: give `module_file` to `snic apply`, or the module's bytes in `module` (base64)")]
    Empty,
    /// A `module_file` reached the node.
    #[error("`module_file` is read by `snic apply`, which sends the module's bytes in `module`; the node cannot read your files")]
    FileOnNode,
    /// Over [`bounds::MODULE_BYTES`].
    #[error("the module is too large: {0} bytes, the limit is {limit}", limit = bounds::MODULE_BYTES)]
    TooLarge(usize),
    /// Not a WebAssembly binary.
    #[error("not a WebAssembly module (a module starts with \\0asm; the text format is not accepted)")]
    NotWasm,
    /// It does not validate or compile.
    #[error("not a valid WebAssembly module: {0}")]
    Invalid(String),
    /// An import outside the ABI.
    #[error("imports outside the ABI: {0}")]
    Import(String),
    /// A missing or mistyped export.
    #[error("exports: {0}")]
    Export(String),
    /// Instantiating or `snic_init` failed.
    #[error("starting it failed: {0}")]
    Init(String),
    /// The packet area is not usable.
    #[error("packet area: {0}")]
    PacketArea(String),
    /// The engine asked for is not in this build.
    #[error("this node was built without the {0} engine (cargo feature `wasmtime`); use engine: wasmi")]
    EngineMissing(&'static str),
    /// Not expected.
    #[error("internal: {0}")]
    Internal(&'static str),
}

impl WasmConfig {
    /// The module's bytes, checked to be a WebAssembly binary within bounds.
    pub fn bytes(&self) -> Result<Vec<u8>, WasmError> {
        if self.module_file.is_some() {
            return Err(WasmError::FileOnNode);
        }
        if self.module.is_empty() {
            return Err(WasmError::Empty);
        }
        if self.module.len() > bounds::MODULE_BYTES.div_ceil(3) * 4 + 4 {
            return Err(WasmError::TooLarge(self.module.len() / 4 * 3));
        }
        let b = base64::engine::general_purpose::STANDARD.decode(self.module.trim()).map_err(|e| WasmError::Base64(e.to_string()))?;
        if b.len() > bounds::MODULE_BYTES {
            return Err(WasmError::TooLarge(b.len()));
        }
        if !b.starts_with(b"\0asm") {
            return Err(WasmError::NotWasm);
        }
        Ok(b)
    }

    /// Compiles (or finds compiled) and checks the module against the ABI, then starts one
    /// instance to run its `snic_init` and check its packet area: what applying a new module
    /// checks, once (its start is bounded by `max_init_ms`). A module that fails is not kept.
    pub fn check(&self) -> Result<(), WasmError> {
        let r = Wasm::new(self).map(drop);
        if r.is_err() {
            if let Ok(b) = self.bytes() {
                engine::forget(&b);
            }
        }
        r
    }

    /// Compiles (or finds compiled) and checks the module against the ABI, without starting it:
    /// what validating a state holding it checks, every time.
    pub fn check_module(&self) -> Result<(), WasmError> {
        let bytes = self.bytes()?;
        match self.engine {
            EngineKind::Wasmi => engine::compile(&bytes).map(drop),
            #[cfg(feature = "wasmtime")]
            EngineKind::Wasmtime => wasmtime_engine::compile(&bytes).map(drop),
            #[cfg(not(feature = "wasmtime"))]
            EngineKind::Wasmtime => Err(WasmError::EngineMissing("wasmtime")),
        }
    }

    /// What an instance holds at most, bytes: its memory limit and the module's code.
    pub fn memory_bytes(&self) -> u64 {
        self.max_memory_bytes + (self.module.len() as u64 / 4 * 3) * 4
    }
}

/// Names of the module's counters (`snic.counter_add`), as status and metrics show them.
const COUNTER_NAMES: [&str; abi::COUNTERS] =
    ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10", "c11", "c12", "c13", "c14", "c15"];
/// Names of the drop codes counted one by one, then the rest together.
const CODE_NAMES: [&str; abi::CODES + 1] = [
    "drop_code_0",
    "drop_code_1",
    "drop_code_2",
    "drop_code_3",
    "drop_code_4",
    "drop_code_5",
    "drop_code_6",
    "drop_code_7",
    "drop_code_8",
    "drop_code_9",
    "drop_code_10",
    "drop_code_11",
    "drop_code_12",
    "drop_code_13",
    "drop_code_14",
    "drop_code_15",
    "drop_code_other",
];

/// A `wasm` NT's counters: the module's own, its drops by code, and what the sandbox stopped.
#[derive(Debug, Default)]
pub struct WasmCounters {
    guest: Arc<[AtomicU64; abi::COUNTERS]>,
    codes: [AtomicU64; abi::CODES + 1],
    /// Packets dropped for using up their fuel.
    pub time_limit: AtomicU64,
    /// Packets dropped because the module trapped.
    pub traps: AtomicU64,
    /// Packets dropped for a verdict the ABI does not know.
    pub bad_verdict: AtomicU64,
    /// Packets dropped because the frame did not fit the module's buffer, or the module gave a
    /// length outside it.
    pub bad_frame: AtomicU64,
    /// 1 once the NT was stopped for exceeding its time bound too often, or because its
    /// instance did not start.
    pub stopped: AtomicU64,
    /// 1 if its instance did not start on the node ([`Unstarted`]).
    pub start_failed: AtomicU64,
}

impl WasmCounters {
    /// The module's counter `i`.
    pub fn guest(&self, i: usize) -> u64 {
        self.guest.get(i).map_or(0, |c| c.load(Relaxed))
    }
    /// Packets the module dropped with `code`.
    pub fn code(&self, code: u8) -> u64 {
        self.codes[(code as usize).min(abi::CODES)].load(Relaxed)
    }
}

impl NtCounters for WasmCounters {
    fn each(&self, f: &mut dyn FnMut(&'static str, u64, bool)) {
        for (c, n) in self.guest.iter().zip(COUNTER_NAMES) {
            let v = c.load(Relaxed);
            if v > 0 {
                f(n, v, false);
            }
        }
        for (c, n) in self.codes.iter().zip(CODE_NAMES) {
            let v = c.load(Relaxed);
            if v > 0 {
                f(n, v, false);
            }
        }
        f("time_limit", self.time_limit.load(Relaxed), true);
        f("traps", self.traps.load(Relaxed), true);
        f("bad_verdict", self.bad_verdict.load(Relaxed), true);
        f("bad_frame", self.bad_frame.load(Relaxed), true);
        f("stopped", self.stopped.load(Relaxed), true);
        f("start_failed", self.start_failed.load(Relaxed), true);
    }
}

/// How a packet's wall time is held to its bound whatever its fuel (docs/wasm.md, "Time"). An
/// interpreter cannot be interrupted, only run out of fuel; so a packet gets no more fuel than
/// the module spends in `bound_ns`, at the rate this instance is measured to spend it. The rate
/// starts at the engine's on plain code ([`engine::ps_per_fuel`]; host calls are charged what
/// they cost in it) and follows the instance's own: each window of about a millisecond of its
/// work gives a rate, and the least of the last four counts, once there are four — a window that
/// a preemption made slow does not shrink the budget, not even the first (one call preempted
/// for a millisecond closes a window by itself), a module that is slow window after window does.
#[derive(Debug)]
struct Pace {
    bound_ns: u64,
    /// The engine's rate on plain code, ps a unit of fuel (the estimate's floor).
    floor_ps: u64,
    /// The rate packets are given fuel at.
    rate_ps: u64,
    /// Wall time and fuel of the window being measured.
    win: (u64, u64),
    /// The last windows' rates.
    rates: [u64; PACE_WINDOWS],
    windows: usize,
}

/// Windows a [`Pace`] keeps.
const PACE_WINDOWS: usize = 4;
/// Work a window spans, ns.
const PACE_WINDOW_NS: u64 = 1_000_000;
/// Calls that spend less fuel are not measured: their time is mostly the call's own.
const PACE_MIN_FUEL: u64 = 4096;

impl Pace {
    fn new(bound_ns: u64, floor_ps: u64) -> Self {
        Pace { bound_ns, floor_ps, rate_ps: floor_ps, win: (0, 0), rates: [0; PACE_WINDOWS], windows: 0 }
    }

    /// The fuel a packet may spend: at most `max`, and what it spends in the bound at the rate
    /// measured (on a virtual clock, where a unit is a nanosecond, the bound itself).
    #[inline]
    fn cap(&self, max: u64, virtual_clock: bool) -> u64 {
        let rate = if virtual_clock { 1000 } else { self.rate_ps };
        (self.bound_ns.saturating_mul(1000) / rate.max(1)).clamp(1, max)
    }

    /// A call spent `fuel` in `ns` of wall time.
    #[inline]
    fn observe(&mut self, fuel: u64, ns: u64) {
        if fuel < PACE_MIN_FUEL {
            return;
        }
        self.win.0 += ns;
        self.win.1 += fuel;
        if self.win.0 >= PACE_WINDOW_NS {
            self.close_window();
        }
    }

    #[cold]
    fn close_window(&mut self) {
        let (ns, fuel) = std::mem::take(&mut self.win);
        self.rates[self.windows % PACE_WINDOWS] = ns.saturating_mul(1000) / fuel.max(1);
        self.windows += 1;
        // Before four windows are measured the unmeasured count as 0: the floor.
        let least = self.rates.iter().copied().min().unwrap_or(0);
        self.rate_ps = least.max(self.floor_ps);
    }
}

/// A `wasm` NT whose instance did not start on the node (its start trapped, ran out of time or
/// returned an error, though it started when it was applied): it drops every packet
/// (`wasm_stopped`) and says so in its counters (`stopped`, `start_failed`: alarms, logged),
/// until the NT is applied again.
#[derive(Debug)]
pub struct Unstarted {
    counters: Arc<WasmCounters>,
    /// Why it did not start.
    pub why: WasmError,
}

impl Unstarted {
    /// The stand-in for an instance that failed with `why`.
    pub fn new(why: WasmError) -> Self {
        let counters = WasmCounters::default();
        counters.stopped.store(1, Relaxed);
        counters.start_failed.store(1, Relaxed);
        Unstarted { counters: Arc::new(counters), why }
    }
}

impl Nt for Unstarted {
    fn kind(&self) -> &'static str {
        "wasm"
    }

    fn counters(&self) -> Option<Arc<dyn NtCounters>> {
        Some(self.counters.clone())
    }

    fn process(&mut self, _cx: &Ctx<'_>, _pkt: &mut Pkt<'_>) -> Verdict {
        Verdict::Drop(DropReason::WasmStopped)
    }
}

/// The `wasm` NT: one sandboxed instance of a tenant's module.
pub struct Wasm {
    sandbox: Box<dyn Guest>,
    /// The packet area's address and the frame capacity the module declared.
    at: usize,
    cap: usize,
    fuel: u64,
    pace: Pace,
    counters: Arc<WasmCounters>,
    max_overruns: u32,
    window_ns: u64,
    overruns: u32,
    stopped: bool,
}

impl std::fmt::Debug for Wasm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wasm").field("at", &self.at).field("cap", &self.cap).field("stopped", &self.stopped).finish()
    }
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Wasm {
    /// An instance of the module `c` configures, in its engine (compiled once per content,
    /// then cached).
    pub fn new(c: &WasmConfig) -> Result<Wasm, WasmError> {
        let bytes = c.bytes()?;
        match c.engine {
            EngineKind::Wasmi => Self::instantiate(&*engine::compile(&bytes)?, c),
            #[cfg(feature = "wasmtime")]
            EngineKind::Wasmtime => Self::instantiate_wasmtime(&*wasmtime_engine::compile(&bytes)?, c),
            #[cfg(not(feature = "wasmtime"))]
            EngineKind::Wasmtime => Err(WasmError::EngineMissing("wasmtime")),
        }
    }

    /// What an engine needs to start an instance of `c` counting into `counters`.
    fn setup(c: &WasmConfig, counters: &WasmCounters) -> Setup {
        Setup {
            config: c.config.as_bytes().into(),
            max_memory: c.max_memory_bytes as usize,
            counters: counters.guest.clone(),
            // Its start and snic_init get a hundred packets' worth, and no more than the engine
            // spends in `max_init_ms` on plain code.
            init_fuel: c
                .max_fuel_per_packet
                .saturating_mul(100)
                .min(c.max_init_ms.saturating_mul(1_000_000_000) / engine::ps_per_fuel())
                .clamp(1, bounds::MAX_FUEL),
        }
    }

    /// An instance of a module compiled by wasmi.
    pub fn instantiate(compiled: &engine::Compiled, c: &WasmConfig) -> Result<Wasm, WasmError> {
        let counters = Arc::new(WasmCounters::default());
        let (g, at) = engine::Sandbox::new(compiled, Self::setup(c, &counters))?;
        Self::start(Box::new(g), at, counters, c)
    }

    /// An instance of a module compiled by wasmtime.
    #[cfg(feature = "wasmtime")]
    pub fn instantiate_wasmtime(compiled: &wasmtime_engine::Compiled, c: &WasmConfig) -> Result<Wasm, WasmError> {
        let counters = Arc::new(WasmCounters::default());
        let (g, at) = wasmtime_engine::Sandbox::new(compiled, Self::setup(c, &counters))?;
        Self::start(Box::new(g), at, counters, c)
    }

    /// Checks the packet area an instance declared.
    fn start(mut sandbox: Box<dyn Guest>, at: u32, counters: Arc<WasmCounters>, c: &WasmConfig) -> Result<Wasm, WasmError> {
        let at = at as usize;
        let mem = sandbox.memory();
        let cap = mem
            .get(at..at + abi::HEADER_LEN)
            .map(|h| get32(h, abi::field::CAP))
            .ok_or_else(|| WasmError::PacketArea(format!("address {at} is outside the module's memory ({} bytes)", mem.len())))?;
        if cap < abi::MIN_CAP {
            return Err(WasmError::PacketArea(format!(
                "its capacity is {cap} bytes; it must hold at least {} (SNIC_PKT_CAP)",
                abi::MIN_CAP
            )));
        }
        if at.checked_add(abi::HEADER_LEN + cap as usize).is_none_or(|end| end > mem.len()) {
            return Err(WasmError::PacketArea(format!(
                "{} bytes at {at} do not fit in the module's memory ({} bytes)",
                abi::HEADER_LEN + cap as usize,
                mem.len()
            )));
        }
        Ok(Wasm {
            sandbox,
            at,
            cap: cap as usize,
            fuel: c.max_fuel_per_packet,
            pace: Pace::new(c.max_packet_us.saturating_mul(1000), engine::ps_per_fuel()),
            counters,
            max_overruns: c.max_overruns_per_s,
            window_ns: 0,
            overruns: 0,
            stopped: false,
        })
    }

    /// Its counters.
    pub fn wasm_counters(&self) -> &Arc<WasmCounters> {
        &self.counters
    }

    /// Fuel the last packet left unused (the bench's and tests' view of a packet's cost).
    pub fn fuel_left(&self) -> u64 {
        self.sandbox.fuel_left()
    }

    /// The fuel a packet is given now on the real clock: its `max_fuel_per_packet`, or less
    /// when the module would spend that much for longer than `max_packet_us`.
    pub fn packet_fuel(&self) -> u64 {
        self.pace.cap(self.fuel, false)
    }

    /// A packet over the time bound at `now_ns`: stops the NT if it happens too often.
    #[cold]
    fn overrun(&mut self, now_ns: u64) {
        bump(&self.counters.time_limit, 1);
        if now_ns.saturating_sub(self.window_ns) >= 1_000_000_000 {
            (self.window_ns, self.overruns) = (now_ns, 0);
        }
        self.overruns += 1;
        if self.overruns > self.max_overruns {
            self.stopped = true;
            self.counters.stopped.store(1, Relaxed);
        }
    }

    #[cold]
    fn bad_frame(&self) -> Verdict {
        bump(&self.counters.bad_frame, 1);
        Verdict::Drop(DropReason::WasmBadFrame)
    }
}

impl Nt for Wasm {
    fn kind(&self) -> &'static str {
        "wasm"
    }

    fn counters(&self) -> Option<Arc<dyn NtCounters>> {
        Some(self.counters.clone())
    }

    fn process(&mut self, cx: &Ctx<'_>, pkt: &mut Pkt<'_>) -> Verdict {
        if self.stopped {
            return Verdict::Drop(DropReason::WasmStopped);
        }
        let start = pkt.meta.off as usize + snic_wire::vxlan::HEADER_LEN;
        let len = (pkt.meta.len as usize).saturating_sub(snic_wire::vxlan::HEADER_LEN);
        let (at, cap) = (self.at, self.cap);
        let Some(frame) = pkt.buf.get(start..start + len).filter(|_| len <= cap) else { return self.bad_frame() };
        let now = cx.now.as_nanos();
        {
            // Checked at start: memory only grows, so the area stays inside it.
            let Some(area) = self.sandbox.memory().get_mut(at..at + abi::HEADER_LEN + cap) else { return self.bad_frame() };
            let (h, data) = area.split_at_mut(abi::HEADER_LEN);
            use abi::field as f;
            put32(h, f::LEN, len as u32);
            put32(h, f::TENANT, pkt.meta.tenant.0 as u32);
            put32(h, f::VNI, pkt.meta.vni);
            put32(h, f::DAG, pkt.at.dag);
            put32(h, f::STEP, pkt.at.step as u32);
            match &pkt.meta.inner {
                Some(l) => {
                    put16(h, f::L3_OFF, l.l3_off);
                    put16(h, f::L4_OFF, l.l4_off);
                    put16(h, f::L3_END, l.l3_end);
                    h[f::L3] = match l.l3 {
                        InnerL3::Arp => abi::L3_ARP,
                        InnerL3::Ipv4 => abi::L3_IPV4,
                        InnerL3::Ipv6 => abi::L3_IPV6,
                    };
                    h[f::PROTO] = l.key.proto;
                    put16(h, f::SRC_PORT, l.key.src_port);
                    put16(h, f::DST_PORT, l.key.dst_port);
                    h[f::L4_FLAGS] = l.l4_flags;
                }
                None => {
                    for o in [f::L3_OFF, f::L4_OFF, f::L3_END] {
                        put16(h, o, abi::NONE);
                    }
                    h[f::L3] = abi::L3_NONE;
                    h[f::PROTO] = 0;
                    put16(h, f::SRC_PORT, 0);
                    put16(h, f::DST_PORT, 0);
                    h[f::L4_FLAGS] = 0;
                }
            }
            h[f::NOW_NS..f::NOW_NS + 8].copy_from_slice(&now.to_le_bytes());
            data[..len].copy_from_slice(frame);
        }
        let virtual_clock = cx.work.is_virtual();
        let fuel = self.pace.cap(self.fuel, virtual_clock);
        let t0 = if virtual_clock { 0 } else { cx.work.now_ns() };
        let call = self.sandbox.process(len as u32, now, fuel);
        let used = fuel - self.sandbox.fuel_left().min(fuel);
        if virtual_clock {
            // On a virtual clock the module's work is modelled: a nanosecond a unit of fuel.
            cx.work.spend(used);
        } else {
            self.pace.observe(used, cx.work.now_ns().saturating_sub(t0));
        }
        let r = match call {
            Ok(r) => r,
            Err(Fault::OutOfFuel) => {
                self.overrun(now);
                return Verdict::Drop(DropReason::WasmTimeLimit);
            }
            Err(Fault::Trap(_)) => {
                bump(&self.counters.traps, 1);
                return Verdict::Drop(DropReason::WasmTrap);
            }
        };
        let changed = r & abi::CHANGED != 0;
        let v = r & !abi::CHANGED;
        let verdict = match (v & 0xff, v >> 8) {
            (abi::FORWARD, 0) => Verdict::Continue,
            (abi::SKIP, 0) => Verdict::Skip,
            (abi::DROP, code) if (0..=0xff).contains(&code) => {
                bump(&self.counters.codes[(code as usize).min(abi::CODES)], 1);
                return Verdict::Drop(DropReason::WasmDrop);
            }
            _ => {
                bump(&self.counters.bad_verdict, 1);
                return Verdict::Drop(DropReason::WasmBadVerdict);
            }
        };
        if changed {
            let area = &self.sandbox.memory()[at..at + abi::HEADER_LEN + cap];
            let n = get32(area, abi::field::LEN) as usize;
            if n > cap || n < 14 {
                return self.bad_frame();
            }
            let Some(dst) = pkt.buf.get_mut(start..start + n) else { return self.bad_frame() };
            dst.copy_from_slice(&area[abi::HEADER_LEN..abi::HEADER_LEN + n]);
            pkt.meta.len = (snic_wire::vxlan::HEADER_LEN + n) as u16;
            pkt.meta.inner = snic_wire::layout::parse_inner(dst).ok();
        }
        verdict
    }
}

#[cfg(test)]
mod tests;
