//! The hostile-guest fuzzer: modules aimed at the host's resources (`generate`), each checked
//! as an upload checks it and then, when accepted, called in this process on every engine
//! configuration of the build (wasmer's singlepass, cranelift and, when built, LLVM; wasmtime)
//! with a 16 MiB memory cap and a 50 ms time limit. For every call it asserts:
//!
//! - the process lives (a module that ends it is left at [`last_module`] for `hako run`);
//! - the call ends with a result or a crash kind, never a host error, within the limit plus
//!   [`GRACE`] (an overrun is timed twice more, and only one that overruns every time fails:
//!   the machine may be busy, a host call that runs on is not); a call that has not ended
//!   after [`HANG`] is a hang, and ends the run at once with the module kept and every
//!   thread's stack printed ([`Watch`]), as failed;
//! - the process's peak resident set grows during the call by less than the cap plus
//!   [`OVERHEAD`], what the host may hold beside a guest's memory and tables;
//! - the files the call left in its volume take at most [`WRITE_BUDGET`] of the disk (blocks
//!   counted, so that holes a write leaves count too), plus [`NODE_SLACK`] a file.
//!
//! Every other call of a module runs on an instance made ahead of it, and is followed by one
//! more made and dropped unrun, as `hako serve` makes them; both are inside the timing and the
//! resident-set window.
//!
//! The seed corpus (`corpus/*.wat`, each with its own cap on its first line) runs first: the
//! two modules that once ended or stalled `hako serve` (a `table.grow` of 0xF0000000 elements,
//! a loop of `random_get` over 1 GiB). Then modules are drawn from a pseudo-random stream for
//! `HAKO_HOSTILE_SECONDS` (default 60); `HAKO_HOSTILE_SEED` repeats a run (the seed is
//! printed). Failures are written beside [`last_module`] and listed; the run then fails.
//!
//! A test binary of its own (`harness = false`), so that nothing else runs in the process
//! whose memory it measures. It answers `--list` as libtest does, for `cargo nextest`.

// The configurations to fuzz: every one of the build, or those HAKO_TEST_ENGINES names.
#[path = "../suite/support/configs.rs"]
mod configs;
mod generate;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::Unstructured;
use hako::call::{
    self, CallOutcome, CallStats, Limits, Mounts, Network, ReadyInstance, ToolRequest, VolumeTmp,
};
use hako::engines::{self, EngineConfig};
use hako::http::{NoBroker, PackagePolicy};
use hako_engine_api::Module;

/// The time limit of every call.
const LIMIT: Duration = Duration::from_millis(50);

/// How far past its limit a call may end.
const GRACE: Duration = Duration::from_millis(100);

/// How long a call may go on before the run is stopped as hung: a deadlock in the host would
/// otherwise hold the test (and CI) until something kills it.
const HANG: Duration = Duration::from_secs(20);

/// The memory cap of the drawn modules' calls.
const CAP_MIB: u64 = 16;

/// What the host may hold during a call beside the guest's memory and tables (which the cap
/// bounds): the line buffers (stdout up to its 1 MiB limit, the request line), an HTTP
/// request the guest hands the broker (at most 8 MiB, parsed), a file body read for it (here:
/// files of the call's volume, within its write budget), a directory's listing, the call's
/// threads' stacks and the allocator's slack. 48 MiB.
const OVERHEAD: u64 = 48 << 20;

/// The write budget of every call: files it writes cost the disk this much at most.
const WRITE_BUDGET: u64 = 16 << 20;

/// What a file may take on disk beside the bytes the budget counts: its last, partly written
/// blocks.
const NODE_SLACK: u64 = 8 << 10;

const NAME: &str = "hostile_guests";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--list") {
        if !args.iter().any(|arg| arg == "--ignored") {
            println!("{NAME}: test");
        }
        return ExitCode::SUCCESS;
    }
    if let Some(filter) = args.iter().find(|arg| !arg.starts_with('-')) {
        if !NAME.contains(filter.as_str()) {
            return ExitCode::SUCCESS;
        }
    }
    let seconds = std::env::var("HAKO_HOSTILE_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(60);
    let seed = std::env::var("HAKO_HOSTILE_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos() as u64)
        });
    let mut fuzzer = Fuzzer::new();
    Watch::start();
    println!(
        "{NAME}: seed {seed}, {seconds} s, on {}; a module that ends this process is left at {}",
        fuzzer
            .subjects
            .iter()
            .map(|subject| subject.config.name())
            .collect::<Vec<_>>()
            .join(", "),
        last_module().display()
    );
    for (name, wasm, cap_mib) in corpus() {
        let seen = fuzzer.outcomes.clone();
        fuzzer.run_module(&name, &wasm, cap_mib);
        let new: Vec<String> = fuzzer
            .outcomes
            .iter()
            .filter_map(|(outcome, count)| {
                let more = count - seen.get(outcome).copied().unwrap_or(0);
                (more > 0).then(|| format!("{outcome} {more}"))
            })
            .collect();
        println!("{NAME}: seed {name} ({cap_mib} MiB): {}", new.join(", "));
    }
    let started = Instant::now();
    let mut state = seed;
    while started.elapsed() < Duration::from_secs(seconds) {
        let bytes = noise(&mut state, 4096);
        let Ok(wasm) = generate::module(&mut Unstructured::new(&bytes)) else {
            continue;
        };
        fuzzer.drawn += 1;
        fuzzer.run_module("drawn", &wasm, CAP_MIB);
    }
    fuzzer.report(started.elapsed())
}

/// The watch over the call under way: a thread that ends the process, saying which call hung
/// and keeping its module, once one has run for [`HANG`].
struct Watch;

static WATCHED: std::sync::Mutex<Option<(Instant, String)>> = std::sync::Mutex::new(None);

impl Watch {
    fn start() {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_millis(500));
            let watched = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((since, call)) = watched.as_ref() {
                if since.elapsed() > HANG {
                    Watch::hung(call);
                }
            }
        });
    }

    /// Keeps the module, prints every thread's stack (gdb, when the machine has it), and ends
    /// the run as failed.
    fn hung(call: &str) -> ! {
        let kept = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hostile-guests-hang.wasm");
        let _ = std::fs::copy(last_module(), &kept);
        eprintln!(
            "{NAME}: {call}: the call has not ended after {HANG:?}, against a limit of \
             {LIMIT:?}: a hang (module: {})",
            kept.display()
        );
        // SAFETY: prctl(PR_SET_PTRACER) takes plain integers and changes only who may trace
        // this process: gdb, started below, where Yama restricts tracing to ancestors.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        let stacks = std::process::Command::new("gdb")
            .args(["-p", &std::process::id().to_string(), "-batch"])
            .args(["-ex", "thread apply all bt 30"])
            .output()
            .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
            .unwrap_or_default();
        for line in stacks
            .lines()
            .filter(|l| l.starts_with('#') || l.starts_with("Thread"))
        {
            eprintln!("{NAME}:   {line}");
        }
        eprintln!("{NAME}: FAILED: {call}: a hang");
        std::process::exit(1);
    }

    fn call(call: String) {
        *WATCHED.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), call));
    }

    fn ended() {
        *WATCHED.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Where the module being run is written first: the one to run again when a run ended the
/// process.
fn last_module() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hostile-guests-last.wasm")
}

/// The seed corpus: `(file name, module, cap in MiB)`; a seed's first line says its cap as
/// `;; memory_mib N`.
fn corpus() -> Vec<(String, Vec<u8>, u64)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile_guests/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("the seed corpus {}: {err}", dir.display()))
        .map(|entry| entry.expect("the corpus lists").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a seed reads");
            let cap = text
                .lines()
                .next()
                .and_then(|line| line.strip_prefix(";; memory_mib "))
                .and_then(|mib| mib.trim().parse().ok())
                .unwrap_or(CAP_MIB);
            let wasm = wat::parse_str(&text)
                .unwrap_or_else(|err| panic!("the seed {} assembles: {err}", path.display()));
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, wasm, cap)
        })
        .collect()
}

/// A stream of pseudo-random bytes (splitmix64) from `state`, which it advances.
fn noise(state: &mut u64, len: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        bytes.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// An engine configuration the modules run on.
struct Subject {
    config: EngineConfig,
    runs: u64,
    longest: Duration,
    largest_growth: u64,
}

/// What the run found.
struct Fuzzer {
    subjects: Vec<Subject>,
    drawn: u64,
    refused: u64,
    compile_errors: u64,
    /// Outcomes by name (`answered`, or the crash kind), over every run.
    outcomes: std::collections::BTreeMap<String, u64>,
    failures: Vec<String>,
    volume: tempfile::TempDir,
    /// Calls that left files in their volume, and the most disk one call's files took.
    wrote_files: u64,
    largest_on_disk: u64,
}

impl Fuzzer {
    fn new() -> Fuzzer {
        // Compiles with LLVM in this process, where the `hako` command starts its worker.
        hako_engine_llvm::link();
        let subjects = configs::test_configs()
            .into_iter()
            .filter(|config| config.compiles_here())
            .map(|config| Subject {
                config,
                runs: 0,
                longest: Duration::ZERO,
                largest_growth: 0,
            })
            .collect();
        Fuzzer {
            subjects,
            drawn: 0,
            refused: 0,
            compile_errors: 0,
            outcomes: Default::default(),
            failures: Vec::new(),
            volume: scratch(),
            wrote_files: 0,
            largest_on_disk: 0,
        }
    }

    /// Checks `wasm` and runs it on every subject.
    fn run_module(&mut self, name: &str, wasm: &[u8], cap_mib: u64) {
        let Ok(facts) = hako::package::check_module(wasm) else {
            self.refused += 1;
            return;
        };
        std::fs::write(last_module(), wasm).expect("the module is written first");
        for index in 0..self.subjects.len() {
            let (config, _) =
                engines::effective_config(self.subjects[index].config, facts.uses_simd);
            let module = match hako::compile::compile_here(config, None, wasm) {
                Ok(module) => module,
                Err(err) => {
                    // A compiler's own limit or fault, not a bound of the host: kept and said,
                    // since an upload with that compiler would be refused for it (a compiler
                    // that panicked: `compile.crash`, and this process lives on).
                    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
                        "hostile-guests-compile-error-{}.wasm",
                        self.compile_errors
                    ));
                    let _ = std::fs::write(&path, wasm);
                    println!(
                        "{NAME}: {name} does not compile on {config}{}: {} ({})",
                        err.rule()
                            .map(|rule| format!(" ({rule})"))
                            .unwrap_or_default(),
                        hako::error_chain(&err),
                        path.display()
                    );
                    self.compile_errors += 1;
                    continue;
                }
            };
            self.run_on(index, name, wasm, &module, cap_mib);
        }
    }

    /// One call of `module` on subject `index`, timed again when it overran.
    fn run_on(
        &mut self,
        index: usize,
        name: &str,
        wasm: &[u8],
        module: &Arc<dyn Module>,
        cap_mib: u64,
    ) {
        let config = self.subjects[index].config;
        let mut attempt = 0;
        loop {
            attempt += 1;
            reset_peak();
            let before = resident("VmRSS");
            let started = Instant::now();
            Watch::call(format!("{name} on {config}"));
            let volume = tempfile::tempdir_in(self.volume.path()).expect("a volume folder");
            let request = self.request(cap_mib, volume.path());
            let limits = request.limits;
            // Every other call runs as `hako serve` runs them: on an instance made ahead of
            // it, then one more made for a next call that never comes, dropped unrun.
            let made_ahead = self.subjects[index].runs % 2 == 1;
            let ready = made_ahead.then(|| ReadyInstance::prepare(module, limits));
            let outcome =
                call::call_tool_answer_first(module, ready, request, CallStats::default()).map(
                    |(outcome, teardown)| {
                        teardown.finish();
                        outcome
                    },
                );
            if made_ahead {
                drop(ReadyInstance::prepare(module, limits));
            }
            Watch::ended();
            let took = started.elapsed();
            let (files, on_disk) = disk_use(volume.path());
            drop(volume);
            if files > 0 {
                self.wrote_files += 1;
                self.largest_on_disk = self.largest_on_disk.max(on_disk);
            }
            let growth = resident("VmHWM").saturating_sub(before);
            let subject = &mut self.subjects[index];
            subject.runs += 1;
            subject.longest = subject.longest.max(took);
            subject.largest_growth = subject.largest_growth.max(growth);
            let outcome = match outcome {
                Ok(CallOutcome::Answered { .. }) => "answered".to_string(),
                Ok(CallOutcome::Crashed { crash, .. }) => crash.kind.to_string(),
                Err(err) => {
                    self.fail(name, wasm, config, &format!("a host error: {err}"));
                    return;
                }
            };
            if growth > (cap_mib << 20) + OVERHEAD {
                let message = format!(
                    "the peak resident set grew by {} MiB in one call ({outcome}), past the cap \
                     of {cap_mib} MiB and {} MiB beside it",
                    growth >> 20,
                    OVERHEAD >> 20
                );
                self.fail(name, wasm, config, &message);
                return;
            }
            if on_disk > WRITE_BUDGET + files * NODE_SLACK {
                let message = format!(
                    "the call ({outcome}) left {files} file(s) taking {} KiB of the disk, past \
                     its write budget of {} KiB",
                    on_disk >> 10,
                    WRITE_BUDGET >> 10
                );
                self.fail(name, wasm, config, &message);
                return;
            }
            if took > LIMIT + GRACE {
                if attempt < 3 {
                    continue;
                }
                let message = format!(
                    "the call ({outcome}) ended after {took:?} three times over, against a \
                     limit of {LIMIT:?}"
                );
                self.fail(name, wasm, config, &message);
                return;
            }
            *self.outcomes.entry(outcome).or_default() += 1;
            return;
        }
    }

    /// A call's request, whose `/volume/tmp` is `volume` (kept after the call, to be measured).
    fn request(&self, cap_mib: u64, volume: &Path) -> ToolRequest<'static> {
        let mut limits = Limits::CALL;
        limits.timeout = LIMIT;
        limits.max_memory_bytes = cap_mib << 20;
        limits.write_budget = WRITE_BUDGET;
        let mut mounts = Mounts::fresh(None);
        mounts.volume_tmp = VolumeTmp::Given(volume.to_path_buf());
        ToolRequest {
            program: "hostile",
            tool: "hostile",
            arguments: Arc::new(serde_json::json!({})),
            limits,
            mounts,
            network: Network {
                policy: Arc::new(PackagePolicy::default()),
                broker: Arc::new(NoBroker),
            },
            gate: None,
        }
    }

    fn fail(&mut self, name: &str, wasm: &[u8], config: EngineConfig, message: &str) {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "hostile-guests-failure-{}.wasm",
            self.failures.len()
        ));
        let _ = std::fs::write(&path, wasm);
        let line = format!("{name} on {config}: {message} (module: {})", path.display());
        eprintln!("{NAME}: FAILED: {line}");
        self.failures.push(line);
    }

    fn report(&self, took: Duration) -> ExitCode {
        let runs: u64 = self.subjects.iter().map(|subject| subject.runs).sum();
        println!(
            "{NAME}: {} modules drawn in {:.1} s, {} refused by the check, {} compile errors; \
             {runs} calls ({:.1}/s)",
            self.drawn,
            took.as_secs_f64(),
            self.refused,
            self.compile_errors,
            runs as f64 / took.as_secs_f64().max(1e-9),
        );
        for subject in &self.subjects {
            println!(
                "{NAME}: {}: {} calls, the longest {:?}, the largest peak growth {} KiB",
                subject.config,
                subject.runs,
                subject.longest,
                subject.largest_growth >> 10
            );
        }
        let outcomes: Vec<String> = self
            .outcomes
            .iter()
            .map(|(outcome, count)| format!("{outcome} {count}"))
            .collect();
        println!("{NAME}: outcomes: {}", outcomes.join(", "));
        println!(
            "{NAME}: {} calls left files in their volume, the most on disk {} KiB (budget {} KiB)",
            self.wrote_files,
            self.largest_on_disk >> 10,
            WRITE_BUDGET >> 10
        );
        if self.failures.is_empty() {
            println!("test result: ok. 1 passed; 0 failed");
            ExitCode::SUCCESS
        } else {
            for failure in &self.failures {
                println!("{NAME}: FAILED: {failure}");
            }
            println!("test result: FAILED. 0 passed; 1 failed");
            ExitCode::FAILURE
        }
    }
}

/// How many files there are under `dir`, and the bytes of the disk they take (their blocks).
fn disk_use(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut found = (0, 0);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(metadata) = entry.path().symlink_metadata() else {
            continue;
        };
        if metadata.is_dir() {
            let (files, bytes) = disk_use(&entry.path());
            found = (found.0 + files, found.1 + bytes);
        } else {
            found = (found.0 + 1, found.1 + metadata.blocks() * 512);
        }
    }
    found
}

/// A folder for the calls' volumes, on a memory file system when there is one.
fn scratch() -> tempfile::TempDir {
    let mut builder = tempfile::Builder::new();
    builder.prefix("hako-hostile-");
    match Path::new("/dev/shm") {
        shm if shm.is_dir() => builder.tempdir_in(shm),
        _ => builder.tempdir(),
    }
    .expect("a scratch folder")
}

/// Resets the process's peak resident set to what it holds now (`clear_refs` 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A size in bytes from `/proc/self/status` (`VmRSS`, `VmHWM`).
fn resident(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib << 10)
}
