//! The `wasmtime-wasi` baseline: wasmtime with the pooling allocator and wasmtime-wasi's
//! preview 1, as a typical wasmtime host runs a WASI command: one `Linker` with
//! `p1::add_to_linker_sync`, an `InstancePre` per module, and per call a fresh `Store` holding a
//! `WasiP1Ctx` built with `WasiCtxBuilder` (in-memory stdin, captured stdout and stderr, the
//! preopens). `subako_http` is linked to stubs without a network. It does not cap memory or
//! time: the bench calls only packages that answer.

use std::path::Path;
use std::sync::Arc;

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, Store,
};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::{
    first_line, stderr_tail, BaselineError, Call, Compiled, Runtime, HTTP_UNAVAILABLE, STDOUT_LIMIT,
};

const NAME: &str = "wasmtime-wasi";
const WASMTIME_VERSION: &str = "48.0.0";

/// Instances the pool holds at once: enough for every thread the bench runs.
const POOL_INSTANCES: u32 = 256;
/// The largest linear memory a pooled slot takes, hako's default cap.
const POOL_MEMORY_BYTES: usize = 256 << 20;

fn setup(message: impl std::fmt::Display) -> BaselineError {
    BaselineError::Setup {
        runtime: NAME,
        message: message.to_string(),
    }
}

/// wasmtime, pooled, with wasmtime-wasi's preview 1 linked.
pub struct WasmtimeWasi {
    engine: Engine,
    linker: Arc<Linker<WasiP1Ctx>>,
}

impl WasmtimeWasi {
    pub fn new() -> Result<Self, BaselineError> {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(POOL_INSTANCES)
            .total_memories(POOL_INSTANCES)
            .total_tables(POOL_INSTANCES)
            .total_stacks(POOL_INSTANCES)
            .max_memory_size(POOL_MEMORY_BYTES);
        let mut config = Config::new();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(setup)?;
        let mut linker = Linker::new(&engine);
        p1::add_to_linker_sync(&mut linker, |ctx| ctx).map_err(setup)?;
        for name in ["request", "read_response"] {
            linker
                .func_wrap("subako_http", name, |_: i32, _: i32| HTTP_UNAVAILABLE)
                .map_err(setup)?;
        }
        Ok(Self {
            engine,
            linker: Arc::new(linker),
        })
    }

    fn prepare(&self, module: Module) -> Result<Arc<dyn Compiled>, BaselineError> {
        let pre = self
            .linker
            .instantiate_pre(&module)
            .map_err(|err| BaselineError::Load {
                runtime: NAME,
                message: format!("{err:#}"),
            })?;
        Ok(Arc::new(WasmtimeWasiModule {
            engine: self.engine.clone(),
            module,
            pre,
        }))
    }
}

impl Runtime for WasmtimeWasi {
    fn name(&self) -> &'static str {
        NAME
    }

    fn versions(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("wasmtime", WASMTIME_VERSION),
            ("wasmtime-wasi", WASMTIME_VERSION),
        ]
    }

    fn compile(&self, wasm: &[u8]) -> Result<Arc<dyn Compiled>, BaselineError> {
        let module = Module::new(&self.engine, wasm).map_err(|err| BaselineError::Compile {
            runtime: NAME,
            message: format!("{err:#}"),
        })?;
        self.prepare(module)
    }

    #[allow(unsafe_code)]
    unsafe fn load(&self, path: &Path) -> Result<Arc<dyn Compiled>, BaselineError> {
        // SAFETY: the caller promises that `path` holds what `serialize` wrote with this
        // engine; wasmtime further checks its own header (version, target, configuration).
        let module = unsafe { Module::deserialize_file(&self.engine, path) }.map_err(|err| {
            BaselineError::Load {
                runtime: NAME,
                message: format!("{err:#}"),
            }
        })?;
        self.prepare(module)
    }
}

struct WasmtimeWasiModule {
    engine: Engine,
    module: Module,
    pre: InstancePre<WasiP1Ctx>,
}

impl Compiled for WasmtimeWasiModule {
    fn serialize(&self) -> Result<Vec<u8>, BaselineError> {
        self.module
            .serialize()
            .map_err(|err| BaselineError::Serialize {
                runtime: NAME,
                message: format!("{err:#}"),
            })
    }

    fn call(&self, call: &Call<'_>) -> Result<Vec<u8>, BaselineError> {
        let volume_tmp = tempfile::tempdir().map_err(setup)?;
        let stdout = MemoryOutputPipe::new(STDOUT_LIMIT);
        let stderr = MemoryOutputPipe::new(STDOUT_LIMIT);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(MemoryInputPipe::new(call.request_line.to_vec()))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .arg(call.program)
            .preopened_dir(volume_tmp.path(), "/volume/tmp", FsPerms::ReadWrite)
            .map_err(setup)?;
        if let Some(assets) = call.package_assets {
            wasi.preopened_dir(assets, "/package", FsPerms::ReadOnly)
                .map_err(setup)?;
        }
        let mut store = Store::new(&self.engine, wasi.build_p1());
        let ran = self
            .pre
            .instantiate(&mut store)
            .and_then(|instance| instance.get_typed_func::<(), ()>(&mut store, "_start"))
            .and_then(|start| start.call(&mut store, ()));
        drop(store);
        let stderr = stderr.contents();
        let failed = |message: String| BaselineError::Guest {
            runtime: NAME,
            message,
            stderr: stderr_tail(&stderr),
        };
        match ran {
            Ok(()) => {}
            Err(err) => match err.downcast_ref::<I32Exit>() {
                Some(I32Exit(0)) => {}
                Some(I32Exit(status)) => return Err(failed(format!("it exited with {status}"))),
                None => return Err(failed(format!("{err:#}"))),
            },
        }
        let stdout = stdout.contents();
        first_line(&stdout)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| failed(format!("it printed no line ({} bytes)", stdout.len())))
    }
}
