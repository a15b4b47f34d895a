//! The AOT artifact cache: compiled modules on disk, content-addressed by (module hash,
//! engine, engine version, compiler, target triple, CPU features), and the one place in hako
//! that turns bytes into native code.
//!
//! Loading an artifact is the dangerous act: wasmer 7.4 checks nothing when it deserializes,
//! and a foreign artifact (another target, another version) loads "fine" and then crashes the
//! process. So every file carries a header naming its identity, the module it came from, and
//! the length and checksum of its payload, and every load verifies all of them before
//! the payload reaches the engine. Files are written to a temporary name with create-new,
//! synced, then renamed, so a reader never sees half a file. The contract that the directory is
//! hako's own sits on one constructor, [`ArtifactCache::open_trusted`].
//!
//! A file is `payload ‖ header (JSON) ‖ header length (u32, little-endian) ‖ magic`: the header
//! trails the payload so that the payload starts the file, page-aligned. A load reads the file
//! in one call (a mapping cost more: a page-table entry per page made and torn down again),
//! verifies it, and hands the engine both the open file and the payload: wasmer maps its ELF
//! images (cranelift code for this architecture) straight from the file, and loads the other
//! formats from the bytes. The checksum is XXH3-128: it guards against corruption (a torn or
//! damaged file), not against someone who can write the trusted directory, and it is checked
//! on every cold load, where a cryptographic hash cost a fifth of the load. hako never changes
//! an artifact file in place (it writes a new one and renames it), so a file mapped by a loaded
//! module keeps its bytes.
//!
//! It does not decide which compiler to use, and keeps no modules in memory (see `modules`).

use std::fs;
use std::io::Read as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hako_engine_api::{Bytes, Engine, EngineIdentity, Module};
use serde::{Deserialize, Serialize};

use super::sha256_hex;
use super::staging::Staging;

/// The format's mark; raised whenever the code an engine makes changes meaning for the same
/// identity (4: wasmer code carries deadline checks), so that older files are recompiled.
const MAGIC: &[u8] = b"\nHAKO-ARTIFACT-4";

/// What names an artifact: the module and the identity of the code.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArtifactKey {
    pub module_sha256: String,
    pub identity: EngineIdentity,
}

impl ArtifactKey {
    pub fn new(module_sha256: &str, identity: &EngineIdentity) -> Self {
        Self {
            module_sha256: module_sha256.to_string(),
            identity: identity.clone(),
        }
    }

    /// The file name: a digest of every part of the key.
    pub fn file_name(&self) -> String {
        let digest =
            sha256_hex(format!("{}\n{}", self.module_sha256, self.identity.to_line()).as_bytes());
        format!("{}-{}.artifact", self.identity.compiler, &digest[..32])
    }
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Header {
    engine: String,
    version: String,
    compiler: String,
    triple: String,
    cpu_features: String,
    settings: String,
    module_sha256: String,
    payload_len: u64,
    /// XXH3-128 of the payload, as 32 hex digits.
    payload_xxh3: String,
}

impl Header {
    fn matches(&self, key: &ArtifactKey) -> Result<(), String> {
        let id = &key.identity;
        let checks = [
            ("engine", self.engine.as_str(), id.engine),
            ("engine version", &self.version, id.version),
            ("compiler", &self.compiler, &id.compiler),
            ("target", &self.triple, &id.triple),
            ("CPU features", &self.cpu_features, &id.cpu_features),
            ("compile settings", &self.settings, id.settings),
            ("module", &self.module_sha256, &key.module_sha256),
        ];
        for (what, found, wanted) in checks {
            if found != wanted {
                return Err(format!("{what} is {found:?}, expected {wanted:?}"));
            }
        }
        Ok(())
    }
}

/// Why an artifact could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("reading artifact {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing artifact {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("refusing artifact {path}: {reason}")]
    Refused { path: PathBuf, reason: String },
    #[error(
        "the module's bytes do not match its recorded digest (recorded {recorded}, found \
         {found}): the store was changed outside hako; nothing was compiled"
    )]
    DigestMismatch { recorded: String, found: String },
    #[error("no artifact for {config} and this build cannot compile with {compiler}: upload with a build that has it")]
    CannotCompile { config: String, compiler: String },
    #[error(transparent)]
    Engine(#[from] hako_engine_api::EngineError),
}

/// A directory of artifacts that only hako writes.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    /// Where an artifact is written before it is renamed into place.
    staging: Arc<Staging>,
}

impl ArtifactCache {
    /// Opens (and creates) the cache at `dir`.
    ///
    /// # Safety
    /// `dir` must be written only by hako (or by whoever the operator trusts to run native code
    /// in this process): an artifact whose header and checksum are right is loaded as native
    /// code without further checks.
    /// Artifacts are written in `staging` first, which must be on the same file system.
    #[allow(unsafe_code)]
    pub unsafe fn open_trusted(
        dir: impl Into<PathBuf>,
        staging: Arc<Staging>,
    ) -> std::io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(Self { dir, staging })
    }

    /// Where the artifact for `key` lives.
    pub fn path(&self, key: &ArtifactKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// Writes `module`'s artifact for `key`, atomically. Returns its size in bytes.
    pub fn write(&self, key: &ArtifactKey, module: &dyn Module) -> Result<u64, ArtifactError> {
        let payload = module.serialize()?;
        let header = Header {
            engine: key.identity.engine.to_string(),
            version: key.identity.version.to_string(),
            compiler: key.identity.compiler.clone(),
            triple: key.identity.triple.clone(),
            cpu_features: key.identity.cpu_features.clone(),
            settings: key.identity.settings.to_string(),
            module_sha256: key.module_sha256.clone(),
            payload_len: payload.len() as u64,
            payload_xxh3: checksum(&payload),
        };
        let mut bytes = payload;
        let payload_len = bytes.len();
        serde_json::to_writer(&mut bytes, &header).expect("a header always serializes");
        let header_len = (bytes.len() - payload_len) as u32;
        bytes.extend_from_slice(&header_len.to_le_bytes());
        bytes.extend_from_slice(MAGIC);
        let path = self.path(key);
        let write_error = |source| ArtifactError::Write {
            path: path.clone(),
            source,
        };
        // Whatever is in the artifact's place and is no file (a folder, a link) goes first: the
        // rename below replaces only a file.
        if let Ok(metadata) = fs::symlink_metadata(&path) {
            if metadata.is_dir() {
                fs::remove_dir_all(&path).map_err(write_error)?;
            }
        }
        write_atomically(&path, &bytes, &self.staging).map_err(write_error)?;
        Ok(bytes.len() as u64)
    }

    /// Loads the artifact for `key` with `engine`, or `Ok(None)` when there is none. A file
    /// whose header, size or checksum does not match is refused, never loaded.
    pub fn load(
        &self,
        key: &ArtifactKey,
        engine: &dyn Engine,
    ) -> Result<Option<Arc<dyn Module>>, ArtifactError> {
        let path = self.path(key);
        match fs::symlink_metadata(&path) {
            Ok(metadata) if !metadata.file_type().is_file() => {
                return Err(ArtifactError::Refused {
                    path,
                    reason: "it is not a regular file".into(),
                })
            }
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ArtifactError::Read { path, source }),
        }
        let file = match fs::File::open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ArtifactError::Read { path, source }),
        };
        if engine.identity() != &key.identity {
            return Err(ArtifactError::Refused {
                path,
                reason: format!(
                    "the engine is {}, the artifact was made by {}",
                    engine.identity().to_line(),
                    key.identity.to_line()
                ),
            });
        }
        // Read whole in one call (the engine keeps the bytes, copies out of them, or maps the
        // file itself): a mapping here would cost a page-table entry per page to make and to
        // tear down again.
        let mut bytes = Vec::new();
        if let Err(source) = (&file).read_to_end(&mut bytes) {
            return Err(ArtifactError::Read { path, source });
        }
        let payload_len = verify(&bytes, key).map_err(|reason| ArtifactError::Refused {
            path: path.clone(),
            reason,
        })?;
        let bytes = Bytes::from(bytes).slice(..payload_len);
        // SAFETY: the cache directory is trusted (`open_trusted`'s contract), and the payload
        // is exactly what `write` serialized for this engine identity and module: its header
        // names this identity and module, and its length and checksum match the header. The
        // payload starts the file (the header follows it), and files are replaced by renaming,
        // never written to, so the open file keeps these bytes while the module lives.
        #[allow(unsafe_code)]
        let module = unsafe { engine.deserialize_file(&file, bytes)? };
        Ok(Some(module))
    }
}

/// The length of an artifact file's payload, once its header matches `key` and its checksum
/// is right.
fn verify(bytes: &[u8], key: &ArtifactKey) -> Result<usize, String> {
    let rest = bytes
        .strip_suffix(MAGIC)
        .ok_or("not a hako artifact (bad magic)")?;
    let (rest, header_len) = rest
        .split_last_chunk::<4>()
        .ok_or("the header length is missing")?;
    let header_len = u32::from_le_bytes(*header_len) as usize;
    let payload_len = rest
        .len()
        .checked_sub(header_len)
        .ok_or("the header is longer than the file")?;
    let header: Header = serde_json::from_slice(&rest[payload_len..])
        .map_err(|err| format!("the header is malformed: {err}"))?;
    header.matches(key)?;
    if payload_len as u64 != header.payload_len {
        return Err(format!(
            "the payload is {payload_len} bytes, the header says {}",
            header.payload_len
        ));
    }
    if checksum(&rest[..payload_len]) != header.payload_xxh3 {
        return Err("the payload's checksum does not match its header".into());
    }
    Ok(payload_len)
}

/// The checksum a header records for a payload.
fn checksum(payload: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(payload))
}

/// Writes `bytes` to `path` so that readers see the old file or the whole new one: in `staging`
/// first (on the same file system), then renamed into place.
pub(crate) fn write_atomically(
    path: &Path,
    bytes: &[u8],
    staging: &Staging,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix("writing-")
        .tempfile_in(staging.dir()?)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|err| err.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ArtifactKey {
        ArtifactKey::new(
            "ab".repeat(32).as_str(),
            &EngineIdentity {
                engine: "wasmer",
                version: "7.4.2",
                compiler: "cranelift".into(),
                triple: "x86_64-unknown-linux-gnu".into(),
                cpu_features: "sse2".into(),
                settings: "features=x",
            },
        )
    }

    fn file(header: &Header, payload: &[u8]) -> Vec<u8> {
        let mut bytes = payload.to_vec();
        let json = serde_json::to_vec(header).unwrap();
        bytes.extend(&json);
        bytes.extend((json.len() as u32).to_le_bytes());
        bytes.extend_from_slice(MAGIC);
        bytes
    }

    fn header_for(key: &ArtifactKey, payload: &[u8]) -> Header {
        Header {
            engine: key.identity.engine.into(),
            version: key.identity.version.into(),
            compiler: key.identity.compiler.clone(),
            triple: key.identity.triple.clone(),
            cpu_features: key.identity.cpu_features.clone(),
            settings: key.identity.settings.to_string(),
            module_sha256: key.module_sha256.clone(),
            payload_len: payload.len() as u64,
            payload_xxh3: checksum(payload),
        }
    }

    #[test]
    fn a_matching_artifact_yields_its_payload() {
        let key = key();
        let bytes = file(&header_for(&key, b"native"), b"native");
        assert_eq!(verify(&bytes, &key).unwrap(), b"native".len());
    }

    #[test]
    fn a_flipped_payload_byte_is_refused() {
        let key = key();
        let mut bytes = file(&header_for(&key, b"native"), b"native");
        bytes[0] ^= 1;
        assert!(verify(&bytes, &key).unwrap_err().contains("checksum"));
    }

    #[test]
    fn an_artifact_for_another_target_is_refused() {
        let key = key();
        let mut header = header_for(&key, b"native");
        header.triple = "aarch64-unknown-linux-gnu".into();
        let err = verify(&file(&header, b"native"), &key).unwrap_err();
        assert!(err.contains("target"), "{err}");
    }

    #[test]
    fn an_artifact_made_with_other_compile_settings_is_refused() {
        // Same engine, compiler, target and CPU: code made without the deadline checks, or for
        // another memory layout, must not be loaded either.
        let key = key();
        let mut header = header_for(&key, b"native");
        header.settings = "features=x;checks=none".into();
        let err = verify(&file(&header, b"native"), &key).unwrap_err();
        assert!(err.contains("compile settings"), "{err}");
        let mut other = key.clone();
        other.identity.settings = "features=x;checks=none";
        assert_ne!(other.file_name(), key.file_name());
    }

    #[test]
    fn a_truncated_artifact_is_refused() {
        let key = key();
        let bytes = file(&header_for(&key, b"native"), b"native");
        let err = verify(&bytes[2..], &key).unwrap_err();
        assert!(err.contains("bytes"), "{err}");
        let err = verify(&bytes[..bytes.len() - 2], &key).unwrap_err();
        assert!(err.contains("magic"), "{err}");
    }

    #[test]
    fn a_foreign_file_is_refused() {
        assert!(verify(b"\x7fELF....", &key())
            .unwrap_err()
            .contains("magic"));
    }

    #[test]
    fn keys_differ_by_every_part() {
        let a = key();
        let mut b = key();
        b.identity.cpu_features = "sse2,avx".into();
        assert_ne!(a.file_name(), b.file_name());
    }
}
