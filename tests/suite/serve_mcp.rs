//! `hako serve`'s MCP endpoints with hand-written JSON-RPC, against a real server: Streamable
//! HTTP (initialize for older clients, the stateless 2026-07-28 style, 405 for GET, 202 for
//! notifications), the legacy HTTP+SSE sessions (endpoint event, 202 and the answer as a
//! `message` event byte-identical to stdio, 404 for unknown sessions, 16 sessions at most,
//! keepalives, sessions freed on disconnect), the one-shot `POST /message`, and the message
//! boundaries (nesting, `id: null`, notifications) on every transport.

use crate::serve_support;
use crate::support;

use serde_json::{json, Value};
use serve_support::{EventStream, Server, Sse};

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[test]
fn initialize_answers_the_clients_revision_or_the_latest_one() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("2031-01-01", "2025-06-18"),
    ] {
        let reply = server.post_json(
            "/mcp/greet",
            &rpc(1, "initialize", json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})),
        );
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("content-type"), Some("application/json"));
        let result = &reply.json()["result"];
        assert_eq!(result["protocolVersion"], answered);
        assert_eq!(result["serverInfo"]["name"], "greet");
        assert!(result["capabilities"]["tools"].is_object());
    }
    let initialized = server.post_json(
        "/mcp/greet",
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(initialized.status, 202);
    assert!(initialized.body.is_empty());
}

#[test]
fn the_stateless_style_discovers_lists_and_calls_without_initialize() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
    let discover = server
        .post_json(
            "/mcp/greet",
            &rpc(1, "server/discover", json!({"_meta": meta})),
        )
        .json();
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!(["2026-07-28"])
    );
    assert_eq!(discover["result"]["resultType"], "complete");
    assert_eq!(
        discover["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "greet"
    );
    let list = server
        .post_json("/mcp/greet", &rpc(2, "tools/list", json!({"_meta": meta})))
        .json();
    assert_eq!(list["result"]["tools"][0]["name"], "greet");
    assert_eq!(list["result"]["resultType"], "complete");
    let call = server.post_json(
        "/mcp/greet",
        &rpc(
            3,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "Ada"}, "_meta": meta}),
        ),
    );
    let result = &call.json()["result"];
    assert_eq!(
        result["structuredContent"],
        json!({"message": "Hello, Ada!"})
    );
    assert_eq!(result["isError"], false);
    assert_eq!(result["resultType"], "complete");
    let old = json!({"io.modelcontextprotocol/protocolVersion": "2020-01-01"});
    let refused = server
        .post_json("/mcp/greet", &rpc(4, "tools/list", json!({"_meta": old})))
        .json();
    assert_eq!(refused["error"]["code"], -32022);
    assert_eq!(refused["error"]["data"]["supported"], json!(["2026-07-28"]));
}

#[test]
fn a_crash_reaches_the_agent_as_an_error_result_with_stderr() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let reply = server.post_json(
        "/mcp/fixture",
        &rpc(
            9,
            "tools/call",
            json!({"name": "stderr_then_trap", "arguments": {"text": "the last words"}}),
        ),
    );
    let result = &reply.json()["result"];
    assert_eq!(result["isError"], true);
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("The function crashed (trap)"), "{text}");
    assert!(text.contains("the last words"), "{text}");
    let unknown = server
        .post_json(
            "/mcp/fixture",
            &rpc(10, "tools/call", json!({"name": "nope"})),
        )
        .json();
    assert_eq!(unknown["error"]["code"], -32602);
    for (params, named) in [
        (json!({"arguments": {}}), "\"name\""),
        (json!({"name": 7}), "\"name\""),
        (json!({"name": "greet", "arguments": "x"}), "\"arguments\""),
    ] {
        let refused = server
            .post_json("/mcp/fixture", &rpc(11, "tools/call", params.clone()))
            .json();
        assert_eq!(refused["error"]["code"], -32602, "{params}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{params}: {message}");
    }
}

#[test]
fn streamable_http_offers_no_stream_and_knows_its_packages() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let get = server.request("GET", "/mcp/greet", &[("accept", "text/event-stream")], b"");
    assert_eq!(get.status, 405);
    assert_eq!(get.header("allow"), Some("POST"));
    assert_eq!(
        server
            .post_json("/mcp/nothing", &rpc(1, "ping", json!({})))
            .status,
        404
    );
    assert_eq!(
        server
            .post_json("/mcp/greet", &rpc(1, "nope/nope", json!({})))
            .json()["error"]["code"],
        -32601
    );
}

#[test]
fn message_boundaries_hold_over_http() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let null_id = server.post_json(
        "/mcp/greet",
        &json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
    );
    assert_eq!(null_id.status, 200);
    assert_eq!(null_id.json()["error"]["code"], -32600);
    assert_eq!(null_id.json()["id"], Value::Null);
    let notification = server.post_json(
        "/mcp/greet",
        &json!({"jsonrpc": "2.0", "method": "tools/list"}),
    );
    assert_eq!(notification.status, 202);
    assert!(notification.body.is_empty());
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":{}1{}}}}}"#,
        "[".repeat(32),
        "]".repeat(32)
    );
    let too_deep = server
        .request("POST", "/mcp/greet", &[], deep.as_bytes())
        .json();
    assert_eq!(too_deep["error"]["code"], -32700);
    let at_limit = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":{}1{}}}}}"#,
        "[".repeat(30),
        "]".repeat(30)
    );
    assert_eq!(
        server
            .request("POST", "/mcp/greet", &[], at_limit.as_bytes())
            .json()["result"],
        json!({})
    );
}

#[test]
fn request_ids_are_echoed_byte_for_byte() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    for id in ["1e2", "18446744073709551616", "1.50", r#""\u00e9""#] {
        let message = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let reply = server.request("POST", "/mcp/greet", &[], message.as_bytes());
        assert_eq!(reply.status, 200);
        let text = reply.text();
        assert!(text.contains(&format!(r#""id":{id},"#)), "{id}: {text}");
    }
    // A tool call's answer, which comes back from a guest thread, too.
    let call = r#"{"jsonrpc":"2.0","id":1e2,"method":"tools/call","params":{"name":"greet","arguments":{"name":"x"}}}"#;
    let reply = server.request("POST", "/mcp/greet", &[], call.as_bytes());
    assert!(reply.text().contains(r#""id":1e2,"#), "{}", reply.text());
}

#[test]
fn a_sse_session_answers_on_its_stream_byte_identical_to_stdio() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let mut stream = EventStream::open(server.addr, "/sse/greet");
    assert_eq!(stream.status, 200);
    let (name, endpoint) = stream.next_event();
    assert_eq!(name, "endpoint");
    let id = endpoint
        .strip_prefix("/message?sessionId=")
        .expect("the endpoint names a session");
    assert_eq!(id.len(), 36);
    assert_eq!(&id[14..15], "4", "a version 4 UUID: {id}");

    let requests = [
        rpc(1, "tools/list", json!({})),
        rpc(
            2,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        ),
        rpc(3, "tools/call", json!({"name": "greet", "arguments": {}})),
    ];
    let mut over_sse = Vec::new();
    for request in &requests {
        let posted = server.post_json(&endpoint, request);
        assert_eq!(posted.status, 202);
        assert!(posted.body.is_empty());
        let (name, data) = stream.next_event();
        assert_eq!(name, "message");
        over_sse.push(data);
    }
    let mut input = String::new();
    for request in &requests {
        input.push_str(&request.to_string());
        input.push('\n');
    }
    let output = serve_support::stdio(store.path(), "greet", input.as_bytes());
    assert!(output.status.success());
    let over_stdio: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    // Calls run side by side on stdio, so its answers may come in another order.
    let mut over_stdio = over_stdio;
    over_stdio.sort();
    over_sse.sort();
    assert_eq!(over_sse, over_stdio);
}

#[test]
fn a_notification_publishes_nothing_and_unknown_sessions_are_404() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let mut stream = EventStream::open(server.addr, "/sse/greet");
    let (_, endpoint) = stream.next_event();
    let note = server.post_json(
        &endpoint,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(note.status, 202);
    assert_eq!(
        server
            .post_json(&endpoint, &rpc(7, "ping", json!({})))
            .status,
        202
    );
    let (_, data) = stream.next_event();
    assert_eq!(
        serde_json::from_str::<Value>(&data).unwrap()["id"],
        7,
        "the first event answers the ping"
    );

    let unknown = server.request(
        "POST",
        "/message?sessionId=00000000-0000-4000-8000-000000000000",
        &[],
        b"this is not even JSON",
    );
    assert_eq!(unknown.status, 404);
    assert_eq!(EventStream::open(server.addr, "/sse/nothing").status, 404);
}

#[test]
fn at_most_sixteen_sessions_and_a_closed_one_frees_its_place() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--keepalive-ms", "50"]);
    let mut streams: Vec<(EventStream, String)> = (0..16)
        .map(|_| {
            let mut stream = EventStream::open(server.addr, "/sse/greet");
            assert_eq!(stream.status, 200);
            let (_, endpoint) = stream.next_event();
            (stream, endpoint)
        })
        .collect();
    let refused = EventStream::open(server.addr, "/sse/greet");
    assert_eq!(refused.status, 503);
    let (closed, endpoint) = streams.pop().unwrap();
    drop(closed);
    server.wait_until("the closed session is gone", |s| {
        s.post_json(&endpoint, &rpc(1, "ping", json!({}))).status == 404
    });
    let mut again = EventStream::open(server.addr, "/sse/greet");
    assert_eq!(again.status, 200);
    assert_eq!(again.next_event().0, "endpoint");
}

#[test]
fn an_idle_stream_gets_keepalives() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--keepalive-ms", "20"]);
    let mut stream = EventStream::open(server.addr, "/sse/greet");
    assert_eq!(stream.next_event().0, "endpoint");
    assert_eq!(stream.next(), Some(Sse::Comment("keepalive".into())));
    assert_eq!(stream.next(), Some(Sse::Comment("keepalive".into())));
}

#[test]
fn sessions_end_when_the_server_stops() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let mut stream = EventStream::open(server.addr, "/sse/greet");
    assert_eq!(stream.next_event().0, "endpoint");
    let status = server.terminate();
    assert!(status.success());
    assert_eq!(stream.next(), None);
}

#[test]
fn one_shot_messages_are_answered_in_the_body_and_close_the_connection() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let reply = server.post_json("/message/greet", &rpc(4, "tools/list", json!({})));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("connection"), Some("close"));
    assert_eq!(reply.json()["result"]["tools"][0]["name"], "greet");
    let note = server.post_json(
        "/message/greet",
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(note.status, 202);
    assert!(note.body.is_empty());
    // Two packages are stored, so a bare /message must name one.
    assert_eq!(
        server
            .post_json("/message", &rpc(5, "ping", json!({})))
            .status,
        400
    );
}

#[test]
fn a_bare_one_shot_message_goes_to_the_only_package() {
    let store = tempfile::tempdir().unwrap();
    serve_support::upload(store.path(), &support::greet_package_dir());
    let server = Server::start(store.path(), &[]);
    let reply = server.post_json(
        "/message",
        &rpc(
            5,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "Bo"}}),
        ),
    );
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json()["result"]["structuredContent"],
        json!({"message": "Hello, Bo!"})
    );
}
