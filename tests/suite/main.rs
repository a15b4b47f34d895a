//! hako's integration tests, in one test binary: each module below was a test file of its own,
//! and one binary links the engines (and LLVM, with `--features llvm`) once instead of once per
//! file, which keeps the test build's time and disk small. Run one part with its module path,
//! e.g. `cargo test --test suite call_contract::`.
//!
//! `support` and `serve_support` are what the tests share; the rest are tests.

mod serve_support;
mod support;

mod artifacts;
mod bench;
mod broker;
mod broker_guest;
mod call_contract;
mod check;
mod cli;
mod compile_worker;
mod content;
mod deadlines;
mod fuzzing;
mod guest_bounds;
mod guests_build;
mod http_abi;
mod leftovers;
mod memory_images;
mod object_store;
mod oci_hostile;
mod oci_registry;
mod run_command;
mod sandbox_rules;
mod serve_api;
mod serve_exposure;
mod serve_mcp;
mod serve_mcp_clients;
mod serve_roles;
mod serve_stdio;
mod serve_waits;
#[cfg(feature = "sigstore")]
mod sigstore_conformance;
mod upload;
mod wasi_testsuite;
