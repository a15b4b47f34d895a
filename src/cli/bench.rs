//! `hako bench PACKAGE|NAME [--tool T] [--args JSON] [--engines LIST] [--iterations N]
//! [--threads N] [--json] [--plot FILE.svg]`: engines side by side on one tool of one package,
//! interleaved in this process after a warm-up. Prints a table (or, with `--json`, the object
//! DESIGN.md specifies), draws an SVG plot when asked, and shows progress on stderr.
//!
//! `hako bench --suite DIR [--engines LIST] [--iterations N] [--threads N] [--json]`: the same
//! for every package folder of DIR in turn (each with its `bench.json`'s tool and arguments),
//! in one table or one JSON document.
//!
//! It finds the packages and their tools (discovering them for a package on disk) and checks
//! what was asked, all before measuring anything; the measuring is [`crate::bench`]'s. Exit
//! status: 0 when every engine answered every call alike, 3 when one crashed or answered
//! otherwise (the table says which), 2 for an unknown engine or tool, or a suite that cannot
//! run (a package not built, no `bench.json`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;

use super::{note, Failure, Target};
use crate::bench::machine::Machine;
use crate::bench::suite::{self, SuiteError};
use crate::bench::{self, plot, RunShape, SuiteReport, Workload};
use crate::engines::{self, EngineConfig};
use crate::package::tools::Tool;
use crate::package::Package;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A package folder or archive, an oci:// reference, or the name of a stored package.
    #[arg(required_unless_present = "suite", conflicts_with = "suite")]
    package: Option<String>,
    /// The tool to call (default: the first tool the package offers).
    #[arg(long, conflicts_with = "suite")]
    tool: Option<String>,
    /// The tool's arguments, a JSON object (default: {}).
    #[arg(long = "args", value_name = "JSON", conflicts_with = "suite")]
    arguments: Option<String>,
    /// Run every package folder of DIR instead (sorted by name, each with the tool and
    /// arguments of its bench.json), e.g. the corpus benches/packages.
    #[arg(long, value_name = "DIR")]
    suite: Option<PathBuf>,
    /// Comma-separated engines: wasmer-singlepass, wasmer-cranelift, wasmer-llvm, wasmtime,
    /// wasmtime-wasi, wasmer-wasix (default: every one this build has).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    engines: Vec<String>,
    /// Samples of each latency per engine.
    #[arg(long, value_name = "N", default_value_t = 200)]
    iterations: usize,
    /// Threads calling at once for calls/s (default: the cores this process may use).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Print the results as one JSON object.
    #[arg(long)]
    json: bool,
    /// Draw the comparison as an SVG file.
    #[arg(long, value_name = "FILE.svg", conflicts_with = "suite")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
    /// For a stored package: its store, a folder or a bucket.
    #[command(flatten)]
    store: super::stores::StoreArgs,
}

pub fn run(args: BenchArgs) -> Result<(), Failure> {
    let engines = engine_names(&args.engines)?;
    if args.iterations == 0 {
        return Err(Failure::Usage("--iterations must be at least 1".into()));
    }
    if args.threads == Some(0) {
        return Err(Failure::Usage("--threads must be at least 1".into()));
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let shape = RunShape::new(args.iterations, threads);
    match &args.suite {
        Some(dir) => run_suite(dir, &engines, shape, args.json),
        None => run_package(&args, &engines, shape),
    }
}

/// One package.
fn run_package(args: &BenchArgs, engines: &[String], shape: RunShape) -> Result<(), Failure> {
    let Some(package) = args.package.as_deref() else {
        return Err(Failure::Usage("give a PACKAGE or --suite DIR".into()));
    };
    let arguments = match args.arguments.as_deref() {
        None => serde_json::json!({}),
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value) if value.is_object() => value,
            Ok(_) => return Err(Failure::Usage("--args must be a JSON object".into())),
            Err(err) => return Err(Failure::Usage(format!("--args is not JSON: {err}"))),
        },
    };
    if let Some(path) = &args.plot {
        plot::check_path(path).map_err(|err| Failure::Usage(err.to_string()))?;
    }

    // The package (kept alive: an archive's assets live in its temp folder) and its tools.
    let (_package, mut workload, tools) = match super::target(package) {
        Target::Path(path) => {
            let package = super::load_package(&path, None, &args.registry)?;
            let workload = workload_of(&package);
            let tools = discover(&workload)?;
            (Some(package), workload, tools)
        }
        Target::Stored(name) => {
            let stored = args.store.open()?.stored(&name)?;
            let workload = Workload {
                program: name,
                wasm: stored.wasm().map_err(|err| Failure::Host(err.into()))?,
                module_sha256: stored.record.module_sha256.clone(),
                uses_simd: stored.record.uses_simd,
                assets: stored.assets(),
                tool: String::new(),
                arguments: Arc::new(serde_json::Value::Null),
            };
            (None, workload, stored.tools)
        }
    };
    workload.tool = choose_tool(&workload.program, args.tool.as_deref(), &tools)?;
    workload.arguments = Arc::new(arguments);

    let mut progress = progress_printer();
    let report = bench::run(engines, &workload, shape, &mut progress)
        .map_err(|err| Failure::Host(err.into()))?;
    progress("done");

    if args.json {
        outln!("{}", report.to_json());
    } else {
        outln!("{}", report.to_table().trim_end());
    }
    if let Some(path) = &args.plot {
        plot::write(&report, path).map_err(|err| Failure::Host(err.into()))?;
        note(&format!("plot written to {}", path.display()));
    }
    if report.all_answered() {
        Ok(())
    } else {
        note("an engine crashed or answered otherwise: its figures are cut short");
        Err(Failure::Crashed)
    }
}

/// Every package folder of the suite at `dir`, one after the other.
fn run_suite(dir: &Path, engines: &[String], shape: RunShape, json: bool) -> Result<(), Failure> {
    let entries = suite::read(dir).map_err(|err| match err {
        SuiteError::Io { .. } => Failure::Host(err.into()),
        refusal => Failure::Usage(refusal.to_string()),
    })?;
    // Every package is loaded, and its tool found, before anything is measured: a mistake in
    // the last package's bench.json is told at once, not after the others' runs.
    let mut packages: Vec<(Package, Workload)> = Vec::with_capacity(entries.len());
    for entry in &entries {
        let package = super::load_package(&entry.dir, None, &Default::default())?;
        let mut workload = workload_of(&package);
        let tools = discover(&workload)?;
        workload.tool =
            choose_tool(&workload.program, Some(&entry.tool), &tools).map_err(|failure| {
                match failure {
                    Failure::Usage(message) => Failure::Usage(format!(
                        "{}: {message}",
                        entry.dir.join(suite::SPEC_FILE).display()
                    )),
                    other => other,
                }
            })?;
        workload.arguments = Arc::new(entry.arguments.clone());
        packages.push((package, workload));
    }

    let mut printer = progress_printer();
    let mut runs = Vec::with_capacity(packages.len());
    let count = packages.len();
    for (index, (_package, workload)) in packages.iter().enumerate() {
        let mut progress = |message: &str| {
            printer(&format!(
                "{} ({}/{count}): {message}",
                workload.program,
                index + 1
            ))
        };
        let report = bench::run(engines, workload, shape, &mut progress)
            .map_err(|err| Failure::Host(err.into()))?;
        runs.push(report);
    }
    printer("done");

    let report = SuiteReport {
        suite: dir.display().to_string(),
        machine: Machine::this(),
        shape,
        runs,
    };
    if json {
        outln!("{}", report.to_json());
    } else {
        outln!("{}", report.to_table().trim_end());
    }
    if report.all_answered() {
        Ok(())
    } else {
        note("an engine crashed or answered otherwise: its figures are cut short");
        Err(Failure::Crashed)
    }
}

/// What every call of a run on the package from disk does, less the tool and its arguments.
fn workload_of(package: &Package) -> Workload {
    Workload {
        program: package.manifest.name.clone(),
        wasm: package.wasm.clone(),
        module_sha256: package.module_sha256.clone(),
        uses_simd: package.uses_simd,
        assets: package.assets.clone(),
        tool: String::new(),
        arguments: Arc::new(serde_json::Value::Null),
    }
}

/// The engines asked for, each checked, without repeats; every engine of the build when none.
fn engine_names(asked: &[String]) -> Result<Vec<String>, Failure> {
    let asked: Vec<String> = asked
        .iter()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .collect();
    if asked.is_empty() {
        return Ok(bench::available());
    }
    let mut names: Vec<String> = Vec::new();
    for name in asked {
        if let Some(refusal) = bench::refusal(&name) {
            return Err(Failure::Usage(refusal));
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// Runs discovery on a package from disk, with hako's default engine.
fn discover(workload: &Workload) -> Result<Vec<Tool>, Failure> {
    let (config, _) = engines::effective_config(EngineConfig::DEFAULT, workload.uses_simd);
    let module = crate::compile::compile_here(config, None, &workload.wasm)
        .map_err(|err| Failure::Host(err.into()))?;
    match crate::call::discover(&module, &workload.program, workload.assets.clone()) {
        Ok(discovery) => Ok(discovery.tools),
        Err(crate::call::DiscoveryError::Run(err)) => Err(Failure::Host(err.into())),
        Err(refusal) => {
            eprintln!("hako: {} is refused: {refusal}", workload.program);
            Err(Failure::Refused)
        }
    }
}

/// The tool asked for, or the first the package offers; an unknown tool names those it offers.
fn choose_tool(package: &str, asked: Option<&str>, tools: &[Tool]) -> Result<String, Failure> {
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
    match asked {
        Some(tool) if names.contains(&tool) => Ok(tool.to_string()),
        Some(tool) => Err(Failure::Usage(format!(
            "{package} offers no tool {tool:?} (it offers: {})",
            names.join(", ")
        ))),
        None => names
            .first()
            .map(|tool| tool.to_string())
            .ok_or_else(|| Failure::Usage(format!("{package} offers no tools"))),
    }
}

/// Progress on stderr: one line per step, or one line rewritten in place on a terminal.
fn progress_printer() -> impl FnMut(&str) {
    let terminal = std::io::stderr().is_terminal();
    move |message: &str| {
        if terminal {
            if message == "done" {
                eprint!("\r\x1b[K");
            } else {
                eprint!("\r\x1b[Khako bench: {message}");
            }
        } else if message != "done" {
            eprintln!("hako bench: {message}");
        }
    }
}
