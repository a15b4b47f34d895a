//! The real broker as guests reach it: the fixture's `http` tool sends through the real
//! `subako_http` imports on every compiler, and `hako call --allow-host … --policy FILE`
//! fetches a page from an HTTPS server the test starts on loopback, trusting its test CA
//! through the policy's `extra_ca_files`.

use crate::support;

use std::net::IpAddr;
use std::sync::Arc;

use hako::call::VolumeTmp;
use hako::http::{HyperBroker, PackagePolicy, Policy, StaticResolver};
use serde_json::{json, Value};
use support::host::Call;
use support::https::TestServer;

fn broker(server: &TestServer) -> Arc<HyperBroker> {
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    let resolver = StaticResolver::new().with("api.test", &[loopback]);
    Arc::new(HyperBroker::with_roots(server.roots(), Arc::new(resolver)).unwrap())
}

fn policy(server: &TestServer) -> PackagePolicy {
    let text = format!(
        "[packages.fixture]\nallow_hosts = [\"api.test:{}\"]\ntrust_private = [\"api.test\"]\n",
        server.port
    );
    Policy::from_toml(&text, std::path::Path::new("."))
        .unwrap()
        .for_package("fixture", &[])
        .unwrap()
}

fn http(server: &TestServer, request: Value) -> Call {
    Call::new("http")
        .args(json!({"request": request}))
        .broker(broker(server))
        .policy(policy(server))
}

#[test]
fn a_guest_gets_a_real_response_through_the_imports() {
    let server = TestServer::start();
    let answer = http(
        &server,
        json!({"method": "POST", "url": format!("{}/echo", server.base("api.test")),
               "body": {"type": "json", "json": {"order": 1042}}}),
    )
    .answer_json();
    assert_eq!(answer["ok"]["status"], 200, "{answer}");
    assert_eq!(answer["ok"]["headers"]["content-type"], "application/json");
    let echoed: Value =
        serde_json::from_str(answer["ok"]["body"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["body"], r#"{"order":1042}"#);
    assert!(server.seen().iter().all(|seen| seen.path == "/echo"));
}

#[test]
fn a_guest_sees_forbidden_destinations_and_timeouts_as_error_answers() {
    let server = TestServer::start();
    let port = server.port;
    let literal = http(
        &server,
        json!({"url": format!("https://127.0.0.1:{port}/echo")}),
    )
    .policy(
        Policy::empty()
            .for_package("fixture", &[format!("127.0.0.1:{port}")])
            .unwrap(),
    )
    .answer_json();
    assert_eq!(literal["error"]["kind"], "forbidden_destination");
    let slow = http(
        &server,
        json!({"url": format!("{}/slow", server.base("api.test")), "timeout_ms": 200}),
    )
    .answer_json();
    assert_eq!(slow["error"]["kind"], "timeout");
}

#[test]
fn a_file_output_lands_in_the_volume_and_spends_the_calls_write_budget() {
    let server = TestServer::start();
    let volume = tempfile::tempdir().unwrap();
    let request = json!({
        "url": format!("{}/big/5000", server.base("api.test")),
        "output": {"type": "file", "path": "/volume/tmp/page.txt"},
    });
    let given = volume.path().to_path_buf();
    let saved = http(&server, request.clone())
        .mounts(|mounts| mounts.volume_tmp = VolumeTmp::Given(given.clone()))
        .answer_json();
    assert_eq!(saved["ok"]["body"]["bytes"], 5000, "{saved}");
    assert_eq!(
        std::fs::read(volume.path().join("page.txt")).unwrap().len(),
        5000
    );

    let refused = http(&server, request)
        .limits(|limits| limits.write_budget = 4000)
        .answer_json();
    assert_eq!(refused["error"]["kind"], "write_budget");
}

#[test]
fn hako_call_fetches_a_page_from_a_loopback_server() {
    let server = TestServer::start();
    let store = tempfile::tempdir().unwrap();
    let fixture = support::fixture_package("fixture", None);
    let conf = tempfile::tempdir().unwrap();
    server.write_ca(&conf.path().join("test-ca.pem"));
    let policy = conf.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[tls]\nextra_ca_files = [\"test-ca.pem\"]\n\n\
         [packages.fixture]\ntrust_private = [\"localhost\"]\n",
    )
    .unwrap();
    let request = json!({"request": {"url": format!("{}/chain/2", server.base("localhost"))}});
    let output = support::hako_command()
        .arg("call")
        .arg(fixture.path())
        .arg("http")
        .arg(request.to_string())
        .arg("--allow-host")
        .arg(format!("localhost:{}", server.port))
        .arg("--policy")
        .arg(&policy)
        .env("HAKO_STORE", store.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(answer["ok"]["status"], 200, "{answer}");
    assert_eq!(answer["ok"]["body"]["text"], "end of chain");
    assert_eq!(server.seen().len(), 3);
}
