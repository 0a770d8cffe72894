//! The wasmi engine behind the `wasm` NT: compiling (once per module, cached by content),
//! checking a module against the ABI, and one sandboxed instance per NT instance.
//!
//! Everything engine-specific lives here, behind [`compile`] and [`Sandbox`], so that another
//! engine can run the same modules under the same ABI.

use super::abi;
use super::cache::{self, Cache};
use super::WasmError;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use wasmi::{
    Caller, Engine, Extern, ExternType, Linker, Memory, Module, Store, StoreLimits, StoreLimitsBuilder, TrapCode, TypedFunc, ValType,
};

/// The engine's name, as the bench and status report it.
pub const NAME: &str = "wasmi";

/// An engine of its own for each module: a wasmi engine keeps the code of every module compiled
/// in it for as long as it lives, so modules sharing one engine would never give their memory
/// back — a module refused, replaced or evicted from the cache would stay in the daemon (a tenant
/// applying distinct modules grew it without bound). With its own engine, a module's code goes
/// when the last of its instances does.
fn new_engine() -> Engine {
    let mut c = wasmi::Config::default();
    c.consume_fuel(true);
    Engine::new(&c)
}

/// A module compiled and checked against the ABI, in its own engine.
pub struct Compiled {
    engine: Engine,
    module: Module,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled").finish_non_exhaustive()
    }
}

fn cache() -> &'static Cache<Compiled> {
    static C: OnceLock<Cache<Compiled>> = OnceLock::new();
    C.get_or_init(Cache::new)
}

/// The module in `bytes`, compiled and checked against the ABI — from the cache when the same
/// bytes were compiled before.
pub fn compile(bytes: &[u8]) -> Result<Arc<Compiled>, WasmError> {
    let key = cache::key(bytes);
    if let Some(m) = cache().get(&key)? {
        return Ok(m);
    }
    let engine = new_engine();
    let module = Module::new(&engine, bytes).map_err(|e| WasmError::Invalid(e.to_string()))?;
    check(&module)?;
    let compiled = Arc::new(Compiled { engine, module });
    cache().insert(key, compiled.clone())?;
    Ok(compiled)
}

/// Drops the module compiled from `bytes` from the cache (a module refused when it started):
/// nothing of it stays once its last instance is gone.
pub fn forget(bytes: &[u8]) {
    let _ = cache().remove(&cache::key(bytes));
}

fn types(s: &str) -> Vec<ValType> {
    s.chars().map(|c| if c == 'i' { ValType::I32 } else { ValType::I64 }).collect()
}

fn sig(params: &[ValType], results: &[ValType]) -> String {
    let t = |v: &[ValType]| v.iter().map(|t| format!("{t:?}").to_lowercase()).collect::<Vec<_>>().join(", ");
    format!("({}) -> ({})", t(params), t(results))
}

/// Imports only from the ABI, with its types; the exports the ABI needs, with theirs.
fn check(m: &Module) -> Result<(), WasmError> {
    for i in m.imports() {
        let known = abi::IMPORTS.iter().find(|(n, _, _)| i.module() == "snic" && *n == i.name());
        let Some((name, p, r)) = known else {
            return Err(WasmError::Import(format!(
                "{}.{} is not part of the ABI (imports: snic.now_ns, snic.counter_add, snic.config_len, snic.config_read)",
                i.module(),
                i.name()
            )));
        };
        match i.ty() {
            ExternType::Func(f) if f.params() == types(p) && f.results() == types(r) => {}
            ExternType::Func(f) => {
                return Err(WasmError::Import(format!(
                    "snic.{name} has type {}, the ABI's is {}",
                    sig(f.params(), f.results()),
                    sig(&types(p), &types(r))
                )))
            }
            _ => return Err(WasmError::Import(format!("snic.{name} must be imported as a function"))),
        }
    }
    let mut seen = (false, false, false);
    for e in m.exports() {
        let want = match e.name() {
            "memory" => {
                seen.0 = matches!(e.ty(), ExternType::Memory(_));
                if !seen.0 {
                    return Err(WasmError::Export("`memory` must be a memory".into()));
                }
                continue;
            }
            "snic_process" => {
                seen.1 = true;
                ("i", "i")
            }
            "snic_packet" => {
                seen.2 = true;
                ("", "i")
            }
            "snic_init" => ("", "i"),
            _ => continue,
        };
        match e.ty() {
            ExternType::Func(f) if f.params() == types(want.0) && f.results() == types(want.1) => {}
            ExternType::Func(f) => {
                return Err(WasmError::Export(format!(
                    "`{}` has type {}, the ABI's is {}",
                    e.name(),
                    sig(f.params(), f.results()),
                    sig(&types(want.0), &types(want.1))
                )))
            }
            _ => return Err(WasmError::Export(format!("`{}` must be a function", e.name()))),
        }
    }
    for (ok, name) in [(seen.0, "memory"), (seen.1, "snic_process"), (seen.2, "snic_packet")] {
        if !ok {
            return Err(WasmError::Export(format!("the module does not export `{name}`")));
        }
    }
    Ok(())
}

/// Fuel each host call costs besides the call itself, and per byte it copies: a host call runs
/// outside the interpreter's metering, so it is charged what its wall time is worth in fuel
/// (measured against the engine's rate on plain code, [`ps_per_fuel`]; docs/wasm.md, "Time").
pub mod host_fuel {
    /// `now_ns`, `counter_add`, `config_len`.
    pub const CALL: u64 = 32;
    /// `config_read`, before its bytes.
    pub const READ: u64 = 128;
    /// Bytes `config_read` copies per unit of fuel (measured: a 64 KiB read took as long as
    /// about 30,000 units of plain code).
    pub const BYTES_PER_FUEL: u64 = 2;
}

/// Takes `fuel` from the call's remaining fuel: true if it had that much. If not, it has none
/// left: the call returns without doing its work, and the guest runs out of fuel at its next
/// instruction, as it would have inside the interpreter.
fn charge(c: &mut Caller<'_, Host>, fuel: u64) -> Result<bool, wasmi::Error> {
    let left = c.get_fuel()?;
    c.set_fuel(left.saturating_sub(fuel))?;
    Ok(left >= fuel)
}

/// The loop [`ps_per_fuel`] times, in the binary format (so that the node needs no WebAssembly
/// text parser; a test checks it against its text, `SPIN_WAT` in the tests):
/// `spin(n)`: for i in (0..n).step_by(4), `acc += mem[i & 0xfffc]; mem[i & 0xfffc] = acc`.
#[rustfmt::skip]
pub(super) const SPIN: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
    0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f, // types: (i32) -> i32
    0x03, 0x02, 0x01, 0x00,                         // functions: one, of type 0
    0x05, 0x03, 0x01, 0x00, 0x01,                   // memories: one, at least a page
    0x07, 0x08, 0x01, 0x04, b's', b'p', b'i', b'n', 0x00, 0x00, // export "spin": function 0
    0x0a, 0x34, 0x01, 0x32, 0x01, 0x02, 0x7f,       // code: one body, locals i (1), acc (2)
    0x03, 0x40,                                     // loop
    0x20, 0x02, 0x20, 0x01, 0x41, 0xfc, 0xff, 0x03, 0x71, 0x28, 0x02, 0x00, 0x6a, 0x21, 0x02, // acc += load(i & 0xfffc)
    0x20, 0x01, 0x41, 0xfc, 0xff, 0x03, 0x71, 0x20, 0x02, 0x36, 0x02, 0x00, // store(i & 0xfffc, acc)
    0x20, 0x01, 0x41, 0x04, 0x6a, 0x21, 0x01,       // i += 4
    0x20, 0x01, 0x20, 0x00, 0x49, 0x0d, 0x00,       // br_if 0 (i < n)
    0x0b, 0x20, 0x02, 0x0b,                         // end loop; acc; end
];

/// Picoseconds the engine takes per unit of fuel on plain code (loads, stores, arithmetic and
/// branches), measured once per process: the least of three runs of a loop that spends 2M
/// units (≈ a millisecond or two). What a packet's wall-time bound is turned into fuel with.
pub fn ps_per_fuel() -> u64 {
    static RATE: OnceLock<u64> = OnceLock::new();
    *RATE.get_or_init(|| {
        const FUEL: u64 = 2_000_000;
        let measure = || -> Option<u64> {
            let engine = new_engine();
            let module = Module::new(&engine, SPIN).ok()?;
            let mut store = Store::new(&engine, ());
            let inst = Linker::<()>::new(&engine).instantiate_and_start(&mut store, &module).ok()?;
            let spin = inst.get_typed_func::<i32, i32>(&store, "spin").ok()?;
            // (Once to translate the function; then timed.)
            store.set_fuel(1000).ok()?;
            let _ = spin.call(&mut store, 16);
            store.set_fuel(FUEL).ok()?;
            let t0 = std::time::Instant::now();
            let _ = spin.call(&mut store, i32::MAX);
            let ns = t0.elapsed().as_nanos() as u64;
            let used = FUEL - store.get_fuel().ok()?;
            Some(ns.saturating_mul(1000) / used.max(1))
        };
        // 1 ns a unit if it cannot be measured (never seen: the loop is fixed).
        (0..3).filter_map(|_| measure()).min().unwrap_or(1000).max(1)
    })
}

/// What one instance's host functions see.
struct Host {
    limits: StoreLimits,
    now_ns: u64,
    config: Arc<[u8]>,
    counters: Arc<[AtomicU64; abi::COUNTERS]>,
}

/// Why a call did not return a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// It used all the fuel it was given (the time bound).
    OutOfFuel,
    /// It trapped (out-of-bounds access, stack exhausted, unreachable, a host call refused...).
    Trap(String),
}

/// One instance of a module: its own store, memory and tables, nothing shared with another.
pub struct Sandbox {
    store: Store<Host>,
    memory: Memory,
    process: TypedFunc<i32, i32>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").finish_non_exhaustive()
    }
}

fn fault(e: wasmi::Error) -> Fault {
    match e.as_trap_code() {
        Some(TrapCode::OutOfFuel) => Fault::OutOfFuel,
        _ => Fault::Trap(e.to_string()),
    }
}

impl Sandbox {
    /// Instantiates `c` with at most `max_memory` bytes of linear memory, runs its `snic_init`
    /// (on at most `init_fuel`), and returns the instance with the address of its packet area.
    pub fn new(c: &Compiled, setup: super::Setup) -> Result<(Sandbox, u32), WasmError> {
        let super::Setup { config, max_memory, counters, init_fuel } = setup;
        let limits = StoreLimitsBuilder::new().memory_size(max_memory).memories(1).tables(4).table_elements(65_536).instances(1).build();
        let mut store = Store::new(&c.engine, Host { limits, now_ns: 0, config, counters });
        store.limiter(|h| &mut h.limits);
        let mut linker = Linker::<Host>::new(&c.engine);
        let link = |_| WasmError::Internal("linking the ABI");
        linker
            .func_wrap("snic", "now_ns", |mut c: Caller<'_, Host>| -> Result<i64, wasmi::Error> {
                let paid = charge(&mut c, host_fuel::CALL)?;
                Ok(if paid { c.data().now_ns as i64 } else { 0 })
            })
            .map_err(link)?;
        linker
            .func_wrap("snic", "counter_add", |mut c: Caller<'_, Host>, idx: i32, n: i64| -> Result<(), wasmi::Error> {
                if !charge(&mut c, host_fuel::CALL)? {
                    return Ok(());
                }
                let ctr = c.data().counters.get(idx as u32 as usize).ok_or_else(|| wasmi::Error::new("counter_add: no such counter"))?;
                ctr.store(ctr.load(Relaxed).wrapping_add(n as u64), Relaxed);
                Ok(())
            })
            .map_err(link)?;
        linker
            .func_wrap("snic", "config_len", |mut c: Caller<'_, Host>| -> Result<i32, wasmi::Error> {
                let paid = charge(&mut c, host_fuel::CALL)?;
                Ok(if paid { c.data().config.len() as i32 } else { 0 })
            })
            .map_err(link)?;
        linker
            .func_wrap("snic", "config_read", |mut c: Caller<'_, Host>, ptr: i32, len: i32| -> Result<i32, wasmi::Error> {
                let cfg = c.data().config.clone();
                let n = (len.max(0) as usize).min(cfg.len());
                if !charge(&mut c, host_fuel::READ + n as u64 / host_fuel::BYTES_PER_FUEL)? {
                    return Ok(0);
                }
                let mem = c.get_export("memory").and_then(Extern::into_memory).ok_or_else(|| wasmi::Error::new("no memory"))?;
                let at = ptr as u32 as usize;
                let dst = mem
                    .data_mut(&mut c)
                    .get_mut(at..at + n)
                    .ok_or_else(|| wasmi::Error::new("config_read: range outside the module's memory"))?;
                dst.copy_from_slice(&cfg[..n]);
                Ok(n as i32)
            })
            .map_err(link)?;
        store.set_fuel(init_fuel).map_err(|_| WasmError::Internal("fuel"))?;
        let instance = linker.instantiate_and_start(&mut store, &c.module).map_err(|e| match fault(e) {
            Fault::OutOfFuel => WasmError::Init("its start function did not finish within its fuel".into()),
            Fault::Trap(t) => WasmError::Init(format!("instantiating: {t}")),
        })?;
        let memory = instance.get_memory(&store, "memory").ok_or(WasmError::Internal("checked: memory"))?;
        let process = instance.get_typed_func::<i32, i32>(&store, "snic_process").map_err(|_| WasmError::Internal("checked: process"))?;
        if let Ok(init) = instance.get_typed_func::<(), i32>(&store, "snic_init") {
            match init.call(&mut store, ()) {
                Ok(0) => {}
                Ok(code) => return Err(WasmError::Init(format!("snic_init returned {code}"))),
                Err(e) => {
                    return Err(WasmError::Init(match fault(e) {
                        Fault::OutOfFuel => "snic_init did not finish within its fuel".into(),
                        Fault::Trap(t) => format!("snic_init trapped: {t}"),
                    }))
                }
            }
        }
        let packet = instance.get_typed_func::<(), i32>(&store, "snic_packet").map_err(|_| WasmError::Internal("checked: packet"))?;
        store.set_fuel(init_fuel).map_err(|_| WasmError::Internal("fuel"))?;
        let at = packet.call(&mut store, ()).map_err(|e| WasmError::Init(format!("snic_packet failed: {e}")))? as u32;
        Ok((Sandbox { store, memory, process }, at))
    }
}

impl super::Guest for Sandbox {
    #[inline]
    fn memory(&mut self) -> &mut [u8] {
        self.memory.data_mut(&mut self.store)
    }

    #[inline]
    fn process(&mut self, len: u32, now_ns: u64, fuel: u64) -> Result<i32, Fault> {
        self.store.data_mut().now_ns = now_ns;
        self.store.set_fuel(fuel).map_err(|e| Fault::Trap(e.to_string()))?;
        self.process.call(&mut self.store, len as i32).map_err(fault)
    }

    fn fuel_left(&self) -> u64 {
        self.store.get_fuel().unwrap_or(0)
    }
}
