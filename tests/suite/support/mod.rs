//! What integration tests share: the fixture guest module, built once from
//! `tests/guests` for `wasm32-wasip1`, the committed `examples/greet`
//! package, throwaway package folders around the fixture, and the command
//! that starts the `hako` binary under test.
//!
//! It owns building and locating guest modules, laying out packages on
//! disk and spawning `hako`. It does not run modules, check packages or
//! speak the protocol: that is what the tests exercise through hako itself.
//!
//! Use it from a test module with `use crate::support;`. Building is safe from many
//! test processes at once: cargo's lock on the guests' target folder
//! serialises the builds, and each process keeps the bytes in a `OnceLock`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{json, Value};

/// The Rust target every guest is built for.
pub const GUEST_TARGET: &str = "wasm32-wasip1";

/// Builds tests/guests once (cargo build --release --target wasm32-wasip1
/// --locked, with CARGO_TARGET_DIR = <the test binary's target dir>/guests)
/// and returns the fixture module bytes. Panics with what went wrong, and
/// how to fix it, when the target is missing or the build fails.
pub fn fixture_wasm() -> &'static [u8] {
    static FIXTURE: OnceLock<Vec<u8>> = OnceLock::new();
    FIXTURE.get_or_init(|| match build_fixture() {
        Ok(bytes) => bytes,
        Err(message) => panic!("cannot build the fixture guest: {message}"),
    })
}

/// The command line that runs this build's `hako` binary: the binary, after
/// the runner cargo runs this build's tests with, when there is one.
///
/// A cross-built test (aarch64 on an x86-64 machine, run by `qemu-aarch64`)
/// spawns an aarch64 `hako`, which the kernel cannot run without binfmt_misc;
/// prefixing the same runner works in any container, needs no root, and
/// changes nothing on the machine. Cargo names the runner in
/// `CARGO_TARGET_<TRIPLE>_RUNNER` (words split on whitespace, as cargo does);
/// a runner set only in a cargo config file is not seen here.
pub fn hako_argv() -> Vec<String> {
    let runner = runner_variable()
        .and_then(std::env::var_os)
        .map(|words| {
            words
                .to_string_lossy()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut argv = runner;
    argv.push(env!("CARGO_BIN_EXE_hako").to_string());
    argv
}

/// A command that runs this build's `hako` binary (see [`hako_argv`]).
pub fn hako_command() -> Command {
    let mut argv = hako_argv().into_iter();
    let program = argv.next().expect("the argv names at least the binary");
    let mut command = Command::new(program);
    command.args(argv);
    command
}

/// Runs `hako` with `args` and `store` as its store, to the end.
pub fn run_hako(store: &Path, args: &[&str]) -> Output {
    hako_command()
        .args(args)
        .env("HAKO_STORE", store)
        .output()
        .expect("hako runs")
}

/// A path as a command-line argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

/// The variable cargo reads the test runner from for the target these
/// tests were built for (the targets hako is built and tested for).
fn runner_variable() -> Option<&'static str> {
    if cfg!(all(
        target_arch = "aarch64",
        target_os = "linux",
        target_env = "gnu"
    )) {
        Some("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER")
    } else if cfg!(all(
        target_arch = "x86_64",
        target_os = "linux",
        target_env = "gnu"
    )) {
        Some("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER")
    } else {
        None
    }
}

/// The committed example package (manifest and `module.wasm`).
pub fn greet_package_dir() -> PathBuf {
    repository_root().join("examples").join("greet")
}

/// A package folder in a temp dir: manifest (name, version "1.0.0", abi 1),
/// module.wasm = fixture, and assets/fixture.json when `fixture_json` is
/// Some.
pub fn fixture_package(name: &str, fixture_json: Option<Value>) -> tempfile::TempDir {
    let package = module_package(name, fixture_wasm());
    if let Some(config) = fixture_json {
        let assets = package.path().join("assets");
        create_dir(&assets);
        write(&assets.join("fixture.json"), config.to_string().as_bytes());
    }
    package
}

/// A package folder in a temp dir around any module (for example one made
/// from `.wat`): manifest (name, version "1.0.0", abi 1) and module.wasm.
pub fn module_package(name: &str, module: &[u8]) -> tempfile::TempDir {
    let package = match tempfile::Builder::new().prefix("hako-package-").tempdir() {
        Ok(dir) => dir,
        Err(error) => panic!("cannot create a temp dir for package {name}: {error}"),
    };
    let manifest = json!({"name": name, "version": "1.0.0", "abi": 1});
    write(
        &package.path().join("subako-package.json"),
        manifest.to_string().as_bytes(),
    );
    write(&package.path().join("module.wasm"), module);
    package
}

/// A `.tar.gz` of the package folder at `dir`.
pub fn archive_of(dir: &Path) -> Vec<u8> {
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(encoder);
    builder
        .append_dir_all(".", dir)
        .expect("the package is archived");
    builder
        .into_inner()
        .and_then(|encoder| encoder.finish())
        .expect("the archive is finished")
}

/// The hako repository: the package these integration tests belong to.
fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the build and reads the module, or says why it could not.
fn build_fixture() -> Result<Vec<u8>, String> {
    check_guest_target()?;
    let guests = repository_root().join("tests").join("guests");
    let target_dir = test_target_dir()?.join("guests");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .current_dir(&guests)
        .args(["build", "--release", "--locked", "--target", GUEST_TARGET])
        .arg("--manifest-path")
        .arg(guests.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target_dir);
    // Flags meant for the host build (coverage, target-cpu=native, …) would
    // break or change a wasm build, and a wrapper of the host's workspace
    // (clippy's driver, in CI) would lint the guests and build them again;
    // the guests' own profile is what counts.
    for variable in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
    ] {
        command.env_remove(variable);
    }
    let output = command
        .output()
        .map_err(|error| format!("cannot run {}: {error}", Path::new(&cargo).display()))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo build --release --locked --target {GUEST_TARGET}` in {} failed ({}):\n{}",
            guests.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let module = target_dir
        .join(GUEST_TARGET)
        .join("release")
        .join("fixture.wasm");
    std::fs::read(&module).map_err(|error| format!("cannot read {}: {error}", module.display()))
}

/// Fails with the fix when the toolchain has no `wasm32-wasip1` standard
/// library, instead of letting cargo print a less direct error.
fn check_guest_target() -> Result<(), String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|error| format!("cannot run {}: {error}", Path::new(&rustc).display()))?;
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let std_dir = Path::new(&sysroot)
        .join("lib")
        .join("rustlib")
        .join(GUEST_TARGET);
    if output.status.success() && std_dir.is_dir() {
        Ok(())
    } else {
        Err(format!(
            "the {GUEST_TARGET} target is not installed for this toolchain \
             ({} is missing); install it with `rustup target add {GUEST_TARGET}`",
            std_dir.display()
        ))
    }
}

/// The cargo target folder the running test was built in.
fn test_target_dir() -> Result<PathBuf, String> {
    // Integration tests and benches get `<target>/tmp`; anything else finds
    // the folder from its own executable, `<target>/<profile>/deps/<exe>`.
    if let Some(tmp) = option_env!("CARGO_TARGET_TMPDIR") {
        if let Some(target) = Path::new(tmp).parent() {
            return Ok(target.to_path_buf());
        }
    }
    let exe = std::env::current_exe()
        .map_err(|error| format!("cannot find the test executable: {error}"))?;
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("{} is not inside a cargo target folder", exe.display()))
}

fn create_dir(path: &Path) {
    if let Err(error) = std::fs::create_dir_all(path) {
        panic!("cannot create {}: {error}", path.display());
    }
}

fn write(path: &Path, bytes: &[u8]) {
    if let Err(error) = std::fs::write(path, bytes) {
        panic!("cannot write {}: {error}", path.display());
    }
}
/// Makes the venv `$CARGO_TARGET_TMPDIR/<name>` (reused across runs) and installs
/// `requirement` into it from PyPI; returns the venv. `purpose` says what for, in errors.
pub fn pip_venv(name: &str, requirement: &str, purpose: &str) -> Result<PathBuf, String> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let created = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .map_err(|err| {
            format!("python3 is needed {purpose} ({err}); install python3 and python3-venv")
        })?;
    if !created.status.success() {
        return Err(format!(
            "`python3 -m venv {}` failed (install python3-venv): {}",
            venv.display(),
            String::from_utf8_lossy(&created.stderr)
        ));
    }
    let pip = Command::new(venv.join("bin").join("python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg(requirement)
        .output()
        .map_err(|err| format!("running pip: {err}"))?;
    if !pip.status.success() {
        return Err(format!(
            "`pip install {requirement}` failed: {}",
            String::from_utf8_lossy(&pip.stderr)
        ));
    }
    Ok(venv)
}

pub mod configs;
pub mod host;
pub mod hostile_registry;
pub mod https;
pub mod mcp_wat;
pub mod registry;
pub mod seaweed;

/// The committed example module's bytes.
pub fn greet_wasm() -> Vec<u8> {
    std::fs::read(greet_package_dir().join("module.wasm"))
        .expect("examples/greet/module.wasm is committed")
}
