//! Reading request bodies within bounds: at most so many bytes (413 beyond, before anything is
//! read when the request declares more), within a deadline from the first byte asked for (408
//! after), whole into memory or streamed into a file.
//!
//! What this file does not do: parse bodies, or decide their bounds (the server's
//! configuration does).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header;
use hyper::{Request, Response, StatusCode};

use super::response::{self, problem, Body};

/// The request's body, whole: at most `limit` bytes (413 beyond), received within `deadline`
/// from when the handler starts reading it (408 after), so that a client sending slowly
/// cannot hold a connection and its buffers for long.
pub async fn read_whole(
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

/// Streams the request's body into `file` as it arrives, with the bounds of [`read_whole`]: at
/// most `limit` bytes (413), within `deadline` (408). Nothing of it is held in memory but the
/// frame being written.
pub async fn stream_to_file(
    request: Request<Incoming>,
    limit: usize,
    deadline: Duration,
    file: &mut tokio::fs::File,
) -> Result<(), Response<Body>> {
    use tokio::io::AsyncWriteExt;
    if let Some(refusal) = declared_above(&request, limit) {
        return Err(refusal);
    }
    let mut body = Limited::new(request.into_body(), limit);
    let failed = |err: &std::io::Error| response::internal(err);
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
