//! The check of MCP dispatch over stdio: a client's bytes go through `hako serve --stdio`'s
//! own loop ([`hako::serve::stdio::serve`]: its line framing, then `mcp::dispatch`) for a
//! package stored in a temporary store, and every line that comes out is checked.
//!
//! No guest runs: the package's module is never compiled, and the call threads are closed
//! before the first message, so a `tools/call` is answered at once with the busy error
//! (`-32000`) instead of running. Everything before them (parsing, ids,
//! notifications, revisions, `initialize`, `server/discover`, `tools/list`, a tool's lookup)
//! runs as in a server.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hako::engines::EngineConfig;
use hako::http::{NoBroker, Policy};
use hako::package::validate_tools;
use hako::serve::admission::Admission;
use hako::serve::calls::{Calls, Execution, LimitCaps};
use hako::serve::mcp::code;
use hako::serve::permits::RunPermits;
use hako::serve::stdio;
use hako::serve::threads::CallThreads;
use hako::store::Store;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::io::{AsyncWrite, BufReader};

/// The smallest module the ABI 1 check accepts: `(memory (export "memory") 1)` and
/// `(func (export "_start"))`, encoded by hand so that the check needs no text parser.
const MINIMAL_MODULE: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
    0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // types: [] -> []
    0x03, 0x02, 0x01, 0x00, // functions: one of type 0
    0x05, 0x03, 0x01, 0x00, 0x01, // memories: one, at least one page
    0x07, 0x13, 0x02, // exports: two
    0x06, b'm', b'e', b'm', b'o', b'r', b'y', 0x02, 0x00, // "memory", memory 0
    0x06, b'_', b's', b't', b'a', b'r', b't', 0x00, 0x00, // "_start", function 0
    0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code: an empty body
];

/// The package every message is addressed to.
pub const PACKAGE: &str = "greet";

/// A store holding one package, the server's calls over it, and a runtime to serve on.
pub struct StdioServer {
    calls: Arc<Calls>,
    runtime: tokio::runtime::Runtime,
    /// The store's folder, which no answer may name.
    root: String,
    _store: TempDir,
}

impl StdioServer {
    /// Stores [`PACKAGE`] (one tool, `greet`) in a fresh temporary store, without compiling
    /// it, and closes the call threads.
    pub fn new() -> StdioServer {
        let store_dir = tempfile::tempdir().expect("a temporary store folder");
        let source = store_dir.path().join("source");
        std::fs::create_dir(&source).expect("the package folder");
        let manifest = json!({
            "name": PACKAGE,
            "version": "1.0.0",
            "abi": 1,
            "description": "Greets someone by name."
        });
        std::fs::write(
            source.join("subako-package.json"),
            serde_json::to_vec(&manifest).expect("JSON"),
        )
        .expect("the manifest is written");
        std::fs::write(source.join("module.wasm"), MINIMAL_MODULE).expect("the module");
        let package = hako::package::load(&source).expect("the minimal package passes its check");
        let tools = validate_tools(vec![json!({
            "name": "greet",
            "description": "Greet someone by name.",
            "inputSchema": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"]
            }
        })])
        .expect("the tool passes the tool rules");
        let store = Store::open(store_dir.path().join("store")).expect("the store opens");
        store
            .put(&package, &tools, &[])
            .expect("the package is stored");
        let execution = Execution {
            admission: Admission::new(1, 1),
            threads: Arc::new(CallThreads::new(1, 1 << 20)),
            permits: RunPermits::new(1),
        };
        execution.threads.close_and_join();
        let calls = Calls::new(
            store,
            Policy::empty(),
            EngineConfig::DEFAULT,
            execution,
            1,
            Arc::new(NoBroker),
            LimitCaps::default(),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        StdioServer {
            calls: Arc::new(calls),
            runtime,
            root: store_dir.path().display().to_string(),
            _store: store_dir,
        }
    }

    /// Serves `input` (its first byte chooses the reader's buffer size, so that lines are
    /// cut across reads in many ways) and checks every line of output.
    pub fn check(&self, data: &[u8]) {
        let Some((&choice, input)) = data.split_first() else {
            return;
        };
        let capacity = match choice {
            0..=63 => usize::from(choice) + 1,
            _ => 8 * 1024,
        };
        let output = Shared::default();
        let served = self.runtime.block_on(stdio::serve(
            Arc::clone(&self.calls),
            PACKAGE.to_string(),
            BufReader::with_capacity(capacity, input),
            output.clone(),
            std::future::pending(),
        ));
        served.expect("serving from memory into memory does not fail");
        let written = output.0.lock().expect("the output").clone();
        let answers: Vec<&[u8]> = written.split(|&b| b == b'\n').collect();
        let (last, answers) = answers
            .split_last()
            .expect("split yields one piece at least");
        assert!(last.is_empty(), "every answer ends with a newline");
        let lines = input.split(|&b| b == b'\n').count();
        assert!(
            answers.len() <= lines,
            "{} answers to {lines} lines",
            answers.len()
        );
        for answer in answers {
            self.check_answer(answer, input);
        }
    }

    fn check_answer(&self, answer: &[u8], input: &[u8]) {
        let text = std::str::from_utf8(answer).expect("an answer is UTF-8");
        assert!(
            !text.contains(&self.root),
            "an answer names the store: {text}"
        );
        let members: BTreeMap<String, Box<RawValue>> =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(members["jsonrpc"].get(), r#""2.0""#, "{text}");
        let id = members.get("id").expect("an answer has an id").get();
        // An id is echoed as the client wrote it; only a message naming `id` twice (perhaps
        // escaped) gets the last one back as parsed, as `mcp::dispatch` documents.
        let twice = input.windows(4).filter(|w| w == b"\"id\"").count() > 1;
        assert!(
            id == "null" || contains(input, id.as_bytes()) || twice || input.contains(&b'\\'),
            "the id {id} is not the client's as written"
        );
        match (members.get("result"), members.get("error")) {
            (Some(_), None) => {}
            (None, Some(error)) => {
                let error: Value = serde_json::from_str(error.get()).expect("JSON");
                let number = error["code"].as_i64().expect("an integer code");
                let known = [
                    code::PARSE_ERROR,
                    code::INVALID_REQUEST,
                    code::METHOD_NOT_FOUND,
                    code::INVALID_PARAMS,
                    code::INTERNAL_ERROR,
                    code::SERVER_BUSY,
                    code::UNSUPPORTED_PROTOCOL_VERSION,
                ];
                assert!(known.contains(&number), "code {number}");
                assert!(error["message"].is_string(), "{text}");
            }
            _ => panic!("an answer has exactly one of result and error: {text}"),
        }
    }
}

impl Default for StdioServer {
    fn default() -> Self {
        StdioServer::new()
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// An output that keeps what was written, readable once serving is done.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl AsyncWrite for Shared {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.lock().expect("the output").extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
