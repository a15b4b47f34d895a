//! Memory images on every engine configuration: a module's initial memory laid out when it is
//! compiled and mapped into each call's memory, never copied. What a call writes into its data
//! section is never seen by the next call, whether the module was just compiled (its image in
//! memory) or loaded from its artifact (its image mapped from the file); a module whose
//! segments cannot be laid out ahead of time traps at instantiation as before; `memory.init` and
//! `data.drop` mean what they meant; the memory cap holds; a damaged image is refused.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use hako::call::{CallOutcome, CrashKind};
use hako::engines::EngineConfig;
use hako::store::{Source, Store};
use serde_json::json;

use crate::support::host::{configs, load_in, Call};
use crate::support::{self, arg, fixture_wasm, module_package, run_hako};

/// What the fixture's data section holds before any call writes to it.
const AS_BUILT: &str = "as the module was built, unseen.";

fn fresh_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    (dir, store)
}

fn seen(outcome: CallOutcome) -> String {
    let CallOutcome::Answered { result, .. } = outcome else {
        panic!("data_scratch crashed: {outcome:?}");
    };
    let hako::protocol::ShownBlock::Text { text } = &result.content[0] else {
        panic!("{result:?}");
    };
    let answer: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("{text}"));
    answer["seen"]
        .as_str()
        .unwrap_or_else(|| panic!("{text}"))
        .to_string()
}

#[test]
fn a_call_never_sees_what_an_earlier_call_wrote_into_its_data_section() {
    let greet = support::greet_wasm();
    for config in configs() {
        let (_dir, store) = fresh_store();
        let compiled = load_in(&store, config, fixture_wasm());
        assert_eq!(compiled.source, Source::Compiled, "{config}");
        let loaded = load_in(&store, config, fixture_wasm());
        assert_eq!(loaded.source, Source::Artifact, "{config}");
        for (how, module) in [("compiled", &compiled.module), ("loaded", &loaded.module)] {
            for round in 0..4 {
                let outcome = Call::new("data_scratch").run_module(module);
                assert_eq!(seen(outcome), AS_BUILT, "{config}, {how}, call {round}");
                // Another module's call in between takes the same pooled memories.
                if round == 1 {
                    Call::new("greet")
                        .module(greet.clone())
                        .args(json!({"name": "between"}))
                        .run(config);
                }
            }
        }
    }
}

#[test]
fn a_module_loaded_again_from_its_file_starts_from_its_data_section_as_built() {
    for config in configs() {
        let (_dir, store) = fresh_store();
        load_in(&store, config, fixture_wasm());
        for round in 0..3 {
            // Each load is a module of its own; on wasmer it shares the image of the loads
            // before it that are still alive (the slots kept for the next call hold it), so
            // this round's call takes memory the last round's call wrote into.
            let loaded = load_in(&store, config, fixture_wasm());
            assert_eq!(loaded.source, Source::Artifact, "{config}");
            for call in 0..2 {
                let outcome = Call::new("data_scratch").run_module(&loaded.module);
                assert_eq!(
                    seen(outcome),
                    AS_BUILT,
                    "{config}, load {round}, call {call}"
                );
            }
        }
    }
}

/// Runs `wat` on every engine configuration and asserts it crashed with `kind`; returns each
/// configuration's message.
fn crashes(wat: &str, kind: CrashKind, limit_bytes: Option<u64>) -> Vec<(EngineConfig, String)> {
    let wasm = wat::parse_str(wat).unwrap();
    let mut call = Call::new("anything").module(wasm);
    if let Some(bytes) = limit_bytes {
        call = call.limits(|limits| limits.max_memory_bytes = bytes);
    }
    call.run_all()
        .into_iter()
        .map(|(config, outcome)| match outcome {
            CallOutcome::Crashed { crash, .. } => {
                assert_eq!(crash.kind, kind, "{config}: {}", crash.message);
                (config, crash.message)
            }
            other => panic!("{config}: not a crash: {other:?}"),
        })
        .collect()
}

#[test]
fn a_segment_past_the_initial_memory_still_traps_at_instantiation() {
    // The first segment fits; the second ends 6 bytes past the memory: no image can be made,
    // and instantiation traps on every engine, as it does without images.
    crashes(
        r#"(module (memory (export "memory") 1)
             (data (i32.const 0) "fits")
             (data (i32.const 65530) "0123456789ab")
             (func (export "_start")))"#,
        CrashKind::Trap,
        None,
    );
    // The segments fit but an element segment does not: the image is made, and the trap is
    // the same.
    crashes(
        r#"(module (memory (export "memory") 1)
             (data (i32.const 100) "fits")
             (table 1 funcref)
             (func $f)
             (elem (i32.const 5) $f)
             (func (export "_start")))"#,
        CrashKind::Trap,
        None,
    );
}

/// Checks on the memory an image gave: `unreachable` (a trap) when one fails, a return (the
/// call then exits before answering) when all pass.
/// Segments no code names sit before and between the named ones: wasmer's module drops them
/// and renumbers the rest, so a wrong number reads another segment's bytes.
const MEMORY_INIT_AND_DATA_DROP: &str = r#"(module
  (memory (export "memory") 2)
  (data $unnamed (i32.const 70000) "unnamed")
  (data $active (i32.const 65536) "image")
  (data $unnamed_passive "wrong")
  (data $passive "passive")
  (data $last (i32.const 80000) "last")
  (func $expect (param $address i32) (param $byte i32)
    (if (i32.ne (i32.load8_u (local.get $address)) (local.get $byte)) (then unreachable)))
  (func (export "_start")
    ;; the active segment's bytes are in memory, the ones around it are zero
    (call $expect (i32.const 65536) (i32.const 105)) ;; i
    (call $expect (i32.const 65540) (i32.const 101)) ;; e
    (call $expect (i32.const 65541) (i32.const 0))
    (call $expect (i32.const 65535) (i32.const 0))
    ;; so are the segments no code names
    (call $expect (i32.const 70000) (i32.const 117)) ;; u
    (call $expect (i32.const 80003) (i32.const 116)) ;; t
    ;; an active segment is dropped at instantiation: an init of nothing from it succeeds
    (memory.init $active (i32.const 0) (i32.const 0) (i32.const 0))
    ;; the passive segment is whole
    (memory.init $passive (i32.const 100) (i32.const 0) (i32.const 7))
    (call $expect (i32.const 100) (i32.const 112)) ;; p
    (call $expect (i32.const 106) (i32.const 101)) ;; e
    (data.drop $passive)
    (memory.init $passive (i32.const 0) (i32.const 0) (i32.const 0))
    (data.drop $active)))"#;

#[test]
fn memory_init_and_data_drop_mean_what_they_meant_on_emptied_segments() {
    crashes(
        MEMORY_INIT_AND_DATA_DROP,
        CrashKind::ExitedBeforeAnswer,
        None,
    );
    // One byte from the (dropped) active segment, or from the passive one once dropped, traps;
    // `unreachable` would say the checks above failed instead.
    for init in [
        "(memory.init $active (i32.const 0) (i32.const 0) (i32.const 1))",
        "(data.drop $passive) (memory.init $passive (i32.const 0) (i32.const 0) (i32.const 1))",
    ] {
        let wat = MEMORY_INIT_AND_DATA_DROP.replace(
            "(data.drop $active)))",
            &format!("(data.drop $active) {init}))"),
        );
        for (config, message) in crashes(&wat, CrashKind::Trap, None) {
            assert!(!message.contains("unreachable"), "{config}: {message}");
        }
    }
}

/// A module of `pages` pages whose data fills 4 MiB from 1 MiB with `x`, and whose start
/// checks the last byte.
fn four_mib_of_data(pages: u32) -> String {
    let data = "x".repeat(4 << 20);
    format!(
        r#"(module (memory (export "memory") {pages})
             (data (i32.const 1048576) "{data}")
             (func (export "_start")
               (if (i32.ne (i32.load8_u (i32.const 5242879)) (i32.const 120)) (then unreachable))))"#
    )
}

#[test]
fn an_image_larger_than_the_cap_is_out_of_memory_and_one_below_it_runs() {
    crashes(&four_mib_of_data(80), CrashKind::OutOfMemory, Some(2 << 20));
    crashes(
        &four_mib_of_data(80),
        CrashKind::ExitedBeforeAnswer,
        Some(8 << 20),
    );
}

/// The store's artifacts, by path.
fn artifacts(store: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(store.join("artifacts"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "artifact"))
        .collect();
    found.sort();
    found
}

#[test]
fn the_upload_says_which_path_the_memory_took() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let upload = |package: &Path| {
        let output = run_hako(
            &store,
            &["upload", arg(package), "--compiler", "singlepass", "--json"],
        );
        assert!(output.status.success(), "{output:?}");
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        report["artifacts"][0]["memory_init"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let fixture = support::fixture_package("imaged", None);
    let said = upload(fixture.path());
    assert!(said.starts_with("memory image of "), "{said}");
    // A module whose data sits far apart from itself keeps copying, and says why.
    let sparse = wat::parse_str(
        r#"(module (memory (export "memory") 200)
             (data (i32.const 0) "a") (data (i32.const 10000000) "b")
             (func (export "_start")))"#,
    )
    .unwrap();
    let sparse = module_package("sparse", &sparse);
    let output = run_hako(
        &store,
        &["upload", arg(sparse.path()), "--compiler", "singlepass"],
    );
    // Discovery fails on a module that answers nothing; the artifact is written before it.
    assert!(!output.status.success());
    let artifacts = artifacts(&store);
    let headers: Vec<String> = artifacts
        .iter()
        .map(|path| String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned())
        .collect();
    assert!(
        headers
            .iter()
            .any(|text| text.contains("data segments copied at each call: the image would span")),
        "no artifact says it copies"
    );
}

/// Flips a bit of the last page of the image in the wasmer artifact `path`, in place.
fn damage_image(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let header = &text[text.rfind("{\"engine\"").unwrap()..];
    let header = &header[..header.rfind('}').unwrap() + 1];
    let header: serde_json::Value = serde_json::from_str(header).unwrap();
    let image = &header["image"];
    let at = image["offset"].as_u64().unwrap() + image["len"].as_u64().unwrap() - 100;
    // Written later than the file was last verified, on file systems of coarse clocks too.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(&[bytes[at as usize] ^ 0x40], at).unwrap();
}

#[test]
fn a_damaged_image_is_refused_and_the_module_compiled_again() {
    for config in configs()
        .into_iter()
        .filter(|config| config.kind() == hako::engines::EngineKind::Wasmer)
    {
        let (dir, store) = fresh_store();
        assert_eq!(
            load_in(&store, config, fixture_wasm()).source,
            Source::Compiled
        );
        // Loaded once, and so remembered as verified by this store.
        assert_eq!(
            load_in(&store, config, fixture_wasm()).source,
            Source::Artifact
        );
        let artifact = || -> PathBuf {
            let found = artifacts(&dir.path().join("store"));
            assert_eq!(found.len(), 1, "{found:?}");
            found[0].clone()
        };
        // The same store, which verified the file before it was written to; then a store
        // opened afresh, as a new process would, on the artifact compiled in its place.
        let reopened = Store::open(dir.path().join("store")).unwrap();
        for store in [&store, &reopened] {
            damage_image(&artifact());
            let again = load_in(store, config, fixture_wasm());
            assert_eq!(again.source, Source::Compiled, "{config}");
            assert!(
                again
                    .notes
                    .iter()
                    .any(|note| note.contains("the memory image's checksum does not match")),
                "{config}: {:?}",
                again.notes
            );
            let outcome = Call::new("data_scratch").run_module(&again.module);
            assert_eq!(seen(outcome), AS_BUILT, "{config}");
        }
    }
}
