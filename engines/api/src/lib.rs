//! The engine-neutral interface between hako's ABI host and an execution engine.
//!
//! An engine compiles a WebAssembly module, serializes and loads artifacts, and runs a
//! module's `_start` once per call, routing **every** import through [`Host::call`]: the
//! host sees each import as an [`Import`] with its arguments as raw 64-bit values and the
//! guest's linear memory as one byte slice. The WASI preview 1 layer, the sandbox, the
//! `subako_http` broker and the call contract live in the host and never see an engine type.
//!
//! This crate names no engine and owns no policy: it does not decide what a crash is, it only
//! reports how a run ended ([`RunExit`]).
//!
//! ```
//! use hako_engine_api::{Import, ValType};
//! let write = Import::lookup("wasi_snapshot_preview1", "fd_write").unwrap();
//! assert_eq!(write.params(), &[ValType::I32; 4]);
//! assert_eq!(write.results(), &[ValType::I32]);
//! ```
#![deny(unsafe_code)]

mod imports;

use std::sync::Arc;

pub use bytes::Bytes;

pub use imports::{Import, ValType, HTTP_MODULE, WASI_MODULE};

/// Why a host call stops the guest instead of returning to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The guest called `proc_exit` with this status.
    Exit(u32),
    /// The host decided the run is over (a crash it detected, a deadline, a limit). The host
    /// remembers why; the engine only unwinds the guest.
    Abort,
}

/// The ABI host as an engine sees it: one method every import goes through.
pub trait Host: Send {
    /// Runs `import` with `args` (each `i32` zero-extended from `u32`, each `i64` as is) over
    /// the guest's whole linear `memory`. Returns the import's single `i32` result (ignored
    /// for imports without a result), or a [`Stop`] that ends the run.
    fn call(&mut self, import: Import, args: &[u64], memory: &mut [u8]) -> Result<i32, Stop>;

    /// The host as `Any`, so that its owner can take its concrete state back after a run.
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
}

/// Wakes a guest that runs too long. Cheap to clone and safe to call from any thread, any
/// number of times, before, during or after the run.
pub trait Interrupt: Send + Sync {
    /// Asks the engine to stop the guest at the next opportunity. A guest blocked in a host
    /// call is not woken by this: the host must make that call return.
    fn interrupt(&self);
}

/// Told when a run begins, so that a deadline can reach it.
pub trait Watchdog {
    /// Called once per run, before any guest code (including a start function) executes.
    fn arm(&self, interrupt: Arc<dyn Interrupt>);
}

/// Limits an engine enforces itself while it runs a module.
///
/// Tables count against the memory cap: each table the module defines reserves
/// [`TABLE_ELEMENT_BYTES`] for every element it may ever hold (its declared maximum, or
/// `max_table_elements` when it declares none or a larger one) when the instance is made, and
/// the linear memory may grow only into what the reservations leave of `max_memory_bytes`. An
/// instance whose initial memory and reservations do not fit is refused as out of memory, as is
/// a table whose minimum is above `max_table_elements`; `table.grow` past a table's bound
/// answers -1. Every engine counts the same way, so a guest meets the same bounds on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// The most linear memory the guest may have, in bytes (a multiple of 64 KiB), tables'
    /// reservations included.
    pub max_memory_bytes: u64,
    /// The most elements any one table may hold (at most [`MAX_TABLE_ELEMENTS`]).
    pub max_table_elements: u32,
}

/// The most elements a table may ever hold on any engine, and the default bound of a run: the
/// bound the module check refuses a larger declared minimum against.
pub const MAX_TABLE_ELEMENTS: u32 = 65_536;

/// What one table element counts against the memory cap: a reference, as both engines store it.
pub const TABLE_ELEMENT_BYTES: u64 = 8;

impl RunLimits {
    /// The bytes a table reserves against the memory cap: its bound (its declared `maximum`,
    /// or this run's table bound when that is lower or it declares none) times
    /// [`TABLE_ELEMENT_BYTES`].
    pub fn table_reservation(&self, maximum: Option<u64>) -> u64 {
        let bound = u64::from(self.max_table_elements);
        maximum.map_or(bound, |maximum| maximum.min(bound)) * TABLE_ELEMENT_BYTES
    }
}

/// How a run ended, as far as the engine can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunExit {
    /// `_start` returned.
    Returned,
    /// The guest called `proc_exit`.
    Exited(u32),
    /// A host call answered [`Stop::Abort`].
    Aborted,
    /// The guest trapped (after instantiation, or in its start function).
    Trap(String),
    /// The guest asked for more memory than its cap allowed, then failed (a trap after a refused
    /// `memory.grow`, or an initial memory above the cap).
    OutOfMemory(String),
    /// An [`Interrupt`] stopped the guest.
    Interrupted,
    /// The module could not be instantiated for a reason that is no guest behaviour (for
    /// example a missing export); the message names it.
    Instantiate(String),
}

/// The result of one run: how it ended, the host handed back, and what the run used.
pub struct RunResult {
    pub exit: RunExit,
    pub host: Box<dyn Host>,
    /// The guest's linear memory at the end, in bytes.
    pub memory_bytes: u64,
    /// What is left of the run to drop: the instance and its memory.
    pub teardown: Teardown,
}

/// What is left of a finished run: its instance and memory, whose drop puts the memory back
/// for the next run (an engine's pool resets it then). Nothing of it is read again, so a
/// caller may send the call's answer first and drop this after; dropping it at once is always
/// correct. Until it is dropped the memory stays out of the pool, so a caller holds at most
/// one per thread that runs calls. It stays on the thread that ran the call (an engine's
/// instance need not be `Send`).
#[derive(Default)]
#[must_use = "a teardown does its work when dropped; drop it where the work belongs"]
pub struct Teardown {
    _leftover: Option<Box<dyn std::any::Any>>,
}

impl Teardown {
    /// A teardown of `leftover`, dropped with it.
    pub fn new<T: 'static>(leftover: T) -> Self {
        Teardown {
            _leftover: Some(Box::new(leftover)),
        }
    }

    /// Drops what the run left, now.
    pub fn finish(self) {}
}

/// What identifies compiled code: an artifact made under one identity is only ever loaded by
/// an engine of the same identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EngineIdentity {
    /// The engine, e.g. `wasmer`.
    pub engine: &'static str,
    /// The engine's exact version.
    pub version: &'static str,
    /// The compiler, e.g. `cranelift`.
    pub compiler: String,
    /// The target triple code is compiled for.
    pub triple: String,
    /// The CPU features code may use, sorted and comma-separated.
    pub cpu_features: String,
    /// The compile settings that change the code one compiler makes for one target: the
    /// WebAssembly features, how memories are laid out (bounds, guard), checks compiled in.
    /// One line, written by the engine; two engines of different settings never share code.
    /// Fixed for a build, like `engine` and `version`, so that keys made on every call copy no
    /// string for it.
    pub settings: &'static str,
}

impl EngineIdentity {
    /// A single line naming every part, used in artifact headers and messages.
    pub fn to_line(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.engine, self.version, self.compiler, self.triple, self.cpu_features, self.settings
        )
    }
}

/// An engine failure that is not a guest's behaviour.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("compiling with {compiler}: {message}")]
    Compile { compiler: String, message: String },
    #[error("serializing the compiled module: {0}")]
    Serialize(String),
    #[error("loading an artifact: {0}")]
    Deserialize(String),
    #[error("this engine compiles for {triple} and cannot run its code here")]
    ForeignTarget { triple: String },
    #[error("{0}")]
    Unsupported(String),
}

/// A module's initial linear memory, laid out ahead of time from its active data segments, as a
/// compiled module hands it to the store: written page-aligned beside the code, and mapped (never
/// copied) into each instance's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryImage {
    /// The guest address of the image's first byte (a multiple of [`IMAGE_ALIGN`]).
    pub start: u64,
    /// The image's bytes, a multiple of [`IMAGE_ALIGN`] long.
    pub bytes: Vec<u8>,
}

/// The alignment of memory images: in the artifact file, in guest memory and in length. The
/// wasm page size, a multiple of every page size Linux uses on x86-64 and aarch64.
pub const IMAGE_ALIGN: u64 = 65_536;

/// What an engine makes of a compiled module for the artifact store.
#[derive(Debug)]
pub struct Serialized {
    /// The engine's code and metadata; it starts the artifact file.
    pub code: Vec<u8>,
    /// The initial linear memory, when the engine took it out of the module's data segments.
    pub image: Option<MemoryImage>,
    /// How the module's memory is initialised, in words, for the artifact header and the
    /// operator (for example "image of 8.0 MiB at 0x100000", or why the segments are copied).
    pub memory_init: String,
}

/// Where an artifact file holds its memory image: `len` bytes from `offset` (both multiples of
/// [`IMAGE_ALIGN`]), for the guest address `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRegion {
    pub offset: u64,
    pub len: u64,
    pub start: u64,
}

/// A verified artifact file as the store hands it to an engine.
#[derive(Debug, Clone, Copy)]
pub struct ArtifactFile<'a> {
    /// The open file; it starts with the code and does not change while a module maps it.
    pub file: &'a std::fs::File,
    /// The length of the code, the file's first bytes.
    pub code_len: u64,
    /// The memory image, when [`Serialized::image`] had one.
    pub image: Option<ImageRegion>,
}

impl ArtifactFile<'_> {
    /// Reads the code, for an engine that does not map it from the file.
    pub fn read_code(&self) -> std::io::Result<Bytes> {
        use std::os::unix::fs::FileExt;
        let len = usize::try_from(self.code_len).map_err(std::io::Error::other)?;
        let mut code = vec![0u8; len];
        self.file.read_exact_at(&mut code, 0)?;
        Ok(Bytes::from(code))
    }

    /// Whether the code starts with `magic` (an engine telling its formats apart).
    pub fn code_starts_with(&self, magic: &[u8]) -> std::io::Result<bool> {
        use std::os::unix::fs::FileExt;
        if (magic.len() as u64) > self.code_len {
            return Ok(false);
        }
        let mut start = vec![0u8; magic.len()];
        self.file.read_exact_at(&mut start, 0)?;
        Ok(start == magic)
    }
}

/// A compiled module, ready to run any number of times, from any thread.
pub trait Module: Send + Sync {
    /// What [`Engine::load`] turns back into this module.
    fn serialize(&self) -> Result<Serialized, EngineError>;

    /// Instantiates the module under `limits` without running any of its code (a start
    /// function included), ahead of the one run [`Prepared::run`] makes of it. An instantiation
    /// that fails is kept, and reported by that run. Never panics on a guest's behaviour.
    fn prepare(&self, limits: RunLimits) -> Box<dyn Prepared>;

    /// Instantiates the module with every import routed to `host`, runs `_start` once, and
    /// reports how it ended: [`Module::prepare`], then [`Prepared::run`].
    fn run(&self, host: Box<dyn Host>, limits: RunLimits, watchdog: &dyn Watchdog) -> RunResult {
        self.prepare(limits).run(host, watchdog)
    }
}

/// An instance made ahead of its run, in which no guest code has run: it serves exactly one run
/// and is dropped with it. Dropping it unrun gives its memory back as a finished run's
/// [`Teardown`] does. It stays on the thread that made it (an engine's instance need not be
/// `Send`).
pub trait Prepared {
    /// Routes every import to `host`, arms `watchdog`, runs the start function if the module has
    /// one, then `_start`, and reports how the run ended. Never panics on a guest's behaviour.
    fn run(self: Box<Self>, host: Box<dyn Host>, watchdog: &dyn Watchdog) -> RunResult;
}

/// An execution engine with one compiler for one target.
pub trait Engine: Send + Sync {
    /// What code from this engine is, for artifact keys and headers.
    fn identity(&self) -> &EngineIdentity;

    /// Whether this engine can run its own code on this machine (false for a cross-compiling
    /// engine).
    fn runs_here(&self) -> bool;

    /// Compiles a validated module.
    fn compile(&self, wasm: &[u8]) -> Result<Arc<dyn Module>, EngineError>;

    /// Loads an artifact: its code (which an engine whose code is an executable image maps
    /// from the file, and any other reads) and its memory image (mapped from the file into each
    /// instance's memory).
    ///
    /// # Safety
    /// `artifact` must be exactly what [`Module::serialize`] produced on an engine with this
    /// [`EngineIdentity`], laid out by the store; its bytes are native code and memory contents
    /// and are not checked. Callers verify checksums and a header first. The file must not
    /// change while the module lives (it is replaced by renaming, never written to).
    #[allow(unsafe_code)] // the contract is on the caller; this crate runs nothing
    unsafe fn load(&self, artifact: ArtifactFile<'_>) -> Result<Arc<dyn Module>, EngineError>;
}
