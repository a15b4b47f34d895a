//! The `hako` command. Errors become exit statuses as `cli` documents; a closed stdout (for
//! example `hako tools greet | head -1`) is not an error.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use hako::cli::{self, Cli, Failure};
use hako::{compile, engines};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(compile::WORKER_COMMAND) {
        return compile::worker_main(&args[2..]);
    }
    // This binary compiles in a child process of its own, bounded in time and memory: the very
    // same binary, held open from the start, even when an upgrade replaces the file at its path.
    let exe = std::env::current_exe().map_err(|err| format!("finding this binary: {err}"));
    let open = |path: &std::path::Path| {
        std::fs::File::open(path).map_err(|err| format!("opening {}: {err}", path.display()))
    };
    match exe.as_deref().map_err(Clone::clone).and_then(open) {
        Ok(exe) => compile::compile_in_children(exe),
        Err(why) => eprintln!("hako: compiles run in this process, unbounded: {why}"),
    }
    // LLVM compiles in a worker beside this binary, which does not link LLVM.
    if cfg!(feature = "llvm") {
        let worker = exe.and_then(|exe| open(&exe.with_file_name(engines::LLVM_WORKER)));
        compile::compile_llvm_in_children(worker.map_err(|why| {
            format!(
                "this build compiles with LLVM in {}, beside hako: {why}",
                engines::LLVM_WORKER
            )
        }));
    }
    let cli = Cli::parse();
    let logging = cli.logging();
    let filter = tracing_subscriber::EnvFilter::try_from_env("HAKO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(logging.default_filter));
    // Colours only for a terminal: a log file or journal gets plain text.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if logging.json {
        logs.json().init();
    } else {
        logs.init();
    }
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Host(err)) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(failure) => {
            match &failure {
                Failure::Host(err) => eprintln!("hako: error: {}", cli::error_line(err)),
                Failure::Usage(message) => eprintln!("hako: {message}"),
                Failure::Refused | Failure::Crashed | Failure::Exit(_) => {}
            }
            failure.exit_code()
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
