//! The bundled example function package: an MCP server over stdio that
//! speaks Subako ABI 1 and offers one tool, `greet`.
//!
//! It owns the whole guest side of the ABI for this one tool: reading one
//! JSON-RPC request per line from stdin, answering `server/discover`,
//! `tools/list` and `tools/call` with one compact JSON line each on stdout,
//! ignoring notifications, and returning (exit status 0) at end of file.
//! It does not use the filesystem or `subako_http`, and it never writes
//! anything but protocol lines to stdout; diagnostics go to stderr.
//!
//! Try it in any WASI preview 1 runtime:
//!
//! ```text
//! printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{"name":"Ada"}}}' \
//!   | wasmtime module.wasm
//! {"id":1,"jsonrpc":"2.0","result":{"content":[{"text":"{\"message\":\"Hello, Ada!\"}","type":"text"}],"structuredContent":{"message":"Hello, Ada!"}}}
//! ```

use std::io::{self, BufRead, Write};

use serde_json::{json, Value};

/// The MCP revision this server speaks (stateless, no `initialize`).
const PROTOCOL_VERSION: &str = "2026-07-28";

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

fn main() {
    let stdin = io::stdin();
    let mut stdout = io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = match line {
            Ok(line) => line,
            Err(error) => {
                eprintln!("greet: cannot read stdin: {error}");
                break;
            }
        };
        let Some(answer) = answer_line(&line) else {
            continue;
        };
        // A failed write means the host has gone away; there is no one left
        // to answer, so stop like at end of file.
        if writeln!(stdout, "{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
}

/// Answers one stdin line, or `None` when it asks for no answer
/// (a notification, a blank line, or a line that is not JSON).
fn answer_line(line: &str) -> Option<Value> {
    if line.trim().is_empty() {
        return None;
    }
    let message: Value = match serde_json::from_str(line) {
        Ok(message) => message,
        Err(error) => {
            eprintln!("greet: ignoring a line that is not JSON: {error}");
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
        "tools/list" => Ok(json!({"tools": [greet_tool()]})),
        "tools/call" => Ok(call_tool(&params)),
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

/// The one tool this package offers, as `tools/list` describes it.
fn greet_tool() -> Value {
    json!({
        "name": "greet",
        "description": "Greet someone by name.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Who to greet."}
            },
            "required": ["name"]
        },
        "outputSchema": {
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"]
        }
    })
}

/// Runs `tools/call`: a CallToolResult, with `isError` for anything the
/// model should read and correct (never a JSON-RPC error).
fn call_tool(params: &Value) -> Value {
    let tool = params.get("name").and_then(Value::as_str).unwrap_or("");
    if tool != "greet" {
        return tool_error(&format!("unknown tool: {tool}"));
    }
    match params.get("arguments").and_then(|args| args.get("name")) {
        None | Some(Value::Null) => tool_error("name is required"),
        Some(Value::String(name)) if name.trim().is_empty() => tool_error("name must not be empty"),
        Some(Value::String(name)) => {
            let structured = json!({"message": format!("Hello, {name}!")});
            json!({
                "content": [{"type": "text", "text": structured.to_string()}],
                "structuredContent": structured,
            })
        }
        Some(_) => tool_error("name must be a string"),
    }
}

/// A CallToolResult that tells the model what went wrong.
fn tool_error(message: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": message}],
        "isError": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(arguments: Value) -> Value {
        let request = json!({
            "jsonrpc": "2.0",
            "id": "call-1",
            "method": "tools/call",
            "params": {"name": "greet", "arguments": arguments},
        });
        answer_line(&request.to_string()).expect("a request is answered")
    }

    #[test]
    fn greeting_has_text_and_structured_content() {
        let answer = call(json!({"name": "Ada"}));
        assert_eq!(answer["id"], "call-1");
        assert_eq!(
            answer["result"]["content"][0]["text"],
            r#"{"message":"Hello, Ada!"}"#
        );
        assert_eq!(
            answer["result"]["structuredContent"]["message"],
            "Hello, Ada!"
        );
        assert!(answer["result"].get("isError").is_none());
    }

    #[test]
    fn empty_name_is_a_tool_error() {
        let answer = call(json!({"name": ""}));
        assert_eq!(answer["result"]["isError"], true);
        assert_eq!(
            answer["result"]["content"][0]["text"],
            "name must not be empty"
        );
    }

    #[test]
    fn missing_name_is_a_tool_error() {
        let answer = call(json!({}));
        assert_eq!(answer["result"]["isError"], true);
        assert_eq!(answer["result"]["content"][0]["text"], "name is required");
    }

    #[test]
    fn notifications_are_not_answered() {
        let line = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#;
        assert!(answer_line(line).is_none());
    }

    #[test]
    fn discover_offers_tools_on_the_stateless_revision() {
        let answer = answer_line(r#"{"jsonrpc":"2.0","id":7,"method":"server/discover"}"#)
            .expect("a request is answered");
        assert_eq!(answer["id"], 7);
        assert_eq!(
            answer["result"]["supportedVersions"],
            json!([PROTOCOL_VERSION])
        );
        assert_eq!(answer["result"]["capabilities"], json!({"tools": {}}));
    }

    #[test]
    fn unknown_method_is_a_jsonrpc_error() {
        let answer = answer_line(r#"{"jsonrpc":"2.0","id":1,"method":"ping/pong"}"#)
            .expect("a request is answered");
        assert_eq!(answer["error"]["code"], METHOD_NOT_FOUND);
    }
}
