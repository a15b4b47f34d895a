//! The HTTP router: the checks every request passes before anything else, in this order —
//! its `Host` must name this server (421, see [`super::hosts`]); an `Origin`, when present,
//! must be loopback or allowed by the operator (403); a Bearer token the server knows, when
//! any is configured (401; `/healthz` and `/readyz` are exempt so probes need no secret),
//! whose role covers the route and whose packages include the one the route names (403, see
//! [`super::roles`]) — and then the routes.
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

use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::access::{Door, Origin};
use super::calls::Served;
use super::hosts::origin_allowed;
use super::mcp::{self, Dispatch};
use super::response::{self, empty, forbidden, json, problem, respond, Body};
use super::roles::Caller;
use super::server::Server;
use super::{api, body, sse};

/// `GET /readyz` (no token needed): 200 when the server can take work, 503 while the bucket it
/// follows was not reachable at the last attempt (it still serves what its cache holds). What
/// went wrong stays in the log (the follower warns of each failed refresh): a probe is told
/// only that the bucket was out of reach.
fn readyz(server: &Server) -> Response<Body> {
    match server.follower.as_ref().map(|follower| follower.ready()) {
        None | Some(Ok(())) => json(StatusCode::OK, &json!({"ready": true})),
        Some(Err(_)) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({
                "ready": false,
                "store": "the bucket could not be reached at the last refresh; the log has the cause",
            }),
        ),
    }
}

/// Answers one request.
pub async fn route(
    server: Arc<Server>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    if let Some(refusal) = server.hosts.refusal(&request) {
        return Ok(refusal);
    }
    // The path's bytes are shared with the request (no copy), so that the request can be
    // handed on while its segments are matched.
    let uri = request.uri().clone();
    let path = uri.path();
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
        if !origin_allowed(&server.config.allowed_origins, origin) {
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
    let segments = Segments::of(path);
    // A route naming a package is checked against the token's packages before anything else,
    // so an agent learns nothing of packages it may not use, not even whether they exist.
    if let ["v1", "packages", name]
    | ["v1", "packages", name, "call"]
    | ["mcp" | "sse" | "message", name] = segments.get()
    {
        if let Some(response) = response::out_of_scope(caller, name) {
            return Ok(response);
        }
        // On a bucket, a package the cache does not hold yet is fetched now, once.
        if let Some(follower) = &server.follower {
            follower.fetch_missing(name).await;
        }
    }
    let response = match (&method, segments.get()) {
        (&Method::GET, ["metrics"]) if !caller.is_admin() => {
            forbidden("read the metrics (an admin token may)")
        }
        (&Method::GET, ["metrics"]) => {
            let mut text = server.calls.metrics.render();
            text.push_str(&server.calls.render_admission());
            text.push_str(&server.calls.render_module_cache());
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
            api::call(&server, Origin::api(caller.role()), name, request).await
        }
        (&Method::POST, ["mcp", name]) => streamable(&server, caller, name, request).await,
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
            one_shot(&server, caller, Some(name.to_string()), request).await
        }
        _ => problem(
            StatusCode::NOT_FOUND,
            &format!("no route for {method} {path}"),
        ),
    };
    Ok(response)
}

/// A path's segments after its leading `/`, as many as the longest route has and one more: a
/// path of more segments than any route keeps that one more, and matches no route.
struct Segments<'a> {
    parts: [&'a str; Segments::MOST],
    count: usize,
}

impl<'a> Segments<'a> {
    const MOST: usize = 5;

    fn of(path: &'a str) -> Self {
        let mut segments = Segments {
            parts: [""; Self::MOST],
            count: 0,
        };
        for part in path.trim_start_matches('/').split('/').take(Self::MOST) {
            segments.parts[segments.count] = part;
            segments.count += 1;
        }
        segments
    }

    fn get(&self) -> &[&'a str] {
        &self.parts[..self.count]
    }
}

fn session_id(request: &Request<Incoming>) -> Option<String> {
    request
        .uri()
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("sessionId=").map(str::to_string))
}

/// The package `name`, or the answer that it is not served.
fn served(server: &Server, name: &str) -> Result<Arc<Served>, Box<Response<Body>>> {
    server
        .calls
        .package(name)
        .map_err(|err| Box::new(response::not_served(&err)))
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
        Dispatch::Busy(answer) => response::busy("application/json", answer),
    }
}

/// `POST /mcp/{name}`: Streamable HTTP, answered with JSON (never a stream).
async fn streamable(
    server: &Arc<Server>,
    caller: Caller<'_>,
    name: &str,
    request: Request<Incoming>,
) -> Response<Body> {
    let package = match served(server, name) {
        Ok(package) => package,
        Err(response) => return *response,
    };
    let body = match body::read_whole(
        request,
        server.config.max_body_bytes,
        server.config.body_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(response) => return response,
    };
    let origin = Origin {
        door: Door::Mcp,
        caller: caller.role(),
        rpc_id: None,
    };
    answer_in_body(mcp::dispatch_to(&server.calls, package, &body, origin)).await
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
            Err(err) => return response::internal(&err),
        },
    };
    if let Some(response) = response::out_of_scope(caller, &name) {
        return response;
    }
    let mut response = match served(server, &name) {
        Err(response) => *response,
        Ok(package) => match body::read_whole(
            request,
            server.config.max_body_bytes,
            server.config.body_timeout,
        )
        .await
        {
            Ok(body) => {
                let origin = Origin {
                    door: Door::Sse,
                    caller: caller.role(),
                    rpc_id: None,
                };
                answer_in_body(mcp::dispatch_to(&server.calls, package, &body, origin)).await
            }
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
    fn a_path_is_matched_by_its_segments_and_a_longer_one_by_no_route() {
        assert_eq!(Segments::of("/healthz").get(), ["healthz"]);
        assert_eq!(
            Segments::of("/v1/packages/greet/call").get(),
            ["v1", "packages", "greet", "call"]
        );
        assert_eq!(Segments::of("/mcp/").get(), ["mcp", ""]);
        // Five or more segments keep five, which no route has.
        let long = Segments::of("/v1/packages/greet/call/again/and/again");
        assert_eq!(long.get(), ["v1", "packages", "greet", "call", "again"]);
        assert!(!matches!(
            long.get(),
            ["v1", "packages", _, "call"] | ["v1", "packages", _]
        ));
    }
}
