//! The broker's connection pools: one hyper client per trust lane (public names, and names
//! the operator trusts to be private), each over rustls with the platform's roots plus the
//! policy's extra CA files, speaking HTTP/1.1 or HTTP/2 as ALPN settles, keeping connections
//! alive across calls. It owns building them; it does not vet addresses (`resolve` does,
//! and fills the lane's [`VettedAddrs`] before each request).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::resolve::VettedAddrs;

/// How long an idle pooled connection is kept.
const IDLE: Duration = Duration::from_secs(90);

/// The HTTP client type of a lane.
pub type HttpClient = Client<HttpsConnector<HttpConnector<VettedAddrs>>, Full<Bytes>>;

/// Why the broker could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("reading the extra CA file {path}: {reason}")]
    CaFile { path: PathBuf, reason: String },
    #[error("the extra CA file {0} holds no certificate")]
    EmptyCaFile(PathBuf),
    #[error("the TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("starting the HTTP runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// A connection pool and the addresses its connector may use.
#[derive(Clone)]
pub struct Lane {
    pub client: HttpClient,
    pub vetted: VettedAddrs,
}

/// The trust roots: the platform's, plus each PEM file of `extra_ca_files`.
pub fn roots(extra_ca_files: &[PathBuf]) -> Result<RootCertStore, BrokerError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::debug!(%error, "a platform root certificate could not be loaded");
    }
    let (added, ignored) = roots.add_parsable_certificates(native.certs);
    tracing::debug!(added, ignored, "platform root certificates");
    for path in extra_ca_files {
        let certs = read_pem(path)?;
        if certs.is_empty() {
            return Err(BrokerError::EmptyCaFile(path.clone()));
        }
        for cert in certs {
            roots.add(cert).map_err(|error| BrokerError::CaFile {
                path: path.clone(),
                reason: error.to_string(),
            })?;
        }
    }
    Ok(roots)
}

/// Reads an extra CA file and checks that it holds at least one certificate.
pub fn check_ca_file(path: &Path) -> Result<(), BrokerError> {
    if read_pem(path)?.is_empty() {
        return Err(BrokerError::EmptyCaFile(path.to_path_buf()));
    }
    Ok(())
}

fn read_pem(path: &Path) -> Result<Vec<CertificateDer<'static>>, BrokerError> {
    let fail = |reason: String| BrokerError::CaFile {
        path: path.to_path_buf(),
        reason,
    };
    CertificateDer::pem_file_iter(path)
        .map_err(|error| fail(error.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| fail(error.to_string()))
}

/// The rustls client configuration over `roots`, with ring as the crypto provider.
pub fn tls_config(roots: RootCertStore) -> Result<rustls::ClientConfig, BrokerError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A lane whose connections are verified by `tls`. Must be called inside the runtime that
/// will drive its connections.
pub fn lane(tls: rustls::ClientConfig) -> Lane {
    let vetted = VettedAddrs::default();
    let mut http = HttpConnector::new_with_resolver(vetted.clone());
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE)
        .pool_timer(TokioTimer::new())
        .build(https);
    Lane { client, vetted }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_named() {
        let error = roots(&[PathBuf::from("surely/missing/ca.pem")]).unwrap_err();
        assert!(
            error.to_string().contains("surely/missing/ca.pem"),
            "{error}"
        );
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.pem");
        std::fs::write(&path, "no pem here\n").unwrap();
        assert!(matches!(roots(&[path]), Err(BrokerError::EmptyCaFile(_))));
    }

    #[test]
    fn a_generated_ca_is_added_to_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        std::fs::write(&path, params.self_signed(&key).unwrap().pem()).unwrap();
        let with = roots(std::slice::from_ref(&path)).unwrap();
        let without = roots(&[]).unwrap();
        assert_eq!(with.len(), without.len() + 1);
        tls_config(with).unwrap();
    }
}
