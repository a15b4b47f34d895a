//! Choosing an engine: the compilers this build offers, the singlepass-to-cranelift fallback for
//! modules that use SIMD, and one engine per (compiler, target) kept for the process. This is
//! the only file of the host crate that names an engine crate; everything else sees
//! [`hako_engine_api::Engine`].

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use hako_engine_api::{Engine, EngineError};
use hako_engine_wasmer::WasmerEngine;

pub use hako_engine_wasmer::Compiler;

/// The compiler a call uses when none is asked for.
pub const DEFAULT_COMPILER: Compiler = Compiler::Cranelift;

/// Parses a compiler name from the command line.
pub fn parse_compiler(name: &str) -> Result<Compiler, EngineError> {
    Compiler::from_str(name)
}

/// The compiler that will really compile a module: singlepass cannot compile SIMD, so a module
/// that uses it falls back to cranelift. The second value says so when it happens.
pub fn effective_compiler(asked: Compiler, uses_simd: bool) -> (Compiler, Option<String>) {
    if uses_simd && !asked.supports_simd() {
        let fallback = Compiler::Cranelift;
        let note = format!(
            "the module uses SIMD, which {} cannot compile: compiled with {} instead",
            asked.name(),
            fallback.name()
        );
        (fallback, Some(note))
    } else {
        (asked, None)
    }
}

/// The engine for `compiler` and `target` (`None`: this machine), made once per process.
pub fn engine(compiler: Compiler, target: Option<&str>) -> Result<Arc<dyn Engine>, EngineError> {
    type Engines = Mutex<HashMap<(Compiler, Option<String>), Arc<dyn Engine>>>;
    static ENGINES: OnceLock<Engines> = OnceLock::new();
    let engines = ENGINES.get_or_init(Default::default);
    let key = (compiler, target.map(str::to_string));
    let mut engines = engines.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(engine) = engines.get(&key) {
        return Ok(Arc::clone(engine));
    }
    let engine: Arc<dyn Engine> = Arc::new(WasmerEngine::new(compiler, target)?);
    engines.insert(key, Arc::clone(&engine));
    Ok(engine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_modules_asked_for_singlepass_fall_back_to_cranelift() {
        let (compiler, note) = effective_compiler(Compiler::Singlepass, true);
        assert_eq!(compiler, Compiler::Cranelift);
        assert!(note.unwrap().contains("SIMD"));
        assert_eq!(
            effective_compiler(Compiler::Singlepass, false),
            (Compiler::Singlepass, None)
        );
        assert_eq!(
            effective_compiler(Compiler::Cranelift, true),
            (Compiler::Cranelift, None)
        );
    }

    #[test]
    fn an_unknown_compiler_is_named_in_the_error() {
        let err = parse_compiler("v8").unwrap_err().to_string();
        assert!(err.contains("v8"), "{err}");
    }

    #[test]
    fn engines_are_made_once_per_compiler_and_target() {
        let a = engine(Compiler::Cranelift, None).unwrap();
        let b = engine(Compiler::Cranelift, None).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.runs_here());
    }
}
