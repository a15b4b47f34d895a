//! The official WASI test suite (preview 1), run through `hako run` on every engine
//! configuration of this build.
//!
//! The suite is not part of this repository: it is found through `HAKO_WASI_TESTSUITE`, else
//! in `../shared/wasi-testsuite` beside the checkout. Without it this test prints one line and
//! passes, unless `HAKO_WASI_TESTSUITE_REQUIRED` is set (CI sets it), when it fails.
//!
//! Each test's `.json` gives its arguments, environment, a `root` folder preopened as `/`, the
//! exit status and the prefixes of stdout and stderr, as the suite's specification says. Every
//! test runs as `hako run [FLAGS] -- TEST.wasm ARGS...`, the command an operator types, with
//! stdin, stdout and stderr as pipes, stdin closed at once, and a fresh copy of its `root`.
//! Artifacts come from the store the other tests share, under the target folder, so a second
//! run compiles nothing.
//!
//! A test may fail as expected only where the ABI forbids what it checks; those are listed in
//! [`EXPECTED_FAILURES`] with the reason, and reported as such.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hako::engines::EngineConfig;
use serde_json::Value;

use crate::support;

/// Tests that fail on purpose: (the test's path below `tests/`, why the ABI forbids it).
const EXPECTED_FAILURES: &[(&str, &str)] = &[];

/// The time limit of one test's run: twice the 5 s the suite's own runner allows, since the
/// machines that run CI are shared and the host code is a debug build.
const TIMEOUT_MS: u64 = 10_000;

/// How long one `hako run` may take, compiling included, before the harness kills it.
const WALL_LIMIT: Duration = Duration::from_secs(600);

/// Where the suite is, if it is here.
fn suite_root() -> Option<PathBuf> {
    let root = std::env::var_os("HAKO_WASI_TESTSUITE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/wasi-testsuite"),
        PathBuf::from,
    );
    root.join("tests").is_dir().then_some(root)
}

/// One test program and its specification.
struct Case {
    /// The path below `tests/`, such as `rust/testsuite/wasm32-wasip1/fd_readdir.wasm`.
    name: String,
    wasm: PathBuf,
    spec: Spec,
}

#[derive(Default)]
struct Spec {
    args: Vec<String>,
    env: Vec<(String, String)>,
    root: Option<PathBuf>,
    exit_code: i32,
    stdout: String,
    stderr: String,
}

fn spec(json: &Path, folder: &Path) -> Spec {
    let Ok(text) = std::fs::read_to_string(json) else {
        return Spec::default();
    };
    let value: Value = serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("{} is not JSON: {err}", json.display()));
    let text = |key: &str| value[key].as_str().unwrap_or_default().to_string();
    Spec {
        args: value["args"]
            .as_array()
            .map(|args| {
                args.iter()
                    .map(|arg| arg.as_str().expect("args are strings").to_string())
                    .collect()
            })
            .unwrap_or_default(),
        env: value["env"]
            .as_object()
            .map(|env| {
                env.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str().expect("env values are strings").into(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
        root: value["root"].as_str().map(|root| folder.join(root)),
        exit_code: value["exit_code"].as_i64().map_or(0, |code| code as i32),
        stdout: text("stdout"),
        stderr: text("stderr"),
    }
}

/// Every test of the suite, in a fixed order.
fn cases(root: &Path) -> Vec<Case> {
    let tests = root.join("tests");
    let mut cases = Vec::new();
    for language in ["assemblyscript", "c", "rust"] {
        let folder = tests.join(language).join("testsuite/wasm32-wasip1");
        let mut wasms: Vec<PathBuf> = std::fs::read_dir(&folder)
            .unwrap_or_else(|err| panic!("{}: {err}", folder.display()))
            .map(|entry| entry.expect("the suite's folder lists").path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
            .collect();
        wasms.sort();
        for wasm in wasms {
            let name = wasm
                .strip_prefix(&tests)
                .expect("below tests/")
                .to_string_lossy()
                .into_owned();
            let spec = spec(&wasm.with_extension("json"), &folder);
            cases.push(Case { name, wasm, spec });
        }
    }
    cases
}

/// Copies the folder `from` to `to`, links as links.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&source, &target);
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source).unwrap(), &target).unwrap();
        } else {
            std::fs::copy(&source, &target).unwrap();
        }
    }
}

/// Runs one test on one configuration; `Err` says how it failed.
fn run_case(case: &Case, config: EngineConfig, store: &Path) -> Result<(), String> {
    let scratch = tempfile::tempdir().unwrap();
    let mut command: Command = support::hako_command();
    command.arg("run").arg("--store").arg(store);
    command.args(["--engine", config.kind().name()]);
    command.args(["--compiler", config.compiler().name()]);
    command.args(["--timeout", &TIMEOUT_MS.to_string()]);
    if let Some(root) = &case.spec.root {
        let copy = scratch.path().join("root");
        copy_tree(root, &copy);
        command.arg("--dir").arg(format!("{}::/", copy.display()));
    }
    for (key, value) in &case.spec.env {
        command.arg("--env").arg(format!("{key}={value}"));
    }
    command.arg("--").arg(&case.wasm).args(&case.spec.args);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("hako starts");
    drop(child.stdin.take());
    let (mut stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).map(|_| bytes)
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).map(|_| bytes)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > WALL_LIMIT {
            let _ = child.kill();
            return Err(format!("still running after {} s", WALL_LIMIT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out_bytes = out.join().unwrap().unwrap();
    let err_bytes = err.join().unwrap().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out_bytes),
        String::from_utf8_lossy(&err_bytes),
    );
    let code = status.code().unwrap_or(-1);
    let tail = |text: &str| {
        let text = text.trim_end();
        let start = text.len().saturating_sub(300);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[start..].replace('\n', " | ")
    };
    if code != case.spec.exit_code {
        return Err(format!(
            "exit status {code}, expected {}; stderr: {}",
            case.spec.exit_code,
            tail(&stderr)
        ));
    }
    if !stdout.starts_with(&case.spec.stdout) {
        return Err(format!(
            "stdout {:?} does not start with {:?}",
            tail(&stdout),
            case.spec.stdout
        ));
    }
    if !stderr.starts_with(&case.spec.stderr) {
        return Err(format!(
            "stderr {:?} does not start with {:?}",
            tail(&stderr),
            case.spec.stderr
        ));
    }
    Ok(())
}

#[test]
fn the_official_wasi_test_suite_passes_on_every_engine() {
    let Some(root) = suite_root() else {
        assert!(
            std::env::var_os("HAKO_WASI_TESTSUITE_REQUIRED").is_none(),
            "HAKO_WASI_TESTSUITE_REQUIRED is set, but the WASI test suite was not found \
             (set HAKO_WASI_TESTSUITE to its folder)"
        );
        println!("the WASI test suite was not found (set HAKO_WASI_TESTSUITE); not run");
        return;
    };
    let cases = cases(&root);
    assert!(!cases.is_empty(), "{} holds no tests", root.display());
    let store = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hako-test-store");
    let configs = crate::support::configs::test_configs();
    let work: Vec<(EngineConfig, &Case)> = configs
        .iter()
        .flat_map(|&config| cases.iter().map(move |case| (config, case)))
        .collect();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(config, case)) = work.get(index) else {
                    break;
                };
                let result = run_case(case, config, &store);
                results
                    .lock()
                    .unwrap()
                    .push((config, case.name.clone(), result));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| (a.0.name(), &a.1).cmp(&(b.0.name(), &b.1)));

    let mut unexpected = Vec::new();
    for (config, name, result) in &results {
        let expected = EXPECTED_FAILURES.iter().find(|(test, _)| test == name);
        match (result, expected) {
            (Err(why), Some((_, reason))) => {
                println!("{config}: {name}: failed as expected ({reason}): {why}")
            }
            (Err(why), None) => {
                println!("{config}: {name}: FAILED: {why}");
                unexpected.push(format!("{config}: {name}"));
            }
            (Ok(()), Some(_)) => {
                println!("{config}: {name}: passed, but is listed as an expected failure");
                unexpected.push(format!("{config}: {name} (passes; take it off the list)"));
            }
            (Ok(()), None) => {}
        }
    }
    for config in &configs {
        let mine = results.iter().filter(|(c, _, _)| c == config);
        let passed = mine.clone().filter(|(_, _, r)| r.is_ok()).count();
        let failed = mine.count() - passed;
        println!(
            "{config}: {passed}/{} passed, {failed} failed ({} expected)",
            cases.len(),
            EXPECTED_FAILURES.len()
        );
    }
    assert!(
        unexpected.is_empty(),
        "the WASI test suite failed: {}",
        unexpected.join(", ")
    );
}
