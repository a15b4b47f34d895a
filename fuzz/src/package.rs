//! The checks of a package's parts: the manifest ([`manifest`]), the archive reader
//! ([`archive`], with its memory bound) and the static module check ([`module`], fed raw bytes
//! or modules that `wasm-smith` builds, [`smith_module`]).

use std::fs;
use std::path::Path;

use hako::package::archive::{self, ExtractError, MAX_ENTRIES, MAX_METADATA_BYTES};
use hako::package::manifest::{self, is_valid_name, is_valid_version};
use hako::package::{check_module, Problem};
use hako_engine_api::Import;

use super::{meter, MAX_MESSAGE_BYTES};

pub use super::smith::smith_module;

/// Refusals are errors naming rules of their family, each with a message of bounded size.
fn assert_problems(problems: &[Problem], families: &[&str]) {
    assert!(!problems.is_empty(), "a refusal names at least one problem");
    for problem in problems {
        assert!(
            families
                .iter()
                .any(|family| problem.rule.starts_with(family)),
            "rule {} is not one of {families:?}",
            problem.rule
        );
        assert!(
            problem.message.len() <= MAX_MESSAGE_BYTES,
            "the {} message quotes {} bytes; untrusted text is quoted clipped",
            problem.rule,
            problem.message.len()
        );
    }
}

/// `subako-package.json`: a parsed manifest obeys the rules and reads back the same once
/// written out again; a refused one names `manifest.*` rules.
pub fn manifest(bytes: &[u8]) {
    match manifest::parse(bytes) {
        Ok(parsed) => {
            assert!(is_valid_name(&parsed.name), "name {:?}", parsed.name);
            assert!(is_valid_version(&parsed.version), "{:?}", parsed.version);
            let mut written = serde_json::to_value(&parsed).expect("a manifest serializes");
            written["abi"] = 1.into();
            let text = serde_json::to_vec(&written).expect("JSON serializes");
            assert_eq!(
                manifest::parse(&text).as_ref(),
                Ok(&parsed),
                "a manifest written back reads the same"
            );
        }
        Err(problems) => assert_problems(&problems, &["manifest."]),
    }
}

/// What reading an archive may hold at once whatever its entries: flate2's gzip header fields
/// (it caps each of the name, the comment and the extra field at 64 KiB; 320 KiB as their
/// buffers grow), one metadata record read whole (at most [`MAX_METADATA_BYTES`], twice that as
/// its buffer grows), the 64 KiB copy buffer, and the decoder's window and state, the file
/// reader's buffer and tar's header block (about 60 KiB), rounded up.
pub const ARCHIVE_BASE_BYTES: usize = 320 * 1024 + 2 * MAX_METADATA_BYTES as usize + 192 * 1024;

/// What reading an archive may keep per entry it has seen: the entry's path in the set of
/// seen paths (at most `MAX_PATH_BYTES`, 1 KiB, and the set's slot), and a problem quoting the
/// path clipped (at most [`MAX_MESSAGE_BYTES`], with the vector's slot), rounded up.
pub const ARCHIVE_ENTRY_BYTES: usize = 4 * 1024;

/// The entries (raw, metadata records included) `tar` finds in `bytes` before an error or
/// one past [`MAX_ENTRIES`], counted the way the archive reader counts them.
fn entry_count(bytes: &[u8]) -> usize {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let Ok(entries) = tar.entries() else {
        return 0;
    };
    let mut count = 0;
    for entry in entries.raw(true) {
        if entry.is_err() || count > MAX_ENTRIES {
            break;
        }
        count += 1;
    }
    count
}

/// The archive reader, on any bytes: it never panics, never holds more than
/// [`ARCHIVE_BASE_BYTES`] plus [`ARCHIVE_ENTRY_BYTES`] per entry at once, refuses by
/// `archive.*` rule (an archive's content is never an I/O error of the host), and writes only
/// regular files and folders, only below its destination.
pub fn archive(bytes: &[u8]) {
    let temp = tempfile::tempdir().expect("a temporary folder");
    let path = temp.path().join("package.tar.gz");
    fs::write(&path, bytes).expect("the archive is written");
    let dest = temp.path().join("unpacked");
    fs::create_dir(&dest).expect("the destination is made");

    let entries = entry_count(bytes);
    let (extracted, peak) = meter::peak_during(|| archive::extract(&path, &dest));
    let bound = ARCHIVE_BASE_BYTES + ARCHIVE_ENTRY_BYTES * entries;
    assert!(
        peak <= bound,
        "reading an archive of {entries} entries held {peak} bytes at once; the bound is {bound}"
    );
    match extracted {
        Ok(root) => assert!(root.starts_with(&dest), "{}", root.display()),
        Err(ExtractError::Refused(problems)) => assert_problems(&problems, &["archive."]),
        Err(ExtractError::Io { path, source }) => panic!(
            "the archive's content made an I/O error at {} instead of a refusal: {source}",
            path.display()
        ),
    }
    assert_only_files_and_folders(&dest);
    let beside: Vec<_> = fs::read_dir(temp.path())
        .expect("the temporary folder lists")
        .map(|entry| entry.expect("an entry").file_name())
        .collect();
    assert_eq!(beside.len(), 2, "nothing is written beside the destination");
}

fn assert_only_files_and_folders(dir: &Path) {
    for entry in fs::read_dir(dir).expect("an extracted folder lists") {
        let entry = entry.expect("an extracted entry");
        let kind = entry.file_type().expect("an entry's type");
        if kind.is_dir() {
            assert_only_files_and_folders(&entry.path());
        } else {
            assert!(
                kind.is_file(),
                "{} is extracted as {kind:?}",
                entry.path().display()
            );
        }
    }
}

/// The module check: a module it accepts is valid WebAssembly 2.0 with `_start` and `memory`
/// exported and only the ABI's imports; one it refuses is refused by rule.
pub fn module(wasm: &[u8]) {
    match check_module(wasm) {
        Ok(facts) => {
            let mut validator =
                wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::WASM2);
            if let Err(error) = validator.validate_all(wasm) {
                panic!("the check accepted a module that is not WebAssembly 2.0: {error}");
            }
            let mut exports = Vec::new();
            for payload in wasmparser::Parser::new(0).parse_all(wasm) {
                match payload.expect("a valid module parses") {
                    wasmparser::Payload::ImportSection(section) => {
                        for import in section.into_imports() {
                            let import = import.expect("a valid import");
                            assert!(
                                Import::lookup(import.module, import.name).is_some(),
                                "the check accepted the import {}.{}",
                                import.module,
                                import.name
                            );
                        }
                    }
                    wasmparser::Payload::ExportSection(section) => {
                        for export in section {
                            exports.push(export.expect("a valid export").name.to_string());
                        }
                    }
                    _ => {}
                }
            }
            for required in ["_start", "memory"] {
                assert!(
                    exports.iter().any(|e| e == required),
                    "no {required} export"
                );
            }
            let simd = wasmparser::Validator::new_with_features(
                wasmparser::WasmFeatures::WASM2 - wasmparser::WasmFeatures::SIMD,
            )
            .validate_all(wasm)
            .is_err();
            assert_eq!(facts.uses_simd, simd, "uses_simd is whether SIMD is needed");
        }
        Err(problems) => assert_problems(&problems, &["module.", "export.", "import."]),
    }
}
