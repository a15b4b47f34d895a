//! A bench suite: a folder whose subfolders holding a `subako-package.json` are packages, each
//! with a `bench.json` naming the tool and arguments to run (`{"tool": "find", "args": {…}}`),
//! such as the corpus in `benches/packages`. [`read`] lists them, sorted by folder name, and
//! refuses the suite when a package cannot be run as it stands: no `module.wasm` (its build
//! outputs are not committed, so the message says to build it), or no or a bad `bench.json`.
//!
//! Other subfolders (sources, a cargo `target`) and dot-folders are not packages and are
//! skipped. It does not load or check the packages (the CLI does, as for one package), and it
//! runs nothing.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::package::{MANIFEST_FILE, MODULE_FILE};

/// The file of a suite's package folder that says what to run.
pub const SPEC_FILE: &str = "bench.json";

/// What a `bench.json` holds, for messages.
const SPEC_SHAPE: &str = r#"{"tool": "NAME", "args": {...}}"#;

/// The script that builds a suite's modules, when the suite has one.
pub const BUILD_SCRIPT: &str = "build.sh";

/// One package of a suite and what to run on it.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteEntry {
    /// The package folder's name.
    pub name: String,
    pub dir: PathBuf,
    pub tool: String,
    /// The tool's arguments, a JSON object.
    pub arguments: serde_json::Value,
}

/// `bench.json`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    tool: String,
    #[serde(default)]
    args: serde_json::Map<String, serde_json::Value>,
}

/// Why a suite cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} holds no package folder (a folder with {MANIFEST_FILE})", suite.display())]
    Empty { suite: PathBuf },
    #[error("{} not built (no {MODULE_FILE} in {}): {how}", packages.join(", "), suite.display())]
    NotBuilt {
        suite: PathBuf,
        packages: Vec<String>,
        /// What to run to build them.
        how: String,
    },
    #[error("{}: no {SPEC_FILE}; it names what to run: {SPEC_SHAPE}", dir.display())]
    NoSpec { dir: PathBuf },
    #[error("{}: {reason}", path.display())]
    BadSpec { path: PathBuf, reason: String },
}

/// The packages of the suite at `suite`, sorted by folder name, each with its `bench.json`.
pub fn read(suite: &Path) -> Result<Vec<SuiteEntry>, SuiteError> {
    let io_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SuiteError::Io { path, source }
    };
    let mut folders = Vec::new();
    for entry in fs::read_dir(suite).map_err(io_error(suite))? {
        let entry = entry.map_err(io_error(suite))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // A symbolic link to a package folder is a package (the corpus links examples/greet).
        let dir = entry.path();
        if name.starts_with('.') || !dir.join(MANIFEST_FILE).is_file() {
            continue;
        }
        folders.push((name, dir));
    }
    folders.sort();
    if folders.is_empty() {
        return Err(SuiteError::Empty {
            suite: suite.to_path_buf(),
        });
    }

    let not_built: Vec<String> = folders
        .iter()
        .filter(|(_, dir)| !dir.join(MODULE_FILE).exists())
        .map(|(name, _)| name.clone())
        .collect();
    if !not_built.is_empty() {
        let script = suite.join(BUILD_SCRIPT);
        let how = if script.is_file() {
            format!("run {} first", script.display())
        } else {
            format!("build their modules first (benches/packages/{BUILD_SCRIPT} builds the corpus)")
        };
        return Err(SuiteError::NotBuilt {
            suite: suite.to_path_buf(),
            packages: not_built,
            how,
        });
    }

    folders
        .into_iter()
        .map(|(name, dir)| {
            let (tool, arguments) = read_spec(&dir)?;
            Ok(SuiteEntry {
                name,
                dir,
                tool,
                arguments,
            })
        })
        .collect()
}

/// The tool and arguments of the package folder `dir`.
fn read_spec(dir: &Path) -> Result<(String, serde_json::Value), SuiteError> {
    let path = dir.join(SPEC_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(SuiteError::NoSpec {
                dir: dir.to_path_buf(),
            })
        }
        Err(source) => return Err(SuiteError::Io { path, source }),
    };
    let spec: Spec = serde_json::from_str(&text).map_err(|err| SuiteError::BadSpec {
        path: path.clone(),
        reason: format!("not a bench spec ({SPEC_SHAPE}): {err}"),
    })?;
    if spec.tool.is_empty() {
        return Err(SuiteError::BadSpec {
            path,
            reason: "the tool is empty".into(),
        });
    }
    Ok((spec.tool, serde_json::Value::Object(spec.args)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(suite: &Path, name: &str, spec: Option<&str>, module: bool) {
        let dir = suite.join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(MANIFEST_FILE), "{}").unwrap();
        if let Some(spec) = spec {
            fs::write(dir.join(SPEC_FILE), spec).unwrap();
        }
        if module {
            fs::write(dir.join(MODULE_FILE), b"\0asm").unwrap();
        }
    }

    #[test]
    fn packages_are_sorted_and_other_folders_skipped() {
        let suite = tempfile::tempdir().unwrap();
        package(
            suite.path(),
            "text",
            Some(r#"{"tool":"find","args":{"a":1}}"#),
            true,
        );
        package(suite.path(), "data-1m", Some(r#"{"tool":"lookup"}"#), true);
        package(suite.path(), ".hidden", None, false);
        fs::create_dir_all(suite.path().join("guests/abi")).unwrap();
        fs::create_dir_all(suite.path().join("target")).unwrap();
        fs::write(suite.path().join("build.sh"), "").unwrap();

        let entries = read(suite.path()).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["data-1m", "text"]);
        assert_eq!(entries[0].tool, "lookup");
        assert_eq!(entries[0].arguments, serde_json::json!({}));
        assert_eq!(entries[1].arguments, serde_json::json!({"a": 1}));
    }

    #[test]
    fn packages_without_a_module_are_named_with_how_to_build_them() {
        let suite = tempfile::tempdir().unwrap();
        package(suite.path(), "png", Some(r#"{"tool":"t"}"#), false);
        package(suite.path(), "greet", Some(r#"{"tool":"greet"}"#), true);
        package(suite.path(), "data-8m", Some(r#"{"tool":"t"}"#), false);
        let message = read(suite.path()).unwrap_err().to_string();
        assert!(message.starts_with("data-8m, png not built"), "{message}");
        assert!(message.contains("benches/packages/build.sh"), "{message}");

        fs::write(suite.path().join(BUILD_SCRIPT), "").unwrap();
        let message = read(suite.path()).unwrap_err().to_string();
        let script = suite.path().join(BUILD_SCRIPT);
        assert!(
            message.ends_with(&format!("run {} first", script.display())),
            "{message}"
        );
    }

    #[test]
    fn a_missing_or_bad_spec_is_refused_naming_its_file() {
        let suite = tempfile::tempdir().unwrap();
        package(suite.path(), "a", None, true);
        assert!(matches!(read(suite.path()), Err(SuiteError::NoSpec { .. })));
        for spec in [
            r#"{"args":{}}"#,
            r#"{"tool":"t","args":[]}"#,
            r#"{"tool":"t","arguments":{}}"#,
            r#"{"tool":""}"#,
            "not json",
        ] {
            fs::write(suite.path().join("a").join(SPEC_FILE), spec).unwrap();
            let err = read(suite.path()).unwrap_err();
            assert!(matches!(err, SuiteError::BadSpec { .. }), "{spec}: {err}");
            assert!(err.to_string().contains(SPEC_FILE), "{err}");
        }
    }

    #[test]
    fn a_folder_without_packages_is_refused() {
        let suite = tempfile::tempdir().unwrap();
        fs::create_dir_all(suite.path().join("src")).unwrap();
        assert!(matches!(read(suite.path()), Err(SuiteError::Empty { .. })));
        assert!(matches!(
            read(&suite.path().join("missing")),
            Err(SuiteError::Io { .. })
        ));
    }
}
