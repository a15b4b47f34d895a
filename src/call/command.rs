//! One run of a WASI preview 1 *command* (`hako run`): not an ABI call. The guest gets the
//! arguments, environment and preopens it is given, and the process's own standard streams,
//! streamed both ways: no JSON-RPC, no 1 MiB cap, nothing kept in memory. The run is still
//! bounded as a call is: by its time limit, memory cap and write budget, with the same
//! `subako_http` broker.
//!
//! A wait on a stream never outlasts the deadline: stdin is read, and stdout and stderr are
//! written, only once `poll(2)` says they are ready, in slices that look at the call's
//! [`Cancel`] flag, and writes go in pieces of at most `PIPE_BUF` bytes, which a pipe that
//! polls writable takes without blocking.
//!
//! It does not load the module (that is `store`) nor pick the exit status of the process
//! (that is the CLI); it says how the run ended.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cap_std::fs::Dir;
use hako_engine_api::{Module, RunExit, Stop};

use rustix::event::{PollFd, PollFlags};

use super::runner::{Bounds, Instance, Limits, Network, RunError, Sandbox};
use crate::http::{VolumeDirs, VolumeRoot};
use crate::sandbox::{Cancel, Preopen, PreopenDir, Stdio};

/// The longest a wait on a stream goes without looking at the cancellation flag.
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// The most bytes one `write(2)` to stdout or stderr carries: a pipe that polls writable has
/// room for this many, so the write cannot block past the deadline.
const WRITE_PIECE: usize = 4096;

/// A directory the command sees: opened by the caller, at `guest` in the order given.
pub struct Mount {
    /// The guest path, such as `/` or `/work`.
    pub guest: String,
    /// The host folder (kept to serve `subako_http` file bodies under `/volume/…`).
    pub host: PathBuf,
    pub dir: Dir,
}

/// What a command run is given.
pub struct Command {
    /// `argv`, from `argv[0]`.
    pub args: Vec<String>,
    /// `K=V` entries: exactly the guest's environment.
    pub env: Vec<String>,
    pub mounts: Vec<Mount>,
    pub limits: Limits,
    pub network: Network,
}

/// The process's standard streams, as the command uses them.
pub struct Streams {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

impl Streams {
    /// Duplicates of this process's fds 0, 1 and 2.
    pub fn of_process() -> std::io::Result<Streams> {
        Ok(Streams {
            stdin: std::io::stdin().as_fd().try_clone_to_owned()?,
            stdout: std::io::stdout().as_fd().try_clone_to_owned()?,
            stderr: std::io::stderr().as_fd().try_clone_to_owned()?,
        })
    }
}

/// How a command run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandExit {
    /// `_start` returned (0) or the guest called `proc_exit` with this status.
    Status(u32),
    Trap(String),
    /// The guest hit its memory cap.
    OutOfMemory(String),
    /// The time limit ran out.
    Timeout(Duration),
    /// Writing to stdout or stderr failed (a closed pipe: the reader went away), so the run
    /// was stopped.
    StreamFailed(StreamFailure),
}

/// A standard stream the guest could no longer write to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFailure {
    pub stream: OutputStream,
    pub error: rustix::io::Errno,
}

/// One of the guest's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl std::fmt::Display for OutputStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        })
    }
}

/// Runs `module`'s `_start` as a WASI command over `streams`.
pub fn run_command(
    module: &Arc<dyn Module>,
    command: Command,
    streams: Streams,
) -> Result<CommandExit, RunError> {
    let bounds = Bounds::start(command.limits, None);
    let mut volume = VolumeDirs::none();
    let mut preopens = Vec::with_capacity(command.mounts.len());
    for mount in command.mounts {
        match mount.guest.as_str() {
            "/volume/tmp" => volume.tmp = Some(VolumeRoot::existing(mount.host.clone())),
            "/volume/data" => volume.data = Some(VolumeRoot::existing(mount.host.clone())),
            _ => {}
        }
        preopens.push(Preopen {
            guest_path: mount.guest,
            dir: PreopenDir::Open(mount.dir),
            read_only: false,
        });
    }
    let stdio = ProcessStdio {
        streams,
        cancel: Arc::clone(&bounds.cancel),
        deadline: bounds.deadline,
        failed: None,
    };
    let sandbox = Sandbox {
        args: command.args,
        env: command.env,
        preopens,
        volume,
    };
    let ran = bounds.run(Instance::Fresh(module), sandbox, stdio, &command.network);
    let timed_out = bounds.timer.fired().is_some() || bounds.past_deadline();
    Ok(match ran.exit {
        RunExit::OutOfMemory(message) => CommandExit::OutOfMemory(message),
        _ if timed_out => CommandExit::Timeout(command.limits.timeout),
        RunExit::Returned => CommandExit::Status(0),
        RunExit::Exited(status) => CommandExit::Status(status),
        RunExit::Trap(message) => CommandExit::Trap(message),
        RunExit::Aborted | RunExit::Interrupted => match ran.stdio.failed {
            Some(failure) => CommandExit::StreamFailed(failure),
            None => CommandExit::Trap("the guest was stopped without a recorded reason".into()),
        },
        RunExit::Instantiate(message) => return Err(RunError::Instantiate(message)),
    })
}

/// The process's streams as the guest's fds 0, 1 and 2.
struct ProcessStdio {
    streams: Streams,
    cancel: Arc<Cancel>,
    deadline: Instant,
    failed: Option<StreamFailure>,
}

impl ProcessStdio {
    /// Waits until `fd` is ready for `flags` (or has hung up, or failed: the next read or
    /// write then says so), at most until `until` and never past the deadline. `Ok(false)`:
    /// the time ran out first.
    fn wait(&self, fd: BorrowedFd<'_>, flags: PollFlags, until: Instant) -> Result<bool, Stop> {
        let until = until.min(self.deadline);
        loop {
            if self.cancel.is_cancelled() {
                return Err(Stop::Abort);
            }
            let now = Instant::now();
            let slice = until.saturating_duration_since(now).min(WAIT_SLICE);
            let mut polled = [PollFd::from_borrowed_fd(fd, flags)];
            let timeout = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(slice.subsec_nanos()),
            };
            match rustix::event::poll(&mut polled, Some(&timeout)) {
                Ok(n) if n > 0 => return Ok(true),
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                // A stream poll cannot watch (none here, but the read or write will tell).
                Err(_) => return Ok(true),
            }
            if now + slice >= until {
                return Ok(false);
            }
        }
    }

    fn write(&mut self, stream: OutputStream, bytes: &[u8]) -> Result<(), Stop> {
        if self.failed.is_some() {
            return Err(Stop::Abort);
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            let fd = match stream {
                OutputStream::Stdout => self.streams.stdout.as_fd(),
                OutputStream::Stderr => self.streams.stderr.as_fd(),
            };
            if !self.wait(fd, PollFlags::OUT, self.deadline)? {
                return Err(Stop::Abort);
            }
            let piece = &rest[..rest.len().min(WRITE_PIECE)];
            match rustix::io::write(fd, piece) {
                Ok(written) => rest = &rest[written..],
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(error) => {
                    self.failed = Some(StreamFailure { stream, error });
                    return Err(Stop::Abort);
                }
            }
        }
        Ok(())
    }
}

impl Stdio for ProcessStdio {
    fn read_stdin(&mut self, buf: &mut [u8]) -> Result<usize, Stop> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.wait(self.streams.stdin.as_fd(), PollFlags::IN, self.deadline)? {
                return Err(Stop::Abort);
            }
            match rustix::io::read(&self.streams.stdin, &mut *buf) {
                Ok(read) => return Ok(read),
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                // A stdin that cannot be read (a directory, a closed terminal) reads as its end.
                Err(_) => return Ok(0),
            }
        }
    }

    fn stdin_ready(&self) -> bool {
        let mut polled = [PollFd::new(&self.streams.stdin, PollFlags::IN)];
        let now = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        !matches!(rustix::event::poll(&mut polled, Some(&now)), Ok(0))
    }

    fn stdin_would_block(&mut self) -> Stop {
        // Not reached: `wait_stdin` always waits.
        Stop::Abort
    }

    fn wait_stdin(&mut self, until: Option<Instant>) -> Result<bool, Stop> {
        self.wait(
            self.streams.stdin.as_fd(),
            PollFlags::IN,
            until.unwrap_or(self.deadline),
        )?;
        Ok(true)
    }

    fn write_stdout(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        self.write(OutputStream::Stdout, bytes)
    }

    fn write_stderr(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        self.write(OutputStream::Stderr, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{PipeReader, PipeWriter, Write};

    /// A `ProcessStdio` over three pipes, and the far ends: stdin's writer, stdout's and
    /// stderr's readers.
    fn stdio(deadline: Instant) -> (ProcessStdio, PipeWriter, PipeReader, PipeReader) {
        let (stdin, to_stdin) = std::io::pipe().unwrap();
        let (from_stdout, stdout) = std::io::pipe().unwrap();
        let (from_stderr, stderr) = std::io::pipe().unwrap();
        let stdio = ProcessStdio {
            streams: Streams {
                stdin: stdin.into(),
                stdout: stdout.into(),
                stderr: stderr.into(),
            },
            cancel: Arc::new(Cancel::new()),
            deadline,
            failed: None,
        };
        (stdio, to_stdin, from_stdout, from_stderr)
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    #[test]
    fn stdin_is_read_as_it_comes_and_its_end_is_zero() {
        let (mut stdio, mut to_stdin, _out, _err) = stdio(far());
        assert!(!stdio.stdin_ready());
        to_stdin.write_all(b"hi").unwrap();
        assert!(stdio.stdin_ready());
        let mut buf = [0u8; 16];
        assert_eq!(stdio.read_stdin(&mut buf), Ok(2));
        assert_eq!(&buf[..2], b"hi");
        drop(to_stdin);
        assert_eq!(stdio.read_stdin(&mut buf), Ok(0));
    }

    #[test]
    fn a_read_of_an_open_empty_stdin_stops_when_the_call_is_cancelled() {
        let (mut stdio, _to_stdin, _out, _err) = stdio(far());
        let cancel = Arc::clone(&stdio.cancel);
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            cancel.cancel();
        });
        assert_eq!(stdio.read_stdin(&mut [0u8; 16]), Err(Stop::Abort));
        canceller.join().unwrap();
    }

    #[test]
    fn a_write_to_a_pipe_nobody_reads_stops_at_the_deadline() {
        // A pipe holds 64 KiB: 1 MiB cannot be written, and the write must not block past
        // the deadline.
        let (mut stdio, _to_stdin, _out, _err) = stdio(Instant::now() + Duration::from_millis(100));
        assert_eq!(stdio.write_stdout(&vec![7u8; 1 << 20]), Err(Stop::Abort));
        assert_eq!(stdio.failed, None, "a deadline is no stream failure");
    }

    #[test]
    fn a_closed_stdout_is_a_stream_failure_and_ends_every_later_write() {
        let (mut stdio, _to_stdin, out, _err) = stdio(far());
        drop(out);
        assert_eq!(stdio.write_stdout(b"lost"), Err(Stop::Abort));
        let failure = stdio.failed.clone().expect("the failure is kept");
        assert_eq!(failure.stream, OutputStream::Stdout);
        assert_eq!(failure.error, rustix::io::Errno::PIPE);
        assert_eq!(stdio.write_stderr(b"also"), Err(Stop::Abort));
    }

    #[test]
    fn waiting_on_stdin_ends_at_its_clock() {
        let (mut stdio, _to_stdin, _out, _err) = stdio(far());
        let until = Instant::now() + Duration::from_millis(30);
        assert_eq!(stdio.wait_stdin(Some(until)), Ok(true));
        assert!(Instant::now() >= until);
        assert!(!stdio.stdin_ready());
    }
}
