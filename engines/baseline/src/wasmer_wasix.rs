//! The `wasmer-wasix` baseline: wasmer with cranelift and wasmer-wasix's own WASI layer, as a
//! wasmer embedder runs a WASI command without the CLI's runner: per call a `WasiEnv` built
//! with `WasiEnvBuilder` (pipes for stdin, stdout and stderr; a mount file system holding only
//! the call's host folders under their guest names, preopened; no networking), instantiated
//! into a fresh `Store` as a
//! `WasiFunctionEnv`, `_start` called, then `on_exit`. One `PluggableRuntime` on a small tokio
//! runtime serves every call, as an embedder keeps one; it adds `subako_http` stubs without a
//! network to every instance. It does not cap memory or time.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use wasmer::sys::{Cranelift, EngineBuilder};
use wasmer::{imports, Engine, Function, Module, Store};
use wasmer_wasix::virtual_fs::host_fs;
use wasmer_wasix::virtual_fs::mount_fs::MountFileSystem;
use wasmer_wasix::{Pipe, PluggableRuntime, WasiEnv, WasiError};

use crate::{
    first_line, stderr_tail, BaselineError, Call, Compiled, Runtime, HTTP_UNAVAILABLE, STDOUT_LIMIT,
};

const NAME: &str = "wasmer-wasix";
const WASMER_VERSION: &str = "7.4.2";
const WASIX_VERSION: &str = "0.704.2";

fn setup(message: impl std::fmt::Display) -> BaselineError {
    BaselineError::Setup {
        runtime: NAME,
        message: message.to_string(),
    }
}

/// wasmer (cranelift) with wasmer-wasix.
pub struct WasmerWasix {
    engine: Engine,
    shared: Arc<Shared>,
}

/// What every call of every module uses: the tokio runtime wasmer-wasix's task manager (and
/// its host file systems) run on, and its `Runtime`.
struct Shared {
    tokio: tokio::runtime::Runtime,
    runtime: Arc<PluggableRuntime>,
}

impl WasmerWasix {
    pub fn new() -> Result<Self, BaselineError> {
        let engine: Engine = EngineBuilder::new(Cranelift::new()).engine().into();
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(setup)?;
        let _entered = tokio.enter();
        let mut runtime = PluggableRuntime::new(Arc::new(
            wasmer_wasix::runtime::task_manager::tokio::TokioTaskManager::default(),
        ));
        runtime.set_engine(engine.clone());
        runtime.with_additional_imports(|_module, store| {
            let stub = |store: &mut wasmer::StoreMut| {
                Function::new_typed(store, |_: i32, _: i32| -> i32 { HTTP_UNAVAILABLE })
            };
            Ok(imports! {
                "subako_http" => {
                    "request" => stub(store),
                    "read_response" => stub(store),
                },
            })
        });
        let shared = Shared {
            runtime: Arc::new(runtime),
            tokio,
        };
        Ok(Self {
            engine,
            shared: Arc::new(shared),
        })
    }

    fn wrap(&self, module: Module) -> Arc<dyn Compiled> {
        Arc::new(WasmerWasixModule {
            engine: self.engine.clone(),
            module,
            shared: Arc::clone(&self.shared),
        })
    }
}

impl Runtime for WasmerWasix {
    fn name(&self) -> &'static str {
        NAME
    }

    fn versions(&self) -> Vec<(&'static str, &'static str)> {
        vec![("wasmer", WASMER_VERSION), ("wasmer-wasix", WASIX_VERSION)]
    }

    fn compile(&self, wasm: &[u8]) -> Result<Arc<dyn Compiled>, BaselineError> {
        let module = Module::new(&self.engine, wasm).map_err(|err| BaselineError::Compile {
            runtime: NAME,
            message: err.to_string(),
        })?;
        Ok(self.wrap(module))
    }

    #[allow(unsafe_code)]
    unsafe fn load(&self, path: &Path) -> Result<Arc<dyn Compiled>, BaselineError> {
        // SAFETY: the caller promises that `path` holds what `serialize` wrote with this
        // engine in this build, which is all wasmer's deserializer requires.
        let module =
            unsafe { Module::deserialize_from_file(&self.engine, path) }.map_err(|err| {
                BaselineError::Load {
                    runtime: NAME,
                    message: err.to_string(),
                }
            })?;
        Ok(self.wrap(module))
    }
}

struct WasmerWasixModule {
    engine: Engine,
    module: Module,
    shared: Arc<Shared>,
}

/// Everything `pipe` holds now, without waiting for more.
fn drain(pipe: &mut Pipe) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buffer = [0u8; 8192];
    while let Some(read) = pipe.try_read(&mut buffer) {
        if read == 0 || out.len() > STDOUT_LIMIT {
            break;
        }
        out.extend_from_slice(&buffer[..read]);
    }
    out
}

impl Compiled for WasmerWasixModule {
    fn serialize(&self) -> Result<Vec<u8>, BaselineError> {
        self.module
            .serialize()
            .map(|bytes| bytes.to_vec())
            .map_err(|err| BaselineError::Serialize {
                runtime: NAME,
                message: err.to_string(),
            })
    }

    fn call(&self, call: &Call<'_>) -> Result<Vec<u8>, BaselineError> {
        let _entered = self.shared.tokio.enter();
        let volume_tmp = tempfile::tempdir().map_err(setup)?;

        // stdin: the request line, then end of file once the host closes its end.
        let (mut stdin_host, stdin_guest) = Pipe::channel();
        stdin_host.write_all(call.request_line).map_err(setup)?;
        stdin_host.close();
        let (mut stdout_host, stdout_guest) = Pipe::channel();
        let (mut stderr_host, stderr_guest) = Pipe::channel();

        // The guest sees only the call's folders: each host folder mounted at its guest name.
        let handle = self.shared.tokio.handle();
        let mounts = MountFileSystem::new();
        let volume = host_fs::FileSystem::new(handle.clone(), volume_tmp.path()).map_err(setup)?;
        mounts
            .mount("/volume/tmp", Arc::new(volume))
            .map_err(setup)?;
        if let Some(assets) = call.package_assets {
            let package = host_fs::FileSystem::new(handle.clone(), assets).map_err(setup)?;
            mounts.mount("/package", Arc::new(package)).map_err(setup)?;
        }
        let mut builder = WasiEnv::builder(call.program)
            .runtime(self.shared.runtime.clone())
            .mount_fs(mounts)
            .stdin(Box::new(stdin_guest))
            .stdout(Box::new(stdout_guest))
            .stderr(Box::new(stderr_guest))
            .preopen_build(|dir| {
                dir.directory("/volume/tmp")
                    .alias("/volume/tmp")
                    .read(true)
                    .write(true)
                    .create(true)
            })
            .map_err(setup)?;
        if call.package_assets.is_some() {
            builder = builder
                .preopen_build(|dir| dir.directory("/package").alias("/package").read(true))
                .map_err(setup)?;
        }

        let mut store = Store::new(self.engine.clone());
        let (instance, env) = builder
            .instantiate(self.module.clone(), &mut store)
            .map_err(|err| BaselineError::Guest {
                runtime: NAME,
                message: format!("instantiating: {err}"),
                stderr: String::new(),
            })?;
        let ran = instance
            .exports
            .get_function("_start")
            .map_err(|err| err.to_string())
            .and_then(|start| {
                start
                    .call(&mut store, &[])
                    .map_err(|err| match err.downcast_ref::<WasiError>() {
                        Some(WasiError::Exit(code)) if code.is_success() => String::new(),
                        Some(WasiError::Exit(code)) => format!("it exited with {}", code.raw()),
                        _ => err.to_string(),
                    })
            });
        env.on_exit(&mut store, None);
        drop(instance);
        drop(store);

        let stdout = drain(&mut stdout_host);
        let stderr = drain(&mut stderr_host);
        let failed = |message: String| BaselineError::Guest {
            runtime: NAME,
            message,
            stderr: stderr_tail(&stderr),
        };
        match ran {
            Ok(_) => {}
            Err(message) if message.is_empty() => {}
            Err(message) => return Err(failed(message)),
        }
        first_line(&stdout)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| failed(format!("it printed no line ({} bytes)", stdout.len())))
    }
}
