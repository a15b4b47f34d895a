//! `hako serve`'s operator API and its HTTP boundaries, against a real server process on a
//! loopback port: upload (stored, unchanged, refused), list and show, calls (answered,
//! crashed, unknown), health and metrics, request body limits, the Bearer token, the Origin
//! check, the refusal to bind a public address without a token, back-pressure (503 with
//! Retry-After, no accepted call lost) and the graceful stop on SIGTERM.

use crate::serve_support;
use crate::support;

use serde_json::{json, Value};
use serve_support::{request, Server};
use support::archive_of;

fn empty_store() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hako-serve-empty-")
        .tempdir()
        .expect("a temp dir")
}

#[test]
fn an_uploaded_archive_is_stored_listed_shown_and_called() {
    let store = empty_store();
    let server = Server::start(store.path(), &[]);
    let archive = archive_of(&support::greet_package_dir());

    let stored = server.request("POST", "/v1/packages", &[], &archive);
    assert_eq!(stored.status, 201, "{}", stored.text());
    let stored = stored.json();
    assert_eq!(stored["name"], "greet");
    assert_eq!(stored["stored"], true);
    assert_eq!(stored["tools"][0]["name"], "greet");
    assert_eq!(stored["tools"][0]["inputSchema"]["type"], "object");

    let again = server.request("POST", "/v1/packages", &[], &archive);
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["stored"], false);

    let list = server.get("/v1/packages").json();
    assert_eq!(list["packages"][0]["name"], "greet");
    assert_eq!(list["packages"][0]["tools"], json!(["greet"]));

    let shown = server.get("/v1/packages/greet");
    assert_eq!(shown.status, 200);
    assert_eq!(shown.json()["version"], "1.0.0");
    assert_eq!(server.get("/v1/packages/nothing").status, 404);

    let call = server.post_json(
        "/v1/packages/greet/call",
        &json!({"tool": "greet", "arguments": {"name": "Ada"}}),
    );
    assert_eq!(call.status, 200, "{}", call.text());
    let outcome = call.json();
    assert_eq!(outcome["outcome"], "ok");
    assert_eq!(
        outcome["result"]["structuredContent"],
        json!({"message": "Hello, Ada!"})
    );
    assert_eq!(outcome["result"]["isError"], false);
}

#[test]
fn a_refused_archive_answers_422_with_the_rules_it_broke() {
    let store = empty_store();
    let server = Server::start(store.path(), &[]);
    let package = tempfile::tempdir().unwrap();
    std::fs::write(
        package.path().join("subako-package.json"),
        br#"{"name":"Bad Name","version":"1.0.0","abi":2}"#,
    )
    .unwrap();
    std::fs::write(package.path().join("module.wasm"), b"not wasm").unwrap();
    let reply = server.request("POST", "/v1/packages", &[], &archive_of(package.path()));
    assert_eq!(reply.status, 422, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["refused"], true);
    let rules: Vec<&str> = body["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rule"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"manifest.name"), "{rules:?}");
    assert!(rules.contains(&"manifest.abi"), "{rules:?}");
    assert_eq!(server.get("/v1/packages").json()["packages"], json!([]));

    let garbage = server.request("POST", "/v1/packages", &[], b"not an archive");
    assert_eq!(garbage.status, 422, "{}", garbage.text());
    // A refusal names the package's entries and the rules, never where the server keeps them.
    let store_path = store.path().display().to_string();
    let temp = std::env::temp_dir().display().to_string();
    for text in [reply.text(), garbage.text()] {
        assert!(
            !text.contains(&store_path) && !text.contains(&temp),
            "{text}"
        );
    }
}

#[test]
fn a_crash_is_an_outcome_and_unknown_names_are_404() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let crashed = server.post_json(
        "/v1/packages/fixture/call",
        &json!({"tool": "stderr_then_trap", "arguments": {"text": "about to trap"}}),
    );
    assert_eq!(crashed.status, 200, "{}", crashed.text());
    let outcome = crashed.json();
    assert_eq!(outcome["outcome"], "crashed");
    assert_eq!(outcome["crash"]["kind"], "trap");
    assert!(outcome["stderr"]
        .as_str()
        .unwrap()
        .contains("about to trap"));

    let no_tool = server.post_json("/v1/packages/greet/call", &json!({"tool": "shout"}));
    assert_eq!(no_tool.status, 404);
    let no_package = server.post_json("/v1/packages/nothing/call", &json!({"tool": "greet"}));
    assert_eq!(no_package.status, 404);
    let bad_limits = server.post_json(
        "/v1/packages/greet/call",
        &json!({"tool": "greet", "limits": {"timeout_ms": 0}}),
    );
    assert_eq!(bad_limits.status, 400);
    for (body, named) in [
        (json!({"arguments": {"name": "x"}}), "\"tool\""),
        (json!({"tool": 7}), "\"tool\""),
        (
            json!({"tool": "greet", "arguments": ["x"]}),
            "\"arguments\"",
        ),
    ] {
        let refused = server.post_json("/v1/packages/greet/call", &body);
        assert_eq!(refused.status, 400, "{body}");
        assert!(
            refused.json()["error"].as_str().unwrap().contains(named),
            "{body}: {}",
            refused.text()
        );
    }

    let metrics = server.get("/metrics");
    assert_eq!(metrics.status, 200);
    let text = metrics.text();
    assert!(
        text.contains("hako_call_crashes_total{kind=\"trap\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("hako_calls_total{outcome=\"crashed\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("hako_call_duration_seconds_count 1"),
        "{text}"
    );
    assert_eq!(server.get("/healthz").text(), "ok\n");
}

#[test]
fn absent_or_null_arguments_reach_the_guest_as_the_empty_object() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    for body in [
        json!({"tool": "greet"}),
        json!({"tool": "greet", "arguments": null}),
    ] {
        let called = server.post_json("/v1/packages/greet/call", &body);
        assert_eq!(called.status, 200, "{body}: {}", called.text());
        // greet's own answer to an object without a name.
        let result = &called.json()["result"];
        assert_eq!(result["isError"], true, "{body}: {}", called.text());
        assert_eq!(result["content"][0]["text"], "name is required", "{body}");
    }
}

#[test]
fn a_caller_cannot_raise_its_limits_past_the_operators_maxima() {
    let store = serve_support::store();
    let server = Server::start(
        store.path(),
        &[
            "--max-timeout-ms",
            "1000",
            "--max-memory-mib",
            "64",
            "--max-write-budget",
            "4096",
        ],
    );
    for (limits, named) in [
        (
            json!({"timeout_ms": 600_000}),
            "maximum of 1000 ms (hako serve --max-timeout-ms)",
        ),
        (
            json!({"memory_mib": 4096}),
            "maximum of 64 MiB (hako serve --max-memory-mib)",
        ),
        (
            json!({"write_budget": u64::MAX}),
            "maximum of 4096 bytes (hako serve --max-write-budget)",
        ),
    ] {
        let reply = server.post_json(
            "/v1/packages/greet/call",
            &json!({"tool": "greet", "arguments": {"name": "x"}, "limits": limits}),
        );
        assert_eq!(reply.status, 400, "{limits}: {}", reply.text());
        assert!(reply.text().contains(named), "{limits}: {}", reply.text());
    }
    // Asking for nothing gets the maxima where they are below the defaults: the fixture's
    // spin is stopped at 1 s, not 30.
    let reply = server.post_json("/v1/packages/fixture/call", &json!({"tool": "spin"}));
    let outcome = reply.json();
    assert_eq!(outcome["crash"]["kind"], "timeout", "{outcome}");
    assert!(
        outcome["crash"]["message"]
            .as_str()
            .unwrap()
            .contains("1000 ms"),
        "{outcome}"
    );
}

#[test]
fn a_host_failure_tells_the_client_a_request_id_and_the_log_its_cause() {
    let store = serve_support::store();
    let log_path = store.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let server = Server::start_logging(store.path(), &[], &[], log);
    // A stored version whose module and artifacts have gone (the module is read only to
    // compile, when no artifact serves the call): the store's error names the module's file.
    let versions = store.path().join("packages/greet/versions");
    for entry in std::fs::read_dir(&versions).unwrap() {
        let module = entry.unwrap().path().join("module.wasm");
        if module.exists() {
            std::fs::remove_file(module).unwrap();
        }
    }
    for entry in std::fs::read_dir(store.path().join("artifacts")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "artifact") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let reply = server.post_json(
        "/v1/packages/greet/call",
        &json!({"tool": "greet", "arguments": {"name": "x"}}),
    );
    assert_eq!(reply.status, 500, "{}", reply.text());
    let text = reply.text();
    let store_path = store.path().display().to_string();
    assert!(!text.contains(&store_path), "{text}");
    let id = text
        .split("request id ")
        .nth(1)
        .and_then(|rest| rest.get(..16))
        .unwrap_or_else(|| panic!("no request id in {text}"));
    let logged = std::fs::read_to_string(&log_path).unwrap();
    let line = logged
        .lines()
        .find(|line| line.contains(id))
        .unwrap_or_else(|| panic!("the log has no line with {id}: {logged}"));
    assert!(line.contains("module.wasm"), "{line}");
}

#[test]
fn the_operator_api_shows_a_result_exactly_as_mcp_does() {
    // A link that is not a volume's and a block that is left out were `link` and `omitted`
    // blocks here, and `text` on MCP, which is what the model is shown.
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    for (tool, arguments) in [
        (
            "resource_link",
            json!({"uri": "https://example.com/report", "name": "report"}),
        ),
        (
            "blocks",
            json!({"content": [
                {"type": "text", "text": "kept"},
                {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"}
            ]}),
        ),
    ] {
        let outcome = server
            .post_json(
                "/v1/packages/fixture/call",
                &json!({"tool": tool, "arguments": arguments}),
            )
            .json();
        let mcp = server
            .post_json(
                "/mcp/fixture",
                &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": tool, "arguments": arguments}}),
            )
            .json();
        assert_eq!(outcome["result"], mcp["result"], "{tool}");
        for block in outcome["result"]["content"].as_array().unwrap() {
            assert!(
                ["text", "image"].contains(&block["type"].as_str().unwrap()),
                "{block}"
            );
        }
    }
}

#[test]
fn slow_bodies_get_408_and_never_stall_other_clients() {
    use std::io::{BufReader, Write};
    // 1,000 clients that send their headers and a part of their body, then nothing more.
    // Before the body deadline they held their connections for as long as they liked.
    const SLOW: usize = 1000;
    serve_support::raise_descriptor_limit(SLOW as u64 + 256);
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--body-timeout-ms", "5000"]);
    let body = br#"{"tool":"greet","arguments":{"name":"slow"}}"#;
    let mut slow = Vec::new();
    for _ in 0..SLOW {
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        let head = format!(
            "POST /v1/packages/greet/call HTTP/1.1\r\nHost: localhost\r\nContent-Type: \
             application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&body[..10]).unwrap();
        slow.push(stream);
    }
    // A normal client is answered while they wait (they have seconds left of their 5).
    let asked = std::time::Instant::now();
    let normal = server.post_json(
        "/v1/packages/greet/call",
        &json!({"tool": "greet", "arguments": {"name": "x"}}),
    );
    assert_eq!(normal.status, 200, "{}", normal.text());
    eprintln!(
        "answered beside {SLOW} slow clients in {:?}",
        asked.elapsed()
    );
    for stream in slow {
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let (status, _) = serve_support::read_head(&mut BufReader::new(stream));
        assert_eq!(status, 408);
    }
}

#[test]
fn out_of_descriptors_the_accept_loop_backs_off_logs_little_and_recovers() {
    // With a low descriptor limit, 200 slow clients filled the file table; the accept loop
    // then retried without a pause and logged 8 million warnings (1.08 GB) in 30 s.
    serve_support::raise_descriptor_limit(600);
    let store = serve_support::store();
    let log_path = store.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    // More connections allowed than descriptors: accept itself fails, with EMFILE.
    let server = Server::start_limited(store.path(), &["--max-connections", "2000"], 256, log);
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..300)
        .map(|_| std::net::TcpStream::connect(server.addr).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let seconds = started.elapsed().as_secs() as usize;
    let logged = std::fs::read_to_string(&log_path).unwrap();
    let warnings = logged
        .lines()
        .filter(|line| line.contains("accepting connections failed"))
        .count();
    // At most one a second (and one more for the first error, at once).
    assert!(
        (1..=seconds + 2).contains(&warnings),
        "{warnings} warnings in {seconds} s:\n{logged}"
    );
    // Once the clients go, the server answers again.
    drop(clients);
    server.wait_until("the server answers again", |server| {
        server.get("/healthz").status == 200
    });
}

#[test]
fn guests_together_hold_at_most_max_guest_descriptors() {
    // Each guest may hold 128 descriptors, but 1,024 calls holding 128 each were twice the
    // process's 65,536: the descriptors connections and the store need were theirs to take.
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--max-guest-descriptors", "8"]);
    let open = |count: u64, hold_ms: u64| {
        json!({"tool": "open_files", "arguments": {
            "path": "/volume/tmp/f", "count": count, "hold_ms": hold_ms}})
    };
    let opened = |reply: serve_support::Reply| -> Value {
        assert_eq!(reply.status, 200, "{}", reply.text());
        let outcome = reply.json();
        assert_eq!(outcome["outcome"], "ok", "{outcome}");
        serde_json::from_str(outcome["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    };
    let holding = serve_support::send(server.addr, "fixture", open(100, 3000));
    server.wait_until("the first call holds its files", |s| {
        s.metric("hako_calls_waiting") == 1.0
    });
    // Its /volume/tmp holds one and its files the other 7: another call cannot open even
    // its own /volume/tmp, and is refused ENFILE (41), not EMFILE.
    let refused = opened(server.post_json("/v1/packages/fixture/call", &open(1, 0)));
    assert_eq!(refused["errno"], 41, "{refused}");
    let held = opened(holding.join().unwrap());
    assert_eq!(held, json!({"opened": 7, "errno": 41}));
    // What a call held is given back when it ends.
    let again = opened(server.post_json("/v1/packages/fixture/call", &open(100, 0)));
    assert_eq!(again, json!({"opened": 7, "errno": 41}));
}

#[test]
fn uploads_in_flight_are_bounded_and_streamed_to_the_stores_staging_folder() {
    use std::io::{BufReader, Write};
    // Four 120 MiB uploads at once took the server from 10 MB to 509 MB: bodies were held in
    // memory whole, however many arrived at once.
    let store = empty_store();
    let archive = archive_of(&support::greet_package_dir());
    let budget = (archive.len() * 3 / 2).to_string();
    let server = Server::start(
        store.path(),
        &[
            "--max-upload-in-flight",
            &budget,
            "--body-timeout-ms",
            "2000",
        ],
    );
    // One upload sends half its body and waits: it holds its share of the budget.
    // The half already received is on disk in the store's staging folder, not in memory.
    let first = serve_support::half_upload(&server, store.path(), &archive);
    // A second one does not fit beside it: it is refused on its declared length, before its
    // body is read (so it sends none: the server may close while a body is still coming).
    let mut second = std::net::TcpStream::connect(server.addr).unwrap();
    second
        .write_all(serve_support::upload_head(archive.len()).as_bytes())
        .unwrap();
    let mut second = BufReader::new(second);
    let (status, headers) = serve_support::read_head(&mut second);
    assert_eq!(status, 503);
    let length: usize = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.parse().ok())
        .expect("a length");
    let mut text = vec![0; length];
    std::io::Read::read_exact(&mut second, &mut text).unwrap();
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("--max-upload-in-flight"), "{text}");
    // The first one ends (408 at its deadline), gives its share back, leaves no file.
    first
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let (status, _) = serve_support::read_head(&mut BufReader::new(first));
    assert_eq!(status, 408);
    let third = server.request("POST", "/v1/packages", &[], &archive);
    assert_eq!(third.status, 201, "{}", third.text());
    assert_eq!(serve_support::staged(store.path()), Vec::<String>::new());
}

#[test]
fn an_idle_connection_is_closed_and_connections_past_the_bound_wait_their_turn() {
    use std::io::{Read, Write};
    let store = empty_store();
    let server = Server::start(
        store.path(),
        &["--idle-timeout-ms", "500", "--max-connections", "2"],
    );
    let timeout = Some(std::time::Duration::from_secs(15));
    // A kept-alive connection that goes quiet after its answer is closed by the server.
    let mut kept = std::net::TcpStream::connect(server.addr).unwrap();
    kept.set_read_timeout(timeout).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 512];
    while !answer.ends_with(b"ok\n") {
        let read = kept.read(&mut buffer).unwrap();
        assert!(read > 0, "the answer was cut off");
        answer.extend_from_slice(&buffer[..read]);
    }
    assert_eq!(
        kept.read(&mut buffer).unwrap(),
        0,
        "the idle connection is closed"
    );
    // Two connections that send nothing hold both places; a third client waits in the
    // backlog until the server has closed them, then is answered.
    let silent: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(server.addr).unwrap())
        .collect();
    let third = server.get("/healthz");
    assert_eq!(third.status, 200);
    for mut stream in silent {
        stream.set_read_timeout(timeout).unwrap();
        assert_eq!(stream.read(&mut buffer).unwrap(), 0);
    }
}

#[test]
fn healthz_answers_head_as_well_as_get() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--token", "secret"]);
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    serve_support::write_request(&mut stream, "HEAD", "/healthz", &[], b"");
    let (status, _) = serve_support::read_head(&mut std::io::BufReader::new(stream));
    assert_eq!(status, 200);
}

#[test]
fn a_limit_given_with_the_call_applies() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let reply = server.post_json(
        "/v1/packages/fixture/call",
        &json!({"tool": "spin", "limits": {"timeout_ms": 200}}),
    );
    assert_eq!(reply.json()["crash"]["kind"], "timeout");
}

#[test]
fn module_loads_after_the_first_come_from_the_shared_cache() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    for _ in 0..3 {
        let reply = server.post_json(
            "/v1/packages/greet/call",
            &json!({"tool": "greet", "arguments": {"name": "x"}}),
        );
        assert_eq!(reply.json()["outcome"], "ok");
    }
    assert_eq!(
        server.metric("hako_module_loads_total{source=\"artifact\"}"),
        1.0
    );
    assert_eq!(
        server.metric("hako_module_loads_total{source=\"memory\"}"),
        2.0
    );
}

#[test]
fn the_module_cache_is_bounded_by_what_its_modules_weigh() {
    let store = serve_support::store();
    let calls = |server: &Server| {
        for (package, tool) in [("greet", "greet"), ("fixture", "echo"), ("greet", "greet")] {
            let reply = server.post_json(
                &format!("/v1/packages/{package}/call"),
                &json!({"tool": tool, "arguments": {"name": "x"}}),
            );
            assert_eq!(reply.status, 200, "{}", reply.text());
        }
    };
    // 0 MiB keeps one module, the last loaded: greet is loaded again after fixture's call.
    let server = Server::start(store.path(), &["--module-cache-mib", "0"]);
    calls(&server);
    let artifact = "hako_module_loads_total{source=\"artifact\"}";
    assert_eq!(server.metric(artifact), 3.0);
    assert_eq!(server.metric("hako_modules_loaded"), 1.0);
    // By default both stay, and the gauge weighs their two artifacts.
    let server = Server::start(store.path(), &[]);
    calls(&server);
    assert_eq!(server.metric(artifact), 2.0);
    assert_eq!(server.metric("hako_modules_loaded"), 2.0);
    let artifacts: u64 = std::fs::read_dir(store.path().join("artifacts"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum();
    assert!(
        (1.0..=artifacts as f64).contains(&server.metric("hako_module_cache_bytes")),
        "{} of {artifacts}",
        server.metric("hako_module_cache_bytes")
    );
}

#[test]
fn request_bodies_beyond_the_limit_are_refused_with_413() {
    let store = serve_support::store();
    let server = Server::start(
        store.path(),
        &["--max-body", "1024", "--max-upload", "2048"],
    );
    let big = json!({"tool": "greet", "arguments": {"name": "x".repeat(2000)}});
    assert_eq!(
        server.post_json("/v1/packages/greet/call", &big).status,
        413
    );
    let message =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(2000)}});
    assert_eq!(server.post_json("/mcp/greet", &message).status, 413);
    let upload = server.request("POST", "/v1/packages", &[], &vec![0u8; 4096]);
    assert_eq!(upload.status, 413);
    let small = json!({"tool": "greet", "arguments": {"name": "x"}});
    assert_eq!(
        server.post_json("/v1/packages/greet/call", &small).status,
        200
    );
}

#[test]
fn a_configured_token_is_required_exactly_except_for_health() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--token", "s3cret"]);
    assert_eq!(server.get("/v1/packages").status, 401);
    let wrong = server.request(
        "GET",
        "/v1/packages",
        &[("authorization", "Bearer s3cre")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    let basic = server.request(
        "GET",
        "/v1/packages",
        &[("authorization", "Basic s3cret")],
        b"",
    );
    assert_eq!(basic.status, 401);
    let right = server.request(
        "GET",
        "/v1/packages",
        &[("authorization", "Bearer s3cret")],
        b"",
    );
    assert_eq!(right.status, 200);
    assert_eq!(server.get("/healthz").status, 200);
    assert_eq!(server.get("/sse/greet").status, 401);
    assert_eq!(server.post_json("/mcp/greet", &json!({})).status, 401);
}

#[test]
fn the_token_may_come_from_the_environment() {
    let store = serve_support::store();
    let server = Server::start_with(store.path(), &[], &[("HAKO_TOKEN", "from-env")]);
    assert_eq!(server.get("/v1/packages").status, 401);
    let right = server.request(
        "GET",
        "/v1/packages",
        &[("authorization", "Bearer from-env")],
        b"",
    );
    assert_eq!(right.status, 200);
}

#[test]
fn a_foreign_origin_is_refused_unless_allowed() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--allow-origin", "https://app.example"]);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let with_origin = |origin: &str| {
        server
            .request("POST", "/mcp/greet", &[("origin", origin)], ping.as_bytes())
            .status
    };
    assert_eq!(with_origin("http://evil.example"), 403);
    assert_eq!(with_origin("http://localhost.evil.example"), 403);
    assert_eq!(with_origin("http://localhost:5173"), 200);
    assert_eq!(with_origin("http://127.0.0.1"), 200);
    assert_eq!(with_origin("http://[::1]:8080"), 200);
    assert_eq!(with_origin("https://app.example"), 200);
    assert_eq!(
        server
            .post_json(
                "/mcp/greet",
                &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
            )
            .status,
        200
    );
}

#[test]
fn a_public_address_without_a_token_is_refused_before_binding() {
    let store = empty_store();
    let output = serve_support::hako()
        .args(["serve", "--listen", "0.0.0.0:0", "--store"])
        .arg(store.path())
        .env_remove("HAKO_TOKEN")
        .env_remove("HAKO_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("without tokens"), "{stderr}");
    assert!(output.stdout.is_empty());
}

fn sleep_call(ms: u64) -> Value {
    json!({"tool": "sleep", "arguments": {"ms": ms}})
}

#[test]
fn zero_permits_front_end_threads_or_calls_is_a_usage_error_that_names_the_flag() {
    let store = serve_support::store();
    let refused = |flag: &str, value: &str| {
        let output = serve_support::hako()
            .args(["serve", "--store"])
            .arg(store.path())
            .args(["--listen", "127.0.0.1:0", flag, value])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    for flag in ["--workers", "--http-threads", "--max-calls"] {
        let stderr = refused(flag, "0");
        assert!(
            stderr.contains(&format!("{flag} must be at least 1")),
            "{stderr}"
        );
    }
    // A count past its bound is refused too, before any thread starts.
    for (flag, bound) in [
        ("--workers", "1024"),
        ("--http-threads", "1024"),
        ("--max-calls", "16384"),
    ] {
        let past = (bound.parse::<usize>().unwrap() + 1).to_string();
        for value in [past.as_str(), &usize::MAX.to_string()] {
            let stderr = refused(flag, value);
            assert!(stderr.contains(&format!("at most {bound}")), "{stderr}");
        }
    }
}

#[test]
fn beyond_the_calls_in_flight_calls_get_503_and_every_admitted_call_is_answered() {
    let store = serve_support::store();
    // One front-end thread: it still answers while the calls sleep. One package may hold
    // every call in flight here, so that the bound seen is the whole server's.
    let server = Server::start(
        store.path(),
        &[
            "--workers",
            "1",
            "--max-calls",
            "2",
            "--max-calls-per-package",
            "2",
            "--http-threads",
            "1",
        ],
    );
    let send = || serve_support::send(server.addr, "fixture", sleep_call(600));
    let sleeping = [send(), send()];
    server.wait_until("both calls sleep, holding no permit", |s| {
        s.metric("hako_calls_waiting") == 2.0
    });
    assert_eq!(server.metric("hako_calls_in_flight"), 2.0);
    let refused = server.post_json("/v1/packages/fixture/call", &sleep_call(1));
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.header("retry-after"), Some("1"));
    let mcp = server.post_json(
        "/mcp/greet",
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "greet", "arguments": {"name": "x"}}}),
    );
    assert_eq!(mcp.status, 503, "the bound is the whole server's");
    assert_eq!(mcp.header("retry-after"), Some("1"));
    assert_eq!(mcp.json()["error"]["code"], -32000);
    for call in sleeping {
        let reply = call.join().unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["outcome"], "ok");
    }
    assert_eq!(server.metric("hako_calls_rejected_total"), 2.0);
}

#[test]
fn one_package_holds_at_most_its_share_of_the_calls_in_flight_and_the_others_get_the_rest() {
    let store = serve_support::store();
    // Four calls in flight; one package's share, by default, three of them.
    let server = Server::start(store.path(), &["--max-calls", "4", "--http-threads", "1"]);
    let send = || serve_support::send(server.addr, "fixture", sleep_call(20_000));
    let _sleeping: Vec<_> = (0..3).map(|_| send()).collect();
    server.wait_until("three calls of the fixture sleep", |s| {
        s.metric("hako_calls_waiting") == 3.0
    });
    assert_eq!(server.metric("hako_calls_held"), 3.0);
    let fourth = server.post_json("/v1/packages/fixture/call", &sleep_call(20_000));
    assert_eq!(fourth.status, 503, "{}", fourth.text());
    assert_eq!(fourth.header("retry-after"), Some("1"));
    // Another package is answered meanwhile, through both doors.
    let greet = server.post_json(
        "/v1/packages/greet/call",
        &json!({"tool": "greet", "arguments": {"name": "B"}}),
    );
    assert_eq!(greet.status, 200, "{}", greet.text());
    assert_eq!(greet.json()["outcome"], "ok");
    // A call holds its place until its instance is given back, which may follow its answer.
    let settled = |s: &Server| s.metric("hako_calls_held") == 3.0;
    server.wait_until("greet's call is let go", settled);
    let mcp = server.post_json(
        "/mcp/greet",
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "greet", "arguments": {"name": "B"}}}),
    );
    assert_eq!(mcp.status, 200, "{}", mcp.text());
    server.wait_until("greet's second call is let go", settled);
    let fifth = server.post_json("/v1/packages/fixture/call", &sleep_call(1));
    assert_eq!(fifth.status, 503, "{}", fifth.text());
    assert_eq!(fifth.header("retry-after"), Some("1"));
    assert_eq!(server.metric("hako_calls_in_flight"), 3.0);
    assert_eq!(server.metric("hako_calls_rejected_total"), 2.0);
}

#[test]
fn a_share_past_the_calls_in_flight_is_a_usage_error() {
    let store = tempfile::tempdir().unwrap();
    let output = serve_support::hako()
        .args(["serve", "--store"])
        .arg(store.path())
        .args(["--max-calls", "4", "--max-calls-per-package", "5"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--max-calls-per-package must be at least 1 and at most 4"),
        "{stderr}"
    );
}

#[test]
fn sigterm_finishes_the_calls_in_flight_then_exits_zero() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let addr = server.addr;
    let body = sleep_call(500).to_string();
    let call = std::thread::spawn(move || {
        request(
            addr,
            "POST",
            "/v1/packages/fixture/call",
            &[],
            body.as_bytes(),
        )
    });
    server.wait_until("the call runs", |s| s.metric("hako_calls_in_flight") == 1.0);
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
    let reply = call.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["outcome"], "ok");
    assert_eq!(
        reply.json()["result"]["content"][0]["text"],
        r#"{"slept_ms":500}"#
    );
}

#[test]
fn a_version_uploaded_beside_the_server_is_what_the_next_request_sees() {
    // The server learns of changes to a package's `current` from the kernel instead of reading
    // it at every request; a `hako upload` run beside it must still be seen at once.
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let package = tempfile::tempdir().unwrap();
    let source = support::greet_package_dir();
    std::fs::copy(
        source.join("module.wasm"),
        package.path().join("module.wasm"),
    )
    .unwrap();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(source.join("subako-package.json")).unwrap())
            .unwrap();
    for round in 0..12 {
        let version = format!("2.{round}.0");
        let mut manifest = manifest.clone();
        manifest["version"] = version.as_str().into();
        std::fs::write(
            package.path().join("subako-package.json"),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .unwrap();
        serve_support::upload(store.path(), package.path());
        let shown = server.get("/v1/packages/greet");
        assert_eq!(shown.status, 200);
        assert_eq!(shown.json()["version"], version.as_str(), "round {round}");
        let called = server.post_json(
            "/v1/packages/greet/call",
            &json!({"tool": "greet", "arguments": {"name": "Ada"}}),
        );
        assert_eq!(called.status, 200, "round {round}");
    }
}

#[test]
fn a_guest_thread_makes_its_next_instance_ahead_within_the_operators_bound() {
    let store = serve_support::store();
    let greet = |server: &Server, limits: Value| -> bool {
        let reply = server.post_json(
            "/v1/packages/greet/call",
            &json!({"tool": "greet", "arguments": {"name": "x"}, "limits": limits}),
        );
        let outcome = reply.json();
        assert_eq!(outcome["outcome"], "ok", "{outcome}");
        assert_eq!(
            outcome["result"]["structuredContent"]["message"],
            "Hello, x!"
        );
        outcome["stats"]["ready"]
            .as_bool()
            .expect("stats.ready is a boolean")
    };
    let made_ahead = |server: &Server| {
        server.wait_until("an instance is made ahead", |server| {
            server.metric("hako_ready_instances") == 1.0
        });
    };
    // Every call on the one call thread: calls run on the front end's thread hold theirs there
    // (`serve_waits::quick_calls_on_the_front_end_run_on_instances_made_there`).
    let server = Server::start(store.path(), &["--workers", "1", "--no-inline"]);
    assert!(!greet(&server, json!({})), "the first call makes its own");
    made_ahead(&server);
    assert!(
        greet(&server, json!({})),
        "the second runs on the one made ahead"
    );
    made_ahead(&server);
    // Other limits than the instance was made for: the call makes its own, and the next
    // instance is made for the limits of this call.
    assert!(!greet(&server, json!({"memory_mib": 64})));
    made_ahead(&server);
    assert!(!greet(&server, json!({})));
    made_ahead(&server);
    assert!(greet(&server, json!({})));
    assert_eq!(server.metric("hako_calls_ready_total"), 2.0);
    made_ahead(&server);
    // Another package's call is never run on greet's instance.
    let reply = server.post_json(
        "/v1/packages/fixture/call",
        &json!({"tool": "echo", "arguments": {"said": "y"}}),
    );
    let outcome = reply.json();
    assert_eq!(outcome["outcome"], "ok", "{outcome}");
    assert_eq!(outcome["stats"]["ready"], false, "{outcome}");
    assert!(!outcome.to_string().contains("Hello"), "{outcome}");
    assert_eq!(server.metric("hako_calls_ready_total"), 2.0);
    // A call that followed another package's call makes nothing ahead (calls of many packages
    // in turn would drop each unused); the next call of the same package does.
    let echo = || {
        let reply = server.post_json(
            "/v1/packages/fixture/call",
            &json!({"tool": "echo", "arguments": {"said": "y"}}),
        );
        let outcome = reply.json();
        assert_eq!(outcome["outcome"], "ok", "{outcome}");
        outcome["stats"]["ready"].as_bool().unwrap()
    };
    assert!(
        !echo(),
        "nothing was made after the call that followed greet's"
    );
    assert!(
        echo(),
        "one was made after the call that followed its own package's"
    );

    // The operator's bound: none at all.
    let server = Server::start(store.path(), &["--workers", "1", "--ready-instances", "0"]);
    for _ in 0..3 {
        assert!(!greet(&server, json!({})));
    }
    assert_eq!(server.metric("hako_ready_instances"), 0.0);
    assert_eq!(server.metric("hako_calls_ready_total"), 0.0);

    // More than the call threads could hold is refused.
    let output = serve_support::hako()
        .args(["serve", "--store"])
        .arg(store.path())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--max-calls",
            "2",
            "--ready-instances",
            "3",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--ready-instances must be at most the 2 calls in flight"),
        "{stderr}"
    );
}
