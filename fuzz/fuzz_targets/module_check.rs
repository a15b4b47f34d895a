//! Any bytes as `module.wasm`, through the static ABI 1 check.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hako_fuzz::package::module(data));
