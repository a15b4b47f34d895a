//! The call contract, host side: every crash kind triggered by a real guest, on every
//! compiler, with the same outcome; answers that are fine; stdout and stderr limits; and
//! hostile guests (loops, memory bombs, floods) contained.

use crate::support;

use std::time::Duration;

use hako::call::{CrashKind, STDERR_TAIL};
use hako::protocol::ShownBlock;
use serde_json::json;
use support::host::Call;

#[test]
fn a_greeting_is_answered_with_text_and_structured_content() {
    let result = Call::new("greet").args(json!({"name": "Ada"})).answers();
    assert_eq!(
        result.content,
        vec![ShownBlock::Text {
            text: r#"{"message":"Hello, Ada!"}"#.into()
        }]
    );
    assert_eq!(result.structured, Some(json!({"message": "Hello, Ada!"})));
    assert!(!result.is_error);
}

#[test]
fn an_is_error_result_is_an_answer_not_a_crash() {
    let result = Call::new("is_error").answers();
    assert!(result.is_error);
}

#[test]
fn a_jsonrpc_error_answer_crashes_as_jsonrpc_error() {
    let (message, _) = Call::new("jsonrpc_error").crashes(CrashKind::JsonrpcError);
    assert!(message.contains("-32000"), "{message}");
}

#[test]
fn a_result_type_other_than_complete_crashes_as_bad_result_type() {
    let (message, _) = Call::new("bad_result_type").crashes(CrashKind::BadResultType);
    assert!(message.contains("incomplete"), "{message}");
}

#[test]
fn a_complete_result_type_is_fine() {
    Call::new("complete_result_type").answers();
}

#[test]
fn a_line_that_is_not_jsonrpc_crashes_as_not_jsonrpc() {
    Call::new("not_jsonrpc").crashes(CrashKind::NotJsonrpc);
}

#[test]
fn an_answer_to_another_id_crashes_as_unknown_id() {
    Call::new("unknown_id").crashes(CrashKind::UnknownId);
}

#[test]
fn a_second_answer_to_the_same_request_crashes_as_unknown_id() {
    Call::new("answer_twice").crashes(CrashKind::UnknownId);
}

#[test]
fn a_request_from_the_guest_crashes_as_guest_request() {
    let (message, _) = Call::new("guest_request").crashes(CrashKind::GuestRequest);
    assert!(message.contains("sampling/createMessage"), "{message}");
}

#[test]
fn notifications_from_the_guest_are_ignored() {
    Call::new("notify_then_answer").answers();
}

#[test]
fn exiting_before_answering_crashes_as_exited_before_answer() {
    Call::new("exit_before_answer").crashes(CrashKind::ExitedBeforeAnswer);
    let (message, _) =
        Call::new("exit_nonzero_before_answer").crashes(CrashKind::ExitedBeforeAnswer);
    assert!(message.contains('7'), "{message}");
}

#[test]
fn a_nonzero_exit_after_answering_crashes_as_nonzero_exit() {
    let (message, _) = Call::new("nonzero_exit").crashes(CrashKind::NonzeroExit);
    assert!(message.contains('3'), "{message}");
}

#[test]
fn a_guest_spinning_after_stdin_closed_crashes_as_no_exit_after_eof() {
    Call::new("no_exit_after_eof").crashes(CrashKind::NoExitAfterEof);
}

#[test]
fn a_guest_sleeping_after_stdin_closed_crashes_as_no_exit_after_eof() {
    Call::new("sleep_after_eof").crashes(CrashKind::NoExitAfterEof);
}

#[test]
fn a_trap_crashes_as_trap_with_the_stderr_tail() {
    Call::new("trap").crashes(CrashKind::Trap);
    let (_, stderr) = Call::new("stderr_then_trap")
        .args(json!({"text": "about to fail"}))
        .crashes(CrashKind::Trap);
    assert!(stderr.contains("about to fail"), "{stderr}");
}

#[test]
fn a_memory_bomb_crashes_as_out_of_memory() {
    Call::new("oom")
        .limits(|limits| limits.max_memory_bytes = 32 * 1024 * 1024)
        .crashes(CrashKind::OutOfMemory);
}

#[test]
fn a_read_past_the_end_of_memory_traps_even_after_a_bigger_memory_ran() {
    // The memory bomb leaves a big memory behind; memories are reused from call to call, and
    // the next guest must still find the end of its own memory guarded.
    Call::new("oom")
        .limits(|limits| limits.max_memory_bytes = 32 * 1024 * 1024)
        .crashes(CrashKind::OutOfMemory);
    Call::new("read_past_memory").crashes(CrashKind::Trap);
}

#[test]
fn memory_a_call_used_reads_as_zero_in_the_next_call() {
    for _ in 0..3 {
        let result = Call::new("grow_and_check")
            .args(json!({"pages": 64}))
            .answers();
        assert_eq!(
            result.content,
            vec![ShownBlock::Text {
                text: r#"{"grown":true,"zero":true}"#.into()
            }]
        );
    }
}

#[test]
fn an_initial_memory_above_the_cap_crashes_as_out_of_memory() {
    let wasm =
        wat::parse_str(r#"(module (memory (export "memory") 1024) (func (export "_start")))"#)
            .unwrap();
    Call::new("anything")
        .module(wasm)
        .limits(|limits| limits.max_memory_bytes = 16 * 1024 * 1024)
        .crashes(CrashKind::OutOfMemory);
}

#[test]
fn an_endless_loop_crashes_as_timeout() {
    let (message, _) = Call::new("spin")
        .limits(|limits| limits.timeout = Duration::from_millis(300))
        .crashes(CrashKind::Timeout);
    assert!(message.contains("300 ms"), "{message}");
}

#[test]
fn a_long_sleep_crashes_as_timeout() {
    Call::new("sleep")
        .args(json!({"ms": 60_000}))
        .limits(|limits| limits.timeout = Duration::from_millis(300))
        .crashes(CrashKind::Timeout);
}

#[test]
fn a_short_sleep_is_answered() {
    let answer = Call::new("sleep").args(json!({"ms": 5})).answer_json();
    assert_eq!(answer, json!({"slept_ms": 5}));
}

#[test]
fn an_endless_start_function_crashes_as_timeout() {
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1)
             (func $forever (loop $l (br $l)))
             (start $forever)
             (func (export "_start")))"#,
    )
    .unwrap();
    Call::new("anything")
        .module(wasm)
        .limits(|limits| limits.timeout = Duration::from_millis(300))
        .crashes(CrashKind::Timeout);
}

#[test]
fn waiting_for_a_second_request_crashes_as_timeout() {
    Call::new("read_stdin_again").crashes(CrashKind::Timeout);
}

#[test]
fn a_stdout_flood_crashes_as_stdout_limit() {
    Call::new("stdout_flood").crashes(CrashKind::StdoutLimit);
}

#[test]
fn a_stderr_flood_keeps_only_the_last_4_kib() {
    for (_, outcome) in Call::new("stderr_flood")
        .args(json!({"bytes": 5_000_000}))
        .run_all()
    {
        let hako::call::CallOutcome::Answered { stderr, stats, .. } = outcome else {
            panic!("a stderr flood is not a crash: {outcome:?}");
        };
        assert!(stderr.len() <= STDERR_TAIL, "{}", stderr.len());
        assert!(
            stderr.ends_with("END-OF-STDERR"),
            "{}",
            &stderr[stderr.len() - 20..]
        );
        assert_eq!(stats.stderr_bytes, 5_000_000);
    }
}

#[test]
fn an_image_over_the_stdout_limit_crashes_as_stdout_limit() {
    let data = "A".repeat(1_100_000);
    Call::new("image")
        .args(json!({"mime": "image/png", "base64": data}))
        .crashes(CrashKind::StdoutLimit);
}

#[test]
fn endless_recursion_crashes_as_trap() {
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1)
             (func $deeper (call $deeper))
             (func (export "_start") (call $deeper)))"#,
    )
    .unwrap();
    let (message, _) = Call::new("anything").module(wasm).crashes(CrashKind::Trap);
    assert!(message.contains("stack"), "{message}");
}

#[test]
fn a_guest_stopped_by_its_deadline_leaves_the_host_able_to_run_the_next_call() {
    Call::new("spin")
        .limits(|limits| limits.timeout = Duration::from_millis(100))
        .crashes(CrashKind::Timeout);
    Call::new("greet").args(json!({"name": "again"})).answers();
}

#[test]
fn a_guest_looping_through_host_functions_is_stopped_by_its_deadline_without_harm() {
    // Nearly all of this guest's time is spent in host functions. An interrupt that unwound
    // host code halfway would leave the engine's store context borrowed or a host lock held,
    // and a later call would panic or hang; the deadline must still stop every run.
    for _ in 0..20 {
        Call::new("spin_in_host")
            .limits(|limits| limits.timeout = Duration::from_millis(20))
            .crashes(CrashKind::Timeout);
    }
    Call::new("greet").args(json!({"name": "again"})).answers();
}
