//! Linking: one typed wasmer host function per ABI import, each a thin shim that hands the
//! import, its raw arguments and the guest's memory to the engine-neutral [`Host`]. This file
//! knows the signatures only through the API crate's table; it implements no import itself.

use hako_engine_api::{Host, Import, Stop};
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

/// The host function for `import`, bound to `env`.
pub(crate) fn host_function(
    store: &mut Store,
    env: &FunctionEnv<HostEnv>,
    import: Import,
) -> Function {
    match import {
        Import::ArgsGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::ArgsGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::ArgsSizesGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::ArgsSizesGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::EnvironGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::EnvironGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::EnvironSizesGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::EnvironSizesGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::ClockResGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::ClockResGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::ClockTimeGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i64,
             a2: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::ClockTimeGet,
                    &[a0 as u32 as u64, a1 as u64, a2 as u32 as u64],
                )
            },
        ),
        Import::FdAdvise => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i64,
             a2: i64,
             a3: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdAdvise,
                    &[a0 as u32 as u64, a1 as u64, a2 as u64, a3 as u32 as u64],
                )
            },
        ),
        Import::FdAllocate => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i64,
             a2: i64|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdAllocate,
                    &[a0 as u32 as u64, a1 as u64, a2 as u64],
                )
            },
        ),
        Import::FdClose => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32| -> Result<i32, HostStop> {
                dispatch(&mut ctx, Import::FdClose, &[a0 as u32 as u64])
            },
        ),
        Import::FdDatasync => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32| -> Result<i32, HostStop> {
                dispatch(&mut ctx, Import::FdDatasync, &[a0 as u32 as u64])
            },
        ),
        Import::FdFdstatGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdFdstatGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::FdFdstatSetFlags => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdFdstatSetFlags,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::FdFdstatSetRights => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i64,
             a2: i64|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdFdstatSetRights,
                    &[a0 as u32 as u64, a1 as u64, a2 as u64],
                )
            },
        ),
        Import::FdFilestatGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdFilestatGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::FdFilestatSetSize => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i64| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdFilestatSetSize,
                    &[a0 as u32 as u64, a1 as u64],
                )
            },
        ),
        Import::FdFilestatSetTimes => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i64,
             a2: i64,
             a3: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdFilestatSetTimes,
                    &[a0 as u32 as u64, a1 as u64, a2 as u64, a3 as u32 as u64],
                )
            },
        ),
        Import::FdPread => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i64,
             a4: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdPread,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u64,
                        a4 as u32 as u64,
                    ],
                )
            },
        ),
        Import::FdPrestatGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdPrestatGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::FdPrestatDirName => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdPrestatDirName,
                    &[a0 as u32 as u64, a1 as u32 as u64, a2 as u32 as u64],
                )
            },
        ),
        Import::FdPwrite => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i64,
             a4: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdPwrite,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u64,
                        a4 as u32 as u64,
                    ],
                )
            },
        ),
        Import::FdRead => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdRead,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                    ],
                )
            },
        ),
        Import::FdReaddir => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i64,
             a4: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdReaddir,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u64,
                        a4 as u32 as u64,
                    ],
                )
            },
        ),
        Import::FdRenumber => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdRenumber,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::FdSeek => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i64,
             a2: i32,
             a3: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdSeek,
                    &[
                        a0 as u32 as u64,
                        a1 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                    ],
                )
            },
        ),
        Import::FdSync => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32| -> Result<i32, HostStop> {
                dispatch(&mut ctx, Import::FdSync, &[a0 as u32 as u64])
            },
        ),
        Import::FdTell => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdTell,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::FdWrite => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::FdWrite,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                    ],
                )
            },
        ),
        Import::PathCreateDirectory => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathCreateDirectory,
                    &[a0 as u32 as u64, a1 as u32 as u64, a2 as u32 as u64],
                )
            },
        ),
        Import::PathFilestatGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathFilestatGet,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u32 as u64,
                    ],
                )
            },
        ),
        Import::PathFilestatSetTimes => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i64,
             a5: i64,
             a6: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathFilestatSetTimes,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u64,
                        a5 as u64,
                        a6 as u32 as u64,
                    ],
                )
            },
        ),
        Import::PathLink => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i32,
             a5: i32,
             a6: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathLink,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u32 as u64,
                        a5 as u32 as u64,
                        a6 as u32 as u64,
                    ],
                )
            },
        ),
        Import::PathOpen => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i32,
             a5: i64,
             a6: i64,
             a7: i32,
             a8: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathOpen,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u32 as u64,
                        a5 as u64,
                        a6 as u64,
                        a7 as u32 as u64,
                        a8 as u32 as u64,
                    ],
                )
            },
        ),
        Import::PathReadlink => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i32,
             a5: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathReadlink,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u32 as u64,
                        a5 as u32 as u64,
                    ],
                )
            },
        ),
        Import::PathRemoveDirectory => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathRemoveDirectory,
                    &[a0 as u32 as u64, a1 as u32 as u64, a2 as u32 as u64],
                )
            },
        ),
        Import::PathRename => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i32,
             a5: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathRename,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u32 as u64,
                        a5 as u32 as u64,
                    ],
                )
            },
        ),
        Import::PathSymlink => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathSymlink,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u32 as u64,
                    ],
                )
            },
        ),
        Import::PathUnlinkFile => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PathUnlinkFile,
                    &[a0 as u32 as u64, a1 as u32 as u64, a2 as u32 as u64],
                )
            },
        ),
        Import::PollOneoff => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::PollOneoff,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                    ],
                )
            },
        ),
        Import::ProcExit => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32| -> Result<(), HostStop> {
                dispatch(&mut ctx, Import::ProcExit, &[a0 as u32 as u64]).map(drop)
            },
        ),
        Import::ProcRaise => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32| -> Result<i32, HostStop> {
                dispatch(&mut ctx, Import::ProcRaise, &[a0 as u32 as u64])
            },
        ),
        Import::SchedYield => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>| -> Result<i32, HostStop> {
                dispatch(&mut ctx, Import::SchedYield, &[])
            },
        ),
        Import::RandomGet => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::RandomGet,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::SockAccept => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::SockAccept,
                    &[a0 as u32 as u64, a1 as u32 as u64, a2 as u32 as u64],
                )
            },
        ),
        Import::SockRecv => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i32,
             a5: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::SockRecv,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u32 as u64,
                        a5 as u32 as u64,
                    ],
                )
            },
        ),
        Import::SockSend => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>,
             a0: i32,
             a1: i32,
             a2: i32,
             a3: i32,
             a4: i32|
             -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::SockSend,
                    &[
                        a0 as u32 as u64,
                        a1 as u32 as u64,
                        a2 as u32 as u64,
                        a3 as u32 as u64,
                        a4 as u32 as u64,
                    ],
                )
            },
        ),
        Import::SockShutdown => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::SockShutdown,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::HttpRequest => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::HttpRequest,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
        Import::HttpReadResponse => Function::new_typed_with_env(
            store,
            env,
            |mut ctx: FunctionEnvMut<HostEnv>, a0: i32, a1: i32| -> Result<i32, HostStop> {
                dispatch(
                    &mut ctx,
                    Import::HttpReadResponse,
                    &[a0 as u32 as u64, a1 as u32 as u64],
                )
            },
        ),
    }
}
