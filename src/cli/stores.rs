//! `--store` and `--cache`: the store a command uses, a folder or a bucket. On a bucket the
//! command works on a local cache folder (an ordinary store: what was fetched, checked and
//! compiled) and reads from or publishes to the bucket through [`crate::store::remote`];
//! every other part of the command sees one [`Store`], whichever it is.

use std::path::{Path, PathBuf};

use clap::Args;

use super::Failure;
use crate::store::bucket::{self, Bucket, Location};
use crate::store::remote::{self, RemoteError, Trust};
use crate::store::signing::{SigningKey, TrustedKeys};
use crate::store::{PutResult, Store, StoreError, StoredPackage};

/// `--store` and `--cache`.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The store: a folder, or an S3-compatible bucket as s3://BUCKET[/PREFIX] (endpoint,
    /// region and credentials from the AWS_* variables) (default: $HAKO_STORE, else ./.hako).
    #[arg(long, env = "HAKO_STORE", value_name = "DIR|s3://BUCKET[/PREFIX]")]
    store: Option<String>,
    /// With a bucket: the local cache folder of fetched packages and compiled artifacts
    /// (default: $XDG_CACHE_HOME/hako, else ~/.cache/hako).
    #[arg(long, env = "HAKO_CACHE", value_name = "DIR")]
    cache: Option<PathBuf>,
    /// With a bucket: a public key (`hako keygen`'s .pub) whose signed records' native code
    /// this node loads (repeatable); without one, every module is compiled here.
    #[arg(long = "trust-key", value_name = "FILE")]
    trust_keys: Vec<PathBuf>,
    /// With a bucket: refuse a version whose record no trusted key signed.
    #[arg(long)]
    require_signed: bool,
}

/// The store a command opened.
pub struct Opened {
    /// The folder store, or a bucket's local cache.
    pub store: Store,
    remote: Option<Remote>,
}

struct Remote {
    bucket: Bucket,
    trust: Trust,
    runtime: tokio::runtime::Runtime,
}

impl StoreArgs {
    /// Opens the store to read it.
    pub fn open(&self) -> Result<Opened, Failure> {
        self.open_for(false)
    }

    /// Opens the store to write it too: a bucket must honour conditional writes.
    pub fn open_writable(&self) -> Result<Opened, Failure> {
        self.open_for(true)
    }

    /// Where the store is.
    pub fn location(&self) -> Result<Location, Failure> {
        match &self.store {
            Some(value) => Location::parse(value).map_err(|err| Failure::Usage(err.to_string())),
            None => Ok(Location::Folder(crate::store::default_root())),
        }
    }

    /// The cache folder of a bucket.
    pub fn cache(&self) -> PathBuf {
        self.cache.clone().unwrap_or_else(default_cache)
    }

    /// What the command trusts of a bucket's native code.
    pub fn trust(&self) -> Result<Trust, Failure> {
        let keys =
            TrustedKeys::read(&self.trust_keys).map_err(|err| Failure::Usage(err.to_string()))?;
        Ok(Trust {
            keys,
            require_signed: self.require_signed,
        })
    }

    fn open_for(&self, writing: bool) -> Result<Opened, Failure> {
        let trust = self.trust()?;
        match self.location()? {
            Location::Folder(dir) => Ok(Opened {
                store: open_folder(&dir)?.trusting(trust.keys.clone()),
                remote: None,
            }),
            Location::Bucket { bucket, prefix } => {
                let store = open_folder(&self.cache())?.trusting(trust.keys.clone());
                store
                    .mark_bucket_cache()
                    .map_err(|err| Failure::Host(err.into()))?;
                let runtime = bucket::runtime().map_err(|err| Failure::Host(err.into()))?;
                let bucket = runtime
                    .block_on(async {
                        let bucket = Bucket::open(&bucket, &prefix).await?;
                        if writing {
                            bucket.check_conditional_writes().await?;
                        }
                        Ok::<_, bucket::BucketError>(bucket)
                    })
                    .map_err(|err| Failure::Host(err.into()))?;
                Ok(Opened {
                    store,
                    remote: Some(Remote {
                        bucket,
                        trust,
                        runtime,
                    }),
                })
            }
        }
    }
}

/// `$XDG_CACHE_HOME/hako`, else `~/.cache/hako`, else `./.hako-cache`.
pub fn default_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir).join("hako");
    }
    match std::env::var_os("HOME").filter(|dir| !dir.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("hako"),
        None => PathBuf::from(".hako-cache"),
    }
}

fn open_folder(dir: &Path) -> Result<Store, Failure> {
    Store::open(dir).map_err(|err| Failure::Host(err.into()))
}

impl Opened {
    /// The version `name` offers now: on a bucket, fetched into the cache unless it is there.
    pub fn stored(&self, name: &str) -> Result<StoredPackage, Failure> {
        let found = match &self.remote {
            None => self.store.get(name).map_err(RemoteError::Store),
            Some(remote) => remote
                .runtime
                .block_on(remote::sync(
                    &remote.bucket,
                    &self.store,
                    name,
                    &remote.trust,
                ))
                .map(|synced| {
                    if let Some(why) = &synced.untrusted {
                        super::note(&format!(
                            "compiling {name} here: its artifacts in the bucket are not used, as {why}"
                        ));
                    }
                    synced.stored
                }),
        };
        found.map_err(|err| match err {
            RemoteError::Store(err @ StoreError::UnknownPackage(_)) => Failure::Usage(format!(
                "{err} (give a package folder or archive, or upload it first)"
            )),
            other => Failure::Host(other.into()),
        })
    }

    /// After a version was stored in the store (the cache, on a bucket) with the artifacts
    /// `artifacts`: publishes it to the bucket, signed by `signer`, where the result is what
    /// counts. `previous` is the version the cache offered before: it offers it again when the
    /// bucket refuses the new one.
    pub fn publish(
        &self,
        name: &str,
        (previous, stored): (Option<String>, PutResult),
        artifacts: &[String],
        signer: Option<&SigningKey>,
    ) -> Result<PutResult, Failure> {
        let Some(remote) = &self.remote else {
            return Ok(stored);
        };
        let version = self
            .store
            .get(name)
            .map_err(|err| Failure::Host(err.into()))?;
        remote
            .runtime
            .block_on(remote::publish(
                &remote.bucket,
                &version,
                &self.store,
                artifacts,
                signer,
                &remote.trust.keys,
            ))
            .map_err(|err| {
                if let Err(undo) = self.store.restore_current(name, previous.as_deref()) {
                    super::note(&format!(
                        "{name}: undoing an upload that was not published: {undo}"
                    ));
                }
                Failure::Host(err.into())
            })
    }
}
