//! A server on a bucket (`--store s3://…`): it serves from its local cache folder, an ordinary
//! store, and keeps that cache following the bucket.
//!
//! - Every `--refresh-ms` (default 1000) it lists the packages of the bucket and reads each
//!   package's pointer with the ETag it last saw (`If-None-Match`), so an unchanged package
//!   costs one small conditional GET; a changed one is fetched, checked and made current in the
//!   cache ([`remote::sync_to`]). Calls read the cache only: a call never waits on the bucket
//!   for a package the node holds.
//! - A request naming a package the cache does not hold fetches it first, once; a name the
//!   bucket does not have either is asked for again at most once a refresh.
//! - An upload through the node's API is stored in the cache, then published to the bucket;
//!   when publishing fails the cache offers what it offered before, and the upload answers 503
//!   naming the store's error.
//! - `/readyz` is ready while the last request to the bucket was answered. When the bucket is
//!   unreachable the node keeps serving what it holds, and catches up at the first refresh
//!   after it is back.
//!
//! Every fetch and publish runs under one lock, so the cache never sees two writers of one
//! version at once.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::metrics::Metrics;
use crate::package::manifest::is_valid_name;
use crate::store::bucket::{Bucket, OPERATIONS, OUTCOMES};
use crate::store::remote::{self, RemoteError, Trust};
use crate::store::signing::SigningKey;
use crate::store::{PutResult, Store, StoreError, StoredPackage};

/// The most names of missing packages remembered at once.
const MAX_MISSES: usize = 4096;

/// How a server follows a bucket.
#[derive(Debug, Clone)]
pub struct FollowConfig {
    pub bucket: String,
    pub prefix: String,
    pub trust: Trust,
    /// Signs the records of uploads through this node's API.
    pub signer: Option<Arc<SigningKey>>,
    /// How often each package's pointer is checked.
    pub refresh: Duration,
}

/// A cache folder following a bucket.
pub struct Follower {
    bucket: Bucket,
    cache: Store,
    config: FollowConfig,
    /// The packages the cache offers, as far as this follower made or saw them: a request for
    /// one of them costs one shared read lock here (every call takes it), no look at the disk.
    held: RwLock<HashSet<String>>,
    /// The ETag of each package's pointer when it was last read.
    etags: Mutex<HashMap<String, String>>,
    /// Names requested that the bucket did not have, and when: asked again at most once a
    /// refresh, so that requests for unknown names do not each cost a request to the bucket.
    misses: Mutex<HashMap<String, Instant>>,
    /// Fetches and publishes, one at a time.
    writing: tokio::sync::Mutex<()>,
    fetched: AtomicU64,
    artifacts: AtomicU64,
    untrusted: AtomicU64,
    refused_unsigned: AtomicU64,
    /// Pointers refused as older than the one held.
    rollbacks: AtomicU64,
}

impl Follower {
    /// Opens the bucket (nothing is sent yet). Must run inside a tokio runtime.
    pub async fn open(config: FollowConfig, cache: Store) -> Result<Self, RemoteError> {
        let bucket = Bucket::open(&config.bucket, &config.prefix).await?;
        let held = cache.list()?.into_iter().collect();
        Ok(Self {
            bucket,
            held: RwLock::new(held),
            cache,
            config,
            etags: Mutex::default(),
            misses: Mutex::default(),
            writing: tokio::sync::Mutex::new(()),
            fetched: AtomicU64::new(0),
            artifacts: AtomicU64::new(0),
            untrusted: AtomicU64::new(0),
            refused_unsigned: AtomicU64::new(0),
            rollbacks: AtomicU64::new(0),
        })
    }

    /// The bucket, as `s3://BUCKET[/PREFIX]`.
    pub fn url(&self) -> String {
        self.bucket.url()
    }

    /// Checks every package of the bucket (and of the cache) once, fetching what changed.
    /// Errors are logged and leave the package as the cache holds it.
    pub async fn refresh(&self) {
        let mut names = match remote::list(&self.bucket).await {
            Ok(names) => names,
            Err(err) => {
                tracing::warn!("refreshing from {}: {err}", self.url());
                return;
            }
        };
        names.extend(self.cache.list().unwrap_or_default());
        names.sort();
        names.dedup();
        for name in names {
            if let Err(err) = self.follow(&name).await {
                tracing::warn!("refreshing {name} from {}: {err}", self.url());
            }
        }
    }

    /// Refreshes every `--refresh-ms`, for ever.
    pub async fn run(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.config.refresh);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.refresh().await;
        }
    }

    /// Reads `name`'s pointer unless its ETag held, and syncs the cache to it when it moved.
    async fn follow(&self, name: &str) -> Result<(), RemoteError> {
        let known = self
            .etags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        let Some((pointer, etag)) = remote::pointer_since(&self.bucket, name, known.as_deref())
            .await
            .or_else(|err| match err {
                // A package only the cache holds (the bucket lost it, or it was uploaded with
                // `serve --stdio PATH`) stays as it is.
                RemoteError::Store(StoreError::UnknownPackage(_)) => Ok(None),
                err => Err(err),
            })?
        else {
            return Ok(());
        };
        let synced = self.sync(name, &pointer).await;
        let rollback = matches!(synced, Err(RemoteError::Rollback { .. }));
        if rollback {
            self.rollbacks.fetch_add(1, Ordering::Relaxed);
        }
        // A pointer refused as a rollback or as unsigned is not read again until it changes:
        // it is said (and counted) once, and the node keeps serving what it holds.
        let refused = rollback || matches!(synced, Err(RemoteError::Unsigned { .. }));
        if synced.is_ok() || refused {
            if let Some(etag) = etag {
                self.etags
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.to_string(), etag);
            }
        }
        synced.map(|_| ())
    }

    async fn sync(
        &self,
        name: &str,
        pointer: &remote::Pointer,
    ) -> Result<StoredPackage, RemoteError> {
        let _one = self.writing.lock().await;
        let synced = remote::sync_to(&self.bucket, &self.cache, name, pointer, &self.config.trust)
            .await
            .inspect_err(|err| {
                if matches!(err, RemoteError::Unsigned { .. }) {
                    self.refused_unsigned.fetch_add(1, Ordering::Relaxed);
                }
            })?;
        self.now_holds(name);
        if synced.fetched {
            self.fetched.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                "{name} {} fetched from {}",
                synced.stored.record.version,
                self.url()
            );
        }
        self.artifacts
            .fetch_add(synced.artifacts as u64, Ordering::Relaxed);
        if let Some(why) = &synced.untrusted {
            self.untrusted.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "{name} {}: its artifacts in the bucket are not used, as {why}; compiling here",
                synced.stored.record.version
            );
        }
        Ok(synced.stored)
    }

    fn holds(&self, name: &str) -> bool {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }

    fn now_holds(&self, name: &str) {
        // Every sync of a held package comes here: the write lock only when it is new.
        if !self.holds(name) {
            self.held
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.to_string());
        }
    }

    /// Makes the cache hold `name` when it does not yet: a request named it.
    pub async fn fetch_missing(&self, name: &str) {
        if self.holds(name) || !is_valid_name(name) {
            return;
        }
        {
            let misses = self.misses.lock().unwrap_or_else(|p| p.into_inner());
            if misses
                .get(name)
                .is_some_and(|when| when.elapsed() < self.config.refresh)
            {
                return;
            }
        }
        if let Err(err) = self.follow(name).await {
            tracing::debug!("fetching {name} from {}: {err}", self.url());
        }
        if !self.holds(name) {
            let mut misses = self.misses.lock().unwrap_or_else(|p| p.into_inner());
            if misses.len() >= MAX_MISSES {
                misses.clear();
            }
            misses.insert(name.to_string(), Instant::now());
        }
    }

    /// Holds off every fetch while the holder writes the cache (an upload).
    pub async fn exclusive(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.writing.lock().await
    }

    /// Publishes the version an upload just stored in the cache (`previous`: what the package
    /// offered before it), under [`Follower::exclusive`]. When publishing fails, the cache
    /// offers `previous` again.
    pub async fn publish(
        &self,
        _exclusive: &tokio::sync::MutexGuard<'_, ()>,
        name: &str,
        previous: Option<String>,
        put: PutResult,
        artifacts: &[String],
    ) -> Result<PutResult, RemoteError> {
        let published = async {
            let stored = self.cache.get(name)?;
            remote::publish(
                &self.bucket,
                &stored,
                &self.cache,
                artifacts,
                self.config.signer.as_deref(),
                &self.config.trust.keys,
            )
            .await
        }
        .await;
        match published {
            Ok(published) => {
                self.now_holds(name);
                Ok(match published {
                    PutResult::Stored => PutResult::Stored,
                    PutResult::Unchanged => put,
                })
            }
            Err(err) => {
                if let Err(undo) = self.cache.restore_current(name, previous.as_deref()) {
                    tracing::error!("{name}: undoing an upload that was not published: {undo}");
                }
                Err(err)
            }
        }
    }

    /// `Err` with the store's last error when the last request to it failed.
    pub fn ready(&self) -> Result<(), String> {
        match self.bucket.stats().failure() {
            None => Ok(()),
            Some(err) => Err(err),
        }
    }

    /// The store's counters in the Prometheus text form, with the cache layers' hits (the
    /// module loads of `metrics` from memory and disk, and the versions fetched from the store).
    pub fn render(&self, metrics: &Metrics) -> String {
        let stats = self.bucket.stats();
        let mut out = String::new();
        let (memory, disk, _) = metrics.module_loads();
        let _ = writeln!(
            out,
            "# HELP hako_cache_hits_total Where what a call needed was found: its module in \
             memory, its artifact on disk, or its version in the object store (fetched).\n\
             # TYPE hako_cache_hits_total counter\n\
             hako_cache_hits_total{{layer=\"memory\"}} {memory}\n\
             hako_cache_hits_total{{layer=\"disk\"}} {disk}\n\
             hako_cache_hits_total{{layer=\"store\"}} {}",
            self.fetched.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP hako_store_requests_total Requests to the object store, by operation and \
             outcome.\n# TYPE hako_store_requests_total counter"
        );
        for operation in OPERATIONS {
            for outcome in OUTCOMES {
                let _ = writeln!(
                    out,
                    "hako_store_requests_total{{operation=\"{operation}\",outcome=\"{outcome}\"}} {}",
                    stats.count(operation, outcome)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP hako_store_request_seconds_total Seconds spent in requests to the object \
             store, by operation.\n# TYPE hako_store_request_seconds_total counter"
        );
        for operation in OPERATIONS {
            let _ = writeln!(
                out,
                "hako_store_request_seconds_total{{operation=\"{operation}\"}} {:.6}",
                stats.seconds(operation)
            );
        }
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP hako_store_ready Whether the last request to the object store was \
             answered.\n# TYPE hako_store_ready gauge\nhako_store_ready {}",
            u8::from(self.ready().is_ok())
        );
        let _ = writeln!(
            out,
            "# HELP hako_store_fetches_total What was fetched from the object store into the \
             cache folder: package versions (cache layer \"store\"), and artifacts under a \
             trusted signature.\n# TYPE hako_store_fetches_total counter\n\
             hako_store_fetches_total{{object=\"version\"}} {}\n\
             hako_store_fetches_total{{object=\"artifact\"}} {}",
            get(&self.fetched),
            get(&self.artifacts)
        );
        let _ = writeln!(
            out,
            "# HELP hako_signature_refusals_total Versions whose artifacts were not trusted \
             (no trusted signature: compiled here), or which --require-signed refused.\n\
             # TYPE hako_signature_refusals_total counter\n\
             hako_signature_refusals_total{{action=\"compiled_here\"}} {}\n\
             hako_signature_refusals_total{{action=\"refused\"}} {}",
            get(&self.untrusted),
            get(&self.refused_unsigned)
        );
        let _ = writeln!(
            out,
            "# HELP hako_pointer_rollbacks_total Pointers refused because they were not newer \
             than the one the node holds (a rollback).\n\
             # TYPE hako_pointer_rollbacks_total counter\n\
             hako_pointer_rollbacks_total {}",
            get(&self.rollbacks)
        );
        out
    }
}
