//! The checks behind hako's fuzz targets, one function (or one checker, for those that need a
//! store or a policy first) per target. Each feeds one input to one of hako's parsers through
//! its public entry point and panics when a promise of that parser breaks: a panic inside
//! hako, a refusal that is not an error of its own kind, an answer that is not JSON-RPC, a
//! quoted input that is not clipped, or memory held past the stated bound.
//!
//! The same checks run on the stable toolchain as property tests (`tests/suite/fuzzing.rs`
//! includes this file as a module), over the seed corpora and inputs drawn from a fixed seed;
//! libFuzzer drives them here (`fuzz_targets/`). This crate does not generate inputs itself,
//! except that [`package::smith_module`] turns any bytes into a module with `wasm-smith`.
//!
//! | target | check |
//! | --- | --- |
//! | `guest_line` | [`protocol::guest_lines`] |
//! | `mcp_stdio` | [`serve::StdioServer::check`] |
//! | `manifest` | [`package::manifest`] |
//! | `archive` | [`package::archive`] |
//! | `module_check` | [`package::module`] on the input's bytes |
//! | `module_smith` | [`package::module`] on [`package::smith_module`]'s module |
//! | `http_request` | [`http::HttpChecker::request`] |
//! | `http_policy` | [`http::policy`] |

pub mod http;
pub mod meter;
pub mod package;
pub mod protocol;
pub mod serve;
pub mod smith;

/// The longest message a refusal may have: messages quote untrusted text (a name, a path, a
/// URL) only clipped, so a refusal stays short whatever the input.
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// Every allocation goes through the meter, so that the archive check can measure what
/// reading an archive holds.
#[global_allocator]
static METER: meter::Meter = meter::Meter;
