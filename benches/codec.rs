//! The line codec on real guest answers: `parse_line` + `call_result` (simd-json, in place)
//! against a `serde_json` baseline that makes the same checks, for a greet answer, a 64 KiB
//! text answer and an answer carrying a 200 KiB inline PNG. Throughput is the line's bytes.
//! The greet line is the one `examples/greet` prints (serde_json, keys sorted), with an id of
//! hako's shape; the setup runs the real guest and checks that it prints as many bytes.
//!
//! This bench does not run guests; the cold start of a whole call is `benches/cold_start.rs`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use hako::call::{self, CallOutcome, CallStats, Limits, Mounts, Network, ToolRequest};
use hako::engines::{self, EngineConfig};
use hako::http::{NoBroker, PackagePolicy};
use hako::protocol::{call_result, parse_line, Answer, Line, RequestId};
use serde_json::{json, Value};
use std::hint::black_box;
use std::sync::Arc;

const ID: &str = "call-9f0c2a4b11d3e87a";

fn answer_line(result: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": ID, "result": result})).unwrap()
}

/// The three answers, as a guest prints them (without the newline).
fn fixtures() -> Vec<(&'static str, Vec<u8>)> {
    let greet = answer_line(json!({
        "content": [{"type": "text", "text": "{\"message\":\"Hello, Ada!\"}"}],
        "structuredContent": {"message": "Hello, Ada!"},
    }));

    let paragraph = "Line \"quoted\" and a tab\there; ünïcödé text for the model.\n";
    let text: String = paragraph.repeat(64 * 1024 / paragraph.len() + 1);
    let text_answer =
        answer_line(json!({"content": [{"type": "text", "text": &text[..64 * 1024]}]}));

    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    while png.len() < 200 * 1024 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        png.push(state as u8);
    }
    let image_answer = answer_line(json!({"content": [
        {"type": "text", "text": "Here is the chart."},
        {"type": "image", "mimeType": "image/png", "data": STANDARD.encode(&png)},
    ]}));

    vec![
        ("greet", greet),
        ("text_64k", text_answer),
        ("image_200k", image_answer),
    ]
}

/// The hako path: in-place simd-json parse, id check, rendering.
fn with_simd_json(line: &mut [u8], expected: &RequestId) -> usize {
    match parse_line(line, Some(expected)) {
        Ok(Line::Answer(Answer::Result(result))) => {
            let shown = call_result(&result).expect("the fixtures are valid results");
            shown.content.len() + usize::from(shown.structured.is_some())
        }
        _ => panic!("the fixtures answer the expected id"),
    }
}

/// The baseline: a `serde_json::Value` parse followed by the same checks and the same
/// chunked base64 validation, so only the parser and the value model differ.
fn with_serde_json(line: &[u8]) -> usize {
    let message: Value = serde_json::from_slice(line).expect("the fixtures are JSON");
    let message = message.as_object().expect("an object");
    assert_eq!(message.get("jsonrpc").and_then(Value::as_str), Some("2.0"));
    assert!(message.get("method").is_none());
    assert_eq!(message.get("id").and_then(Value::as_str), Some(ID));
    assert!(message.get("error").is_none());
    let result = message
        .get("result")
        .and_then(Value::as_object)
        .expect("a result");
    if let Some(kind) = result.get("resultType") {
        assert_eq!(kind.as_str(), Some("complete"));
    }
    let mut shown = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .expect("content")
    {
        let field = |name: &str| block.get(name).and_then(Value::as_str);
        match field("type") {
            Some("text") => shown.push(field("text").expect("text").to_string()),
            Some("image") => {
                let data = field("data").expect("data");
                assert_eq!(field("mimeType"), Some("image/png"));
                assert!(valid_png_base64(data.as_bytes()));
                shown.push(data.to_string());
            }
            _ => shown.push(String::new()),
        }
    }
    let structured = result.get("structuredContent").cloned();
    shown.len() + usize::from(structured.is_some())
}

/// The same validation `call_result` makes: symbols up to the final quantum, the final
/// quantum and the magic through the decoder.
fn valid_png_base64(text: &[u8]) -> bool {
    let symbol = |b: u8| {
        (b.wrapping_sub(b'A') < 26)
            | (b.wrapping_sub(b'a') < 26)
            | (b.wrapping_sub(b'0') < 10)
            | (b == b'+')
            | (b == b'/')
    };
    let (body, last) = text.split_at(text.len() - 4);
    let mut tail = [0u8; 3];
    let mut head = [0u8; 12];
    text.len().is_multiple_of(4)
        && body
            .chunks(256)
            .all(|block| block.iter().fold(true, |ok, &b| ok & symbol(b)))
        && STANDARD.decode_slice(last, &mut tail).is_ok()
        && STANDARD.decode_slice(&text[..16], &mut head).is_ok()
        && head.starts_with(b"\x89PNG\r\n\x1a\n")
}

/// The bytes the real greet guest prints for Ada, newline included.
fn greet_stdout_bytes() -> u64 {
    let wasm = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/greet/module.wasm"
    ))
    .expect("the greet example is committed");
    let engine = engines::engine(EngineConfig::DEFAULT, None).expect("the engine builds");
    let module = engine.compile(&wasm).expect("greet compiles");
    let outcome = call::call_tool(
        &module,
        ToolRequest {
            program: "greet",
            tool: "greet",
            arguments: json!({"name": "Ada"}),
            limits: Limits::CALL,
            mounts: Mounts::fresh(None),
            network: Network {
                policy: Arc::new(PackagePolicy::default()),
                broker: Arc::new(NoBroker),
            },
        },
        CallStats::default(),
    )
    .expect("the call runs");
    match outcome {
        CallOutcome::Answered { stats, .. } => stats.stdout_bytes,
        crashed => panic!("greet crashed: {crashed:?}"),
    }
}

fn codec(c: &mut Criterion) {
    let expected = RequestId::Str(ID.to_string());
    let fixtures = fixtures();
    assert_eq!(
        fixtures[0].1.len() as u64 + 1,
        greet_stdout_bytes(),
        "the greet fixture is as long as the line the real guest prints"
    );
    let mut group = c.benchmark_group("codec");
    for (name, line) in fixtures {
        assert_eq!(
            with_simd_json(&mut line.clone(), &expected),
            with_serde_json(&line),
            "both paths see the same blocks"
        );
        group.throughput(Throughput::Bytes(line.len() as u64));
        group.bench_with_input(BenchmarkId::new("simd-json", name), &line, |b, line| {
            b.iter_batched_ref(
                || line.clone(),
                |buffer| black_box(with_simd_json(buffer, &expected)),
                BatchSize::SmallInput,
            )
        });
        group.bench_with_input(BenchmarkId::new("serde_json", name), &line, |b, line| {
            b.iter(|| black_box(with_serde_json(black_box(line))))
        });
    }
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
