//! A pull from a hostile registry (`support::hostile_registry`): every answer that breaks a
//! bound or a digest ends in a refusal that names its rule, with nothing left in the work
//! folder, and the process alive.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use hako::package::{LoadError, Package};
use hako::registry::layout::{self, IMAGE_MANIFEST};
use hako::registry::{Digest, Limits, Options};

use crate::support;
use crate::support::hostile_registry::{HostileRegistry, Reply};

/// A package as a registry serves it: the manifest's bytes and every blob by digest.
struct Served {
    manifest: Vec<u8>,
    blobs: HashMap<String, Vec<u8>>,
    module_sha256: String,
}

fn served(version: &str) -> Served {
    let config = serde_json::json!({"name": "greet", "version": version, "abi": 1}).to_string();
    let module = support::greet_wasm();
    let manifest = layout::package_manifest("greet", version, config.as_bytes(), &module, None);
    let blobs = HashMap::from([
        (
            Digest::of(config.as_bytes()).to_string(),
            config.into_bytes(),
        ),
        (Digest::of(&module).to_string(), module.clone()),
    ]);
    Served {
        manifest: serde_json::to_vec(&manifest).unwrap(),
        blobs,
        module_sha256: Digest::of(&module).hex().to_string(),
    }
}

/// What an honest registry answers for `served` under the tag `v1`.
fn honest(served: &Served, path: &str) -> Reply {
    if path == "/v2/greet/manifests/v1" {
        return Reply::ok(IMAGE_MANIFEST, served.manifest.clone());
    }
    match path.strip_prefix("/v2/greet/blobs/") {
        Some(digest) => match served.blobs.get(digest) {
            Some(bytes) => Reply::ok("application/octet-stream", bytes.clone()),
            None => Reply::status(404),
        },
        None => Reply::status(404),
    }
}

/// Pulls `oci://ADDRESS/greet:v1` with `limits`, trusting the server's CA; the work folder is
/// checked to hold nothing once the pull is over.
fn pull(registry: &HostileRegistry, limits: Limits) -> Result<Package, LoadError> {
    let work = tempfile::tempdir().unwrap();
    let options = Options {
        ca_files: if registry.ca_file().exists() {
            vec![registry.ca_file()]
        } else {
            Vec::new()
        },
        limits,
        ..Options::default()
    };
    let reference = format!("oci://{}/greet:v1", registry.address());
    let pulled = hako::registry::load_blocking(&reference, &options, work.path());
    if pulled.is_err() {
        assert_empty(work.path());
    }
    pulled
}

fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert!(left.is_empty(), "a refused pull left {left:?}");
}

fn refused_rule(pulled: Result<Package, LoadError>) -> (String, String) {
    match pulled {
        Err(LoadError::Refused(refusal)) => {
            let problem = &refusal.problems[0];
            (problem.rule.to_string(), problem.message.clone())
        }
        Err(other) => panic!("not a refusal: {other:?}"),
        Ok(package) => panic!("accepted: {package:?}"),
    }
}

#[test]
fn an_honest_answer_is_pulled_and_names_its_origin() {
    let package = served("1.0.0");
    let sha = package.module_sha256.clone();
    let manifest_digest = Digest::of(&package.manifest);
    let registry = HostileRegistry::start(false, move |_, path, _| honest(&package, path));
    let pulled = pull(&registry, Limits::default()).unwrap();
    assert_eq!(pulled.module_sha256, sha);
    let origin = pulled.origin.expect("a pulled package has an origin");
    assert_eq!(origin.digest, manifest_digest);
    assert_eq!(
        origin.reference,
        format!("oci://{}/greet:v1", registry.address())
    );
}

#[test]
fn a_blob_whose_bytes_do_not_match_its_digest_is_refused() {
    let package = served("1.0.0");
    let module_path = format!("/v2/greet/blobs/sha256:{}", package.module_sha256);
    let registry = HostileRegistry::start(false, move |_, path, _| {
        if path == module_path {
            let mut bytes = package.blobs[&path["/v2/greet/blobs/".len()..]].clone();
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
            return Reply::ok("application/octet-stream", bytes);
        }
        honest(&package, path)
    });
    let (rule, message) = refused_rule(pull(&registry, Limits::default()));
    assert_eq!(rule, "oci.digest", "{message}");
}

#[test]
fn a_blob_longer_than_its_descriptor_is_cut_off_and_refused() {
    let package = served("1.0.0");
    let module_path = format!("/v2/greet/blobs/sha256:{}", package.module_sha256);
    let registry = HostileRegistry::start(false, move |_, path, _| {
        if path == module_path {
            return Reply::Endless {
                headers: vec![("content-type", "application/octet-stream".into())],
            };
        }
        honest(&package, path)
    });
    let (rule, message) = refused_rule(pull(&registry, Limits::default()));
    assert_eq!(rule, "oci.blob_size", "{message}");
}

#[test]
fn a_manifest_past_its_bound_or_without_end_is_refused_without_being_read_whole() {
    // Said to be 100 MB.
    let registry = HostileRegistry::start(false, |_, _, _| Reply::Bytes {
        status: 200,
        headers: vec![("content-type", IMAGE_MANIFEST.into())],
        body: vec![b' '; 100 * 1024 * 1024],
    });
    let (rule, message) = refused_rule(pull(&registry, Limits::default()));
    assert_eq!(rule, "oci.manifest_size", "{message}");
    // Endless, with no length said.
    let registry = HostileRegistry::start(false, |_, _, _| Reply::Endless {
        headers: vec![("content-type", IMAGE_MANIFEST.into())],
    });
    let (rule, message) = refused_rule(pull(&registry, Limits::default()));
    assert_eq!(rule, "oci.manifest_size", "{message}");
}

#[test]
fn a_registry_that_stalls_in_the_middle_of_a_body_is_refused_by_the_read_timeout() {
    let registry = HostileRegistry::start(false, |_, _, _| Reply::Stall {
        headers: vec![("content-type", IMAGE_MANIFEST.into())],
        prefix: b"{\"schemaVersion\":".to_vec(),
    });
    let limits = Limits {
        read_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let (rule, message) = refused_rule(pull(&registry, limits));
    assert_eq!(rule, "oci.timeout", "{message}");
}

#[test]
fn ten_thousand_layers_are_refused_by_count() {
    let digest = Digest::of(b"x").to_string();
    let layers: Vec<_> = (0..10_000)
        .map(|_| serde_json::json!({"mediaType": "application/wasm", "digest": digest, "size": 1}))
        .collect();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": IMAGE_MANIFEST,
        "config": {"mediaType": layout::PACKAGE_CONFIG, "digest": digest, "size": 1},
        "layers": layers,
    }))
    .unwrap();
    let registry = HostileRegistry::start(false, move |_, _, _| {
        Reply::ok(IMAGE_MANIFEST, manifest.clone())
    });
    let (rule, message) = refused_rule(pull(&registry, Limits::default()));
    assert_eq!(rule, "oci.layers", "{message}");
    assert!(message.contains("10000"), "{message}");
    // Nothing but the manifest was asked for.
    assert_eq!(registry.seen().len(), 1, "{:?}", registry.seen());
}

#[test]
fn a_redirect_from_https_to_http_is_refused_and_the_http_host_never_asked() {
    let package = served("1.0.0");
    let plain = HostileRegistry::start(false, move |_, path, _| honest(&package, path));
    let target = format!("http://{}/v2/greet/manifests/v1", plain.address());
    let secure = HostileRegistry::start(true, move |_, _, _| Reply::redirect(&target));
    let (rule, message) = refused_rule(pull(&secure, Limits::default()));
    assert_eq!(rule, "oci.redirect", "{message}");
    assert!(message.contains("from https to http"), "{message}");
    assert!(plain.seen().is_empty(), "{:?}", plain.seen());
}

#[test]
fn a_tag_moved_during_the_pull_cannot_swap_what_is_checked() {
    let first = served("1.0.0");
    let first_sha = first.module_sha256.clone();
    let mut second = served("2.0.0");
    // The second version's module differs: a custom section appended.
    let mut module = support::greet_wasm();
    module.extend_from_slice(&[0, 5, 4, b'm', b'o', b'v', b'e']);
    let config = serde_json::json!({"name": "greet", "version": "2.0.0", "abi": 1}).to_string();
    let manifest = layout::package_manifest("greet", "2.0.0", config.as_bytes(), &module, None);
    second.manifest = serde_json::to_vec(&manifest).unwrap();
    second.blobs.insert(Digest::of(&module).to_string(), module);
    second.blobs.insert(
        Digest::of(config.as_bytes()).to_string(),
        config.into_bytes(),
    );
    let registry = HostileRegistry::start(false, move |_, path, nth| {
        // The tag names the first version once, and the second ever after; both versions' blobs
        // are there to be asked for.
        if path == "/v2/greet/manifests/v1" && nth > 0 {
            return Reply::ok(IMAGE_MANIFEST, second.manifest.clone());
        }
        if let Some(digest) = path.strip_prefix("/v2/greet/blobs/") {
            if let Some(bytes) = second.blobs.get(digest) {
                return Reply::ok("application/octet-stream", bytes.clone());
            }
        }
        honest(&first, path)
    });
    let pulled = pull(&registry, Limits::default()).unwrap();
    assert_eq!(pulled.manifest.version, "1.0.0");
    assert_eq!(pulled.module_sha256, first_sha);
    let manifest_reads = registry
        .seen()
        .iter()
        .filter(|(_, path)| path.contains("/manifests/"))
        .count();
    assert_eq!(manifest_reads, 1, "{:?}", registry.seen());
}

#[test]
fn a_digest_reference_answered_with_another_manifest_is_refused() {
    let package = served("1.0.0");
    let registry = HostileRegistry::start(false, move |_, path, _| {
        if path.contains("/manifests/") {
            return Reply::ok(IMAGE_MANIFEST, package.manifest.clone());
        }
        honest(&package, path)
    });
    let work = tempfile::tempdir().unwrap();
    let reference = format!(
        "oci://{}/greet@sha256:{}",
        registry.address(),
        "1".repeat(64)
    );
    let pulled = hako::registry::load_blocking(&reference, &Options::default(), work.path());
    let (rule, message) = refused_rule(pulled);
    assert_eq!(rule, "oci.digest", "{message}");
    assert_empty(work.path());
}
