//! The offline verification cases of the Sigstore client conformance suite, through the
//! verifier `--require-signed` uses ([`hako::registry::signature::Trust`]): every happy case
//! accepted, every `_fail` case refused.
//!
//! The suite is not part of this repository: it is read from `HAKO_SIGSTORE_CONFORMANCE`,
//! else `../shared/sigstore-conformance` beside the checkout, and the test fails when it is in
//! neither. A case is read as the suite's README says: its own `trusted_root.json`, else the
//! public-good root of the suite; `key.pub` verified as a key, else the certificate identity
//! and issuer of `identity` and `issuer` (or the suite's defaults); its `artifact`, else
//! `../a.txt`.

use std::path::{Path, PathBuf};

use hako::registry::signature::{Signer, Trust};

const DEFAULT_IDENTITY: &str = "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
const DEFAULT_ISSUER: &str = "https://token.actions.githubusercontent.com";

fn suite_root() -> PathBuf {
    std::env::var_os("HAKO_SIGSTORE_CONFORMANCE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/sigstore-conformance"),
        PathBuf::from,
    )
}

fn read_line(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|text| text.trim().to_string())
}

/// Verifies one case folder as `--require-signed` would.
fn verify(suite: &Path, case: &Path) -> Result<Signer, String> {
    let root = case.join("trusted_root.json");
    let root = if root.exists() {
        root
    } else {
        suite.join("trusted-roots/production.json")
    };
    let trust = if case.join("key.pub").exists() {
        Trust::key(&case.join("key.pub"), Some(&root))
    } else {
        let identity = read_line(&case.join("identity")).unwrap_or_else(|| DEFAULT_IDENTITY.into());
        let issuer = read_line(&case.join("issuer")).unwrap_or_else(|| DEFAULT_ISSUER.into());
        Trust::identity(&identity, &issuer, Some(&root))
    }
    .map_err(|error| error.to_string())?;
    let artifact = match std::fs::read(case.join("artifact")) {
        Ok(bytes) => bytes,
        Err(_) => std::fs::read(case.parent().unwrap().join("a.txt")).map_err(|e| e.to_string())?,
    };
    let bundle = std::fs::read(case.join("bundle.sigstore.json")).map_err(|e| e.to_string())?;
    trust.verify(&artifact, &bundle)
}

#[test]
fn every_happy_case_is_accepted_and_every_fail_case_refused() {
    let suite = suite_root();
    let cases_dir = suite.join("test/assets/bundle-verify");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&cases_dir)
        .unwrap_or_else(|error| {
            panic!(
                "the Sigstore conformance cases are not at {} ({error}); set \
                 HAKO_SIGSTORE_CONFORMANCE to where they are",
                cases_dir.display()
            )
        })
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("bundle.sigstore.json").exists())
        .collect();
    cases.sort();
    let mut wrong = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let must_fail = name.ends_with("_fail");
        match (must_fail, verify(&suite, case)) {
            (false, Ok(_)) => accepted += 1,
            (true, Err(_)) => refused += 1,
            (false, Err(reason)) => wrong.push(format!("{name}: refused: {reason}")),
            (true, Ok(signer)) => wrong.push(format!("{name}: accepted: {signer:?}")),
        }
    }
    println!(
        "sigstore conformance: {} cases, {accepted} accepted, {refused} refused as expected",
        cases.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {} cases went wrong:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    assert!(
        cases.len() >= 70,
        "only {} cases found in {}",
        cases.len(),
        cases_dir.display()
    );
}

#[test]
fn a_keyless_signer_is_named_by_its_identity_and_issuer() {
    let suite = suite_root();
    let case = suite.join("test/assets/bundle-verify/happy-path-v0.3");
    let signer = verify(&suite, &case).unwrap();
    assert_eq!(signer.kind, "keyless");
    assert_eq!(signer.identity, DEFAULT_IDENTITY);
    assert_eq!(signer.issuer.as_deref(), Some(DEFAULT_ISSUER));
    assert!(signer.logged);
}

#[test]
fn a_right_signature_under_another_identity_is_refused() {
    let suite = suite_root();
    let case = suite.join("test/assets/bundle-verify/happy-path-v0.3");
    let trust = Trust::identity(
        "https://github.com/someone-else/repo/.github/workflows/release.yml@refs/heads/main",
        DEFAULT_ISSUER,
        Some(&suite.join("trusted-roots/production.json")),
    )
    .unwrap();
    let artifact = std::fs::read(suite.join("test/assets/bundle-verify/a.txt")).unwrap();
    let bundle = std::fs::read(case.join("bundle.sigstore.json")).unwrap();
    assert!(trust.verify(&artifact, &bundle).is_err());
    let other_issuer = Trust::identity(
        DEFAULT_IDENTITY,
        "https://accounts.google.com",
        Some(&suite.join("trusted-roots/production.json")),
    )
    .unwrap();
    assert!(other_issuer.verify(&artifact, &bundle).is_err());
}
