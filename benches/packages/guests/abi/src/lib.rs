//! The guest side of Subako ABI 1's stdio protocol, shared by the bench corpus's packages: one
//! JSON-RPC request per stdin line, `server/discover`, `tools/list` and `tools/call` answered
//! with one compact JSON line each on stdout (flushed), notifications ignored, and a return
//! from `main` (exit status 0) at end of file. It is the protocol handling of `examples/greet`,
//! written once for every package of the corpus.
//!
//! It owns the protocol and the shapes of a CallToolResult ([`structured`], [`image_and_text`],
//! [`tool_error`]). It does not know any tool: a package hands [`serve`] its [`Tool`]s. It uses
//! no file and no `subako_http`; diagnostics go to stderr.
//!
//! ```no_run
//! use serde_json::{json, Value};
//!
//! fn echo(arguments: &Value) -> Result<Value, String> {
//!     Ok(abi::structured(json!({ "echo": arguments })))
//! }
//!
//! fn main() {
//!     abi::serve("echo", &[abi::Tool {
//!         description: json!({"name": "echo", "inputSchema": {"type": "object"}}),
//!         call: echo,
//!     }]);
//! }
//! ```

use std::io::{self, BufRead, Write};

use serde_json::{json, Value};

/// The MCP revision these servers speak (stateless, no `initialize`).
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

/// One tool of a package.
pub struct Tool {
    /// What `tools/list` says of the tool: its `name`, `description`, `inputSchema`, ….
    pub description: Value,
    /// Runs the tool on its arguments: a CallToolResult, or a message the model should read
    /// (answered as a result with `isError`, never as a JSON-RPC error).
    pub call: fn(&Value) -> Result<Value, String>,
}

impl Tool {
    fn name(&self) -> &str {
        self.description["name"].as_str().unwrap_or("")
    }
}

/// Serves `tools` on stdin and stdout until end of file; `package` names the server in its
/// diagnostics.
pub fn serve(package: &str, tools: &[Tool]) {
    let stdin = io::stdin();
    let mut stdout = io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = match line {
            Ok(line) => line,
            Err(error) => {
                eprintln!("{package}: cannot read stdin: {error}");
                break;
            }
        };
        let Some(answer) = answer_line(package, tools, &line) else {
            continue;
        };
        // A failed write means the host has gone away; there is no one left to answer, so
        // stop as at end of file.
        if writeln!(stdout, "{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
}

/// Answers one stdin line, or `None` when it asks for no answer (a notification, a blank
/// line, or a line that is not JSON).
pub fn answer_line(package: &str, tools: &[Tool], line: &str) -> Option<Value> {
    if line.trim().is_empty() {
        return None;
    }
    let message: Value = match serde_json::from_str(line) {
        Ok(message) => message,
        Err(error) => {
            eprintln!("{package}: ignoring a line that is not JSON: {error}");
            return None;
        }
    };
    let id = message.get("id")?.clone();
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let answer = match method {
        "server/discover" => Ok(json!({
            "supportedVersions": [PROTOCOL_VERSION],
            "capabilities": {"tools": {}},
        })),
        "tools/list" => Ok(json!({
            "tools": tools.iter().map(|tool| tool.description.clone()).collect::<Vec<_>>(),
        })),
        "tools/call" => Ok(call_tool(tools, &params)),
        other => Err(json!({
            "code": METHOD_NOT_FOUND,
            "message": format!("method not found: {other}"),
        })),
    };
    Some(match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    })
}

/// Runs `tools/call` on the tool it names.
fn call_tool(tools: &[Tool], params: &Value) -> Value {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let Some(tool) = tools.iter().find(|tool| tool.name() == name) else {
        return tool_error(&format!("unknown tool: {name}"));
    };
    let no_arguments = json!({});
    let arguments = params.get("arguments").unwrap_or(&no_arguments);
    match (tool.call)(arguments) {
        Ok(result) => result,
        Err(message) => tool_error(&message),
    }
}

/// A CallToolResult showing `value` as compact JSON text and as `structuredContent`.
pub fn structured(value: Value) -> Value {
    json!({
        "content": [{"type": "text", "text": value.to_string()}],
        "structuredContent": value,
    })
}

/// A CallToolResult with a PNG image block and `value` as text and `structuredContent`.
pub fn image_and_text(png: &[u8], value: Value) -> Value {
    json!({
        "content": [
            {"type": "image", "mimeType": "image/png", "data": base64(png)},
            {"type": "text", "text": value.to_string()},
        ],
        "structuredContent": value,
    })
}

/// A CallToolResult that tells the model what went wrong.
pub fn tool_error(message: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": message}],
        "isError": true,
    })
}

/// `bytes` in standard base64 with padding (RFC 4648), as an image block's `data`.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let group = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (index, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if index <= chunk.len() {
                out.push(char::from(ALPHABET[(group >> shift) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The argument `key` as an unsigned integer: `default` when absent, an error naming the key
/// when it is not a non-negative integer.
pub fn u64_argument(arguments: &Value, key: &str, default: Option<u64>) -> Result<u64, String> {
    match arguments.get(key) {
        None | Some(Value::Null) => default.ok_or_else(|| format!("{key} is required")),
        Some(value) => value
            .as_u64()
            .ok_or_else(|| format!("{key} must be a non-negative integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo(arguments: &Value) -> Result<Value, String> {
        match arguments.get("fail") {
            Some(_) => Err("failed as asked".into()),
            None => Ok(structured(json!({"echo": arguments}))),
        }
    }

    fn tools() -> Vec<Tool> {
        vec![Tool {
            description: json!({"name": "echo", "inputSchema": {"type": "object"}}),
            call: echo,
        }]
    }

    fn answer(line: &str) -> Value {
        answer_line("test", &tools(), line).expect("a request is answered")
    }

    #[test]
    fn discover_offers_tools_on_the_stateless_revision() {
        let answer = answer(r#"{"jsonrpc":"2.0","id":7,"method":"server/discover"}"#);
        assert_eq!(answer["id"], 7);
        assert_eq!(
            answer["result"]["supportedVersions"],
            json!([PROTOCOL_VERSION])
        );
        assert_eq!(answer["result"]["capabilities"], json!({"tools": {}}));
    }

    #[test]
    fn tools_list_answers_every_description() {
        let answer = answer(r#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#);
        assert_eq!(answer["result"]["tools"][0]["name"], "echo");
    }

    #[test]
    fn a_call_answers_the_tools_result_or_its_message_as_is_error() {
        let ok = answer(
            r#"{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"echo","arguments":{"a":1}}}"#,
        );
        assert_eq!(ok["result"]["structuredContent"], json!({"echo": {"a": 1}}));
        assert_eq!(ok["result"]["content"][0]["text"], r#"{"echo":{"a":1}}"#);
        let failed = answer(
            r#"{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"echo","arguments":{"fail":1}}}"#,
        );
        assert_eq!(failed["result"]["isError"], true);
        assert_eq!(failed["result"]["content"][0]["text"], "failed as asked");
        let unknown =
            answer(r#"{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"shout"}}"#);
        assert_eq!(
            unknown["result"]["content"][0]["text"],
            "unknown tool: shout"
        );
    }

    #[test]
    fn notifications_and_blank_lines_are_not_answered() {
        let line = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#;
        assert!(answer_line("test", &tools(), line).is_none());
        assert!(answer_line("test", &tools(), "  ").is_none());
        assert!(answer_line("test", &tools(), "not json").is_none());
    }

    #[test]
    fn unknown_method_is_a_jsonrpc_error() {
        let answer = answer(r#"{"jsonrpc":"2.0","id":1,"method":"ping/pong"}"#);
        assert_eq!(answer["error"]["code"], METHOD_NOT_FOUND);
    }

    #[test]
    fn base64_pads_to_whole_groups() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }

    #[test]
    fn integer_arguments_have_defaults_and_say_what_is_wrong() {
        let arguments = json!({"n": 3, "bad": -1});
        assert_eq!(u64_argument(&arguments, "n", None), Ok(3));
        assert_eq!(u64_argument(&arguments, "m", Some(9)), Ok(9));
        assert_eq!(
            u64_argument(&arguments, "m", None),
            Err("m is required".into())
        );
        assert_eq!(
            u64_argument(&arguments, "bad", None),
            Err("bad must be a non-negative integer".into())
        );
    }
}
