//! Compiling a module within bounds. A compiler given a module built against it can take
//! minutes and gigabytes (or overflow its own stack, which no `catch_unwind` survives), and a
//! compile cannot be stopped from outside the thread that runs it: so the `hako` command
//! compiles in a child process of its own (`hako __compile`, [`worker_main`]), bounded in time
//! (the parent kills it at [`CompileBounds::timeout`]) and in memory (the child's data limit,
//! `RLIMIT_DATA`, is [`CompileBounds::max_memory_bytes`]), and dying with its parent. The
//! child hands back what the engine serialized; the caller stores it as an artifact and loads
//! it from there, as any other.
//!
//! A process that did not say it can start the worker ([`compile_in_children`], which `main`
//! calls) compiles in-process, without bounds: tests and other embedders of the library.
//!
//! LLVM compiles in a worker of its own, the `hako-llvm` executable beside `hako` (a build with
//! the `llvm` feature has both): the `hako` command does not link LLVM, whose static
//! constructors and libstdc++ would cost every process 3 ms before `main`, a fresh `hako call`
//! most of all ([`compile_llvm_in_children`]). `hako-llvm` runs the same [`worker_main`], and
//! refuses to compile for a parent of another build (the parent names the identity of the
//! engine it loads artifacts with, which the worker's must equal: an artifact of another wasmer
//! is not one to load).
//!
//! This module does not decide where artifacts go (`store`) nor which configurations an upload
//! asks for (`upload`).

use std::io::{Read, Write};
use std::panic::AssertUnwindSafe;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use hako_engine_api::{EngineError, MemoryImage, Module, Serialized};

use crate::engines::{self, EngineConfig};
use crate::package::MAX_MODULE_BYTES;

/// How long a compile may take and how much memory it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileBounds {
    pub timeout: Duration,
    /// The compiling process's data limit (heap and private writable mappings, its threads'
    /// stacks included).
    pub max_memory_bytes: u64,
}

impl CompileBounds {
    /// Five minutes and 4 GiB: LLVM takes a few minutes and about 2 GiB on the largest real
    /// modules of 64 MiB; cranelift a fraction of that.
    pub const DEFAULT: CompileBounds = CompileBounds {
        timeout: Duration::from_secs(300),
        max_memory_bytes: 4 << 30,
    };
}

impl Default for CompileBounds {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a compile made nothing.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The engine refused or failed to compile the module.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The compile ran past its time limit.
    #[error("compiling with {config} took longer than {} s, the limit of a compile: the module is refused", .limit.as_secs_f64())]
    Timeout { config: String, limit: Duration },
    /// The compile ran out of its memory bound.
    #[error("compiling with {config} needed more than {} MiB, the memory bound of a compile: the module is refused", .limit >> 20)]
    Memory { config: String, limit: u64 },
    /// The compiler itself crashed (a signal, a stack overflow).
    #[error("the {config} compiler crashed on the module ({status}): {stderr}")]
    Crashed {
        config: String,
        status: String,
        stderr: String,
    },
    /// The worker could not be spoken to: the host's fault.
    #[error("running the compile worker: {0}")]
    Worker(String),
    /// The worker could not be started at all.
    #[error("starting the compile worker: {0}")]
    Spawn(std::io::Error),
    /// The worker can run here, but could not be started now (out of descriptors, processes or
    /// memory): the compile is not run unbounded instead.
    #[error("the machine is too busy to start the compile worker now ({0}); try again shortly")]
    Busy(std::io::Error),
}

impl CompileError {
    /// The rule a package broke when the compile stopped because of it, or `None` when the
    /// host is at fault (or the engine said why in its own words).
    pub fn rule(&self) -> Option<&'static str> {
        match self {
            CompileError::Timeout { .. } => Some("compile.time"),
            CompileError::Memory { .. } => Some("compile.memory"),
            CompileError::Crashed { .. } => Some("compile.crash"),
            CompileError::Engine(_)
            | CompileError::Worker(_)
            | CompileError::Spawn(_)
            | CompileError::Busy(_) => None,
        }
    }
}

/// The executable that compiles in a child process, when this process has one: the open file,
/// started as `/proc/self/fd/N`, so that the child runs the very binary of its parent even once
/// an upgrade has put another at its path.
static WORKER: OnceLock<std::fs::File> = OnceLock::new();

/// Says that `exe`, open (this process's own binary, the `hako` command), runs
/// [`worker_main`] as `exe __compile`: from now on every compile of this process runs in a
/// child, bounded.
pub fn compile_in_children(exe: std::fs::File) {
    let _ = WORKER.set(exe);
}

/// The LLVM compile worker of a process that does not link LLVM: `hako-llvm`, open, or why it
/// could not be opened.
static LLVM_WORKER: OnceLock<Result<std::fs::File, String>> = OnceLock::new();

/// Says that LLVM compiles run in `exe`, open (the `hako-llvm` executable of this build), as
/// `exe __compile`; `Err` says why there is none, and every LLVM compile of this process then
/// fails, saying so. Without this call, LLVM compiles run where every other compile does.
pub fn compile_llvm_in_children(exe: Result<std::fs::File, String>) {
    let _ = LLVM_WORKER.set(exe);
}

/// Why this process has no LLVM compile worker, when it was told of one that could not be
/// opened ([`compile_llvm_in_children`]): for a server to say at its start.
pub fn llvm_worker_missing() -> Option<&'static str> {
    LLVM_WORKER.get()?.as_ref().err().map(String::as_str)
}

/// Compiles `wasm` with `config` for `target` (`None`: this machine) within `bounds`, in a
/// child process when [`compile_in_children`] was called (LLVM: when
/// [`compile_llvm_in_children`] was).
pub fn compile(
    config: EngineConfig,
    target: Option<&str>,
    wasm: &[u8],
    bounds: CompileBounds,
) -> Result<Serialized, CompileError> {
    // A compiler of this build that this process does not link (LLVM, for `hako`).
    let worker = match LLVM_WORKER.get() {
        Some(llvm) if config.compiles_here() && !config.compiles_in_process() => match llvm {
            Ok(exe) => Some(exe),
            Err(why) => return Err(CompileError::Worker(why.clone())),
        },
        _ => WORKER.get(),
    };
    match worker {
        Some(_) if WORKER_RUNS.get() == Some(&false) => in_process(config, target, wasm),
        Some(exe) => match in_child(exe, config, target, wasm, bounds) {
            Err(CompileError::Spawn(error)) if cannot_exist(&error) => {
                // Only where this binary cannot run itself (an aarch64 binary under qemu-user,
                // on a machine without binfmt_misc), known by the first start that tells, and
                // unless a worker started before: logged once, then unbounded.
                if *WORKER_RUNS.get_or_init(|| false) {
                    return Err(CompileError::Busy(error));
                }
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::info!(
                        "cannot start the compile worker ({error}): compiles run in this \
                         process, without their time and memory bounds"
                    )
                });
                in_process(config, target, wasm)
            }
            // Out of descriptors, processes or memory: the worker exists, the machine is busy.
            Err(CompileError::Spawn(error)) => Err(CompileError::Busy(error)),
            other => {
                let _ = WORKER_RUNS.set(true);
                other
            }
        },
        None => in_process(config, target, wasm),
    }
}

/// Whether this process can start its compile worker: set by the first start that tells (a
/// worker that started, or a start that failed as only one that cannot exist fails), then
/// kept, so that a later failure to start one never makes a compile run unbounded.
static WORKER_RUNS: OnceLock<bool> = OnceLock::new();

/// Whether a failed start says the worker cannot exist here (its binary cannot be executed),
/// rather than that the machine is short of something now.
fn cannot_exist(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOEXEC | libc::ENOENT | libc::EACCES | libc::ELIBBAD)
    )
}

fn in_process(
    config: EngineConfig,
    target: Option<&str>,
    wasm: &[u8],
) -> Result<Serialized, CompileError> {
    Ok(compile_here(config, target, wasm)?.serialize()?)
}

/// Compiles `wasm` with `config` for `target` in this process, unbounded, for a caller that
/// runs the module here (and for [`compile`] where no child can be started). A compiler that
/// panics on a module built against it (an assertion of its own: wasmer's LLVM translator
/// asserts on NaN canonicalisation states a drawn module reaches) is `compile.crash`, as the
/// same panic is in the worker, instead of unwinding into the caller.
pub fn compile_here(
    config: EngineConfig,
    target: Option<&str>,
    wasm: &[u8],
) -> Result<Arc<dyn Module>, CompileError> {
    let engine = engines::engine(config, target)?;
    match std::panic::catch_unwind(AssertUnwindSafe(|| engine.compile(wasm))) {
        Ok(compiled) => Ok(compiled?),
        Err(panic) => Err(CompileError::Crashed {
            config: config.name(),
            status: "a panic".into(),
            stderr: panic_message(panic.as_ref()).to_string(),
        }),
    }
}

/// What a panic said, when it said it in words.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The name of the hidden subcommand the worker answers to.
pub const WORKER_COMMAND: &str = "__compile";

/// The first bytes of what the worker writes on stdout.
const MAGIC: &[u8; 8] = b"hako-cw1";

/// Exit statuses of the worker for an engine error, by kind.
const EXIT_COMPILE: u8 = 10;
const EXIT_SERIALIZE: u8 = 11;
const EXIT_UNSUPPORTED: u8 = 12;

/// The status of a child that could not start the worker at all.
const EXIT_NOT_STARTED: i32 = 127;

/// How much of the worker's stderr is kept for a message.
const STDERR_TAIL: usize = 2048;

fn in_child(
    exe: &std::fs::File,
    config: EngineConfig,
    target: Option<&str>,
    wasm: &[u8],
    bounds: CompileBounds,
) -> Result<Serialized, CompileError> {
    let worker = |error: std::io::Error| CompileError::Worker(error.to_string());
    use std::os::fd::AsRawFd;
    let identity = engines::engine(config, target)?.identity().to_line();
    // The child resolves the name before its descriptors close at `exec`.
    let mut command = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()));
    command
        .arg(WORKER_COMMAND)
        .arg(config.name())
        .arg(bounds.max_memory_bytes.to_string())
        .arg(identity);
    if let Some(target) = target {
        command.arg(target);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(CompileError::Spawn)?;
    let (mut stdin, mut stdout, mut stderr) = (
        child.stdin.take().expect("stdin was piped"),
        child.stdout.take().expect("stdout was piped"),
        child.stderr.take().expect("stderr was piped"),
    );
    // Each pipe has a thread of its own, so that a full pipe never stops the others, and the
    // wait below is on a channel with a deadline.
    let (done, finished) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            // A worker that died early closes its stdin: its status says why.
            let _ = stdin.write_all(wasm);
        });
        let tail = scope.spawn(move || {
            let mut bytes = Vec::new();
            let mut buffer = [0u8; 4096];
            while let Ok(read) = stderr.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                bytes.extend_from_slice(&buffer[..read]);
                let cut = bytes.len().saturating_sub(STDERR_TAIL);
                bytes.drain(..cut);
            }
            String::from_utf8_lossy(&bytes).trim().to_string()
        });
        let limit = bounds.max_memory_bytes.saturating_add(MAX_MODULE_BYTES);
        scope.spawn(move || {
            let mut bytes = Vec::new();
            let read = (&mut stdout).take(limit).read_to_end(&mut bytes);
            let _ = done.send(read.map(|_| bytes));
        });
        let output = finished.recv_timeout(bounds.timeout);
        let timed_out = output.is_err();
        if timed_out {
            // The stdout thread ends once the killed worker's pipe closes.
            let _ = child.kill();
        }
        let status = child.wait().map_err(worker)?;
        let stderr = tail.join().unwrap_or_default();
        let name = config.name();
        if timed_out {
            return Err(CompileError::Timeout {
                config: name,
                limit: bounds.timeout,
            });
        }
        let output = output.expect("the output arrived").map_err(worker)?;
        judge(&name, status, &stderr, output, bounds)
    })
}

/// What the worker's end means.
fn judge(
    config: &str,
    status: std::process::ExitStatus,
    stderr: &str,
    output: Vec<u8>,
    bounds: CompileBounds,
) -> Result<Serialized, CompileError> {
    use std::os::unix::process::ExitStatusExt;
    let compile = |message: &str| EngineError::Compile {
        compiler: config.to_string(),
        message: message.to_string(),
    };
    match status.code() {
        // What a child whose `exec` failed exits with when the failure cannot be told to the
        // parent (glibc's `posix_spawn` under an emulator that runs `vfork` as `fork`): the
        // worker never exits so itself.
        Some(EXIT_NOT_STARTED) if stderr.is_empty() && output.is_empty() => Err(
            CompileError::Spawn(std::io::Error::from_raw_os_error(libc::ENOEXEC)),
        ),
        Some(0) => decode(&output).ok_or_else(|| {
            CompileError::Worker("the compile worker's answer is not what it writes".into())
        }),
        Some(code) if code == i32::from(EXIT_COMPILE) => Err(compile(stderr).into()),
        Some(code) if code == i32::from(EXIT_SERIALIZE) => {
            Err(EngineError::Serialize(stderr.to_string()).into())
        }
        Some(code) if code == i32::from(EXIT_UNSUPPORTED) => {
            Err(EngineError::Unsupported(stderr.to_string()).into())
        }
        _ if out_of_memory(stderr) => Err(CompileError::Memory {
            config: config.to_string(),
            limit: bounds.max_memory_bytes,
        }),
        code => Err(CompileError::Crashed {
            config: config.to_string(),
            status: match (code, status.signal()) {
                (Some(code), _) => format!("exit status {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                (None, None) => "no status".into(),
            },
            stderr: stderr.to_string(),
        }),
    }
}

/// Whether the worker's last words say an allocation failed: Rust's allocator, or LLVM's
/// (its own `LLVM ERROR: out of memory`, or `std::bad_alloc`).
fn out_of_memory(stderr: &str) -> bool {
    ["memory allocation of", "out of memory", "bad_alloc"]
        .iter()
        .any(|words| stderr.contains(words))
}

/// The worker: `hako __compile CONFIG MAX_MEMORY_BYTES IDENTITY [TARGET]`, the module on
/// stdin, what the engine serialized on stdout. IDENTITY is the line of the engine the parent
/// loads the artifact with ([`hako_engine_api::EngineIdentity::to_line`]): a worker whose
/// engine's differs is another build, and compiles nothing. Dies with its parent; its data
/// limit is the bound.
pub fn worker_main(args: &[String]) -> ExitCode {
    let fail = |status: u8, message: String| {
        eprintln!("{message}");
        ExitCode::from(status)
    };
    let [config, memory, expected, rest @ ..] = args else {
        return fail(
            2,
            format!("usage: {WORKER_COMMAND} CONFIG MAX_MEMORY_BYTES IDENTITY [TARGET]"),
        );
    };
    let target = rest.first().map(String::as_str);
    // The parent may be killed: a compile no one waits for must not go on.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let Ok(memory) = memory.parse::<u64>() else {
        return fail(2, format!("not a number of bytes: {memory}"));
    };
    let limit = rustix::process::Rlimit {
        current: Some(memory),
        maximum: Some(memory),
    };
    if let Err(error) = rustix::process::setrlimit(rustix::process::Resource::Data, limit) {
        return fail(2, format!("setting the compile's memory bound: {error}"));
    }
    let config: EngineConfig = match config.parse() {
        Ok(config) => config,
        Err(error) => return fail(EXIT_UNSUPPORTED, error.to_string()),
    };
    let mut wasm = Vec::new();
    if let Err(error) = std::io::stdin()
        .lock()
        .take(MAX_MODULE_BYTES + 1)
        .read_to_end(&mut wasm)
    {
        return fail(2, format!("reading the module: {error}"));
    }
    let serialized = engines::compiling_engine(config, target)
        .and_then(|engine| {
            let identity = engine.identity().to_line();
            if identity == *expected {
                Ok(engine)
            } else {
                Err(EngineError::Unsupported(format!(
                    "the compile worker is another build than hako: its {config} engine is \
                     `{identity}`, hako's is `{expected}` (install hako and {} from one build)",
                    engines::LLVM_WORKER
                )))
            }
        })
        .and_then(|engine| engine.compile(&wasm))
        .and_then(|module| module.serialize());
    match serialized {
        Ok(serialized) => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(&encode(&serialized))
                .and_then(|()| stdout.flush())
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => fail(2, format!("writing the compiled module: {error}")),
            }
        }
        Err(EngineError::Compile { message, .. }) => fail(EXIT_COMPILE, message),
        Err(EngineError::Serialize(message)) => fail(EXIT_SERIALIZE, message),
        Err(other) => fail(EXIT_UNSUPPORTED, other.to_string()),
    }
}

/// The worker's answer: the magic, then the code, the image (its start and bytes, or a start
/// of `u64::MAX` for none) and the memory's description, each length-prefixed.
fn encode(serialized: &Serialized) -> Vec<u8> {
    let image_len = serialized
        .image
        .as_ref()
        .map_or(0, |image| image.bytes.len());
    let mut out = Vec::with_capacity(64 + serialized.code.len() + image_len);
    out.extend_from_slice(MAGIC);
    let mut field = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    field(&serialized.code);
    field(serialized.memory_init.as_bytes());
    match &serialized.image {
        Some(image) => {
            field(&image.start.to_le_bytes());
            field(&image.bytes);
        }
        None => field(&[]),
    }
    out
}

/// [`encode`] read back; `None` for anything else.
fn decode(bytes: &[u8]) -> Option<Serialized> {
    let mut rest = bytes.strip_prefix(MAGIC)?;
    let mut field = || -> Option<&[u8]> {
        let (len, tail) = rest.split_first_chunk::<8>()?;
        let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
        let (value, tail) = (tail.get(..len)?, tail.get(len..)?);
        rest = tail;
        Some(value)
    };
    let code = field()?.to_vec();
    let memory_init = String::from_utf8(field()?.to_vec()).ok()?;
    let image = match field()? {
        [] => None,
        start => {
            let start = u64::from_le_bytes(start.try_into().ok()?);
            Some(MemoryImage {
                start,
                bytes: field()?.to_vec(),
            })
        }
    };
    rest.is_empty().then_some(Serialized {
        code,
        image,
        memory_init,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v128 whose f64 lanes may hold a NaN not yet made canonical (`f64x2.trunc`), given an
    /// i32 lane (`i32x4.replace_lane`): wasmer's LLVM translator asserts that the two states
    /// agree (a debug assertion of wasmer-compiler-llvm 7.4, on in test builds). The
    /// hostile-guest fuzzer drew it.
    #[cfg(feature = "llvm")]
    const LLVM_ASSERTS: &str = r#"(module
        (func (export "_start")
          (drop (i32x4.replace_lane 1
            (f64x2.trunc (f32x4.splat (f32.neg (f32.const 1))))
            (i32.const -8192)))))"#;

    #[cfg(feature = "llvm")]
    #[test]
    fn a_compiler_that_panics_is_compile_crash_and_the_process_goes_on() {
        hako_engine_llvm::link();
        let wasm = wat::parse_str(LLVM_ASSERTS).unwrap();
        let llvm = EngineConfig::wasmer(crate::engines::Compiler::Llvm);
        match compile_here(llvm, None, &wasm) {
            Err(crashed @ CompileError::Crashed { .. }) => {
                assert_eq!(crashed.rule(), Some("compile.crash"));
                let message = crashed.to_string();
                assert!(message.contains("(a panic)"), "{message}");
                assert!(message.contains("has_pending_f64_nan"), "{message}");
            }
            // Without debug assertions the translator goes on and compiles it.
            Ok(_) if !cfg!(debug_assertions) => {}
            Ok(_) => panic!("wasmer's LLVM translator no longer asserts here: update the module"),
            Err(other) => panic!("another error than a crash: {other}"),
        }
        // This process compiles and runs on: the same compiler takes the next module.
        let next = wat::parse_str(r#"(module (func (export "_start")))"#).unwrap();
        compile_here(llvm, None, &next).expect("a compile after the panic");
    }

    #[test]
    fn an_answer_reads_back_with_and_without_an_image() {
        for image in [
            None,
            Some(MemoryImage {
                start: 65_536,
                bytes: vec![7; 65_536],
            }),
        ] {
            let serialized = Serialized {
                code: b"\x7fELF code".to_vec(),
                image: image.clone(),
                memory_init: "image of 64 KiB".into(),
            };
            let back = decode(&encode(&serialized)).unwrap();
            assert_eq!(back.code, serialized.code);
            assert_eq!(back.image, image);
            assert_eq!(back.memory_init, serialized.memory_init);
        }
    }

    #[test]
    fn anything_else_is_no_answer() {
        let good = encode(&Serialized {
            code: vec![1, 2, 3],
            image: None,
            memory_init: String::new(),
        });
        assert!(decode(&good[..good.len() - 1]).is_none());
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(&longer).is_none());
        assert!(decode(b"hako-cw0").is_none());
        assert!(decode(&[]).is_none());
    }

    #[test]
    fn the_last_words_of_a_failed_allocation_are_told_apart() {
        assert!(out_of_memory(
            "memory allocation of 34359738368 bytes failed"
        ));
        assert!(out_of_memory(
            "terminate called after throwing an instance of 'std::bad_alloc'"
        ));
        assert!(out_of_memory(
            "LLVM ERROR: out of memory\nBuffer allocation failed"
        ));
        assert!(!out_of_memory("thread 'main' has overflowed its stack"));
    }
}
