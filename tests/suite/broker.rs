//! The real broker against an HTTPS server the test starts on loopback (a generated test CA),
//! driven through the `subako_http` imports as a guest would: every method, body and output
//! form, redirects, timeouts, limits, credentials, forbidden destinations and every error
//! kind. Names resolve through a fixed resolver: `api.test` and `other.test` to 127.0.0.1
//! (trusted in the policy), `inside.test` to 127.0.0.1 and `mapped.test` to ::ffff:127.0.0.1
//! (not trusted), so nothing leaves the machine.

use crate::support;

use std::net::IpAddr;
use std::sync::Arc;

use hako::http::{HttpImports, HyperBroker, Policy, StaticResolver, VolumeDirs, VolumeRoot};
use hako::sandbox::{Cancel, WriteBudget};
use serde_json::{json, Value};
use support::https::{closed_port, TestServer};

struct Env {
    server: TestServer,
    broker: Arc<HyperBroker>,
    volume: tempfile::TempDir,
    policy_dir: tempfile::TempDir,
}

fn resolver() -> StaticResolver {
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    StaticResolver::new()
        .with("api.test", &[loopback])
        .with("other.test", &[loopback])
        .with("inside.test", &[loopback])
        .with("mapped.test", &["::ffff:127.0.0.1".parse().unwrap()])
}

impl Env {
    fn start() -> Env {
        let server = TestServer::start();
        let broker = HyperBroker::with_roots(server.roots(), Arc::new(resolver())).unwrap();
        Env {
            server,
            broker: Arc::new(broker),
            volume: tempfile::tempdir().unwrap(),
            policy_dir: tempfile::tempdir().unwrap(),
        }
    }

    fn url(&self, name: &str, path: &str) -> String {
        format!("{}{path}", self.server.base(name))
    }

    /// The policy: api.test and other.test allowed and trusted, inside.test and mapped.test
    /// allowed only, plus `extra` TOML lines for the package.
    fn policy_text(&self, extra: &str) -> String {
        let port = self.server.port;
        format!(
            "[packages.p]\nallow_hosts = [\"api.test:{port}\", \"other.test:{port}\", \
             \"inside.test:{port}\", \"mapped.test:{port}\", \"127.0.0.1:{port}\"]\n\
             trust_private = [\"api.test\", \"other.test\"]\n{extra}"
        )
    }

    fn imports(&self, extra_policy: &str, budget: u64) -> HttpImports {
        let policy = Policy::from_toml(&self.policy_text(extra_policy), self.policy_dir.path())
            .unwrap()
            .for_package("p", &[])
            .unwrap();
        HttpImports::new(
            Arc::new(policy),
            self.broker.clone(),
            Arc::new(WriteBudget::new(budget)),
            None,
        )
        .with_volume(VolumeDirs {
            tmp: Some(VolumeRoot::existing(self.volume.path().to_path_buf())),
            data: None,
        })
    }

    fn send(&self, request: Value) -> Value {
        exchange(&mut self.imports("", 1 << 30), &request).0
    }
}

/// Runs `request` through `http` and returns the answer, parsed and as raw text.
fn exchange(http: &mut HttpImports, request: &Value) -> (Value, String) {
    let bytes = serde_json::to_vec(request).unwrap();
    let mut memory = vec![0u8; 2 << 20];
    memory[..bytes.len()].copy_from_slice(&bytes);
    let len = http.request(0, bytes.len() as u32, &mut memory);
    assert!(len > 0, "request returned {len}");
    assert_eq!(http.read_response(1 << 20, len as u32, &mut memory), 0);
    let raw = &memory[1 << 20..(1 << 20) + len as usize];
    (
        serde_json::from_slice(raw).unwrap(),
        String::from_utf8(raw.to_vec()).unwrap(),
    )
}

fn kind(answer: &Value) -> &str {
    answer["error"]["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error answer: {answer}"))
}

fn message(answer: &Value) -> &str {
    answer["error"]["message"].as_str().unwrap()
}

fn encoded(url: &str) -> String {
    percent_encoding::utf8_percent_encode(url, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[test]
fn every_method_reaches_the_server() {
    let env = Env::start();
    for method in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        let answer = env.send(json!({"method": method, "url": env.url("api.test", "/echo")}));
        assert_eq!(answer["ok"]["status"], 200, "{method}: {answer}");
        let text = answer["ok"]["body"]["text"].as_str().unwrap();
        if method == "HEAD" {
            assert_eq!(text, "");
        } else {
            let echoed: Value = serde_json::from_str(text).unwrap();
            assert_eq!(echoed["method"], method);
        }
    }
    let methods: Vec<String> = env.server.seen().into_iter().map(|s| s.method).collect();
    assert_eq!(
        methods,
        ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    );
}

#[test]
fn the_default_method_is_get_and_guest_headers_arrive_without_connection_headers() {
    let env = Env::start();
    let answer = env.send(json!({
        "url": env.url("api.test", "/echo?x=1"),
        "headers": {"accept": "application/json", "x-trace": "abc", "connection": "close", "te": "trailers"},
    }));
    assert_eq!(answer["ok"]["status"], 200);
    let seen = &env.server.seen()[0];
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.path, "/echo?x=1");
    assert_eq!(seen.header("accept"), Some("application/json"));
    assert_eq!(seen.header("x-trace"), Some("abc"));
    assert_eq!(seen.header("te"), None);
    assert_eq!(seen.header("connection"), None);
}

#[test]
fn text_json_and_file_bodies_are_sent() {
    let env = Env::start();
    env.send(
        json!({"method": "POST", "url": env.url("api.test", "/echo"),
                    "body": {"type": "text", "text": "plain words"}}),
    );
    env.send(json!({"method": "PUT", "url": env.url("api.test", "/echo"),
                    "body": {"type": "json", "json": {"order": 1042}}}));
    std::fs::write(env.volume.path().join("in.bin"), [0u8, 159, 146, 150]).unwrap();
    env.send(
        json!({"method": "POST", "url": env.url("api.test", "/echo"),
                    "headers": {"content-type": "application/octet-stream"},
                    "body": {"type": "file", "path": "/volume/tmp/in.bin"}}),
    );
    let seen = env.server.seen();
    assert_eq!(seen[0].body, b"plain words");
    assert_eq!(seen[0].header("content-type"), None);
    assert_eq!(seen[1].body, br#"{"order":1042}"#);
    assert_eq!(seen[1].header("content-type"), Some("application/json"));
    assert_eq!(seen[2].body, [0u8, 159, 146, 150]);
    assert_eq!(
        seen[2].header("content-type"),
        Some("application/octet-stream")
    );
}

#[test]
fn response_headers_are_lower_case_and_repeated_ones_joined() {
    let env = Env::start();
    let answer = env.send(json!({"url": env.url("api.test", "/headers")}));
    let headers = &answer["ok"]["headers"];
    assert_eq!(headers["vary"], "accept, origin");
    assert_eq!(headers["x-custom-name"], "Kept As Is");
    assert_eq!(answer["ok"]["body"], json!({"type": "inline", "text": ""}));
}

#[test]
fn a_status_other_than_200_is_an_ok_answer() {
    let env = Env::start();
    let answer = env.send(json!({"url": env.url("api.test", "/status/418")}));
    assert_eq!(answer["ok"]["status"], 418);
    let answer = env.send(json!({"url": env.url("api.test", "/nowhere")}));
    assert_eq!(answer["ok"]["status"], 404);
}

#[test]
fn a_body_over_256_kib_is_too_large_inline_and_saved_whole_to_a_file() {
    let env = Env::start();
    let size = 256 * 1024 + 1;
    let answer = env.send(json!({"url": env.url("api.test", &format!("/big/{size}"))}));
    assert_eq!(kind(&answer), "too_large");
    assert!(message(&answer).contains("262144"), "{}", message(&answer));
    let exact = env.send(json!({"url": env.url("api.test", &format!("/big/{}", size - 1))}));
    assert_eq!(
        exact["ok"]["body"]["text"].as_str().unwrap().len(),
        size - 1
    );

    let answer = env.send(json!({
        "url": env.url("api.test", "/big/1000000"),
        "output": {"type": "file", "path": "/volume/tmp/dl/big.txt"},
    }));
    assert_eq!(
        answer["ok"]["body"],
        json!({"type": "file", "path": "/volume/tmp/dl/big.txt", "bytes": 1000000})
    );
    let saved = std::fs::read(env.volume.path().join("dl/big.txt")).unwrap();
    assert_eq!(saved.len(), 1_000_000);
}

#[test]
fn a_body_that_is_not_utf8_is_not_text_inline_but_saves_to_a_file() {
    let env = Env::start();
    let answer = env.send(json!({"url": env.url("api.test", "/binary")}));
    assert_eq!(kind(&answer), "not_text");
    let answer = env.send(json!({
        "url": env.url("api.test", "/binary"),
        "output": {"type": "file", "path": "/volume/tmp/bin"},
    }));
    assert_eq!(answer["ok"]["body"]["bytes"], 6);
    assert_eq!(
        std::fs::read(env.volume.path().join("bin")).unwrap(),
        [b'o', b'k', 0xff, 0xfe, 0x00, 0x80]
    );
}

#[test]
fn a_file_output_past_the_write_budget_fails_and_leaves_no_file() {
    let env = Env::start();
    let mut http = env.imports("", 5_000);
    let (answer, _) = exchange(
        &mut http,
        &json!({"url": env.url("api.test", "/big/20000"),
                "output": {"type": "file", "path": "/volume/tmp/out"}}),
    );
    assert_eq!(kind(&answer), "write_budget");
    assert!(!env.volume.path().join("out").exists());
    let (answer, _) = exchange(
        &mut http,
        &json!({"url": env.url("api.test", "/big/4000"),
                "output": {"type": "file", "path": "/volume/tmp/out"}}),
    );
    assert_eq!(answer["ok"]["body"]["bytes"], 4000);
}

#[test]
fn file_paths_outside_the_mounted_volume_are_bad_paths_and_nothing_is_sent() {
    let env = Env::start();
    for request in [
        json!({"url": env.url("api.test", "/echo"), "output": {"type": "file", "path": "/volume/data/x"}}),
        json!({"url": env.url("api.test", "/echo"), "output": {"type": "file", "path": "/tmp/x"}}),
        json!({"url": env.url("api.test", "/echo"), "output": {"type": "file", "path": "/volume/tmp/../x"}}),
        json!({"url": env.url("api.test", "/echo"), "body": {"type": "file", "path": "/volume/tmp/missing"}}),
    ] {
        assert_eq!(kind(&env.send(request.clone())), "bad_path", "{request}");
    }
    assert!(env.server.seen().is_empty());
}

#[test]
fn redirects_are_followed_to_allowed_hosts() {
    let env = Env::start();
    let target = env.url("other.test", "/echo");
    let answer = env.send(json!({
        "url": env.url("api.test", &format!("/redirect?to={}", encoded(&target))),
    }));
    assert_eq!(answer["ok"]["status"], 200, "{answer}");
    let seen = env.server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].authority, format!("other.test:{}", env.server.port));

    let not_followed = env.send(json!({
        "url": env.url("api.test", &format!("/redirect?to={}", encoded(&target))),
        "follow_redirects": false,
    }));
    assert_eq!(not_followed["ok"]["status"], 302);
    assert_eq!(not_followed["ok"]["headers"]["location"], target);
}

#[test]
fn a_303_after_a_post_is_followed_with_a_get_and_a_307_keeps_the_method() {
    let env = Env::start();
    for (code, method) in [(303, "GET"), (307, "POST")] {
        let answer = env.send(json!({
            "method": "POST",
            "url": env.url("api.test", &format!("/redirect?code={code}&to=%2Fecho")),
            "body": {"type": "text", "text": "payload"},
        }));
        let echoed: Value =
            serde_json::from_str(answer["ok"]["body"]["text"].as_str().unwrap()).unwrap();
        assert_eq!(echoed["method"], method, "{code}");
    }
}

#[test]
fn ten_redirects_are_followed_and_the_eleventh_is_too_many() {
    let env = Env::start();
    let answer = env.send(json!({"url": env.url("api.test", "/chain/10")}));
    assert_eq!(answer["ok"]["body"]["text"], "end of chain");
    let answer = env.send(json!({"url": env.url("api.test", "/chain/11")}));
    assert_eq!(kind(&answer), "too_many_redirects");
}

#[test]
fn a_redirect_to_http_a_forbidden_address_or_an_unlisted_host_is_refused() {
    let env = Env::start();
    let port = env.server.port;
    let cases = [
        (
            format!("http://api.test:{port}/echo"),
            "forbidden_destination",
        ),
        (
            format!("https://inside.test:{port}/echo"),
            "forbidden_destination",
        ),
        (
            format!("https://127.0.0.1:{port}/echo"),
            "forbidden_destination",
        ),
        (
            format!("https://unlisted.test:{port}/echo"),
            "host_not_allowed",
        ),
        (
            format!("https://api.test:{}/echo", port + 1),
            "host_not_allowed",
        ),
    ];
    for (target, expected) in cases {
        let answer = env.send(json!({
            "url": env.url("api.test", &format!("/redirect?to={}", encoded(&target))),
        }));
        assert_eq!(kind(&answer), expected, "{target}: {answer}");
    }
    // Only the first hop of each case reached the server.
    assert_eq!(env.server.seen().len(), 5);
}

#[test]
fn names_resolving_to_forbidden_addresses_and_literals_are_refused_unless_trusted() {
    let env = Env::start();
    for name in ["inside.test", "mapped.test", "127.0.0.1"] {
        let answer = env.send(json!({"url": env.url(name, "/echo")}));
        assert_eq!(kind(&answer), "forbidden_destination", "{name}");
        assert!(
            message(&answer).contains("127.0.0.1"),
            "{}",
            message(&answer)
        );
    }
    assert!(env.server.seen().is_empty());
    // The same address under a trusted name is reached, by its vetted address, while TLS
    // verifies the name (the certificate has no IP address in it).
    let answer = env.send(json!({"url": env.url("api.test", "/echo")}));
    assert_eq!(answer["ok"]["status"], 200);
}

#[test]
fn a_slow_server_times_out() {
    let env = Env::start();
    let answer = env.send(json!({"url": env.url("api.test", "/slow"), "timeout_ms": 300}));
    assert_eq!(kind(&answer), "timeout");
    assert!(message(&answer).contains("300 ms"), "{}", message(&answer));
}

#[test]
fn a_cancelled_call_stops_waiting_for_a_slow_server() {
    let env = Env::start();
    let cancel = Arc::new(Cancel::new());
    let mut http = env.imports("", 0).with_cancel(Arc::clone(&cancel));
    let request = json!({"url": env.url("api.test", "/slow")});
    let waiting = std::thread::spawn(move || exchange(&mut http, &request).0);
    env.server.wait_for_requests(1);
    cancel.cancel();
    let answer = waiting.join().unwrap();
    assert_eq!(kind(&answer), "timeout");
    assert!(message(&answer).contains("stopped"), "{}", message(&answer));
}

#[test]
fn credentials_reach_their_host_only_and_never_the_guest() {
    let env = Env::start();
    std::fs::write(env.policy_dir.path().join("token"), "s3cret-token\n").unwrap();
    let credential = "[[packages.p.credentials]]\nhost = \"api.test:PORT\"\n\
                      header = \"authorization\"\nvalue_file = \"token\"\nprefix = \"Bearer \"\n"
        .replace("PORT", &env.server.port.to_string());
    let mut http = env.imports(&credential, 0);
    let (answer, raw) = exchange(&mut http, &json!({"url": env.url("api.test", "/echo")}));
    assert_eq!(answer["ok"]["status"], 200);
    assert!(!raw.contains("s3cret"));
    let target = env.url("other.test", "/echo");
    let (answer, raw) = exchange(
        &mut http,
        &json!({"url": env.url("api.test", &format!("/redirect?to={}", encoded(&target)))}),
    );
    assert_eq!(answer["ok"]["status"], 200);
    assert!(!raw.contains("s3cret"));
    let seen = env.server.seen();
    assert_eq!(seen[0].header("authorization"), Some("Bearer s3cret-token"));
    assert_eq!(seen[1].header("authorization"), Some("Bearer s3cret-token"));
    assert_eq!(seen[2].authority, format!("other.test:{}", env.server.port));
    assert_eq!(seen[2].header("authorization"), None);

    let (answer, raw) = exchange(
        &mut http,
        &json!({"url": env.url("api.test", "/echo"), "headers": {"authorization": "mine"}}),
    );
    assert_eq!(kind(&answer), "credential_header");
    assert!(!raw.contains("s3cret"));
}

#[test]
fn a_credential_without_its_secret_is_unavailable() {
    let env = Env::start();
    let credential =
        "[[packages.p.credentials]]\nhost = \"api.test:PORT\"\nheader = \"x-api-key\"\n\
                      value_env = \"HAKO_BROKER_TEST_SURELY_UNSET\"\n"
            .replace("PORT", &env.server.port.to_string());
    let (answer, _) = exchange(
        &mut env.imports(&credential, 0),
        &json!({"url": env.url("api.test", "/echo")}),
    );
    assert_eq!(kind(&answer), "credential_unavailable");
    assert!(env.server.seen().is_empty());
}

#[test]
fn policy_and_validation_errors_come_before_any_connection() {
    let env = Env::start();
    let answer = env.send(json!({"url": env.url("api.test", "/echo"), "extra": true}));
    assert_eq!(kind(&answer), "invalid_request");
    let answer = env.send(json!({"url": env.url("nowhere.test", "/echo")}));
    assert_eq!(kind(&answer), "host_not_allowed");
    assert!(env.server.seen().is_empty());
}

#[test]
fn a_closed_port_and_an_untrusted_certificate_are_connection_errors() {
    let env = Env::start();
    let closed = closed_port();
    let mut http = env.imports(
        &format!("[packages.\"*\"]\nallow_hosts = [\"api.test:{closed}\"]\n"),
        0,
    );
    let (answer, _) = exchange(
        &mut http,
        &json!({"url": format!("https://api.test:{closed}/")}),
    );
    assert_eq!(kind(&answer), "connection");

    let stranger =
        HyperBroker::with_roots(rustls::RootCertStore::empty(), Arc::new(resolver())).unwrap();
    let policy = Policy::from_toml(&env.policy_text(""), env.policy_dir.path())
        .unwrap()
        .for_package("p", &[])
        .unwrap();
    let mut http = HttpImports::new(
        Arc::new(policy),
        Arc::new(stranger),
        Arc::new(WriteBudget::new(0)),
        None,
    );
    let (answer, _) = exchange(&mut http, &json!({"url": env.url("api.test", "/echo")}));
    assert_eq!(kind(&answer), "connection");
    assert!(
        message(&answer).to_lowercase().contains("certificate"),
        "{}",
        message(&answer)
    );
}

#[test]
fn connections_are_pooled_across_calls_and_speak_http2() {
    let env = Env::start();
    for _ in 0..3 {
        let answer = env.send(json!({"url": env.url("api.test", "/echo")}));
        let echoed: Value =
            serde_json::from_str(answer["ok"]["body"]["text"].as_str().unwrap()).unwrap();
        assert_eq!(echoed["version"], "HTTP/2.0");
    }
    assert_eq!(env.server.connections(), 1);
}
