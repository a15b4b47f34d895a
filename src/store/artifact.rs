//! The AOT artifact cache: compiled modules on disk, content-addressed by (module hash,
//! engine, engine version, compiler, target triple, CPU features), and the one place in hako
//! that turns bytes into native code.
//!
//! Loading an artifact is the dangerous act: wasmer 7.4 checks nothing when it deserializes,
//! and a foreign artifact (another target, another version) loads "fine" and then crashes the
//! process. So every file carries a header naming its identity, the module it came from, and
//! the lengths and checksums of its code and memory image, and every load verifies all of them
//! before the engine sees either. Files are written to a temporary name with create-new,
//! synced, then renamed, so a reader never sees half a file. The contract that the directory is
//! hako's own sits on one constructor, [`ArtifactCache::open_trusted`].
//!
//! A file is `code ‖ zeros ‖ memory image ‖ header (JSON) ‖ header length (u32, little-endian) ‖
//! magic`. The code starts the file, page-aligned (wasmer maps its ELF images, cranelift code
//! for this architecture, straight from the file). The memory image, when the engine made one
//! (a module's initial linear memory, see `hako_engine_wasmer`'s memory images), follows at the
//! next multiple of [`IMAGE_ALIGN`], so that instances map it copy-on-write from the file; it is
//! never read into memory to run. The header trails both, and records their lengths and
//! checksums.
//!
//! A load reads the header (one `pread` of the file's tail), checks where it puts the code and
//! the image, and verifies both against their checksums, reading them a block at a time (a
//! mapping cost more: a page-table entry per page made and torn down again), before the engine
//! sees either; the engine then reads or maps the code and maps the image itself. The checksum is XXH3-128: it guards against
//! corruption (a torn or damaged file), not against someone who can write the trusted
//! directory. Hashing an 8 MiB image costs more than the rest of a load, so a file is verified
//! once per process and remembered as verified (`Verified`) while it is the same file: the
//! same inode, held open so that its number cannot be given to another file, with the same
//! size, modification and change times. Anything that writes to the file changes its times and
//! makes the next load verify it again; hako itself never changes an artifact in place (it
//! writes a new one and renames it), so a file mapped by a loaded module keeps its bytes.
//! Across processes, a file once hashed has a record beside it (`NAME.verified`, `Record`):
//! its device, inode, size and times then, and the checksums its header gave; a process whose
//! file and header match the record in every field loads it without hashing it again (a fresh
//! `hako call` of a 9.5 MB artifact spent most of its time reading and hashing it).
//!
//! It does not decide which compiler to use, and keeps no modules in memory (see `modules`).

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hako_engine_api::{
    ArtifactFile, Engine, EngineIdentity, ImageRegion, Module, Serialized, IMAGE_ALIGN,
};
use serde::{Deserialize, Serialize};

use super::sha256_hex;
use super::staging::Staging;

/// The format's mark; raised whenever the layout or the code an engine makes changes meaning
/// for the same identity (4: wasmer code carries deadline checks; 5: memory images), so that
/// older files are recompiled.
const MAGIC: &[u8] = b"\nHAKO-ARTIFACT-5";

/// The longest header a file may have; a longer one is refused before it is read.
const MAX_HEADER: usize = 64 << 10;

/// How many verified files a cache remembers (and holds open).
const MAX_VERIFIED: usize = 256;

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
    code_len: u64,
    /// XXH3-128 of the code, as 32 hex digits.
    code_xxh3: String,
    /// How the module's memory is initialised, in the engine's words.
    memory_init: String,
    image: Option<ImageHeader>,
}

/// Where the memory image lies in the file, and its checksum.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct ImageHeader {
    offset: u64,
    len: u64,
    /// The guest address of its first byte.
    start: u64,
    xxh3: String,
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
    #[error("reading the module {path}: {source}")]
    ReadModule {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the module's bytes do not match its recorded digest (recorded {recorded}, found \
         {found}): the store was changed outside hako; nothing was compiled"
    )]
    DigestMismatch { recorded: String, found: String },
    #[error("no artifact for {config} and this build cannot compile with {compiler}: upload with a build that has it")]
    CannotCompile { config: String, compiler: String },
    #[error(transparent)]
    Engine(#[from] hako_engine_api::EngineError),
    /// A compile on a cache miss failed or ran past its bounds.
    #[error(transparent)]
    Compile(#[from] crate::compile::CompileError),
}

/// What [`ArtifactCache::write`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The file's size.
    pub bytes: u64,
    /// How the module's memory is initialised with it, in the engine's words.
    pub memory_init: String,
}

/// Where an artifact fetched from a bucket came from, kept beside it as `NAME.origin`: the
/// record that listed it (by digest) and the key that signed that record. A loader takes such an
/// artifact only while it still trusts that key ([`super::Store::trusting`]); an artifact
/// without one was compiled here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    pub hako_origin: u32,
    /// The SHA-256 of the bucket record that named the artifact's digest.
    pub record_sha256: String,
    /// The ed25519 public key (hex) whose signature of that record made it trusted.
    pub public_key: String,
}

/// The origin format this host writes and reads.
pub const ORIGIN_FORMAT: u32 = 1;

/// A directory of artifacts that only hako writes.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    /// Where an artifact is written before it is renamed into place.
    staging: Arc<Staging>,
    /// The files verified so far, shared by every clone.
    verified: Arc<Verified>,
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
        Ok(Self {
            dir,
            staging,
            verified: Arc::default(),
        })
    }

    /// Where the artifact for `key` lives.
    pub fn path(&self, key: &ArtifactKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The artifact file named `name` ([`ArtifactKey::file_name`]), when there is one.
    pub fn file(&self, name: &str) -> Option<PathBuf> {
        let path = self.dir.join(name);
        let metadata = fs::symlink_metadata(&path).ok()?;
        (is_artifact_file_name(name) && metadata.is_file()).then_some(path)
    }

    /// Removes every artifact that has no origin beside it (one compiled here, or one an earlier
    /// release fetched before origins were kept); returns how many went.
    pub fn drop_without_origin(&self) -> std::io::Result<usize> {
        let mut dropped = 0;
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|name| is_artifact_file_name(name)) else {
                continue;
            };
            let path = self.dir.join(name);
            if !origin_path(&path).exists() {
                fs::remove_file(&path)?;
                // Its record is of a file that is gone: it would vouch for nothing.
                let _ = fs::remove_file(record_path(&path));
                dropped += 1;
            }
        }
        Ok(dropped)
    }

    /// Puts `bytes`, an artifact fetched from elsewhere, in the cache as `name`, atomically,
    /// with its `origin` beside it. The caller vouches for the bytes (a trusted signature over
    /// their digest); a load checks their header against the key, as for any file here. The
    /// origin is written first: a stop in between leaves an origin without its artifact, which
    /// nothing loads, never a fetched artifact that reads as compiled here.
    pub fn install(&self, name: &str, bytes: &[u8], origin: &Origin) -> Result<(), ArtifactError> {
        let path = self.dir.join(name);
        if !is_artifact_file_name(name) {
            return Err(ArtifactError::Refused {
                path,
                reason: "that is not the name of an artifact (COMPILER-HEX32.artifact)".into(),
            });
        }
        let origin_path = origin_path(&path);
        let origin = serde_json::to_vec(origin).expect("origins always serialize");
        write_atomically(&origin_path, &origin, &self.staging).map_err(|source| {
            ArtifactError::Write {
                path: origin_path,
                source,
            }
        })?;
        write_atomically(&path, bytes, &self.staging)
            .map_err(|source| ArtifactError::Write { path, source })
    }

    /// Where the artifact for `key` came from: `None` when it was compiled here (no origin
    /// beside it), else its origin, or why that could not be read (which a loader treats as
    /// an origin it does not trust).
    pub fn origin(&self, key: &ArtifactKey) -> Option<Result<Origin, String>> {
        let path = origin_path(&self.path(key));
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
            Err(err) => return Some(Err(format!("reading {}: {err}", path.display()))),
        };
        Some(
            serde_json::from_slice::<Origin>(&bytes)
                .map_err(|err| format!("{} is malformed: {err}", path.display()))
                .and_then(|origin| {
                    if origin.hako_origin == ORIGIN_FORMAT {
                        Ok(origin)
                    } else {
                        Err(format!(
                            "{}: origin format {} is not {ORIGIN_FORMAT}",
                            path.display(),
                            origin.hako_origin
                        ))
                    }
                }),
        )
    }

    /// Writes `module`'s artifact for `key`, atomically.
    pub fn write(&self, key: &ArtifactKey, module: &dyn Module) -> Result<Written, ArtifactError> {
        self.write_serialized(key, module.serialize()?)
    }

    /// Writes the artifact for `key` of what an engine serialized (here, or in a compile
    /// worker), atomically.
    pub fn write_serialized(
        &self,
        key: &ArtifactKey,
        serialized: Serialized,
    ) -> Result<Written, ArtifactError> {
        let memory_init = serialized.memory_init.clone();
        let bytes = encode(key, serialized);
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
        // Compiled here now: an origin left by an artifact fetched before goes, after the new
        // file is in place (a stop in between leaves this artifact read as fetched, so checked
        // against the trust, never the other way round).
        match fs::remove_file(origin_path(&path)) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(write_error(source)),
        }
        Ok(Written {
            bytes: bytes.len() as u64,
            memory_init,
        })
    }

    /// Loads the artifact for `key` with `engine`, or `Ok(None)` when there is none. A file
    /// whose header, layout or checksums do not match is refused, never loaded.
    pub fn load(
        &self,
        key: &ArtifactKey,
        engine: &dyn Engine,
    ) -> Result<Option<Arc<dyn Module>>, ArtifactError> {
        let path = self.path(key);
        let not_a_file = |path| ArtifactError::Refused {
            path,
            reason: "it is not a regular file".into(),
        };
        // One open and one `fstat` tell a missing file, a link (refused by `O_NOFOLLOW`), a
        // folder or a device (`O_NONBLOCK`: a FIFO does not block the open) from an artifact,
        // and give the identity of the very file that is then verified and loaded.
        let opened = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path);
        let file = match opened {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) if err.raw_os_error() == Some(libc::ELOOP) => return Err(not_a_file(path)),
            Err(source) => return Err(ArtifactError::Read { path, source }),
        };
        let metadata = match file.metadata() {
            Ok(metadata) if metadata.is_file() => metadata,
            Ok(_) => return Err(not_a_file(path)),
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
        let read_error = |source| ArtifactError::Read {
            path: path.clone(),
            source,
        };
        let refused = |reason| ArtifactError::Refused {
            path: path.clone(),
            reason,
        };
        let record = record_path(&path);
        let layout = read_verified(
            &file,
            &metadata,
            key,
            &self.verified,
            Some((&record, &self.staging)),
        )
        .map_err(read_error)?
        .map_err(refused)?;
        // SAFETY: the cache directory is trusted (`open_trusted`'s contract), and the code and
        // image are exactly what `write` stored for this engine identity and module: the
        // header names this identity and module, the layout matches the file, and both
        // checksums matched it, now or on an earlier load of this very file (the same inode, size
        // and times, kept by this process or in the file's record: see `Verified` and `Record`). Files are replaced by renaming,
        // never written to, so the open file keeps these bytes while the module maps them.
        #[allow(unsafe_code)]
        let module = unsafe {
            engine.load(ArtifactFile {
                file: &file,
                code_len: layout.code_len,
                image: layout.image,
            })?
        };
        Ok(Some(module))
    }
}

/// Whether `name` has the form of [`ArtifactKey::file_name`]: a compiler's name, `-`, 32 hex
/// digits, `.artifact`.
pub fn is_artifact_file_name(name: &str) -> bool {
    let Some((compiler, rest)) = name
        .strip_suffix(".artifact")
        .and_then(|stem| stem.rsplit_once('-'))
    else {
        return false;
    };
    !compiler.is_empty()
        && compiler.bytes().all(|b| b.is_ascii_lowercase())
        && rest.len() == 32
        && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Where the code and image of the artifact `file` for `key` lie, once its header matches
/// `key`, its layout matches the file and its checksums match the header (or the very same file
/// was verified before, as `verified` remembers, or by another process, as its `record` says);
/// or why not. `metadata` is the open file's own; `record`, where the file's record is kept
/// ([`record_path`]) and the staging folder it is written through, when there is one.
fn read_verified(
    file: &fs::File,
    metadata: &fs::Metadata,
    key: &ArtifactKey,
    verified: &Verified,
    record: Option<(&Path, &Staging)>,
) -> std::io::Result<Result<Layout, String>> {
    let (header, header_start) = match read_header(file, metadata.len())? {
        Ok(found) => found,
        Err(reason) => return Ok(Err(reason)),
    };
    let layout = match header.layout(key, header_start) {
        Ok(layout) => layout,
        Err(reason) => return Ok(Err(reason)),
    };
    let identity = FileIdentity::of(metadata);
    if verified.holds(&identity) {
        return Ok(Ok(layout));
    }
    let vouched = Record::of(identity, &header);
    if !record.is_some_and(|(path, _)| Record::read(path).as_ref() == Some(&vouched)) {
        if checksum_range(file, 0, layout.code_len)? != header.code_xxh3 {
            return Ok(Err("the code's checksum does not match its header".into()));
        }
        if let Some(image) = &header.image {
            if checksum_range(file, image.offset, image.len)? != image.xxh3 {
                return Ok(Err(
                    "the memory image's checksum does not match its header".into()
                ));
            }
        }
        if let Some((path, staging)) = record {
            // Only the next process's hashing rests on it: a record not written costs that.
            if let Err(err) = vouched.write(path, staging) {
                tracing::debug!("writing {}: {err}", path.display());
            }
        }
    }
    verified.insert(identity, file.try_clone()?);
    Ok(Ok(layout))
}

/// The longest record a load reads ([`Record`]); a longer file is ignored.
const MAX_RECORD: u64 = 4 << 10;

/// The format of [`Record`]s this host writes and believes.
const RECORD_FORMAT: u32 = 1;

/// What a process that verified an artifact file keeps beside it (`NAME.verified`), so that
/// the next process need not hash it again: the file's identity when it was verified, and the
/// checksums its header gave. A load believes a record only when every field is what the open
/// file and its header say now: any write to the file changes its times (the change time
/// cannot be set from user space), a file put in its place by a rename is another inode, and
/// the record lives in the same trusted folder as the artifact. What it cannot tell is damage
/// to the file's blocks that bypasses the kernel (a failing disk) after the first verification,
/// which only the file system's own checksums catch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    hako_verified: u32,
    #[serde(flatten)]
    identity: FileIdentity,
    code_xxh3: String,
    image_xxh3: Option<String>,
}

impl Record {
    fn of(identity: FileIdentity, header: &Header) -> Self {
        Self {
            hako_verified: RECORD_FORMAT,
            identity,
            code_xxh3: header.code_xxh3.clone(),
            image_xxh3: header.image.as_ref().map(|image| image.xxh3.clone()),
        }
    }

    /// The record at `path`; `None` when there is none or it is not one (it is then ignored,
    /// and overwritten after the next hashing).
    fn read(path: &Path) -> Option<Record> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // Only a regular file is a record: a link is not followed, and the open does not wait
        // (a FIFO put there would block it until something wrote to it, and with it the load).
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        // A record is a few hundred bytes; whatever is longer is not one, and is not read whole.
        let mut bytes = Vec::new();
        file.take(MAX_RECORD + 1).read_to_end(&mut bytes).ok()?;
        if bytes.len() as u64 > MAX_RECORD {
            return None;
        }
        serde_json::from_slice::<Record>(&bytes)
            .ok()
            .filter(|record| record.hako_verified == RECORD_FORMAT)
    }

    fn write(&self, path: &Path, staging: &Staging) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).expect("records always serialize");
        write_atomically(path, &bytes, staging)
    }
}

/// The bytes of an artifact file for `key` holding `serialized`.
fn encode(key: &ArtifactKey, serialized: hako_engine_api::Serialized) -> Vec<u8> {
    let code_len = serialized.code.len() as u64;
    let mut bytes = serialized.code;
    let image = serialized.image.map(|image| {
        let offset = code_len.div_ceil(IMAGE_ALIGN) * IMAGE_ALIGN;
        bytes.resize(offset as usize, 0);
        bytes.extend_from_slice(&image.bytes);
        ImageHeader {
            offset,
            len: image.bytes.len() as u64,
            start: image.start,
            xxh3: checksum(&image.bytes),
        }
    });
    let header = Header {
        engine: key.identity.engine.to_string(),
        version: key.identity.version.to_string(),
        compiler: key.identity.compiler.clone(),
        triple: key.identity.triple.clone(),
        cpu_features: key.identity.cpu_features.clone(),
        settings: key.identity.settings.to_string(),
        module_sha256: key.module_sha256.clone(),
        code_len,
        code_xxh3: checksum(&bytes[..code_len as usize]),
        memory_init: serialized.memory_init,
        image,
    };
    let body_len = bytes.len();
    serde_json::to_writer(&mut bytes, &header).expect("a header always serializes");
    let header_len = (bytes.len() - body_len) as u32;
    bytes.extend_from_slice(&header_len.to_le_bytes());
    bytes.extend_from_slice(MAGIC);
    bytes
}

/// The header at the end of `file` (`len` bytes long) and where it starts, or why there is no
/// valid one.
fn read_header(file: &fs::File, len: u64) -> std::io::Result<Result<(Header, u64), String>> {
    let trailer = (MAGIC.len() + 4) as u64;
    if len < trailer {
        return Ok(Err("not a hako artifact (bad magic)".into()));
    }
    let mut tail = vec![0u8; trailer as usize];
    file.read_exact_at(&mut tail, len - trailer)?;
    let Some(header_len) = tail.strip_suffix(MAGIC) else {
        return Ok(Err("not a hako artifact (bad magic)".into()));
    };
    let header_len = u32::from_le_bytes(header_len.try_into().expect("four bytes")) as u64;
    if header_len as usize > MAX_HEADER || header_len > len - trailer {
        return Ok(Err("the header is longer than the file allows".into()));
    }
    let start = len - trailer - header_len;
    let mut header = vec![0u8; header_len as usize];
    file.read_exact_at(&mut header, start)?;
    Ok(serde_json::from_slice(&header)
        .map(|header| (header, start))
        .map_err(|err| format!("the header is malformed: {err}")))
}

/// Where the parts of a verified header's file lie.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    code_len: u64,
    image: Option<ImageRegion>,
}

impl Header {
    /// Checks the header against `key` and where it starts in the file (`header_start`), and
    /// says where the code and the image lie: the code from the first byte, the image at the
    /// next multiple of [`IMAGE_ALIGN`] after it, the header right after the last of them.
    fn layout(&self, key: &ArtifactKey, header_start: u64) -> Result<Layout, String> {
        self.matches(key)?;
        let body_end = match &self.image {
            None => self.code_len,
            Some(image) => {
                let offset = self.code_len.div_ceil(IMAGE_ALIGN) * IMAGE_ALIGN;
                if image.offset != offset
                    || !image.len.is_multiple_of(IMAGE_ALIGN)
                    || !image.start.is_multiple_of(IMAGE_ALIGN)
                {
                    return Err(format!(
                        "the memory image at {} ({} bytes, for address {}) is not where the \
                         code's {} bytes put it, page-aligned",
                        image.offset, image.len, image.start, self.code_len
                    ));
                }
                offset
                    .checked_add(image.len)
                    .ok_or("the memory image's length overflows")?
            }
        };
        if body_end != header_start {
            return Err(format!(
                "the code and image take {body_end} bytes, the header says {header_start}"
            ));
        }
        Ok(Layout {
            code_len: self.code_len,
            image: self.image.as_ref().map(|image| ImageRegion {
                offset: image.offset,
                len: image.len,
                start: image.start,
            }),
        })
    }
}

/// What tells one artifact file from another, and from itself once written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileIdentity {
    fn of(metadata: &fs::Metadata) -> Self {
        Self {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.len(),
            modified: (metadata.mtime(), metadata.mtime_nsec()),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

/// The files this process verified, each held open so that no other file can get its inode
/// number while it is remembered. At most [`MAX_VERIFIED`], the oldest forgotten first.
#[derive(Debug, Default)]
struct Verified {
    files: Mutex<(HashMap<FileIdentity, fs::File>, VecDeque<FileIdentity>)>,
}

impl Verified {
    fn holds(&self, identity: &FileIdentity) -> bool {
        let files = self
            .files
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        files.0.contains_key(identity)
    }

    fn insert(&self, identity: FileIdentity, file: fs::File) {
        let mut files = self
            .files
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let (map, order) = &mut *files;
        if map.insert(identity, file).is_none() {
            order.push_back(identity);
        }
        while order.len() > MAX_VERIFIED {
            if let Some(oldest) = order.pop_front() {
                map.remove(&oldest);
            }
        }
    }
}

/// The checksum of `len` bytes of `file` from `offset`, read a block at a time.
fn checksum_range(file: &fs::File, offset: u64, len: u64) -> std::io::Result<String> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut block = vec![0u8; (len as usize).min(1 << 20)];
    let mut done = 0;
    while done < len {
        let n = ((len - done) as usize).min(block.len());
        file.read_exact_at(&mut block[..n], offset + done)?;
        hasher.update(&block[..n]);
        done += n as u64;
    }
    Ok(format!("{:032x}", hasher.digest128()))
}

/// The checksum a header records for a payload.
fn checksum(payload: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(payload))
}

/// Where the record of the artifact at `path` having been verified is kept ([`Record`]).
fn record_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".verified");
    PathBuf::from(name)
}

/// Where the origin of the artifact at `path` is kept.
fn origin_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".origin");
    PathBuf::from(name)
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

/// The key of module `module_sha256` for an identity of wasmer-cranelift, for the store's tests.
#[cfg(test)]
pub(crate) fn test_key(module_sha256: &str) -> ArtifactKey {
    ArtifactKey::new(
        module_sha256,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ArtifactKey {
        test_key(&"ab".repeat(32))
    }

    /// A module as an engine serializes it: `code`, and an image of `pages` 64 KiB pages.
    struct Fake {
        code: Vec<u8>,
        pages: usize,
    }

    impl Module for Fake {
        fn serialize(&self) -> Result<hako_engine_api::Serialized, hako_engine_api::EngineError> {
            Ok(hako_engine_api::Serialized {
                code: self.code.clone(),
                image: (self.pages > 0).then(|| hako_engine_api::MemoryImage {
                    start: IMAGE_ALIGN,
                    bytes: vec![7; self.pages * IMAGE_ALIGN as usize],
                }),
                memory_init: "fake".into(),
            })
        }

        fn prepare(&self, _: hako_engine_api::RunLimits) -> Box<dyn hako_engine_api::Prepared> {
            unreachable!("never run")
        }
    }

    fn encoded(key: &ArtifactKey, pages: usize) -> Vec<u8> {
        let fake = Fake {
            code: b"native code".to_vec(),
            pages,
        };
        encode(key, fake.serialize().unwrap())
    }

    /// Verifies `bytes` as a fresh process would (nothing verified before).
    fn verify(bytes: &[u8], key: &ArtifactKey) -> Result<Layout, String> {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        read_verified(
            &file,
            &file.metadata().unwrap(),
            key,
            &Verified::default(),
            None,
        )
        .unwrap()
    }

    /// `bytes` with its header replaced by what `change` makes of it.
    fn with_header(bytes: &[u8], change: impl FnOnce(&mut Header)) -> Vec<u8> {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        let (mut header, start) = read_header(&file, bytes.len() as u64).unwrap().unwrap();
        change(&mut header);
        let mut out = bytes[..start as usize].to_vec();
        let json = serde_json::to_vec(&header).unwrap();
        out.extend(&json);
        out.extend((json.len() as u32).to_le_bytes());
        out.extend_from_slice(MAGIC);
        out
    }

    #[test]
    fn a_matching_artifact_yields_its_code_and_its_image_page_aligned() {
        let key = key();
        assert_eq!(
            verify(&encoded(&key, 0), &key).unwrap(),
            Layout {
                code_len: 11,
                image: None
            }
        );
        let layout = verify(&encoded(&key, 3), &key).unwrap();
        assert_eq!(
            layout.image,
            Some(ImageRegion {
                offset: IMAGE_ALIGN,
                len: 3 * IMAGE_ALIGN,
                start: IMAGE_ALIGN
            })
        );
    }

    #[test]
    fn a_flipped_code_or_image_byte_is_refused() {
        let key = key();
        let mut bytes = encoded(&key, 2);
        bytes[0] ^= 1;
        let err = verify(&bytes, &key).unwrap_err();
        assert!(err.contains("code's checksum"), "{err}");
        let mut bytes = encoded(&key, 2);
        bytes[IMAGE_ALIGN as usize + 70_000] ^= 1;
        let err = verify(&bytes, &key).unwrap_err();
        assert!(err.contains("memory image's checksum"), "{err}");
    }

    #[test]
    fn a_file_written_to_after_it_was_verified_is_verified_again() {
        let key = key();
        let verified = Verified::default();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&encoded(&key, 2)).unwrap();
        let verify =
            |file: &fs::File| read_verified(file, &file.metadata().unwrap(), &key, &verified, None);
        assert!(verify(&file).unwrap().is_ok());
        // The same bytes but one, written in place: the file's times change with the write,
        // however soon it follows (a sleep makes that so on file systems of coarse clocks).
        std::thread::sleep(std::time::Duration::from_millis(20));
        file.write_all_at(&[0], IMAGE_ALIGN + 5).unwrap();
        let err = verify(&file).unwrap().unwrap_err();
        assert!(err.contains("memory image's checksum"), "{err}");
    }

    /// An artifact file holding `bytes` in a store folder of its own; verifies it as a fresh
    /// process would, with its record kept beside it.
    struct Stored {
        _dir: tempfile::TempDir,
        path: PathBuf,
        staging: Staging,
    }

    impl Stored {
        fn new(bytes: &[u8]) -> Stored {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("cranelift-0.artifact");
            fs::write(&path, bytes).unwrap();
            let staging = Staging::new(dir.path());
            Stored {
                _dir: dir,
                path,
                staging,
            }
        }

        fn verify(&self, key: &ArtifactKey) -> Result<Layout, String> {
            let file = fs::File::open(&self.path).unwrap();
            let record = record_path(&self.path);
            read_verified(
                &file,
                &file.metadata().unwrap(),
                key,
                &Verified::default(),
                Some((&record, &self.staging)),
            )
            .unwrap()
        }

        /// A record that vouches for the file as it is now, with its header's checksums.
        fn record_as_it_is(&self) -> Record {
            let file = fs::File::open(&self.path).unwrap();
            let metadata = file.metadata().unwrap();
            let (header, _) = read_header(&file, metadata.len()).unwrap().unwrap();
            Record::of(FileIdentity::of(&metadata), &header)
        }

        fn write_record(&self, record: Record) {
            record
                .write(&record_path(&self.path), &self.staging)
                .unwrap();
        }

        /// One byte of the image changed in place (the file's times change with it).
        fn damage(&self) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let file = fs::OpenOptions::new().write(true).open(&self.path).unwrap();
            file.write_all_at(&[0], IMAGE_ALIGN + 5).unwrap();
        }
    }

    #[test]
    fn a_record_beside_a_verified_file_spares_the_next_process_its_hashing() {
        let key = key();
        let stored = Stored::new(&encoded(&key, 2));
        assert!(stored.verify(&key).is_ok());
        let record = Record::read(&record_path(&stored.path)).expect("a record was written");
        assert_eq!(record.code_xxh3.len(), 32);
        // Damaged in place: the record names the file as it was, so it is hashed again.
        stored.damage();
        let err = stored.verify(&key).unwrap_err();
        assert!(err.contains("memory image's checksum"), "{err}");
        // A record that names the file as it is now is believed, and nothing is hashed: the
        // damage goes unseen (which is why only hako writes in the folder of its records).
        stored.write_record(stored.record_as_it_is());
        assert!(stored.verify(&key).is_ok());
    }

    #[test]
    fn a_record_that_is_not_one_is_ignored() {
        let key = key();
        let stored = Stored::new(&encoded(&key, 2));
        stored.damage();
        for text in ["", "{", r#"{"hako_verified": 1}"#] {
            fs::write(record_path(&stored.path), text).unwrap();
            let err = stored.verify(&key).unwrap_err();
            assert!(err.contains("memory image's checksum"), "{text:?}: {err}");
        }
        // Another format's, or one padded past the bound, with this file's identity and
        // checksums: not believed either.
        let mut record = stored.record_as_it_is();
        record.hako_verified = RECORD_FORMAT + 1;
        stored.write_record(record);
        assert!(stored.verify(&key).is_err());
        let padded = serde_json::to_string(&stored.record_as_it_is()).unwrap()
            + &" ".repeat(MAX_RECORD as usize);
        fs::write(record_path(&stored.path), padded).unwrap();
        assert!(stored.verify(&key).is_err());
    }

    /// A FIFO where the record goes once held a load until something wrote to it; a link to
    /// a record that names the file as it is is not believed either (a record is a regular file
    /// hako wrote there).
    #[test]
    fn a_record_that_is_a_fifo_or_a_link_is_ignored_without_waiting() {
        let key = key();
        let stored = Stored::new(&encoded(&key, 2));
        let record = record_path(&stored.path);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &record,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let (done, verified) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| done.send(stored.verify(&key)).unwrap());
            let verified = verified.recv_timeout(std::time::Duration::from_secs(30));
            if verified.is_err() {
                // Let the open go on, so that the scope can end and the test fail.
                drop(fs::OpenOptions::new().write(true).open(&record));
            }
            assert!(matches!(verified, Ok(Ok(_))), "a FIFO record held the load");
        });
        // Hashed, and a regular record written in the FIFO's place.
        assert!(fs::symlink_metadata(&record).unwrap().is_file());
        stored.damage();
        let elsewhere = stored._dir.path().join("elsewhere.verified");
        fs::write(
            &elsewhere,
            serde_json::to_vec(&stored.record_as_it_is()).unwrap(),
        )
        .unwrap();
        fs::remove_file(&record).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &record).unwrap();
        let err = stored.verify(&key).unwrap_err();
        assert!(err.contains("memory image's checksum"), "{err}");
    }

    #[test]
    fn an_image_elsewhere_than_after_the_code_is_refused() {
        let key = key();
        let bytes = with_header(&encoded(&key, 2), |header| {
            header.image.as_mut().unwrap().offset = 0;
        });
        let err = verify(&bytes, &key).unwrap_err();
        assert!(err.contains("not where"), "{err}");
        let bytes = with_header(&encoded(&key, 2), |header| {
            header.image.as_mut().unwrap().len -= IMAGE_ALIGN;
        });
        let err = verify(&bytes, &key).unwrap_err();
        assert!(err.contains("the header says"), "{err}");
    }

    #[test]
    fn an_artifact_for_another_target_is_refused() {
        let key = key();
        let bytes = with_header(&encoded(&key, 0), |header| {
            header.triple = "aarch64-unknown-linux-gnu".into();
        });
        let err = verify(&bytes, &key).unwrap_err();
        assert!(err.contains("target"), "{err}");
    }

    #[test]
    fn an_artifact_made_with_other_compile_settings_is_refused() {
        // Same engine, compiler, target and CPU: code made without the deadline checks, or for
        // another memory layout, must not be loaded either.
        let key = key();
        let bytes = with_header(&encoded(&key, 0), |header| {
            header.settings = "features=x;checks=none".into();
        });
        let err = verify(&bytes, &key).unwrap_err();
        assert!(err.contains("compile settings"), "{err}");
        let mut other = key.clone();
        other.identity.settings = "features=x;checks=none";
        assert_ne!(other.file_name(), key.file_name());
    }

    #[test]
    fn a_truncated_artifact_is_refused() {
        let key = key();
        let bytes = encoded(&key, 1);
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
        let mut huge = b"\x7fELF".to_vec();
        huge.extend(u32::MAX.to_le_bytes());
        huge.extend_from_slice(MAGIC);
        assert!(verify(&huge, &key()).unwrap_err().contains("longer"));
    }

    #[test]
    fn keys_differ_by_every_part() {
        let a = key();
        let mut b = key();
        b.identity.cpu_features = "sse2,avx".into();
        assert_ne!(a.file_name(), b.file_name());
    }

    #[test]
    fn only_names_of_the_form_of_a_key_are_artifact_names() {
        assert!(is_artifact_file_name(&key().file_name()));
        for bad in [
            "cranelift-0123.artifact",
            "../cranelift-0123456789abcdef0123456789abcdef.artifact",
            "cranelift-0123456789abcdef0123456789abcdeF.artifact",
            "-0123456789abcdef0123456789abcdef.artifact",
            "cranelift-0123456789abcdef0123456789abcdef",
        ] {
            assert!(!is_artifact_file_name(bad), "{bad}");
        }
    }
}
