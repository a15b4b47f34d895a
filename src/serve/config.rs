//! How a server runs: every setting of `hako serve`, with its defaults.
//!
//! What this file does not do: read flags (the CLI does) or act on the settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{calls, follow, roles};
use crate::compile::CompileBounds;
use crate::engines::EngineConfig;

/// Calls in flight by default: far more than cores, since most calls wait (on the network, or
/// a sleep) and a waiting call holds no core.
pub const DEFAULT_MAX_CALLS: usize = 1024;

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub store: PathBuf,
    pub listen: SocketAddr,
    /// The tokens requests must carry (every route but `/healthz`), with their roles; none:
    /// every route open.
    pub tokens: roles::Tokens,
    /// Origins allowed beside loopback ones (`*`: any).
    pub allowed_origins: Vec<String>,
    /// Names a request's `Host` may give beside the listener's own (see [`super::hosts`]).
    pub allowed_hosts: Vec<String>,
    pub policy: Option<PathBuf>,
    /// The engine and compiler whose code runs.
    pub engine: EngineConfig,
    /// Run permits of each package: how many of its calls compute at once (a call waiting in
    /// a host call holds none).
    pub workers: usize,
    /// Calls in flight, every package together: admitted and not yet done; beyond, 503.
    pub max_calls: usize,
    /// Calls in flight of one package; beyond, 503 while the rest of `max_calls` stays open to
    /// the others. `None`: three quarters of `max_calls`.
    pub max_calls_per_package: Option<usize>,
    /// Threads of the front end (connections, parsing, answers), beside the call threads.
    pub http_threads: usize,
    /// The most instances made ahead of their calls held at once: each call thread, after a
    /// call's answer is sent, makes one of the module it ran for its next call, while fewer
    /// than this are held (0: none is made).
    pub ready_instances: usize,
    /// Whether quick calls run on the front end's thread that read them ([`calls::SLICE`]).
    pub inline: bool,
    /// What the loaded modules kept in memory may weigh together (their artifacts' sizes).
    pub module_cache_bytes: u64,
    /// The largest JSON request body (MCP messages, calls).
    pub max_body_bytes: usize,
    /// The largest upload (a package archive).
    pub max_upload_bytes: usize,
    /// How long an SSE stream may be idle before a keepalive comment.
    pub keepalive: Duration,
    /// How long a stop waits for in-flight requests and calls.
    pub drain: Duration,
    /// The most limits a caller may ask for (default: the call defaults).
    pub caps: calls::LimitCaps,
    /// How long a request's whole body may take to arrive.
    pub body_timeout: Duration,
    /// The bytes all uploads may hold at once.
    pub max_upload_in_flight: u64,
    /// How long a connection may take to send a request's headers, and so how long a
    /// kept-alive connection may stay idle.
    pub idle_timeout: Duration,
    /// How long a response (or an SSE stream) may go without the client taking any of its
    /// bytes before the connection is closed.
    pub write_timeout: Duration,
    /// Connections open at once; `None`: sized from the descriptor limit.
    pub max_connections: Option<usize>,
    /// Descriptors every guest together may hold; `None`: sized from the calls in flight.
    pub max_guest_descriptors: Option<usize>,
    /// The bucket the store (then a cache folder) follows, if any.
    pub follow: Option<follow::FollowConfig>,
    /// The bounds of every compile (uploads, and calls that find no artifact).
    pub compile: CompileBounds,
    /// How uploads by reference reach registries (credentials, plain HTTP, CAs).
    pub registry: crate::registry::Options,
}

impl ServeConfig {
    /// The defaults for a store: loopback port 7340, no token, one run permit per core for
    /// each package, 1,024 calls in flight, one front-end thread per core (quick calls run on
    /// them), 4 MiB bodies, 128 MiB uploads, 15 s keepalives, 45 s drain (longer than a call's
    /// default 30 s limit), 30 s for a request's headers, its body and a stalled write each.
    pub fn new(store: PathBuf) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let mut config = Self {
            store,
            listen: SocketAddr::from(([127, 0, 0, 1], 7340)),
            tokens: roles::Tokens::none(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            policy: None,
            engine: EngineConfig::DEFAULT,
            workers: cores,
            max_calls: DEFAULT_MAX_CALLS,
            max_calls_per_package: None,
            http_threads: cores,
            ready_instances: 0,
            inline: true,
            module_cache_bytes: crate::store::DEFAULT_CACHE_BYTES,
            max_body_bytes: 4 * 1024 * 1024,
            max_upload_bytes: 128 * 1024 * 1024,
            keepalive: Duration::from_secs(15),
            drain: Duration::from_secs(45),
            caps: calls::LimitCaps::default(),
            compile: CompileBounds::DEFAULT,
            body_timeout: Duration::from_secs(30),
            max_upload_in_flight: 256 * 1024 * 1024,
            idle_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_connections: None,
            max_guest_descriptors: None,
            follow: None,
            registry: crate::registry::Options::default(),
        };
        config.ready_instances = config.default_ready_instances();
        config
    }

    /// Instances made ahead, held at most at once, unless the operator says otherwise: one for
    /// each call thread kept for good and each front-end thread (which runs quick calls
    /// itself), within the calls in flight.
    pub fn default_ready_instances(&self) -> usize {
        (self.workers + self.http_threads).min(self.max_calls)
    }
}
