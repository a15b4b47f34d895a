//! Comparison baselines for `hako bench`: WebAssembly runtimes run the way a typical host of
//! theirs runs a WASI command, so that hako's own engines can be timed beside them.
//!
//! - `wasmtime-wasi` (feature `wasmtime-wasi`): wasmtime with the pooling allocator and
//!   wasmtime-wasi's preview 1 (`wasmtime_wasi::p1`), an `InstancePre`, a fresh store per call;
//! - `wasmer-wasix` (feature `wasmer-wasix`): wasmer (cranelift) with wasmer-wasix's `WasiEnv`
//!   and its pipes, to show what a WASI layer costs.
//!
//! Each runs one ABI 1 call the same way: the request line waiting on stdin, `argv` of one
//! entry and no environment, `/volume/tmp` preopened to a fresh temp folder, `/package`
//! preopened read-only to the package's assets when it has some, no network; `_start` must end
//! with exit status 0, and the first line the guest printed on stdout is the answer.
//!
//! Both link `subako_http.request` and `subako_http.read_response` to stubs that answer
//! [`HTTP_UNAVAILABLE`] (the ABI's "no answer held"), so every ABI 1 module instantiates, and a
//! guest that asks for the network learns it has none.
//!
//! This crate is engine-neutral at its surface: [`Runtime`] and [`Compiled`] name no engine
//! type, so the bench times baselines without knowing what they are. It does not parse
//! JSON-RPC (the bench checks answers with hako's codec) or enforce hako's call contract (time
//! and memory limits, crash kinds).
//!
//! ```
//! // A build without the baseline features offers none, and says which exist.
//! let names = hako_engine_baseline::available();
//! for name in hako_engine_baseline::ALL {
//!     assert_eq!(names.contains(name), hako_engine_baseline::runtime(name).is_ok());
//! }
//! ```

use std::path::Path;
use std::sync::Arc;

#[cfg(feature = "wasmer-wasix")]
mod wasmer_wasix;
#[cfg(feature = "wasmtime-wasi")]
mod wasmtime_wasi;

/// Every baseline's name, whether or not this build has it.
pub const ALL: &[&str] = &["wasmtime-wasi", "wasmer-wasix"];

/// The most stdout a call keeps (the ABI's limit); more is an error.
pub const STDOUT_LIMIT: usize = 1 << 20;

/// What the `subako_http` stubs answer: `-2`, no answer held.
pub const HTTP_UNAVAILABLE: i32 = -2;

/// What a baseline failed to do.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("{0} is not a baseline (baselines: {list})", list = ALL.join(", "))]
    Unknown(String),
    #[error("this build has no {name} baseline (build with --features {name})")]
    NotBuilt { name: String },
    #[error("setting up {runtime}: {message}")]
    Setup {
        runtime: &'static str,
        message: String,
    },
    #[error("compiling with {runtime}: {message}")]
    Compile {
        runtime: &'static str,
        message: String,
    },
    #[error("serializing with {runtime}: {message}")]
    Serialize {
        runtime: &'static str,
        message: String,
    },
    #[error("loading an artifact with {runtime}: {message}")]
    Load {
        runtime: &'static str,
        message: String,
    },
    #[error("the guest failed on {runtime}: {message}")]
    Guest {
        runtime: &'static str,
        message: String,
        /// The end of what the guest wrote to stderr.
        stderr: String,
    },
}

/// A comparison runtime with its own WASI layer.
pub trait Runtime: Send + Sync {
    /// The baseline's name, one of [`ALL`].
    fn name(&self) -> &'static str;

    /// The crates it is built from, with their exact versions.
    fn versions(&self) -> Vec<(&'static str, &'static str)>;

    /// Compiles a module.
    fn compile(&self, wasm: &[u8]) -> Result<Arc<dyn Compiled>, BaselineError>;

    /// Loads an artifact file the way this runtime's hosts usually do (memory-mapped where the
    /// runtime offers it).
    ///
    /// # Safety
    /// `path` must hold exactly what [`Compiled::serialize`] of this runtime, in this build,
    /// produced: the file is native code and its checks are the runtime's own.
    unsafe fn load(&self, path: &Path) -> Result<Arc<dyn Compiled>, BaselineError>;
}

/// A compiled module, ready for any number of calls, from any thread.
pub trait Compiled: Send + Sync {
    /// The artifact bytes [`Runtime::load`] reads back.
    fn serialize(&self) -> Result<Vec<u8>, BaselineError>;

    /// Runs one call: a fresh instance with `call.request_line` on stdin. Returns the first
    /// line of stdout (without its newline) once the guest has exited with status 0.
    fn call(&self, call: &Call<'_>) -> Result<Vec<u8>, BaselineError>;
}

/// One call's input.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// `argv[0]`.
    pub program: &'a str,
    /// The request line, with its newline.
    pub request_line: &'a [u8],
    /// The package's assets folder, preopened read-only as `/package`.
    pub package_assets: Option<&'a Path>,
}

/// The baselines this build has, in the order of [`ALL`].
pub fn available() -> Vec<&'static str> {
    ALL.iter()
        .copied()
        .filter(|name| {
            (*name == "wasmtime-wasi" && cfg!(feature = "wasmtime-wasi"))
                || (*name == "wasmer-wasix" && cfg!(feature = "wasmer-wasix"))
        })
        .collect()
}

/// The baseline called `name`.
pub fn runtime(name: &str) -> Result<Arc<dyn Runtime>, BaselineError> {
    match name {
        #[cfg(feature = "wasmtime-wasi")]
        "wasmtime-wasi" => Ok(Arc::new(wasmtime_wasi::WasmtimeWasi::new()?)),
        #[cfg(feature = "wasmer-wasix")]
        "wasmer-wasix" => Ok(Arc::new(wasmer_wasix::WasmerWasix::new()?)),
        other if ALL.contains(&other) => Err(BaselineError::NotBuilt {
            name: other.to_string(),
        }),
        other => Err(BaselineError::Unknown(other.to_string())),
    }
}

/// The first line of `stdout`, without its newline; `None` when no line was finished.
#[cfg_attr(
    not(any(feature = "wasmtime-wasi", feature = "wasmer-wasix")),
    allow(dead_code)
)]
fn first_line(stdout: &[u8]) -> Option<&[u8]> {
    let end = stdout.iter().position(|&b| b == b'\n')?;
    Some(&stdout[..end])
}

/// The last 4 KiB of `stderr`, as text.
#[cfg_attr(
    not(any(feature = "wasmtime-wasi", feature = "wasmer-wasix")),
    allow(dead_code)
)]
fn stderr_tail(stderr: &[u8]) -> String {
    let start = stderr.len().saturating_sub(4096);
    String::from_utf8_lossy(&stderr[start..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_baseline_is_named_with_the_list() {
        let err = runtime("v8").err().expect("v8 is no baseline").to_string();
        assert!(err.contains("v8") && err.contains("wasmtime-wasi"), "{err}");
    }

    #[test]
    fn the_answer_is_the_first_finished_line() {
        assert_eq!(
            first_line(b"{\"a\":1}\n{\"b\":2}\n"),
            Some(&b"{\"a\":1}"[..])
        );
        assert_eq!(first_line(b"no newline"), None);
    }

    #[test]
    fn stderr_keeps_its_last_four_kibibytes() {
        let long = vec![b'x'; 5000];
        assert_eq!(stderr_tail(&long).len(), 4096);
    }
}
