//! `hako run [FLAGS] [--] MODULE|PACKAGE [ARGS...]`: any WASI preview 1 command on hako's own
//! WASI layer and engines, with the process's standard streams. Not an ABI call: the guest gets
//! the arguments, environment and folders the flags give, and its exit status becomes hako's.
//!
//! Exit status: the guest's (`proc_exit`, or 0 when `_start` returns; a status above 255,
//! which a process status cannot hold, becomes 255 with a line saying so), or, each with one
//! line on stderr naming it: [`TRAP`] when it traps, [`OUT_OF_MEMORY`] at its memory cap,
//! [`TIMEOUT`] past its time limit. A closed stdout or stderr stops the guest with
//! [`BROKEN_PIPE`] and no line, as a native command killed by `SIGPIPE`. hako's own
//! failures keep the CLI's statuses: 2 a usage error, 1 a refused module or a host failure.

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use clap::Args;

use super::flags::{EngineArgs, LimitArgs, NetworkArgs};
use super::{note, Failure, Target};
use crate::call::{self, Command, CommandExit, Mount, Streams};
use crate::package;
use crate::store::{ModuleSource, ModuleSpec};

/// The status of a guest that trapped (128 + SIGABRT, as a native program that aborts).
pub const TRAP: u8 = 134;
/// The status of a guest stopped at its memory cap.
pub const OUT_OF_MEMORY: u8 = 135;
/// The status of a guest stopped at its time limit (128 + SIGKILL).
pub const TIMEOUT: u8 = 137;
/// The status of a guest whose stdout or stderr was closed (128 + SIGPIPE).
pub const BROKEN_PIPE: u8 = 141;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Preopen the host folder HOST as the guest path GUEST (default: HOST as given); in the
    /// order given, from fd 3 (repeatable).
    #[arg(long = "dir", value_name = "HOST[::GUEST]", value_parser = parse_dir)]
    dirs: Vec<(PathBuf, String)>,
    /// Set the guest's variable K to V; `--env K` passes hako's own value of K. The guest's
    /// environment is exactly these (repeatable).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<String>,
    /// The store folder holding the compiled code (default: $HAKO_STORE, else ./.hako).
    #[arg(long, env = "HAKO_STORE")]
    store: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    network: NetworkArgs,
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
    /// The module (a .wasm file) or package (a folder, archive or stored name) to run, then
    /// the guest's own arguments: everything after the module is the guest's.
    #[arg(
        value_name = "MODULE|PACKAGE [ARGS]",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<String>,
}

fn parse_dir(text: &str) -> Result<(PathBuf, String), String> {
    let (host, guest) = text.split_once("::").unwrap_or((text, text));
    if host.is_empty() || guest.is_empty() {
        return Err(format!("{text:?} is not HOST[::GUEST]"));
    }
    Ok((PathBuf::from(host), guest.to_string()))
}

fn parse_env(text: &str) -> Result<String, String> {
    let (name, value) = match text.split_once('=') {
        Some((name, value)) => (name, value.to_string()),
        None => match std::env::var(text) {
            Ok(value) => (text, value),
            Err(_) => return Err(format!("{text} is not set here (give K=V)")),
        },
    };
    if name.is_empty() || name.contains('\0') || value.contains('\0') {
        return Err(format!(
            "{text:?} is not K=V with a name and no NUL character"
        ));
    }
    Ok(format!("{name}={value}"))
}

/// What to run: the module's bytes and facts, and the name it is known by.
struct Runnable {
    wasm: ModuleSource,
    module_sha256: String,
    uses_simd: bool,
    /// `argv[0]`: the module's file name, or the package's name.
    program: String,
}

fn runnable(
    target: &str,
    store: &crate::store::Store,
    registry: &super::registry::RegistryArgs,
) -> Result<Runnable, Failure> {
    let path = Path::new(target);
    if package::is_module_file(path) {
        let module = super::refusal_printed(path, package::load_module_file(path))?;
        let program = path
            .file_name()
            .map_or_else(|| target.to_string(), |n| n.to_string_lossy().into_owned());
        return Ok(Runnable {
            wasm: ModuleSource::Bytes(module.wasm),
            module_sha256: module.module_sha256,
            uses_simd: module.uses_simd,
            program,
        });
    }
    let target = match super::target(target) {
        Target::Stored(name) if name.ends_with(".wasm") => Target::Path(PathBuf::from(name)),
        target => target,
    };
    match target {
        Target::Path(path)
            if !path.exists()
                && !crate::registry::Reference::is_reference(&path.to_string_lossy()) =>
        {
            Err(Failure::Usage(format!(
                "{} does not exist (give a .wasm module, a package folder or archive, or a stored \
             package's name)",
                path.display()
            )))
        }
        Target::Path(path) => {
            let package = super::load_package(&path, Some(store), registry)?;
            Ok(Runnable {
                program: package.manifest.name.clone(),
                module_sha256: package.module_sha256,
                uses_simd: package.uses_simd,
                wasm: ModuleSource::Bytes(package.wasm),
            })
        }
        Target::Stored(name) => {
            let stored = super::stored(store, &name)?;
            Ok(Runnable {
                wasm: ModuleSource::File(stored.module_path()),
                module_sha256: stored.record.module_sha256,
                uses_simd: stored.record.uses_simd,
                program: name,
            })
        }
    }
}

fn mounts(dirs: &[(PathBuf, String)]) -> Result<Vec<Mount>, Failure> {
    dirs.iter()
        .map(|(host, guest)| {
            let dir = Dir::open_ambient_dir(host, ambient_authority()).map_err(|err| {
                Failure::Usage(format!("--dir {}: cannot open it: {err}", host.display()))
            })?;
            Ok(Mount {
                guest: guest.clone(),
                host: host.clone(),
                dir,
            })
        })
        .collect()
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    let config = args.engine.config()?;
    let limits = args.limits.limits()?;
    let mounts = mounts(&args.dirs)?;
    let store = super::open_store(args.store.as_deref())?;
    let (target, guest_args) = args
        .command
        .split_first()
        .ok_or_else(|| Failure::Usage("name the module to run".into()))?;
    let runnable = runnable(target, &store, &args.registry)?;
    let network = args.network.network(&runnable.program)?;
    let loaded = store
        .load_module(
            &ModuleSpec {
                wasm: runnable.wasm.bytes(),
                module_sha256: &runnable.module_sha256,
                uses_simd: runnable.uses_simd,
                config,
            },
            None,
        )
        .map_err(|err| Failure::Host(err.into()))?;
    // The guest's stderr is the process's: the store's notes (such as "compiled the module
    // now") are logged, not printed (`HAKO_LOG=info` shows them).
    for message in &loaded.notes {
        tracing::info!("{message}");
    }
    drop(runnable.wasm);
    let mut argv = vec![runnable.program];
    argv.extend(guest_args.iter().cloned());
    let command = Command {
        args: argv,
        env: args.env,
        mounts,
        limits,
        network,
    };
    let streams = Streams::of_process().map_err(|err| Failure::Host(err.into()))?;
    let exit = call::run_command(&loaded.module, command, streams)
        .map_err(|err| Failure::Host(err.into()))?;
    Err(Failure::Exit(exit_status(&exit)))
}

/// The process status of a run, saying on stderr why when the guest did not choose it.
fn exit_status(exit: &CommandExit) -> u8 {
    match exit {
        CommandExit::Status(status) => u8::try_from(*status).unwrap_or_else(|_| {
            note(&format!(
                "the guest exited with status {status}, which a process status cannot hold: \
                 exiting with 255"
            ));
            255
        }),
        CommandExit::Trap(message) => {
            note(&format!("the guest trapped: {message}"));
            TRAP
        }
        CommandExit::OutOfMemory(message) => {
            note(&format!("the guest hit its memory cap: {message}"));
            OUT_OF_MEMORY
        }
        CommandExit::Timeout(limit) => {
            note(&format!(
                "the guest ran past its time limit of {} ms",
                limit.as_millis()
            ));
            TIMEOUT
        }
        CommandExit::StreamFailed(failure) if failure.error == rustix::io::Errno::PIPE => {
            BROKEN_PIPE
        }
        CommandExit::StreamFailed(failure) => {
            note(&format!(
                "writing the guest's {} failed: {}",
                failure.stream, failure.error
            ));
            BROKEN_PIPE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> RunArgs {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            run: RunArgs,
        }
        Wrapper::try_parse_from(std::iter::once("hako").chain(args.iter().copied()))
            .unwrap()
            .run
    }

    #[test]
    fn everything_after_the_module_is_the_guests() {
        let args = parse(&["--env", "A=1", "m.wasm", "--env", "B=2", "-x", "--", "y"]);
        assert_eq!(args.env, ["A=1"]);
        assert_eq!(args.command, ["m.wasm", "--env", "B=2", "-x", "--", "y"]);
        let args = parse(&["--dir", "a::/", "--", "m.wasm", "--dir", "b"]);
        assert_eq!(args.dirs, [(PathBuf::from("a"), "/".to_string())]);
        assert_eq!(args.command, ["m.wasm", "--dir", "b"]);
    }

    #[test]
    fn a_dir_without_a_guest_path_keeps_its_host_path() {
        assert_eq!(
            parse_dir("data").unwrap(),
            (PathBuf::from("data"), "data".into())
        );
        assert_eq!(
            parse_dir("/srv/x::/work").unwrap(),
            (PathBuf::from("/srv/x"), "/work".into())
        );
        assert!(parse_dir("::/work").is_err());
        assert!(parse_dir("x::").is_err());
    }

    #[test]
    fn an_env_entry_is_k_equals_v_or_a_name_set_here() {
        assert_eq!(parse_env("A=b=c").unwrap(), "A=b=c");
        assert_eq!(parse_env("A=").unwrap(), "A=");
        assert!(parse_env("=v").is_err());
        assert!(parse_env("HAKO_SURELY_UNSET_VARIABLE").is_err());
        std::env::var("PATH").expect("tests run with a PATH");
        assert!(parse_env("PATH").unwrap().starts_with("PATH="));
    }

    #[test]
    fn a_status_a_process_cannot_hold_becomes_255() {
        assert_eq!(exit_status(&CommandExit::Status(3)), 3);
        assert_eq!(exit_status(&CommandExit::Status(256)), 255);
        assert_eq!(exit_status(&CommandExit::Trap("x".into())), TRAP);
    }
}
