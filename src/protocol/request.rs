//! Request lines for a guest: one compact JSON-RPC object per line, ending in `\n`.
//!
//! The envelope is written byte by byte into a `Vec<u8>`, with no intermediate JSON value;
//! only the caller's `arguments` go through `serde_json`. Every request carries the same
//! `_meta` (protocol revision, `clientInfo` naming hako and its version, empty
//! `clientCapabilities`), since ABI 1 has no `initialize` handshake. This file does not read
//! answers; that is [`super::line`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A request id: fresh and opaque per request. Guests must echo it exactly, so a string id
/// and a number id never match each other (`"1"` is not `1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestId {
    /// A string id, such as `call-9f0c2a4b11d3e87a`.
    Str(String),
    /// A number id.
    Num(i64),
}

impl RequestId {
    /// A fresh string id, `<prefix>-<16 hex digits>`: no two made by one process are the
    /// same (see `fresh_bits`), and they do not look consecutive.
    pub fn fresh(prefix: &str) -> Self {
        RequestId::Str(format!("{prefix}-{:016x}", fresh_bits()))
    }

    /// Appends the id as JSON: a string or a number.
    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            RequestId::Str(s) => write_json_str(out, s),
            RequestId::Num(n) => out.extend_from_slice(n.to_string().as_bytes()),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Str(s) => write!(f, "{s:?}"),
            RequestId::Num(n) => write!(f, "{n}"),
        }
    }
}

/// A process-wide counter put through a bijection of `u64` keyed by bits drawn once per
/// process: distinct for every id of the process (the counter never repeats, and neither
/// keyed step merges two values), not consecutive to look at, and other processes start from
/// other keys. Costs no system call per id (a call used to spend a `getrandom` on its id).
/// Ids are no secret, only distinct: a guest is handed its own to echo, and learns nothing
/// from it that it could use.
fn fresh_bits() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // Should the system's randomness be unavailable, the clock keys the ids: they only have to
    // differ from the ones before them.
    let key = *KEY.get_or_init(|| getrandom::u64().unwrap_or_else(|_| clock_nanos()));
    scramble(COUNTER.fetch_add(1, Ordering::Relaxed) ^ key)
}

fn clock_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// splitmix64's finaliser: each step (an odd multiplication, an xor with a right shift of
/// itself) is invertible, so distinct inputs give distinct outputs.
fn scramble(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `_meta` object of every request. The version is Cargo's, which never needs escaping.
const META: &str = concat!(
    r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","#,
    r#""io.modelcontextprotocol/clientInfo":{"name":"hako","version":""#,
    env!("CARGO_PKG_VERSION"),
    r#""},"io.modelcontextprotocol/clientCapabilities":{}}"#
);

/// Opens the envelope up to and including `"params":{`.
fn begin(id: &RequestId, method: &str, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity + META.len() + 96);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    id.write_json(&mut out);
    out.extend_from_slice(br#","method":"#);
    write_json_str(&mut out, method);
    out.extend_from_slice(br#","params":{"#);
    out
}

/// Closes the envelope after the `_meta` member and ends the line.
fn finish(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(META.as_bytes());
    out.extend_from_slice(b"}}\n");
    out
}

/// A `tools/call` request line for `tool` with `arguments`.
///
/// `arguments` must be a JSON object (ABI 1 says so, and the caller checks what it was
/// given); anything else is written as given, and the guest is left to refuse it.
pub fn tools_call_line(id: &RequestId, tool: &str, arguments: &serde_json::Value) -> Vec<u8> {
    debug_assert!(arguments.is_object(), "tool arguments are a JSON object");
    let mut out = begin(id, "tools/call", tool.len() + 64);
    out.extend_from_slice(br#""name":"#);
    write_json_str(&mut out, tool);
    out.extend_from_slice(br#","arguments":"#);
    serde_json::to_writer(&mut out, arguments)
        .expect("a serde_json::Value always serializes into a Vec");
    out.push(b',');
    finish(out)
}

/// A `server/discover` request line.
pub fn discover_line(id: &RequestId) -> Vec<u8> {
    finish(begin(id, "server/discover", 0))
}

/// A `tools/list` request line, asking for the page after `cursor` when there is one.
pub fn tools_list_line(id: &RequestId, cursor: Option<&str>) -> Vec<u8> {
    let mut out = begin(id, "tools/list", cursor.map_or(0, str::len));
    if let Some(cursor) = cursor {
        out.extend_from_slice(br#""cursor":"#);
        write_json_str(&mut out, cursor);
        out.push(b',');
    }
    finish(out)
}

/// Appends `s` as a JSON string, escaping what JSON requires and nothing else.
fn write_json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(line: &[u8]) -> Value {
        assert_eq!(
            line.last(),
            Some(&b'\n'),
            "a request line ends in a newline"
        );
        assert!(
            !line[..line.len() - 1].contains(&b'\n'),
            "a request is one line"
        );
        serde_json::from_slice(line).expect("a request line is JSON")
    }

    fn expected_meta() -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "hako", "version": crate::VERSION},
            "io.modelcontextprotocol/clientCapabilities": {},
        })
    }

    #[test]
    fn tools_call_line_has_the_exact_compact_bytes() {
        let id = RequestId::Str("call-0192f5c4".into());
        let line = tools_call_line(&id, "greet", &json!({"name": "Ada"}));
        let expected = format!(
            concat!(
                r#"{{"jsonrpc":"2.0","id":"call-0192f5c4","method":"tools/call","params":{{"#,
                r#""name":"greet","arguments":{{"name":"Ada"}},"_meta":{{"#,
                r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","#,
                r#""io.modelcontextprotocol/clientInfo":{{"name":"hako","version":"{}"}},"#,
                r#""io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#,
                "\n"
            ),
            crate::VERSION
        );
        assert_eq!(String::from_utf8(line).unwrap(), expected);
    }

    #[test]
    fn tools_call_line_parses_back_to_every_member() {
        let id = RequestId::Str("call-\"quoted\"\n".into());
        let arguments = json!({"name": "Ada \u{1} \"Lovelace\"", "n": [1, 2.5, null]});
        let line = parse(&tools_call_line(&id, "gr\\eet", &arguments));
        assert_eq!(line["jsonrpc"], "2.0");
        assert_eq!(line["id"], "call-\"quoted\"\n");
        assert_eq!(line["method"], "tools/call");
        assert_eq!(line["params"]["name"], "gr\\eet");
        assert_eq!(line["params"]["arguments"], arguments);
        assert_eq!(line["params"]["_meta"], expected_meta());
    }

    #[test]
    fn numeric_ids_are_written_as_numbers() {
        let line = parse(&discover_line(&RequestId::Num(-42)));
        assert_eq!(line["id"], json!(-42));
        assert_eq!(line["method"], "server/discover");
        assert_eq!(line["params"], json!({"_meta": expected_meta()}));
    }

    #[test]
    fn tools_list_line_carries_the_cursor_only_when_given() {
        let id = RequestId::Str("tools-list-1".into());
        let first = parse(&tools_list_line(&id, None));
        assert_eq!(first["method"], "tools/list");
        assert_eq!(first["params"], json!({"_meta": expected_meta()}));
        let next = parse(&tools_list_line(&id, Some("page\t2")));
        assert_eq!(next["params"]["cursor"], "page\t2");
        assert_eq!(next["params"]["_meta"], expected_meta());
    }

    #[test]
    fn fresh_ids_differ_and_carry_the_prefix() {
        let a = RequestId::fresh("call");
        let b = RequestId::fresh("call");
        assert_ne!(a, b);
        let RequestId::Str(s) = a else {
            panic!("fresh ids are strings")
        };
        let digits = s.strip_prefix("call-").expect("the prefix comes first");
        assert_eq!(digits.len(), 16);
        assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn ids_of_one_process_never_repeat_and_do_not_count_up() {
        let ids: Vec<u64> = (0..100_000).map(|_| fresh_bits()).collect();
        let distinct: std::collections::HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), ids.len());
        // Neighbours differ in many bits, not in the last few as a counter's would.
        assert!(ids
            .windows(2)
            .all(|pair| (pair[0] ^ pair[1]).count_ones() > 4));
    }

    #[test]
    fn the_scramble_merges_no_two_neighbouring_inputs() {
        let outputs: std::collections::HashSet<u64> = (0..1u64 << 16)
            .flat_map(|n| [n, u64::MAX - n, n << 48])
            .map(scramble)
            .collect();
        assert_eq!(outputs.len(), 3 * (1 << 16) - 1, "0 << 48 is 0 again");
    }

    #[test]
    fn ids_display_as_json_would_show_them() {
        assert_eq!(RequestId::Str("a".into()).to_string(), "\"a\"");
        assert_eq!(RequestId::Num(7).to_string(), "7");
    }
}
