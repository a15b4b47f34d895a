//! A store whose source of truth is a bucket ([`super::bucket`]): a local [`Store`] (the node's
//! cache folder) holds what was fetched, verified, and compiled; the bucket holds every
//! version's files and record, and which version each package offers.
//!
//! Publishing a version (after the local upload: check, compile, discovery) writes its files
//! as content-addressed blobs, then its record, then swaps the package's `current` pointer by
//! compare-and-swap. A writer killed at any point leaves `current` at a complete version or
//! unchanged: the pointer names a record only once the record and every blob it names exist.
//!
//! Reading a package fetches its pointer, and when the cache does not hold that version yet,
//! its record (checked against the pointer's digest) and every file (each checked against the
//! record's digest), which then go through the same package checks as an upload and into the
//! cache.
//!
//! Native code from the bucket is trusted only through a signature ([`super::signing`]): a
//! record lists the artifacts its uploader compiled (by file name and digest), and an uploader
//! with a signing key stores the record's signature beside it. A reader that trusts the key
//! fetches the artifacts made for its own machine, checks each against the record's digest, and
//! puts them in its artifact cache, where a load checks their headers again (module and engine
//! identity) before the engine sees them. Without a trusted signature it fetches no artifact
//! and compiles the module itself, or with `require_signed` refuses the version.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::artifact::ORIGIN_FORMAT;
use super::bucket::{Bucket, BucketError, Read, Written};
use super::signing::{Signature, SigningKey, TrustedKeys};
use super::{
    sha256_hex, ArtifactKey, Origin, PutResult, Store, StoreError, StoredPackage, UploadRecord,
};
use crate::engines::{self, EngineConfig};
use crate::package::manifest::{is_valid_name, is_valid_version};
use crate::package::tools::Tool;

/// The record format this host writes and reads.
pub const RECORD_FORMAT: u32 = 1;

/// The most times a pointer swap is tried again after losing to another writer.
const MAX_SWAPS: usize = 64;

/// A failure of a store on a bucket.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error(transparent)]
    Bucket(#[from] BucketError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the object store {url}: {key}: {reason}")]
    Refused {
        url: String,
        key: String,
        reason: String,
    },
    #[error("the object store {url}: {key}: refused by --require-signed: {reason}")]
    Unsigned {
        url: String,
        key: String,
        reason: String,
    },
    #[error(
        "the object store {url}: the pointer of {name:?} kept changing under {MAX_SWAPS} tries"
    )]
    Contended { url: String, name: String },
    #[error(
        "the object store {url}: the pointer of {name:?} offers {offered_version} at sequence \
         {offered}, not newer than {held_version} at sequence {held}, which this node holds: \
         refused as a rollback (a node never moves a package back)"
    )]
    Rollback {
        url: String,
        name: String,
        offered: u64,
        offered_version: String,
        held: u64,
        held_version: String,
    },
}

impl RemoteError {
    fn refused(bucket: &Bucket, key: &str, reason: String) -> Self {
        RemoteError::Refused {
            url: bucket.url(),
            key: key.to_string(),
            reason,
        }
    }
}

/// A version's immutable record in the bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub hako_record: u32,
    pub upload: UploadRecord,
    pub tools: Vec<Tool>,
    /// Every file of the version (manifest, module, assets) by its path in the version, with
    /// its SHA-256.
    pub files: BTreeMap<String, String>,
    /// The artifacts compiled at upload, by file name in an artifact cache, with their SHA-256.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub artifacts: BTreeMap<String, String>,
}

/// What a reader trusts of a bucket's native code.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// The keys whose signed records' artifacts it loads.
    pub keys: TrustedKeys,
    /// Refuse a version whose record no trusted key signed.
    pub require_signed: bool,
}

/// What [`sync`] did.
#[derive(Debug, Clone)]
pub struct Synced {
    pub stored: StoredPackage,
    /// Whether the version was fetched from the bucket now (else the cache held it).
    pub fetched: bool,
    /// Artifacts fetched from the bucket into the artifact cache.
    pub artifacts: usize,
    /// Why the record's artifacts were not used, when it lists some for this machine and
    /// no trusted key signed it: the module is compiled here instead.
    pub untrusted: Option<String>,
}

/// A package's mutable pointer: the version it offers, the digest of that version's record,
/// its place in the package's history, and the uploader's signature of all three.
///
/// `sequence` is one more than that of the pointer it replaced (0 for pointers written before
/// they were numbered), so a node can tell an older pointer from a newer one: it never moves a
/// package back ([`RemoteError::Rollback`]). The signature covers the package's name too
/// ([`Pointer::signed_bytes`]), so a signed pointer means the same under any key of the
/// bucket; under `--require-signed` a pointer no trusted key signed is refused, which leaves a
/// bucket writer without the key no way to move a package at all, forwards or back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pointer {
    pub version: String,
    pub record_sha256: String,
    #[serde(default)]
    pub sequence: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
}

impl Pointer {
    /// What a pointer's signature signs: its format, the package's name and the three fields.
    pub fn signed_bytes(&self, name: &str) -> Vec<u8> {
        format!(
            "hako-pointer 1\n{name}\n{}\n{}\n{}\n",
            self.version, self.record_sha256, self.sequence
        )
        .into_bytes()
    }
}

/// What a node holds of a package's pointer (kept in its cache): the last pointer it moved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldPointer {
    pub sequence: u64,
    pub version: String,
    pub record_sha256: String,
}

fn blob_key(digest: &str) -> String {
    format!("blobs/sha256/{digest}")
}

fn record_key(name: &str, version: &str) -> String {
    format!("versions/{name}/{version}.json")
}

fn signature_key(name: &str, version: &str) -> String {
    format!("{}.sig", record_key(name, version))
}

fn pointer_key(name: &str) -> String {
    format!("packages/{name}/current")
}

/// The files of a stored version that a record lists: all but the records the store writes
/// beside them.
fn version_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, StoreError> {
    fn walk(
        dir: &Path,
        relative: &str,
        out: &mut Vec<(String, PathBuf)>,
    ) -> Result<(), StoreError> {
        for entry in fs::read_dir(dir).map_err(super::io("listing", dir))? {
            let entry = entry.map_err(super::io("listing", dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let relative = if relative.is_empty() {
                name
            } else {
                format!("{relative}/{name}")
            };
            let kind = entry.file_type().map_err(super::io("inspecting", &path))?;
            if kind.is_dir() {
                walk(&path, &relative, out)?;
            } else if kind.is_file() && relative != "tools.json" && relative != "upload.json" {
                out.push((relative, path));
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, "", &mut files)?;
    files.sort();
    Ok(files)
}

/// Publishes a version stored in `cache` (as `stored`), with the artifacts named `artifacts`
/// in the cache's artifact folder, to `bucket`, signed by `signer` when given, and makes it
/// what the package offers, noting in `cache` which record it is. The same version with
/// another module in the bucket is refused, as in a local store.
///
/// The new pointer's sequence follows the bucket's pointer only when that one is signed by a
/// key in `trust` or by `signer` itself (any pointer, where neither names a key: nothing is
/// signed then), and always the one `cache` holds for this bucket. So a writer of the bucket
/// without a key cannot push the sequence to its end and freeze the package.
pub async fn publish(
    bucket: &Bucket,
    stored: &StoredPackage,
    cache: &Store,
    artifacts: &[String],
    signer: Option<&SigningKey>,
    trust: &TrustedKeys,
) -> Result<PutResult, RemoteError> {
    let name = &stored.record.name;
    let version = &stored.record.version;
    let mut files = BTreeMap::new();
    for (relative, path) in version_files(&stored.dir)? {
        files.insert(relative, put_blob(bucket, &path).await?);
    }
    let mut compiled = BTreeMap::new();
    for file in artifacts {
        let path = cache
            .artifacts()
            .file(file)
            .ok_or_else(|| RemoteError::Refused {
                url: bucket.url(),
                key: file.clone(),
                reason: "no artifact file of that name".to_string(),
            })?;
        compiled.insert(file.clone(), put_blob(bucket, &path).await?);
    }
    let record = Record {
        hako_record: RECORD_FORMAT,
        upload: stored.record.clone(),
        tools: stored.tools.clone(),
        files,
        artifacts: compiled,
    };
    let ours = serde_json::to_vec(&record).expect("records always serialize");
    let key = record_key(name, version);
    let mut put = PutResult::Stored;
    let mut record_bytes = Bytes::from(ours.clone());
    if bucket.create(&key, record_bytes.clone()).await? == Written::Lost {
        let (existing, existing_bytes) = read_record(bucket, &key, None).await?;
        if existing.upload.module_sha256 != record.upload.module_sha256 {
            return Err(StoreError::VersionChanged {
                name: name.clone(),
                version: version.clone(),
            }
            .into());
        }
        existing.upload.same_origin(record.upload.origin.as_ref())?;
        record_bytes = existing_bytes;
        put = PutResult::Unchanged;
    }
    // A signer vouches only for the record it wrote: the same bytes, when an earlier upload of
    // it was stopped before its signature.
    if let Some(signer) = signer.filter(|_| record_bytes == ours) {
        let signature =
            serde_json::to_vec(&signer.sign(&record_bytes)).expect("signatures always serialize");
        bucket
            .create(&signature_key(name, version), Bytes::from(signature))
            .await?;
    }
    // Past the pointer this cache last held too, should the bucket's be older (put back).
    let held = held_pointer(cache, bucket, name);
    let followed = match signer {
        Some(signer) => trust.clone().with_signer(signer),
        None => trust.clone(),
    };
    let pointer = swap_pointer(
        bucket,
        name,
        (version, &sha256_hex(&record_bytes)),
        (held.as_ref().map_or(0, |held| held.sequence), &followed),
        signer,
    )
    .await?;
    cache.note_record(name, version, &pointer.record_sha256)?;
    note_pointer(cache, bucket, name, &pointer, held.as_ref())?;
    Ok(put)
}

/// Writes the file at `path` as a blob named by its content; returns the digest.
async fn put_blob(bucket: &Bucket, path: &Path) -> Result<String, RemoteError> {
    let bytes = fs::read(path).map_err(super::io("reading", path))?;
    let digest = sha256_hex(&bytes);
    // A blob is named by its content: one already there is the same bytes (readers check).
    bucket
        .create(&blob_key(&digest), Bytes::from(bytes))
        .await?;
    Ok(digest)
}

/// Points `name` at `version` (whose record has the digest `record_sha256`) by
/// compare-and-swap, one sequence past the pointer it replaces when `followed` vouches for it
/// ([`follows`]), and past `held`, the one the writer's cache holds; signed by `signer` when
/// given, trying again while other writers win. Returns the pointer written.
async fn swap_pointer(
    bucket: &Bucket,
    name: &str,
    (version, record_sha256): (&str, &str),
    (held, followed): (u64, &TrustedKeys),
    signer: Option<&SigningKey>,
) -> Result<Pointer, RemoteError> {
    let key = pointer_key(name);
    for _ in 0..MAX_SWAPS {
        let read = bucket.read(&key, None).await?;
        // A pointer that cannot be read, or that no key vouches for, counts as none: the new
        // one follows what this writer held, which nodes that held a later one refuse (they
        // keep what they hold).
        let previous = match &read {
            Read::Found { bytes, .. } => serde_json::from_slice::<Pointer>(bytes)
                .ok()
                .filter(|pointer| follows(pointer, name, followed))
                .map_or(0, |pointer| pointer.sequence),
            Read::Missing | Read::NotModified => 0,
        };
        // A sequence at its end (a bucket writer can put any number there) is refused, not
        // wrapped round to an older one.
        let Some(sequence) = previous.max(held).checked_add(1) else {
            return Err(RemoteError::Refused {
                url: bucket.url(),
                key,
                reason: format!(
                    "the pointer's sequence is {}, past which none can follow (a key that signs \
                     for this store signed it: see \"A pointer at the end of its sequence\" in \
                     the README)",
                    u64::MAX
                ),
            });
        };
        let mut pointer = Pointer {
            version: version.to_string(),
            record_sha256: record_sha256.to_string(),
            sequence,
            signature: None,
        };
        pointer.signature = signer.map(|signer| signer.sign(&pointer.signed_bytes(name)));
        let bytes = Bytes::from(serde_json::to_vec(&pointer).expect("pointers always serialize"));
        let written = match read {
            Read::Found {
                etag: Some(etag), ..
            } => bucket.update(&key, bytes, etag).await?,
            Read::Found { etag: None, .. } => {
                return Err(RemoteError::Refused {
                    url: bucket.url(),
                    key,
                    reason: "the store gave no ETag, which a compare-and-swap needs".to_string(),
                })
            }
            Read::Missing | Read::NotModified => bucket.create(&key, bytes).await?,
        };
        if written == Written::Done {
            return Ok(pointer);
        }
    }
    Err(RemoteError::Contended {
        url: bucket.url(),
        name: name.to_string(),
    })
}

/// Whether a writer's next pointer follows `pointer`'s sequence: when a key of `keys` signed
/// it, or when `keys` names none (where nothing is signed, every pointer counts).
fn follows(pointer: &Pointer, name: &str, keys: &TrustedKeys) -> bool {
    keys.is_empty()
        || pointer.signature.as_ref().is_some_and(|signature| {
            keys.verify_signature(&pointer.signed_bytes(name), signature)
                .is_ok()
        })
}

/// The name of the note in which a cache keeps the pointer it holds of a package in `bucket`:
/// one per store (URL and prefix), since one cache may serve many stores, and a pointer of one
/// says nothing of another's.
fn pointer_note(bucket: &Bucket) -> String {
    format!("pointer-{}", &sha256_hex(bucket.url().as_bytes())[..16])
}

/// The pointer `cache` last moved `name` to in `bucket`, if it keeps one.
pub fn held_pointer(cache: &Store, bucket: &Bucket, name: &str) -> Option<HeldPointer> {
    let bytes = cache.noted(name, &pointer_note(bucket))?;
    serde_json::from_slice(&bytes).ok()
}

/// Keeps `pointer` as the one `cache` holds for `name` in `bucket`, unless it is `held`, the
/// one it held.
fn note_pointer(
    cache: &Store,
    bucket: &Bucket,
    name: &str,
    pointer: &Pointer,
    held: Option<&HeldPointer>,
) -> Result<(), StoreError> {
    let held_now = HeldPointer {
        sequence: pointer.sequence,
        version: pointer.version.clone(),
        record_sha256: pointer.record_sha256.clone(),
    };
    if held == Some(&held_now) {
        return Ok(());
    }
    let held = held_now;
    cache.note(
        name,
        &pointer_note(bucket),
        &serde_json::to_vec(&held).expect("pointers always serialize"),
    )
}

/// Whether the node may move `name` to `pointer`: under `--require-signed` only when a
/// trusted key signed it, and never to a pointer older than the one it holds (nor to another
/// one of the same sequence). Returns the pointer it holds.
fn check_pointer(
    bucket: &Bucket,
    cache: &Store,
    name: &str,
    pointer: &Pointer,
    trust: &Trust,
) -> Result<Option<HeldPointer>, RemoteError> {
    if trust.require_signed {
        let signed = match &pointer.signature {
            None => Err("the pointer is not signed".to_string()),
            Some(signature) => trust
                .keys
                .verify_signature(&pointer.signed_bytes(name), signature)
                .map_err(|why| format!("the pointer's signature: {why}")),
        };
        if let Err(reason) = signed {
            return Err(RemoteError::Unsigned {
                url: bucket.url(),
                key: pointer_key(name),
                reason,
            });
        }
    }
    let Some(held) = held_pointer(cache, bucket, name) else {
        return Ok(None);
    };
    let same = pointer.version == held.version && pointer.record_sha256 == held.record_sha256;
    let older = pointer.sequence < held.sequence || (pointer.sequence == held.sequence && !same);
    // Pointers written before they were numbered (0) move as they always did.
    if held.sequence > 0 && older {
        return Err(RemoteError::Rollback {
            url: bucket.url(),
            name: name.to_string(),
            offered: pointer.sequence,
            offered_version: pointer.version.clone(),
            held: held.sequence,
            held_version: held.version,
        });
    }
    Ok(Some(held))
}

/// Reads a record (and its bytes), checked against `digest` when given, and against its own
/// key.
async fn read_record(
    bucket: &Bucket,
    key: &str,
    digest: Option<&str>,
) -> Result<(Record, Bytes), RemoteError> {
    let refused = |reason: String| RemoteError::refused(bucket, key, reason);
    let bytes = match bucket.read(key, None).await? {
        Read::Found { bytes, .. } => bytes,
        Read::Missing | Read::NotModified => {
            return Err(refused("the record is missing".to_string()))
        }
    };
    if let Some(digest) = digest {
        let found = sha256_hex(&bytes);
        if found != digest {
            return Err(refused(format!(
                "the record's SHA-256 is {found}, not the {digest} its package's pointer names"
            )));
        }
    }
    let record: Record = serde_json::from_slice(&bytes)
        .map_err(|err| refused(format!("the record is malformed: {err}")))?;
    if record.hako_record != RECORD_FORMAT {
        return Err(refused(format!(
            "record format {} is not {RECORD_FORMAT}, the one this host reads",
            record.hako_record
        )));
    }
    if key != record_key(&record.upload.name, &record.upload.version) {
        return Err(refused(format!(
            "the record is of {} {}, not of its key",
            record.upload.name, record.upload.version
        )));
    }
    Ok((record, bytes))
}

/// The package's pointer in the bucket.
pub async fn pointer(bucket: &Bucket, name: &str) -> Result<Pointer, RemoteError> {
    match pointer_since(bucket, name, None).await? {
        Some((pointer, _)) => Ok(pointer),
        None => Err(StoreError::UnknownPackage(name.to_string()).into()),
    }
}

/// The package's pointer and its ETag, or `None` when its ETag is still `known`.
pub async fn pointer_since(
    bucket: &Bucket,
    name: &str,
    known: Option<&str>,
) -> Result<Option<(Pointer, Option<String>)>, RemoteError> {
    if !is_valid_name(name) {
        return Err(StoreError::UnknownPackage(name.to_string()).into());
    }
    let key = pointer_key(name);
    let (bytes, etag) = match bucket.read(&key, known).await? {
        Read::Found { bytes, etag } => (bytes, etag),
        Read::NotModified => return Ok(None),
        Read::Missing => return Err(StoreError::UnknownPackage(name.to_string()).into()),
    };
    let pointer: Pointer = serde_json::from_slice(&bytes).map_err(|err| RemoteError::Refused {
        url: bucket.url(),
        key: key.clone(),
        reason: format!("the pointer is malformed: {err}"),
    })?;
    if !is_valid_version(&pointer.version) {
        return Err(RemoteError::Refused {
            url: bucket.url(),
            key,
            reason: format!("{:?} is not a version", pointer.version),
        });
    }
    Ok(Some((pointer, etag)))
}

/// Makes `cache` hold the version `name` offers in the bucket, as what it offers too, and
/// returns it: from the cache when it holds that version already, else fetched and checked.
pub async fn sync(
    bucket: &Bucket,
    cache: &Store,
    name: &str,
    trust: &Trust,
) -> Result<Synced, RemoteError> {
    let pointer = pointer(bucket, name).await?;
    sync_to(bucket, cache, name, &pointer, trust).await
}

/// [`sync`] to the version `pointer` names (the package's pointer, just read).
pub async fn sync_to(
    bucket: &Bucket,
    cache: &Store,
    name: &str,
    pointer: &Pointer,
    trust: &Trust,
) -> Result<Synced, RemoteError> {
    let offer = |stored: StoredPackage| -> Result<StoredPackage, RemoteError> {
        if cache.current_version(name).ok().as_deref() != Some(pointer.version.as_str()) {
            cache.set_current(name, &pointer.version)?;
        }
        Ok(stored)
    };
    let holding = check_pointer(bucket, cache, name, pointer, trust)?;
    let held = cache.version(name, &pointer.version).ok();
    if let Some(held) = &held {
        if cache.noted_record(name, &pointer.version).as_deref() == Some(&pointer.record_sha256) {
            note_pointer(cache, bucket, name, pointer, holding.as_ref())?;
            return Ok(Synced {
                stored: offer(held.clone())?,
                fetched: false,
                artifacts: 0,
                untrusted: None,
            });
        }
    }
    let key = record_key(name, &pointer.version);
    let (record, record_bytes) = read_record(bucket, &key, Some(&pointer.record_sha256)).await?;
    let refused = |key: &str, reason: String| RemoteError::refused(bucket, key, reason);
    let wanted = node_artifacts(&record);
    let signed = async {
        Ok::<_, RemoteError>(
            match (
                trust.keys.is_empty(),
                trust.require_signed || !wanted.is_empty(),
            ) {
                // Nothing here needs a signature: no artifact is fetched.
                (_, false) => Ok(None),
                (true, true) => Err("no key is trusted (--trust-key)".to_string()),
                (false, true) => verify(bucket, name, &pointer.version, &record_bytes, trust)
                    .await?
                    .map(Some),
            },
        )
    };
    // The signature is read while the files are fetched; what they were fetched for is
    // refused below, before anything of it is offered, when the signature must be there.
    let files = async {
        if held.is_some() || trust.require_signed {
            return Ok::<_, RemoteError>(None);
        }
        fetch_files(bucket, cache, name, pointer, &key, &record)
            .await
            .map(Some)
    };
    let (signed, fetched): (Result<Option<String>, String>, Option<Fetched>) =
        tokio::try_join!(signed, files)?;
    if let (true, Err(why)) = (trust.require_signed, &signed) {
        return Err(RemoteError::Unsigned {
            url: bucket.url(),
            key,
            reason: format!("no trusted key signed the record: {why}"),
        });
    }
    let fetched_now = held.is_none();
    let mut artifacts = 0;
    let mut untrusted = None;
    if let Some(held) = &held {
        // Held, but not known to be this record's: the same module and tools, or refused.
        if held.record != record.upload || held.tools != record.tools {
            return Err(refused(
                &key,
                format!(
                    "the cache {} holds another {name} {} than the bucket: remove it from the \
                     cache",
                    cache.root().display(),
                    pointer.version
                ),
            ));
        }
    }
    match signed {
        Ok(None) => {}
        Ok(Some(signer)) => {
            let origin = Origin {
                hako_origin: ORIGIN_FORMAT,
                record_sha256: pointer.record_sha256.clone(),
                public_key: signer,
            };
            let missing: Vec<&String> = wanted
                .iter()
                .filter(|file| cache.artifacts().file(file).is_none())
                .collect();
            let fetched = futures_util::future::try_join_all(missing.iter().map(|file| {
                let digest = &record.artifacts[file.as_str()];
                read_blob(bucket, digest, file)
            }))
            .await?;
            for (file, bytes) in missing.into_iter().zip(fetched) {
                cache
                    .artifacts()
                    .install(file, &bytes, &origin)
                    .map_err(|err| refused(&blob_key(&record.artifacts[file]), err.to_string()))?;
                artifacts += 1;
            }
        }
        Err(why) if !wanted.is_empty() => untrusted = Some(why),
        Err(_) => {}
    }
    // The version becomes current in the cache only now, with its artifacts in place: a call
    // that sees it never compiles what the bucket holds compiled.
    let stored = match held {
        Some(held) => held,
        None => {
            // Under --require-signed the files are fetched only once the signature held.
            let fetched = match fetched {
                Some(fetched) => fetched,
                None => fetch_files(bucket, cache, name, pointer, &key, &record).await?,
            };
            cache.put(&fetched.package, &record.tools, &record.upload.engines)?;
            cache.version(name, &pointer.version)?
        }
    };
    cache.note_record(name, &pointer.version, &pointer.record_sha256)?;
    note_pointer(cache, bucket, name, pointer, holding.as_ref())?;
    Ok(Synced {
        fetched: fetched_now,
        stored: offer(stored)?,
        artifacts,
        untrusted,
    })
}

/// Which trusted key signed the record (`Ok(Err(why))` when none did).
async fn verify(
    bucket: &Bucket,
    name: &str,
    version: &str,
    record: &[u8],
    trust: &Trust,
) -> Result<Result<String, String>, RemoteError> {
    Ok(
        match bucket.read(&signature_key(name, version), None).await? {
            Read::Found { bytes, .. } => trust.keys.verify(record, &bytes),
            Read::Missing | Read::NotModified => Err("the record is not signed".to_string()),
        },
    )
}

/// The file names of the record's artifacts that this machine would load: those of its
/// engine configurations, made for this CPU or for its triple's baseline.
fn node_artifacts(record: &Record) -> Vec<String> {
    let mut names = Vec::new();
    for config in EngineConfig::all() {
        if !record.upload.engines.contains(&config.name()) {
            continue;
        }
        let (config, _) = engines::effective_config(config, record.upload.uses_simd);
        let Ok(engine) = engines::engine(config, None) else {
            continue;
        };
        let mut keys = vec![ArtifactKey::new(
            &record.upload.module_sha256,
            engine.identity(),
        )];
        if let Ok(Some(baseline)) = engines::baseline_engine(config, engine.as_ref()) {
            keys.push(ArtifactKey::new(
                &record.upload.module_sha256,
                baseline.identity(),
            ));
        }
        for key in keys {
            let file = key.file_name();
            if record.artifacts.contains_key(&file) && !names.contains(&file) {
                names.push(file);
            }
        }
    }
    names
}

/// The bytes of the blob `digest`, checked against it (`what` names it in errors).
async fn read_blob(bucket: &Bucket, digest: &str, what: &str) -> Result<Bytes, RemoteError> {
    let blob = blob_key(digest);
    let refused = |reason: String| RemoteError::refused(bucket, &blob, reason);
    let bytes = match bucket.read(&blob, None).await? {
        Read::Found { bytes, .. } => bytes,
        Read::Missing | Read::NotModified => {
            return Err(refused(format!("the blob of {what} is missing")))
        }
    };
    let found = sha256_hex(&bytes);
    if found != digest {
        return Err(refused(format!(
            "the blob of {what} has SHA-256 {found}, not {digest}"
        )));
    }
    Ok(bytes)
}

/// A version's files fetched into a staging folder of the cache and checked as an upload's.
struct Fetched {
    package: crate::package::Package,
    /// Holds the package's files until they are stored.
    _staging: tempfile::TempDir,
}

/// Fetches a version's files into the cache's staging folder, through the package checks of
/// an upload; [`sync_to`] stores them once their artifacts are in place.
async fn fetch_files(
    bucket: &Bucket,
    cache: &Store,
    name: &str,
    pointer: &Pointer,
    key: &str,
    record: &Record,
) -> Result<Fetched, RemoteError> {
    let refused = |reason: String| RemoteError::refused(bucket, key, reason);
    let work = cache.staging()?;
    let staging = tempfile::Builder::new()
        .prefix("fetch-")
        .tempdir_in(&work)
        .map_err(super::io("creating a folder in", &work))?;
    let mut targets = Vec::new();
    for (relative, digest) in &record.files {
        let target = confined(staging.path(), relative).ok_or_else(|| {
            refused(format!(
                "the record names the file {relative:?}, which is no path inside a package"
            ))
        })?;
        targets.push((target, relative, digest));
    }
    // The files are fetched at once: a first call waits for the slowest, not for their sum.
    let blobs = futures_util::future::try_join_all(
        targets
            .iter()
            .map(|(_, relative, digest)| read_blob(bucket, digest, relative)),
    )
    .await?;
    for ((target, _, _), bytes) in targets.iter().zip(blobs) {
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(super::io("creating", parent))?;
        }
        fs::write(target, &bytes).map_err(super::io("writing", target))?;
    }
    let package = crate::package::load(staging.path()).map_err(|err| {
        refused(format!(
            "the version's files are not a valid package: {err}"
        ))
    })?;
    if package.module_sha256 != record.upload.module_sha256
        || package.manifest.name != name
        || package.manifest.version != pointer.version
    {
        return Err(refused(
            "the version's files are not the package its record describes".to_string(),
        ));
    }
    Ok(Fetched {
        package,
        _staging: staging,
    })
}

/// `relative` joined to `root` when it is a plain relative path of normal parts.
fn confined(root: &Path, relative: &str) -> Option<PathBuf> {
    let path = Path::new(relative);
    let normal = path
        .components()
        .all(|part| matches!(part, Component::Normal(_)));
    (normal && !relative.is_empty() && !relative.contains('\\')).then(|| root.join(path))
}

/// The names of the packages the bucket offers, sorted.
pub async fn list(bucket: &Bucket) -> Result<Vec<String>, RemoteError> {
    let mut names: Vec<String> = bucket
        .list("packages")
        .await?
        .into_iter()
        .filter_map(|key| {
            let (name, rest) = key.split_once('/')?;
            (rest == "current" && is_valid_name(name)).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_only_plain_paths_inside_the_package() {
        let root = Path::new("/r");
        assert_eq!(
            confined(root, "assets/a/b.txt"),
            Some(PathBuf::from("/r/assets/a/b.txt"))
        );
        for bad in ["", "/etc/passwd", "../x", "assets/../../x", "./x", "a\\b"] {
            assert_eq!(confined(root, bad), None, "{bad}");
        }
    }
}
