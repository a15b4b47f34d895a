//! A guest's `subako_http` request JSON, through validation, the policy and a checking broker.
#![no_main]

use std::sync::OnceLock;

use hako_fuzz::http::HttpChecker;

static CHECKER: OnceLock<HttpChecker> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| CHECKER.get_or_init(HttpChecker::new).request(data));
