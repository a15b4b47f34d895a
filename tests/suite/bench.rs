//! `hako bench` as an operator runs it on the greet example: the JSON has every key DESIGN.md
//! names, one result per engine asked, with positive figures; the plot is a well-formed SVG;
//! unknown engines and tools are refused with exit 2, naming what exists. And `--suite` on a
//! small suite made in a temp folder (greet and the fixture guest, not the corpus, whose
//! guests take minutes to build): one row and one result per package and engine, each
//! package's best wasmer over its fastest wasmtime, and a package not built (or a bad
//! `bench.json`) refused before anything runs. Speed is never asserted here (that is what the
//! command reports, not what it is tested for).

use crate::support;

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use support::{arg as path, run_hako as hako};

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn positive(value: &Value, what: &str) {
    let number = value
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {value}"));
    assert!(number > 0.0, "{what} is {number}");
}

/// The engines this build offers, as `hako bench` names them in its refusal.
fn offered(store: &Path) -> Vec<String> {
    let output = hako(
        store,
        &["bench", "examples/greet", "--engines", "no-such-engine"],
    );
    let message = stderr(&output);
    let list = message
        .split("this build offers: ")
        .nth(1)
        .unwrap_or_else(|| panic!("the refusal lists the engines: {message}"));
    list.trim().split(", ").map(str::to_string).collect()
}

#[test]
fn bench_json_has_every_key_one_result_per_engine_and_a_well_formed_plot() {
    let dir = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let plot = dir.path().join("out.svg");
    let output = hako(
        dir.path(),
        &[
            "bench",
            path(&greet),
            "--args",
            r#"{"name":"Ada"}"#,
            "--iterations",
            "3",
            "--threads",
            "2",
            "--json",
            "--plot",
            path(&plot),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("stdout is one JSON object");

    for key in ["cpu", "cores", "memory_bytes", "os", "kernel"] {
        assert!(
            !report["machine"][key].is_null(),
            "machine.{key} in {report}"
        );
    }
    for key in ["hako", "rustc", "wasmer"] {
        assert!(
            report["versions"][key].is_string(),
            "versions.{key} in {report}"
        );
    }

    let results = report["results"].as_array().expect("results is an array");
    let engines: Vec<&str> = results
        .iter()
        .map(|result| result["engine"].as_str().expect("engine is a name"))
        .collect();
    assert_eq!(
        engines,
        offered(dir.path()),
        "one result per engine, in order"
    );
    for result in results {
        let engine = result["engine"].as_str().unwrap();
        assert_eq!(result["package"], "greet");
        assert_eq!(result["tool"], "greet", "the first tool is the default");
        assert!(
            result["failure"].is_null(),
            "{engine}: {}",
            result["failure"]
        );
        for key in [
            "compile_ms",
            "artifact_bytes",
            "calls_per_s",
            "calls_per_s_per_core",
            "peak_rss_bytes",
            "peak_pss_bytes",
        ] {
            positive(&result[key], &format!("{engine}.{key}"));
        }
        // Instances made ahead are hako's own: a baseline makes its instance in its call.
        let baseline = matches!(engine, "wasmtime-wasi" | "wasmer-wasix");
        let made_ahead = [
            &result["call_ready_us"]["p50"],
            &result["call_ready_us"]["p99"],
            &result["ready_calls_per_s_per_core"],
        ];
        for (n, figure) in made_ahead.into_iter().enumerate() {
            if baseline {
                assert!(figure.is_null(), "{engine}: figure {n} is {figure}");
            } else {
                positive(figure, &format!("{engine}: made-ahead figure {n}"));
            }
        }
        for key in [
            "load_us",
            "call_in_memory_us",
            "call_from_disk_us",
            "call_back_to_back_us",
        ] {
            for percentile in ["p50", "p99"] {
                positive(
                    &result[key][percentile],
                    &format!("{engine}.{key}.{percentile}"),
                );
            }
        }
    }
    assert_eq!(
        report["run"]["answer"]["structuredContent"]["message"],
        "Hello, Ada!"
    );
    assert!(report["run"]["peak_pss"].is_string(), "{}", report["run"]);

    let svg = std::fs::read_to_string(&plot).expect("the plot is written");
    let document = roxmltree::Document::parse(&svg).expect("the plot is well-formed XML");
    assert_eq!(document.root_element().tag_name().name(), "svg");
    for engine in engines {
        assert!(svg.contains(engine), "the plot names {engine}");
    }
}

#[test]
fn unknown_engines_and_tools_are_refused_naming_what_exists() {
    let dir = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();

    let output = hako(
        dir.path(),
        &["bench", path(&greet), "--engines", "wasmer-cranelift,v8"],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("\"v8\"") && message.contains("wasmer-cranelift"),
        "{message}"
    );

    let output = hako(dir.path(), &["bench", path(&greet), "--tool", "shout"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("\"shout\"") && message.contains("greet"),
        "{message}"
    );

    let output = hako(
        dir.path(),
        &[
            "bench",
            path(&greet),
            "--plot",
            path(&dir.path().join("out.png")),
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("SVG"), "{}", stderr(&output));
}

/// A suite folder: greet (its manifest and module, with a `bench.json`), the fixture guest
/// calling `echo`, and folders that are not packages (sources, a cargo target).
fn small_suite() -> tempfile::TempDir {
    let suite = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let dir = suite.path().join("greet");
    std::fs::create_dir(&dir).unwrap();
    for file in ["subako-package.json", "module.wasm", "bench.json"] {
        std::fs::copy(greet.join(file), dir.join(file)).unwrap();
    }
    let dir = suite.path().join("fixture");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("subako-package.json"),
        r#"{"name":"fixture","version":"1.0.0","abi":1}"#,
    )
    .unwrap();
    std::fs::write(dir.join("module.wasm"), support::fixture_wasm()).unwrap();
    std::fs::write(dir.join("bench.json"), r#"{"tool":"echo","args":{"n":1}}"#).unwrap();
    std::fs::create_dir_all(suite.path().join("guests/src")).unwrap();
    std::fs::create_dir_all(suite.path().join("target/release")).unwrap();
    suite
}

/// hako's cranelift and, when the build has it, hako's wasmtime: the two a suite is about,
/// and few enough to keep the runs short.
fn suite_engines(store: &Path) -> Vec<String> {
    offered(store)
        .into_iter()
        .filter(|engine| engine == "wasmer-cranelift" || engine == "wasmtime")
        .collect()
}

#[test]
fn a_suite_reports_every_package_and_engine_in_one_document() {
    let suite = small_suite();
    let store = tempfile::tempdir().unwrap();
    let engines = suite_engines(store.path());
    let output = hako(
        store.path(),
        &[
            "bench",
            "--suite",
            path(suite.path()),
            "--engines",
            &engines.join(","),
            "--iterations",
            "2",
            "--threads",
            "2",
            "--json",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("stdout is one JSON object");
    assert_eq!(report["run"]["suite"], path(suite.path()));
    assert!(report["machine"]["cpu"].is_string(), "{report}");
    assert!(report["versions"]["hako"].is_string(), "{report}");

    let rows: Vec<(String, String)> = report["results"]
        .as_array()
        .expect("results is an array")
        .iter()
        .map(|result| {
            let name = |key: &str| result[key].as_str().expect("a name").to_string();
            (name("package"), name("engine"))
        })
        .collect();
    let expected: Vec<(String, String)> = ["fixture", "greet"]
        .into_iter()
        .flat_map(|package| {
            engines
                .iter()
                .map(move |engine| (package.to_string(), engine.clone()))
        })
        .collect();
    assert_eq!(
        rows, expected,
        "one result per package and engine, in order"
    );
    for result in report["results"].as_array().unwrap() {
        let what = format!("{}/{}", result["package"], result["engine"]);
        assert!(result["failure"].is_null(), "{what}: {}", result["failure"]);
        for key in ["calls_per_s", "peak_rss_bytes", "peak_pss_bytes"] {
            positive(&result[key], &format!("{what}.{key}"));
        }
        for key in [
            "load_us",
            "call_in_memory_us",
            "call_from_disk_us",
            "call_back_to_back_us",
        ] {
            positive(&result[key]["p50"], &format!("{what}.{key}.p50"));
        }
        let ratios = &result["ratio_to_fastest_wasmtime"];
        assert!(
            ratios.get("call_in_memory").is_some() && ratios.get("call_from_disk").is_some(),
            "{what}: {ratios}"
        );
    }

    let packages = report["packages"].as_array().expect("packages is an array");
    assert_eq!(packages.len(), 2);
    assert_eq!(packages[0]["package"], "fixture");
    assert_eq!(packages[0]["tool"], "echo");
    assert_eq!(packages[0]["arguments"], serde_json::json!({"n": 1}));
    assert_eq!(packages[0]["answer"]["content"][0]["text"], r#"{"n":1}"#);
    assert_eq!(
        packages[1]["answer"]["structuredContent"]["message"],
        "Hello, Ada!"
    );
    let has_wasmtime = engines.iter().any(|engine| engine == "wasmtime");
    for package in packages {
        let best = &package["best_wasmer_over_fastest_wasmtime"];
        for latency in ["call_in_memory", "call_from_disk"] {
            if has_wasmtime {
                assert_eq!(best[latency]["wasmer"], "wasmer-cranelift", "{best}");
                assert_eq!(best[latency]["wasmtime"], "wasmtime", "{best}");
                positive(&best[latency]["ratio"], latency);
            } else {
                assert!(best[latency].is_null(), "{best}");
            }
        }
    }
}

#[test]
fn a_suite_table_has_one_row_per_package_and_engine_and_a_summary_per_package() {
    let suite = small_suite();
    let store = tempfile::tempdir().unwrap();
    let engines = suite_engines(store.path());
    let output = hako(
        store.path(),
        &[
            "bench",
            "--suite",
            path(suite.path()),
            "--engines",
            &engines.join(","),
            "--iterations",
            "1",
            "--threads",
            "1",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let table = String::from_utf8(output.stdout).unwrap();
    for header in [
        "load µs",
        "in memory µs",
        "×wt",
        "calls/s",
        "peak RSS MiB",
        "peak PSS MiB",
    ] {
        assert!(table.contains(header), "{header} in\n{table}");
    }
    for package in ["fixture", "greet"] {
        for engine in &engines {
            let rows = table
                .lines()
                .filter(|line| {
                    let mut cells = line.split_whitespace();
                    cells.next() == Some(package) && cells.next() == Some(engine.as_str())
                })
                .count();
            assert_eq!(rows, 1, "{package} on {engine} in\n{table}");
        }
    }
    let summary = table
        .split("best wasmer ÷ fastest wasmtime")
        .nth(1)
        .unwrap_or_else(|| panic!("the summary in\n{table}"));
    assert!(
        summary
            .lines()
            .any(|line| line.starts_with("fixture  echo")),
        "{summary}"
    );
    assert!(
        summary
            .lines()
            .any(|line| line.starts_with("greet    greet")),
        "{summary}"
    );
}

#[test]
fn a_suite_with_a_package_not_built_or_a_bad_spec_is_refused_before_it_runs() {
    let suite = small_suite();
    let store = tempfile::tempdir().unwrap();
    let unbuilt = suite.path().join("png");
    std::fs::create_dir(&unbuilt).unwrap();
    std::fs::write(
        unbuilt.join("subako-package.json"),
        r#"{"name":"png","version":"1.0.0","abi":1}"#,
    )
    .unwrap();
    std::fs::write(unbuilt.join("bench.json"), r#"{"tool":"thumbnail"}"#).unwrap();
    std::fs::write(suite.path().join("build.sh"), "#!/bin/sh\n").unwrap();
    let args = ["bench", "--suite", path(suite.path()), "--iterations", "1"];

    let output = hako(store.path(), &args);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("png not built") && message.contains("module.wasm"),
        "{message}"
    );
    let script = suite.path().join("build.sh");
    assert!(
        message.contains(&format!("run {} first", script.display())),
        "{message}"
    );
    assert!(output.stdout.is_empty(), "nothing is measured");

    std::fs::remove_dir_all(&unbuilt).unwrap();
    std::fs::write(
        suite.path().join("greet/bench.json"),
        r#"{"tool":"shout","args":{}}"#,
    )
    .unwrap();
    let output = hako(store.path(), &args);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("bench.json") && message.contains("\"shout\""),
        "{message}"
    );
    assert!(output.stdout.is_empty(), "nothing is measured");

    let greet = support::greet_package_dir();
    let output = hako(
        store.path(),
        &["bench", path(&greet), "--suite", path(suite.path())],
    );
    assert_eq!(
        output.status.code(),
        Some(2),
        "a package and a suite at once"
    );
}
