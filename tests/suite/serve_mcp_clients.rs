//! The official MCP Python SDK against `hako serve`: it lists the tools of the bundled greet
//! package and calls `greet` over stdio, Streamable HTTP and the legacy HTTP+SSE transport,
//! with both the `initialize` handshake and the stateless `server/discover` style.
//!
//! The SDK is installed by the test itself into a virtualenv under the cargo target folder
//! (`$CARGO_TARGET_TMPDIR/mcp-venv`, reused across runs), with `python3 -m venv` and pip from
//! PyPI. A machine without python3 or its venv module fails here with what to install: a
//! missing client is a failure, never a silent skip.

use crate::serve_support;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};
use serve_support::Server;

/// The SDK release these scripts are written against.
const MCP_REQUIREMENT: &str = "mcp==2.3.0";

fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| match install() {
        Ok(python) => python,
        Err(message) => panic!("cannot set up the MCP Python SDK: {message}"),
    })
}

fn install() -> Result<PathBuf, String> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv");
    let python = venv.join("bin").join("python");
    let installed = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output();
    let wanted = MCP_REQUIREMENT.trim_start_matches("mcp==");
    if let Ok(output) = &installed {
        if output.status.success() && String::from_utf8_lossy(&output.stdout).trim() == wanted {
            return Ok(python);
        }
    }
    support::pip_venv("mcp-venv", MCP_REQUIREMENT, "to run the MCP Python SDK")?;
    Ok(python)
}

fn client(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_clients/client.py");
    let output = Command::new(python())
        .arg(&script)
        .args(args)
        .output()
        .expect("the client script runs");
    assert!(
        output.status.success(),
        "client.py {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "client.py printed no JSON ({err}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn assert_greeted(report: &Value, version: &str) {
    assert_eq!(report["protocol_version"], version, "{report}");
    assert_eq!(report["tools"], json!(["greet"]), "{report}");
    assert_eq!(
        report["greeted"]["structured"],
        json!({"message": "Hello, Ada!"}),
        "{report}"
    );
    assert_eq!(report["greeted"]["is_error"], false, "{report}");
    assert_eq!(report["refused"]["is_error"], true, "{report}");
    assert_eq!(
        report["refused"]["text"],
        json!(["name is required"]),
        "{report}"
    );
}

fn greet_store() -> tempfile::TempDir {
    let store = tempfile::tempdir().expect("a temp dir");
    serve_support::upload(store.path(), &support::greet_package_dir());
    store
}

#[test]
fn the_python_sdk_lists_and_calls_over_stdio() {
    let store = greet_store();
    let hako = support::hako_argv();
    let store_dir = store.path().to_str().unwrap();
    for (handshake, version) in [("initialize", "2025-06-18"), ("discover", "2026-07-28")] {
        let mut args = vec!["stdio", handshake, store_dir, "greet"];
        args.extend(hako.iter().map(String::as_str));
        let report = client(&args);
        assert_greeted(&report, version);
    }
}

#[test]
fn the_python_sdk_lists_and_calls_over_streamable_http() {
    let store = greet_store();
    let server = Server::start(store.path(), &[]);
    let url = format!("http://{}/mcp/greet", server.addr);
    for (handshake, version) in [("initialize", "2025-06-18"), ("discover", "2026-07-28")] {
        assert_greeted(&client(&["streamable-http", handshake, &url]), version);
    }
}

#[test]
fn the_python_sdk_lists_and_calls_over_legacy_sse() {
    let store = greet_store();
    let server = Server::start(store.path(), &[]);
    let url = format!("http://{}/sse/greet", server.addr);
    assert_greeted(&client(&["sse", "initialize", &url]), "2025-06-18");
    assert_greeted(&client(&["sse", "discover", &url]), "2026-07-28");
}
