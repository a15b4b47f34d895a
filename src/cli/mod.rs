//! The command line: one file per subcommand, each turning its arguments into calls of the
//! library and its results into output and an exit status. What a status means:
//! 0 the function answered (even with `isError`) or the command succeeded, 1 the package was
//! refused or the host failed, 2 a usage error, 3 the function crashed; `hako run` exits with
//! its guest's status instead (see `run`).
//!
//! The CLI owns no ABI rule; it only chooses and reports.

/// Writes a line to stdout; a write error (such as a closed pipe) becomes the command's error,
/// so `main` can tell a closed pipe from a failure instead of panicking as `println!` would.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
            .map_err(|err| $crate::cli::Failure::Host(anyhow::Error::new(err)))?
    }};
}

mod bench;
mod call;
mod check;
mod flags;
mod keygen;
mod registry;
mod run;
mod serve;
mod stores;
mod tools;
mod upload;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::package::{self, LoadError, Package};
use crate::store::{Store, StoredPackage};

/// hako runs Subako ABI 1 function packages on wasmer.
#[derive(Debug, Parser)]
#[command(name = "hako", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a package without running it (exit 0 valid, 1 refused).
    Check(check::CheckArgs),
    /// Check, precompile and discover a package, then store it.
    Upload(upload::UploadArgs),
    /// Publish a package to an OCI registry (oci://REGISTRY/REPOSITORY:TAG); prints the
    /// manifest's digest.
    Push(registry::PushArgs),
    /// Print the tools a package offers, as JSON.
    Tools(tools::ToolsArgs),
    /// Call one tool of a package and print what the model is shown.
    Call(call::CallArgs),
    /// Serve the store over HTTP (operator API and MCP), or one package over stdio.
    Serve(Box<serve::ServeArgs>),
    /// Compare engines side by side on one tool of a package.
    Bench(bench::BenchArgs),
    /// Write an ed25519 key pair that signs version records uploaded to a bucket.
    Keygen(keygen::KeygenArgs),
    /// Run a WASI preview 1 command (a module or a package's) with this process's stdio; not
    /// an ABI call. Exits with the guest's status.
    Run(run::RunArgs),
}

/// How the process logs (to stderr): the filter used when `HAKO_LOG` sets none, and whether
/// each line is a JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logging {
    pub default_filter: &'static str,
    pub json: bool,
}

impl Cli {
    /// How this command logs: warnings and errors; `hako serve` also what it says as it starts
    /// (`hako::startup`), as text or JSON (`--log-format`). Its access record, a line per call
    /// (`hako::access`), is written where `HAKO_LOG` asks for it (`info`): it costs a few µs a
    /// call, a tenth of a small call's rate at saturation.
    pub fn logging(&self) -> Logging {
        match &self.command {
            Command::Serve(args) => Logging {
                default_filter: "warn,hako::startup=info",
                json: args.logs_json(),
            },
            _ => Logging {
                default_filter: "warn",
                json: false,
            },
        }
    }
}

/// How a command failed, and so which exit status it gets.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The package was refused; the reasons were already printed.
    #[error("the package was refused")]
    Refused,
    /// The command line asked for something that cannot be done.
    #[error("{0}")]
    Usage(String),
    /// The function crashed; the outcome was already printed.
    #[error("the function crashed")]
    Crashed,
    /// The host failed.
    #[error(transparent)]
    Host(#[from] anyhow::Error),
    /// `hako run` ends with this status; anything to say was already said.
    #[error("exit status {0}")]
    Exit(u8),
}

impl Failure {
    /// The exit status of this failure.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Failure::Refused | Failure::Host(_) => ExitCode::from(1),
            Failure::Usage(_) => ExitCode::from(2),
            Failure::Crashed => ExitCode::from(3),
            Failure::Exit(status) => ExitCode::from(*status),
        }
    }
}

/// A host error as one line: the error and each cause not already quoted, see
/// [`crate::error_chain`].
pub fn error_line(err: &anyhow::Error) -> String {
    crate::error_chain(err.as_ref())
}

/// Runs the command line.
pub fn run(cli: Cli) -> Result<(), Failure> {
    if !matches!(cli.command, Command::Serve(_) | Command::Bench(_)) {
        crate::engines::one_instance_at_a_time();
    }
    match cli.command {
        Command::Check(args) => check::run(args),
        Command::Upload(args) => upload::run(args),
        Command::Push(args) => registry::push(args),
        Command::Tools(args) => tools::run(args),
        Command::Call(args) => call::run(args),
        Command::Serve(args) => serve::run(*args),
        Command::Bench(args) => bench::run(args),
        Command::Keygen(args) => keygen::run(args),
        Command::Run(args) => run::run(args),
    }
}

/// Says something to the operator on stderr.
pub(crate) fn note(message: &str) {
    eprintln!("hako: {message}");
}

/// The store a command uses.
fn open_store(dir: Option<&Path>) -> Result<Store, Failure> {
    let root = dir.map_or_else(crate::store::default_root, Path::to_path_buf);
    folder_only(&root)?;
    Store::open(&root).map_err(|err| Failure::Host(err.into()))
}

/// Refuses a bucket given to a command that works on a store folder only.
fn folder_only(store: &Path) -> Result<(), Failure> {
    if store.to_string_lossy().starts_with("s3:/") {
        return Err(Failure::Usage(format!(
            "--store {}: this command works on a store folder only, not on a bucket yet",
            store.display()
        )));
    }
    Ok(())
}

/// Loads and checks a package folder, archive or `oci://` reference, printing a refusal's
/// reasons. An archive is extracted, and a pull written, in the store's staging folder when
/// there is a store.
fn load_package(
    path: &Path,
    store: Option<&Store>,
    registry: &registry::RegistryArgs,
) -> Result<Package, Failure> {
    refusal_printed(path, load_quietly(path, store, registry)?)
}

/// [`load_package`] without printing a refusal.
fn load_quietly(
    path: &Path,
    store: Option<&Store>,
    registry: &registry::RegistryArgs,
) -> Result<Result<Package, LoadError>, Failure> {
    let work = match store {
        Some(store) if !path.is_dir() => {
            store.staging().map_err(|err| Failure::Host(err.into()))?
        }
        _ => std::env::temp_dir(),
    };
    let text = path.to_string_lossy();
    if crate::registry::Reference::is_reference(&text) {
        let options = registry.options()?;
        return Ok(crate::registry::load_blocking(&text, &options, &work));
    }
    Ok(package::load_in(path, &work))
}

/// What a load gave, printing a refusal's reasons (one line each, with its rule).
fn refusal_printed<T>(path: &Path, loaded: Result<T, LoadError>) -> Result<T, Failure> {
    match loaded {
        Ok(loaded) => Ok(loaded),
        Err(LoadError::Refused(refusal)) => {
            eprintln!("hako: {} is refused:", path.display());
            for problem in &refusal.problems {
                eprintln!("  - [{}] {}", problem.rule, problem.message);
            }
            Err(Failure::Refused)
        }
        Err(err) => Err(Failure::Host(anyhow::Error::new(err))),
    }
}

/// What `PACKAGE|NAME` names: a package on disk, or one in the store.
enum Target {
    Path(PathBuf),
    Stored(String),
}

fn target(arg: &str) -> Target {
    let path = Path::new(arg);
    if path.exists() || arg.contains('/') || arg.ends_with(".tar.gz") || arg.ends_with(".tgz") {
        Target::Path(path.to_path_buf())
    } else {
        Target::Stored(arg.to_string())
    }
}

fn stored(store: &Store, name: &str) -> Result<StoredPackage, Failure> {
    store.get(name).map_err(|err| match err {
        crate::store::StoreError::UnknownPackage(_) => Failure::Usage(format!(
            "{err} (give a package folder or archive, or upload it first)"
        )),
        other => Failure::Host(other.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Quoting {
        #[error("compiling the module: {0}")]
        Compile(#[source] std::io::Error),
    }

    #[test]
    fn a_cause_quoted_by_its_error_is_printed_once() {
        let io = std::io::Error::other("no llvm here");
        let err = anyhow::Error::new(Quoting::Compile(io)).context("uploading greet");
        assert_eq!(
            error_line(&err),
            "uploading greet: compiling the module: no llvm here"
        );
    }

    #[test]
    fn causes_not_quoted_are_all_printed() {
        let err = anyhow::Error::new(std::io::Error::other("disk full"))
            .context("writing the artifact")
            .context("uploading greet");
        assert_eq!(
            error_line(&err),
            "uploading greet: writing the artifact: disk full"
        );
    }
}
