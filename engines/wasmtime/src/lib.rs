//! hako's wasmtime engine: the [`hako_engine_api::Engine`] trait on wasmtime 48 with its
//! cranelift, so that the same ABI host (WASI layer, sandbox, `subako_http`, call contract)
//! runs on wasmtime for side-by-side comparisons. Exactly the WebAssembly 2.0 feature set of
//! ABI 1, instances from a pooling allocator with copy-on-write memory images, imports
//! resolved once per module, a memory cap through a resource limiter, per-store interrupts
//! through epochs, and artifacts that can be made for another target.
//!
//! What this crate does not do: decide whether an artifact may be loaded (the store verifies
//! checksums and headers first), decide what a crash is, or implement any import.
//!
//! ```no_run
//! use hako_engine_wasmtime::WasmtimeEngine;
//! use hako_engine_api::Engine;
//! let engine = WasmtimeEngine::new(None).unwrap();
//! let module = engine.compile(&std::fs::read("module.wasm").unwrap()).unwrap();
//! # let _ = module;
//! ```

mod limits;
mod link;
mod module;
mod target;

use std::sync::Arc;

use hako_engine_api::{ArtifactFile, Engine, EngineError, EngineIdentity, Module};
use wasmtime::{
    Collector, Config, Enabled, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    Strategy, WasmFeatures,
};

use link::describe;
use module::{ForeignModule, NativeModule};
use target::Target;

/// The wasmtime version this engine is built on, part of every artifact's identity.
pub const WASMTIME_VERSION: &str = "48.0.0";

/// The stack guest code may use, as on wasmer (1 MiB); host calls run on the same thread.
const GUEST_STACK_BYTES: usize = 1024 * 1024;

/// The most elements a table may have (a module's function-pointer table): the bound of every
/// engine (wasmtime's default of 20,000 is below what large programs use). A run's own bound,
/// which may be lower, is the limiter's.
const TABLE_ELEMENTS: usize = hako_engine_api::MAX_TABLE_ELEMENTS as usize;

/// How many tables one instance may define: reference types allow more than one.
const TABLES_PER_MODULE: u32 = 4;

/// Linear memory reset in place (rather than given back to the kernel) when a slot is freed:
/// short calls touch little memory, and keeping it avoids page faults on the next. With
/// `PAGEMAP_SCAN` (Linux 6.7+) only the pages the call touched are reset. Measured on the greet
/// example (`cargo bench --bench cold_start`, 2 busy cores): 40 µs a call with this and the scan,
/// 80-97 µs without the scan, 96-109 µs with neither (wasmtime's default); 8 MiB instead of
/// 1 MiB changed nothing.
const MEMORY_KEEP_RESIDENT: usize = 1024 * 1024;

/// The same for tables.
const TABLE_KEEP_RESIDENT: usize = 64 * 1024;

/// The most one instance's own metadata may take (its functions' references, globals,
/// imports, table and memory definitions): wasmtime's default of 1 MiB refuses a module whose
/// table holds 33,000 functions, which large programs have. 4 MiB holds what the module check
/// lets a module declare (100,000 functions at 32 bytes each, 10,000 globals at 16, 1,000
/// imports); it is allocated per instance as needed, not reserved.
const INSTANCE_METADATA_BYTES: usize = 4 << 20;

/// The size of the pooling allocator: how many instances may live at once, and how big a
/// linear memory each may grow to. The pool's address space is reserved up front (about
/// `slots × 4 GiB` of virtual memory, none of it resident until used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Instances (each with one linear memory) that may be live at the same time.
    pub slots: u32,
    /// The largest linear memory a slot holds, in bytes; no run may have a higher cap.
    pub max_memory_bytes: u64,
}

impl PoolConfig {
    /// Room for many concurrent short calls, each up to the host's highest memory cap
    /// (4096 MiB).
    pub const DEFAULT: PoolConfig = PoolConfig {
        slots: 1000,
        max_memory_bytes: 4 << 30,
    };

    /// No pool at all, for an engine that only compiles (hako's compile worker, whose memory
    /// bound a pool's reservations would count against): instances, were there any, would be
    /// made on demand. The code is the same as a pooled engine's.
    pub const COMPILE_ONLY: PoolConfig = PoolConfig {
        slots: 0,
        ..PoolConfig::DEFAULT
    };

    fn allocation(self) -> PoolingAllocationConfig {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(self.slots)
            .total_memories(self.slots)
            .total_tables(self.slots)
            .total_gc_heaps(self.slots)
            .total_component_instances(0)
            // No fiber stacks: this engine makes no async calls. wasmtime's default reserves
            // 1,000 of 2 MiB at the engine's start, each with a guard page of its own
            // mprotected one by one: 1,000 system calls, a third of a fresh process's call.
            .total_stacks(0)
            .max_memories_per_module(1)
            .max_tables_per_module(TABLES_PER_MODULE)
            .table_elements(TABLE_ELEMENTS)
            .max_core_instance_size(INSTANCE_METADATA_BYTES)
            .max_memory_size(usize::try_from(self.max_memory_bytes).unwrap_or(usize::MAX))
            .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            .pagemap_scan(Enabled::Auto);
        pool
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Exactly the WebAssembly 2.0 feature set of ABI 1: bulk memory, reference types (with
/// `externref`, hence GC types and wasmtime's null collector), multi-value, SIMD, sign
/// extension and non-trapping float-to-int. No threads, multi-memory, memory64, tail calls,
/// GC, exceptions, relaxed SIMD, extended-const or anything newer.
fn abi_features() -> WasmFeatures {
    WasmFeatures::FLOATS
        | WasmFeatures::MUTABLE_GLOBAL
        | WasmFeatures::GC_TYPES
        | WasmFeatures::BULK_MEMORY
        | WasmFeatures::REFERENCE_TYPES
        | WasmFeatures::SIGN_EXTENSION
        | WasmFeatures::SATURATING_FLOAT_TO_INT
        | WasmFeatures::MULTI_VALUE
        | WasmFeatures::SIMD
}

/// The compile settings of [`config`], as one line of the identity (wasmtime also checks its
/// own when it deserializes).
const SETTINGS: &str = "features=bulk-memory,multi-value,reference-types,simd;opt=speed;\
                        epoch-interruption;collector=null";

/// The wasmtime configuration for `target`; code for this machine runs in `pool`.
fn config(target: &Target, pool: PoolConfig) -> Result<Config, EngineError> {
    let mut config = Config::new();
    config
        .strategy(Strategy::Cranelift)
        .cranelift_opt_level(OptLevel::Speed)
        .wasm_features(WasmFeatures::all(), false)
        .wasm_features(abi_features(), true)
        .collector(Collector::Null)
        .epoch_interruption(true)
        // A trap's message is all the host reports; a backtrace would only cost time.
        .wasm_backtrace_max_frames(None)
        .max_wasm_stack(GUEST_STACK_BYTES)
        .parallel_compilation(true);
    if target.runs_here {
        config.memory_init_cow(true);
        if pool.slots > 0 {
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool.allocation()));
        }
    } else {
        let triple = target.triple.to_string();
        config.target(&triple).map_err(|err| {
            EngineError::Unsupported(format!("wasmtime cannot compile for {triple}: {err}"))
        })?;
        for flag in target.cranelift_flags() {
            // SAFETY: the flag only lets code assume a CPU feature of the baseline; code for a
            // foreign target never runs on this machine (`runs_here` is false, so this engine
            // refuses to load it), and wasmtime on the machine that loads it checks that the
            // CPU has every feature the code was compiled with.
            unsafe {
                config.cranelift_flag_enable(flag);
            }
        }
    }
    Ok(config)
}

/// A wasmtime engine compiling with cranelift for one target.
pub struct WasmtimeEngine {
    engine: wasmtime::Engine,
    identity: EngineIdentity,
    runs_here: bool,
    pool: PoolConfig,
}

impl WasmtimeEngine {
    /// An engine compiling for `target` (a triple such as `aarch64-unknown-linux-gnu`), or for
    /// this machine when `target` is `None`, with the default pool.
    pub fn new(target: Option<&str>) -> Result<Self, EngineError> {
        Self::with_pool(target, PoolConfig::DEFAULT)
    }

    /// The same with a pool of another size (an engine for another target reserves none).
    pub fn with_pool(target: Option<&str>, pool: PoolConfig) -> Result<Self, EngineError> {
        let target = Target::new(target)?;
        let engine = wasmtime::Engine::new(&config(&target, pool)?).map_err(|err| {
            EngineError::Unsupported(format!(
                "starting wasmtime with a pool of {} instances of up to {} bytes of memory: {}",
                pool.slots,
                pool.max_memory_bytes,
                describe(&err)
            ))
        })?;
        let identity = EngineIdentity {
            engine: "wasmtime",
            version: WASMTIME_VERSION,
            compiler: "cranelift".to_string(),
            triple: target.triple.to_string(),
            cpu_features: target.features_line(),
            settings: SETTINGS,
        };
        Ok(Self {
            engine,
            identity,
            runs_here: target.runs_here,
            pool,
        })
    }

    fn compile_error(&self, err: &wasmtime::Error) -> EngineError {
        EngineError::Compile {
            compiler: self.identity.compiler.clone(),
            message: describe(err),
        }
    }
}

impl Engine for WasmtimeEngine {
    fn identity(&self) -> &EngineIdentity {
        &self.identity
    }

    fn runs_here(&self) -> bool {
        self.runs_here
    }

    fn compile(&self, wasm: &[u8]) -> Result<Arc<dyn Module>, EngineError> {
        if !self.runs_here {
            let bytes = self
                .engine
                .precompile_module(wasm)
                .map_err(|err| self.compile_error(&err))?;
            return Ok(Arc::new(ForeignModule {
                bytes,
                triple: self.identity.triple.clone(),
            }));
        }
        let module = wasmtime::Module::from_binary(&self.engine, wasm)
            .map_err(|err| self.compile_error(&err))?;
        Ok(Arc::new(NativeModule::new(module, self.pool)))
    }

    #[allow(unsafe_code)]
    unsafe fn load(&self, artifact: ArtifactFile<'_>) -> Result<Arc<dyn Module>, EngineError> {
        if !self.runs_here {
            return Err(EngineError::ForeignTarget {
                triple: self.identity.triple.clone(),
            });
        }
        if artifact.image.is_some() {
            return Err(EngineError::Deserialize(
                "a wasmtime artifact carries no memory image of hako's".into(),
            ));
        }
        let file = artifact
            .file
            .try_clone()
            .map_err(|err| EngineError::Deserialize(format!("reading: {err}")))?;
        // SAFETY: the caller guarantees the file holds, from its first byte, code this engine's
        // identity produced (the trait's contract: the store verified its checksum and header
        // first) and that it does not change while mapped; wasmtime maps the whole file, reads
        // its ELF headers (ignoring the store's header after them), checks its own version,
        // target and settings besides, and maps its memory images straight from the file.
        let module = unsafe { wasmtime::Module::deserialize_open_file(&self.engine, file) }
            .map_err(|err| EngineError::Deserialize(describe(&err)))?;
        Ok(Arc::new(NativeModule::new(module, self.pool)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_names_wasmtime_its_version_cranelift_and_this_machine() {
        let engine = WasmtimeEngine::with_pool(
            None,
            PoolConfig {
                slots: 1,
                ..PoolConfig::DEFAULT
            },
        )
        .unwrap();
        let identity = engine.identity();
        assert_eq!(identity.engine, "wasmtime");
        assert_eq!(identity.version, WASMTIME_VERSION);
        assert_eq!(identity.compiler, "cranelift");
        assert_eq!(identity.triple, target_lexicon::Triple::host().to_string());
        let features: Vec<&str> = identity.cpu_features.split(',').collect();
        let mut sorted = features.clone();
        sorted.sort_unstable();
        assert_eq!(features, sorted);
        assert!(engine.runs_here());
    }

    #[test]
    fn the_version_in_the_identity_is_the_one_built_in() {
        let lock =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"))
                .unwrap();
        let built = lock
            .split("[[package]]")
            .find(|entry| entry.contains("\nname = \"wasmtime\"\n"))
            .and_then(|entry| {
                entry
                    .lines()
                    .find_map(|line| line.strip_prefix("version = "))
            })
            .unwrap();
        assert_eq!(built.trim_matches('"'), WASMTIME_VERSION);
    }
}
