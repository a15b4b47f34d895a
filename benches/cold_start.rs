//! Cold start: one call of the bundled greet example, end to end through the call contract,
//! with the module already in memory (back to back, and each right after an artifact load) and
//! with its artifact loaded (verified and deserialized) from disk each time, for every engine
//! configuration of this build side by side (wasmer with each compiler, and wasmtime); the
//! instantiation a call made ahead of no longer waits for;
//! the call from disk in its parts (the first call on a module just loaded, the second, the
//! drop); and the artifact load alone. With `--features baselines` (or
//! one of `wasmtime-wasi`, `wasmer-wasix`) the comparison baselines get rows too, called through
//! `hako::bench`'s subjects so that their answers are read with hako's codec like everyone
//! else's.
//!
//! `cargo bench --bench cold_start`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use hako::bench::subject::{Ready, Subject};
use hako::bench::Workload;
use hako::call::Limits;
use hako::engines::{self, EngineConfig};
use hako::store::{ArtifactKey, Store};
use hako_engine_api::{Engine, Module};

mod greet;

/// greet compiled by one engine configuration of this build, its artifact written to each store
/// of the bench: what every group below measures.
struct Compiled {
    config: EngineConfig,
    engine: Arc<dyn Engine>,
    key: ArtifactKey,
    module: Arc<dyn Module>,
}

impl Compiled {
    fn new(config: EngineConfig, wasm: &[u8], sha: &str, stores: [&Store; 2]) -> Self {
        let engine = engines::engine(config, None).expect("the engine builds");
        let key = ArtifactKey::new(sha, engine.identity());
        let module = engine.compile(wasm).expect("greet compiles");
        for store in stores {
            store
                .artifacts()
                .write(&key, module.as_ref())
                .expect("the artifact is written");
        }
        Self {
            config,
            engine,
            key,
            module,
        }
    }

    fn id(&self) -> BenchmarkId {
        BenchmarkId::new(self.config.kind().name(), self.config.compiler().name())
    }

    /// The module of the artifact in `store`, loaded (verified and deserialized) as a call from
    /// disk loads it.
    fn load(&self, store: &Store) -> Arc<dyn Module> {
        store
            .artifacts()
            .load(&self.key, self.engine.as_ref())
            .expect("the artifact loads")
            .expect("the artifact exists")
    }

    /// The id `from_disk_parts` gives the configuration beside what it measures.
    fn name(&self) -> String {
        format!(
            "{}-{}",
            self.config.kind().name(),
            self.config.compiler().name()
        )
    }
}

fn cold_start(c: &mut Criterion) {
    let wasm = greet::wasm();
    let sha = hako::store::sha256_hex(&wasm);
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = Store::open(dir.path()).expect("the store opens");
    let network = greet::network();
    // A second store with the same artifacts in files of their own (for `from_disk_parts`): a
    // module loaded from one store's file, then the other's, is each time loaded from a file
    // whose last load is gone.
    let other_dir = tempfile::tempdir().expect("a temp dir");
    let other = Store::open(other_dir.path()).expect("the store opens");
    // This process compiles with LLVM itself, where the `hako` command starts its worker.
    hako_engine_llvm::link();
    let compiled: Vec<Compiled> = EngineConfig::all()
        .into_iter()
        .map(|config| Compiled::new(config, &wasm, &sha, [&store, &other]))
        .collect();
    let workload = Workload {
        program: "greet".into(),
        wasm: wasm.clone(),
        module_sha256: sha.clone(),
        uses_simd: false,
        assets: None,
        tool: "greet".into(),
        arguments: Arc::new(serde_json::json!({"name": "Ada"})),
    };
    let baselines: Vec<(Subject, Ready)> = hako_engine_baseline::available()
        .into_iter()
        .map(|name| {
            let subject = Subject::new(name, &workload, store.artifacts(), dir.path())
                .expect("the baseline builds");
            let ready = subject.compile(&wasm).expect("greet compiles");
            subject
                .write_artifact(&ready)
                .expect("the artifact is written");
            (subject, ready)
        })
        .collect();
    let baseline_id = |subject: &Subject| BenchmarkId::new(subject.name(), "cranelift");

    let mut in_memory = c.benchmark_group("call_in_memory");
    for one in &compiled {
        in_memory.bench_function(one.id(), |b| b.iter(|| greet::greet(&one.module, &network)));
    }
    for (subject, ready) in &baselines {
        in_memory.bench_function(baseline_id(subject), |b| {
            b.iter(|| black_box(subject.call(ready, &workload).expect("greet answers")))
        });
    }
    in_memory.finish();

    // The same call, each right after an artifact of the same engine was loaded and dropped
    // (untimed): what `hako bench` reports as "in memory", where the load and the drop leave
    // the caches and the process's shared state as a call finds them between other work.
    let mut after_load = c.benchmark_group("call_in_memory_after_a_load");
    for one in &compiled {
        after_load.bench_function(one.id(), |b| {
            b.iter_custom(|iters| {
                let mut timed = std::time::Duration::ZERO;
                for _ in 0..iters {
                    drop(black_box(one.load(&store)));
                    let started = std::time::Instant::now();
                    greet::greet(&one.module, &network);
                    timed += started.elapsed();
                }
                timed
            })
        });
    }
    after_load.finish();

    // What a call made ahead of takes off its path: an instance made, then dropped unrun
    // (its memory put back in the pool as a run's is).
    let mut instantiate = c.benchmark_group("instantiate");
    for one in &compiled {
        instantiate.bench_function(one.id(), |b| {
            b.iter(|| drop(black_box(one.module.prepare(Limits::CALL.run_limits()))))
        });
    }
    instantiate.finish();

    let mut from_disk = c.benchmark_group("call_from_disk");
    for one in &compiled {
        from_disk.bench_function(one.id(), |b| {
            b.iter(|| greet::greet(&one.load(&store), &network))
        });
    }
    for (subject, _) in &baselines {
        from_disk.bench_function(baseline_id(subject), |b| {
            b.iter(|| {
                let ready = subject.load().expect("the artifact loads");
                black_box(subject.call(&ready, &workload).expect("greet answers"))
            })
        });
    }
    from_disk.finish();

    // The call from disk in its parts: the first call on a module just loaded (its load
    // untimed) from the file the last one was loaded from, or from another file, the second
    // call, and the drop of a module that has been called once. One module at a time, each
    // dropped before the next is loaded.
    let mut parts = c.benchmark_group("from_disk_parts");
    for one in &compiled {
        let turn = std::cell::Cell::new(false);
        let load_in_turn = || {
            turn.set(!turn.get());
            one.load(if turn.get() { &store } else { &other })
        };
        let load_same = || one.load(&store);
        let called_once = || {
            let module = load_same();
            greet::greet(&module, &network);
            module
        };
        let call = |module: Arc<dyn Module>| {
            greet::greet(&module, &network);
            module
        };
        let name = one.name();
        parts.bench_function(BenchmarkId::new("first_call", &name), |b| {
            b.iter_batched(load_same, call, BatchSize::PerIteration)
        });
        parts.bench_function(BenchmarkId::new("first_call_other_file", &name), |b| {
            b.iter_batched(load_in_turn, call, BatchSize::PerIteration)
        });
        parts.bench_function(BenchmarkId::new("second_call", &name), |b| {
            b.iter_batched(called_once, call, BatchSize::PerIteration)
        });
        parts.bench_function(BenchmarkId::new("drop_after_a_call", &name), |b| {
            b.iter_batched(called_once, drop, BatchSize::PerIteration)
        });
    }
    parts.finish();

    let mut load_only = c.benchmark_group("artifact_load");
    for one in &compiled {
        load_only.bench_function(one.id(), |b| b.iter(|| black_box(one.load(&store))));
    }
    for (subject, _) in &baselines {
        load_only.bench_function(baseline_id(subject), |b| {
            b.iter(|| black_box(subject.load().expect("the artifact loads")))
        });
    }
    load_only.finish();
}

criterion_group!(benches, cold_start);
criterion_main!(benches);
