//! The `subako_http` imports as a guest uses them: the misuse codes, the held answer, request
//! validation and the allowlist. These calls use `NoBroker` (the support's default), so an
//! allowed request answers `connection` saying no broker is configured; `broker.rs` and
//! `broker_guest.rs` cover the real broker.

use crate::support;

use serde_json::{json, Value};
use support::host::Call;

fn http(request: Value) -> Call {
    Call::new("http").args(json!({"request": request}))
}

fn error_kind(answer: &Value) -> &str {
    answer["error"]["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error answer: {answer}"))
}

#[test]
fn a_range_outside_memory_answers_minus_one() {
    let answer = Call::new("http_misuse")
        .args(json!({"case": "range"}))
        .answer_json();
    assert_eq!(answer, json!({"code": -1}));
}

#[test]
fn reading_with_no_answer_held_answers_minus_two() {
    let answer = Call::new("http_misuse")
        .args(json!({"case": "no_answer"}))
        .answer_json();
    assert_eq!(answer, json!({"code": -2}));
}

#[test]
fn reading_with_the_wrong_length_answers_minus_three() {
    let answer = Call::new("http_misuse")
        .args(json!({"case": "length"}))
        .answer_json();
    assert_eq!(answer, json!({"code": -3}));
}

#[test]
fn a_request_that_is_not_json_is_invalid() {
    let answer = Call::new("http_misuse")
        .args(json!({"case": "raw", "bytes": "{not json"}))
        .answer_json();
    assert_eq!(error_kind(&answer), "invalid_request");
}

#[test]
fn plain_http_is_an_invalid_request() {
    let answer = http(json!({"url": "http://example.com/"})).answer_json();
    assert_eq!(error_kind(&answer), "invalid_request");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("https"));
}

#[test]
fn an_unknown_field_is_an_invalid_request() {
    let answer = http(json!({"url": "https://example.com/", "proxy": "x"})).answer_json();
    assert_eq!(error_kind(&answer), "invalid_request");
}

#[test]
fn an_upper_case_header_name_is_an_invalid_request() {
    let answer =
        http(json!({"url": "https://example.com/", "headers": {"Accept": "x"}})).answer_json();
    assert_eq!(error_kind(&answer), "invalid_request");
}

#[test]
fn a_bad_method_is_an_invalid_request() {
    let answer = http(json!({"url": "https://example.com/", "method": "TRACE"})).answer_json();
    assert_eq!(error_kind(&answer), "invalid_request");
}

#[test]
fn a_host_outside_the_allowlist_is_not_allowed() {
    let answer = http(json!({"url": "https://example.com/"})).answer_json();
    assert_eq!(error_kind(&answer), "host_not_allowed");
}

#[test]
fn a_guest_setting_a_credential_header_is_refused() {
    let answer =
        http(json!({"url": "https://example.com/", "headers": {"authorization": "Bearer x"}}))
            .allow_hosts(&["example.com"])
            .answer_json();
    assert_eq!(error_kind(&answer), "credential_header");
}

#[test]
fn an_allowed_request_says_no_broker_is_configured() {
    let answer = http(json!({"url": "https://example.com/"}))
        .allow_hosts(&["example.com"])
        .answer_json();
    assert_eq!(error_kind(&answer), "connection");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("broker"),
        "{answer}"
    );
}

#[test]
fn a_body_file_outside_the_volume_is_a_bad_path() {
    let answer = http(json!({
        "url": "https://example.com/",
        "method": "POST",
        "body": {"type": "file", "path": "/etc/passwd"}
    }))
    .allow_hosts(&["example.com"])
    .answer_json();
    assert_eq!(error_kind(&answer), "bad_path");
}
