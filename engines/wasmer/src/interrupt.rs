//! Deadline interrupts, by a signal of hako's own, that never unwind host code.
//!
//! A guest whose time goes to code without host calls is stopped by a signal to its thread:
//! the handler turns it into a trap by handing the interrupted context to wasmer's own trap
//! handler, which unwinds the guest's stack. Unwinding is sound only where the guest's stack
//! holds nothing but guest code: wasmer runs a part of every host call (its wrapper around the
//! host function) on the guest's stack, and an unwind there leaves whatever that part held.
//!
//! So hako does not use wasmer's own interrupts (the `experimental-host-interrupt` feature).
//! With them, the wrapper looked the store up in a process-wide registry after every host call,
//! under a lock, on the guest's stack: a guest that called the host at its stack's last bytes
//! while the lock was contended overflowed inside the lock's slow path (parking the thread),
//! wasmer unwound it, and the lock's state stayed broken; every later call whose store fell in
//! that part of the registry, and the deadline thread, then waited forever. Without the feature
//! the wrapper takes no lock, and an overflow inside it unwinds nothing that is held
//! (`tests::a_host_call_at_the_stack_end_leaves_the_engine_sound_at_every_offset`).
//!
//! The signal ([`SIGNAL`]) becomes a trap only when
//! - the thread is running a run ([`Target::enter`]) whose deadline has passed, and
//! - the interrupted instruction is not host code, that is, not in an executable segment of any
//!   loaded ELF object (the program, libc, the loader, the vDSO). Guest code lives in wasmer's
//!   anonymous code mappings or in the artifact images it maps itself, never there; and guest
//!   code runs only on the guest's stack, inside wasmer's trap scope, so wasmer's handler always
//!   takes it (should it ever not, the handler's disposition is put back as it was).
//!
//! A swallowed signal is harmless: the deadline timer interrupts again a few milliseconds
//! later, by when the guest is usually back in its own code; a guest that spends nearly all its
//! time in host calls is ended at its next one (the host's WASI layer checks the call's cancel
//! flag, which the timer sets first); and the compiled checks ([`crate::checks`]) stop it at
//! its next function entry or loop header where the compiler kept the check's load.
//!
//! The table of host code is refreshed before every signal (on the timer's thread, never in the
//! handler), so a library loaded while the process runs is known before a signal could land in
//! it. The handler itself only reads atomics and calls async-signal-safe functions: nothing in
//! it can block or allocate.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use findshlibs::{Segment, SharedLibrary, TargetSharedLibrary};
use hako_engine_api::Interrupt;

use crate::checks::Flag;

/// The signal that interrupts guest code. Nothing else in the process uses it.
pub(crate) const SIGNAL: libc::c_int = libc::SIGUSR2;

/// Interrupts one store's guest code: raises the deadline flag its compiled checks test
/// ([`crate::checks`]), refreshes the table of host code, then signals the run's thread (which
/// stops guest code between two checks, such as a loop whose check the compiler hoisted).
pub(crate) struct StoreInterrupt {
    pub(crate) flag: Flag,
    pub(crate) target: Target,
}

impl Interrupt for StoreInterrupt {
    fn interrupt(&self) {
        self.flag.raise();
        HOST_CODE.refresh();
        self.target.interrupt();
    }
}

/// One run, as the target of interrupts: whether its deadline has passed, and the thread it
/// runs on while it runs.
#[derive(Debug, Default)]
pub(crate) struct Target {
    raised: AtomicBool,
    /// Whether the signal's handler turned an instruction of the run into a trap.
    trapped: AtomicBool,
    /// The run's thread, from [`Target::enter`] until its guard drops. A signal is only sent
    /// under this lock, so never to a thread that has left the run (or ended).
    thread: Mutex<Option<libc::pthread_t>>,
}

thread_local! {
    /// The run on this thread, read by the signal handler. A constant-initialised cell without
    /// a destructor: reading it is a plain thread-local load, safe in a signal handler.
    static CURRENT: Cell<*const Target> = const { Cell::new(std::ptr::null()) };
}

impl Target {
    /// Marks the run's deadline passed and signals its thread, if it is in the run.
    pub(crate) fn interrupt(&self) {
        self.raised.store(true, Ordering::SeqCst);
        let thread = self.thread();
        if let Some(thread) = *thread {
            // SAFETY: `thread` is a live thread: it takes itself out of `self.thread`, under
            // the lock held here, before it leaves the run, and it cannot end inside the run.
            // The signal's handler is installed (by `enter`) before `thread` is ever set.
            unsafe { libc::pthread_kill(thread, SIGNAL) };
        }
    }

    /// Makes the calling thread this run's until the guard drops: interrupts signal it, and
    /// its handler knows the run (the guard borrows `self`, so it outlives what the handler
    /// reads).
    pub(crate) fn enter(&self) -> Entered<'_> {
        install_handler();
        // SAFETY: pthread_self has no preconditions.
        *self.thread() = Some(unsafe { libc::pthread_self() });
        CURRENT.with(|current| current.set(self));
        Entered(self)
    }

    /// Whether the run's signal trapped its guest (so that the trap is the interrupt).
    pub(crate) fn trapped(&self) -> bool {
        self.trapped.load(Ordering::SeqCst)
    }

    fn thread(&self) -> MutexGuard<'_, Option<libc::pthread_t>> {
        self.thread.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A thread's stay in a run ([`Target::enter`]).
pub(crate) struct Entered<'a>(&'a Target);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        // No signal is sent after this; one already sent finds no run and does nothing.
        *self.0.thread() = None;
        CURRENT.with(|current| current.set(std::ptr::null()));
    }
}

/// Installs the handler of [`SIGNAL`], once per process.
fn install_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: an all-zero sigaction is a valid value of the plain C struct, filled in
        // below; `on_signal` has the three-argument signature SA_SIGINFO asks for, and only
        // does what is safe in a signal handler.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            let installed = libc::sigaction(SIGNAL, &action, std::ptr::null_mut());
            assert_eq!(installed, 0, "installing the interrupt signal's handler");
        }
    });
}

/// The handler of [`SIGNAL`].
extern "C" fn on_signal(
    _signum: libc::c_int,
    _info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    let target = CURRENT.with(Cell::get);
    if target.is_null() || context.is_null() {
        return;
    }
    // SAFETY: CURRENT points to the run on this thread, which the run's guard borrows until it
    // cleared CURRENT; the handler runs on that same thread.
    let target = unsafe { &*target };
    if !target.raised.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: the kernel passes an SA_SIGINFO handler the interrupted thread's `ucontext_t`,
    // valid while the handler runs.
    let Some((pc, sp)) = (unsafe { interrupted_pc_sp(context) }) else {
        return;
    };
    if HOST_CODE.contains(pc) {
        return;
    }
    target.trapped.store(true, Ordering::SeqCst);
    // SAFETY: the thread is in a run and was interrupted outside host code, so in guest code,
    // which runs on the guest's stack inside wasmer's trap scope; `context` is the live one.
    unsafe { trap_in_guest(sp, context) };
}

/// Turns the interrupted guest instruction into a trap: calls wasmer's `SIGSEGV` handler with
/// a fault at the stack pointer (wasmer then names the trap a stack overflow; the deadline
/// flag makes it an interrupt, [`crate::classify`]). wasmer rewrites `context` to unwind the
/// guest's stack when the signal returns, as for its own traps.
///
/// # Safety
/// `context` must be the `ucontext_t` of the signal being handled, on a thread interrupted in
/// guest code.
unsafe fn trap_in_guest(sp: usize, context: *mut libc::c_void) {
    // SAFETY (whole block): sigaction only reads or writes the structs given, and is
    // async-signal-safe; the handler called is the one the process installed for SIGSEGV, with
    // the arguments such a handler takes: a siginfo_t whose signal is SIGSEGV and whose fault
    // address is set, and the context of the signal being handled.
    unsafe {
        let mut before: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut before) != 0
            || before.sa_flags & libc::SA_SIGINFO == 0
            || before.sa_sigaction == libc::SIG_DFL
            || before.sa_sigaction == libc::SIG_IGN
        {
            return;
        }
        let mut info = fault_at(sp);
        let handler = std::mem::transmute::<
            usize,
            extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void),
        >(before.sa_sigaction);
        handler(libc::SIGSEGV, &mut info, context);
        // A handler that did not take the fault resets its signal to the default so that the
        // instruction crashes when it runs again; this fault was not real, so put it back.
        let mut after: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut after) == 0
            && after.sa_sigaction != before.sa_sigaction
        {
            libc::sigaction(libc::SIGSEGV, &before, std::ptr::null_mut());
        }
    }
}

/// A `siginfo_t` of a `SIGSEGV` at `address`.
fn fault_at(address: usize) -> libc::siginfo_t {
    // SAFETY: an all-zero siginfo_t is a valid value of the plain C struct.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    info.si_signo = libc::SIGSEGV;
    // SEGV_MAPERR.
    info.si_code = 1;
    // The fault address is the first field of the union after the three ints and the padding
    // that aligns it: offset 16 on the 64-bit Linux targets (checked by a test against
    // `si_addr()`, libc's reader of the same field).
    // SAFETY: the offset is inside the struct (128 bytes) and aligned for a pointer.
    unsafe {
        (&raw mut info)
            .cast::<u8>()
            .add(SI_ADDR_OFFSET)
            .cast::<*mut libc::c_void>()
            .write(address as *mut libc::c_void);
    }
    info
}

/// Where `si_addr` lies in a `siginfo_t`.
const SI_ADDR_OFFSET: usize = 2 * std::mem::size_of::<usize>();

/// The program counter and stack pointer of the interrupted thread, from its `ucontext_t`.
///
/// # Safety
/// `context` must point to the `ucontext_t` of a signal being handled.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
unsafe fn interrupted_pc_sp(context: *const libc::c_void) -> Option<(usize, usize)> {
    // SAFETY: the caller guarantees `context` is a live `ucontext_t`.
    let context = unsafe { &*context.cast::<libc::ucontext_t>() };
    let registers = &context.uc_mcontext.gregs;
    Some((
        registers[libc::REG_RIP as usize] as usize,
        registers[libc::REG_RSP as usize] as usize,
    ))
}

/// The program counter and stack pointer of the interrupted thread, from its `ucontext_t`.
///
/// # Safety
/// `context` must point to the `ucontext_t` of a signal being handled.
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
unsafe fn interrupted_pc_sp(context: *const libc::c_void) -> Option<(usize, usize)> {
    // SAFETY: the caller guarantees `context` is a live `ucontext_t`.
    let context = unsafe { &*context.cast::<libc::ucontext_t>() };
    Some((
        context.uc_mcontext.pc as usize,
        context.uc_mcontext.sp as usize,
    ))
}

/// Elsewhere the registers are not read and the signal stops nothing: the compiled checks and
/// the WASI layer's cancel flag do.
///
/// # Safety
/// None needed; the pointer is not read.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
unsafe fn interrupted_pc_sp(_context: *const libc::c_void) -> Option<(usize, usize)> {
    None
}

/// How many executable segments the table holds; a process has a few dozen.
const MAX_RANGES: usize = 1024;

/// The executable segments of every ELF object loaded so far, as `[start, end)` pairs. Only
/// ever appended to (under `writer`), and each pair is written before `len` publishes it, so
/// the signal handler reads it with atomics alone. A segment of a library unloaded since
/// stays listed, which only means an interrupt landing at that address waits for the next.
///
/// Once a segment finds the table full, the table can no longer tell host code from guest
/// code, and every address counts as host code: a signal then stops nothing (the compiled
/// checks and the WASI layer's cancel flag still do), rather than hand a fault in host code to
/// wasmer, whose decline would reset `SIGSEGV` to its default for an instant in which a real
/// fault on another thread would end the process.
struct HostCode {
    starts: [AtomicUsize; MAX_RANGES],
    ends: [AtomicUsize; MAX_RANGES],
    len: AtomicUsize,
    /// A segment did not fit.
    overflowed: AtomicBool,
    writer: Mutex<()>,
}

static HOST_CODE: HostCode = HostCode::new();

impl HostCode {
    const fn new() -> Self {
        HostCode {
            starts: [const { AtomicUsize::new(0) }; MAX_RANGES],
            ends: [const { AtomicUsize::new(0) }; MAX_RANGES],
            len: AtomicUsize::new(0),
            overflowed: AtomicBool::new(false),
            writer: Mutex::new(()),
        }
    }

    /// Adds the executable segments of every object loaded now that the table lacks.
    fn refresh(&self) {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        TargetSharedLibrary::each(|library| {
            for segment in library.segments().filter(|segment| segment.is_code()) {
                let start = segment.actual_virtual_memory_address(library).0;
                self.add(start, start.saturating_add(segment.len()));
            }
        });
    }

    /// Appends `[start, end)` unless it is already listed or the table is full. Callers hold
    /// `writer`.
    fn add(&self, start: usize, end: usize) {
        let len = self.len.load(Ordering::Acquire);
        let listed = (0..len).any(|i| {
            self.starts[i].load(Ordering::Relaxed) == start
                && self.ends[i].load(Ordering::Relaxed) == end
        });
        if listed || start >= end {
            return;
        }
        if len == MAX_RANGES {
            if !self.overflowed.swap(true, Ordering::AcqRel) {
                tracing::error!(
                    "more than {MAX_RANGES} executable segments are loaded: deadline signals \
                     stop no guest code from now on (the compiled checks still do)"
                );
            }
            return;
        }
        self.starts[len].store(start, Ordering::Relaxed);
        self.ends[len].store(end, Ordering::Relaxed);
        self.len.store(len + 1, Ordering::Release);
    }

    /// Whether `pc` is in a listed segment, or may be in one the full table lacks. Safe in a
    /// signal handler: atomic loads only.
    fn contains(&self, pc: usize) -> bool {
        if self.overflowed.load(Ordering::Acquire) {
            return true;
        }
        let len = self.len.load(Ordering::Acquire);
        (0..len).any(|i| {
            self.starts[i].load(Ordering::Relaxed) <= pc
                && pc < self.ends[i].load(Ordering::Relaxed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Compiler, WasmerEngine};
    use hako_engine_api::{Engine, Host, Import, RunExit, RunLimits, Stop, Watchdog};
    use std::any::Any;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// A host whose every import answers 0 at once.
    struct QuickHost;

    impl Host for QuickHost {
        fn call(&mut self, _: Import, _: &[u64], _: &mut [u8]) -> Result<i32, Stop> {
            Ok(0)
        }

        fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
            self
        }
    }

    /// A watchdog whose deadline has passed: once armed, it interrupts the run every 20 µs
    /// until told to stop.
    #[derive(Default)]
    struct Nagging {
        stop: Arc<AtomicBool>,
        thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    }

    impl Watchdog for Nagging {
        fn arm(&self, interrupt: Arc<dyn Interrupt>) {
            let stop = Arc::clone(&self.stop);
            let thread = std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    interrupt.interrupt();
                    std::thread::sleep(Duration::from_micros(20));
                }
            });
            *self.thread.lock().unwrap() = Some(thread);
        }
    }

    impl Nagging {
        fn finish(&self) {
            self.stop.store(true, Ordering::SeqCst);
            if let Some(thread) = self.thread.lock().unwrap().take() {
                thread.join().unwrap();
            }
        }
    }

    const LIMITS: RunLimits = RunLimits {
        max_memory_bytes: 64 << 20,
        max_table_elements: hako_engine_api::MAX_TABLE_ELEMENTS,
    };

    /// Runs `wasm` `runs` times on every compiler of the build under a nagging watchdog, and
    /// asserts that every run was interrupted.
    fn interrupted_on_every_compiler(wasm: &[u8], runs: usize) {
        for compiler in Compiler::ALL.into_iter().filter(|c| c.available()) {
            let engine = WasmerEngine::new(compiler, None).unwrap();
            let module = engine.compile(wasm).unwrap();
            for run in 0..runs {
                let watchdog = Nagging::default();
                let result = module.run(Box::new(QuickHost), LIMITS, &watchdog);
                watchdog.finish();
                assert_eq!(result.exit, RunExit::Interrupted, "{compiler:?}, run {run}");
            }
        }
    }

    #[test]
    fn interrupts_of_a_guest_looping_through_host_calls_leave_the_engine_sound() {
        // The guest calls the host in a tight loop, so many interrupts land in host code:
        // wasmer's wrapper around each host call runs on the guest's stack and takes locks
        // (its store context, its interrupt registry). Unwinding one there left the next run
        // panicking ("already borrowed") or the process hung on the abandoned lock: without
        // the trap handler, 5 runs of this test out of 5 failed so (3 panics, 2 hangs).
        let wasm = wat::parse_str(
            r#"(module
                 (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
                 (memory (export "memory") 1)
                 (func (export "_start") (loop (drop (call $yield)) (br 0))))"#,
        )
        .unwrap();
        interrupted_on_every_compiler(&wasm, 3000);
    }

    /// The first host call answers `k`, every later one 0.
    struct Shifting {
        first: Option<i32>,
    }

    impl Host for Shifting {
        fn call(&mut self, _: Import, _: &[u64], _: &mut [u8]) -> Result<i32, Stop> {
            Ok(self.first.take().unwrap_or(0))
        }

        fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
            self
        }
    }

    /// A watchdog whose deadline never comes.
    struct Never;

    impl Watchdog for Never {
        fn arm(&self, _: Arc<dyn Interrupt>) {}
    }

    /// How many shifts of the recursion's stack the test tries, 8 bytes apart.
    const SHIFTS: usize = 160;

    /// A guest that recurses until its stack ends, calling the host at every level, after a
    /// frame of `8 * k` bytes (k values loaded from memory, live across the call) where `k` is
    /// what its first host call answered: so the host call at the stack's end lands at every
    /// offset from it, 8 bytes apart, over the runs.
    fn stack_end_guest() -> Vec<u8> {
        let pads: String = (0..SHIFTS)
            .map(|k| {
                let loads = "(i64.load (i32.const 0))".repeat(k);
                let adds = "(i64.add)".repeat(k.saturating_sub(1));
                let drop = if k > 0 { "(drop)" } else { "" };
                format!("(func $pad{k} {loads} (call $recurse) {adds} {drop})\n")
            })
            .collect();
        let names: String = (0..SHIFTS).map(|k| format!(" $pad{k}")).collect();
        wat::parse_str(format!(
            r#"(module
                 (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
                 (memory (export "memory") 1)
                 (type $pad (func))
                 (table {SHIFTS} funcref)
                 (elem (i32.const 0){names})
                 (func $recurse (drop (call $yield)) (call $recurse))
                 {pads}
                 (func (export "_start") (call_indirect (type $pad) (call $yield))))"#
        ))
        .unwrap()
    }

    #[test]
    fn a_host_call_at_the_stack_end_leaves_the_engine_sound_at_every_offset() {
        // The host call at the deepest level runs wasmer's wrapper with whatever stack is left:
        // the overflow can land inside it, in host code on the guest's stack. Nothing there may
        // hold a lock that the unwinding would leave held (wasmer's interrupt registry did: the
        // run's own end then waited on it forever).
        let wasm = stack_end_guest();
        use std::sync::mpsc::{channel, RecvTimeoutError};
        let (done, finished) = channel();
        std::thread::spawn(move || {
            for compiler in Compiler::ALL.into_iter().filter(|c| c.available()) {
                let engine = WasmerEngine::new(compiler, None).unwrap();
                let module = engine.compile(&wasm).unwrap();
                for k in 0..SHIFTS {
                    let host = Shifting {
                        first: Some(k as i32),
                    };
                    let result = module.run(Box::new(host), LIMITS, &Never);
                    let RunExit::Trap(message) = &result.exit else {
                        panic!("{compiler:?}, shift {k}: {:?}", result.exit);
                    };
                    assert!(
                        message.contains("stack"),
                        "{compiler:?}, shift {k}: {message}"
                    );
                    done.send(()).unwrap();
                }
            }
        });
        let runs = Compiler::ALL.into_iter().filter(|c| c.available()).count() * SHIFTS;
        for run in 0..runs {
            match finished.recv_timeout(Duration::from_secs(60)) {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => panic!("run {run} of {runs} hung (60 s)"),
                Err(RecvTimeoutError::Disconnected) => panic!("run {run} of {runs} failed"),
            }
        }
    }

    #[test]
    fn host_code_covers_this_program_and_libc_but_not_the_heap() {
        HOST_CODE.refresh();
        let this_function =
            host_code_covers_this_program_and_libc_but_not_the_heap as *const () as usize;
        assert!(HOST_CODE.contains(this_function));
        let libc_function = libc::getpid as *const () as usize;
        assert!(HOST_CODE.contains(libc_function));
        let heap = Box::new([0u8; 64]);
        assert!(!HOST_CODE.contains(heap.as_ptr() as usize));
    }

    #[test]
    fn a_refresh_adds_nothing_twice() {
        HOST_CODE.refresh();
        let before = HOST_CODE.len.load(Ordering::Acquire);
        HOST_CODE.refresh();
        assert_eq!(HOST_CODE.len.load(Ordering::Acquire), before);
        assert!(before > 0);
    }

    #[test]
    fn the_fault_address_is_where_libc_reads_it() {
        let info = fault_at(0x1234_5678);
        assert_eq!(info.si_signo, libc::SIGSEGV);
        // SAFETY: a SIGSEGV's siginfo_t carries a fault address.
        assert_eq!(unsafe { info.si_addr() } as usize, 0x1234_5678);
    }

    /// Calls the signal's handler as the kernel would, with `context`.
    fn deliver(context: &mut libc::ucontext_t) {
        on_signal(
            SIGNAL,
            std::ptr::null_mut(),
            (&raw mut *context).cast::<libc::c_void>(),
        );
    }

    fn segv_handler() -> usize {
        // SAFETY: only reads the disposition into a zeroed struct.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            assert_eq!(
                libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut action),
                0
            );
            action.sa_sigaction
        }
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn a_signal_traps_only_in_a_passed_run_outside_host_code_and_never_breaks_sigsegv() {
        // The last case resets SIGSEGV to its default for an instant, which would end the
        // process if another test's guest trapped then: alone in a process, it runs here
        // (nextest gives every test a process of its own), else in a child run of this test.
        const ALONE: &str = "HAKO_TEST_ALONE_IN_ITS_PROCESS";
        let name = "interrupt::tests::a_signal_traps_only_in_a_passed_run_outside_host_code_and_never_breaks_sigsegv";
        if std::env::var_os("NEXTEST_RUN_ID").is_none() && std::env::var_os(ALONE).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([name, "--exact", "--test-threads", "1"])
                .env(ALONE, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{stdout}"
            );
            return;
        }
        // wasmer's SIGSEGV handler is in place once an engine exists.
        let _engine = WasmerEngine::new(Compiler::ALL[0], None).unwrap();
        let wasmer_handler = segv_handler();
        HOST_CODE.refresh();
        let host_pc = deliver as *const () as usize;
        let here = 0u64;
        let sp = &raw const here as usize;
        // SAFETY: an all-zero ucontext_t is a valid value of this plain C struct.
        let mut context: libc::ucontext_t = unsafe { std::mem::zeroed() };
        set_pc_sp(&mut context, host_pc, sp);
        // Outside a run, and in a run whose deadline has not passed: nothing is read or done.
        deliver(&mut context);
        let target = Target::default();
        let entered = target.enter();
        deliver(&mut context);
        assert_eq!(pc_sp(&context), (host_pc, sp));
        assert!(!target.trapped.load(Ordering::SeqCst));
        // Passed, but in host code: swallowed.
        target.raised.store(true, Ordering::SeqCst);
        deliver(&mut context);
        assert_eq!(pc_sp(&context), (host_pc, sp));
        assert!(
            !target.trapped.load(Ordering::SeqCst),
            "host code is never trapped"
        );
        // Passed and outside host code, but (unlike guest code) outside wasmer's trap scope:
        // wasmer declines and hands the fault to the handler before it, which resets SIGSEGV
        // to its default; the disposition is put back, so a real fault still traps.
        set_pc_sp(&mut context, 0x10, sp);
        deliver(&mut context);
        assert!(
            target.trapped.load(Ordering::SeqCst),
            "outside host code, the signal is made a trap"
        );
        assert_eq!(pc_sp(&context), (0x10, sp));
        assert_eq!(segv_handler(), wasmer_handler);
        drop(entered);
        assert!(CURRENT.with(Cell::get).is_null());
        assert!(target.thread().is_none());
    }

    #[test]
    fn a_full_table_of_host_code_counts_every_address_as_host_code() {
        let table = Box::new(HostCode::new());
        let _writer = table.writer.lock().unwrap();
        for i in 0..MAX_RANGES {
            table.add(0x1000 * (i + 1), 0x1000 * (i + 1) + 0x10);
        }
        assert!(table.contains(0x1000) && !table.contains(0x10));
        // One segment past the table: nothing can be told apart any more.
        table.add(0x7000_0000, 0x7000_0010);
        assert!(table.contains(0x10) && table.contains(0x7000_0000));
    }

    #[test]
    fn a_loop_without_stores_or_calls_ends_at_its_deadline() {
        // Compilers drop or hoist the flag's reload out of such a loop; only the signal stops it.
        let wasm = wat::parse_str(
            r#"(module
                 (memory (export "memory") 1)
                 (func (export "_start") (loop (br 0))))"#,
        )
        .unwrap();
        interrupted_on_every_compiler(&wasm, 20);
    }

    #[cfg(target_arch = "x86_64")]
    fn set_pc_sp(context: &mut libc::ucontext_t, pc: usize, sp: usize) {
        context.uc_mcontext.gregs[libc::REG_RIP as usize] = pc as i64;
        context.uc_mcontext.gregs[libc::REG_RSP as usize] = sp as i64;
    }

    #[cfg(target_arch = "aarch64")]
    fn set_pc_sp(context: &mut libc::ucontext_t, pc: usize, sp: usize) {
        context.uc_mcontext.pc = pc as u64;
        context.uc_mcontext.sp = sp as u64;
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn pc_sp(context: &libc::ucontext_t) -> (usize, usize) {
        // SAFETY: a live ucontext_t.
        unsafe { interrupted_pc_sp((&raw const *context).cast()) }.unwrap()
    }
}
