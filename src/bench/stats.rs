//! The statistics of `hako bench`: timing samples, their percentiles (nearest rank), medians,
//! and the process's peak resident set size. It measures nothing itself and knows no engine.

use std::time::Duration;

use serde::Serialize;

/// Timing samples of one measure, in microseconds.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    micros: Vec<f64>,
}

impl Samples {
    pub fn push(&mut self, elapsed: Duration) {
        self.micros.push(elapsed.as_secs_f64() * 1e6);
    }

    pub fn len(&self) -> usize {
        self.micros.len()
    }

    pub fn is_empty(&self) -> bool {
        self.micros.is_empty()
    }

    /// The median and the 99th percentile, or `None` without samples.
    pub fn percentiles(&self) -> Option<Percentiles> {
        let mut sorted = self.micros.clone();
        sorted.sort_by(f64::total_cmp);
        Some(Percentiles {
            p50: round_3(nearest_rank(&sorted, 50.0)?),
            p99: round_3(nearest_rank(&sorted, 99.0)?),
        })
    }
}

/// The median and the 99th percentile of a measure, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
}

/// The `p`th percentile of `sorted` by the nearest-rank method: the smallest sample with at
/// least `p` percent of the samples at or below it.
pub fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// `value` to three decimals: figures are not measured more finely than that.
pub fn round_3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// The median of `values` (the lower middle one for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    nearest_rank(&sorted, 50.0)
}

/// How peak memory is measured, said in the report.
pub const RSS_METHOD: &str = "process peak RSS (VmHWM of /proc/self/status) during the engine's \
     batches: the high-water mark is reset to the current RSS (writing 5 to \
     /proc/self/clear_refs) before each batch and read after it; it includes what the process \
     holds for every engine";

/// The method when the high-water mark cannot be reset on this system.
pub const RSS_METHOD_NO_RESET: &str = "process peak RSS (VmHWM of /proc/self/status) since the \
     process started: /proc/self/clear_refs could not reset it, so engines are not told apart";

/// Resets the process's peak RSS to its current RSS. Returns whether it could.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", b"5").is_ok()
}

/// The process's peak RSS in bytes, when the system tells it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_kib(&status, "VmHWM:").map(|kib| kib * 1024)
}

/// A `Name:   1234 kB` field of a `/proc` status file, in KiB.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_picks_a_sample() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&sorted, 50.0), Some(50.0));
        assert_eq!(nearest_rank(&sorted, 99.0), Some(99.0));
        assert_eq!(nearest_rank(&[7.0], 99.0), Some(7.0));
        assert_eq!(nearest_rank(&[], 50.0), None);
    }

    #[test]
    fn percentiles_ignore_the_order_of_samples() {
        let mut samples = Samples::default();
        for micros in [30, 10, 20] {
            samples.push(Duration::from_micros(micros));
        }
        let p = samples.percentiles().unwrap();
        assert!(
            (p.p50 - 20.0).abs() < 1e-9 && (p.p99 - 30.0).abs() < 1e-9,
            "{p:?}"
        );
        assert!(Samples::default().percentiles().is_none());
    }

    #[test]
    fn the_median_of_an_even_count_is_the_lower_middle() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.0));
    }

    #[test]
    fn status_fields_are_read_in_kibibytes() {
        let status = "Name:\thako\nVmHWM:\t   20480 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(status_kib(status, "VmHWM:"), Some(20480));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }
}
