//! An S3-compatible bucket as the source of truth of a store (`--store s3://BUCKET[/PREFIX]`),
//! through `object_store`, over hako's own HTTP client (hyper and rustls, the broker's trust
//! roots).
//!
//! ```text
//! <prefix>/blobs/sha256/<digest>            every package file, content-addressed, immutable
//! <prefix>/versions/<name>/<version>.json   a version's record (see `remote`), immutable
//! <prefix>/packages/<name>/current          {"version","record_sha256"}: replaced by
//!                                           compare-and-swap on its ETag
//! ```
//!
//! Immutable objects are written with `If-None-Match: *` (`PutMode::Create`), the pointer with
//! `If-Match` on the ETag it was read with (`PutMode::Update`). A bucket that does not honour
//! conditional writes is refused before anything is written to it: a probe object written
//! twice with `If-None-Match: *` must be refused the second time.
//!
//! The endpoint, region and credentials come from the standard variables (`AWS_ENDPOINT_URL`,
//! `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, and `AWS_ALLOW_HTTP=true` for a
//! plain-HTTP endpoint). Every request has a time limit, and a failing one is retried at most
//! [`MAX_RETRIES`] times within [`RETRY_TIMEOUT`], so an unreachable bucket is an error within
//! seconds, never a hang.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpRequestBody,
    HttpResponse, HttpResponseBody, HttpService,
};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig, UpdateVersion,
};

/// Retries of a failed request (connection errors, 5xx), within [`RETRY_TIMEOUT`].
pub const MAX_RETRIES: usize = 2;
/// The longest a request and its retries may take.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest one request may take, body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a store lives: a local folder, or a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Folder(std::path::PathBuf),
    Bucket { bucket: String, prefix: String },
}

impl Location {
    /// Reads `--store`: `s3://BUCKET[/PREFIX]`, else a folder.
    pub fn parse(value: &str) -> Result<Self, BucketError> {
        let Some(rest) = value.strip_prefix("s3://") else {
            return Ok(Self::Folder(value.into()));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_matches('/');
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(BucketError::BadLocation {
                location: value.to_string(),
                reason: "a bucket name is 3 to 63 lower-case letters, digits, '-' and '.'"
                    .to_string(),
            });
        }
        if prefix
            .split('/')
            .any(|part| part == "." || part == ".." || (part.is_empty() && !prefix.is_empty()))
        {
            return Err(BucketError::BadLocation {
                location: value.to_string(),
                reason: "a prefix has no empty, '.' or '..' parts".to_string(),
            });
        }
        Ok(Self::Bucket {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }
}

/// A bucket failure: each names the bucket, and what the store answered.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    #[error("--store {location}: {reason}")]
    BadLocation { location: String, reason: String },
    #[error("the object store s3://{bucket}: {action} {key}: {message}")]
    Request {
        bucket: String,
        action: &'static str,
        key: String,
        message: String,
    },
    #[error(
        "the object store s3://{bucket} does not honour conditional writes (If-None-Match): \
         hako needs them so that concurrent uploads never leave a torn state"
    )]
    NoConditionalWrites { bucket: String },
}

/// What a conditional read of a mutable object found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The object, and the ETag to update it with.
    Found {
        bytes: Bytes,
        etag: Option<String>,
    },
    /// Not changed since the ETag given.
    NotModified,
    Missing,
}

/// What a conditional write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    Done,
    /// Another writer came first: the object exists (create) or changed (update).
    Lost,
}

/// The operations a bucket is asked for, as counted.
pub const OPERATIONS: [&str; 3] = ["get", "put", "list"];
/// How a request ended, as counted: `ok`; `missing` (no such key); `not_modified` (a
/// conditional read whose ETag still held); `conflict` (a conditional write another writer
/// won); `error` (the store failed or was not reached).
pub const OUTCOMES: [&str; 5] = ["ok", "missing", "not_modified", "conflict", "error"];

/// What a bucket's requests did, for `/metrics` and `/readyz`: shared by every clone of it.
#[derive(Debug, Default)]
pub struct BucketStats {
    counts: [[AtomicU64; OUTCOMES.len()]; OPERATIONS.len()],
    micros: [AtomicU64; OPERATIONS.len()],
    /// Whether the last request reached the store and got an answer that was no error.
    failing: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl BucketStats {
    fn record(&self, operation: usize, outcome: &'static str, took: Duration, error: Option<&str>) {
        let index = OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(4);
        self.counts[operation][index].fetch_add(1, Ordering::Relaxed);
        self.micros[operation].fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.failing.store(error.is_some(), Ordering::Relaxed);
        if let Some(error) = error {
            *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error.to_string());
        }
    }

    /// The requests of `operation` that ended in `outcome`.
    pub fn count(&self, operation: &str, outcome: &str) -> u64 {
        let op = OPERATIONS.iter().position(|o| *o == operation);
        let out = OUTCOMES.iter().position(|o| *o == outcome);
        match (op, out) {
            (Some(op), Some(out)) => self.counts[op][out].load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// The seconds spent in requests of `operation`.
    pub fn seconds(&self, operation: &str) -> f64 {
        OPERATIONS
            .iter()
            .position(|o| *o == operation)
            .map_or(0.0, |op| {
                self.micros[op].load(Ordering::Relaxed) as f64 / 1e6
            })
    }

    /// `None` when the last request was answered; else that request's error.
    pub fn failure(&self) -> Option<String> {
        if !self.failing.load(Ordering::Relaxed) {
            return None;
        }
        let last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
        Some(last.clone().unwrap_or_default())
    }
}

/// An opened bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    bucket: String,
    prefix: String,
    stats: Arc<BucketStats>,
}

impl Bucket {
    /// Opens `bucket` under `prefix` with the standard variables; nothing is sent yet. Must
    /// run inside a tokio runtime.
    pub async fn open(bucket: &str, prefix: &str) -> Result<Self, BucketError> {
        let vars = std::env::vars_os()
            .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
        Self::open_with(bucket, prefix, vars).await
    }

    /// [`Bucket::open`] with the given `AWS_*` variables instead of the process's.
    pub async fn open_with(
        bucket: &str,
        prefix: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, BucketError> {
        let mut builder = AmazonS3Builder::new();
        for (key, value) in vars {
            if key.starts_with("AWS_") {
                if let Ok(config_key) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                    builder = builder.with_config(config_key, value);
                }
            }
        }
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: MAX_RETRIES,
            retry_timeout: RETRY_TIMEOUT,
        };
        let store = builder
            .with_bucket_name(bucket)
            .with_retry(retry)
            .with_client_options(ClientOptions::new().with_timeout(REQUEST_TIMEOUT))
            .with_http_connector(Connector)
            .build()
            .map_err(|err| BucketError::BadLocation {
                location: format!("s3://{bucket}"),
                reason: err.to_string(),
            })?;
        Ok(Self {
            store: Arc::new(store),
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            stats: Arc::default(),
        })
    }

    /// What its requests did so far.
    pub fn stats(&self) -> &Arc<BucketStats> {
        &self.stats
    }

    /// Counts a request of `operation` begun at `started`.
    fn counted<T>(
        &self,
        operation: usize,
        started: Instant,
        result: Result<T, BucketError>,
        outcome: impl FnOnce(&T) -> &'static str,
    ) -> Result<T, BucketError> {
        let took = started.elapsed();
        match &result {
            Ok(value) => self.stats.record(operation, outcome(value), took, None),
            Err(err) => self
                .stats
                .record(operation, "error", took, Some(&err.to_string())),
        }
        result
    }

    /// The bucket and prefix, as `s3://BUCKET[/PREFIX]`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    fn path(&self, key: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from(format!("{}/{key}", self.prefix))
        }
    }

    fn error(&self, action: &'static str, key: &str, err: object_store::Error) -> BucketError {
        BucketError::Request {
            bucket: self.bucket.clone(),
            action,
            key: self.path(key).to_string(),
            // One line: a store's answer may quote an XML body over several.
            message: err
                .to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    /// Checks that the bucket honours conditional writes, which every writer needs: a probe
    /// object written twice with `If-None-Match: *` must be refused the second time. (Readers
    /// skip it: a node should hold read-only credentials.)
    pub async fn check_conditional_writes(&self) -> Result<(), BucketError> {
        let key = format!(".hako-probe/{}", hex::encode(rand_bytes()));
        if self.create(&key, Bytes::from_static(b"probe")).await? == Written::Lost {
            return Err(BucketError::NoConditionalWrites {
                bucket: self.bucket.clone(),
            });
        }
        let second = self.create(&key, Bytes::from_static(b"probe")).await?;
        // The probe is best removed; a node with read-only rights still could not write it.
        let _ = self.store.delete(&self.path(&key)).await;
        match second {
            Written::Lost => Ok(()),
            Written::Done => Err(BucketError::NoConditionalWrites {
                bucket: self.bucket.clone(),
            }),
        }
    }

    /// Writes `key` unless it exists.
    pub async fn create(&self, key: &str, bytes: Bytes) -> Result<Written, BucketError> {
        self.put(key, bytes, PutMode::Create).await
    }

    /// Replaces `key` if it still has `etag`.
    pub async fn update(
        &self,
        key: &str,
        bytes: Bytes,
        etag: String,
    ) -> Result<Written, BucketError> {
        let version = UpdateVersion {
            e_tag: Some(etag),
            version: None,
        };
        self.put(key, bytes, PutMode::Update(version)).await
    }

    async fn put(&self, key: &str, bytes: Bytes, mode: PutMode) -> Result<Written, BucketError> {
        let started = Instant::now();
        let result = self.put_uncounted(key, bytes, mode).await;
        self.counted(1, started, result, |written| match written {
            Written::Done => "ok",
            Written::Lost => "conflict",
        })
    }

    async fn put_uncounted(
        &self,
        key: &str,
        bytes: Bytes,
        mode: PutMode,
    ) -> Result<Written, BucketError> {
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&self.path(key), PutPayload::from_bytes(bytes), options)
            .await
        {
            Ok(_) => Ok(Written::Done),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(Written::Lost),
            Err(err) => Err(self.error("writing", key, err)),
        }
    }

    /// Reads `key`, unless its ETag is still `known`.
    pub async fn read(&self, key: &str, known: Option<&str>) -> Result<Read, BucketError> {
        let started = Instant::now();
        let result = self.read_uncounted(key, known).await;
        self.counted(0, started, result, |read| match read {
            Read::Found { .. } => "ok",
            Read::NotModified => "not_modified",
            Read::Missing => "missing",
        })
    }

    async fn read_uncounted(&self, key: &str, known: Option<&str>) -> Result<Read, BucketError> {
        let options = GetOptions {
            if_none_match: known.map(str::to_string),
            ..GetOptions::default()
        };
        let found = match self.store.get_opts(&self.path(key), options).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(Read::Missing),
            Err(object_store::Error::NotModified { .. }) => return Ok(Read::NotModified),
            Err(err) => return Err(self.error("reading", key, err)),
        };
        let etag = found.meta.e_tag.clone();
        let bytes = found
            .bytes()
            .await
            .map_err(|err| self.error("reading", key, err))?;
        Ok(Read::Found { bytes, etag })
    }

    /// The keys under `dir` (a key prefix ending before a `/`), relative to it.
    pub async fn list(&self, dir: &str) -> Result<Vec<String>, BucketError> {
        let started = Instant::now();
        let result = self.list_uncounted(dir).await;
        self.counted(2, started, result, |_| "ok")
    }

    async fn list_uncounted(&self, dir: &str) -> Result<Vec<String>, BucketError> {
        use futures_util::TryStreamExt;
        let base = self.path(dir);
        let objects: Vec<_> = self
            .store
            .list(Some(&base))
            .try_collect()
            .await
            .map_err(|err| self.error("listing", dir, err))?;
        let base = format!("{base}/");
        Ok(objects
            .into_iter()
            .filter_map(|meta| {
                meta.location
                    .as_ref()
                    .strip_prefix(&base)
                    .map(str::to_string)
            })
            .collect())
    }
}

/// Sixteen random bytes (for probe names), from the OS.
fn rand_bytes() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .expect("the OS gives random bytes");
    bytes
}

/// object_store's HTTP client: hyper over rustls (ring, the platform's roots), HTTP/1.1 and
/// HTTP/2, plain HTTP allowed where `AWS_ALLOW_HTTP` says so (object_store refuses an
/// `http://` endpoint otherwise).
#[derive(Debug)]
struct Connector;

impl HttpConnector for Connector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let generic = |err: String| object_store::Error::Generic {
            store: "S3",
            source: err.into(),
        };
        let roots = crate::http::roots(&[]).map_err(|e| generic(e.to_string()))?;
        let tls = crate::http::tls_config(roots).map_err(|e| generic(e.to_string()))?;
        let mut tcp = TcpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .build(https);
        Ok(HttpClient::new(Service { client }))
    }
}

struct Service {
    client: Client<hyper_rustls::HttpsConnector<TcpConnector>, HttpRequestBody>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hyper")
    }
}

#[async_trait::async_trait]
impl HttpService for Service {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let kind = |err: &hyper_util::client::legacy::Error| {
            if err.is_connect() {
                HttpErrorKind::Connect
            } else {
                HttpErrorKind::Request
            }
        };
        let response = tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(request))
            .await
            .map_err(|elapsed| HttpError::new(HttpErrorKind::Timeout, elapsed))?
            .map_err(|err| HttpError::new(kind(&err), err))?;
        let (parts, body) = response.into_parts();
        let body = body.map_err(|err| HttpError::new(HttpErrorKind::Decode, err));
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }
}

/// The current-thread runtime a command's bucket requests run on, outside `hako serve`.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_argument_is_a_folder_or_a_bucket_with_a_prefix() {
        assert_eq!(
            Location::parse("some/dir").unwrap(),
            Location::Folder("some/dir".into())
        );
        assert_eq!(
            Location::parse("s3://hako-packages").unwrap(),
            Location::Bucket {
                bucket: "hako-packages".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            Location::parse("s3://hako/prod/eu/").unwrap(),
            Location::Bucket {
                bucket: "hako".into(),
                prefix: "prod/eu".into()
            }
        );
        for bad in [
            "s3://",
            "s3://ab",
            "s3://Upper",
            "s3://b_b_b",
            "s3://hako/a//b",
            "s3://hako/../x",
        ] {
            let err = Location::parse(bad).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!("--store {bad}: ")),
                "{err}"
            );
        }
    }
}
