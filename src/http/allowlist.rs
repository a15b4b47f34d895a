//! Which destinations a function may reach: the operator's allowlist of exact host names,
//! `*.suffix` wildcards and IP literals, each for one port. It owns the entry syntax and the
//! matching; it does not resolve names or vet addresses (the broker does, after this check).
//!
//! An entry without a port allows 443 only, since a guest can only speak https. A wildcard
//! `*.example.com` matches any name below `example.com` but not `example.com` itself. An IP
//! address is reached only when it is listed literally (`127.0.0.1:8443`, `[::1]:8443`); no
//! name entry ever matches an IP literal in a URL.

use std::net::IpAddr;

use super::url::{split_port, Host};

/// The pattern of one entry, without its port.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// Exactly this name.
    Exact(String),
    /// Any name ending in `.` followed by this suffix.
    Below(String),
    /// Exactly this address.
    Ip(IpAddr),
}

/// One allowlist or credential entry: `host`, `*.suffix` or an IP literal, and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    pattern: Pattern,
    port: u16,
}

impl HostPattern {
    /// Parses an entry such as `api.example.com`, `*.tiles.example:8443` or `[::1]:8443`.
    pub fn parse(entry: &str) -> Result<HostPattern, String> {
        let (host, port) = split_port(entry).map_err(|reason| format!("`{entry}` {reason}"))?;
        let pattern = match host.strip_prefix("*.") {
            Some(suffix) => match Host::parse(suffix)? {
                Host::Name(name) => Pattern::Below(name),
                Host::Ip(_) => {
                    return Err(format!("`{entry}`: a wildcard needs a name after `*.`"))
                }
            },
            None if host.contains('*') => {
                return Err(format!(
                    "`{entry}`: `*` may only stand alone as the first label, as in `*.example.com`"
                ))
            }
            None => match Host::parse(host)? {
                Host::Name(name) => Pattern::Exact(name),
                Host::Ip(ip) => Pattern::Ip(ip),
            },
        };
        Ok(HostPattern { pattern, port })
    }

    /// Whether the entry is a `*.suffix` wildcard.
    pub fn is_wildcard(&self) -> bool {
        matches!(self.pattern, Pattern::Below(_))
    }

    /// Whether `host` on `port` matches this entry.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        if port != self.port {
            return false;
        }
        match (&self.pattern, host) {
            (Pattern::Exact(listed), Host::Name(name)) => listed == name,
            (Pattern::Below(suffix), Host::Name(name)) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (Pattern::Ip(listed), Host::Ip(ip)) => listed == ip,
            _ => false,
        }
    }
}

/// The destinations one function may reach. Empty by default: nothing is reachable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<HostPattern>,
}

impl Allowlist {
    /// An allowlist of `entries`; the first invalid entry is the error.
    pub fn new<S: AsRef<str>>(entries: &[S]) -> Result<Allowlist, String> {
        let mut list = Allowlist::default();
        for entry in entries {
            list.push(entry.as_ref())?;
        }
        Ok(list)
    }

    /// Adds one entry.
    pub fn push(&mut self, entry: &str) -> Result<(), String> {
        self.entries.push(HostPattern::parse(entry)?);
        Ok(())
    }

    /// Adds every entry of `other`.
    pub fn extend(&mut self, other: &Allowlist) {
        self.entries.extend(other.entries.iter().cloned());
    }

    /// Whether the list has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `host` (a name in any case, with or without a trailing dot, or an IP literal,
    /// IPv6 with or without brackets) on `port` is allowed. A host that does not parse is not.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        Host::parse(host).is_ok_and(|host| self.allows_host(&host, port))
    }

    /// Whether an already parsed `host` on `port` is allowed.
    pub fn allows_host(&self, host: &Host, port: u16) -> bool {
        self.entries.iter().any(|entry| entry.matches(host, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::new(entries).unwrap()
    }

    #[test]
    fn exact_names_match_in_any_case_and_with_a_trailing_dot() {
        let allow = list(&["API.weather.example."]);
        assert!(allow.allows("api.weather.example", 443));
        assert!(allow.allows("Api.Weather.Example.", 443));
        assert!(!allow.allows("weather.example", 443));
        assert!(!allow.allows("x.api.weather.example", 443));
    }

    #[test]
    fn a_wildcard_matches_subdomains_but_not_its_suffix() {
        let allow = list(&["*.tiles.example"]);
        assert!(allow.allows("a.tiles.example", 443));
        assert!(allow.allows("b.a.tiles.example", 443));
        assert!(!allow.allows("tiles.example", 443));
        assert!(!allow.allows("eviltiles.example", 443));
    }

    #[test]
    fn an_entry_without_a_port_allows_443_only() {
        let allow = list(&["a.example", "localhost:8443"]);
        assert!(allow.allows("a.example", 443));
        assert!(!allow.allows("a.example", 8443));
        assert!(allow.allows("localhost", 8443));
        assert!(!allow.allows("localhost", 443));
    }

    #[test]
    fn ip_literals_match_only_when_listed_literally() {
        let allow = list(&["127.0.0.1:8443", "[::1]:8443", "localhost"]);
        assert!(allow.allows("127.0.0.1", 8443));
        assert!(allow.allows("[::1]", 8443));
        assert!(allow.allows("::1", 8443));
        assert!(!allow.allows("127.0.0.2", 8443));
        assert!(!allow.allows("127.0.0.1", 443));
        assert!(!list(&["localhost"]).allows("127.0.0.1", 443));
    }

    #[test]
    fn an_empty_list_allows_nothing() {
        assert!(!Allowlist::default().allows("a.example", 443));
    }

    #[test]
    fn invalid_entries_are_refused() {
        for bad in [
            "",
            "*",
            "*.",
            "a.*.example",
            "*example.com",
            "https://a.example",
            "a.example:0",
            "a.example:x",
            "::1",
            "[::1",
            "a b.example",
            "*.127.0.0.1",
            "user@a.example",
        ] {
            assert!(Allowlist::new(&[bad]).is_err(), "{bad:?} was accepted");
        }
    }
}
