//! An HTTPS server on loopback for broker tests: a generated test CA (rcgen), a certificate for
//! `localhost`, `api.test` and `other.test` signed by it, HTTP/1.1 and HTTP/2 (ALPN), and a
//! few routes. It records every request it is sent and counts connections. It runs on its own
//! small runtime and stops when dropped. It never talks to anything but its own clients.
//!
//! Routes: `/echo` (200, `{"method","path","body","version"}`), `/status/N`, `/redirect?to=URL
//! [&code=N]` (N default 302, `to` percent-encoded), `/chain/N` (302 to `/chain/N-1`, 200 at
//! 0), `/slow` (never answers), `/delay/MS` (200 after MS milliseconds), `/big/N` (N bytes of
//! `a`), `/binary` (bytes that are not UTF-8), `/headers` (repeated `vary`, an upper-case-named
//! header), anything else 404.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::RootCertStore;

/// A test CA, and a server certificate it signed for some names, for the tests' TLS servers.
pub struct TestCertificates {
    pub ca_pem: String,
    pub ca_der: CertificateDer<'static>,
    pub leaf_pem: String,
    pub key_pem: String,
    leaf_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl TestCertificates {
    /// A fresh CA and a certificate for `names` (DNS names) it signed.
    pub fn new(names: &[&str]) -> TestCertificates {
        let ca_key = rcgen::KeyPair::generate().expect("a CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "hako test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("the CA");
        let leaf_key = rcgen::KeyPair::generate().expect("a server key");
        let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
        let leaf = rcgen::CertificateParams::new(names)
            .expect("server params")
            .signed_by(&leaf_key, &ca)
            .expect("the server certificate");
        TestCertificates {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            leaf_pem: leaf.pem(),
            key_pem: leaf_key.serialize_pem(),
            leaf_der: leaf.der().clone(),
            key_der: leaf_key.serialize_der(),
        }
    }

    /// A TLS acceptor serving the certificate, HTTP/2 or HTTP/1.1 as ALPN chooses.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(vec![self.leaf_der.clone()], key)
            .expect("the server's TLS config");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The `host` header, or the `:authority` on HTTP/2.
    pub authority: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub version: String,
}

impl Seen {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Record {
    seen: Mutex<Vec<Seen>>,
    arrived: Condvar,
    connections: AtomicUsize,
}

/// A running test server.
pub struct TestServer {
    pub port: u16,
    /// The test CA's certificate, PEM.
    pub ca_pem: String,
    ca_der: CertificateDer<'static>,
    record: Arc<Record>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TestServer {
    /// Starts a server on 127.0.0.1 on a free port.
    pub fn start() -> TestServer {
        let certificates = TestCertificates::new(&["localhost", "api.test", "other.test"]);
        let acceptor = certificates.acceptor();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the server's runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("a loopback port");
        let port = listener.local_addr().expect("the bound address").port();
        let record = Arc::new(Record::default());
        let accepting = Arc::clone(&record);
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                accepting.connections.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                let record = Arc::clone(&accepting);
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |request| {
                        let record = Arc::clone(&record);
                        async move { Ok::<_, Infallible>(handle(request, &record, port).await) }
                    });
                    // No `date` header: answers stay identical across runs and compilers.
                    let mut builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    builder.http1().auto_date_header(false);
                    builder.http2().auto_date_header(false);
                    let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        TestServer {
            port,
            ca_pem: certificates.ca_pem,
            ca_der: certificates.ca_der,
            record,
            runtime: Some(runtime),
        }
    }

    /// Roots holding only the test CA.
    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.ca_der.clone())
            .expect("the test CA is valid");
        roots
    }

    /// Writes the test CA's PEM to `path`.
    pub fn write_ca(&self, path: &Path) {
        std::fs::write(path, &self.ca_pem).expect("the CA file is written");
    }

    /// `https://NAME:PORT` for this server.
    pub fn base(&self, name: &str) -> String {
        format!("https://{name}:{}", self.port)
    }

    /// Every request received so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.record.seen.lock().unwrap().clone()
    }

    /// How many TCP connections were accepted.
    pub fn connections(&self) -> usize {
        self.record.connections.load(Ordering::SeqCst)
    }

    /// Blocks until at least `count` requests have arrived.
    pub fn wait_for_requests(&self, count: usize) {
        let mut seen = self.record.seen.lock().unwrap();
        while seen.len() < count {
            seen = self.record.arrived.wait(seen).unwrap();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A free loopback port nobody listens on (bound, then released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr: SocketAddr = listener.local_addr().expect("the bound address");
    addr.port()
}

fn respond(status: u16, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = hyper::StatusCode::from_u16(status).expect("a valid status");
    response
}

async fn handle(request: Request<Incoming>, record: &Record, port: u16) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|collected| collected.to_bytes().to_vec())
        .unwrap_or_default();
    let authority = parts
        .headers
        .get("host")
        .and_then(|host| host.to_str().ok())
        .map(str::to_string)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let seen = Seen {
        method: parts.method.to_string(),
        authority,
        path: path.clone(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.clone(),
        version: format!("{:?}", parts.version),
    };
    {
        let mut all = record.seen.lock().unwrap();
        all.push(seen.clone());
        record.arrived.notify_all();
    }
    let (route, query) = path.split_once('?').unwrap_or((path.as_str(), ""));
    let segments: Vec<&str> = route.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        // HTTP/2 forbids a body in the answer to HEAD.
        ["echo"] if seen.method == "HEAD" => respond(200, ""),
        ["echo"] => {
            let text = serde_json::json!({
                "method": seen.method,
                "path": seen.path,
                "body": String::from_utf8_lossy(&body),
                "version": seen.version,
            })
            .to_string();
            let mut response = respond(200, text);
            response
                .headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            response
        }
        ["status", code] => respond(code.parse().unwrap_or(500), ""),
        ["redirect"] => {
            let mut to = String::new();
            let mut code = 302;
            for pair in query.split('&') {
                match pair.split_once('=') {
                    Some(("to", value)) => {
                        to = percent_encoding::percent_decode_str(value)
                            .decode_utf8_lossy()
                            .into_owned()
                    }
                    Some(("code", value)) => code = value.parse().unwrap_or(302),
                    _ => {}
                }
            }
            let mut response = respond(code, "moved");
            response
                .headers_mut()
                .insert("location", to.parse().unwrap());
            response
        }
        ["chain", n] => match n.parse::<u32>().unwrap_or(0) {
            0 => respond(200, "end of chain"),
            n => {
                let mut response = respond(302, "");
                let next = format!("https://{}:{port}/chain/{}", host_name(&seen), n - 1);
                response
                    .headers_mut()
                    .insert("location", next.parse().unwrap());
                response
            }
        },
        ["slow"] => std::future::pending().await,
        ["delay", ms] => {
            let ms = ms.parse().unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            respond(200, format!("after {ms} ms"))
        }
        ["big", n] => respond(200, vec![b'a'; n.parse().unwrap_or(0)]),
        ["binary"] => respond(200, vec![b'o', b'k', 0xff, 0xfe, 0x00, 0x80]),
        ["headers"] => {
            let mut response = respond(200, "");
            let headers = response.headers_mut();
            headers.append("vary", "accept".parse().unwrap());
            headers.append("vary", "origin".parse().unwrap());
            headers.insert("X-Custom-Name", "Kept As Is".parse().unwrap());
            response
        }
        _ => respond(404, "no such route"),
    }
}

/// The name part of the authority a request was sent to.
fn host_name(seen: &Seen) -> String {
    seen.authority
        .rsplit_once(':')
        .map_or(seen.authority.clone(), |(host, _)| host.to_string())
}
