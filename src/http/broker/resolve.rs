//! Where a request may connect: the [`Resolve`] hook that turns a name into addresses (the
//! system resolver by default, a fixed map in tests), the vetting of every address against the
//! forbidden ranges, and [`VettedAddrs`], the table the connector reads so that it connects
//! only to the addresses vetted for the request — DNS is asked at most once per hop (a
//! [`DnsCache`] may reuse a recent answer), by the broker, never again by the connector, so a
//! rebinding answer cannot slip past the check.
//!
//! It does not decide which names are allowed (the allowlist does) nor connect.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::client::legacy::connect::dns::Name;

use super::ranges;
use crate::http::answer::{ErrorKind, HttpError};
use crate::http::policy::PackagePolicy;
use crate::http::url::Host;

/// Turns a host name into addresses. Blocking: the broker calls it off the runtime's workers.
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `name` (lower case, no trailing dot); an empty list is a failure.
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>>;
}

/// The operating system's resolver (`getaddrinfo`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        Ok((name, 0u16)
            .to_socket_addrs()?
            .map(|addr| addr.ip())
            .collect())
    }
}

/// Fixed answers, for tests and for operators who pin names: unknown names do not resolve.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    names: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// A resolver that knows no name.
    pub fn new() -> StaticResolver {
        StaticResolver::default()
    }

    /// Answers `addrs` for `name`.
    pub fn with(mut self, name: &str, addrs: &[IpAddr]) -> StaticResolver {
        self.names.insert(name.to_ascii_lowercase(), addrs.to_vec());
        self
    }
}

impl Resolve for StaticResolver {
    fn resolve(&self, name: &str) -> io::Result<Vec<IpAddr>> {
        self.names
            .get(name)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{name} is not known")))
    }
}

/// Where one hop may go: its addresses, all vetted, and whether the name is trusted to be
/// private (which picks the connection pool it uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vetted {
    pub addrs: Vec<IpAddr>,
    pub trusted: bool,
}

/// The addresses of `name`, a `connection` error when it has none. Blocking.
pub fn lookup(resolver: &dyn Resolve, name: &str) -> Result<Vec<IpAddr>, HttpError> {
    let addrs = resolver.resolve(name).map_err(|error| {
        HttpError::new(
            ErrorKind::Connection,
            format!("{name} could not be resolved: {error}"),
        )
    })?;
    if addrs.is_empty() {
        return Err(HttpError::new(
            ErrorKind::Connection,
            format!("{name} resolved to no address"),
        ));
    }
    Ok(addrs)
}

/// Vets `addrs`, where `host` resolved to (or its literal address), against the ranges and
/// the policy's `trust_private`.
pub fn judge(policy: &PackagePolicy, host: &Host, addrs: Vec<IpAddr>) -> Result<Vetted, HttpError> {
    let name = match host {
        Host::Name(name) => Some(name.as_str()),
        Host::Ip(_) => None,
    };
    let trusted = name.is_some_and(|name| policy.trust_private.iter().any(|t| t == name));
    for ip in &addrs {
        if let Some(range) = ranges::forbidden(*ip) {
            if trusted {
                tracing::warn!(
                    host = %host,
                    address = %ip,
                    range,
                    "trust_private: connecting to a forbidden range because the policy trusts this name"
                );
                continue;
            }
            let how = match name {
                Some(_) => format!("{host} resolves to {ip}"),
                None => format!("{ip}"),
            };
            return Err(HttpError::new(
                ErrorKind::ForbiddenDestination,
                format!("{how}, a {range} address; requests may not reach it"),
            ));
        }
    }
    Ok(Vetted { addrs, trusted })
}

/// The resolver's answers, kept for a short while so that a busy destination is not looked
/// up on every request. Only raw answers are kept: every request still vets them against its
/// own policy, and connects only to what it vetted. Failures are not kept.
#[derive(Debug)]
pub struct DnsCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, (Instant, Vec<IpAddr>)>>,
}

/// The most names a [`DnsCache`] holds before it starts over.
const CACHE_NAMES: usize = 4096;

impl DnsCache {
    /// A cache keeping answers for `ttl`.
    pub fn new(ttl: Duration) -> DnsCache {
        DnsCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The answer for `name`, while it is fresh.
    pub fn get(&self, name: &str) -> Option<Vec<IpAddr>> {
        let entries = self.lock();
        let (at, addrs) = entries.get(name)?;
        (at.elapsed() < self.ttl).then(|| addrs.clone())
    }

    /// Keeps `addrs` as the answer for `name`.
    pub fn put(&self, name: &str, addrs: &[IpAddr]) {
        let mut entries = self.lock();
        if entries.len() >= CACHE_NAMES {
            entries.clear();
        }
        entries.insert(name.to_string(), (Instant::now(), addrs.to_vec()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Vec<IpAddr>)>> {
        self.entries
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// The addresses vetted most recently for each name, read by the connector in place of DNS.
/// One table per connection pool: a pool for untrusted names only ever holds public
/// addresses.
#[derive(Debug, Clone, Default)]
pub struct VettedAddrs {
    table: Arc<Mutex<HashMap<String, Vec<IpAddr>>>>,
}

impl VettedAddrs {
    /// Records `addrs` as where `name` may be reached now.
    pub fn record(&self, name: &str, addrs: &[IpAddr]) {
        self.lock().insert(name.to_string(), addrs.to_vec());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<IpAddr>>> {
        self.table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

impl tower_service::Service<Name> for VettedAddrs {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        // Port 0: the connector puts the URL's port in.
        let found = self.lock().get(name.as_str()).map(|addrs| {
            addrs
                .iter()
                .map(|ip| SocketAddr::new(*ip, 0))
                .collect::<Vec<_>>()
                .into_iter()
        });
        let name = name.as_str().to_string();
        Box::pin(async move {
            found.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{name} was not vetted before connecting"),
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::policy::Policy;
    use tower_service::Service;

    fn policy(trust: &str) -> PackagePolicy {
        let text = format!("[packages.p]\ntrust_private = [{trust}]\n");
        Policy::from_toml(&text, std::path::Path::new("."))
            .unwrap()
            .for_package("p", &[])
            .unwrap()
    }

    /// What the broker does for one hop, minus the cache: look up once, then judge.
    fn vet(
        resolver: &dyn Resolve,
        policy: &PackagePolicy,
        host: &Host,
    ) -> Result<Vetted, HttpError> {
        let addrs = match host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => lookup(resolver, name)?,
        };
        judge(policy, host, addrs)
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_name_with_one_forbidden_address_among_public_ones_is_forbidden() {
        let resolver = StaticResolver::new().with("mixed.test", &[ip("1.1.1.1"), ip("10.0.0.1")]);
        let error = vet(&resolver, &policy(""), &Host::Name("mixed.test".into())).unwrap_err();
        assert_eq!(error.kind, ErrorKind::ForbiddenDestination);
        assert!(error.message.contains("10.0.0.1") && error.message.contains("private"));
    }

    #[test]
    fn public_addresses_pass_untrusted() {
        let resolver = StaticResolver::new().with("pub.test", &[ip("1.1.1.1"), ip("2606:4700::1")]);
        let vetted = vet(&resolver, &policy(""), &Host::Name("pub.test".into())).unwrap();
        assert_eq!(vetted.addrs.len(), 2);
        assert!(!vetted.trusted);
    }

    #[test]
    fn a_trusted_name_may_be_private_but_a_literal_never_is() {
        let resolver = StaticResolver::new().with("db.test", &[ip("10.1.1.1")]);
        let vetted = vet(
            &resolver,
            &policy("\"db.test\""),
            &Host::Name("db.test".into()),
        )
        .unwrap();
        assert!(vetted.trusted);
        let literal = vet(&resolver, &policy("\"db.test\""), &Host::Ip(ip("10.1.1.1")));
        assert_eq!(literal.unwrap_err().kind, ErrorKind::ForbiddenDestination);
    }

    #[test]
    fn an_unknown_name_is_a_connection_error() {
        let error = vet(
            &StaticResolver::new(),
            &policy(""),
            &Host::Name("nx.test".into()),
        );
        assert_eq!(error.unwrap_err().kind, ErrorKind::Connection);
    }

    #[test]
    fn the_cache_answers_fresh_entries_only() {
        let cache = DnsCache::new(Duration::from_secs(60));
        assert_eq!(cache.get("a.test"), None);
        cache.put("a.test", &[ip("1.2.3.4")]);
        assert_eq!(cache.get("a.test"), Some(vec![ip("1.2.3.4")]));
        let stale = DnsCache::new(Duration::ZERO);
        stale.put("a.test", &[ip("1.2.3.4")]);
        assert_eq!(stale.get("a.test"), None);
    }

    #[test]
    fn the_connector_table_answers_only_vetted_names() {
        let mut table = VettedAddrs::default();
        table.record("a.test", &[ip("1.2.3.4")]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let found: Vec<_> = runtime
            .block_on(table.call("a.test".parse::<Name>().unwrap()))
            .unwrap()
            .collect();
        assert_eq!(found, vec![SocketAddr::new(ip("1.2.3.4"), 0)]);
        assert!(runtime
            .block_on(table.call("b.test".parse::<Name>().unwrap()))
            .is_err());
    }
}
