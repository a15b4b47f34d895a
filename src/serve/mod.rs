//! `hako serve`: the package store served over HTTP — the operator API and MCP endpoints for
//! agents, one MCP server per package — or one package served over stdio.
//!
//! One tokio runtime runs the front end; calls run on a bounded pool of guest threads
//! ([`pool`]) behind a bounded queue, refused with 503 and `Retry-After` beyond it, and share
//! loaded modules through one LRU ([`calls`]). The transport boundaries are enforced where
//! they belong: message checks in [`mcp`], the stdio line cap in [`stdio`], body sizes, the
//! Bearer tokens (with their [`roles`]) and the `Origin` check in [`http`], sessions in
//! [`sse`]. The server binds loopback unless told otherwise, and refuses to bind anything else
//! without tokens. On
//! SIGTERM or SIGINT (and at end of input in stdio mode) it stops taking work, finishes the
//! calls it accepted within the drain time, and returns.
//!
//! This module does not check, compile or discover packages itself: uploads go through
//! [`crate::upload`], calls through [`crate::call`].

mod accept;
pub mod api;
pub mod calls;
pub mod fault;
pub mod follow;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod pool;
pub mod roles;
pub mod sse;
pub mod stdio;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::compile::CompileBounds;
use crate::engines::EngineConfig;
use crate::http::{Policy, PolicyError};
use crate::store::{Store, StoreError};
use calls::Calls;
use pool::GuestPool;
use sse::Sessions;

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
    pub policy: Option<PathBuf>,
    /// The engine and compiler whose code runs.
    pub engine: EngineConfig,
    /// Guest threads (calls running at once).
    pub workers: usize,
    /// Accepted calls that may wait for a guest thread.
    pub queue: usize,
    /// Loaded modules kept in memory.
    pub cached_modules: usize,
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
    /// Connections open at once; `None`: sized from the descriptor limit.
    pub max_connections: Option<usize>,
    /// The bucket the store (then a cache folder) follows, if any.
    pub follow: Option<follow::FollowConfig>,
    /// The bounds of every compile (uploads, and calls that find no artifact).
    pub compile: CompileBounds,
}

impl ServeConfig {
    /// The defaults for a store: loopback port 7340, no token, one guest thread per core, a
    /// queue of 64 calls per thread, 4 MiB bodies, 128 MiB uploads, 15 s keepalives, 45 s
    /// drain (longer than a call's default 30 s limit).
    pub fn new(store: PathBuf) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            store,
            listen: SocketAddr::from(([127, 0, 0, 1], 7340)),
            tokens: roles::Tokens::none(),
            allowed_origins: Vec::new(),
            policy: None,
            engine: EngineConfig::DEFAULT,
            workers: cores,
            queue: cores * 64,
            cached_modules: 64,
            max_body_bytes: 4 * 1024 * 1024,
            max_upload_bytes: 128 * 1024 * 1024,
            keepalive: Duration::from_secs(15),
            drain: Duration::from_secs(45),
            caps: calls::LimitCaps::default(),
            compile: CompileBounds::DEFAULT,
            body_timeout: Duration::from_secs(30),
            max_upload_in_flight: 256 * 1024 * 1024,
            idle_timeout: Duration::from_secs(30),
            max_connections: None,
            follow: None,
        }
    }
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to listen on {0}, which is not a loopback address, without tokens \
         (give --token or HAKO_TOKEN for agents, --admin-token or HAKO_ADMIN_TOKEN, or --tokens \
         FILE)"
    )]
    NeedsToken(SocketAddr),
    #[error("listening on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("opening the store: {0}")]
    Store(#[from] StoreError),
    #[error("reading the policy: {0}")]
    Policy(#[from] PolicyError),
    #[error("{0}")]
    Remote(#[from] crate::store::remote::RemoteError),
    #[error("setting up the HTTP broker: {0}")]
    Broker(#[from] crate::http::BrokerError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// What every request handler shares.
pub struct Server {
    pub config: ServeConfig,
    pub calls: Arc<Calls>,
    pub sessions: Sessions,
    /// Uploads compile; one runs at a time.
    uploads: tokio::sync::Mutex<()>,
    /// The bytes of upload bodies received or being received, over all uploads.
    pub upload_budget: UploadBudget,
    /// The bucket the store follows, if any.
    pub follower: Option<Arc<follow::Follower>>,
}

/// A bound on the bytes that uploads hold at once (on disk, in the staging folder): each
/// reserves its declared length before its body is read, and gives it back when it is done.
pub struct UploadBudget {
    total: u64,
    left: std::sync::Mutex<u64>,
}

impl UploadBudget {
    pub fn new(total: u64) -> Self {
        Self {
            total,
            left: std::sync::Mutex::new(total),
        }
    }

    /// The bound, in bytes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Reserves `bytes`, or `None` when fewer are left.
    pub fn reserve(&self, bytes: u64) -> Option<Reserved<'_>> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        *left = left.checked_sub(bytes)?;
        Some(Reserved {
            budget: self,
            bytes,
        })
    }
}

/// Bytes reserved from an [`UploadBudget`], given back when dropped.
pub struct Reserved<'a> {
    budget: &'a UploadBudget,
    bytes: u64,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        *self.budget.left.lock().unwrap_or_else(|p| p.into_inner()) += self.bytes;
    }
}

/// Guest code runs on the pool's threads; wasmer's own stack switching keeps deep guest
/// recursion off them, so a modest native stack suffices.
const GUEST_STACK_BYTES: usize = 8 * 1024 * 1024;

fn calls(config: &ServeConfig) -> Result<Arc<Calls>, ServeError> {
    let mut store = Store::open(&config.store)?;
    store.set_compile_bounds(config.compile);
    // The lease is taken now, so that what a killed server left in the staging folder is swept
    // at start, not at the first upload.
    store.staging()?;
    let policy = match &config.policy {
        Some(path) => Policy::from_file(path)?,
        None => Policy::empty(),
    };
    let pool = GuestPool::new(config.workers, config.queue, GUEST_STACK_BYTES)?;
    let broker = calls::broker(&policy)?;
    Ok(Arc::new(Calls::new(
        store,
        policy,
        config.engine,
        pool,
        config.cached_modules,
        broker,
        config.caps,
    )))
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("hako-serve")
        .enable_all()
        .build()
}

/// Resolves on SIGTERM or SIGINT.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Lets the guest threads finish every accepted call, within `drain`.
async fn drain_pool(calls: &Arc<Calls>, drain: Duration) {
    let calls = Arc::clone(calls);
    let join = tokio::task::spawn_blocking(move || calls.pool().close_and_join());
    if tokio::time::timeout(drain, join).await.is_err() {
        tracing::warn!("calls still running after {drain:?}; stopping without them");
    }
}

/// The longest a server waits at start for its first look at the bucket; it then serves what
/// its cache holds and catches up at the next refresh.
const FIRST_REFRESH: Duration = Duration::from_secs(15);

/// Opens the bucket `calls`' store follows, if any, takes a first look at it, and keeps
/// following it from then on. Must run inside the server's runtime.
async fn follower(
    config: &ServeConfig,
    calls: &Calls,
) -> Result<Option<Arc<follow::Follower>>, ServeError> {
    let Some(follow) = &config.follow else {
        return Ok(None);
    };
    let follower = Arc::new(follow::Follower::open(follow.clone(), calls.store().clone()).await?);
    if tokio::time::timeout(FIRST_REFRESH, follower.refresh())
        .await
        .is_err()
    {
        tracing::warn!("{} did not answer within {FIRST_REFRESH:?}", follower.url());
    }
    tokio::spawn(Arc::clone(&follower).run());
    Ok(Some(follower))
}

/// Serves HTTP until SIGTERM or SIGINT. `ready` is told the bound address (the port may have
/// been 0).
pub fn run_http(config: ServeConfig, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    if !config.listen.ip().is_loopback() && config.tokens.is_empty() {
        return Err(ServeError::NeedsToken(config.listen));
    }
    let calls = calls(&config)?;
    let runtime = runtime()?;
    let served = runtime.block_on(async move {
        let follower = follower(&config, &calls).await?;
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.listen,
                source,
            })?;
        ready(listener.local_addr()?);
        let drain = config.drain;
        let max_upload_in_flight = config.max_upload_in_flight;
        let idle_timeout = config.idle_timeout;
        let max_connections = config
            .max_connections
            .unwrap_or_else(accept::default_max_connections);
        let server = Arc::new(Server {
            config,
            calls: Arc::clone(&calls),
            sessions: Sessions::default(),
            uploads: tokio::sync::Mutex::new(()),
            upload_budget: UploadBudget::new(max_upload_in_flight),
            follower,
        });
        let graceful = GracefulShutdown::new();
        let stop = stop_signal();
        tokio::pin!(stop);
        let mut acceptor = accept::Acceptor::new(listener, max_connections);
        loop {
            tokio::select! {
                (stream, permit) = acceptor.next() => {
                    let _ = stream.set_nodelay(true);
                    let server = Arc::clone(&server);
                    let service = service_fn(move |request| http::route(Arc::clone(&server), request));
                    let connection = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        // The time to send a request's headers, counted from when the
                        // connection is ready for them: so also how long a kept-alive
                        // connection may stay idle.
                        .header_read_timeout(idle_timeout)
                        .serve_connection(TokioIo::new(stream), service);
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        let _open = permit;
                        if let Err(err) = connection.await {
                            tracing::debug!("connection: {err}");
                        }
                    });
                }
                () = &mut stop => break,
            }
        }
        drop(acceptor);
        server.sessions.close_all();
        if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
            tracing::warn!("requests still open after {drain:?}; stopping without them");
        }
        drain_pool(&calls, drain).await;
        Ok::<(), ServeError>(())
    });
    // Whatever is still blocked (a read nobody waits for) must not hold the process.
    runtime.shutdown_background();
    served
}

/// Serves the stored package `name` over stdin and stdout until end of input (or SIGTERM /
/// SIGINT), then finishes the accepted calls.
pub fn run_stdio(config: ServeConfig, name: &str) -> Result<(), ServeError> {
    let calls = calls(&config)?;
    let runtime = runtime()?;
    let served = runtime.block_on(async {
        if let Some(follower) = follower(&config, &calls).await? {
            follower.fetch_missing(name).await;
        }
        if let Err(err) = calls.package(name) {
            return Err(ServeError::Io(std::io::Error::other(err.to_string())));
        }
        let input = tokio::io::BufReader::with_capacity(64 * 1024, tokio::io::stdin());
        let result = stdio::serve(
            Arc::clone(&calls),
            name.to_string(),
            input,
            tokio::io::stdout(),
            stop_signal(),
        )
        .await;
        drain_pool(&calls, config.drain).await;
        result.map_err(ServeError::Io)
    });
    // The stdin reader may still block on a read after a signal; it must not hold the exit.
    runtime.shutdown_background();
    served
}
