//! The operator's TOML policy file.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hako_fuzz::http::policy(data));
