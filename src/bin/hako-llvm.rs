//! `hako-llvm`, the LLVM compile worker of a build with the `llvm` feature: `hako` starts it
//! as `hako-llvm __compile …` for every LLVM compile ([`hako::compile::worker_main`]), so that
//! `hako` itself never links LLVM. It is the only program of the package that does.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use hako::compile;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(compile::WORKER_COMMAND) {
        eprintln!(
            "hako-llvm is the LLVM compile worker of hako, which starts it: it is not run by \
             hand (keep it beside the hako binary of the same build)"
        );
        return ExitCode::from(2);
    }
    hako_engine_llvm::link();
    compile::worker_main(&args[2..])
}
