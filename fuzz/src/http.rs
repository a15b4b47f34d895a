//! The checks of `subako_http`'s parsers: a guest's request JSON, through the import itself
//! ([`HttpChecker::request`]: validation, then the policy, then a broker that checks what
//! reaches it), and the operator's policy file ([`policy`]).

use std::path::Path;
use std::sync::Arc;

use hako::http::{
    Answer, Broker, ErrorKind, HttpError, HttpImports, InjectedHeader, PackagePolicy, Policy,
    Request, SendContext, Url,
};
use hako::sandbox::WriteBudget;
use tempfile::TempDir;

use super::MAX_MESSAGE_BYTES;

/// The credential's secret, which no answer may show.
const SECRET: &str = "fuzz-secret-5b1e0c";

/// The policy every request is judged by: names, a wildcard, a port, an address, a trusted
/// name and an injected credential.
const POLICY: &str = r#"
[packages."*"]
allow_hosts = ["api.example.com", "*.tiles.example", "localhost:8443", "[::1]:9443", "10.0.0.1"]
trust_private = ["localhost"]

[[packages."*".credentials]]
host = "api.example.com"
header = "x-api-key"
value_file = "secret"
prefix = "Key "
"#;

/// The `subako_http` import of one function under [`POLICY`], with a broker that checks each
/// request the policy let through and answers `connection`.
pub struct HttpChecker {
    policy: Arc<PackagePolicy>,
    _conf: TempDir,
}

impl HttpChecker {
    pub fn new() -> HttpChecker {
        let conf = tempfile::tempdir().expect("a temporary folder");
        std::fs::write(conf.path().join("secret"), format!("{SECRET}\n")).expect("the secret");
        let policy = Policy::from_toml(POLICY, conf.path())
            .and_then(|policy| policy.for_package("fuzzed", &[]))
            .expect("the policy is valid");
        HttpChecker {
            policy: Arc::new(policy),
            _conf: conf,
        }
    }

    /// One request: parsed on its own, then passed to the import in a guest memory. The
    /// import answers with JSON the guest reads back, which never shows the secret.
    pub fn request(&self, bytes: &[u8]) {
        match Request::parse(bytes) {
            Ok(request) => {
                let again = Url::parse(&request.url.to_string());
                assert_eq!(
                    again.as_ref(),
                    Ok(&request.url),
                    "a URL reads back the same"
                );
                for (name, _) in &request.headers {
                    assert_eq!(
                        name,
                        &name.to_ascii_lowercase(),
                        "header names are lower case"
                    );
                }
            }
            Err(refused) => assert_error(&refused, bytes.len()),
        }

        let broker = Arc::new(CheckingBroker {
            policy: Arc::clone(&self.policy),
        });
        let mut http = HttpImports::new(
            Arc::clone(&self.policy),
            broker,
            Arc::new(WriteBudget::new(1 << 20)),
            None,
        );
        let mut memory = bytes.to_vec();
        let request_len = u32::try_from(memory.len()).expect("inputs are small");
        let answer_at = memory.len();
        let length = http.request(0, request_len, &mut memory);
        let length = usize::try_from(length).expect("an answer has a length");
        memory.resize(answer_at + length, 0);
        let read = http.read_response(
            u32::try_from(answer_at).expect("small"),
            u32::try_from(length).expect("small"),
            &mut memory,
        );
        assert_eq!(read, 0, "the held answer is read with its own length");
        let answer = &memory[answer_at..];
        let text = std::str::from_utf8(answer).expect("an answer is UTF-8");
        assert!(!text.contains(SECRET), "an answer shows the secret: {text}");
        let value: serde_json::Value = serde_json::from_str(text).expect("an answer is JSON");
        assert!(
            value.get("ok").is_some() || value["error"]["kind"].is_string(),
            "{text}"
        );
    }
}

impl Default for HttpChecker {
    fn default() -> Self {
        HttpChecker::new()
    }
}

/// A refusal's message is for the guest that sent the request: it may quote the guest's own
/// text (a URL, a header name) whole, but no more than twice over.
fn assert_error(error: &HttpError, request_len: usize) {
    let bound = MAX_MESSAGE_BYTES + 2 * request_len;
    assert!(
        error.message.len() <= bound,
        "a {} message of {} bytes for a request of {request_len}",
        error.kind,
        error.message.len()
    );
}

/// A broker that checks what validation and the policy let through, and sends nothing.
struct CheckingBroker {
    policy: Arc<PackagePolicy>,
}

impl Broker for CheckingBroker {
    fn send(&self, request: &Request, credentials: &[InjectedHeader], _: &SendContext) -> Answer {
        let url = &request.url;
        assert!(
            self.policy.allow.allows_host(&url.host, url.port),
            "{url} reached the broker past the allowlist"
        );
        for (name, _) in &request.headers {
            assert!(
                !self.policy.is_credential_header(name),
                "the guest's {name} header reached the broker"
            );
        }
        let expected = url.host.to_string() == "api.example.com" && url.port == 443;
        assert_eq!(
            credentials.len(),
            usize::from(expected),
            "credentials for {url}"
        );
        for credential in credentials {
            assert_eq!(credential.name, "x-api-key");
            assert_eq!(credential.value.expose(), format!("Key {SECRET}"));
        }
        Answer::Error(HttpError::new(ErrorKind::Connection, "not sent"))
    }
}

/// A policy file: one that loads gives every package it names a policy, and one that does not
/// is an error with a message, never a panic.
pub fn policy(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    match Policy::from_toml(text, Path::new("conf")) {
        Ok(policy) => {
            let names: Vec<String> = policy.package_names().map(str::to_string).collect();
            for name in names.iter().map(String::as_str).chain(["*", "another"]) {
                let effective = policy
                    .for_package(name, &[])
                    .unwrap_or_else(|e| panic!("a loaded policy has no policy for {name}: {e}"));
                for credential in &effective.credentials {
                    assert!(effective.is_credential_header(&credential.header));
                }
                for trusted in &effective.trust_private {
                    assert_eq!(trusted, &trusted.to_ascii_lowercase());
                    assert!(!trusted.ends_with('.'), "{trusted}");
                }
            }
            for ca in &policy.tls.extra_ca_files {
                assert!(
                    ca.starts_with("conf") || ca.is_absolute(),
                    "{}",
                    ca.display()
                );
            }
        }
        Err(error) => assert!(!hako::error_chain(&error).is_empty()),
    }
}
