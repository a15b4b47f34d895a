//! hako: a host for Subako ABI 1 function packages — WebAssembly (WASI preview 1) modules
//! that are MCP servers over stdio — on wasmer.
//!
//! The data's way through the crate: [`package`] reads and checks a package, [`store`] keeps
//! it with its precompiled artifacts, [`call`] runs one instance per call inside the
//! [`sandbox`] (WASI preview 1) with [`http`] (the `subako_http` imports), speaking the line
//! codec of [`protocol`]; [`compile`] compiles within time and memory bounds (in a child
//! process of the `hako` command); [`upload`] strings check, compile, discovery and store together;
//! [`serve`] is the HTTP and stdio front end, [`bench`](mod@bench) times engines side by side, and [`cli`]
//! drives it all from the command line.
//! No module here names an engine type: engines sit behind [`hako_engine_api`].

// Unsafe code only where an engine or the OS demands it: each such place allows it by name,
// with a `// SAFETY:` comment that says why it holds.
#![deny(unsafe_code)]

pub mod bench;
pub mod call;
pub mod cli;
pub mod compile;
pub mod engines;
pub mod http;
pub mod package;
pub mod protocol;
pub mod registry;
pub mod sandbox;
pub mod serve;
pub mod store;
pub mod upload;

/// hako's version, as sent in `clientInfo`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `s`, cut to at most `max` characters (with `…` when cut), for quoting untrusted text (a
/// guest's, an archive's, a manifest's) in a message.
pub(crate) fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

/// Calls `visit` with every byte of the JSON text `bytes` that lies outside its strings (the
/// structure: brackets, braces, commas, colons, and the bytes of numbers and literals), until
/// it answers `false`. A scan that costs one pass and no memory, for bounds checked before a
/// text is parsed (its nesting, how many values it holds).
pub(crate) fn json_structure(bytes: &[u8], mut visit: impl FnMut(u8) -> bool) {
    let (mut in_string, mut escaped) = (false, false);
    for &byte in bytes {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if byte == b'"' {
            in_string = true;
        } else if !visit(byte) {
            return;
        }
    }
}

/// An error and its causes as one line, `: `-joined, skipping a cause whose message the line
/// already carries (many errors quote their cause in their own message and also keep it as
/// their source, which would otherwise print it twice).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !line.contains(&message) {
            line.push_str(": ");
            line.push_str(&message);
        }
        source = cause.source();
    }
    line
}
