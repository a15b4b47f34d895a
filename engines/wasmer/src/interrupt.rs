//! Deadline interrupts that never unwind host code.
//!
//! wasmer stops guest code by sending its thread `SIGUSR1`; its handler turns the signal into a
//! trap whenever the thread's stack pointer is on the guest's stack. A host function's body
//! runs on the host's stack, but wasmer's wrapper around it does not: before and after the
//! body it borrows the store context and looks the store up in its interrupt registry (a lock)
//! on the guest's stack. A signal landing there unwound that host code halfway: the store
//! context stayed borrowed (the next run panicked, "already borrowed") or the registry's lock
//! stayed held (the process hung).
//!
//! So every store gets a trap handler ([`install`]) that lets `SIGUSR1` become a trap only when
//! the interrupted instruction is not host code, that is, not in an executable segment of any
//! loaded ELF object (the program, libc, the loader, the vDSO). Guest code lives in wasmer's
//! anonymous code mappings or in the artifact images it maps itself, never there. A swallowed
//! signal is harmless: the deadline timer interrupts again a few milliseconds later, by when
//! the guest is usually back in its own code; and a guest that spends nearly all its time in
//! host calls is ended at its next one (wasmer checks its registry after each host call, and
//! the host's WASI layer checks the call's cancel flag, which the timer sets first).
//!
//! The table of host code is refreshed before every signal (the timer's thread, never in the
//! handler), so a library loaded while the process runs is known before a signal could land
//! in it. The handler itself only reads atomics: nothing in it can block or allocate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use findshlibs::{Segment, SharedLibrary, TargetSharedLibrary};
use hako_engine_api::Interrupt;

use crate::checks::Flag;

/// Interrupts one store's guest code: raises the deadline flag its compiled checks test
/// ([`crate::checks`]), refreshes the table of host code, then has wasmer signal the guest's
/// thread (which stops guest code between two checks, such as a long run without loops).
pub(crate) struct StoreInterrupt {
    pub(crate) flag: Flag,
    pub(crate) signal: wasmer::Interrupter,
}

impl Interrupt for StoreInterrupt {
    fn interrupt(&self) {
        self.flag.raise();
        HOST_CODE.refresh();
        self.signal.interrupt();
    }
}

/// Gives `store` the trap handler that keeps interrupts out of host code. Must be called
/// before the store instantiates anything: wasmer hands an instance its store's handler then.
pub(crate) fn install(store: &mut wasmer::Store) {
    store.set_trap_handler(Some(Box::new(swallow_interrupt_in_host_code)));
}

/// wasmer's custom trap handler: `true` means "handled, do not trap". Only `SIGUSR1` (an
/// interrupt) that landed in host code is swallowed; every other signal goes on to wasmer.
fn swallow_interrupt_in_host_code(
    signum: libc::c_int,
    _info: *const libc::siginfo_t,
    context: *const libc::c_void,
) -> bool {
    if signum != libc::SIGUSR1 || context.is_null() {
        return false;
    }
    // SAFETY: wasmer calls this from its SA_SIGINFO handler with the third argument the kernel
    // gave it, a `ucontext_t` of the interrupted thread that stays valid while the handler runs;
    // it is only read.
    let pc = unsafe { interrupted_pc(context) };
    pc.is_some_and(|pc| HOST_CODE.contains(pc))
}

/// The program counter of the interrupted thread, from the signal's `ucontext_t`.
///
/// # Safety
/// `context` must point to the `ucontext_t` of a signal being handled.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
unsafe fn interrupted_pc(context: *const libc::c_void) -> Option<usize> {
    // SAFETY: the caller guarantees `context` is a live `ucontext_t`.
    let context = unsafe { &*context.cast::<libc::ucontext_t>() };
    Some(context.uc_mcontext.gregs[libc::REG_RIP as usize] as usize)
}

/// The program counter of the interrupted thread, from the signal's `ucontext_t`.
///
/// # Safety
/// `context` must point to the `ucontext_t` of a signal being handled.
#[cfg(all(target_os = "linux", target_arch = "aarch64"))]
unsafe fn interrupted_pc(context: *const libc::c_void) -> Option<usize> {
    // SAFETY: the caller guarantees `context` is a live `ucontext_t`.
    let context = unsafe { &*context.cast::<libc::ucontext_t>() };
    Some(context.uc_mcontext.pc as usize)
}

/// Elsewhere the program counter is not read: every interrupt goes on to wasmer as before.
///
/// # Safety
/// None needed; the pointer is not read.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
unsafe fn interrupted_pc(_context: *const libc::c_void) -> Option<usize> {
    None
}

/// How many executable segments the table holds; a process has a few dozen.
const MAX_RANGES: usize = 1024;

/// The executable segments of every ELF object loaded so far, as `[start, end)` pairs. Only
/// ever appended to (under `writer`), and each pair is written before `len` publishes it, so
/// the signal handler reads it with atomics alone. A segment of a library unloaded since
/// stays listed, which only means an interrupt landing at that address waits for the next.
struct HostCode {
    starts: [AtomicUsize; MAX_RANGES],
    ends: [AtomicUsize; MAX_RANGES],
    len: AtomicUsize,
    writer: Mutex<()>,
}

static HOST_CODE: HostCode = HostCode {
    starts: [const { AtomicUsize::new(0) }; MAX_RANGES],
    ends: [const { AtomicUsize::new(0) }; MAX_RANGES],
    len: AtomicUsize::new(0),
    writer: Mutex::new(()),
};

impl HostCode {
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
        if listed || len == MAX_RANGES || start >= end {
            return;
        }
        self.starts[len].store(start, Ordering::Relaxed);
        self.ends[len].store(end, Ordering::Relaxed);
        self.len.store(len + 1, Ordering::Release);
    }

    /// Whether `pc` is in a listed segment. Safe in a signal handler: atomic loads only.
    fn contains(&self, pc: usize) -> bool {
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
        let limits = RunLimits {
            max_memory_bytes: 64 << 20,
            max_table_elements: hako_engine_api::MAX_TABLE_ELEMENTS,
        };
        for compiler in Compiler::ALL.into_iter().filter(|c| c.available()) {
            let engine = WasmerEngine::new(compiler, None).unwrap();
            let module = engine.compile(&wasm).unwrap();
            for run in 0..3000 {
                let watchdog = Nagging::default();
                let result = module.run(Box::new(QuickHost), limits, &watchdog);
                watchdog.finish();
                assert_eq!(result.exit, RunExit::Interrupted, "{compiler:?}, run {run}");
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

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn only_an_interrupt_in_host_code_is_swallowed() {
        HOST_CODE.refresh();
        // A ucontext whose program counter is this test function (host code), then zero.
        // SAFETY: an all-zero ucontext_t is a valid value of this plain C struct.
        let mut context: libc::ucontext_t = unsafe { std::mem::zeroed() };
        set_pc(
            &mut context,
            only_an_interrupt_in_host_code_is_swallowed as *const () as usize,
        );
        let pointer = (&raw const context).cast::<libc::c_void>();
        assert!(swallow_interrupt_in_host_code(
            libc::SIGUSR1,
            std::ptr::null(),
            pointer
        ));
        assert!(!swallow_interrupt_in_host_code(
            libc::SIGSEGV,
            std::ptr::null(),
            pointer
        ));
        set_pc(&mut context, 0);
        assert!(!swallow_interrupt_in_host_code(
            libc::SIGUSR1,
            std::ptr::null(),
            (&raw const context).cast::<libc::c_void>()
        ));
    }

    #[cfg(target_arch = "x86_64")]
    fn set_pc(context: &mut libc::ucontext_t, pc: usize) {
        context.uc_mcontext.gregs[libc::REG_RIP as usize] = pc as i64;
    }

    #[cfg(target_arch = "aarch64")]
    fn set_pc(context: &mut libc::ucontext_t, pc: usize) {
        context.uc_mcontext.pc = pc as u64;
    }
}
