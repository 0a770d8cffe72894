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

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let mut c = wasmi::Config::default();
        c.consume_fuel(true);
        Engine::new(&c)
    })
}

/// A module compiled and checked against the ABI.
pub struct Compiled {
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
    let module = Module::new(engine(), bytes).map_err(|e| WasmError::Invalid(e.to_string()))?;
    check(&module)?;
    let compiled = Arc::new(Compiled { module });
    cache().insert(key, compiled.clone())?;
    Ok(compiled)
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
        let mut store = Store::new(engine(), Host { limits, now_ns: 0, config, counters });
        store.limiter(|h| &mut h.limits);
        let mut linker = Linker::<Host>::new(engine());
        let link = |_| WasmError::Internal("linking the ABI");
        linker.func_wrap("snic", "now_ns", |c: Caller<'_, Host>| c.data().now_ns as i64).map_err(link)?;
        linker
            .func_wrap("snic", "counter_add", |c: Caller<'_, Host>, idx: i32, n: i64| -> Result<(), wasmi::Error> {
                let ctr = c.data().counters.get(idx as u32 as usize).ok_or_else(|| wasmi::Error::new("counter_add: no such counter"))?;
                ctr.store(ctr.load(Relaxed).wrapping_add(n as u64), Relaxed);
                Ok(())
            })
            .map_err(link)?;
        linker.func_wrap("snic", "config_len", |c: Caller<'_, Host>| c.data().config.len() as i32).map_err(link)?;
        linker
            .func_wrap("snic", "config_read", |mut c: Caller<'_, Host>, ptr: i32, len: i32| -> Result<i32, wasmi::Error> {
                let cfg = c.data().config.clone();
                let n = (len.max(0) as usize).min(cfg.len());
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
