//! What `hako bench` times: a *subject* is one engine configuration of hako's own host
//! (`wasmer-cranelift`, `wasmtime`, …, through [`crate::engines`] and the call contract of
//! [`crate::call`]) or one comparison baseline (`wasmtime-wasi`, `wasmer-wasix`, through
//! [`hako_engine_baseline`]). Each can compile the package's module, write its artifact, load
//! it back and make one call, whose answer comes back as what the model is shown, so answers
//! compare across subjects.
//!
//! It names no engine type and keeps no time: `measure` does that.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hako_engine_api::{Engine, Module};
use hako_engine_baseline::{Compiled, Runtime};

use crate::call::{
    self, CallOutcome, CallStats, Limits, Mounts, Network, ReadyInstance, ToolRequest,
};
use crate::compile::{self, CompileBounds};
use crate::engines::{self, EngineConfig};
use crate::http::{NoBroker, PackagePolicy};
use crate::protocol::{self, Answer, CallResult, Line, RequestId};
use crate::store::{ArtifactCache, ArtifactKey};

/// What every call of a run does: the package's module, the tool and its arguments.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The package's name (the guest's `argv[0]`).
    pub program: String,
    pub wasm: Vec<u8>,
    pub module_sha256: String,
    pub uses_simd: bool,
    /// The package's assets folder, mounted read-only as `/package`.
    pub assets: Option<PathBuf>,
    pub tool: String,
    /// Shared by every call of the run (a call's request holds it, uncopied).
    pub arguments: Arc<serde_json::Value>,
}

/// A module a subject compiled or loaded, ready for calls.
#[derive(Clone)]
pub enum Ready {
    Host(Arc<dyn Module>),
    Baseline(Arc<dyn Compiled>),
}

enum Kind {
    /// hako's host on one of its engines; artifacts live in hako's artifact cache.
    Host {
        config: EngineConfig,
        engine: Arc<dyn Engine>,
        key: ArtifactKey,
        cache: ArtifactCache,
        network: Network,
    },
    /// A baseline; its artifact is one file in the run's folder.
    Baseline {
        runtime: Arc<dyn Runtime>,
        artifact: PathBuf,
    },
}

/// One engine under test.
pub struct Subject {
    name: String,
    kind: Kind,
    /// Things the operator should be told about this subject (a compiler fallback).
    pub notes: Vec<String>,
}

/// Every subject name this build offers, hako's configurations first.
pub fn available() -> Vec<String> {
    EngineConfig::all()
        .into_iter()
        .map(|config| config.name())
        .chain(
            hako_engine_baseline::available()
                .into_iter()
                .map(String::from),
        )
        .collect()
}

/// Why a subject name cannot be used: unknown, or not in this build. The message names what
/// exists.
pub fn refusal(name: &str) -> Option<String> {
    let offered = available();
    if offered.iter().any(|offered| offered == name) {
        return None;
    }
    let known = [
        "wasmer-singlepass",
        "wasmer-cranelift",
        "wasmer-llvm",
        "wasmtime",
    ]
    .into_iter()
    .chain(hako_engine_baseline::ALL.iter().copied());
    let why = if known.clone().any(|known| known == name) {
        let feature = match name {
            "wasmer-singlepass" => "singlepass",
            "wasmer-cranelift" => "cranelift",
            "wasmer-llvm" => "llvm",
            other => other,
        };
        format!("this build has no {name} engine (build with --features {feature})")
    } else {
        format!("unknown engine {name:?}")
    };
    Some(format!("{why}; this build offers: {}", offered.join(", ")))
}

impl Subject {
    /// The subject called `name` (checked with [`refusal`] first), keeping artifacts in
    /// `cache` (hako's engines) or `dir` (baselines).
    pub fn new(
        name: &str,
        workload: &Workload,
        cache: &ArtifactCache,
        dir: &Path,
    ) -> Result<Self, String> {
        if hako_engine_baseline::ALL.contains(&name) {
            let runtime = hako_engine_baseline::runtime(name).map_err(|err| err.to_string())?;
            return Ok(Self {
                name: name.to_string(),
                kind: Kind::Baseline {
                    runtime,
                    artifact: dir.join(format!("{name}.artifact")),
                },
                notes: Vec::new(),
            });
        }
        let asked: EngineConfig = name
            .parse()
            .map_err(|err: hako_engine_api::EngineError| err.to_string())?;
        let (config, fallback) = engines::effective_config(asked, workload.uses_simd);
        let engine = engines::engine(config, None).map_err(|err| err.to_string())?;
        let key = ArtifactKey::new(&workload.module_sha256, engine.identity());
        Ok(Self {
            name: name.to_string(),
            kind: Kind::Host {
                config,
                engine,
                key,
                cache: cache.clone(),
                network: Network {
                    policy: Arc::new(PackagePolicy::default()),
                    broker: Arc::new(NoBroker),
                },
            },
            notes: fallback.into_iter().collect(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this is a configuration of wasmtime (hako's own or the baseline), the reference
    /// of the report's ratios.
    pub fn is_wasmtime(&self) -> bool {
        self.name.starts_with("wasmtime")
    }

    /// Whether this is one of hako's own wasmer configurations (a baseline is not), the
    /// subjects of the suite's best-wasmer figure.
    pub fn is_wasmer(&self) -> bool {
        matches!(self.kind, Kind::Host { .. }) && self.name.starts_with("wasmer")
    }

    /// The crates the subject's code comes from, with their versions.
    pub fn versions(&self) -> Vec<(String, String)> {
        match &self.kind {
            Kind::Host { engine, .. } => {
                let identity = engine.identity();
                vec![(identity.engine.to_string(), identity.version.to_string())]
            }
            Kind::Baseline { runtime, .. } => runtime
                .versions()
                .into_iter()
                .map(|(name, version)| (name.to_string(), version.to_string()))
                .collect(),
        }
    }

    /// Compiles the workload's module. A configuration this process does not compile with
    /// itself (LLVM, for the `hako` command) compiles in its worker, as an upload does, and
    /// comes back through its artifact: its compile time includes the worker's start.
    pub fn compile(&self, wasm: &[u8]) -> Result<Ready, String> {
        match &self.kind {
            Kind::Host {
                config, key, cache, ..
            } if !config.compiles_in_process() => {
                let serialized = compile::compile(*config, None, wasm, CompileBounds::DEFAULT)
                    .map_err(|err| err.to_string())?;
                cache
                    .write_serialized(key, serialized)
                    .map_err(|err| err.to_string())?;
                self.load()
            }
            Kind::Host { engine, .. } => engine
                .compile(wasm)
                .map(Ready::Host)
                .map_err(|err| err.to_string()),
            Kind::Baseline { runtime, .. } => runtime
                .compile(wasm)
                .map(Ready::Baseline)
                .map_err(|err| err.to_string()),
        }
    }

    /// Writes `ready`'s artifact where [`Subject::load`] reads it. Returns its size in bytes.
    /// A module compiled in a worker came from its artifact, which is in place already.
    pub fn write_artifact(&self, ready: &Ready) -> Result<u64, String> {
        match (&self.kind, ready) {
            (
                Kind::Host {
                    config, key, cache, ..
                },
                Ready::Host(_),
            ) if !config.compiles_in_process() => {
                let path = cache.path(key);
                std::fs::metadata(&path)
                    .map(|metadata| metadata.len())
                    .map_err(|err| format!("reading {}: {err}", path.display()))
            }
            (Kind::Host { key, cache, .. }, Ready::Host(module)) => cache
                .write(key, module.as_ref())
                .map(|written| written.bytes)
                .map_err(|err| err.to_string()),
            (Kind::Baseline { artifact, .. }, Ready::Baseline(compiled)) => {
                let bytes = compiled.serialize().map_err(|err| err.to_string())?;
                std::fs::write(artifact, &bytes)
                    .map_err(|err| format!("writing {}: {err}", artifact.display()))?;
                Ok(bytes.len() as u64)
            }
            _ => Err(format!("{}: a module of another subject", self.name)),
        }
    }

    /// Loads the artifact [`Subject::write_artifact`] wrote.
    pub fn load(&self) -> Result<Ready, String> {
        match &self.kind {
            Kind::Host {
                engine, key, cache, ..
            } => match cache.load(key, engine.as_ref()) {
                Ok(Some(module)) => Ok(Ready::Host(module)),
                Ok(None) => Err(format!("{}: the artifact is missing", self.name)),
                Err(err) => Err(err.to_string()),
            },
            Kind::Baseline { runtime, artifact } => {
                // SAFETY: `artifact` is a file of this run's private temp folder, written by
                // `write_artifact` with this same runtime in this process.
                #[allow(unsafe_code)]
                let loaded = unsafe { runtime.load(artifact) };
                loaded.map(Ready::Baseline).map_err(|err| err.to_string())
            }
        }
    }

    /// Whether the subject makes instances ahead of calls (hako's engines; a baseline makes
    /// its instance in its call).
    pub fn makes_instances_ahead(&self) -> bool {
        matches!(self.kind, Kind::Host { .. })
    }

    /// An instance of `ready` made ahead of a call, as `hako serve` makes one after each call;
    /// `None` for a baseline, which makes its instance in its call.
    pub fn prepare_call(&self, ready: &Ready) -> Option<ReadyInstance> {
        match (&self.kind, ready) {
            (Kind::Host { .. }, Ready::Host(module)) => {
                Some(ReadyInstance::prepare(module, Limits::CALL))
            }
            _ => None,
        }
    }

    /// Makes one call on `instance`, made by [`Subject::prepare_call`] of `ready`.
    pub fn call_prepared(
        &self,
        ready: &Ready,
        instance: ReadyInstance,
        workload: &Workload,
    ) -> Result<CallResult, String> {
        match (&self.kind, ready) {
            (Kind::Host { network, .. }, Ready::Host(module)) => {
                host_call(module, Some(instance), network, workload)
            }
            _ => Err(format!("{}: an instance of another subject", self.name)),
        }
    }

    /// Makes one call; `Err` says how it crashed or failed.
    pub fn call(&self, ready: &Ready, workload: &Workload) -> Result<CallResult, String> {
        match (&self.kind, ready) {
            (Kind::Host { network, .. }, Ready::Host(module)) => {
                host_call(module, None, network, workload)
            }
            (Kind::Baseline { .. }, Ready::Baseline(compiled)) => {
                baseline_call(compiled.as_ref(), workload)
            }
            _ => Err(format!("{}: a module of another subject", self.name)),
        }
    }
}

/// A call of hako's host, on `instance` when one was made ahead (which it must then use). What
/// the run left is dropped before it returns, as `hako call` does, so the time includes it.
fn host_call(
    module: &Arc<dyn Module>,
    instance: Option<ReadyInstance>,
    network: &Network,
    workload: &Workload,
) -> Result<CallResult, String> {
    let made_ahead = instance.is_some();
    let request = ToolRequest {
        program: &workload.program,
        tool: &workload.tool,
        arguments: Arc::clone(&workload.arguments),
        limits: Limits::CALL,
        mounts: Mounts::fresh(workload.assets.clone()),
        network: network.clone(),
        gate: None,
    };
    let outcome = call::call_tool_answer_first(module, instance, request, CallStats::default())
        .map(|(outcome, teardown)| {
            teardown.finish();
            outcome
        });
    match outcome {
        Ok(outcome) if outcome.stats().ready != made_ahead => Err(format!(
            "the call {} the instance made ahead of it",
            if made_ahead { "did not use" } else { "used" }
        )),
        Ok(CallOutcome::Answered { result, .. }) => Ok(result),
        Ok(CallOutcome::Crashed { crash, stderr, .. }) => Err(with_stderr(
            format!("crashed ({}): {}", crash.kind, crash.message),
            &stderr,
        )),
        Err(err) => Err(format!("the host failed: {err}")),
    }
}

/// A baseline call: the same request line hako writes, and the answer line read back with
/// hako's codec, so that both sides are timed from request to shown result.
fn baseline_call(compiled: &dyn Compiled, workload: &Workload) -> Result<CallResult, String> {
    let id = RequestId::fresh("call");
    let line = protocol::tools_call_line(&id, &workload.tool, &workload.arguments);
    let mut answer = compiled
        .call(&hako_engine_baseline::Call {
            program: &workload.program,
            request_line: &line,
            package_assets: workload.assets.as_deref(),
        })
        .map_err(|err| match err {
            hako_engine_baseline::BaselineError::Guest { ref stderr, .. } => {
                with_stderr(err.to_string(), stderr)
            }
            other => other.to_string(),
        })?;
    protocol::parse_line(&mut answer, Some(&id), |line| match line {
        Ok(Line::Answer(Answer::Result(result))) => {
            protocol::call_result(&result).map_err(|err| format!("bad_result_type: {err}"))
        }
        Ok(Line::Answer(Answer::Error { code, message })) => {
            Err(format!("jsonrpc_error: {code} {message}"))
        }
        Ok(Line::Notification) => Err("the first line is a notification, not the answer".into()),
        Err(err) => Err(format!("{}: {err}", err.crash_kind())),
    })
}

fn with_stderr(message: String, stderr: &str) -> String {
    if stderr.trim().is_empty() {
        message
    } else {
        format!("{message}; stderr: {}", stderr.trim())
    }
}
