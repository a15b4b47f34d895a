//! What one stdout line of a guest is, measured against the id the host is waiting for.
//!
//! A line is parsed in place with simd-json (the line's own buffer is rewritten to unescape
//! strings, and the parsed value borrows from it), or, when it is long and sparse in escapes,
//! with `serde_json` into the same value type (`protocol::long_line`). It is then sorted into a
//! notification (ignored), the awaited answer, or one of the faults that break a call: not a
//! JSON-RPC message, an id the host did not ask, or a request of the guest's own. This file
//! does not read what a result means; that is [`super::result`] and [`super::discovery`].
//!
//! Decisions where JSON-RPC 2.0 leaves room:
//! - a message with `method` and an `id` member is a request, even when the id is `null`;
//! - a message with neither `method` nor `id` is not JSON-RPC (a response always has an id);
//! - a response must hold exactly one of `result` and `error`, and an error must have an
//!   integer `code` and a string `message`;
//! - a response whose id is `null`, or any id while no request is outstanding, is an unknown
//!   id; ids of another type (booleans, objects, arrays) make the line not JSON-RPC;
//! - lines nested deeper than [`MAX_NESTING`] are not JSON-RPC, which keeps the recursive
//!   walks over parsed values (and their drop) far from the stack's end.

use std::cell::RefCell;

use simd_json::prelude::*;
use simd_json::{BorrowedValue, Buffers, Node, StaticNode};

use super::json::{clip, type_name};
use super::long_line;
use super::RequestId;

thread_local! {
    /// The parser's scratch buffers, kept per thread so a line costs no allocations for
    /// them. They grow to the longest line the thread has parsed, which stdout's cap bounds.
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// The deepest nesting of arrays and objects a guest line may have (as in `serde_json`).
pub const MAX_NESTING: usize = 128;

/// One stdout line of the guest, borrowed from the line's buffer.
#[derive(Debug)]
pub enum Line<'a> {
    /// A JSON-RPC message without an id; the caller ignores it.
    Notification,
    /// A response carrying the id the host is waiting for.
    Answer(Answer<'a>),
}

/// The awaited response.
#[derive(Debug)]
pub enum Answer<'a> {
    /// The response's `result` member.
    Result(BorrowedValue<'a>),
    /// A JSON-RPC error.
    Error {
        /// The error's `code`.
        code: i64,
        /// The error's `message`.
        message: String,
    },
}

/// A line that breaks the call. Each variant is one crash kind of the call runner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// Not JSON, not an object, no `"jsonrpc":"2.0"`, or not shaped like any JSON-RPC message.
    #[error("not a JSON-RPC message: {0}")]
    NotJsonRpc(String),
    /// A response to an id that is not the one the host is waiting for.
    #[error("answered an id it was not asked: {0}")]
    UnknownId(String),
    /// A request of the guest's own (it has both `method` and `id`).
    #[error("sent a request of its own: {0}")]
    GuestRequest(String),
}

impl LineError {
    /// The stable crash kind of the call contract: `not_jsonrpc`, `unknown_id` or
    /// `guest_request`.
    pub fn crash_kind(&self) -> &'static str {
        match self {
            LineError::NotJsonRpc(_) => "not_jsonrpc",
            LineError::UnknownId(_) => "unknown_id",
            LineError::GuestRequest(_) => "guest_request",
        }
    }
}

fn not_jsonrpc(why: impl Into<String>) -> LineError {
    LineError::NotJsonRpc(why.into())
}

/// Sorts one stdout line (without its `\n`) of the guest and hands the verdict to `then`.
///
/// `expected` is the id of the outstanding request, or `None` when none is outstanding (then
/// every response is [`LineError::UnknownId`]). The line is parsed in place with simd-json
/// (the buffer is rewritten) or, when `long_line::suits` it, read with `serde_json`; either
/// way the value borrows from the buffer. The verdict is handed to `then` rather than
/// returned so that the `serde_json` path can give the buffer back to simd-json when it gives
/// up on a line, which a returned borrow would forbid.
pub fn parse_line<R>(
    line: &mut [u8],
    expected: Option<&RequestId>,
    then: impl FnOnce(Result<Line<'_>, LineError>) -> R,
) -> R {
    if long_line::suits(line) {
        if let Some(value) = long_line::parse(line) {
            return then(sort(value, expected));
        }
    }
    then(parse_value(line).and_then(|value| sort(value, expected)))
}

/// Parses a line in place with simd-json, refusing it when it nests too deep.
fn parse_value(line: &mut [u8]) -> Result<BorrowedValue<'_>, LineError> {
    let tape = BUFFERS
        .with(|buffers| match buffers.try_borrow_mut() {
            Ok(mut buffers) => simd_json::to_tape_with_buffers(line, &mut buffers),
            // Only reachable if parsing ever re-entered itself on this thread; fresh
            // buffers keep that correct.
            Err(_) => simd_json::to_tape(line),
        })
        .map_err(|e| not_jsonrpc(format!("not JSON ({e})")))?;
    if nesting_exceeds(&tape.0, MAX_NESTING) {
        return Err(not_jsonrpc(format!(
            "nested deeper than {MAX_NESTING} levels"
        )));
    }
    Ok(simd_json::value::lazy::Value::from_tape(tape.as_value()).into_value())
}

/// Sorts a parsed line into a notification, the awaited answer or a fault.
fn sort<'a>(value: BorrowedValue<'a>, expected: Option<&RequestId>) -> Result<Line<'a>, LineError> {
    let mut message = match value {
        BorrowedValue::Object(members) => members,
        other => {
            return Err(not_jsonrpc(format!(
                "{} instead of an object",
                type_name(&other)
            )))
        }
    };

    match message.get("jsonrpc") {
        None => return Err(not_jsonrpc("no \"jsonrpc\" member")),
        Some(v) if v.as_str() == Some("2.0") => {}
        Some(v) => {
            return Err(not_jsonrpc(format!(
                "\"jsonrpc\" is {}, not \"2.0\"",
                describe(v)
            )))
        }
    }

    if let Some(method) = message.get("method") {
        let Some(method) = method.as_str() else {
            return Err(not_jsonrpc(format!(
                "\"method\" is {}, not a string",
                type_name(method)
            )));
        };
        return match message.get("id") {
            None => Ok(Line::Notification),
            Some(_) => Err(LineError::GuestRequest(clip(method, 128))),
        };
    }

    let Some(id) = message.get("id") else {
        return Err(not_jsonrpc("neither a \"method\" nor an \"id\""));
    };
    let id_matches = match id {
        BorrowedValue::String(_) | BorrowedValue::Static(StaticNode::Null) => id_is(id, expected),
        v if v.is_number() => id_is(v, expected),
        other => {
            return Err(not_jsonrpc(format!(
                "\"id\" is {}, not a string or a number",
                type_name(other)
            )))
        }
    };

    let has_result = message.contains_key("result");
    let has_error = message.contains_key("error");
    if has_result == has_error {
        return Err(not_jsonrpc(if has_result {
            "a response with both \"result\" and \"error\""
        } else {
            "a response with neither \"result\" nor \"error\""
        }));
    }
    if !id_matches {
        let wanted = expected.map_or("no request is outstanding".to_string(), |e| {
            format!("expected {e}")
        });
        return Err(LineError::UnknownId(format!("{}; {wanted}", describe(id))));
    }

    if has_error {
        let error = message.get("error");
        let code = error.and_then(|e| e.get("code")).and_then(|c| c.as_i64());
        let text = error
            .and_then(|e| e.get("message"))
            .and_then(|m| m.as_str());
        return match (code, text) {
            (Some(code), Some(text)) => Ok(Line::Answer(Answer::Error {
                code,
                message: text.to_string(),
            })),
            _ => Err(not_jsonrpc(
                "\"error\" is not an object with an integer \"code\" and a string \"message\"",
            )),
        };
    }
    match message.remove("result") {
        Some(result) => Ok(Line::Answer(Answer::Result(result))),
        None => Err(not_jsonrpc(
            "a response with neither \"result\" nor \"error\"",
        )),
    }
}

/// Whether the guest's `id` is exactly the expected one: strings by their text, numbers by
/// their integer value (a fractional number is never an id the host sent).
fn id_is(id: &BorrowedValue<'_>, expected: Option<&RequestId>) -> bool {
    match (expected, id) {
        (Some(RequestId::Str(want)), BorrowedValue::String(got)) => got == want,
        (Some(RequestId::Num(want)), BorrowedValue::Static(StaticNode::I64(got))) => got == want,
        (Some(RequestId::Num(want)), BorrowedValue::Static(StaticNode::U64(got))) => {
            i64::try_from(*got).is_ok_and(|got| got == *want)
        }
        _ => false,
    }
}

/// A short rendering of a guest value for a message: strings quoted, numbers as written,
/// anything else by its type.
fn describe(value: &BorrowedValue<'_>) -> String {
    match value {
        BorrowedValue::String(s) => format!("{:?}", clip(s, 64)),
        BorrowedValue::Static(StaticNode::Null) => "null".to_string(),
        BorrowedValue::Static(StaticNode::F64(f)) => format!("{f:?}"),
        BorrowedValue::Static(n) if value.is_number() => n.to_string(),
        other => type_name(other).to_string(),
    }
}

/// Whether the tape nests arrays and objects deeper than `limit`, found without recursion:
/// a container's `count` says how many nodes it spans, so a stack of end positions gives
/// the depth at every node.
fn nesting_exceeds(nodes: &[Node<'_>], limit: usize) -> bool {
    let mut ends: Vec<usize> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        while ends.last().is_some_and(|&end| end <= i) {
            ends.pop();
        }
        if let Node::Array { count, .. } | Node::Object { count, .. } = node {
            ends.push(i + 1 + count);
            if ends.len() > limit {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::long_line::LONG_LINE;
    use super::*;

    fn sort(text: &str, expected: Option<&RequestId>) -> Result<String, LineError> {
        let mut buffer = text.as_bytes().to_vec();
        parse_line(&mut buffer, expected, |line| {
            line.map(|line| match line {
                Line::Notification => "notification".to_string(),
                Line::Answer(Answer::Result(v)) => format!("result {}", v.encode()),
                Line::Answer(Answer::Error { code, message }) => format!("error {code} {message}"),
            })
        })
    }

    fn call_id() -> RequestId {
        RequestId::Str("call-1".into())
    }

    fn not_jsonrpc_message(text: &str) -> String {
        match sort(text, Some(&call_id())) {
            Err(LineError::NotJsonRpc(why)) => why,
            other => panic!("{text} should not be JSON-RPC, got {other:?}"),
        }
    }

    #[test]
    fn a_message_without_id_is_a_notification() {
        let line =
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}"#;
        assert_eq!(sort(line, Some(&call_id())).unwrap(), "notification");
        assert_eq!(sort(line, None).unwrap(), "notification");
    }

    #[test]
    fn a_result_with_the_expected_string_id_is_the_answer() {
        let line = r#"{"jsonrpc":"2.0","id":"call-1","result":{"content":[{"type":"text","text":"a\"b"}]}}"#;
        assert_eq!(
            sort(line, Some(&call_id())).unwrap(),
            r#"result {"content":[{"type":"text","text":"a\"b"}]}"#
        );
    }

    #[test]
    fn a_result_with_the_expected_numeric_id_is_the_answer() {
        let line = r#"{"result":[],"id":1,"jsonrpc":"2.0"}"#;
        assert_eq!(sort(line, Some(&RequestId::Num(1))).unwrap(), "result []");
        let big = r#"{"jsonrpc":"2.0","id":9223372036854775807,"result":null}"#;
        assert_eq!(
            sort(big, Some(&RequestId::Num(i64::MAX))).unwrap(),
            "result null"
        );
    }

    #[test]
    fn a_string_that_looks_like_the_number_is_an_unknown_id() {
        let quoted = r#"{"jsonrpc":"2.0","id":"1","result":{}}"#;
        assert!(matches!(
            sort(quoted, Some(&RequestId::Num(1))),
            Err(LineError::UnknownId(_))
        ));
        let bare = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        assert!(matches!(
            sort(bare, Some(&RequestId::Str("1".into()))),
            Err(LineError::UnknownId(_))
        ));
        let fraction = r#"{"jsonrpc":"2.0","id":1.0,"result":{}}"#;
        assert!(matches!(
            sort(fraction, Some(&RequestId::Num(1))),
            Err(LineError::UnknownId(_))
        ));
    }

    #[test]
    fn another_id_is_unknown_and_named_in_the_message() {
        let line = r#"{"jsonrpc":"2.0","id":"call-2","result":{}}"#;
        let Err(LineError::UnknownId(why)) = sort(line, Some(&call_id())) else {
            panic!("call-2 is not call-1");
        };
        assert_eq!(why, r#""call-2"; expected "call-1""#);
        let null = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}"#;
        assert!(matches!(
            sort(null, Some(&call_id())),
            Err(LineError::UnknownId(_))
        ));
    }

    #[test]
    fn a_response_while_no_request_is_outstanding_is_an_unknown_id() {
        let line = r#"{"jsonrpc":"2.0","id":"call-1","result":{}}"#;
        let Err(LineError::UnknownId(why)) = sort(line, None) else {
            panic!("nothing was asked");
        };
        assert!(why.contains("no request is outstanding"), "{why}");
    }

    #[test]
    fn a_jsonrpc_error_is_an_answer_with_code_and_message() {
        let line =
            r#"{"jsonrpc":"2.0","id":"call-1","error":{"code":-32601,"message":"no such tool"}}"#;
        assert_eq!(
            sort(line, Some(&call_id())).unwrap(),
            "error -32601 no such tool"
        );
        let malformed = r#"{"jsonrpc":"2.0","id":"call-1","error":{"code":"x","message":"m"}}"#;
        assert!(not_jsonrpc_message(malformed).contains("integer \"code\""));
    }

    #[test]
    fn a_line_that_is_not_json_is_not_jsonrpc() {
        assert!(not_jsonrpc_message("hello from the guest").starts_with("not JSON"));
        assert!(not_jsonrpc_message("").starts_with("not JSON"));
        assert!(not_jsonrpc_message(r#"{"jsonrpc":"2.0","id":"call-1","#).starts_with("not JSON"));
    }

    #[test]
    fn an_array_is_not_jsonrpc() {
        assert_eq!(
            not_jsonrpc_message(r#"[{"jsonrpc":"2.0","id":"call-1","result":{}}]"#),
            "an array instead of an object"
        );
    }

    #[test]
    fn a_message_without_jsonrpc_is_not_jsonrpc() {
        assert_eq!(
            not_jsonrpc_message(r#"{"id":"call-1","result":{}}"#),
            "no \"jsonrpc\" member"
        );
    }

    #[test]
    fn jsonrpc_version_one_is_not_jsonrpc() {
        assert_eq!(
            not_jsonrpc_message(r#"{"jsonrpc":"1.0","id":"call-1","result":{}}"#),
            "\"jsonrpc\" is \"1.0\", not \"2.0\""
        );
        assert_eq!(
            not_jsonrpc_message(r#"{"jsonrpc":2.0,"id":"call-1","result":{}}"#),
            "\"jsonrpc\" is 2.0, not \"2.0\""
        );
    }

    #[test]
    fn a_response_must_hold_exactly_one_of_result_and_error() {
        assert!(not_jsonrpc_message(r#"{"jsonrpc":"2.0","id":"call-1"}"#).contains("neither"));
        let both =
            r#"{"jsonrpc":"2.0","id":"call-1","result":{},"error":{"code":1,"message":"m"}}"#;
        assert!(not_jsonrpc_message(both).contains("both"));
        assert!(not_jsonrpc_message(r#"{"jsonrpc":"2.0","result":{}}"#).contains("neither"));
    }

    #[test]
    fn ids_of_other_types_are_not_jsonrpc() {
        assert_eq!(
            not_jsonrpc_message(r#"{"jsonrpc":"2.0","id":true,"result":{}}"#),
            "\"id\" is a boolean, not a string or a number"
        );
    }

    #[test]
    fn a_request_from_the_guest_names_its_method() {
        let line = r#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}"#;
        assert_eq!(
            sort(line, Some(&call_id())),
            Err(LineError::GuestRequest("sampling/createMessage".into()))
        );
        let null_id = r#"{"jsonrpc":"2.0","id":null,"method":"roots/list"}"#;
        assert!(matches!(
            sort(null_id, None),
            Err(LineError::GuestRequest(_))
        ));
        assert!(not_jsonrpc_message(r#"{"jsonrpc":"2.0","method":7}"#).contains("\"method\""));
    }

    #[test]
    fn each_fault_names_its_crash_kind() {
        let kinds: Vec<_> = [
            r#"{"jsonrpc":"1.0"}"#,
            r#"{"jsonrpc":"2.0","id":"x","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#,
        ]
        .iter()
        .map(|line| sort(line, Some(&call_id())).unwrap_err().crash_kind())
        .collect();
        assert_eq!(kinds, ["not_jsonrpc", "unknown_id", "guest_request"]);
        assert_eq!(
            LineError::GuestRequest("ping".into()).to_string(),
            "sent a request of its own: ping"
        );
    }

    #[test]
    fn deep_nesting_is_refused_before_the_value_is_built() {
        let depth = 100_000;
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":"call-1","result":{}{}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(not_jsonrpc_message(&line).contains("nested deeper"));
    }

    #[test]
    fn nesting_up_to_the_limit_is_accepted() {
        let inner = MAX_NESTING - 1; // the message object is one level
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":"call-1","result":{}{}}}"#,
            "[".repeat(inner),
            "]".repeat(inner)
        );
        assert!(sort(&line, Some(&call_id())).is_ok());
        let deeper = format!(
            r#"{{"jsonrpc":"2.0","id":"call-1","result":{}{}}}"#,
            "[".repeat(inner + 1),
            "]".repeat(inner + 1)
        );
        assert!(not_jsonrpc_message(&deeper).contains("nested deeper"));
    }

    /// `template` with `PAD` replaced by nothing, and by a string long enough to send the
    /// line down the long path.
    fn short_and_long(template: &str) -> (String, String) {
        let pad = "p".repeat(4 * LONG_LINE);
        (template.replace("PAD", ""), template.replace("PAD", &pad))
    }

    #[test]
    fn a_long_line_is_sorted_as_the_same_short_line_is() {
        let nested = |depth: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","_":"PAD","id":"call-1","result":{}{}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            )
        };
        let templates = [
            r#"{"jsonrpc":"2.0","_":"PAD","id":"call-1","result":{"content":[{"type":"text","text":"a\"b"}]}}"#.to_string(),
            // A float, a member named twice and -0 are left to simd-json.
            r#"{"jsonrpc":"2.0","_":"PAD","id":"call-1","result":{"x":[1.5,2.2250738585072011e-308,-0]}}"#.to_string(),
            r#"{"jsonrpc":"2.0","_":"PAD","id":"call-1","result":{"a":1,"a":2}}"#.to_string(),
            // serde_json refuses a lone surrogate; simd-json reads it.
            r#"{"jsonrpc":"2.0","_":"PAD","id":"call-1","result":"\ud800"}"#.to_string(),
            r#"{"jsonrpc":"2.0","_":"PAD","method":"notifications/message"}"#.to_string(),
            r#"{"jsonrpc":"2.0","_":"PAD","id":"call-2","result":{}}"#.to_string(),
            r#"{"jsonrpc":"2.0","_":"PAD","id":7,"method":"ping"}"#.to_string(),
            r#"{"jsonrpc":"2.0","_":"PAD","id":"call-1","error":{"code":-32000,"message":"no"}}"#.to_string(),
            r#"{"jsonrpc":"1.0","_":"PAD","id":"call-1","result":{}}"#.to_string(),
            r#"{"jsonrpc":"2.0","_":"PAD","id":true,"result":{}}"#.to_string(),
            nested(MAX_NESTING - 2),
            nested(MAX_NESTING - 1),
            nested(MAX_NESTING),
        ];
        for template in &templates {
            let (short, long) = short_and_long(template);
            assert!(
                long_line::suits(long.as_bytes()),
                "the long path reads {template}"
            );
            assert_eq!(
                sort(&long, Some(&call_id())),
                sort(&short, Some(&call_id())),
                "{template}"
            );
        }
        assert!(sort(
            &short_and_long(&nested(MAX_NESTING - 1)).1,
            Some(&call_id())
        )
        .is_ok());
        let too_deep = short_and_long(&nested(MAX_NESTING)).1;
        assert!(not_jsonrpc_message(&too_deep).contains("nested deeper"));
    }

    #[test]
    fn a_long_line_that_is_not_json_is_refused_by_simd_json() {
        for template in [
            r#"{"jsonrpc":"2.0","id":"call-1","result":{}} "PAD""#,
            r#"{"jsonrpc":"2.0","id":"call-1","result":"PAD"#,
        ] {
            let (_, long) = short_and_long(template);
            assert!(
                not_jsonrpc_message(&long).starts_with("not JSON ("),
                "{template}"
            );
        }
    }

    #[test]
    fn depth_counting_closes_siblings() {
        let mut text = br#"[[[]],[[]],{"a":[{"b":[]}]}]"#.to_vec();
        let tape = simd_json::to_tape(&mut text).unwrap();
        assert!(!nesting_exceeds(&tape.0, 5));
        assert!(nesting_exceeds(&tape.0, 4));
        let mut siblings = b"[[[]],[[]],[[]],[[]]]".to_vec();
        let tape = simd_json::to_tape(&mut siblings).unwrap();
        assert!(!nesting_exceeds(&tape.0, 3));
        assert!(nesting_exceeds(&tape.0, 2));
    }
}
