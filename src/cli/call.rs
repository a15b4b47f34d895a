//! `hako call PACKAGE|NAME TOOL [ARGS_JSON|-]`: one call of one tool, with the sandbox, network
//! and limits the flags give. Prints what the model is shown (or, with `--json`, one outcome
//! object) and exits 0 when the function answered, 3 when it crashed.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::flags::{EngineArgs, LimitArgs, NetworkArgs};
use super::{note, Failure, Target};
use crate::call::{self, CallOutcome, CallStats, Mounts, ToolRequest, VolumeTmp};
use crate::protocol::ShownBlock;
use crate::store::{ModuleSource, ModuleSpec, Source};

#[derive(Debug, Args)]
pub struct CallArgs {
    /// A package folder or archive, an oci:// reference, or the name of a stored package.
    package: String,
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
    /// The tool to call.
    tool: String,
    /// The arguments, a JSON object; `-` reads them from stdin (default: {}).
    arguments: Option<String>,
    #[command(flatten)]
    store: super::stores::StoreArgs,
    #[command(flatten)]
    engine: EngineArgs,
    /// Use DIR as /volume/tmp and keep it (default: a fresh folder, removed after the call).
    #[arg(long, value_name = "DIR")]
    volume: Option<PathBuf>,
    /// Mount DIR as /volume/data.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Mount DIR read-only as /skills/NAME (repeatable).
    #[arg(long = "skill", value_name = "NAME=DIR", value_parser = parse_skill)]
    skills: Vec<(String, PathBuf)>,
    #[command(flatten)]
    network: NetworkArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    compile: super::flags::CompileArgs,
    /// Print one outcome object as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_skill(text: &str) -> Result<(String, PathBuf), String> {
    let (name, dir) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=DIR"))?;
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !valid {
        return Err(format!(
            "skill name {name:?} must be 1 to 64 characters of a-z, 0-9, _ and -"
        ));
    }
    if dir.is_empty() {
        return Err(format!("skill {name} names no folder"));
    }
    Ok((name.to_string(), PathBuf::from(dir)))
}

fn arguments(text: Option<&str>) -> Result<serde_json::Value, Failure> {
    let text = match text {
        None => return Ok(serde_json::json!({})),
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the arguments from stdin")?;
            text
        }
        Some(text) => text.to_string(),
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err(Failure::Usage("the arguments must be a JSON object".into())),
        Err(err) => Err(Failure::Usage(format!("the arguments are not JSON: {err}"))),
    }
}

pub fn run(args: CallArgs) -> Result<(), Failure> {
    let config = args.engine.config()?;
    let arguments = arguments(args.arguments.as_deref())?;
    let limits = args.limits.limits()?;
    let bounds = args.compile.bounds()?;
    let mut opened = args.store.open()?;
    opened.store.set_compile_bounds(bounds);
    let store = &opened.store;

    // What to run: a package on disk (checked now), or a stored one (checked at upload).
    let (name, wasm, module_sha256, uses_simd, assets) = match super::target(&args.package) {
        Target::Path(path) => {
            let package = super::load_package(&path, Some(store), &args.registry)?;
            let assets = package.assets.clone();
            let name = package.manifest.name.clone();
            (
                name,
                ModuleSource::Bytes(package.wasm),
                package.module_sha256,
                package.uses_simd,
                assets,
            )
        }
        Target::Stored(name) => {
            let stored = opened.stored(&name)?;
            if !stored.tools.iter().any(|tool| tool.name == args.tool) {
                let names: Vec<&str> = stored.tools.iter().map(|t| t.name.as_str()).collect();
                return Err(Failure::Usage(format!(
                    "{name} offers no tool {:?} (it offers: {})",
                    args.tool,
                    names.join(", ")
                )));
            }
            // Read only if no artifact serves the call (and then checked against the record).
            let wasm = ModuleSource::File(stored.module_path());
            let assets = stored.assets();
            (
                name,
                wasm,
                stored.record.module_sha256,
                stored.record.uses_simd,
                assets,
            )
        }
    };

    let network = args.network.network(&name)?;

    let loaded = store
        .load_module(
            &ModuleSpec {
                wasm: wasm.bytes(),
                module_sha256: &module_sha256,
                uses_simd,
                config,
            },
            None,
        )
        .map_err(|err| Failure::Host(err.into()))?;
    for message in &loaded.notes {
        note(message);
    }

    let request = ToolRequest {
        program: &name,
        tool: &args.tool,
        arguments: Arc::new(arguments),
        limits,
        mounts: Mounts {
            volume_tmp: args
                .volume
                .clone()
                .map_or(VolumeTmp::Fresh, VolumeTmp::Given),
            data: args.data.clone(),
            package_assets: assets,
            skills: args.skills.clone(),
        },
        network,
        gate: None,
    };
    let stats = CallStats {
        compiled: loaded.source == Source::Compiled,
        engine: loaded.config.kind().name().to_string(),
        compiler: loaded.config.compiler().name().to_string(),
        load_us: loaded.load_us,
        ..CallStats::default()
    };
    let outcome =
        call::call_tool(&loaded.module, request, stats).map_err(|err| Failure::Host(err.into()))?;
    report(&outcome, args.json)?;
    match outcome {
        CallOutcome::Answered { .. } => Ok(()),
        CallOutcome::Crashed { .. } => Err(Failure::Crashed),
    }
}

fn report(outcome: &CallOutcome, json: bool) -> Result<(), Failure> {
    if json {
        outln!("{}", outcome.to_json());
        return Ok(());
    }
    match outcome {
        CallOutcome::Answered { result, .. } => {
            if result.is_error {
                note("the function answered with isError: true");
            }
            for block in &result.content {
                match block {
                    ShownBlock::Text { text } => outln!("{text}"),
                    ShownBlock::Image { mime_type, data } => {
                        outln!("[image {mime_type}, {} base64 characters]", data.len())
                    }
                    ShownBlock::VolumeLink { uri, .. } => outln!("[unread link {uri}]"),
                    ShownBlock::Link { text } | ShownBlock::Omitted { text } => outln!("{text}"),
                }
            }
        }
        CallOutcome::Crashed { crash, stderr, .. } => {
            eprintln!(
                "hako: the function crashed ({}): {}",
                crash.kind, crash.message
            );
            if !stderr.is_empty() {
                eprintln!("hako: its stderr (last 4 KiB):\n{stderr}");
            }
        }
    }
    Ok(())
}
