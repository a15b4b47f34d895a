//! Artifacts: compiled once and loaded after, content-addressed by the code's identity,
//! verified before every load (a corrupted or foreign file is refused and compiled again,
//! never loaded), cross-compiled for another target, made for any machine of this triple and
//! loaded here, refused to compile by a build without the compiler, and the SIMD fallback of
//! singlepass.

use crate::support;

use hako::engines::{self, Compiler, EngineConfig, EngineKind};
use hako::store::{ArtifactError, ArtifactKey, Source, Store};
use hako::upload::{self, UploadOptions};

const CRANELIFT: EngineConfig = EngineConfig::wasmer(Compiler::Cranelift);
const SINGLEPASS: EngineConfig = EngineConfig::wasmer(Compiler::Singlepass);

/// A target this machine cannot run: the other architecture hako is built for.
const FOREIGN_TARGET: &str = if cfg!(target_arch = "aarch64") {
    "x86_64-unknown-linux-gnu"
} else {
    "aarch64-unknown-linux-gnu"
};

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
fn artifacts_can_be_made_for_another_architecture_and_are_never_run_here() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = support::greet_wasm();
    for config in support::host::configs() {
        let engine = engines::engine(config, Some(FOREIGN_TARGET)).unwrap();
        assert!(!engine.runs_here());
        assert_eq!(engine.identity().triple, FOREIGN_TARGET);
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
        assert!(err.to_string().contains(FOREIGN_TARGET), "{err}");
        // And the host engine never sees the foreign file: its key differs.
        let host = engines::engine(config, None).unwrap();
        let host_key = ArtifactKey::new(&key.module_sha256, host.identity());
        assert_ne!(
            store.artifacts().path(&host_key),
            store.artifacts().path(&key)
        );
    }
}

#[test]
fn an_artifact_made_for_any_machine_of_this_triple_is_loaded_without_compiling() {
    let package = support::fixture_package("portable", None);
    let package = hako::package::load(package.path()).expect("the fixture package is valid");
    for config in support::host::configs() {
        if config.kind() != EngineKind::Wasmer {
            // wasmtime artifacts are only ever made for the machine that runs them.
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let native = engines::engine(config, None).unwrap();
        let triple = native.identity().triple.clone();
        // What `hako upload --target <this triple>` makes on any machine: code for the
        // triple's baseline CPU features, which this machine has, and more.
        let baseline = engines::baseline_engine(config, native.as_ref())
            .unwrap()
            .expect("this CPU has more features than its triple's baseline");
        assert_eq!(baseline.identity().triple, triple);
        assert_ne!(
            baseline.identity().cpu_features,
            native.identity().cpu_features
        );
        let options = UploadOptions {
            configs: vec![config],
            targets: vec![triple.clone()],
        };
        let uploaded = upload::upload(&store, &package, &options).expect("the upload works");
        assert_eq!(uploaded.artifacts.len(), 1, "{config}");
        assert_eq!(uploaded.artifacts[0].target, triple);

        let loaded = support::host::load_in(&store, config, &package.wasm);
        assert_eq!(
            loaded.source,
            Source::Artifact,
            "{config}: {:?}",
            loaded.notes
        );
        let native_key = ArtifactKey::new(&package.module_sha256, native.identity());
        assert!(!store.artifacts().path(&native_key).exists(), "{config}");
        let outcome = support::host::Call::new("greet")
            .args(serde_json::json!({"name": "Ada"}))
            .run_module(&loaded.module);
        assert!(outcome.crash().is_none(), "{config}: {:?}", outcome.crash());
    }
}

#[cfg(not(feature = "llvm"))]
#[test]
fn without_the_llvm_feature_llvm_artifacts_load_but_nothing_compiles_with_it() {
    let llvm = EngineConfig::wasmer(Compiler::Llvm);
    assert!(!llvm.compiles_here());
    let engine = engines::engine(llvm, None).expect("a headless engine for loading");
    assert!(engine.runs_here());
    assert_eq!(engine.identity().compiler, "llvm");
    let err = engine
        .compile(&support::greet_wasm())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("--features llvm"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = support::greet_wasm();
    let err = store
        .load_module(
            &hako::store::ModuleSpec {
                wasm: &wasm,
                module_sha256: &hako::store::sha256_hex(&wasm),
                uses_simd: false,
                config: llvm,
            },
            None,
        )
        .err()
        .expect("nothing to load and nothing to compile with");
    assert_eq!(
        err.to_string(),
        "no artifact for wasmer-llvm and this build cannot compile with llvm: \
         upload with a build that has it"
    );
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
