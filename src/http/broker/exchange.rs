//! One request's exchange on the runtime, hop by hop: vet the destination (resolve once,
//! check every address), pick the connection pool by trust, send with the host's credentials
//! for that destination only, follow redirects (https, allowlist, ranges and credentials
//! re-checked each hop, at most 10), and turn the final response into the guest's answer.
//! It does not bound the exchange's time (the broker does) nor open volume files (`volume`).

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, LOCATION};
use http_body_util::Full;
use hyper::StatusCode;

use super::body;
use super::client::Lane;
use super::resolve::{self, DnsCache, Resolve};
use super::volume::OutputFile;
use crate::http::answer::{Answer, ErrorKind, HttpError};
use crate::http::credential::InjectedHeader;
use crate::http::policy::PackagePolicy;
use crate::http::request::{Body, Method, Request};
use crate::http::url::{Host, JoinError, Url};
use crate::sandbox::WriteBudget;

/// The most redirects one request follows.
pub const MAX_REDIRECTS: usize = 10;

/// What every exchange shares: the two pools, the resolver and its recent answers.
pub struct Pools {
    /// Names that must resolve to public addresses only.
    pub public: Lane,
    /// Names the policy trusts to resolve to forbidden ranges.
    pub trusted: Lane,
    pub resolver: Arc<dyn Resolve>,
    pub cache: DnsCache,
}

/// Where the final body goes.
pub enum Sink {
    Inline,
    File {
        file: std::fs::File,
        guest_path: String,
    },
}

/// One request, ready to run: everything the guest's thread prepared.
pub struct Job {
    pub request: Request,
    /// The credentials for the first destination.
    pub credentials: Vec<InjectedHeader>,
    /// The body's bytes (a `file` body already read).
    pub body: Bytes,
    pub sink: Sink,
    pub policy: Arc<PackagePolicy>,
    pub budget: Arc<WriteBudget>,
}

/// Runs `job` to its answer.
pub async fn run(pools: Arc<Pools>, job: Job) -> Answer {
    match exchange(&pools, job).await {
        Ok(answer) => answer,
        Err(error) => Answer::Error(error),
    }
}

async fn exchange(pools: &Pools, job: Job) -> Result<Answer, HttpError> {
    let Job {
        request,
        mut credentials,
        mut body,
        sink,
        policy,
        budget,
    } = job;
    let json_body = matches!(request.body, Body::Json(_));
    let mut method = request.method;
    let mut url = request.url.clone();
    let mut hops = 0usize;
    loop {
        let lane = vet(pools, &policy, &url.host).await?;
        let outgoing = build(
            method,
            &url,
            &request.headers,
            json_body && !body.is_empty(),
            &credentials,
            body.clone(),
        )?;
        let authority = url.authority();
        let response = lane.client.request(outgoing).await.map_err(|error| {
            HttpError::new(
                ErrorKind::Connection,
                format!(
                    "the request to {authority} failed: {}",
                    crate::error_chain(&error)
                ),
            )
        })?;
        let status = response.status();
        let location = response.headers().get(LOCATION).cloned();
        if request.follow_redirects && is_redirect(status) {
            if let Some(location) = location {
                hops += 1;
                if hops > MAX_REDIRECTS {
                    return Err(HttpError::new(
                        ErrorKind::TooManyRedirects,
                        format!(
                            "{} redirected more than {MAX_REDIRECTS} times; the last hop was {url}",
                            request.url.authority()
                        ),
                    ));
                }
                let next = next_hop(&url, &location)?;
                if !policy.allow.allows_host(&next.host, next.port) {
                    return Err(HttpError::new(
                        ErrorKind::HostNotAllowed,
                        format!(
                            "{authority} redirected to {}, which is not in this function's \
                             network allowlist",
                            next.authority()
                        ),
                    ));
                }
                // A credential goes only to the destination it is configured for.
                credentials = policy.credentials_for(&next.host, next.port)?;
                if status == StatusCode::SEE_OTHER
                    || (matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
                        && method == Method::Post)
                {
                    if method != Method::Head {
                        method = Method::Get;
                    }
                    body = Bytes::new();
                }
                body::drain(response.into_body()).await;
                url = next;
                continue;
            }
        }
        let headers = response_headers(response.headers());
        let status = status.as_u16();
        let incoming = response.into_body();
        return Ok(match sink {
            Sink::Inline => Answer::Inline {
                status,
                headers,
                text: body::inline(incoming, &authority).await?,
            },
            Sink::File { file, guest_path } => {
                let bytes = body::to_file(incoming, file, &budget, &authority, &guest_path).await?;
                Answer::File {
                    status,
                    headers,
                    path: guest_path,
                    bytes,
                }
            }
        });
    }
}

/// Vets `host` (looking a name up off the runtime's workers unless the cache has it) and
/// records its addresses for the connector of the lane it belongs to.
async fn vet<'a>(
    pools: &'a Pools,
    policy: &PackagePolicy,
    host: &Host,
) -> Result<&'a Lane, HttpError> {
    let addrs = match host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => match pools.cache.get(name) {
            Some(addrs) => addrs,
            None => {
                let resolver = Arc::clone(&pools.resolver);
                let target = name.clone();
                let addrs =
                    tokio::task::spawn_blocking(move || resolve::lookup(&*resolver, &target))
                        .await
                        .map_err(|error| {
                            HttpError::new(
                                ErrorKind::Connection,
                                format!("resolving {host} failed: {error}"),
                            )
                        })??;
                pools.cache.put(name, &addrs);
                addrs
            }
        },
    };
    let vetted = resolve::judge(policy, host, addrs)?;
    let lane = if vetted.trusted {
        &pools.trusted
    } else {
        &pools.public
    };
    if let Host::Name(name) = host {
        lane.vetted.record(name, &vetted.addrs);
    }
    Ok(lane)
}

/// The outgoing request of one hop.
fn build(
    method: Method,
    url: &Url,
    headers: &[(String, String)],
    json_body: bool,
    credentials: &[InjectedHeader],
    body: Bytes,
) -> Result<http::Request<Full<Bytes>>, HttpError> {
    let invalid = |what: String| HttpError::invalid(what);
    let mut outgoing = http::Request::builder()
        .method(method.as_str())
        .uri(url.to_string())
        .body(Full::new(body))
        .map_err(|error| invalid(format!("url {url} cannot be sent: {error}")))?;
    let map = outgoing.headers_mut();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid(format!("headers: `{name}` cannot be sent")))?;
        let value = HeaderValue::from_bytes(value.as_bytes())
            .map_err(|_| invalid(format!("headers: the value of `{name}` cannot be sent")))?;
        map.append(name, value);
    }
    if json_body && !map.contains_key(CONTENT_TYPE) {
        map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    for credential in credentials {
        // The policy validated the name; the secret's value never appears in a message.
        let name = HeaderName::from_bytes(credential.name.as_bytes()).map_err(|_| {
            HttpError::new(
                ErrorKind::CredentialUnavailable,
                format!("the credential header `{}` cannot be sent", credential.name),
            )
        })?;
        let mut value =
            HeaderValue::from_bytes(credential.value.expose().as_bytes()).map_err(|_| {
                HttpError::new(
                    ErrorKind::CredentialUnavailable,
                    format!(
                        "the secret for `{}` on {} is not a valid header value",
                        credential.name,
                        url.authority()
                    ),
                )
            })?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    Ok(outgoing)
}

fn is_redirect(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    )
}

/// The URL a `location` header leads to, refusing every non-https hop.
fn next_hop(from: &Url, location: &HeaderValue) -> Result<Url, HttpError> {
    let text = location.to_str().map_err(|_| {
        HttpError::new(
            ErrorKind::Connection,
            format!(
                "{} redirected to a location that is not ASCII",
                from.authority()
            ),
        )
    })?;
    from.join(text).map_err(|error| match error {
        JoinError::Scheme(scheme) => HttpError::new(
            ErrorKind::ForbiddenDestination,
            format!(
                "{} redirected to a {scheme}: URL; requests reach https destinations only",
                from.authority()
            ),
        ),
        JoinError::Invalid(reason) => HttpError::new(
            ErrorKind::Connection,
            format!(
                "{} redirected to a location that {reason}",
                from.authority()
            ),
        ),
    })
}

/// Response headers in arrival order, names lower case (as `http` keeps them), values as
/// text (bytes that are not UTF-8 replaced).
fn response_headers(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Removes a partial output of a request that failed.
pub fn discard_on_error(answer: &Answer, output: Option<OutputFile>) {
    if let (Answer::Error(_), Some(output)) = (answer, output) {
        output.discard();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::credential::Secret;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn a_json_body_gets_a_content_type_unless_the_guest_set_one() {
        let request = build(
            Method::Post,
            &url("https://a.test/"),
            &[],
            true,
            &[],
            Bytes::from("{}"),
        )
        .unwrap();
        assert_eq!(request.headers()[CONTENT_TYPE], "application/json");
        let own = [(
            "content-type".to_string(),
            "application/vnd+json".to_string(),
        )];
        let request = build(
            Method::Post,
            &url("https://a.test/"),
            &own,
            true,
            &[],
            Bytes::from("{}"),
        )
        .unwrap();
        assert_eq!(request.headers()[CONTENT_TYPE], "application/vnd+json");
    }

    #[test]
    fn credentials_are_sent_as_sensitive_headers() {
        let credential = InjectedHeader {
            name: "authorization".into(),
            value: Secret::new("Bearer t".into()),
        };
        let request = build(
            Method::Get,
            &url("https://a.test/x"),
            &[],
            false,
            &[credential],
            Bytes::new(),
        )
        .unwrap();
        let value = &request.headers()["authorization"];
        assert_eq!(value, "Bearer t");
        assert!(value.is_sensitive());
        assert_eq!(request.uri().to_string(), "https://a.test/x");
    }

    #[test]
    fn repeated_guest_headers_and_response_headers_keep_their_order() {
        let mut map = http::HeaderMap::new();
        map.append("vary", HeaderValue::from_static("accept"));
        map.append("vary", HeaderValue::from_static("origin"));
        assert_eq!(
            response_headers(&map),
            vec![
                ("vary".into(), "accept".into()),
                ("vary".into(), "origin".into())
            ]
        );
    }

    #[test]
    fn a_redirect_to_http_is_forbidden_and_a_broken_one_is_a_connection_error() {
        let from = url("https://a.test/");
        let error = next_hop(&from, &HeaderValue::from_static("http://a.test/")).unwrap_err();
        assert_eq!(error.kind, ErrorKind::ForbiddenDestination);
        let error = next_hop(&from, &HeaderValue::from_static("https://u@a.test/")).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Connection);
    }
}
