//! `hako run`: WASI commands on hako's WASI layer, through the binary an operator types. Exit
//! statuses (the guest's, and hako's own for a trap, the memory cap and the time limit), stdin
//! and stdout streamed in constant memory, `--dir`, `--env`, the write budget, the real
//! `subako_http` imports, a refused module, and the AOT cache a second run finds.
//!
//! The guests are small WAT commands written here, each doing one thing.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support;

/// The imports and helpers every guest below shares: fd_write of `len` bytes at `ptr` to
/// `fd` (iovec at 0, count at 8), and proc_exit.
const IMPORTS: &str = r#"
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
"#;

const PRELUDE: &str = r#"
  (memory (export "memory") 2)
  (func $write (param $fd i32) (param $ptr i32) (param $len i32) (result i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8)))
"#;

/// A command module: `body` is the rest of the module after the shared prelude.
fn module(name: &str, body: &str) -> (tempfile::TempDir, PathBuf) {
    module_importing(name, "", body)
}

/// A command module with more `imports` than the prelude's.
fn module_importing(name: &str, imports: &str, body: &str) -> (tempfile::TempDir, PathBuf) {
    let wat = format!("(module {IMPORTS} {imports} {PRELUDE} {body})");
    let wasm = wat::parse_str(&wat).unwrap_or_else(|err| panic!("{name}: {err}"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.wasm"));
    std::fs::write(&path, wasm).unwrap();
    (dir, path)
}

fn store() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hako-test-store")
}

/// `hako run` with `flags`, then `--`, the module and `guest_args`.
fn hako_run(flags: &[&str], wasm: &Path, guest_args: &[&str]) -> Command {
    let mut command = support::hako_command();
    command.arg("run").arg("--store").arg(store()).args(flags);
    command.arg("--").arg(wasm).args(guest_args);
    command
}

fn output(mut command: Command, stdin: &[u8]) -> Output {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("hako starts");
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts that the run ended with `status` and said `says` on stderr.
fn ended(out: &Output, status: i32, says: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{stderr}");
    assert!(
        stderr.contains(says),
        "stderr does not say {says:?}: {stderr}"
    );
}

#[test]
fn the_exit_status_is_the_guests() {
    let (_d, exits) = module(
        "exits",
        r#"(func (export "_start") (call $proc_exit (i32.const 7)))"#,
    );
    let out = output(hako_run(&[], &exits, &[]), b"");
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "nothing of hako's own on stderr");

    let (_d, returns) = module("returns", r#"(func (export "_start"))"#);
    let out = output(hako_run(&[], &returns, &[]), b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let (_d, big) = module(
        "big",
        r#"(func (export "_start") (call $proc_exit (i32.const 256)))"#,
    );
    let out = output(hako_run(&[], &big, &[]), b"");
    ended(&out, 255, "status 256");
}

#[test]
fn a_trap_the_memory_cap_and_the_time_limit_each_have_a_status_and_a_line() {
    let (_d, traps) = module("traps", r#"(func (export "_start") unreachable)"#);
    let out = output(hako_run(&[], &traps, &[]), b"");
    ended(&out, 134, "hako: the guest trapped");

    let (_d, grows) = module(
        "grows",
        r#"(func (export "_start")
             (loop $more
               (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
             unreachable)"#,
    );
    let out = output(hako_run(&["--memory", "4"], &grows, &[]), b"");
    ended(&out, 135, "memory cap");

    let (_d, spins) = module("spins", r#"(func (export "_start") (loop $l (br $l)))"#);
    let out = output(hako_run(&["--timeout", "300"], &spins, &[]), b"");
    ended(&out, 137, "time limit of 300 ms");
}

/// Copies stdin to stdout, 64 KiB at a time, until end of file.
const CAT: &str = r#"
  (func (export "_start") (local $n i32)
    (loop $more
      (i32.store (i32.const 16) (i32.const 65536))
      (i32.store (i32.const 20) (i32.const 65536))
      (if (call $fd_read (i32.const 0) (i32.const 16) (i32.const 1) (i32.const 24))
        (then (call $proc_exit (i32.const 70))))
      (local.set $n (i32.load (i32.const 24)))
      (if (local.get $n)
        (then
          (drop (call $write (i32.const 1) (i32.const 65536) (local.get $n)))
          (br $more)))))
"#;

#[test]
fn stdin_and_stdout_are_streamed() {
    let (_d, cat) = module("cat", CAT);
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let out = output(hako_run(&[], &cat, &[]), &input);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        out.stdout == input,
        "{} bytes back of {}",
        out.stdout.len(),
        input.len()
    );
}

#[test]
fn a_time_limit_stops_a_guest_waiting_on_stdin() {
    let (_d, cat) = module("cat", CAT);
    let mut command = hako_run(&["--timeout", "300"], &cat, &[]);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    // stdin stays open and empty: the guest waits on it until its time runs out.
    let _stdin = child.stdin.take();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
}

/// The peak resident set of process `pid`, in KiB, while it runs.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs a guest that prints `writes` times the 64 KiB at 64 KiB, reads all of it, and returns
/// the peak resident set of `hako` (KiB) seen while it ran. The module is run once before, so the
/// measured run compiles nothing and both runs of the test below load the same way.
fn peak_rss_printing(writes: u32) -> u64 {
    let (_d, prints) = module(
        "prints",
        &format!(
            r#"(func (export "_start") (local $i i32)
                 (loop $more
                   (if (call $write (i32.const 1) (i32.const 65536) (i32.const 65536))
                     (then (call $proc_exit (i32.const 70))))
                   (local.set $i (i32.add (local.get $i) (i32.const 1)))
                   (br_if $more (i32.lt_u (local.get $i) (i32.const {writes})))))"#
        ),
    );
    let mut warm = hako_run(&[], &prints, &[]);
    let status = warm.stdin(Stdio::null()).stdout(Stdio::null()).status();
    assert_eq!(status.unwrap().code(), Some(0));

    let mut command = hako_run(&[], &prints, &[]);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let (mut total, mut peak) = (0u64, 0u64);
    let mut buffer = vec![0u8; 1 << 20];
    let mut next_sample = 0;
    loop {
        let read = stdout.read(&mut buffer).unwrap();
        if read == 0 {
            break;
        }
        total += read as u64;
        if total >= next_sample {
            peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
            next_sample += 1 << 20;
        }
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(total, u64::from(writes) * 65536);
    assert!(peak > 0, "the peak RSS was read while hako ran");
    peak
}

#[test]
fn a_guest_printing_100_mb_runs_in_constant_memory() {
    // What printing adds is bounded as well as the whole: hako's own resident set (its binary,
    // the engine, the compilers linked in) differs between builds and machines, what 100 MiB of
    // output adds must not. A host that kept the output, or let a pipe's backlog grow, would add
    // about 92 MiB to the 8 MiB run's peak. Compiling is not part of it (the compiler runs a
    // thread per core), hence the warm-up run.
    let small = peak_rss_printing(128);
    let large = peak_rss_printing(1600);
    println!("hako peaked at {small} KiB printing 8 MiB and at {large} KiB printing 100 MiB");
    // The whole is bounded on every build: `hako` links no LLVM (a build with LLVM compiles in
    // `hako-llvm`), whose mapped and relocated code put a `hako` that linked it near 52 MiB.
    assert!(
        large < 50 * 1024,
        "hako peaked at {} MiB printing 100 MiB",
        large / 1024
    );
    assert!(
        large < small + 8 * 1024,
        "printing 100 MiB instead of 8 MiB took hako's peak RSS from {small} KiB to {large} KiB"
    );
}

#[test]
fn a_closed_stdout_stops_the_guest_as_a_broken_pipe() {
    let (_d, forever) = module(
        "forever",
        r#"(func (export "_start")
             (loop $more
               (br_if $more (i32.eqz (call $write (i32.const 1) (i32.const 65536) (i32.const 4096)))))
             (call $proc_exit (i32.const 9)))"#,
    );
    let mut command = hako_run(&["--timeout", "20000"], &forever, &[]);
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut some = [0u8; 10_000];
    stdout.read_exact(&mut some).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
}

/// Writes the NUL-separated strings of `args` or `environ` to stdout.
fn strings_module(name: &str, which: &str) -> (tempfile::TempDir, PathBuf) {
    module_importing(
        name,
        &format!(
            r#"(import "wasi_snapshot_preview1" "{which}_sizes_get" (func $sizes (param i32 i32) (result i32)))
               (import "wasi_snapshot_preview1" "{which}_get" (func $get (param i32 i32) (result i32)))"#
        ),
        r#"(func (export "_start")
             (drop (call $sizes (i32.const 32) (i32.const 36)))
             (drop (call $get (i32.const 1024) (i32.const 8192)))
             (drop (call $write (i32.const 1) (i32.const 8192) (i32.load (i32.const 36)))))"#,
    )
}

#[test]
fn argv_0_is_the_file_name_and_the_rest_are_the_guests() {
    let (_d, args) = strings_module("args", "args");
    let out = output(hako_run(&[], &args, &["a b", "--env", "X=1"]), b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "args.wasm\0a b\0--env\0X=1\0");
}

#[test]
fn the_environment_is_exactly_the_env_flags() {
    let (_d, env) = strings_module("env", "environ");
    let mut command = hako_run(
        &["--env", "A=1", "--env", "B=two=2", "--env", "HOME"],
        &env,
        &[],
    );
    command.env("HOME", "/home/guest").env("SECRET", "no");
    let out = output(command, b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "A=1\0B=two=2\0HOME=/home/guest\0");

    let out = output(hako_run(&[], &env, &[]), b"");
    assert_eq!(text(&out.stdout), "", "no flag, no environment");
}

/// Opens `in.txt` in the preopen at fd 3 (its name must be `/data`, checked with
/// fd_prestat_dir_name) and copies it to stdout; writes "out" to `out.txt` there, exiting
/// with fd_write's errno when that fails.
const DIR_IMPORTS: &str = r#"
  (import "wasi_snapshot_preview1" "fd_prestat_dir_name" (func $dir_name (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
"#;

const DIR_GUEST: &str = r#"
  (data (i32.const 256) "in.txt")
  (data (i32.const 272) "out.txt")
  (data (i32.const 288) "/data")
  (data (i32.const 304) "out")
  (func (export "_start") (local $fd i32) (local $errno i32)
    (if (call $dir_name (i32.const 3) (i32.const 320) (i32.const 5)) (then (call $proc_exit (i32.const 90))))
    (if (i64.ne (i64.load (i32.const 320)) (i64.load (i32.const 288)))
      (then (call $proc_exit (i32.const 91))))
    ;; in.txt, read only
    (if (call $path_open (i32.const 3) (i32.const 1) (i32.const 256) (i32.const 6)
          (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 40))
      (then (call $proc_exit (i32.const 92))))
    (i32.store (i32.const 16) (i32.const 1024))
    (i32.store (i32.const 20) (i32.const 1024))
    (drop (call $fd_read (i32.load (i32.const 40)) (i32.const 16) (i32.const 1) (i32.const 24)))
    (drop (call $write (i32.const 1) (i32.const 1024) (i32.load (i32.const 24))))
    ;; out.txt, created and written (fd_write right = 64)
    (if (call $path_open (i32.const 3) (i32.const 1) (i32.const 272) (i32.const 7)
          (i32.const 9) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 44))
      (then (call $proc_exit (i32.const 93))))
    (local.set $errno (call $write (i32.load (i32.const 44)) (i32.const 304) (i32.const 3)))
    (call $proc_exit (local.get $errno)))
"#;

#[test]
fn a_dir_is_preopened_at_its_guest_path_and_the_write_budget_holds() {
    let (_d, guest) = module_importing("dir", DIR_IMPORTS, DIR_GUEST);
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("in.txt"), b"hello from the host").unwrap();
    let dir = format!("{}::/data", host.path().display());
    let out = output(hako_run(&["--dir", &dir], &guest, &[]), b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello from the host");
    assert_eq!(std::fs::read(host.path().join("out.txt")).unwrap(), b"out");

    std::fs::remove_file(host.path().join("out.txt")).unwrap();
    // Making out.txt costs its node (4 KiB); the 3 bytes are 1 past what is left.
    let out = output(
        hako_run(&["--dir", &dir, "--write-budget", "4098"], &guest, &[]),
        b"",
    );
    // EDQUOT is WASI errno 19.
    assert_eq!(out.status.code(), Some(19), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(host.path().join("out.txt")).unwrap(), b"");
}

/// One byte written every 4 KiB, 100,000 times, with `fd_pwrite` at its offset, then the same
/// with `fd_seek` and `fd_write`; it exits with the first errno, or 0.
const SPARSE_GUEST: &str = r#"
  (data (i32.const 272) "sparse")
  (data (i32.const 304) "x")
  (func (export "_start") (local $i i32) (local $errno i32)
    (if (call $path_open (i32.const 3) (i32.const 1) (i32.const 272) (i32.const 6)
          (i32.const 9) (i64.const 0x44) (i64.const 0) (i32.const 0) (i32.const 44))
      (then (call $proc_exit (i32.const 93))))
    (i32.store (i32.const 0) (i32.const 304))
    (i32.store (i32.const 4) (i32.const 1))
    (loop $each
      (local.set $errno (call $fd_pwrite (i32.load (i32.const 44)) (i32.const 0) (i32.const 1)
        (i64.mul (i64.extend_i32_u (local.get $i)) (i64.const 4096)) (i32.const 8)))
      (if (local.get $errno) (then (call $proc_exit (local.get $errno))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $each (i32.lt_u (local.get $i) (i32.const 100000))))
    (call $proc_exit (i32.const 0)))
"#;

#[test]
fn sparse_writes_are_charged_for_the_holes_they_leave_on_every_engine() {
    let imports = format!(
        r#"{DIR_IMPORTS}
  (import "wasi_snapshot_preview1" "fd_pwrite"
    (func $fd_pwrite (param i32 i32 i32 i64 i32) (result i32)))"#
    );
    let (_d, guest) = module_importing("sparse", &imports, SPARSE_GUEST);
    const BUDGET: u64 = 4 << 20;
    for config in support::host::configs() {
        let host = tempfile::tempdir().unwrap();
        let dir = format!("{}::/volume/tmp", host.path().display());
        let flags = [
            "--dir",
            &dir,
            "--write-budget",
            &BUDGET.to_string(),
            "--engine",
            config.kind().name(),
            "--compiler",
            config.compiler().name(),
        ];
        let out = output(hako_run(&flags, &guest, &[]), b"");
        // EDQUOT is WASI errno 19, met once the holes and bytes pass the budget.
        assert_eq!(
            out.status.code(),
            Some(19),
            "{config}: {}",
            text(&out.stderr)
        );
        let file = std::fs::metadata(host.path().join("sparse")).unwrap();
        assert!(
            file.len() <= BUDGET,
            "{config}: a file of {} bytes",
            file.len()
        );
        // What the file system holds of it, too (blocks of 512 bytes).
        use std::os::unix::fs::MetadataExt;
        assert!(
            file.blocks() * 512 <= BUDGET + 8192,
            "{config}: {} blocks",
            file.blocks()
        );
    }
}

#[test]
fn a_missing_dir_is_a_usage_error_naming_it() {
    let (_d, guest) = module_importing("dir", DIR_IMPORTS, DIR_GUEST);
    let out = output(
        hako_run(&["--dir", "/surely/not/here::/data"], &guest, &[]),
        b"",
    );
    ended(&out, 2, "/surely/not/here");
}

#[test]
fn bad_limits_are_usage_errors() {
    let (_d, returns) = module("returns", r#"(func (export "_start"))"#);
    for flags in [["--timeout", "0"], ["--memory", "0"], ["--memory", "4097"]] {
        let out = output(hako_run(&flags, &returns, &[]), b"");
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        assert!(
            text(&out.stderr).contains(flags[0]),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_module_with_an_unknown_import_is_refused_as_check_refuses_it() {
    let (_d, foreign) = module_importing(
        "foreign",
        r#"(import "env" "now" (func (result i64)))"#,
        r#"(func (export "_start"))"#,
    );
    let out = output(hako_run(&[], &foreign, &[]), b"");
    ended(&out, 1, "[import.unknown]");
}

#[test]
fn subako_http_is_the_real_broker() {
    let request = r#"{"method":"GET","url":"https://example.invalid/"}"#;
    let (_d, fetch) = module_importing(
        "fetch",
        r#"(import "subako_http" "request" (func $request (param i32 i32) (result i32)))
           (import "subako_http" "read_response" (func $read (param i32 i32) (result i32)))"#,
        &format!(
            r#"(data (i32.const 256) "{}")
               (func (export "_start") (local $len i32)
                 (local.set $len (call $request (i32.const 256) (i32.const {})))
                 (drop (call $read (i32.const 4096) (local.get $len)))
                 (drop (call $write (i32.const 1) (i32.const 4096) (local.get $len))))"#,
            request.replace('"', "\\\""),
            request.len()
        ),
    );
    let out = output(hako_run(&[], &fetch, &[]), b"");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["error"]["kind"], "host_not_allowed", "{answer}");
}

#[test]
fn a_second_run_compiles_nothing() {
    // A module of its own, so no other test has compiled it.
    let nonce = format!("{:?}", std::time::SystemTime::now());
    let (_d, fresh) = module(
        "fresh",
        &format!(r#"(data (i32.const 512) "{nonce}") (func (export "_start"))"#),
    );
    let run = || {
        let mut command = hako_run(&[], &fresh, &[]);
        command.env("HAKO_LOG", "info");
        output(command, b"")
    };
    let first = run();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert!(
        text(&first.stderr).contains("compiled the module now"),
        "{}",
        text(&first.stderr)
    );
    let second = run();
    assert_eq!(second.status.code(), Some(0));
    assert!(
        !text(&second.stderr).contains("compiled"),
        "{}",
        text(&second.stderr)
    );
}

#[test]
fn the_abi_pages_local_test_runs_the_example_package() {
    // "Testing locally": one request on stdin, its answer on stdout, exit 0 at end of file.
    let request = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"greet","arguments":{"name":"Ada"}}}"#;
    let greet = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/greet");
    for target in [greet.join("module.wasm"), greet] {
        let out = output(
            hako_run(&[], &target, &[]),
            format!("{request}\n").as_bytes(),
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|err| panic!("{err}: {}", text(&out.stdout)));
        assert_eq!(answer["id"], 1);
        let shown = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(shown.contains("Ada"), "{answer}");
    }
}

#[test]
fn a_module_that_is_not_there_is_a_usage_error_naming_it() {
    let out = output(hako_run(&[], Path::new("absent.wasm"), &[]), b"");
    ended(&out, 2, "absent.wasm does not exist");
}
