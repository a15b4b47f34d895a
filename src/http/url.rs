//! A small, strict parser for the `url` of a guest's request: `https://host[:port]/path?query`.
//! It owns what a destination is ([`Url`], [`Host`]) and refuses anything ambiguous rather than
//! guessing the way a browser would: other schemes, userinfo, non-ASCII or percent-encoded host
//! names (send the punycode form), IPv4 shorthands such as `127.1` or `0x7f.1`, unbracketed
//! IPv6, spaces, control characters and backslashes. The fragment is dropped, as HTTP never
//! sends it. It does not check a destination against any policy.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest host name DNS allows.
const MAX_NAME_LEN: usize = 253;

/// Where a request goes: a host name or an IP address literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name: lower case, without a trailing dot.
    Name(String),
    /// An address written literally in the URL.
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as it appears in a URL or a policy entry: a name (any case, an optional
    /// trailing dot), a dotted IPv4 address, or an IPv6 address in brackets (or bare, since
    /// here no port follows).
    pub fn parse(text: &str) -> Result<Host, String> {
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| format!("`{text}` opens a bracket it does not close"))?;
            return inner
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(IpAddr::V6(ip)))
                .map_err(|_| format!("`{inner}` is not an IPv6 address"));
        }
        if text.contains(':') {
            return text
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(IpAddr::V6(ip)))
                .map_err(|_| format!("`{text}` is not a host name or an IP address"));
        }
        let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
        if name.is_empty() {
            return Err("the host is empty".to_string());
        }
        if !name.is_ascii() {
            return Err(format!(
                "host `{text}` is not ASCII; write an internationalized name in its punycode (xn--) form"
            ));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(format!(
                "host `{text}` is longer than {MAX_NAME_LEN} characters"
            ));
        }
        for label in name.split('.') {
            if label.is_empty() {
                return Err(format!("host `{text}` has an empty label"));
            }
            if label.len() > 63 {
                return Err(format!(
                    "host `{text}` has a label longer than 63 characters"
                ));
            }
            if let Some(bad) = label
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
            {
                return Err(format!("host `{text}` contains `{bad}`"));
            }
        }
        // A name whose last label is numeric would be read as an IPv4 address by resolvers
        // and browsers alike; only the plain dotted form is accepted, so that a listed name
        // and the address actually reached can never disagree.
        let last = name.rsplit('.').next().unwrap_or_default();
        if last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x") {
            return name
                .parse::<Ipv4Addr>()
                .map(|ip| Host::Ip(IpAddr::V4(ip)))
                .map_err(|_| format!("host `{text}` is not a plain dotted IPv4 address"));
        }
        Ok(Host::Name(name))
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// Why a redirect's location gives no https URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    /// An absolute location with another scheme than https, lower case.
    Scheme(String),
    /// Not a URL the parser accepts, with the reason.
    Invalid(String),
}

/// A parsed `https` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: Host,
    /// The port, 443 when the URL names none.
    pub port: u16,
    /// The path and query as sent on the request line; `/` when the URL has no path.
    pub path_and_query: String,
}

impl Url {
    /// Parses `text`, which must be an absolute `https` URL.
    pub fn parse(text: &str) -> Result<Url, String> {
        if let Some(bad) = text.chars().find(|c| !c.is_ascii_graphic() || *c == '\\') {
            return Err(format!(
                "contains {bad:?}; spaces, control characters, backslashes and non-ASCII \
                 characters must be percent-encoded"
            ));
        }
        let (scheme, rest) = text
            .split_once(':')
            .ok_or_else(|| "is not an absolute URL; it must start with https://".to_string())?;
        if !scheme.eq_ignore_ascii_case("https") {
            return Err(format!("must use https, not `{scheme}`"));
        }
        let rest = rest
            .strip_prefix("//")
            .ok_or_else(|| "must start with https://".to_string())?;
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        if authority.contains('@') {
            return Err("must not carry a user name or password".to_string());
        }
        let (host_text, port) = split_port(authority)?;
        let host = Host::parse(host_text)?;
        let tail = tail.split('#').next().unwrap_or_default();
        let path_and_query = match tail.chars().next() {
            None => "/".to_string(),
            Some('?') => format!("/{tail}"),
            Some(_) => tail.to_string(),
        };
        Ok(Url {
            host,
            port,
            path_and_query,
        })
    }

    /// The URL a redirect's `location` leads to from this one: absolute (any scheme, so
    /// that the caller can refuse a non-https hop by its scheme), scheme-relative
    /// (`//host/path`), absolute-path (`/path`), query-only (`?q`) or path-relative.
    /// Dot segments are passed on as written. The `Err` is the scheme of an absolute
    /// location other than https, or the reason the location is not a URL.
    pub fn join(&self, location: &str) -> Result<Url, JoinError> {
        let location = location.trim();
        let scheme = location
            .split_once(':')
            .map(|(scheme, _)| scheme)
            .filter(|scheme| {
                !scheme.is_empty()
                    && scheme
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
            });
        let absolute = match scheme {
            Some(scheme) if !scheme.eq_ignore_ascii_case("https") => {
                return Err(JoinError::Scheme(scheme.to_ascii_lowercase()))
            }
            Some(_) => location.to_string(),
            None if location.starts_with("//") => format!("https:{location}"),
            None if location.starts_with('/') => {
                format!("https://{}{location}", self.authority())
            }
            None if location.starts_with('?') => {
                let path = self.path_and_query.split('?').next().unwrap_or("/");
                format!("https://{}{path}{location}", self.authority())
            }
            None => {
                let path = self.path_and_query.split('?').next().unwrap_or("/");
                let folder = &path[..path.rfind('/').map_or(0, |i| i + 1)];
                format!("https://{}{folder}{location}", self.authority())
            }
        };
        Url::parse(&absolute).map_err(JoinError::Invalid)
    }

    /// `host` or `host:port` when the port is not 443.
    pub fn authority(&self) -> String {
        if self.port == 443 {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "https://{}{}", self.authority(), self.path_and_query)
    }
}

/// Splits `host[:port]` (with `[v6]` hosts); the port defaults to 443.
pub(crate) fn split_port(authority: &str) -> Result<(&str, u16), String> {
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(close) => {
                let (host, after) = authority.split_at(close + 1);
                match after {
                    "" => (host, None),
                    _ => match after.strip_prefix(':') {
                        Some(port) => (host, Some(port)),
                        None => return Err(format!("`{authority}` has text after its address")),
                    },
                }
            }
            None => return Err(format!("`{authority}` opens a bracket it does not close")),
        }
    } else {
        match authority.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(format!("`{authority}`: write an IPv6 address in brackets"))
            }
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("has no host".to_string());
    }
    let port = match port {
        None => 443,
        Some(text) => parse_port(text).ok_or_else(|| format!("port `{text}` is not 1 to 65535"))?,
    };
    Ok((host, port))
}

fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|port| *port != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_url_parses_with_port_443_and_its_path() {
        let url = Url::parse("https://API.Example.com./orders?id=7#top").unwrap();
        assert_eq!(url.host, Host::Name("api.example.com".into()));
        assert_eq!(url.port, 443);
        assert_eq!(url.path_and_query, "/orders?id=7");
        assert_eq!(url.to_string(), "https://api.example.com/orders?id=7");
    }

    #[test]
    fn a_missing_path_becomes_slash() {
        assert_eq!(Url::parse("https://a.example").unwrap().path_and_query, "/");
        assert_eq!(
            Url::parse("https://a.example?q=1").unwrap().path_and_query,
            "/?q=1"
        );
    }

    #[test]
    fn ports_and_ip_literals_parse() {
        let url = Url::parse("https://[::1]:8443/x").unwrap();
        assert_eq!(url.host, Host::Ip("::1".parse().unwrap()));
        assert_eq!(url.port, 8443);
        assert_eq!(url.authority(), "[::1]:8443");
        let url = Url::parse("https://127.0.0.1:9000").unwrap();
        assert_eq!(url.host, Host::Ip("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn http_and_other_schemes_are_refused_naming_https() {
        assert!(Url::parse("http://a.example/")
            .unwrap_err()
            .contains("https"));
        assert!(Url::parse("ftp://a.example/")
            .unwrap_err()
            .contains("https"));
        assert!(Url::parse("a.example/x").unwrap_err().contains("https"));
    }

    #[test]
    fn ambiguous_urls_are_refused() {
        for bad in [
            "https://user:pw@a.example/",
            "https:///path",
            "https://a.example:0/",
            "https://a.example:99999/",
            "https://a.example:/",
            "https://::1/",
            "https://127.1/",
            "https://0x7f.0.0.1/",
            "https://a..example/",
            "https://a.example/with space",
            "https://a.example\\@b.example/",
            "https://exämple.com/",
            "https://a%2eexample/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn redirect_locations_join_in_every_form() {
        let base = Url::parse("https://a.example:8443/x/y?q=1").unwrap();
        let join = |location: &str| base.join(location).unwrap().to_string();
        assert_eq!(join("https://b.example/z"), "https://b.example/z");
        assert_eq!(join("//b.example:9/z"), "https://b.example:9/z");
        assert_eq!(join("/top"), "https://a.example:8443/top");
        assert_eq!(join("?r=2"), "https://a.example:8443/x/y?r=2");
        assert_eq!(join("next#frag"), "https://a.example:8443/x/next");
    }

    #[test]
    fn a_redirect_to_another_scheme_names_it() {
        let base = Url::parse("https://a.example/").unwrap();
        assert_eq!(
            base.join("http://a.example/"),
            Err(JoinError::Scheme("http".into()))
        );
        assert!(matches!(
            base.join("https://user@a.example/"),
            Err(JoinError::Invalid(_))
        ));
    }
}
