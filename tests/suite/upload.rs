//! Discovery and storing at upload: `server/discover`, `tools/list` pages, every tool rule, the
//! module's exit after discovery, and the store's versions — on every engine configuration.

use crate::support;

use hako::call::{self, CrashKind, DiscoveryError};
use hako::package;
use hako::store::{PutResult, Store};
use serde_json::{json, Value};
use support::host::{configs, load};

fn tool(name: &str) -> Value {
    json!({"name": name, "description": "d", "inputSchema": {"type": "object"}})
}

/// Discovery of a fixture package configured by `fixture_json`, on every engine configuration, with the
/// same outcome on each.
fn discover(fixture_json: Option<Value>) -> Result<Vec<String>, String> {
    let dir = support::fixture_package("fixture", fixture_json);
    let package = package::load(dir.path()).expect("the fixture package is valid");
    let mut outcomes = Vec::new();
    for config in configs() {
        let module = load(config, &package.wasm);
        let outcome = call::discover(&module, "fixture", package.assets.clone())
            .map(|found| {
                found
                    .tools
                    .into_iter()
                    .map(|tool| tool.name)
                    .collect::<Vec<_>>()
            })
            .map_err(|err| describe(&err));
        outcomes.push(outcome);
    }
    let first = outcomes[0].clone();
    assert!(outcomes.iter().all(|o| *o == first), "{outcomes:?}");
    first
}

fn describe(err: &DiscoveryError) -> String {
    match err {
        DiscoveryError::Crashed { crash, .. } => format!("crash {}", crash.kind),
        DiscoveryError::Rules(rule) => format!("rule {}", rule.rule()),
        other => other.to_string(),
    }
}

#[test]
fn the_default_fixture_offers_its_tools() {
    let tools = discover(None).unwrap();
    assert!(tools.contains(&"greet".to_string()), "{tools:?}");
}

#[test]
fn pages_are_followed_through_next_cursor() {
    let tools = discover(Some(
        json!({"tools": {"pages": [[tool("a")], [tool("b")], [tool("c")]]}}),
    ));
    assert_eq!(tools.unwrap(), vec!["a", "b", "c"]);
}

#[test]
fn more_than_sixteen_pages_are_refused() {
    let err = discover(Some(json!({"tools": [tool("a")], "cursor_forever": true}))).unwrap_err();
    assert!(err.contains("16 pages"), "{err}");
}

#[test]
fn a_discover_answer_without_the_revision_is_refused() {
    let err = discover(Some(
        json!({"discover": {"supportedVersions": ["2025-06-18"], "capabilities": {"tools": {}}}}),
    ))
    .unwrap_err();
    assert!(err.starts_with("server/discover"), "{err}");
}

#[test]
fn a_discover_answer_without_tools_is_refused() {
    let err = discover(Some(
        json!({"discover": {"supportedVersions": ["2026-07-28"], "capabilities": {}}}),
    ))
    .unwrap_err();
    assert!(err.starts_with("server/discover"), "{err}");
}

#[test]
fn a_module_that_does_not_exit_after_discovery_is_refused() {
    let err = discover(Some(json!({"after_eof": "spin"}))).unwrap_err();
    assert_eq!(err, format!("crash {}", CrashKind::NoExitAfterEof));
    let err = discover(Some(json!({"after_eof": "exit3"}))).unwrap_err();
    assert_eq!(err, format!("crash {}", CrashKind::NonzeroExit));
}

#[test]
fn every_tool_rule_refuses_with_its_name() {
    let many: Vec<Value> = (0..65).map(|i| tool(&format!("t{i}"))).collect();
    let big_schema = json!({"type": "object", "description": "x".repeat(70 * 1024)});
    let cases = [
        (json!([]), "tools.count"),
        (Value::Array(many), "tools.count"),
        (json!([tool("a"), tool("a")]), "tool.duplicate_name"),
        (json!([tool("Bad Name")]), "tool.name"),
        (json!([tool(&"n".repeat(65))]), "tool.name"),
        (
            json!([{"name": "a", "description": "d".repeat(1025), "inputSchema": {"type": "object"}}]),
            "tool.description",
        ),
        (
            json!([{"name": "a", "inputSchema": {"type": "string"}}]),
            "tool.input_schema",
        ),
        (json!([{"name": "a"}]), "tool.input_schema"),
        (
            json!([{"name": "a", "inputSchema": big_schema}]),
            "tool.schema_size",
        ),
        (
            json!([{"name": "a", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object", "description": "x".repeat(70 * 1024)}}]),
            "tool.schema_size",
        ),
    ];
    for (tools, rule) in cases {
        let err = discover(Some(json!({"tools": tools}))).unwrap_err();
        assert_eq!(err, format!("rule {rule}"), "{tools:.200}");
    }
    // All tools together over 256 KiB, each under its own limits.
    let heavy: Vec<Value> = (0..5)
        .map(|i| json!({"name": format!("t{i}"), "inputSchema": {"type": "object", "description": "x".repeat(60 * 1024)}}))
        .collect();
    let err = discover(Some(json!({"tools": heavy}))).unwrap_err();
    assert_eq!(err, "rule tools.total_size");
}

#[test]
fn discovery_sees_no_volume_and_only_the_package() {
    // The fixture's preopens tool is not callable at discovery, but the package's assets are
    // what configure it: that discovery read fixture.json proves /package was mounted.
    let tools = discover(Some(json!({"tools": [tool("only")]}))).unwrap();
    assert_eq!(tools, vec!["only"]);
}

#[test]
fn the_store_keeps_versions_immutable_and_the_newest_current() {
    let root = tempfile::tempdir().unwrap();
    let store = Store::open(root.path()).unwrap();
    let dir = support::fixture_package("fixture", None);
    let package = package::load(dir.path()).unwrap();
    let tools = hako::package::tools::validate_tools(vec![tool("a")]).unwrap();
    assert_eq!(store.put(&package, &tools, &[]).unwrap(), PutResult::Stored);
    assert_eq!(
        store.put(&package, &tools, &[]).unwrap(),
        PutResult::Unchanged
    );
    assert_eq!(store.list().unwrap(), vec!["fixture"]);

    // The same version with another module is refused.
    let other = support::module_package("fixture", &support::greet_wasm());
    let other = package::load(other.path()).unwrap();
    let err = store.put(&other, &tools, &[]).unwrap_err().to_string();
    assert!(err.contains("new version"), "{err}");

    // A new version replaces what the package offers.
    std::fs::write(
        dir.path().join("subako-package.json"),
        json!({"name": "fixture", "version": "2.0.0", "abi": 1}).to_string(),
    )
    .unwrap();
    let newer = package::load(dir.path()).unwrap();
    let newer_tools = hako::package::tools::validate_tools(vec![tool("b")]).unwrap();
    assert_eq!(
        store.put(&newer, &newer_tools, &[]).unwrap(),
        PutResult::Stored
    );
    let current = store.get("fixture").unwrap();
    assert_eq!(current.record.version, "2.0.0");
    assert_eq!(current.tools[0].name, "b");
}

/// `package` with its manifest's version set to `version` (any JSON string).
fn with_version(dir: &std::path::Path, version: &str) {
    std::fs::write(
        dir.join("subako-package.json"),
        json!({"name": "fixture", "version": version, "abi": 1}).to_string(),
    )
    .unwrap();
}

#[test]
fn no_version_string_collides_with_the_stores_own_names() {
    // "current" once left packages/<name>/current a folder, so that the name could never be
    // uploaded again; versions now live apart from the store's own names.
    let root = tempfile::tempdir().unwrap();
    let store = Store::open(root.path()).unwrap();
    let dir = support::fixture_package("fixture", None);
    let tools = hako::package::tools::validate_tools(vec![tool("a")]).unwrap();
    for version in ["current", "versions", "2.0.0-rc.1+build.5"] {
        with_version(dir.path(), version);
        let package = package::load(dir.path()).unwrap();
        assert_eq!(store.put(&package, &tools, &[]).unwrap(), PutResult::Stored);
        assert_eq!(store.get("fixture").unwrap().record.version, version);
    }
}

#[test]
fn versions_outside_the_grammar_are_refused_by_rule_and_leave_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = support::fixture_package("fixture", None);
    let long = "1".repeat(256);
    for version in [" 1.0 ", "\u{a0}", " 0.1.0", ".staging-x", long.as_str()] {
        with_version(dir.path(), version);
        let output = support::run_hako(root.path(), &["upload", support::arg(dir.path())]);
        assert_eq!(output.status.code(), Some(1), "{version:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("[manifest.version]"),
            "{version:?}: {stderr}"
        );
    }
    let packages = root.path().join("packages");
    assert!(
        !packages.exists() || std::fs::read_dir(&packages).unwrap().next().is_none(),
        "a refused version left something in the store"
    );
}
