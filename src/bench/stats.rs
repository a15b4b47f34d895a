//! The statistics of `hako bench`: timing samples, their percentiles (nearest rank), medians,
//! the process's peak resident set size, and its proportional set size (PSS) sampled on a
//! thread of its own. It times nothing itself and knows no engine.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// How peak PSS is measured, said in the report.
pub const PSS_METHOD: &str = "process peak PSS (Pss of /proc/self/smaps_rollup) while the \
     engine's --threads batches run: sampled by a thread of its own every 2 ms or ten times as \
     long as its last read took, whichever is longer, and once as the calls end, the largest \
     sample kept; pages shared with other processes (libraries, the page cache of mapped \
     artifact files) count a share each, so it is what this process adds to the machine's \
     memory";

/// The shortest wait between two samples of the PSS of a running batch.
pub const PSS_INTERVAL: Duration = Duration::from_millis(2);

/// The process's proportional set size in bytes, when the system tells it.
pub fn pss_bytes() -> Option<u64> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    status_kib(&rollup, "Pss:").map(|kib| kib * 1024)
}

/// Samples the process's PSS until `stop` is set, then once more; returns the largest sample.
/// Meant to run on a thread of its own beside the work it watches; the thread that sets `stop`
/// unparks it so that it ends at once.
///
/// Reading `smaps_rollup` walks every mapping of the process under the kernel's lock of its
/// address space, which the watched threads take too (to map and unmap memory), and with the
/// engines' memory reservations one read takes about a millisecond. So the sampler waits ten
/// times as long as its last read took (at least [`PSS_INTERVAL`]), which keeps it to a tenth
/// of a core, and takes no sample as the work starts, which would slow a short batch the most:
/// a batch shorter than one wait is sampled once, as it ends.
pub fn peak_pss_until(stop: &AtomicBool) -> Option<u64> {
    let mut peak = None;
    let mut wait = PSS_INTERVAL;
    loop {
        std::thread::park_timeout(wait);
        let stopping = stop.load(Ordering::Acquire);
        let started = std::time::Instant::now();
        peak = peak.max(pss_bytes());
        wait = PSS_INTERVAL.max(started.elapsed() * 10);
        if stopping {
            return peak;
        }
    }
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

    #[test]
    fn pss_is_the_pss_line_not_its_breakdown() {
        let rollup = "Rss:  1756 kB\nPss_Anon:  116 kB\nPss:  258 kB\nPss_File:  142 kB\n";
        assert_eq!(status_kib(rollup, "Pss:"), Some(258));
    }

    #[test]
    fn the_pss_sampler_stops_when_told_and_keeps_a_sample() {
        let stop = AtomicBool::new(false);
        let peak = std::thread::scope(|scope| {
            let sampler = scope.spawn(|| peak_pss_until(&stop));
            stop.store(true, Ordering::Release);
            sampler.thread().unpark();
            sampler.join().unwrap()
        });
        // Linux tells the PSS; elsewhere there is nothing to sample.
        assert_eq!(peak.is_some(), pss_bytes().is_some());
        assert!(peak.is_none_or(|bytes| bytes > 0));
    }
}
