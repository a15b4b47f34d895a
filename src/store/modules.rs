//! Loaded modules kept in memory, least recently used first out, so a warm call skips loading
//! its artifact. Shared by every call of a process; it does not load or compile anything itself.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use hako_engine_api::Module;
use lru::LruCache;

use super::ArtifactKey;

/// An in-memory cache of loaded modules.
pub struct ModuleCache {
    modules: Mutex<LruCache<ArtifactKey, Arc<dyn Module>>>,
}

impl ModuleCache {
    /// A cache holding at most `capacity` modules (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            modules: Mutex::new(LruCache::new(capacity)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<ArtifactKey, Arc<dyn Module>>> {
        self.modules
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The module for `key`, if it is loaded.
    pub fn get(&self, key: &ArtifactKey) -> Option<Arc<dyn Module>> {
        self.lock().get(key).cloned()
    }

    /// Keeps `module` for `key`, dropping the least recently used module when full.
    pub fn insert(&self, key: ArtifactKey, module: Arc<dyn Module>) {
        self.lock().put(key, module);
    }

    /// How many modules are loaded.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
