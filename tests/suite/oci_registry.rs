//! Packages through a real OCI registry (Debian's docker-registry, `support::registry`):
//! `hako push`, then `check`, `tools`, `upload`, `call` and `run` of `oci://` references, over
//! TLS with a login and over plain HTTP on loopback; a module-only artifact in the CNCF
//! TAG-Runtime layout; and refusals that name their rule.

use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};

use crate::support::{self, registry::TestRegistry};

fn tool(name: &str) -> Value {
    json!({"name": name, "description": "d", "inputSchema": {"type": "object"}})
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn succeeded(what: &str, output: &Output) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}): {}{}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Pushes the package at `dir` to `reference`; its digest.
fn push(registry: &TestRegistry, store: &Path, dir: &Path, reference: &str) -> String {
    let output = registry
        .hako(store)
        .args(["push", support::arg(dir), reference, "--json"])
        .output()
        .unwrap();
    let pushed: Value = serde_json::from_str(&succeeded("push", &output)).unwrap();
    assert_eq!(pushed["reference"], reference);
    let digest = pushed["digest"].as_str().unwrap().to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    digest
}

#[test]
fn a_package_pushed_over_tls_with_a_login_is_checked_tooled_uploaded_and_called_from_the_registry()
{
    let registry = TestRegistry::secured();
    let store = tempfile::tempdir().unwrap();
    // The fixture reads its tool list from its assets: the tools listed prove the assets layer
    // came back whole.
    let package =
        support::fixture_package("oci-fixture", Some(json!({"tools": [tool("from_assets")]})));
    let reference = registry.reference("team/oci-fixture:1.0.0");
    let digest = push(&registry, store.path(), package.path(), &reference);

    let checked = registry
        .hako(store.path())
        .args(["check", &reference])
        .output()
        .unwrap();
    assert!(
        succeeded("check", &checked).contains("oci-fixture 1.0.0: valid ABI 1 package"),
        "{}",
        text(&checked.stdout)
    );

    let tools = registry
        .hako(store.path())
        .args(["tools", &reference])
        .output()
        .unwrap();
    let listed = succeeded("tools", &tools);
    assert!(listed.contains("from_assets"), "{listed}");

    // By digest, the same package; uploaded, it serves from the store.
    let pinned = format!("oci://{}/team/oci-fixture@{digest}", registry.address());
    let uploaded = registry
        .hako(store.path())
        .args(["upload", &pinned, "--json"])
        .output()
        .unwrap();
    let uploaded: Value = serde_json::from_str(&succeeded("upload", &uploaded)).unwrap();
    assert_eq!(uploaded["name"], "oci-fixture", "{uploaded}");

    let greet = registry.reference("team/greet:v1");
    push(
        &registry,
        store.path(),
        &support::greet_package_dir(),
        &greet,
    );
    let called = registry
        .hako(store.path())
        .args(["call", &greet, "greet", r#"{"name":"registry"}"#])
        .output()
        .unwrap();
    let answer = succeeded("call", &called);
    assert!(answer.contains("registry"), "{answer}");
}

#[test]
fn the_same_package_pushed_twice_has_the_same_digest_and_a_new_push_moves_the_tag_only() {
    let registry = TestRegistry::plain();
    let store = tempfile::tempdir().unwrap();
    let first = support::fixture_package("moving", Some(json!({"tools": [tool("first")]})));
    let reference = registry.reference("moving:latest");
    let digest = push(&registry, store.path(), first.path(), &reference);
    assert_eq!(
        push(&registry, store.path(), first.path(), &reference),
        digest
    );

    let second = support::fixture_package("moving", Some(json!({"tools": [tool("second")]})));
    let moved = push(&registry, store.path(), second.path(), &reference);
    assert_ne!(moved, digest);
    let tools_of = |reference: &str| {
        let output = registry
            .hako(store.path())
            .args(["tools", reference])
            .output()
            .unwrap();
        succeeded("tools", &output)
    };
    assert!(tools_of(&reference).contains("second"));
    // The old digest still names the old package.
    let pinned = format!("oci://{}/moving@{digest}", registry.address());
    assert!(tools_of(&pinned).contains("first"));
}

#[test]
fn without_the_login_the_registry_refuses_and_the_error_says_where_logins_are_read() {
    let registry = TestRegistry::secured();
    let store = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let output = registry
        .hako(store.path())
        .env_remove("REGISTRY_AUTH_FILE")
        .env("HOME", home.path())
        .env_remove("DOCKER_CONFIG")
        .args([
            "push",
            support::arg(&support::greet_package_dir()),
            &registry.reference("greet:v1"),
        ])
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("[oci.auth]"), "{stderr}");
    assert!(stderr.contains("no credentials file was found"), "{stderr}");

    // A wrong password: refused, and neither password is printed.
    let wrong = home.path().join("config.json");
    let login = base64_login(support::registry::USER, "not-the-password");
    std::fs::write(
        &wrong,
        json!({"auths": {registry.address(): {"auth": login}}}).to_string(),
    )
    .unwrap();
    let output = registry
        .hako(store.path())
        .args([
            "check",
            &registry.reference("greet:v1"),
            "--registry-auth",
            support::arg(&wrong),
        ])
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("[oci.auth]") && stderr.contains("was refused"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("not-the-password") && !stderr.contains(&login),
        "{stderr}"
    );
    assert!(!stderr.contains(support::registry::PASSWORD), "{stderr}");
}

fn base64_login(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

#[test]
fn a_tag_that_is_not_there_is_refused_as_not_found() {
    let registry = TestRegistry::plain();
    let store = tempfile::tempdir().unwrap();
    let output = registry
        .hako(store.path())
        .args(["check", &registry.reference("nothing:here")])
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("[oci.not_found]"), "{stderr}");
}

#[test]
fn a_module_only_artifact_is_read_with_the_name_and_version_given_and_refused_without() {
    let registry = TestRegistry::plain();
    let store = tempfile::tempdir().unwrap();
    let reference = registry.reference("wasm/greet:0.1.0");
    push_module_only(&reference, &support::greet_wasm());

    let without = registry
        .hako(store.path())
        .args(["check", &reference])
        .output()
        .unwrap();
    let stderr = text(&without.stderr);
    assert_eq!(without.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("[oci.layout]") && stderr.contains("--package-name"),
        "{stderr}"
    );

    let with = registry
        .hako(store.path())
        .args([
            "check",
            &reference,
            "--package-name",
            "wkg-greet",
            "--package-version",
            "0.1.0",
        ])
        .output()
        .unwrap();
    assert!(succeeded("check", &with).contains("wkg-greet 0.1.0: valid ABI 1 package"));
}

/// Pushes `module` as `wkg` does: config `application/vnd.wasm.config.v0+json`, one
/// `application/wasm` layer.
fn push_module_only(reference: &str, module: &[u8]) {
    use hako::registry::layout::{
        Descriptor, ImageManifest, IMAGE_MANIFEST, MODULE_LAYER, WASM_CONFIG,
    };
    let config = json!({"architecture": "wasm", "os": "wasip1", "layerDigests": []}).to_string();
    let manifest = ImageManifest {
        schema_version: 2,
        media_type: Some(IMAGE_MANIFEST.to_string()),
        artifact_type: None,
        config: Descriptor::of(WASM_CONFIG, config.as_bytes()),
        layers: vec![Descriptor::of(MODULE_LAYER, module)],
        subject: None,
        annotations: Default::default(),
    };
    let reference = hako::registry::Reference::parse(reference).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = hako::registry::Options::default().registry().unwrap();
        for (descriptor, bytes) in [
            (&manifest.config, config.as_bytes().to_vec()),
            (&manifest.layers[0], module.to_vec()),
        ] {
            hako::registry::push::upload_blob(&client, &reference, descriptor, bytes.into())
                .await
                .unwrap();
        }
        let body = serde_json::to_vec(&manifest).unwrap();
        hako::registry::push::put_manifest(&client, &reference, IMAGE_MANIFEST, body.into())
            .await
            .unwrap();
    });
}

#[test]
fn a_push_to_a_digest_or_of_a_refused_package_stores_nothing() {
    let registry = TestRegistry::plain();
    let store = tempfile::tempdir().unwrap();
    let digest_reference = format!(
        "oci://{}/greet@sha256:{}",
        registry.address(),
        "0".repeat(64)
    );
    let output = registry
        .hako(store.path())
        .args([
            "push",
            support::arg(&support::greet_package_dir()),
            &digest_reference,
        ])
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("[oci.reference]"), "{stderr}");

    let broken = support::module_package("broken", b"not a module");
    let output = registry
        .hako(store.path())
        .args([
            "push",
            support::arg(broken.path()),
            &registry.reference("broken:1"),
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(!registry
        .storage()
        .join("docker/registry/v2/repositories/broken")
        .exists());
}

#[test]
fn the_store_remembers_the_reference_and_digest_and_refuses_a_tag_moved_under_a_stored_version() {
    let registry = TestRegistry::plain();
    let store = tempfile::tempdir().unwrap();
    let first = support::fixture_package("remembered", Some(json!({"tools": [tool("one")]})));
    let reference = registry.reference("remembered:stable");
    let digest = push(&registry, store.path(), first.path(), &reference);
    let upload = |reference: &str| {
        registry
            .hako(store.path())
            .args(["upload", reference, "--json"])
            .output()
            .unwrap()
    };
    succeeded("upload", &upload(&reference));

    let shown = registry
        .hako(store.path())
        .args(["tools", "remembered", "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_str(&succeeded("tools", &shown)).unwrap();
    assert_eq!(shown["origin"]["reference"], reference.as_str(), "{shown}");
    assert_eq!(shown["origin"]["digest"], digest.as_str(), "{shown}");
    assert_eq!(shown["tools"][0]["name"], "one", "{shown}");

    // The same digest again: nothing changes.
    let again: Value =
        serde_json::from_str(&succeeded("upload again", &upload(&reference))).unwrap();
    assert_eq!(again["stored"], false, "{again}");

    // The same version (and module) under a moved tag: refused, and the stored one stays.
    let second = support::fixture_package("remembered", Some(json!({"tools": [tool("two")]})));
    let moved = push(&registry, store.path(), second.path(), &reference);
    assert_ne!(moved, digest);
    let refused = upload(&reference);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("a tag moved under a stored version is refused"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&digest) && stderr.contains(&moved),
        "{stderr}"
    );
    let kept = registry
        .hako(store.path())
        .args(["tools", "remembered", "--json"])
        .output()
        .unwrap();
    let kept: Value = serde_json::from_str(&succeeded("tools", &kept)).unwrap();
    assert_eq!(kept["origin"]["digest"], digest.as_str(), "{kept}");
}

#[test]
fn the_operator_api_uploads_a_reference_and_lists_where_it_came_from() {
    use crate::serve_support::Server;
    let registry = TestRegistry::secured();
    let store = tempfile::tempdir().unwrap();
    let package = support::fixture_package("api-pulled", Some(json!({"tools": [tool("pulled")]})));
    let reference = registry.reference("api/pulled:1.0.0");
    let digest = push(&registry, store.path(), package.path(), &reference);
    let auth = registry.auth_file();
    let ca = registry.ca_file();
    let server = Server::start(
        store.path(),
        &[
            "--registry-auth",
            support::arg(&auth),
            "--registry-ca",
            support::arg(&ca),
        ],
    );

    let stored = server.post_json("/v1/packages", &json!({"reference": reference}));
    assert_eq!(stored.status, 201, "{}", stored.text());
    assert_eq!(stored.json()["name"], "api-pulled");
    let listed = server.get("/v1/packages").json();
    let entry = listed["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == "api-pulled")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(entry["origin"]["reference"], reference.as_str(), "{listed}");
    assert_eq!(entry["origin"]["digest"], digest.as_str(), "{listed}");
    // Again: unchanged.
    let again = server.post_json("/v1/packages", &json!({"reference": reference}));
    assert_eq!(again.status, 200, "{}", again.text());

    // A client's mistakes: 400 for a body that is no such object, 422 naming the rule for a
    // reference that is not one, or that the registry does not hold.
    let not_an_object = server.post_json("/v1/packages", &json!(["oci://x/y:z"]));
    assert_eq!(not_an_object.status, 400, "{}", not_an_object.text());
    let bad = server.post_json("/v1/packages", &json!({"reference": "oci://nothing"}));
    assert_eq!(bad.status, 422, "{}", bad.text());
    assert_eq!(bad.json()["problems"][0]["rule"], "oci.reference");
    let missing = server.post_json(
        "/v1/packages",
        &json!({"reference": registry.reference("api/absent:1")}),
    );
    assert_eq!(missing.status, 422, "{}", missing.text());
    assert_eq!(missing.json()["problems"][0]["rule"], "oci.not_found");
}

/// A PKCS#8 PEM private key (ECDSA P-256) and its PEM public key, in `dir`.
#[cfg(feature = "sigstore")]
fn sigstore_key(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let pair = rcgen::KeyPair::generate().unwrap();
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    std::fs::write(&private, pair.serialize_pem()).unwrap();
    std::fs::write(&public, pair.public_key_pem()).unwrap();
    (private, public)
}

/// Pushes the package at `dir` to `reference`, signed with the private key `key`; its digest.
#[cfg(feature = "sigstore")]
fn push_signed(
    registry: &TestRegistry,
    store: &Path,
    dir: &Path,
    reference: &str,
    key: &Path,
) -> String {
    let output = registry
        .hako(store)
        .args([
            "push",
            support::arg(dir),
            reference,
            "--json",
            "--sign",
            support::arg(key),
        ])
        .output()
        .unwrap();
    let pushed: Value = serde_json::from_str(&succeeded("signed push", &output)).unwrap();
    assert_eq!(pushed["signed"], true);
    pushed["digest"].as_str().unwrap().to_string()
}

#[cfg(feature = "sigstore")]
#[test]
fn a_package_signed_at_push_is_accepted_under_its_key_and_refused_unsigned_or_under_another() {
    let registry = TestRegistry::plain();
    let store = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = sigstore_key(keys.path(), "signer");
    let (_, other) = sigstore_key(keys.path(), "other");
    let signed = registry.reference("signed/greet:1");
    let digest = push_signed(
        &registry,
        store.path(),
        &support::greet_package_dir(),
        &signed,
        &private,
    );
    // A registry without the referrers API: the bundle is listed under the fallback tag.
    let fallback = registry
        .storage()
        .join("docker/registry/v2/repositories/signed/greet/_manifests/tags")
        .join(format!("sha256-{}", &digest["sha256:".len()..]));
    assert!(
        fallback.is_dir(),
        "no fallback tag at {}",
        fallback.display()
    );

    let check = |reference: &str, key: &Path| {
        registry
            .hako(store.path())
            .args(["check", reference, "--sigstore-key", support::arg(key)])
            .output()
            .unwrap()
    };
    succeeded("signed check", &check(&signed, &public));
    let uploaded = registry
        .hako(store.path())
        .args(["upload", &signed, "--sigstore-key", support::arg(&public)])
        .output()
        .unwrap();
    succeeded("signed upload", &uploaded);
    let shown = registry
        .hako(store.path())
        .args(["tools", "greet", "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_str(&succeeded("tools", &shown)).unwrap();
    let signer = &shown["origin"]["signer"];
    assert_eq!(signer["kind"], "key", "{shown}");
    assert_eq!(signer["logged"], false, "{shown}");
    assert!(
        signer["identity"].as_str().unwrap().starts_with("sha256:"),
        "{shown}"
    );

    let refused = check(&signed, &other);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("[oci.signature]"), "{stderr}");

    let unsigned = registry.reference("unsigned/greet:1");
    push(
        &registry,
        store.path(),
        &support::greet_package_dir(),
        &unsigned,
    );
    let refused = check(&unsigned, &public);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("[oci.signature]") && stderr.contains("no Sigstore bundle"),
        "{stderr}"
    );
}

#[cfg(feature = "sigstore")]
#[test]
fn a_signature_of_another_manifest_listed_for_this_one_is_refused() {
    let registry = TestRegistry::plain();
    let store = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = sigstore_key(keys.path(), "signer");
    let first = registry.reference("moved/pkg:signed");
    let signed_digest = push_signed(
        &registry,
        store.path(),
        &support::greet_package_dir(),
        &first,
        &private,
    );
    let other = support::fixture_package("greet", None);
    let second = registry.reference("moved/pkg:unsigned");
    let unsigned_digest = push(&registry, store.path(), other.path(), &second);

    // The first manifest's signature index, listed as the second's.
    let repository = registry
        .storage()
        .join("docker/registry/v2/repositories/moved/pkg/_manifests/tags");
    let signed_index = repository
        .join(format!("sha256-{}", &signed_digest["sha256:".len()..]))
        .join("current/link");
    let index_digest = std::fs::read_to_string(&signed_index).unwrap();
    let index_blob = registry.storage().join(format!(
        "docker/registry/v2/blobs/sha256/{}/{}/data",
        &index_digest["sha256:".len().."sha256:".len() + 2],
        &index_digest["sha256:".len()..]
    ));
    let index = std::fs::read(index_blob).unwrap();
    let reference = hako::registry::Reference::parse(&format!(
        "oci://{}/moved/pkg:sha256-{}",
        registry.address(),
        &unsigned_digest["sha256:".len()..]
    ))
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = hako::registry::Options::default().registry().unwrap();
        hako::registry::push::put_manifest(
            &client,
            &reference,
            hako::registry::layout::IMAGE_INDEX,
            index.into(),
        )
        .await
        .unwrap();
    });

    let refused = registry
        .hako(store.path())
        .args(["check", &second, "--sigstore-key", support::arg(&public)])
        .output()
        .unwrap();
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("[oci.signature]"), "{stderr}");
    assert!(
        stderr.contains(&format!("signs {signed_digest}, not {unsigned_digest}")),
        "{stderr}"
    );
}

/// A token service for the token-auth registry, on the hostile registry's server (TLS, the
/// test CA): every token it issues grants what its request's scope asks, to anyone, as a
/// registry of public images answers an anonymous pull. Tokens are JWTs (ES256) with the
/// signing certificate in `x5c`, which the registry checks against its bundle.
struct TokenService {
    server: crate::support::hostile_registry::HostileRegistry,
    bundle: tempfile::NamedTempFile,
}

impl TokenService {
    fn start() -> TokenService {
        use crate::support::hostile_registry::{HostileRegistry, Reply};
        use base64::Engine as _;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let bundle = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(bundle.path(), cert.pem()).unwrap();
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = url.encode(
            json!({
                "typ": "JWT",
                "alg": "ES256",
                "x5c": [base64::engine::general_purpose::STANDARD.encode(cert.der())],
            })
            .to_string(),
        );
        let rng = ring::rand::SystemRandom::new();
        let signer = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.serialize_der(),
            &rng,
        )
        .unwrap();
        let server = HostileRegistry::start(true, move |_, path, nth| {
            let query = path.split_once('?').map_or("", |(_, query)| query);
            let access: Vec<Value> = url::form_urlencoded::parse(query.as_bytes())
                .filter(|(name, _)| name == "scope")
                .filter_map(|(_, scope)| {
                    let mut parts = scope.splitn(3, ':');
                    let (kind, name, actions) = (parts.next()?, parts.next()?, parts.next()?);
                    Some(json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
                })
                .collect();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let claims = url.encode(
                json!({
                    "iss": support::registry::TOKEN_ISSUER,
                    "sub": "",
                    "aud": support::registry::TOKEN_SERVICE,
                    "exp": now + 300,
                    "nbf": now - 10,
                    "iat": now,
                    "jti": format!("token-{nth}"),
                    "access": access,
                })
                .to_string(),
            );
            let signing_input = format!("{header}.{claims}");
            let signature = signer.sign(&rng, signing_input.as_bytes()).unwrap();
            let token = format!("{signing_input}.{}", url.encode(signature.as_ref()));
            Reply::ok(
                "application/json",
                json!({"token": token, "expires_in": 300})
                    .to_string()
                    .into_bytes(),
            )
        });
        TokenService { server, bundle }
    }

    fn realm(&self) -> String {
        format!("https://{}/token", self.server.address())
    }
}

#[test]
fn an_anonymous_pull_and_push_answer_a_bearer_challenge_with_a_token_from_the_realm() {
    let tokens = TokenService::start();
    let registry = TestRegistry::token_auth(&tokens.realm(), tokens.bundle.path());
    let store = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let reference = registry.reference("public/greet:1");
    let ca = tokens.server.ca_file();
    let hako = |args: &[&str]| {
        registry
            .hako(store.path())
            .env("HOME", home.path())
            .env_remove("DOCKER_CONFIG")
            .args(args)
            .args(["--registry-ca", support::arg(&ca)])
            .output()
            .unwrap()
    };
    // The registry answers every request without a token with a challenge naming the realm.
    let pushed = hako(&[
        "push",
        support::arg(&support::greet_package_dir()),
        &reference,
    ]);
    succeeded("push with a token", &pushed);
    let checked = hako(&["check", &reference]);
    assert!(succeeded("check with a token", &checked).contains("valid ABI 1 package"));
    let asked: Vec<String> = tokens
        .server
        .seen()
        .into_iter()
        .map(|(_, path)| path)
        .collect();
    assert!(
        asked
            .iter()
            .any(|path| path.contains("scope=repository%3Apublic%2Fgreet%3Apull%2Cpush")),
        "{asked:?}"
    );
    assert!(
        asked.iter().any(
            |path| path.ends_with("scope=repository%3Apublic%2Fgreet%3Apull")
                || path.contains("scope=repository%3Apublic%2Fgreet%3Apull&")
        ),
        "{asked:?}"
    );
    assert!(
        asked
            .iter()
            .all(|path| path.contains("service=hako-test-registry")),
        "{asked:?}"
    );
}

#[test]
fn bench_and_run_take_a_reference_as_they_take_a_folder() {
    let registry = TestRegistry::plain();
    let store = tempfile::tempdir().unwrap();
    let folder = support::greet_package_dir();
    let reference = registry.reference("greet:bench");
    push(&registry, store.path(), &folder, &reference);

    let bench = registry
        .hako(store.path())
        .args(["bench", &reference, "--args", r#"{"name":"Ada"}"#])
        .args([
            "--iterations",
            "2",
            "--engines",
            "wasmer-cranelift",
            "--json",
        ])
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(&succeeded("bench", &bench)).unwrap();
    assert_eq!(report["run"]["package"], "greet", "{report}");
    assert_eq!(report["results"][0]["failure"], Value::Null, "{report}");

    // `hako run` of the pulled package behaves as of the folder: its module, its stdio.
    let run = |target: &str| {
        registry
            .hako(store.path())
            .args(["run", "--store", support::arg(store.path()), target])
            .output()
            .unwrap()
    };
    let (pulled, local) = (run(&reference), run(support::arg(&folder)));
    assert_eq!(
        pulled.status.code(),
        local.status.code(),
        "{}",
        text(&pulled.stderr)
    );
    assert_eq!(pulled.stdout, local.stdout);
}
