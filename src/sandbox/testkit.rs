//! Test support for the sandbox: a scripted [`Stdio`], a guest with temporary preopens and a
//! `Vec<u8>` as its memory, and shorthands for the calls tests make most. Used only by the
//! unit tests.

use super::abi::{oflags, rights};
use super::{Cancel, Preopen, PreopenDir, SandboxConfig, Stdio, Wasi, WriteBudget};
use cap_std::fs::Dir;
use hako_engine_api::{Import, Stop};
use std::path::Path;
use std::sync::Arc;

/// Standard streams from and into byte vectors. Stdin is ready while it holds bytes, or once
/// `stdin_closed` (end of file).
#[derive(Default)]
pub struct TestStdio {
    pub stdin: Vec<u8>,
    pub stdin_closed: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub would_block: bool,
}

impl Stdio for TestStdio {
    fn read_stdin(&mut self, buf: &mut [u8]) -> Result<usize, Stop> {
        if self.stdin.is_empty() && !self.stdin_closed {
            return Err(Stop::Abort);
        }
        let take = buf.len().min(self.stdin.len());
        buf[..take].copy_from_slice(&self.stdin[..take]);
        self.stdin.drain(..take);
        Ok(take)
    }

    fn stdin_ready(&self) -> bool {
        !self.stdin.is_empty() || self.stdin_closed
    }

    fn stdin_would_block(&mut self) -> Stop {
        self.would_block = true;
        Stop::Abort
    }

    fn write_stdout(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        self.stdout.extend_from_slice(bytes);
        Ok(())
    }

    fn write_stderr(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        self.stderr.extend_from_slice(bytes);
        Ok(())
    }
}

/// Where tests put things in guest memory.
pub const PATH_AT: u32 = 1024;
pub const PATH2_AT: u32 = 2048;
pub const IOVEC_AT: u32 = 3072;
pub const RESULT_AT: u32 = 3584;
pub const DATA_AT: u32 = 4096;
pub const MEMORY_SIZE: usize = 65536;

/// A sandbox with its memory.
pub struct Guest {
    pub wasi: Wasi<TestStdio>,
    pub memory: Vec<u8>,
}

/// A preopen of an existing host directory.
pub fn preopen(guest_path: &str, host: &Path, read_only: bool) -> Preopen {
    let dir = Dir::open_ambient_dir(host, cap_std::ambient_authority()).unwrap();
    Preopen {
        guest_path: guest_path.into(),
        dir: PreopenDir::Open(dir),
        read_only,
    }
}

pub fn config(preopens: Vec<Preopen>, budget: Arc<WriteBudget>) -> SandboxConfig {
    SandboxConfig {
        args: vec!["greet".into()],
        env: Vec::new(),
        preopens,
        budget,
        cancel: Arc::new(Cancel::new()),
        deadline: None,
        waits: Arc::new(super::Waits::default()),
    }
}

impl Guest {
    pub fn new(config: SandboxConfig) -> Self {
        Self {
            wasi: Wasi::new(config, TestStdio::default()),
            memory: vec![0u8; MEMORY_SIZE],
        }
    }

    /// A guest with one writable preopen `/volume/tmp` (fd 3) over `host`.
    pub fn with_dir(host: &Path) -> Self {
        let budget = Arc::new(WriteBudget::new(1 << 30));
        Self::new(config(vec![preopen("/volume/tmp", host, false)], budget))
    }

    pub fn call(&mut self, import: Import, args: &[u64]) -> Result<i32, Stop> {
        self.wasi.call(import, args, &mut self.memory)
    }

    /// Calls and expects an errno, not a stop.
    pub fn errno(&mut self, import: Import, args: &[u64]) -> i32 {
        self.call(import, args).unwrap()
    }

    pub fn put(&mut self, at: u32, bytes: &[u8]) {
        self.memory[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
    }

    pub fn u32_at(&self, at: u32) -> u32 {
        u32::from_le_bytes(
            self.memory[at as usize..at as usize + 4]
                .try_into()
                .unwrap(),
        )
    }

    pub fn u64_at(&self, at: u32) -> u64 {
        u64::from_le_bytes(
            self.memory[at as usize..at as usize + 8]
                .try_into()
                .unwrap(),
        )
    }

    /// Puts `path` at `at` and returns its pointer and length as call arguments.
    pub fn path_at(&mut self, at: u32, path: &str) -> [u64; 2] {
        self.put(at, path.as_bytes());
        [u64::from(at), path.len() as u64]
    }

    /// `path_open` with the usual arguments; the new fd, or the errno.
    pub fn open(
        &mut self,
        dir_fd: u32,
        follow: bool,
        path: &str,
        oflags: u16,
        base: u64,
    ) -> Result<u32, i32> {
        let [ptr, len] = self.path_at(PATH_AT, path);
        let args = [
            u64::from(dir_fd),
            u64::from(follow),
            ptr,
            len,
            u64::from(oflags),
            base,
            rights::FILE | rights::DIRECTORY,
            0,
            u64::from(RESULT_AT),
        ];
        match self.errno(Import::PathOpen, &args) {
            0 => Ok(self.u32_at(RESULT_AT)),
            errno => Err(errno),
        }
    }

    /// Creates (or truncates) `path` for writing.
    pub fn create(&mut self, dir_fd: u32, path: &str) -> Result<u32, i32> {
        let oflags = oflags::CREAT | oflags::TRUNC;
        self.open(dir_fd, true, path, oflags, rights::FILE)
    }

    /// `fd_write` of `bytes` in one ciovec; the errno and the count written.
    pub fn write(&mut self, fd: u32, bytes: &[u8]) -> (i32, u32) {
        self.put(DATA_AT, bytes);
        self.put(IOVEC_AT, &DATA_AT.to_le_bytes());
        self.put(IOVEC_AT + 4, &(bytes.len() as u32).to_le_bytes());
        self.put(RESULT_AT, &[0; 4]);
        let args = [u64::from(fd), u64::from(IOVEC_AT), 1, u64::from(RESULT_AT)];
        let errno = self.errno(Import::FdWrite, &args);
        (errno, self.u32_at(RESULT_AT))
    }

    /// `fd_read` of up to `len` bytes in one iovec; the errno and the bytes read.
    pub fn read(&mut self, fd: u32, len: u32) -> (i32, Vec<u8>) {
        self.put(IOVEC_AT, &DATA_AT.to_le_bytes());
        self.put(IOVEC_AT + 4, &len.to_le_bytes());
        let args = [u64::from(fd), u64::from(IOVEC_AT), 1, u64::from(RESULT_AT)];
        let errno = self.errno(Import::FdRead, &args);
        let read = if errno == 0 {
            self.u32_at(RESULT_AT)
        } else {
            0
        };
        let start = DATA_AT as usize;
        (errno, self.memory[start..start + read as usize].to_vec())
    }
}
