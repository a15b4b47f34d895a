//! Every resource a guest controls is bounded, on every engine configuration, with the exact
//! outcome the README's table of bounds gives: tables (`table.grow` answers -1 past the bound,
//! a table reserves its bound against the memory cap, a minimum above the run's bound is
//! `out_of_memory`, one above 65,536 is refused at check), host calls that move data in pieces
//! and stop at the deadline, counts of iovecs, path lengths, open descriptors and created
//! files, and compiles (`compile.time`, `compile.memory`).
//!
//! The guests are `support::mcp_wat` modules: they answer discovery and run the test's
//! instructions on `tools/call`, trapping (`unreachable`) where the host answered otherwise
//! than the bound says, so an answered call means every check in the guest held.

use crate::support;

use std::time::{Duration, Instant};

use hako::call::CrashKind;
use support::host::{configs, ends_as_timeout, Call};
use support::mcp_wat::{mcp_guest, mcp_guest_wat, MEMORY_LINE};

/// The time limit of the calls that must be stopped.
const LIMIT: Duration = Duration::from_millis(200);

/// How far past its limit such a call may end here: the requirement is 200 ms, measured with
/// `hako run` (see the README); a shared machine (or qemu-user) gets more, which still fails
/// a host call that runs to its end (seconds).
const SLACK: Duration = Duration::from_millis(1500);

const MIB: u64 = 1 << 20;

/// `assert` in the guest: traps unless `condition` (an i32 expression) is true.
fn check(condition: &str) -> String {
    format!("(if (i32.eqz {condition}) (then unreachable))")
}

/// The guest's `hostile` tool answers on every configuration (every check held).
fn holds(call: Call) {
    let result = call.answers();
    assert!(!result.is_error, "{result:?}");
}

#[test]
fn table_grow_past_the_bound_answers_minus_one_and_the_table_keeps_its_size() {
    // The case that aborted the process: wasmer allocated 0xF0000000 elements (32 GiB).
    let on_call = [
        check("(i32.eq (table.grow $t (ref.null func) (i32.const 0xF0000000)) (i32.const -1))"),
        check("(i32.eq (table.size $t) (i32.const 1))"),
        check("(i32.eq (table.grow $t (ref.null func) (i32.const 65535)) (i32.const 1))"),
        check("(i32.eq (table.grow $t (ref.null func) (i32.const 1)) (i32.const -1))"),
        check("(i32.eq (table.size $t) (i32.const 65536))"),
    ]
    .concat();
    let wasm = mcp_guest("", "(table $t 1 funcref)", &on_call);
    holds(Call::new("hostile").module(wasm));
}

#[test]
fn a_lowered_table_bound_holds_on_every_engine() {
    let on_call = [
        check("(i32.eq (table.grow $t (ref.null func) (i32.const 99)) (i32.const 1))"),
        check("(i32.eq (table.grow $t (ref.null func) (i32.const 1)) (i32.const -1))"),
    ]
    .concat();
    let wasm = mcp_guest("", "(table $t 1 funcref)", &on_call);
    holds(
        Call::new("hostile")
            .module(wasm)
            .limits(|limits| limits.max_table_elements = 100),
    );
}

#[test]
fn a_table_reserves_its_bound_against_the_memory_cap() {
    // A cap of 1 MiB: the table without a maximum reserves 65,536 × 8 bytes (512 KiB), so the
    // memory (two pages to begin with) grows to 8 pages and no further; with a maximum of 16
    // elements it reserves 128 bytes, and the memory grows to 15 pages.
    let growable = [
        check("(i32.eq (memory.grow (i32.const 6)) (i32.const 2))"),
        check("(i32.eq (memory.grow (i32.const 1)) (i32.const -1))"),
    ]
    .concat();
    let wasm = mcp_guest("", "(table $t 1 funcref)", &growable);
    holds(
        Call::new("hostile")
            .module(wasm)
            .limits(|limits| limits.max_memory_bytes = MIB),
    );
    let bounded = [
        check("(i32.eq (memory.grow (i32.const 13)) (i32.const 2))"),
        check("(i32.eq (memory.grow (i32.const 1)) (i32.const -1))"),
    ]
    .concat();
    let wasm = mcp_guest("", "(table $t 1 16 funcref)", &bounded);
    holds(
        Call::new("hostile")
            .module(wasm)
            .limits(|limits| limits.max_memory_bytes = MIB),
    );
}

#[test]
fn a_table_whose_minimum_is_above_the_runs_bound_is_out_of_memory() {
    let wasm = mcp_guest("", "(table $t 100 funcref)", "");
    let (message, _) = Call::new("hostile")
        .module(wasm)
        .limits(|limits| limits.max_table_elements = 10)
        .crashes(CrashKind::OutOfMemory);
    assert!(message.contains("table"), "{message}");
}

#[test]
fn tables_and_memory_that_do_not_fit_the_cap_together_are_out_of_memory() {
    // 16 pages of memory fill a 1 MiB cap; the table's 512 KiB cannot be reserved beside it.
    let wat = mcp_guest_wat("", "(table $t 1 funcref)", "")
        .replace(MEMORY_LINE, r#"(memory (export "memory") 16)"#);
    let wasm = wat::parse_str(&wat).unwrap();
    Call::new("hostile")
        .module(wasm)
        .limits(|limits| limits.max_memory_bytes = MIB)
        .crashes(CrashKind::OutOfMemory);
}

#[test]
fn a_table_minimum_above_65536_elements_is_refused_at_check() {
    let wasm = mcp_guest("", "(table $t 65537 funcref)", "");
    let problems = hako::package::check_module(&wasm).unwrap_err();
    let rules: Vec<&str> = problems.iter().map(|problem| problem.rule).collect();
    assert_eq!(rules, ["module.table"], "{problems:?}");
    // And through the command, as an operator meets it.
    let package = support::module_package("wide-table", &wasm);
    let store = tempfile::tempdir().unwrap();
    let output = support::run_hako(store.path(), &["check", support::arg(package.path())]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("module.table"), "{stderr}");
}

/// A guest's fields with `segments` passive data segments (`$p0`…, one byte `x` each) and a
/// passive element segment `$e` of `items` references to `$f`, and the instructions that use
/// them all: the last segment copied into memory and read back, every segment dropped, the
/// element segment copied into the table `$t` (of 65,536, the most a table holds) and its last
/// entry read back.
fn passive_guest(segments: usize, items: usize) -> Vec<u8> {
    let data: String = (0..segments)
        .map(|i| format!("(data $p{i} \"x\")"))
        .collect();
    let refs = "$f ".repeat(items);
    let fields = format!("(table $t 65536 funcref) (func $f) (elem $e func {refs}) {data}");
    let last = segments - 1;
    let drops: String = (0..segments)
        .map(|i| format!("(data.drop $p{i})"))
        .collect();
    let on_call = [
        format!("(memory.init $p{last} (i32.const 70000) (i32.const 0) (i32.const 1))"),
        check("(i32.eq (i32.load8_u (i32.const 70000)) (i32.const 120))"),
        drops,
        format!("(table.init $t $e (i32.const 0) (i32.const 0) (i32.const {items}))"),
        check(&format!(
            "(i32.eqz (ref.is_null (table.get $t (i32.const {}))))",
            items - 1
        )),
    ]
    .concat();
    mcp_guest("", &fields, &on_call)
}

#[test]
fn passive_segments_within_their_bounds_run_everywhere_and_one_more_is_refused_at_check() {
    // wasmer keeps a map entry for each passive data segment and a copy of each passive element
    // item in every instance, outside the memory cap: 100,000 segments (the `module.data`
    // bound) made each instance allocate megabytes.
    holds(Call::new("hostile").module(passive_guest(1_000, 65_536)));
    let over = passive_guest(1_001, 65_537);
    let problems = hako::package::check_module(&over).unwrap_err();
    let found: Vec<(&str, &str)> = problems
        .iter()
        .map(|problem| (problem.rule, problem.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "module.elements",
                "the module has 65537 items in passive element segments; at most 65536 are \
                 allowed"
            ),
            (
                "module.data",
                "the module has 1001 passive data segments; at most 1000 are allowed"
            ),
        ]
    );
}

/// Runs `call` on every configuration and asserts each run ends as a timeout, soon after its
/// limit.
fn stops_in_time(what: &str, call: Call) {
    let call = call.limits(|limits| limits.timeout = LIMIT);
    ends_as_timeout(what, &call, LIMIT, SLACK);
}

/// Grows the guest's memory to 1 GiB (its cap) or traps.
const GROW_TO_A_GIBIBYTE: &str =
    "(if (i32.eq (memory.grow (i32.const 16382)) (i32.const -1)) (then unreachable))";

#[test]
fn a_random_get_loop_over_a_gibibyte_ends_at_its_limit() {
    // The case that ran 4.4–6.5 s against a 200 ms limit: each call filled 1 GiB at once.
    let wasm = mcp_guest(
        r#"(import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))"#,
        "",
        &format!(
            "{GROW_TO_A_GIBIBYTE}
             (loop $again (drop (call $random (i32.const 0) (i32.const 0x40000000))) (br $again))"
        ),
    );
    let call = Call::new("hostile")
        .module(wasm)
        .limits(|limits| limits.max_memory_bytes = 1024 * MIB);
    stops_in_time("random_get of 1 GiB", call);
}

#[test]
fn a_read_of_64_gib_at_once_ends_at_its_limit() {
    // One `fd_read` of 1,024 iovecs of 64 MiB each (the same buffer), from a sparse file of
    // 1 TiB: 64 GiB for the kernel to copy, seconds to minutes, in one host call.
    let wasm = mcp_guest(
        r#"(import "wasi_snapshot_preview1" "path_open"
             (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
           (import "wasi_snapshot_preview1" "fd_filestat_set_size"
             (func $set_size (param i32 i64) (result i32)))"#,
        r#"(data (i32.const 2048) "sparse")"#,
        &format!(
            "(local $i i32)
             (if (i32.eq (memory.grow (i32.const 1100)) (i32.const -1)) (then unreachable))
             {}{}
             (loop $iovecs
               (i32.store (i32.add (i32.const 0x10000) (i32.mul (local.get $i) (i32.const 8))) (i32.const 0x20000))
               (i32.store (i32.add (i32.const 0x10004) (i32.mul (local.get $i) (i32.const 8))) (i32.const 0x4000000))
               (local.set $i (i32.add (local.get $i) (i32.const 1)))
               (br_if $iovecs (i32.lt_u (local.get $i) (i32.const 1024))))
             (loop $again
               (drop (call $fd_read (i32.load (i32.const 80)) (i32.const 0x10000) (i32.const 1024) (i32.const 104)))
               (br $again))",
            check(
                "(i32.eqz (call $open (i32.const 3) (i32.const 0) (i32.const 2048) (i32.const 6) \
                 (i32.const 1) (i64.const 0x400002) (i64.const 0) (i32.const 0) (i32.const 80)))"
            ),
            check("(i32.eqz (call $set_size (i32.load (i32.const 80)) (i64.const 0x10000000000)))"),
        ),
    );
    let call = Call::new("hostile").module(wasm).limits(|limits| {
        limits.max_memory_bytes = 128 * MIB;
        limits.write_budget = u64::MAX;
    });
    stops_in_time("fd_read of 64 GiB", call);
}

#[test]
fn a_poll_over_three_million_file_subscriptions_ends_at_its_limit() {
    // Each subscription to a file costs the host two system calls; three million of them in
    // one `poll_oneoff` (144 MB of subscriptions) take seconds, unless the host looks at the
    // deadline between them.
    let wasm = mcp_guest(
        r#"(import "wasi_snapshot_preview1" "path_open"
             (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
           (import "wasi_snapshot_preview1" "poll_oneoff"
             (func $poll (param i32 i32 i32 i32) (result i32)))"#,
        r#"(data (i32.const 2048) "f")"#,
        &format!(
            "(local $i i32)
             (if (i32.eq (memory.grow (i32.const 3800)) (i32.const -1)) (then unreachable))
             {}
             (loop $fill
               (i32.store8 (i32.add (i32.const 0x20008) (i32.mul (local.get $i) (i32.const 48))) (i32.const 1))
               (i32.store (i32.add (i32.const 0x20010) (i32.mul (local.get $i) (i32.const 48))) (i32.load (i32.const 80)))
               (local.set $i (i32.add (local.get $i) (i32.const 1)))
               (br_if $fill (i32.lt_u (local.get $i) (i32.const 3000000))))
             (loop $again
               (drop (call $poll (i32.const 0x20000) (i32.const 0x9000000) (i32.const 3000000) (i32.const 104)))
               (br $again))",
            check(
                "(i32.eqz (call $open (i32.const 3) (i32.const 0) (i32.const 2048) (i32.const 1) \
                 (i32.const 1) (i64.const 0x2) (i64.const 0) (i32.const 0) (i32.const 80)))"
            ),
        ),
    );
    let call = Call::new("hostile")
        .module(wasm)
        .limits(|limits| limits.max_memory_bytes = 256 * MIB);
    stops_in_time("poll_oneoff of three million subscriptions", call);
}

#[test]
fn more_iovecs_than_iov_max_are_einval() {
    // 1,024 empty iovecs are written (nothing); 1,025 are refused before any is read.
    let on_call = [
        check("(i32.eqz (call $fd_write (i32.const 2) (i32.const 0x10000) (i32.const 1024) (i32.const 104)))"),
        check("(i32.eq (call $fd_write (i32.const 2) (i32.const 0x10000) (i32.const 1025) (i32.const 104)) (i32.const 28))"),
        check("(i32.eq (call $fd_write (i32.const 2) (i32.const 0x10000) (i32.const -1) (i32.const 104)) (i32.const 28))"),
    ]
    .concat();
    holds(Call::new("hostile").module(mcp_guest("", "", &on_call)));
}

#[test]
fn a_path_longer_than_path_max_is_enametoolong() {
    let open = r#"(import "wasi_snapshot_preview1" "path_open"
        (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))"#;
    // 64 KiB of path (the whole second page); 4,097 bytes is already one past the bound.
    let on_call = [
        check(
            "(i32.eq (call $open (i32.const 3) (i32.const 0) (i32.const 0x10000) (i32.const 0x10000) \
             (i32.const 1) (i64.const 0x40) (i64.const 0) (i32.const 0) (i32.const 80)) (i32.const 37))",
        ),
        check(
            "(i32.eq (call $open (i32.const 3) (i32.const 0) (i32.const 0x10000) (i32.const 4097) \
             (i32.const 1) (i64.const 0x40) (i64.const 0) (i32.const 0) (i32.const 80)) (i32.const 37))",
        ),
    ]
    .concat();
    holds(Call::new("hostile").module(mcp_guest(open, "", &on_call)));
}

#[test]
fn a_guest_holds_at_most_128_descriptors() {
    // Stdio and /volume/tmp hold 4; the guest opens /volume/tmp's "." until refused: 124
    // succeed, the next is EMFILE, and closing one lets one more open.
    let open = r#"(import "wasi_snapshot_preview1" "path_open"
        (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "fd_close" (func $close (param i32) (result i32)))"#;
    let opened = "(call $open (i32.const 3) (i32.const 0) (i32.const 2048) (i32.const 1) \
                  (i32.const 2) (i64.const 0x4000) (i64.const 0) (i32.const 0) (i32.const 80))";
    let on_call = format!(
        "(local $n i32)
         (block $refused
           (loop $more
             (br_if $refused (i32.ne {opened} (i32.const 0)))
             (local.set $n (i32.add (local.get $n) (i32.const 1)))
             (br_if $more (i32.lt_u (local.get $n) (i32.const 1000)))))
         {}{}{}{}",
        check("(i32.eq (local.get $n) (i32.const 124))"),
        check(&format!("(i32.eq {opened} (i32.const 33))")),
        check("(i32.eqz (call $close (i32.const 50)))"),
        check(&format!("(i32.eqz {opened})")),
    );
    let wasm = mcp_guest(open, r#"(data (i32.const 2048) ".")"#, &on_call);
    holds(Call::new("hostile").module(wasm));
}

#[test]
fn every_file_or_folder_a_guest_makes_costs_4_kib_of_its_write_budget() {
    // A budget of three nodes and change: three folders are made, the fourth is EDQUOT; a
    // failed creation (one that exists) gives its charge back.
    let mkdir = r#"(import "wasi_snapshot_preview1" "path_create_directory"
        (func $mkdir (param i32 i32 i32) (result i32)))"#;
    let make =
        |name_at: u32| format!("(call $mkdir (i32.const 3) (i32.const {name_at}) (i32.const 1))");
    let on_call = [
        check(&format!("(i32.eqz {})", make(2048))),
        check(&format!("(i32.eqz {})", make(2049))),
        check(&format!("(i32.eq {} (i32.const 20))", make(2048))),
        check(&format!("(i32.eqz {})", make(2050))),
        check(&format!("(i32.eq {} (i32.const 19))", make(2051))),
    ]
    .concat();
    let wasm = mcp_guest(mkdir, r#"(data (i32.const 2048) "abcd")"#, &on_call);
    holds(
        Call::new("hostile")
            .module(wasm)
            .limits(|limits| limits.write_budget = 3 * 4096 + 100),
    );
}

/// A module that takes cranelift (wasmer's and wasmtime's) minutes and gigabytes: 9,000
/// locals, each of 600 nested blocks inside a loop touching a stripe of them. Every count is
/// within the module check's bounds; only the compile's own bounds stop it.
fn compile_bomb() -> Vec<u8> {
    const LOCALS: usize = 9_000;
    const BLOCKS: usize = 600;
    let mut body = String::from("(loop $top ");
    for block in 0..BLOCKS {
        body.push_str("(block ");
        for local in (0..LOCALS).step_by(97) {
            let set = (local + block) % LOCALS;
            let get = (local * 7 + block) % LOCALS;
            body.push_str(&format!(
                "(local.set {set} (i32.add (local.get {get}) (i32.const 1)))"
            ));
        }
        body.push_str(&format!("(br_if 0 (local.get {}))", block % LOCALS));
    }
    body.push_str(&")".repeat(BLOCKS));
    body.push_str("(br_if $top (local.get 0)))");
    wat::parse_str(format!(
        r#"(module (memory (export "memory") 1) (func (export "_start"))
             (func (param i32) (local {}) {body}))"#,
        "i32 ".repeat(LOCALS)
    ))
    .unwrap()
}

/// The compilers that compile the bomb slowly (singlepass compiles it in a pass).
fn optimising_compilers() -> Vec<Vec<&'static str>> {
    let mut found = vec![vec!["--compiler", "cranelift"]];
    if hako::engines::Compiler::Llvm.available() {
        found.push(vec!["--compiler", "llvm"]);
    }
    if hako::engines::EngineKind::Wasmtime.available() {
        found.push(vec!["--engine", "wasmtime"]);
    }
    found
}

#[test]
fn a_compile_past_its_time_limit_is_refused_by_rule_and_leaves_nothing() {
    let package = support::module_package("compile-bomb", &compile_bomb());
    for compiler in optimising_compilers() {
        let store = tempfile::tempdir().unwrap();
        let mut args = vec!["upload", support::arg(package.path())];
        args.extend(&compiler);
        args.extend(["--compile-timeout-ms", "1000"]);
        let started = Instant::now();
        let output = support::run_hako(store.path(), &args);
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{compiler:?}: {stderr}");
        assert!(stderr.contains("compile.time"), "{compiler:?}: {stderr}");
        assert!(took < Duration::from_secs(30), "{compiler:?} took {took:?}");
        let listed = support::run_hako(store.path(), &["tools", "compile-bomb"]);
        let said = String::from_utf8_lossy(&listed.stderr);
        assert!(
            said.contains("no package named"),
            "nothing was stored: {said}"
        );
    }
}

#[test]
fn a_compile_past_its_memory_bound_is_refused_by_rule() {
    let package = support::module_package("compile-bomb", &compile_bomb());
    for compiler in optimising_compilers() {
        let store = tempfile::tempdir().unwrap();
        let mut args = vec!["upload", support::arg(package.path())];
        args.extend(&compiler);
        args.extend([
            "--compile-memory-mib",
            "256",
            "--compile-timeout-ms",
            "120000",
        ]);
        let output = support::run_hako(store.path(), &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{compiler:?}: {stderr}");
        assert!(stderr.contains("compile.memory"), "{compiler:?}: {stderr}");
    }
}

#[test]
fn a_compile_whose_worker_cannot_start_for_want_of_descriptors_is_never_run_unbounded() {
    // Under every descriptor limit from one that lets nothing open to one that lets the worker
    // start, an upload with a compile limit of 1 ms fails: by that limit (the worker ran), by
    // a busy machine (it could not start), or by a file the command could not open. A compile
    // in this process instead, without its bounds, would store the package.
    let greet = support::greet_package_dir();
    let mut busy = 0;
    for descriptors in 4..=40 {
        let store = tempfile::tempdir().unwrap();
        let output = std::process::Command::new("prlimit")
            .arg(format!("--nofile={descriptors}:{descriptors}"))
            .arg("--")
            .args(support::hako_argv())
            .args(["upload", support::arg(&greet), "--compile-timeout-ms", "1"])
            .env("HAKO_STORE", store.path())
            .output()
            .expect("prlimit runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{descriptors} descriptors: {stderr}"
        );
        assert!(
            !stderr.contains("stored"),
            "{descriptors} descriptors: {stderr}"
        );
        if stderr.contains("too busy to start the compile worker") {
            busy += 1;
        }
    }
    assert!(busy > 0, "no limit left the worker unstarted");
}

/// The engine flags of `config` for the command line.
fn engine_flags(config: hako::engines::EngineConfig) -> Vec<String> {
    vec![
        "--engine".into(),
        config.kind().name().into(),
        "--compiler".into(),
        config.compiler().name().into(),
    ]
}

/// `hako run` of `wasm` on `config` under the issue's limits (200 ms, 1 GiB): its exit status,
/// how long it took, and the highest peak resident set seen while it ran (KiB).
fn hako_run_bounded(config: hako::engines::EngineConfig, wasm: &[u8]) -> (i32, Duration, u64) {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("hostile.wasm");
    std::fs::write(&module, wasm).unwrap();
    let store = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hako-test-store");
    let mut command = support::hako_command();
    command
        .arg("run")
        .arg("--store")
        .arg(&store)
        .args(engine_flags(config));
    command
        .args(["--memory", "1024", "--timeout", "200", "--"])
        .arg(&module);
    // Once to compile (not what is measured), then the run that counts.
    let warm = command.output().expect("hako runs");
    assert!(warm.status.code().is_some(), "hako itself died: {warm:?}");
    let started = Instant::now();
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("hako runs");
    let mut peak = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()));
        if let Some(kib) = status.ok().and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        }) {
            peak = peak.max(kib);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = started.elapsed();
    let code = status
        .code()
        .unwrap_or_else(|| panic!("hako died of {status:?} on {config}"));
    (code, took, peak)
}

/// The two cases that ended or stalled the whole process, as `hako run` commands.
fn known_cases() -> [(&'static str, Vec<u8>, i32); 2] {
    let table = wat::parse_str(
        r#"(module (table $t 1 funcref) (memory (export "memory") 1)
             (func (export "_start")
               (if (i32.ne (table.grow $t (ref.null func) (i32.const 0xF0000000)) (i32.const -1))
                 (then unreachable))))"#,
    )
    .unwrap();
    let random = wat::parse_str(
        r#"(module
             (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
             (memory (export "memory") 1)
             (func (export "_start")
               (if (i32.eq (memory.grow (i32.const 16383)) (i32.const -1)) (then unreachable))
               (loop $again (drop (call $random (i32.const 0) (i32.const 0x40000000))) (br $again))))"#,
    )
    .unwrap();
    [("table.grow", table, 0), ("random_get", random, 137)]
}

#[test]
fn the_two_known_cases_end_in_time_through_hako_run_on_every_engine() {
    for (what, wasm, expected) in known_cases() {
        for config in configs() {
            let (code, took, peak) = hako_run_bounded(config, &wasm);
            println!("{what} on {config}: exit {code} after {took:?}, peak {peak} KiB");
            assert_eq!(code, expected, "{what} on {config}");
            assert!(took < LIMIT + SLACK, "{what} on {config} took {took:?}");
            assert!(
                peak < 1536 * 1024,
                "{what} on {config} peaked at {peak} KiB"
            );
        }
    }
}

#[test]
fn hako_serve_lives_through_both_cases_and_keeps_answering_other_calls() {
    use crate::serve_support::Server;
    let store = crate::serve_support::store();
    let server = Server::start(store.path(), &["--max-memory-mib", "1024"]);
    let table = mcp_guest(
        "",
        "(table $t 1 funcref)",
        &check("(i32.eq (table.grow $t (ref.null func) (i32.const 0xF0000000)) (i32.const -1))"),
    );
    let random = mcp_guest(
        r#"(import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))"#,
        "",
        &format!(
            "{GROW_TO_A_GIBIBYTE}
             (loop $again (drop (call $random (i32.const 0) (i32.const 0x40000000))) (br $again))"
        ),
    );
    for (name, wasm) in [("table-grow", &table), ("random-loop", &random)] {
        let package = support::module_package(name, wasm);
        let archive = support::archive_of(package.path());
        let stored = server.request("POST", "/v1/packages", &[], &archive);
        assert_eq!(stored.status, 201, "{name}: {}", stored.text());
    }
    let greet = json_call("greet", serde_json::json!({"name": "Ada"}), None);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        // Greet is called all along, and answered every time.
        let greeter = scope.spawn(|| {
            let mut answered = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let reply = server.post_json("/v1/packages/greet/call", &greet);
                assert_eq!(reply.status, 200, "{}", reply.text());
                assert_eq!(reply.json()["outcome"], "ok", "{}", reply.text());
                answered += 1;
            }
            answered
        });
        let limits = serde_json::json!({"timeout_ms": 200, "memory_mib": 1024});
        for _ in 0..3 {
            let reply = server.post_json(
                "/v1/packages/table-grow/call",
                &json_call("hostile", serde_json::json!({}), Some(&limits)),
            );
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.json()["outcome"], "ok", "{}", reply.text());
            assert_eq!(reply.json()["result"]["content"][0]["text"], "survived");
            let reply = server.post_json(
                "/v1/packages/random-loop/call",
                &json_call("hostile", serde_json::json!({}), Some(&limits)),
            );
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.json()["crash"]["kind"], "timeout", "{}", reply.text());
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        let answered = greeter.join().unwrap();
        assert!(answered > 0, "greet was answered meanwhile");
    });
    assert_eq!(server.get("/healthz").status, 200);
}

/// The body of `POST /v1/packages/{name}/call`.
fn json_call(
    tool: &str,
    arguments: serde_json::Value,
    limits: Option<&serde_json::Value>,
) -> serde_json::Value {
    let mut call = serde_json::json!({"tool": tool, "arguments": arguments});
    if let Some(limits) = limits {
        call["limits"] = limits.clone();
    }
    call
}

#[test]
fn an_upload_through_the_api_whose_compile_runs_too_long_is_422_by_rule() {
    use crate::serve_support::Server;
    let store = tempfile::tempdir().unwrap();
    let server = Server::start(store.path(), &["--compile-timeout-ms", "1000"]);
    let package = support::module_package("compile-bomb", &compile_bomb());
    let started = Instant::now();
    let reply = server.request(
        "POST",
        "/v1/packages",
        &[],
        &support::archive_of(package.path()),
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(reply.status, 422, "{}", reply.text());
    assert_eq!(
        reply.json()["problems"][0]["rule"],
        "compile.time",
        "{}",
        reply.text()
    );
    // The server goes on: the next upload is served.
    let greet = support::archive_of(&support::greet_package_dir());
    assert_eq!(
        server.request("POST", "/v1/packages", &[], &greet).status,
        201
    );
}

/// Sends `signal` to every compile worker `parent` starts (`hako __compile`, a child of it), as
/// a compiler that crashes would end, until `done` says the compile's outcome is in.
fn crash_compile_workers(parent: u32, signal: i32, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let worker = (|| {
                let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                // "pid (comm) state ppid …": the name may hold spaces, so count from its end.
                let ppid: u32 = stat
                    .rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                let compiling = cmdline.split(|b| *b == 0).any(|arg| arg == b"__compile");
                (ppid == parent && compiling).then_some(pid)
            })();
            if let Some(worker) = worker {
                // SAFETY: kill(2) takes no memory of this process; a worker that has ended
                // meanwhile answers ESRCH.
                unsafe { libc::kill(worker, signal) };
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the compile of {parent} did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_compiler_that_crashes_is_compile_crash_and_what_it_said_stays_in_the_log() {
    use crate::serve_support::Server;
    let package = support::module_package("compile-bomb", &compile_bomb());
    // `hako upload`: the operator's own machine, told the compiler's end.
    let store = tempfile::tempdir().unwrap();
    let mut upload = support::hako_command();
    upload
        .args([
            "upload",
            support::arg(package.path()),
            "--compiler",
            "cranelift",
        ])
        .args(["--compile-timeout-ms", "120000", "--store"])
        .arg(store.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = upload.spawn().unwrap();
    let parent = child.id();
    let ended = std::sync::atomic::AtomicBool::new(false);
    let output = std::thread::scope(|scope| {
        let waited = scope.spawn(|| {
            let output = child.wait_with_output().unwrap();
            ended.store(true, std::sync::atomic::Ordering::SeqCst);
            output
        });
        crash_compile_workers(parent, libc::SIGSEGV, || {
            ended.load(std::sync::atomic::Ordering::SeqCst)
        });
        waited.join().unwrap()
    });
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("compile.crash") && stderr.contains("signal 11"),
        "{stderr}"
    );

    // Through the API: 422 by rule, and a request id instead of the compiler's words.
    let store = tempfile::tempdir().unwrap();
    let log_path = store.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let server = Server::start_logging(store.path(), &["--compile-timeout-ms", "120000"], &[], log);
    let archive = support::archive_of(package.path());
    let answered = std::sync::atomic::AtomicBool::new(false);
    let reply = std::thread::scope(|scope| {
        let posted = scope.spawn(|| {
            let reply = server.request("POST", "/v1/packages", &[], &archive);
            answered.store(true, std::sync::atomic::Ordering::SeqCst);
            reply
        });
        crash_compile_workers(server.child.id(), libc::SIGSEGV, || {
            answered.load(std::sync::atomic::Ordering::SeqCst)
        });
        posted.join().unwrap()
    });
    assert_eq!(reply.status, 422, "{}", reply.text());
    let problem = &reply.json()["problems"][0];
    assert_eq!(problem["rule"], "compile.crash", "{}", reply.text());
    let message = problem["message"].as_str().unwrap();
    let id = message
        .split("request id ")
        .nth(1)
        .and_then(|rest| rest.get(..36))
        .unwrap_or_else(|| panic!("no request id in {message}"));
    assert!(!message.contains("signal"), "{message}");
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logged
            .lines()
            .any(|line| line.contains(id) && line.contains("signal 11")),
        "the log has the crash under {id}: {logged}"
    );
}

#[test]
fn a_large_module_within_the_checks_counts_runs_on_every_engine() {
    // 33,000 functions in a table (each referenced, so each needs a reference in the
    // instance: more than wasmtime's default 1 MiB of instance metadata), 10,000 globals and
    // 1,000 exports: what a large program may declare, accepted by the check and run alike.
    const FUNCTIONS: usize = 33_000;
    let functions: String = (0..FUNCTIONS).map(|i| format!("(func $f{i})")).collect();
    let names: String = (0..FUNCTIONS).map(|i| format!(" $f{i}")).collect();
    let globals = "(global (mut i32) (i32.const 7))".repeat(10_000);
    let exports: String = (0..998)
        .map(|index| format!("(export \"g{index}\" (global {index}))"))
        .collect();
    let fields = format!(
        "(table $t {FUNCTIONS} funcref) (elem (i32.const 0) func{names}) {functions} \
         {globals} {exports}"
    );
    let wasm = mcp_guest(
        "",
        &fields,
        &check("(i32.eq (table.size $t) (i32.const 33000))"),
    );
    assert_eq!(hako::package::check_module(&wasm).map(drop), Ok(()));
    holds(Call::new("hostile").module(wasm));
}
