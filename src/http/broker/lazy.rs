//! A broker made on first use: a `hako call` whose function never sends a request pays
//! nothing for the platform's root certificates or the broker's runtime. The policy's extra CA
//! files are still read at once, so a wrong path is reported before the call runs.
//! It sends nothing itself; [`HyperBroker`] does.

use std::sync::OnceLock;

use super::client::{self, BrokerError};
use super::hyper_broker::HyperBroker;
use super::{Broker, SendContext};
use crate::http::answer::{Answer, ErrorKind, HttpError};
use crate::http::credential::InjectedHeader;
use crate::http::policy::TlsPolicy;
use crate::http::request::Request;

/// A [`HyperBroker`] built when the first request needs it.
pub struct LazyBroker {
    tls: TlsPolicy,
    broker: OnceLock<Result<HyperBroker, String>>,
}

impl LazyBroker {
    /// Checks the extra CA files of `tls` now; builds the broker on first use.
    pub fn new(tls: &TlsPolicy) -> Result<LazyBroker, BrokerError> {
        for path in &tls.extra_ca_files {
            client::check_ca_file(path)?;
        }
        Ok(LazyBroker {
            tls: tls.clone(),
            broker: OnceLock::new(),
        })
    }

    /// Whether the broker has been built (a request needed it).
    pub fn is_built(&self) -> bool {
        self.broker.get().is_some()
    }
}

impl Broker for LazyBroker {
    fn send(&self, request: &Request, credentials: &[InjectedHeader], ctx: &SendContext) -> Answer {
        let broker = self
            .broker
            .get_or_init(|| HyperBroker::new(&self.tls).map_err(|err| err.to_string()));
        match broker {
            Ok(broker) => broker.send(request, credentials, ctx),
            Err(message) => Answer::Error(HttpError::new(
                ErrorKind::Connection,
                format!("the HTTP broker could not be set up: {message}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_reported_before_any_request() {
        let tls = TlsPolicy {
            extra_ca_files: vec!["/nonexistent/ca.pem".into()],
        };
        assert!(LazyBroker::new(&tls).is_err());
    }

    #[test]
    fn nothing_is_built_until_a_request_needs_it() {
        let broker = LazyBroker::new(&TlsPolicy::default()).unwrap();
        assert!(!broker.is_built());
    }
}
