//! What an `oci://` argument names: `oci://REGISTRY/REPOSITORY:TAG`, or
//! `oci://REGISTRY/REPOSITORY@sha256:HEX` (a tag and a digest together: the digest is pulled,
//! the tag only recorded).
//!
//! The grammar is the distribution spec's, read strictly: the registry is always the first
//! part (no `docker.io` guessed for a bare name), a repository is lower-case path components
//! (`[a-z0-9]+` joined by `.`, `_`, `__` or dashes), a tag is `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`,
//! and a digest is `sha256:` and 64 lower-case hex digits. A reference with neither a tag nor
//! a digest is refused rather than read as `latest`.
//!
//! This module only parses; [`super::client`] talks to the registry.

use std::fmt;

use crate::http::Host;

/// The scheme that marks a package argument as a registry reference.
pub const SCHEME: &str = "oci://";
/// The longest repository name, in bytes (the distribution spec's bound with its registry).
const MAX_REPOSITORY_BYTES: usize = 255;
/// The longest tag, in bytes.
const MAX_TAG_BYTES: usize = 128;

/// A content digest: `sha256:` and 64 lower-case hex digits, the only algorithm hako reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl TryFrom<String> for Digest {
    type Error = String;
    fn try_from(text: String) -> Result<Digest, String> {
        Digest::parse(&text)
    }
}

impl From<Digest> for String {
    fn from(digest: Digest) -> String {
        digest.0
    }
}

impl Digest {
    /// Parses `sha256:HEX`.
    pub fn parse(text: &str) -> Result<Digest, String> {
        let Some(hex) = text.strip_prefix("sha256:") else {
            let algorithm = text.split(':').next().unwrap_or_default();
            return Err(format!(
                "digest {:?} is not sha256 (`{}`); hako reads sha256 digests only",
                crate::clip(text, 80),
                crate::clip(algorithm, 20)
            ));
        };
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!(
                "digest {:?} is not sha256: and 64 lower-case hex digits",
                crate::clip(text, 80)
            ));
        }
        Ok(Digest(text.to_string()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::{Digest as _, Sha256};
        Digest::from_sha256(Sha256::digest(bytes).into())
    }

    /// The digest whose SHA-256 is `hash`.
    pub fn from_sha256(hash: [u8; 32]) -> Digest {
        Digest(format!("sha256:{}", hex::encode(hash)))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A parsed `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`, as written (host names lower-cased).
    pub registry: String,
    /// The host alone, for the plain-HTTP rule and credentials.
    pub host: Host,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl Reference {
    /// Whether `text` is meant as a registry reference (it starts with `oci://`).
    pub fn is_reference(text: &str) -> bool {
        text.starts_with(SCHEME)
    }

    /// Parses `oci://REGISTRY/REPOSITORY(:TAG)?(@DIGEST)?`.
    pub fn parse(text: &str) -> Result<Reference, String> {
        let shown = crate::clip(text, 120);
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| format!("{shown:?} does not start with {SCHEME}"))?;
        let (registry, path) = rest.split_once('/').ok_or_else(|| {
            format!("{shown:?} names no repository: write {SCHEME}REGISTRY/REPOSITORY:TAG")
        })?;
        let host = registry_host(registry).map_err(|reason| format!("{shown:?}: {reason}"))?;
        let (path, digest) = match path.split_once('@') {
            Some((path, digest)) => (
                path,
                Some(Digest::parse(digest).map_err(|reason| format!("{shown:?}: {reason}"))?),
            ),
            None => (path, None),
        };
        // A tag follows the last `:` after the last `/`.
        let last_slash = path.rfind('/').map_or(0, |at| at + 1);
        let (repository, tag) = match path[last_slash..].rfind(':') {
            Some(colon) => {
                let colon = last_slash + colon;
                (&path[..colon], Some(&path[colon + 1..]))
            }
            None => (path, None),
        };
        check_repository(repository).map_err(|reason| format!("{shown:?}: {reason}"))?;
        if let Some(tag) = tag {
            check_tag(tag).map_err(|reason| format!("{shown:?}: {reason}"))?;
        }
        if tag.is_none() && digest.is_none() {
            return Err(format!(
                "{shown:?} names no tag and no digest: add :TAG or @sha256:… (no tag is assumed)"
            ));
        }
        let registry = match &host {
            Host::Name(name) => match registry.rsplit_once(':') {
                Some((_, port)) if !registry.ends_with(']') => format!("{name}:{port}"),
                _ => name.clone(),
            },
            Host::Ip(_) => registry.to_string(),
        };
        Ok(Reference {
            registry,
            host,
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// What the manifest is asked for by: the digest when there is one, else the tag.
    pub fn manifest_key(&self) -> &str {
        match (&self.digest, &self.tag) {
            (Some(digest), _) => digest.as_str(),
            (None, Some(tag)) => tag,
            (None, None) => unreachable!("a parsed reference has a tag or a digest"),
        }
    }

    /// The same repository at `digest`, without a tag: what a pull asks for once the tag
    /// is resolved.
    pub fn at(&self, digest: Digest) -> Reference {
        Reference {
            tag: None,
            digest: Some(digest),
            ..self.clone()
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// The host of `host[:port]`, with the port checked.
fn registry_host(registry: &str) -> Result<Host, String> {
    if registry.contains('@') {
        return Err("a registry reference carries no user name or password".to_string());
    }
    let (host, port) = match registry.strip_prefix('[') {
        Some(_) => match registry.find(']') {
            Some(close) => (&registry[..=close], &registry[close + 1..]),
            None => {
                return Err(format!(
                    "registry `{registry}` opens a bracket it does not close"
                ))
            }
        },
        None => match registry.split_once(':') {
            Some((host, _)) => (host, &registry[host.len()..]),
            None => (registry, ""),
        },
    };
    if let Some(port) = port.strip_prefix(':') {
        match port.parse::<u16>() {
            Ok(port) if port > 0 => {}
            _ => return Err(format!("registry `{registry}` has no valid port")),
        }
    } else if !port.is_empty() {
        return Err(format!("registry `{registry}` is not host[:port]"));
    }
    Host::parse(host).map_err(|reason| format!("registry: {reason}"))
}

fn check_repository(repository: &str) -> Result<(), String> {
    if repository.is_empty() {
        return Err("the repository is empty".to_string());
    }
    if repository.len() > MAX_REPOSITORY_BYTES {
        return Err(format!(
            "the repository is longer than {MAX_REPOSITORY_BYTES} bytes"
        ));
    }
    for component in repository.split('/') {
        if !is_path_component(component) {
            return Err(format!(
                "repository component `{}` must be lower-case letters and digits joined by \
                 `.`, `_`, `__` or dashes",
                crate::clip(component, 60)
            ));
        }
    }
    Ok(())
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn is_path_component(component: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut at = 0;
    while at < bytes.len() {
        if alnum(bytes[at]) {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && !alnum(bytes[at]) {
            at += 1;
        }
        let separator = &component[start..at];
        let dashes = separator.bytes().all(|b| b == b'-');
        if !(separator == "." || separator == "_" || separator == "__" || dashes) {
            return false;
        }
    }
    true
}

fn check_tag(tag: &str) -> Result<(), String> {
    let valid = !tag.is_empty()
        && tag.len() <= MAX_TAG_BYTES
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
        && tag.as_bytes()[0] != b'.'
        && tag.as_bytes()[0] != b'-';
    if valid {
        Ok(())
    } else {
        Err(format!(
            "tag `{}` must be 1 to {MAX_TAG_BYTES} of `A-Z a-z 0-9 _ . -`, not starting with \
             `.` or `-`",
            crate::clip(tag, 60)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_tag_reference_names_its_registry_repository_and_tag() {
        let reference = Reference::parse("oci://127.0.0.1:5000/team/greet:1.0.0").unwrap();
        assert_eq!(reference.registry, "127.0.0.1:5000");
        assert_eq!(reference.repository, "team/greet");
        assert_eq!(reference.tag.as_deref(), Some("1.0.0"));
        assert_eq!(reference.digest, None);
        assert_eq!(reference.manifest_key(), "1.0.0");
        assert_eq!(
            reference.to_string(),
            "oci://127.0.0.1:5000/team/greet:1.0.0"
        );
    }

    #[test]
    fn a_digest_wins_over_a_tag() {
        let text = format!("oci://ghcr.io/acme/greet:v1@sha256:{HEX}");
        let reference = Reference::parse(&text).unwrap();
        assert_eq!(reference.registry, "ghcr.io");
        assert_eq!(reference.tag.as_deref(), Some("v1"));
        assert_eq!(reference.manifest_key(), format!("sha256:{HEX}"));
        assert_eq!(reference.to_string(), text);
        let pinned = reference.at(Digest::parse(&format!("sha256:{HEX}")).unwrap());
        assert_eq!(pinned.tag, None);
    }

    #[test]
    fn a_registry_name_is_lower_cased_and_keeps_its_port() {
        let reference = Reference::parse("oci://Registry.Example:8443/a/b:t").unwrap();
        assert_eq!(reference.registry, "registry.example:8443");
        assert_eq!(reference.host, Host::Name("registry.example".into()));
        let v6 = Reference::parse("oci://[::1]:5000/a:t").unwrap();
        assert_eq!(v6.registry, "[::1]:5000");
    }

    #[test]
    fn references_that_are_not_the_grammar_are_refused_with_the_reason() {
        for (text, reason) in [
            ("oci://ghcr.io/acme/greet", "no tag and no digest"),
            ("oci://ghcr.io", "names no repository"),
            ("oci://ghcr.io/Acme/greet:1", "lower-case"),
            ("oci://ghcr.io/acme//greet:1", "lower-case"),
            ("oci://ghcr.io/acme/greet-:1", "lower-case"),
            ("oci://ghcr.io/acme/greet:-x", "tag `-x`"),
            ("oci://ghcr.io/acme/greet:", "tag ``"),
            (
                "oci://ghcr.io/acme/greet@sha512:00",
                "hako reads sha256 digests only",
            ),
            ("oci://ghcr.io/acme/greet@sha256:ABC", "64 lower-case hex"),
            ("oci://ghcr.io:0/acme/greet:1", "no valid port"),
            ("oci://ghcr.io:x/acme/greet:1", "no valid port"),
            (
                "oci://user:pw@ghcr.io/acme/greet:1",
                "no user name or password",
            ),
            ("oci://bad host/acme/greet:1", "registry"),
            ("https://ghcr.io/acme/greet:1", "does not start with oci://"),
        ] {
            let error = Reference::parse(text).unwrap_err();
            assert!(error.contains(reason), "{text}: {error}");
        }
        let long_tag = format!("oci://r.io/a:{}", "t".repeat(129));
        assert!(Reference::parse(&long_tag).unwrap_err().contains("tag"));
        let long_repository = format!("oci://r.io/{}:t", "a".repeat(256));
        assert!(Reference::parse(&long_repository)
            .unwrap_err()
            .contains("longer than 255"));
    }

    #[test]
    fn separators_inside_a_component_follow_the_grammar() {
        for good in ["a", "a.b", "a_b", "a__b", "a---b", "a1.b2_c3"] {
            assert!(is_path_component(good), "{good}");
        }
        for bad in ["", ".a", "a.", "a..b", "a___b", "a._b", "A", "a b"] {
            assert!(!is_path_component(bad), "{bad}");
        }
    }
}
