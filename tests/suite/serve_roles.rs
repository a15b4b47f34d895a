//! Roles on `hako serve`, against a real server: every route with no token, a wrong one, an
//! agent token for the package, an agent token for another package, an agent token for every
//! package, and the admin token. An agent may not upload code or read the metrics; an agent
//! for some packages sees, lists and calls only those.

use serde_json::{json, Value};

use crate::serve_support::{self, EventStream, Server};
use crate::support;

const ADMIN: &str = "admin-secret-1";
const GREET_AGENT: &str = "greet-agent-secret";
const FIXTURE_AGENT: &str = "fixture-agent-secret";
const EVERY_AGENT: &str = "every-agent-secret";

/// The callers, with the `Authorization` header each sends.
const CALLERS: [(&str, Option<&str>); 6] = [
    ("no token", None),
    ("a wrong token", Some("Bearer not-a-token")),
    ("the package's agent", Some("Bearer greet-agent-secret")),
    (
        "another package's agent",
        Some("Bearer fixture-agent-secret"),
    ),
    ("the admin", Some("Bearer admin-secret-1")),
    (
        "an agent for every package",
        Some("Bearer every-agent-secret"),
    ),
];

fn start(store: &std::path::Path) -> (Server, tempfile::TempDir) {
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(secrets.path().join("admin"), format!("{ADMIN}\n")).unwrap();
    std::fs::write(secrets.path().join("greet"), GREET_AGENT).unwrap();
    let tokens = secrets.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        r#"
[[tokens]]
role = "admin"
value_file = "admin"

[[tokens]]
role = "agent"
value_file = "greet"
packages = ["gr*"]

[[tokens]]
role = "agent"
value_env = "HAKO_FIXTURE_AGENT"
packages = ["fixture"]
"#,
    )
    .unwrap();
    let server = Server::start_with(
        store,
        &["--tokens", support::arg(&tokens), "--token", EVERY_AGENT],
        &[("HAKO_FIXTURE_AGENT", FIXTURE_AGENT)],
    );
    (server, secrets)
}

#[test]
fn every_route_answers_each_role_as_it_may() {
    let store = serve_support::store();
    let (server, _secrets) = start(store.path());
    let archive = support::archive_of(&support::greet_package_dir());
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let call = json!({"tool": "greet", "arguments": {"name": "x"}}).to_string();
    // A session for greet, opened by the admin, for the session route.
    let mut session = EventStream::open_with(
        server.addr,
        "/sse/greet",
        &[("authorization", &format!("Bearer {ADMIN}"))],
    );
    assert_eq!(session.status, 200);
    let (_, endpoint) = session.next_event();

    // Each route, and its status for each caller of CALLERS, in order.
    type Route<'a> = (&'a str, &'a str, &'a str, &'a [u8], [u16; 6]);
    let json = "application/json";
    #[rustfmt::skip]
    let routes: [Route; 11] = [
        ("GET", "/healthz", "", b"", [200, 200, 200, 200, 200, 200]),
        ("GET", "/metrics", "", b"", [401, 401, 403, 403, 200, 403]),
        ("POST", "/v1/packages", "", &archive, [401, 401, 403, 403, 200, 403]),
        ("GET", "/v1/packages", "", b"", [401, 401, 200, 200, 200, 200]),
        ("GET", "/v1/packages/greet", "", b"", [401, 401, 200, 403, 200, 200]),
        // Scopes come first: an agent cannot tell a package it may not use from none.
        ("GET", "/v1/packages/nothing", "", b"", [401, 401, 403, 403, 404, 404]),
        ("POST", "/v1/packages/greet/call", json, call.as_bytes(), [401, 401, 200, 403, 200, 200]),
        ("POST", "/mcp/greet", json, ping.as_bytes(), [401, 401, 200, 403, 200, 200]),
        ("POST", "/message/greet", json, ping.as_bytes(), [401, 401, 200, 403, 200, 200]),
        ("POST", &endpoint, json, ping.as_bytes(), [401, 401, 202, 403, 202, 202]),
        ("SSE", "/sse/greet", "", b"", [401, 401, 200, 403, 200, 200]),
    ];
    let mut wrong = Vec::new();
    for (method, path, content_type, body, expected) in routes {
        for ((caller, authorization), want) in CALLERS.iter().zip(expected) {
            let mut headers = Vec::new();
            if let Some(value) = authorization {
                headers.push(("authorization", *value));
            }
            if !content_type.is_empty() {
                headers.push(("content-type", content_type));
            }
            let (status, www_authenticate) = if method == "SSE" {
                let stream = EventStream::open_with(server.addr, path, &headers);
                let challenge = stream
                    .headers
                    .iter()
                    .any(|(name, _)| name.eq_ignore_ascii_case("www-authenticate"));
                (stream.status, challenge)
            } else {
                let reply = server.request(method, path, &headers, body);
                (reply.status, reply.header("www-authenticate").is_some())
            };
            if status != want || (status == 401) != www_authenticate {
                wrong.push(format!(
                    "{method} {path} by {caller}: {status} (challenge: {www_authenticate}), \
                     expected {want}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn an_agent_lists_only_the_packages_it_may_use() {
    let store = serve_support::store();
    let (server, _secrets) = start(store.path());
    let listed = |token: &str| -> Vec<String> {
        let reply = server.request(
            "GET",
            "/v1/packages",
            &[("authorization", &format!("Bearer {token}"))],
            b"",
        );
        assert_eq!(reply.status, 200, "{}", reply.text());
        reply.json()["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|package| package["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(GREET_AGENT), ["greet"]);
    assert_eq!(listed(FIXTURE_AGENT), ["fixture"]);
    assert_eq!(listed(EVERY_AGENT), ["fixture", "greet"]);
    assert_eq!(listed(ADMIN), ["fixture", "greet"]);
    // A refusal says what the token lacks, and never a token.
    let reply = server.request(
        "POST",
        "/mcp/greet",
        &[("authorization", &format!("Bearer {FIXTURE_AGENT}"))],
        b"{}",
    );
    assert_eq!(reply.status, 403);
    let text = reply.text();
    assert!(
        text.contains("may not use the package \\\"greet\\\""),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
}

#[test]
fn a_bad_tokens_file_stops_the_server_before_it_listens() {
    let store = tempfile::tempdir().unwrap();
    let tokens = store.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        "[[tokens]]\nrole = \"agent\"\nvalue_env = \"HAKO_UNSET_FOR_THIS_TEST\"\n",
    )
    .unwrap();
    let output = serve_support::hako()
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(store.path())
        .args(["--tokens", support::arg(&tokens)])
        .env_remove("HAKO_UNSET_FOR_THIS_TEST")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("entry 1: the token is not available"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing listened");
}

#[test]
fn the_admin_token_may_come_from_the_environment_and_an_agent_may_not_upload() {
    let store = serve_support::store();
    let server = Server::start_with(
        store.path(),
        &[],
        &[
            ("HAKO_ADMIN_TOKEN", "env-admin"),
            ("HAKO_TOKEN", "env-agent"),
        ],
    );
    let metrics = |token: &str| {
        server
            .request(
                "GET",
                "/metrics",
                &[("authorization", &format!("Bearer {token}"))],
                b"",
            )
            .status
    };
    assert_eq!(metrics("env-admin"), 200);
    assert_eq!(metrics("env-agent"), 403);
    let upload = server.request(
        "POST",
        "/v1/packages",
        &[("authorization", "Bearer env-agent")],
        &support::archive_of(&support::greet_package_dir()),
    );
    assert_eq!(upload.status, 403);
    let body: Value = upload.json();
    assert!(body.to_string().contains("upload packages"), "{body}");
}
