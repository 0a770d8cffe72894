//! The wasmtime engine (cargo feature `wasmtime`): the same modules and ABI as [`super::engine`],
//! compiled to machine code by Cranelift. A module is checked against the ABI by the wasmi
//! engine first (so both accept exactly the same modules), then compiled here, once per content.

use super::abi;
use super::cache::{self, Cache};
use super::engine::Fault;
use super::WasmError;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use wasmtime::{Caller, Engine, Extern, Linker, Memory, Module, Store, StoreLimits, StoreLimitsBuilder, Trap, TypedFunc};

/// The engine's name, as the bench and status report it.
pub const NAME: &str = "wasmtime";

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let mut c = wasmtime::Config::new();
        c.consume_fuel(true);
        Engine::new(&c).expect("a wasmtime engine with fuel")
    })
}

/// A module compiled to machine code.
pub struct Compiled {
    module: Module,
}

fn cache() -> &'static Cache<Compiled> {
    static C: OnceLock<Cache<Compiled>> = OnceLock::new();
    C.get_or_init(Cache::new)
}

/// The module in `bytes`, checked against the ABI and compiled (or found compiled).
pub fn compile(bytes: &[u8]) -> Result<Arc<Compiled>, WasmError> {
    let key = cache::key(bytes);
    if let Some(m) = cache().get(&key)? {
        return Ok(m);
    }
    super::engine::compile(bytes)?;
    let module = Module::new(engine(), bytes).map_err(|e| WasmError::Invalid(format!("{e:#}")))?;
    let compiled = Arc::new(Compiled { module });
    cache().insert(key, compiled.clone())?;
    Ok(compiled)
}

struct Host {
    limits: StoreLimits,
    now_ns: u64,
    config: Arc<[u8]>,
    counters: Arc<[AtomicU64; abi::COUNTERS]>,
}

/// As the wasmi engine's `charge`: takes `fuel` for a host call; false (and no fuel left) if it
/// had less.
fn charge(c: &mut Caller<'_, Host>, fuel: u64) -> wasmtime::Result<bool> {
    let left = c.get_fuel()?;
    c.set_fuel(left.saturating_sub(fuel))?;
    Ok(left >= fuel)
}

fn fault(e: wasmtime::Error) -> Fault {
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => Fault::OutOfFuel,
        _ => Fault::Trap(format!("{e:#}")),
    }
}

/// One instance, with its own store and memory.
pub struct Sandbox {
    store: Store<Host>,
    memory: Memory,
    process: TypedFunc<i32, i32>,
}

impl Sandbox {
    /// As [`super::engine::Sandbox::new`].
    pub fn new(c: &Compiled, setup: super::Setup) -> Result<(Sandbox, u32), WasmError> {
        let super::Setup { config, max_memory, counters, init_fuel } = setup;
        let limits = StoreLimitsBuilder::new().memory_size(max_memory).memories(1).tables(4).table_elements(65_536).instances(1).build();
        let mut store = Store::new(engine(), Host { limits, now_ns: 0, config, counters });
        store.limiter(|h| &mut h.limits);
        let mut linker = Linker::<Host>::new(engine());
        let link = |_| WasmError::Internal("linking the ABI");
        use super::engine::host_fuel;
        linker
            .func_wrap("snic", "now_ns", |mut c: Caller<'_, Host>| -> wasmtime::Result<i64> {
                let paid = charge(&mut c, host_fuel::CALL)?;
                Ok(if paid { c.data().now_ns as i64 } else { 0 })
            })
            .map_err(link)?;
        linker
            .func_wrap("snic", "counter_add", |mut c: Caller<'_, Host>, idx: i32, n: i64| -> wasmtime::Result<()> {
                if !charge(&mut c, host_fuel::CALL)? {
                    return Ok(());
                }
                let ctr = c.data().counters.get(idx as u32 as usize).ok_or_else(|| wasmtime::Error::msg("counter_add: no such counter"))?;
                ctr.store(ctr.load(Relaxed).wrapping_add(n as u64), Relaxed);
                Ok(())
            })
            .map_err(link)?;
        linker
            .func_wrap("snic", "config_len", |mut c: Caller<'_, Host>| -> wasmtime::Result<i32> {
                let paid = charge(&mut c, host_fuel::CALL)?;
                Ok(if paid { c.data().config.len() as i32 } else { 0 })
            })
            .map_err(link)?;
        linker
            .func_wrap("snic", "config_read", |mut c: Caller<'_, Host>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
                let cfg = c.data().config.clone();
                let n = (len.max(0) as usize).min(cfg.len());
                if !charge(&mut c, host_fuel::READ + n as u64 / host_fuel::BYTES_PER_FUEL)? {
                    return Ok(0);
                }
                let mem = c.get_export("memory").and_then(Extern::into_memory).ok_or_else(|| wasmtime::Error::msg("no memory"))?;
                let at = ptr as u32 as usize;
                let dst = mem
                    .data_mut(&mut c)
                    .get_mut(at..at + n)
                    .ok_or_else(|| wasmtime::Error::msg("config_read: range outside the module's memory"))?;
                dst.copy_from_slice(&cfg[..n]);
                Ok(n as i32)
            })
            .map_err(link)?;
        store.set_fuel(init_fuel).map_err(|_| WasmError::Internal("fuel"))?;
        let instance = linker.instantiate(&mut store, &c.module).map_err(|e| match fault(e) {
            Fault::OutOfFuel => WasmError::Init("its start function did not finish within its fuel".into()),
            Fault::Trap(t) => WasmError::Init(format!("instantiating: {t}")),
        })?;
        let memory = instance.get_memory(&mut store, "memory").ok_or(WasmError::Internal("checked: memory"))?;
        let process =
            instance.get_typed_func::<i32, i32>(&mut store, "snic_process").map_err(|_| WasmError::Internal("checked: process"))?;
        if let Ok(init) = instance.get_typed_func::<(), i32>(&mut store, "snic_init") {
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
        let packet = instance.get_typed_func::<(), i32>(&mut store, "snic_packet").map_err(|_| WasmError::Internal("checked: packet"))?;
        store.set_fuel(init_fuel).map_err(|_| WasmError::Internal("fuel"))?;
        let at = packet.call(&mut store, ()).map_err(|e| WasmError::Init(format!("snic_packet failed: {e:#}")))? as u32;
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
        self.store.set_fuel(fuel).map_err(|e| Fault::Trap(format!("{e:#}")))?;
        self.process.call(&mut self.store, len as i32).map_err(fault)
    }

    fn fuel_left(&self) -> u64 {
        self.store.get_fuel().unwrap_or(0)
    }
}
