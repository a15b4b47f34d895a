//! `hako bench`: engines side by side on one package and tool, in one process; or, for a
//! suite, on each package of a folder in turn.
//!
//! The data's way: [`suite`] lists a suite's package folders and what to run on each;
//! [`subject`] turns engine names into things that compile, store, load and call (hako's own
//! engine configurations and the comparison baselines); [`measure`] runs them interleaved,
//! after a warm-up, checking every answer against the first engine's; [`stats`] holds the
//! samples, percentiles and memory figures; [`machine`] says where and with what it ran;
//! [`report`] shapes the table and the JSON, of one package or of a suite; [`plot`] draws the
//! SVG.
//!
//! It does not load packages or discover their tools, parse the command line or print:
//! `cli::bench` does. Nothing here names an engine type.

pub mod machine;
pub mod measure;
pub mod plot;
pub mod report;
pub mod stats;
pub mod subject;
pub mod suite;

pub use measure::RunShape;
pub use report::{Report, SuiteReport};
pub use subject::{available, refusal, Workload};

use crate::store::Store;

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Engine(String),
    #[error("making the run's folder: {0}")]
    Folder(#[source] std::io::Error),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// Benchmarks `engines` (names checked with [`refusal`]) on `workload`; `progress` is told
/// what is happening. Artifacts live in a temp folder removed afterwards.
pub fn run(
    engines: &[String],
    workload: &Workload,
    shape: RunShape,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, BenchError> {
    let dir = tempfile::Builder::new()
        .prefix("hako-bench-")
        .tempdir()
        .map_err(BenchError::Folder)?;
    let store = Store::open(dir.path().join("store"))?;
    let subjects = engines
        .iter()
        .map(|name| {
            subject::Subject::new(name, workload, store.artifacts(), dir.path())
                .map_err(|err| BenchError::Engine(format!("{name}: {err}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let versions = machine::versions(subjects.iter().flat_map(subject::Subject::versions));
    let results = measure::run(subjects, workload, shape, progress);
    Ok(Report {
        machine: machine::Machine::this(),
        versions,
        package: workload.program.clone(),
        tool: workload.tool.clone(),
        arguments: (*workload.arguments).clone(),
        shape,
        results,
    })
}
