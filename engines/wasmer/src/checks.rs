//! Deadline checks compiled into guest code: a flag that every function entry and every loop
//! header tests, so that a deadline stops a guest without unwinding anything but its own code.
//!
//! The interrupt's signal ([`crate::interrupt`]) can only stop code that is running when it
//! lands. A guest whose time goes to bulk instructions (`memory.copy`, `memory.fill`,
//! `memory.init`, the table ones) spends it in wasmer's libcalls and libc's `memmove`/`memset`,
//! which are host code that [`crate::interrupt`] must not unwind: a loop of them outran a 1 s
//! limit by over a minute. So, as wasmtime does with its epochs, the compiled code checks:
//!
//! - [`DeadlineChecks`] (a wasmer middleware, given to every compiler) adds one mutable `i32`
//!   global to the module, exported as [`FLAG_EXPORT`], and puts `global.get $flag (if
//!   (unreachable))` at the entry of every function, after the start of every `loop` and after
//!   every bulk instruction. Every path through guest code that can run long passes one of
//!   them: a loop, a call, or a straight run of bulk instructions (a function body of 1 MiB
//!   holds over 100,000 of them, each of which may touch the whole memory cap). What runs
//!   between two checks is then one bulk instruction at most, bounded by the memory cap or the
//!   table bound.
//! - The module's start function, if any, is taken out of instantiation and exported as
//!   [`START_EXPORT`], so that it runs after the flag can be reached (wasm's instantiation runs
//!   it before any export is visible). Nothing can observe the instance in between.
//! - [`Flag`] is the run's handle on that global: the deadline thread raises it (an atomic
//!   store into the global's definition), and a trap at `unreachable` while it is raised is an
//!   interrupt, not the guest's own trap.
//!
//! The check costs a load and a branch per function call and per loop iteration; the figures
//! are in the README. What this file does not do: decide when a deadline passes.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use wasmer::sys::wasmparser::{BlockType, Operator};
use wasmer::sys::{FunctionMiddleware, MiddlewareReaderState, ModuleMiddleware};
use wasmer_types::{
    ExportIndex, GlobalIndex, GlobalInit, GlobalType, LocalFunctionIndex, MiddlewareError,
    ModuleInfo, Mutability, Type,
};

/// The export under which a compiled module carries its deadline flag. Names starting with a
/// NUL byte are not ones a toolchain makes; a module that exports it anyway does not compile.
pub(crate) const FLAG_EXPORT: &str = "\0hako.deadline";

/// How the checks appear in an engine's identity: their version, raised when the code they
/// emit changes.
pub(crate) const SETTINGS: &str = "checks=deadline-2";

/// The export under which a compiled module carries its start function, if it has one.
pub(crate) const START_EXPORT: &str = "\0hako.start";

/// The middleware; one per compile (it remembers the flag's index for the module it saw).
#[derive(Debug, Default)]
pub(crate) struct DeadlineChecks {
    flag: Mutex<Option<GlobalIndex>>,
}

impl DeadlineChecks {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

impl ModuleMiddleware for DeadlineChecks {
    fn transform_module_info(&self, info: &mut ModuleInfo) -> Result<(), MiddlewareError> {
        for reserved in [FLAG_EXPORT, START_EXPORT] {
            if info.exports.contains_key(reserved) {
                return Err(MiddlewareError::new(
                    "deadline checks",
                    format!("the module exports {reserved:?}, a name hako reserves"),
                ));
            }
        }
        let flag = info
            .globals
            .push(GlobalType::new(Type::I32, Mutability::Var));
        info.global_initializers.push(GlobalInit::I32Const(0));
        info.exports
            .insert(FLAG_EXPORT.to_string(), ExportIndex::Global(flag));
        if let Some(start) = info.start_function.take() {
            info.exports
                .insert(START_EXPORT.to_string(), ExportIndex::Function(start));
        }
        *self.flag.lock().unwrap_or_else(|p| p.into_inner()) = Some(flag);
        Ok(())
    }

    fn generate_function_middleware<'a>(
        &self,
        _: LocalFunctionIndex,
    ) -> Box<dyn FunctionMiddleware<'a> + 'a> {
        let flag = self
            .flag
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .expect("wasmer transforms the module's info before it compiles any function");
        Box::new(FunctionChecks {
            flag: flag.as_u32(),
            entered: false,
        })
    }
}

/// The checks of one function.
#[derive(Debug)]
struct FunctionChecks {
    flag: u32,
    /// Whether the entry check has been emitted (before the body's first operator).
    entered: bool,
}

impl FunctionChecks {
    fn check<'a>(&self, state: &mut MiddlewareReaderState<'a>) {
        state.extend([
            Operator::GlobalGet {
                global_index: self.flag,
            },
            Operator::If {
                blockty: BlockType::Empty,
            },
            Operator::Unreachable,
            Operator::End,
        ]);
    }
}

impl<'a> FunctionMiddleware<'a> for FunctionChecks {
    fn feed(
        &mut self,
        operator: Operator<'a>,
        state: &mut MiddlewareReaderState<'a>,
    ) -> Result<(), MiddlewareError> {
        if !self.entered {
            self.entered = true;
            self.check(state);
        }
        let checked_after = matches!(
            operator,
            Operator::Loop { .. }
                | Operator::MemoryFill { .. }
                | Operator::MemoryCopy { .. }
                | Operator::MemoryInit { .. }
                | Operator::TableFill { .. }
                | Operator::TableCopy { .. }
                | Operator::TableInit { .. }
        );
        state.push_operator(operator);
        if checked_after {
            self.check(state);
        }
        Ok(())
    }
}

/// One run's deadline flag: raised by the deadline thread, reachable only while the run's
/// store lives.
#[derive(Default)]
pub(crate) struct Flag {
    state: Mutex<FlagState>,
}

#[derive(Default)]
struct FlagState {
    raised: bool,
    /// The flag global's value in the running instance, while it runs.
    target: Option<GlobalSlot>,
}

/// The address of an `i32` global's value inside a live store.
struct GlobalSlot(NonNull<i32>);

// SAFETY: the slot is only written through an atomic, and only while the `Flag` holds it, which
// the run ends (`detach`) before its store is dropped.
unsafe impl Send for GlobalSlot {}

impl GlobalSlot {
    fn raise(&self) {
        // SAFETY: the pointer is the live value of an `i32` global (see `attach`), suitably
        // aligned; compiled code only reads it, so an atomic store races with nothing.
        unsafe { AtomicI32::from_ptr(self.0.as_ptr()) }.store(1, Ordering::Relaxed);
    }
}

impl Flag {
    /// Raises the flag: now, if the instance runs, or as soon as it is attached.
    pub(crate) fn raise(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.raised = true;
        if let Some(slot) = &state.target {
            slot.raise();
        }
    }

    /// Whether the flag has been raised.
    pub(crate) fn raised(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).raised
    }

    /// Points the flag at `instance`'s flag global, raising it there if the deadline has
    /// already passed. An instance compiled without checks (which the store's artifact header
    /// rules out) has no such global and is left to the interrupt's signal.
    pub(crate) fn attach(&self, instance: &wasmer::Instance, store: &mut wasmer::Store) {
        let Ok(global) = instance.exports.get_global(FLAG_EXPORT) else {
            return;
        };
        let extern_ = wasmer::Extern::Global(global.clone()).to_vm_extern();
        let wasmer_vm::VMExtern::Global(handle) = extern_.unwrap_sys() else {
            unreachable!("a global's extern is a global");
        };
        use wasmer::AsStoreMut;
        let definition = handle.get(store.objects_mut().as_sys()).vmglobal();
        // The definition is a `RawValue` union whose `i32` member sits at its start; it lives
        // in the store, at a fixed address, as long as the store does.
        let slot = GlobalSlot(definition.cast::<i32>());
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.raised {
            slot.raise();
        }
        state.target = Some(slot);
    }

    /// A guard that forgets the instance's global when dropped; it must be dropped before the
    /// instance's store.
    pub(crate) fn detach_on_drop(&self) -> Detach<'_> {
        Detach(self)
    }
}

/// Forgets the instance's global when dropped, see [`Flag::detach_on_drop`].
pub(crate) struct Detach<'a>(&'a Flag);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        self.0
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .target = None;
    }
}
