//! Compiled modules kept by content (SHA-256 of the bytes), least recently used out first: a
//! relaunch, a second instance or a context switch instantiates again but does not compile
//! again. One cache per engine.

use super::WasmError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Compiled modules kept per engine.
const CACHED: usize = 64;

/// The cache key of a module's bytes.
pub type Key = [u8; 32];

/// `bytes`' key.
pub fn key(bytes: &[u8]) -> Key {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// One engine's compiled modules.
pub struct Cache<T> {
    inner: Mutex<Inner<T>>,
}

struct Inner<T> {
    modules: HashMap<Key, (Arc<T>, u64)>,
    tick: u64,
}

impl<T> Cache<T> {
    /// An empty cache.
    pub fn new() -> Self {
        Cache { inner: Mutex::new(Inner { modules: HashMap::new(), tick: 0 }) }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner<T>>, WasmError> {
        self.inner.lock().map_err(|_| WasmError::Internal("module cache poisoned"))
    }

    /// The module compiled from the bytes of `key`, if kept.
    pub fn get(&self, key: &Key) -> Result<Option<Arc<T>>, WasmError> {
        let mut c = self.lock()?;
        c.tick += 1;
        let tick = c.tick;
        Ok(c.modules.get_mut(key).map(|(m, used)| {
            *used = tick;
            m.clone()
        }))
    }

    /// Forgets the module of `key`.
    pub fn remove(&self, key: &Key) -> Result<(), WasmError> {
        self.lock()?.modules.remove(key);
        Ok(())
    }

    /// Keeps a module just compiled, making room by the least recently used.
    pub fn insert(&self, key: Key, m: Arc<T>) -> Result<(), WasmError> {
        let mut c = self.lock()?;
        if c.modules.len() >= CACHED {
            if let Some(old) = c.modules.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| *k) {
                c.modules.remove(&old);
            }
        }
        let tick = c.tick;
        c.modules.insert(key, (m, tick));
        Ok(())
    }
}
