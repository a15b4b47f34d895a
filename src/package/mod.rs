//! Reading a Subako ABI 1 package and checking it statically, without running it.
//!
//! A package is a folder, or a gzip-compressed tar archive of one (`.tar.gz` / `.tgz`; the files
//! sit at the archive's root or inside a single top-level folder). It holds:
//!
//! - `subako-package.json`, the manifest (see [`manifest`] for its rules);
//! - `module.wasm` beside it, a WebAssembly core module of at most 64 MiB (see [`module_check`]);
//! - optionally `assets/`, a folder mounted read-only as `/package` when the module runs. A
//!   symbolic link inside it that resolves outside the package, or to nothing, is refused.
//!
//! [`load`] reads and checks all of it and reports **every** problem it finds at once, as a
//! [`Refusal`] made of [`Problem`]s with stable rule ids; a failure to read the package at all
//! (the path does not exist, a disk error) is an I/O error instead. An archive is extracted,
//! defensively (see [`archive`]), into a temporary folder that lives as long as the [`Package`].
//!
//! This module does not run the module, discover its tools (that is upload's job, which then
//! applies [`tools::validate_tools`]), compile it, or store it.

pub mod archive;
mod assets;
pub mod manifest;
pub mod module_check;
pub mod tools;

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tempfile::TempDir;

pub use manifest::Manifest;
pub use module_check::{check_module, ModuleFacts};
pub use tools::{validate_tools, Tool, ToolRuleError};

/// The manifest's file name inside a package.
pub const MANIFEST_FILE: &str = "subako-package.json";
/// The module's file name inside a package.
pub const MODULE_FILE: &str = "module.wasm";
/// The optional assets folder's name inside a package.
pub const ASSETS_DIR: &str = "assets";
/// The largest module accepted, in bytes.
pub const MAX_MODULE_BYTES: u64 = 64 * 1024 * 1024;

/// One reason a package is refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// A stable id of the rule that was broken, such as `"manifest.abi"` or `"import.unknown"`.
    pub rule: &'static str,
    /// What was wrong, in words an operator can act on.
    pub message: String,
}

impl Problem {
    /// A problem breaking `rule`.
    pub fn new(rule: &'static str, message: impl Into<String>) -> Self {
        Problem {
            rule,
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule, self.message)
    }
}

/// Every problem that made a package unacceptable. Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub problems: Vec<Problem>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, problem) in self.problems.iter().enumerate() {
            if index > 0 {
                writeln!(f)?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

/// Why [`load`] gave no package.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The package could not be read at all.
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The package was read and is not acceptable.
    #[error("the package was refused:\n{0}")]
    Refused(Refusal),
}

impl LoadError {
    fn io(path: &Path, source: io::Error) -> Self {
        LoadError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    fn refused(problems: Vec<Problem>) -> Self {
        LoadError::Refused(Refusal { problems })
    }
}

/// A package that passed every static check.
pub struct Package {
    pub manifest: Manifest,
    /// The folder holding the manifest (inside a temporary folder for an archive).
    pub root: PathBuf,
    /// The module's bytes.
    pub wasm: Vec<u8>,
    /// The assets folder, if the package has one.
    pub assets: Option<PathBuf>,
    /// The SHA-256 of the module's bytes, in lowercase hex.
    pub module_sha256: String,
    /// Whether the module uses 128-bit SIMD (which the singlepass compiler cannot compile).
    pub uses_simd: bool,
    /// Where a package pulled from a registry came from (`None` for a folder or an archive).
    pub origin: Option<crate::registry::Origin>,
    /// Keeps an extracted archive on disk for as long as the package lives.
    _extracted: Option<TempDir>,
}

impl fmt::Debug for Package {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Package")
            .field("manifest", &self.manifest)
            .field("root", &self.root)
            .field("wasm_bytes", &self.wasm.len())
            .field("assets", &self.assets)
            .field("module_sha256", &self.module_sha256)
            .field("uses_simd", &self.uses_simd)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// Reads the package at `path` (a folder or a `.tar.gz`/`.tgz` archive) and checks everything
/// that can be checked without running it. An archive is extracted below the system's
/// temporary folder; [`load_in`] says where instead.
pub fn load(path: &Path) -> Result<Package, LoadError> {
    load_in(path, &std::env::temp_dir())
}

/// [`load`], extracting an archive below `work` (a store's staging folder, so that what a
/// killed process leaves is swept).
pub fn load_in(path: &Path, work: &Path) -> Result<Package, LoadError> {
    let metadata = fs::metadata(path).map_err(|source| LoadError::io(path, source))?;
    if metadata.is_dir() {
        return check(path.to_path_buf(), None);
    }
    let temp = tempfile::Builder::new()
        .prefix("extracted-")
        .tempdir_in(work)
        .map_err(|source| LoadError::io(path, source))?;
    let root = archive::extract(path, temp.path()).map_err(|error| match error {
        archive::ExtractError::Io { path, source } => LoadError::Io { path, source },
        archive::ExtractError::Refused(problems) => LoadError::refused(problems),
    })?;
    check(root, Some(temp))
}

/// Checks the package a registry pull wrote to `root`, inside `pulled`, which then lives as
/// long as the package.
pub fn load_pulled(pulled: TempDir, root: &Path) -> Result<Package, LoadError> {
    check(root.to_path_buf(), Some(pulled))
}

/// Every check of the package whose files are at `root`.
fn check(root: PathBuf, extracted: Option<TempDir>) -> Result<Package, LoadError> {
    let mut problems = Vec::new();
    let manifest = read_manifest(&root, &mut problems)?;
    let wasm = read_module(&root, &mut problems)?;
    let uses_simd = match wasm.as_deref().map(check_module) {
        Some(Ok(facts)) => facts.uses_simd,
        Some(Err(found)) => {
            problems.extend(found);
            false
        }
        None => false,
    };
    let assets = assets::check(&root, &mut problems)?;

    match (manifest, wasm) {
        (Some(manifest), Some(wasm)) if problems.is_empty() => Ok(Package {
            manifest,
            root,
            module_sha256: hex::encode(Sha256::digest(&wasm)),
            wasm,
            assets,
            uses_simd,
            origin: None,
            _extracted: extracted,
        }),
        _ => Err(LoadError::refused(problems)),
    }
}

fn read_manifest(root: &Path, problems: &mut Vec<Problem>) -> Result<Option<Manifest>, LoadError> {
    let path = root.join(MANIFEST_FILE);
    let bytes = match read_limited(&path, manifest::MAX_MANIFEST_BYTES) {
        Ok(Limited::Read(bytes)) => bytes,
        Ok(Limited::Missing) => {
            problems.push(Problem::new(
                "manifest.missing",
                format!("the package has no {MANIFEST_FILE}"),
            ));
            return Ok(None);
        }
        Ok(Limited::TooLarge(size)) => {
            problems.push(Problem::new(
                "manifest.size",
                format!(
                    "{MANIFEST_FILE} is {size} bytes; at most {} are allowed",
                    manifest::MAX_MANIFEST_BYTES
                ),
            ));
            return Ok(None);
        }
        Err(source) => return Err(LoadError::io(&path, source)),
    };
    match manifest::parse(&bytes) {
        Ok(manifest) => Ok(Some(manifest)),
        Err(found) => {
            problems.extend(found);
            Ok(None)
        }
    }
}

/// A module file on its own, outside any package (what `hako run` runs), that passed the
/// module's checks.
#[derive(Debug)]
pub struct ModuleFile {
    pub wasm: Vec<u8>,
    /// The SHA-256 of the module's bytes, in lowercase hex.
    pub module_sha256: String,
    pub uses_simd: bool,
}

/// Whether `path` is a file that starts as a WebAssembly binary does (`\0asm`).
pub fn is_module_file(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\0asm"
}

/// Reads the module file at `path` and checks it as a package's module is checked: the same
/// size limit, and the same rules with the same reasons.
pub fn load_module_file(path: &Path) -> Result<ModuleFile, LoadError> {
    let wasm = match read_limited(path, MAX_MODULE_BYTES) {
        Ok(Limited::Read(bytes)) => bytes,
        Ok(Limited::Missing) => {
            return Err(LoadError::io(
                path,
                io::Error::new(io::ErrorKind::NotFound, "no such file"),
            ))
        }
        Ok(Limited::TooLarge(size)) => {
            return Err(LoadError::refused(vec![Problem::new(
                "module.size",
                format!(
                    "the module is {size} bytes; at most {MAX_MODULE_BYTES} ({} MiB) are allowed",
                    MAX_MODULE_BYTES >> 20
                ),
            )]))
        }
        Err(source) => return Err(LoadError::io(path, source)),
    };
    let facts = check_module(&wasm).map_err(LoadError::refused)?;
    Ok(ModuleFile {
        module_sha256: hex::encode(Sha256::digest(&wasm)),
        wasm,
        uses_simd: facts.uses_simd,
    })
}

fn read_module(root: &Path, problems: &mut Vec<Problem>) -> Result<Option<Vec<u8>>, LoadError> {
    let path = root.join(MODULE_FILE);
    match read_limited(&path, MAX_MODULE_BYTES) {
        Ok(Limited::Read(bytes)) => Ok(Some(bytes)),
        Ok(Limited::Missing) => {
            problems.push(Problem::new(
                "module.missing",
                format!("the package has no {MODULE_FILE} beside {MANIFEST_FILE}"),
            ));
            Ok(None)
        }
        Ok(Limited::TooLarge(size)) => {
            problems.push(Problem::new(
                "module.size",
                format!(
                    "{MODULE_FILE} is {size} bytes; at most {MAX_MODULE_BYTES} ({} MiB) are allowed",
                    MAX_MODULE_BYTES >> 20
                ),
            ));
            Ok(None)
        }
        Err(source) => Err(LoadError::io(&path, source)),
    }
}

/// A stored version's module: read only up to the size any module may have, so a file grown or
/// replaced outside hako, or one that is not a regular file, is refused before it is read whole
/// into memory. It was checked at upload; the store compares it with its record's digest.
pub(crate) fn read_stored_module(path: &Path) -> io::Result<Vec<u8>> {
    match read_limited(path, MAX_MODULE_BYTES)? {
        Limited::Read(bytes) => Ok(bytes),
        Limited::Missing => Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no such regular file",
        )),
        Limited::TooLarge(size) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it is {size} bytes; a module is at most {MAX_MODULE_BYTES} ({} MiB)",
                MAX_MODULE_BYTES >> 20
            ),
        )),
    }
}

enum Limited {
    Read(Vec<u8>),
    Missing,
    TooLarge(u64),
}

/// Reads a regular file of at most `limit` bytes. A file that grows while it is read is still
/// cut at `limit + 1` bytes, so the limit holds whatever the metadata said.
fn read_limited(path: &Path, limit: u64) -> io::Result<Limited> {
    let metadata = match fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => metadata,
        Ok(_) => return Ok(Limited::Missing),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Limited::Missing),
        Err(error) => return Err(error),
    };
    if metadata.len() > limit {
        return Ok(Limited::TooLarge(metadata.len()));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Ok(Limited::TooLarge(bytes.len() as u64));
    }
    Ok(Limited::Read(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_shows_one_problem_per_line() {
        let refusal = Refusal {
            problems: vec![
                Problem::new("manifest.abi", "abi must be the number 1"),
                Problem::new("export.start", "the module does not export _start"),
            ],
        };
        assert_eq!(
            refusal.to_string(),
            "manifest.abi: abi must be the number 1\nexport.start: the module does not export _start"
        );
    }

    #[test]
    fn a_missing_path_is_an_io_error_not_a_refusal() {
        let temp = TempDir::new().unwrap();
        let error = load(&temp.path().join("nothing-here")).unwrap_err();
        assert!(matches!(error, LoadError::Io { .. }), "{error:?}");
    }

    #[test]
    fn a_file_over_the_limit_is_not_read() {
        let temp = TempDir::new().unwrap();
        let path = temp.path().join("big");
        fs::write(&path, vec![0u8; 11]).unwrap();
        assert!(matches!(
            read_limited(&path, 10).unwrap(),
            Limited::TooLarge(11)
        ));
        assert!(matches!(read_limited(&path, 11).unwrap(), Limited::Read(b) if b.len() == 11));
        assert!(matches!(
            read_limited(&temp.path().join("absent"), 10).unwrap(),
            Limited::Missing
        ));
    }

    #[test]
    fn problems_serialize_with_their_rule_and_message() {
        let json = serde_json::to_value(Problem::new("module.size", "too big")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"rule": "module.size", "message": "too big"})
        );
    }
}
