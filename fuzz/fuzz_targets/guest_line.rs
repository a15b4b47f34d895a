//! A guest's stdout: lines sorted against an awaited id, results read every way the host reads them.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hako_fuzz::protocol::guest_lines(data));
