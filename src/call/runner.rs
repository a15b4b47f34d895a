//! One run of a module: the sandbox's mounts, the `subako_http` imports and the guest's stdio
//! wired into one engine-neutral [`Host`], the run bounded by the call's deadline and memory cap,
//! and the verdict: which crash, if any, the run earned. Used by tool calls and by discovery.
//!
//! It does not pick or load the module (that is `store`), nor render what the model is shown.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use hako_engine_api::{Host, Import, Module, Prepared, RunExit, RunLimits, Stop, Teardown};

use super::deadline::{CallTimer, DeadlineKind};
use super::outcome::{Crash, CrashKind};
use super::session::{Conversation, Session};
use crate::http::{Broker, HttpImports, PackagePolicy, VolumeDirs, VolumeRoot};
use crate::sandbox::{
    Cancel, Preopen, PreopenDir, RunGate, SandboxConfig, Stdio, Waits, Wasi, WriteBudget,
};

/// The limits of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The call's time limit, from instantiation (or the start of the run, on an instance made
    /// ahead) to exit.
    pub timeout: Duration,
    /// The most linear memory the guest may have.
    pub max_memory_bytes: u64,
    /// The most bytes the guest may write to files.
    pub write_budget: u64,
    /// The most elements any one table may hold (each table reserves its bound against the
    /// memory cap, see [`RunLimits`]).
    pub max_table_elements: u32,
}

impl Limits {
    /// The defaults of a call: 30 s, 256 MiB, 1 GiB, tables of 65,536 elements.
    pub const CALL: Limits = Limits {
        timeout: Duration::from_secs(30),
        max_memory_bytes: 256 * 1024 * 1024,
        write_budget: 1024 * 1024 * 1024,
        max_table_elements: hako_engine_api::MAX_TABLE_ELEMENTS,
    };
    /// The limits of discovery: 10 s, and nothing to write to.
    pub const DISCOVERY: Limits = Limits {
        timeout: Duration::from_secs(10),
        max_memory_bytes: 256 * 1024 * 1024,
        write_budget: 0,
        max_table_elements: hako_engine_api::MAX_TABLE_ELEMENTS,
    };

    /// What the engine enforces itself.
    pub fn run_limits(&self) -> RunLimits {
        RunLimits {
            max_memory_bytes: self.max_memory_bytes,
            max_table_elements: self.max_table_elements,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::CALL
    }
}

/// Where `/volume/tmp` comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeTmp {
    /// No volume at all (discovery).
    None,
    /// A fresh, empty folder made on first use (in the system's temporary folder) and removed
    /// after the call.
    Fresh,
    /// The same, made below this folder (a store's staging folder, so that what a killed
    /// server leaves is swept).
    FreshIn(PathBuf),
    /// A folder the caller gives, kept after the call.
    Given(PathBuf),
}

/// The folders a call mounts, in the ABI's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounts {
    pub volume_tmp: VolumeTmp,
    /// `/volume/data`, only when the caller enables it.
    pub data: Option<PathBuf>,
    /// `/package` (read-only), when the package has assets.
    pub package_assets: Option<PathBuf>,
    /// `/skills/<name>` (read-only), each.
    pub skills: Vec<(String, PathBuf)>,
}

impl Mounts {
    /// What a call mounts unless asked for more: a fresh `/volume/tmp`, and `/package` when
    /// the package has assets; no `/volume/data`, no skills.
    pub fn fresh(package_assets: Option<PathBuf>) -> Mounts {
        Mounts {
            volume_tmp: VolumeTmp::Fresh,
            data: None,
            package_assets,
            skills: Vec::new(),
        }
    }
}

/// What a call may reach on the network.
#[derive(Clone)]
pub struct Network {
    pub policy: Arc<PackagePolicy>,
    pub broker: Arc<dyn Broker>,
}

/// A host failure around a run: no guest behaviour.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the module could not be instantiated: {0}")]
    Instantiate(String),
    #[error("preparing the sandbox: {0}")]
    Sandbox(String),
}

/// What one run left behind.
pub struct Ran<C> {
    pub crash: Option<Crash>,
    pub session: Session<C>,
    pub run_us: u64,
    /// How long the run's host calls waited outside the guest.
    pub wait_us: u64,
    pub memory_bytes: u64,
    /// The instance and memory the run left; see [`Teardown`].
    pub teardown: Teardown,
    /// The call's volume folders; a fresh `/volume/tmp` is removed when this drops.
    pub volume: CallVolume,
    /// The `/skills` folder made for the call, removed when this drops.
    _skills: Option<tempfile::TempDir>,
}

/// The host folders behind `/volume/tmp` and `/volume/data` of one call — the same ones the
/// sandbox and the broker use — removing a fresh `/volume/tmp` when dropped.
pub struct CallVolume(VolumeDirs);

impl Drop for CallVolume {
    fn drop(&mut self) {
        // A fresh volume nothing used was never made: there is nothing to remove.
        if let Some(tmp) = self
            .0
            .tmp
            .as_ref()
            .filter(|tmp| tmp.is_fresh() && tmp.was_made())
        {
            let _ = std::fs::remove_dir_all(tmp.path());
        }
    }
}

/// The engine-neutral host of one run: WASI for the sandbox, `subako_http` for HTTP.
struct CallHost<S: Stdio> {
    wasi: Wasi<S>,
    http: HttpImports,
}

impl<S: Stdio + 'static> Host for CallHost<S> {
    fn call(&mut self, import: Import, args: &[u64], memory: &mut [u8]) -> Result<i32, Stop> {
        match import {
            Import::HttpRequest | Import::HttpReadResponse => self.http.call(import, args, memory),
            _ => self.wasi.call(import, args, memory),
        }
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// The instance a run uses: made by the run, or ahead of it ([`super::ReadyInstance`]).
pub enum Instance<'a> {
    /// Instantiated by the run, within its bounds.
    Fresh(&'a Arc<dyn Module>),
    /// Made ahead, under the run's limits; no guest code has run in it.
    Made(Box<dyn Prepared>),
}

/// What bounds one run, made when it starts: its deadline, the cancel flag the deadline
/// timer sets, the timer, the write budget its files and HTTP outputs share, and what it gives
/// up while its host calls wait.
pub(super) struct Bounds {
    pub started: Instant,
    pub deadline: Instant,
    pub cancel: Arc<Cancel>,
    pub timer: Arc<CallTimer>,
    pub budget: Arc<WriteBudget>,
    pub waits: Arc<Waits>,
    pub limits: Limits,
}

/// The sandbox of one run besides its stdio: argv, environment, preopens, and the folders
/// `subako_http` file bodies live in.
pub(super) struct Sandbox {
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub preopens: Vec<Preopen>,
    pub volume: VolumeDirs,
}

/// How a run ended, with the stdio handed back.
pub(super) struct HostRun<S> {
    pub exit: RunExit,
    pub stdio: S,
    pub memory_bytes: u64,
    pub teardown: Teardown,
}

impl Bounds {
    /// Starts the clock of a run under `limits`, which gives `gate` up while it waits.
    pub fn start(limits: Limits, gate: Option<Arc<dyn RunGate>>) -> Bounds {
        let started = Instant::now();
        // A run that starts a call again counts the limit from the call's first start.
        let began = gate.as_ref().and_then(|gate| gate.began());
        let deadline = began.unwrap_or(started) + limits.timeout;
        let cancel = Arc::new(Cancel::new());
        let waits = Waits::new(gate, Some(deadline));
        // A run that shares its thread is first timed to the end of its slice, which moves it.
        let (first, kind) = match waits.slice().map(|slice| started + slice) {
            Some(slice_ends) if slice_ends < deadline => (slice_ends, DeadlineKind::Slice),
            _ => (deadline, DeadlineKind::CallTimeout),
        };
        let timer = Arc::new(CallTimer::start(first, kind, Arc::clone(&cancel)));
        Bounds {
            started,
            deadline,
            cancel,
            timer,
            budget: Arc::new(WriteBudget::new(limits.write_budget)),
            waits: Arc::new(waits),
            limits,
        }
    }

    /// Runs `instance` in `sandbox` with `stdio` and the network's `subako_http` imports,
    /// within these bounds.
    pub fn run<S: Stdio + 'static>(
        &self,
        instance: Instance<'_>,
        sandbox: Sandbox,
        stdio: S,
        network: &Network,
    ) -> HostRun<S> {
        let wasi = Wasi::new(
            SandboxConfig {
                args: sandbox.args,
                env: sandbox.env,
                preopens: sandbox.preopens,
                budget: Arc::clone(&self.budget),
                cancel: Arc::clone(&self.cancel),
                deadline: Some(self.deadline),
                waits: Arc::clone(&self.waits),
            },
            stdio,
        );
        let http = HttpImports::new(
            Arc::clone(&network.policy),
            Arc::clone(&network.broker),
            Arc::clone(&self.budget),
            Some(self.deadline),
        )
        .with_volume(sandbox.volume)
        .with_cancel(Arc::clone(&self.cancel))
        .with_waits(Arc::clone(&self.waits));
        let prepared = match instance {
            Instance::Fresh(module) => module.prepare(self.limits.run_limits()),
            Instance::Made(prepared) => prepared,
        };
        let result = prepared.run(Box::new(CallHost { wasi, http }), self.timer.as_ref());
        let host = result
            .host
            .into_any()
            .downcast::<CallHost<S>>()
            .expect("the engine hands back the host it was given");
        HostRun {
            exit: result.exit,
            stdio: host.wasi.into_stdio(),
            memory_bytes: result.memory_bytes,
            teardown: result.teardown,
        }
    }

    /// Whether the run's time ran out: its deadline fired, or has passed (a host call that
    /// waited up to it may stop the guest a moment before the timer notices).
    pub fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// A read-only folder opened on first use.
fn lazy_dir(path: PathBuf) -> PreopenDir {
    PreopenDir::Lazy(Box::new(move || {
        Dir::open_ambient_dir(&path, ambient_authority())
    }))
}

/// A volume folder, opened (and made, if need be) on first use by the sandbox or the broker.
fn lazy_volume(root: &VolumeRoot) -> PreopenDir {
    let root = root.clone();
    PreopenDir::Lazy(Box::new(move || root.open()))
}

/// Where a fresh `/volume/tmp` will be made: a name in the system's temporary folder made of a
/// random part drawn once per process and a counter (most calls never make their volume, so
/// they should not pay for fresh randomness).
fn fresh_volume_path(base: &Path) -> PathBuf {
    static PREFIX: OnceLock<String> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 12];
        // A clash is only a failed mkdir, never a shared folder: the folder is made with
        // create-new semantics. An unavailable random source falls back to the clock.
        if getrandom::fill(&mut bytes).is_err() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            bytes.copy_from_slice(&nanos.to_le_bytes()[..12]);
        }
        format!("hako-volume-{}-{}", std::process::id(), hex::encode(bytes))
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    base.join(format!("{prefix}-{n}"))
}

/// What a call's mounts leave on the host: the preopens in the ABI's order, the volume
/// folders (shared by the sandbox and the broker), and the `/skills` folder made for the call.
type Mounted = (Vec<Preopen>, CallVolume, Option<tempfile::TempDir>);

fn preopens(mounts: &Mounts) -> Result<Mounted, RunError> {
    let mut preopens = Vec::with_capacity(3 + mounts.skills.len());
    let mut volume = VolumeDirs::none();
    volume.tmp = match &mounts.volume_tmp {
        VolumeTmp::None => None,
        VolumeTmp::Fresh => Some(VolumeRoot::fresh(fresh_volume_path(&std::env::temp_dir()))),
        VolumeTmp::FreshIn(base) => Some(VolumeRoot::fresh(fresh_volume_path(base))),
        VolumeTmp::Given(path) => Some(VolumeRoot::existing(path.clone())),
    };
    volume.data = mounts.data.clone().map(VolumeRoot::existing);
    for (guest_path, root) in [("/volume/tmp", &volume.tmp), ("/volume/data", &volume.data)] {
        if let Some(root) = root {
            preopens.push(Preopen {
                guest_path: guest_path.into(),
                dir: lazy_volume(root),
                read_only: false,
            });
        }
    }
    if let Some(assets) = &mounts.package_assets {
        preopens.push(Preopen {
            guest_path: "/package".into(),
            dir: lazy_dir(assets.clone()),
            read_only: true,
        });
    }
    let mut skills = None;
    if !mounts.skills.is_empty() {
        let (dir, folder) = skills_root(&mounts.skills)?;
        skills = Some(folder);
        preopens.push(Preopen {
            guest_path: "/skills".into(),
            dir: PreopenDir::Open(dir),
            read_only: true,
        });
        for (name, path) in &mounts.skills {
            preopens.push(Preopen {
                guest_path: format!("/skills/{name}"),
                dir: lazy_dir(path.clone()),
                read_only: true,
            });
        }
    }
    Ok((preopens, CallVolume(volume), skills))
}

/// `/skills` itself: a read-only folder that lists each skill's name as an empty folder (the
/// skills' own preopens serve their content). Made for the call in a folder only this user
/// can enter, and removed with the call.
fn skills_root(skills: &[(String, PathBuf)]) -> Result<(Dir, tempfile::TempDir), RunError> {
    let fail = |err: std::io::Error| RunError::Sandbox(format!("/skills: {err}"));
    let root = tempfile::Builder::new()
        .prefix("hako-skills-")
        .tempdir()
        .map_err(fail)?;
    for (name, _) in skills {
        std::fs::create_dir_all(root.path().join(name)).map_err(fail)?;
    }
    let dir = Dir::open_ambient_dir(root.path(), ambient_authority()).map_err(fail)?;
    Ok((dir, root))
}

/// Runs `instance` once with `conversation` on its stdin, giving `gate` up while its host calls
/// wait.
pub fn run<C: Conversation + 'static>(
    instance: Instance<'_>,
    program: &str,
    limits: Limits,
    mounts: &Mounts,
    network: &Network,
    gate: Option<Arc<dyn RunGate>>,
    conversation: C,
) -> Result<Ran<C>, RunError> {
    let bounds = Bounds::start(limits, gate);
    let (preopens, volume, skills_folder) = preopens(mounts)?;
    let session = Session::new(conversation, Arc::clone(&bounds.timer));
    let sandbox = Sandbox {
        args: vec![program.to_string()],
        env: Vec::new(),
        preopens,
        volume: volume.0.clone(),
    };
    let ran = bounds.run(instance, sandbox, session, network);
    let run_us = bounds.started.elapsed().as_micros() as u64;
    let fired = bounds.timer.fired();
    if fired == Some(DeadlineKind::Slice) {
        // Past its slice on a shared thread: it runs again on a thread of its own.
        bounds.waits.moves();
    }
    let mut session = ran.stdio;
    let past_deadline = bounds.past_deadline();
    let crash = judge(&mut session, ran.exit, fired, past_deadline, limits)?;
    Ok(Ran {
        crash,
        session,
        run_us,
        wait_us: bounds.waits.waited_us(),
        memory_bytes: ran.memory_bytes,
        teardown: ran.teardown,
        volume,
        _skills: skills_folder,
    })
}

/// The crash a run earned, if any: the first one its stdout earned, else how it ended.
fn judge<C: Conversation>(
    session: &mut Session<C>,
    exit: RunExit,
    fired: Option<DeadlineKind>,
    past_deadline: bool,
    limits: Limits,
) -> Result<Option<Crash>, RunError> {
    if matches!(exit, RunExit::Returned | RunExit::Exited(_)) && fired.is_none() {
        session.flush_partial_line();
    }
    if let Some(crash) = session.crash() {
        return Ok(Some(crash.clone()));
    }
    let deadline_crash = |kind: DeadlineKind| match kind {
        DeadlineKind::CallTimeout => Crash::new(
            CrashKind::Timeout,
            format!(
                "the call ran past its time limit of {} ms",
                limits.timeout.as_millis()
            ),
        ),
        DeadlineKind::ExitAfterEof => Crash::new(
            CrashKind::NoExitAfterEof,
            "the guest was still running 1 s after stdin was closed",
        ),
        // Never an outcome a caller sees: the run is moved, and runs again (RunGate::slice).
        DeadlineKind::Slice => Crash::new(
            CrashKind::Timeout,
            "the call outran its slice on a shared thread and was moved",
        ),
    };
    // A host call that waited up to the deadline may stop the guest a moment before the
    // timer notices the same deadline.
    let fired = fired.or(past_deadline.then_some(DeadlineKind::CallTimeout));
    if let Some(kind) = fired {
        if !matches!(exit, RunExit::OutOfMemory(_)) {
            return Ok(Some(deadline_crash(kind)));
        }
    }
    let crash = match exit {
        RunExit::Returned | RunExit::Exited(0) if session.finished() => return Ok(None),
        RunExit::Returned | RunExit::Exited(0) => Crash::new(
            CrashKind::ExitedBeforeAnswer,
            "the guest exited with status 0 before answering",
        ),
        RunExit::Exited(status) if !session.finished() => Crash::new(
            CrashKind::ExitedBeforeAnswer,
            format!("the guest exited with status {status} before answering"),
        ),
        RunExit::Exited(status) => Crash::new(
            CrashKind::NonzeroExit,
            format!("the guest exited with status {status}"),
        ),
        RunExit::Trap(message) => {
            Crash::new(CrashKind::Trap, format!("the guest trapped: {message}"))
        }
        RunExit::OutOfMemory(message) => Crash::new(CrashKind::OutOfMemory, message),
        RunExit::Aborted | RunExit::Interrupted => Crash::new(
            CrashKind::Trap,
            "the guest was stopped without a recorded reason",
        ),
        RunExit::Instantiate(message) => return Err(RunError::Instantiate(message)),
    };
    Ok(Some(crash))
}

/// Opens a folder a `volume:///` link names, if that part of the volume is mounted.
pub fn volume_root<C>(ran: &Ran<C>, first_segment: &str) -> Option<Dir> {
    let dirs = &ran.volume.0;
    match first_segment {
        "tmp" => dirs.tmp.as_ref()?.open_existing(),
        "data" => dirs.data.as_ref()?.open_existing(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mounts(volume_tmp: VolumeTmp) -> Mounts {
        Mounts {
            volume_tmp,
            data: None,
            package_assets: None,
            skills: Vec::new(),
        }
    }

    #[test]
    fn a_fresh_volume_is_made_on_first_use_private_and_removed_with_its_call() {
        let (mut preopens, volume, _) = preopens(&mounts(VolumeTmp::Fresh)).unwrap();
        let tmp = volume.0.tmp.clone().unwrap();
        assert!(tmp.open_existing().is_none(), "made before use");
        let PreopenDir::Lazy(open) = preopens.remove(0).dir else {
            panic!("a fresh volume is opened lazily");
        };
        open().unwrap();
        let mode = std::fs::metadata(tmp.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(volume);
        assert!(!tmp.path().exists());
    }

    #[test]
    fn a_given_volume_is_kept_after_the_call() {
        let folder = tempfile::tempdir().unwrap();
        let given = folder.path().join("vol");
        let (_, volume, _) = preopens(&mounts(VolumeTmp::Given(given.clone()))).unwrap();
        std::fs::create_dir(&given).unwrap();
        drop(volume);
        assert!(given.exists());
    }

    #[test]
    fn discovery_mounts_no_volume() {
        let (preopens, volume, skills) = preopens(&mounts(VolumeTmp::None)).unwrap();
        assert!(preopens.is_empty() && volume.0.tmp.is_none() && skills.is_none());
    }
}
