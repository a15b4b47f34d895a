//! The measuring of `hako bench`, all in one process: per subject a few compiles (their
//! median), the artifact written and its size, then a warm-up whose answer must equal the
//! first subject's; then rounds, each running one batch of every subject in turn (the order
//! rotated every round), a batch being artifact loads, calls with the module in memory, calls
//! loading the artifact first, calls on an instance made ahead (hako's engines), calls back to
//! back with the module in memory (each timed), and calls from several threads at once (then
//! again, each thread making every call's instance just before it), with the peak RSS read
//! around it and the PSS sampled while the threads run. A crashed call or an answer unlike
//! the reference stops a subject's timing and is reported; it is never timed as if it had
//! answered.
//!
//! It does not print (progress goes through a callback) and does not shape output (`report`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use super::stats::{self, Percentiles, Samples};
use super::subject::{Ready, Subject, Workload};
use crate::protocol::CallResult;

/// How a run is shaped.
#[derive(Debug, Clone, Copy)]
pub struct RunShape {
    /// Samples of each latency per subject, spread over the rounds.
    pub iterations: usize,
    /// Threads calling at once for calls/s.
    pub threads: usize,
    /// Compiles per subject; the median is reported.
    pub compiles: usize,
    /// Calls of each kind per subject before timing starts.
    pub warmup: usize,
    /// Rounds the iterations are spread over.
    pub rounds: usize,
}

impl RunShape {
    /// A shape for `iterations` and `threads`: at most ten rounds, three compiles, a warm-up of
    /// a tenth of the iterations (at least two calls, at most fifty).
    pub fn new(iterations: usize, threads: usize) -> Self {
        let iterations = iterations.max(1);
        Self {
            iterations,
            threads: threads.max(1),
            compiles: 3,
            warmup: (iterations / 10).clamp(2, 50),
            rounds: iterations.min(10),
        }
    }
}

/// What was measured for one subject.
#[derive(Debug, Clone)]
pub struct Measured {
    pub engine: String,
    pub versions: Vec<(String, String)>,
    pub is_wasmtime: bool,
    /// One of hako's own wasmer configurations (not the wasmer-wasix baseline).
    pub is_wasmer: bool,
    pub notes: Vec<String>,
    pub compile_ms: Option<f64>,
    pub artifact_bytes: Option<u64>,
    pub load_us: Option<Percentiles>,
    pub call_in_memory_us: Option<Percentiles>,
    pub call_from_disk_us: Option<Percentiles>,
    /// Calls with the module in memory, each right after the one before on the same module:
    /// the calls that `calls_per_s` makes, one thread, each timed. `call_in_memory_us` comes
    /// instead right after an artifact load (and drop) and before a call that loads one, so it
    /// meets the caches (and, on wasmer, the memory slots) those left.
    pub call_back_to_back_us: Option<Percentiles>,
    /// Calls on an instance made ahead of them (`hako serve` makes one after each call), made
    /// before an artifact load and drop, so that the call meets the caches an in-memory call
    /// meets: the latency a caller sees when a ready instance waits. `None` for a baseline.
    pub call_ready_us: Option<Percentiles>,
    pub calls_per_s: Option<f64>,
    /// `calls_per_s` over the cores its threads could use (the fewer of threads and cores).
    pub calls_per_s_per_core: Option<f64>,
    /// Calls per second per core with each thread making every call's instance ahead of it,
    /// the instantiation counted: work made ahead is moved, not saved. `None` for a baseline.
    pub ready_calls_per_s_per_core: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub peak_pss_bytes: Option<u64>,
    /// The samples behind each latency.
    pub samples: usize,
    /// Why the subject's figures are missing or cut short: a crash, another answer.
    pub failure: Option<String>,
}

/// What a run found.
pub struct RunResults {
    pub measured: Vec<Measured>,
    /// The answer every subject had to give (the first subject's), as JSON.
    pub reference: Option<serde_json::Value>,
    /// How peak RSS was measured.
    pub rss_method: &'static str,
    /// How peak PSS was measured.
    pub pss_method: &'static str,
}

/// Calls made by several threads at once, and the wall time they took, over every batch.
#[derive(Default)]
struct Throughput {
    calls: u64,
    time: Duration,
}

impl Throughput {
    fn add(&mut self, batch: &Threaded) {
        self.calls += batch.calls;
        self.time += batch.elapsed;
    }

    fn per_core(&self, cores: usize) -> Option<f64> {
        (self.calls > 0 && !self.time.is_zero())
            .then(|| self.calls as f64 / self.time.as_secs_f64() / cores.max(1) as f64)
    }
}

struct State {
    subject: Subject,
    ready: Option<Ready>,
    compile_ms: Vec<f64>,
    artifact_bytes: Option<u64>,
    load: Samples,
    in_memory: Samples,
    from_disk: Samples,
    back_to_back: Samples,
    made_ahead: Samples,
    threaded: Throughput,
    threaded_ready: Throughput,
    cores: usize,
    peak_rss: Option<u64>,
    peak_pss: Option<u64>,
    failure: Option<String>,
}

impl State {
    fn fail(&mut self, what: &str, message: String) {
        if self.failure.is_none() {
            self.failure = Some(format!("{what}: {message}"));
        }
        self.ready = None;
    }
}

/// Checks an answer against the reference (set by the first answer of the run).
fn check(
    answer: Result<CallResult, String>,
    reference: &mut Option<CallResult>,
) -> Result<(), String> {
    let answer = answer?;
    match reference {
        None => {
            *reference = Some(answer);
            Ok(())
        }
        Some(expected) if *expected == answer => Ok(()),
        Some(expected) => Err(format!(
            "it answered {} where the first engine answered {}",
            json(&answer),
            json(expected)
        )),
    }
}

fn json(result: &CallResult) -> String {
    serde_json::to_string(result).unwrap_or_else(|err| format!("<{err}>"))
}

/// Runs the benchmark of `subjects` on `workload`; `progress` is told what is happening.
pub fn run(
    subjects: Vec<Subject>,
    workload: &Workload,
    shape: RunShape,
    progress: &mut dyn FnMut(&str),
) -> RunResults {
    let mut reference: Option<CallResult> = None;
    let mut states: Vec<State> = subjects
        .into_iter()
        .map(|subject| State {
            subject,
            ready: None,
            compile_ms: Vec::new(),
            artifact_bytes: None,
            load: Samples::default(),
            in_memory: Samples::default(),
            from_disk: Samples::default(),
            back_to_back: Samples::default(),
            made_ahead: Samples::default(),
            threaded: Throughput::default(),
            threaded_ready: Throughput::default(),
            cores: shape
                .threads
                .min(std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)),
            peak_rss: None,
            peak_pss: None,
            failure: None,
        })
        .collect();

    for state in &mut states {
        progress(&format!(
            "{}: {} compiles, artifact, warm-up",
            state.subject.name(),
            shape.compiles
        ));
        prepare(state, workload, shape, &mut reference);
    }

    let can_reset = stats::reset_peak_rss();
    for round in 0..shape.rounds {
        let batch =
            shape.iterations / shape.rounds + usize::from(round < shape.iterations % shape.rounds);
        let count = states.len();
        let mut names = Vec::new();
        for turn in 0..count {
            let state = &mut states[(round + turn) % count];
            if state.ready.is_none() {
                continue;
            }
            names.push(state.subject.name().to_string());
            if can_reset {
                stats::reset_peak_rss();
            }
            run_batch(state, workload, batch, shape.threads, &mut reference);
            let peak = stats::peak_rss_bytes();
            state.peak_rss = state.peak_rss.max(peak);
        }
        progress(&format!(
            "round {}/{}: {} samples each of {}",
            round + 1,
            shape.rounds,
            batch,
            if names.is_empty() {
                "no engine".to_string()
            } else {
                names.join(", ")
            }
        ));
    }

    let measured = states.into_iter().map(finish).collect();
    RunResults {
        measured,
        reference: reference
            .as_ref()
            .map(|answer| serde_json::to_value(answer).unwrap_or(serde_json::Value::Null)),
        rss_method: if can_reset {
            stats::RSS_METHOD
        } else {
            stats::RSS_METHOD_NO_RESET
        },
        pss_method: stats::PSS_METHOD,
    }
}

/// Compiles (keeping the last module), writes the artifact, loads it, and warms up.
fn prepare(
    state: &mut State,
    workload: &Workload,
    shape: RunShape,
    reference: &mut Option<CallResult>,
) {
    for _ in 0..shape.compiles {
        let started = Instant::now();
        match state.subject.compile(&workload.wasm) {
            Ok(ready) => {
                state.compile_ms.push(started.elapsed().as_secs_f64() * 1e3);
                state.ready = Some(ready);
            }
            Err(err) => return state.fail("compiling", err),
        }
    }
    let Some(ready) = state.ready.clone() else {
        return;
    };
    match state.subject.write_artifact(&ready) {
        Ok(bytes) => state.artifact_bytes = Some(bytes),
        Err(err) => return state.fail("writing the artifact", err),
    }
    for _ in 0..shape.warmup {
        if let Err(err) = check(state.subject.call(&ready, workload), reference) {
            return state.fail("a call with the module in memory", err);
        }
        let loaded = match state.subject.load() {
            Ok(loaded) => loaded,
            Err(err) => return state.fail("loading the artifact", err),
        };
        if let Err(err) = check(state.subject.call(&loaded, workload), reference) {
            return state.fail("a call with the artifact loaded from disk", err);
        }
    }
}

/// One subject's batch of a round.
fn run_batch(
    state: &mut State,
    workload: &Workload,
    batch: usize,
    threads: usize,
    reference: &mut Option<CallResult>,
) {
    let Some(ready) = state.ready.clone() else {
        return;
    };
    for _ in 0..batch {
        let started = Instant::now();
        let loaded = state.subject.load();
        let elapsed = started.elapsed();
        match loaded {
            Ok(loaded) => drop(std::hint::black_box(loaded)),
            Err(err) => return state.fail("loading the artifact", err),
        }
        state.load.push(elapsed);

        match timed_call(&state.subject, &ready, workload, reference) {
            Ok(elapsed) => state.in_memory.push(elapsed),
            Err(err) => return state.fail("a call with the module in memory", err),
        }

        let started = Instant::now();
        let answer = state
            .subject
            .load()
            .and_then(|loaded| state.subject.call(&loaded, workload));
        let elapsed = started.elapsed();
        if let Err(err) = check(answer, reference) {
            return state.fail("a call with the artifact loaded from disk", err);
        }
        state.from_disk.push(elapsed);

        if let Some(instance) = state.subject.prepare_call(&ready) {
            // The same work before it as before an in-memory call: an artifact loaded and
            // dropped.
            match state.subject.load() {
                Ok(loaded) => drop(std::hint::black_box(loaded)),
                Err(err) => return state.fail("loading the artifact", err),
            }
            let started = Instant::now();
            let answer = state.subject.call_prepared(&ready, instance, workload);
            let elapsed = started.elapsed();
            if let Err(err) = check(answer, reference) {
                return state.fail("a call on an instance made ahead", err);
            }
            state.made_ahead.push(elapsed);
        }
    }
    for _ in 0..batch {
        match timed_call(&state.subject, &ready, workload, reference) {
            Ok(elapsed) => state.back_to_back.push(elapsed),
            Err(err) => return state.fail("a call back to back with the module in memory", err),
        }
    }

    let subject = &state.subject;
    let plain = || subject.call(&ready, workload);
    match threaded(&plain, threads, reference) {
        Ok(batch) => {
            state.threaded.add(&batch);
            state.peak_pss = state.peak_pss.max(batch.peak_pss);
        }
        Err(err) => return state.fail("a call from several threads", err),
    }
    if !subject.makes_instances_ahead() {
        return;
    }
    let made_ahead = || {
        let instance = subject
            .prepare_call(&ready)
            .ok_or("no instance could be made ahead")?;
        subject.call_prepared(&ready, instance, workload)
    };
    match threaded(&made_ahead, threads, reference) {
        Ok(batch) => state.threaded_ready.add(&batch),
        Err(err) => state.fail(
            "a call on an instance made ahead, from several threads",
            err,
        ),
    }
}

/// How long one call of the module in memory took, once its answer is checked.
fn timed_call(
    subject: &Subject,
    ready: &Ready,
    workload: &Workload,
    reference: &mut Option<CallResult>,
) -> Result<Duration, String> {
    let started = Instant::now();
    let answer = subject.call(ready, workload);
    let elapsed = started.elapsed();
    check(answer, reference).map(|()| elapsed)
}

/// What a batch of calls from several threads at once did.
struct Threaded {
    calls: u64,
    /// The wall time from the start of the calls to the end of the last.
    elapsed: Duration,
    /// The process's largest PSS sampled meanwhile.
    peak_pss: Option<u64>,
}

/// How long each thread of a batch of calls from several threads keeps calling: long enough
/// that starting and joining the threads, and the scheduler's moods, weigh little (a batch of a
/// fixed few calls took a millisecond, and its calls/s moved by half from run to run).
const THREADED_WINDOW: Duration = Duration::from_millis(50);

/// `threads` threads each making calls (`call`, with the module in memory) until
/// [`THREADED_WINDOW`] has passed since they started together (at least one each), while
/// another thread samples the process's PSS.
fn threaded(
    call: &(dyn Fn() -> Result<CallResult, String> + Sync),
    threads: usize,
    reference: &Option<CallResult>,
) -> Result<Threaded, String> {
    // The callers, the sampler and this thread start together.
    let barrier = Arc::new(Barrier::new(threads + 2));
    let stop_sampling = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = {
            let barrier = Arc::clone(&barrier);
            let stop = &stop_sampling;
            scope.spawn(move || {
                barrier.wait();
                stats::peak_pss_until(stop)
            })
        };
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                scope.spawn(move || -> Result<u64, String> {
                    barrier.wait();
                    let started = Instant::now();
                    let mut calls = 0;
                    loop {
                        let answer = call()?;
                        if let Some(expected) = reference {
                            if *expected != answer {
                                return Err(format!("it answered {}", json(&answer)));
                            }
                        }
                        calls += 1;
                        if started.elapsed() >= THREADED_WINDOW {
                            return Ok(calls);
                        }
                    }
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        let mut outcome = Ok(0);
        for worker in workers {
            let joined = worker
                .join()
                .unwrap_or_else(|_| Err("a calling thread panicked".into()));
            outcome = outcome.and_then(|sum| joined.map(|calls| sum + calls));
        }
        let elapsed = started.elapsed();
        stop_sampling.store(true, Ordering::Release);
        sampler.thread().unpark();
        let peak_pss = sampler.join().unwrap_or(None);
        outcome.map(|calls| Threaded {
            calls,
            elapsed,
            peak_pss,
        })
    })
}

fn finish(state: State) -> Measured {
    let calls_per_s = state.threaded.per_core(1).map(stats::round_3);
    Measured {
        engine: state.subject.name().to_string(),
        versions: state.subject.versions(),
        is_wasmtime: state.subject.is_wasmtime(),
        is_wasmer: state.subject.is_wasmer(),
        notes: state.subject.notes.clone(),
        compile_ms: stats::median(&state.compile_ms).map(stats::round_3),
        artifact_bytes: state.artifact_bytes,
        load_us: state.load.percentiles(),
        call_in_memory_us: state.in_memory.percentiles(),
        call_from_disk_us: state.from_disk.percentiles(),
        call_back_to_back_us: state.back_to_back.percentiles(),
        call_ready_us: state.made_ahead.percentiles(),
        calls_per_s,
        calls_per_s_per_core: state.threaded.per_core(state.cores).map(stats::round_3),
        ready_calls_per_s_per_core: state
            .threaded_ready
            .per_core(state.cores)
            .map(stats::round_3),
        peak_rss_bytes: state.peak_rss,
        peak_pss_bytes: state.peak_pss,
        samples: state.in_memory.len(),
        failure: state.failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ShownBlock;

    fn text(text: &str) -> CallResult {
        CallResult {
            content: vec![ShownBlock::Text { text: text.into() }],
            structured: None,
            is_error: false,
        }
    }

    #[test]
    fn the_first_answer_becomes_the_reference_and_others_must_equal_it() {
        let mut reference = None;
        assert!(check(Ok(text("hi")), &mut reference).is_ok());
        assert!(check(Ok(text("hi")), &mut reference).is_ok());
        let err = check(Ok(text("ho")), &mut reference).unwrap_err();
        assert!(err.contains("ho") && err.contains("hi"), "{err}");
        assert_eq!(
            check(Err("crashed (trap)".into()), &mut reference).unwrap_err(),
            "crashed (trap)"
        );
    }

    #[test]
    fn a_shape_spreads_iterations_over_at_most_ten_rounds() {
        let shape = RunShape::new(3, 0);
        assert_eq!((shape.rounds, shape.threads, shape.warmup), (3, 1, 2));
        let shape = RunShape::new(1000, 4);
        assert_eq!((shape.rounds, shape.warmup), (10, 50));
    }
}
