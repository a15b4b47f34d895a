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
//! cache. Nothing from the bucket is trusted as native code: the cache compiles the module
//! itself, as for any stored package without an artifact.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::bucket::{Bucket, BucketError, Read, Written};
use super::{sha256_hex, PutResult, Store, StoreError, StoredPackage, UploadRecord};
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
    #[error(
        "the object store {url}: the pointer of {name:?} kept changing under {MAX_SWAPS} tries"
    )]
    Contended { url: String, name: String },
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
}

/// A package's mutable pointer: the version it offers, and the digest of that version's
/// record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pointer {
    pub version: String,
    pub record_sha256: String,
}

fn blob_key(digest: &str) -> String {
    format!("blobs/sha256/{digest}")
}

fn record_key(name: &str, version: &str) -> String {
    format!("versions/{name}/{version}.json")
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

/// Publishes a version stored in `cache` (as `stored`) to `bucket` and makes it what the
/// package offers, noting in `cache` which record it is. The same version with another module
/// in the bucket is refused, as in a local store.
pub async fn publish(
    bucket: &Bucket,
    stored: &StoredPackage,
    cache: Option<&Store>,
) -> Result<PutResult, RemoteError> {
    let name = &stored.record.name;
    let version = &stored.record.version;
    let mut files = BTreeMap::new();
    for (relative, path) in version_files(&stored.dir)? {
        let bytes = fs::read(&path).map_err(super::io("reading", &path))?;
        let digest = sha256_hex(&bytes);
        // A blob is named by its content: one already there is the same bytes (readers check).
        bucket
            .create(&blob_key(&digest), Bytes::from(bytes))
            .await?;
        files.insert(relative, digest);
    }
    let record = Record {
        hako_record: RECORD_FORMAT,
        upload: stored.record.clone(),
        tools: stored.tools.clone(),
        files,
    };
    let mut record_bytes = serde_json::to_vec(&record).expect("records always serialize");
    let key = record_key(name, version);
    let mut put = PutResult::Stored;
    if bucket
        .create(&key, Bytes::from(record_bytes.clone()))
        .await?
        == Written::Lost
    {
        let (existing, existing_bytes) = read_record(bucket, &key, None).await?;
        if existing.upload.module_sha256 != record.upload.module_sha256 {
            return Err(StoreError::VersionChanged {
                name: name.clone(),
                version: version.clone(),
            }
            .into());
        }
        record_bytes = existing_bytes.to_vec();
        put = PutResult::Unchanged;
    }
    let pointer = Pointer {
        version: version.clone(),
        record_sha256: sha256_hex(&record_bytes),
    };
    swap_pointer(bucket, name, &pointer).await?;
    if let Some(cache) = cache {
        cache.note_record(name, version, &pointer.record_sha256)?;
    }
    Ok(put)
}

/// Points `name` at `pointer` by compare-and-swap, trying again while other writers win.
async fn swap_pointer(bucket: &Bucket, name: &str, pointer: &Pointer) -> Result<(), RemoteError> {
    let key = pointer_key(name);
    let bytes = Bytes::from(serde_json::to_vec(pointer).expect("pointers always serialize"));
    for _ in 0..MAX_SWAPS {
        let written = match bucket.read(&key, None).await? {
            Read::Found {
                etag: Some(etag), ..
            } => bucket.update(&key, bytes.clone(), etag).await?,
            Read::Found { etag: None, .. } => {
                return Err(RemoteError::Refused {
                    url: bucket.url(),
                    key,
                    reason: "the store gave no ETag, which a compare-and-swap needs".to_string(),
                })
            }
            Read::Missing | Read::NotModified => bucket.create(&key, bytes.clone()).await?,
        };
        if written == Written::Done {
            return Ok(());
        }
    }
    Err(RemoteError::Contended {
        url: bucket.url(),
        name: name.to_string(),
    })
}

/// Reads a record (and its bytes), checked against `digest` when given, and against its own
/// key.
async fn read_record(
    bucket: &Bucket,
    key: &str,
    digest: Option<&str>,
) -> Result<(Record, Bytes), RemoteError> {
    let refused = |reason: String| RemoteError::Refused {
        url: bucket.url(),
        key: key.to_string(),
        reason,
    };
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
    if !is_valid_name(name) {
        return Err(StoreError::UnknownPackage(name.to_string()).into());
    }
    let key = pointer_key(name);
    let bytes = match bucket.read(&key, None).await? {
        Read::Found { bytes, .. } => bytes,
        Read::Missing | Read::NotModified => {
            return Err(StoreError::UnknownPackage(name.to_string()).into())
        }
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
    Ok(pointer)
}

/// Makes `cache` hold the version `name` offers in the bucket, as what it offers too, and
/// returns it: from the cache when it holds that version already, else fetched and checked.
pub async fn sync(
    bucket: &Bucket,
    cache: &Store,
    name: &str,
) -> Result<StoredPackage, RemoteError> {
    let pointer = pointer(bucket, name).await?;
    let offer = |held: StoredPackage| -> Result<StoredPackage, RemoteError> {
        if cache.current_version(name).ok().as_deref() != Some(pointer.version.as_str()) {
            cache.set_current(name, &pointer.version)?;
        }
        Ok(held)
    };
    let held = cache.version(name, &pointer.version).ok();
    if let Some(held) = &held {
        if cache.noted_record(name, &pointer.version).as_deref() == Some(&pointer.record_sha256) {
            return offer(held.clone());
        }
    }
    let key = record_key(name, &pointer.version);
    let (record, _) = read_record(bucket, &key, Some(&pointer.record_sha256)).await?;
    if let Some(held) = held {
        // Held, but not known to be this record's: the same module and tools, or refused.
        if held.record != record.upload || held.tools != record.tools {
            return Err(RemoteError::Refused {
                url: bucket.url(),
                key,
                reason: format!(
                    "the cache {} holds another {name} {} than the bucket: remove it from the \
                     cache",
                    cache.root().display(),
                    pointer.version
                ),
            });
        }
        cache.note_record(name, &pointer.version, &pointer.record_sha256)?;
        return offer(held);
    }
    let work = cache.staging()?;
    let staging = tempfile::Builder::new()
        .prefix("fetch-")
        .tempdir_in(&work)
        .map_err(super::io("creating a folder in", &work))?;
    for (relative, digest) in &record.files {
        let target = confined(staging.path(), relative).ok_or_else(|| RemoteError::Refused {
            url: bucket.url(),
            key: key.clone(),
            reason: format!(
                "the record names the file {relative:?}, which is no path inside a package"
            ),
        })?;
        let blob = blob_key(digest);
        let bytes = match bucket.read(&blob, None).await? {
            Read::Found { bytes, .. } => bytes,
            Read::Missing | Read::NotModified => {
                return Err(RemoteError::Refused {
                    url: bucket.url(),
                    key: blob,
                    reason: format!("the blob of {relative} is missing"),
                })
            }
        };
        let found = sha256_hex(&bytes);
        if &found != digest {
            return Err(RemoteError::Refused {
                url: bucket.url(),
                key: blob,
                reason: format!("the blob of {relative} has SHA-256 {found}, not {digest}"),
            });
        }
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(super::io("creating", parent))?;
        }
        fs::write(&target, &bytes).map_err(super::io("writing", &target))?;
    }
    let refused = |reason: String| RemoteError::Refused {
        url: bucket.url(),
        key: key.clone(),
        reason,
    };
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
    cache.put(&package, &record.tools, &record.upload.engines)?;
    cache.note_record(name, &pointer.version, &pointer.record_sha256)?;
    Ok(cache.get(name)?)
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
