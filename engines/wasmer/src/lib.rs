//! hako's wasmer engine: the [`hako_engine_api::Engine`] trait on wasmer 7.4, with the
//! singlepass, cranelift and LLVM compilers (cargo features), exactly the WebAssembly 2.0
//! feature set, a memory cap through tunables, host interrupts for deadlines, and artifacts
//! that can be made for another target.
//!
//! LLVM (the `llvm` feature) is linked by the program that calls [`link_llvm`], and only by
//! it: hako's `hako` command does not, and compiles with LLVM in a worker process.
//!
//! A compiler this build lacks still has an engine: a headless one, which loads artifacts of
//! that compiler's identity (made by another build, for example an x86-64 build with LLVM
//! precompiling for aarch64) and refuses to compile, naming the missing feature.
//!
//! What this crate does not do: decide whether an artifact may be loaded (the store verifies
//! checksums and headers first), decide what a crash is, or implement any import.
//!
//! ```no_run
//! use hako_engine_wasmer::{Compiler, WasmerEngine};
//! use hako_engine_api::Engine;
//! let engine = WasmerEngine::new(Compiler::Cranelift, None).unwrap();
//! let module = engine.compile(&std::fs::read("module.wasm").unwrap()).unwrap();
//! # let _ = module;
//! ```

// A build without any compiler (`--no-default-features`, as the fuzz targets build hako) loads
// artifacts only: the compiling half (the deadline middleware, compiler settings) is unused.
#![cfg_attr(
    not(any(feature = "singlepass", feature = "cranelift", feature = "llvm")),
    allow(dead_code, unused_imports)
)]

mod checks;
mod image;
mod interrupt;
mod link;
mod memory;
mod pool;
mod trim;

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::Arc;

use hako_engine_api::{
    ArtifactFile, Engine, EngineError, EngineIdentity, Host, Import, Module, Prepared, RunExit,
    RunLimits, RunResult, Serialized, Stop, Teardown, Watchdog,
};
use wasmer::sys::{
    CompilerConfig, CpuFeature, EngineBuilder, Features, NativeEngineExt, Target, Triple,
};
use wasmer::{Exports, Extern, FunctionEnv, Instance, Store, TypedFunction};

use checks::DeadlineChecks;
use image::{Image, Layout};
use interrupt::StoreInterrupt;
use link::{HostEnv, HostStop};
use memory::{CapScope, CappedTunables, Usage};

/// The wasmer version this engine is built on, part of every artifact's identity.
pub const WASMER_VERSION: &str = "7.4.2";

/// The compilers hako knows; [`Compiler::available`] says which this build includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compiler {
    Singlepass,
    Cranelift,
    Llvm,
}

impl Compiler {
    /// Every compiler hako knows, whether or not this build includes it.
    pub const ALL: [Compiler; 3] = [Compiler::Singlepass, Compiler::Cranelift, Compiler::Llvm];

    /// The compiler's name on the command line and in artifact keys; also the name of the
    /// cargo feature that builds it in.
    pub fn name(self) -> &'static str {
        match self {
            Compiler::Singlepass => "singlepass",
            Compiler::Cranelift => "cranelift",
            Compiler::Llvm => "llvm",
        }
    }

    /// Whether this build includes the compiler (without it, the compiler's artifacts can
    /// still be loaded, see [`WasmerEngine::new`]). LLVM compiles only in a process that
    /// linked it ([`link_llvm`]) even where the build includes it.
    pub fn available(self) -> bool {
        match self {
            Compiler::Singlepass => cfg!(feature = "singlepass"),
            Compiler::Cranelift => cfg!(feature = "cranelift"),
            Compiler::Llvm => cfg!(feature = "llvm"),
        }
    }

    /// Whether this process compiles with the compiler: the build includes it and, for LLVM,
    /// the process linked it ([`link_llvm`]). A compiler the build includes that this process
    /// does not link compiles in [`LLVM_WORKER`].
    pub fn compiles_in_process(self) -> bool {
        self.available() && (self != Compiler::Llvm || llvm().is_some())
    }

    /// Whether the compiler can compile modules that use SIMD128 (singlepass cannot).
    pub fn supports_simd(self) -> bool {
        matches!(self, Compiler::Cranelift | Compiler::Llvm)
    }
}

impl FromStr for Compiler {
    type Err = EngineError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Compiler::ALL
            .into_iter()
            .find(|compiler| compiler.name() == name)
            .ok_or_else(|| {
                EngineError::Unsupported(format!(
                    "unknown compiler {name:?}: hako knows singlepass, cranelift and llvm"
                ))
            })
    }
}

/// Exactly the WebAssembly 2.0 feature set of ABI 1. wasmer's defaults enable threads,
/// multi-memory and extended-const, so this starts from nothing. Sign extension and
/// non-trapping float-to-int have no switch: wasmer always accepts them.
fn abi_features() -> Features {
    let mut features = Features::none();
    features
        .bulk_memory(true)
        .reference_types(true)
        .multi_value(true)
        .simd(true);
    features
}

/// The compile settings of every wasmer engine here, as one line of the identity: the
/// features ([`abi_features`]), the memory style the tunables give every memory (static, its
/// bound and offset guard), and the deadline checks ([`checks`], with their version). Made
/// once per process.
fn settings() -> &'static str {
    use wasmer_types::MemoryStyle;
    static SETTINGS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SETTINGS.get_or_init(|| {
        format!(
            "features=bulk-memory,multi-value,reference-types,simd;memory=static,bound={},\
             guard={};{};memory-images=2",
            MemoryStyle::static_bound().bytes().0,
            MemoryStyle::static_offset_guard_size(),
            checks::SETTINGS
        )
    })
}

/// The CPU features code for `triple` may assume when the machine that runs it is unknown: the
/// x86-64-v2 baseline on x86-64 (cranelift needs SSE2, singlepass SSE4.2), nothing extra
/// elsewhere.
fn baseline_target(triple: Triple) -> Target {
    let mut set = CpuFeature::set();
    if triple.architecture == wasmer::sys::Architecture::X86_64 {
        for feature in [
            CpuFeature::SSE2,
            CpuFeature::SSE3,
            CpuFeature::SSSE3,
            CpuFeature::SSE41,
            CpuFeature::SSE42,
            CpuFeature::POPCNT,
        ] {
            set.insert(feature);
        }
    }
    Target::new(triple, set)
}

/// The executable that compiles with LLVM for a process that does not link it, as errors name
/// it.
pub const LLVM_WORKER: &str = "hako-llvm";

/// How a process that links LLVM makes its compiler's configuration ([`link_llvm`]).
static LLVM: std::sync::OnceLock<fn() -> Box<dyn CompilerConfig>> = std::sync::OnceLock::new();

/// Gives this process LLVM: `make` returns wasmer-compiler-llvm's configuration, as in
/// `link_llvm(|| Box::new(wasmer_compiler_llvm::LLVM::new()))`. Until then an LLVM engine of a
/// build with the `llvm` feature loads LLVM's artifacts but compiles nothing.
///
/// The engine does not name LLVM itself so that a program that never calls this never links
/// LLVM: its static libraries run their constructors and map libstdc++ in every process that
/// links them, 3 ms and a thousand page faults before `main`, which a fresh `hako call` would
/// pay for a compiler it does not run. hako compiles with LLVM in a worker process of its own,
/// [`LLVM_WORKER`], which calls this; the `hako` command does not.
pub fn link_llvm(make: fn() -> Box<dyn CompilerConfig>) {
    let _ = LLVM.set(make);
}

/// How this process makes LLVM's configuration, when it linked LLVM.
fn llvm() -> Option<&'static fn() -> Box<dyn CompilerConfig>> {
    // A test build of this crate links it.
    #[cfg(all(test, feature = "llvm"))]
    link_llvm(|| Box::new(wasmer_compiler_llvm::LLVM::new()));
    LLVM.get()
}

/// A wasmer engine with one compiler for one target.
///
/// wasmer keeps the code of every module an engine compiled or loaded until the engine itself
/// is dropped, so a long-lived engine would grow by an artifact's size at every load (a server
/// evicting and reloading modules would never give that memory back). Each module therefore
/// gets a wasmer engine of its own, made when it is compiled or loaded and held by the module
/// and its stores: dropping the module frees its code.
pub struct WasmerEngine {
    compiler: Compiler,
    target: Target,
    /// Whether the target's architecture is this machine's (whatever its CPU features).
    native_architecture: bool,
    identity: EngineIdentity,
    runs_here: bool,
    /// False for a headless engine: one for a compiler this build lacks, which only loads.
    compiles: bool,
}

impl WasmerEngine {
    /// An engine compiling with `compiler` for `target`: this machine, with the CPU features
    /// it has, when `target` is `None`; any machine of that triple, with its baseline CPU
    /// features, when it is a triple such as `aarch64-unknown-linux-gnu` (the triple of this
    /// machine too: such code runs here when this CPU has every baseline feature).
    ///
    /// A compiler this build lacks gives a headless engine of the same identity: it loads that
    /// compiler's artifacts, and its `compile` fails, naming the cargo feature that is missing.
    pub fn new(compiler: Compiler, target: Option<&str>) -> Result<Self, EngineError> {
        let host = Target::default();
        let target = match target {
            None => host.clone(),
            Some(triple) => {
                let triple = Triple::from_str(triple).map_err(|err| {
                    EngineError::Unsupported(format!("unknown target triple {triple:?}: {err}"))
                })?;
                baseline_target(triple)
            }
        };
        let runs_here = target.triple() == host.triple()
            && host.cpu_features().is_superset(*target.cpu_features());
        let cpu_features: BTreeSet<String> = target
            .cpu_features()
            .iter()
            .map(|feature| feature.to_string())
            .collect();
        let identity = EngineIdentity {
            engine: "wasmer",
            version: WASMER_VERSION,
            compiler: compiler.name().to_string(),
            triple: target.triple().to_string(),
            cpu_features: cpu_features.into_iter().collect::<Vec<_>>().join(","),
            settings: settings(),
        };
        Ok(Self {
            compiler,
            native_architecture: target.triple().architecture == host.triple().architecture,
            target,
            identity,
            runs_here,
            compiles: compiler.available(),
        })
    }

    /// A wasmer engine for one module about to be compiled: this engine's compiler, target
    /// and WebAssembly features, and the deadline checks ([`checks`]) in the code. LLVM only
    /// in a process that linked it ([`link_llvm`]).
    fn compiling_engine(&self) -> Result<wasmer::Engine, EngineError> {
        let builder = match self.compiler {
            // Code for this architecture becomes an ELF image (linked when compiled), which a
            // load maps straight from the artifact file: no copy, no relocation, only the
            // pages a call touches are read. wasmer links only images of the architecture it
            // runs on, so code for another one keeps the plain format.
            #[cfg(feature = "singlepass")]
            Compiler::Singlepass => {
                let mut singlepass = wasmer::sys::Singlepass::new();
                singlepass.experimental_artifact(self.native_architecture);
                singlepass.push_middleware(DeadlineChecks::new());
                EngineBuilder::new(singlepass)
            }
            #[cfg(feature = "cranelift")]
            Compiler::Cranelift => {
                let mut cranelift = wasmer::sys::Cranelift::new();
                cranelift.experimental_artifact(self.native_architecture);
                cranelift.push_middleware(DeadlineChecks::new());
                EngineBuilder::new(cranelift)
            }
            Compiler::Llvm => {
                let mut llvm = llvm().map(|make| make()).ok_or_else(|| {
                    EngineError::Unsupported(format!(
                        "this process does not link LLVM: {LLVM_WORKER} compiles with it"
                    ))
                })?;
                llvm.experimental_artifact(self.native_architecture);
                llvm.push_middleware(DeadlineChecks::new());
                EngineBuilder::new(llvm)
            }
            #[allow(unreachable_patterns)]
            _ => EngineBuilder::headless(),
        };
        Ok(with_tunables(
            builder
                .set_features(Some(abi_features()))
                .set_target(Some(self.target.clone()))
                .engine()
                .into(),
        ))
    }

    /// A wasmer engine for one module about to be loaded. Loading needs no compiler: wasmer's
    /// headless engine takes this machine as its target, and the artifact's own header names
    /// the code's target and CPU features, which wasmer checks against this machine's.
    fn loading_engine(&self) -> wasmer::Engine {
        with_tunables(EngineBuilder::headless().engine().into())
    }
}

/// `engine` with hako's memory tunables (the cap, pooled memories).
fn with_tunables(mut engine: wasmer::Engine) -> wasmer::Engine {
    engine.set_tunables(CappedTunables::default());
    engine
}

impl Engine for WasmerEngine {
    fn identity(&self) -> &EngineIdentity {
        &self.identity
    }

    fn runs_here(&self) -> bool {
        self.runs_here
    }

    fn compile(&self, wasm: &[u8]) -> Result<Arc<dyn Module>, EngineError> {
        if !self.compiles {
            return Err(EngineError::Compile {
                compiler: self.identity.compiler.clone(),
                message: format!(
                    "this build of hako has no {0} compiler (build it with `--features {0}`)",
                    self.identity.compiler
                ),
            });
        }
        let layout = image::plan(wasm);
        let compile_error = |message: String| EngineError::Compile {
            compiler: self.identity.compiler.clone(),
            message,
        };
        let (wasm, image) = match &layout {
            Layout::Image { image, module } => {
                let mapped = Image::in_memory(image).map_err(|err| {
                    compile_error(format!("keeping the memory image in memory: {err}"))
                })?;
                (module.as_slice(), Some(Arc::new(mapped)))
            }
            Layout::Empty { module } => (module.as_slice(), None),
            Layout::Nothing | Layout::Copied(_) => (wasm, None),
        };
        let engine = self.compiling_engine()?;
        let module =
            wasmer::Module::new(&engine, wasm).map_err(|err| compile_error(err.to_string()))?;
        Ok(Arc::new(WasmerModule::new(
            engine,
            module,
            self.runs_here,
            &self.identity.triple,
            image,
            layout.describe(),
        )))
    }

    #[allow(unsafe_code)]
    unsafe fn load(&self, artifact: ArtifactFile<'_>) -> Result<Arc<dyn Module>, EngineError> {
        use std::os::fd::AsRawFd;
        if !self.runs_here {
            return Err(EngineError::ForeignTarget {
                triple: self.identity.triple.clone(),
            });
        }
        let image = artifact
            .image
            .map(|region| Image::from_file(artifact.file, region.offset, region.start, region.len))
            .transpose()
            .map_err(|err| EngineError::Deserialize(format!("the memory image: {err}")))?;
        let memory_init = match &image {
            Some(image) => image::describe_image(image.start as u64, image.len as u64),
            None => "no memory image".to_string(),
        };
        let engine = self.loading_engine();
        let read_error = |err: std::io::Error| EngineError::Deserialize(format!("reading: {err}"));
        let is_elf = artifact.code_starts_with(ELF_MAGIC).map_err(read_error)?;
        let loaded = if is_elf && open_files_have_names() {
            // wasmer maps an ELF image from a path; this process's own name for the open file
            // is the very file the caller verified, whatever has been renamed over its path
            // since.
            let own_name = format!("/proc/self/fd/{}", artifact.file.as_raw_fd());
            // SAFETY: the caller guarantees the file holds, from its first byte, code this
            // engine's identity produced and that it does not change while mapped; wasmer
            // reads the ELF image's own headers and ignores the bytes after it.
            unsafe { wasmer::Module::deserialize_from_file(&engine, &own_name) }
        } else {
            // SAFETY: the caller guarantees the code is what this engine's identity produced
            // (the trait's contract); wasmer 7.4 checks nothing itself.
            let code = artifact.read_code().map_err(read_error)?;
            // SAFETY: as above.
            unsafe { wasmer::Module::deserialize(&engine, code) }
        };
        let module = loaded.map_err(|err| EngineError::Deserialize(err.to_string()))?;
        Ok(Arc::new(WasmerModule::new(
            engine,
            module,
            true,
            &self.identity.triple,
            image,
            memory_init,
        )))
    }
}

/// The first bytes of an ELF image: the artifact format wasmer can map from a file.
const ELF_MAGIC: &[u8] = b"\x7fELF";

/// Whether this process names its open files under `/proc/self/fd` (a process without `/proc`
/// loads ELF images from bytes instead). Learned once: asking at every load cost a `statx` of
/// the file's name, about 2 % of a load.
fn open_files_have_names() -> bool {
    static NAMED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NAMED.get_or_init(|| std::path::Path::new("/proc/self/fd").is_dir())
}

/// A compiled module and the engine it belongs to (its own: dropping the module frees its
/// code once no run holds the engine).
struct WasmerModule {
    engine: wasmer::Engine,
    module: wasmer::Module,
    /// The module's imports in its own order, looked up in the ABI's table once, or why the
    /// module cannot be linked (reported by every run).
    imports: Result<Vec<Import>, String>,
    /// Whether the module has a start function (exported by the checks as
    /// [`checks::START_EXPORT`]).
    has_start: bool,
    /// The initial memory's image, mapped into each instance's memory, when the module's
    /// active data segments were emptied for it.
    image: Option<Arc<Image>>,
    /// How the memory is initialised, in words.
    memory_init: String,
    runs_here: bool,
    triple: String,
}

impl Module for WasmerModule {
    fn serialize(&self) -> Result<Serialized, EngineError> {
        let code = self
            .module
            .serialize()
            .map(|bytes| bytes.to_vec())
            .map_err(|err| EngineError::Serialize(err.to_string()))?;
        let code = if code.starts_with(ELF_MAGIC) {
            trim::trim(code).map_err(EngineError::Serialize)?
        } else {
            code
        };
        let image = self
            .image
            .as_ref()
            .map(|image| image.read())
            .transpose()
            .map_err(|err| EngineError::Serialize(format!("reading the memory image: {err}")))?;
        Ok(Serialized {
            code,
            image,
            memory_init: self.memory_init.clone(),
        })
    }

    fn prepare(&self, limits: RunLimits) -> Box<dyn Prepared> {
        let mut store = Store::new(self.engine.clone());
        let env = FunctionEnv::new(
            &mut store,
            HostEnv {
                host: None,
                memory: None,
            },
        );
        let interrupt = Arc::new(StoreInterrupt {
            flag: checks::Flag::default(),
            target: interrupt::Target::default(),
        });
        let made = if self.runs_here {
            self.instantiate(&mut store, &env, limits, &interrupt)
        } else {
            Err(RunExit::Instantiate(format!(
                "this module was compiled for {} and cannot run here",
                self.triple
            )))
        };
        Box::new(WasmerPrepared {
            store,
            env,
            interrupt,
            made,
        })
    }
}

/// What instantiation made: the start function the checks took out of it (if the module has
/// one), the memory the host sees, `_start`, and the cap's record of the instance's memory and
/// refusals.
struct Entry {
    start_function: Option<TypedFunction<(), ()>>,
    memory: wasmer::Memory,
    start: TypedFunction<(), ()>,
    usage: Arc<Usage>,
}

/// A [`WasmerModule`]'s instance made ahead of its run: its store, the environment its host
/// functions read, the interrupt its deadline reaches it by, and what instantiation made (or
/// how it ended). No guest code has run in it: the checks took the start function out of
/// instantiation, and it runs in [`Prepared::run`], after the watchdog is armed.
struct WasmerPrepared {
    store: Store,
    env: FunctionEnv<HostEnv>,
    interrupt: Arc<StoreInterrupt>,
    made: Result<Entry, RunExit>,
}

impl Prepared for WasmerPrepared {
    fn run(self: Box<Self>, host: Box<dyn Host>, watchdog: &dyn Watchdog) -> RunResult {
        let WasmerPrepared {
            mut store,
            env,
            interrupt,
            made,
        } = *self;
        env.as_mut(&mut store).host = Some(host);
        let exit = match made {
            Ok(entry) => {
                watchdog.arm(Arc::clone(&interrupt) as Arc<dyn hako_engine_api::Interrupt>);
                // The deadline thread may raise the flag after the run too: before the store
                // goes, however the run ends, the flag forgets the instance and only records
                // that.
                let _detach = interrupt.flag.detach_on_drop();
                let _entered = interrupt.target.enter();
                let usage = Arc::clone(&entry.usage);
                start(&mut store, &env, entry)
                    .err()
                    .map_or(RunExit::Returned, |error| {
                        classify(error, &usage, &interrupt)
                    })
            }
            Err(exit) => exit,
        };
        let state = env.as_mut(&mut store);
        let memory = state.memory.take();
        let host = state
            .host
            .take()
            .expect("the host is only taken back here, once per run");
        let memory_bytes = memory.map_or(0, |memory| memory.view(&store).data_size());
        RunResult {
            exit,
            host,
            memory_bytes,
            teardown: Teardown::new(store),
        }
    }
}

/// Runs a prepared instance: the start function the checks took out of instantiation (if
/// any), then, with the memory known to the host, `_start`.
fn start(
    store: &mut Store,
    env: &FunctionEnv<HostEnv>,
    entry: Entry,
) -> Result<(), wasmer::RuntimeError> {
    if let Some(start_function) = entry.start_function {
        start_function.call(store)?;
    }
    env.as_mut(store).memory = Some(entry.memory);
    entry.start.call(store)
}

impl WasmerModule {
    fn new(
        engine: wasmer::Engine,
        module: wasmer::Module,
        runs_here: bool,
        triple: &str,
        image: Option<Arc<Image>>,
        memory_init: String,
    ) -> Self {
        let imports = module
            .imports()
            .map(|import| {
                Import::lookup(import.module(), import.name()).ok_or_else(|| {
                    format!(
                        "the module imports {}.{}, which ABI 1 does not provide",
                        import.module(),
                        import.name()
                    )
                })
            })
            .collect();
        let has_start = module
            .exports()
            .any(|export| export.name() == checks::START_EXPORT);
        Self {
            engine,
            module,
            imports,
            has_start,
            image,
            memory_init,
            runs_here,
            triple: triple.to_string(),
        }
    }

    /// A host function for each import, in the module's order, so that instantiation needs no
    /// lookup by name.
    fn imports(
        &self,
        store: &mut Store,
        env: &FunctionEnv<HostEnv>,
    ) -> Result<Vec<Extern>, String> {
        let known = self.imports.as_ref().map_err(Clone::clone)?;
        known
            .iter()
            .map(|&import| {
                link::host_function(store, env, import)
                    .map(Extern::Function)
                    .ok_or_else(|| {
                        format!(
                            "no host function links {}.{}",
                            import.module(),
                            import.name()
                        )
                    })
            })
            .collect()
    }

    /// Makes the instance under `limits`, running none of its code: what it made, or how
    /// instantiation ended.
    fn instantiate(
        &self,
        store: &mut Store,
        env: &FunctionEnv<HostEnv>,
        limits: RunLimits,
        interrupt: &StoreInterrupt,
    ) -> Result<Entry, RunExit> {
        let imports = self.imports(store, env).map_err(RunExit::Instantiate)?;
        let cap = CapScope::enter(limits, self.image.clone());
        // No guest code runs here: the checks took the start function out of instantiation
        // (and the engine identity keeps code without them from being loaded).
        match Instance::new_by_index(store, &self.module, &imports) {
            Ok(instance) => {
                interrupt.flag.attach(&instance, store);
                self.entry(&instance, store, cap.usage())
            }
            Err(error) if cap.refused() => Err(RunExit::OutOfMemory(format!(
                "the module's initial memory and tables are above the cap of {} bytes \
                 (or a table above the bound of {} elements): {error}",
                limits.max_memory_bytes, limits.max_table_elements
            ))),
            // A segment out of bounds traps while the instance is made: the guest's trap, as
            // on wasmtime, not a host failure.
            Err(wasmer::InstantiationError::Start(error)) => {
                Err(classify(error, &cap.usage(), interrupt))
            }
            Err(error) => Err(RunExit::Instantiate(error.to_string())),
        }
    }

    /// The instance's entry points. Whether the module has a start function was read once,
    /// when the module was made.
    fn entry(
        &self,
        instance: &Instance,
        store: &Store,
        usage: Arc<Usage>,
    ) -> Result<Entry, RunExit> {
        let start_function = if self.has_start {
            let start = instance
                .exports
                .get_typed_function::<(), ()>(store, checks::START_EXPORT)
                .map_err(|err| RunExit::Instantiate(format!("the start function: {err}")))?;
            Some(start)
        } else {
            None
        };
        let (memory, start) =
            entry_points(&instance.exports, store).map_err(RunExit::Instantiate)?;
        Ok(Entry {
            start_function,
            memory,
            start,
            usage,
        })
    }
}

fn entry_points(
    exports: &Exports,
    store: &Store,
) -> Result<(wasmer::Memory, TypedFunction<(), ()>), String> {
    let memory = exports
        .get_memory("memory")
        .map_err(|err| format!("export memory: {err}"))?
        .clone();
    let start = exports
        .get_typed_function::<(), ()>(store, "_start")
        .map_err(|err| format!("export _start: {err}"))?;
    Ok((memory, start))
}

/// How a run that ended in an error ended. Once the deadline flag is raised, a trap is the
/// interrupt: at a deadline check's `unreachable`, or from the interrupt's signal (which the
/// run's [`interrupt::Target`] records, since wasmer names that trap a stack overflow, and may
/// name it by the instruction it landed on instead: singlepass marks every `call` and function
/// prologue "call stack exhausted"). A trap of the guest's own after its deadline has passed is
/// reported as the interrupt too, which the host would judge a timeout anyway. Past those, the
/// memory cap keeps precedence, as it does in the host's verdict.
fn classify(error: wasmer::RuntimeError, usage: &Usage, interrupt: &StoreInterrupt) -> RunExit {
    if let Some(HostStop(stop)) = error.downcast_ref::<HostStop>() {
        return match stop {
            Stop::Exit(code) => RunExit::Exited(*code),
            Stop::Abort => RunExit::Aborted,
        };
    }
    let message = error.message();
    match error.to_trap() {
        Some(_) if interrupt.target.trapped() => RunExit::Interrupted,
        Some(wasmer_types::TrapCode::UnreachableCodeReached) if interrupt.flag.raised() => {
            RunExit::Interrupted
        }
        _ if usage.refused() => RunExit::OutOfMemory(format!(
            "the guest was refused memory at its cap, then trapped: {message}"
        )),
        Some(_) if interrupt.flag.raised() => RunExit::Interrupted,
        _ => RunExit::Trap(message),
    }
}

#[cfg(all(test, target_os = "linux", feature = "cranelift"))]
mod tests {
    use super::*;

    /// `(module (func))`, hand-assembled: the engine crate has no text-format parser.
    const EMPTY_FUNCTION: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
        0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // types: () -> ()
        0x03, 0x02, 0x01, 0x00, // functions: one of type 0
        0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code: no locals, `end`
    ];

    /// Anonymous executable mappings of this process: where wasmer puts compiled code.
    fn code_mappings() -> usize {
        std::fs::read_to_string("/proc/self/maps")
            .expect("/proc/self/maps is readable on Linux")
            .lines()
            .filter(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() == 5 && fields[1].starts_with("r-x") && fields[4] == "0"
            })
            .count()
    }

    /// Loads `serialized` as the store does: from a file holding the code from its first
    /// byte, then the image at the next multiple of the image alignment, then a header.
    fn load(
        engine: &WasmerEngine,
        serialized: &Serialized,
    ) -> Result<Arc<dyn Module>, EngineError> {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&serialized.code).unwrap();
        let image = serialized.image.as_ref().map(|image| {
            let align = hako_engine_api::IMAGE_ALIGN;
            let offset = (serialized.code.len() as u64).div_ceil(align) * align;
            let pad = offset as usize - serialized.code.len();
            file.write_all(&vec![0; pad]).unwrap();
            file.write_all(&image.bytes).unwrap();
            hako_engine_api::ImageRegion {
                offset,
                len: image.bytes.len() as u64,
                start: image.start,
            }
        });
        file.write_all(b"a header after the code").unwrap();
        let artifact = ArtifactFile {
            file: &file,
            code_len: serialized.code.len() as u64,
            image,
        };
        // SAFETY: the file holds what this engine just serialized, laid out as the store does.
        unsafe { engine.load(artifact) }
    }

    /// What a [`Recording`] host was asked.
    type Asked = Arc<std::sync::Mutex<Vec<(Import, Vec<u64>)>>>;

    /// A host that records every import it is asked; `proc_exit` ends the run.
    struct Recording(Asked);

    impl Host for Recording {
        fn call(&mut self, import: Import, args: &[u64], _: &mut [u8]) -> Result<i32, Stop> {
            self.0.lock().unwrap().push((import, args.to_vec()));
            match import {
                Import::ProcExit => Err(Stop::Exit(args[0] as u32)),
                _ => Ok(0),
            }
        }

        fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
            self
        }
    }

    /// A watchdog whose deadline never comes.
    struct Never;

    impl Watchdog for Never {
        fn arm(&self, _: Arc<dyn hako_engine_api::Interrupt>) {}
    }

    /// A start function that counts its runs (see the fixture).
    const COUNTED_START: &str = include_str!("../../api/fixtures/counted_start.wat");

    #[test]
    fn an_instance_made_ahead_runs_its_start_function_once_in_its_run() {
        let wasm = wat::parse_str(COUNTED_START).unwrap();
        let limits = RunLimits {
            max_memory_bytes: 64 << 20,
            max_table_elements: hako_engine_api::MAX_TABLE_ELEMENTS,
        };
        for compiler in Compiler::ALL.into_iter().filter(|c| c.available()) {
            let module = WasmerEngine::new(compiler, None)
                .unwrap()
                .compile(&wasm)
                .unwrap();
            // Two made ahead, run in the other order: a start function run while the instance
            // was made would have met no host (and been stopped), or counted 2.
            let made: Vec<_> = (0..2).map(|_| module.prepare(limits)).collect();
            for prepared in made.into_iter().rev() {
                let asked = Asked::default();
                let result = prepared.run(Box::new(Recording(Arc::clone(&asked))), &Never);
                assert_eq!(result.exit, RunExit::Exited(1), "{compiler:?}");
                assert_eq!(
                    *asked.lock().unwrap(),
                    [(Import::SchedYield, vec![]), (Import::ProcExit, vec![1])],
                    "{compiler:?}"
                );
            }
        }
    }

    #[test]
    fn code_for_this_machine_is_an_image_mapped_from_its_file_on_every_compiler() {
        let foreign = if cfg!(target_arch = "x86_64") {
            "aarch64-unknown-linux-gnu"
        } else {
            "x86_64-unknown-linux-gnu"
        };
        for compiler in Compiler::ALL.into_iter().filter(|c| c.available()) {
            let engine = WasmerEngine::new(compiler, None).unwrap();
            let artifact = engine.compile(EMPTY_FUNCTION).unwrap().serialize().unwrap();
            assert!(
                artifact.code.starts_with(ELF_MAGIC),
                "{compiler:?}: not an ELF image"
            );
            let module = load(&engine, &artifact);
            assert!(module.is_ok(), "{compiler:?}: {:?}", module.err());

            let foreign = WasmerEngine::new(compiler, Some(foreign));
            let foreign = foreign.unwrap().compile(EMPTY_FUNCTION).unwrap();
            let foreign = foreign.serialize().unwrap().code;
            assert!(
                !foreign.starts_with(ELF_MAGIC),
                "{compiler:?}: wasmer links images of its own architecture only"
            );
        }
    }

    #[test]
    fn a_trap_in_code_loaded_from_a_trimmed_image_is_the_trap_of_the_compiled_code() {
        // The load reads the trap table through the file: what trimming left must be enough.
        let wasm = wat::parse_str(
            r#"(module (memory (export "memory") 1)
                 (func (export "_start") (drop (i32.load (i32.const 70000)))))"#,
        )
        .unwrap();
        let limits = RunLimits {
            max_memory_bytes: 64 << 20,
            max_table_elements: hako_engine_api::MAX_TABLE_ELEMENTS,
        };
        for compiler in Compiler::ALL.into_iter().filter(|c| c.available()) {
            let engine = WasmerEngine::new(compiler, None).unwrap();
            let compiled = engine.compile(&wasm).unwrap();
            let loaded = load(&engine, &compiled.serialize().unwrap()).unwrap();
            let exits: Vec<RunExit> = [compiled, loaded]
                .iter()
                .map(|module| {
                    let host = Box::new(Recording(Asked::default()));
                    module.run(host, limits, &Never).exit
                })
                .collect();
            assert!(
                matches!(&exits[0], RunExit::Trap(message) if message.contains("out of bounds")),
                "{compiler:?}: {:?}",
                exits[0]
            );
            assert_eq!(exits[0], exits[1], "{compiler:?}");
        }
    }

    #[test]
    fn a_dropped_module_gives_its_code_back() {
        let engine = WasmerEngine::new(Compiler::Cranelift, None).unwrap();
        let artifact = engine.compile(EMPTY_FUNCTION).unwrap().serialize().unwrap();
        const LOADS: usize = 64;
        let before = code_mappings();
        for _ in 0..LOADS {
            let module = load(&engine, &artifact).unwrap();
            drop(module);
            drop(engine.compile(EMPTY_FUNCTION).unwrap());
        }
        let after = code_mappings();
        // Other tests of this crate may hold a few mappings of their own meanwhile; a module
        // that kept its code would leave at least one mapping per load and per compile.
        assert!(
            after < before + LOADS / 4,
            "{} code mappings after {LOADS} loads and compiles of dropped modules (before: {before})",
            after
        );
    }
}
