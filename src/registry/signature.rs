//! Whose signature a pulled package carries: Sigstore bundles over the manifest, verified
//! offline and completely by `sigstore-verify` (no cryptography is written here).
//!
//! The trust a caller gives is one of:
//!
//! - [`Trust::key`]: a PEM public key (ECDSA P-256, as cosign makes it, or ed25519). A bundle
//!   signed with it is accepted; its transparency-log entries, when it has some, are verified
//!   against the trusted root (inclusion proof, checkpoint, SET). A keyed bundle made offline
//!   (`hako push --sign`) has none: verifying it proves that the key's holder signed this
//!   manifest, and nothing about when, or that the signature was ever made public.
//! - [`Trust::identity`]: a certificate identity (the SAN, exact) and its OIDC issuer, with a
//!   trusted root (the public-good instance's by default). Everything is verified: the
//!   signature, the certificate's chain to the root's CA at the signing time, its SCT, the
//!   transparency log's inclusion proof and checkpoint (always required), the signed or RFC 3161
//!   timestamps inside the certificate's validity, and the identity and issuer.
//!
//! The artifact verified is the manifest's bytes, whose SHA-256 is the digest the package is
//! pulled by, so a signature over any other manifest fails. [`Signer`] says who signed, for
//! the store to keep with the version.
//!
//! This module reads and verifies bundles (in `verifier`, with the build's `sigstore` feature);
//! [`super::referrers`] finds them in a registry.

use std::path::PathBuf;

#[cfg(feature = "sigstore")]
mod verifier;
#[cfg(feature = "sigstore")]
pub use verifier::{SigningKey, Trust};

#[cfg(not(feature = "sigstore"))]
mod absent;
#[cfg(not(feature = "sigstore"))]
pub use absent::{SigningKey, Trust};

/// The largest bundle read, in bytes.
pub const MAX_BUNDLE_BYTES: u64 = 1024 * 1024;

/// Who a signature's verification found signed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Signer {
    /// `key`, or `keyless` (a certificate from the root's CA).
    pub kind: String,
    /// For a key: `sha256:` and its SubjectPublicKeyInfo's digest; keyless: the certificate's
    /// identity.
    pub identity: String,
    /// The OIDC issuer of a keyless signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Whether a transparency-log entry was verified.
    pub logged: bool,
}

/// Why a trust could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not {what}: {reason}", path.display())]
    Format {
        path: PathBuf,
        what: &'static str,
        reason: String,
    },
    #[error("this build of hako has no Sigstore verifier (cargo feature `sigstore`)")]
    Unavailable,
}
