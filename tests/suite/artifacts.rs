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
        let written = store.artifacts().write(&key, module.as_ref()).unwrap();
        assert!(written.bytes > 0);
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
                wasm: hako::store::ModuleBytes::Given(&wasm),
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

#[test]
fn an_artifact_path_that_is_no_file_is_refused_and_compiled_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = support::greet_wasm();
    let engine = engines::engine(CRANELIFT, None).unwrap();
    let key = ArtifactKey::new(&hako::store::sha256_hex(&wasm), engine.identity());
    let path = store.artifacts().path(&key);
    // A folder where the artifact goes, then a link that points nowhere.
    std::fs::create_dir_all(path.join("inside")).unwrap();
    let loaded = load(&store, &wasm, CRANELIFT);
    assert_eq!(loaded.source, Source::Compiled);
    assert!(
        loaded
            .notes
            .iter()
            .any(|note| note.contains("not a regular file")),
        "{:?}",
        loaded.notes
    );
    assert!(path.is_file());
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &path).unwrap();
    assert_eq!(load(&store, &wasm, CRANELIFT).source, Source::Compiled);
    assert_eq!(load(&store, &wasm, CRANELIFT).source, Source::Artifact);
}

#[test]
fn a_module_whose_bytes_do_not_match_its_digest_is_never_compiled_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let wasm = support::greet_wasm();
    let other = support::fixture_wasm();
    let err = store
        .load_module(
            &hako::store::ModuleSpec {
                wasm: hako::store::ModuleBytes::Given(other),
                module_sha256: &hako::store::sha256_hex(&wasm),
                uses_simd: false,
                config: CRANELIFT,
            },
            None,
        )
        .err()
        .expect("refused");
    assert!(matches!(err, ArtifactError::DigestMismatch { .. }), "{err}");
    let engine = engines::engine(CRANELIFT, None).unwrap();
    let key = ArtifactKey::new(&hako::store::sha256_hex(&wasm), engine.identity());
    assert!(!store.artifacts().path(&key).exists());
}

#[test]
fn a_module_swapped_into_a_stored_version_is_never_run_nor_compiled_under_its_name() {
    // Another package's module put in this version's folder would have run under this name,
    // and its code would have been cached under this package's key for good. The module is read
    // only to compile: while the artifact made at upload is there, that artifact (the uploaded
    // module's code, verified) is what runs; once there is none, the swapped module is refused.
    let store = tempfile::tempdir().unwrap();
    let fixture = support::fixture_package("fixture", None);
    let greet = support::greet_package_dir();
    for package in [fixture.path(), greet.as_path()] {
        let output = support::run_hako(store.path(), &["upload", support::arg(package)]);
        assert_eq!(output.status.code(), Some(0), "{output:?}");
    }
    let versions = store.path().join("packages/fixture/versions/1.0.0");
    let module = versions.join("module.wasm");
    let original = std::fs::read(&module).unwrap();
    std::fs::copy(greet.join("module.wasm"), &module).unwrap();
    let call = || support::run_hako(store.path(), &["call", "fixture", "echo", r#"{"a":1}"#]);

    let output = call();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), r#"{"a":1}"#);

    let artifacts = store.path().join("artifacts");
    let artifact_files = || {
        std::fs::read_dir(&artifacts)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "artifact"))
            .collect::<Vec<_>>()
    };
    let made_at_upload = artifact_files();
    assert!(!made_at_upload.is_empty());
    for path in made_at_upload {
        std::fs::remove_file(path).unwrap();
    }
    let output = call();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("do not match its recorded digest"),
        "{stderr}"
    );
    assert_eq!(artifact_files(), Vec::<std::path::PathBuf>::new());

    std::fs::write(&module, original).unwrap();
    let output = call();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), r#"{"a":1}"#);
    assert_eq!(artifact_files().len(), 1);
}

#[test]
fn a_stored_module_grown_past_the_module_limit_is_refused_before_it_is_read() {
    // Read only to compile, and then no further than any module may be (64 MiB): a file grown
    // outside hako is refused by its size, never read whole into memory.
    let store = tempfile::tempdir().unwrap();
    let fixture = support::fixture_package("fixture", None);
    let output = support::run_hako(store.path(), &["upload", support::arg(fixture.path())]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    for entry in std::fs::read_dir(store.path().join("artifacts")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "artifact") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let module = store
        .path()
        .join("packages/fixture/versions/1.0.0/module.wasm");
    // Sparse: the size is the file's, not the disk's.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&module)
        .unwrap()
        .set_len((64 << 20) + 1)
        .unwrap();
    let output = support::run_hako(store.path(), &["call", "fixture", "echo", "{}"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("it is 67108865 bytes; a module is at most 67108864"),
        "{stderr}"
    );
    assert!(stderr.contains("module.wasm"), "{stderr}");
}
