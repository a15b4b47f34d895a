//! The HTTP front end: accepting connections (HTTP/1.1, hyper), the checks every request
//! passes before anything else — an `Origin`, when present, must be loopback or allowed by
//! the operator (403); a Bearer token the server knows, when any is configured (401;
//! `/healthz` and `/readyz` are exempt so probes need no secret), whose role covers the route and whose
//! packages include the one the route names (403, see [`super::roles`]) — the routes, bounded
//! request bodies (413), and the
//! graceful stop: no new connections, SSE sessions closed, in-flight requests (and so their
//! calls) finished within the drain time.
//!
//! Routes (the handlers live in [`super::api`], [`super::mcp`] via `streamable`, and
//! [`super::sse`]):
//!
//! | route | what |
//! | --- | --- |
//! | `GET /healthz`, `HEAD /healthz` | `ok`: liveness |
//! | `GET /readyz`, `HEAD /readyz` | readiness: 503 while the bucket followed was unreachable at the last attempt |
//! | `GET /metrics` | Prometheus text |
//! | `GET /v1/packages`, `GET /v1/packages/{name}`, `POST /v1/packages`, `POST /v1/packages/{name}/call` | the operator API |
//! | `POST /mcp/{name}` | MCP Streamable HTTP (JSON answers; `GET` is 405: no stream is offered) |
//! | `GET /sse/{name}`, `POST /message?sessionId=…` | the legacy 2024-11-05 HTTP+SSE transport |
//! | `POST /message/{name}`, `POST /message` | one-shot: one message per connection, answered in the body |

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::calls::Served;
use super::mcp::{self, Dispatch};
use super::roles::Caller;
use super::{api, sse, Server};

/// A response body: whole, or an SSE stream.
pub type Body = BoxBody<Bytes, Infallible>;

/// How long a client told "busy" should wait before trying again, in seconds.
pub const RETRY_AFTER_SECONDS: &str = "1";

/// A whole response body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A response with a body and a content type.
pub fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON response.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    respond(status, "application/json", value.to_string())
}

/// A JSON error response: `{"error": message}`.
pub fn problem(status: StatusCode, message: &str) -> Response<Body> {
    json(status, &serde_json::json!({"error": message}))
}

/// An empty response.
pub fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(full(Bytes::new()));
    *response.status_mut() = status;
    response
}

/// 503 with `Retry-After`: the call queue is full.
pub fn busy(content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = respond(StatusCode::SERVICE_UNAVAILABLE, content_type, body);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

/// The request's body, whole: at most `limit` bytes (413 beyond), received within `deadline`
/// from when the handler starts reading it (408 after), so that a client sending slowly
/// cannot hold a connection and its buffers for long.
pub async fn read_body(
    request: Request<Incoming>,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, Response<Body>> {
    if let Some(refusal) = declared_above(&request, limit) {
        return Err(refusal);
    }
    let collected =
        tokio::time::timeout(deadline, Limited::new(request.into_body(), limit).collect());
    let Ok(collected) = collected.await else {
        return Err(timed_out(deadline));
    };
    collected
        .map(|collected| collected.to_bytes())
        .map_err(|err| unreadable(err.as_ref(), limit))
}

/// 413 for a body that [`Limited`] cut at `limit`, 400 for one that could not be read.
fn unreadable(
    err: &(dyn std::error::Error + Send + Sync + 'static),
    limit: usize,
) -> Response<Body> {
    if err.is::<http_body_util::LengthLimitError>() {
        return too_large(limit);
    }
    problem(
        StatusCode::BAD_REQUEST,
        &format!("reading the request body: {err}"),
    )
}

/// 413 for a body over `limit` bytes.
fn too_large(limit: usize) -> Response<Body> {
    problem(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("the request body is larger than {limit} bytes"),
    )
}

/// 408 for a body that did not arrive within `deadline`.
fn timed_out(deadline: Duration) -> Response<Body> {
    problem(
        StatusCode::REQUEST_TIMEOUT,
        &format!(
            "the request body did not arrive within {} ms (hako serve --body-timeout-ms)",
            deadline.as_millis()
        ),
    )
}

/// The 413 to answer before anything is read, when the request declares a body over `limit`
/// bytes.
fn declared_above(request: &Request<Incoming>, limit: usize) -> Option<Response<Body>> {
    declared_length(request)
        .is_some_and(|length| length > limit as u64)
        .then(|| too_large(limit))
}

/// The body's length as the request declares it, if it does.
pub fn declared_length(request: &Request<Incoming>) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
}

/// Streams the request's body into `file` as it arrives, with the bounds of [`read_body`]: at
/// most `limit` bytes (413), within `deadline` (408). Nothing of it is held in memory but the
/// frame being written.
pub async fn stream_body(
    request: Request<Incoming>,
    limit: usize,
    deadline: Duration,
    file: &mut tokio::fs::File,
) -> Result<(), Response<Body>> {
    use http_body_util::BodyExt;
    use tokio::io::AsyncWriteExt;
    if let Some(refusal) = declared_above(&request, limit) {
        return Err(refusal);
    }
    let mut body = Limited::new(request.into_body(), limit);
    let failed = |err: &std::io::Error| {
        problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            &super::fault::report(err),
        )
    };
    let receive = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|err| unreadable(err.as_ref(), limit))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            file.write_all(&data).await.map_err(|err| failed(&err))?;
        }
        // tokio's file hands writes to a blocking thread: the last one may still be under way
        // when `write_all` returns, and the file is read next through another descriptor.
        file.flush().await.map_err(|err| failed(&err))
    };
    match tokio::time::timeout(deadline, receive).await {
        Ok(received) => received,
        Err(_) => Err(timed_out(deadline)),
    }
}

/// Whether an `Origin` header value names this machine: `http(s)://localhost`,
/// `127.0.0.1` or `[::1]`, any port.
pub fn is_local_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some(split) => split,
            None => return false,
        },
        None => rest.split_at(rest.find(':').unwrap_or(rest.len())),
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
    port_ok
        && matches!(
            host.to_ascii_lowercase().as_str(),
            "localhost" | "127.0.0.1" | "::1"
        )
}

fn origin_allowed(server: &Server, origin: &str) -> bool {
    is_local_origin(origin)
        || server
            .config
            .allowed_origins
            .iter()
            .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(origin))
}

/// 403: the caller's token does not cover this route.
fn forbidden(what: &str) -> Response<Body> {
    problem(StatusCode::FORBIDDEN, &format!("this token may not {what}"))
}

/// A 403 when `caller` may not use `package`.
pub(super) fn out_of_scope(caller: Caller<'_>, package: &str) -> Option<Response<Body>> {
    (!caller.may_use(package)).then(|| forbidden(&format!("use the package {package:?}")))
}

/// `GET /readyz` (no token needed): 200 when the server can take work, 503 while the bucket it follows was not
/// reachable at the last attempt (it still serves what its cache holds).
fn readyz(server: &Server) -> Response<Body> {
    match server.follower.as_ref().map(|follower| follower.ready()) {
        None | Some(Ok(())) => json(StatusCode::OK, &serde_json::json!({"ready": true})),
        Some(Err(err)) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({"ready": false, "store": err}),
        ),
    }
}

/// Answers one request.
pub async fn route(
    server: Arc<Server>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    if path == "/healthz" && (method == Method::GET || method == Method::HEAD) {
        // hyper sends a HEAD answer's headers alone.
        return Ok(respond(StatusCode::OK, "text/plain; charset=utf-8", "ok\n"));
    }
    if path == "/readyz" && (method == Method::GET || method == Method::HEAD) {
        // A load balancer asks without a token, as for /healthz; it learns only readiness.
        return Ok(readyz(&server));
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !origin_allowed(&server, origin) {
            return Ok(problem(
                StatusCode::FORBIDDEN,
                &format!("origin {origin:?} is not allowed"),
            ));
        }
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    let Some(caller) = server.config.tokens.caller(authorization) else {
        let mut response = problem(StatusCode::UNAUTHORIZED, "a valid Bearer token is required");
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Ok(response);
    };
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // A route naming a package is checked against the token's packages before anything else,
    // so an agent learns nothing of packages it may not use, not even whether they exist.
    if let ["v1", "packages", name]
    | ["v1", "packages", name, "call"]
    | ["mcp" | "sse" | "message", name] = segments.as_slice()
    {
        if let Some(response) = out_of_scope(caller, name) {
            return Ok(response);
        }
        // On a bucket, a package the cache does not hold yet is fetched now, once.
        if let Some(follower) = &server.follower {
            follower.fetch_missing(name).await;
        }
    }
    let response = match (&method, segments.as_slice()) {
        (&Method::GET, ["metrics"]) if !caller.is_admin() => {
            forbidden("read the metrics (an admin token may)")
        }
        (&Method::GET, ["metrics"]) => {
            let mut text = server.calls.metrics.render();
            if let Some(follower) = &server.follower {
                text.push_str(&follower.render(&server.calls.metrics));
            }
            respond(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                text,
            )
        }
        (&Method::GET, ["v1", "packages"]) => api::list(&server, caller),
        (&Method::POST, ["v1", "packages"]) if !caller.is_admin() => {
            forbidden("upload packages (an admin token may)")
        }
        (&Method::POST, ["v1", "packages"]) => api::upload(&server, request).await,
        (&Method::GET, ["v1", "packages", name]) => api::show(&server, name),
        (&Method::POST, ["v1", "packages", name, "call"]) => {
            let name = name.to_string();
            api::call(&server, &name, request).await
        }
        (&Method::POST, ["mcp", name]) => {
            let name = name.to_string();
            streamable(&server, &name, request).await
        }
        (_, ["mcp", _]) => {
            let mut response = problem(
                StatusCode::METHOD_NOT_ALLOWED,
                "this server offers no SSE stream here: POST one JSON-RPC message",
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            response
        }
        (&Method::GET, ["sse", name]) => sse::open(&server, name),
        (&Method::POST, ["message"]) => match session_id(&request) {
            Some(id) => sse::post(&server, caller, &id, request).await,
            None => one_shot(&server, caller, None, request).await,
        },
        (&Method::POST, ["message", name]) => {
            let name = name.to_string();
            one_shot(&server, caller, Some(name), request).await
        }
        _ => problem(
            StatusCode::NOT_FOUND,
            &format!("no route for {method} {path}"),
        ),
    };
    Ok(response)
}

fn session_id(request: &Request<Incoming>) -> Option<String> {
    request
        .uri()
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("sessionId=").map(str::to_string))
}

/// The package `name`, or a 404.
fn served(server: &Server, name: &str) -> Result<Arc<Served>, Box<Response<Body>>> {
    server
        .calls
        .package(name)
        .map_err(|err| Box::new(problem(StatusCode::NOT_FOUND, &err.to_string())))
}

/// Sends a dispatched message's answer in the response body: 200 with JSON, 202 empty for a
/// notification, 503 with `Retry-After` when the queue is full.
async fn answer_in_body(dispatch: Dispatch) -> Response<Body> {
    match dispatch {
        Dispatch::Answer(answer) => respond(StatusCode::OK, "application/json", answer),
        Dispatch::Pending(pending) => {
            respond(StatusCode::OK, "application/json", pending.answer().await)
        }
        Dispatch::Silent => empty(StatusCode::ACCEPTED),
        Dispatch::Busy(answer) => busy("application/json", answer),
    }
}

/// `POST /mcp/{name}`: Streamable HTTP, answered with JSON (never a stream).
async fn streamable(
    server: &Arc<Server>,
    name: &str,
    request: Request<Incoming>,
) -> Response<Body> {
    let package = match served(server, name) {
        Ok(package) => package,
        Err(response) => return *response,
    };
    let body = match read_body(
        request,
        server.config.max_body_bytes,
        server.config.body_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(response) => return response,
    };
    answer_in_body(mcp::dispatch_to(&server.calls, package, &body)).await
}

/// `POST /message[/{name}]` without a session: one message, answered in the body, and the
/// connection closed after it. Without a name, the store must hold exactly one package.
async fn one_shot(
    server: &Arc<Server>,
    caller: Caller<'_>,
    name: Option<String>,
    request: Request<Incoming>,
) -> Response<Body> {
    let name = match name {
        Some(name) => name,
        None => match server.calls.store().list() {
            Ok(names) if names.len() == 1 => names[0].clone(),
            Ok(names) => {
                return problem(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "the store holds {} packages: name one, POST /message/{{name}}",
                        names.len()
                    ),
                )
            }
            Err(err) => {
                return problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &super::fault::report(&err),
                )
            }
        },
    };
    if let Some(response) = out_of_scope(caller, &name) {
        return response;
    }
    let mut response = match served(server, &name) {
        Err(response) => *response,
        Ok(package) => match read_body(
            request,
            server.config.max_body_bytes,
            server.config.body_timeout,
        )
        .await
        {
            Ok(body) => answer_in_body(mcp::dispatch_to(&server.calls, package, &body)).await,
            Err(response) => response,
        },
    };
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

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
