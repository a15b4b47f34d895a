//! Linking: one typed wasmer host function per ABI import, each a thin shim that hands the
//! import, its raw arguments and the guest's memory to the engine-neutral [`Host`]. The shim's
//! Rust signature is chosen from the API crate's table of signatures, so the table stays the
//! one list of them; this file implements no import itself.

use hako_engine_api::{Host, Import, Stop, ValType};
use wasmer::{Function, FunctionEnv, FunctionEnvMut, Memory, Store};

/// What every host function can reach: the host of this run and the guest's memory.
pub(crate) struct HostEnv {
    pub(crate) host: Option<Box<dyn Host>>,
    pub(crate) memory: Option<Memory>,
}

/// A host call that ends the run, carried through wasmer as the call's error.
#[derive(Debug, thiserror::Error)]
#[error("the host stopped the guest: {0:?}")]
pub(crate) struct HostStop(pub(crate) Stop);

fn dispatch(
    ctx: &mut FunctionEnvMut<HostEnv>,
    import: Import,
    args: &[u64],
) -> Result<i32, HostStop> {
    let (env, store) = ctx.data_and_store_mut();
    let Some(host) = env.host.as_mut() else {
        // The host is only taken back after the run has ended; no guest code runs then.
        return Err(HostStop(Stop::Abort));
    };
    match env.memory.as_ref() {
        Some(memory) => {
            let view = memory.view(&store);
            // SAFETY: the guest's memory is not shared (the package check refuses threads and
            // shared memories, and the engine's features exclude them), the guest is suspended
            // in this host call so nothing else reads or writes it, the host does not re-enter
            // the guest, and the slice does not outlive this call, during which the memory
            // cannot grow.
            let bytes = unsafe { view.data_unchecked_mut() };
            host.call(import, args, bytes).map_err(HostStop)
        }
        // A start function calling an import before `memory` is known sees no memory.
        None => host.call(import, args, &mut []).map_err(HostStop),
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

/// A typed shim with the given parameters for `import`, returning its `i32` result.
macro_rules! shim {
    ($store:ident, $env:ident, $import:ident, ($($arg:ident: $ty:ty),*)) => {
        Function::new_typed_with_env(
            $store,
            $env,
            move |mut ctx: FunctionEnvMut<HostEnv>, $($arg: $ty),*| -> Result<i32, HostStop> {
                dispatch(&mut ctx, $import, &[$($arg.raw()),*])
            },
        )
    };
}

/// The host function for `import`, bound to `env`, or `None` for a signature no shim has
/// (the table's every signature has one; a test checks it).
pub(crate) fn host_function(
    store: &mut Store,
    env: &FunctionEnv<HostEnv>,
    import: Import,
) -> Option<Function> {
    use ValType::{I32, I64};
    if import.results().is_empty() {
        // proc_exit: one i32, no result.
        return match import.params() {
            [I32] => Some(Function::new_typed_with_env(
                store,
                env,
                move |mut ctx: FunctionEnvMut<HostEnv>, a: i32| -> Result<(), HostStop> {
                    dispatch(&mut ctx, import, &[a.raw()]).map(drop)
                },
            )),
            _ => None,
        };
    }
    let function = match import.params() {
        [] => shim!(store, env, import, ()),
        [I32] => shim!(store, env, import, (a: i32)),
        [I32, I32] => shim!(store, env, import, (a: i32, b: i32)),
        [I32, I64] => shim!(store, env, import, (a: i32, b: i64)),
        [I32, I32, I32] => shim!(store, env, import, (a: i32, b: i32, c: i32)),
        [I32, I64, I32] => shim!(store, env, import, (a: i32, b: i64, c: i32)),
        [I32, I64, I64] => shim!(store, env, import, (a: i32, b: i64, c: i64)),
        [I32, I32, I32, I32] => shim!(store, env, import, (a: i32, b: i32, c: i32, d: i32)),
        [I32, I64, I32, I32] => shim!(store, env, import, (a: i32, b: i64, c: i32, d: i32)),
        [I32, I64, I64, I32] => shim!(store, env, import, (a: i32, b: i64, c: i64, d: i32)),
        [I32, I32, I32, I32, I32] => {
            shim!(store, env, import, (a: i32, b: i32, c: i32, d: i32, e: i32))
        }
        [I32, I32, I32, I64, I32] => {
            shim!(store, env, import, (a: i32, b: i32, c: i32, d: i64, e: i32))
        }
        [I32, I32, I32, I32, I32, I32] => {
            shim!(store, env, import, (a: i32, b: i32, c: i32, d: i32, e: i32, f: i32))
        }
        [I32, I32, I32, I32, I32, I32, I32] => {
            shim!(store, env, import, (a: i32, b: i32, c: i32, d: i32, e: i32, f: i32, g: i32))
        }
        [I32, I32, I32, I32, I64, I64, I32] => {
            shim!(store, env, import, (a: i32, b: i32, c: i32, d: i32, e: i64, f: i64, g: i32))
        }
        [I32, I32, I32, I32, I32, I64, I64, I32, I32] => shim!(
            store,
            env,
            import,
            (a: i32, b: i32, c: i32, d: i32, e: i32, f: i64, g: i64, h: i32, i: i32)
        ),
        _ => return None,
    };
    Some(function)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmer::Type;

    #[test]
    fn every_import_links_with_exactly_its_table_signature() {
        let mut store = Store::default();
        let env = FunctionEnv::new(
            &mut store,
            HostEnv {
                host: None,
                memory: None,
            },
        );
        let wasm_type = |ty: &ValType| match ty {
            ValType::I32 => Type::I32,
            ValType::I64 => Type::I64,
        };
        for import in Import::all() {
            let function = host_function(&mut store, &env, import)
                .unwrap_or_else(|| panic!("{} has no shim", import.name()));
            let ty = function.ty(&store);
            let params: Vec<Type> = import.params().iter().map(wasm_type).collect();
            let results: Vec<Type> = import.results().iter().map(wasm_type).collect();
            assert_eq!(ty.params(), params.as_slice(), "{}", import.name());
            assert_eq!(ty.results(), results.as_slice(), "{}", import.name());
        }
    }
}
