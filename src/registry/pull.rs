//! Pulling a package from a registry into a folder that [`crate::package::load`] then checks
//! as it checks any other.
//!
//! The manifest is read once, by the reference's tag or digest, and its digest is computed
//! from the bytes read (a digest reference must match it). Every blob is then asked for by the
//! digest that manifest lists, so a tag moved during the pull cannot swap what is checked: what
//! lands on disk is what that one manifest names, or nothing. Each blob streams through
//! SHA-256 and is refused at its first byte past its size ([`super::client`]).
//!
//! The folder gets the package layout: `subako-package.json` (the config, or for a module-only
//! artifact one made of the caller's name and version) and `module.wasm`; the assets layer is
//! left beside it, for [`unpack_assets`] to unpack under the archive's rules and bounds
//! ([`crate::package::archive::extract_layer`]) off the runtime's threads.
//!
//! This module does not check the package; `package::load` does, next.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::Method;

use super::client::{Access, Registry};
use super::layout::{self, Blob, Layout};
use super::reference::{Digest, Reference};
use super::referrers;
use super::signature::{Signer, Trust};
use super::RegistryError;
use crate::package::{archive, MANIFEST_FILE, MODULE_FILE};

/// The name and version a module-only artifact is stored under (it carries neither).
#[derive(Debug, Clone, Default)]
pub struct Names {
    pub name: Option<String>,
    pub version: Option<String>,
}

/// What a pull wrote.
#[derive(Debug)]
pub struct Pulled {
    /// The manifest's digest.
    pub digest: Digest,
    /// Who signed it, when a signature was required.
    pub signer: Option<Signer>,
    /// The assets layer, still packed, when the package has one.
    pub assets_layer: Option<PathBuf>,
}

/// Pulls `reference` into `folder` (empty): the package's files in their places, and the layer
/// of its assets, packed, in `scratch` (beside `folder`, on the same disk). Each read is
/// bounded by the limits; the whole pull's time is its caller's to bound
/// ([`super::fetch`]).
pub async fn pull_into(
    registry: &Registry,
    reference: &Reference,
    names: &Names,
    trust: Option<&Trust>,
    folder: &Path,
    scratch: &Path,
) -> Result<Pulled, RegistryError> {
    let limits = registry.limits;
    let (bytes, content_type) = registry
        .get_whole(
            reference,
            &format!("manifests/{}", reference.manifest_key()),
            Some(&layout::ACCEPTED.join(", ")),
            limits.max_manifest_bytes,
            "oci.manifest_size",
            "reading the manifest",
        )
        .await?;
    let digest = Digest::of(&bytes);
    if let Some(asked) = &reference.digest {
        if *asked != digest {
            return Err(RegistryError::refused(
                "oci.digest",
                format!("{reference}: the registry answered a manifest whose digest is {digest}"),
            ));
        }
    }
    let layout = layout::read(
        &bytes,
        content_type.as_deref(),
        limits.max_layers,
        limits.max_pull_bytes,
    )?;
    let pinned = reference.at(digest.clone());
    // The signature before any blob: an unsigned package costs its manifest only.
    let signer = match trust {
        Some(trust) => Some(signed(registry, &pinned, &digest, &bytes, trust).await?),
        None => None,
    };
    let mut budget = limits.max_pull_bytes;
    let (module, assets) = match layout {
        Layout::Package {
            config,
            module,
            assets,
        } => {
            if names.name.is_some() || names.version.is_some() {
                return Err(RegistryError::refused(
                    "oci.layout",
                    format!(
                        "{reference} is a hako package, which names itself: --package-name and \
                         --package-version are for a module-only artifact"
                    ),
                ));
            }
            let manifest = folder.join(MANIFEST_FILE);
            fetch(registry, &pinned, &config, &manifest, &mut budget).await?;
            (module, assets)
        }
        Layout::ModuleOnly { module } => {
            let (Some(name), Some(version)) = (&names.name, &names.version) else {
                return Err(RegistryError::refused(
                    "oci.layout",
                    format!(
                        "{reference} is a Wasm module without a package manifest \
                         ({}): give --package-name and --package-version to store it under",
                        layout::WASM_CONFIG
                    ),
                ));
            };
            let manifest = serde_json::json!({"abi": 1, "name": name, "version": version});
            std::fs::write(folder.join(MANIFEST_FILE), manifest.to_string())
                .map_err(|error| RegistryError::Io(format!("writing {MANIFEST_FILE}: {error}")))?;
            (module, None)
        }
    };
    fetch(
        registry,
        &pinned,
        &module,
        &folder.join(MODULE_FILE),
        &mut budget,
    )
    .await?;
    let assets_layer = match assets {
        Some(assets) => {
            let layer = scratch.join("assets.tar.gz");
            fetch(registry, &pinned, &assets, &layer, &mut budget).await?;
            Some(layer)
        }
        None => None,
    };
    Ok(Pulled {
        digest,
        signer,
        assets_layer,
    })
}

/// Who signed the manifest `bytes` (digest `digest`) as `trust` requires, from the bundles
/// that refer to it; refused by rule `oci.signature` when none verifies, with each reason.
async fn signed(
    registry: &Registry,
    reference: &Reference,
    digest: &Digest,
    bytes: &[u8],
    trust: &Trust,
) -> Result<Signer, RegistryError> {
    let mut reasons = Vec::new();
    for found in referrers::bundles(registry, reference, digest).await? {
        match found {
            referrers::Found::Bundle(bundle) => match trust.verify(bytes, &bundle) {
                Ok(signer) => return Ok(signer),
                Err(reason) => reasons.push(reason),
            },
            referrers::Found::NotOurs(reason) => reasons.push(reason),
        }
    }
    if reasons.is_empty() {
        reasons.push("no Sigstore bundle refers to it".to_string());
    }
    Err(RegistryError::refused(
        "oci.signature",
        format!(
            "{reference} is required to carry {}: {}",
            trust.describe(),
            reasons.join("; ")
        ),
    ))
}

/// Unpacks a pulled assets layer into the package's `assets/`, and removes the layer.
pub fn unpack_assets(layer: &Path, folder: &Path) -> Result<(), RegistryError> {
    let unpacked = archive::extract_layer(layer, &folder.join(crate::package::ASSETS_DIR));
    let _ = std::fs::remove_file(layer);
    unpacked.map_err(|error| match error {
        archive::ExtractError::Refused(problems) => RegistryError::Refused { problems },
        archive::ExtractError::Io { path, source } => RegistryError::Io(format!(
            "unpacking the assets to {}: {source}",
            path.display()
        )),
    })
}

/// One blob into the file at `path`, by its digest.
async fn fetch(
    registry: &Registry,
    reference: &Reference,
    blob: &Blob,
    path: &Path,
    budget: &mut u64,
) -> Result<(), RegistryError> {
    let answer = registry
        .send(
            reference,
            Access::Pull,
            Method::GET,
            &format!("blobs/{}", blob.digest),
            &[],
            Bytes::new(),
        )
        .await?;
    if !answer.response.status().is_success() {
        let doing = format!("reading blob {}", blob.digest);
        return Err(registry.unexpected(answer, reference, &doing).await);
    }
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|error| RegistryError::Io(format!("creating {}: {error}", path.display())))?;
    registry
        .stream_blob(
            answer.response,
            &blob.digest,
            blob.size,
            budget,
            &mut file,
            reference,
        )
        .await
}
