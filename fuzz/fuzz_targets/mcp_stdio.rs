//! A client's bytes through `hako serve --stdio`'s framing and MCP dispatch, no guest running.
#![no_main]

use std::sync::OnceLock;

use hako_fuzz::serve::StdioServer;

static SERVER: OnceLock<StdioServer> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| SERVER.get_or_init(StdioServer::new).check(data));
