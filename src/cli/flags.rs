//! The flags `hako call` and `hako run` share: the engine, the limits of a run, and what it may
//! reach on the network; each turned into what the library takes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::Failure;
use crate::call::{Limits, Network};
use crate::compile::CompileBounds;
use crate::engines::{self, Compiler, EngineConfig, EngineKind};
use crate::http::{LazyBroker, Policy};

/// `--engine` and `--compiler`.
#[derive(Debug, Args)]
pub struct EngineArgs {
    /// The engine to run on: wasmer, or wasmtime in a build with it (default: wasmer).
    #[arg(long, value_parser = engines::parse_engine, default_value = "wasmer")]
    engine: EngineKind,
    /// The compiler whose code runs (default: cranelift).
    #[arg(long, value_parser = engines::parse_compiler)]
    compiler: Option<Compiler>,
}

impl EngineArgs {
    pub fn config(&self) -> Result<EngineConfig, Failure> {
        EngineConfig::new(self.engine, self.compiler).map_err(|e| Failure::Usage(e.to_string()))
    }
}

/// `--timeout`, `--memory` and `--write-budget`: a caller may lower a run's limits, and raise
/// the time and memory only as far as these bounds.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// The time limit in milliseconds (default: 30000).
    #[arg(long, value_name = "MS")]
    timeout: Option<u64>,
    /// The guest's memory cap in MiB, 1 to 4096 (default: 256).
    #[arg(long, value_name = "MIB")]
    memory: Option<u64>,
    /// How many bytes the guest may write to files (default: 1 GiB).
    #[arg(long, value_name = "BYTES")]
    write_budget: Option<u64>,
    /// The most elements any table of the guest may hold, 1 to 65536 (default: 65536); each
    /// table reserves its bound against the memory cap.
    #[arg(long, value_name = "N")]
    max_table_elements: Option<u32>,
}

impl LimitArgs {
    pub fn limits(&self) -> Result<Limits, Failure> {
        let mut limits = Limits::CALL;
        if let Some(ms) = self.timeout {
            if ms == 0 {
                return Err(Failure::Usage("--timeout must be at least 1 ms".into()));
            }
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(mib) = self.memory {
            if mib == 0 || mib > 4096 {
                return Err(Failure::Usage("--memory must be 1 to 4096 MiB".into()));
            }
            limits.max_memory_bytes = mib * 1024 * 1024;
        }
        if let Some(bytes) = self.write_budget {
            limits.write_budget = bytes;
        }
        if let Some(elements) = self.max_table_elements {
            limits.max_table_elements = table_elements(elements, "--max-table-elements")?;
        }
        Ok(limits)
    }
}

/// A table bound given with `flag`: 1 to [`hako_engine_api::MAX_TABLE_ELEMENTS`].
pub fn table_elements(elements: u32, flag: &str) -> Result<u32, Failure> {
    let most = hako_engine_api::MAX_TABLE_ELEMENTS;
    if (1..=most).contains(&elements) {
        Ok(elements)
    } else {
        Err(Failure::Usage(format!("{flag} must be 1 to {most}")))
    }
}

/// `--compile-timeout-ms` and `--compile-memory-mib`: the bounds of every compile the command
/// makes (each runs in a child process, killed at the first).
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// How long one compile may take, in ms (default: 300000).
    #[arg(long, value_name = "MS")]
    compile_timeout_ms: Option<u64>,
    /// The memory one compile may hold, in MiB (default: 4096).
    #[arg(long, value_name = "MIB")]
    compile_memory_mib: Option<u64>,
}

impl CompileArgs {
    pub fn bounds(&self) -> Result<CompileBounds, Failure> {
        let mut bounds = CompileBounds::DEFAULT;
        if let Some(ms) = self.compile_timeout_ms {
            if ms == 0 {
                return Err(Failure::Usage(
                    "--compile-timeout-ms must be at least 1".into(),
                ));
            }
            bounds.timeout = Duration::from_millis(ms);
        }
        if let Some(mib) = self.compile_memory_mib {
            if !(64..=1 << 20).contains(&mib) {
                return Err(Failure::Usage(
                    "--compile-memory-mib must be 64 to 1048576".into(),
                ));
            }
            bounds.max_memory_bytes = mib << 20;
        }
        Ok(bounds)
    }
}

/// `--allow-host` and `--policy`.
#[derive(Debug, Args)]
pub struct NetworkArgs {
    /// Allow the function to reach HOST through subako_http (repeatable).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// The operator policy file (allowlists, credentials).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
}

impl NetworkArgs {
    /// What the function `name` may reach: the policy's part for it, and the hosts allowed on
    /// the command line; the broker is built on first use.
    pub fn network(&self, name: &str) -> Result<Network, Failure> {
        let policy = match &self.policy {
            Some(path) => Policy::from_file(path).map_err(|err| Failure::Usage(err.to_string()))?,
            None => Policy::empty(),
        };
        let package_policy = policy
            .for_package(name, &self.allow_hosts)
            .map_err(|err| Failure::Usage(err.to_string()))?;
        let broker = LazyBroker::new(&policy.tls).map_err(|err| Failure::Usage(err.to_string()))?;
        Ok(Network {
            policy: Arc::new(package_policy),
            broker: Arc::new(broker),
        })
    }
}
