//! The report of a `hako bench` run: the JSON object DESIGN.md specifies (with a few extra
//! keys: the run's shape, the reference answer, ratios, failures) and the table an operator
//! reads, with each engine's call latencies as ratios to the fastest wasmtime configuration of
//! the run; and the report of a suite, one such run per package, in one table and one JSON
//! document with each package's best wasmer over its fastest wasmtime. It measures nothing and
//! writes nowhere; the CLI prints what it shapes.

mod suite;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

pub use suite::SuiteReport;

use super::machine::Machine;
use super::measure::{Measured, RunResults, RunShape};
use super::stats::{self, Percentiles};

/// Everything a run reports.
pub struct Report {
    pub machine: Machine,
    pub versions: BTreeMap<String, String>,
    pub package: String,
    pub tool: String,
    pub arguments: Value,
    pub shape: RunShape,
    pub results: RunResults,
}

/// A package's fastest wasmer configuration against its fastest wasmtime configuration.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BestWasmer<'a> {
    /// The wasmer configuration's median latency over the wasmtime configuration's.
    pub ratio: f64,
    pub wasmer: &'a str,
    pub wasmtime: &'a str,
}

/// Which latency a ratio is of.
#[derive(Debug, Clone, Copy)]
pub enum Latency {
    InMemory,
    FromDisk,
}

impl Latency {
    fn of(self, measured: &Measured) -> Option<Percentiles> {
        match self {
            Latency::InMemory => measured.call_in_memory_us,
            Latency::FromDisk => measured.call_from_disk_us,
        }
    }
}

impl Report {
    /// Whether every engine answered every call with the reference answer.
    pub fn all_answered(&self) -> bool {
        self.results.measured.iter().all(|m| m.failure.is_none())
    }

    /// The median latency of the fastest wasmtime configuration of the run, and its name.
    pub fn reference(&self, latency: Latency) -> Option<(f64, &str)> {
        self.results
            .measured
            .iter()
            .filter(|m| m.is_wasmtime)
            .filter_map(|m| latency.of(m).map(|p| (p.p50, m.engine.as_str())))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// `measured`'s median latency over the fastest wasmtime configuration's.
    pub fn ratio(&self, measured: &Measured, latency: Latency) -> Option<f64> {
        let (reference, _) = self.reference(latency)?;
        latency.of(measured).map(|p| p.p50 / reference)
    }

    /// The fastest of hako's wasmer configurations over the fastest wasmtime configuration, by
    /// median latency: the figure a suite reports per package.
    pub fn best_wasmer(&self, latency: Latency) -> Option<BestWasmer<'_>> {
        let (reference, wasmtime) = self.reference(latency)?;
        let (best, wasmer) = self
            .results
            .measured
            .iter()
            .filter(|m| m.is_wasmer)
            .filter_map(|m| latency.of(m).map(|p| (p.p50, m.engine.as_str())))
            .min_by(|a, b| a.0.total_cmp(&b.0))?;
        Some(BestWasmer {
            ratio: stats::round_3(best / reference),
            wasmer,
            wasmtime,
        })
    }

    /// One engine's object of the JSON's `results`.
    fn result_json(&self, m: &Measured) -> Value {
        json!({
            "package": self.package,
            "tool": self.tool,
            "engine": m.engine,
            "compile_ms": m.compile_ms,
            "artifact_bytes": m.artifact_bytes,
            "load_us": m.load_us,
            "call_in_memory_us": m.call_in_memory_us,
            "call_from_disk_us": m.call_from_disk_us,
            "call_back_to_back_us": m.call_back_to_back_us,
            "call_ready_us": m.call_ready_us,
            "calls_per_s": m.calls_per_s,
            "calls_per_s_per_core": m.calls_per_s_per_core,
            "ready_calls_per_s_per_core": m.ready_calls_per_s_per_core,
            "peak_rss_bytes": m.peak_rss_bytes,
            "peak_pss_bytes": m.peak_pss_bytes,
            "samples": m.samples,
            "ratio_to_fastest_wasmtime": {
                "call_in_memory": self.ratio(m, Latency::InMemory),
                "call_from_disk": self.ratio(m, Latency::FromDisk),
            },
            "notes": m.notes,
            "failure": m.failure,
        })
    }

    /// The `--json` object.
    pub fn to_json(&self) -> Value {
        let results: Vec<Value> = self
            .results
            .measured
            .iter()
            .map(|m| self.result_json(m))
            .collect();
        json!({
            "machine": self.machine,
            "versions": self.versions,
            "run": {
                "package": self.package,
                "tool": self.tool,
                "arguments": self.arguments,
                "iterations": self.shape.iterations,
                "threads": self.shape.threads,
                "rounds": self.shape.rounds,
                "compiles": self.shape.compiles,
                "warmup_calls": self.shape.warmup,
                "interleaved": true,
                "peak_rss": self.results.rss_method,
                "peak_pss": self.results.pss_method,
                "answer": self.results.reference,
            },
            "results": results,
        })
    }

    /// The table, with a header naming the machine, the versions and the run.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let versions: Vec<String> = self
            .versions
            .iter()
            .map(|(name, version)| format!("{name} {version}"))
            .collect();
        let _ = writeln!(out, "hako bench: {} / {}", self.package, self.tool);
        let _ = writeln!(out, "machine:  {}", self.machine.summary());
        let _ = writeln!(out, "versions: {}", versions.join(", "));
        let _ = writeln!(
            out,
            "run:      {} samples per latency over {} interleaved rounds, {} compiles, {} \
             warm-up calls, {} threads for calls/s",
            self.shape.iterations,
            self.shape.rounds,
            self.shape.compiles,
            self.shape.warmup,
            self.shape.threads
        );
        let reference = |latency| {
            self.reference(latency)
                .map_or("no wasmtime in this run".to_string(), |(_, name)| {
                    name.to_string()
                })
        };
        let _ = writeln!(
            out,
            "ratios:   p50 over the fastest wasmtime configuration (in memory: {}; from disk: {})",
            reference(Latency::InMemory),
            reference(Latency::FromDisk)
        );
        let _ = writeln!(out);

        let header = [
            "engine",
            "compile ms",
            "artifact KiB",
            "load µs p50/p99",
            "in memory µs p50/p99",
            "×wt",
            "from disk µs p50/p99",
            "×wt",
            "back to back µs p50/p99",
            "ready µs p50/p99",
            "calls/s",
            "ready calls/s/core",
            "peak RSS MiB",
            "peak PSS MiB",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for m in &self.results.measured {
            rows.push(vec![
                m.engine.clone(),
                number(m.compile_ms, 1),
                m.artifact_bytes
                    .map_or("-".into(), |b| format!("{:.0}", b as f64 / 1024.0)),
                pair(m.load_us),
                pair(m.call_in_memory_us),
                ratio(self.ratio(m, Latency::InMemory)),
                pair(m.call_from_disk_us),
                ratio(self.ratio(m, Latency::FromDisk)),
                pair(m.call_back_to_back_us),
                pair(m.call_ready_us),
                number(m.calls_per_s, 0),
                number(m.ready_calls_per_s_per_core, 0),
                mebibytes(m.peak_rss_bytes),
                mebibytes(m.peak_pss_bytes),
            ]);
        }
        out.push_str(&aligned(&rows, &[0]));
        let _ = writeln!(out);
        let _ = writeln!(out, "peak RSS: {}", self.results.rss_method);
        let _ = writeln!(out, "peak PSS: {}", self.results.pss_method);
        for m in &self.results.measured {
            for note in &m.notes {
                let _ = writeln!(out, "note: {}: {note}", m.engine);
            }
            if let Some(failure) = &m.failure {
                let _ = writeln!(out, "FAILED: {}: {failure}", m.engine);
            }
        }
        out
    }
}

/// `rows` (the first a header, underlined) in columns: those in `text_columns` aligned left,
/// the rest (figures) right.
fn aligned(rows: &[Vec<String>], text_columns: &[usize]) -> String {
    let mut out = String::new();
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|col| {
            rows.iter()
                .map(|row| row[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (index, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(col, (cell, width))| {
                let pad = " ".repeat(width - cell.chars().count());
                if text_columns.contains(&col) {
                    format!("{cell}{pad}")
                } else {
                    format!("{pad}{cell}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        if index == 0 {
            let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
            let _ = writeln!(out, "{}", "-".repeat(total));
        }
    }
    out
}

fn mebibytes(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| {
        format!("{:.1}", b as f64 / (1u64 << 20) as f64)
    })
}

fn number(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

fn pair(value: Option<Percentiles>) -> String {
    value.map_or("-".into(), |p| format!("{:.1} / {:.1}", p.p50, p.p99))
}

fn ratio(value: Option<f64>) -> String {
    value.map_or("-".into(), |r| format!("{r:.2}"))
}
