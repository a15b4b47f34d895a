//! The package store: uploaded packages with what discovery answered, and their precompiled
//! artifacts, under one folder (`./.hako` unless `--store` or `HAKO_STORE` says otherwise).
//!
//! ```text
//! <store>/packages/<name>/current                 the version the package offers now
//! <store>/packages/<name>/versions/<version>/      subako-package.json, module.wasm, assets/,
//!                                                  tools.json (discovery), upload.json
//! <store>/artifacts/<compiler>-<digest>.artifact   see `artifact`
//! <store>/staging/                                 work in progress, see `staging`
//! ```
//!
//! A stored version is immutable: uploading the same version with the same module again is a
//! no-op, uploading it with another module is refused (bump the version), and a new version
//! replaces what the package offers. The store does not check or run packages; `upload` in
//! the CLI strings check, compile, discovery and store together.
//!
//! Versions live in a folder of their own, so that no version string (whose grammar is
//! [`crate::package::manifest::is_valid_version`]: it never starts with `.`) can name the
//! `current` file or a staging folder. A version folder of the first layout,
//! `<name>/<version>/`, is still read.

pub mod artifact;
pub mod bucket;
mod loader;
mod modules;
pub mod remote;
pub mod signing;
pub mod staging;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use artifact::{ArtifactCache, ArtifactError, ArtifactKey, Origin};
pub use loader::{Loaded, ModuleBytes, ModuleSource, ModuleSpec, Source};
pub use modules::{ModuleCache, DEFAULT_CACHE_BYTES, MAX_CACHED_MODULES};
pub use staging::Staging;

use crate::compile::CompileBounds;
use crate::package::manifest::is_valid_version;
use crate::package::tools::Tool;
use crate::package::Package;

/// The SHA-256 of `bytes`, as lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The store folder to use when none is given: `HAKO_STORE`, else `./.hako`.
pub fn default_root() -> PathBuf {
    std::env::var_os("HAKO_STORE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".hako"))
}

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no package named {0:?} in the store")]
    UnknownPackage(String),
    #[error(
        "{name} {version} is already stored with another module; a stored version never \
         changes, so upload it as a new version"
    )]
    VersionChanged { name: String, version: String },
    #[error(
        "{name} {version} is already stored from the manifest {stored}, and its reference now \
         names {now}: a tag moved under a stored version is refused, as a changed module is; \
         push the change as a new version"
    )]
    OriginChanged {
        name: String,
        version: String,
        stored: String,
        now: String,
    },
    #[error(
        "version {0:?} is not a version the store keeps (rule manifest.version: 1 to 64 bytes of \
         0-9, A-Z, a-z, '.', '+' and '-', not starting with '.')"
    )]
    BadVersion(String),
    #[error(
        "{path} does not match the digest recorded at upload (recorded {recorded}, found \
         {found}): the store was changed outside hako"
    )]
    Tampered {
        path: PathBuf,
        recorded: String,
        found: String,
    },
    #[error("the stored record {path} is malformed: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error(
        "the store folder {path} {reason}; only hako may write to a store (it loads native code \
         from it), so the folder must belong to the user running hako and be writable by no one \
         else"
    )]
    Untrusted { path: PathBuf, reason: String },
}

/// Refuses `dir` unless it belongs to the user running hako and no one else may write it.
fn only_ours(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let metadata = fs::metadata(dir).map_err(io("reading", dir))?;
    let untrusted = |reason: String| StoreError::Untrusted {
        path: dir.to_path_buf(),
        reason,
    };
    let user = rustix::process::geteuid().as_raw();
    if metadata.uid() != user {
        return Err(untrusted(format!(
            "belongs to user {}, not to user {user} who runs hako",
            metadata.uid()
        )));
    }
    let mode = metadata.mode();
    if mode & 0o022 != 0 {
        return Err(untrusted(format!(
            "is writable by its group or by everyone (mode {:o})",
            mode & 0o7777
        )));
    }
    Ok(())
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// What an upload recorded about a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    pub name: String,
    pub version: String,
    pub description: Option<String>,
    pub module_sha256: String,
    pub uses_simd: bool,
    /// The engine configurations artifacts were made with (`wasmer-cranelift`, …).
    #[serde(alias = "compilers")]
    pub engines: Vec<String>,
    /// Where the version was pulled from, for one from a registry: the reference as given and
    /// the manifest's digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::registry::Origin>,
}

impl UploadRecord {
    /// Whether a package that `origin` describes may be this stored version again: the same
    /// manifest, or one of them not from a registry at all. `Err` names the two digests.
    pub fn same_origin(&self, origin: Option<&crate::registry::Origin>) -> Result<(), StoreError> {
        match (&self.origin, origin) {
            (Some(stored), Some(now)) if stored.digest != now.digest => {
                Err(StoreError::OriginChanged {
                    name: self.name.clone(),
                    version: self.version.clone(),
                    stored: stored.digest.to_string(),
                    now: now.digest.to_string(),
                })
            }
            _ => Ok(()),
        }
    }
}

/// A stored version of a package.
#[derive(Debug, Clone)]
pub struct StoredPackage {
    pub dir: PathBuf,
    pub record: UploadRecord,
    pub tools: Vec<Tool>,
}

impl StoredPackage {
    /// The module's bytes, verified against the digest recorded at upload: a module swapped
    /// in from elsewhere is refused, never run (or compiled) under this package's name.
    pub fn wasm(&self) -> Result<Vec<u8>, StoreError> {
        let path = self.module_path();
        let wasm = crate::package::read_stored_module(&path).map_err(io("reading", &path))?;
        let found = sha256_hex(&wasm);
        if found != self.record.module_sha256 {
            return Err(StoreError::Tampered {
                path,
                recorded: self.record.module_sha256.clone(),
                found,
            });
        }
        Ok(wasm)
    }

    /// The module's file, unread: [`ModuleBytes::File`] reads (and verifies) it only to
    /// compile.
    pub fn module_path(&self) -> PathBuf {
        self.dir.join("module.wasm")
    }

    /// The assets folder, mounted as `/package`, when the package has one.
    pub fn assets(&self) -> Option<PathBuf> {
        let assets = self.dir.join("assets");
        assets.is_dir().then_some(assets)
    }
}

/// The store at one folder.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    artifacts: ArtifactCache,
    staging: Arc<Staging>,
    /// What bounds a compile made for this store (an upload's, or a call's on a cache miss).
    compile_bounds: CompileBounds,
    /// The keys whose signed records' artifacts, fetched from a bucket, are loaded; an
    /// artifact fetched under any other key is compiled here again.
    trusted: Arc<signing::TrustedKeys>,
}

/// What [`Store::put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutResult {
    /// The version was new and is now what the package offers.
    Stored,
    /// The same version with the same module was already stored; it is what the package offers.
    Unchanged,
}

/// The file that marks a folder as a bucket's cache of the current format.
const BUCKET_CACHE_MARK: &str = "bucket-cache";

/// What [`BUCKET_CACHE_MARK`] holds: the format, in which every fetched artifact has its origin.
const BUCKET_CACHE_FORMAT: &[u8] = b"hako bucket cache 2: fetched artifacts keep their origin\n";

impl Store {
    /// Opens (and creates) the store at `root`.
    ///
    /// The artifact cache beneath it is loaded as native code, so `root` must be a folder only
    /// hako writes: that is the operator's contract with `hako`, stated in the README.
    ///
    /// What can be checked of that contract is: the folder and its `artifacts/` must belong to
    /// the user running hako and be writable by no group and no other user; otherwise the store
    /// is refused ([`StoreError::Untrusted`]).
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = root.into();
        let artifacts_dir = root.join("artifacts");
        // Folders hako makes are writable by their owner alone, whatever the umask, so that a
        // store it creates passes the check below.
        std::os::unix::fs::DirBuilderExt::mode(fs::DirBuilder::new().recursive(true), 0o755)
            .create(&artifacts_dir)
            .map_err(io("creating", &artifacts_dir))?;
        for dir in [&root, &artifacts_dir] {
            only_ours(dir)?;
        }
        let staging = Arc::new(Staging::new(&root));
        // SAFETY: the folder belongs to this user and no one else may write it (checked just
        // above), and by the operator's contract only hako writes it; artifacts are further
        // verified by header and checksum before every load.
        #[allow(unsafe_code)]
        let artifacts = unsafe { ArtifactCache::open_trusted(&artifacts_dir, staging.clone()) }
            .map_err(io("creating", &artifacts_dir))?;
        Ok(Self {
            root,
            artifacts,
            staging,
            compile_bounds: CompileBounds::DEFAULT,
            trusted: Arc::default(),
        })
    }

    /// Makes this store a bucket's cache of the current format. A cache of an earlier release
    /// kept no origin beside the artifacts it fetched, and an artifact without one is taken as
    /// compiled here, whatever the trust: so, once, the artifacts of a cache without the mark
    /// are dropped (each is fetched again under a signature, or compiled here), then the mark
    /// is written. A cache of this format keeps its artifacts.
    pub fn mark_bucket_cache(&self) -> Result<(), StoreError> {
        let mark = self.root.join(BUCKET_CACHE_MARK);
        if fs::read(&mark).is_ok_and(|bytes| bytes == BUCKET_CACHE_FORMAT) {
            return Ok(());
        }
        let dir = self.artifacts_dir();
        let dropped = self
            .artifacts
            .drop_without_origin()
            .map_err(io("cleaning", &dir))?;
        if dropped > 0 {
            tracing::info!(
                "dropped {dropped} artifact(s) of a cache made by an earlier release, which \
                 kept no origin beside them"
            );
        }
        artifact::write_atomically(&mark, BUCKET_CACHE_FORMAT, &self.staging)
            .map_err(io("writing", &mark))
    }

    fn artifacts_dir(&self) -> PathBuf {
        self.root.join("artifacts")
    }

    /// Loads artifacts fetched from a bucket only while a key of `keys` signed their record
    /// (the command's `--trust-key`s); by default none is.
    pub fn trusting(mut self, keys: signing::TrustedKeys) -> Self {
        self.trusted = Arc::new(keys);
        self
    }

    /// The keys whose fetched artifacts this store loads.
    pub fn trusted_keys(&self) -> &signing::TrustedKeys {
        &self.trusted
    }

    /// Compiles within `bounds` from now on.
    pub fn set_compile_bounds(&mut self, bounds: CompileBounds) {
        self.compile_bounds = bounds;
    }

    /// What bounds a compile made for this store.
    pub fn compile_bounds(&self) -> CompileBounds {
        self.compile_bounds
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn artifacts(&self) -> &ArtifactCache {
        &self.artifacts
    }

    /// This process's folder for temporary work on the store (see [`staging`]): taken, after
    /// a sweep of what dead processes left there, on first use.
    pub fn staging(&self) -> Result<PathBuf, StoreError> {
        self.staging
            .dir()
            .map_err(io("making a staging folder in", &self.root))
    }

    /// The folder of package `name` (which holds its `current`), whether it exists or not.
    pub fn package_path(&self, name: &str) -> PathBuf {
        self.package_dir(name)
    }

    fn package_dir(&self, name: &str) -> PathBuf {
        self.root.join("packages").join(name)
    }

    /// The folder of a stored version: under `versions/`, or where the first layout put it.
    fn version_dir(&self, name: &str, version: &str) -> PathBuf {
        let package_dir = self.package_dir(name);
        let dir = package_dir.join("versions").join(version);
        let first_layout = package_dir.join(version);
        if !dir.exists() && first_layout.join("upload.json").is_file() {
            return first_layout;
        }
        dir
    }

    /// The version `name` offers now.
    pub fn get(&self, name: &str) -> Result<StoredPackage, StoreError> {
        let version = self.current_version(name)?;
        self.version(name, &version)
    }

    /// The version number `name` offers now, read without the version's records (a server
    /// uses it to tell whether what it keeps in memory is still current).
    pub fn current_version(&self, name: &str) -> Result<String, StoreError> {
        let current = self.package_dir(name).join("current");
        match fs::read_to_string(&current) {
            // Written by `put` exactly as the version is: nothing to trim, and anything else
            // is not the store's.
            Ok(version) if is_valid_version(&version) => Ok(version),
            Ok(version) => Err(StoreError::Malformed {
                path: current,
                reason: format!("{version:?} is not a version"),
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                Err(StoreError::UnknownPackage(name.to_string()))
            }
            Err(source) => Err(io("reading", &current)(source)),
        }
    }

    /// A stored version, whether or not the package offers it now.
    pub fn version(&self, name: &str, version: &str) -> Result<StoredPackage, StoreError> {
        let dir = self.version_dir(name, version);
        let record: UploadRecord = read_json(&dir.join("upload.json"))?;
        let tools: Vec<Tool> = read_json(&dir.join("tools.json"))?;
        Ok(StoredPackage { dir, record, tools })
    }

    /// The names of every stored package, sorted.
    pub fn list(&self) -> Result<Vec<String>, StoreError> {
        let dir = self.root.join("packages");
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io("listing", &dir)(source)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io("listing", &dir))?;
            if entry.path().join("current").is_file() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Stores a checked and discovered package version and makes it what the package offers.
    pub fn put(
        &self,
        package: &Package,
        tools: &[Tool],
        engines: &[String],
    ) -> Result<PutResult, StoreError> {
        let name = &package.manifest.name;
        let version = &package.manifest.version;
        if !is_valid_version(version) {
            return Err(StoreError::BadVersion(version.clone()));
        }
        let package_dir = self.package_dir(name);
        let final_dir = self.version_dir(name, version);
        let record = UploadRecord {
            name: name.clone(),
            version: version.clone(),
            description: package.manifest.description.clone(),
            module_sha256: package.module_sha256.clone(),
            uses_simd: package.uses_simd,
            engines: engines.to_vec(),
            origin: package.origin.clone(),
        };
        let result = if final_dir.exists() {
            let stored = self.version(name, version)?;
            if stored.record.module_sha256 != package.module_sha256 {
                return Err(StoreError::VersionChanged {
                    name: name.clone(),
                    version: version.clone(),
                });
            }
            stored.record.same_origin(package.origin.as_ref())?;
            PutResult::Unchanged
        } else {
            let work = self.staging()?;
            let staging = tempfile::Builder::new()
                .prefix("version-")
                .tempdir_in(&work)
                .map_err(io("creating a folder in", &work))?;
            let dir = staging.path();
            fs::copy(
                package.root.join("subako-package.json"),
                dir.join("subako-package.json"),
            )
            .map_err(io("copying the manifest to", dir))?;
            fs::write(dir.join("module.wasm"), &package.wasm).map_err(io("writing", dir))?;
            if let Some(assets) = &package.assets {
                copy_tree(assets, &dir.join("assets"))?;
            }
            write_json(&dir.join("tools.json"), &tools)?;
            write_json(&dir.join("upload.json"), &record)?;
            let versions = package_dir.join("versions");
            fs::create_dir_all(&versions).map_err(io("creating", &versions))?;
            // The staging folder is removed with its guard if the move fails.
            fs::rename(staging.path(), &final_dir).map_err(io("moving into place", &final_dir))?;
            let _moved = staging.keep();
            PutResult::Stored
        };
        self.set_current(name, version)?;
        Ok(result)
    }

    /// Records that the stored version `version` of `name` is the one whose record in a bucket
    /// has SHA-256 `record_sha256` (see [`remote`]).
    pub fn note_record(
        &self,
        name: &str,
        version: &str,
        record_sha256: &str,
    ) -> Result<(), StoreError> {
        let dir = self.package_dir(name).join("records");
        fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
        artifact::write_atomically(&dir.join(version), record_sha256.as_bytes(), &self.staging)
            .map_err(io("writing", &dir))
    }

    /// Keeps `bytes` as the package's note `what` (a name of hako's own, such as `pointer`).
    pub fn note(&self, name: &str, what: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let dir = self.package_dir(name).join("notes");
        fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
        artifact::write_atomically(&dir.join(what), bytes, &self.staging)
            .map_err(io("writing", &dir))
    }

    /// The package's note `what` ([`Store::note`]), if it has one.
    pub fn noted(&self, name: &str, what: &str) -> Option<Vec<u8>> {
        fs::read(self.package_dir(name).join("notes").join(what)).ok()
    }

    /// The digest [`Store::note_record`] recorded for a version, if any.
    pub fn noted_record(&self, name: &str, version: &str) -> Option<String> {
        fs::read_to_string(self.package_dir(name).join("records").join(version)).ok()
    }

    /// Makes the package offer `version` again, or nothing when `None` (it is then not
    /// listed): undoes a [`Store::put`] whose version could not be published.
    pub fn restore_current(&self, name: &str, version: Option<&str>) -> Result<(), StoreError> {
        match version {
            Some(version) => self.set_current(name, version),
            None => {
                let current = self.package_dir(name).join("current");
                match fs::remove_file(&current) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                        Err(io("removing", &current)(err))
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    /// Makes a stored version what the package offers.
    pub fn set_current(&self, name: &str, version: &str) -> Result<(), StoreError> {
        let package_dir = self.package_dir(name);
        artifact::write_atomically(
            &package_dir.join("current"),
            version.as_bytes(),
            &self.staging,
        )
        .map_err(io("writing", &package_dir))
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, StoreError> {
    let bytes = fs::read(path).map_err(io("reading", path))?;
    serde_json::from_slice(&bytes).map_err(|err| StoreError::Malformed {
        path: path.to_path_buf(),
        reason: err.to_string(),
    })
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec_pretty(value).expect("store records always serialize");
    fs::write(path, bytes).map_err(io("writing", path))
}

/// Copies a checked assets folder (regular files and folders only; the package check refuses
/// anything else).
fn copy_tree(from: &Path, to: &Path) -> Result<(), StoreError> {
    fs::create_dir_all(to).map_err(io("creating", to))?;
    for entry in fs::read_dir(from).map_err(io("listing", from))? {
        let entry = entry.map_err(io("listing", from))?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(io("inspecting", &source))?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_file() {
            fs::copy(&source, &target).map_err(io("copying", &source))?;
        }
    }
    Ok(())
}
