//! Cold start: one call of the bundled greet example, end to end through the call contract,
//! with the module already in memory and with its artifact loaded (verified and deserialized)
//! from disk each time, for every engine configuration of this build side by side (wasmer with
//! each compiler, and wasmtime); and the artifact load alone.
//!
//! `cargo bench --bench cold_start`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hako::call::{self, CallOutcome, CallStats, Limits, Mounts, Network, ToolRequest, VolumeTmp};
use hako::engines::{self, EngineConfig};
use hako::http::{NoBroker, PackagePolicy};
use hako::store::{ArtifactKey, Store};
use hako_engine_api::Module;

fn greet(module: &Arc<dyn Module>, network: &Network) {
    let outcome = call::call_tool(
        module,
        ToolRequest {
            program: "greet",
            tool: "greet",
            arguments: serde_json::json!({"name": "Ada"}),
            limits: Limits::CALL,
            mounts: Mounts {
                volume_tmp: VolumeTmp::Fresh,
                data: None,
                package_assets: None,
                skills: Vec::new(),
            },
            network: network.clone(),
        },
        CallStats::default(),
    )
    .expect("the call runs");
    assert!(
        matches!(outcome, CallOutcome::Answered { .. }),
        "{outcome:?}"
    );
    black_box(outcome);
}

fn cold_start(c: &mut Criterion) {
    let wasm = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/greet/module.wasm"
    ))
    .expect("the greet example is committed");
    let sha = hako::store::sha256_hex(&wasm);
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = Store::open(dir.path()).expect("the store opens");
    let network = Network {
        policy: Arc::new(PackagePolicy::default()),
        broker: Arc::new(NoBroker),
    };
    let configs = EngineConfig::all();

    let mut in_memory = c.benchmark_group("call_in_memory");
    for &config in &configs {
        let engine = engines::engine(config, None).expect("the engine builds");
        let module = engine.compile(&wasm).expect("greet compiles");
        in_memory.bench_function(
            BenchmarkId::new(config.kind().name(), config.compiler().name()),
            |b| b.iter(|| greet(&module, &network)),
        );
    }
    in_memory.finish();

    let mut from_disk = c.benchmark_group("call_from_disk");
    for &config in &configs {
        let engine = engines::engine(config, None).expect("the engine builds");
        let key = ArtifactKey::new(&sha, engine.identity());
        let module = engine.compile(&wasm).expect("greet compiles");
        store
            .artifacts()
            .write(&key, module.as_ref())
            .expect("the artifact is written");
        from_disk.bench_function(
            BenchmarkId::new(config.kind().name(), config.compiler().name()),
            |b| {
                b.iter(|| {
                    let module = store
                        .artifacts()
                        .load(&key, engine.as_ref())
                        .expect("the artifact loads")
                        .expect("the artifact exists");
                    greet(&module, &network)
                })
            },
        );
    }
    from_disk.finish();

    let mut load_only = c.benchmark_group("artifact_load");
    for &config in &configs {
        let engine = engines::engine(config, None).expect("the engine builds");
        let key = ArtifactKey::new(&sha, engine.identity());
        load_only.bench_function(
            BenchmarkId::new(config.kind().name(), config.compiler().name()),
            |b| {
                b.iter(|| {
                    black_box(
                        store
                            .artifacts()
                            .load(&key, engine.as_ref())
                            .expect("the artifact loads")
                            .expect("the artifact exists"),
                    )
                })
            },
        );
    }
    load_only.finish();
}

criterion_group!(benches, cold_start);
criterion_main!(benches);
