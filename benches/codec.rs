//! The line codec on real guest answers: `parse_line` + `call_result` (simd-json in place, or
//! `serde_json` on long lines sparse in escapes) against a `serde_json::Value` baseline that
//! makes the same checks, for a greet answer, text answers (an escape every 20 bytes) of 16 to
//! 256 KiB and answers carrying an inline PNG of 4 KiB to 1 MiB. Throughput is the line's bytes.
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
    let text_answer = |bytes: usize| {
        let text: String = paragraph.repeat(bytes / paragraph.len() + 1);
        answer_line(json!({"content": [{"type": "text", "text": &text[..bytes]}]}))
    };

    let image_answer = |bytes: usize| {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        while png.len() < bytes {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            png.push(state as u8);
        }
        answer_line(json!({"content": [
            {"type": "text", "text": "Here is the chart."},
            {"type": "image", "mimeType": "image/png", "data": STANDARD.encode(&png)},
        ]}))
    };

    let table_answer = |rows: usize| {
        let rows: Vec<Value> = (0..rows)
            .map(|i| json!({"id": i, "name": format!("item {i}"), "tags": ["a", "b"], "ok": i % 2 == 0}))
            .collect();
        answer_line(json!({
            "content": [{"type": "text", "text": "The table."}],
            "structuredContent": {"rows": rows},
        }))
    };

    vec![
        ("greet", greet),
        ("text_16k", text_answer(16 * 1024)),
        ("text_64k", text_answer(64 * 1024)),
        ("text_256k", text_answer(256 * 1024)),
        ("table_64k", table_answer(1300)),
        ("image_4k", image_answer(4 * 1024)),
        ("image_16k", image_answer(16 * 1024)),
        ("image_48k", image_answer(48 * 1024)),
        ("image_200k", image_answer(200 * 1024)),
        ("image_1m", image_answer(1024 * 1024)),
    ]
}

/// The hako path: the parse `parse_line` picks, id check, rendering.
fn with_hako(line: &mut [u8], expected: &RequestId) -> usize {
    parse_line(line, Some(expected), |line| match line {
        Ok(Line::Answer(Answer::Result(result))) => {
            let shown = call_result(&result).expect("the fixtures are valid results");
            shown.content.len() + usize::from(shown.structured.is_some())
        }
        _ => panic!("the fixtures answer the expected id"),
    })
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
            arguments: Arc::new(json!({"name": "Ada"})),
            limits: Limits::CALL,
            mounts: Mounts::fresh(None),
            network: Network {
                policy: Arc::new(PackagePolicy::default()),
                broker: Arc::new(NoBroker),
            },
            gate: None,
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
            with_hako(&mut line.clone(), &expected),
            with_serde_json(&line),
            "both paths see the same blocks"
        );
        group.throughput(Throughput::Bytes(line.len() as u64));
        // Both paths read a copy of the line made just before, as a guest's line is fresh
        // in the host's buffer (simd-json needs the copy: it parses in place).
        group.bench_with_input(BenchmarkId::new("hako", name), &line, |b, line| {
            b.iter_batched_ref(
                || line.clone(),
                |buffer| black_box(with_hako(buffer, &expected)),
                BatchSize::PerIteration,
            )
        });
        group.bench_with_input(BenchmarkId::new("serde_json", name), &line, |b, line| {
            b.iter_batched_ref(
                || line.clone(),
                |buffer| black_box(with_serde_json(buffer)),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
