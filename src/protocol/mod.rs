//! The line codec between the host and a guest, and the rendering of what a guest answers.
//!
//! This module is the only place that writes request lines for a guest and parses the lines a
//! guest prints on stdout. It owns:
//!
//! - [`request`]: the compact JSON-RPC request lines (`tools/call`, `server/discover`,
//!   `tools/list`), each with a fresh opaque [`RequestId`] and the `_meta` of revision
//!   [`PROTOCOL_VERSION`], written straight into a byte buffer;
//! - [`line`](mod@line): what one stdout line is ([`parse_line`]), parsed in place with simd-json (or
//!   with `serde_json` when long and sparse in escapes) and measured against the id the host is
//!   waiting for;
//! - [`result`]: a `CallToolResult` turned into what the model is shown ([`call_result`]);
//! - [`volume`]: `volume:///` links, decoded and later read through `cap-std`
//!   ([`read_volume_link`]), and the image magic bytes;
//! - [`discovery`]: the answers of `server/discover` and `tools/list`.
//!
//! It does not run guests, keep time, count stdout bytes or decide what a crash is called: the
//! call runner maps [`LineError`] and [`ResultError`] to its crash kinds. Nor does it enforce
//! the tool rules of discovery (names, sizes); it only hands the tools over.
//!
//! ```
//! use hako::protocol::{call_result, parse_line, tools_call_line, Answer, Line, RequestId, ShownBlock};
//!
//! let id = RequestId::fresh("call");
//! let request = tools_call_line(&id, "greet", &serde_json::json!({"name": "Ada"}));
//! assert!(request.ends_with(b"\n"));
//!
//! let mut answer =
//!     br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Hi"}]}}"#.to_vec();
//! let shown = parse_line(&mut answer, Some(&RequestId::Num(1)), |line| match line {
//!     Ok(Line::Answer(Answer::Result(result))) => call_result(&result).expect("a CallToolResult"),
//!     _ => panic!("a result with the expected id is the answer"),
//! });
//! assert_eq!(shown.content, [ShownBlock::Text { text: "Hi".into() }]);
//! ```

pub mod discovery;
mod image;
mod json;
pub mod line;
mod long_line;
pub mod request;
pub mod result;
pub mod volume;

pub use discovery::{discover_result, tools_list_page, DiscoveryError};
pub use line::{parse_line, Answer, Line, LineError, MAX_NESTING};
pub use request::{discover_line, tools_call_line, tools_list_line, RequestId};
pub use result::{call_result, CallResult, ResultError, ShownBlock};
pub use volume::{read_volume_link, MAX_VOLUME_IMAGE_BYTES};

/// The MCP revision every request names in its `_meta`.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
