//! Signed version records: an uploader signs each record it writes to a bucket with its
//! ed25519 key, and a node loads native code from the bucket only when a key it trusts signed
//! the record that names that code's digest (see [`super::remote`]).
//!
//! A private key file (`hako keygen --out PREFIX` writes `PREFIX`) is its PKCS#8 document as
//! hex on one line, mode 0600; it is refused when a group or other user may read it. A public
//! key file (`PREFIX.pub`) is the 32-byte key as hex on one line. A signature is the JSON
//! object `{"hako_signature":1,"public_key":HEX,"ed25519":HEX}` stored beside the record; it
//! signs the record's exact bytes.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use serde::{Deserialize, Serialize};

/// The signature format this host writes and reads.
pub const SIGNATURE_FORMAT: u32 = 1;

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Bad { path: PathBuf, reason: String },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> KeyError + 'a {
    move |source| KeyError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> KeyError {
    KeyError::Bad {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// The public key file beside the private key `prefix`.
pub fn public_path(prefix: &Path) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Writes a new key pair: `prefix` (private, 0600) and `prefix.pub`. Refuses to replace
/// either file. Returns the public key as hex.
pub fn keygen(prefix: &Path) -> Result<String, KeyError> {
    let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
        .map_err(|_| bad(prefix, "the OS gave no random bytes for a key"))?;
    let pair = Ed25519KeyPair::from_pkcs8(document.as_ref())
        .map_err(|_| bad(prefix, "ring made a key it cannot read"))?;
    let public = hex::encode(pair.public_key().as_ref());
    let public_file = public_path(prefix);
    for path in [prefix, public_file.as_path()] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(bad(path, "exists already; keygen never replaces a key"));
        }
    }
    let write = |path: &Path, text: String, mode: u32| -> Result<(), KeyError> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .map_err(io("creating", path))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io("writing", path))
    };
    write(
        prefix,
        format!("{}\n", hex::encode(document.as_ref())),
        0o600,
    )?;
    write(&public_file, format!("{public}\n"), 0o644)?;
    Ok(public)
}

/// A private key that signs records.
pub struct SigningKey {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.public_hex())
    }
}

impl SigningKey {
    /// Reads a private key file, refused when others may read it.
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        let metadata = fs::metadata(path).map_err(io("reading", path))?;
        if metadata.permissions().mode() & 0o077 != 0 {
            return Err(bad(
                path,
                format!(
                    "a private key must be readable by its owner only (mode {:o}; chmod 600 it)",
                    metadata.permissions().mode() & 0o777
                ),
            ));
        }
        let text = fs::read_to_string(path).map_err(io("reading", path))?;
        let document = hex::decode(text.trim())
            .map_err(|_| bad(path, "not a private key written by hako keygen (hex)"))?;
        let pair = Ed25519KeyPair::from_pkcs8(&document)
            .map_err(|_| bad(path, "not an ed25519 private key (PKCS#8)"))?;
        Ok(Self { pair })
    }

    /// The public key, as hex.
    pub fn public_hex(&self) -> String {
        hex::encode(self.pair.public_key().as_ref())
    }

    /// The signature of `message`, as the object stored beside it.
    pub fn sign(&self, message: &[u8]) -> Signature {
        Signature {
            hako_signature: SIGNATURE_FORMAT,
            public_key: self.public_hex(),
            ed25519: hex::encode(self.pair.sign(message).as_ref()),
        }
    }
}

/// A signature as stored beside a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    pub hako_signature: u32,
    pub public_key: String,
    pub ed25519: String,
}

/// The public keys whose signatures a node trusts.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys {
    keys: Vec<[u8; 32]>,
}

impl TrustedKeys {
    /// Reads public key files (`hako keygen`'s `.pub`).
    pub fn read(paths: &[PathBuf]) -> Result<Self, KeyError> {
        let mut keys = Vec::new();
        for path in paths {
            let text = fs::read_to_string(path).map_err(io("reading", path))?;
            keys.push(parse_public(text.trim()).ok_or_else(|| {
                bad(
                    path,
                    "not a public key written by hako keygen (64 hex digits)",
                )
            })?);
        }
        Ok(Self { keys })
    }

    /// These keys and `signer`'s public key.
    pub fn with_signer(mut self, signer: &SigningKey) -> Self {
        let public: [u8; 32] = signer
            .pair
            .public_key()
            .as_ref()
            .try_into()
            .expect("an ed25519 public key is 32 bytes");
        if !self.keys.contains(&public) {
            self.keys.push(public);
        }
        self
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `signature` (the bytes stored beside `message`) is a valid signature of
    /// `message` by a trusted key: the key, as hex, when it is; `Err` says why not.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<String, String> {
        let signature: Signature = serde_json::from_slice(signature)
            .map_err(|err| format!("the signature is malformed: {err}"))?;
        self.verify_signature(message, &signature)
    }

    /// Whether `signature` is a valid signature of `message` by a trusted key: the key, as
    /// hex, when it is; `Err` says why not.
    pub fn verify_signature(
        &self,
        message: &[u8],
        signature: &Signature,
    ) -> Result<String, String> {
        if signature.hako_signature != SIGNATURE_FORMAT {
            return Err(format!(
                "signature format {} is not {SIGNATURE_FORMAT}",
                signature.hako_signature
            ));
        }
        let key = parse_public(&signature.public_key)
            .ok_or_else(|| "the signature names no ed25519 public key".to_string())?;
        if !self.keys.contains(&key) {
            return Err(format!(
                "it is signed by the key {}, which is not trusted (--trust-key)",
                signature.public_key
            ));
        }
        let bytes =
            hex::decode(&signature.ed25519).map_err(|_| "the signature is not hex".to_string())?;
        UnparsedPublicKey::new(&ED25519, key)
            .verify(message, &bytes)
            .map_err(|_| format!("the signature by {} does not match", signature.public_key))?;
        Ok(hex::encode(key))
    }

    /// Whether the public key `hex` is trusted.
    pub fn trusts(&self, hex: &str) -> bool {
        parse_public(hex).is_some_and(|key| self.keys.contains(&key))
    }
}

fn parse_public(text: &str) -> Option<[u8; 32]> {
    hex::decode(text).ok()?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (SigningKey, TrustedKeys) {
        let prefix = dir.join(name);
        keygen(&prefix).unwrap();
        (
            SigningKey::read(&prefix).unwrap(),
            TrustedKeys::read(&[public_path(&prefix)]).unwrap(),
        )
    }

    #[test]
    fn a_record_verifies_only_with_its_bytes_and_a_trusted_key() {
        let dir = tempfile::tempdir().unwrap();
        let (key, trusted) = pair(dir.path(), "uploader");
        let (other, _) = pair(dir.path(), "other");
        let signature = serde_json::to_vec(&key.sign(b"record")).unwrap();
        assert_eq!(trusted.verify(b"record", &signature), Ok(key.public_hex()));
        assert!(trusted.trusts(&key.public_hex()));
        assert!(!trusted.trusts(&other.public_hex()));
        assert!(!trusted.trusts("not hex"));
        let err = trusted.verify(b"recorD", &signature).unwrap_err();
        assert!(err.contains("does not match"), "{err}");
        let foreign = serde_json::to_vec(&other.sign(b"record")).unwrap();
        let err = trusted.verify(b"record", &foreign).unwrap_err();
        assert!(err.contains("not trusted"), "{err}");
        let err = TrustedKeys::default()
            .verify(b"record", &signature)
            .unwrap_err();
        assert!(err.contains("not trusted"), "{err}");
        let err = trusted.verify(b"record", b"{}").unwrap_err();
        assert!(err.contains("malformed"), "{err}");
    }

    #[test]
    fn keygen_writes_a_private_key_only_its_owner_reads_and_never_replaces_one() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("k");
        keygen(&prefix).unwrap();
        let mode = fs::metadata(&prefix).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let err = keygen(&prefix).unwrap_err().to_string();
        assert!(err.contains("never replaces"), "{err}");
        fs::set_permissions(&prefix, fs::Permissions::from_mode(0o644)).unwrap();
        let err = SigningKey::read(&prefix).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        let err = TrustedKeys::read(std::slice::from_ref(&prefix))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a public key"), "{err}");
    }
}
