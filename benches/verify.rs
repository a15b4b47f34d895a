//! What verifying an artifact costs, for the choice the artifact cache makes (see
//! `src/store/artifact.rs`): the checksum over a memory image of 1 and 8 MiB (XXH3-128, as the
//! store uses, and SHA-256 for comparison), and a whole artifact load of a module with 8 MiB of
//! data, the first time a cache sees the file (everything read and hashed) and once it
//! remembers the file as verified.
//!
//! `cargo bench --bench verify`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hako::engines::{self, EngineConfig};
use hako::store::{ArtifactKey, Store};
use sha2::Digest as _;
use std::hint::black_box;

/// A module whose 8 MiB of data start at 1 MiB.
fn module_with_data(bytes: usize) -> Vec<u8> {
    let data: String = (0..bytes)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 7) as u8 % 26))
        .collect();
    wat::parse_str(format!(
        r#"(module (memory (export "memory") 160)
             (data (i32.const 1048576) "{data}")
             (func (export "_start")))"#
    ))
    .expect("the module parses")
}

fn checksums(c: &mut Criterion) {
    let mut group = c.benchmark_group("checksum");
    for mib in [1usize, 8] {
        let bytes = vec![0x5au8; mib << 20];
        group.bench_with_input(BenchmarkId::new("xxh3-128", mib), &bytes, |b, bytes| {
            b.iter(|| black_box(xxhash_rust::xxh3::xxh3_128(bytes)))
        });
        group.bench_with_input(BenchmarkId::new("sha256", mib), &bytes, |b, bytes| {
            b.iter(|| black_box(sha2::Sha256::digest(bytes)))
        });
    }
    group.finish();
}

fn loads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = Store::open(dir.path().join("store")).expect("the store opens");
    let wasm = module_with_data(8 << 20);
    let mut group = c.benchmark_group("artifact_load_8mib");
    // This process compiles with LLVM itself, where the `hako` command starts its worker.
    hako_engine_llvm::link();
    for config in EngineConfig::all() {
        let engine = engines::engine(config, None).expect("the engine");
        let key = ArtifactKey::new(&hako::store::sha256_hex(&wasm), engine.identity());
        let module = engine.compile(&wasm).expect("the module compiles");
        store
            .artifacts()
            .write(&key, module.as_ref())
            .expect("the artifact is written");
        // A store opened afresh remembers nothing: its load reads and hashes the whole file.
        // (Opening it costs a few checks of its folders besides.)
        group.bench_function(BenchmarkId::new("first", config.name()), |b| {
            b.iter(|| {
                let fresh = Store::open(store.root()).expect("the store opens");
                black_box(
                    fresh
                        .artifacts()
                        .load(&key, engine.as_ref())
                        .expect("it loads"),
                )
            })
        });
        group.bench_function(BenchmarkId::new("remembered", config.name()), |b| {
            b.iter(|| {
                black_box(
                    store
                        .artifacts()
                        .load(&key, engine.as_ref())
                        .expect("it loads"),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, checksums, loads);
criterion_main!(benches);
