//! Building responses: the body type every route answers with, JSON and text answers, errors
//! as `{"error": message}`, 503 with `Retry-After`, the 403 of a token out of its scope, and
//! host failures, whose cause goes to the log under a request id and never into the answer
//! ([`super::fault`]).
//!
//! What this file does not do: route, read request bodies ([`super::body`]) or decide which
//! failures are the client's.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::calls::CallError;
use super::fault;
use super::roles::Caller;

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

/// What a JSON answer's buffer starts with: a call's outcome (its result, stderr and figures)
/// is some 400 bytes, which a buffer grown from nothing reaches in five copies.
pub const JSON_ANSWER_BYTES: usize = 512;

/// A JSON response, written straight to bytes (no `serde_json::Value` built on the way, and not
/// through `Display`: for a call's outcome the two cost the front end a fifth of its time).
pub fn json<T: serde::Serialize + ?Sized>(status: StatusCode, value: &T) -> Response<Body> {
    let mut body = Vec::with_capacity(JSON_ANSWER_BYTES);
    serde_json::to_writer(&mut body, value).expect("hako's answers have only string keys");
    respond(status, "application/json", body)
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

/// 500 for a failure of the host: the client is told a fixed sentence and a request id, the
/// log gets the cause under the same id.
pub fn internal(error: &(dyn std::error::Error + 'static)) -> Response<Body> {
    problem(StatusCode::INTERNAL_SERVER_ERROR, &fault::report(error))
}

/// The answer to a package lookup that failed: 404 when no package of that name is served
/// (the message names only what the client asked for), a host failure otherwise.
pub fn not_served(error: &CallError) -> Response<Body> {
    match error {
        CallError::UnknownPackage(_) => problem(StatusCode::NOT_FOUND, &error.to_string()),
        _ => internal(error),
    }
}

/// 403: the caller's token does not cover this route.
pub fn forbidden(what: &str) -> Response<Body> {
    problem(StatusCode::FORBIDDEN, &format!("this token may not {what}"))
}

/// A 403 when `caller` may not use `package`.
pub fn out_of_scope(caller: Caller<'_>, package: &str) -> Option<Response<Body>> {
    (!caller.may_use(package)).then(|| forbidden(&format!("use the package {package:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_failure_answers_500_without_its_cause() {
        let error = std::io::Error::other("cannot open /srv/store/packages/x/current");
        let response = internal(&error);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let text = text_of(response);
        assert!(
            text.contains("request id ") && !text.contains("/srv"),
            "{text}"
        );
        let store = CallError::Store(crate::store::StoreError::Io {
            action: "reading",
            path: "/srv/store/packages/x/current".into(),
            source: std::io::Error::other("permission denied"),
        });
        let response = not_served(&store);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let text = text_of(response);
        assert!(
            !text.contains("/srv") && !text.contains("permission"),
            "{text}"
        );
        let unknown = not_served(&CallError::UnknownPackage("nope".into()));
        assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
        assert!(text_of(unknown).contains("nope"));
    }

    fn text_of(response: Response<Body>) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let collected = runtime.block_on(response.into_body().collect()).unwrap();
        String::from_utf8(collected.to_bytes().to_vec()).unwrap()
    }
}
