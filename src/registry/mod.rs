//! Packages from OCI registries: `oci://REGISTRY/REPOSITORY:TAG` (or `@sha256:…`) wherever a
//! command takes a package, and `hako push`.
//!
//! - [`reference`](mod@reference) parses what an `oci://` argument names;
//! - [`auth`] reads credentials (docker's `config.json`) and the challenges that ask for them;
//! - [`client`] speaks HTTP to a registry, every read bounded in bytes and time;
//! - [`layout`] says how a package sits in an image manifest, and which manifests are read;
//! - [`pull`] fetches a package into a folder, [`push`] publishes one.
//!
//! A pulled package is checked by [`crate::package`] as a folder would be; nothing here
//! decides whether it is acceptable beyond the registry's own format. Every refusal is a
//! [`Problem`] with an `oci.*` rule, like a package's.

pub mod auth;
pub mod client;
pub mod layout;
pub mod pull;
pub mod push;
pub mod reference;
pub mod referrers;
pub mod signature;

use std::path::{Path, PathBuf};

pub use auth::Credentials;
pub use client::{Limits, Registry};
pub use pull::Names;
pub use reference::{Digest, Reference};

use crate::package::{self, LoadError, Package, Problem};

/// Why a registry gave no package.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry's answer, or what it holds, breaks a rule.
    #[error("{}", joined(.problems))]
    Refused { problems: Vec<Problem> },
    /// The registry could not be reached, or the connection broke.
    #[error("cannot reach the registry {registry}: {reason}")]
    Unreachable { registry: String, reason: String },
    /// Writing what was pulled failed.
    #[error("{0}")]
    Io(String),
    /// The client could not be set up (trust roots, TLS).
    #[error("{0}")]
    Setup(String),
}

fn joined(problems: &[Problem]) -> String {
    let shown: Vec<String> = problems.iter().map(Problem::to_string).collect();
    shown.join("; ")
}

impl RegistryError {
    pub(crate) fn refused(rule: &'static str, message: impl Into<String>) -> RegistryError {
        RegistryError::Refused {
            problems: vec![Problem::new(rule, message)],
        }
    }
}

/// How a command reaches registries: its flags.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The logins, read once from the credentials file ([`Credentials::discover`]).
    pub credentials: Credentials,
    /// Hosts that may be reached over plain HTTP besides loopback ones.
    pub insecure: Vec<String>,
    /// PEM files of CAs trusted beside the system's roots (`--registry-ca`).
    pub ca_files: Vec<PathBuf>,
    pub limits: Limits,
    /// The name and version of a module-only artifact.
    pub names: Names,
    /// The signature a pulled package must carry, when one is required.
    pub trust: Option<std::sync::Arc<signature::Trust>>,
}

impl Options {
    /// A client over these options. Must be called inside a tokio runtime.
    pub fn registry(&self) -> Result<Registry, RegistryError> {
        Registry::new(
            self.credentials.clone(),
            self.insecure.clone(),
            &self.ca_files,
            self.limits,
        )
    }
}

/// Where a package came from: the reference as given, the manifest's digest, and who signed
/// it when a signature was required.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    pub reference: String,
    pub digest: Digest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<signature::Signer>,
}

/// A package pulled and not yet checked: what [`fetch`] wrote.
pub struct Fetched {
    temp: tempfile::TempDir,
    folder: PathBuf,
    pulled: pull::Pulled,
    reference: Reference,
}

/// Pulls `reference` below `work` (a store's staging folder, or the system's temporary one),
/// the whole pull within the limits' time: only network and file writes, for a runtime's
/// thread. [`Fetched::check`] does the rest.
pub async fn fetch(
    registry: &Registry,
    reference: &Reference,
    options: &Options,
    work: &Path,
) -> Result<Fetched, LoadError> {
    let io = |source| LoadError::Io {
        path: work.to_path_buf(),
        source,
    };
    let temp = tempfile::Builder::new()
        .prefix("pulled-")
        .tempdir_in(work)
        .map_err(io)?;
    let folder = temp.path().join("package");
    std::fs::create_dir(&folder).map_err(io)?;
    let trust = options.trust.as_deref();
    let pull = pull::pull_into(
        registry,
        reference,
        &options.names,
        trust,
        &folder,
        temp.path(),
    );
    let timeout = registry.limits.pull_timeout;
    let pulled = tokio::time::timeout(timeout, pull)
        .await
        .unwrap_or_else(|_| {
            Err(RegistryError::refused(
                "oci.timeout",
                format!(
                    "{reference}: the pull took longer than {} s",
                    timeout.as_secs()
                ),
            ))
        })
        .map_err(|error| error.into_load_error(reference))?;
    Ok(Fetched {
        temp,
        folder,
        pulled,
        reference: reference.clone(),
    })
}

impl Fetched {
    /// Unpacks the assets and checks the package as a folder would be, its
    /// [`Package::origin`] set. Its files live as long as the package. Blocking.
    pub fn check(self) -> Result<Package, LoadError> {
        if let Some(layer) = &self.pulled.assets_layer {
            pull::unpack_assets(layer, &self.folder)
                .map_err(|error| error.into_load_error(&self.reference))?;
        }
        let mut package = package::load_pulled(self.temp, &self.folder)?;
        package.origin = Some(Origin {
            reference: self.reference.to_string(),
            digest: self.pulled.digest,
            signer: self.pulled.signer,
        });
        Ok(package)
    }
}

impl RegistryError {
    /// The refusal or failure as a package load's.
    fn into_load_error(self, reference: &Reference) -> LoadError {
        match self {
            RegistryError::Refused { problems } => {
                LoadError::Refused(package::Refusal { problems })
            }
            other => LoadError::Io {
                path: PathBuf::from(reference.to_string()),
                source: std::io::Error::other(other.to_string()),
            },
        }
    }
}

/// [`fetch`] and [`Fetched::check`] from a command: its own runtime, the client made from `options`.
pub fn load_blocking(text: &str, options: &Options, work: &Path) -> Result<Package, LoadError> {
    let reference = Reference::parse(text).map_err(|reason| {
        LoadError::Refused(package::Refusal {
            problems: vec![Problem::new("oci.reference", reason)],
        })
    })?;
    let runtime = runtime().map_err(|source| LoadError::Io {
        path: PathBuf::from(text),
        source,
    })?;
    runtime
        .block_on(async {
            let registry = options.registry().map_err(|error| LoadError::Io {
                path: PathBuf::from(text),
                source: std::io::Error::other(error.to_string()),
            })?;
            fetch(&registry, &reference, options, work).await
        })?
        .check()
}

/// [`push::push`] from a command, with a signature attached when `signer` is given.
pub fn push_blocking(
    package: &Package,
    text: &str,
    options: &Options,
    signer: Option<&signature::SigningKey>,
) -> Result<Digest, RegistryError> {
    let reference =
        Reference::parse(text).map_err(|reason| RegistryError::refused("oci.reference", reason))?;
    let runtime = runtime().map_err(|error| RegistryError::Setup(error.to_string()))?;
    runtime.block_on(async {
        let registry = options.registry()?;
        push::push(&registry, &reference, package, signer).await
    })
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
