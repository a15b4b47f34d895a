//! Registry credentials and the challenges that ask for them.
//!
//! Credentials come from one file in docker's `config.json` format (its `auths` map, which
//! docker, podman and oras write): `--registry-auth FILE`, else `$REGISTRY_AUTH_FILE`, else
//! `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`. An entry gives `auth`
//! (base64 of `user:password`) or `username` and `password`; its key is the registry as
//! `host[:port]`, with or without a scheme and path (`https://index.docker.io/v1/`). Credential
//! helpers (`credsStore`, `credHelpers`) are programs hako does not run: a registry that only a
//! helper knows is named in the error. Secrets are held as [`Secret`]s, which no `Debug` or
//! message prints.
//!
//! A registry asks for credentials with `401` and `WWW-Authenticate`: `Basic`, answered with
//! the credentials, or `Bearer realm=…,service=…,scope=…`, answered by asking the realm for a
//! token (with the credentials when there are some, anonymously otherwise, as ghcr.io and
//! Docker Hub allow for public images). [`Challenge::parse`] reads the header.
//!
//! This module does not send anything; [`super::client`] does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::http::Secret;

/// The largest credentials file read, in bytes.
const MAX_AUTH_FILE_BYTES: u64 = 1024 * 1024;

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub username: String,
    pub password: Secret,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .field("password", &self.password)
            .finish()
    }
}

impl Login {
    /// The `Authorization` value of HTTP basic authentication.
    pub fn basic(&self) -> Secret {
        let pair = format!("{}:{}", self.username, self.password.expose());
        Secret::new(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        ))
    }
}

/// The credentials of every registry the file names.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// By registry (`host[:port]`, lower case).
    logins: BTreeMap<String, Login>,
    /// Registries whose credentials a helper program holds (which hako does not run).
    helpers: BTreeMap<String, String>,
    /// The file they came from, for messages.
    source: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot read the registry credentials {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the registry credentials {} are not docker's config.json format: {reason}", path.display())]
    Format { path: PathBuf, reason: String },
}

#[derive(serde::Deserialize)]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(serde::Deserialize)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

impl Credentials {
    /// No credentials: every pull is anonymous.
    pub fn none() -> Credentials {
        Credentials::default()
    }

    /// The credentials of `explicit`, or of the first of `$REGISTRY_AUTH_FILE`,
    /// `$DOCKER_CONFIG/config.json` and `~/.docker/config.json` that exists (none: anonymous).
    pub fn discover(explicit: Option<&Path>) -> Result<Credentials, CredentialsError> {
        if let Some(path) = explicit {
            return Credentials::read(path);
        }
        let candidates = [
            std::env::var_os("REGISTRY_AUTH_FILE").map(PathBuf::from),
            std::env::var_os("DOCKER_CONFIG").map(|dir| PathBuf::from(dir).join("config.json")),
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker/config.json")),
        ];
        for path in candidates.into_iter().flatten() {
            if path.is_file() {
                return Credentials::read(&path);
            }
        }
        Ok(Credentials::none())
    }

    /// The credentials in the file at `path`.
    pub fn read(path: &Path) -> Result<Credentials, CredentialsError> {
        use std::io::Read;
        let io = |source| CredentialsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut text = Vec::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(MAX_AUTH_FILE_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(io)?;
        if text.len() as u64 > MAX_AUTH_FILE_BYTES {
            return Err(CredentialsError::Format {
                path: path.to_path_buf(),
                reason: format!("it is larger than {} KiB", MAX_AUTH_FILE_BYTES >> 10),
            });
        }
        let mut credentials =
            Credentials::parse(&text).map_err(|reason| CredentialsError::Format {
                path: path.to_path_buf(),
                reason,
            })?;
        credentials.source = Some(path.to_path_buf());
        Ok(credentials)
    }

    /// Parses the text of a `config.json`. The error never quotes the file.
    fn parse(text: &[u8]) -> Result<Credentials, String> {
        // serde_json's messages name a position, never the text at it: safe to show.
        let file: ConfigFile = serde_json::from_slice(text).map_err(|error| error.to_string())?;
        let mut credentials = Credentials::none();
        for (key, entry) in file.auths {
            let registry = registry_key(&key);
            let login = match (entry.auth, entry.username, entry.password) {
                (Some(auth), _, _) if !auth.is_empty() => decode_auth(&auth).ok_or_else(|| {
                    format!("the `auth` of {registry} is not base64 of user:password")
                })?,
                (_, Some(username), Some(password)) => Login {
                    username,
                    password: Secret::new(password),
                },
                // An entry with neither (docker writes `{}` beside a credential helper).
                _ => continue,
            };
            credentials.logins.insert(registry, login);
        }
        for (key, helper) in file.cred_helpers {
            credentials.helpers.insert(registry_key(&key), helper);
        }
        if let Some(store) = file.creds_store {
            credentials.helpers.insert(String::new(), store);
        }
        Ok(credentials)
    }

    /// The login for `registry` (`host[:port]`), if the file has one.
    pub fn login(&self, registry: &str) -> Option<&Login> {
        self.logins.get(&registry.to_ascii_lowercase())
    }

    /// Why no login was found for `registry`, for a refusal: the file, and a helper that may
    /// hold it.
    pub fn missing(&self, registry: &str) -> String {
        let helper = self
            .helpers
            .get(&registry.to_ascii_lowercase())
            .or_else(|| self.helpers.get(""));
        let file = self.source.as_ref().map_or_else(
            || "the credentials file".to_string(),
            |path| path.display().to_string(),
        );
        match (&self.source, helper) {
            (_, Some(helper)) => format!(
                "{file} names the credential helper `docker-credential-{helper}` for it, which \
                 hako does not run: put the login in its `auths`, or give --registry-auth FILE"
            ),
            (Some(_), None) => format!("{file} has no login for it"),
            (None, None) => "no credentials file was found (--registry-auth FILE, \
                             $REGISTRY_AUTH_FILE, ~/.docker/config.json)"
                .to_string(),
        }
    }
}

/// `host[:port]` of an `auths` key, which may carry a scheme and a path.
fn registry_key(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let key = key
        .split('/')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    // Docker Hub's historical key.
    if key == "index.docker.io" {
        return "registry-1.docker.io".to_string();
    }
    key
}

fn decode_auth(auth: &str) -> Option<Login> {
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (username, password) = decoded.split_once(':')?;
    Some(Login {
        username: username.to_string(),
        password: Secret::new(password.to_string()),
    })
}

/// What a `401` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

impl Challenge {
    /// The first challenge of a `WWW-Authenticate` value that hako answers.
    pub fn parse(header: &str) -> Option<Challenge> {
        let (scheme, params) = header
            .trim()
            .split_once(|c: char| c.is_ascii_whitespace())
            .unwrap_or((header.trim(), ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Challenge::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let params = auth_params(params)?;
        let find = |name: &str| {
            params
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.clone())
        };
        Some(Challenge::Bearer {
            realm: find("realm")?,
            service: find("service"),
            scope: find("scope"),
        })
    }
}

/// `key=value, key="quoted \" value"` pairs (RFC 9110's auth-param list).
fn auth_params(text: &str) -> Option<Vec<(String, String)>> {
    let mut params = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let equals = rest.find('=')?;
        let key = rest[..equals].trim().to_string();
        rest = rest[equals + 1..].trim_start();
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((at, c)) = chars.next() {
                match c {
                    '\\' => out.push(chars.next()?.1),
                    '"' => {
                        end = Some(at + 1);
                        break;
                    }
                    c => out.push(c),
                }
            }
            value = out;
            rest = &quoted[end?..];
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim().to_string();
            rest = &rest[end..];
        }
        params.push((key, value));
        rest = rest.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Some(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_gives_its_realm_service_and_scope() {
        let header = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull""#;
        assert_eq!(
            Challenge::parse(header),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/alpine:pull".into()),
            })
        );
        assert_eq!(
            Challenge::parse(r#"bearer realm=https://r/token, scope="a\"b""#),
            Some(Challenge::Bearer {
                realm: "https://r/token".into(),
                service: None,
                scope: Some("a\"b".into()),
            })
        );
        assert_eq!(
            Challenge::parse(r#"Basic realm="basic-realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(Challenge::parse("Negotiate"), None);
        assert_eq!(Challenge::parse(r#"Bearer service="x""#), None);
        assert_eq!(Challenge::parse(r#"Bearer realm="unclosed"#), None);
    }

    #[test]
    fn a_config_file_gives_logins_by_registry() {
        let text = br#"{
            "auths": {
                "127.0.0.1:5000": {"auth": "YWxpY2U6czNjcjN0"},
                "https://index.docker.io/v1/": {"username": "bob", "password": "pw"},
                "ghcr.io": {}
            },
            "credHelpers": {"gcr.io": "gcloud"}
        }"#;
        let credentials = Credentials::parse(text).unwrap();
        let alice = credentials.login("127.0.0.1:5000").unwrap();
        assert_eq!(alice.username, "alice");
        assert_eq!(alice.password.expose(), "s3cr3t");
        assert_eq!(alice.basic().expose(), "Basic YWxpY2U6czNjcjN0");
        assert_eq!(
            credentials.login("registry-1.docker.io").unwrap().username,
            "bob"
        );
        assert!(credentials.login("ghcr.io").is_none());
        assert!(credentials
            .missing("gcr.io")
            .contains("docker-credential-gcloud"));
    }

    #[test]
    fn a_secret_never_reaches_debug_output_or_an_error() {
        let text = br#"{"auths": {"r.io": {"auth": "YWxpY2U6czNjcjN0"}}}"#;
        let credentials = Credentials::parse(text).unwrap();
        let shown = format!("{credentials:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("YWxpY2U6czNjcjN0"),
            "{shown}"
        );
        let bad = br#"{"auths": {"r.io": {"auth": "not base64 s3cr3t"}}}"#;
        let error = Credentials::parse(bad).unwrap_err();
        assert!(!error.contains("s3cr3t"), "{error}");
        let not_json = br#"{"auths": {"r.io": {"auth": s3cr3t}}}"#;
        let error = Credentials::parse(not_json).unwrap_err();
        assert!(!error.contains("s3cr3t"), "{error}");
    }
}
