//! The guest modules the integration tests drive: the fixture builds from
//! `tests/guests` into a WASI command module, and the support code lays out
//! packages around it. This file checks the support, not hako.

use crate::support;

use wasmparser::{ExternalKind, Parser, Payload};

/// An export as `(kind, name)`.
type Export = (ExternalKind, String);
/// An import as `(module, name)`.
type Import = (String, String);

/// The exports and imports of a module.
fn exports_and_imports(module: &[u8]) -> (Vec<Export>, Vec<Import>) {
    let mut exports = Vec::new();
    let mut imports = Vec::new();
    for payload in Parser::new(0).parse_all(module) {
        match payload.expect("the module parses") {
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.expect("the export parses");
                    exports.push((export.kind, export.name.to_owned()));
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.expect("the import parses");
                    imports.push((import.module.to_owned(), import.name.to_owned()));
                }
            }
            _ => {}
        }
    }
    (exports, imports)
}

#[test]
fn fixture_is_a_wasi_command_module() {
    let module = support::fixture_wasm();
    assert_eq!(
        &module[..8],
        b"\0asm\x01\0\0\0",
        "core module magic and version 1"
    );
    let (exports, imports) = exports_and_imports(module);
    assert!(exports.contains(&(ExternalKind::Func, "_start".to_owned())));
    assert!(exports.contains(&(ExternalKind::Memory, "memory".to_owned())));
    for (module, _) in &imports {
        assert!(
            module == "wasi_snapshot_preview1" || module == "subako_http",
            "unexpected import module {module}"
        );
    }
    for name in ["request", "read_response"] {
        assert!(imports.contains(&("subako_http".to_owned(), name.to_owned())));
    }
}

#[test]
fn fixture_package_holds_manifest_module_and_assets() {
    let config = serde_json::json!({"after_eof": "exit3"});
    let package = support::fixture_package("fixture", Some(config.clone()));
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(package.path().join("subako-package.json")).expect("manifest written"),
    )
    .expect("manifest is JSON");
    assert_eq!(
        manifest,
        serde_json::json!({"name": "fixture", "version": "1.0.0", "abi": 1})
    );
    let module = std::fs::read(package.path().join("module.wasm")).expect("module written");
    assert_eq!(module, support::fixture_wasm());
    let written: serde_json::Value = serde_json::from_slice(
        &std::fs::read(package.path().join("assets/fixture.json")).expect("fixture.json written"),
    )
    .expect("fixture.json is JSON");
    assert_eq!(written, config);
    let bare = support::fixture_package("bare", None);
    assert!(!bare.path().join("assets").exists());
}

#[test]
fn greet_example_is_committed_with_its_manifest() {
    let dir = support::greet_package_dir();
    let module = std::fs::read(dir.join("module.wasm")).expect("examples/greet/module.wasm exists");
    let (exports, imports) = exports_and_imports(&module);
    assert!(exports.contains(&(ExternalKind::Func, "_start".to_owned())));
    assert!(imports
        .iter()
        .all(|(module, _)| module == "wasi_snapshot_preview1"));
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("subako-package.json")).expect("manifest exists"),
    )
    .expect("manifest is JSON");
    assert_eq!(manifest["name"], "greet");
    assert_eq!(manifest["abi"], 1);
}
