//! `hako serve`: the HTTP server over the store (operator API and MCP endpoints), or with
//! `--stdio PACKAGE|NAME` one package as an MCP server on stdin and stdout. A package given as
//! a folder or archive is uploaded to the store first (check, precompile, discovery), as
//! `hako upload` would. This file only reads flags and reports; serving is [`crate::serve`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::{note, Failure, Target};
use crate::engines::{self, Compiler, EngineConfig, EngineKind};
use crate::serve::follow::FollowConfig;
use crate::serve::roles::Tokens;
use crate::serve::{self, ServeConfig, ServeError};
use crate::store::bucket::Location;
use crate::store::signing::SigningKey;
use crate::upload::{self, UploadError, UploadOptions};

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    store: super::stores::StoreArgs,
    // How uploads by reference (`POST /v1/packages` with `{"reference"}`) reach registries.
    #[command(flatten)]
    registry: super::registry::ReachArgs,
    /// With a bucket: milliseconds between two looks at each package's pointer (a conditional
    /// GET); a new version is served within about this long (default: 1000).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    refresh_ms: u64,
    /// With a bucket: sign the records of uploads through this node's API with this private
    /// key (`hako keygen`).
    #[arg(long, value_name = "FILE")]
    signing_key: Option<PathBuf>,
    /// The address to listen on; anything but loopback needs a token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7340")]
    listen: SocketAddr,
    /// An agent token: MCP endpoints, calls and listing of every package.
    #[arg(long, env = "HAKO_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The admin token: uploads and metrics, and every other route.
    #[arg(long, env = "HAKO_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A TOML file of tokens, each with a role and, for agents, the packages it may use.
    #[arg(long, value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// An Origin allowed beside localhost, 127.0.0.1 and [::1] (repeatable; `*` allows any).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allowed_origins: Vec<String>,
    /// A name a request's Host may give beside localhost, 127.0.0.1, [::1] and the bound
    /// address (repeatable). On a loopback address every other Host is refused (421), against
    /// DNS rebinding; elsewhere Host is checked only when a name is given here.
    #[arg(long = "allow-host", value_name = "NAME", value_parser = crate::serve::hosts::parse_allowed_host)]
    allowed_hosts: Vec<String>,
    /// The operator policy file (allowlists, credentials).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The engine to run on: wasmer, or wasmtime in a build with it (default: wasmer).
    #[arg(long, value_parser = engines::parse_engine, default_value = "wasmer")]
    engine: EngineKind,
    /// The compiler whose code runs (default: cranelift).
    #[arg(long, value_parser = engines::parse_compiler)]
    compiler: Option<Compiler>,
    /// Run permits of each package: how many of one package's calls compute at once; a call
    /// waiting in a host call (a sleep, an HTTP answer) holds none, and other packages' calls
    /// have permits of their own (default: one per core; at most 1024).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Calls in flight, every package together, each on a thread of its own; beyond, 503 with
    /// Retry-After (default: 1024; at most 16384).
    #[arg(long, value_name = "N")]
    max_calls: Option<usize>,
    /// Calls in flight of one package; beyond, 503 with Retry-After while the rest of
    /// --max-calls stays open to the other packages (default: three quarters of --max-calls, at
    /// least 1; at most --max-calls).
    #[arg(long, value_name = "N")]
    max_calls_per_package: Option<usize>,
    /// Instances made ahead of their calls, held at most at once: after a call's answer is
    /// sent, its thread instantiates the module it ran for its next call (no guest code runs
    /// in it until that call), while fewer than N are held; a call of another module or other
    /// limits drops it (default: --workers + --http-threads, as quick calls run on the front
    /// end's threads; 0: none; at most --max-calls).
    #[arg(long, value_name = "N")]
    ready_instances: Option<usize>,
    /// Front-end threads, which take connections, parse requests, run quick calls and write
    /// answers, beside the call threads (default: one per core; at most 1024).
    #[arg(long, value_name = "N")]
    http_threads: Option<usize>,
    /// Run every call on a call thread: by default a package whose calls have been quick has
    /// its calls run on the front-end thread that read them, with no hand-off, and a call that
    /// waits or computes for more than 10 ms there is moved to a call thread.
    #[arg(long)]
    no_inline: bool,
    /// The largest JSON request body, in bytes (default: 4 MiB).
    #[arg(long, value_name = "BYTES")]
    max_body: Option<usize>,
    /// The largest package archive uploaded, in bytes (default: 128 MiB).
    #[arg(long, value_name = "BYTES")]
    max_upload: Option<usize>,
    /// Milliseconds an SSE stream may stay idle before a keepalive (default: 15000).
    #[arg(long, value_name = "MS")]
    keepalive_ms: Option<u64>,
    /// Milliseconds a stop waits for in-flight calls (default: 45000).
    #[arg(long, value_name = "MS")]
    drain_ms: Option<u64>,
    /// Milliseconds a connection may take to send a request's headers, and so may stay idle
    /// between requests (default: 30000).
    #[arg(long, value_name = "MS")]
    idle_timeout_ms: Option<u64>,
    /// Connections open at once; more wait in the kernel's backlog (default: the descriptor
    /// limit, raised to its hard maximum, less 256 and --max-guest-descriptors).
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Descriptors (files and folders) every guest together may hold; past it a guest's open
    /// is refused ENFILE (default: 128 for each of --max-calls, at most half of the descriptor
    /// limit less 256).
    #[arg(long, value_name = "N")]
    max_guest_descriptors: Option<usize>,
    /// What the loaded modules kept in memory may weigh together, in MiB of their artifacts;
    /// the least recently called go first, and at most 4096 are kept (default: 512).
    #[arg(long, value_name = "MIB")]
    module_cache_mib: Option<u64>,
    /// The bytes all uploads may hold at once; beyond it, 503 (default: 256 MiB).
    #[arg(long, value_name = "BYTES")]
    max_upload_in_flight: Option<u64>,
    /// Milliseconds a request's whole body may take to arrive; then 408 (default: 30000).
    #[arg(long, value_name = "MS")]
    body_timeout_ms: Option<u64>,
    /// Milliseconds a response or SSE stream may wait for the client to take any of its bytes;
    /// then the connection is closed (default: 30000).
    #[arg(long, value_name = "MS")]
    write_timeout_ms: Option<u64>,
    /// The longest time limit a caller may ask for, in ms (default: 30000, a call's default).
    #[arg(long, value_name = "MS")]
    max_timeout_ms: Option<u64>,
    /// The most linear memory a caller may ask for, in MiB (default: 256, a call's default).
    #[arg(long, value_name = "MIB")]
    max_memory_mib: Option<u64>,
    /// The largest write budget a caller may ask for, in bytes (default: 1 GiB, a call's
    /// default).
    #[arg(long, value_name = "BYTES")]
    max_write_budget: Option<u64>,
    /// The most elements any table of a guest may hold, 1 to 65536 (default: 65536); each
    /// table reserves its bound against the memory cap.
    #[arg(long, value_name = "N")]
    max_table_elements: Option<u32>,
    #[command(flatten)]
    compile: super::flags::CompileArgs,
    /// Serve one package as an MCP server over stdin and stdout instead of HTTP.
    #[arg(long, value_name = "PACKAGE|NAME")]
    stdio: Option<String>,
    /// How log lines, the per-call access record among them, are written to stderr: `text`,
    /// or `json` (one JSON object a line) (default: text).
    #[arg(long, value_name = "FORMAT", value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
}

impl ServeArgs {
    /// Whether log lines are JSON objects (`--log-format json`).
    pub fn logs_json(&self) -> bool {
        self.log_format == "json"
    }
}

/// The most threads `--workers` or `--http-threads` may ask for: far past any machine's cores.
const MAX_THREADS: usize = 1024;

/// The most calls in flight `--max-calls` may allow: each has a thread and an instance.
const MAX_CALLS: usize = 16384;

/// A count given with `flag`, refused outside 1..=`max`.
fn count_in(flag: &str, count: usize, max: usize) -> Result<usize, Failure> {
    if (1..=max).contains(&count) {
        Ok(count)
    } else {
        Err(Failure::Usage(format!(
            "{flag} must be at least 1 and at most {max}, not {count}"
        )))
    }
}

fn config(args: &ServeArgs) -> Result<ServeConfig, Failure> {
    let (store, follow) = match args.store.location()? {
        Location::Folder(dir) => (dir, None),
        Location::Bucket { bucket, prefix } => {
            if args.refresh_ms == 0 {
                return Err(Failure::Usage("--refresh-ms must be at least 1".into()));
            }
            let signer = match &args.signing_key {
                Some(path) => Some(Arc::new(
                    SigningKey::read(path).map_err(|err| Failure::Usage(err.to_string()))?,
                )),
                None => None,
            };
            let follow = FollowConfig {
                bucket,
                prefix,
                trust: args.store.trust()?,
                signer,
                refresh: Duration::from_millis(args.refresh_ms),
            };
            (args.store.cache(), Some(follow))
        }
    };
    let mut config = ServeConfig::new(store);
    config.follow = follow;
    config.compile = args.compile.bounds()?;
    config.registry = args.registry.options()?;
    config.listen = args.listen;
    // An empty variable (HAKO_TOKEN=) is no token, as before roles.
    fn given(token: &Option<String>) -> Option<&str> {
        token.as_deref().filter(|token| !token.is_empty())
    }
    config.tokens = Tokens::new(
        given(&args.token),
        given(&args.admin_token),
        args.tokens.as_deref(),
    )
    .map_err(|err| Failure::Usage(err.to_string()))?;
    config.allowed_origins = args.allowed_origins.clone();
    config.allowed_hosts = args.allowed_hosts.clone();
    config.policy = args.policy.clone();
    config.engine = EngineConfig::new(args.engine, args.compiler)
        .map_err(|err| Failure::Usage(err.to_string()))?;
    if let Some(workers) = args.workers {
        config.workers = count_in("--workers", workers, MAX_THREADS)?;
    }
    if let Some(calls) = args.max_calls {
        config.max_calls = count_in("--max-calls", calls, MAX_CALLS)?;
    }
    if let Some(calls) = args.max_calls_per_package {
        config.max_calls_per_package = Some(count_in(
            "--max-calls-per-package",
            calls,
            config.max_calls,
        )?);
    }
    if let Some(threads) = args.http_threads {
        config.http_threads = count_in("--http-threads", threads, MAX_THREADS)?;
    }
    config.ready_instances = match args.ready_instances {
        Some(ready) if ready > config.max_calls => {
            return Err(Failure::Usage(format!(
                "--ready-instances must be at most the {} calls in flight (--max-calls), not \
                 {ready}: each call's thread holds at most one",
                config.max_calls
            )))
        }
        Some(ready) => ready,
        None => config.default_ready_instances(),
    };
    config.inline = !args.no_inline;
    if let Some(bytes) = args.max_body {
        config.max_body_bytes = bytes;
    }
    if let Some(bytes) = args.max_upload {
        config.max_upload_bytes = bytes;
    }
    if let Some(ms) = args.keepalive_ms {
        config.keepalive = Duration::from_millis(ms.max(1));
    }
    if let Some(ms) = args.drain_ms {
        config.drain = Duration::from_millis(ms);
    }
    if let Some(ms) = args.idle_timeout_ms {
        config.idle_timeout = Duration::from_millis(ms.max(1));
    }
    if let Some(connections) = args.max_connections {
        if connections == 0 {
            return Err(Failure::Usage(
                "--max-connections must be at least 1".into(),
            ));
        }
        config.max_connections = Some(connections);
    }
    config.max_guest_descriptors = args.max_guest_descriptors;
    if let Some(mib) = args.module_cache_mib {
        config.module_cache_bytes = mib.saturating_mul(1 << 20);
    }
    if let Some(bytes) = args.max_upload_in_flight {
        config.max_upload_in_flight = bytes;
    }
    if let Some(ms) = args.body_timeout_ms {
        config.body_timeout = Duration::from_millis(ms.max(1));
    }
    if let Some(ms) = args.write_timeout_ms {
        config.write_timeout = Duration::from_millis(ms.max(1));
    }
    let max = &mut config.caps.max;
    if let Some(ms) = args.max_timeout_ms {
        if ms == 0 {
            return Err(Failure::Usage("--max-timeout-ms must be at least 1".into()));
        }
        max.timeout = Duration::from_millis(ms);
    }
    if let Some(mib) = args.max_memory_mib {
        if !(1..=4096).contains(&mib) {
            return Err(Failure::Usage(
                "--max-memory-mib must be 1 to 4096 (a wasm32 memory holds at most 4 GiB)".into(),
            ));
        }
        max.max_memory_bytes = mib << 20;
    }
    if let Some(bytes) = args.max_write_budget {
        max.write_budget = bytes;
    }
    if let Some(elements) = args.max_table_elements {
        max.max_table_elements = super::flags::table_elements(elements, "--max-table-elements")?;
    }
    Ok(config)
}

fn failure(err: ServeError) -> Failure {
    match err {
        ServeError::NeedsToken(_) | ServeError::Policy(_) => Failure::Usage(err.to_string()),
        other => Failure::Host(other.into()),
    }
}

pub fn run(args: ServeArgs) -> Result<(), Failure> {
    let config = config(&args)?;
    let Some(package) = &args.stdio else {
        let store = match &config.follow {
            Some(follow) => format!(
                "s3://{}{}{} (cache {})",
                follow.bucket,
                if follow.prefix.is_empty() { "" } else { "/" },
                follow.prefix,
                config.store.display()
            ),
            None => config.store.display().to_string(),
        };
        // With JSON logs every line on stderr is a JSON object, these too.
        let json = args.logs_json();
        let say = move |message: &str| {
            if json {
                tracing::info!(target: "hako::startup", "{message}");
            } else {
                note(message);
            }
        };
        return serve::run_http(config, |addr| {
            // The one line on stdout: scripts and tests read the bound port from it.
            println!("hako: listening on http://{addr}");
            say(&format!("serving the store {store}"));
            if let Some(why) = crate::compile::llvm_worker_missing() {
                say(&format!("{why}: uploads that ask for llvm will fail"));
            }
        })
        .map_err(failure);
    };
    let name = match super::target(package) {
        Target::Stored(name) => name,
        Target::Path(path) if config.follow.is_some() => {
            return Err(Failure::Usage(format!(
                "serve --stdio {}: on a bucket, upload the package first (hako upload), then \
                 serve it by name",
                path.display()
            )))
        }
        Target::Path(path) => {
            let mut store = super::open_store(Some(&config.store))?;
            store.set_compile_bounds(config.compile);
            let loaded = super::load_package(&path, Some(&store), &Default::default())?;
            match upload::upload(&store, &loaded, &UploadOptions::default()) {
                Ok(uploaded) => {
                    for message in &uploaded.notes {
                        note(message);
                    }
                    uploaded.name
                }
                Err(UploadError::Refused(refusal)) => {
                    eprintln!(
                        "hako: {} is refused at discovery:\n  - {refusal}",
                        path.display()
                    );
                    return Err(Failure::Refused);
                }
                Err(err) => return Err(Failure::Host(err.into())),
            }
        }
    };
    if config.follow.is_none() {
        super::stored(&super::open_store(Some(&config.store))?, &name)?;
    }
    serve::run_stdio(config, &name).map_err(failure)
}
