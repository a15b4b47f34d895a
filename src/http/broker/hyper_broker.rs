//! [`HyperBroker`], the broker that really sends: a small multi-thread tokio runtime it owns,
//! two pooled hyper clients (public names, trusted private names) shared by every call, and
//! the guest's thread blocked until the answer is in, driving the exchange itself with the
//! runtime's `block_on` (the runtime's workers drive the pooled connections). It owns the
//! hand-off between the guest's thread and the runtime: volume files prepared before anything
//! is sent, the whole exchange bounded by `request.timeout`, the call's `Cancel` honoured,
//! and a failed `file` output removed. The exchange itself lives in `exchange`.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustls::RootCertStore;

use super::client::{self, BrokerError};
use super::exchange::{self, Job, Pools, Sink};
use super::resolve::{DnsCache, Resolve, SystemResolver};
use super::{Broker, SendContext};
use crate::http::answer::{Answer, ErrorKind, HttpError};
use crate::http::credential::InjectedHeader;
use crate::http::policy::TlsPolicy;
use crate::http::request::{Body, Output, Request};
use crate::http::url::Url;
use crate::sandbox::Cancel;

/// How often a waiting guest thread looks at its call's cancellation flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// How long a resolver's answer is reused. Short, since the system resolver reports no TTL;
/// every use is vetted again, so reuse never widens what a request may reach.
const DNS_CACHE: Duration = Duration::from_secs(10);

/// Worker threads of the broker's runtime: requests are I/O bound and a host runs few calls
/// at once per core.
const WORKERS: usize = 2;

/// The broker that sends requests with hyper and rustls. Build one per host and share it
/// (`Arc<HyperBroker>`): its pools live as long as it does.
pub struct HyperBroker {
    /// `Some` until drop, which shuts it down without waiting for its tasks.
    runtime: Option<tokio::runtime::Runtime>,
    pools: Arc<Pools>,
}

impl HyperBroker {
    /// A broker trusting the platform's roots and `tls.extra_ca_files`, resolving with the
    /// system resolver.
    pub fn new(tls: &TlsPolicy) -> Result<HyperBroker, BrokerError> {
        HyperBroker::with_resolver(tls, Arc::new(SystemResolver))
    }

    /// A broker like [`HyperBroker::new`] that resolves names with `resolver`.
    pub fn with_resolver(
        tls: &TlsPolicy,
        resolver: Arc<dyn Resolve>,
    ) -> Result<HyperBroker, BrokerError> {
        HyperBroker::with_roots(client::roots(&tls.extra_ca_files)?, resolver)
    }

    /// A broker trusting exactly `roots`, resolving with `resolver`.
    pub fn with_roots(
        roots: RootCertStore,
        resolver: Arc<dyn Resolve>,
    ) -> Result<HyperBroker, BrokerError> {
        let tls = client::tls_config(roots)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name("hako-http")
            .enable_all()
            .build()?;
        let pools = {
            let _inside = runtime.enter();
            Pools {
                public: client::lane(tls.clone()),
                trusted: client::lane(tls),
                resolver,
                cache: DnsCache::new(DNS_CACHE),
            }
        };
        Ok(HyperBroker {
            runtime: Some(runtime),
            pools: Arc::new(pools),
        })
    }

    /// Everything done on the guest's thread before the exchange: the `file` body read and
    /// the `file` output created, so a bad path fails before anything is sent.
    fn prepare(
        request: &Request,
        credentials: &[InjectedHeader],
        ctx: &SendContext,
    ) -> Result<(Job, Option<super::volume::OutputFile>), HttpError> {
        let body = match &request.body {
            Body::File(path) => ctx.volume.read(path)?,
            inline => inline
                .inline_bytes()
                .ok_or_else(|| HttpError::invalid("the body could not be encoded"))?,
        };
        let (sink, output) = match &request.output {
            Output::Inline => (Sink::Inline, None),
            Output::File(path) => {
                let (file, output) = ctx.volume.create(path)?;
                (
                    Sink::File {
                        file: file.into_std(),
                        guest_path: path.clone(),
                    },
                    Some(output),
                )
            }
        };
        let job = Job {
            request: request.clone(),
            credentials: credentials.to_vec(),
            body: Bytes::from(body),
            sink,
            policy: Arc::clone(&ctx.policy),
            budget: Arc::clone(&ctx.budget),
        };
        Ok((job, output))
    }
}

impl Broker for HyperBroker {
    fn send(&self, request: &Request, credentials: &[InjectedHeader], ctx: &SendContext) -> Answer {
        let Some(runtime) = &self.runtime else {
            return HttpError::new(ErrorKind::Connection, "the HTTP broker has shut down").into();
        };
        let (job, output) = match HyperBroker::prepare(request, credentials, ctx) {
            Ok(prepared) => prepared,
            Err(error) => return error.into(),
        };
        let timeout = request.timeout;
        let authority = request.url.authority();
        let pools = Arc::clone(&self.pools);
        let bounded = async move {
            let exchange = exchange::run(pools, job);
            match timeout {
                None => exchange.await,
                Some(limit) => tokio::time::timeout(limit, exchange)
                    .await
                    .unwrap_or_else(|_| timed_out(&authority, limit).into()),
            }
        };
        let answer = if tokio::runtime::Handle::try_current().is_err() {
            // The usual case, a guest's own thread: the exchange runs right here, driven by
            // the broker's runtime, with no hand-off to another thread.
            runtime.block_on(until_cancelled(bounded, ctx.cancel.clone(), &request.url))
        } else {
            // A thread inside some runtime may not block on another: run the exchange on a
            // worker and wait for its answer.
            let (answer_tx, answer_rx) = mpsc::sync_channel(1);
            let cancel = ctx.cancel.clone();
            let url = request.url.clone();
            runtime.spawn(async move {
                // The waiting thread may be gone; nothing is lost.
                let _ = answer_tx.send(until_cancelled(bounded, cancel, &url).await);
            });
            answer_rx.recv().unwrap_or_else(|_| {
                HttpError::new(
                    ErrorKind::Connection,
                    format!(
                        "the request to {} ended without an answer",
                        request.url.authority()
                    ),
                )
                .into()
            })
        };
        exchange::discard_on_error(&answer, output);
        answer
    }
}

/// `exchange`, or a `timeout` answer as soon as `cancel` is seen set.
async fn until_cancelled(
    exchange: impl std::future::Future<Output = Answer>,
    cancel: Option<Arc<Cancel>>,
    url: &Url,
) -> Answer {
    let Some(cancel) = cancel else {
        return exchange.await;
    };
    let watch = async {
        let mut tick = tokio::time::interval(CANCEL_POLL);
        while !cancel.is_cancelled() {
            tick.tick().await;
        }
    };
    tokio::select! {
        answer = exchange => answer,
        () = watch => HttpError::new(
            ErrorKind::Timeout,
            format!(
                "the call was stopped while the request to {} was running",
                url.authority()
            ),
        )
        .into(),
    }
}

fn timed_out(authority: &str, limit: Duration) -> HttpError {
    HttpError::new(
        ErrorKind::Timeout,
        format!(
            "the request to {authority} did not finish within {} ms",
            limit.as_millis()
        ),
    )
}

impl Drop for HyperBroker {
    fn drop(&mut self) {
        // Safe in any context, async ones included; running exchanges are abandoned.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for HyperBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HyperBroker").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::broker::{StaticResolver, VolumeDirs};
    use crate::http::policy::Policy;
    use crate::sandbox::WriteBudget;

    fn context() -> SendContext {
        let policy = Policy::from_toml(
            "[packages.p]\nallow_hosts = [\"a.test\"]\n",
            std::path::Path::new("."),
        )
        .unwrap()
        .for_package("p", &[])
        .unwrap();
        SendContext {
            policy: Arc::new(policy),
            budget: Arc::new(WriteBudget::new(0)),
            deadline: None,
            volume: VolumeDirs::none(),
            cancel: None,
        }
    }

    fn broker() -> HyperBroker {
        HyperBroker::with_roots(RootCertStore::empty(), Arc::new(StaticResolver::new())).unwrap()
    }

    fn request(json: &str) -> Request {
        Request::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn an_output_outside_the_mounted_volume_fails_before_resolving() {
        let answer = broker().send(
            &request(
                r#"{"url":"https://a.test/","output":{"type":"file","path":"/volume/tmp/x"}}"#,
            ),
            &[],
            &context(),
        );
        let Answer::Error(error) = answer else {
            panic!("expected an error, got {answer:?}")
        };
        assert_eq!(error.kind, ErrorKind::BadPath);
    }

    #[test]
    fn a_name_that_does_not_resolve_is_a_connection_error() {
        let answer = broker().send(&request(r#"{"url":"https://a.test/"}"#), &[], &context());
        let Answer::Error(error) = answer else {
            panic!("expected an error, got {answer:?}")
        };
        assert_eq!(error.kind, ErrorKind::Connection);
        assert!(error.message.contains("a.test"), "{}", error.message);
    }

    #[test]
    fn a_thread_inside_another_runtime_gets_its_answer_too() {
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let broker = Arc::new(broker());
        let answer = outer
            .block_on(async move {
                tokio::task::spawn_blocking(move || {
                    broker.send(&request(r#"{"url":"https://a.test/"}"#), &[], &context())
                })
                .await
            })
            .unwrap();
        let Answer::Error(error) = answer else {
            panic!("expected an error, got {answer:?}")
        };
        assert_eq!(error.kind, ErrorKind::Connection);
    }

    #[test]
    fn a_broker_dropped_inside_an_async_context_does_not_panic() {
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let broker = broker();
        outer.block_on(async move { drop(broker) });
    }
}
