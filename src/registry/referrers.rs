//! Signatures beside a manifest, as OCI 1.1 referrers: an image manifest whose `subject` is the
//! signed manifest, `artifactType` a Sigstore bundle, and one layer the bundle's JSON (as
//! cosign v3 attaches them). They are found through the referrers API
//! (`GET /v2/<name>/referrers/<digest>`), or, on a registry without it (404, as distribution
//! 2.8), through the fallback tag `sha256-<hex>`, an image index listing them.
//!
//! Every read is bounded: the index by the manifest bound, at most [`MAX_REFERRERS`] bundles,
//! each referrer manifest checked against its digest, each bundle at most
//! [`super::signature::MAX_BUNDLE_BYTES`] and checked against its digest. A referrer whose
//! `subject` is another manifest is not this one's signature, and says so.
//!
//! [`attach`] writes one (what `hako push --sign` does), updating the fallback tag when the
//! registry has no referrers API.

use bytes::Bytes;
use http::{header, Method, StatusCode};

use super::client::{Access, Registry};
use super::layout::{Descriptor, ImageManifest, IMAGE_INDEX, IMAGE_MANIFEST};
use super::push::{put_manifest, upload_blob};
use super::reference::{Digest, Reference};
use super::signature::MAX_BUNDLE_BYTES;
use super::RegistryError;

/// The artifact type of a Sigstore bundle (v0.3), as cosign v3 attaches it.
pub const BUNDLE_ARTIFACT: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The same, as older cosign releases wrote it.
const BUNDLE_ARTIFACT_OLD: &str = "application/vnd.dev.sigstore.bundle+json;version=0.3";
/// The empty config of an artifact manifest.
const EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";
/// The most bundles read for one manifest.
pub const MAX_REFERRERS: usize = 16;

/// A bundle found for a manifest, or why a referrer was not one.
pub enum Found {
    Bundle(Vec<u8>),
    NotOurs(String),
}

#[derive(serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

fn is_bundle(artifact_type: Option<&str>) -> bool {
    matches!(artifact_type, Some(BUNDLE_ARTIFACT | BUNDLE_ARTIFACT_OLD))
}

/// The fallback tag of `digest`.
fn fallback_tag(digest: &Digest) -> String {
    format!("sha256-{}", digest.hex())
}

/// Where a manifest's referrers are listed.
enum Listed {
    /// By the registry's referrers API, which lists new ones itself.
    Api(Index),
    /// Under the fallback tag.
    Tag(Index),
    /// Nowhere yet.
    None,
}

/// The bundles that refer to `digest` in `reference`'s repository (up to [`MAX_REFERRERS`]).
pub async fn bundles(
    registry: &Registry,
    reference: &Reference,
    digest: &Digest,
) -> Result<Vec<Found>, RegistryError> {
    let index = match index(registry, reference, digest).await? {
        Listed::Api(index) | Listed::Tag(index) => index,
        Listed::None => return Ok(Vec::new()),
    };
    let mut found = Vec::new();
    for descriptor in index
        .manifests
        .iter()
        .filter(|descriptor| is_bundle(descriptor.artifact_type.as_deref()))
        .take(MAX_REFERRERS)
    {
        found.push(bundle(registry, reference, digest, descriptor).await?);
    }
    Ok(found)
}

/// The referrers index of `digest`: the API's, else the fallback tag's, else none.
async fn index(
    registry: &Registry,
    reference: &Reference,
    digest: &Digest,
) -> Result<Listed, RegistryError> {
    let accept = [(header::ACCEPT, IMAGE_INDEX.to_string())];
    let api = registry
        .send(
            reference,
            Access::Pull,
            Method::GET,
            &format!("referrers/{digest}"),
            &accept,
            Bytes::new(),
        )
        .await?;
    let from_api = api.response.status().is_success();
    let answer = if from_api {
        api
    } else {
        let tag = registry
            .send(
                reference,
                Access::Pull,
                Method::GET,
                &format!("manifests/{}", fallback_tag(digest)),
                &accept,
                Bytes::new(),
            )
            .await?;
        if tag.response.status() == StatusCode::NOT_FOUND {
            return Ok(Listed::None);
        }
        if !tag.response.status().is_success() {
            return Err(registry
                .unexpected(tag, reference, "reading the signatures' index")
                .await);
        }
        tag
    };
    let limit = registry.limits.max_manifest_bytes;
    let bytes = registry
        .read_bounded(answer.response, limit, "oci.signature", reference)
        .await?;
    let index = serde_json::from_slice(&bytes).map_err(|error| {
        RegistryError::refused(
            "oci.signature",
            format!("{reference}: the signatures' index is not an OCI image index: {error}"),
        )
    })?;
    Ok(if from_api {
        Listed::Api(index)
    } else {
        Listed::Tag(index)
    })
}

/// The bundle a referrer manifest carries, checked to be about `digest`.
async fn bundle(
    registry: &Registry,
    reference: &Reference,
    digest: &Digest,
    descriptor: &Descriptor,
) -> Result<Found, RegistryError> {
    let referrer = Digest::parse(&descriptor.digest)
        .map_err(|reason| RegistryError::refused("oci.signature", reason))?;
    let bytes = registry
        .get_by_digest(
            reference,
            "manifests",
            &referrer,
            registry.limits.max_manifest_bytes,
            "oci.signature",
            "the signature manifest",
        )
        .await?;
    let manifest: ImageManifest = serde_json::from_slice(&bytes).map_err(|error| {
        RegistryError::refused(
            "oci.signature",
            format!(
                "{reference}: the signature manifest {referrer} is not an image manifest: {error}"
            ),
        )
    })?;
    match &manifest.subject {
        Some(subject) if subject.digest == digest.as_str() => {}
        Some(subject) => {
            // A digest as such, anything else as a stranger's text.
            let signed = Digest::parse(&subject.digest).map_or_else(
                |_| format!("{:?}", crate::clip(&subject.digest, 80)),
                |digest| digest.to_string(),
            );
            return Ok(Found::NotOurs(format!(
                "the bundle in {referrer} signs {signed}, not {digest}"
            )));
        }
        None => {
            return Ok(Found::NotOurs(format!(
                "the bundle in {referrer} names no subject"
            )))
        }
    }
    let Some(layer) = manifest
        .layers
        .iter()
        .find(|layer| is_bundle(Some(layer.media_type.as_str())) || manifest.layers.len() == 1)
    else {
        return Ok(Found::NotOurs(format!("{referrer} holds no bundle layer")));
    };
    if layer.size > MAX_BUNDLE_BYTES {
        return Err(RegistryError::refused(
            "oci.signature",
            format!(
                "{reference}: the bundle in {referrer} is {} bytes; at most {MAX_BUNDLE_BYTES} are read",
                layer.size
            ),
        ));
    }
    let layer_digest = Digest::parse(&layer.digest)
        .map_err(|reason| RegistryError::refused("oci.signature", reason))?;
    let bytes = registry
        .get_by_digest(
            reference,
            "blobs",
            &layer_digest,
            layer.size,
            "oci.blob_size",
            "the bundle",
        )
        .await?;
    Ok(Found::Bundle(bytes.to_vec()))
}

/// Attaches `bundle` to the manifest `subject` (its digest and size) as a referrer, and lists
/// it under the fallback tag when the registry has no referrers API.
pub async fn attach(
    registry: &Registry,
    reference: &Reference,
    subject: &Descriptor,
    bundle: &[u8],
) -> Result<Digest, RegistryError> {
    let empty = b"{}";
    let config = Descriptor::of(EMPTY_CONFIG, empty);
    let layer = Descriptor::of(BUNDLE_ARTIFACT, bundle);
    upload_blob(registry, reference, &config, Bytes::from_static(empty)).await?;
    upload_blob(registry, reference, &layer, Bytes::copy_from_slice(bundle)).await?;
    let manifest = ImageManifest {
        schema_version: 2,
        media_type: Some(IMAGE_MANIFEST.to_string()),
        artifact_type: Some(BUNDLE_ARTIFACT.to_string()),
        config,
        layers: vec![layer],
        subject: Some(subject.clone()),
        annotations: Default::default(),
    };
    let body = Bytes::from(serde_json::to_vec(&manifest).expect("a manifest serialises"));
    let entry = Descriptor {
        artifact_type: Some(BUNDLE_ARTIFACT.to_string()),
        ..Descriptor::of(IMAGE_MANIFEST, &body)
    };
    let at_digest = reference.at(Digest::of(&body));
    let digest = put_manifest(registry, &at_digest, IMAGE_MANIFEST, body).await?;
    let subject_digest = Digest::parse(&subject.digest)
        .map_err(|reason| RegistryError::refused("oci.reference", reason))?;
    let mut index = match index(registry, reference, &subject_digest).await? {
        // A registry with the referrers API lists the new referrer itself.
        Listed::Api(_) => return Ok(digest),
        Listed::Tag(index) => index,
        Listed::None => Index {
            schema_version: 2,
            media_type: None,
            manifests: Vec::new(),
        },
    };
    index.media_type = Some(IMAGE_INDEX.to_string());
    if !index.manifests.iter().any(|m| m.digest == entry.digest) {
        index.manifests.push(entry);
    }
    let body = Bytes::from(serde_json::to_vec(&index).expect("an index serialises"));
    let at_tag = Reference {
        tag: Some(fallback_tag(&subject_digest)),
        digest: None,
        ..reference.clone()
    };
    put_manifest(registry, &at_tag, IMAGE_INDEX, body).await?;
    Ok(digest)
}
