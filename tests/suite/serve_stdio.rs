//! `hako serve --stdio`: JSON-RPC lines in and out for one package, the 64 KiB line cap with
//! recovery, the nesting cap, `id: null` against omitted ids, a package given as a folder
//! (uploaded first), and the exit: 0 at end of input, after every accepted call is answered.

use crate::serve_support;
use crate::support;

use serde_json::{json, Value};
use serve_support::{stdio, stdio_with, stdout_lines};

fn line(value: &Value) -> String {
    format!("{value}\n")
}

fn by_id(lines: &[Value], id: u64) -> &Value {
    lines
        .iter()
        .find(|line| line["id"] == id)
        .unwrap_or_else(|| panic!("no answer with id {id} in {lines:?}"))
}

#[test]
fn stdio_lists_and_calls_and_exits_zero_at_end_of_input() {
    let store = serve_support::store();
    let input = [
        line(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})),
        line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        line(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})),
        line(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "greet", "arguments": {"name": "Ada"}}})),
    ]
    .concat();
    let output = stdio(store.path(), "greet", input.as_bytes());
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines = stdout_lines(&output);
    assert_eq!(
        lines.len(),
        3,
        "the notification is not answered: {lines:?}"
    );
    assert_eq!(by_id(&lines, 1)["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(by_id(&lines, 2)["result"]["tools"][0]["name"], "greet");
    let call = &by_id(&lines, 3)["result"];
    assert_eq!(call["structuredContent"], json!({"message": "Hello, Ada!"}));
}

#[test]
fn a_call_still_running_at_end_of_input_is_answered_before_the_exit() {
    let store = serve_support::store();
    let input = line(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 300}}}),
    );
    let output = stdio(store.path(), "fixture", input.as_bytes());
    assert_eq!(output.status.code(), Some(0));
    let lines = stdout_lines(&output);
    assert_eq!(
        lines[0]["result"]["content"][0]["text"],
        r#"{"slept_ms":300}"#
    );
}

#[test]
fn requests_sent_before_the_last_is_answered_are_answered_as_each_finishes() {
    // One run permit: the long sleep holds none while it sleeps, so the calls sent after it
    // run beside it and are answered first, each under its own id.
    let store = serve_support::store();
    let input = [
        line(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 3000}}})),
        line(&json!({"jsonrpc": "2.0", "id": "two", "method": "tools/call", "params": {"name": "sleep", "arguments": {"ms": 1}}})),
        line(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"said": "x"}}})),
    ]
    .concat();
    let output = stdio_with(
        store.path(),
        "fixture",
        &["--workers", "1"],
        input.as_bytes(),
    );
    assert_eq!(output.status.code(), Some(0));
    let lines = stdout_lines(&output);
    let ids: Vec<&Value> = lines.iter().map(|line| &line["id"]).collect();
    assert_eq!(ids.len(), 3, "{lines:?}");
    assert_eq!(
        ids[2],
        &json!(1),
        "the long sleep is answered last: {lines:?}"
    );
    assert_eq!(
        lines[2]["result"]["content"][0]["text"],
        r#"{"slept_ms":3000}"#
    );
    let two = lines.iter().find(|line| line["id"] == "two").unwrap();
    assert_eq!(two["result"]["content"][0]["text"], r#"{"slept_ms":1}"#);
    assert_eq!(
        by_id(&lines, 3)["result"]["content"][0]["text"],
        r#"{"said":"x"}"#
    );
}

#[test]
fn an_oversized_line_is_one_parse_error_and_the_next_line_is_served() {
    let store = serve_support::store();
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(64 * 1024)
    );
    let mut input = long.clone();
    input.push('\n');
    input.push_str(&line(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})));
    let output = stdio(store.path(), "greet", input.as_bytes());
    assert_eq!(output.status.code(), Some(0));
    let lines = stdout_lines(&output);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["error"]["code"], -32700);
    assert_eq!(lines[0]["id"], Value::Null);
    assert!(lines[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("65536"));
    assert_eq!(lines[1], json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
}

#[test]
fn a_line_just_under_the_cap_is_served() {
    let store = serve_support::store();
    let frame = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""}}"#;
    let pad = "y".repeat(64 * 1024 - frame.len());
    let request =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{pad}"}}}}"#);
    assert_eq!(request.len(), 64 * 1024);
    let output = stdio(store.path(), "greet", format!("{request}\n").as_bytes());
    assert_eq!(
        stdout_lines(&output),
        [json!({"jsonrpc": "2.0", "id": 1, "result": {}})]
    );
}

#[test]
fn nesting_null_ids_and_notifications_are_told_apart() {
    let store = serve_support::store();
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":{}{}}}}}"#,
        "[".repeat(32),
        "]".repeat(32)
    );
    let input = [
        format!("{deep}\n"),
        line(&json!({"jsonrpc": "2.0", "id": null, "method": "ping"})),
        line(&json!({"jsonrpc": "2.0", "method": "ping"})),
        "not json at all\n".to_string(),
        "\n".to_string(),
        line(&json!({"jsonrpc": "2.0", "id": "last", "method": "ping"})),
    ]
    .concat();
    let output = stdio(store.path(), "greet", input.as_bytes());
    let lines = stdout_lines(&output);
    let codes: Vec<Value> = lines.iter().map(|l| l["error"]["code"].clone()).collect();
    assert_eq!(
        codes,
        [json!(-32700), json!(-32600), json!(-32700), Value::Null],
        "{lines:?}"
    );
    assert_eq!(lines[3]["id"], "last");
}

#[test]
fn a_package_folder_is_uploaded_then_served() {
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let input = line(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let output = stdio(store.path(), greet.to_str().unwrap(), input.as_bytes());
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout_lines(&output)[0]["result"]["tools"][0]["name"],
        "greet"
    );
    assert!(store
        .path()
        .join("packages")
        .join("greet")
        .join("current")
        .is_file());
}

#[test]
fn an_unknown_package_is_a_usage_error() {
    let store = tempfile::tempdir().unwrap();
    let output = stdio(store.path(), "nothing", b"");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("nothing"));
}
