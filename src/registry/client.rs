//! The HTTP side of the distribution protocol: requests to one registry with its credentials,
//! redirects, and every read bounded in bytes and time.
//!
//! Why hako speaks the protocol itself, over the hyper client the broker uses, rather than
//! through `oci-client`: that crate reads a manifest whole, whatever its size or speed, and
//! follows redirects by reqwest's policy (an `https` → `http` hop included). A pull here is
//! bounded at every step instead ([`Limits`]), since a registry may be hostile:
//!
//! - a response head, and every body frame, must come within [`Limits::read_timeout`], and the
//!   whole pull within [`Limits::pull_timeout`];
//! - a manifest, a token or an error body is read up to its bound and refused past it;
//! - a blob streams to disk through SHA-256, refused at the first byte past its descriptor's
//!   size or the pull's byte budget, and at its end unless size and digest both match;
//! - redirects: at most [`MAX_REDIRECTS`], never from `https` to `http`, and a hop to another
//!   host carries no credentials (storage back ends are sent pre-signed URLs).
//!
//! TLS is the default. Plain HTTP is used only for a loopback registry or one named with
//! `--insecure-registry`, and only after `https` failed to connect (as docker does). The trust
//! roots are the system's (`SSL_CERT_FILE` replaces them with a PEM file), and the CAs of
//! `--registry-ca` beside them.
//!
//! This module knows nothing of manifests' contents; [`super::pull`] and [`super::push`] do.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use sha2::{Digest as _, Sha256};
use tokio::io::AsyncWriteExt;

use super::auth::{Challenge, Credentials};
use super::reference::{Digest, Reference};
use super::RegistryError;
use crate::http::{Host, Secret};

/// The most redirects one request follows.
pub const MAX_REDIRECTS: usize = 5;
/// The largest token, error or upload answer read.
const MAX_SMALL_BODY_BYTES: u64 = 64 * 1024;

/// The bounds of one pull.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest manifest read (the distribution spec asks registries to take 4 MiB).
    pub max_manifest_bytes: u64,
    /// The most layers a manifest may list.
    pub max_layers: usize,
    /// The most bytes of blobs one pull reads, all blobs together.
    pub max_pull_bytes: u64,
    /// The longest a whole pull may take.
    pub pull_timeout: Duration,
    /// The longest the registry may send nothing: before a response's head, between two
    /// pieces of a body.
    pub read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_manifest_bytes: 4 * 1024 * 1024,
            max_layers: 16,
            // A module (64 MiB) and an assets layer that unpacks to at most 256 MiB.
            max_pull_bytes: 320 * 1024 * 1024,
            pull_timeout: Duration::from_secs(600),
            read_timeout: Duration::from_secs(30),
        }
    }
}

/// What a request is for, which decides the token asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    Pull,
    Push,
}

impl Access {
    fn actions(self) -> &'static str {
        match self {
            Access::Pull => "pull",
            Access::Push => "pull,push",
        }
    }
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client for the registries of one command or one upload.
pub struct Registry {
    client: HttpsClient,
    credentials: Credentials,
    /// Hosts that may be reached over plain HTTP besides loopback ones.
    insecure: Vec<String>,
    pub limits: Limits,
    /// The scheme that answered, by registry.
    schemes: Mutex<HashMap<String, &'static str>>,
    /// The `Authorization` value that was accepted, by registry, repository and access.
    authorizations: Mutex<HashMap<(String, String, Access), Secret>>,
}

/// A response whose head arrived, with the URL it came from.
pub struct Answer {
    pub response: Response<Incoming>,
    pub url: url::Url,
}

impl Registry {
    /// A client with the system's trust roots (or `SSL_CERT_FILE`'s) and the CAs of
    /// `ca_files`. Must be made inside a tokio runtime.
    pub fn new(
        credentials: Credentials,
        insecure: Vec<String>,
        ca_files: &[std::path::PathBuf],
        limits: Limits,
    ) -> Result<Registry, RegistryError> {
        let roots = crate::http::roots(ca_files)
            .map_err(|error| RegistryError::Setup(format!("trust roots: {error}")))?;
        let tls = crate::http::tls_config(roots)
            .map_err(|error| RegistryError::Setup(format!("TLS: {error}")))?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(limits.read_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Registry {
            client,
            credentials,
            insecure: insecure
                .into_iter()
                .map(|host| host.to_ascii_lowercase())
                .collect(),
            limits,
            schemes: Mutex::new(HashMap::new()),
            authorizations: Mutex::new(HashMap::new()),
        })
    }

    fn may_use_http(&self, reference: &Reference) -> bool {
        plain_http_allowed(reference, &self.insecure)
    }

    /// `scheme://registry/v2/repository/{path}`.
    fn url(&self, reference: &Reference, scheme: &str, path: &str) -> url::Url {
        let text = format!(
            "{scheme}://{}/v2/{}/{path}",
            reference.registry, reference.repository
        );
        url::Url::parse(&text).expect("a parsed reference makes a valid URL")
    }

    /// Sends a request for `path` below the repository, with credentials, retrying over plain
    /// HTTP where that is allowed and `https` did not connect, answering one challenge and
    /// following redirects (for GET and HEAD).
    pub async fn send(
        &self,
        reference: &Reference,
        access: Access,
        method: Method,
        path: &str,
        headers: &[(header::HeaderName, String)],
        body: Bytes,
    ) -> Result<Answer, RegistryError> {
        let known = self
            .schemes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&reference.registry)
            .copied();
        let schemes = match known {
            Some(scheme) => vec![scheme],
            None if self.may_use_http(reference) => vec!["https", "http"],
            None => vec!["https"],
        };
        let mut last = None;
        for scheme in &schemes {
            let url = self.url(reference, scheme, path);
            match self
                .send_to(
                    reference,
                    access,
                    method.clone(),
                    url,
                    headers,
                    body.clone(),
                )
                .await
            {
                Err(RegistryError::Unreachable { reason, .. })
                    if known.is_none() && *scheme == "https" && schemes.len() > 1 =>
                {
                    last = Some(reason);
                }
                answered => {
                    if answered.is_ok() {
                        self.schemes
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(reference.registry.clone(), scheme);
                    }
                    return answered;
                }
            }
        }
        Err(RegistryError::Unreachable {
            registry: reference.registry.clone(),
            reason: last.unwrap_or_default(),
        })
    }

    /// Sends a request to `url` (below the repository, or one a registry's answer gave, such
    /// as an upload's `Location`), with credentials, answering one challenge and following
    /// redirects (for GET and HEAD).
    pub async fn send_to(
        &self,
        reference: &Reference,
        access: Access,
        method: Method,
        mut url: url::Url,
        headers: &[(header::HeaderName, String)],
        body: Bytes,
    ) -> Result<Answer, RegistryError> {
        let key = (
            reference.registry.clone(),
            reference.repository.clone(),
            access,
        );
        let mut challenged = false;
        let mut redirects = 0;
        loop {
            // Credentials go to the registry itself, never to a host a redirect leads to.
            let same_host = is_registry(&url, reference);
            let authorization = same_host
                .then(|| {
                    self.authorizations
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&key)
                        .cloned()
                })
                .flatten();
            let response = self
                .request(
                    &method,
                    &url,
                    headers,
                    authorization.as_ref(),
                    body.clone(),
                    reference,
                )
                .await?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && same_host && !challenged {
                challenged = true;
                let challenge = response
                    .headers()
                    .get(header::WWW_AUTHENTICATE)
                    .and_then(|value| value.to_str().ok())
                    .and_then(Challenge::parse);
                let authorization = self.answer(reference, access, challenge).await?;
                self.authorizations
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone(), authorization);
                continue;
            }
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                let why = match self.credentials.login(&reference.registry) {
                    Some(login) => format!("the login of `{}` was refused", login.username),
                    None => self.credentials.missing(&reference.registry),
                };
                return Err(RegistryError::refused(
                    "oci.auth",
                    format!(
                        "{} answered {status} for {reference}: {why}",
                        reference.registry
                    ),
                ));
            }
            if status.is_redirection() && (method == Method::GET || method == Method::HEAD) {
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(RegistryError::refused(
                        "oci.redirect",
                        format!("{reference}: more than {MAX_REDIRECTS} redirects"),
                    ));
                }
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .ok_or_else(|| {
                        RegistryError::refused(
                            "oci.redirect",
                            format!("{reference}: a redirect with no Location"),
                        )
                    })?;
                let next = url.join(location).map_err(|error| {
                    RegistryError::refused(
                        "oci.redirect",
                        format!("{reference}: a redirect to an invalid location ({error})"),
                    )
                })?;
                if url.scheme() == "https" && next.scheme() != "https" {
                    return Err(RegistryError::refused(
                        "oci.redirect",
                        format!(
                            "{reference}: a redirect from https to {} ({}) is refused",
                            next.scheme(),
                            next.host_str().unwrap_or_default()
                        ),
                    ));
                }
                if next.scheme() != "https" && next.scheme() != "http" {
                    return Err(RegistryError::refused(
                        "oci.redirect",
                        format!("{reference}: a redirect to a {} URL", next.scheme()),
                    ));
                }
                url = next;
                continue;
            }
            return Ok(Answer { response, url });
        }
    }

    /// One request, its head awaited within the read timeout.
    async fn request(
        &self,
        method: &Method,
        url: &url::Url,
        headers: &[(header::HeaderName, String)],
        authorization: Option<&Secret>,
        body: Bytes,
        reference: &Reference,
    ) -> Result<Response<Incoming>, RegistryError> {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(url.as_str())
            .header(
                header::USER_AGENT,
                concat!("hako/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some(authorization) = authorization {
            let mut value = HeaderValue::from_str(authorization.expose()).map_err(|_| {
                RegistryError::refused("oci.auth", "the credentials are not a valid header value")
            })?;
            value.set_sensitive(true);
            request = request.header(header::AUTHORIZATION, value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|error| RegistryError::Setup(format!("request to {url}: {error}")))?;
        match tokio::time::timeout(self.limits.read_timeout, self.client.request(request)).await {
            Err(_) => Err(RegistryError::refused(
                "oci.timeout",
                format!(
                    "{reference}: {} sent no answer within {} s",
                    url.host_str().unwrap_or_default(),
                    self.limits.read_timeout.as_secs()
                ),
            )),
            Ok(Err(error)) => Err(RegistryError::Unreachable {
                registry: url_registry(url),
                reason: crate::error_chain(&error),
            }),
            Ok(Ok(response)) => Ok(response),
        }
    }

    /// The `Authorization` value that answers `challenge`.
    async fn answer(
        &self,
        reference: &Reference,
        access: Access,
        challenge: Option<Challenge>,
    ) -> Result<Secret, RegistryError> {
        let login = self.credentials.login(&reference.registry);
        match challenge {
            Some(Challenge::Basic) => login.map(|login| login.basic()).ok_or_else(|| {
                RegistryError::refused(
                    "oci.auth",
                    format!(
                        "{} asks for a login for {reference}: {}",
                        reference.registry,
                        self.credentials.missing(&reference.registry)
                    ),
                )
            }),
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let scope = match scope {
                    // The registry's scope for what was refused; a push needs both actions.
                    Some(scope) if access == Access::Pull => scope,
                    _ => format!("repository:{}:{}", reference.repository, access.actions()),
                };
                self.token(reference, &realm, service.as_deref(), &scope)
                    .await
                    .map(|token| Secret::new(format!("Bearer {}", token.expose())))
            }
            None => Err(RegistryError::refused(
                "oci.auth",
                format!(
                    "{} answered 401 for {reference} with no challenge hako answers (Basic or Bearer)",
                    reference.registry
                ),
            )),
        }
    }

    /// A token from the challenge's realm, asked with the login when there is one.
    async fn token(
        &self,
        reference: &Reference,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<Secret, RegistryError> {
        let mut url = url::Url::parse(realm).map_err(|error| {
            RegistryError::refused(
                "oci.auth",
                format!("{}'s token realm is not a URL: {error}", reference.registry),
            )
        })?;
        let plain_allowed =
            url.scheme() == "http" && self.may_use_http(reference) && is_registry(&url, reference);
        if url.scheme() != "https" && !plain_allowed {
            return Err(RegistryError::refused(
                "oci.auth",
                format!(
                    "{}'s token realm {} is not https; credentials go over TLS only",
                    reference.registry,
                    url.host_str().unwrap_or_default()
                ),
            ));
        }
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        let login = self.credentials.login(&reference.registry);
        let response = self
            .request(
                &Method::GET,
                &url,
                &[],
                login.map(|login| login.basic()).as_ref(),
                Bytes::new(),
                reference,
            )
            .await?;
        let status = response.status();
        let body = self
            .read_bounded(response, MAX_SMALL_BODY_BYTES, "oci.auth", reference)
            .await?;
        if !status.is_success() {
            let why = match login {
                Some(login) => format!("the login of `{}` was refused", login.username),
                None => self.credentials.missing(&reference.registry),
            };
            return Err(RegistryError::refused(
                "oci.auth",
                format!(
                    "the token service of {} answered {status}: {why}",
                    reference.registry
                ),
            ));
        }
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&body).map_err(|error| {
            RegistryError::refused(
                "oci.auth",
                format!(
                    "the token service of {} answered no token: {error}",
                    reference.registry
                ),
            )
        })?;
        token
            .token
            .or(token.access_token)
            .filter(|token| !token.is_empty())
            .map(Secret::new)
            .ok_or_else(|| {
                RegistryError::refused(
                    "oci.auth",
                    format!(
                        "the token service of {} answered no token",
                        reference.registry
                    ),
                )
            })
    }

    /// A GET of `path` below the repository: its whole body, at most `limit` bytes (refused by
    /// `rule` past them), and its content type. Any status but success is refused as
    /// [`Registry::unexpected`] says, naming `doing`.
    pub async fn get_whole(
        &self,
        reference: &Reference,
        path: &str,
        accept: Option<&str>,
        limit: u64,
        rule: &'static str,
        doing: &str,
    ) -> Result<(Bytes, Option<String>), RegistryError> {
        let headers: Vec<_> = accept
            .map(|accept| (header::ACCEPT, accept.to_string()))
            .into_iter()
            .collect();
        let answer = self
            .send(
                reference,
                Access::Pull,
                Method::GET,
                path,
                &headers,
                Bytes::new(),
            )
            .await?;
        if !answer.response.status().is_success() {
            return Err(self.unexpected(answer, reference, doing).await);
        }
        let content_type = answer
            .response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        let bytes = self
            .read_bounded(answer.response, limit, rule, reference)
            .await?;
        Ok((bytes, content_type))
    }

    /// [`Registry::get_whole`] of `kind/digest` (`manifests`, asked as image manifests, or
    /// `blobs`), refused by rule `oci.digest` unless its bytes are that digest's.
    pub async fn get_by_digest(
        &self,
        reference: &Reference,
        kind: &str,
        digest: &Digest,
        limit: u64,
        rule: &'static str,
        what: &str,
    ) -> Result<Bytes, RegistryError> {
        let path = format!("{kind}/{digest}");
        let doing = format!("reading {what} {digest}");
        let accept = (kind == "manifests").then_some(super::layout::IMAGE_MANIFEST);
        let (bytes, _) = self
            .get_whole(reference, &path, accept, limit, rule, &doing)
            .await?;
        if Digest::of(&bytes) != *digest {
            return Err(RegistryError::refused(
                "oci.digest",
                format!("{reference}: {what} {digest} does not match its digest"),
            ));
        }
        Ok(bytes)
    }

    /// A whole body of at most `limit` bytes, each piece within the read timeout; past the
    /// limit, refused by `rule` without reading on.
    pub async fn read_bounded(
        &self,
        response: Response<Incoming>,
        limit: u64,
        rule: &'static str,
        reference: &Reference,
    ) -> Result<Bytes, RegistryError> {
        if let Some(length) = content_length(response.headers()) {
            if length > limit {
                return Err(RegistryError::refused(
                    rule,
                    format!(
                        "{reference}: the registry sends {length} bytes; at most {limit} are read"
                    ),
                ));
            }
        }
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(frame) = self.next_frame(&mut body, reference).await? {
            if bytes.len() as u64 + frame.len() as u64 > limit {
                return Err(RegistryError::refused(
                    rule,
                    format!("{reference}: the registry sends more than {limit} bytes"),
                ));
            }
            bytes.extend_from_slice(&frame);
        }
        Ok(Bytes::from(bytes))
    }

    /// Streams a blob's body to `out`, checking it against `digest` and `size` as it comes,
    /// and charging it to `budget` (what is left of the pull's bytes).
    pub async fn stream_blob(
        &self,
        response: Response<Incoming>,
        digest: &Digest,
        size: u64,
        budget: &mut u64,
        out: &mut tokio::fs::File,
        reference: &Reference,
    ) -> Result<(), RegistryError> {
        let mut body = response.into_body();
        let mut hasher = Sha256::new();
        let mut seen = 0u64;
        while let Some(frame) = self.next_frame(&mut body, reference).await? {
            seen += frame.len() as u64;
            if seen > size {
                return Err(RegistryError::refused(
                    "oci.blob_size",
                    format!("{reference}: blob {digest} is longer than the {size} bytes its descriptor says"),
                ));
            }
            if frame.len() as u64 > *budget {
                return Err(RegistryError::refused(
                    "oci.pull_size",
                    format!(
                        "{reference}: the pull reads more than {} MiB of blobs",
                        self.limits.max_pull_bytes >> 20
                    ),
                ));
            }
            *budget -= frame.len() as u64;
            hasher.update(&frame);
            out.write_all(&frame)
                .await
                .map_err(|error| RegistryError::Io(format!("writing blob {digest}: {error}")))?;
        }
        if seen != size {
            return Err(RegistryError::refused(
                "oci.blob_size",
                format!("{reference}: blob {digest} ended after {seen} of its {size} bytes"),
            ));
        }
        let actual = Digest::from_sha256(hasher.finalize().into());
        if actual != *digest {
            return Err(RegistryError::refused(
                "oci.digest",
                format!(
                    "{reference}: blob {digest} does not match its digest (its bytes are {actual})"
                ),
            ));
        }
        out.flush()
            .await
            .map_err(|error| RegistryError::Io(format!("writing blob {digest}: {error}")))
    }

    /// The next data frame of `body`, within the read timeout (`None` at its end).
    async fn next_frame(
        &self,
        body: &mut Incoming,
        reference: &Reference,
    ) -> Result<Option<Bytes>, RegistryError> {
        loop {
            let frame = tokio::time::timeout(self.limits.read_timeout, body.frame())
                .await
                .map_err(|_| {
                    RegistryError::refused(
                        "oci.timeout",
                        format!(
                            "{reference}: the registry sent nothing for {} s in the middle of a body",
                            self.limits.read_timeout.as_secs()
                        ),
                    )
                })?;
            match frame {
                None => return Ok(None),
                Some(Err(error)) => {
                    return Err(RegistryError::Unreachable {
                        registry: reference.registry.clone(),
                        reason: crate::error_chain(&error),
                    })
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }

    /// The registry's words for an unexpected status, for an error: its status and the
    /// first error's code and message (bounded, clipped), never a credential.
    pub async fn unexpected(
        &self,
        answer: Answer,
        reference: &Reference,
        doing: &str,
    ) -> RegistryError {
        let status = answer.response.status();
        let body = self
            .read_bounded(
                answer.response,
                MAX_SMALL_BODY_BYTES,
                "oci.registry",
                reference,
            )
            .await
            .unwrap_or_default();
        let said = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|value| {
                let error = value.get("errors")?.get(0)?;
                let code = error.get("code")?.as_str().unwrap_or_default();
                let message = error.get("message").and_then(|m| m.as_str());
                // The registry's words, clipped and escaped: they are a stranger's text.
                Some(format!(
                    ": {:?} {:?}",
                    crate::clip(code, 40),
                    crate::clip(message.unwrap_or_default(), 160)
                ))
            })
            .unwrap_or_default();
        let rule = if status == StatusCode::NOT_FOUND {
            "oci.not_found"
        } else {
            "oci.registry"
        };
        RegistryError::refused(
            rule,
            format!("{reference}: {doing}: the registry answered {status}{said}"),
        )
    }
}

/// Whether `reference`'s registry may be reached over plain HTTP: a loopback one, or one named
/// (as `host` or `host:port`) in `insecure`.
fn plain_http_allowed(reference: &Reference, insecure: &[String]) -> bool {
    let loopback = match &reference.host {
        Host::Ip(IpAddr::V4(ip)) => ip.is_loopback(),
        Host::Ip(IpAddr::V6(ip)) => ip.is_loopback(),
        Host::Name(name) => name == "localhost",
    };
    loopback
        || insecure
            .iter()
            .any(|host| *host == reference.registry || *host == reference.host.to_string())
}

/// Whether `url` is on `reference`'s registry: the same host and port (a port left out being
/// the scheme's).
fn is_registry(url: &url::Url, reference: &Reference) -> bool {
    let registry = url::Url::parse(&format!("{}://{}/", url.scheme(), reference.registry));
    registry.is_ok_and(|registry| {
        registry.host() == url.host()
            && registry.port_or_known_default() == url.port_or_known_default()
    })
}

/// `host[:port]` of a URL, as references write registries.
fn url_registry(url: &url::Url) -> String {
    let host = match url.host() {
        Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
        Some(host) => host.to_string().to_ascii_lowercase(),
        None => String::new(),
    };
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(text: &str) -> Reference {
        Reference::parse(text).unwrap()
    }

    #[test]
    fn plain_http_is_allowed_only_for_loopback_or_a_registry_named_insecure() {
        for loopback in [
            "oci://127.0.0.1:5000/a:t",
            "oci://localhost/a:t",
            "oci://[::1]:5000/a:t",
        ] {
            assert!(plain_http_allowed(&reference(loopback), &[]), "{loopback}");
        }
        let remote = reference("oci://registry.example:5000/a:t");
        assert!(!plain_http_allowed(&remote, &[]));
        assert!(!plain_http_allowed(&reference("oci://10.0.0.1/a:t"), &[]));
        assert!(plain_http_allowed(&remote, &["registry.example".into()]));
        assert!(plain_http_allowed(
            &remote,
            &["registry.example:5000".into()]
        ));
        assert!(!plain_http_allowed(
            &remote,
            &["registry.example:5001".into()]
        ));
    }

    #[test]
    fn credentials_follow_the_registry_s_host_and_port_only() {
        let at = |text: &str| url::Url::parse(text).unwrap();
        let with_port = reference("oci://r.example:5000/a:t");
        assert!(is_registry(
            &at("https://r.example:5000/v2/a/blobs/x"),
            &with_port
        ));
        assert!(!is_registry(
            &at("https://r.example/v2/a/blobs/x"),
            &with_port
        ));
        assert!(!is_registry(
            &at("https://storage.example:5000/x"),
            &with_port
        ));
        let default_port = reference("oci://r.example/a:t");
        assert!(is_registry(&at("https://r.example:443/v2/"), &default_port));
        assert!(is_registry(&at("https://R.EXAMPLE/v2/"), &default_port));
    }
}
