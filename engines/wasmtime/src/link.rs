//! Linking: one typed wasmtime host function per ABI import, each a thin shim that hands the
//! import, its raw arguments and the guest's memory to the engine-neutral [`Host`]. The shim's
//! Rust signature is chosen from the API crate's table of signatures, so the table stays the
//! one list of them. The imports are resolved once per module into an [`InstancePre`], so a
//! run instantiates without looking anything up. This file implements no import itself.

use hako_engine_api::{Host, Import, Stop, ValType};
use wasmtime::{Caller, Engine, InstancePre, Linker, Memory};

use crate::limits::MemoryCap;

/// What a store holds for one run: the host of this run, the guest's memory once the
/// instance exists, and the memory cap.
pub(crate) struct RunState {
    pub(crate) host: Option<Box<dyn Host>>,
    pub(crate) memory: Option<Memory>,
    pub(crate) cap: MemoryCap,
}

/// A host call that ends the run, carried through wasmtime as the call's error.
#[derive(Debug, thiserror::Error)]
#[error("the host stopped the guest: {0:?}")]
pub(crate) struct HostStop(pub(crate) Stop);

fn dispatch(
    mut caller: Caller<'_, RunState>,
    import: Import,
    args: &[u64],
) -> wasmtime::Result<i32> {
    // The memory is the instance's exported `memory`, found once after instantiation. Before
    // that (a start function calling an import) the guest has no memory the host may see,
    // as on wasmer.
    let answer = match caller.data().memory {
        Some(memory) => {
            let (bytes, state) = memory.data_and_store_mut(&mut caller);
            call(state, import, args, bytes)
        }
        None => call(caller.data_mut(), import, args, &mut []),
    };
    answer.map_err(|stop| wasmtime::Error::new(HostStop(stop)))
}

fn call(
    state: &mut RunState,
    import: Import,
    args: &[u64],
    memory: &mut [u8],
) -> Result<i32, Stop> {
    match state.host.as_mut() {
        Some(host) => host.call(import, args, memory),
        // The host is only taken back after the run has ended; no guest code runs then.
        None => Err(Stop::Abort),
    }
}

/// A wasm argument as the raw 64-bit value the [`Host`] takes.
trait Raw {
    fn raw(self) -> u64;
}

impl Raw for i32 {
    fn raw(self) -> u64 {
        self as u32 as u64
    }
}

impl Raw for i64 {
    fn raw(self) -> u64 {
        self as u64
    }
}

/// Defines a typed shim with the given parameters for `import`, returning its `i32` result.
macro_rules! shim {
    ($linker:ident, $import:ident, ($($arg:ident: $ty:ty),*)) => {
        $linker.func_wrap(
            $import.module(),
            $import.name(),
            move |caller: Caller<'_, RunState>, $($arg: $ty),*| -> wasmtime::Result<i32> {
                dispatch(caller, $import, &[$($arg.raw()),*])
            },
        )
    };
}

/// Defines the host function for `import` in `linker`; `Ok(false)` for a signature no shim
/// has (the table's every signature has one; a test checks it).
fn define(linker: &mut Linker<RunState>, import: Import) -> wasmtime::Result<bool> {
    use ValType::{I32, I64};
    if import.results().is_empty() {
        // proc_exit: one i32, no result.
        if import.params() != [I32] {
            return Ok(false);
        }
        linker.func_wrap(
            import.module(),
            import.name(),
            move |caller: Caller<'_, RunState>, a: i32| -> wasmtime::Result<()> {
                dispatch(caller, import, &[a.raw()]).map(drop)
            },
        )?;
        return Ok(true);
    }
    match import.params() {
        [] => shim!(linker, import, ()),
        [I32] => shim!(linker, import, (a: i32)),
        [I32, I32] => shim!(linker, import, (a: i32, b: i32)),
        [I32, I64] => shim!(linker, import, (a: i32, b: i64)),
        [I32, I32, I32] => shim!(linker, import, (a: i32, b: i32, c: i32)),
        [I32, I64, I32] => shim!(linker, import, (a: i32, b: i64, c: i32)),
        [I32, I64, I64] => shim!(linker, import, (a: i32, b: i64, c: i64)),
        [I32, I32, I32, I32] => shim!(linker, import, (a: i32, b: i32, c: i32, d: i32)),
        [I32, I64, I32, I32] => shim!(linker, import, (a: i32, b: i64, c: i32, d: i32)),
        [I32, I64, I64, I32] => shim!(linker, import, (a: i32, b: i64, c: i64, d: i32)),
        [I32, I32, I32, I32, I32] => {
            shim!(linker, import, (a: i32, b: i32, c: i32, d: i32, e: i32))
        }
        [I32, I32, I32, I64, I32] => {
            shim!(linker, import, (a: i32, b: i32, c: i32, d: i64, e: i32))
        }
        [I32, I32, I32, I32, I32, I32] => {
            shim!(linker, import, (a: i32, b: i32, c: i32, d: i32, e: i32, f: i32))
        }
        [I32, I32, I32, I32, I32, I32, I32] => {
            shim!(linker, import, (a: i32, b: i32, c: i32, d: i32, e: i32, f: i32, g: i32))
        }
        [I32, I32, I32, I32, I64, I64, I32] => {
            shim!(linker, import, (a: i32, b: i32, c: i32, d: i32, e: i64, f: i64, g: i32))
        }
        [I32, I32, I32, I32, I32, I64, I64, I32, I32] => shim!(
            linker,
            import,
            (a: i32, b: i32, c: i32, d: i32, e: i32, f: i64, g: i64, h: i32, i: i32)
        ),
        _ => return Ok(false),
    }?;
    Ok(true)
}

/// The message of a wasmtime error with its causes, one after the other.
pub(crate) fn describe(error: &wasmtime::Error) -> String {
    error
        .chain()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// Every import of `module` resolved against the ABI's table, ready to instantiate; or why the
/// module cannot be instantiated (an import ABI 1 does not provide, or one of another type).
pub(crate) fn instance_pre(
    engine: &Engine,
    module: &wasmtime::Module,
) -> Result<InstancePre<RunState>, String> {
    let mut linker = Linker::new(engine);
    let mut defined = std::collections::BTreeSet::new();
    for import in module.imports() {
        let Some(known) = Import::lookup(import.module(), import.name()) else {
            return Err(format!(
                "the module imports {}.{}, which ABI 1 does not provide",
                import.module(),
                import.name()
            ));
        };
        if !defined.insert(known) {
            // The module imports the same function twice: one definition serves both.
            continue;
        }
        let linked = define(&mut linker, known).map_err(|err| describe(&err))?;
        if !linked {
            return Err(format!(
                "no host function links {}.{}",
                import.module(),
                import.name()
            ));
        }
    }
    linker.instantiate_pre(module).map_err(|err| describe(&err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Store, ValType as WasmType};

    #[test]
    fn every_import_links_with_exactly_its_table_signature() {
        let engine = Engine::default();
        let mut linker = Linker::new(&engine);
        for import in Import::all() {
            assert!(
                define(&mut linker, import).unwrap(),
                "{} has no shim",
                import.name()
            );
        }
        let mut store = Store::new(
            &engine,
            RunState {
                host: None,
                memory: None,
                cap: MemoryCap::new(
                    hako_engine_api::RunLimits {
                        max_memory_bytes: 0,
                        max_table_elements: 0,
                    },
                    0,
                ),
            },
        );
        let same = |ours: &[ValType], theirs: Vec<WasmType>| {
            ours.len() == theirs.len()
                && ours.iter().zip(&theirs).all(|(ours, theirs)| match ours {
                    ValType::I32 => matches!(theirs, WasmType::I32),
                    ValType::I64 => matches!(theirs, WasmType::I64),
                })
        };
        for import in Import::all() {
            let function = linker
                .get(&mut store, import.module(), import.name())
                .ok()
                .and_then(|export| export.into_func())
                .unwrap_or_else(|| panic!("{} is not linked", import.name()));
            let ty = function.ty(&store);
            assert!(
                same(import.params(), ty.params().collect()),
                "{}",
                import.name()
            );
            assert!(
                same(import.results(), ty.results().collect()),
                "{}",
                import.name()
            );
        }
    }
}
