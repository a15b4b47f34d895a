//! The legacy MCP 2024-11-05 HTTP+SSE transport, one session per `GET /sse/{name}`.
//!
//! Opening a session answers an event stream whose first event is `endpoint`, naming
//! `/message?sessionId=<random v4 UUID>`. A `POST` there is answered 202 with an empty body,
//! and the JSON-RPC answer is published on the stream as a `message` event whose data is byte
//! for byte the stdio answer; notifications publish nothing. An unknown or closed session is
//! 404 before the message is read or dispatched. At most [`MAX_SESSIONS`] are open at once
//! (503 beyond). A stream idle for the keepalive time (15 s by default) gets a `: keepalive`
//! comment. A session ends when its client disconnects or the server stops.
//!
//! This file owns the sessions and their streams; the messages themselves go through
//! [`super::mcp::dispatch`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use tokio::sync::{mpsc, watch};

use super::http::{self, problem, Body};
use super::mcp::{self, Dispatch};
use super::roles::Caller;
use super::Server;

/// The most sessions open at once.
pub const MAX_SESSIONS: usize = 16;

/// How many answers may wait for a slow SSE reader before a `POST` waits in turn.
const OUTBOX: usize = 64;

/// The open sessions of a server.
pub struct Sessions {
    open: Mutex<HashMap<String, Session>>,
    stopping: watch::Sender<bool>,
}

#[derive(Clone)]
struct Session {
    package: String,
    outbox: mpsc::Sender<Vec<u8>>,
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
            stopping: watch::channel(false).0,
        }
    }
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.open
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// How many sessions are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends every session and refuses new ones: the server is stopping.
    pub fn close_all(&self) {
        self.stopping.send_replace(true);
    }

    fn get(&self, id: &str) -> Option<Session> {
        self.lock().get(id).cloned()
    }
}

/// A random version 4 UUID, hyphenated.
pub fn uuid_v4() -> String {
    let mut bytes = [0u8; 16];
    // The OS random source failing is not something a server can serve around.
    getrandom::fill(&mut bytes).expect("the operating system provides random bytes");
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

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
        return problem(StatusCode::NOT_FOUND, &err.to_string());
    }
    let sessions = &server.sessions;
    if *sessions.stopping.borrow() {
        return problem(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping");
    }
    let id = uuid_v4();
    let (outbox, mut inbox) = mpsc::channel::<Vec<u8>>(OUTBOX);
    {
        let mut open = sessions.lock();
        if open.len() >= MAX_SESSIONS {
            let mut response = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("{MAX_SESSIONS} sessions are open already"),
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(http::RETRY_AFTER_SECONDS),
            );
            return response;
        }
        let session = Session {
            package: name.to_string(),
            outbox,
        };
        open.insert(id.clone(), session);
    }

    let (frames, stream) = mpsc::channel::<Bytes>(8);
    let keepalive = server.config.keepalive;
    let mut stopping = sessions.stopping.subscribe();
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
        server.sessions.lock().remove(&id);
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
    if let Some(response) = http::out_of_scope(caller, &session.package) {
        return response;
    }
    let body = match http::read_body(
        request,
        server.config.max_body_bytes,
        server.config.body_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(response) => return response,
    };
    match mcp::dispatch(&server.calls, &session.package, &body) {
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
        Dispatch::Busy(answer) => return http::busy("application/json", answer),
    }
    http::empty(StatusCode::ACCEPTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_random_version_4_uuids() {
        let a = uuid_v4();
        let b = uuid_v4();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'));
        assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
    }

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
