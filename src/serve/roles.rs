//! Who may do what on `hako serve`: the tokens it knows and the role each gives.
//!
//! - An **admin** token (`--admin-token`, `HAKO_ADMIN_TOKEN`, or `role = "admin"` in the tokens
//!   file) may use every route: uploads (`POST /v1/packages`) and `/metrics` are admin's alone.
//! - An **agent** token (`--token`, `HAKO_TOKEN`, or `role = "agent"`) may use the MCP
//!   endpoints, calls and the listing, for every package or, from the tokens file, only for
//!   the packages its `packages` names or globs match (`*` matches any run of characters).
//!   The listing shows an agent only the packages it may use.
//!
//! When no token is configured at all, every route is open (the server then listens on
//! loopback only, see [`super::run_http`]). Otherwise a request without a token, or with one
//! the server does not know, is 401; a known token on a route its role does not cover is 403.
//! `/healthz` needs no token.
//!
//! Tokens are compared in constant time: the token a request carries and every configured one
//! are compared as SHA-256 digests, over all configured tokens, so neither the time taken nor
//! its length tells anything of a token.
//!
//! The tokens file (`--tokens FILE`, TOML; unknown keys are an error that names them):
//!
//! ```toml
//! [[tokens]]
//! role = "agent"                    # or "admin"
//! value_env = "WEATHER_AGENT_TOKEN" # or value_file = "secrets/weather-agent" (relative to FILE)
//! packages = ["weather", "maps-*"]  # agents only; left out: every package
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::http::SecretSource;
use crate::package::manifest::MAX_NAME_CHARS;

/// What a token may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Every route.
    Admin,
    /// The MCP endpoints, calls and listing of the packages in scope.
    Agent(Scope),
}

/// The packages an agent token may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Every,
    /// Names or globs (`*`: any run of characters).
    Only(Vec<String>),
}

impl Scope {
    fn covers(&self, package: &str) -> bool {
        match self {
            Scope::Every => true,
            Scope::Only(patterns) => patterns.iter().any(|pattern| glob(pattern, package)),
        }
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Who a request comes from, once its token is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller<'a> {
    /// No token is configured: every route is open.
    Anyone,
    Admin,
    Agent(&'a Scope),
}

impl Caller<'_> {
    /// The caller's role, as the access record names it.
    pub fn role(&self) -> &'static str {
        match self {
            Caller::Anyone => "anyone",
            Caller::Admin => "admin",
            Caller::Agent(_) => "agent",
        }
    }

    /// Whether the caller may upload packages and read the metrics.
    pub fn is_admin(&self) -> bool {
        matches!(self, Caller::Anyone | Caller::Admin)
    }

    /// Whether the caller may list, call and speak MCP with `package`.
    pub fn may_use(&self, package: &str) -> bool {
        match self {
            Caller::Anyone | Caller::Admin => true,
            Caller::Agent(scope) => scope.covers(package),
        }
    }
}

/// The tokens a server knows.
#[derive(Clone, Default)]
pub struct Tokens {
    entries: Vec<(Digest32, Role)>,
}

type Digest32 = [u8; 32];

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let roles: Vec<&Role> = self.entries.iter().map(|(_, role)| role).collect();
        f.debug_struct("Tokens").field("roles", &roles).finish()
    }
}

/// Why the tokens could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokensError(String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    role: RoleName,
    value_env: Option<String>,
    value_file: Option<PathBuf>,
    packages: Option<Vec<String>>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RoleName {
    Admin,
    Agent,
}

impl Tokens {
    /// No token: every route open.
    pub fn none() -> Self {
        Self::default()
    }

    /// The tokens of the command line (an agent token for every package, an admin token) and
    /// of a tokens file.
    pub fn new(
        agent: Option<&str>,
        admin: Option<&str>,
        file: Option<&Path>,
    ) -> Result<Self, TokensError> {
        let mut tokens = Tokens::none();
        if let Some(token) = agent {
            tokens
                .add(token, Role::Agent(Scope::Every))
                .map_err(|why| TokensError(format!("--token: {why}")))?;
        }
        if let Some(token) = admin {
            tokens
                .add(token, Role::Admin)
                .map_err(|why| TokensError(format!("--admin-token: {why}")))?;
        }
        if let Some(path) = file {
            tokens.add_file(path)?;
        }
        Ok(tokens)
    }

    /// Whether any token is configured (and so every route but `/healthz` needs one).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn add(&mut self, token: &str, role: Role) -> Result<(), &'static str> {
        if token.is_empty() {
            return Err("the token is empty");
        }
        let digest: Digest32 = Sha256::digest(token.as_bytes()).into();
        if self.entries.iter().any(|(known, _)| *known == digest) {
            return Err("the same token is configured twice; each token has one role");
        }
        self.entries.push((digest, role));
        Ok(())
    }

    fn add_file(&mut self, path: &Path) -> Result<(), TokensError> {
        let fail =
            |message: String| TokensError(format!("the tokens file {}: {message}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|err| fail(err.to_string()))?;
        let file: TokensFile = toml::from_str(&text).map_err(|err| fail(err.to_string()))?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        for (index, entry) in file.tokens.into_iter().enumerate() {
            let at = |message: String| fail(format!("[[tokens]] entry {}: {message}", index + 1));
            let source = SecretSource::from_fields(entry.value_env, entry.value_file, base_dir)
                .map_err(at)?;
            let value = source
                .read()
                .map_err(|why| at(format!("the token is not available: {why}")))?;
            let role = match (entry.role, entry.packages) {
                (RoleName::Admin, None) => Role::Admin,
                (RoleName::Admin, Some(_)) => {
                    return Err(at(
                        "an admin token may use every package; `packages` is for agent tokens"
                            .into(),
                    ))
                }
                (RoleName::Agent, None) => Role::Agent(Scope::Every),
                (RoleName::Agent, Some(patterns)) => {
                    if let Some(bad) = patterns.iter().find(|p| !is_pattern(p)) {
                        return Err(at(format!(
                            "package {bad:?} is neither a package name nor a glob of one \
                             (a-z, 0-9, _, - and *)"
                        )));
                    }
                    Role::Agent(Scope::Only(patterns))
                }
            };
            self.add(&value, role).map_err(|why| at(why.into()))?;
        }
        Ok(())
    }

    /// Who carries `authorization` (the request's `Authorization` header, if any): `None` when
    /// a token is needed and this is not a known one.
    pub fn caller(&self, authorization: Option<&[u8]>) -> Option<Caller<'_>> {
        if self.entries.is_empty() {
            return Some(Caller::Anyone);
        }
        let given = authorization?.strip_prefix(b"Bearer ")?;
        let digest: Digest32 = Sha256::digest(given).into();
        // Every entry is compared, and each comparison runs over all 32 bytes.
        let mut found = None;
        for (known, role) in &self.entries {
            let difference = known
                .iter()
                .zip(&digest)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if difference == 0 {
                found = Some(role);
            }
        }
        found.map(|role| match role {
            Role::Admin => Caller::Admin,
            Role::Agent(scope) => Caller::Agent(scope),
        })
    }
}

fn is_pattern(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern.len() <= MAX_NAME_CHARS
        && pattern
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> Vec<u8> {
        format!("Bearer {token}").into_bytes()
    }

    #[test]
    fn globs_match_runs_of_characters() {
        for (pattern, name, matches) in [
            ("weather", "weather", true),
            ("weather", "weather2", false),
            ("maps-*", "maps-eu", true),
            ("maps-*", "maps-", true),
            ("maps-*", "map", false),
            ("*-eu", "maps-eu", true),
            ("*-eu", "maps-us", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("*", "anything", true),
        ] {
            assert_eq!(glob(pattern, name), matches, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn no_token_configured_opens_every_route_and_one_closes_them() {
        let open = Tokens::none();
        assert_eq!(open.caller(None), Some(Caller::Anyone));
        let closed = Tokens::new(Some("agent-secret"), None, None).unwrap();
        assert_eq!(closed.caller(None), None);
        assert_eq!(closed.caller(Some(b"Bearer wrong")), None);
        assert_eq!(
            closed.caller(Some(b"agent-secret")),
            None,
            "Bearer is required"
        );
        let agent = closed.caller(Some(&bearer("agent-secret"))).unwrap();
        assert!(!agent.is_admin());
        assert!(agent.may_use("anything"));
    }

    #[test]
    fn the_tokens_file_gives_roles_and_scopes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("weather"), "weather-secret\n").unwrap();
        std::fs::write(dir.path().join("admin"), "admin-secret").unwrap();
        std::fs::write(
            dir.path().join("tokens.toml"),
            r#"
[[tokens]]
role = "agent"
value_file = "weather"
packages = ["weather", "maps-*"]

[[tokens]]
role = "admin"
value_file = "admin"
"#,
        )
        .unwrap();
        let tokens = Tokens::new(None, None, Some(&dir.path().join("tokens.toml"))).unwrap();
        let agent = tokens.caller(Some(&bearer("weather-secret"))).unwrap();
        assert!(agent.may_use("weather") && agent.may_use("maps-eu"));
        assert!(!agent.may_use("greet") && !agent.is_admin());
        let admin = tokens.caller(Some(&bearer("admin-secret"))).unwrap();
        assert!(admin.is_admin() && admin.may_use("greet"));
        let shown = format!("{tokens:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn a_bad_tokens_file_is_refused_naming_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t"), "same").unwrap();
        for (text, expected) in [
            ("[[tokens]]\nrole = \"agent\"\nvalue_file = \"t\"\nscope = 1\n", "unknown field `scope`"),
            ("[[tokens]]\nrole = \"root\"\nvalue_file = \"t\"\n", "unknown variant `root`"),
            ("[[tokens]]\nrole = \"agent\"\n", "entry 1: set value_env or value_file"),
            (
                "[[tokens]]\nrole = \"admin\"\nvalue_file = \"t\"\npackages = [\"a\"]\n",
                "`packages` is for agent tokens",
            ),
            (
                "[[tokens]]\nrole = \"agent\"\nvalue_file = \"t\"\npackages = [\"A/B\"]\n",
                "\"A/B\" is neither a package name nor a glob",
            ),
            ("[[tokens]]\nrole = \"agent\"\nvalue_file = \"missing\"\n", "not available"),
            (
                "[[tokens]]\nrole = \"agent\"\nvalue_file = \"t\"\n[[tokens]]\nrole = \"admin\"\nvalue_file = \"t\"\n",
                "entry 2: the same token is configured twice",
            ),
        ] {
            let path = dir.path().join("tokens.toml");
            std::fs::write(&path, text).unwrap();
            let error = Tokens::new(None, None, Some(&path)).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
            assert!(!error.contains("same\""), "no secret in {error}");
        }
        assert!(Tokens::new(Some(""), None, None).is_err());
        assert!(Tokens::new(Some("x"), Some("x"), None).is_err());
    }
}
