//! Loaded modules kept in memory, least recently used first out, so a warm call skips loading
//! its artifact. Shared by every call of a process; it does not load or compile anything itself.
//!
//! The cache is bounded by what its modules weigh, not by how many there are: a node serves
//! many packages, and a count small enough for Go-sized modules (a 9.5 MB artifact each) makes
//! greet-sized ones (0.3 MB) load an artifact at most calls once a few hundred packages are
//! called in turn. A module weighs its artifact file's size: what a load maps or reads, and so
//! an upper bound of what keeping it holds (mapped code is the page cache's, which the kernel
//! may reclaim). A count bound stays beside it, so that the cache's own bookkeeping is bounded
//! too.

use std::sync::{Arc, Mutex};

use hako_engine_api::Module;
use lru::LruCache;

use super::ArtifactKey;

/// The default bound on what the modules kept weigh together: 512 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 512 << 20;

/// The most modules kept, whatever they weigh.
pub const MAX_CACHED_MODULES: usize = 4096;

/// An in-memory cache of loaded modules.
pub struct ModuleCache {
    bytes: u64,
    state: Mutex<Cached>,
}

struct Cached {
    modules: LruCache<ArtifactKey, (Arc<dyn Module>, u64)>,
    /// What the modules kept weigh together.
    weight: u64,
}

impl ModuleCache {
    /// A cache of modules weighing at most `bytes` together (at least one module is kept,
    /// whatever it weighs), and at most [`MAX_CACHED_MODULES`] of them.
    pub fn new(bytes: u64) -> Self {
        Self {
            bytes,
            state: Mutex::new(Cached {
                modules: LruCache::unbounded(),
                weight: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The module for `key`, if it is loaded.
    pub fn get(&self, key: &ArtifactKey) -> Option<Arc<dyn Module>> {
        self.lock()
            .modules
            .get(key)
            .map(|(module, _)| Arc::clone(module))
    }

    /// Keeps `module`, weighing `weight` bytes, for `key`; the least recently used modules go
    /// while the rest weigh more than the bound, or are more than [`MAX_CACHED_MODULES`].
    pub fn insert(&self, key: ArtifactKey, module: Arc<dyn Module>, weight: u64) {
        let mut cached = self.lock();
        if let Some((_, replaced)) = cached.modules.put(key, (module, weight)) {
            cached.weight -= replaced;
        }
        cached.weight += weight;
        while cached.modules.len() > 1
            && (cached.weight > self.bytes || cached.modules.len() > MAX_CACHED_MODULES)
        {
            match cached.modules.pop_lru() {
                Some((_, (_, gone))) => cached.weight -= gone,
                None => break,
            }
        }
    }

    /// How many modules are loaded.
    pub fn len(&self) -> usize {
        self.lock().modules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the loaded modules weigh together, in bytes.
    pub fn weight(&self) -> u64 {
        self.lock().weight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hako_engine_api::{EngineError, Prepared, RunLimits, Serialized};

    struct Nothing;

    impl Module for Nothing {
        fn serialize(&self) -> Result<Serialized, EngineError> {
            unreachable!("never serialized")
        }

        fn prepare(&self, _: RunLimits) -> Box<dyn Prepared> {
            unreachable!("never run")
        }
    }

    fn key(n: u16) -> ArtifactKey {
        crate::store::artifact::test_key(&format!("{n:064x}"))
    }

    #[test]
    fn the_least_recently_used_go_while_the_rest_weigh_more_than_the_bound() {
        let cache = ModuleCache::new(100);
        cache.insert(key(1), Arc::new(Nothing), 40);
        cache.insert(key(2), Arc::new(Nothing), 40);
        assert!(cache.get(&key(1)).is_some(), "1 is now the more recent");
        cache.insert(key(3), Arc::new(Nothing), 40);
        assert!(
            cache.get(&key(2)).is_none(),
            "2 went: 120 bytes were more than 100"
        );
        assert!(cache.get(&key(1)).is_some() && cache.get(&key(3)).is_some());
        assert_eq!(cache.weight(), 80);
        // Kept again under its key, a module's weight replaces what it weighed.
        cache.insert(key(3), Arc::new(Nothing), 10);
        assert_eq!((cache.len(), cache.weight()), (2, 50));
        // One module heavier than the bound is kept alone.
        cache.insert(key(4), Arc::new(Nothing), 500);
        assert_eq!((cache.len(), cache.weight()), (1, 500));
        assert!(cache.get(&key(4)).is_some());
    }

    #[test]
    fn at_most_max_cached_modules_are_kept_however_light() {
        let cache = ModuleCache::new(u64::MAX);
        for n in 0..=u16::try_from(MAX_CACHED_MODULES).unwrap() {
            cache.insert(key(n), Arc::new(Nothing), 1);
        }
        assert_eq!(cache.len(), MAX_CACHED_MODULES);
    }
}
