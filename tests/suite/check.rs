//! `hako check` end to end: the `.wat` fixtures through the module check, and package folders
//! and archives built in temporary folders through `hako::package::load`.

use std::fs;
use std::path::{Path, PathBuf};

use hako::package::{check_module, load, LoadError, ModuleFacts, Problem, MAX_MODULE_BYTES};
use tar::EntryType;
use tempfile::TempDir;

const MANIFEST: &str = r#"{"name":"greet","version":"1.0.0","abi":1,"description":"Greets."}"#;

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/wat")
        .join(format!("{name}.wat"));
    wat::parse_file(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn module_problems(name: &str) -> Vec<Problem> {
    match check_module(&fixture(name)) {
        Err(problems) => problems,
        Ok(facts) => panic!("{name} was accepted: {facts:?}"),
    }
}

/// Asserts that the fixture is refused for exactly one problem, under `rule`, with a message
/// containing `words`.
fn assert_refused(name: &str, rule: &str, words: &str) {
    let problems = module_problems(name);
    assert_eq!(problems.len(), 1, "{name}: {problems:#?}");
    assert_eq!(problems[0].rule, rule, "{name}: {problems:#?}");
    assert!(
        problems[0].message.contains(words),
        "{name}: {:?} does not contain {words:?}",
        problems[0].message
    );
}

#[test]
fn the_minimal_module_is_accepted_without_simd() {
    assert_eq!(
        check_module(&fixture("valid_minimal")),
        Ok(ModuleFacts { uses_simd: false })
    );
}

#[test]
fn the_simd_module_is_accepted_and_says_it_uses_simd() {
    assert_eq!(
        check_module(&fixture("valid_simd")),
        Ok(ModuleFacts { uses_simd: true })
    );
}

#[test]
fn a_component_is_refused_by_name() {
    assert_refused(
        "component",
        "module.component",
        "a component, not a core module",
    );
}

#[test]
fn missing_or_mistyped_exports_are_refused() {
    assert_refused("missing_start", "export.start", "does not export _start");
    assert_refused("start_wrong_type", "export.start", "declares (i32) -> ()");
    assert_refused("missing_memory", "export.memory", "memory");
}

#[test]
fn imports_outside_the_abi_are_refused_naming_them() {
    assert_refused("unknown_import_module", "import.unknown", "env.log");
    assert_refused(
        "unknown_wasi_function",
        "import.unknown",
        "wasi_snapshot_preview1.fd_teleport",
    );
    assert_refused(
        "wrong_signature",
        "import.signature",
        "subako_http.request expects (i32, i32) -> i32, the module declares (i32) -> i32",
    );
    assert_refused(
        "memory_import",
        "import.kind",
        "wasi_snapshot_preview1.memory is a memory",
    );
}

#[test]
fn each_feature_outside_webassembly_2_is_refused_naming_it() {
    let cases = [
        ("threads_shared_memory", "threads and shared memory"),
        (
            "threads_atomics",
            "threads and shared memory (i32_atomic_load)",
        ),
        ("exceptions", "uses exceptions"),
        ("legacy_exceptions", "legacy exceptions"),
        (
            "tail_calls",
            "uses tail calls (return_call), which ABI 1 does not allow",
        ),
        ("memory64", "memory64"),
        ("multi_memory", "multiple memories"),
        ("relaxed_simd", "relaxed SIMD (i32x4_relaxed_trunc_f32x4_s)"),
        ("gc", "garbage collection"),
        ("function_references", "typed function references (call_ref"),
        ("extended_const", "extended constant expressions"),
        ("wide_arithmetic", "wide arithmetic (i64_add128)"),
    ];
    for (name, words) in cases {
        assert_refused(name, "module.feature", words);
    }
}

#[test]
fn every_problem_of_a_module_is_reported() {
    let problems = module_problems("several_problems");
    let rules: Vec<&str> = problems.iter().map(|p| p.rule).collect();
    assert_eq!(
        rules,
        [
            "module.feature",
            "module.feature",
            "export.start",
            "export.memory",
            "import.unknown",
            "import.unknown",
            "import.signature",
        ],
        "{problems:#?}"
    );
    assert!(problems[0].message.contains("threads and shared memory"));
    assert!(problems[1].message.contains("tail calls"));
}

/// A package folder with the given manifest and module (either may be left out).
fn package(manifest: Option<&str>, module: Option<&[u8]>) -> TempDir {
    let temp = TempDir::new().unwrap();
    if let Some(manifest) = manifest {
        fs::write(temp.path().join("subako-package.json"), manifest).unwrap();
    }
    if let Some(module) = module {
        fs::write(temp.path().join("module.wasm"), module).unwrap();
    }
    temp
}

fn refused_rules(path: &Path) -> Vec<&'static str> {
    match load(path) {
        Err(LoadError::Refused(refusal)) => refusal.problems.iter().map(|p| p.rule).collect(),
        Err(error) => panic!("expected a refusal, got {error:?}"),
        Ok(package) => panic!("expected a refusal, got {package:?}"),
    }
}

#[test]
fn a_valid_folder_loads_with_its_hash_and_assets() {
    let wasm = fixture("valid_simd");
    let temp = package(Some(MANIFEST), Some(&wasm));
    fs::create_dir(temp.path().join("assets")).unwrap();
    fs::write(temp.path().join("assets/hello.txt"), "hi").unwrap();
    let package = load(temp.path()).unwrap();
    assert_eq!(package.manifest.name, "greet");
    assert_eq!(package.manifest.version, "1.0.0");
    assert_eq!(package.manifest.description.as_deref(), Some("Greets."));
    assert_eq!(package.root, temp.path());
    assert_eq!(package.assets, Some(temp.path().join("assets")));
    assert_eq!(package.wasm, wasm);
    assert!(package.uses_simd);
    assert_eq!(package.module_sha256.len(), 64);
    use sha2::Digest;
    assert_eq!(
        package.module_sha256,
        hex::encode(sha2::Sha256::digest(&wasm))
    );
}

#[test]
fn manifest_problems_are_refused() {
    let wasm = fixture("valid_minimal");
    let cases = [
        (r#"{"version":"1","abi":1}"#, "manifest.name"),
        (r#"{"name":"a","version":"1","abi":2}"#, "manifest.abi"),
        (r#"{"name":"a","version":"1","abi":"1"}"#, "manifest.abi"),
        (r#"{"name":"a","version":"1","abi":1"#, "manifest.json"),
    ];
    for (manifest, rule) in cases {
        let temp = package(Some(manifest), Some(&wasm));
        assert_eq!(refused_rules(temp.path()), [rule], "{manifest}");
    }
    let temp = package(None, Some(&wasm));
    assert_eq!(refused_rules(temp.path()), ["manifest.missing"]);
}

#[test]
fn a_missing_module_is_refused() {
    let temp = package(Some(MANIFEST), None);
    assert_eq!(refused_rules(temp.path()), ["module.missing"]);
}

#[test]
fn a_module_over_64_mib_is_refused_without_reading_it() {
    let temp = package(Some(MANIFEST), None);
    let file = fs::File::create(temp.path().join("module.wasm")).unwrap();
    file.set_len(MAX_MODULE_BYTES + 1).unwrap();
    assert_eq!(refused_rules(temp.path()), ["module.size"]);
}

#[test]
fn manifest_and_module_problems_are_reported_together() {
    let temp = package(
        Some(r#"{"name":"Bad","version":"1","abi":2}"#),
        Some(&fixture("missing_start")),
    );
    assert_eq!(
        refused_rules(temp.path()),
        ["manifest.name", "manifest.abi", "export.start"]
    );
}

#[test]
fn an_asset_link_out_of_the_package_is_refused() {
    let outside = TempDir::new().unwrap();
    let temp = package(Some(MANIFEST), Some(&fixture("valid_minimal")));
    fs::create_dir(temp.path().join("assets")).unwrap();
    std::os::unix::fs::symlink(outside.path(), temp.path().join("assets/out")).unwrap();
    assert_eq!(refused_rules(temp.path()), ["assets.symlink"]);
}

/// Writes a .tar.gz holding `entries`, writing names straight into the header so that
/// hostile names can be built too.
/// A .tar.gz written by `build` with `tar`'s builder.
fn built(
    build: impl FnOnce(&mut tar::Builder<flate2::write::GzEncoder<fs::File>>),
) -> (TempDir, PathBuf) {
    let temp = TempDir::new().unwrap();
    let path = temp.path().join("greet.tar.gz");
    let gz = flate2::write::GzEncoder::new(
        fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut builder = tar::Builder::new(gz);
    build(&mut builder);
    builder.into_inner().unwrap().finish().unwrap();
    (temp, path)
}

/// A .tar.gz of raw entries, their paths written straight into the header.
fn archive(entries: &[(&str, EntryType, &[u8])]) -> (TempDir, PathBuf) {
    built(|builder| {
        for (name, entry_type, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            header.set_entry_type(*entry_type);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            if *entry_type == EntryType::Symlink {
                header.set_link_name("../../etc").unwrap();
            }
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
    })
}

#[test]
fn an_archive_with_files_at_its_root_loads() {
    let wasm = fixture("valid_minimal");
    let (_keep, path) = archive(&[
        (
            "subako-package.json",
            EntryType::Regular,
            MANIFEST.as_bytes(),
        ),
        ("module.wasm", EntryType::Regular, &wasm),
        ("assets/data.txt", EntryType::Regular, b"data"),
    ]);
    let package = load(&path).unwrap();
    assert_eq!(package.manifest.name, "greet");
    let assets = package.assets.clone().unwrap();
    assert_eq!(fs::read(assets.join("data.txt")).unwrap(), b"data");
    let root = package.root.clone();
    drop(package);
    assert!(!root.exists(), "the extracted files go with the package");
}

#[test]
fn an_archive_with_one_top_level_folder_loads() {
    let wasm = fixture("valid_minimal");
    let (_keep, path) = archive(&[
        ("greet-1.0.0/", EntryType::Directory, b""),
        (
            "greet-1.0.0/subako-package.json",
            EntryType::Regular,
            MANIFEST.as_bytes(),
        ),
        ("greet-1.0.0/module.wasm", EntryType::Regular, &wasm),
    ]);
    let package = load(&path).unwrap();
    assert!(package.root.ends_with("greet-1.0.0"));
    assert_eq!(package.wasm, wasm);
    assert_eq!(package.assets, None);
}

#[test]
fn hostile_archives_are_refused() {
    let cases: [(&str, EntryType, &str); 3] = [
        (
            "greet/../../escape",
            EntryType::Regular,
            "archive.unsafe_path",
        ),
        ("/etc/escape", EntryType::Regular, "archive.unsafe_path"),
        ("link", EntryType::Symlink, "archive.entry_type"),
    ];
    for (name, entry_type, rule) in cases {
        let (keep, path) = archive(&[
            (
                "subako-package.json",
                EntryType::Regular,
                MANIFEST.as_bytes(),
            ),
            (name, entry_type, b""),
        ]);
        assert_eq!(refused_rules(&path), [rule], "{name}");
        assert!(!keep.path().join("escape").exists());
    }
}

/// A .tar.gz whose first entry is a GNU long name of `name_bytes` bytes (it compresses to
/// almost nothing), followed by a manifest.
fn long_name_bomb(name_bytes: u64) -> (TempDir, PathBuf) {
    built(|builder| {
        let mut header = tar::Header::new_gnu();
        header.set_path("././@LongLink").unwrap();
        header.set_entry_type(EntryType::GNULongName);
        header.set_size(name_bytes);
        header.set_cksum();
        builder
            .append(
                &header,
                std::io::Read::take(std::io::repeat(b'a'), name_bytes),
            )
            .unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_size(MANIFEST.len() as u64);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, "subako-package.json", MANIFEST.as_bytes())
            .unwrap();
    })
}

#[test]
fn a_long_name_bomb_is_refused_by_rule_without_being_read() {
    // 256 MiB of name in a few hundred KB: `tar` alone reads such a name whole (1.65 GB of
    // memory, then a host error); hako refuses the record by its size.
    let (_keep, path) = long_name_bomb(256 << 20);
    let store = TempDir::new().unwrap();
    let output = crate::support::run_hako(
        store.path(),
        &["check", crate::support::arg(&path), "--json"],
    );
    assert_eq!(output.status.code(), Some(1));
    let verdict: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("no verdict: {}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(
        verdict["problems"][0]["rule"], "archive.too_large",
        "{verdict}"
    );
}

#[test]
fn paths_past_the_file_systems_bounds_are_refused_by_rule() {
    // A 300-byte name and a 4,200-byte path were host errors ("file name too long").
    let wasm = fixture("valid_minimal");
    for long in ["n".repeat(300), format!("{}x", "d/".repeat(2100))] {
        let (_keep, path) = built(|builder| {
            for (name, data) in [
                ("subako-package.json", MANIFEST.as_bytes()),
                ("module.wasm", &wasm[..]),
                (long.as_str(), &b"x"[..]),
            ] {
                let mut header = tar::Header::new_gnu();
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                builder.append_data(&mut header, name, data).unwrap();
            }
        });
        assert_eq!(
            refused_rules(&path),
            ["archive.path_too_long"],
            "{}",
            long.len()
        );
    }
}

#[test]
fn an_archive_naming_a_file_twice_is_refused() {
    let wasm = fixture("valid_minimal");
    let (_keep, path) = archive(&[
        (
            "subako-package.json",
            EntryType::Regular,
            MANIFEST.as_bytes(),
        ),
        ("module.wasm", EntryType::Regular, &wasm),
        ("module.wasm", EntryType::Regular, b"other code, last"),
    ]);
    assert_eq!(refused_rules(&path), ["archive.duplicate"]);
    let (_keep, path) = archive(&[
        (
            "subako-package.json",
            EntryType::Regular,
            MANIFEST.as_bytes(),
        ),
        (
            "subako-package.json",
            EntryType::Regular,
            MANIFEST.as_bytes(),
        ),
        ("module.wasm", EntryType::Regular, &wasm),
    ]);
    assert_eq!(refused_rules(&path), ["archive.duplicate"]);
}
