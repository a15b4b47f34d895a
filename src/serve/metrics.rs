//! The server's counters and their Prometheus text form (`GET /metrics`): calls by outcome and
//! crash kind, a call latency histogram, calls in flight and queued, calls refused because the
//! queue was full, and where each call's module came from (the in-memory cache, an artifact on
//! disk, or a compile).
//!
//! Counters are plain atomics updated by the call path; this file does not time calls or
//! decide outcomes, it only counts what it is told.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::call::{CallOutcome, CrashKind};
use crate::store::Source;

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
    queued: AtomicU64,
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
}

fn kind_index(kind: CrashKind) -> usize {
    CrashKind::ALL
        .iter()
        .position(|k| *k == kind)
        .unwrap_or_default()
}

impl Metrics {
    /// A call was accepted into the queue.
    pub fn queued(&self) {
        self.queued.fetch_add(1, Ordering::Relaxed);
    }

    /// A queued call started running on a guest thread.
    pub fn started(&self) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A call counted by [`Metrics::queued`] was refused: the queue was full or closed.
    pub fn rejected(&self) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
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

    /// A running call finished: with an outcome, or with a host failure (`None`).
    pub fn finished(&self, outcome: Option<&CallOutcome>, took: Duration) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let counter = match outcome {
            Some(CallOutcome::Answered { result, .. }) if result.is_error => &self.is_error,
            Some(CallOutcome::Answered { .. }) => &self.ok,
            Some(CallOutcome::Crashed { crash, .. }) => &self.crashed[kind_index(crash.kind)],
            None => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let seconds = took.as_secs_f64();
        if let Some(bucket) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Calls running now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
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
            "# HELP hako_calls_rejected_total Calls refused with 503 because the queue was full."
                .into(),
        );
        line("# TYPE hako_calls_rejected_total counter".into());
        line(format!("hako_calls_rejected_total {}", get(&self.rejected)));
        line("# HELP hako_calls_in_flight Calls running on guest threads now.".into());
        line("# TYPE hako_calls_in_flight gauge".into());
        line(format!("hako_calls_in_flight {}", get(&self.in_flight)));
        line("# HELP hako_calls_queued Accepted calls waiting for a guest thread.".into());
        line("# TYPE hako_calls_queued gauge".into());
        line(format!("hako_calls_queued {}", get(&self.queued)));
        line("# HELP hako_call_duration_seconds Time from a guest thread taking a call to its outcome.".into());
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
        metrics.queued();
        metrics.started();
        metrics.finished(Some(&crashed(CrashKind::Timeout)), Duration::from_millis(3));
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
    }

    #[test]
    fn the_histogram_is_cumulative_and_ends_with_the_count() {
        let metrics = Metrics::default();
        for ms in [1, 3, 40] {
            metrics.queued();
            metrics.started();
            metrics.finished(None, Duration::from_millis(ms));
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
