//! The compile worker as its own program: `hako __compile`, and in a build with LLVM the
//! `hako-llvm` executable, the only one that links LLVM. Its start and bounds (time, memory,
//! crashes) are tested in `guest_bounds`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use hako::engines::{self, Compiler, EngineConfig};

use crate::support;

/// Runs `program` as the compile worker for `config` with the engine identity `identity`, the
/// greet module on its stdin.
fn compile_in(program: &Path, config: EngineConfig, identity: &str) -> Output {
    let mut child = Command::new(program)
        .args([
            hako::compile::WORKER_COMMAND,
            &config.name(),
            &(4u64 << 30).to_string(),
            identity,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the worker starts");
    let wasm = support::greet_wasm();
    child.stdin.take().unwrap().write_all(&wasm).unwrap();
    child.wait_with_output().unwrap()
}

/// The identity line of the engine this build loads `config`'s artifacts with.
fn identity(config: EngineConfig) -> String {
    engines::engine(config, None)
        .expect("the engine")
        .identity()
        .to_line()
}

#[test]
fn a_worker_asked_for_another_engine_identity_compiles_nothing() {
    let hako = Path::new(env!("CARGO_BIN_EXE_hako"));
    let cranelift = EngineConfig::wasmer(Compiler::Cranelift);
    let output = compile_in(
        hako,
        cranelift,
        "wasmer 7.4.1 cranelift x86_64-unknown-linux-gnu",
    );
    assert_eq!(output.status.code(), Some(12));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the compile worker is another build than hako")
            && stderr.contains("hako's is `wasmer 7.4.1 cranelift"),
        "{stderr}"
    );
    // The same worker, told its own identity, answers.
    let output = compile_in(hako, cranelift, &identity(cranelift));
    assert!(output.status.success(), "{output:?}");
    assert!(output.stdout.starts_with(b"hako-cw1"));
}

/// The `hako` command never links LLVM, whose start-up (static constructors, libstdc++) would
/// cost every process that does a few milliseconds: `hako-llvm` compiles with it.
#[cfg(feature = "llvm")]
#[test]
fn only_hako_llvm_links_llvm_and_hako_compiles_with_it_there() {
    let hako = Path::new(env!("CARGO_BIN_EXE_hako"));
    let worker = Path::new(env!("CARGO_BIN_EXE_hako-llvm"));
    assert_eq!(worker.file_name().unwrap(), engines::LLVM_WORKER);
    let links_llvm = |program: &Path| {
        use object::{Object, ObjectSymbol};
        // Read as parsing needs it: the binaries are hundreds of MB.
        let data = object::ReadCache::new(std::fs::File::open(program).unwrap());
        let file = object::File::parse(&data).unwrap();
        file.symbols()
            .any(|symbol| symbol.name() == Ok("LLVMContextCreate") && symbol.is_definition())
    };
    assert!(!links_llvm(hako), "{} links LLVM", hako.display());
    assert!(
        links_llvm(worker),
        "{} does not link LLVM",
        worker.display()
    );

    let llvm = EngineConfig::wasmer(Compiler::Llvm);
    let output = compile_in(hako, llvm, &identity(llvm));
    assert_eq!(output.status.code(), Some(12), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("this process does not link LLVM: hako-llvm compiles with it"),
        "{stderr}"
    );
    let output = compile_in(worker, llvm, &identity(llvm));
    assert!(output.status.success(), "{output:?}");
    assert!(output.stdout.starts_with(b"hako-cw1"));

    // An upload with LLVM through the `hako` command: its artifact, and a call on it.
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let upload = support::run_hako(
        store.path(),
        &["upload", support::arg(&greet), "--compiler", "llvm"],
    );
    assert!(upload.status.success(), "{upload:?}");
    let call = support::run_hako(
        store.path(),
        &[
            "call",
            "greet",
            "greet",
            r#"{"name":"Ada"}"#,
            "--compiler",
            "llvm",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&call.stdout).trim_end(),
        r#"{"message":"Hello, Ada!"}"#
    );
}

#[cfg(feature = "llvm")]
#[test]
fn hako_without_its_llvm_worker_refuses_llvm_compiles_by_name_and_stores_nothing() {
    // `hako` alone in a folder (a link to the same file: hako finds its worker beside the
    // path it was started from).
    let lone = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let hako = lone.path().join("hako");
    std::fs::hard_link(env!("CARGO_BIN_EXE_hako"), &hako)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_hako"), &hako).map(drop))
        .unwrap();
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let output = Command::new(&hako)
        .args(["upload", support::arg(&greet), "--compiler", "llvm"])
        .env("HAKO_STORE", store.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let missing = format!(
        "this build compiles with LLVM in hako-llvm, beside hako: opening {}",
        lone.path().join("hako-llvm").display()
    );
    assert!(stderr.contains(&missing), "{stderr}");
    let tools = Command::new(&hako)
        .args(["tools", "greet"])
        .env("HAKO_STORE", store.path())
        .output()
        .unwrap();
    assert!(!tools.status.success(), "greet was stored: {tools:?}");
    // Every other compiler still compiles.
    let output = Command::new(&hako)
        .args(["upload", support::arg(&greet), "--compiler", "cranelift"])
        .env("HAKO_STORE", store.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");

    // A server says so as it starts.
    use crate::serve_support::Server;
    let log_path = lone.path().join("server.log");
    let server = Server::start_program(
        &hako,
        store.path(),
        &[],
        std::fs::File::create(&log_path).unwrap(),
    );
    let said = || std::fs::read_to_string(&log_path).unwrap();
    server.wait_until("it says LLVM uploads will fail", |_| {
        said().contains("uploads that ask for llvm")
    });
    let said = said();
    assert!(
        said.contains(&format!("hako: {missing}"))
            && said.contains(": uploads that ask for llvm will fail"),
        "{said}"
    );
}
