//! `hako bench` as an operator runs it on the greet example: the JSON has every key DESIGN.md
//! names, one result per engine asked, with positive figures; the plot is a well-formed SVG;
//! unknown engines and tools are refused with exit 2, naming what exists. Speed is never
//! asserted here (that is what the command reports, not what it is tested for).

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
            "peak_rss_bytes",
        ] {
            positive(&result[key], &format!("{engine}.{key}"));
        }
        for key in ["load_us", "call_in_memory_us", "call_from_disk_us"] {
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
