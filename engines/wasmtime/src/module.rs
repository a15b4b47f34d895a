//! A compiled module and its runs: one store per run with the host, the memory cap and the
//! interrupt; instantiation from the pre-resolved imports, ahead of the run when the module has
//! no start function (wasmtime runs a start function while it instantiates, so such a module is
//! instantiated by its run, once the interrupt can reach it); `_start`; and how the run ended,
//! as the engine-neutral [`RunExit`]. Code compiled for another target is kept as bytes and
//! never run.
//!
//! This file does not decide what a crash is: it reports how the guest stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hako_engine_api::{
    EngineError, Host, Module, Prepared, RunExit, RunLimits, RunResult, Serialized, Stop, Teardown,
    Watchdog,
};
use wasmtime::{InstancePre, PoolConcurrencyLimitError, Store, Trap, TypedFunc};

use crate::limits::{self, MemoryCap};
use crate::link::{self, describe, HostStop, RunState};
use crate::PoolConfig;

/// Code compiled for another machine: it can be stored, never run.
pub(crate) struct ForeignModule {
    pub(crate) bytes: Vec<u8>,
    pub(crate) triple: String,
}

/// wasmtime's code: its data segments stay in it, page-aligned, for its own images.
fn serialized(code: Vec<u8>) -> Serialized {
    Serialized {
        code,
        image: None,
        memory_init: "wasmtime's own copy-on-write images, from the code's data section".into(),
    }
}

impl Module for ForeignModule {
    fn serialize(&self) -> Result<Serialized, EngineError> {
        Ok(serialized(self.bytes.clone()))
    }

    fn prepare(&self, _limits: RunLimits) -> Box<dyn Prepared> {
        Box::new(Refused(RunExit::Instantiate(format!(
            "this module was compiled for {} and cannot run here",
            self.triple
        ))))
    }
}

/// A run that cannot begin: it reports why, and hands the host back.
struct Refused(RunExit);

impl Prepared for Refused {
    fn run(self: Box<Self>, host: Box<dyn Host>, _watchdog: &dyn Watchdog) -> RunResult {
        RunResult {
            exit: self.0,
            host,
            memory_bytes: 0,
            teardown: Teardown::default(),
        }
    }
}

/// A module compiled for this machine, its imports already resolved.
pub(crate) struct NativeModule {
    module: wasmtime::Module,
    /// How many tables the module defines (each reserves its bound against the memory cap).
    tables: u32,
    /// The module ready to instantiate, or why it cannot be (reported by every run).
    pre: Result<InstancePre<RunState>, String>,
    pool: PoolConfig,
    /// Whether the module is known to have a start function, which wasmtime runs while it
    /// instantiates: learnt by the first [`Module::prepare`] that met it.
    has_start: AtomicBool,
}

impl NativeModule {
    pub(crate) fn new(module: wasmtime::Module, pool: PoolConfig) -> Self {
        let pre = link::instance_pre(module.engine(), &module);
        let tables = module.resources_required().num_tables;
        Self {
            module,
            tables,
            pre,
            pool,
            has_start: AtomicBool::new(false),
        }
    }

    /// A store for one run under `limits`, with the cap as its limiter and no host yet.
    fn store(&self, limits: RunLimits) -> Store<RunState> {
        let mut store = Store::new(
            self.module.engine(),
            RunState {
                host: None,
                memory: None,
                cap: MemoryCap::new(limits, self.tables),
            },
        );
        store.limiter(|state| &mut state.cap);
        store
    }

    /// The module ready to instantiate under `limits`, or why no run of it can begin.
    fn pre(&self, limits: RunLimits) -> Result<&InstancePre<RunState>, RunExit> {
        let pre = self
            .pre
            .as_ref()
            .map_err(|message| RunExit::Instantiate(message.clone()))?;
        if limits.max_memory_bytes > self.pool.max_memory_bytes {
            return Err(RunExit::Instantiate(format!(
                "the memory cap of {} bytes is above the {} bytes a slot of the wasmtime \
                 instance pool holds",
                limits.max_memory_bytes, self.pool.max_memory_bytes
            )));
        }
        Ok(pre)
    }
}

/// Instantiates `pre` in `store` and finds its entry points, or says how instantiation ended.
fn instantiate(
    pre: &InstancePre<RunState>,
    store: &mut Store<RunState>,
    pool: PoolConfig,
    limits: RunLimits,
) -> Result<Entry, RunExit> {
    let instance = pre
        .instantiate(&mut *store)
        .map_err(|error| instantiation_failed(error, store.data().cap.refused(), pool, limits))?;
    let (memory, start) = entry_points(&instance, store).map_err(RunExit::Instantiate)?;
    Ok(Entry { memory, start })
}

/// How a run ended whose instantiation failed: in the start function, at the memory cap, for
/// want of a free slot, or for a reason that is no guest behaviour. (What can never fit a slot,
/// such as a table above the pool's limit, was refused when the module was compiled or
/// loaded.)
fn instantiation_failed(
    error: wasmtime::Error,
    refused: bool,
    pool: PoolConfig,
    limits: RunLimits,
) -> RunExit {
    if error.is::<HostStop>() || error.is::<Trap>() {
        return classify(&error, refused);
    }
    if refused {
        return RunExit::OutOfMemory(format!(
            "the module's initial memory and tables are above the cap of {} bytes \
             (or a table above the bound of {} elements): {}",
            limits.max_memory_bytes,
            limits.max_table_elements,
            describe(&error)
        ));
    }
    if error.is::<PoolConcurrencyLimitError>() {
        return RunExit::Instantiate(format!(
            "all {} slots of the wasmtime instance pool are in use: {}",
            pool.slots,
            describe(&error)
        ));
    }
    RunExit::Instantiate(format!("instantiating on wasmtime: {}", describe(&error)))
}

impl Module for NativeModule {
    fn serialize(&self) -> Result<Serialized, EngineError> {
        self.module
            .serialize()
            .map(serialized)
            .map_err(|err| EngineError::Serialize(describe(&err)))
    }

    fn prepare(&self, limits: RunLimits) -> Box<dyn Prepared> {
        let mut store = self.store(limits);
        let made = match self.pre(limits) {
            Err(exit) => Made::Failed(exit),
            Ok(pre) if self.has_start.load(Ordering::Relaxed) => self.at_run(pre, limits),
            Ok(pre) => {
                // The deadline is the engine's current epoch, so that guest code traps at its
                // first epoch check, a function's entry: the instance of a module with a start
                // function is never made here (it is dropped unused, and made by the run).
                store.set_epoch_deadline(0);
                match instantiate(pre, &mut store, self.pool, limits) {
                    Ok(entry) => Made::Entry(entry),
                    Err(RunExit::Interrupted) => {
                        self.has_start.store(true, Ordering::Relaxed);
                        store = self.store(limits);
                        self.at_run(pre, limits)
                    }
                    Err(exit) => Made::Failed(exit),
                }
            }
        };
        Box::new(WasmtimePrepared { store, made })
    }
}

impl NativeModule {
    /// The instance made by the run: the module has a start function.
    fn at_run(&self, pre: &InstancePre<RunState>, limits: RunLimits) -> Made {
        Made::AtRun {
            pre: pre.clone(),
            pool: self.pool,
            limits,
        }
    }
}

/// The instance's exported memory and `_start`.
struct Entry {
    memory: wasmtime::Memory,
    start: TypedFunc<(), ()>,
}

/// What [`Module::prepare`] made of a [`NativeModule`].
enum Made {
    /// The instance, which no guest code has run in.
    Entry(Entry),
    /// Nothing yet: the module has a start function, which instantiation runs, so the run
    /// instantiates once its watchdog is armed.
    AtRun {
        pre: InstancePre<RunState>,
        pool: PoolConfig,
        limits: RunLimits,
    },
    /// How instantiation ended.
    Failed(RunExit),
}

/// A [`NativeModule`]'s instance made ahead of its run, with its store.
struct WasmtimePrepared {
    store: Store<RunState>,
    made: Made,
}

impl Prepared for WasmtimePrepared {
    fn run(self: Box<Self>, host: Box<dyn Host>, watchdog: &dyn Watchdog) -> RunResult {
        let WasmtimePrepared { mut store, made } = *self;
        store.data_mut().host = Some(host);
        let entry = match made {
            Made::Failed(exit) => Err(exit),
            Made::Entry(entry) => {
                watchdog.arm(Arc::new(limits::arm(&mut store)));
                Ok(entry)
            }
            Made::AtRun { pre, pool, limits } => {
                // Armed before instantiation, which runs the start function.
                watchdog.arm(Arc::new(limits::arm(&mut store)));
                instantiate(&pre, &mut store, pool, limits)
            }
        };
        let exit = match entry {
            Ok(Entry { memory, start }) => {
                store.data_mut().memory = Some(memory);
                match start.call(&mut store, ()) {
                    Ok(()) => RunExit::Returned,
                    Err(error) => classify(&error, store.data().cap.refused()),
                }
            }
            Err(exit) => exit,
        };
        let memory_bytes = store
            .data()
            .memory
            .map_or(0, |memory| memory.data_size(&store) as u64);
        let host = store
            .data_mut()
            .host
            .take()
            .expect("the host is only taken back here, once per run");
        RunResult {
            exit,
            host,
            memory_bytes,
            teardown: Teardown::new(store),
        }
    }
}

fn entry_points(
    instance: &wasmtime::Instance,
    store: &mut Store<RunState>,
) -> Result<(wasmtime::Memory, TypedFunc<(), ()>), String> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or("export memory: the module exports no memory of that name")?;
    let start = instance
        .get_typed_func::<(), ()>(&mut *store, "_start")
        .map_err(|err| format!("export _start: {}", describe(&err)))?;
    Ok((memory, start))
}

/// How a run that ended in an error ended.
fn classify(error: &wasmtime::Error, refused: bool) -> RunExit {
    if let Some(HostStop(stop)) = error.downcast_ref::<HostStop>() {
        return match stop {
            Stop::Exit(code) => RunExit::Exited(*code),
            Stop::Abort => RunExit::Aborted,
        };
    }
    let message = match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => return RunExit::Interrupted,
        Some(trap) => trap.to_string(),
        None => describe(error),
    };
    if refused {
        RunExit::OutOfMemory(format!(
            "the guest was refused memory at its cap, then trapped: {message}"
        ))
    } else {
        RunExit::Trap(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WasmtimeEngine;
    use hako_engine_api::Engine;
    use hako_engine_api::{Import, Interrupt};
    use std::any::Any;
    use std::sync::mpsc;
    use std::sync::Mutex;

    type Answer = Box<dyn FnMut(Import, &[u64]) -> Result<i32, Stop> + Send>;

    /// What a test host was asked: the import, its raw arguments, and the memory's size.
    type Seen = Arc<Mutex<Vec<(Import, Vec<u64>, usize)>>>;

    /// A host that answers every call with `answer` and records what it was asked.
    struct TestHost {
        answer: Answer,
        seen: Seen,
    }

    impl Host for TestHost {
        fn call(&mut self, import: Import, args: &[u64], memory: &mut [u8]) -> Result<i32, Stop> {
            let seen = (import, args.to_vec(), memory.len());
            self.seen.lock().unwrap().push(seen);
            (self.answer)(import, args)
        }

        fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
            self
        }
    }

    fn host(
        answer: impl FnMut(Import, &[u64]) -> Result<i32, Stop> + Send + 'static,
    ) -> (Box<dyn Host>, Seen) {
        let seen = Seen::default();
        let host = TestHost {
            answer: Box::new(answer),
            seen: Arc::clone(&seen),
        };
        (Box::new(host), seen)
    }

    /// A watchdog whose deadline never comes.
    struct Never;

    impl Watchdog for Never {
        fn arm(&self, _interrupt: Arc<dyn Interrupt>) {}
    }

    /// A watchdog whose deadline has passed before the run begins.
    struct AlreadyPassed;

    impl Watchdog for AlreadyPassed {
        fn arm(&self, interrupt: Arc<dyn Interrupt>) {
            interrupt.interrupt();
        }
    }

    /// A watchdog that hands the run's interrupt to the test.
    struct HandOver(Mutex<mpsc::Sender<Arc<dyn Interrupt>>>);

    impl Watchdog for HandOver {
        fn arm(&self, interrupt: Arc<dyn Interrupt>) {
            self.0.lock().unwrap().send(interrupt).unwrap();
        }
    }

    const MIB: u64 = 1024 * 1024;

    const SMALL_POOL: PoolConfig = PoolConfig {
        slots: 4,
        max_memory_bytes: 64 * MIB,
    };

    fn limits(max_memory_bytes: u64) -> RunLimits {
        RunLimits {
            max_memory_bytes,
            max_table_elements: hako_engine_api::MAX_TABLE_ELEMENTS,
        }
    }

    fn engine(pool: PoolConfig) -> WasmtimeEngine {
        WasmtimeEngine::with_pool(None, pool).unwrap()
    }

    fn compile(engine: &WasmtimeEngine, wat: &str) -> Arc<dyn Module> {
        engine.compile(&wat::parse_str(wat).unwrap()).unwrap()
    }

    /// The answer of a host that does what each call asks: `proc_exit` ends the run.
    fn obliging(import: Import, args: &[u64]) -> Result<i32, Stop> {
        match import {
            Import::ProcExit => Err(Stop::Exit(args[0] as u32)),
            _ => Ok(0),
        }
    }

    fn run(module: &Arc<dyn Module>, cap: u64) -> (RunExit, u64, Seen) {
        let (host, seen) = host(obliging);
        let result = module.run(host, limits(cap), &Never);
        (result.exit, result.memory_bytes, seen)
    }

    /// A start function that counts its runs (see the fixture).
    const COUNTED_START: &str = include_str!("../../api/fixtures/counted_start.wat");

    #[test]
    fn an_instance_made_ahead_runs_its_start_function_once_in_its_run() {
        let engine = engine(SMALL_POOL);
        for wat in [COUNTED_START, EXIT_7] {
            let module = compile(&engine, wat);
            // The first made ahead learns of the start function (its instance is dropped
            // unused), the second knows; both are run, in the other order.
            let made: Vec<_> = (0..2).map(|_| module.prepare(limits(MIB << 4))).collect();
            for prepared in made.into_iter().rev() {
                let (host, seen) = host(obliging);
                let result = prepared.run(host, &Never);
                let seen: Vec<_> = seen
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|s| (s.0, s.1.clone()))
                    .collect();
                if wat == EXIT_7 {
                    assert_eq!(result.exit, RunExit::Exited(7));
                    assert_eq!(seen, [(Import::ProcExit, vec![7])]);
                } else {
                    assert_eq!(result.exit, RunExit::Exited(1));
                    assert_eq!(
                        seen,
                        [(Import::SchedYield, vec![]), (Import::ProcExit, vec![1])]
                    );
                }
            }
        }
    }

    #[test]
    fn an_instance_made_ahead_is_armed_by_its_run() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module (memory (export "memory") 1) (func (export "_start") (loop (br 0))))"#,
        );
        let prepared = module.prepare(limits(MIB << 4));
        let (host, _) = host(obliging);
        assert_eq!(
            prepared.run(host, &AlreadyPassed).exit,
            RunExit::Interrupted
        );
    }

    const EXIT_7: &str = r#"(module
        (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
        (memory (export "memory") 1)
        (func (export "_start") (call $exit (i32.const 7))))"#;

    const YIELD_THEN_SPIN: &str = r#"(module
        (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
        (memory (export "memory") 1)
        (func (export "_start") (drop (call $yield)) (loop $l (br $l))))"#;

    const YIELD_COUNT_YIELD: &str = r#"(module
        (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
        (memory (export "memory") 1)
        (func (export "_start") (local $i i32)
          (drop (call $yield))
          (loop $l
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br_if $l (i32.lt_u (local.get $i) (i32.const 1000))))
          (drop (call $yield))))"#;

    /// Loads `code` as the store does: from a file that holds it from its first byte, with
    /// the store's header after it.
    fn load(engine: &WasmtimeEngine, code: &[u8]) -> Result<Arc<dyn Module>, EngineError> {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(code).unwrap();
        file.write_all(b"the store's header follows the code")
            .unwrap();
        let artifact = hako_engine_api::ArtifactFile {
            file: &file,
            code_len: code.len() as u64,
            image: None,
        };
        #[allow(unsafe_code)]
        // SAFETY: the code was serialized just now by an engine of this identity, or is
        // foreign, which the engine refuses before it reads anything.
        unsafe {
            engine.load(artifact)
        }
    }

    #[test]
    fn code_for_another_target_is_compiled_but_never_loaded_or_run() {
        let foreign = if cfg!(target_arch = "aarch64") {
            "x86_64-unknown-linux-gnu"
        } else {
            "aarch64-unknown-linux-gnu"
        };
        let engine = WasmtimeEngine::new(Some(foreign)).unwrap();
        assert!(!engine.runs_here());
        assert_eq!(engine.identity().triple, foreign);
        let module = compile(&engine, EXIT_7);
        let code = module.serialize().unwrap().code;
        assert!(!code.is_empty());
        let refused = load(&engine, &code);
        assert!(matches!(refused, Err(EngineError::ForeignTarget { .. })));
        let (exit, _, seen) = run(&module, MIB);
        assert!(
            matches!(&exit, RunExit::Instantiate(m) if m.contains(foreign)),
            "{exit:?}"
        );
        assert!(seen.lock().unwrap().is_empty());
    }

    #[test]
    fn an_artifact_loads_back_and_runs() {
        let engine = engine(SMALL_POOL);
        let serialized = compile(&engine, EXIT_7).serialize().unwrap();
        assert!(serialized.image.is_none());
        let module = load(&engine, &serialized.code).unwrap();
        assert_eq!(run(&module, MIB).0, RunExit::Exited(7));
    }

    #[test]
    fn arguments_reach_the_host_raw_with_the_whole_memory() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module
                (import "wasi_snapshot_preview1" "fd_seek"
                  (func $seek (param i32 i64 i32 i32) (result i32)))
                (memory (export "memory") 2)
                (func (export "_start")
                  (drop (call $seek (i32.const -1) (i64.const -1) (i32.const 2) (i32.const 3)))))"#,
        );
        let (exit, memory_bytes, seen) = run(&module, MIB);
        assert_eq!(exit, RunExit::Returned);
        assert_eq!(memory_bytes, 2 * 65_536);
        assert_eq!(
            *seen.lock().unwrap(),
            [(
                Import::FdSeek,
                vec![0xFFFF_FFFF, u64::MAX, 2, 3],
                2 * 65_536
            )]
        );
    }

    #[test]
    fn a_start_function_sees_no_memory() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module
                (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
                (memory (export "memory") 1)
                (func $init (drop (call $yield)))
                (start $init)
                (func (export "_start") (drop (call $yield))))"#,
        );
        let (exit, _, seen) = run(&module, MIB);
        assert_eq!(exit, RunExit::Returned);
        let sizes: Vec<usize> = seen.lock().unwrap().iter().map(|call| call.2).collect();
        assert_eq!(sizes, [0, 65_536]);
    }

    #[test]
    fn host_stops_end_the_run_as_exit_or_abort() {
        let engine = engine(SMALL_POOL);
        assert_eq!(run(&compile(&engine, EXIT_7), MIB).0, RunExit::Exited(7));
        let module = compile(&engine, YIELD_THEN_SPIN);
        let (host, _) = host(|_, _| Err(Stop::Abort));
        assert_eq!(module.run(host, limits(MIB), &Never).exit, RunExit::Aborted);
    }

    #[test]
    fn an_import_abi_1_does_not_provide_is_named() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module (import "env" "secret" (func))
                 (memory (export "memory") 1) (func (export "_start")))"#,
        );
        let (exit, _, _) = run(&module, MIB);
        assert!(
            matches!(&exit, RunExit::Instantiate(m) if m.contains("env.secret")),
            "{exit:?}"
        );
    }

    #[test]
    fn a_trap_is_reported_with_its_message() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module (memory (export "memory") 1) (func (export "_start") unreachable))"#,
        );
        let (exit, _, _) = run(&module, MIB);
        assert!(
            matches!(&exit, RunExit::Trap(m) if m.contains("unreachable")),
            "{exit:?}"
        );
    }

    #[test]
    fn a_trap_after_a_refused_grow_is_out_of_memory() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module (memory (export "memory") 1)
                (func (export "_start")
                  (if (i32.eq (memory.grow (i32.const 100)) (i32.const -1))
                    (then unreachable))))"#,
        );
        let (exit, memory_bytes, _) = run(&module, 2 * 65_536);
        assert!(matches!(exit, RunExit::OutOfMemory(_)), "{exit:?}");
        assert_eq!(memory_bytes, 65_536);
        assert_eq!(run(&module, 128 * 65_536).0, RunExit::Returned);
    }

    #[test]
    fn an_initial_memory_above_the_cap_is_out_of_memory() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module (memory (export "memory") 10) (func (export "_start")))"#,
        );
        let (exit, _, _) = run(&module, 65_536);
        assert!(
            matches!(&exit, RunExit::OutOfMemory(m) if m.contains("65536")),
            "{exit:?}"
        );
    }

    #[test]
    fn an_endless_start_function_is_interrupted() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module (memory (export "memory") 1)
                (func $forever (loop $l (br $l)))
                (start $forever)
                (func (export "_start")))"#,
        );
        let (host, _) = host(|_, _| Ok(0));
        let exit = module.run(host, limits(MIB), &AlreadyPassed).exit;
        assert_eq!(exit, RunExit::Interrupted);
    }

    #[test]
    fn an_interrupt_stops_only_its_own_guest() {
        let engine = Arc::new(engine(SMALL_POOL));
        let spinner = compile(&engine, YIELD_THEN_SPIN);
        let counter = compile(&engine, YIELD_COUNT_YIELD);
        let (started, started_here) = mpsc::channel::<&str>();
        let (handed, interrupts) = mpsc::channel();
        let (proceed, may_proceed) = mpsc::channel::<()>();

        let spinner_started = started.clone();
        let (spinner_host, _) = host(move |_, _| {
            spinner_started.send("spinner").unwrap();
            Ok(0)
        });
        let spinning = std::thread::spawn(move || {
            spinner
                .run(spinner_host, limits(MIB), &HandOver(Mutex::new(handed)))
                .exit
        });
        let may_proceed = Mutex::new(may_proceed);
        let mut first = true;
        let (counter_host, seen) = host(move |_, _| {
            if std::mem::take(&mut first) {
                started.send("counter").unwrap();
                may_proceed.lock().unwrap().recv().unwrap();
            }
            Ok(0)
        });
        let counting =
            std::thread::spawn(move || counter.run(counter_host, limits(MIB), &Never).exit);

        let interrupt = interrupts.recv().unwrap();
        let mut waiting = vec![started_here.recv().unwrap(), started_here.recv().unwrap()];
        waiting.sort_unstable();
        assert_eq!(waiting, ["counter", "spinner"]);
        // The counter is held in a host call while the spinner is interrupted; its own guest
        // code then runs past the epoch the interrupt moved.
        interrupt.interrupt();
        assert_eq!(spinning.join().unwrap(), RunExit::Interrupted);
        proceed.send(()).unwrap();
        assert_eq!(counting.join().unwrap(), RunExit::Returned);
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_full_pool_is_reported_not_waited_for() {
        let engine = Arc::new(engine(PoolConfig {
            slots: 1,
            max_memory_bytes: 64 * MIB,
        }));
        let holder = compile(&engine, YIELD_COUNT_YIELD);
        let (inside, is_inside) = mpsc::channel::<()>();
        let (leave, may_leave) = mpsc::channel::<()>();
        let may_leave = Mutex::new(may_leave);
        let mut first = true;
        let (holder_host, _) = host(move |_, _| {
            if std::mem::take(&mut first) {
                inside.send(()).unwrap();
                may_leave.lock().unwrap().recv().unwrap();
            }
            Ok(0)
        });
        let holding = std::thread::spawn(move || holder.run(holder_host, limits(MIB), &Never).exit);
        is_inside.recv().unwrap();

        let (exit, _, _) = run(&compile(&engine, EXIT_7), MIB);
        assert!(
            matches!(&exit, RunExit::Instantiate(m) if m.contains("1 slots")),
            "{exit:?}"
        );
        leave.send(()).unwrap();
        assert_eq!(holding.join().unwrap(), RunExit::Returned);
        // The slot is free again.
        assert_eq!(run(&compile(&engine, EXIT_7), MIB).0, RunExit::Exited(7));
    }

    #[test]
    fn what_does_not_fit_the_pool_is_said() {
        let engine = engine(SMALL_POOL);
        let wasm = wat::parse_str(
            r#"(module (memory (export "memory") 1) (table 100000 funcref) (func (export "_start")))"#,
        )
        .unwrap();
        let err = engine.compile(&wasm).err().expect("refused").to_string();
        assert!(err.contains("pooling allocator"), "{err}");

        let (exit, _, _) = run(&compile(&engine, EXIT_7), 128 * MIB);
        assert!(
            matches!(&exit, RunExit::Instantiate(m) if m.contains("slot")),
            "{exit:?}"
        );
    }

    #[test]
    fn webassembly_2_compiles_and_newer_features_do_not() {
        let engine = engine(SMALL_POOL);
        let module = compile(
            &engine,
            r#"(module (memory (export "memory") 1) (table 1 funcref) (table 1 externref)
                (func (export "_start")
                  (memory.fill (i32.const 0) (i32.const 0) (i32.const 1))
                  (drop (i32.extend8_s (i32.const 1)))
                  (drop (i32.trunc_sat_f32_s (f32.const 1)))
                  (drop (i8x16.splat (i32.const 1)))))"#,
        );
        // Each table, declaring no maximum, reserves its bound (512 KiB) of the cap.
        assert_eq!(run(&module, 2 * MIB).0, RunExit::Returned);
        for newer in [
            "(module (func $f (return_call $f)))",
            "(module (memory 1 1 shared))",
            "(module (memory 1) (memory 1))",
            "(module (memory i64 1))",
            "(module (global i32 (i32.add (i32.const 1) (i32.const 2))))",
            "(module (func (drop (f32x4.relaxed_madd (v128.const i64x2 0 0) (v128.const i64x2 0 0) (v128.const i64x2 0 0)))))",
        ] {
            let wasm = wat::parse_str(newer).unwrap();
            assert!(engine.compile(&wasm).is_err(), "{newer} compiled");
        }
    }
}
