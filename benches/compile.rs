//! Compiling: the bundled greet example (small) and the fixture guest of `tests/guests` (a
//! bigger, real Rust module with serde_json) with every engine configuration of this build, and
//! with the comparison baselines when their features are on, side by side. Compiles are slow,
//! so samples are few.
//!
//! `cargo bench --bench compile` (add `--features baselines` for the baselines' rows)
//!
//! It times compiling only; artifacts and calls are `benches/cold_start.rs`.

#[path = "../tests/suite/support/mod.rs"]
#[allow(dead_code)] // the benches use a part of the tests' support
mod support;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hako::engines;

fn compile(c: &mut Criterion) {
    let modules = [
        ("greet", support::greet_wasm()),
        ("fixture", support::fixture_wasm().to_vec()),
    ];
    for (module, wasm) in &modules {
        let mut group = c.benchmark_group(format!("compile_{module}"));
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(5));
        for config in support::host::configs() {
            let uses_simd = hako::package::check_module(wasm)
                .expect("the module passes the check")
                .uses_simd;
            if engines::effective_config(config, uses_simd).1.is_some() {
                continue; // this compiler cannot compile the module (SIMD)
            }
            let engine = engines::engine(config, None).expect("the engine builds");
            group.bench_function(
                BenchmarkId::new(config.kind().name(), config.compiler().name()),
                |b| b.iter(|| black_box(engine.compile(wasm).expect("the module compiles"))),
            );
        }
        for name in hako_engine_baseline::available() {
            let runtime = hako_engine_baseline::runtime(name).expect("the baseline builds");
            group.bench_function(BenchmarkId::new(name, "cranelift"), |b| {
                b.iter(|| black_box(runtime.compile(wasm).expect("the module compiles")))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, compile);
criterion_main!(benches);
