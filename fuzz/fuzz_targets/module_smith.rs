//! Modules that `wasm-smith` builds from the input, through the static ABI 1 check.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    if let Ok(wasm) = hako_fuzz::package::smith_module(&mut u) {
        hako_fuzz::package::module(&wasm);
    }
});
