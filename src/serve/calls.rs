//! Calls as the server makes them: the packages it serves (kept in memory, checked against
//! the store's current version on each use, so an upload is seen at once), and one tool call
//! taken from request to outcome — admitted within the bound on calls in flight
//! ([`Admission`]) or refused at once, run on the front end's thread that read it when its
//! package's calls have been quick ([`SLICE`]: moved to a call thread at its first wait or past
//! its slice, and run again from its start there, within what is left of its time limit) or
//! else given a thread of its own ([`CallThreads`]), run while it holds one of its package's
//! run permits ([`RunPermits`], given up while a host call waits), its module loaded through
//! the one shared [`ModuleCache`], run with the package's network policy and the one broker of
//! the server, counted in [`Metrics`]; after its answer, its thread makes an instance of the
//! same module for its next call (`--ready-instances`).
//!
//! It speaks neither HTTP nor JSON-RPC: the front ends ([`super::api`], [`super::mcp`]) turn
//! what it answers into their own replies.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hako_engine_api::Module;

use super::access::{Origin, Record};
use super::admission::{Admission, Admitted, Full};
use super::current::{Changes, CurrentWatch};
use super::metrics::{Metrics, PackageCounters};
use super::permits::{CallPermit, PackageLine, Place, RunPermits, Start};
use super::threads::{self, CallThreads, Job};
use crate::call::{
    self, CallOutcome, CallStats, Crash, CrashKind, Limits, Mounts, Network, ReadyInstance,
    Teardown, ToolRequest, VolumeTmp,
};
use crate::engines::EngineConfig;
use crate::http::{Broker, BrokerError, HyperBroker, PackagePolicy, Policy, PolicyError};
use crate::package::manifest::is_valid_name;
use crate::sandbox::RunGate;
use crate::store::{ModuleBytes, ModuleCache, ModuleSpec, Store, StoreError, StoredPackage};

/// The broker every call of this server sends `subako_http` requests through, with the
/// policy's extra CA files: the one place where it is chosen. One broker serves every call, so
/// its connection pool is shared across them.
pub fn broker(policy: &Policy) -> Result<Arc<dyn Broker>, BrokerError> {
    Ok(Arc::new(HyperBroker::new(&policy.tls)?))
}

/// A package as the server serves it: the stored version, its module's file (read only to
/// compile, when no artifact serves the engine), its assets folder and its policy.
pub struct Served {
    pub stored: StoredPackage,
    module: PathBuf,
    /// Looked for once: a stored version never changes (a call used to `stat` it).
    assets: Option<PathBuf>,
    policy: Arc<PackagePolicy>,
    /// The package's run permits and its counters, looked up by name once per version rather
    /// than at each call.
    line: PackageLine,
    counters: Arc<PackageCounters>,
    /// Whether its calls run on the front end's thread.
    inline: InlineCredit,
}

impl Served {
    pub fn name(&self) -> &str {
        &self.stored.record.name
    }

    /// Whether the package offers a tool of that name.
    pub fn offers(&self, tool: &str) -> bool {
        self.stored.tools.iter().any(|t| t.name == tool)
    }
}

/// Why a call (or a lookup) did not run.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("no package named {0:?} is served here")]
    UnknownPackage(String),
    #[error("{package} offers no tool {tool:?}")]
    UnknownTool { package: String, tool: String },
    #[error("the server is at its bound of calls in flight")]
    Busy,
    #[error(
        "{package} holds its share of the calls in flight ({share}, hako serve \
         --max-calls-per-package); the rest stay open to other packages"
    )]
    PackageBusy { package: String, share: u64 },
    #[error("the server is shutting down")]
    Closing,
    #[error("the package's network policy: {0}")]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the call failed in the host: {0}")]
    Host(String),
}

/// The packages served so far, and whether each is known to be what its `current` says.
#[derive(Default)]
struct ServedTable {
    entries: HashMap<String, TableEntry>,
    watch: CurrentWatch,
    /// How many times a look at the watch found changes: a read of the store made without
    /// the lock is known fresh only when this did not move meanwhile.
    epoch: u64,
}

impl ServedTable {
    /// Takes in what the kernel said changed since the last look.
    fn drain(&mut self) {
        match self.watch.changes() {
            Changes::All => {
                self.epoch += 1;
                self.entries
                    .values_mut()
                    .for_each(|entry| entry.fresh = false);
            }
            Changes::Some(names) => {
                if !names.is_empty() {
                    self.epoch += 1;
                }
                for changed in names {
                    if let Some(entry) = self.entries.get_mut(&changed) {
                        entry.fresh = false;
                    }
                }
            }
        }
    }
}

struct TableEntry {
    served: Arc<Served>,
    /// No change of the package's `current` since it was read ([`CurrentWatch`]).
    fresh: bool,
}

/// How the server runs calls: the bound on calls in flight, their threads, and each
/// package's run permits.
pub struct Execution {
    pub admission: Admission,
    pub threads: Arc<CallThreads>,
    pub permits: RunPermits,
}

/// The server's calls: store, served packages, module cache, how calls run, and counters.
pub struct Calls {
    store: Store,
    policy: Policy,
    engine: EngineConfig,
    served: Mutex<ServedTable>,
    modules: ModuleCache,
    execution: Execution,
    broker: Arc<dyn Broker>,
    /// Where each call's `/volume/tmp` is made.
    volume_tmp: VolumeTmp,
    /// The most instances made ahead of their calls held at once (`--ready-instances`).
    ready_instances: u64,
    /// Whether quick calls run on the front end's thread (not `--no-inline`).
    inline: bool,
    /// Calls admitted so far: each call's number in its access record.
    numbered: AtomicU64,
    /// The most a caller may ask for.
    pub caps: LimitCaps,
    pub metrics: Metrics,
}

impl Calls {
    pub fn new(
        store: Store,
        policy: Policy,
        engine: EngineConfig,
        execution: Execution,
        module_cache_bytes: u64,
        broker: Arc<dyn Broker>,
        caps: LimitCaps,
    ) -> Self {
        // A call's `/volume/tmp` is made in the store's staging folder, where the server has
        // its lease already (taken at start).
        let volume_tmp = store.staging().map_or(VolumeTmp::Fresh, VolumeTmp::FreshIn);
        Self {
            volume_tmp,
            store,
            policy,
            engine,
            served: Mutex::default(),
            modules: ModuleCache::new(module_cache_bytes),
            metrics: Metrics::new(execution.permits.states()),
            execution,
            broker,
            ready_instances: 0,
            inline: false,
            numbered: AtomicU64::new(0),
            caps,
        }
    }

    /// These calls with instances made ahead: at most `max` held at once (none by default).
    pub fn with_ready_instances(mut self, max: usize) -> Self {
        self.ready_instances = max as u64;
        self
    }

    /// These calls, run on the front end's thread where their package's calls have been quick
    /// ([`SLICE`]) if `inline`.
    pub fn with_inline(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The admission's gauge in the Prometheus text form: what the bound on calls in flight
    /// counts (a call until its instance is given back, which may follow its answer).
    pub fn render_admission(&self) -> String {
        let admission = &self.execution.admission;
        format!(
            "# HELP hako_calls_held Calls holding a place of --max-calls (at most {}; one \
             package at most {}): admitted, and not yet let go of their instance.\n\
             # TYPE hako_calls_held gauge\n\
             hako_calls_held {}\n",
            admission.max(),
            admission.share(),
            admission.admitted()
        )
    }

    /// The loaded-module cache's gauges in the Prometheus text form: modules kept, and what
    /// they weigh together.
    pub fn render_module_cache(&self) -> String {
        format!(
            "# HELP hako_modules_loaded Modules loaded and kept in memory now (at most {}).\n\
             # TYPE hako_modules_loaded gauge\n\
             hako_modules_loaded {}\n\
             # HELP hako_module_cache_bytes What the modules kept weigh together: their \
             artifacts' sizes (at most --module-cache-mib, unless one module alone weighs more).\n\
             # TYPE hako_module_cache_bytes gauge\n\
             hako_module_cache_bytes {}\n",
            crate::store::MAX_CACHED_MODULES,
            self.modules.len(),
            self.modules.weight()
        )
    }

    pub fn execution(&self) -> &Execution {
        &self.execution
    }

    /// The package `name` as it is offered now. Reads its `current` only when the package is
    /// new here or the kernel said it may have changed ([`CurrentWatch`]), and the version's
    /// records only when the version changed. The reads run without the table's lock, so that
    /// reading one package's records never holds up a request for another.
    pub fn package(&self, name: &str) -> Result<Arc<Served>, CallError> {
        if !is_valid_name(name) {
            return Err(CallError::UnknownPackage(name.to_string()));
        }
        let (watched, epoch, held) = {
            let mut table = self.table();
            table.drain();
            if let Some(entry) = table.entries.get(name).filter(|entry| entry.fresh) {
                return Ok(Arc::clone(&entry.served));
            }
            // Watched before `current` is read, so that a change after the read is seen.
            let watched = table.watch.watch(name, &self.store.package_path(name));
            let held = table
                .entries
                .get(name)
                .map(|entry| Arc::clone(&entry.served));
            (watched, table.epoch, held)
        };
        let version = match self.store.current_version(name) {
            Ok(version) => version,
            Err(StoreError::UnknownPackage(_)) => {
                return Err(CallError::UnknownPackage(name.to_string()))
            }
            Err(err) => return Err(err.into()),
        };
        let served = match held.filter(|held| held.stored.record.version == version) {
            Some(held) => held,
            None => {
                let stored = self.store.get(name)?;
                let policy = Arc::new(self.policy.for_package(name, &[])?);
                Arc::new(Served {
                    assets: stored.assets(),
                    module: stored.module_path(),
                    stored,
                    policy,
                    line: self.execution.permits.line(name),
                    counters: self.metrics.package(name),
                    inline: InlineCredit::default(),
                })
            }
        };
        let mut table = self.table();
        table.drain();
        // Fresh only when no change at all was seen since the watch was set (one seen while
        // the store was read may be this package's, and another request may have drained it),
        // and what was read is the version of the pointer read (`get` may read a later one).
        let fresh = watched && table.epoch == epoch && served.stored.record.version == version;
        table.entries.insert(
            name.to_string(),
            TableEntry {
                served: Arc::clone(&served),
                fresh,
            },
        );
        Ok(served)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, ServedTable> {
        self.served.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a call of `tool` on `package` and runs it here, on the front end's thread (a
    /// quick package's call, given its permit and a slot at once: [`SLICE`]), or starts it on a
    /// thread of its own (at once, or when its package's line gives it a permit); or refuses it
    /// at once. The receiver yields the outcome once it has run.
    pub fn submit(
        self: &Arc<Self>,
        package: Arc<Served>,
        tool: String,
        arguments: serde_json::Value,
        limits: Limits,
        origin: Origin,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<CallOutcome, CallError>>, CallError> {
        // What the last call run on this thread left counts against the calls in flight.
        drop_left_here();
        if !package.offers(&tool) {
            return Err(CallError::UnknownTool {
                package: package.name().to_string(),
                tool,
            });
        }
        if self.execution.threads.is_closed() {
            return Err(CallError::Closing);
        }
        let admission = &self.execution.admission;
        let admitted = match admission.admit(&package.counters.in_flight) {
            Ok(admitted) => admitted,
            Err(full) => {
                self.metrics.rejected();
                return Err(match full {
                    Full::Server => CallError::Busy,
                    Full::Package => CallError::PackageBusy {
                        package: package.name().to_string(),
                        share: admission.share(),
                    },
                });
            }
        };
        let permit = self.execution.permits.for_call_in(&package.line);
        // Counted before it starts: its thread may finish it before `submit` returns.
        self.metrics.admitted();
        let number = self.numbered.fetch_add(1, Ordering::Relaxed) + 1;
        let (answer, receiver) = tokio::sync::oneshot::channel();
        let queued_at = Instant::now();
        let deadline = queued_at + limits.timeout;
        let inline = self.inline && package.inline.allows() && on_front_end();
        let pending = Pending {
            calls: Arc::clone(self),
            package,
            tool,
            arguments: Arc::new(arguments),
            limits,
            origin,
            number,
            permit: Arc::clone(&permit),
            queued_at,
        };
        let start: Start = Box::new(move |granted| {
            // Only the start `submit` makes itself runs here: a call started from its line
            // is started by the thread that gave a permit back, which must not run it.
            if granted && INLINE_HERE.with(|here| here.replace(false)) {
                pending.run_here(answer, admitted);
            } else {
                pending.dispatch(answer, admitted, granted, true);
            }
        });
        // A call that waits in line past its time limit is taken out at its deadline and
        // answered so (the permits' sweep).
        if let Place::Now(start) = permit.enter(start, deadline) {
            INLINE_HERE.with(|here| here.set(inline));
            start(true);
            INLINE_HERE.with(|here| here.set(false));
        }
        Ok(receiver)
    }

    /// Calls a tool and waits for its outcome.
    pub async fn call(
        self: &Arc<Self>,
        package: Arc<Served>,
        tool: String,
        arguments: serde_json::Value,
        limits: Limits,
        origin: Origin,
    ) -> Result<CallOutcome, CallError> {
        let receiver = self.submit(package, tool, arguments, limits, origin)?;
        receiver
            .await
            .map_err(|_| CallError::Host("the call's thread lost the call".into()))?
    }

    /// Runs `call` on the current thread, holding its permit while it computes, given up while
    /// it waits (`gate`: on a thread of its own, `granted` a permit or not, its time having run
    /// out in line; or on the front end's thread, holding it throughout); hands back its
    /// outcome and what is left of the run, to drop once the outcome is sent: the permit,
    /// given back first (to the next call in line, which then runs on this thread), then the
    /// run's instance and memory (the call counts as in flight until they are gone). A run on
    /// the front end's thread that was moved ([`Inline`]) is neither counted nor recorded: it
    /// hands back its admission, for the run on a thread of its own.
    fn run(&self, call: &Pending, gate: Gate<'_>, admitted: Admitted) -> Ran {
        let Pending {
            package,
            tool,
            limits,
            permit,
            ..
        } = call;
        let mut teardown = Teardown::default();
        let moved = || gate.inline().is_some_and(|inline| inline.moved());
        let (outcome, took) = metered(&self.metrics, &package.counters, &moved, || {
            // The line for a permit is bounded by the call's own time limit.
            let mut outcome = if let Gate::Permit { granted: false } = gate {
                waited_past_limit(*limits)
            } else {
                let (outcome, left) = self.run_counted(call, gate)?;
                teardown = left;
                outcome
            };
            outcome.stats_mut().queue_us = permit.queued_us();
            Ok(outcome)
        });
        if moved() {
            package.inline.moved();
            self.metrics.moved();
            return Err(Moved(admitted, took));
        }
        if gate.inline().is_some() {
            self.metrics.called_inline();
        }
        if let Ok(outcome) = &outcome {
            // One that computed for half a slice or more, wherever, sends the next to a call
            // thread.
            package.inline.ran(outcome);
        }
        Record {
            number: call.number,
            origin: &call.origin,
            package: package.name(),
            version: &package.stored.record.version,
            tool,
            outcome: outcome.as_ref().ok(),
            took,
        }
        .write();
        Ok((outcome, (GiveBack(Arc::clone(permit)), teardown, admitted)))
    }

    /// Loads `call`'s module and runs the call, giving `gate` (a granted permit, or the front
    /// end's [`Inline`]) what it gives up while it waits.
    fn run_counted(
        &self,
        call: &Pending,
        gate: Gate<'_>,
    ) -> Result<(CallOutcome, Teardown), CallError> {
        let Pending {
            package,
            tool,
            arguments,
            limits,
            permit,
            ..
        } = call;
        let (limits, inline) = (*limits, gate.inline());
        let gate = match inline {
            Some(inline) => Arc::clone(inline) as Arc<dyn RunGate>,
            None => Arc::clone(permit) as Arc<dyn RunGate>,
        };
        let record = &package.stored.record;
        let spec = ModuleSpec {
            wasm: ModuleBytes::File(&package.module),
            module_sha256: &record.module_sha256,
            uses_simd: record.uses_simd,
            config: self.engine,
        };
        let loaded = match self.store.in_memory(&spec, &self.modules) {
            Some(loaded) => loaded,
            None => {
                if let Some(inline) = inline {
                    // A load reads and hashes an artifact file, or compiles: no front-end
                    // thread waits for that. The call runs again on a thread of its own,
                    // which loads the module (the outcome here is dropped: it was moved).
                    inline.move_off();
                    return Err(CallError::Host("moved to load its module".into()));
                }
                self.store
                    .load_module(&spec, Some(&self.modules))
                    .map_err(|err| CallError::Host(err.to_string()))?
            }
        };
        self.metrics.module(loaded.source);
        for message in &loaded.notes {
            tracing::info!(package = record.name.as_str(), "{message}");
        }
        let request = ToolRequest {
            program: &record.name,
            tool,
            arguments: Arc::clone(arguments),
            limits,
            mounts: Mounts {
                volume_tmp: self.volume_tmp.clone(),
                ..Mounts::fresh(package.assets.clone())
            },
            network: Network {
                policy: Arc::clone(&package.policy),
                broker: Arc::clone(&self.broker),
            },
            gate: Some(gate),
        };
        let stats = CallStats {
            compiled: loaded.source == crate::store::Source::Compiled,
            engine: loaded.config.kind().name().to_string(),
            compiler: loaded.config.compiler().name().to_string(),
            load_us: loaded.load_us,
            ..CallStats::default()
        };
        let ready = threads::take_kept()
            .and_then(|kept| kept.downcast::<Held>().ok())
            .and_then(|held| (*held).take());
        let (outcome, teardown) =
            call::call_tool_answer_first(&loaded.module, ready, request, stats)
                .map_err(|err| CallError::Host(err.to_string()))?;
        if outcome.stats().ready {
            self.metrics.called_ready();
        }
        // A moved run makes nothing ahead: its call runs again elsewhere.
        let after = AfterCall {
            teardown,
            next: (self.ready_instances > 0
                && !inline.is_some_and(|inline| inline.moved())
                && follows_itself(&loaded.module))
            .then(|| Next {
                module: loaded.module,
                limits,
                held: self.metrics.ready_instances(),
                max: self.ready_instances,
            }),
        };
        Ok((outcome, Teardown::new(after)))
    }
}

thread_local! {
    /// The module the last call on this thread ran.
    static LAST_MODULE: std::cell::RefCell<Option<std::sync::Weak<dyn Module>>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether the call of `module` that just ran on this thread followed a call of the same module
/// there (or none), remembering `module` for the next call. An instance is made ahead only for
/// such a call: one package's calls follow each other on a thread, and an instance made for the
/// next is used; calls of many packages in turn do not, and an instance made for each would be
/// dropped unused by the next call, another package's (32 packages called in turn through one
/// server: every call made an instance it never used).
fn follows_itself(module: &Arc<dyn Module>) -> bool {
    LAST_MODULE.with(|last| {
        let mut last = last.borrow_mut();
        let follows = last
            .as_ref()
            .is_none_or(|last| std::ptr::addr_eq(last.as_ptr(), Arc::as_ptr(module)));
        *last = Some(Arc::downgrade(module));
        follows
    })
}

/// How long a call run on the front end's thread may compute there ([`RunGate::slice`])
/// before it is moved to a thread of its own: the deadline timer's tick, so that timing such a
/// call never wakes the timer (it notices the slice's end within a tick more).
pub const SLICE: Duration = Duration::from_millis(10);

thread_local! {
    /// Set by [`Calls::submit`] around the start of a call it may run on its own thread.
    static INLINE_HERE: Cell<bool> = const { Cell::new(false) };

    /// What the last call run on this front-end thread left: dropped before the thread's next
    /// call, or when it goes idle ([`drop_left_here`]), so that it never delays an answer.
    static LEFT_HERE: RefCell<Option<(Teardown, Admitted)>> = const { RefCell::new(None) };
}

/// Drops what the last call run on this thread left ([`Calls::submit`]): its run's instance
/// and memory, and its place among the calls in flight, and makes its instance ahead. The
/// front end's runtime calls it when a thread goes idle.
pub fn drop_left_here() {
    let left = LEFT_HERE.with(|left| left.borrow_mut().take());
    if left.is_some() && catch_unwind(AssertUnwindSafe(|| drop(left))).is_err() {
        tracing::error!("what a call left panicked as it was dropped");
    }
}

/// Whether this thread is one of the front end's (a worker of a multi-threaded runtime),
/// where a quick call may run with no hand-off.
fn on_front_end() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Whether a package's calls run on the front end's thread, with no hand-off to a thread of
/// their own. A call that ran there and waited or outran its slice was moved, and ran again on
/// a thread; so a package earns it by calls that neither wait nor compute long, loses it when
/// one computes for half a slice or more (wherever it ran), and loses it for many calls when
/// one is moved (a package whose calls vary costs the front end a slice now and then, not at
/// every call).
#[derive(Default)]
struct InlineCredit(AtomicI32);

impl InlineCredit {
    /// Quick calls in a row, on threads of their own, after which calls run inline.
    const EARNED: i32 = 2;
    /// Where a moved call sets the credit: so many quick calls on threads before the next
    /// runs inline.
    const MOVED: i32 = -64;

    fn allows(&self) -> bool {
        self.0.load(Ordering::Relaxed) >= Self::EARNED
    }

    /// A call ran to its answer: quick, if it never waited and took less than half a slice,
    /// loading included.
    fn ran(&self, outcome: &CallOutcome) {
        let stats = outcome.stats();
        let took = Duration::from_micros(stats.load_us.saturating_add(stats.run_us));
        let quick = stats.wait_us == 0 && took < SLICE / 2;
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |credit| {
                Some(if quick {
                    (credit + 1).min(Self::EARNED)
                } else {
                    credit.min(0)
                })
            });
    }

    fn moved(&self) {
        self.0.store(Self::MOVED, Ordering::Relaxed);
    }
}

/// The gate of a call run on the front end's thread: it holds its permit (its package's and
/// a slot) for its slice at most and never waits there; at a wait, or past its slice, it is
/// moved to a thread of its own ([`RunGate::slice`]).
#[derive(Default)]
struct Inline {
    moved: AtomicBool,
}

impl Inline {
    fn moved(&self) -> bool {
        self.moved.load(Ordering::Acquire)
    }
}

impl RunGate for Inline {
    // Never asked: a run that shares its thread is moved instead of waiting.
    fn pause(&self) {}
    fn resume(&self, _: Option<Instant>) {}

    fn slice(&self) -> Option<Duration> {
        Some(SLICE)
    }

    fn move_off(&self) {
        self.moved.store(true, Ordering::Release);
    }
}

/// What a run gives up while it waits: its permit, on a thread of its own (`granted`: it was
/// given one, else its time ran out in line), or nothing, on the front end's thread.
#[derive(Clone, Copy)]
enum Gate<'a> {
    Permit { granted: bool },
    Inline(&'a Arc<Inline>),
}

impl<'a> Gate<'a> {
    fn inline(self) -> Option<&'a Arc<Inline>> {
        match self {
            Gate::Inline(inline) => Some(inline),
            Gate::Permit { .. } => None,
        }
    }
}

/// How a run ended: with its outcome and what it left (see [`Calls::run`]), or moved.
type Ran = Result<(Result<CallOutcome, CallError>, Left), Moved>;

/// What a run leaves, to drop once its outcome is sent: its permit, its instance and memory,
/// and its place among the calls in flight.
type Left = (GiveBack, Teardown, Admitted);

/// A run moved off the front end's thread, with the call's place among the calls in flight
/// and how long the run lasted (the call's limit counts on from its start:
/// [`CallPermit::moved`]).
struct Moved(Admitted, Duration);

/// An admitted call: what it calls, under which limits, from where, its number and its
/// permit. Its answer's sender and its admission travel beside it.
struct Pending {
    calls: Arc<Calls>,
    package: Arc<Served>,
    tool: String,
    arguments: Arc<serde_json::Value>,
    limits: Limits,
    origin: Origin,
    number: u64,
    permit: Arc<CallPermit>,
    queued_at: Instant,
}

/// Where a call's outcome goes.
type Answer = tokio::sync::oneshot::Sender<Result<CallOutcome, CallError>>;

impl Pending {
    /// Runs the call on a thread of its own (`granted`: with a permit; else its time ran out
    /// in line). `first`: it has not been started before (a moved call has).
    fn dispatch(self, answer: Answer, admitted: Admitted, granted: bool, first: bool) {
        let threads = Arc::clone(&self.calls.execution.threads);
        let lost = (Arc::clone(&self.calls), Arc::clone(&self.permit));
        let job = Job::answering(answer, move || {
            if first {
                self.permit.started(granted, self.queued_at.elapsed());
            }
            match self.calls.run(&self, Gate::Permit { granted }, admitted) {
                Ok((outcome, left)) => (outcome, Some(left)),
                Err(_) => unreachable!("only a run on the front end's thread is moved"),
            }
        });
        // No thread could be made: the call is lost (its caller is told so), and its permit
        // goes on to the next call in line.
        if threads.dispatch(job).is_err() {
            let (calls, permit) = lost;
            if first {
                permit.started(granted, Duration::ZERO);
            }
            permit.release();
            calls.metrics.not_started();
        }
    }

    /// Runs the call here, on the front end's thread, holding its permit: answered at once if
    /// it neither waits nor outruns its slice, else moved to a thread of its own, where it runs
    /// again from its start (it has sent nothing: it was moved before its first wait).
    fn run_here(self, answer: Answer, admitted: Admitted) {
        self.permit.started(true, self.queued_at.elapsed());
        let inline = Arc::new(Inline::default());
        match self.calls.run(&self, Gate::Inline(&inline), admitted) {
            Ok((outcome, (give_back, teardown, admitted))) => {
                // The permit first, to the next call in line; the rest once answered.
                drop(give_back);
                let _ = answer.send(outcome);
                // `submit` took what the last call here left before this one started.
                LEFT_HERE.with(|left| {
                    let mut left = left.borrow_mut();
                    debug_assert!(left.is_none(), "one call's leftovers at a time");
                    *left = Some((teardown, admitted));
                });
            }
            Err(Moved(admitted, ran_for)) => {
                if let Some(began) = Instant::now().checked_sub(ran_for) {
                    self.permit.moved(began);
                }
                self.dispatch(answer, admitted, true, false);
            }
        }
    }
}

/// A call's permit, given back when dropped (after its answer is sent).
struct GiveBack(Arc<CallPermit>);

impl Drop for GiveBack {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// An instance a call thread made ahead of its next call and [keeps](threads::keep) meanwhile,
/// counted while held.
struct Held {
    instance: Option<ReadyInstance>,
    count: Arc<AtomicU64>,
}

impl Held {
    /// Makes an instance of `next.module` for a call under `next.limits`, unless `next.max`
    /// are held already.
    fn make(next: Next) -> Option<Held> {
        next.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held < next.max).then_some(held + 1)
            })
            .ok()?;
        Some(Held {
            instance: Some(ReadyInstance::prepare(&next.module, next.limits)),
            count: next.held,
        })
    }

    /// The instance, no longer counted as held.
    fn take(mut self) -> Option<ReadyInstance> {
        self.instance.take()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What to make ahead for a call thread's next call: an instance of the module it just ran,
/// under the same limits (a package called again is the call most likely next).
struct Next {
    module: Arc<dyn Module>,
    limits: Limits,
    held: Arc<AtomicU64>,
    max: u64,
}

/// What a call leaves on its thread, dropped after its answer is sent: the run's
/// leftovers first (their memory goes back to the pool, for the next instance to take), then
/// an instance made for the thread's next call.
struct AfterCall {
    teardown: Teardown,
    next: Option<Next>,
}

impl Drop for AfterCall {
    fn drop(&mut self) {
        std::mem::take(&mut self.teardown).finish();
        if let Some(held) = self.next.take().and_then(Held::make) {
            threads::keep(Box::new(held));
        }
    }
}

/// The outcome of a call that waited in its package's line for a run permit until its time
/// limit ran out: it never started.
fn waited_past_limit(limits: Limits) -> CallOutcome {
    CallOutcome::Crashed {
        crash: Crash::new(
            CrashKind::Timeout,
            format!(
                "the call waited in line for a run slot past its time limit of {} ms",
                limits.timeout.as_millis()
            ),
        ),
        stderr: String::new(),
        stats: CallStats::default(),
    }
}

/// Runs `call`, counted in `metrics` from start to finish (unless it was `moved`: it is
/// counted once, when it runs again); hands back its result and how long it took. A call that
/// panics is counted as a host failure and answered as one, so that it neither stays "in
/// flight" for good nor leaves its client without an answer.
fn metered(
    metrics: &Metrics,
    package: &PackageCounters,
    moved: &dyn Fn() -> bool,
    call: impl FnOnce() -> Result<CallOutcome, CallError>,
) -> (Result<CallOutcome, CallError>, Duration) {
    let started = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(call)).unwrap_or_else(|_| {
        tracing::error!("a call panicked in the host");
        Err(CallError::Host(
            "the call failed in the host (it panicked)".into(),
        ))
    });
    let took = started.elapsed();
    if !moved() {
        metrics.finished(package, result.as_ref().ok(), took);
    }
    (result, took)
}

/// The most a caller may ask for (`hako serve --max-timeout-ms`, `--max-memory-mib`,
/// `--max-write-budget`), and what a call gets when it asks for nothing: the call defaults,
/// lowered to the maxima where the operator set those lower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitCaps {
    pub max: Limits,
}

impl Default for LimitCaps {
    /// The maxima are the call defaults: 30 s, 256 MiB, 1 GiB.
    fn default() -> Self {
        Self { max: Limits::CALL }
    }
}

impl LimitCaps {
    /// The limits of a call that asks for none.
    pub fn defaults(&self) -> Limits {
        Limits {
            timeout: Limits::CALL.timeout.min(self.max.timeout),
            max_memory_bytes: Limits::CALL.max_memory_bytes.min(self.max.max_memory_bytes),
            write_budget: Limits::CALL.write_budget.min(self.max.write_budget),
            max_table_elements: Limits::CALL
                .max_table_elements
                .min(self.max.max_table_elements),
        }
    }

    /// Limits a caller asked for, checked: `{"timeout_ms", "memory_mib", "write_budget"}`, each
    /// optional, over [`LimitCaps::defaults`]. A value past its maximum is refused, naming the
    /// maximum and the flag that sets it.
    pub fn from_json(&self, value: Option<&serde_json::Value>) -> Result<Limits, String> {
        let mut limits = self.defaults();
        let Some(value) = value else {
            return Ok(limits);
        };
        let Some(fields) = value.as_object() else {
            return Err("limits must be an object".into());
        };
        let max_ms = u64::try_from(self.max.timeout.as_millis()).unwrap_or(u64::MAX);
        let max_mib = self.max.max_memory_bytes >> 20;
        for (key, field) in fields {
            let number = field
                .as_u64()
                .ok_or_else(|| format!("limits.{key} must be a non-negative integer"))?;
            let above = |max: u64, unit: &str, flag: &str| {
                format!(
                    "limits.{key} is {number}, above this server's maximum of {max}{unit} \
                     (hako serve {flag})"
                )
            };
            match key.as_str() {
                "timeout_ms" if number == 0 => {
                    return Err("limits.timeout_ms must be at least 1".into())
                }
                "timeout_ms" if number > max_ms => {
                    return Err(above(max_ms, " ms", "--max-timeout-ms"))
                }
                "timeout_ms" => limits.timeout = Duration::from_millis(number),
                "memory_mib" if number == 0 => {
                    return Err("limits.memory_mib must be at least 1".into())
                }
                "memory_mib" if number > max_mib => {
                    return Err(above(max_mib, " MiB", "--max-memory-mib"))
                }
                "memory_mib" => limits.max_memory_bytes = number << 20,
                "write_budget" if number > self.max.write_budget => {
                    return Err(above(self.max.write_budget, " bytes", "--max-write-budget"))
                }
                "write_budget" => limits.write_budget = number,
                other => return Err(format!("unknown limit {other:?}")),
            }
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outcome whose run took `run_us` and waited `wait_us` in host calls.
    fn ran(run_us: u64, wait_us: u64) -> CallOutcome {
        let mut outcome = waited_past_limit(Limits::CALL);
        let stats = outcome.stats_mut();
        stats.run_us = run_us;
        stats.wait_us = wait_us;
        outcome
    }

    #[test]
    fn a_package_earns_the_front_end_by_quick_calls_in_a_row_and_loses_it_when_moved() {
        let credit = InlineCredit::default();
        assert!(
            !credit.allows(),
            "a new package's calls run on call threads"
        );
        credit.ran(&ran(200, 0));
        assert!(!credit.allows());
        // A call that waited, or took half a slice, starts the row again.
        credit.ran(&ran(200, 1));
        credit.ran(&ran(200, 0));
        assert!(!credit.allows());
        credit.ran(&ran(SLICE.as_micros() as u64 / 2, 0));
        credit.ran(&ran(200, 0));
        assert!(!credit.allows());
        credit.ran(&ran(200, 0));
        assert!(credit.allows(), "two quick calls in a row");
        credit.ran(&ran(200, 0));
        assert!(credit.allows());
        credit.moved();
        assert!(!credit.allows());
        let needed = InlineCredit::EARNED - InlineCredit::MOVED;
        for _ in 1..needed {
            credit.ran(&ran(200, 0));
        }
        assert!(!credit.allows(), "a moved call costs many quick calls");
        credit.ran(&ran(200, 0));
        assert!(credit.allows());
    }
    use serde_json::json;

    #[test]
    fn a_call_that_panics_is_counted_as_finished_and_answered_as_a_host_failure() {
        let metrics = Metrics::default();
        metrics.admitted();
        let (result, _) = metered(&metrics, &metrics.package("p"), &|| false, || {
            panic!("on purpose")
        });
        assert!(matches!(result, Err(CallError::Host(_))), "{result:?}");
        assert_eq!(metrics.in_flight(), 0);
        assert!(metrics
            .render()
            .contains("hako_calls_total{outcome=\"host_error\"} 1"));
    }

    #[test]
    fn absent_limits_are_the_call_defaults() {
        assert_eq!(LimitCaps::default().from_json(None).unwrap(), Limits::CALL);
    }

    #[test]
    fn given_limits_replace_the_defaults() {
        let limits = LimitCaps::default()
            .from_json(Some(&json!({"timeout_ms": 500, "memory_mib": 16})))
            .unwrap();
        assert_eq!(limits.timeout, Duration::from_millis(500));
        assert_eq!(limits.max_memory_bytes, 16 * 1024 * 1024);
        assert_eq!(limits.write_budget, Limits::CALL.write_budget);
    }

    #[test]
    fn out_of_range_or_unknown_limits_are_refused_by_name() {
        let caps = LimitCaps::default();
        assert!(caps
            .from_json(Some(&json!({"timeout_ms": 0})))
            .unwrap_err()
            .contains("timeout_ms"));
        assert!(caps
            .from_json(Some(&json!({"stack": 1})))
            .unwrap_err()
            .contains("stack"));
        assert!(caps.from_json(Some(&json!([1]))).is_err());
    }

    #[test]
    fn a_caller_cannot_ask_for_more_than_the_operator_allows() {
        let caps = LimitCaps::default();
        let refused = |limits| caps.from_json(Some(&limits)).unwrap_err();
        assert_eq!(
            refused(json!({"timeout_ms": 600_000})),
            "limits.timeout_ms is 600000, above this server's maximum of 30000 ms \
             (hako serve --max-timeout-ms)"
        );
        assert!(refused(json!({"memory_mib": 4096})).contains("maximum of 256 MiB"));
        assert!(refused(json!({"write_budget": u64::MAX})).contains("--max-write-budget"));
        // At the maximum is allowed.
        let at_max = caps
            .from_json(Some(&json!({"timeout_ms": 30_000, "memory_mib": 256})))
            .unwrap();
        assert_eq!(at_max, Limits::CALL);
    }

    #[test]
    fn maxima_below_the_defaults_lower_the_defaults() {
        let caps = LimitCaps {
            max: Limits {
                timeout: Duration::from_secs(2),
                max_memory_bytes: 32 << 20,
                write_budget: 0,
                max_table_elements: 1024,
            },
        };
        assert_eq!(caps.defaults(), caps.max);
        assert_eq!(caps.from_json(None).unwrap(), caps.max);
    }
}
