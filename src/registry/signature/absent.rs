//! A build without the `sigstore` feature: asking for a signature is refused, never skipped.

use std::path::Path;

use super::{Signer, TrustError};

/// What a signature must be verified against; this build cannot make one.
#[derive(Debug)]
pub struct Trust(());

impl Trust {
    pub fn key(_path: &Path, _root: Option<&Path>) -> Result<Trust, TrustError> {
        Err(TrustError::Unavailable)
    }

    pub fn identity(
        _identity: &str,
        _issuer: &str,
        _root: Option<&Path>,
    ) -> Result<Trust, TrustError> {
        Err(TrustError::Unavailable)
    }

    pub fn verify(&self, _artifact: &[u8], _bundle: &[u8]) -> Result<Signer, String> {
        Err(TrustError::Unavailable.to_string())
    }

    pub fn describe(&self) -> String {
        TrustError::Unavailable.to_string()
    }
}

/// A key that signs pushes; this build cannot read one.
pub struct SigningKey(());

impl SigningKey {
    pub fn read(_path: &Path) -> Result<SigningKey, TrustError> {
        Err(TrustError::Unavailable)
    }

    pub fn bundle(&self, _artifact: &[u8]) -> Result<Vec<u8>, String> {
        Err(TrustError::Unavailable.to_string())
    }
}
