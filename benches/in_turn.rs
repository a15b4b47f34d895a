//! Many packages in turn: one greet call at a time, each on the next of N distinct modules
//! (greet, each made distinct by a custom section, compiled to artifact files of their own and
//! loaded from them as a server loads them), against the same call on one module. What a
//! server calling many packages in turn pays per call beyond its front end: the code, the
//! memory and the instance of a module last run N calls ago.
//!
//! `cargo bench --bench in_turn`

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hako::engines::{self, Compiler, EngineConfig};
use hako::store::{ArtifactKey, Store};
use hako_engine_api::Module;
use wasm_encoder::Section;

mod greet;

/// How many distinct modules are called in turn.
const COUNTS: [usize; 3] = [1, 32, 200];

/// greet with a custom section naming `number`, so that each copy is a module of its own.
fn copy(wasm: &[u8], number: usize) -> Vec<u8> {
    let mut copy = wasm.to_vec();
    wasm_encoder::CustomSection {
        name: "hako-bench-copy".into(),
        data: number.to_string().into_bytes().into(),
    }
    .append_to(&mut copy);
    copy
}

fn in_turn(c: &mut Criterion) {
    let wasm = greet::wasm();
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = Store::open(dir.path()).expect("the store opens");
    let network = greet::network();
    let most = COUNTS.into_iter().max().unwrap_or(1);
    let configs = EngineConfig::all()
        .into_iter()
        .filter(|config| config.compiler() == Compiler::Cranelift);
    let mut group = c.benchmark_group("call_in_turn");
    for config in configs {
        let engine = engines::engine(config, None).expect("the engine builds");
        let modules: Vec<Arc<dyn Module>> = (0..most)
            .map(|number| {
                let wasm = copy(&wasm, number);
                let key = ArtifactKey::new(&hako::store::sha256_hex(&wasm), engine.identity());
                let compiled = engine.compile(&wasm).expect("greet compiles");
                store
                    .artifacts()
                    .write(&key, compiled.as_ref())
                    .expect("the artifact is written");
                store
                    .artifacts()
                    .load(&key, engine.as_ref())
                    .expect("the artifact loads")
                    .expect("the artifact exists")
            })
            .collect();
        for count in COUNTS {
            let id = BenchmarkId::new(config.name(), count);
            let mut next = 0;
            group.bench_function(id, |b| {
                b.iter(|| {
                    greet::greet(&modules[next % count], &network);
                    next += 1;
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, in_turn);
criterion_main!(benches);
