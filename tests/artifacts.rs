//! Artifacts: compiled once and loaded after, content-addressed by the code's identity,
//! verified before every load (a corrupted or foreign file is refused and compiled again,
//! never loaded), cross-compiled for another target, and the SIMD fallback of singlepass.

mod support;

use hako::engines::{self, Compiler, EngineConfig};

const CRANELIFT: EngineConfig = EngineConfig::wasmer(Compiler::Cranelift);
const SINGLEPASS: EngineConfig = EngineConfig::wasmer(Compiler::Singlepass);
use hako::store::{ArtifactError, ArtifactKey, Source, Store};

fn load(store: &Store, wasm: &[u8], config: EngineConfig) -> hako::store::Loaded {
    support::host::load_in(store, config, wasm)
}

#[test]
fn a_module_is_compiled_once_then_loaded_from_its_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = support::greet_wasm();
    for config in support::host::configs() {
        let first = load(&store, &wasm, config);
        assert_eq!(first.source, Source::Compiled);
        assert!(first.notes.iter().any(|note| note.contains("compiled")));
        let second = load(&store, &wasm, config);
        assert_eq!(second.source, Source::Artifact, "{config}");
    }
}

#[test]
fn a_corrupted_artifact_is_refused_and_compiled_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = support::greet_wasm();
    load(&store, &wasm, CRANELIFT);
    let engine = engines::engine(CRANELIFT, None).unwrap();
    let key = ArtifactKey::new(&hako::store::sha256_hex(&wasm), engine.identity());
    let path = store.artifacts().path(&key);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();

    let err = store
        .artifacts()
        .load(&key, engine.as_ref())
        .err()
        .expect("refused");
    assert!(matches!(err, ArtifactError::Refused { .. }), "{err}");
    let again = load(&store, &wasm, CRANELIFT);
    assert_eq!(again.source, Source::Compiled);
    assert!(
        again.notes.iter().any(|note| note.contains("checksum")),
        "{:?}",
        again.notes
    );
}

#[test]
fn an_artifact_is_never_loaded_by_an_engine_of_another_identity() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = support::greet_wasm();
    let cranelift = engines::engine(CRANELIFT, None).unwrap();
    let singlepass = engines::engine(SINGLEPASS, None).unwrap();
    let key = ArtifactKey::new(&hako::store::sha256_hex(&wasm), cranelift.identity());
    let module = cranelift.compile(&wasm).unwrap();
    store.artifacts().write(&key, module.as_ref()).unwrap();
    let err = store
        .artifacts()
        .load(&key, singlepass.as_ref())
        .err()
        .expect("refused");
    assert!(matches!(err, ArtifactError::Refused { .. }), "{err}");
}

#[test]
fn artifacts_can_be_made_for_aarch64_here_and_are_never_run_here() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = support::greet_wasm();
    for config in support::host::configs() {
        let engine = engines::engine(config, Some("aarch64-unknown-linux-gnu")).unwrap();
        assert!(!engine.runs_here());
        assert_eq!(engine.identity().triple, "aarch64-unknown-linux-gnu");
        let module = engine.compile(&wasm).unwrap();
        let key = ArtifactKey::new(&hako::store::sha256_hex(&wasm), engine.identity());
        let bytes = store.artifacts().write(&key, module.as_ref()).unwrap();
        assert!(bytes > 0);
        // The right identity still does not make foreign code loadable here.
        let err = store
            .artifacts()
            .load(&key, engine.as_ref())
            .err()
            .expect("refused");
        assert!(err.to_string().contains("aarch64"), "{err}");
        // And the host engine never sees the aarch64 file: its key differs.
        let host = engines::engine(config, None).unwrap();
        let host_key = ArtifactKey::new(&key.module_sha256, host.identity());
        assert_ne!(
            store.artifacts().path(&host_key),
            store.artifacts().path(&key)
        );
    }
}

#[test]
fn a_simd_module_asked_for_singlepass_is_compiled_by_cranelift_and_says_so() {
    if !Compiler::Singlepass.available() || !Compiler::Cranelift.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = wat::parse_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/wat/valid_simd.wat"
    ))
    .unwrap();
    let loaded = load(&store, &wasm, SINGLEPASS);
    assert_eq!(loaded.config, CRANELIFT);
    assert!(
        loaded.notes.iter().any(|note| note.contains("SIMD")),
        "{:?}",
        loaded.notes
    );
}
