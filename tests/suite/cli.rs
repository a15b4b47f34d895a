//! The command line as an operator uses it: the exit statuses of DESIGN.md (0 answered,
//! 1 refused, 2 usage, 3 crashed), `--json` outcomes, upload then call by name, and a call on
//! a package that was never uploaded compiling on the fly and saying so.

use crate::support;

use std::process::Output;

use serde_json::{json, Value};

use support::{arg as path, run_hako as hako};

fn status(output: &Output) -> i32 {
    output.status.code().expect("hako exits with a status")
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is not JSON ({err}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn check_exits_zero_for_a_valid_package_and_one_for_a_refused_one() {
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    assert_eq!(status(&hako(store.path(), &["check", path(&greet)])), 0);

    let bad = support::module_package("bad", b"not wasm at all");
    let output = hako(store.path(), &["check", path(bad.path()), "--json"]);
    assert_eq!(status(&output), 1);
    let verdict = stdout_json(&output);
    assert_eq!(verdict["valid"], json!(false));
    assert!(!verdict["problems"].as_array().unwrap().is_empty());
}

#[test]
fn a_call_on_a_folder_compiles_on_the_fly_and_says_so() {
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let output = hako(
        store.path(),
        &["call", path(&greet), "greet", r#"{"name":"Ada"}"#, "--json"],
    );
    assert_eq!(
        status(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let outcome = stdout_json(&output);
    assert_eq!(outcome["outcome"], "ok");
    assert_eq!(
        outcome["result"]["structuredContent"],
        json!({"message": "Hello, Ada!"})
    );
    assert_eq!(outcome["stats"]["compiled"], json!(true));
    assert!(String::from_utf8_lossy(&output.stderr).contains("compiled"));

    // The artifact is kept: the next call loads it.
    let again = hako(
        store.path(),
        &["call", path(&greet), "greet", r#"{"name":"Ada"}"#, "--json"],
    );
    assert_eq!(stdout_json(&again)["stats"]["compiled"], json!(false));
}

#[test]
fn upload_then_tools_then_call_by_name() {
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let upload = hako(
        store.path(),
        &[
            "upload",
            path(&greet),
            "--compiler",
            "singlepass",
            "--compiler",
            "cranelift",
            "--json",
        ],
    );
    assert_eq!(
        status(&upload),
        0,
        "{}",
        String::from_utf8_lossy(&upload.stderr)
    );
    assert_eq!(stdout_json(&upload)["tools"], json!(["greet"]));

    let tools = hako(store.path(), &["tools", "greet"]);
    assert_eq!(status(&tools), 0);
    assert_eq!(stdout_json(&tools)[0]["name"], "greet");

    for compiler in ["singlepass", "cranelift"] {
        let call = hako(
            store.path(),
            &[
                "call",
                "greet",
                "greet",
                r#"{"name":"Bo"}"#,
                "--compiler",
                compiler,
                "--json",
            ],
        );
        assert_eq!(status(&call), 0);
        let outcome = stdout_json(&call);
        assert_eq!(outcome["stats"]["compiled"], json!(false), "{compiler}");
        assert_eq!(
            outcome["result"]["structuredContent"]["message"],
            "Hello, Bo!"
        );
    }
    // Uploading the same version again changes nothing.
    let again = hako(store.path(), &["upload", path(&greet), "--json"]);
    assert_eq!(status(&again), 0);
    assert_eq!(stdout_json(&again)["stored"], json!(false));
}

#[test]
fn an_is_error_answer_exits_zero_and_a_crash_exits_three() {
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let answered = hako(
        store.path(),
        &["call", path(&greet), "greet", r#"{"name":""}"#, "--json"],
    );
    assert_eq!(status(&answered), 0);
    assert_eq!(stdout_json(&answered)["result"]["isError"], json!(true));

    let fixture = support::fixture_package("fixture", None);
    let crashed = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "stderr_then_trap",
            r#"{"text":"last words"}"#,
            "--json",
        ],
    );
    assert_eq!(status(&crashed), 3);
    let outcome = stdout_json(&crashed);
    assert_eq!(outcome["outcome"], "crashed");
    assert_eq!(outcome["crash"]["kind"], "trap");
    assert!(outcome["stderr"].as_str().unwrap().contains("last words"));
}

#[test]
fn limits_from_flags_reach_the_call() {
    let store = tempfile::tempdir().unwrap();
    let fixture = support::fixture_package("fixture", None);
    let timeout = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "spin",
            "--timeout",
            "200",
            "--json",
        ],
    );
    assert_eq!(status(&timeout), 3);
    assert_eq!(stdout_json(&timeout)["crash"]["kind"], "timeout");

    let memory = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "oom",
            "--memory",
            "16",
            "--json",
        ],
    );
    assert_eq!(status(&memory), 3);
    assert_eq!(stdout_json(&memory)["crash"]["kind"], "out_of_memory");

    let budget = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "write_file",
            r#"{"path":"/volume/tmp/f","bytes":100}"#,
            "--write-budget",
            "10",
            "--json",
        ],
    );
    assert_eq!(status(&budget), 0);
    let text = stdout_json(&budget)["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["errno"],
        json!(19)
    );
}

#[test]
fn volume_data_and_skill_flags_mount_folders() {
    let store = tempfile::tempdir().unwrap();
    let fixture = support::fixture_package("fixture", None);
    let (volume, data, skill) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let output = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "preopens",
            "--json",
            "--volume",
            path(volume.path()),
            "--data",
            path(data.path()),
            "--skill",
            &format!("notes={}", path(skill.path())),
        ],
    );
    assert_eq!(status(&output), 0);
    let text = stdout_json(&output)["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!(["/volume/tmp", "/volume/data", "/skills", "/skills/notes"])
    );
}

#[test]
fn allow_host_and_policy_flags_reach_the_broker() {
    let store = tempfile::tempdir().unwrap();
    let fixture = support::fixture_package("fixture", None);
    // 127.0.0.1 is a forbidden destination: an allowed request reaches the broker, which
    // refuses it without connecting anywhere.
    let request = r#"{"request":{"url":"https://127.0.0.1:9/"}}"#;
    let denied = hako(
        store.path(),
        &["call", path(fixture.path()), "http", request, "--json"],
    );
    assert!(String::from_utf8_lossy(&denied.stdout).contains("host_not_allowed"));

    let allowed = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "http",
            request,
            "--allow-host",
            "127.0.0.1:9",
            "--json",
        ],
    );
    assert!(String::from_utf8_lossy(&allowed.stdout).contains("forbidden_destination"));

    let policy_dir = tempfile::tempdir().unwrap();
    let policy = policy_dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[packages.fixture]\nallow_hosts = [\"127.0.0.1:9\"]\n",
    )
    .unwrap();
    let by_policy = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "http",
            request,
            "--policy",
            path(&policy),
            "--json",
        ],
    );
    assert!(String::from_utf8_lossy(&by_policy.stdout).contains("forbidden_destination"));

    std::fs::write(&policy, "[packages.fixture]\nallow_hostz = []\n").unwrap();
    let typo = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "http",
            request,
            "--policy",
            path(&policy),
        ],
    );
    assert_eq!(status(&typo), 2);
    assert!(String::from_utf8_lossy(&typo.stderr).contains("allow_hostz"));
}

#[cfg(feature = "wasmtime")]
#[test]
fn upload_then_call_on_wasmtime_runs_the_same_host() {
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let upload = hako(
        store.path(),
        &["upload", path(&greet), "--engine", "wasmtime", "--json"],
    );
    assert_eq!(
        status(&upload),
        0,
        "{}",
        String::from_utf8_lossy(&upload.stderr)
    );
    let call = hako(
        store.path(),
        &[
            "call",
            "greet",
            "greet",
            r#"{"name":"Ada"}"#,
            "--engine",
            "wasmtime",
            "--json",
        ],
    );
    assert_eq!(
        status(&call),
        0,
        "{}",
        String::from_utf8_lossy(&call.stderr)
    );
    let outcome = stdout_json(&call);
    assert_eq!(outcome["stats"]["compiled"], json!(false));
    assert_eq!(
        outcome["result"]["structuredContent"],
        json!({"message": "Hello, Ada!"})
    );

    let fixture = support::fixture_package("fixture", None);
    let crashed = hako(
        store.path(),
        &[
            "call",
            path(fixture.path()),
            "oom",
            "--memory",
            "16",
            "--engine",
            "wasmtime",
            "--json",
        ],
    );
    assert_eq!(status(&crashed), 3);
    assert_eq!(stdout_json(&crashed)["crash"]["kind"], "out_of_memory");

    let refused = hako(
        store.path(),
        &[
            "call",
            "greet",
            "greet",
            "--engine",
            "wasmtime",
            "--compiler",
            "singlepass",
        ],
    );
    assert_eq!(status(&refused), 2);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("its own cranelift"));
}

#[test]
fn usage_errors_exit_two() {
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    for args in [
        vec!["call", path(&greet), "greet", "[1]"],
        vec!["call", path(&greet), "greet", "{not json"],
        vec!["call", "no-such-package", "greet"],
        vec!["call", path(&greet), "greet", "--compiler", "v8"],
        vec!["call", path(&greet), "greet", "--skill", "Bad Name=/tmp"],
        vec!["frobnicate"],
    ] {
        let output = hako(store.path(), &args);
        assert_eq!(
            status(&output),
            2,
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn a_refused_upload_exits_one_and_names_the_rule() {
    let store = tempfile::tempdir().unwrap();
    let fixture = support::fixture_package(
        "fixture",
        Some(json!({"tools": [{"name": "Bad Name", "inputSchema": {"type": "object"}}]})),
    );
    let output = hako(store.path(), &["upload", path(fixture.path())]);
    assert_eq!(status(&output), 1);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Bad Name"), "{stderr}");
    assert_eq!(status(&hako(store.path(), &["tools", "fixture"])), 2);
}

/// A host error names its cause once, even when the error quotes the cause it also keeps as
/// its source.
#[cfg(not(feature = "llvm"))]
#[test]
fn a_host_error_names_its_cause_once() {
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let output = hako(
        store.path(),
        &["upload", path(&greet), "--compiler", "llvm"],
    );
    assert_eq!(status(&output), 1);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let cause = "this build of hako has no llvm compiler";
    assert_eq!(stderr.matches(cause).count(), 1, "{stderr}");
    assert!(stderr.starts_with("hako: error: "), "{stderr}");
}

#[test]
fn a_store_folder_that_others_may_write_or_own_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let store = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = hako(store.path(), &["upload", path(&greet)]);
    assert_eq!(status(&output), 1);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("writable by its group or by everyone (mode 777)"),
        "{stderr}"
    );
    assert!(
        !store.path().join("packages").exists(),
        "nothing was stored"
    );

    std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let artifacts = store.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    // Another owner can only be given by root; as another user that part cannot arise here.
    if std::os::unix::fs::chown(&artifacts, Some(65534), None).is_ok() {
        let output = hako(store.path(), &["upload", path(&greet)]);
        assert_eq!(status(&output), 1);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("belongs to user 65534"), "{stderr}");
    }
    std::os::unix::fs::chown(&artifacts, Some(own_uid()), None).ok();
    let output = hako(store.path(), &["upload", path(&greet)]);
    assert_eq!(
        status(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_store_hako_creates_passes_its_own_check_whatever_the_umask() {
    // With a umask of 002 (common on desktops), a plain create_dir_all made a group-writable
    // store that the next command refused.
    let parent = tempfile::tempdir().unwrap();
    let store = parent.path().join("new-store");
    let greet = support::greet_package_dir();
    let output = std::process::Command::new("sh")
        .args(["-c", "umask 002 && exec \"$@\"", "sh"])
        .args(support::hako_argv())
        .args(["upload", path(&greet), "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(
        status(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = hako(&store, &["tools", "greet"]);
    assert_eq!(
        status(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The user running the tests: the owner of a folder it makes.
fn own_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    let probe = tempfile::tempdir().unwrap();
    std::fs::metadata(probe.path()).unwrap().uid()
}
