//! How a package sits in an OCI image manifest, and which manifests hako reads.
//!
//! hako's own layout (what `hako push` writes):
//!
//! | part | media type |
//! | --- | --- |
//! | the manifest | `application/vnd.oci.image.manifest.v1+json`, `artifactType` [`PACKAGE_ARTIFACT`] |
//! | its config: the package's `subako-package.json`, as is | [`PACKAGE_CONFIG`] |
//! | a layer: `module.wasm` | `application/wasm` |
//! | an optional layer: the `assets/` folder as tar+gzip, paths relative to it | [`ASSETS_LAYER`] |
//!
//! Also read: a module-only artifact in the CNCF TAG-Runtime layout (config
//! `application/vnd.wasm.config.v0+json`, one `application/wasm` layer, as `wkg` pushes it),
//! whose name and version the caller gives (the layout has none hako could trust as either).
//!
//! Anything else is refused naming its type: an image index, a docker manifest, a container
//! image, a layer of a type neither layout has, a second module. A manifest lists at most
//! [`Limits::max_layers`](super::client::Limits) layers, and each descriptor's size is bounded
//! before a byte of it is read: the config by the manifest file's bound, the module by the
//! module's, the assets by the pull's.
//!
//! This module parses and writes JSON only; it sends nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::reference::Digest;
use super::RegistryError;
use crate::package::{manifest::MAX_MANIFEST_BYTES, MAX_MODULE_BYTES};

/// An OCI image manifest.
pub const IMAGE_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index (what a multi-platform image and the referrers fallback tag are).
pub const IMAGE_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker's manifest types, asked for only so that a refusal can name them.
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Every manifest type a pull accepts in its answer (and then refuses all but the first).
pub const ACCEPTED: &[&str] = &[IMAGE_MANIFEST, IMAGE_INDEX, DOCKER_MANIFEST, DOCKER_LIST];

/// The `artifactType` of a hako package.
pub const PACKAGE_ARTIFACT: &str = "application/vnd.subako.package.v1";
/// The config of a hako package: its `subako-package.json`.
pub const PACKAGE_CONFIG: &str = "application/vnd.subako.package.config.v1+json";
/// A WebAssembly module layer (both layouts).
pub const MODULE_LAYER: &str = "application/wasm";
/// A hako package's assets folder, tar+gzip.
pub const ASSETS_LAYER: &str = "application/vnd.subako.package.assets.v1.tar+gzip";
/// The config of a module-only artifact (CNCF TAG-Runtime's Wasm OCI layout).
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The annotation that names a layer's file.
const TITLE: &str = "org.opencontainers.image.title";

/// An OCI descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The descriptor of `bytes` as a blob of `media_type`.
    pub fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_string(),
            digest: Digest::of(bytes).to_string(),
            size: bytes.len() as u64,
            artifact_type: None,
            annotations: BTreeMap::new(),
        }
    }

    fn titled(mut self, title: &str) -> Descriptor {
        self.annotations
            .insert(TITLE.to_string(), title.to_string());
        self
    }
}

/// An OCI image manifest, the fields hako reads and writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageManifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A blob a pull reads: where it goes, its digest and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub digest: Digest,
    pub size: u64,
}

/// What a manifest holds, in a layout hako reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// hako's own: the package's manifest file as config, a module, perhaps assets.
    Package {
        config: Blob,
        module: Blob,
        assets: Option<Blob>,
    },
    /// A module alone (CNCF TAG-Runtime layout).
    ModuleOnly { module: Blob },
}

/// Reads a manifest's bytes: a manifest of an accepted type, in a layout hako reads, within
/// `max_layers` and the size bounds. `content_type` is the response's, used when the manifest
/// names no `mediaType` of its own.
pub fn read(
    bytes: &[u8],
    content_type: Option<&str>,
    max_layers: usize,
    max_assets_bytes: u64,
) -> Result<Layout, RegistryError> {
    let refused = |rule, message: String| RegistryError::refused(rule, message);
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|error| refused("oci.manifest", format!("the manifest is not JSON: {error}")))?;
    let media_type = value
        .get("mediaType")
        .and_then(|t| t.as_str())
        .map(str::to_string)
        .or_else(|| {
            content_type.map(|t| t.split(';').next().unwrap_or_default().trim().to_string())
        })
        .unwrap_or_default();
    if media_type != IMAGE_MANIFEST {
        let shown = if media_type.is_empty() {
            "one that names no media type".to_string()
        } else {
            format!("{:?}", crate::clip(&media_type, 100))
        };
        return Err(refused(
            "oci.manifest_type",
            format!(
                "the manifest is {shown}; hako reads an OCI image manifest ({IMAGE_MANIFEST}) \
                 of a package or of a Wasm module"
            ),
        ));
    }
    // The layer count before the manifest is read into descriptors.
    if let Some(layers) = value.get("layers").and_then(|l| l.as_array()) {
        if layers.len() > max_layers {
            return Err(refused(
                "oci.layers",
                format!(
                    "the manifest lists {} layers; at most {max_layers} are read",
                    layers.len()
                ),
            ));
        }
    }
    let manifest: ImageManifest = serde_json::from_value(value).map_err(|error| {
        refused(
            "oci.manifest",
            format!("the manifest is not an OCI image manifest: {error}"),
        )
    })?;
    if manifest.schema_version != 2 {
        return Err(refused(
            "oci.manifest",
            format!(
                "the manifest's schemaVersion is {}, not 2",
                manifest.schema_version
            ),
        ));
    }
    let config_type = manifest.config.media_type.as_str();
    match config_type {
        PACKAGE_CONFIG => {
            let config = blob(&manifest.config, "the config", MAX_MANIFEST_BYTES)?;
            let mut module = None;
            let mut assets = None;
            for layer in &manifest.layers {
                match layer.media_type.as_str() {
                    MODULE_LAYER if module.is_none() => {
                        module = Some(blob(layer, "the module layer", MAX_MODULE_BYTES)?)
                    }
                    ASSETS_LAYER if assets.is_none() => {
                        assets = Some(blob(layer, "the assets layer", max_assets_bytes)?)
                    }
                    MODULE_LAYER | ASSETS_LAYER => {
                        return Err(refused(
                            "oci.layers",
                            format!(
                                "the package lists two {:?} layers; it has one",
                                layer.media_type
                            ),
                        ))
                    }
                    other => return Err(unexpected_layer(other)),
                }
            }
            let module = module.ok_or_else(|| {
                refused(
                    "oci.layers",
                    format!("the package has no `{MODULE_LAYER}` layer"),
                )
            })?;
            Ok(Layout::Package {
                config,
                module,
                assets,
            })
        }
        WASM_CONFIG => match manifest.layers.as_slice() {
            [layer] if layer.media_type == MODULE_LAYER => Ok(Layout::ModuleOnly {
                module: blob(layer, "the module layer", MAX_MODULE_BYTES)?,
            }),
            [layer] => Err(unexpected_layer(&layer.media_type)),
            layers => Err(refused(
                "oci.layers",
                format!(
                    "a Wasm module artifact has one `{MODULE_LAYER}` layer; this one lists {}",
                    layers.len()
                ),
            )),
        },
        other => Err(refused(
            "oci.manifest_type",
            format!(
                "the image's config is {:?}: not a hako package ({PACKAGE_CONFIG}) or a Wasm \
                 module ({WASM_CONFIG})",
                crate::clip(other, 100)
            ),
        )),
    }
}

fn unexpected_layer(media_type: &str) -> RegistryError {
    RegistryError::refused(
        "oci.layers",
        format!(
            "a layer is {:?}; a package has `{MODULE_LAYER}` and `{ASSETS_LAYER}` layers only",
            crate::clip(media_type, 100)
        ),
    )
}

/// A descriptor's digest and size, the size within `limit`.
fn blob(descriptor: &Descriptor, what: &str, limit: u64) -> Result<Blob, RegistryError> {
    let digest = Digest::parse(&descriptor.digest)
        .map_err(|reason| RegistryError::refused("oci.manifest", format!("{what}: {reason}")))?;
    if descriptor.size > limit {
        return Err(RegistryError::refused(
            "oci.blob_size",
            format!(
                "{what} is {} bytes; at most {limit} are read",
                descriptor.size
            ),
        ));
    }
    Ok(Blob {
        digest,
        size: descriptor.size,
    })
}

/// The manifest `hako push` writes for a package: `config` is its manifest file's bytes.
pub fn package_manifest(
    name: &str,
    version: &str,
    config: &[u8],
    module: &[u8],
    assets: Option<&[u8]>,
) -> ImageManifest {
    let mut layers = vec![Descriptor::of(MODULE_LAYER, module).titled("module.wasm")];
    if let Some(assets) = assets {
        layers.push(Descriptor::of(ASSETS_LAYER, assets).titled("assets.tar.gz"));
    }
    let annotations = BTreeMap::from([
        (
            "org.opencontainers.image.title".to_string(),
            name.to_string(),
        ),
        (
            "org.opencontainers.image.version".to_string(),
            version.to_string(),
        ),
    ]);
    ImageManifest {
        schema_version: 2,
        media_type: Some(IMAGE_MANIFEST.to_string()),
        artifact_type: Some(PACKAGE_ARTIFACT.to_string()),
        config: Descriptor::of(PACKAGE_CONFIG, config),
        layers,
        subject: None,
        annotations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest_json(config_type: &str, layers: &[(&str, u64)]) -> Vec<u8> {
        let digest = Digest::of(b"x").to_string();
        let layers: Vec<_> = layers
            .iter()
            .map(|(media_type, size)| {
                serde_json::json!({"mediaType": media_type, "digest": digest, "size": size})
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": IMAGE_MANIFEST,
            "config": {"mediaType": config_type, "digest": digest, "size": 10},
            "layers": layers,
        }))
        .unwrap()
    }

    fn rule(result: Result<Layout, RegistryError>) -> (&'static str, String) {
        match result {
            Err(RegistryError::Refused { mut problems }) => {
                let problem = problems.remove(0);
                (problem.rule, problem.message)
            }
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn what_push_writes_is_read_back_as_a_package() {
        let manifest = package_manifest("greet", "1.0.0", b"{}", b"\0asm", Some(b"tar"));
        let bytes = serde_json::to_vec(&manifest).unwrap();
        let layout = read(&bytes, None, 16, 1 << 20).unwrap();
        assert_eq!(
            layout,
            Layout::Package {
                config: Blob {
                    digest: Digest::of(b"{}"),
                    size: 2
                },
                module: Blob {
                    digest: Digest::of(b"\0asm"),
                    size: 4
                },
                assets: Some(Blob {
                    digest: Digest::of(b"tar"),
                    size: 3
                }),
            }
        );
    }

    #[test]
    fn a_module_only_artifact_is_read() {
        let bytes = manifest_json(WASM_CONFIG, &[(MODULE_LAYER, 4)]);
        assert!(matches!(
            read(&bytes, None, 16, 0).unwrap(),
            Layout::ModuleOnly { .. }
        ));
        let two = manifest_json(WASM_CONFIG, &[(MODULE_LAYER, 4), (MODULE_LAYER, 4)]);
        assert_eq!(rule(read(&two, None, 16, 0)).0, "oci.layers");
    }

    #[test]
    fn manifests_of_other_types_are_refused_naming_the_type() {
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": IMAGE_INDEX, "manifests": []
        }))
        .unwrap();
        let (name, message) = rule(read(&index, None, 16, 0));
        assert_eq!(name, "oci.manifest_type");
        assert!(message.contains(IMAGE_INDEX), "{message}");
        // No mediaType field: the response's content type decides.
        let docker = br#"{"schemaVersion": 2, "config": {}, "layers": []}"#;
        let (name, message) = rule(read(docker, Some(DOCKER_MANIFEST), 16, 0));
        assert_eq!(name, "oci.manifest_type");
        assert!(message.contains(DOCKER_MANIFEST), "{message}");
        let image = manifest_json(
            "application/vnd.oci.image.config.v1+json",
            &[("application/vnd.oci.image.layer.v1.tar+gzip", 4)],
        );
        let (name, message) = rule(read(&image, None, 16, 0));
        assert_eq!(name, "oci.manifest_type");
        assert!(
            message.contains("application/vnd.oci.image.config.v1+json"),
            "{message}"
        );
    }

    #[test]
    fn layers_past_the_bound_or_of_other_types_are_refused() {
        let many: Vec<_> = (0..10_000).map(|_| (MODULE_LAYER, 4)).collect();
        let bytes = manifest_json(PACKAGE_CONFIG, &many);
        let (name, message) = rule(read(&bytes, None, 16, 0));
        assert_eq!(name, "oci.layers");
        assert!(message.contains("10000 layers"), "{message}");
        let odd = manifest_json(PACKAGE_CONFIG, &[(MODULE_LAYER, 4), ("text/plain", 1)]);
        assert!(rule(read(&odd, None, 16, 0)).1.contains("text/plain"));
        let none = manifest_json(PACKAGE_CONFIG, &[]);
        assert_eq!(rule(read(&none, None, 16, 0)).0, "oci.layers");
    }

    #[test]
    fn a_descriptor_past_its_bound_is_refused_before_it_is_read() {
        let big = manifest_json(PACKAGE_CONFIG, &[(MODULE_LAYER, MAX_MODULE_BYTES + 1)]);
        assert_eq!(rule(read(&big, None, 16, 0)).0, "oci.blob_size");
        let assets = manifest_json(PACKAGE_CONFIG, &[(MODULE_LAYER, 4), (ASSETS_LAYER, 101)]);
        assert_eq!(rule(read(&assets, None, 16, 100)).0, "oci.blob_size");
    }
}
