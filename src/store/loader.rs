//! Getting a runnable module for a call: from the in-memory cache, else from the artifact
//! cache on disk, else by compiling (and then keeping the artifact). It says which of these
//! happened and why, so a call on a package that was never uploaded reports that it compiled.
//! It does not run anything.

use std::sync::Arc;
use std::time::Instant;

use hako_engine_api::Module;

use super::{ArtifactError, ArtifactKey, ModuleCache, Store};
use crate::engines::{self, EngineConfig};

/// Where a module came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Already loaded in this process.
    Memory,
    /// Loaded from a cached artifact.
    Artifact,
    /// Compiled now (no cached artifact); the artifact was then stored.
    Compiled,
}

/// A module ready to run, and how it was made ready.
pub struct Loaded {
    pub module: Arc<dyn Module>,
    pub source: Source,
    /// The engine and compiler that made the code (after any SIMD fallback).
    pub config: EngineConfig,
    /// Microseconds spent loading or compiling.
    pub load_us: u64,
    /// Things the operator should be told (a fallback, a refused artifact).
    pub notes: Vec<String>,
}

/// What to load.
pub struct ModuleSpec<'a> {
    pub wasm: &'a [u8],
    pub module_sha256: &'a str,
    pub uses_simd: bool,
    pub config: EngineConfig,
}

impl Store {
    /// A runnable module for `spec` on this machine.
    pub fn load_module(
        &self,
        spec: &ModuleSpec<'_>,
        memory: Option<&ModuleCache>,
    ) -> Result<Loaded, ArtifactError> {
        let started = Instant::now();
        let mut notes = Vec::new();
        let (config, fallback) = engines::effective_config(spec.config, spec.uses_simd);
        notes.extend(fallback);
        let engine = engines::engine(config, None)?;
        let key = ArtifactKey::new(spec.module_sha256, engine.identity());
        if let Some(module) = memory.and_then(|cache| cache.get(&key)) {
            return Ok(Loaded {
                module,
                source: Source::Memory,
                config,
                load_us: 0,
                notes,
            });
        }
        let loaded = match self.artifacts().load(&key, engine.as_ref()) {
            Ok(found) => found,
            Err(err @ ArtifactError::Refused { .. }) => {
                notes.push(format!("{err}; compiling again"));
                None
            }
            Err(err) => return Err(err),
        };
        let (module, source) = match loaded {
            Some(module) => (module, Source::Artifact),
            None => {
                let module = engine.compile(spec.wasm)?;
                self.artifacts().write(&key, module.as_ref())?;
                notes.push(format!(
                    "no cached artifact for {config}: compiled the module now"
                ));
                (module, Source::Compiled)
            }
        };
        if let Some(cache) = memory {
            cache.insert(key, Arc::clone(&module));
        }
        Ok(Loaded {
            module,
            source,
            config,
            load_us: started.elapsed().as_micros() as u64,
            notes,
        })
    }
}
