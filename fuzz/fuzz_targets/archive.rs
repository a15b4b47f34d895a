//! Any bytes as a package's `.tar.gz`: extracted or refused by rule, within the memory bound.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hako_fuzz::package::archive(data));
