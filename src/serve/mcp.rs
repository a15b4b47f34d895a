//! MCP for agents, the same on every transport: one incoming JSON-RPC message for one package
//! in, what to send back out ([`Dispatch`]). stdio, Streamable HTTP and the legacy HTTP+SSE
//! transport all call [`dispatch`], so an answer is byte for byte the same whichever way it
//! travels (stdio adds only the newline).
//!
//! The boundaries of the transport contract that concern a message are enforced here:
//! nesting deeper than [`MAX_NESTING`] containers is refused *before* parsing (a byte scan);
//! a message without `id` is a notification and gets no answer whatever its method; an
//! explicit `"id": null` is an invalid request; batches are not supported (2025-06-18 removed
//! them). Line and body sizes belong to the transports.
//!
//! Methods: `initialize` (clients of 2024-11-05 through 2025-06-18; the answer names the
//! client's revision when hako speaks it, else the latest it speaks), `server/discover` and
//! requests carrying `_meta` (the stateless 2026-07-28 style, which needs no `initialize`),
//! `ping`, `tools/list` (the tools discovery found at upload) and `tools/call`. Nothing here
//! keeps state between messages, so every transport is stateless.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::access::Origin;
use super::calls::{CallError, Calls, Served};
use super::fault;
use crate::call::CallOutcome;
use crate::protocol::{CallResult, ShownBlock, PROTOCOL_VERSION};

/// The deepest nesting of arrays and objects an incoming message may have.
pub const MAX_NESTING: usize = 32;

/// The revisions `initialize` answers with, newest first.
pub const INITIALIZE_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];

/// The revisions of the stateless style (`server/discover`, `_meta` on every request).
pub const STATELESS_VERSIONS: [&str; 1] = [PROTOCOL_VERSION];

/// The `_meta` key naming the revision of a stateless request.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of a stateless result naming the server.
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// JSON-RPC error codes.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The server is busy (the call queue is full) or stopping: try again later.
    pub const SERVER_BUSY: i64 = -32000;
    /// A stateless request names a revision the server does not speak (2026-07-28).
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// What to send back for one incoming message.
pub enum Dispatch {
    /// An answer, ready now.
    Answer(Vec<u8>),
    /// Nothing: the message was a notification or a client's response.
    Silent,
    /// A tool call admitted to the guest pool; its answer comes later.
    Pending(Pending),
    /// The call queue is full (or closed): HTTP transports answer 503 with `Retry-After`,
    /// stdio sends this JSON-RPC error.
    Busy(Vec<u8>),
}

/// A request's id exactly as the client wrote it (its JSON text), echoed byte for byte: `1e2`
/// stays `1e2`, and an integer past 2^64 keeps every digit.
#[derive(Debug, Clone)]
pub struct Id(Box<RawValue>);

impl Id {
    /// The id of an answer to a message whose id could not be read: `null`.
    pub fn null() -> Id {
        Id(RawValue::from_string("null".into()).expect("null is JSON"))
    }

    /// The id as JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }
}

/// A tool call running or queued on a guest thread.
pub struct Pending {
    id: Id,
    stateless: bool,
    receiver: oneshot::Receiver<Result<CallOutcome, CallError>>,
}

impl Pending {
    /// The call's answer, once its guest has finished.
    pub async fn answer(self) -> Vec<u8> {
        match self.receiver.await {
            Ok(Ok(outcome)) => {
                let answer = ToolResult {
                    result_type: self.stateless.then_some("complete"),
                    ..call_tool_result(&outcome)
                };
                message(&self.id, "result", &answer)
            }
            Ok(Err(err)) => error(&self.id, code::INTERNAL_ERROR, &fault::report(&err)),
            Err(_) => error(
                &self.id,
                code::INTERNAL_ERROR,
                "the guest thread lost the call",
            ),
        }
    }
}

/// Whether `bytes` nest arrays and objects deeper than `max`, by a scan that skips strings.
pub fn nesting_exceeds(bytes: &[u8], max: usize) -> bool {
    let (mut depth, mut exceeds) = (0usize, false);
    crate::json_structure(bytes, |byte| {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                exceeds = depth > max;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        !exceeds
    });
    exceeds
}

/// A JSON-RPC result message: `{"jsonrpc":"2.0","id":…,"result":…}`, compact.
pub fn result(id: &Id, result: Value) -> Vec<u8> {
    message(id, "result", &result)
}

/// A JSON-RPC error message.
pub fn error(id: &Id, code: i64, text: &str) -> Vec<u8> {
    message(id, "error", &json!({"code": code, "message": text}))
}

fn error_with_data(id: &Id, code: i64, text: &str, data: Value) -> Vec<u8> {
    message(
        id,
        "error",
        &json!({"code": code, "message": text, "data": data}),
    )
}

fn message<T: Serialize + ?Sized>(id: &Id, member: &str, value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(super::response::JSON_ANSWER_BYTES);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_json().as_bytes());
    out.extend_from_slice(b",\"");
    out.extend_from_slice(member.as_bytes());
    out.extend_from_slice(b"\":");
    let _ = serde_json::to_writer(&mut out, value);
    out.push(b'}');
    out
}

/// The id of the message `bytes` as the client wrote it.
///
/// Most ids come back exactly from `parsed` (the value already read): an integer has one JSON
/// spelling, and a string does when the message holds no escape at all. Only the rest (a
/// fraction or exponent, an escape somewhere) cost a second scan of the message for the id's
/// text; `parsed` serialized stays the answer for a message with two ids (the last one counts,
/// as it does for the rest of the message).
fn exact_id(bytes: &[u8], parsed: &Value) -> Id {
    let serialized =
        || Id(serde_json::value::to_raw_value(parsed).expect("a string or a number serializes"));
    let one_spelling = match parsed {
        Value::Number(number) => number.is_u64() || number.is_i64(),
        Value::String(_) => !bytes.contains(&b'\\'),
        _ => false,
    };
    if one_spelling {
        return serialized();
    }
    #[derive(serde::Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow)]
        id: &'a RawValue,
    }
    match serde_json::from_slice::<IdOnly>(bytes) {
        Ok(message) => Id(message.id.to_owned()),
        Err(_) => serialized(),
    }
}

/// A request, once the message passed every check that needs no package.
struct Request {
    id: Id,
    method: String,
    params: Map<String, Value>,
    /// Whether the request is of the stateless style (its `_meta` names a revision).
    stateless: bool,
}

/// Reads one message: a request, or what to answer without looking further (a parse error,
/// an invalid request, or nothing for a notification).
fn read(bytes: &[u8]) -> Result<Request, Dispatch> {
    if nesting_exceeds(bytes, MAX_NESTING) {
        let text = format!("the message nests deeper than {MAX_NESTING} arrays and objects");
        return Err(Dispatch::Answer(error(
            &Id::null(),
            code::PARSE_ERROR,
            &text,
        )));
    }
    let message: Value = match serde_json::from_slice(bytes) {
        Ok(message) => message,
        Err(err) => {
            let text = format!("the message is not JSON: {err}");
            return Err(Dispatch::Answer(error(
                &Id::null(),
                code::PARSE_ERROR,
                &text,
            )));
        }
    };
    let invalid = |text: &str| {
        Err(Dispatch::Answer(error(
            &Id::null(),
            code::INVALID_REQUEST,
            text,
        )))
    };
    let Value::Object(mut message) = message else {
        return invalid("a message must be one JSON object (batches are not supported)");
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    let id = match message.remove("id") {
        None => None,
        Some(Value::Null) => return invalid("\"id\" must not be null"),
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(exact_id(bytes, &id)),
        Some(_) => return invalid("\"id\" must be a string or a number"),
    };
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        if id.is_some() && (message.contains_key("result") || message.contains_key("error")) {
            // A client's answer to a request of ours; hako sends none, so it is dropped.
            return Err(Dispatch::Silent);
        }
        return invalid("a request must have a string \"method\"");
    };
    let method = method.to_string();
    let Some(id) = id else {
        // A notification (initialized, cancelled, …): dispatched to nothing, answered by nothing.
        return Err(Dispatch::Silent);
    };
    let params = match message.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params,
        Some(_) => {
            let answer = error(&id, code::INVALID_PARAMS, "params must be an object");
            return Err(Dispatch::Answer(answer));
        }
    };
    let version = params.get("_meta").and_then(|meta| meta.get(META_VERSION));
    if let Some(version) = version {
        let requested = version.as_str().unwrap_or_default();
        if !STATELESS_VERSIONS.contains(&requested) {
            let text = format!(
                "unsupported protocol revision {version}; this server speaks {} without \
                 initialize, and {} through initialize",
                STATELESS_VERSIONS.join(", "),
                INITIALIZE_VERSIONS.join(", ")
            );
            let data = json!({"supported": STATELESS_VERSIONS, "requested": version});
            let answer = error_with_data(&id, code::UNSUPPORTED_PROTOCOL_VERSION, &text, data);
            return Err(Dispatch::Answer(answer));
        }
    }
    let stateless = version.is_some() || method == "server/discover";
    Ok(Request {
        id,
        method,
        params,
        stateless,
    })
}

/// Handles one incoming message for `package`, from `origin`.
pub fn dispatch(calls: &Arc<Calls>, package: &str, bytes: &[u8], origin: Origin) -> Dispatch {
    let request = match read(bytes) {
        Ok(request) => request,
        Err(dispatch) => return dispatch,
    };
    match calls.package(package) {
        Ok(served) => answer(calls, served, request, origin),
        Err(err @ CallError::UnknownPackage(_)) => {
            Dispatch::Answer(error(&request.id, code::INVALID_PARAMS, &err.to_string()))
        }
        Err(err) => Dispatch::Answer(error(
            &request.id,
            code::INTERNAL_ERROR,
            &fault::report(&err),
        )),
    }
}

/// Handles one incoming message for a package the caller has already looked up.
pub fn dispatch_to(
    calls: &Arc<Calls>,
    served: Arc<Served>,
    bytes: &[u8],
    origin: Origin,
) -> Dispatch {
    match read(bytes) {
        Ok(request) => answer(calls, served, request, origin),
        Err(dispatch) => dispatch,
    }
}

fn answer(calls: &Arc<Calls>, served: Arc<Served>, request: Request, origin: Origin) -> Dispatch {
    let Request {
        id,
        method,
        params,
        stateless,
    } = request;
    let mut answer = match method.as_str() {
        "initialize" => initialize(&served, &params),
        "server/discover" => discover(&served),
        "ping" => json!({}),
        "tools/list" => cacheable(json!({"tools": served.stored.tools})),
        "tools/call" => return tools_call(calls, served, id, stateless, params, origin),
        other => {
            let text = format!("method {other:?} is not offered");
            return Dispatch::Answer(error(&id, code::METHOD_NOT_FOUND, &text));
        }
    };
    if stateless {
        answer["resultType"] = json!("complete");
    }
    Dispatch::Answer(result(&id, answer))
}

/// A result of the stateless style that a client may cache: hako marks it stale at once and
/// private, since an upload can change the tools at any moment.
fn cacheable(mut answer: Value) -> Value {
    answer["ttlMs"] = json!(0);
    answer["cacheScope"] = json!("private");
    answer
}

fn server_info(served: &Served) -> Value {
    json!({"name": served.name(), "version": served.stored.record.version})
}

fn initialize(served: &Served, params: &Map<String, Value>) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = match asked {
        Some(asked) if INITIALIZE_VERSIONS.contains(&asked) => asked,
        _ => INITIALIZE_VERSIONS[0],
    };
    let mut answer = json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": server_info(served),
    });
    if let Some(description) = &served.stored.record.description {
        answer["instructions"] = json!(description);
    }
    answer
}

fn discover(served: &Served) -> Value {
    let mut answer = json!({
        "supportedVersions": STATELESS_VERSIONS,
        "capabilities": {"tools": {"listChanged": false}},
        "_meta": {META_SERVER_INFO: server_info(served)},
    });
    if let Some(description) = &served.stored.record.description {
        answer["instructions"] = json!(description);
    }
    cacheable(answer)
}

fn tools_call(
    calls: &Arc<Calls>,
    served: Arc<Served>,
    id: Id,
    stateless: bool,
    mut params: Map<String, Value>,
    mut origin: Origin,
) -> Dispatch {
    // Taken out of the request, not copied: it is the request's one part of any size.
    let Some(Value::String(tool)) = params.remove("name") else {
        return Dispatch::Answer(error(
            &id,
            code::INVALID_PARAMS,
            "tools/call needs a string \"name\"",
        ));
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(arguments @ Value::Object(_)) => arguments,
        Some(_) => {
            return Dispatch::Answer(error(
                &id,
                code::INVALID_PARAMS,
                "\"arguments\" must be an object",
            ))
        }
    };
    origin.rpc_id = Some(id.0.get().to_string());
    match calls.submit(served, tool, arguments, calls.caps.defaults(), origin) {
        Ok(receiver) => Dispatch::Pending(Pending {
            id,
            stateless,
            receiver,
        }),
        Err(err @ (CallError::Busy | CallError::PackageBusy { .. } | CallError::Closing)) => {
            Dispatch::Busy(error(
                &id,
                code::SERVER_BUSY,
                &format!("{err}; try again shortly"),
            ))
        }
        Err(err @ CallError::UnknownTool { .. }) => {
            Dispatch::Answer(error(&id, code::INVALID_PARAMS, &err.to_string()))
        }
        Err(err) => Dispatch::Answer(error(&id, code::INTERNAL_ERROR, &fault::report(&err))),
    }
}

/// The `CallToolResult` of a `tools/call` answer, serialized straight into the answer's bytes
/// (no `serde_json::Value` is built for it): the result as [`CallResult`] writes it, and
/// `resultType` for a stateless request.
#[derive(Debug, Serialize)]
pub struct ToolResult<'a> {
    #[serde(flatten)]
    result: Cow<'a, CallResult>,
    /// `"complete"` for a stateless request (2026-07-28).
    #[serde(rename = "resultType", skip_serializing_if = "Option::is_none")]
    result_type: Option<&'static str>,
}

/// The `CallToolResult` an agent is given for an outcome. A crash is a result with `isError`
/// that tells the model the function crashed, with the last 4 KiB of its stderr.
pub fn call_tool_result(outcome: &CallOutcome) -> ToolResult<'_> {
    let result = match outcome {
        CallOutcome::Answered { result, .. } => Cow::Borrowed(result),
        CallOutcome::Crashed { crash, stderr, .. } => {
            let mut text = format!(
                "The function crashed ({}): {}.",
                crash.kind,
                crash.message.trim_end_matches('.')
            );
            if !stderr.is_empty() {
                text.push_str("\n\nIts stderr (last 4 KiB):\n");
                text.push_str(stderr);
            }
            Cow::Owned(CallResult {
                content: vec![ShownBlock::Text { text }],
                structured: None,
                is_error: true,
            })
        }
    };
    ToolResult {
        result,
        result_type: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{CallStats, Crash, CrashKind};

    #[test]
    fn nesting_is_measured_outside_strings_only() {
        let deep = format!("{}{}", "[".repeat(33), "]".repeat(33));
        assert!(nesting_exceeds(deep.as_bytes(), 32));
        let at_limit = format!("{}{}", "[".repeat(32), "]".repeat(32));
        assert!(!nesting_exceeds(at_limit.as_bytes(), 32));
        let in_string = format!("{{\"a\":\"{}\\\"{}\"}}", "[".repeat(40), "{".repeat(40));
        assert!(!nesting_exceeds(in_string.as_bytes(), 32));
    }

    #[test]
    fn a_crash_tells_the_model_the_function_crashed_with_its_stderr() {
        let outcome = CallOutcome::Crashed {
            crash: Crash::new(CrashKind::Trap, "the guest trapped: unreachable"),
            stderr: "panicked at src/main.rs".into(),
            stats: CallStats::default(),
        };
        let result = serde_json::to_value(call_tool_result(&outcome)).unwrap();
        assert_eq!(result["isError"], true);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("The function crashed (trap)"), "{text}");
        assert!(text.ends_with("panicked at src/main.rs"), "{text}");
    }

    #[test]
    fn an_answer_keeps_text_images_and_structured_content() {
        let outcome = CallOutcome::Answered {
            result: CallResult {
                content: vec![
                    ShownBlock::Text { text: "hi".into() },
                    ShownBlock::Image {
                        mime_type: "image/png".into(),
                        data: "iVBO".into(),
                    },
                    ShownBlock::Omitted {
                        text: "left out".into(),
                    },
                ],
                structured: Some(json!({"message": "hi"})),
                is_error: false,
            },
            stderr: String::new(),
            stats: CallStats::default(),
        };
        let result = serde_json::to_value(call_tool_result(&outcome)).unwrap();
        assert_eq!(
            result,
            json!({
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image", "mimeType": "image/png", "data": "iVBO"},
                    {"type": "text", "text": "left out"}
                ],
                "structuredContent": {"message": "hi"},
                "isError": false
            })
        );
    }

    #[test]
    fn a_stateless_call_is_answered_complete_and_a_stateful_one_without_result_type() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let answer = |stateless: bool| {
            let (sender, receiver) = oneshot::channel();
            let outcome = CallOutcome::Answered {
                result: CallResult {
                    content: vec![ShownBlock::Text { text: "hi".into() }],
                    structured: Some(json!({"n": 1})),
                    is_error: false,
                },
                stderr: String::new(),
                stats: CallStats::default(),
            };
            sender.send(Ok(outcome)).unwrap();
            let pending = Pending {
                id: Id(RawValue::from_string("7".into()).unwrap()),
                stateless,
                receiver,
            };
            let bytes = runtime.block_on(pending.answer());
            serde_json::from_slice::<Value>(&bytes).unwrap()
        };
        let mut expected = json!({"jsonrpc": "2.0", "id": 7, "result": {
            "content": [{"type": "text", "text": "hi"}],
            "structuredContent": {"n": 1},
            "isError": false,
        }});
        assert_eq!(answer(false), expected);
        expected["result"]["resultType"] = json!("complete");
        assert_eq!(answer(true), expected);
    }

    fn answer_of(bytes: &[u8]) -> Value {
        match read(bytes) {
            Err(Dispatch::Answer(answer)) => serde_json::from_slice(&answer).unwrap(),
            Err(Dispatch::Silent) => Value::String("silent".into()),
            Ok(request) => {
                let id: Value = serde_json::from_str(request.id.as_json()).unwrap();
                json!({"method": request.method, "id": id})
            }
            Err(_) => Value::String("other".into()),
        }
    }

    #[test]
    fn an_explicit_null_id_is_an_invalid_request_and_an_omitted_one_a_notification() {
        let null = answer_of(br#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#);
        assert_eq!(null["error"]["code"], code::INVALID_REQUEST);
        assert_eq!(null["id"], Value::Null);
        let omitted = answer_of(br#"{"jsonrpc":"2.0","method":"tools/list"}"#);
        assert_eq!(omitted, "silent");
    }

    #[test]
    fn too_deep_a_message_is_refused_before_parsing() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":{}{}}}}}"#,
            "[".repeat(40),
            "]".repeat(40)
        );
        let answer = answer_of(deep.as_bytes());
        assert_eq!(answer["error"]["code"], code::PARSE_ERROR);
        assert!(answer["error"]["message"].as_str().unwrap().contains("32"));
    }

    #[test]
    fn malformed_messages_get_the_error_json_rpc_names() {
        assert_eq!(answer_of(b"{oops")["error"]["code"], code::PARSE_ERROR);
        assert_eq!(answer_of(b"[]")["error"]["code"], code::INVALID_REQUEST);
        let no_version = answer_of(br#"{"id":1,"method":"ping"}"#);
        assert_eq!(no_version["error"]["code"], code::INVALID_REQUEST);
        let bad_id = answer_of(br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#);
        assert_eq!(bad_id["error"]["code"], code::INVALID_REQUEST);
        let bad_params = answer_of(br#"{"jsonrpc":"2.0","id":7,"method":"ping","params":[]}"#);
        assert_eq!(bad_params["error"]["code"], code::INVALID_PARAMS);
        assert_eq!(bad_params["id"], 7);
    }

    #[test]
    fn a_stateless_request_naming_an_unknown_revision_is_refused() {
        let known = answer_of(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        );
        assert_eq!(known, json!({"method": "tools/list", "id": 1}));
        let unknown = answer_of(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1999-01-01"}}}"#,
        );
        assert_eq!(unknown["error"]["code"], code::UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(unknown["error"]["data"]["supported"], json!(["2026-07-28"]));
    }

    #[test]
    fn a_clients_response_is_dropped_silently() {
        assert_eq!(
            answer_of(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
            "silent"
        );
    }

    #[test]
    fn ids_are_echoed_as_the_client_wrote_them() {
        for id in [
            "1e2",
            "18446744073709551616",
            "-0",
            "1.50",
            r#""\u0041b""#,
            "7",
            r#""call-7""#,
        ] {
            let message = format!(r#"{{"jsonrpc":"2.0","id": {id} ,"method":"ping"}}"#);
            let Ok(request) = read(message.as_bytes()) else {
                panic!("{id} is read");
            };
            let answer = String::from_utf8(result(&request.id, json!({}))).unwrap();
            assert_eq!(
                answer,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
            );
        }
    }

    #[test]
    fn answers_are_compact_json_rpc() {
        let one = exact_id(br#"{"id":1}"#, &json!(1));
        assert_eq!(
            result(&one, json!({})),
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec()
        );
        let err = String::from_utf8(error(&Id::null(), code::INVALID_REQUEST, "no")).unwrap();
        assert!(
            err.contains(r#""id":null"#) && err.contains("-32600"),
            "{err}"
        );
    }
}
