//! Who may address the server: the names a request's `Host` may give, and the web origins
//! whose pages may call it.
//!
//! The `Host` check stops DNS rebinding. A web page on a name its attacker controls can point
//! that name at 127.0.0.1 once the page has loaded; the browser then sends the page's own
//! requests to a loopback `hako serve`, same-origin, with no `Origin` header to refuse, and
//! hands the page every answer. Those requests still carry the attacker's name in `Host`. So a
//! server on a loopback address answers only requests whose `Host` (and absolute request
//! target, if any) names it: `localhost`, `127.0.0.1`, `[::1]`, the address it is bound to, or
//! a name the operator adds (`--allow-host`); any port, since a port forward may renumber it.
//! Others get 421. A server bound elsewhere needs tokens (a page cannot know one), and checks
//! `Host` only when the operator names hosts: then the bound address and those names.
//!
//! The `Origin` check: a request that carries an `Origin` must come from a loopback origin or
//! one the operator allows (`--allow-origin`), else 403.
//!
//! What this file does not do: authenticate (tokens are [`super::roles`]) or route.

use std::net::IpAddr;

use hyper::body::Incoming;
use hyper::header;
use hyper::{Request, Response, StatusCode, Version};

use super::response::{problem, Body};

/// The names a server answers to.
#[derive(Debug, Clone)]
pub struct Hosts {
    /// Whether `Host` is checked at all.
    checked: bool,
    /// Lowercase host names and addresses (IPv6 without brackets).
    names: Vec<String>,
}

impl Hosts {
    /// The names of a server bound to `bound`, with the operator's `allowed` ones.
    pub fn new(bound: IpAddr, allowed: &[String]) -> Self {
        let mut names: Vec<String> = allowed.iter().map(|name| normalized(name)).collect();
        let checked = bound.is_loopback() || !names.is_empty();
        if bound.is_loopback() {
            names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
        }
        names.push(bound.to_string());
        Self { checked, names }
    }

    /// Whether `authority` (a `Host` value: a name or address, and perhaps a port) names this
    /// server. Every request asks, so it allocates nothing.
    pub fn allows(&self, authority: &str) -> bool {
        !self.checked
            || host_of(authority).is_some_and(|host| {
                self.names
                    .iter()
                    .any(|name| name.eq_ignore_ascii_case(host))
            })
    }

    /// The answer to a request that does not address this server by one of its names: 421,
    /// or 400 for a `Host` that HTTP/1.1 forbids (none, or more than one).
    pub fn refusal(&self, request: &Request<Incoming>) -> Option<Response<Body>> {
        if !self.checked {
            return None;
        }
        let mut given = request.headers().get_all(header::HOST).iter();
        let host = given.next();
        if given.next().is_some() {
            return Some(problem(
                StatusCode::BAD_REQUEST,
                "the request has more than one Host header (RFC 9112, section 3.2)",
            ));
        }
        let host = match host.map(|value| value.to_str()) {
            Some(Ok(host)) => Some(host),
            Some(Err(_)) => return Some(misdirected("a Host that is not text")),
            None if request.version() == Version::HTTP_10 => None,
            None if request.uri().authority().is_some() => None,
            None => {
                return Some(problem(
                    StatusCode::BAD_REQUEST,
                    "an HTTP/1.1 request needs a Host header (RFC 9112, section 3.2)",
                ))
            }
        };
        let target = request
            .uri()
            .authority()
            .map(|authority| authority.as_str());
        host.into_iter()
            .chain(target)
            .find(|named| !self.allows(named))
            .map(|named| misdirected(&format!("{named:?}")))
    }
}

/// 421 for a request addressed to a name that is not this server's.
fn misdirected(named: &str) -> Response<Body> {
    problem(
        StatusCode::MISDIRECTED_REQUEST,
        &format!(
            "this server does not answer to {named}: address it as localhost, by its address, \
             or by a name given to hako serve --allow-host"
        ),
    )
}

/// A name for `--allow-host`: a host name or address (IPv6 in brackets), without port,
/// scheme or path.
pub fn parse_allowed_host(name: &str) -> Result<String, String> {
    let has_port = match name.strip_prefix('[') {
        Some(v6) => !v6.ends_with(']'),
        None => name.contains(':'),
    };
    match host_of(name) {
        Some(host) if !has_port && !name.contains(['/', ' ', '*']) => Ok(host.to_ascii_lowercase()),
        _ => Err(format!(
            "{name:?} is not a host name or address (like hako.example, 10.0.0.5 or [fd00::5]: \
             no port, scheme or path)"
        )),
    }
}

/// A name as it is compared: lowercase, without a final dot or IPv6 brackets.
fn normalized(name: &str) -> String {
    let name = name.trim();
    let name = name
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(name);
    without_final_dot(name).to_ascii_lowercase()
}

fn without_final_dot(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}

/// The host of an authority (`name`, `name:port`, `[v6]`, `[v6]:port`), without brackets or a
/// final dot, in the case it was given; `None` when it is not one (user info, an empty name, a
/// port that is not digits).
fn host_of(authority: &str) -> Option<&str> {
    if authority.contains('@') {
        return None;
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, rest) = v6.split_once(']')?;
            if !host.contains(':') {
                return None;
            }
            let port = match rest {
                "" => None,
                rest => Some(rest.strip_prefix(':')?),
            };
            (host, port)
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if port.is_some_and(|port| port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let host = without_final_dot(host);
    (!host.is_empty()).then_some(host)
}

/// Whether an `Origin` header value names this machine: `http(s)://localhost`,
/// `127.0.0.1` or `[::1]`, any port.
pub fn is_local_origin(origin: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .and_then(host_of)
        .is_some_and(|host| {
            ["localhost", "127.0.0.1", "::1"]
                .iter()
                .any(|local| local.eq_ignore_ascii_case(host))
        })
}

/// Whether a page of `origin` may call a server that allows `allowed` beside loopback ones.
pub fn origin_allowed(allowed: &[String], origin: &str) -> bool {
    is_local_origin(origin)
        || allowed
            .iter()
            .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(allowed: &[&str]) -> Hosts {
        let allowed: Vec<String> = allowed.iter().map(|name| name.to_string()).collect();
        Hosts::new(IpAddr::from([127, 0, 0, 1]), &allowed)
    }

    #[test]
    fn a_loopback_server_answers_to_its_own_names_only() {
        let hosts = loopback(&["hako.internal"]);
        for named in [
            "localhost",
            "localhost:7340",
            "LOCALHOST:1",
            "localhost.:7340",
            "127.0.0.1:7340",
            "[::1]:7340",
            "[::1]",
            "hako.internal:80",
            "Hako.Internal",
        ] {
            assert!(hosts.allows(named), "{named}");
        }
        for named in [
            "rebound.example:7340",
            "rebound.example",
            "localhost.rebound.example",
            "127.0.0.1.nip.io:7340",
            "127.0.0.2:7340",
            "user@localhost:7340",
            "localhost:73x0",
            "localhost:",
            "",
            ":7340",
            "[::2]:7340",
            "::1",
        ] {
            assert!(!hosts.allows(named), "{named}");
        }
    }

    #[test]
    fn a_server_bound_elsewhere_checks_only_when_names_are_given() {
        let any = Hosts::new(IpAddr::from([10, 0, 0, 5]), &[]);
        assert!(any.allows("rebound.example:7340"));
        let named = Hosts::new(IpAddr::from([10, 0, 0, 5]), &["hako.example".to_string()]);
        assert!(named.allows("hako.example:443"));
        assert!(named.allows("10.0.0.5:7340"));
        assert!(
            !named.allows("localhost:7340"),
            "localhost is no name of 10.0.0.5"
        );
        assert!(!named.allows("rebound.example:7340"));
    }

    #[test]
    fn allowed_hosts_are_bare_names_or_addresses() {
        assert_eq!(parse_allowed_host("Hako.Example").unwrap(), "hako.example");
        assert_eq!(parse_allowed_host("[fd00::5]").unwrap(), "fd00::5");
        assert_eq!(parse_allowed_host("10.0.0.5").unwrap(), "10.0.0.5");
        for bad in [
            "",
            "hako.example:80",
            "http://hako.example",
            "a/b",
            "*",
            "fd00::5",
            "u@h",
        ] {
            assert!(parse_allowed_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_bound_address_is_a_name() {
        let hosts = Hosts::new(IpAddr::from([127, 0, 0, 2]), &[]);
        assert!(hosts.allows("127.0.0.2:7340"));
        let v6 = Hosts::new("::1".parse().unwrap(), &[]);
        assert!(v6.allows("[::1]:7340") && v6.allows("localhost"));
    }

    #[test]
    fn loopback_origins_are_local_and_others_are_not() {
        for origin in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1:8443",
            "http://[::1]:8080",
            "http://[::1]",
            "HTTP://LOCALHOST".to_ascii_lowercase().as_str(),
        ] {
            assert!(is_local_origin(origin), "{origin}");
        }
        for origin in [
            "http://example.com",
            "http://localhost.example.com",
            "http://127.0.0.1.nip.io",
            "null",
            "file://localhost",
            "http://localhost:80x",
            "http://[::2]:80",
            "http://[::1]x",
        ] {
            assert!(!is_local_origin(origin), "{origin}");
        }
    }
}
