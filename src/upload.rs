//! Uploading a checked package: precompile it with each chosen engine configuration for each chosen target,
//! discover its tools by running it once, then store the version. Shared by `hako upload` and
//! the operator API of `hako serve` (`POST /v1/packages`), so both refuse and store alike.
//!
//! It does not read or check the package (that is [`crate::package::load`], done first by the
//! caller), print anything, or decide how a refusal is shown: it returns an [`UploadError`]
//! and the caller reports it.

use std::time::Instant;

use serde::Serialize;

use crate::call::{self, DiscoveryError};
use crate::compile::{self, CompileError};
use crate::engines::{self, EngineConfig};
use crate::package::tools::Tool;
use crate::package::Package;
use crate::store::{ArtifactError, ArtifactKey, PutResult, Store, StoreError};

/// What to precompile for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadOptions {
    /// The engine configurations to precompile with (empty: [`EngineConfig::DEFAULT`]).
    pub configs: Vec<EngineConfig>,
    /// The target triples to precompile for (empty: this machine).
    pub targets: Vec<String>,
}

impl Default for UploadOptions {
    fn default() -> Self {
        Self {
            configs: vec![EngineConfig::DEFAULT],
            targets: Vec::new(),
        }
    }
}

/// One artifact an upload made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArtifactReport {
    pub engine: String,
    pub compiler: String,
    pub target: String,
    pub bytes: u64,
    /// Milliseconds spent compiling, to a tenth.
    pub compile_ms: f64,
    /// How the module's memory is initialised with this artifact: a memory image mapped from
    /// it, or the data segments copied at each call and why.
    pub memory_init: String,
    /// Its file name in the store's artifact folder.
    pub file: String,
}

/// What an upload did.
#[derive(Debug, Clone)]
pub struct Uploaded {
    pub name: String,
    pub version: String,
    /// Whether the version was new or already stored with the same module.
    pub put: PutResult,
    /// What discovery answered: what the package offers until its next version.
    pub tools: Vec<Tool>,
    pub artifacts: Vec<ArtifactReport>,
    /// Things the operator should be told, such as a compiler fallback.
    pub notes: Vec<String>,
}

impl Uploaded {
    /// The summary of `hako upload --json` and of the operator API.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "version": self.version,
            "stored": self.put == PutResult::Stored,
            "tools": self.tools.iter().map(|tool| tool.name.as_str()).collect::<Vec<_>>(),
            "artifacts": self.artifacts,
            "notes": self.notes,
        })
    }
}

/// Why an upload stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// A target cannot be compiled for by this build.
    #[error("cannot compile for {target}: {source}")]
    Target {
        target: String,
        #[source]
        source: hako_engine_api::EngineError,
    },
    /// Compiling failed, or ran past its bounds.
    #[error("compiling the module: {0}")]
    Compile(#[source] CompileError),
    /// Writing an artifact failed.
    #[error("writing an artifact: {0}")]
    Artifact(#[from] ArtifactError),
    /// Discovery refused the package (its run crashed, or its tools break a rule).
    #[error("refused at discovery: {0}")]
    Refused(#[source] DiscoveryError),
    /// Discovery could not run at all (a host failure, not the package's fault).
    #[error("running discovery: {0}")]
    Discovery(#[source] call::RunError),
    /// Storing the version failed, or the version is stored with another module.
    #[error("storing the package: {0}")]
    Store(#[from] StoreError),
}

impl UploadError {
    /// Whether the package (rather than the host) is at fault.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            UploadError::Refused(_)
                | UploadError::Store(
                    StoreError::VersionChanged { .. }
                        | StoreError::OriginChanged { .. }
                        | StoreError::BadVersion(_)
                )
        ) || self.compile_rule().is_some()
    }

    /// The rule a module broke when its compile was stopped by a bound (`compile.time`,
    /// `compile.memory`) or crashed the compiler (`compile.crash`).
    pub fn compile_rule(&self) -> Option<&'static str> {
        match self {
            UploadError::Compile(err) => err.rule(),
            _ => None,
        }
    }
}

/// Precompiles, discovers and stores `package`.
pub fn upload(
    store: &Store,
    package: &Package,
    options: &UploadOptions,
) -> Result<Uploaded, UploadError> {
    let configs = if options.configs.is_empty() {
        vec![EngineConfig::DEFAULT]
    } else {
        options.configs.clone()
    };
    let targets: Vec<Option<&str>> = if options.targets.is_empty() {
        vec![None]
    } else {
        options.targets.iter().map(|t| Some(t.as_str())).collect()
    };

    let mut artifacts = Vec::new();
    let mut notes = Vec::new();
    let mut runnable = None;
    for target in &targets {
        for &asked in &configs {
            let (config, fallback) = engines::effective_config(asked, package.uses_simd);
            notes.extend(fallback);
            let engine =
                engines::engine(config, *target).map_err(|source| UploadError::Target {
                    target: target.unwrap_or("this machine").to_string(),
                    source,
                })?;
            let started = Instant::now();
            let serialized =
                compile::compile(config, *target, &package.wasm, store.compile_bounds())
                    .map_err(UploadError::Compile)?;
            let compile_ms = started.elapsed().as_secs_f64() * 1000.0;
            let key = ArtifactKey::new(&package.module_sha256, engine.identity());
            let written = store.artifacts().write_serialized(&key, serialized)?;
            artifacts.push(ArtifactReport {
                engine: config.kind().name().to_string(),
                compiler: config.compiler().name().to_string(),
                target: engine.identity().triple.to_string(),
                bytes: written.bytes,
                compile_ms: (compile_ms * 10.0).round() / 10.0,
                memory_init: written.memory_init,
                file: key.file_name(),
            });
            if engine.runs_here() && runnable.is_none() {
                runnable = Some(store.load_stored(&key, engine.as_ref())?);
            }
        }
    }
    let runnable = match runnable {
        Some(module) => module,
        // Discovery runs here, so it needs code for this machine even when every artifact
        // asked for is for another target; it is kept, as any artifact.
        None => {
            let config = EngineConfig::DEFAULT;
            let engine =
                engines::engine(config, None).map_err(|err| UploadError::Compile(err.into()))?;
            let serialized = compile::compile(config, None, &package.wasm, store.compile_bounds())
                .map_err(UploadError::Compile)?;
            let key = ArtifactKey::new(&package.module_sha256, engine.identity());
            store.artifacts().write_serialized(&key, serialized)?;
            store.load_stored(&key, engine.as_ref())?
        }
    };

    let discovery = match call::discover(&runnable, &package.manifest.name, package.assets.clone())
    {
        Ok(discovery) => discovery,
        Err(DiscoveryError::Run(err)) => return Err(UploadError::Discovery(err)),
        Err(refusal) => return Err(UploadError::Refused(refusal)),
    };

    let config_names: Vec<String> = configs.iter().map(|config| config.name()).collect();
    let put = store.put(package, &discovery.tools, &config_names)?;
    Ok(Uploaded {
        name: package.manifest.name.clone(),
        version: package.manifest.version.clone(),
        put,
        tools: discovery.tools,
        artifacts,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_options_precompile_with_the_default_compiler_for_this_machine() {
        let options = UploadOptions::default();
        assert_eq!(options.configs, [EngineConfig::DEFAULT]);
        assert!(options.targets.is_empty());
    }

    #[test]
    fn a_changed_version_is_the_packages_fault_and_a_disk_error_is_not() {
        let changed = UploadError::Store(StoreError::VersionChanged {
            name: "greet".into(),
            version: "1.0.0".into(),
        });
        assert!(changed.is_refusal());
        let disk = UploadError::Store(StoreError::UnknownPackage("greet".into()));
        assert!(!disk.is_refusal());
    }

    #[test]
    fn the_summary_names_the_tools_and_whether_the_version_was_new() {
        let uploaded = Uploaded {
            name: "greet".into(),
            version: "1.0.0".into(),
            put: PutResult::Unchanged,
            tools: vec![serde_json::from_value(serde_json::json!({
                "name": "greet", "inputSchema": {"type": "object"}
            }))
            .unwrap()],
            artifacts: Vec::new(),
            notes: Vec::new(),
        };
        let json = uploaded.to_json();
        assert_eq!(json["stored"], false);
        assert_eq!(json["tools"], serde_json::json!(["greet"]));
    }
}
