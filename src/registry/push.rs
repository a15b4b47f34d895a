//! Publishing a checked package as an OCI image manifest in hako's layout ([`super::layout`]):
//! each blob the registry lacks is uploaded whole (a `POST` for an upload, then one `PUT` with
//! its digest), then the manifest is put under the reference's tag.
//!
//! The assets layer is made reproducibly: entries in name order, times, owners and modes
//! fixed, so the same package pushed twice gives the same digests. A symbolic link in the
//! assets (which the package check allows when it stays inside the package) is stored as the
//! file it leads to; one that leads to a folder is refused, as tar+gzip layers carry no links.
//!
//! The blobs are held in memory while they are sent: the module (at most 64 MiB) and the
//! compressed assets.
//!
//! With a signing key, a Sigstore bundle over the manifest is attached as a referrer
//! ([`super::referrers::attach`]).
//!
//! This module does not check the package (`package::load` did).

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{header, Method, StatusCode};

use super::client::{Access, Registry};
use super::layout::{self, Descriptor, IMAGE_MANIFEST};
use super::reference::{Digest, Reference};
use super::signature::SigningKey;
use super::RegistryError;
use crate::package::{Package, MANIFEST_FILE};

/// Pushes `package` to `reference` (which names a tag) and returns the manifest's digest.
pub async fn push(
    registry: &Registry,
    reference: &Reference,
    package: &Package,
    signer: Option<&SigningKey>,
) -> Result<Digest, RegistryError> {
    if reference.tag.is_none() {
        return Err(RegistryError::refused(
            "oci.reference",
            format!("{reference}: a push names the tag it puts the package under"),
        ));
    }
    if reference.digest.is_some() {
        return Err(RegistryError::refused(
            "oci.reference",
            format!(
                "{reference}: a push names a tag, not a digest (the digest is the push's result)"
            ),
        ));
    }
    let config = std::fs::read(package.root.join(MANIFEST_FILE))
        .map_err(|error| RegistryError::Io(format!("reading {MANIFEST_FILE}: {error}")))?;
    let assets = match &package.assets {
        Some(folder) => Some(assets_layer(folder)?),
        None => None,
    };
    let manifest = layout::package_manifest(
        &package.manifest.name,
        &package.manifest.version,
        &config,
        &package.wasm,
        assets.as_deref(),
    );
    let mut blobs = vec![
        (&manifest.config, Bytes::from(config)),
        (&manifest.layers[0], Bytes::copy_from_slice(&package.wasm)),
    ];
    if let Some(assets) = assets {
        blobs.push((&manifest.layers[1], Bytes::from(assets)));
    }
    for (descriptor, bytes) in blobs {
        upload_blob(registry, reference, descriptor, bytes).await?;
    }
    let body = Bytes::from(serde_json::to_vec(&manifest).expect("a manifest serialises"));
    let subject = Descriptor::of(IMAGE_MANIFEST, &body);
    let bundle =
        match signer {
            Some(signer) => Some(signer.bundle(&body).map_err(|reason| {
                RegistryError::Setup(format!("signing the manifest: {reason}"))
            })?),
            None => None,
        };
    let digest = put_manifest(registry, reference, IMAGE_MANIFEST, body).await?;
    if let Some(bundle) = bundle {
        super::referrers::attach(registry, reference, &subject, &bundle).await?;
    }
    Ok(digest)
}

/// Puts a manifest of `media_type` (an image manifest or an index) under the reference's tag
/// (or digest); its digest.
pub async fn put_manifest(
    registry: &Registry,
    reference: &Reference,
    media_type: &str,
    body: Bytes,
) -> Result<Digest, RegistryError> {
    let digest = Digest::of(&body);
    let answer = registry
        .send(
            reference,
            Access::Push,
            Method::PUT,
            &format!("manifests/{}", reference.manifest_key()),
            &[(header::CONTENT_TYPE, media_type.to_string())],
            body,
        )
        .await?;
    if !answer.response.status().is_success() {
        return Err(registry
            .unexpected(answer, reference, "putting the manifest")
            .await);
    }
    Ok(digest)
}

/// Uploads one blob unless the registry has it.
pub async fn upload_blob(
    registry: &Registry,
    reference: &Reference,
    descriptor: &Descriptor,
    bytes: Bytes,
) -> Result<(), RegistryError> {
    let blob_path = format!("blobs/{}", descriptor.digest);
    let head = registry
        .send(
            reference,
            Access::Push,
            Method::HEAD,
            &blob_path,
            &[],
            Bytes::new(),
        )
        .await?;
    if head.response.status().is_success() {
        return Ok(());
    }
    let started = registry
        .send(
            reference,
            Access::Push,
            Method::POST,
            "blobs/uploads/",
            &[(header::CONTENT_LENGTH, "0".to_string())],
            Bytes::new(),
        )
        .await?;
    if started.response.status() != StatusCode::ACCEPTED {
        return Err(registry
            .unexpected(started, reference, "starting an upload")
            .await);
    }
    let location = started
        .response
        .headers()
        .get(header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| {
            RegistryError::refused(
                "oci.registry",
                format!("{reference}: the registry started an upload with no Location"),
            )
        })?;
    let mut url = started.url.join(location).map_err(|error| {
        RegistryError::refused(
            "oci.registry",
            format!("{reference}: the upload's Location is not a URL: {error}"),
        )
    })?;
    url.query_pairs_mut()
        .append_pair("digest", &descriptor.digest);
    let put = registry
        .send_to(
            reference,
            Access::Push,
            Method::PUT,
            url,
            &[
                (header::CONTENT_TYPE, "application/octet-stream".to_string()),
                (header::CONTENT_LENGTH, bytes.len().to_string()),
            ],
            bytes,
        )
        .await?;
    if put.response.status() != StatusCode::CREATED {
        let doing = format!("uploading blob {}", descriptor.digest);
        return Err(registry.unexpected(put, reference, &doing).await);
    }
    Ok(())
}

/// The assets folder as a reproducible tar+gzip layer, paths relative to the folder.
fn assets_layer(folder: &Path) -> Result<Vec<u8>, RegistryError> {
    let io = |path: &Path, error: std::io::Error| {
        RegistryError::Io(format!("reading {}: {error}", path.display()))
    };
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut builder = tar::Builder::new(encoder);
    builder.mode(tar::HeaderMode::Deterministic);
    builder.follow_symlinks(true);
    let mut pending: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let dir = folder.join(&relative);
        let mut entries = std::fs::read_dir(&dir)
            .map_err(|error| io(&dir, error))?
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| io(&dir, error))?;
        entries.sort();
        // Folders are walked after the files beside them, in name order.
        let mut folders = Vec::new();
        for name in entries {
            let path = dir.join(&name);
            let inside = relative.join(&name);
            let link = std::fs::symlink_metadata(&path)
                .map_err(|error| io(&path, error))?
                .file_type()
                .is_symlink();
            let metadata = std::fs::metadata(&path).map_err(|error| io(&path, error))?;
            if metadata.is_dir() && link {
                return Err(RegistryError::refused(
                    "oci.assets_link",
                    format!(
                        "assets/{} is a link to a folder, which a layer cannot carry: copy the \
                         folder in its place",
                        inside.display()
                    ),
                ));
            }
            if metadata.is_dir() {
                builder
                    .append_dir(&inside, &path)
                    .map_err(|error| io(&path, error))?;
                folders.push(inside);
            } else {
                builder
                    .append_path_with_name(&path, &inside)
                    .map_err(|error| io(&path, error))?;
            }
        }
        folders.reverse();
        pending.extend(folders);
    }
    let encoder = builder.into_inner().map_err(|error| io(folder, error))?;
    encoder.finish().map_err(|error| io(folder, error))
}
