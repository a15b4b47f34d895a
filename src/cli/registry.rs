//! The flags of every command that takes a package, for a package given as `oci://…`: where
//! the registry credentials are, which registries may be reached over plain HTTP, which CAs are
//! trusted, and the name
//! and version of a module-only artifact; and `hako push`.

use std::path::PathBuf;

use clap::Args;

use std::sync::Arc;

use super::Failure;
use crate::registry::signature::{SigningKey, Trust};
use crate::registry::{self, Credentials, Names, Options, RegistryError};

/// How registries are reached: `--registry-auth`, `--insecure-registry`, `--registry-ca`
/// (`hako serve` takes these for uploads by reference).
#[derive(Debug, Clone, Default, Args)]
pub struct ReachArgs {
    /// Registry credentials in docker's config.json format (default: $REGISTRY_AUTH_FILE, then
    /// ~/.docker/config.json).
    #[arg(long, value_name = "FILE")]
    registry_auth: Option<PathBuf>,
    /// A registry (host or host:port) that may be reached over plain HTTP when TLS fails
    /// (repeatable; loopback registries may be without it).
    #[arg(long = "insecure-registry", value_name = "HOST")]
    insecure: Vec<String>,
    /// A PEM file of a CA that registries' certificates may chain to, beside the system's
    /// roots (repeatable).
    #[arg(long = "registry-ca", value_name = "FILE")]
    ca_files: Vec<PathBuf>,
    /// Require a package pulled from a registry to carry a Sigstore signature by this PEM
    /// public key (ECDSA P-256 as cosign makes it, or ed25519).
    #[arg(long, value_name = "FILE", conflicts_with = "certificate_identity")]
    sigstore_key: Option<PathBuf>,
    /// Require a keyless Sigstore signature whose certificate names this identity (exact), with
    /// --certificate-oidc-issuer.
    #[arg(long, value_name = "ID", requires = "certificate_oidc_issuer")]
    certificate_identity: Option<String>,
    /// The OIDC issuer the keyless signature's certificate names.
    #[arg(long, value_name = "URL", requires = "certificate_identity")]
    certificate_oidc_issuer: Option<String>,
    /// The Sigstore trusted root signatures are verified under (default: the public-good
    /// instance's).
    #[arg(long, value_name = "FILE")]
    trusted_root: Option<PathBuf>,
}

impl ReachArgs {
    pub fn options(&self) -> Result<Options, Failure> {
        let trust = match (
            &self.sigstore_key,
            &self.certificate_identity,
            &self.certificate_oidc_issuer,
        ) {
            (Some(key), _, _) => Some(Trust::key(key, self.trusted_root.as_deref())),
            (None, Some(identity), Some(issuer)) => Some(Trust::identity(
                identity,
                issuer,
                self.trusted_root.as_deref(),
            )),
            _ => None,
        };
        let trust = trust
            .transpose()
            .map_err(|err| Failure::Usage(err.to_string()))?
            .map(Arc::new);
        let credentials = Credentials::discover(self.registry_auth.as_deref())
            .map_err(|err| Failure::Usage(err.to_string()))?;
        Ok(Options {
            credentials,
            insecure: self.insecure.clone(),
            ca_files: self.ca_files.clone(),
            limits: registry::Limits::default(),
            names: Names::default(),
            trust,
        })
    }
}

/// [`ReachArgs`], and `--package-name` and `--package-version` for a module-only artifact.
#[derive(Debug, Clone, Default, Args)]
pub struct RegistryArgs {
    #[command(flatten)]
    reach: ReachArgs,
    /// The name to store a module-only artifact under (one with no package manifest).
    #[arg(long, value_name = "NAME")]
    package_name: Option<String>,
    /// The version to store a module-only artifact under.
    #[arg(long, value_name = "VERSION")]
    package_version: Option<String>,
}

impl RegistryArgs {
    pub fn options(&self) -> Result<Options, Failure> {
        Ok(Options {
            names: Names {
                name: self.package_name.clone(),
                version: self.package_version.clone(),
            },
            ..self.reach.options()?
        })
    }
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// A package folder, or a .tar.gz/.tgz archive of one.
    package: PathBuf,
    /// Where to push it: oci://REGISTRY/REPOSITORY:TAG.
    reference: String,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Attach a Sigstore bundle over the manifest, signed with this unencrypted PKCS#8 PEM
    /// private key (ECDSA P-256 or ed25519), as a referrer (or under the sha256-<digest>
    /// tag on a registry without the referrers API).
    #[arg(long, value_name = "KEY")]
    sign: Option<PathBuf>,
    /// Print the reference and the manifest's digest as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn push(args: PushArgs) -> Result<(), Failure> {
    let signer = match &args.sign {
        Some(path) => Some(SigningKey::read(path).map_err(|err| Failure::Usage(err.to_string()))?),
        None => None,
    };
    let package = super::load_package(&args.package, None, &args.registry)?;
    let options = args.registry.options()?;
    let digest = match registry::push_blocking(&package, &args.reference, &options, signer.as_ref())
    {
        Ok(digest) => digest,
        Err(RegistryError::Refused { problems }) => {
            eprintln!("hako: the push to {} is refused:", args.reference);
            for problem in &problems {
                eprintln!("  - [{}] {}", problem.rule, problem.message);
            }
            return Err(Failure::Refused);
        }
        Err(other) => return Err(Failure::Host(anyhow::Error::new(other))),
    };
    if args.json {
        let pushed = serde_json::json!({
            "name": package.manifest.name,
            "version": package.manifest.version,
            "reference": args.reference,
            "digest": digest,
            "signed": signer.is_some(),
        });
        outln!("{pushed}");
    } else {
        outln!("{}@{digest}", args.reference);
    }
    Ok(())
}
