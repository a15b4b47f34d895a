//! What sends a validated request: the [`Broker`] trait, the context it is given, and the two
//! brokers: [`NoBroker`], which contacts nobody and says so (discovery uses it), and
//! [`HyperBroker`], which sends. It does not validate requests or apply the allowlist to the
//! first hop; `HttpImports` has done both before a broker sees a request.
//!
//! A real broker must, per the design: resolve the destination once and vet every address
//! against the forbidden ranges (unless the name is in `trust_private`), connect to the vetted
//! address, re-check each redirect hop (https, allowlist, ranges, credentials, at most 10),
//! bound the whole exchange by `request.timeout`, keep inline bodies to 256 KiB of UTF-8,
//! charge file outputs to the write budget, and send a `json` body with
//! `content-type: application/json` unless the guest set a content type. The submodules do
//! that, one concern each: `ranges` (forbidden addresses), `resolve` (resolving and vetting),
//! `client` (TLS and pools), `exchange` (hops and redirects), `body` (inline and file
//! bodies), `volume` (the call's folders) and `hyper_broker` (the runtime hand-off).

mod body;
mod client;
mod exchange;
mod hyper_broker;
mod lazy;
mod ranges;
mod resolve;
mod volume;

use std::sync::Arc;
use std::time::Instant;

pub use body::MAX_INLINE_BYTES;
pub use client::BrokerError;
pub(crate) use client::{roots, tls_config};
pub use exchange::MAX_REDIRECTS;
pub use hyper_broker::HyperBroker;
pub use lazy::LazyBroker;
pub use ranges::forbidden as forbidden_range;
pub use resolve::{Resolve, StaticResolver, SystemResolver};
pub use volume::{VolumeDirs, VolumeRoot};

use super::answer::{Answer, ErrorKind, HttpError};
use super::credential::InjectedHeader;
use super::policy::PackagePolicy;
use super::request::Request;
use crate::sandbox::{Cancel, WriteBudget};

/// What a broker needs beside the request.
#[derive(Debug, Clone)]
pub struct SendContext {
    /// The calling function's policy, for redirect hops and `trust_private`.
    pub policy: Arc<PackagePolicy>,
    /// The call's write budget, charged by file outputs.
    pub budget: Arc<WriteBudget>,
    /// When the call's time runs out, if it has a limit.
    pub deadline: Option<Instant>,
    /// The folders behind `/volume/tmp` and `/volume/data`, for `file` bodies and outputs.
    pub volume: VolumeDirs,
    /// The call's cancellation flag: a broker stops waiting once it is set.
    pub cancel: Option<Arc<Cancel>>,
}

/// Sends requests. Blocking: the guest's thread waits for the answer.
pub trait Broker: Send + Sync {
    /// Sends `request` with the `credentials` the host injects for its first destination, and
    /// returns the answer the guest will read. Never panics on a server's behaviour.
    fn send(&self, request: &Request, credentials: &[InjectedHeader], ctx: &SendContext) -> Answer;
}

/// The broker of a host built without HTTP support: every request that passes validation and
/// policy is answered `connection`, and no destination is contacted.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoBroker;

impl Broker for NoBroker {
    fn send(&self, request: &Request, _: &[InjectedHeader], _: &SendContext) -> Answer {
        Answer::Error(HttpError::new(
            ErrorKind::Connection,
            format!(
                "no HTTP broker is configured in this build of the host; {} was not contacted",
                request.url.authority()
            ),
        ))
    }
}
