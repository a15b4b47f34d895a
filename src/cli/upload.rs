//! `hako upload PACKAGE`: check, precompile with each chosen compiler for each chosen target,
//! discover the tools by running the module once, then store the version. A refusal at any
//! step names the rule that broke (exit 1) and stores nothing.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;

use super::{note, Failure};
use crate::call;
use crate::engines::{self, Compiler};
use crate::store::{ArtifactKey, PutResult};

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// A package folder, or a .tar.gz/.tgz archive of one.
    package: PathBuf,
    /// The store folder (default: $HAKO_STORE, else ./.hako).
    #[arg(long, env = "HAKO_STORE")]
    store: Option<PathBuf>,
    /// A compiler to precompile with (repeatable; default: cranelift).
    #[arg(long = "compiler", value_parser = engines::parse_compiler)]
    compilers: Vec<Compiler>,
    /// A target triple to precompile for (repeatable; default: this machine).
    #[arg(long = "target")]
    targets: Vec<String>,
    /// Print what was stored as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: UploadArgs) -> Result<(), Failure> {
    let store = super::open_store(args.store.as_deref())?;
    let package = super::load_package(&args.package)?;
    let compilers = if args.compilers.is_empty() {
        vec![engines::DEFAULT_COMPILER]
    } else {
        args.compilers.clone()
    };
    let targets: Vec<Option<&str>> = if args.targets.is_empty() {
        vec![None]
    } else {
        args.targets.iter().map(|t| Some(t.as_str())).collect()
    };

    let mut artifacts = Vec::new();
    let mut runnable = None;
    for target in &targets {
        for &asked in &compilers {
            let (compiler, fallback) = engines::effective_compiler(asked, package.uses_simd);
            if let Some(fallback) = fallback {
                note(&fallback);
            }
            let engine = engines::engine(compiler, *target).map_err(|err| {
                Failure::Usage(format!(
                    "cannot compile for {}: {err}",
                    target.unwrap_or("this machine")
                ))
            })?;
            let started = Instant::now();
            let module = engine
                .compile(&package.wasm)
                .map_err(|err| Failure::Host(err.into()))?;
            let compile_ms = started.elapsed().as_secs_f64() * 1000.0;
            let key = ArtifactKey::new(&package.module_sha256, engine.identity());
            let bytes = store
                .artifacts()
                .write(&key, module.as_ref())
                .map_err(|err| Failure::Host(err.into()))?;
            artifacts.push(serde_json::json!({
                "compiler": compiler.name(),
                "target": engine.identity().triple,
                "bytes": bytes,
                "compile_ms": (compile_ms * 10.0).round() / 10.0,
            }));
            if engine.runs_here() && runnable.is_none() {
                runnable = Some(module);
            }
        }
    }
    let runnable = match runnable {
        Some(module) => module,
        // Discovery runs here, so it needs code for this machine even when every artifact
        // asked for is for another target.
        None => engines::engine(engines::DEFAULT_COMPILER, None)
            .and_then(|engine| engine.compile(&package.wasm))
            .map_err(|err| Failure::Host(err.into()))?,
    };

    let discovery = match call::discover(&runnable, &package.manifest.name, package.assets.clone())
    {
        Ok(discovery) => discovery,
        Err(call::DiscoveryError::Run(err)) => return Err(Failure::Host(err.into())),
        Err(refusal) => {
            eprintln!("hako: {} is refused at discovery:", args.package.display());
            eprintln!("  - {refusal}");
            if let call::DiscoveryError::Crashed { stderr, .. } = &refusal {
                if !stderr.is_empty() {
                    eprintln!("  stderr (last 4 KiB):\n{stderr}");
                }
            }
            return Err(Failure::Refused);
        }
    };

    let compiler_names: Vec<String> = compilers.iter().map(|c| c.name().to_string()).collect();
    let put = store
        .put(&package, &discovery.tools, &compiler_names)
        .with_context(|| format!("storing {}", package.manifest.name))?;
    let tool_names: Vec<&str> = discovery.tools.iter().map(|t| t.name.as_str()).collect();
    if args.json {
        let summary = serde_json::json!({
            "name": package.manifest.name,
            "version": package.manifest.version,
            "stored": put == PutResult::Stored,
            "tools": tool_names,
            "artifacts": artifacts,
        });
        outln!("{summary}");
    } else {
        let verb = match put {
            PutResult::Stored => "stored",
            PutResult::Unchanged => "already stored (unchanged)",
        };
        outln!(
            "{} {} {verb}: {} tool(s): {}",
            package.manifest.name,
            package.manifest.version,
            tool_names.len(),
            tool_names.join(", ")
        );
        for artifact in &artifacts {
            outln!(
                "  artifact {} {}: {} bytes, compiled in {} ms",
                artifact["compiler"].as_str().unwrap_or_default(),
                artifact["target"].as_str().unwrap_or_default(),
                artifact["bytes"],
                artifact["compile_ms"]
            );
        }
    }
    Ok(())
}
