//! `hako upload PACKAGE`: check, precompile with each chosen engine configuration for each chosen target,
//! discover the tools by running the module once, then store the version. A refusal at any
//! step names the rule that broke (exit 1) and stores nothing. The work itself is
//! [`crate::upload::upload`], which `hako serve` shares; this file chooses and reports.

use std::path::PathBuf;

use clap::Args;

use super::{note, Failure};
use crate::call::DiscoveryError;
use crate::engines::{self, Compiler, EngineConfig, EngineKind};
use crate::store::signing::SigningKey;
use crate::store::PutResult;
use crate::upload::{self, UploadError, UploadOptions};

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// A package folder, a .tar.gz/.tgz archive of one, or oci://REGISTRY/REPOSITORY:TAG.
    package: PathBuf,
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
    #[command(flatten)]
    store: super::stores::StoreArgs,
    /// The engine to precompile for: wasmer, or wasmtime in a build with it (default: wasmer).
    #[arg(long, value_parser = engines::parse_engine, default_value = "wasmer")]
    engine: EngineKind,
    /// A compiler to precompile with (repeatable; default: cranelift).
    #[arg(long = "compiler", value_parser = engines::parse_compiler)]
    compilers: Vec<Compiler>,
    /// A target triple to precompile for (repeatable; default: this machine).
    #[arg(long = "target")]
    targets: Vec<String>,
    /// With a bucket: sign the version's record with this private key (`hako keygen`), so
    /// that nodes trusting its public key load the artifacts compiled here.
    #[arg(long, value_name = "FILE")]
    signing_key: Option<PathBuf>,
    #[command(flatten)]
    compile: super::flags::CompileArgs,
    /// Print what was stored as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: UploadArgs) -> Result<(), Failure> {
    let signer = match &args.signing_key {
        Some(path) => Some(SigningKey::read(path).map_err(|err| Failure::Usage(err.to_string()))?),
        None => None,
    };
    let bounds = args.compile.bounds()?;
    let mut opened = args.store.open_writable()?;
    opened.store.set_compile_bounds(bounds);
    let store = &opened.store;
    let package = super::load_package(&args.package, Some(store), &args.registry)?;
    let configs = if args.compilers.is_empty() {
        vec![EngineConfig::new(args.engine, None)]
    } else {
        args.compilers
            .iter()
            .map(|&compiler| EngineConfig::new(args.engine, Some(compiler)))
            .collect()
    };
    let configs = configs
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| Failure::Usage(err.to_string()))?;
    let options = UploadOptions {
        configs,
        targets: args.targets.clone(),
    };
    // What the cache offered before, offered again when the bucket refuses this version.
    let previous = store.current_version(&package.manifest.name).ok();
    let mut uploaded = match upload::upload(store, &package, &options) {
        Ok(uploaded) => uploaded,
        Err(err @ UploadError::Target { .. }) => return Err(Failure::Usage(err.to_string())),
        Err(UploadError::Refused(refusal)) => {
            eprintln!("hako: {} is refused at discovery:", args.package.display());
            eprintln!("  - {refusal}");
            if let DiscoveryError::Crashed { stderr, .. } = &refusal {
                if !stderr.is_empty() {
                    eprintln!("  stderr (last 4 KiB):\n{stderr}");
                }
            }
            return Err(Failure::Refused);
        }
        Err(err) if err.compile_rule().is_some() => {
            let rule = err.compile_rule().unwrap_or_default();
            eprintln!("hako: {} is refused:", args.package.display());
            eprintln!("  - {rule}: {}", crate::error_chain(&err));
            return Err(Failure::Refused);
        }
        Err(err) => {
            return Err(Failure::Host(
                anyhow::Error::new(err).context(format!("uploading {}", package.manifest.name)),
            ))
        }
    };
    let files: Vec<String> = uploaded.artifacts.iter().map(|a| a.file.clone()).collect();
    uploaded.put = opened.publish(
        &uploaded.name,
        (previous, uploaded.put),
        &files,
        signer.as_ref(),
    )?;
    for message in &uploaded.notes {
        note(message);
    }
    if args.json {
        outln!("{}", uploaded.to_json());
        return Ok(());
    }
    let tool_names: Vec<&str> = uploaded.tools.iter().map(|t| t.name.as_str()).collect();
    let verb = match uploaded.put {
        PutResult::Stored => "stored",
        PutResult::Unchanged => "already stored (unchanged)",
    };
    outln!(
        "{} {} {verb}: {} tool(s): {}",
        uploaded.name,
        uploaded.version,
        tool_names.len(),
        tool_names.join(", ")
    );
    for artifact in &uploaded.artifacts {
        outln!(
            "  artifact {} {} {}: {} bytes, compiled in {} ms; {}",
            artifact.engine,
            artifact.compiler,
            artifact.target,
            artifact.bytes,
            artifact.compile_ms,
            artifact.memory_init
        );
    }
    Ok(())
}
