//! Getting a runnable module for a call: from the in-memory cache, else from the artifact
//! cache on disk, else by compiling (and then keeping the artifact). It says which of these
//! happened and why, so a call on a package that was never uploaded reports that it compiled.
//! It does not run anything.
//!
//! On disk it looks for the artifact made for this machine (its triple and the CPU features it
//! has), then for the one made for any machine of its triple (the triple's baseline features,
//! as `hako upload --target TRIPLE` makes them on another machine) when this CPU has every
//! baseline feature. A build that lacks the compiler (an aarch64 build without LLVM) can only
//! load, and says so when there is nothing to load.
//!
//! The module's bytes are needed only to compile. A stored version's module is therefore named
//! by its file ([`ModuleBytes::File`]) and read, and checked against the digest its record
//! holds, only when no artifact serves the call: a fresh `hako call` of an 8 MiB module does not
//! read and hash 8 MiB to then load the artifact made from it. The artifact is what runs, and it
//! is verified before it is loaded (see `artifact`); a module file changed after upload is
//! refused the moment it would be compiled, and is never run under the package's name.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use hako_engine_api::{Engine, Module};

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

/// A module's bytes, as [`Store::load_module`] is given them.
#[derive(Debug, Clone, Copy)]
pub enum ModuleBytes<'a> {
    /// In memory: a package folder or archive read (and checked) for this command, or a served
    /// version's module.
    Given(&'a [u8]),
    /// A stored version's `module.wasm`, read only to compile, and then only up to the size any
    /// module may have.
    File(&'a Path),
}

impl<'a> ModuleBytes<'a> {
    /// The bytes, read from the file if that is where they are.
    fn read(self) -> Result<Cow<'a, [u8]>, ArtifactError> {
        match self {
            ModuleBytes::Given(bytes) => Ok(Cow::Borrowed(bytes)),
            ModuleBytes::File(path) => crate::package::read_stored_module(path)
                .map(Cow::Owned)
                .map_err(|source| ArtifactError::ReadModule {
                    path: path.to_path_buf(),
                    source,
                }),
        }
    }
}

/// [`ModuleBytes`] owned: what a command holds from finding its module to loading it.
#[derive(Debug)]
pub enum ModuleSource {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl ModuleSource {
    pub fn bytes(&self) -> ModuleBytes<'_> {
        match self {
            ModuleSource::Bytes(bytes) => ModuleBytes::Given(bytes),
            ModuleSource::File(path) => ModuleBytes::File(path),
        }
    }
}

/// What to load.
pub struct ModuleSpec<'a> {
    pub wasm: ModuleBytes<'a>,
    pub module_sha256: &'a str,
    pub uses_simd: bool,
    pub config: EngineConfig,
}

impl Store {
    /// `spec`'s module when `memory` holds it: what [`Store::load_module`] returns at once,
    /// with no file read, hash or compile. `None` when a load would have to do one of those
    /// (or the engine cannot be made: the load then says why).
    pub fn in_memory(&self, spec: &ModuleSpec<'_>, memory: &ModuleCache) -> Option<Loaded> {
        let (config, fallback) = engines::effective_config(spec.config, spec.uses_simd);
        let engine = engines::engine(config, None).ok()?;
        let module = memory.get(&ArtifactKey::new(spec.module_sha256, engine.identity()))?;
        Some(Loaded {
            module,
            source: Source::Memory,
            config,
            load_us: 0,
            notes: fallback.into_iter().collect(),
        })
    }

    /// A runnable module for `spec` on this machine.
    pub fn load_module(
        &self,
        spec: &ModuleSpec<'_>,
        memory: Option<&ModuleCache>,
    ) -> Result<Loaded, ArtifactError> {
        if let Some(loaded) = memory.and_then(|cache| self.in_memory(spec, cache)) {
            return Ok(loaded);
        }
        let started = Instant::now();
        let mut notes = Vec::new();
        let (config, fallback) = engines::effective_config(spec.config, spec.uses_simd);
        notes.extend(fallback);
        let engine = engines::engine(config, None)?;
        let key = ArtifactKey::new(spec.module_sha256, engine.identity());
        let mut loaded = self.load_artifact(&key, engine.as_ref(), &mut notes)?;
        // The artifact the module came from, whose size it weighs in the cache.
        let mut from = self.artifacts().path(&key);
        if loaded.is_none() {
            if let Some(baseline) = engines::baseline_engine(config, engine.as_ref())? {
                let baseline_key = ArtifactKey::new(spec.module_sha256, baseline.identity());
                loaded = self.load_artifact(&baseline_key, baseline.as_ref(), &mut notes)?;
                from = self.artifacts().path(&baseline_key);
            }
        }
        let (module, source) = match loaded {
            Some(module) => (module, Source::Artifact),
            None if !config.compiles_here() => {
                return Err(ArtifactError::CannotCompile {
                    config: config.name(),
                    compiler: config.compiler().name().to_string(),
                })
            }
            None => {
                // The artifact is kept under the recorded digest: the code must be that module's.
                let wasm = spec.wasm.read()?;
                let found = super::sha256_hex(&wasm);
                if found != spec.module_sha256 {
                    return Err(ArtifactError::DigestMismatch {
                        recorded: spec.module_sha256.to_string(),
                        found,
                    });
                }
                let serialized =
                    crate::compile::compile(config, None, &wasm, self.compile_bounds())?;
                self.artifacts().write_serialized(&key, serialized)?;
                let module = self.load_stored(&key, engine.as_ref())?;
                from = self.artifacts().path(&key);
                notes.push(format!(
                    "no cached artifact for {config}: compiled the module now"
                ));
                (module, Source::Compiled)
            }
        };
        // Kept under the key this machine asks for, whichever artifact it came from, so that
        // a warm call finds it with one look-up.
        if let Some(cache) = memory {
            // A module whose artifact cannot be measured (gone since) weighs 1 MiB.
            let weight = std::fs::metadata(&from).map_or(1 << 20, |meta| meta.len());
            cache.insert(key, Arc::clone(&module), weight);
        }
        Ok(Loaded {
            module,
            source,
            config,
            load_us: started.elapsed().as_micros() as u64,
            notes,
        })
    }

    /// The artifact for `key`, just written here, loaded with `engine`.
    pub fn load_stored(
        &self,
        key: &ArtifactKey,
        engine: &dyn Engine,
    ) -> Result<Arc<dyn Module>, ArtifactError> {
        self.artifacts()
            .load(key, engine)?
            .ok_or_else(|| ArtifactError::Refused {
                path: self.artifacts().path(key),
                reason: "the artifact just written is gone".into(),
            })
    }

    /// The artifact for `key`, loaded with `engine`; `None` when there is none or it was
    /// refused (the refusal becomes a note; the caller looks further or compiles). An artifact
    /// fetched from a bucket is refused unless a key this store trusts now signed its record:
    /// trust taken back (a key no longer given, another command's settings on the same cache)
    /// stops its code from loading, and the module is compiled here instead.
    fn load_artifact(
        &self,
        key: &ArtifactKey,
        engine: &dyn Engine,
        notes: &mut Vec<String>,
    ) -> Result<Option<Arc<dyn Module>>, ArtifactError> {
        let file = key.file_name();
        match self.artifacts().origin(key) {
            None => {}
            Some(Ok(origin)) if self.trusted_keys().trusts(&origin.public_key) => {}
            Some(Ok(origin)) => {
                if self.artifacts().file(&file).is_some() {
                    notes.push(format!(
                        "the cached artifact {file} came from the object store under the key \
                         {} (record sha256 {}), which is not trusted now (--trust-key): not used",
                        origin.public_key, origin.record_sha256
                    ));
                }
                return Ok(None);
            }
            Some(Err(why)) => {
                if self.artifacts().file(&file).is_some() {
                    notes.push(format!(
                        "the cached artifact {file} came from the object store, and where from \
                         cannot be read ({why}): not used"
                    ));
                }
                return Ok(None);
            }
        }
        match self.artifacts().load(key, engine) {
            Ok(found) => Ok(found),
            Err(err @ ArtifactError::Refused { .. }) => {
                notes.push(format!("{err}; not used"));
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }
}
