//! The Sigstore verifier and signer behind [`super::Trust`] and [`super::SigningKey`].

use std::path::{Path, PathBuf};

use sigstore_verify::bundle::{BundleV03, VerificationMaterialV03};
use sigstore_verify::crypto::{KeyPair, VerificationKey};
use sigstore_verify::trust_root::{TrustedRoot, SIGSTORE_PRODUCTION_TRUSTED_ROOT};
use sigstore_verify::types::bundle::{MessageDigest, MessageSignature};
use sigstore_verify::types::{Bundle, DerPublicKey, HashAlgorithm, SignatureContent};
use sigstore_verify::{PublicKeyVerificationPolicy, VerificationPolicy, Verifier};

use super::{Signer, TrustError};

/// The largest key or trusted-root file read, in bytes.
const MAX_TRUST_FILE_BYTES: u64 = 1024 * 1024;

/// What a signature must be verified against.
pub struct Trust {
    verifier: Verifier,
    kind: Kind,
}

enum Kind {
    Key {
        key: DerPublicKey,
        fingerprint: String,
    },
    Identity {
        identity: String,
        issuer: String,
    },
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Key { fingerprint, .. } => write!(f, "Trust::Key({fingerprint})"),
            Kind::Identity { identity, issuer } => {
                write!(f, "Trust::Identity({identity}, {issuer})")
            }
        }
    }
}

impl Trust {
    /// Signatures by the PEM public key at `path`; log entries checked against `root` (the
    /// public-good instance's when `None`).
    pub fn key(path: &Path, root: Option<&Path>) -> Result<Trust, TrustError> {
        let pem = read_text(path)?;
        let key = DerPublicKey::from_pem(&pem).map_err(|error| TrustError::Format {
            path: path.to_path_buf(),
            what: "a PEM public key",
            reason: error.to_string(),
        })?;
        let fingerprint = crate::registry::Digest::of(key.as_bytes()).to_string();
        Ok(Trust {
            verifier: verifier(root)?,
            kind: Kind::Key { key, fingerprint },
        })
    }

    /// Keyless signatures by `identity` (the certificate's SAN, exact), from `issuer`, under
    /// `root` (the public-good instance's when `None`).
    pub fn identity(
        identity: &str,
        issuer: &str,
        root: Option<&Path>,
    ) -> Result<Trust, TrustError> {
        Ok(Trust {
            verifier: verifier(root)?,
            kind: Kind::Identity {
                identity: identity.to_string(),
                issuer: issuer.to_string(),
            },
        })
    }

    /// Verifies the bundle `bundle` (its JSON) over `artifact`; the reason when it does not
    /// hold.
    pub fn verify(&self, artifact: &[u8], bundle: &[u8]) -> Result<Signer, String> {
        let text =
            std::str::from_utf8(bundle).map_err(|_| "the bundle is not UTF-8".to_string())?;
        let bundle = Bundle::from_json(text)
            .map_err(|error| format!("the bundle is not a Sigstore bundle: {error}"))?;
        match &self.kind {
            Kind::Key { key, fingerprint } => {
                let material = &bundle.verification_material;
                let logged = !material.tlog_entries.is_empty();
                let stamped = !material
                    .timestamp_verification_data
                    .rfc3161_timestamps
                    .is_empty();
                if logged || stamped {
                    let mut policy = PublicKeyVerificationPolicy::new(key.clone());
                    if !logged {
                        policy = policy.skip_tlog_unsafe();
                    }
                    self.verifier
                        .verify(artifact, &bundle, &policy)
                        .map_err(|error| error.to_string())?;
                } else {
                    verify_offline(key, artifact, &bundle)?;
                }
                Ok(Signer {
                    kind: "key".to_string(),
                    identity: fingerprint.clone(),
                    issuer: None,
                    logged,
                })
            }
            Kind::Identity { identity, issuer } => {
                let policy = VerificationPolicy::new(identity.as_str(), issuer.as_str());
                let verified = self
                    .verifier
                    .verify(artifact, &bundle, &policy)
                    .map_err(|error| error.to_string())?;
                Ok(Signer {
                    kind: "keyless".to_string(),
                    identity: verified
                        .identity()
                        .map_or_else(|| identity.clone(), |san| san.as_str().to_string()),
                    issuer: Some(verified.issuer().unwrap_or(issuer).to_string()),
                    logged: verified.tlog_verified(),
                })
            }
        }
    }

    /// What this trust accepts, for a refusal's message.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Key { fingerprint, .. } => format!("a signature by the key {fingerprint}"),
            Kind::Identity { identity, issuer } => {
                format!("a keyless signature by {identity} from {issuer}")
            }
        }
    }
}

/// A keyed bundle with neither a log entry nor a timestamp (what `hako push --sign` makes):
/// `sigstore-verify` asks every bundle for evidence of its signing time, which such a bundle
/// cannot have, so its one claim is checked with sigstore's own primitives: the message
/// digest is the artifact's, and the signature over the artifact holds under the key.
fn verify_offline(key: &DerPublicKey, artifact: &[u8], bundle: &Bundle) -> Result<(), String> {
    let SignatureContent::MessageSignature(message) = &bundle.content else {
        return Err("a keyed bundle without a log entry must sign the manifest itself".to_string());
    };
    if let Some(digest) = &message.message_digest {
        let actual = sigstore_verify::crypto::sha256(artifact);
        if digest.algorithm != HashAlgorithm::Sha2256
            || digest.digest.as_bytes() != actual.as_bytes()
        {
            return Err("the bundle's message digest is not the manifest's".to_string());
        }
    }
    VerificationKey::from_spki(key)
        .and_then(|key| key.verify(artifact, &message.signature))
        .map_err(|error| format!("the signature does not hold under the key: {error}"))
}

/// A key that signs pushes (`hako push --sign KEY`): an unencrypted PKCS#8 PEM private key,
/// ECDSA P-256 or ed25519.
pub struct SigningKey {
    pair: KeyPair,
    hint: String,
}

impl SigningKey {
    pub fn read(path: &Path) -> Result<SigningKey, TrustError> {
        use rustls_pki_types::pem::PemObject;
        let format = |reason: String| TrustError::Format {
            path: path.to_path_buf(),
            what: "an unencrypted PKCS#8 PEM private key (BEGIN PRIVATE KEY)",
            reason,
        };
        let pem = read_text(path)?;
        let der = rustls_pki_types::PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|error| format(error.to_string()))?;
        let pair = KeyPair::from_pkcs8_der(der.secret_pkcs8_der())
            .map_err(|error| format(error.to_string()))?;
        let public = pair
            .public_key_der()
            .map_err(|error| format(error.to_string()))?;
        use base64::Engine as _;
        let hint = base64::engine::general_purpose::STANDARD
            .encode(sigstore_verify::crypto::sha256(public.as_bytes()).as_bytes());
        Ok(SigningKey { pair, hint })
    }

    /// A Sigstore bundle (v0.3) signing `artifact` with this key, with no log entry.
    pub fn bundle(&self, artifact: &[u8]) -> Result<Vec<u8>, String> {
        let signature = self
            .pair
            .sign(artifact)
            .map_err(|error| error.to_string())?;
        let digest = sigstore_verify::crypto::sha256(artifact);
        let message = MessageSignature::new(signature)
            .with_message_digest(MessageDigest::new(HashAlgorithm::Sha2256, digest.into()));
        let bundle = BundleV03::new(
            VerificationMaterialV03::PublicKey {
                hint: self.hint.clone(),
            },
            SignatureContent::MessageSignature(message),
        )
        .into_bundle();
        bundle
            .to_json()
            .map(String::into_bytes)
            .map_err(|error| error.to_string())
    }
}

fn verifier(root: Option<&Path>) -> Result<Verifier, TrustError> {
    let (json, path) = match root {
        Some(path) => (read_text(path)?, path.to_path_buf()),
        None => (
            SIGSTORE_PRODUCTION_TRUSTED_ROOT.to_string(),
            PathBuf::from("the public-good trusted root"),
        ),
    };
    let root = TrustedRoot::from_json(&json).map_err(|error| TrustError::Format {
        path: path.clone(),
        what: "a Sigstore trusted root",
        reason: error.to_string(),
    })?;
    Verifier::new(&root).map_err(|error| TrustError::Format {
        path,
        what: "a usable Sigstore trusted root",
        reason: error.to_string(),
    })
}

fn read_text(path: &Path) -> Result<String, TrustError> {
    use std::io::Read;
    let io = |source| TrustError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_TRUST_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(io)?;
    Ok(text)
}
