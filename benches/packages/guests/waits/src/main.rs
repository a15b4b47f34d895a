//! The waits package, for `benches/serve/mixed.sh`: tools whose time goes to waiting or to
//! computing, as agent tools' does.
//!
//! - `sleep {ms}`: sleeps (`poll_oneoff` on a clock), then answers how long it slept;
//! - `fetch {url}`: one GET through `subako_http`, answered with the status it got;
//! - `spin {ms}`: computes (a hash chain, looking at the clock every 100,000 rounds) for about
//!   `ms` milliseconds, or until its call's time limit ends it.
//!
//! This file owns the tools; the protocol is the corpus's `abi` crate.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[link(wasm_import_module = "subako_http")]
extern "C" {
    fn request(ptr: *const u8, len: usize) -> i32;
    fn read_response(ptr: *mut u8, len: usize) -> i32;
}

fn main() {
    let object = |properties: Value| json!({"type": "object", "properties": properties});
    abi::serve(
        env!("CARGO_PKG_NAME"),
        &[
            abi::Tool {
                description: json!({
                    "name": "sleep",
                    "description": "Sleep for ms milliseconds.",
                    "inputSchema": object(json!({"ms": {"type": "integer", "minimum": 0}})),
                }),
                call: sleep,
            },
            abi::Tool {
                description: json!({
                    "name": "fetch",
                    "description": "GET a URL through the host and answer its status.",
                    "inputSchema": object(json!({"url": {"type": "string"}})),
                }),
                call: fetch,
            },
            abi::Tool {
                description: json!({
                    "name": "spin",
                    "description": "Compute for about ms milliseconds.",
                    "inputSchema": object(json!({"ms": {"type": "integer", "minimum": 0}})),
                }),
                call: spin,
            },
        ],
    );
}

fn millis(arguments: &Value) -> u64 {
    arguments["ms"].as_u64().unwrap_or(200)
}

/// `sleep {ms}`.
fn sleep(arguments: &Value) -> Result<Value, String> {
    let ms = millis(arguments);
    std::thread::sleep(Duration::from_millis(ms));
    Ok(abi::structured(json!({"slept_ms": ms})))
}

/// `fetch {url}`.
fn fetch(arguments: &Value) -> Result<Value, String> {
    let url = arguments["url"]
        .as_str()
        .ok_or("fetch needs a string url")?;
    let asked = json!({"method": "GET", "url": url}).to_string();
    // SAFETY: the host reads `len` bytes at `ptr`, which the string holds.
    let len = unsafe { request(asked.as_ptr(), asked.len()) };
    let len = usize::try_from(len).map_err(|_| format!("subako_http.request answered {len}"))?;
    let mut answer = vec![0u8; len];
    // SAFETY: the host writes exactly `len` bytes at `ptr`, which the buffer holds.
    let read = unsafe { read_response(answer.as_mut_ptr(), len) };
    if read != 0 {
        return Err(format!("subako_http.read_response answered {read}"));
    }
    let answer: Value = serde_json::from_slice(&answer).map_err(|err| err.to_string())?;
    match answer["ok"]["status"].as_u64() {
        Some(status) => Ok(abi::structured(json!({"status": status}))),
        None => Err(format!("the request failed: {}", answer["error"])),
    }
}

/// `spin {ms}`.
fn spin(arguments: &Value) -> Result<Value, String> {
    let until = Instant::now() + Duration::from_millis(millis(arguments));
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rounds: u64 = 0;
    while Instant::now() < until {
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
        }
        rounds += 1;
    }
    Ok(abi::structured(json!({"rounds": rounds, "state": state})))
}
