//! The server's counters and their Prometheus text form (`GET /metrics`): calls by outcome and
//! crash kind, a call latency histogram, calls in flight and how many of them run, wait in a
//! host call or wait for a run permit, calls refused at the bound on calls in flight, where
//! each call's module came from (the in-memory cache, an artifact on disk, or a compile), and
//! per package: calls by outcome and the seconds its calls spent in line, computing and
//! waiting in host calls. Package labels are bounded: the first [`MAX_PACKAGE_LABELS`]
//! packages a server calls have their own, every later one counts under `package="(other)"`.
//!
//! Counters are plain atomics updated by the call path; this file does not time calls or
//! decide outcomes, it only counts what it is told.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::permits::CallStates;
use crate::call::{CallOutcome, CrashKind};
use crate::store::Source;

/// The most packages with labels of their own in the per-package series.
pub const MAX_PACKAGE_LABELS: usize = 256;

/// The label every package past [`MAX_PACKAGE_LABELS`] counts under (no package name has
/// parentheses).
const OTHER_PACKAGES: &str = "(other)";

/// The upper bounds of the latency histogram's buckets, in seconds.
const BUCKETS: [f64; 16] = [
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0,
];

/// Every counter of one server.
#[derive(Default)]
pub struct Metrics {
    ok: AtomicU64,
    is_error: AtomicU64,
    crashed: [AtomicU64; CrashKind::ALL.len()],
    failed: AtomicU64,
    rejected: AtomicU64,
    in_flight: AtomicU64,
    /// Calls running, waiting in host calls and waiting for a permit, kept by the permits.
    states: Arc<CallStates>,
    packages: Mutex<HashMap<String, Arc<PackageCounters>>>,
    buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    module_memory: AtomicU64,
    module_artifact: AtomicU64,
    module_compiled: AtomicU64,
    /// Instances made ahead of their calls and held now; shared with the guest threads that
    /// hold them, which keep it at or under the operator's bound.
    ready_instances: Arc<AtomicU64>,
    calls_ready: AtomicU64,
    calls_inline: AtomicU64,
    calls_moved: AtomicU64,
}

fn kind_index(kind: CrashKind) -> usize {
    CrashKind::ALL
        .iter()
        .position(|k| *k == kind)
        .unwrap_or_default()
}

/// One package's counters (a served version holds its package's, looked up once).
#[derive(Default)]
pub struct PackageCounters {
    /// Its calls in flight (admitted, not yet let go), against its share of the bound.
    pub in_flight: Arc<AtomicU64>,
    ok: AtomicU64,
    is_error: AtomicU64,
    crashed: AtomicU64,
    failed: AtomicU64,
    queue_us: AtomicU64,
    compute_us: AtomicU64,
    wait_us: AtomicU64,
}

impl Metrics {
    /// Counters whose running, waiting and queued calls are `states`.
    pub fn new(states: &Arc<CallStates>) -> Self {
        Self {
            states: Arc::clone(states),
            ..Self::default()
        }
    }

    /// A call was admitted: it is in flight until [`Metrics::finished`].
    pub fn admitted(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// An admitted call could not start after all (no thread, or the server is closing).
    pub fn not_started(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.rejected();
    }

    /// A call was refused at once.
    pub fn rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Where a call's module came from.
    pub fn module(&self, source: Source) {
        let counter = match source {
            Source::Memory => &self.module_memory,
            Source::Artifact => &self.module_artifact,
            Source::Compiled => &self.module_compiled,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The count of instances made ahead and held now, for the guest threads to keep.
    pub fn ready_instances(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.ready_instances)
    }

    /// A call ran on an instance made ahead of it.
    pub fn called_ready(&self) {
        self.calls_ready.fetch_add(1, Ordering::Relaxed);
    }

    /// A call ran on the front end's thread to its answer.
    pub fn called_inline(&self) {
        self.calls_inline.fetch_add(1, Ordering::Relaxed);
    }

    /// A call run on the front end's thread waited or outran its slice, and was moved to a
    /// thread of its own.
    pub fn moved(&self) {
        self.calls_moved.fetch_add(1, Ordering::Relaxed);
    }

    /// A call of the package whose `counters` these are finished: with an outcome, or with a
    /// host failure (`None`).
    pub fn finished(
        &self,
        counters: &PackageCounters,
        outcome: Option<&CallOutcome>,
        took: Duration,
    ) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let (counter, of_package) = match outcome {
            Some(CallOutcome::Answered { result, .. }) if result.is_error => {
                (&self.is_error, &counters.is_error)
            }
            Some(CallOutcome::Answered { .. }) => (&self.ok, &counters.ok),
            Some(CallOutcome::Crashed { crash, .. }) => {
                (&self.crashed[kind_index(crash.kind)], &counters.crashed)
            }
            None => (&self.failed, &counters.failed),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        of_package.fetch_add(1, Ordering::Relaxed);
        if let Some(stats) = outcome.map(CallOutcome::stats) {
            let add = |counter: &AtomicU64, us: u64| counter.fetch_add(us, Ordering::Relaxed);
            add(&counters.queue_us, stats.queue_us);
            add(&counters.wait_us, stats.wait_us);
            add(
                &counters.compute_us,
                (stats.load_us + stats.run_us).saturating_sub(stats.wait_us),
            );
        }
        let seconds = took.as_secs_f64();
        if let Some(bucket) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Calls admitted and not yet answered.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// `package`'s counters, or those of every package past the bound on labels.
    pub fn package(&self, package: &str) -> Arc<PackageCounters> {
        let mut packages = self.packages.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(counters) = packages.get(package) {
            return Arc::clone(counters);
        }
        let key = if packages.len() < MAX_PACKAGE_LABELS {
            package
        } else {
            OTHER_PACKAGES
        };
        Arc::clone(packages.entry(key.to_string()).or_default())
    }

    fn render_packages(&self, line: &mut impl FnMut(String)) {
        let packages: Vec<(String, Arc<PackageCounters>)> = {
            let packages = self.packages.lock().unwrap_or_else(|p| p.into_inner());
            let mut all: Vec<_> = packages
                .iter()
                .map(|(name, counters)| (name.clone(), Arc::clone(counters)))
                .collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all
        };
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        line(format!("# HELP hako_package_calls_total Tool calls that finished, by package and outcome (at most {MAX_PACKAGE_LABELS} packages by name, the rest as \"{OTHER_PACKAGES}\")."));
        line("# TYPE hako_package_calls_total counter".into());
        for (name, counters) in &packages {
            for (outcome, counter) in [
                ("ok", &counters.ok),
                ("is_error", &counters.is_error),
                ("crashed", &counters.crashed),
                ("host_error", &counters.failed),
            ] {
                line(format!(
                    "hako_package_calls_total{{package=\"{name}\",outcome=\"{outcome}\"}} {}",
                    get(counter)
                ));
            }
        }
        for (metric, help, pick) in [
            (
                "hako_package_queue_seconds_total",
                "Seconds the package's calls waited for a run permit.",
                (|c: &PackageCounters| &c.queue_us) as fn(&PackageCounters) -> &AtomicU64,
            ),
            (
                "hako_package_compute_seconds_total",
                "Seconds the package's calls held a run permit: loading, instantiating and running guest code.",
                |c| &c.compute_us,
            ),
            (
                "hako_package_wait_seconds_total",
                "Seconds the package's calls waited in host calls (sleeps, the broker's answers), holding no permit.",
                |c| &c.wait_us,
            ),
        ] {
            line(format!("# HELP {metric} {help}"));
            line(format!("# TYPE {metric} counter"));
            for (name, counters) in &packages {
                let seconds = get(pick(counters)) as f64 / 1e6;
                line(format!("{metric}{{package=\"{name}\"}} {seconds}"));
            }
        }
    }

    /// Module loads from memory, from an artifact on disk, and by compiling.
    pub fn module_loads(&self) -> (u64, u64, u64) {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        (
            get(&self.module_memory),
            get(&self.module_artifact),
            get(&self.module_compiled),
        )
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let mut out = String::with_capacity(4096);
        let mut line = |text: String| {
            out.push_str(&text);
            out.push('\n');
        };
        line("# HELP hako_calls_total Tool calls that finished, by outcome.".into());
        line("# TYPE hako_calls_total counter".into());
        line(format!(
            "hako_calls_total{{outcome=\"ok\"}} {}",
            get(&self.ok)
        ));
        line(format!(
            "hako_calls_total{{outcome=\"is_error\"}} {}",
            get(&self.is_error)
        ));
        let crashed: u64 = self.crashed.iter().map(get).sum();
        line(format!("hako_calls_total{{outcome=\"crashed\"}} {crashed}"));
        line(format!(
            "hako_calls_total{{outcome=\"host_error\"}} {}",
            get(&self.failed)
        ));
        line("# HELP hako_call_crashes_total Crashed tool calls, by crash kind.".into());
        line("# TYPE hako_call_crashes_total counter".into());
        for kind in CrashKind::ALL {
            line(format!(
                "hako_call_crashes_total{{kind=\"{kind}\"}} {}",
                get(&self.crashed[kind_index(kind)])
            ));
        }
        line(
            "# HELP hako_calls_rejected_total Calls refused with 503 at the bound on calls in flight (--max-calls) or at their package's share of it (--max-calls-per-package)."
                .into(),
        );
        line("# TYPE hako_calls_rejected_total counter".into());
        line(format!("hako_calls_rejected_total {}", get(&self.rejected)));
        line("# HELP hako_calls_in_flight Calls admitted and not yet answered.".into());
        line("# TYPE hako_calls_in_flight gauge".into());
        line(format!("hako_calls_in_flight {}", get(&self.in_flight)));
        for (metric, help, gauge) in [
            (
                "hako_calls_running",
                "Calls holding a run permit now: computing.",
                &self.states.running,
            ),
            (
                "hako_calls_waiting",
                "Calls waiting in a host call now (a sleep, the broker's answer), holding no permit.",
                &self.states.waiting,
            ),
            (
                "hako_calls_queued",
                "Calls waiting for a run permit of their package now.",
                &self.states.queued,
            ),
        ] {
            line(format!("# HELP {metric} {help}"));
            line(format!("# TYPE {metric} gauge"));
            line(format!("{metric} {}", get(gauge)));
        }
        line(
            "# HELP hako_call_duration_seconds Time from a call's admission to its outcome.".into(),
        );
        line("# TYPE hako_call_duration_seconds histogram".into());
        let mut cumulative = 0;
        for (bound, counter) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += get(counter);
            line(format!(
                "hako_call_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            ));
        }
        let count = get(&self.latency_count);
        line(format!(
            "hako_call_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        ));
        let sum = get(&self.latency_sum_us) as f64 / 1e6;
        line(format!("hako_call_duration_seconds_sum {sum}"));
        line(format!("hako_call_duration_seconds_count {count}"));
        line("# HELP hako_module_loads_total Where each call's module came from: the in-memory cache (a hit), an artifact on disk or a compile (misses).".into());
        line("# TYPE hako_module_loads_total counter".into());
        line(format!(
            "hako_module_loads_total{{source=\"memory\"}} {}",
            get(&self.module_memory)
        ));
        line(format!(
            "hako_module_loads_total{{source=\"artifact\"}} {}",
            get(&self.module_artifact)
        ));
        line(format!(
            "hako_module_loads_total{{source=\"compiled\"}} {}",
            get(&self.module_compiled)
        ));
        line("# HELP hako_ready_instances Instances made ahead of their calls, held now (at most --ready-instances).".into());
        line("# TYPE hako_ready_instances gauge".into());
        line(format!(
            "hako_ready_instances {}",
            get(&self.ready_instances)
        ));
        line(
            "# HELP hako_calls_ready_total Calls that ran on an instance made ahead of them."
                .into(),
        );
        line("# TYPE hako_calls_ready_total counter".into());
        line(format!("hako_calls_ready_total {}", get(&self.calls_ready)));
        line(
            "# HELP hako_calls_inline_total Calls answered on the front end's thread, with no \
             hand-off to a call thread."
                .into(),
        );
        line("# TYPE hako_calls_inline_total counter".into());
        line(format!(
            "hako_calls_inline_total {}",
            get(&self.calls_inline)
        ));
        line(
            "# HELP hako_calls_moved_total Calls begun on the front end's thread that waited or \
             outran their slice, and ran again from their start on a call thread."
                .into(),
        );
        line("# TYPE hako_calls_moved_total counter".into());
        line(format!("hako_calls_moved_total {}", get(&self.calls_moved)));
        self.render_packages(&mut line);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{CallStats, Crash};

    fn crashed(kind: CrashKind) -> CallOutcome {
        CallOutcome::Crashed {
            crash: Crash::new(kind, "test"),
            stderr: String::new(),
            stats: CallStats::default(),
        }
    }

    #[test]
    fn a_crash_is_counted_under_its_kind_and_as_crashed() {
        let metrics = Metrics::default();
        metrics.admitted();
        metrics.finished(
            &metrics.package("p"),
            Some(&crashed(CrashKind::Timeout)),
            Duration::from_millis(3),
        );
        let text = metrics.render();
        assert!(
            text.contains("hako_calls_total{outcome=\"crashed\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("hako_call_crashes_total{kind=\"timeout\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("hako_call_crashes_total{kind=\"trap\"} 0"),
            "{text}"
        );
        assert!(text.contains("hako_calls_in_flight 0"), "{text}");
        assert!(
            text.contains("hako_package_calls_total{package=\"p\",outcome=\"crashed\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn packages_past_the_bound_count_under_one_label() {
        let metrics = Metrics::default();
        for n in 0..MAX_PACKAGE_LABELS + 10 {
            metrics.admitted();
            let counters = metrics.package(&format!("p{n}"));
            metrics.finished(&counters, None, Duration::from_millis(1));
        }
        let text = metrics.render();
        let series = text
            .lines()
            .filter(|l| l.starts_with("hako_package_calls_total{") && l.contains("host_error"))
            .count();
        assert_eq!(series, MAX_PACKAGE_LABELS + 1, "{text}");
        assert!(
            text.contains(
                "hako_package_calls_total{package=\"(other)\",outcome=\"host_error\"} 10"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_histogram_is_cumulative_and_ends_with_the_count() {
        let metrics = Metrics::default();
        for ms in [1, 3, 40] {
            metrics.admitted();
            metrics.finished(&metrics.package("p"), None, Duration::from_millis(ms));
        }
        let text = metrics.render();
        assert!(
            text.contains("hako_call_duration_seconds_bucket{le=\"0.001\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("hako_call_duration_seconds_bucket{le=\"0.005\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("hako_call_duration_seconds_bucket{le=\"0.05\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("hako_call_duration_seconds_bucket{le=\"+Inf\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("hako_call_duration_seconds_count 3"),
            "{text}"
        );
        assert!(
            text.contains("hako_calls_total{outcome=\"host_error\"} 3"),
            "{text}"
        );
    }

    #[test]
    fn module_sources_are_counted_apart() {
        let metrics = Metrics::default();
        metrics.module(Source::Memory);
        metrics.module(Source::Memory);
        metrics.module(Source::Compiled);
        let text = metrics.render();
        assert!(
            text.contains("hako_module_loads_total{source=\"memory\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("hako_module_loads_total{source=\"compiled\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("hako_module_loads_total{source=\"artifact\"} 0"),
            "{text}"
        );
    }
}
