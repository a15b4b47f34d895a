//! `subako-package.json`: parsed by its rules, or refused by them.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hako_fuzz::package::manifest(data));
