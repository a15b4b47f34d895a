//! The broker's overhead: one `subako_http` request (JSON in, vetting, the pooled client on
//! the broker's runtime, the answer held and read back) against a direct hyper request with
//! the same TLS roots to the same loopback HTTPS server, both over warm pooled connections.
//! Run with `cargo bench --bench broker`; the ratio of the two means is the overhead.

#[path = "../tests/suite/support/https.rs"]
#[allow(dead_code)]
mod https;

use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use hako::http::{HttpImports, HyperBroker, Policy, SystemResolver};
use hako::sandbox::WriteBudget;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

fn broker_call(c: &mut Criterion) {
    let server = https::TestServer::start();
    let url = format!("{}/echo", server.base("localhost"));

    let broker = HyperBroker::with_roots(server.roots(), Arc::new(SystemResolver)).unwrap();
    let policy = Policy::from_toml(
        &format!(
            "[packages.b]\nallow_hosts = [\"localhost:{}\"]\ntrust_private = [\"localhost\"]\n",
            server.port
        ),
        std::path::Path::new("."),
    )
    .unwrap()
    .for_package("b", &[])
    .unwrap();
    let mut http = HttpImports::new(
        Arc::new(policy),
        Arc::new(broker),
        Arc::new(WriteBudget::new(0)),
        None,
    );
    let request = serde_json::to_vec(&serde_json::json!({"url": url})).unwrap();
    let mut memory = vec![0u8; 1 << 16];
    memory[..request.len()].copy_from_slice(&request);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(server.roots())
    .with_no_client_auth();
    let direct: Client<_, Empty<Bytes>> = {
        let _inside = runtime.enter();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .enable_http2()
            .build();
        Client::builder(TokioExecutor::new()).build(https)
    };
    let uri: hyper::Uri = url.parse().unwrap();

    let mut group = c.benchmark_group("broker");
    group.bench_function("subako_http request", |b| {
        b.iter(|| {
            let len = http.request(0, request.len() as u32, &mut memory);
            assert!(len > 0);
            assert_eq!(http.read_response(32768, len as u32, &mut memory), 0);
            assert_eq!(&memory[32768..32775], br#"{"ok":{"#);
        })
    });
    group.bench_function("direct hyper request", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let response = direct.get(uri.clone()).await.unwrap();
                assert_eq!(response.status(), 200);
                response.into_body().collect().await.unwrap().to_bytes()
            })
        })
    });
    group.finish();
}

criterion_group!(benches, broker_call);
criterion_main!(benches);
