//! The `subako_http` imports of one call: `request(ptr, len) -> len` and
//! `read_response(ptr, len) -> 0`, their held-answer protocol and misuse codes, and the order
//! in which a request is judged: validation ([`Request::parse`]), then the operator's policy
//! (allowlist, guest-set credential headers, credential secrets), then the [`Broker`]. Guests
//! reach the network only through here.
//!
//! This module does not send requests itself: a [`Broker`] does — [`HyperBroker`] for real,
//! or [`NoBroker`], which answers `connection` without contacting anyone (discovery).
//!
//! ```
//! use std::sync::Arc;
//! use hako::http::{HttpImports, NoBroker, Policy};
//! use hako::sandbox::WriteBudget;
//!
//! let policy = Policy::empty().for_package("weather", &[]).unwrap();
//! let mut http = HttpImports::new(
//!     Arc::new(policy), Arc::new(NoBroker), Arc::new(WriteBudget::new(1 << 30)), None,
//! );
//! let mut memory = vec![0u8; 4096];
//! let request = br#"{"url":"https://api.example.com/"}"#;
//! memory[..request.len()].copy_from_slice(request);
//! let len = http.request(0, request.len() as u32, &mut memory);
//! assert!(len > 0);
//! assert_eq!(http.read_response(1024, len as u32, &mut memory), 0);
//! let answer = &memory[1024..1024 + len as usize];
//! assert!(std::str::from_utf8(answer).unwrap().contains("host_not_allowed"));
//! ```

mod allowlist;
mod answer;
mod broker;
mod credential;
mod policy;
mod request;
mod url;

use std::sync::Arc;
use std::time::Instant;

use hako_engine_api::{Import, Stop};

use crate::sandbox::{Cancel, Waits, WriteBudget};

pub use allowlist::{Allowlist, HostPattern};
pub use answer::{Answer, ErrorKind, HttpError};
pub use broker::{
    forbidden_range, Broker, BrokerError, HyperBroker, LazyBroker, NoBroker, Resolve, SendContext,
    StaticResolver, SystemResolver, VolumeDirs, VolumeRoot, MAX_INLINE_BYTES, MAX_REDIRECTS,
};
pub(crate) use broker::{roots, tls_config};
pub use credential::{Credential, InjectedHeader, Secret, SecretSource};
pub use policy::{PackagePolicy, Policy, PolicyError, TlsPolicy, CREDENTIAL_HEADERS};
pub use request::{Body, Method, Output, Request, MAX_REQUEST_BYTES};
pub use url::{Host, JoinError, Url};

/// `-1`: a range outside the guest's memory.
pub const OUT_OF_RANGE: i32 = -1;
/// `-2`: `read_response` with no answer held.
pub const NO_ANSWER: i32 = -2;
/// `-3`: `read_response` with a length other than the held answer's.
pub const LENGTH_MISMATCH: i32 = -3;

/// The per-call state of the two imports.
pub struct HttpImports {
    ctx: SendContext,
    broker: Arc<dyn Broker>,
    held: Option<Vec<u8>>,
    /// What the run gives up while the broker's answer is awaited.
    waits: Arc<Waits>,
}

impl HttpImports {
    /// The imports of a call run under `policy`, sending through `broker`, charging file
    /// outputs to `budget`, and ending by `deadline` if the call has one.
    pub fn new(
        policy: Arc<PackagePolicy>,
        broker: Arc<dyn Broker>,
        budget: Arc<WriteBudget>,
        deadline: Option<Instant>,
    ) -> Self {
        Self {
            ctx: SendContext {
                policy,
                budget,
                deadline,
                volume: VolumeDirs::none(),
                cancel: None,
            },
            broker,
            held: None,
            waits: Arc::new(Waits::default()),
        }
    }

    /// The imports giving up what `waits`' run holds while the broker's answer is awaited.
    pub fn with_waits(mut self, waits: Arc<Waits>) -> Self {
        self.waits = waits;
        self
    }

    /// The imports with `volume` as the folders of `file` bodies and outputs (none by default).
    pub fn with_volume(mut self, volume: VolumeDirs) -> Self {
        self.ctx.volume = volume;
        self
    }

    /// The imports with the call's cancellation flag, so a stopped call stops waiting.
    pub fn with_cancel(mut self, cancel: Arc<Cancel>) -> Self {
        self.ctx.cancel = Some(cancel);
        self
    }

    /// `subako_http.request(ptr, len)`: reads the request at `ptr`, answers it, holds the
    /// answer and returns its length; `-1` if the range is outside `memory` (any answer held
    /// before stays held). A new answer replaces one that was never read.
    pub fn request(&mut self, ptr: u32, len: u32, memory: &mut [u8]) -> i32 {
        let Some(bytes) = range(memory, ptr, len) else {
            return OUT_OF_RANGE;
        };
        let (answer, length) = fit(self.answer(bytes).to_json(), i32::MAX as usize);
        self.held = Some(answer);
        length
    }

    /// `subako_http.read_response(ptr, len)`: copies the held answer to `ptr` and forgets it.
    /// `-2` when nothing is held, `-1` when the range is outside `memory`, `-3` when `len` is
    /// not the held answer's length; after `-1` and `-3` the answer stays held.
    pub fn read_response(&mut self, ptr: u32, len: u32, memory: &mut [u8]) -> i32 {
        let Some(held) = &self.held else {
            return NO_ANSWER;
        };
        let Some(target) = range_mut(memory, ptr, len) else {
            return OUT_OF_RANGE;
        };
        if target.len() != held.len() {
            return LENGTH_MISMATCH;
        }
        target.copy_from_slice(held);
        self.held = None;
        0
    }

    /// Routes an import from the engine-neutral host. `args` are the two `i32` arguments,
    /// zero-extended. Anything but the two HTTP imports with two arguments is a routing
    /// mistake of the host, never a guest's doing, and answers `-1`. Once the call's cancel
    /// flag is set (its deadline passed), either import ends the run ([`Stop::Abort`]) before
    /// it reads anything.
    pub fn call(&mut self, import: Import, args: &[u64], memory: &mut [u8]) -> Result<i32, Stop> {
        // An engine's deadline checks sit at function entries and loop headers, and a host
        // function has neither: straight-line code can make thousands of requests, each
        // scanning up to 8 MiB, between two checks. So each request looks at the flag itself.
        if self
            .ctx
            .cancel
            .as_ref()
            .is_some_and(|cancel| cancel.is_cancelled())
        {
            return Err(Stop::Abort);
        }
        // A request waits on the broker: a run that shares its thread is moved before it is
        // even judged, so that it has sent nothing when it runs again on a thread of its own.
        if import == Import::HttpRequest && self.waits.moves() {
            return Err(Stop::Abort);
        }
        Ok(self.route(import, args, memory))
    }

    fn route(&mut self, import: Import, args: &[u64], memory: &mut [u8]) -> i32 {
        let &[ptr, len] = args else {
            tracing::error!(
                ?import,
                count = args.len(),
                "subako_http import with wrong arity"
            );
            return OUT_OF_RANGE;
        };
        // Both arguments are i32 values, zero-extended from u32: the low half is exact.
        let (ptr, len) = (ptr as u32, len as u32);
        match import {
            Import::HttpRequest => self.request(ptr, len, memory),
            Import::HttpReadResponse => self.read_response(ptr, len, memory),
            other => {
                tracing::error!(import = ?other, "a WASI import was routed to subako_http");
                OUT_OF_RANGE
            }
        }
    }

    /// Whether an answer is held, waiting for `read_response`.
    pub fn holds_answer(&self) -> bool {
        self.held.is_some()
    }

    /// Judges one request: validation, then policy, then the broker.
    fn answer(&self, bytes: &[u8]) -> Answer {
        let mut request = match Request::parse(bytes) {
            Ok(request) => request,
            Err(error) => return error.into(),
        };
        let policy = &self.ctx.policy;
        let url = &request.url;
        if !policy.allow.allows_host(&url.host, url.port) {
            return HttpError::new(
                ErrorKind::HostNotAllowed,
                format!(
                    "{} is not in this function's network allowlist",
                    url.authority()
                ),
            )
            .into();
        }
        if let Some((name, _)) = request
            .headers
            .iter()
            .find(|(name, _)| policy.is_credential_header(name))
        {
            return HttpError::new(
                ErrorKind::CredentialHeader,
                format!(
                    "the request sets `{name}`, a header that carries credentials; \
                     credentials are added by the host"
                ),
            )
            .into();
        }
        let credentials = match policy.credentials_for(&url.host, url.port) {
            Ok(credentials) => credentials,
            Err(error) => return error.into(),
        };
        if let Some(deadline) = self.ctx.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return HttpError::new(
                    ErrorKind::Timeout,
                    "the call's time limit ran out before the request was sent",
                )
                .into();
            }
            request.timeout = Some(request.timeout.map_or(left, |asked| asked.min(left)));
        }
        self.waits
            .wait(|| self.broker.send(&request, &credentials, &self.ctx))
    }
}

impl std::fmt::Debug for HttpImports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpImports")
            .field("policy", &self.ctx.policy)
            .field("deadline", &self.ctx.deadline)
            .field("held", &self.held.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

/// The answer and its length when the length is at most `max`, else an `abi` error in its
/// place: the guest could not be handed a longer one through an `i32`.
fn fit(answer: Vec<u8>, max: usize) -> (Vec<u8>, i32) {
    let answer = if answer.len() <= max {
        answer
    } else {
        Answer::Error(HttpError::new(
            ErrorKind::Abi,
            format!(
                "the answer is {} bytes, more than the {max} a 32-bit guest can be handed",
                answer.len()
            ),
        ))
        .to_json()
    };
    // Either at most `max` (≤ i32::MAX) bytes, or the short fixed-shape error above.
    let length = i32::try_from(answer.len()).unwrap_or(i32::MAX);
    (answer, length)
}

fn range(memory: &[u8], ptr: u32, len: u32) -> Option<&[u8]> {
    let start = usize::try_from(ptr).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    memory.get(start..end)
}

fn range_mut(memory: &mut [u8], ptr: u32, len: u32) -> Option<&mut [u8]> {
    let start = usize::try_from(ptr).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    memory.get_mut(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use std::sync::Mutex;
    use std::time::Duration;

    /// A broker that records what it was asked and answers a fixed inline body.
    #[derive(Default)]
    struct Recorder {
        sent: Mutex<Vec<(Request, Vec<InjectedHeader>)>>,
    }

    impl Broker for Recorder {
        fn send(
            &self,
            request: &Request,
            credentials: &[InjectedHeader],
            _: &SendContext,
        ) -> Answer {
            self.sent
                .lock()
                .unwrap()
                .push((request.clone(), credentials.to_vec()));
            Answer::Inline {
                status: 200,
                headers: vec![],
                text: "hello".into(),
            }
        }
    }

    fn policy(text: &str) -> Arc<PackagePolicy> {
        Arc::new(
            Policy::from_toml(text, std::path::Path::new("."))
                .unwrap()
                .for_package("p", &[])
                .unwrap(),
        )
    }

    fn imports(policy: Arc<PackagePolicy>, broker: Arc<dyn Broker>) -> HttpImports {
        HttpImports::new(policy, broker, Arc::new(WriteBudget::new(1024)), None)
    }

    const ALLOW_A: &str = "[packages.p]\nallow_hosts = [\"a.example\"]\n";

    /// Runs `request` through `http` with guest memory and reads the answer back.
    fn exchange(http: &mut HttpImports, request: &Value) -> Value {
        let bytes = serde_json::to_vec(request).unwrap();
        let mut memory = vec![0u8; 65536];
        memory[..bytes.len()].copy_from_slice(&bytes);
        let len = http.request(0, bytes.len() as u32, &mut memory);
        assert!(len > 0, "request returned {len}");
        assert_eq!(http.read_response(32768, len as u32, &mut memory), 0);
        serde_json::from_slice(&memory[32768..32768 + len as usize]).unwrap()
    }

    fn error_kind(answer: &Value) -> &str {
        answer["error"]["kind"].as_str().unwrap_or("(not an error)")
    }

    #[test]
    fn the_held_answer_is_read_once() {
        let mut http = imports(policy(ALLOW_A), Arc::new(Recorder::default()));
        let answer = exchange(&mut http, &json!({"url": "https://a.example/"}));
        assert_eq!(answer["ok"]["body"]["text"], "hello");
        assert!(!http.holds_answer());
        let mut memory = vec![0u8; 1024];
        assert_eq!(http.read_response(0, 10, &mut memory), NO_ANSWER);
    }

    #[test]
    fn an_answer_longer_than_the_guest_can_take_becomes_an_abi_error() {
        let (kept, length) = fit(b"{\"ok\":1}".to_vec(), 64);
        assert_eq!((kept.as_slice(), length), (&b"{\"ok\":1}"[..], 8));
        let (answer, length) = fit(vec![b'x'; 65], 64);
        assert_eq!(length as usize, answer.len());
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(error_kind(&answer), "abi");
        assert!(answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("65 bytes"));
    }

    #[test]
    fn read_response_with_nothing_held_is_minus_two() {
        let mut http = imports(policy(""), Arc::new(NoBroker));
        assert_eq!(http.read_response(0, 0, &mut [0u8; 16]), NO_ANSWER);
    }

    #[test]
    fn a_request_range_outside_memory_is_minus_one() {
        let mut http = imports(policy(""), Arc::new(NoBroker));
        let mut memory = vec![0u8; 64];
        assert_eq!(http.request(60, 5, &mut memory), OUT_OF_RANGE);
        assert_eq!(http.request(u32::MAX, u32::MAX, &mut memory), OUT_OF_RANGE);
        assert!(!http.holds_answer());
    }

    #[test]
    fn a_wrong_length_is_minus_three_and_the_answer_stays_held() {
        let mut http = imports(policy(""), Arc::new(NoBroker));
        let mut memory = vec![0u8; 4096];
        let request = br#"{"url":"https://a.example"}"#;
        memory[..request.len()].copy_from_slice(request);
        let len = http.request(0, request.len() as u32, &mut memory) as u32;
        assert_eq!(
            http.read_response(1024, len - 1, &mut memory),
            LENGTH_MISMATCH
        );
        assert_eq!(
            http.read_response(1024, len + 1, &mut memory),
            LENGTH_MISMATCH
        );
        assert_eq!(http.read_response(4096 - 1, len, &mut memory), OUT_OF_RANGE);
        assert!(http.holds_answer());
        assert_eq!(http.read_response(1024, len, &mut memory), 0);
        assert!(!http.holds_answer());
    }

    #[test]
    fn a_read_range_outside_memory_keeps_the_answer() {
        let mut http = imports(policy(""), Arc::new(NoBroker));
        let mut memory = vec![0u8; 256];
        memory[..2].copy_from_slice(b"{}");
        let len = http.request(0, 2, &mut memory);
        assert_eq!(
            http.read_response(u32::MAX, len as u32, &mut memory),
            OUT_OF_RANGE
        );
        assert!(http.holds_answer());
    }

    #[test]
    fn call_routes_both_imports_by_their_raw_arguments() {
        let mut http = imports(policy(""), Arc::new(NoBroker));
        let mut memory = vec![0u8; 1024];
        memory[..2].copy_from_slice(b"{}");
        let len = http
            .call(Import::HttpRequest, &[0, 2], &mut memory)
            .unwrap();
        assert!(len > 0);
        assert_eq!(
            http.call(Import::HttpReadResponse, &[512, len as u64], &mut memory),
            Ok(0)
        );
        let answer: Value = serde_json::from_slice(&memory[512..512 + len as usize]).unwrap();
        assert_eq!(error_kind(&answer), "invalid_request");
        assert_eq!(
            http.call(Import::HttpReadResponse, &[0, 0], &mut memory),
            Ok(NO_ANSWER)
        );
        assert_eq!(
            http.call(Import::FdWrite, &[0, 0], &mut memory),
            Ok(OUT_OF_RANGE)
        );
        assert_eq!(
            http.call(Import::HttpRequest, &[0], &mut memory),
            Ok(OUT_OF_RANGE)
        );
    }

    #[test]
    fn once_cancelled_either_import_ends_the_run_and_holds_nothing() {
        let recorder = Arc::new(Recorder::default());
        let cancel = Arc::new(Cancel::new());
        let mut http = imports(policy(ALLOW_A), recorder.clone()).with_cancel(Arc::clone(&cancel));
        let mut memory = vec![0u8; 1024];
        let request = br#"{"url":"https://a.example/"}"#;
        memory[..request.len()].copy_from_slice(request);
        let len = http
            .call(Import::HttpRequest, &[0, request.len() as u64], &mut memory)
            .unwrap();
        cancel.cancel();
        let args = [0, request.len() as u64];
        assert_eq!(
            http.call(Import::HttpRequest, &args, &mut memory),
            Err(Stop::Abort)
        );
        let args = [512, len as u64];
        assert_eq!(
            http.call(Import::HttpReadResponse, &args, &mut memory),
            Err(Stop::Abort)
        );
        assert_eq!(
            recorder.sent.lock().unwrap().len(),
            1,
            "one request reached the broker"
        );
        assert!(
            memory[512..].iter().all(|&byte| byte == 0),
            "nothing was read back"
        );
    }

    #[test]
    fn a_host_outside_an_empty_allowlist_is_not_allowed() {
        let mut http = imports(policy(""), Arc::new(Recorder::default()));
        let answer = exchange(&mut http, &json!({"url": "https://api.example.com/x"}));
        assert_eq!(error_kind(&answer), "host_not_allowed");
        assert_eq!(
            answer["error"]["message"],
            "api.example.com is not in this function's network allowlist"
        );
    }

    #[test]
    fn validation_comes_before_the_allowlist() {
        let mut http = imports(policy(""), Arc::new(NoBroker));
        let answer = exchange(
            &mut http,
            &json!({"url": "https://a.example", "output": {"type": "file", "path": "/tmp/x"}}),
        );
        assert_eq!(error_kind(&answer), "bad_path");
    }

    #[test]
    fn guest_set_credential_headers_are_refused_before_the_broker() {
        let text = "[packages.p]\nallow_hosts = [\"a.example\"]\n\
                    [[packages.p.credentials]]\nhost = \"b.example\"\nheader = \"x-api-key\"\nvalue_env = \"HAKO_TEST_HTTP_UNSET\"\n";
        let recorder = Arc::new(Recorder::default());
        let mut http = imports(policy(text), recorder.clone());
        for header in [
            "authorization",
            "cookie",
            "proxy-authorization",
            "x-api-key",
        ] {
            let answer = exchange(
                &mut http,
                &json!({"url": "https://a.example", "headers": {header: "v"}}),
            );
            assert_eq!(error_kind(&answer), "credential_header", "{header}");
            assert!(answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains(header));
        }
        assert!(recorder.sent.lock().unwrap().is_empty());
    }

    #[test]
    fn a_missing_secret_is_unavailable_and_nothing_is_sent() {
        let text = "[packages.p]\nallow_hosts = [\"a.example\"]\n\
                    [[packages.p.credentials]]\nhost = \"a.example\"\nheader = \"authorization\"\nvalue_env = \"HAKO_TEST_HTTP_SURELY_UNSET\"\n";
        let recorder = Arc::new(Recorder::default());
        let mut http = imports(policy(text), recorder.clone());
        let answer = exchange(&mut http, &json!({"url": "https://a.example"}));
        assert_eq!(error_kind(&answer), "credential_unavailable");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("a.example") && message.contains("authorization"));
        assert!(recorder.sent.lock().unwrap().is_empty());
    }

    #[test]
    fn credentials_reach_the_broker_for_their_host() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "k-123").unwrap();
        let text = "[packages.p]\nallow_hosts = [\"a.example\"]\n\
                    [[packages.p.credentials]]\nhost = \"a.example\"\nheader = \"x-api-key\"\nvalue_file = \"key\"\n";
        let policy = Policy::from_toml(text, dir.path())
            .unwrap()
            .for_package("p", &[])
            .unwrap();
        let recorder = Arc::new(Recorder::default());
        let mut http = imports(Arc::new(policy), recorder.clone());
        let answer = exchange(&mut http, &json!({"url": "https://a.example/"}));
        assert_eq!(answer["ok"]["status"], 200);
        let sent = recorder.sent.lock().unwrap();
        assert_eq!(sent[0].1.len(), 1);
        assert_eq!(sent[0].1[0].name, "x-api-key");
        assert_eq!(sent[0].1[0].value.expose(), "k-123");
    }

    #[test]
    fn no_broker_answers_connection_naming_the_host() {
        let mut http = imports(policy(ALLOW_A), Arc::new(NoBroker));
        let answer = exchange(&mut http, &json!({"url": "https://a.example/"}));
        assert_eq!(error_kind(&answer), "connection");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("no HTTP broker"), "{message}");
        assert!(message.contains("a.example was not contacted"), "{message}");
    }

    #[test]
    fn the_timeout_is_capped_by_the_call_deadline() {
        let recorder = Arc::new(Recorder::default());
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut http = HttpImports::new(
            policy(ALLOW_A),
            recorder.clone(),
            Arc::new(WriteBudget::new(0)),
            Some(deadline),
        );
        exchange(
            &mut http,
            &json!({"url": "https://a.example", "timeout_ms": 600_000}),
        );
        exchange(&mut http, &json!({"url": "https://a.example"}));
        exchange(
            &mut http,
            &json!({"url": "https://a.example", "timeout_ms": 5}),
        );
        let sent = recorder.sent.lock().unwrap();
        let timeouts: Vec<_> = sent.iter().map(|(r, _)| r.timeout.unwrap()).collect();
        assert!(timeouts[0] <= Duration::from_secs(60));
        assert!(timeouts[1] <= Duration::from_secs(60));
        assert_eq!(timeouts[2], Duration::from_millis(5));
    }

    #[test]
    fn a_spent_deadline_answers_timeout_without_sending() {
        let recorder = Arc::new(Recorder::default());
        let mut http = HttpImports::new(
            policy(ALLOW_A),
            recorder.clone(),
            Arc::new(WriteBudget::new(0)),
            Some(Instant::now()),
        );
        let answer = exchange(&mut http, &json!({"url": "https://a.example"}));
        assert_eq!(error_kind(&answer), "timeout");
        assert!(recorder.sent.lock().unwrap().is_empty());
    }

    #[test]
    fn every_validation_error_reaches_the_guest_as_invalid_request() {
        let mut http = imports(policy(ALLOW_A), Arc::new(Recorder::default()));
        for request in [
            json!({"url": "https://a.example", "extra": 1}),
            json!({"url": "http://a.example"}),
            json!({"url": "https://a.example", "method": "get"}),
            json!({"url": "https://a.example", "method": "FETCH"}),
            json!({"url": "https://a.example", "headers": {"Accept": "x"}}),
            json!({"url": "https://a.example", "timeout_ms": 0}),
        ] {
            assert_eq!(
                error_kind(&exchange(&mut http, &request)),
                "invalid_request",
                "{request}"
            );
        }
        let mut memory = b"not json".to_vec();
        memory.resize(1024, 0);
        let len = http.request(0, 8, &mut memory);
        assert_eq!(http.read_response(512, len as u32, &mut memory), 0);
        let answer: Value = serde_json::from_slice(&memory[512..512 + len as usize]).unwrap();
        assert_eq!(error_kind(&answer), "invalid_request");
    }
}
