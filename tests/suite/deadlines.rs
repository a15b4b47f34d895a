//! Deadlines hold whatever the guest runs: loops and straight-line runs of every bulk-memory and
//! table instruction at sizes up to the memory cap, memory growth, and the same in a start
//! function, each stopped as `timeout` on every engine configuration, soon after its limit.
//!
//! On wasmer these guests spend nearly all their time in the engine's libcalls and libc's
//! `memmove`/`memset`, where its interrupt signal must not unwind; before the compiled deadline
//! checks, a `memory.copy` loop outran a 1 s limit by over a minute on cranelift.

use crate::support;

use std::time::Duration;

use support::host::{configs, ends_as_timeout, Call};

/// The memory cap of these calls, and the size of every bulk instruction's memory.
const CAP: u64 = 64 << 20;

/// The time limit of these calls.
const LIMIT: Duration = Duration::from_millis(200);

/// How far past its limit a call may end here. The requirement is 50 ms, measured by hand
/// (see the README); a test on a shared machine (and under qemu-user) allows more, and still
/// fails on code that lets a bulk loop run on: that took seconds to minutes.
const SLACK: Duration = Duration::from_millis(1500);

/// A module of `CAP` bytes of memory whose `_start` runs `body` forever, with `extra` fields.
fn looping(extra: &str, body: &str) -> Vec<u8> {
    let pages = CAP >> 16;
    wat::parse_str(format!(
        r#"(module (memory (export "memory") {pages}) {extra}
             (func $f)
             (func (export "_start") (loop $l {body} (br $l))))"#
    ))
    .unwrap()
}

/// Runs `wasm` on every configuration and asserts each run ends as a timeout within the slack.
fn stops_in_time(what: &str, wasm: Vec<u8>) {
    let call = Call::new("anything").module(wasm).limits(|limits| {
        limits.timeout = LIMIT;
        // The memory fills the cap; a table beside it reserves 512 KiB.
        limits.max_memory_bytes = CAP + (1 << 20);
    });
    ends_as_timeout(what, &call, LIMIT, SLACK);
}

#[test]
fn a_memory_fill_loop_is_stopped_by_its_deadline() {
    stops_in_time(
        "memory.fill",
        looping(
            "",
            &format!("(memory.fill (i32.const 0) (i32.const 7) (i32.const {CAP}))"),
        ),
    );
}

#[test]
fn a_memory_copy_loop_is_stopped_by_its_deadline() {
    let half = CAP / 2;
    stops_in_time(
        "memory.copy",
        looping(
            "",
            &format!("(memory.copy (i32.const 0) (i32.const {half}) (i32.const {half}))"),
        ),
    );
}

#[test]
fn a_memory_init_loop_is_stopped_by_its_deadline() {
    // A passive segment of 1 MiB, copied again and again.
    let segment = "\\2a".repeat(1 << 20);
    stops_in_time(
        "memory.init",
        looping(
            &format!(r#"(data $d "{segment}")"#),
            "(memory.init $d (i32.const 0) (i32.const 0) (i32.const 1048576))",
        ),
    );
}

#[test]
fn a_memory_grow_loop_is_stopped_by_its_deadline() {
    // It grows to the cap, then is refused growth, forever.
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1)
             (func (export "_start")
               (loop $l (drop (memory.grow (i32.const 1))) (br $l))))"#,
    )
    .unwrap();
    stops_in_time("memory.grow", wasm);
}

/// A table of 65,536 function references (the most the wasmtime engine's pool allows).
const TABLE: u32 = 65_536;

#[test]
fn a_table_fill_loop_is_stopped_by_its_deadline() {
    stops_in_time(
        "table.fill",
        looping(
            &format!("(table $t {TABLE} funcref) (elem declare func $f)"),
            &format!("(table.fill $t (i32.const 0) (ref.func $f) (i32.const {TABLE}))"),
        ),
    );
}

#[test]
fn a_table_copy_loop_is_stopped_by_its_deadline() {
    let half = TABLE / 2;
    stops_in_time(
        "table.copy",
        looping(
            &format!("(table $t {TABLE} funcref) (elem declare func $f)"),
            &format!("(table.copy $t $t (i32.const 0) (i32.const {half}) (i32.const {half}))"),
        ),
    );
}

#[test]
fn a_table_init_loop_is_stopped_by_its_deadline() {
    // A passive segment of 10,000 references, copied again and again.
    let refs = " $f".repeat(10_000);
    stops_in_time(
        "table.init",
        looping(
            &format!("(table $t {TABLE} funcref) (elem $e func{refs})"),
            "(table.init $t $e (i32.const 0) (i32.const 0) (i32.const 10000))",
        ),
    );
}

/// How many bulk instructions a straight-line body holds: unchecked, each of these runs takes
/// many seconds (2,000 writes of 64 MiB of memory, 10,000 of 65,536 table elements), far past
/// the slack, and compiles in a few seconds even under emulation.
const STRAIGHT_MEMORY: usize = 2_000;
const STRAIGHT_TABLE: usize = 10_000;

/// A module of `CAP` bytes of memory whose `_start` is `body` written `times` times, with no
/// loop and no call: only the checks after each bulk instruction can stop it.
fn straight(extra: &str, body: &str, times: usize) -> Vec<u8> {
    let pages = CAP >> 16;
    let run = body.repeat(times);
    wat::parse_str(format!(
        r#"(module (memory (export "memory") {pages}) {extra}
             (func $f)
             (func (export "_start") {run}))"#
    ))
    .unwrap()
}

#[test]
fn straight_line_memory_fills_copies_and_inits_are_stopped_by_their_deadline() {
    let half = CAP / 2;
    stops_in_time(
        "straight-line memory.fill",
        straight(
            "",
            &format!("(memory.fill (i32.const 0) (i32.const 7) (i32.const {CAP}))"),
            STRAIGHT_MEMORY,
        ),
    );
    stops_in_time(
        "straight-line memory.copy",
        straight(
            "",
            &format!("(memory.copy (i32.const 0) (i32.const {half}) (i32.const {half}))"),
            STRAIGHT_MEMORY,
        ),
    );
    // A passive segment of 4 MiB: four times as many inits copy what the fills write.
    let segment = "\\2a".repeat(4 << 20);
    stops_in_time(
        "straight-line memory.init",
        straight(
            &format!(r#"(data $d "{segment}")"#),
            "(memory.init $d (i32.const 0) (i32.const 0) (i32.const 4194304))",
            4 * STRAIGHT_MEMORY,
        ),
    );
}

#[test]
fn straight_line_table_fills_copies_and_inits_are_stopped_by_their_deadline() {
    let table = format!("(table $t {TABLE} funcref) (elem declare func $f)");
    let half = TABLE / 2;
    stops_in_time(
        "straight-line table.fill",
        straight(
            &table,
            &format!("(table.fill $t (i32.const 0) (ref.func $f) (i32.const {TABLE}))"),
            STRAIGHT_TABLE,
        ),
    );
    stops_in_time(
        "straight-line table.copy",
        straight(
            &table,
            &format!("(table.copy $t $t (i32.const 0) (i32.const {half}) (i32.const {half}))"),
            STRAIGHT_TABLE,
        ),
    );
    // A passive segment as long as the table: wasmtime copies a segment of 10,000 references
    // 20,000 times within the limit.
    let refs = " $f".repeat(TABLE as usize);
    stops_in_time(
        "straight-line table.init",
        straight(
            &format!("(table $t {TABLE} funcref) (elem $e func{refs})"),
            &format!("(table.init $t $e (i32.const 0) (i32.const 0) (i32.const {TABLE}))"),
            STRAIGHT_TABLE,
        ),
    );
}

#[test]
fn straight_line_http_requests_are_stopped_by_their_deadline() {
    // Each request of 8 MiB is scanned whole before it is refused as not JSON: milliseconds
    // of host code. A run of them with no loop and no call of the guest's own passes no
    // check of an engine's; only each request's own look at the deadline can stop it.
    let pages = CAP >> 16;
    let run = format!(
        "(drop (call $request (i32.const 0) (i32.const {})))",
        8 << 20
    )
    .repeat(STRAIGHT_MEMORY);
    let wasm = wat::parse_str(format!(
        r#"(module
             (import "subako_http" "request" (func $request (param i32 i32) (result i32)))
             (memory (export "memory") {pages})
             (func (export "_start") {run}))"#
    ))
    .unwrap();
    stops_in_time("straight-line subako_http.request", wasm);
}

#[test]
fn a_bulk_loop_in_a_start_function_is_stopped_by_its_deadline() {
    let pages = CAP >> 16;
    let wasm = wat::parse_str(format!(
        r#"(module (memory (export "memory") {pages})
             (func $forever
               (loop $l (memory.fill (i32.const 0) (i32.const 7) (i32.const {CAP})) (br $l)))
             (start $forever)
             (func (export "_start")))"#
    ))
    .unwrap();
    stops_in_time("memory.fill in a start function", wasm);
}

#[test]
fn a_loop_through_host_calls_is_stopped_by_its_deadline() {
    let wasm = wat::parse_str(
        r#"(module
             (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
             (memory (export "memory") 1)
             (func (export "_start")
               (loop $l (drop (call $random (i32.const 0) (i32.const 65536))) (br $l))))"#,
    )
    .unwrap();
    stops_in_time("random_get", wasm);
}

#[test]
fn a_module_exporting_a_name_the_checks_reserve_is_not_run_as_if_checked() {
    // The checks' flag travels as an export with a name no toolchain makes; a module that
    // claims it cannot have its own global taken for the flag.
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1)
             (global (export "\00hako.deadline") (mut i32) (i32.const 0))
             (func (export "_start")))"#,
    )
    .unwrap();
    for config in configs() {
        if config.kind() != hako::engines::EngineKind::Wasmer {
            continue;
        }
        let store = support::host::shared_store();
        let sha = hako::store::sha256_hex(&wasm);
        let loaded = store.load_module(
            &hako::store::ModuleSpec {
                wasm: hako::store::ModuleBytes::Given(&wasm),
                module_sha256: &sha,
                uses_simd: false,
                config,
            },
            None,
        );
        let err = loaded.err().expect("the module does not compile");
        assert!(format!("{err:#}").contains("reserves"), "{config}: {err:#}");
    }
}

#[test]
fn code_with_deadline_checks_computes_what_it_did_without() {
    // Every function entry and loop header carries a check: loops, recursion and the sort of
    // the fixture's `compute` must still give the same answer on every configuration.
    let answer = Call::new("compute")
        .args(serde_json::json!({"n": 5000}))
        .answer_json();
    assert_eq!(answer["fib"], 17711, "{answer}");
    assert!(answer["median"].is_u64(), "{answer}");
}
