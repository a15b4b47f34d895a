//! The guest's stdio during one run: the request already waiting on stdin, stdout read line
//! by line against the request the host is waiting for, stderr kept to its last 4 KiB, and the
//! first crash the lines earn. It implements [`Stdio`] for the sandbox and drives a
//! [`Conversation`] (one `tools/call`, or discovery's sequence), sending the next request only
//! once the last one is answered and closing stdin after the last answer.
//!
//! Decisions written down here:
//! - A guest that waits for more stdin before it has answered could only be woken by the
//!   call's time limit (one request at a time, and stdin stays open until it is answered), so
//!   the wait ends the call at once as `timeout` instead of holding a guest thread until then.
//! - A last stdout line without its `\n` when the guest exits is still read as a line.
//! - Lines after the last answer are checked like any other: a notification is ignored, an
//!   answer is `unknown_id`, a request is `guest_request`, anything else `not_jsonrpc`.
//!
//! It does not decide how the run ended (exit, trap, deadline): that is the runner's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hako_engine_api::Stop;
use simd_json::BorrowedValue;

use super::deadline::{CallTimer, DeadlineKind};
use super::outcome::{Crash, CrashKind};
use crate::protocol::{self, Answer, Line, LineError, RequestId};
use crate::sandbox::Stdio;

/// Stdout a call may write, inline images included.
pub const STDOUT_LIMIT: u64 = 1024 * 1024;
/// The stderr a crash report keeps.
pub const STDERR_TAIL: usize = 4096;
/// How long a guest has to exit once stdin is closed.
pub const EXIT_GRACE: Duration = Duration::from_secs(1);

/// What the host says next, given the guest's answer to the last request.
pub enum Next {
    /// Send this request (its id and its line).
    Request(RequestId, Vec<u8>),
    /// The conversation is over: close stdin.
    Done,
}

/// The requests of one run, in order. Implementations keep what the answers told them.
pub trait Conversation: Send {
    /// The first request, already waiting on stdin when the guest starts.
    fn first(&mut self) -> (RequestId, Vec<u8>);
    /// The guest answered the outstanding request with `result`.
    fn answered(&mut self, result: &BorrowedValue<'_>) -> Result<Next, Crash>;
}

/// The guest's stdio for one run.
pub struct Session<C> {
    conversation: C,
    timer: Arc<CallTimer>,
    stdin: Vec<u8>,
    stdin_read: usize,
    /// The id the host waits for; `None` once the conversation is over.
    expected: Option<RequestId>,
    done: bool,
    line: Vec<u8>,
    stdout_bytes: u64,
    stderr: Vec<u8>,
    stderr_bytes: u64,
    crash: Option<Crash>,
}

impl<C: Conversation> Session<C> {
    pub fn new(mut conversation: C, timer: Arc<CallTimer>) -> Self {
        let (id, request) = conversation.first();
        Self {
            conversation,
            timer,
            stdin: request,
            stdin_read: 0,
            expected: Some(id),
            done: false,
            line: Vec::new(),
            stdout_bytes: 0,
            stderr: Vec::new(),
            stderr_bytes: 0,
            crash: None,
        }
    }

    /// Whether every request was answered.
    pub fn finished(&self) -> bool {
        self.done
    }

    /// The first crash the guest's stdio earned, if any.
    pub fn crash(&self) -> Option<&Crash> {
        self.crash.as_ref()
    }

    /// Records a crash unless an earlier one is known; the first reason stands.
    pub fn record(&mut self, crash: Crash) {
        self.crash.get_or_insert(crash);
    }

    /// Reads the last line if the guest left it without a newline. Called once the guest
    /// has stopped.
    pub fn flush_partial_line(&mut self) {
        if self.crash.is_none() && !self.line.is_empty() {
            let mut line = std::mem::take(&mut self.line);
            self.take_line(&mut line);
        }
    }

    /// The last 4 KiB of stderr, as text (invalid UTF-8 replaced).
    pub fn stderr_tail(&self) -> String {
        let start = self.stderr.len().saturating_sub(STDERR_TAIL);
        let mut tail = &self.stderr[start..];
        // Do not start inside a UTF-8 sequence that the cut split.
        if start > 0 || self.stderr_bytes > self.stderr.len() as u64 {
            while let [first, rest @ ..] = tail {
                if first & 0xC0 != 0x80 {
                    break;
                }
                tail = rest;
            }
        }
        String::from_utf8_lossy(tail).into_owned()
    }

    pub fn stdout_bytes(&self) -> u64 {
        self.stdout_bytes
    }

    pub fn stderr_bytes(&self) -> u64 {
        self.stderr_bytes
    }

    /// The conversation, to take what it learned.
    pub fn conversation_mut(&mut self) -> &mut C {
        &mut self.conversation
    }

    /// Takes the conversation back, with what it learned.
    pub fn into_conversation(self) -> C {
        self.conversation
    }

    fn fail(&mut self, kind: CrashKind, message: impl Into<String>) -> Stop {
        self.record(Crash::new(kind, message));
        Stop::Abort
    }

    fn waiting_on_stdin(&mut self) -> Stop {
        self.fail(
            CrashKind::Timeout,
            "the guest waited for more input on stdin before answering the request; \
             with one request at a time that wait could only end at the call's time limit",
        )
    }

    /// One complete stdout line (without its `\n`).
    fn take_line(&mut self, line: &mut [u8]) {
        let conversation = &mut self.conversation;
        let outcome = protocol::parse_line(line, self.expected.as_ref(), |line| match line {
            Ok(Line::Notification) => None,
            Ok(Line::Answer(Answer::Error { code, message })) => Some(Err(Crash::new(
                CrashKind::JsonrpcError,
                format!("the function answered with a JSON-RPC error {code}: {message}"),
            ))),
            Ok(Line::Answer(Answer::Result(result))) => Some(conversation.answered(&result)),
            Err(LineError::NotJsonRpc(why)) => Some(Err(Crash::new(CrashKind::NotJsonrpc, why))),
            Err(LineError::UnknownId(why)) => Some(Err(Crash::new(CrashKind::UnknownId, why))),
            Err(LineError::GuestRequest(why)) => {
                Some(Err(Crash::new(CrashKind::GuestRequest, why)))
            }
        });
        let Some(outcome) = outcome else {
            return;
        };
        match outcome {
            Err(crash) => self.record(crash),
            Ok(Next::Request(id, request)) => {
                self.expected = Some(id);
                self.stdin = request;
                self.stdin_read = 0;
            }
            Ok(Next::Done) => {
                self.expected = None;
                self.done = true;
                self.timer
                    .shorten(Instant::now() + EXIT_GRACE, DeadlineKind::ExitAfterEof);
            }
        }
    }
}

impl<C: Conversation> Stdio for Session<C> {
    fn read_stdin(&mut self, buf: &mut [u8]) -> Result<usize, Stop> {
        if self.crash.is_some() {
            return Err(Stop::Abort);
        }
        let waiting = &self.stdin[self.stdin_read..];
        if !waiting.is_empty() {
            let n = waiting.len().min(buf.len());
            buf[..n].copy_from_slice(&waiting[..n]);
            self.stdin_read += n;
            return Ok(n);
        }
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        Err(self.waiting_on_stdin())
    }

    fn stdin_ready(&self) -> bool {
        self.done || self.stdin_read < self.stdin.len()
    }

    fn stdin_would_block(&mut self) -> Stop {
        self.waiting_on_stdin()
    }

    fn write_stdout(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        if self.crash.is_some() {
            return Err(Stop::Abort);
        }
        self.stdout_bytes += bytes.len() as u64;
        if self.stdout_bytes > STDOUT_LIMIT {
            return Err(self.fail(
                CrashKind::StdoutLimit,
                format!("stdout passed its limit of {STDOUT_LIMIT} bytes"),
            ));
        }
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&byte| byte == b'\n') {
            let mut line = std::mem::take(&mut self.line);
            line.extend_from_slice(&rest[..end]);
            self.take_line(&mut line);
            line.clear();
            self.line = line;
            rest = &rest[end + 1..];
            if self.crash.is_some() {
                return Err(Stop::Abort);
            }
        }
        self.line.extend_from_slice(rest);
        Ok(())
    }

    fn write_stderr(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        self.stderr_bytes += bytes.len() as u64;
        let keep = bytes.len().min(STDERR_TAIL);
        self.stderr.extend_from_slice(&bytes[bytes.len() - keep..]);
        if self.stderr.len() > 2 * STDERR_TAIL {
            let cut = self.stderr.len() - STDERR_TAIL;
            self.stderr.drain(..cut);
        }
        Ok(())
    }
}
