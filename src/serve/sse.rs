//! The legacy MCP 2024-11-05 HTTP+SSE transport, one session per `GET /sse/{name}`.
//!
//! Opening a session answers an event stream whose first event is `endpoint`, naming
//! `/message?sessionId=<random v4 UUID>`. A `POST` there is answered 202 with an empty body,
//! and the JSON-RPC answer is published on the stream as a `message` event whose data is byte
//! for byte the stdio answer; notifications publish nothing. An unknown or closed session is
//! 404 before the message is read or dispatched. At most
//! [`MAX_SESSIONS`](super::sessions::MAX_SESSIONS) are open at once (503 beyond). A stream
//! idle for the keepalive time (15 s by default) gets a `: keepalive` comment. A session ends
//! when its client disconnects, when its stream takes no bytes for the write timeout (the
//! connection is closed, see [`super::timeouts`]), or when the server stops.
//!
//! This file owns the sessions' streams; the table of sessions is [`super::sessions`], and the
//! messages themselves go through [`super::mcp::dispatch`].

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use tokio::sync::{mpsc, watch};

use super::access::{Door, Origin};
use super::body;
use super::mcp::{self, Dispatch};
use super::response::{self, problem, Body};
use super::roles::Caller;
use super::server::Server;
use super::sessions::{NotOpened, Opened};

/// An SSE response body fed by a channel; it ends when the channel's sender is gone.
struct EventStream {
    frames: mpsc::Receiver<Bytes>,
}

impl hyper::body::Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.frames
            .poll_recv(cx)
            .map(|frame| frame.map(|bytes| Ok(Frame::data(bytes))))
    }
}

fn event(name: &str, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + name.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Resolves once the server is stopping (the guard `wait_for` returns is not held across
/// awaits: it is not `Send`).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stopping| *stopping).await;
}

/// `GET /sse/{name}`: opens a session.
pub fn open(server: &Arc<Server>, name: &str) -> Response<Body> {
    if let Err(err) = server.calls.package(name) {
        return response::not_served(&err);
    }
    let Opened {
        id,
        mut inbox,
        mut stopping,
    } = match server.sessions.open(name) {
        Ok(opened) => opened,
        Err(refused @ NotOpened::Stopping) => {
            return problem(StatusCode::SERVICE_UNAVAILABLE, &refused.to_string())
        }
        Err(refused @ NotOpened::Full) => {
            let error = serde_json::json!({"error": refused.to_string()});
            return response::busy("application/json", error.to_string());
        }
    };

    let (frames, stream) = mpsc::channel::<Bytes>(8);
    let keepalive = server.config.keepalive;
    let server = Arc::clone(server);
    let endpoint = format!("/message?sessionId={id}");
    tokio::spawn(async move {
        if frames
            .send(event("endpoint", endpoint.as_bytes()))
            .await
            .is_ok()
        {
            loop {
                tokio::select! {
                    answer = inbox.recv() => match answer {
                        Some(answer) => {
                            if frames.send(event("message", &answer)).await.is_err() {
                                break;
                            }
                        }
                        None => break,
                    },
                    () = tokio::time::sleep(keepalive) => {
                        if frames.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                            break;
                        }
                    }
                    () = frames.closed() => break,
                    () = stopped(&mut stopping) => break,
                }
            }
        }
        server.sessions.close(&id);
    });

    let mut response = Response::new(EventStream { frames: stream }.boxed());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `POST /message?sessionId=…`: one message for a session, answered on its stream.
pub async fn post(
    server: &Arc<Server>,
    caller: Caller<'_>,
    id: &str,
    request: Request<Incoming>,
) -> Response<Body> {
    let Some(session) = server.sessions.get(id) else {
        return problem(StatusCode::NOT_FOUND, "no such session (it may have ended)");
    };
    // A session's id is no credential: the token must cover the session's package too.
    if let Some(response) = response::out_of_scope(caller, &session.package) {
        return response;
    }
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
        door: Door::Sse,
        caller: caller.role(),
        rpc_id: None,
    };
    match mcp::dispatch(&server.calls, &session.package, &body, origin) {
        Dispatch::Answer(answer) => {
            // A session that ended meanwhile drops the answer, as its stream is gone.
            let _ = session.outbox.send(answer).await;
        }
        Dispatch::Pending(pending) => {
            tokio::spawn(async move {
                let _ = session.outbox.send(pending.answer().await).await;
            });
        }
        Dispatch::Silent => {}
        Dispatch::Busy(answer) => return response::busy("application/json", answer),
    }
    response::empty(StatusCode::ACCEPTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_carries_the_data_unchanged_on_one_line() {
        let answer = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let framed = event("message", answer);
        let mut expected = b"event: message\ndata: ".to_vec();
        expected.extend_from_slice(answer);
        expected.extend_from_slice(b"\n\n");
        assert_eq!(framed.as_ref(), expected.as_slice());
    }
}
