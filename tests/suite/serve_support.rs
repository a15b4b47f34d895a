//! What the `hako serve` tests share: a store with packages uploaded by the `hako` binary, a
//! server process started on a loopback port the system picks (the port is read from the
//! one line it prints), a minimal HTTP/1.1 client over `std::net::TcpStream`, and a reader of
//! Server-Sent Events. Everything talks to 127.0.0.1 only.
//!
//! It does not assert anything about the server's answers; the tests do.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;

/// The `hako` binary under test (through the tests' runner, see `support::hako_command`).
pub fn hako() -> Command {
    support::hako_command()
}

/// The work in `store`'s staging folder: every file below a process's lease folder, as
/// `<lease>/<path>` (the leases' lock files and folders themselves are not work).
pub fn staged(store: &Path) -> Vec<String> {
    fn files(dir: &Path, prefix: &str, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.path().is_dir() {
                files(&entry.path(), &format!("{name}/"), found);
            } else {
                found.push(name);
            }
        }
    }
    let mut found = Vec::new();
    for lease in std::fs::read_dir(store.join("staging"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if lease.path().is_dir() {
            let prefix = format!("{}/", lease.file_name().to_string_lossy());
            files(&lease.path(), &prefix, &mut found);
        }
    }
    found.sort();
    found
}

/// Raises this process's soft limit on open descriptors to at least `at_least` (within its
/// hard limit), for tests that hold many connections.
pub fn raise_descriptor_limit(at_least: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.map_or(at_least, |hard| hard.min(at_least));
    if limit.current.is_some_and(|soft| soft < wanted) {
        limit.current = Some(wanted);
        setrlimit(Resource::Nofile, limit).expect("the soft descriptor limit can be raised");
    }
    let soft = getrlimit(Resource::Nofile).current;
    assert!(
        soft.is_none_or(|soft| soft >= at_least),
        "this test needs {at_least} descriptors; the hard limit allows {soft:?}"
    );
}

/// The head of `POST /v1/packages` declaring a body of `length` bytes.
pub fn upload_head(length: usize) -> String {
    format!("POST /v1/packages HTTP/1.1\r\nHost: localhost\r\nContent-Length: {length}\r\n\r\n")
}

/// Starts uploading `archive` to `server` and sends half of it, then waits until the body is
/// in the store's staging folder; the connection is left open with the rest unsent.
pub fn half_upload(server: &Server, store: &Path, archive: &[u8]) -> TcpStream {
    let mut upload = TcpStream::connect(server.addr).expect("the server accepts");
    upload
        .write_all(upload_head(archive.len()).as_bytes())
        .expect("the head is sent");
    upload
        .write_all(&archive[..archive.len() / 2])
        .expect("half the body is sent");
    server.wait_until("the body is in the staging folder", |_| {
        staged(store).len() == 1
    });
    upload
}

/// Runs `hako upload DIR --store STORE` and panics with its stderr if it fails.
pub fn upload(store: &Path, package: &Path) {
    let output = hako()
        .args(["upload", "--store"])
        .arg(store)
        .arg(package)
        .output()
        .expect("hako runs");
    assert!(
        output.status.success(),
        "hako upload {} failed: {}",
        package.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A fresh store holding `greet` (the bundled example) and `fixture` (the fixture guest).
pub fn store() -> tempfile::TempDir {
    let store = tempfile::Builder::new()
        .prefix("hako-serve-store-")
        .tempdir()
        .expect("a temp dir");
    upload(store.path(), &support::greet_package_dir());
    let fixture = support::fixture_package("fixture", None);
    upload(store.path(), fixture.path());
    store
}

/// A running `hako serve`; killed when dropped unless it was stopped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    /// Starts `hako serve --store STORE --listen 127.0.0.1:0 ARGS…` and waits for its line.
    pub fn start(store: &Path, args: &[&str]) -> Server {
        Server::start_with(store, args, &[])
    }

    /// Like [`Server::start`], with environment variables.
    pub fn start_with(store: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_logging(store, args, env, Stdio::inherit())
    }

    /// Like [`Server::start_with`], with the server's log (its stderr) going to `log`.
    pub fn start_logging(
        store: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: impl Into<Stdio>,
    ) -> Server {
        Server::launch(hako(), store, args, env, log)
    }

    /// Like [`Server::start_logging`], with `program` as the `hako` to start (a build with
    /// LLVM's tests start a `hako` without its worker beside it).
    #[cfg(feature = "llvm")]
    pub fn start_program(
        program: &Path,
        store: &Path,
        args: &[&str],
        log: impl Into<Stdio>,
    ) -> Server {
        Server::launch(Command::new(program), store, args, &[], log)
    }

    /// Like [`Server::start_logging`], with at most `descriptors` open descriptors (its soft
    /// and hard limits, set by util-linux's `prlimit`).
    pub fn start_limited(
        store: &Path,
        args: &[&str],
        descriptors: u64,
        log: impl Into<Stdio>,
    ) -> Server {
        let mut command = Command::new("prlimit");
        command
            .arg(format!("--nofile={descriptors}:{descriptors}"))
            .arg("--")
            .args(support::hako_argv());
        Server::launch(command, store, args, &[], log)
    }

    /// Runs `command` (which starts `hako`) with `serve` and its arguments.
    fn launch(
        mut command: Command,
        store: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        log: impl Into<Stdio>,
    ) -> Server {
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(store)
            .args(args)
            // No access record per call unless a test asks for it: the tests' output stays
            // readable.
            .env("HAKO_LOG", "warn")
            .env_remove("HAKO_TOKEN")
            .env_remove("HAKO_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("hako serve starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("hako serve prints a line");
        let addr = line
            .trim()
            .strip_prefix("hako: listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("the line names an address");
        Server {
            child,
            addr,
            stdout,
        }
    }

    /// One request on its own connection.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        request(self.addr, method, path, headers, body)
    }

    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[], b"")
    }

    pub fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.request(
            "POST",
            path,
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        )
    }

    /// The value of one metric line, such as `hako_calls_in_flight`.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").text();
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
            .parse()
            .expect("a number")
    }

    /// Waits, up to 20 s, until `condition` holds; the server's state is what is awaited.
    pub fn wait_until(&self, what: &str, mut condition: impl FnMut(&Server) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !condition(self) {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let status = self.child.wait().expect("hako serve exits");
        let mut rest = String::new();
        let _ = self.stdout.read_to_string(&mut rest);
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|err| panic!("not JSON ({err}): {}", self.text()))
    }
}

pub fn write_request(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n");
    for (key, value) in headers {
        head.push_str(&format!("{key}: {value}\r\n"));
    }
    if method != "GET" || !body.is_empty() {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .expect("the request is sent");
    // A server may answer before it reads a body (401, 403, 503) and close the connection: the
    // rest of the body then breaks the write, and the answer is still there to read.
    if let Err(err) = stream.write_all(body) {
        let early = matches!(
            err.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        );
        assert!(early, "the body is not sent: {err}");
    }
}

pub fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("a status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("a header line");
        let line = line.trim_end();
        if line.is_empty() {
            return (status, headers);
        }
        if let Some((key, value)) = line.split_once(':') {
            headers.push((key.trim().to_string(), value.trim().to_string()));
        }
    }
}

/// `POST /v1/packages/PACKAGE/call` with `body`, on a thread of its own.
pub fn send(addr: SocketAddr, package: &str, body: Value) -> JoinHandle<Reply> {
    let path = format!("/v1/packages/{package}/call");
    std::thread::spawn(move || request(addr, "POST", &path, &[], body.to_string().as_bytes()))
}

/// One request on a new connection to `addr`, read to the end of its body.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("the server accepts");
    write_request(&mut stream, method, path, headers, body);
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).expect("a chunk size");
            let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).expect("a chunk");
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        reader.read_to_end(&mut body).expect("the body");
    }
    Reply {
        status,
        headers,
        body,
    }
}

/// An open Server-Sent Events stream.
pub struct EventStream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    /// Bytes read past the last whole line.
    pending: Vec<u8>,
}

/// One thing read from an event stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Sse {
    Event { name: String, data: String },
    Comment(String),
}

impl EventStream {
    /// `GET path` with `Accept: text/event-stream`.
    pub fn open(addr: SocketAddr, path: &str) -> EventStream {
        EventStream::open_with(addr, path, &[])
    }

    /// [`EventStream::open`] with more headers.
    pub fn open_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> EventStream {
        let mut stream = TcpStream::connect(addr).expect("the server accepts");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a read timeout");
        let extra: String = headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\r\n"))
            .collect();
        let head = format!(
            "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: text/event-stream\r\n{extra}\r\n"
        );
        stream
            .write_all(head.as_bytes())
            .expect("the request is sent");
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader);
        EventStream {
            status,
            headers,
            reader,
            pending: Vec::new(),
        }
    }

    fn chunked(&self) -> bool {
        self.headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"))
    }

    /// The next line of the stream's text, across chunk boundaries.
    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Some(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            if self.chunked() {
                let mut size = String::new();
                if self.reader.read_line(&mut size).ok()? == 0 {
                    return None;
                }
                let size = usize::from_str_radix(size.trim(), 16).ok()?;
                if size == 0 {
                    return None;
                }
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk).ok()?;
                self.pending.extend_from_slice(&chunk[..size]);
            } else {
                let mut bytes = [0u8; 1024];
                let read = self.reader.read(&mut bytes).ok()?;
                if read == 0 {
                    return None;
                }
                self.pending.extend_from_slice(&bytes[..read]);
            }
        }
    }

    /// The next event or comment; `None` when the stream ended.
    pub fn next(&mut self) -> Option<Sse> {
        let (mut name, mut data) = (String::new(), None::<String>);
        loop {
            let line = self.line()?;
            if line.is_empty() {
                if let Some(data) = data.take() {
                    return Some(Sse::Event { name, data });
                }
                continue;
            }
            if let Some(comment) = line.strip_prefix(':') {
                if data.is_none() && name.is_empty() {
                    return Some(Sse::Comment(comment.trim().to_string()));
                }
            } else if let Some(value) = line.strip_prefix("event: ") {
                name = value.to_string();
            } else if let Some(value) = line.strip_prefix("data: ") {
                data = Some(value.to_string());
            }
        }
    }

    /// The next event, skipping comments.
    pub fn next_event(&mut self) -> (String, String) {
        loop {
            match self.next() {
                Some(Sse::Event { name, data }) => return (name, data),
                Some(Sse::Comment(_)) => continue,
                None => panic!("the event stream ended"),
            }
        }
    }
}

/// Runs `hako serve --stdio PACKAGE --store STORE` with `input` on stdin, to its exit.
pub fn stdio(store: &Path, package: &str, input: &[u8]) -> Output {
    stdio_with(store, package, &[], input)
}

/// [`stdio`] with more arguments.
pub fn stdio_with(store: &Path, package: &str, args: &[&str], input: &[u8]) -> Output {
    let mut child = hako()
        .args(["serve", "--store"])
        .arg(store)
        .args(["--stdio", package])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hako serve --stdio starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().expect("hako serve --stdio exits");
    writer.join().expect("the writer thread ends");
    output
}

/// The lines of a stdio run's stdout, each parsed as JSON.
pub fn stdout_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect()
}
