//! The report of `hako bench --suite`: one [`Report`] per package, shaped as one table with a
//! row per package and engine (load, the two call latencies with their ratios to the fastest
//! wasmtime configuration of the same package, calls/s, peak RSS and PSS), a summary of each
//! package's best wasmer over its fastest wasmtime, and one JSON document holding every result.
//! Like [`Report`] it measures nothing and writes nowhere.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::{aligned, mebibytes, number, ratio, Latency, Report};
use crate::bench::machine::Machine;
use crate::bench::measure::RunShape;

/// Everything a suite run reports.
pub struct SuiteReport {
    /// The suite's folder, as the operator named it.
    pub suite: String,
    pub machine: Machine,
    pub shape: RunShape,
    /// One run per package, in the suite's order.
    pub runs: Vec<Report>,
}

impl SuiteReport {
    /// Whether every engine answered every call of every package with its reference answer.
    pub fn all_answered(&self) -> bool {
        self.runs.iter().all(Report::all_answered)
    }

    /// Every version any run used (hako, rustc, each engine crate).
    pub fn versions(&self) -> BTreeMap<String, String> {
        self.runs
            .iter()
            .flat_map(|run| run.versions.clone())
            .collect()
    }

    /// The `--json` document: the machine, versions and run as for one package, then per
    /// package its tool, arguments, answer and best-wasmer figures, then every result.
    pub fn to_json(&self) -> Value {
        let packages: Vec<Value> = self
            .runs
            .iter()
            .map(|run| {
                json!({
                    "package": run.package,
                    "tool": run.tool,
                    "arguments": run.arguments,
                    "answer": run.results.reference,
                    "best_wasmer_over_fastest_wasmtime": {
                        "call_in_memory": run.best_wasmer(Latency::InMemory),
                        "call_from_disk": run.best_wasmer(Latency::FromDisk),
                    },
                })
            })
            .collect();
        let results: Vec<Value> = self
            .runs
            .iter()
            .flat_map(|run| run.results.measured.iter().map(|m| run.result_json(m)))
            .collect();
        let methods = self.runs.first().map(|run| &run.results);
        json!({
            "machine": self.machine,
            "versions": self.versions(),
            "run": {
                "suite": self.suite,
                "iterations": self.shape.iterations,
                "threads": self.shape.threads,
                "rounds": self.shape.rounds,
                "compiles": self.shape.compiles,
                "warmup_calls": self.shape.warmup,
                "interleaved": true,
                "peak_rss": methods.map(|results| results.rss_method),
                "peak_pss": methods.map(|results| results.pss_method),
            },
            "packages": packages,
            "results": results,
        })
    }

    /// The table, with a header naming the machine, the versions and the run, and the summary
    /// of each package's best wasmer below it.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let versions: Vec<String> = self
            .versions()
            .iter()
            .map(|(name, version)| format!("{name} {version}"))
            .collect();
        let _ = writeln!(
            out,
            "hako bench: suite {}, {} packages",
            self.suite,
            self.runs.len()
        );
        let _ = writeln!(out, "machine:  {}", self.machine.summary());
        let _ = writeln!(out, "versions: {}", versions.join(", "));
        let _ = writeln!(
            out,
            "run:      per package and engine, {} samples per latency over {} interleaved \
             rounds, {} compiles, {} warm-up calls, {} threads for calls/s",
            self.shape.iterations,
            self.shape.rounds,
            self.shape.compiles,
            self.shape.warmup,
            self.shape.threads
        );
        let _ = writeln!(
            out,
            "ratios:   p50 over the fastest wasmtime configuration of the same package (×wt)"
        );
        let _ = writeln!(out);

        let header = [
            "package",
            "engine",
            "load µs",
            "in memory µs",
            "×wt",
            "from disk µs",
            "×wt",
            "back to back µs",
            "ready µs",
            "calls/s",
            "ready calls/s/core",
            "peak RSS MiB",
            "peak PSS MiB",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for run in &self.runs {
            for m in &run.results.measured {
                let p50 = |latency: Option<crate::bench::stats::Percentiles>| {
                    number(latency.map(|p| p.p50), 1)
                };
                rows.push(vec![
                    run.package.clone(),
                    m.engine.clone(),
                    p50(m.load_us),
                    p50(m.call_in_memory_us),
                    ratio(run.ratio(m, Latency::InMemory)),
                    p50(m.call_from_disk_us),
                    ratio(run.ratio(m, Latency::FromDisk)),
                    p50(m.call_back_to_back_us),
                    p50(m.call_ready_us),
                    number(m.calls_per_s, 0),
                    number(m.ready_calls_per_s_per_core, 0),
                    mebibytes(m.peak_rss_bytes),
                    mebibytes(m.peak_pss_bytes),
                ]);
            }
        }
        out.push_str(&aligned(&rows, &[0, 1]));
        let _ = writeln!(out);

        let _ = writeln!(
            out,
            "best wasmer ÷ fastest wasmtime (p50 over p50; hako's wasmer configurations against \
             hako's wasmtime or wasmtime-wasi):"
        );
        let header = [
            "package",
            "tool",
            "in memory",
            "wasmer / wasmtime",
            "from disk",
            "wasmer / wasmtime",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for run in &self.runs {
            let mut row = vec![run.package.clone(), run.tool.clone()];
            for latency in [Latency::InMemory, Latency::FromDisk] {
                match run.best_wasmer(latency) {
                    Some(best) => {
                        row.push(format!("{:.2}", best.ratio));
                        row.push(format!("{} / {}", best.wasmer, best.wasmtime));
                    }
                    None => row.extend(["-".to_string(), "-".to_string()]),
                }
            }
            rows.push(row);
        }
        out.push_str(&aligned(&rows, &[0, 1, 3, 5]));
        let _ = writeln!(out);

        if let Some(first) = self.runs.first() {
            let _ = writeln!(out, "peak RSS: {}", first.results.rss_method);
            let _ = writeln!(out, "peak PSS: {}", first.results.pss_method);
        }
        for run in &self.runs {
            for m in &run.results.measured {
                for note in &m.notes {
                    let _ = writeln!(out, "note: {}: {}: {note}", run.package, m.engine);
                }
                if let Some(failure) = &m.failure {
                    let _ = writeln!(out, "FAILED: {}: {}: {failure}", run.package, m.engine);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::measure::{Measured, RunResults};
    use crate::bench::stats::Percentiles;

    fn measured(engine: &str, in_memory: f64, from_disk: f64) -> Measured {
        let p = |p50: f64| {
            Some(Percentiles {
                p50,
                p99: p50 * 2.0,
            })
        };
        Measured {
            engine: engine.into(),
            versions: Vec::new(),
            is_wasmtime: engine.starts_with("wasmtime"),
            is_wasmer: engine.starts_with("wasmer-") && engine != "wasmer-wasix",
            notes: Vec::new(),
            compile_ms: Some(1.0),
            artifact_bytes: Some(1024),
            load_us: p(10.0),
            call_in_memory_us: p(in_memory),
            call_from_disk_us: p(from_disk),
            call_back_to_back_us: p(in_memory),
            call_ready_us: p(in_memory / 2.0),
            calls_per_s: Some(1000.0),
            calls_per_s_per_core: Some(500.0),
            ready_calls_per_s_per_core: Some(490.0),
            peak_rss_bytes: Some(64 << 20),
            peak_pss_bytes: Some(60 << 20),
            samples: 3,
            failure: None,
        }
    }

    fn run(package: &str, measured: Vec<Measured>) -> Report {
        Report {
            machine: Machine::this(),
            versions: BTreeMap::from([("hako".to_string(), "0.1.0".to_string())]),
            package: package.into(),
            tool: "t".into(),
            arguments: json!({}),
            shape: RunShape::new(3, 1),
            results: RunResults {
                measured,
                reference: Some(json!({"content": []})),
                rss_method: "rss",
                pss_method: "pss",
            },
        }
    }

    fn suite() -> SuiteReport {
        SuiteReport {
            suite: "benches/packages".into(),
            machine: Machine::this(),
            shape: RunShape::new(3, 1),
            runs: vec![
                run(
                    "data-1m",
                    vec![
                        measured("wasmer-singlepass", 30.0, 90.0),
                        measured("wasmer-cranelift", 20.0, 60.0),
                        measured("wasmtime", 40.0, 50.0),
                        measured("wasmtime-wasi", 50.0, 40.0),
                        measured("wasmer-wasix", 1.0, 1.0),
                    ],
                ),
                run("greet", vec![measured("wasmer-cranelift", 5.0, 5.0)]),
            ],
        }
    }

    #[test]
    fn the_best_wasmer_is_hakos_fastest_wasmer_over_the_fastest_wasmtime() {
        let suite = suite();
        let data = &suite.runs[0];
        let best = data.best_wasmer(Latency::InMemory).unwrap();
        assert_eq!(
            (best.ratio, best.wasmer, best.wasmtime),
            (0.5, "wasmer-cranelift", "wasmtime")
        );
        let best = data.best_wasmer(Latency::FromDisk).unwrap();
        assert_eq!(
            (best.ratio, best.wasmer, best.wasmtime),
            (1.5, "wasmer-cranelift", "wasmtime-wasi")
        );
        assert_eq!(suite.runs[1].best_wasmer(Latency::InMemory), None);
    }

    #[test]
    fn the_table_has_a_row_per_package_and_engine_and_a_summary_per_package() {
        let table = suite().to_table();
        let rows: Vec<&str> = table
            .lines()
            .filter(|line| line.starts_with("data-1m ") || line.starts_with("greet "))
            .collect();
        assert_eq!(rows.len(), 5 + 1 + 2, "{table}");
        assert!(table.contains("peak PSS MiB"), "{table}");
        let summary = rows
            .iter()
            .find(|row| row.contains("wasmer-cranelift / wasmtime-wasi"))
            .unwrap_or_else(|| panic!("{table}"));
        assert!(
            summary.contains("0.50") && summary.contains("1.50"),
            "{summary}"
        );
    }

    #[test]
    fn the_json_holds_every_result_and_each_packages_best_wasmer() {
        let document = suite().to_json();
        assert_eq!(document["results"].as_array().unwrap().len(), 6);
        assert_eq!(document["results"][5]["package"], "greet");
        assert_eq!(document["results"][0]["peak_pss_bytes"], 60 << 20);
        assert_eq!(document["run"]["suite"], "benches/packages");
        assert_eq!(document["run"]["peak_pss"], "pss");
        let best = &document["packages"][0]["best_wasmer_over_fastest_wasmtime"];
        assert_eq!(best["call_in_memory"]["ratio"], 0.5);
        assert_eq!(best["call_from_disk"]["wasmtime"], "wasmtime-wasi");
        assert!(
            document["packages"][1]["best_wasmer_over_fastest_wasmtime"]["call_in_memory"]
                .is_null()
        );
    }
}
