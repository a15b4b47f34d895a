//! Choosing an engine: the engine configurations this build offers (an engine and the compiler
//! its code comes from), the singlepass-to-cranelift fallback for modules that use SIMD, and
//! one engine per (configuration, target) kept for the process. This is the only file of the
//! host crate that names an engine crate; everything else sees [`hako_engine_api::Engine`].

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hako_engine_api::{Engine, EngineError};
use hako_engine_wasmer::WasmerEngine;

pub use hako_engine_wasmer::{Compiler, LLVM_WORKER};

/// The engines the ABI host can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineKind {
    /// wasmer, with the singlepass, cranelift or llvm compiler.
    Wasmer,
    /// wasmtime (its own cranelift), kept for side-by-side comparisons.
    Wasmtime,
}

impl EngineKind {
    /// The engine's name on the command line and in artifact keys.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Wasmer => "wasmer",
            EngineKind::Wasmtime => "wasmtime",
        }
    }

    /// Whether this build includes the engine.
    pub fn available(self) -> bool {
        match self {
            EngineKind::Wasmer => true,
            EngineKind::Wasmtime => cfg!(feature = "wasmtime"),
        }
    }
}

impl FromStr for EngineKind {
    type Err = EngineError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "wasmer" => Ok(EngineKind::Wasmer),
            "wasmtime" if EngineKind::Wasmtime.available() => Ok(EngineKind::Wasmtime),
            "wasmtime" => Err(EngineError::Unsupported(
                "this build has no wasmtime engine (build with --features wasmtime)".into(),
            )),
            other => Err(EngineError::Unsupported(format!(
                "unknown engine {other:?}: this build offers {}",
                available_kinds()
            ))),
        }
    }
}

fn available_kinds() -> String {
    [EngineKind::Wasmer, EngineKind::Wasmtime]
        .into_iter()
        .filter(|kind| kind.available())
        .map(EngineKind::name)
        .collect::<Vec<_>>()
        .join(" and ")
}

/// What a call runs on: an engine and the compiler its code comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EngineConfig {
    kind: EngineKind,
    compiler: Compiler,
}

impl EngineConfig {
    /// The configuration a call uses when none is asked for: wasmer with cranelift.
    pub const DEFAULT: EngineConfig = EngineConfig {
        kind: EngineKind::Wasmer,
        compiler: Compiler::Cranelift,
    };

    /// wasmer with `compiler`.
    pub const fn wasmer(compiler: Compiler) -> Self {
        Self {
            kind: EngineKind::Wasmer,
            compiler,
        }
    }

    /// `kind` with `compiler` (`None`: the engine's default compiler). wasmtime compiles only
    /// with its own cranelift. A wasmer compiler this build lacks is accepted: its artifacts,
    /// made by another build, still load ([`EngineConfig::compiles_here`] tells).
    pub fn new(kind: EngineKind, compiler: Option<Compiler>) -> Result<Self, EngineError> {
        if !kind.available() {
            return Err(kind.name().parse::<EngineKind>().unwrap_err());
        }
        let compiler = match (kind, compiler) {
            (EngineKind::Wasmer, None) => DEFAULT_COMPILER,
            (EngineKind::Wasmer, Some(compiler)) => compiler,
            (EngineKind::Wasmtime, None | Some(Compiler::Cranelift)) => Compiler::Cranelift,
            (EngineKind::Wasmtime, Some(other)) => {
                return Err(EngineError::Unsupported(format!(
                    "wasmtime compiles with its own cranelift, not {}",
                    other.name()
                )))
            }
        };
        Ok(Self { kind, compiler })
    }

    /// Whether this build can compile with the configuration, not only load its artifacts.
    pub fn compiles_here(self) -> bool {
        match self.kind {
            EngineKind::Wasmer => self.compiler.available(),
            EngineKind::Wasmtime => self.kind.available(),
        }
    }

    /// Whether this process compiles with the configuration itself: the `hako` command
    /// compiles with LLVM in its worker `hako-llvm` (see [`crate::compile`]), which links LLVM
    /// where `hako` does not.
    pub fn compiles_in_process(self) -> bool {
        match self.kind {
            EngineKind::Wasmer => self.compiler.compiles_in_process(),
            // wasmtime has no compile worker: it compiles wherever its build can.
            EngineKind::Wasmtime => self.compiles_here(),
        }
    }

    pub fn kind(self) -> EngineKind {
        self.kind
    }

    pub fn compiler(self) -> Compiler {
        self.compiler
    }

    /// The configuration's name as `hako bench` and stored records spell it:
    /// `wasmer-singlepass`, `wasmer-cranelift`, `wasmer-llvm`, `wasmtime`.
    pub fn name(self) -> String {
        match self.kind {
            EngineKind::Wasmer => format!("wasmer-{}", self.compiler.name()),
            EngineKind::Wasmtime => "wasmtime".to_string(),
        }
    }

    /// Whether a module that uses SIMD can be compiled by this configuration.
    pub fn supports_simd(self) -> bool {
        match self.kind {
            EngineKind::Wasmer => self.compiler.supports_simd(),
            EngineKind::Wasmtime => true,
        }
    }

    /// Every configuration this build offers, in a fixed order.
    pub fn all() -> Vec<EngineConfig> {
        let mut configs: Vec<EngineConfig> = Compiler::ALL
            .into_iter()
            .filter(|compiler| compiler.available())
            .map(EngineConfig::wasmer)
            .collect();
        if EngineKind::Wasmtime.available() {
            configs.push(EngineConfig {
                kind: EngineKind::Wasmtime,
                compiler: Compiler::Cranelift,
            });
        }
        configs
    }
}

impl fmt::Display for EngineConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for EngineConfig {
    type Err = EngineError;

    /// Parses a configuration name (see [`EngineConfig::name`]).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let (engine, compiler) = match name.split_once('-') {
            Some((engine, compiler)) => (engine, Some(compiler.parse::<Compiler>()?)),
            None => (name, None),
        };
        EngineConfig::new(engine.parse()?, compiler)
    }
}

/// The compiler a call uses when none is asked for.
pub const DEFAULT_COMPILER: Compiler = Compiler::Cranelift;

/// Parses a compiler name from the command line.
pub fn parse_compiler(name: &str) -> Result<Compiler, EngineError> {
    Compiler::from_str(name)
}

/// Parses an engine name from the command line.
pub fn parse_engine(name: &str) -> Result<EngineKind, EngineError> {
    EngineKind::from_str(name)
}

/// The configuration that will really compile a module: singlepass cannot compile SIMD, so a
/// module that uses it falls back to cranelift on the same engine. The second value says so
/// when it happens.
pub fn effective_config(asked: EngineConfig, uses_simd: bool) -> (EngineConfig, Option<String>) {
    if uses_simd && !asked.supports_simd() {
        let fallback = EngineConfig {
            kind: asked.kind,
            compiler: Compiler::Cranelift,
        };
        let note = format!(
            "the module uses SIMD, which {} cannot compile: compiled with {} instead",
            asked.compiler.name(),
            fallback.compiler.name()
        );
        (fallback, Some(note))
    } else {
        (asked, None)
    }
}

/// The engine for `config` and `target` (`None`: this machine), made once per process.
pub fn engine(config: EngineConfig, target: Option<&str>) -> Result<Arc<dyn Engine>, EngineError> {
    type Engines = Mutex<HashMap<(EngineConfig, Option<String>), Arc<dyn Engine>>>;
    static ENGINES: OnceLock<Engines> = OnceLock::new();
    let engines = ENGINES.get_or_init(Default::default);
    let key = (config, target.map(str::to_string));
    let mut engines = engines.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(engine) = engines.get(&key) {
        return Ok(Arc::clone(engine));
    }
    let engine = make_engine(config, target)?;
    engines.insert(key, Arc::clone(&engine));
    Ok(engine)
}

/// The engine for `config` that loads artifacts precompiled for any machine of this machine's
/// triple (`hako upload --target TRIPLE`, usually on another machine), when it differs from
/// the `native` engine and this CPU has every feature that code may use. Only wasmer makes
/// such artifacts; wasmtime artifacts are always made for the machine that runs them.
pub fn baseline_engine(
    config: EngineConfig,
    native: &dyn Engine,
) -> Result<Option<Arc<dyn Engine>>, EngineError> {
    if config.kind != EngineKind::Wasmer {
        return Ok(None);
    }
    let baseline = engine(config, Some(&native.identity().triple))?;
    let usable = baseline.runs_here() && baseline.identity() != native.identity();
    Ok(usable.then_some(baseline))
}

fn make_engine(config: EngineConfig, target: Option<&str>) -> Result<Arc<dyn Engine>, EngineError> {
    match config.kind {
        EngineKind::Wasmer => Ok(Arc::new(WasmerEngine::new(config.compiler, target)?)),
        EngineKind::Wasmtime => wasmtime_engine(target, wasmtime_pool()),
    }
}

/// An engine for `config` and `target` that only compiles, for a process that runs nothing
/// (the compile worker): the same code as [`engine`]'s, without the instance pool wasmtime's
/// engine reserves up front, whose tables alone would be most of a compile's memory bound.
pub fn compiling_engine(
    config: EngineConfig,
    target: Option<&str>,
) -> Result<Arc<dyn Engine>, EngineError> {
    match config.kind {
        EngineKind::Wasmer => engine(config, target),
        EngineKind::Wasmtime => wasmtime_engine(target, Pool::CompileOnly),
    }
}

/// Whether this process runs its instances one after another; see [`one_instance_at_a_time`].
static ONE_INSTANCE_AT_A_TIME: AtomicBool = AtomicBool::new(false);

/// The room of a process that runs its instances one after another. A command makes one
/// (discovery, then the call, each dropped before the next); the rest is margin.
const ONE_AT_A_TIME: u32 = 4;

/// Says that this process runs its instances one after another (`hako call`, `run`, `tools`,
/// `upload`, `check`), before its first engine is made: wasmtime's engine sizes its pool for
/// [`ONE_AT_A_TIME`] instances instead of 1,000. The pool's setup grows with its slots (the
/// reservations of their memories and tables, and their bookkeeping): greet's call in a fresh
/// process on wasmtime took 2.88–2.99 ms with 1,000 slots and 2.74–2.75 ms with 4. An engine
/// already made keeps its pool; wasmer's pool reserves nothing up front and is not concerned.
/// Without it (`hako serve`, `hako bench`, the tests), the engine's default pool of 1,000.
pub(crate) fn one_instance_at_a_time() {
    ONE_INSTANCE_AT_A_TIME.store(true, Ordering::Relaxed);
}

/// What a wasmtime engine's instance pool holds room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pool {
    /// No pool: an engine that only compiles (the compile worker).
    CompileOnly,
    /// This many instances at once ([`ONE_AT_A_TIME`], see [`one_instance_at_a_time`]).
    Slots(u32),
    /// The engine's own default.
    Default,
}

/// The pool of a wasmtime engine made now to run instances.
fn wasmtime_pool() -> Pool {
    if ONE_INSTANCE_AT_A_TIME.load(Ordering::Relaxed) {
        Pool::Slots(ONE_AT_A_TIME)
    } else {
        Pool::Default
    }
}

#[cfg(not(feature = "wasmtime"))]
fn wasmtime_engine(_target: Option<&str>, _pool: Pool) -> Result<Arc<dyn Engine>, EngineError> {
    Err("wasmtime".parse::<EngineKind>().unwrap_err())
}

#[cfg(feature = "wasmtime")]
fn wasmtime_engine(target: Option<&str>, pool: Pool) -> Result<Arc<dyn Engine>, EngineError> {
    use hako_engine_wasmtime::{PoolConfig, WasmtimeEngine};
    let pool = match pool {
        Pool::CompileOnly => PoolConfig::COMPILE_ONLY,
        Pool::Slots(slots) => PoolConfig {
            slots,
            ..PoolConfig::DEFAULT
        },
        Pool::Default => PoolConfig::DEFAULT,
    };
    Ok(Arc::new(WasmtimeEngine::with_pool(target, pool)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_modules_asked_for_singlepass_fall_back_to_cranelift() {
        let singlepass = EngineConfig::wasmer(Compiler::Singlepass);
        let cranelift = EngineConfig::wasmer(Compiler::Cranelift);
        let (config, note) = effective_config(singlepass, true);
        assert_eq!(config, cranelift);
        assert!(note.unwrap().contains("SIMD"));
        assert_eq!(effective_config(singlepass, false), (singlepass, None));
        assert_eq!(effective_config(cranelift, true), (cranelift, None));
    }

    #[test]
    fn an_unknown_compiler_or_engine_is_named_in_the_error() {
        let err = parse_compiler("v8").unwrap_err().to_string();
        assert!(err.contains("v8"), "{err}");
        let err = parse_engine("v8").unwrap_err().to_string();
        assert!(err.contains("v8") && err.contains("wasmer"), "{err}");
        let err = "wasmer-v8".parse::<EngineConfig>().unwrap_err().to_string();
        assert!(err.contains("v8"), "{err}");
    }

    #[test]
    fn configuration_names_read_back() {
        for config in EngineConfig::all() {
            assert_eq!(config.name().parse::<EngineConfig>().unwrap(), config);
        }
        assert_eq!(
            "wasmer".parse::<EngineConfig>().unwrap(),
            EngineConfig::DEFAULT
        );
        assert_eq!(EngineConfig::DEFAULT.name(), "wasmer-cranelift");
    }

    #[test]
    fn wasmtime_is_refused_with_another_compiler_or_without_the_feature() {
        let asked = EngineConfig::new(EngineKind::Wasmtime, Some(Compiler::Singlepass));
        let err = asked.unwrap_err().to_string();
        if EngineKind::Wasmtime.available() {
            assert!(err.contains("its own cranelift"), "{err}");
        } else {
            assert!(err.contains("--features wasmtime"), "{err}");
        }
    }

    #[test]
    fn every_compiler_is_known_and_one_this_build_lacks_only_loads() {
        for compiler in Compiler::ALL {
            let config: EngineConfig = format!("wasmer-{}", compiler.name()).parse().unwrap();
            assert_eq!(config.compiler(), compiler);
            assert_eq!(config.compiles_here(), compiler.available());
            assert_eq!(EngineConfig::all().contains(&config), compiler.available());
        }
        assert_eq!(Compiler::Llvm.available(), cfg!(feature = "llvm"));
        assert!(Compiler::Llvm.supports_simd());
    }

    #[test]
    fn the_baseline_engine_makes_code_for_any_machine_of_this_triple() {
        let native = engine(EngineConfig::DEFAULT, None).unwrap();
        let baseline = baseline_engine(EngineConfig::DEFAULT, native.as_ref())
            .unwrap()
            .expect("this CPU has more features than its triple's baseline");
        assert!(baseline.runs_here());
        assert_eq!(baseline.identity().triple, native.identity().triple);
        assert_ne!(baseline.identity(), native.identity());
        let same = engine(EngineConfig::DEFAULT, Some(&native.identity().triple)).unwrap();
        assert!(Arc::ptr_eq(&same, &baseline));
    }

    #[cfg(feature = "wasmtime")]
    #[test]
    fn wasmtime_sized_for_one_instance_at_a_time_holds_a_few_and_says_when_full() {
        use hako_engine_api::{Host, Import, Interrupt, RunExit, Stop, Watchdog};

        struct NoHost;
        impl Host for NoHost {
            fn call(&mut self, _: Import, _: &[u64], _: &mut [u8]) -> Result<i32, Stop> {
                Err(Stop::Abort)
            }
            fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
                self
            }
        }
        struct NoDeadline;
        impl Watchdog for NoDeadline {
            fn arm(&self, _: Arc<dyn Interrupt>) {}
        }

        assert_eq!(hako_engine_wasmtime::PoolConfig::COMPILE_ONLY.slots, 0);
        // What serve, bench and the tests get (no test says otherwise: engines are made once
        // per process, and the tests may share one).
        assert_eq!(wasmtime_pool(), Pool::Default);
        let engine = wasmtime_engine(None, Pool::Slots(ONE_AT_A_TIME)).unwrap();
        let wasm =
            wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "_start")))"#)
                .unwrap();
        let module = engine.compile(&wasm).unwrap();
        let limits = crate::call::Limits::CALL.run_limits();
        let held: Vec<_> = (0..ONE_AT_A_TIME).map(|_| module.prepare(limits)).collect();
        let exit = module
            .prepare(limits)
            .run(Box::new(NoHost), &NoDeadline)
            .exit;
        assert!(
            matches!(&exit, RunExit::Instantiate(m) if m.contains(&format!("all {ONE_AT_A_TIME} slots"))),
            "{exit:?}"
        );
        for prepared in held {
            assert_eq!(
                prepared.run(Box::new(NoHost), &NoDeadline).exit,
                RunExit::Returned
            );
        }
        assert_eq!(
            module
                .prepare(limits)
                .run(Box::new(NoHost), &NoDeadline)
                .exit,
            RunExit::Returned
        );
    }

    #[test]
    fn engines_are_made_once_per_configuration_and_target() {
        let a = engine(EngineConfig::DEFAULT, None).unwrap();
        let b = engine(EngineConfig::DEFAULT, None).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.runs_here());
    }
}
