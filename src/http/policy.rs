//! The operator's network policy, read from the TOML policy file (`--policy FILE`): the hosts
//! each package's functions may reach, the names trusted to resolve to private addresses, the
//! credentials the host injects, and extra TLS roots. It owns parsing (unknown keys are errors
//! that name them), validation of every entry at load time, and resolving a credential's
//! secret when a request needs it. It does not send anything or vet addresses.
//!
//! A package's policy is the `"*"` entry plus its own entry plus the hosts given with
//! `--allow-host`. Relative paths (`extra_ca_files`, `value_file`) are read against the policy
//! file's folder; they are checked when used, not when the file is read, so a policy can be
//! checked on a machine that lacks the secrets.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::allowlist::Allowlist;
use super::answer::HttpError;
use super::credential::{Credential, CredentialEntry, InjectedHeader};
use super::url::Host;

/// Header names that carry credentials whoever sets them; a guest may not set them itself.
pub const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

/// A policy file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("reading the policy file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the policy file is not valid: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("packages.\"{package}\".{field}: {reason}")]
    Entry {
        package: String,
        field: &'static str,
        reason: String,
    },
    #[error("--allow-host {reason}")]
    ExtraHost { reason: String },
}

/// TLS settings for the broker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsPolicy {
    /// PEM files of certificate authorities trusted beside the platform roots.
    #[serde(default)]
    pub extra_ca_files: Vec<PathBuf>,
}

/// One `[packages.NAME]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PackageEntry {
    #[serde(default)]
    allow_hosts: Vec<String>,
    #[serde(default)]
    trust_private: Vec<String>,
    #[serde(default)]
    credentials: Vec<CredentialEntry>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    tls: TlsPolicy,
    #[serde(default)]
    packages: BTreeMap<String, PackageEntry>,
}

/// The whole policy file, validated.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub tls: TlsPolicy,
    packages: BTreeMap<String, PackagePolicy>,
}

impl Policy {
    /// No policy: no host is allowed and nothing is injected.
    pub fn empty() -> Policy {
        Policy::default()
    }

    /// Reads and validates the policy file at `path`.
    pub fn from_file(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        Policy::from_toml(&text, base_dir)
    }

    /// Parses and validates policy `text`, reading relative paths against `base_dir`.
    pub fn from_toml(text: &str, base_dir: &Path) -> Result<Policy, PolicyError> {
        let file: PolicyFile = toml::from_str(text)?;
        let mut tls = file.tls;
        for ca in &mut tls.extra_ca_files {
            *ca = base_dir.join(&*ca);
        }
        let mut packages = BTreeMap::new();
        for (name, entry) in file.packages {
            let package = PackagePolicy::from_entry(&name, entry, base_dir)?;
            packages.insert(name, package);
        }
        Ok(Policy { tls, packages })
    }

    /// The package names the file has an entry for, `"*"` included.
    pub fn package_names(&self) -> impl Iterator<Item = &str> {
        self.packages.keys().map(String::as_str)
    }

    /// The effective policy of package `name`: the `"*"` entry, plus the named entry, plus
    /// `extra_hosts` added to the allowlist.
    pub fn for_package(
        &self,
        name: &str,
        extra_hosts: &[String],
    ) -> Result<PackagePolicy, PolicyError> {
        let mut effective = PackagePolicy::default();
        for key in ["*", name] {
            if let Some(part) = self.packages.get(key) {
                effective.extend(part);
            }
            if name == "*" {
                break;
            }
        }
        for host in extra_hosts {
            effective
                .allow
                .push(host)
                .map_err(|reason| PolicyError::ExtraHost { reason })?;
        }
        Ok(effective)
    }
}

/// What one package's functions may reach, and what the host adds to their requests.
#[derive(Debug, Clone, Default)]
pub struct PackagePolicy {
    pub allow: Allowlist,
    /// Host names allowed to resolve to forbidden address ranges (lower case, no trailing dot).
    pub trust_private: Vec<String>,
    pub credentials: Vec<Credential>,
}

impl PackagePolicy {
    fn from_entry(
        package: &str,
        entry: PackageEntry,
        base_dir: &Path,
    ) -> Result<PackagePolicy, PolicyError> {
        let fail = |field: &'static str, reason: String| PolicyError::Entry {
            package: package.to_string(),
            field,
            reason,
        };
        let allow = Allowlist::new(&entry.allow_hosts).map_err(|r| fail("allow_hosts", r))?;
        let mut trust_private = Vec::new();
        for name in &entry.trust_private {
            match Host::parse(name) {
                Ok(Host::Name(name)) => trust_private.push(name),
                Ok(Host::Ip(_)) => {
                    return Err(fail(
                        "trust_private",
                        format!("`{name}` is an address; list host names only"),
                    ))
                }
                Err(reason) => return Err(fail("trust_private", reason)),
            }
        }
        let mut credentials: Vec<Credential> = Vec::new();
        for (index, written) in entry.credentials.into_iter().enumerate() {
            let credential = Credential::from_entry(written, base_dir)
                .map_err(|reason| fail("credentials", format!("entry {}: {reason}", index + 1)))?;
            if credentials.iter().any(|c| c.collides_with(&credential)) {
                return Err(fail(
                    "credentials",
                    format!(
                        "entry {}: a second credential for `{}` sets `{}` again",
                        index + 1,
                        credential.host(),
                        credential.header
                    ),
                ));
            }
            credentials.push(credential);
        }
        Ok(PackagePolicy {
            allow,
            trust_private,
            credentials,
        })
    }

    fn extend(&mut self, other: &PackagePolicy) {
        self.allow.extend(&other.allow);
        self.trust_private
            .extend(other.trust_private.iter().cloned());
        self.credentials.extend(other.credentials.iter().cloned());
    }

    /// Whether `name` is one of the headers a guest may not set: the fixed credential headers
    /// and every header some credential of this package injects.
    pub fn is_credential_header(&self, name: &str) -> bool {
        CREDENTIAL_HEADERS.contains(&name) || self.credentials.iter().any(|c| c.header == name)
    }

    /// The headers to inject into a request to `host` on `port`, with their secrets read now.
    /// A missing or empty secret is `credential_unavailable`, naming the host and header.
    pub fn credentials_for(
        &self,
        host: &Host,
        port: u16,
    ) -> Result<Vec<InjectedHeader>, HttpError> {
        self.credentials
            .iter()
            .filter(|credential| credential.is_for(host, port))
            .map(Credential::resolve)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::answer::ErrorKind;
    use crate::http::credential::SecretSource;

    const DESIGN_EXAMPLE: &str = r#"
[tls]
extra_ca_files = ["certs/internal-ca.pem"]  # trusted beside the platform roots

[packages."*"]                              # applies to every package; a named entry adds to it
allow_hosts = []

[packages.weather]
allow_hosts = ["api.weather.example", "*.tiles.example", "localhost:8443"]
trust_private = ["localhost"]

[[packages.weather.credentials]]
host = "api.weather.example"                # exact host, optional :port
header = "authorization"
value_env = "WEATHER_TOKEN"                 # or value_file = "secrets/weather"
prefix = "Bearer "                          # optional
"#;

    fn policy(text: &str) -> Result<Policy, PolicyError> {
        Policy::from_toml(text, Path::new("conf"))
    }

    fn name(text: &str) -> Host {
        Host::Name(text.into())
    }

    #[test]
    fn the_design_example_parses() {
        let policy = policy(DESIGN_EXAMPLE).unwrap();
        assert_eq!(
            policy.tls.extra_ca_files,
            vec![PathBuf::from("conf/certs/internal-ca.pem")]
        );
        let weather = policy.for_package("weather", &[]).unwrap();
        assert!(weather.allow.allows("api.weather.example", 443));
        assert!(weather.allow.allows("a.tiles.example", 443));
        assert!(weather.allow.allows("localhost", 8443));
        assert_eq!(weather.trust_private, vec!["localhost".to_string()]);
        assert_eq!(weather.credentials.len(), 1);
        assert_eq!(weather.credentials[0].prefix, "Bearer ");
        assert_eq!(
            weather.credentials[0].source,
            SecretSource::Env("WEATHER_TOKEN".into())
        );
    }

    #[test]
    fn a_package_gets_the_star_entry_plus_its_own_plus_extra_hosts() {
        let policy = policy(
            r#"
[packages."*"]
allow_hosts = ["common.example"]
[packages.a]
allow_hosts = ["a.example"]
[packages.b]
allow_hosts = ["b.example"]
"#,
        )
        .unwrap();
        let a = policy
            .for_package("a", &["extra.example:8443".to_string()])
            .unwrap();
        assert!(a.allow.allows("common.example", 443));
        assert!(a.allow.allows("a.example", 443));
        assert!(a.allow.allows("extra.example", 8443));
        assert!(!a.allow.allows("b.example", 443));
        let other = policy.for_package("unlisted", &[]).unwrap();
        assert!(other.allow.allows("common.example", 443));
        assert!(!other.allow.allows("a.example", 443));
    }

    #[test]
    fn an_invalid_extra_host_is_an_error() {
        let error = Policy::empty()
            .for_package("a", &["*".to_string()])
            .unwrap_err();
        assert!(error.to_string().contains("--allow-host"), "{error}");
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        for (text, key) in [
            ("[packages.a]\nallow_host = []\n", "allow_host"),
            ("[tls]\nextra_ca = []\n", "extra_ca"),
            ("proxy = \"x\"\n", "proxy"),
            (
                "[[packages.a.credentials]]\nhost = \"h.example\"\nheader = \"x-key\"\nvalue_env = \"K\"\nsuffix = \"!\"\n",
                "suffix",
            ),
        ] {
            let error = policy(text).unwrap_err().to_string();
            assert!(error.contains(key), "{key} not named in: {error}");
        }
    }

    #[test]
    fn an_invalid_allow_entry_names_the_package_and_field() {
        let error = policy("[packages.a]\nallow_hosts = [\"a.*.example\"]\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("packages.\"a\".allow_hosts"), "{error}");
        assert!(error.contains("a.*.example"), "{error}");
    }

    #[test]
    fn a_credential_needs_exactly_one_value_source() {
        let both = "[[packages.a.credentials]]\nhost = \"h.example\"\nheader = \"x-key\"\nvalue_env = \"K\"\nvalue_file = \"k\"\n";
        let error = policy(both).unwrap_err().to_string();
        assert!(error.contains("not both"), "{error}");
        let neither = "[[packages.a.credentials]]\nhost = \"h.example\"\nheader = \"x-key\"\n";
        assert!(policy(neither).is_err());
    }

    #[test]
    fn a_credential_header_must_be_a_lower_case_non_connection_name() {
        for header in ["Authorization", "x key", "", "host", "content-length"] {
            let text = format!(
                "[[packages.a.credentials]]\nhost = \"h.example\"\nheader = \"{header}\"\nvalue_env = \"K\"\n"
            );
            assert!(policy(&text).is_err(), "{header:?} was accepted");
        }
    }

    #[test]
    fn a_credential_for_a_wildcard_is_refused() {
        let text = "[[packages.a.credentials]]\nhost = \"*.h.example\"\nheader = \"x-key\"\nvalue_env = \"K\"\n";
        assert!(policy(text).is_err());
    }

    #[test]
    fn a_file_secret_is_read_when_used_with_its_prefix_and_without_its_line_break() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "s3cr3t\n").unwrap();
        let text = "[[packages.a.credentials]]\nhost = \"h.example:8443\"\nheader = \"authorization\"\nvalue_file = \"token\"\nprefix = \"Bearer \"\n";
        let policy = Policy::from_toml(text, dir.path()).unwrap();
        let a = policy.for_package("a", &[]).unwrap();
        let injected = a.credentials_for(&name("h.example"), 8443).unwrap();
        assert_eq!(injected.len(), 1);
        assert_eq!(injected[0].name, "authorization");
        assert_eq!(injected[0].value.expose(), "Bearer s3cr3t");
        assert!(a
            .credentials_for(&name("h.example"), 443)
            .unwrap()
            .is_empty());
        assert!(a
            .credentials_for(&name("x.example"), 8443)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_missing_or_empty_secret_is_unavailable_naming_host_and_header() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty"), "\n").unwrap();
        let text = r#"
[[packages.a.credentials]]
host = "env.example"
header = "x-api-key"
value_env = "HAKO_TEST_POLICY_SURELY_UNSET_VARIABLE"
[[packages.a.credentials]]
host = "empty.example"
header = "x-api-key"
value_file = "empty"
[[packages.a.credentials]]
host = "gone.example"
header = "x-api-key"
value_file = "missing"
"#;
        let a = Policy::from_toml(text, dir.path())
            .unwrap()
            .for_package("a", &[])
            .unwrap();
        for host in ["env.example", "empty.example", "gone.example"] {
            let error = a.credentials_for(&name(host), 443).unwrap_err();
            assert_eq!(error.kind, ErrorKind::CredentialUnavailable);
            assert!(error.message.contains(host), "{}", error.message);
            assert!(error.message.contains("x-api-key"), "{}", error.message);
        }
    }

    #[test]
    fn a_secret_never_appears_in_debug_or_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "hunter2-very-secret").unwrap();
        std::fs::write(dir.path().join("bad"), "hunter2-very-secret\r\nx").unwrap();
        let text = r#"
[[packages.a.credentials]]
host = "h.example"
header = "authorization"
value_file = "token"
prefix = "Token "
[[packages.a.credentials]]
host = "bad.example"
header = "authorization"
value_file = "bad"
"#;
        let a = Policy::from_toml(text, dir.path())
            .unwrap()
            .for_package("a", &[])
            .unwrap();
        let injected = a.credentials_for(&name("h.example"), 443).unwrap();
        let error = a.credentials_for(&name("bad.example"), 443).unwrap_err();
        for shown in [
            format!("{injected:?}"),
            format!("{:?}", injected[0].value),
            format!("{a:?}"),
            format!("{error:?}"),
            error.to_string(),
        ] {
            assert!(!shown.contains("hunter2"), "secret shown in: {shown}");
        }
        assert!(format!("{injected:?}").contains("[redacted]"));
    }

    #[test]
    fn guest_set_credential_headers_are_recognised() {
        let text = "[[packages.a.credentials]]\nhost = \"h.example\"\nheader = \"x-api-key\"\nvalue_env = \"K\"\n";
        let a = policy(text).unwrap().for_package("a", &[]).unwrap();
        for header in [
            "authorization",
            "proxy-authorization",
            "cookie",
            "x-api-key",
        ] {
            assert!(a.is_credential_header(header), "{header}");
        }
        assert!(!a.is_credential_header("accept"));
    }

    #[test]
    fn trust_private_takes_names_only() {
        assert!(policy("[packages.a]\ntrust_private = [\"127.0.0.1\"]\n").is_err());
        let p = policy("[packages.a]\ntrust_private = [\"Intranet.Example.\"]\n").unwrap();
        assert_eq!(
            p.for_package("a", &[]).unwrap().trust_private,
            vec!["intranet.example".to_string()]
        );
    }

    #[test]
    fn a_policy_file_reads_relative_paths_against_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("conf")).unwrap();
        std::fs::write(dir.path().join("conf/key"), "from-file").unwrap();
        let file = dir.path().join("conf/policy.toml");
        std::fs::write(
            &file,
            "[tls]\nextra_ca_files = [\"ca.pem\"]\n\
             [[packages.a.credentials]]\nhost = \"h.example\"\nheader = \"x-key\"\nvalue_file = \"key\"\n",
        )
        .unwrap();
        let policy = Policy::from_file(&file).unwrap();
        assert_eq!(
            policy.tls.extra_ca_files,
            vec![dir.path().join("conf/ca.pem")]
        );
        assert_eq!(policy.package_names().collect::<Vec<_>>(), vec!["a"]);
        let a = policy.for_package("a", &[]).unwrap();
        let injected = a.credentials_for(&name("h.example"), 443).unwrap();
        assert_eq!(injected[0].value.expose(), "from-file");
    }

    #[test]
    fn a_missing_policy_file_is_a_read_error_naming_it() {
        let error = Policy::from_file(Path::new("does-not-exist/policy.toml")).unwrap_err();
        assert!(matches!(error, PolicyError::Read { .. }));
        assert!(error.to_string().contains("policy.toml"));
    }
}
