//! Serving that waits on nothing, through `hako serve` with real sockets and real guests: calls
//! that sleep or wait on the broker's HTTPS answer hold no run permit, so many of them run at
//! once beside one permit; a quick call of one package is answered while another package's
//! call computes; a package's calls past its permits wait in its own line, and a call that
//! waits there past its time limit ends as `timeout`; the bound on calls in flight answers
//! 503 (in `serve_api`); SIGTERM drains every waiting call.

use crate::serve_support::{self, send, Reply, Server};
use crate::support::https::TestServer;

use serde_json::{json, Value};
use std::thread::JoinHandle;

/// `count` calls of the fixture's `sleep` for `ms`, each on a thread of its own, once all of
/// them sleep at once (the server's gauge says so).
fn sleeping(server: &Server, count: usize, ms: u64) -> Vec<JoinHandle<Reply>> {
    let calls = (0..count)
        .map(|_| {
            send(
                server.addr,
                "fixture",
                json!({"tool": "sleep", "arguments": {"ms": ms}}),
            )
        })
        .collect();
    server.wait_until("every call sleeps at once", |s| {
        s.metric("hako_calls_waiting") == count as f64
    });
    calls
}

fn outcome(reply: Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

#[test]
fn many_sleeping_calls_run_at_once_beside_one_permit() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--workers", "1"]);
    // All 32 sleep at the same time: with calls tied to threads, one would.
    let sleepers = sleeping(&server, 32, 1500);
    assert_eq!(server.metric("hako_calls_running"), 0.0);
    // Another package's quick call goes through meanwhile.
    let greet = outcome(server.post_json(
        "/v1/packages/greet/call",
        &json!({"tool": "greet", "arguments": {"name": "Ada"}}),
    ));
    assert_eq!(greet["outcome"], "ok", "{greet}");
    for sleeper in sleepers {
        let done = outcome(sleeper.join().unwrap());
        assert_eq!(done["outcome"], "ok", "{done}");
        assert!(
            done["stats"]["wait_us"].as_u64().unwrap() >= 1_500_000,
            "{done}"
        );
    }
    assert_eq!(server.metric("hako_calls_waiting"), 0.0);
}

/// A local HTTPS server, and a server with one run slot whose policy lets the fixture reach it
/// (the policy's folder is kept alive beside them).
fn serving_with_https() -> (TestServer, Server, tempfile::TempDir, tempfile::TempDir) {
    let https = TestServer::start();
    let conf = tempfile::tempdir().unwrap();
    https.write_ca(&conf.path().join("test-ca.pem"));
    let policy = conf.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[tls]\nextra_ca_files = [\"test-ca.pem\"]\n\n\
             [packages.fixture]\nallow_hosts = [\"localhost:{}\"]\ntrust_private = [\"localhost\"]\n",
            https.port
        ),
    )
    .unwrap();
    let store = serve_support::store();
    let server = Server::start(
        store.path(),
        &["--workers", "1", "--policy", policy.to_str().unwrap()],
    );
    (https, server, conf, store)
}

#[test]
fn calls_waiting_on_the_brokers_https_answers_run_at_once() {
    let (https, server, _conf, _store) = serving_with_https();
    let url = format!("{}/delay/1500", https.base("localhost"));
    let waiters: Vec<_> = (0..16)
        .map(|_| {
            send(
                server.addr,
                "fixture",
                json!({"tool": "http", "arguments": {"request": {"url": url}}}),
            )
        })
        .collect();
    server.wait_until("every call waits on its answer at once", |s| {
        s.metric("hako_calls_waiting") == 16.0
    });
    for waiter in waiters {
        let done = outcome(waiter.join().unwrap());
        assert_eq!(done["outcome"], "ok", "{done}");
        let answer: Value =
            serde_json::from_str(done["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(answer["ok"]["status"], 200, "{answer}");
        assert_eq!(answer["ok"]["body"]["text"], "after 1500 ms", "{answer}");
    }
}

#[test]
fn a_quick_call_is_answered_while_another_packages_call_computes() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--workers", "1"]);
    let spin = json!({"tool": "spin", "limits": {"timeout_ms": 4000}});
    let spinning = send(server.addr, "fixture", spin.clone());
    server.wait_until("the loop runs", |s| s.metric("hako_calls_running") == 1.0);
    // greet has a permit of its own: it is answered while the loop still runs.
    let greet = outcome(server.post_json(
        "/v1/packages/greet/call",
        &json!({"tool": "greet", "arguments": {"name": "Ada"}}),
    ));
    assert_eq!(greet["outcome"], "ok", "{greet}");
    assert_eq!(
        server.metric("hako_calls_in_flight"),
        1.0,
        "the loop still runs"
    );
    // The same package's next call waits in its package's line.
    let echo = send(
        server.addr,
        "fixture",
        json!({"tool": "echo", "arguments": {"said": "x"}}),
    );
    server.wait_until("the echo waits for the loop's permit", |s| {
        s.metric("hako_calls_queued") == 1.0
    });
    let spun = outcome(spinning.join().unwrap());
    assert_eq!(spun["crash"]["kind"], "timeout", "{spun}");
    let echoed = outcome(echo.join().unwrap());
    assert_eq!(echoed["outcome"], "ok", "{echoed}");
    assert!(
        echoed["stats"]["queue_us"].as_u64().unwrap() > 0,
        "{echoed}"
    );
    let metrics = server.get("/metrics").text();
    assert!(
        metrics.contains("hako_package_calls_total{package=\"fixture\",outcome=\"crashed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hako_package_calls_total{package=\"greet\",outcome=\"ok\"} 1"),
        "{metrics}"
    );
}

#[test]
fn a_call_waiting_in_its_packages_line_past_its_limit_ends_as_timeout() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--workers", "1"]);
    let spinning = send(
        server.addr,
        "fixture",
        json!({"tool": "spin", "limits": {"timeout_ms": 3000}}),
    );
    server.wait_until("the loop runs", |s| s.metric("hako_calls_running") == 1.0);
    let late = outcome(server.post_json(
        "/v1/packages/fixture/call",
        &json!({"tool": "echo", "arguments": {}, "limits": {"timeout_ms": 200}}),
    ));
    assert_eq!(late["outcome"], "crashed", "{late}");
    assert_eq!(late["crash"]["kind"], "timeout", "{late}");
    assert!(
        late["crash"]["message"]
            .as_str()
            .unwrap()
            .contains("waited in line for a run slot past its time limit of 200 ms"),
        "{late}"
    );
    assert_eq!(
        outcome(spinning.join().unwrap())["crash"]["kind"],
        "timeout"
    );
}

#[test]
fn a_sleeping_call_still_ends_at_its_time_limit() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let slept = outcome(server.post_json(
        "/v1/packages/fixture/call",
        &json!({"tool": "sleep", "arguments": {"ms": 20000}, "limits": {"timeout_ms": 300}}),
    ));
    assert_eq!(slept["crash"]["kind"], "timeout", "{slept}");
    assert_eq!(server.metric("hako_calls_waiting"), 0.0);
    assert_eq!(server.metric("hako_calls_in_flight"), 0.0);
}

#[test]
fn sigterm_answers_every_waiting_call_before_the_exit() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--workers", "1"]);
    let sleepers = sleeping(&server, 8, 800);
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
    for sleeper in sleepers {
        let done = outcome(sleeper.join().unwrap());
        assert_eq!(done["outcome"], "ok", "{done}");
    }
}

#[test]
fn every_call_leaves_one_access_record_naming_its_package_door_and_outcome() {
    let store = serve_support::store();
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let server = Server::start_logging(
        store.path(),
        &["--log-format", "json"],
        &[("HAKO_LOG", "warn,hako::access=info")],
        log,
    );
    let mcp = server.post_json(
        "/mcp/greet",
        &json!({"jsonrpc": "2.0", "id": "r-7", "method": "tools/call", "params": {"name": "greet", "arguments": {"name": "Ada"}}}),
    );
    assert_eq!(mcp.status, 200, "{}", mcp.text());
    let trap = outcome(server.post_json(
        "/v1/packages/fixture/call",
        &json!({"tool": "trap", "arguments": {}}),
    ));
    assert_eq!(trap["crash"]["kind"], "trap", "{trap}");
    let slept = outcome(server.post_json(
        "/v1/packages/fixture/call",
        &json!({"tool": "sleep", "arguments": {"ms": 50}}),
    ));
    assert_eq!(slept["outcome"], "ok", "{slept}");
    assert_eq!(server.terminate().code(), Some(0));
    let records: Vec<Value> = std::fs::read_to_string(&log_path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .filter(|line: &Value| line["target"] == "hako::access")
        .map(|line| line["fields"].clone())
        .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    let greet = &records[0];
    assert_eq!(greet["package"], "greet", "{greet}");
    assert_eq!(greet["tool"], "greet");
    assert_eq!(greet["door"], "mcp");
    assert_eq!(greet["caller"], "anyone");
    assert_eq!(greet["rpc_id"], "\"r-7\"");
    assert_eq!(greet["outcome"], "ok");
    assert!(
        greet["version"].is_string() && greet["call"] == 1,
        "{greet}"
    );
    let trap = &records[1];
    assert_eq!(
        (&trap["door"], &trap["outcome"], &trap["kind"]),
        (&json!("api"), &json!("crashed"), &json!("trap"))
    );
    let sleep = &records[2];
    assert!(sleep["wait_ms"].as_f64().unwrap() >= 50.0, "{sleep}");
    assert!(
        sleep["total_ms"].as_f64().unwrap() >= sleep["wait_ms"].as_f64().unwrap(),
        "{sleep}"
    );
}

/// The fixture's answer to a call of the operator API.
fn call_fixture(server: &Server, body: Value) -> Value {
    outcome(server.post_json("/v1/packages/fixture/call", &body))
}

/// The calls answered `ok` so far.
fn ok_calls(server: &Server) -> f64 {
    server.metric("hako_calls_total{outcome=\"ok\"}")
}

/// Calls the fixture's `echo` until one is answered on the front end's thread: a package earns
/// that by quick calls on call threads (its first, which loads the module, may not be one).
fn earn_inline(server: &Server) {
    for _ in 0..20 {
        let echoed = call_fixture(server, json!({"tool": "echo", "arguments": {"said": "x"}}));
        assert_eq!(echoed["outcome"], "ok", "{echoed}");
        if server.metric("hako_calls_inline_total") >= 1.0 {
            return;
        }
    }
    panic!("twenty quick calls and none ran on the front end's thread");
}

#[test]
fn a_call_on_the_front_end_that_waits_on_the_broker_is_moved_before_it_sends_anything() {
    let (https, server, _conf, _store) = serving_with_https();
    earn_inline(&server);
    let ok_before = ok_calls(&server);
    let url = format!("{}/delay/50", https.base("localhost"));
    let fetched = call_fixture(
        &server,
        json!({"tool": "http", "arguments": {"request": {"url": url}}}),
    );
    assert_eq!(fetched["outcome"], "ok", "{fetched}");
    let answer: Value =
        serde_json::from_str(fetched["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(answer["ok"]["body"]["text"], "after 50 ms", "{answer}");
    assert_eq!(server.metric("hako_calls_moved_total"), 1.0);
    // Moved before the request was judged or sent: the HTTPS server saw it once, from the run
    // on the call thread.
    assert_eq!(https.seen().len(), 1, "{:?}", https.seen());
    // The package lost its place on the front end: its next call runs on a call thread.
    let inline = server.metric("hako_calls_inline_total");
    let echoed = call_fixture(&server, json!({"tool": "echo", "arguments": {"said": "y"}}));
    assert_eq!(echoed["outcome"], "ok", "{echoed}");
    assert_eq!(server.metric("hako_calls_inline_total"), inline);
    // The moved call counted once, as the echo after it.
    assert_eq!(ok_calls(&server), ok_before + 2.0);
}

#[test]
fn a_call_on_the_front_end_that_sleeps_is_moved_and_sleeps_on_a_call_thread() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--workers", "1"]);
    earn_inline(&server);
    let calls_before = ok_calls(&server);
    let slept = call_fixture(&server, json!({"tool": "sleep", "arguments": {"ms": 100}}));
    assert_eq!(slept["outcome"], "ok", "{slept}");
    assert!(
        slept["stats"]["wait_us"].as_u64().unwrap() >= 100_000,
        "{slept}"
    );
    assert_eq!(server.metric("hako_calls_moved_total"), 1.0);
    // Counted once: the run that was moved is not a call of its own.
    assert_eq!(ok_calls(&server), calls_before + 1.0);
}

#[test]
fn a_call_on_the_front_end_whose_module_is_out_of_memory_is_moved_before_it_loads() {
    let store = serve_support::store();
    // Memory for one module: a call of greet puts the fixture's out of it.
    let server = Server::start(store.path(), &["--workers", "1", "--module-cache-mib", "0"]);
    let greet = || {
        let greeted = outcome(server.post_json(
            "/v1/packages/greet/call",
            &json!({"tool": "greet", "arguments": {"name": "Ada"}}),
        ));
        assert_eq!(greeted["outcome"], "ok", "{greeted}");
    };
    // Greet's first load writes its artifact's record into the store, which the server sees as
    // a change, and reads its packages again (their front-end credit with them): it happens
    // before the fixture earns the front end.
    greet();
    earn_inline(&server);
    let inline = server.metric("hako_calls_inline_total");
    greet();
    // The fixture's calls run on the front end, but a load reads and hashes its artifact (or
    // compiles): the call is moved before it loads, and loads and answers on a call thread.
    let echoed = call_fixture(
        &server,
        json!({"tool": "echo", "arguments": {"said": "back"}}),
    );
    assert_eq!(echoed["outcome"], "ok", "{echoed}");
    // Not answered on the front end, where its load would have run: moved (or, when the server
    // read its packages again meanwhile, their credit with them, started on a call thread).
    assert_eq!(server.metric("hako_calls_inline_total"), inline);
    assert!(server.metric("hako_calls_moved_total") <= 1.0);
}

#[test]
fn a_call_on_the_front_end_past_its_slice_is_moved_and_ends_at_its_own_limit_from_its_first_start()
{
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--workers", "1"]);
    earn_inline(&server);
    let spun = call_fixture(
        &server,
        json!({"tool": "spin", "limits": {"timeout_ms": 400}}),
    );
    assert_eq!(spun["outcome"], "crashed", "{spun}");
    assert_eq!(spun["crash"]["kind"], "timeout", "{spun}");
    assert_eq!(
        spun["crash"]["message"], "the call ran past its time limit of 400 ms",
        "{spun}"
    );
    assert_eq!(server.metric("hako_calls_moved_total"), 1.0);
    // The limit counts from the call's first start: the second run had what the first (a
    // slice of 10 ms or more) left of it, not the whole 400 ms again.
    let second_run_us = spun["stats"]["run_us"].as_u64().unwrap();
    assert!(second_run_us < 400_000, "{spun}");
}

#[test]
fn a_call_on_the_front_end_that_computes_for_half_a_slice_sends_the_next_to_a_call_thread() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--workers", "1"]);
    earn_inline(&server);
    let inline = server.metric("hako_calls_inline_total");
    // A loop ended by its own 7 ms limit, within the 10 ms slice: answered where it ran.
    let spun = call_fixture(
        &server,
        json!({"tool": "spin", "limits": {"timeout_ms": 7}}),
    );
    assert_eq!(spun["crash"]["kind"], "timeout", "{spun}");
    assert_eq!(server.metric("hako_calls_inline_total"), inline + 1.0);
    assert_eq!(server.metric("hako_calls_moved_total"), 0.0);
    let echoed = call_fixture(&server, json!({"tool": "echo", "arguments": {"said": "z"}}));
    assert_eq!(echoed["outcome"], "ok", "{echoed}");
    assert_eq!(
        server.metric("hako_calls_inline_total"),
        inline + 1.0,
        "the call after it ran on a call thread"
    );
}

#[test]
fn quick_calls_on_the_front_end_run_on_instances_made_there() {
    let store = serve_support::store();
    // One front-end thread: each call runs where the last one left its instance ahead.
    let server = Server::start(store.path(), &["--workers", "1", "--http-threads", "1"]);
    earn_inline(&server);
    let inline = server.metric("hako_calls_inline_total");
    let ready = server.metric("hako_calls_ready_total");
    for said in ["a", "b", "c"] {
        let echoed = call_fixture(
            &server,
            json!({"tool": "echo", "arguments": {"said": said}}),
        );
        assert_eq!(echoed["outcome"], "ok", "{echoed}");
        assert_eq!(echoed["stats"]["ready"], true, "{echoed}");
    }
    assert_eq!(server.metric("hako_calls_inline_total"), inline + 3.0);
    assert_eq!(server.metric("hako_calls_ready_total"), ready + 3.0);
    assert_eq!(server.metric("hako_calls_moved_total"), 0.0);
}
