//! A credential the host injects for one destination, and the secret it carries. It owns the
//! `[[packages.NAME.credentials]]` entry, reading the secret when a request needs it, and
//! keeping the secret out of every `Debug` output and message. It does not decide which
//! package a credential belongs to (see `policy`).
//!
//! A secret from `value_file` is the file's content less one trailing line break (`\n` or
//! `\r\n`), as editors and `echo` add one. A credential's `host` without a port is for 443,
//! like an allowlist entry.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::allowlist::HostPattern;
use super::answer::{ErrorKind, HttpError};
use super::request::{is_connection_header, is_header_name_byte, is_header_value};
use super::url::Host;

/// One `[[packages.NAME.credentials]]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CredentialEntry {
    host: String,
    header: String,
    value_env: Option<String>,
    value_file: Option<PathBuf>,
    prefix: Option<String>,
}

/// A secret value. Its `Debug` prints `[redacted]` and it has no `Display`, so it cannot reach
/// a log, an error or an answer by formatting.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value, for the one place that writes it into a request.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A header the host adds to a request, with its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedHeader {
    pub name: String,
    pub value: Secret,
}

/// Where a credential's secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The host's environment variable of this name.
    Env(String),
    /// This file, whose content (less one trailing line break) is the secret.
    File(PathBuf),
}

impl SecretSource {
    /// The source a `value_env` or `value_file` field names (exactly one of them), a relative
    /// file read against `base_dir`.
    pub fn from_fields(
        value_env: Option<String>,
        value_file: Option<PathBuf>,
        base_dir: &Path,
    ) -> Result<SecretSource, String> {
        match (value_env, value_file) {
            (Some(var), None) if !var.is_empty() => Ok(SecretSource::Env(var)),
            (None, Some(file)) => Ok(SecretSource::File(base_dir.join(file))),
            (Some(_), Some(_)) => Err("set either value_env or value_file, not both".to_string()),
            _ => Err("set value_env or value_file".to_string()),
        }
    }

    /// The secret, or why it is not available: it must be set, non-empty, and free of line
    /// breaks and control characters (it goes into a header).
    pub fn read(&self) -> Result<String, &'static str> {
        let value = match self {
            SecretSource::Env(var) => std::env::var(var)
                .map_err(|_| "its environment variable is not set or not UTF-8")?,
            SecretSource::File(path) => {
                let mut text = std::fs::read_to_string(path)
                    .map_err(|_| "its file cannot be read as UTF-8 text")?;
                if text.ends_with('\n') {
                    text.pop();
                    if text.ends_with('\r') {
                        text.pop();
                    }
                }
                text
            }
        };
        if value.is_empty() {
            return Err("the secret is empty");
        }
        if !is_header_value(&value) {
            return Err("the secret contains a line break or control character");
        }
        Ok(value)
    }
}

/// A header the host injects into requests to one host.
#[derive(Debug, Clone)]
pub struct Credential {
    host: HostPattern,
    host_text: String,
    pub header: String,
    pub source: SecretSource,
    pub prefix: String,
}

impl Credential {
    pub(super) fn from_entry(
        entry: CredentialEntry,
        base_dir: &Path,
    ) -> Result<Credential, String> {
        let host = HostPattern::parse(&entry.host)?;
        if host.is_wildcard() {
            return Err(format!(
                "host `{}`: a credential names one exact host",
                entry.host
            ));
        }
        let header = entry.header;
        if header.is_empty() || !header.bytes().all(is_header_name_byte) {
            return Err(format!(
                "header `{header}` must be a lower-case HTTP header name"
            ));
        }
        if is_connection_header(&header) {
            return Err(format!(
                "header `{header}` is a connection header and is never sent"
            ));
        }
        let source = SecretSource::from_fields(entry.value_env, entry.value_file, base_dir)?;
        let prefix = entry.prefix.unwrap_or_default();
        if !is_header_value(&prefix) {
            return Err("prefix contains a line break or control character".to_string());
        }
        Ok(Credential {
            host,
            host_text: entry.host,
            header,
            source,
            prefix,
        })
    }

    /// The host this credential is for, as written in the policy.
    pub fn host(&self) -> &str {
        &self.host_text
    }

    /// Whether this credential is for `host` on `port`.
    pub fn is_for(&self, host: &Host, port: u16) -> bool {
        self.host.matches(host, port)
    }

    /// Whether both credentials set the same header for the same destination.
    pub(super) fn collides_with(&self, other: &Credential) -> bool {
        self.host == other.host && self.header == other.header
    }

    /// Reads the secret now and builds the header. A missing or empty secret is
    /// `credential_unavailable`, naming the host and header but never a value.
    pub(super) fn resolve(&self) -> Result<InjectedHeader, HttpError> {
        let unavailable = |why: &str| {
            HttpError::new(
                ErrorKind::CredentialUnavailable,
                format!(
                    "the credential for {} (header {}) is not available: {why}",
                    self.host_text, self.header
                ),
            )
        };
        let value = self.source.read().map_err(unavailable)?;
        Ok(InjectedHeader {
            name: self.header.clone(),
            value: Secret(format!("{}{}", self.prefix, value)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(source: SecretSource, prefix: &str) -> Credential {
        Credential {
            host: HostPattern::parse("h.example").unwrap(),
            host_text: "h.example".into(),
            header: "x-api-key".into(),
            source,
            prefix: prefix.into(),
        }
    }

    #[test]
    fn a_secret_debugs_as_redacted() {
        let secret = Secret::new("abc-secret".into());
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(secret.expose(), "abc-secret");
    }

    #[test]
    fn a_crlf_terminated_file_secret_loses_only_its_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, " k 1 \r\n").unwrap();
        let header = credential(SecretSource::File(path), "Key ")
            .resolve()
            .unwrap();
        assert_eq!(header.value.expose(), "Key  k 1 ");
    }

    #[test]
    fn a_secret_with_a_line_break_inside_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "a\nb\n").unwrap();
        let error = credential(SecretSource::File(path), "")
            .resolve()
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::CredentialUnavailable);
        assert!(!error.message.contains("a\nb"));
    }

    #[test]
    fn a_credential_is_for_its_host_and_port_only() {
        let c = credential(SecretSource::Env("K".into()), "");
        assert!(c.is_for(&Host::Name("h.example".into()), 443));
        assert!(!c.is_for(&Host::Name("h.example".into()), 8443));
        assert!(!c.is_for(&Host::Name("x.h.example".into()), 443));
    }
}
