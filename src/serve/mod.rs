//! `hako serve`: the package store served over HTTP — the operator API and MCP endpoints for
//! agents, one MCP server per package — or one package served over stdio.
//!
//! One tokio runtime runs the front end; calls are admitted up to a bound on calls in flight
//! ([`admission`], refused with 503 and `Retry-After` beyond it), each runs on a thread of its
//! own ([`threads`]) while it holds one of its package's run permits ([`permits`], given up
//! while a host call waits), and they share loaded modules through one LRU ([`calls`]). The transport boundaries are enforced where
//! they belong: message checks in [`mcp`], the stdio line cap in [`stdio`], body sizes and
//! times in [`body`], the `Host` and `Origin` checks in [`hosts`], the Bearer tokens (with
//! their [`roles`]) in [`http`], sessions in [`sessions`], stalled writes in [`timeouts`].
//! The server binds loopback unless told otherwise, and refuses to bind anything else without
//! tokens. On SIGTERM or SIGINT (and at end of input in stdio mode) it stops taking work,
//! finishes the calls it accepted within the drain time, and returns.
//!
//! The modules' uses run one way: this file (the entry points) → [`http`] (the router) → the
//! handlers ([`api`], [`sse`], [`mcp`]) → what they share ([`server`], [`config`],
//! [`sessions`], [`calls`], [`response`], [`body`], [`fault`], [`ids`], …); a test below keeps
//! it so.
//!
//! This module does not check, compile or discover packages itself: uploads go through
//! [`crate::upload`], calls through [`crate::call`].

mod accept;
pub mod access;
pub mod admission;
pub mod api;
pub mod body;
pub mod calls;
pub mod config;
pub mod current;
pub mod fault;
pub mod follow;
pub mod hosts;
pub mod http;
pub mod ids;
pub mod mcp;
pub mod metrics;
pub mod permits;
pub mod response;
pub mod roles;
pub mod server;
pub mod sessions;
pub mod sse;
pub mod stdio;
pub mod threads;
pub mod timeouts;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::http::{Policy, PolicyError};
use crate::sandbox::GUEST_DESCRIPTORS;
use crate::store::{Store, StoreError};
use admission::Admission;
use calls::{Calls, Execution};
pub use config::ServeConfig;
use permits::RunPermits;
use server::Server;
use threads::CallThreads;

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

/// Guest code runs on the call threads and the front end's; wasmer's own stack switching keeps
/// deep guest recursion off them, so a modest native stack suffices (only what is touched is
/// resident).
const GUEST_STACK_BYTES: usize = 8 * 1024 * 1024;

fn calls(config: &ServeConfig) -> Result<Arc<Calls>, ServeError> {
    let trusted = config
        .follow
        .as_ref()
        .map(|follow| follow.trust.keys.clone())
        .unwrap_or_default();
    let mut store = Store::open(&config.store)?.trusting(trusted);
    if config.follow.is_some() {
        store.mark_bucket_cache()?;
    }
    store.set_compile_bounds(config.compile);
    // The lease is taken now, so that what a killed server left in the staging folder is swept
    // at start, not at the first upload.
    store.staging()?;
    let policy = match &config.policy {
        Some(path) => Policy::from_file(path)?,
        None => Policy::empty(),
    };
    let execution = Execution {
        admission: Admission::new(
            config.max_calls as u64,
            config.max_calls_per_package.map_or_else(
                || admission::default_share(config.max_calls as u64),
                |share| share as u64,
            ),
        ),
        threads: Arc::new(CallThreads::new(config.workers, GUEST_STACK_BYTES)),
        permits: RunPermits::new(config.workers),
    };
    let broker = calls::broker(&policy)?;
    Ok(Arc::new(
        Calls::new(
            store,
            policy,
            config.engine,
            execution,
            config.module_cache_bytes,
            broker,
            config.caps,
        )
        .with_ready_instances(config.ready_instances)
        .with_inline(config.inline),
    ))
}

/// The front end's runtime: `threads` threads take connections, parse requests and write
/// answers, beside the call threads. A quick call runs on the thread that read its request
/// ([`calls::SLICE`]): so they have the call threads' stack, and a thread that goes idle drops
/// what its last call left.
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("hako-serve")
        .thread_stack_size(GUEST_STACK_BYTES)
        .on_thread_park(calls::drop_left_here)
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

/// Lets the call threads finish every accepted call, within `drain`.
async fn drain_calls(calls: &Arc<Calls>, drain: Duration) {
    let calls = Arc::clone(calls);
    let join = tokio::task::spawn_blocking(move || calls.execution().threads.close_and_join());
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

/// Shares the process's descriptors between connections (if it `serves_connections`), guests
/// and the rest of the server, and bounds what guests hold ([`GUEST_DESCRIPTORS`]).
fn share_descriptors(config: &ServeConfig, serves_connections: bool) -> accept::DescriptorShares {
    let shares = accept::DescriptorShares::new(
        accept::descriptor_limit(),
        config.max_connections,
        config.max_guest_descriptors,
        config.max_calls,
        serves_connections,
    );
    if let Some(warning) = shares.warning(serves_connections) {
        tracing::warn!("{warning}");
    }
    GUEST_DESCRIPTORS.set_limit(shares.guests);
    shares
}

/// Serves HTTP until SIGTERM or SIGINT. `ready` is told the bound address (the port may have
/// been 0).
pub fn run_http(config: ServeConfig, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    if !config.listen.ip().is_loopback() && config.tokens.is_empty() {
        return Err(ServeError::NeedsToken(config.listen));
    }
    let calls = calls(&config)?;
    let runtime = runtime(config.http_threads)?;
    let served = runtime.block_on(async move {
        let follower = follower(&config, &calls).await?;
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.listen,
                source,
            })?;
        let bound = listener.local_addr()?;
        ready(bound);
        let drain = config.drain;
        let idle_timeout = config.idle_timeout;
        let write_timeout = config.write_timeout;
        let max_connections = share_descriptors(&config, true).connections;
        let server = Arc::new(Server::new(config, bound, Arc::clone(&calls), follower));
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
                        .serve_connection(
                            TokioIo::new(timeouts::stalled_writes_end(stream, write_timeout)),
                            service,
                        );
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
        drain_calls(&calls, drain).await;
        Ok::<(), ServeError>(())
    });
    // Whatever is still blocked (a read nobody waits for) must not hold the process.
    runtime.shutdown_background();
    served
}

/// Serves the stored package `name` over stdin and stdout until end of input (or SIGTERM /
/// SIGINT), then finishes the accepted calls. The one package served may hold every call in
/// flight unless `config` gives it a share.
pub fn run_stdio(mut config: ServeConfig, name: &str) -> Result<(), ServeError> {
    // One package served: its share is every call in flight, unless the operator said less.
    config.max_calls_per_package.get_or_insert(config.max_calls);
    share_descriptors(&config, false);
    let calls = calls(&config)?;
    let runtime = runtime(config.http_threads)?;
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
        drain_calls(&calls, config.drain).await;
        result.map_err(ServeError::Io)
    });
    // The stdin reader may still block on a read after a signal; it must not hold the exit.
    runtime.shutdown_background();
    served
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    /// The modules of this folder each file uses: `super::x` in a module's file, `x::` in this
    /// one (not `crate::x::`, another module's). A `super::` name that is no module is an
    /// arrow back to this file. Comments are not uses, nor is a file's test module (from its
    /// `#[cfg(test)]` on), whose `super::` is the file itself.
    fn arrows() -> BTreeMap<String, BTreeSet<String>> {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/serve");
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "rs") {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                files.insert(name, std::fs::read_to_string(&path).unwrap());
            }
        }
        let modules: BTreeSet<String> = files.keys().filter(|n| *n != "mod").cloned().collect();
        let mut arrows = BTreeMap::new();
        for (name, text) in &files {
            let code: String = own_code(text)
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let mut uses = BTreeSet::new();
            // `super::{a, b::C}` is `super::a` and `super::b::C`.
            let mut words: Vec<String> = Vec::new();
            for (at, _) in code.match_indices("super::{") {
                let group = &code[at + "super::{".len()..];
                let group = &group[..group.find('}').unwrap_or(group.len())];
                words.extend(
                    group
                        .split(',')
                        .map(|item| format!("super::{}", item.trim())),
                );
            }
            words.extend(
                code.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .map(str::to_string),
            );
            for word in &words {
                let parts: Vec<&str> = word.split("::").collect();
                if name == "mod" {
                    if parts.len() > 1 && modules.contains(parts[0]) && !word.starts_with("crate") {
                        uses.insert(parts[0].to_string());
                    }
                } else if let Some(at) = parts.iter().position(|part| *part == "super") {
                    // `super::super::…` leaves this folder; a glob `super::*` names no
                    // module.
                    match parts.get(at + 1) {
                        Some(&"super") | Some(&"") | None => {}
                        Some(next) if modules.contains(*next) => {
                            uses.insert(next.to_string());
                        }
                        Some(_) if at == 0 => {
                            uses.insert("mod".to_string());
                        }
                        Some(_) => {}
                    }
                }
            }
            uses.remove(name);
            arrows.insert(name.clone(), uses);
        }
        arrows
    }

    /// A file's text up to its test module (`#[cfg(test)] mod tests {`, at the start of a
    /// line). A module declared for tests alone (`#[cfg(test)] mod testkit;`) is the file's
    /// own code, and so is all that follows it.
    fn own_code(text: &str) -> &str {
        const TESTS: &str = "#[cfg(test)]\nmod tests {";
        text.match_indices(TESTS)
            .find(|&(at, _)| at == 0 || text.as_bytes()[at - 1] == b'\n')
            .map_or(text, |(at, _)| &text[..at])
    }

    /// A circle among `arrows`, as the modules on it, if there is one.
    fn circle(arrows: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
        // Depth-first, with the path so far: a module met again on it closes a circle.
        fn visit(
            module: &str,
            arrows: &BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<String>,
            done: &mut BTreeSet<String>,
        ) -> Option<String> {
            if let Some(at) = path.iter().position(|on| on == module) {
                return Some(format!("{} → {module}", path[at..].join(" → ")));
            }
            if !done.insert(module.to_string()) {
                return None;
            }
            path.push(module.to_string());
            for next in arrows.get(module).into_iter().flatten() {
                if let Some(circle) = visit(next, arrows, path, done) {
                    return Some(circle);
                }
            }
            path.pop();
            None
        }
        let mut done = BTreeSet::new();
        arrows
            .keys()
            .find_map(|module| visit(module, arrows, &mut Vec::new(), &mut done))
    }

    #[test]
    fn the_modules_uses_run_one_way() {
        let arrows = arrows();
        assert!(arrows["http"].contains("api") && arrows["sse"].contains("response"));
        assert!(
            arrows["config"].contains("roles"),
            "a `super::{{…}}` group is read"
        );
        assert_eq!(circle(&arrows), None);
    }

    #[test]
    fn a_files_test_module_is_not_read() {
        let text =
            "use super::calls::Served;\n\n#[cfg(test)]\nmod tests {\n    use super::Segments;\n}\n";
        assert_eq!(own_code(text), "use super::calls::Served;\n\n");
        assert_eq!(own_code("use super::api;\n"), "use super::api;\n");
        let declared = "#[cfg(test)]\nmod testkit;\nuse super::api;\n";
        assert_eq!(own_code(declared), declared);
        let indented = "mod inner {\n    #[cfg(test)]\nmod tests {}\n}\nuse super::api;\n";
        assert_eq!(own_code(indented), indented);
    }

    #[test]
    fn a_circle_is_found() {
        let arrows: BTreeMap<String, BTreeSet<String>> = [
            ("http", &["api", "response"][..]),
            ("api", &["fault"]),
            ("fault", &["sse"]),
            ("sse", &["http"]),
            ("response", &[]),
        ]
        .into_iter()
        .map(|(from, to)| (from.into(), to.iter().map(|t| t.to_string()).collect()))
        .collect();
        assert_eq!(
            circle(&arrows).as_deref(),
            Some("api → fault → sse → http → api")
        );
    }
}
