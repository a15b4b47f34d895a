//! The sandbox a guest runs in: WASI preview 1, written once and engine-neutral, over the
//! guest's linear memory as a byte slice. It owns the file descriptor table, the preopens
//! (confined by `cap-std`, never by hand-written path checks), the write budget, clocks,
//! randomness and `poll_oneoff`. It does not own the protocol on stdin/stdout: that is the
//! caller's [`Stdio`], so the call contract stays in `call`.
//!
//! Every function answers the errno of the witx, with every guest pointer bounds-checked
//! (`EFAULT`). A [`Wasi`] is built per call, and building it opens nothing: a lazy preopen is
//! opened on first use, so a call that never touches a directory pays nothing for it.
//!
//! ```
//! use hako::sandbox::{Cancel, SandboxConfig, Stdio, Waits, Wasi, WriteBudget};
//! use hako_engine_api::{Import, Stop};
//! use std::sync::Arc;
//!
//! struct Collect(Vec<u8>);
//! impl Stdio for Collect {
//!     fn read_stdin(&mut self, _: &mut [u8]) -> Result<usize, Stop> { Ok(0) }
//!     fn stdin_ready(&self) -> bool { true }
//!     fn stdin_would_block(&mut self) -> Stop { Stop::Abort }
//!     fn write_stdout(&mut self, bytes: &[u8]) -> Result<(), Stop> {
//!         self.0.extend_from_slice(bytes);
//!         Ok(())
//!     }
//!     fn write_stderr(&mut self, _: &[u8]) -> Result<(), Stop> { Ok(()) }
//! }
//!
//! let config = SandboxConfig {
//!     args: vec!["greet".into()],
//!     env: Vec::new(),
//!     preopens: Vec::new(),
//!     budget: Arc::new(WriteBudget::new(1 << 30)),
//!     cancel: Arc::new(Cancel::new()),
//!     deadline: None,
//!     waits: Arc::new(Waits::default()),
//! };
//! let mut wasi = Wasi::new(config, Collect(Vec::new()));
//! // One ciovec at 0 naming the 3 bytes at 16; the count written goes to 8.
//! let mut memory = vec![0u8; 32];
//! memory[0..4].copy_from_slice(&16u32.to_le_bytes());
//! memory[4..8].copy_from_slice(&3u32.to_le_bytes());
//! memory[16..19].copy_from_slice(b"hi\n");
//! assert_eq!(wasi.call(Import::FdWrite, &[1, 0, 1, 8], &mut memory), Ok(0));
//! assert_eq!(wasi.stdio().0, b"hi\n");
//! ```

mod abi;
mod budget;
mod cancel;
mod descriptors;
mod error;
mod fd;
mod fdtable;
mod io;
mod memory;
mod path;
mod poll;
mod process;
#[cfg(test)]
mod testkit;
mod wait;

pub use budget::WriteBudget;
pub use cancel::Cancel;
pub use descriptors::{Descriptors, Held, GUEST_DESCRIPTORS};
pub use error::errno;
pub use wait::{RunGate, Waits};

/// The most bytes one piece of a host call's work moves (a file read or write, `random_get`)
/// before the call looks at the cancel flag again: a guest can ask one host call to move
/// gigabytes, and a call must still end soon after its time limit.
pub const PIECE_BYTES: usize = 1 << 20;

/// How many items of a host call's list (directory entries, `poll_oneoff` subscriptions) are
/// handled before it looks at the cancel flag again.
pub const PIECE_ITEMS: usize = 1024;

/// The most `iovec`s one read or write takes (`IOV_MAX`, as wasi-libc and Linux have it):
/// `EINVAL` beyond.
pub const MAX_IOVECS: u32 = 1024;

/// The longest path a guest may pass (`PATH_MAX`): `ENAMETOOLONG` beyond, before a byte of it
/// is decoded.
pub const MAX_PATH_BYTES: u32 = 4096;

/// The most file descriptors a guest may hold open at once, streams and preopens included:
/// `EMFILE` beyond. Each file or directory it opens holds one of the host process's, which
/// every guest together may hold only so many of ([`GUEST_DESCRIPTORS`]; `ENFILE` beyond).
pub const MAX_OPEN_FDS: usize = 128;

/// What creating a file, directory or link costs from the write budget, whatever it holds: an
/// empty file takes an inode and a directory entry of the host's disk, so that a guest cannot
/// fill a volume with millions of empty files within any write budget.
pub const NODE_BYTES: u64 = 4096;

use fdtable::FdTable;
use hako_engine_api::{Import, Stop};
use std::sync::Arc;
use std::time::Instant;

/// A directory the guest sees, in preopen order.
pub struct Preopen {
    pub guest_path: String,
    pub dir: PreopenDir,
    pub read_only: bool,
}

/// The host directory behind a preopen: opened already, or opened on first use (so a call that
/// never touches /volume/tmp pays nothing for it). A lazy open failing → the guest gets EIO.
pub enum PreopenDir {
    Open(cap_std::fs::Dir),
    Lazy(Box<dyn FnOnce() -> std::io::Result<cap_std::fs::Dir> + Send>),
}

/// What one call's sandbox holds.
pub struct SandboxConfig {
    /// argv; the ABI gives one entry.
    pub args: Vec<String>,
    /// `K=V` entries; the ABI gives none.
    pub env: Vec<String>,
    /// fds 3, 4, 5, … in this order.
    pub preopens: Vec<Preopen>,
    pub budget: Arc<WriteBudget>,
    pub cancel: Arc<Cancel>,
    /// `poll_oneoff` sleeps never go past it.
    pub deadline: Option<Instant>,
    /// What the run gives up while a host call sleeps, and how long it waited.
    pub waits: Arc<Waits>,
}

/// What fds 0, 1, 2 are: the call runner implements this (the protocol lives there).
pub trait Stdio: Send {
    /// Reads stdin into `buf`; Ok(0) is end of file. Err(Stop) ends the run.
    fn read_stdin(&mut self, buf: &mut [u8]) -> Result<usize, Stop>;
    /// Whether a read of stdin would return at once (data or end of file).
    fn stdin_ready(&self) -> bool;
    /// Called when the guest would block on stdin with nothing else to wake it
    /// (poll_oneoff with only a not-ready stdin subscription): the runner decides; it ends the run.
    fn stdin_would_block(&mut self) -> Stop;
    /// Waits until stdin is ready, or `until` (the earliest clock of the poll, never past the
    /// deadline) passes, for a guest whose `poll_oneoff` found nothing ready yet. `Ok(true)`:
    /// it waited, and the poll looks again. `Ok(false)` (the default): this stdin cannot
    /// become ready by waiting (the call runner holds its whole stdin), so the poll sleeps on
    /// its clocks alone, or, with none, hands over to [`Stdio::stdin_would_block`].
    fn wait_stdin(&mut self, until: Option<Instant>) -> Result<bool, Stop> {
        let _ = until;
        Ok(false)
    }
    fn write_stdout(&mut self, bytes: &[u8]) -> Result<(), Stop>;
    fn write_stderr(&mut self, bytes: &[u8]) -> Result<(), Stop>;
}

/// Why a WASI function did not succeed: an errno for the guest, or the end of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Fail {
    #[error("wasi errno {0}")]
    Errno(i32),
    #[error("the run stops: {0:?}")]
    Stop(Stop),
}

impl From<Stop> for Fail {
    fn from(stop: Stop) -> Self {
        Fail::Stop(stop)
    }
}

/// One call's WASI preview 1 implementation.
pub struct Wasi<S: Stdio> {
    fds: FdTable,
    args: Vec<String>,
    env: Vec<String>,
    budget: Arc<WriteBudget>,
    cancel: Arc<Cancel>,
    deadline: Option<Instant>,
    waits: Arc<Waits>,
    stdio: S,
}

impl<S: Stdio> Wasi<S> {
    /// Builds the fd table; opens nothing that is lazy.
    pub fn new(config: SandboxConfig, stdio: S) -> Self {
        Self {
            fds: FdTable::new(config.preopens),
            args: config.args,
            env: config.env,
            budget: config.budget,
            cancel: config.cancel,
            deadline: config.deadline,
            waits: config.waits,
            stdio,
        }
    }

    pub fn stdio(&self) -> &S {
        &self.stdio
    }

    pub fn stdio_mut(&mut self) -> &mut S {
        &mut self.stdio
    }

    pub fn into_stdio(self) -> S {
        self.stdio
    }

    /// Runs one WASI import. `args` as the API crate says (i32 zero-extended, i64 as is).
    /// Returns the errno (0 = success) as i32; `proc_exit` returns Err(Stop::Exit(code));
    /// a cancelled call (cancel flag set) returns Err(Stop::Abort) from every import, and from
    /// any function that waits when the flag is set during the wait; calling it with an Http*
    /// import returns Ok(ENOSYS).
    pub fn call(&mut self, import: Import, args: &[u64], memory: &mut [u8]) -> Result<i32, Stop> {
        // Once the deadline has fired, the next host call ends the guest, whatever the import:
        // an engine's interrupt only stops guest code, and a guest may spend nearly all its
        // time in host calls. A call whose work grows with what the guest asks looks again
        // between its pieces ([`Wasi::go_on`]).
        if self.cancel.is_cancelled() {
            return Err(Stop::Abort);
        }
        match self.dispatch(import, Args(args), memory) {
            Ok(()) => Ok(errno::SUCCESS),
            Err(Fail::Errno(code)) => Ok(code),
            Err(Fail::Stop(stop)) => Err(stop),
        }
    }

    fn dispatch(&mut self, import: Import, a: Args<'_>, m: &mut [u8]) -> Result<(), Fail> {
        use Import::*;
        match import {
            ArgsGet => process::strings_get(&self.args, m, a.u32(0), a.u32(1)),
            ArgsSizesGet => process::strings_sizes(&self.args, m, a.u32(0), a.u32(1)),
            EnvironGet => process::strings_get(&self.env, m, a.u32(0), a.u32(1)),
            EnvironSizesGet => process::strings_sizes(&self.env, m, a.u32(0), a.u32(1)),
            ClockResGet => process::clock_res_get(m, a.u32(0), a.u32(1)),
            ClockTimeGet => process::clock_time_get(m, a.u32(0), a.u32(2)),
            FdAdvise => self.fd_advise(a.u32(0), a.u32(3)),
            FdAllocate => self.fd_allocate(a.u32(0)),
            FdClose => self.fds.remove(a.u32(0)).map(drop),
            FdDatasync => self.fd_sync(a.u32(0), true),
            FdFdstatGet => self.fd_fdstat_get(m, a.u32(0), a.u32(1)),
            FdFdstatSetFlags => self.fd_fdstat_set_flags(a.u32(0), a.u32(1)),
            FdFdstatSetRights => self.fd_fdstat_set_rights(a.u32(0), a.u64(1), a.u64(2)),
            FdFilestatGet => self.fd_filestat_get(m, a.u32(0), a.u32(1)),
            FdFilestatSetSize => self.fd_filestat_set_size(a.u32(0), a.u64(1)),
            FdFilestatSetTimes => {
                self.fd_filestat_set_times(a.u32(0), a.u64(1), a.u64(2), a.u32(3))
            }
            FdPread => self.fd_pread(m, a.u32(0), a.u32(1), a.u32(2), a.u64(3), a.u32(4)),
            FdPrestatGet => self.fd_prestat_get(m, a.u32(0), a.u32(1)),
            FdPrestatDirName => self.fd_prestat_dir_name(m, a.u32(0), a.u32(1), a.u32(2)),
            FdPwrite => self.fd_pwrite(m, a.u32(0), a.u32(1), a.u32(2), a.u64(3), a.u32(4)),
            FdRead => self.fd_read(m, a.u32(0), a.u32(1), a.u32(2), a.u32(3)),
            FdReaddir => self.fd_readdir(m, a.u32(0), a.u32(1), a.u32(2), a.u64(3), a.u32(4)),
            FdRenumber => self.fds.renumber(a.u32(0), a.u32(1)),
            FdSeek => self.fd_seek(m, a.u32(0), a.u64(1) as i64, a.u32(2), a.u32(3)),
            FdSync => self.fd_sync(a.u32(0), false),
            FdTell => self.fd_tell(m, a.u32(0), a.u32(1)),
            FdWrite => self.fd_write(m, a.u32(0), a.u32(1), a.u32(2), a.u32(3)),
            PathCreateDirectory => self.path_create_directory(m, a.u32(0), a.u32(1), a.u32(2)),
            PathFilestatGet => {
                self.path_filestat_get(m, a.u32(0), a.u32(1), a.u32(2), a.u32(3), a.u32(4))
            }
            PathFilestatSetTimes => self.path_filestat_set_times(
                m,
                a.u32(0),
                a.u32(1),
                (a.u32(2), a.u32(3)),
                a.u64(4),
                a.u64(5),
                a.u32(6),
            ),
            PathLink => self.path_link(
                m,
                (a.u32(0), a.u32(1)),
                (a.u32(2), a.u32(3)),
                a.u32(4),
                (a.u32(5), a.u32(6)),
            ),
            PathOpen => self.path_open(
                m,
                path::OpenRequest {
                    fd: a.u32(0),
                    lookup: a.u32(1),
                    path: (a.u32(2), a.u32(3)),
                    oflags: a.u32(4) as u16,
                    base: a.u64(5),
                    inheriting: a.u64(6),
                    fdflags: a.u32(7) as u16,
                },
                a.u32(8),
            ),
            PathReadlink => self.path_readlink(
                m,
                a.u32(0),
                (a.u32(1), a.u32(2)),
                (a.u32(3), a.u32(4)),
                a.u32(5),
            ),
            PathRemoveDirectory => self.path_remove(m, a.u32(0), a.u32(1), a.u32(2), true),
            PathRename => self.path_rename(
                m,
                a.u32(0),
                (a.u32(1), a.u32(2)),
                a.u32(3),
                (a.u32(4), a.u32(5)),
            ),
            PathSymlink => {
                self.path_symlink(m, (a.u32(0), a.u32(1)), a.u32(2), (a.u32(3), a.u32(4)))
            }
            PathUnlinkFile => self.path_remove(m, a.u32(0), a.u32(1), a.u32(2), false),
            PollOneoff => self.poll_oneoff(m, a.u32(0), a.u32(1), a.u32(2), a.u32(3)),
            ProcExit => Err(Fail::Stop(Stop::Exit(a.u32(0)))),
            ProcRaise => Err(Fail::Errno(errno::ENOSYS)),
            SchedYield => {
                self.waits.yield_now();
                Ok(())
            }
            RandomGet => process::random_get(m, a.u32(0), a.u32(1), &self.cancel),
            SockAccept | SockRecv | SockSend | SockShutdown => {
                self.fds.get(a.u32(0))?;
                Err(Fail::Errno(errno::ENOTSOCK))
            }
            HttpRequest | HttpReadResponse => Err(Fail::Errno(errno::ENOSYS)),
        }
    }
}

impl<S: Stdio> Wasi<S> {
    /// Whether the call may go on with the next piece of a host call's work: `Err(Abort)` once
    /// the cancel flag is set.
    fn go_on(&self) -> Result<(), Fail> {
        go_on(&self.cancel)
    }
}

/// [`Wasi::go_on`] for work that holds only the cancel flag.
fn go_on(cancel: &Cancel) -> Result<(), Fail> {
    if cancel.is_cancelled() {
        Err(Fail::Stop(Stop::Abort))
    } else {
        Ok(())
    }
}

/// An import's raw arguments; a missing one reads as 0 (engines always pass them all).
#[derive(Clone, Copy)]
struct Args<'a>(&'a [u64]);

impl Args<'_> {
    fn u64(self, index: usize) -> u64 {
        self.0.get(index).copied().unwrap_or(0)
    }

    fn u32(self, index: usize) -> u32 {
        self.u64(index) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::abi::rights;
    use super::errno::{EBADF, EIO, ENOSYS, ENOTSOCK};
    use super::testkit::{config, Guest, RESULT_AT};
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn args_and_environ_come_from_the_config() {
        let mut config = config(Vec::new(), Arc::new(WriteBudget::new(0)));
        config.env = vec!["A=1".into()];
        let mut guest = Guest::new(config);
        assert_eq!(guest.errno(Import::ArgsSizesGet, &[100, 104]), 0);
        assert_eq!((guest.u32_at(100), guest.u32_at(104)), (1, 6));
        assert_eq!(guest.errno(Import::ArgsGet, &[200, 300]), 0);
        assert_eq!(guest.u32_at(200), 300);
        assert_eq!(&guest.memory[300..306], b"greet\0");
        assert_eq!(guest.errno(Import::EnvironSizesGet, &[100, 104]), 0);
        assert_eq!((guest.u32_at(100), guest.u32_at(104)), (1, 4));
        assert_eq!(guest.errno(Import::EnvironGet, &[200, 400]), 0);
        assert_eq!(&guest.memory[400..404], b"A=1\0");
    }

    #[test]
    fn sockets_are_linked_but_no_fd_is_one() {
        let mut guest = Guest::new(config(Vec::new(), Arc::new(WriteBudget::new(0))));
        let calls: [(Import, &[u64]); 4] = [
            (Import::SockAccept, &[0, 0, 100]),
            (Import::SockRecv, &[0, 100, 1, 0, 104, 108]),
            (Import::SockSend, &[1, 100, 1, 0, 104]),
            (Import::SockShutdown, &[2, 3]),
        ];
        for (import, args) in calls {
            assert_eq!(guest.errno(import, args), ENOTSOCK, "{import:?}");
            let mut bad = args.to_vec();
            bad[0] = 40;
            assert_eq!(guest.errno(import, &bad), EBADF, "{import:?}");
        }
    }

    #[test]
    fn process_functions_answer_as_the_abi_says() {
        let mut guest = Guest::new(config(Vec::new(), Arc::new(WriteBudget::new(0))));
        assert_eq!(guest.call(Import::ProcExit, &[3]), Err(Stop::Exit(3)));
        assert_eq!(guest.call(Import::ProcRaise, &[9]), Ok(ENOSYS));
        assert_eq!(guest.call(Import::SchedYield, &[]), Ok(0));
        assert_eq!(guest.call(Import::HttpRequest, &[0, 0]), Ok(ENOSYS));
        assert_eq!(guest.call(Import::RandomGet, &[100, 32]), Ok(0));
        assert!(guest.memory[100..132].iter().any(|&byte| byte != 0));
    }

    #[test]
    fn a_cancelled_call_stops_at_any_import() {
        let config = config(Vec::new(), Arc::new(WriteBudget::new(0)));
        let cancel = Arc::clone(&config.cancel);
        let mut guest = Guest::new(config);
        assert_eq!(guest.call(Import::SchedYield, &[]), Ok(0));
        cancel.cancel();
        assert_eq!(guest.call(Import::SchedYield, &[]), Err(Stop::Abort));
        assert_eq!(guest.call(Import::RandomGet, &[100, 32]), Err(Stop::Abort));
        assert_eq!(
            guest.call(Import::ClockTimeGet, &[0, 1, 100]),
            Err(Stop::Abort)
        );
        assert_eq!(guest.call(Import::ProcExit, &[3]), Err(Stop::Abort));
    }

    #[test]
    fn a_lazy_preopen_opens_on_first_use_and_a_failure_is_eio() {
        let tmp = tempfile::tempdir().unwrap();
        let opened = Arc::new(AtomicBool::new(false));
        let (flag, path) = (opened.clone(), tmp.path().to_path_buf());
        let lazy = Preopen {
            guest_path: "/volume/tmp".into(),
            dir: PreopenDir::Lazy(Box::new(move || {
                flag.store(true, Ordering::SeqCst);
                cap_std::fs::Dir::open_ambient_dir(path, cap_std::ambient_authority())
            })),
            read_only: false,
        };
        let failing = Preopen {
            guest_path: "/volume/data".into(),
            dir: PreopenDir::Lazy(Box::new(|| Err(std::io::Error::other("gone")))),
            read_only: false,
        };
        let budget = Arc::new(WriteBudget::new(1 << 20));
        let mut guest = Guest::new(config(vec![lazy, failing], budget));
        assert_eq!(
            guest.errno(Import::FdPrestatGet, &[3, u64::from(RESULT_AT)]),
            0
        );
        assert_eq!(
            guest.errno(Import::FdFdstatGet, &[3, u64::from(RESULT_AT)]),
            0
        );
        assert!(!opened.load(Ordering::SeqCst));
        let fd = guest.create(3, "made").unwrap();
        assert!(opened.load(Ordering::SeqCst));
        assert_eq!(guest.write(fd, b"ok"), (0, 2));
        assert!(tmp.path().join("made").exists());
        assert_eq!(guest.open(4, true, "x", 0, rights::FD_READ), Err(EIO));
    }

    #[test]
    fn a_sandbox_can_move_to_the_thread_that_runs_the_guest() {
        fn assert_send<T: Send>() {}
        assert_send::<Wasi<testkit::TestStdio>>();
    }
}
