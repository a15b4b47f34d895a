//! A hostile registry for the pull's bad-input tests: an HTTP server on loopback (TLS with a
//! test CA's certificate for `localhost`, or plain) whose every answer a test chooses, to send
//! what no honest registry would: bytes that do not match their digest, an endless or stalled
//! body, a redirect from https to http, a tag that moves between two reads. It records each
//! request's method and path. It runs on its own small runtime and stops when dropped.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// What the server answers one request with.
pub enum Reply {
    /// A status, headers and a whole body.
    Bytes {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// 200 with these headers, then bytes without end.
    Endless {
        headers: Vec<(&'static str, String)>,
    },
    /// 200 with these headers and the start of a body, then nothing, ever.
    Stall {
        headers: Vec<(&'static str, String)>,
        prefix: Vec<u8>,
    },
}

impl Reply {
    pub fn ok(content_type: &str, body: Vec<u8>) -> Reply {
        Reply::Bytes {
            status: 200,
            headers: vec![("content-type", content_type.to_string())],
            body,
        }
    }

    pub fn status(status: u16) -> Reply {
        Reply::Bytes {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn redirect(location: &str) -> Reply {
        Reply::Bytes {
            status: 307,
            headers: vec![("location", location.to_string())],
            body: Vec::new(),
        }
    }
}

/// What decides the answers: the method, the path, and how many requests for that path came
/// before this one.
pub type Route = dyn Fn(&str, &str, usize) -> Reply + Send + Sync;

pub struct HostileRegistry {
    pub port: u16,
    dir: tempfile::TempDir,
    tls: bool,
    seen: Arc<Mutex<Vec<(String, String)>>>,
    _runtime: tokio::runtime::Runtime,
}

impl HostileRegistry {
    /// Starts a server on 127.0.0.1 answering by `route`.
    pub fn start(
        tls: bool,
        route: impl Fn(&str, &str, usize) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let acceptor = tls.then(|| acceptor(dir.path()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let counts = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
        let route: Arc<Route> = Arc::new(route);
        let recording = Arc::clone(&seen);
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (route, seen, counts) = (
                    Arc::clone(&route),
                    Arc::clone(&recording),
                    Arc::clone(&counts),
                );
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                        let method = request.method().to_string();
                        let path = request
                            .uri()
                            .path_and_query()
                            .map_or("/".to_string(), |p| p.to_string());
                        seen.lock().unwrap().push((method.clone(), path.clone()));
                        let nth = {
                            let mut counts = counts.lock().unwrap();
                            let count = counts.entry(path.clone()).or_default();
                            *count += 1;
                            *count - 1
                        };
                        let reply = route(&method, &path, nth);
                        async move { Ok::<_, Infallible>(respond(reply)) }
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                            }
                        }
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                        }
                    }
                });
            }
        });
        HostileRegistry {
            port,
            dir,
            tls,
            seen,
            _runtime: runtime,
        }
    }

    /// `localhost:PORT` over TLS, `127.0.0.1:PORT` plain.
    pub fn address(&self) -> String {
        if self.tls {
            format!("localhost:{}", self.port)
        } else {
            format!("127.0.0.1:{}", self.port)
        }
    }

    /// The test CA (TLS only).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Every request so far: method and path.
    pub fn seen(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

fn respond(reply: Reply) -> Response<BoxBody<Bytes, Infallible>> {
    let (status, headers, body) = match reply {
        Reply::Bytes {
            status,
            headers,
            body,
        } => (status, headers, Full::new(Bytes::from(body)).boxed()),
        Reply::Endless { headers } => {
            let chunk = Bytes::from(vec![b' '; 64 * 1024]);
            let stream = futures_util::stream::repeat(chunk).map(|chunk| Ok(Frame::data(chunk)));
            (200, headers, BodyExt::boxed(StreamBody::new(stream)))
        }
        Reply::Stall { headers, prefix } => {
            let stream =
                futures_util::stream::once(async move { Ok(Frame::data(Bytes::from(prefix))) })
                    .chain(futures_util::stream::pending());
            (200, headers, BodyExt::boxed(StreamBody::new(stream)))
        }
    };
    let mut response = Response::builder().status(status);
    for (name, value) in headers {
        response = response.header(name, value);
    }
    response.body(body).unwrap()
}

/// A TLS acceptor for `localhost`, its CA written to `dir/ca.pem`.
fn acceptor(dir: &Path) -> tokio_rustls::TlsAcceptor {
    let certificates = super::https::TestCertificates::new(&["localhost"]);
    std::fs::write(dir.join("ca.pem"), &certificates.ca_pem).unwrap();
    certificates.acceptor()
}
