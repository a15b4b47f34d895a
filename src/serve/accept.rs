//! Accepting connections within bounds: at most `--max-connections` open at once (a connection
//! beyond them waits in the kernel's backlog until one closes), and accept errors (out of
//! descriptors, most often) met with a pause that doubles from 10 ms to 1 s and a warning at
//! most once a second that counts them, instead of a busy loop that logs each.
//!
//! What this file does not do: read or answer requests, or decide how long a connection may
//! stay ([`super::http`] and hyper's timers do).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The first pause after an accept error, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);
/// Descriptors kept for the rest of the server: the store, artifacts, compile workers, the
/// broker's sockets, and the descriptors a guest's path lookup opens and closes within one host
/// call.
pub const RESERVED_DESCRIPTORS: usize = 256;

/// How the process's descriptors are shared out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorShares {
    /// The process's limit (its soft limit raised to the hard one, at most 65,536).
    pub limit: usize,
    /// Connections open at once (`--max-connections`).
    pub connections: usize,
    /// What every guest together may hold (`--max-guest-descriptors`).
    pub guests: usize,
}

impl DescriptorShares {
    /// Shares `limit` descriptors for `max_calls` calls in flight, each of which may hold
    /// [`MAX_OPEN_FDS`](crate::sandbox::MAX_OPEN_FDS), keeping [`RESERVED_DESCRIPTORS`]:
    /// what an operator set is kept; guests get what `max_calls` can hold, at most half of
    /// what is left when neither is set (all of it with no connections to share with), and
    /// connections the rest, at least 16.
    pub fn new(
        limit: usize,
        connections: Option<usize>,
        guests: Option<usize>,
        max_calls: usize,
        serves_connections: bool,
    ) -> Self {
        let left = limit.saturating_sub(RESERVED_DESCRIPTORS).max(16);
        let calls_hold = max_calls.saturating_mul(crate::sandbox::MAX_OPEN_FDS);
        let guests = guests.unwrap_or(match connections {
            _ if !serves_connections => calls_hold.min(left),
            Some(connections) => calls_hold.min(left.saturating_sub(connections)),
            None => calls_hold.min(left / 2),
        });
        let connections = connections.unwrap_or_else(|| left.saturating_sub(guests).max(16));
        Self {
            limit,
            connections,
            guests,
        }
    }

    /// Why these shares may fail, if they may: more than the process can open, or no
    /// descriptor left for guests.
    pub fn warning(&self, serves_connections: bool) -> Option<String> {
        let connections = if serves_connections {
            self.connections
        } else {
            0
        };
        let asked = connections
            .saturating_add(self.guests)
            .saturating_add(RESERVED_DESCRIPTORS);
        if self.guests == 0 {
            Some(
                "no descriptors are left for guests (--max-guest-descriptors): every file a guest \
                 opens is refused ENFILE"
                    .into(),
            )
        } else if asked > self.limit {
            Some(format!(
                "{connections} connections (--max-connections), {} guest descriptors \
                 (--max-guest-descriptors) and the {RESERVED_DESCRIPTORS} the server keeps are \
                 more than the process's {} descriptors: accepting or opening may fail",
                self.guests, self.limit
            ))
        } else {
            None
        }
    }
}

/// The descriptors this process may open: its soft limit, first raised to the hard one, at
/// most 65,536.
pub fn descriptor_limit() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = raised;
        }
    }
    let descriptors = limit.current.unwrap_or(65_536).min(65_536);
    usize::try_from(descriptors).unwrap_or(65_536)
}

/// A listener that hands out connections with a permit each.
pub struct Acceptor {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    errors: ErrorPacing,
}

impl Acceptor {
    pub fn new(listener: TcpListener, max_connections: usize) -> Self {
        Self {
            listener,
            permits: Arc::new(Semaphore::new(max_connections.max(1))),
            errors: ErrorPacing::default(),
        }
    }

    /// The next connection, with the permit it holds while it is open. Waits for a permit
    /// before it accepts, so that connections past the bound stay in the kernel's backlog.
    pub async fn next(&mut self) -> (TcpStream, OwnedSemaphorePermit) {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    self.errors.succeeded();
                    return (stream, permit);
                }
                Err(err) => tokio::time::sleep(self.errors.failed(&err)).await,
            }
        }
    }
}

/// How accept errors are paced and logged.
#[derive(Default)]
struct ErrorPacing {
    /// The pause after the next error; zero after a success.
    pause: Duration,
    /// Errors not yet reported, and when the last report went out.
    unreported: u64,
    reported_at: Option<Instant>,
}

impl ErrorPacing {
    fn succeeded(&mut self) {
        self.pause = Duration::ZERO;
    }

    /// Counts an error, logs the count at most once a second, and returns the pause to take.
    fn failed(&mut self, err: &std::io::Error) -> Duration {
        self.unreported += 1;
        let now = Instant::now();
        if self
            .reported_at
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            tracing::warn!(
                errors = self.unreported,
                "accepting connections failed {} time(s): {err}; pausing",
                self.unreported
            );
            self.unreported = 0;
            self.reported_at = Some(now);
        }
        self.pause = (self.pause * 2).clamp(FIRST_PAUSE, LONGEST_PAUSE);
        self.pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guests_get_what_the_calls_in_flight_hold_within_half_and_connections_the_rest() {
        // 1,024 calls would hold 131,072: guests get half of what the server does not keep.
        let shares = DescriptorShares::new(65_536, None, None, 1024, true);
        assert_eq!((shares.connections, shares.guests), (32_640, 32_640));
        assert_eq!(shares.warning(true), None);
        // 100 calls hold 12,800, and connections get the rest.
        let shares = DescriptorShares::new(65_536, None, None, 100, true);
        assert_eq!((shares.connections, shares.guests), (52_480, 12_800));
        // Without connections (--stdio) guests may have all of it.
        let shares = DescriptorShares::new(65_536, None, None, 1024, false);
        assert_eq!(shares.guests, 65_280);
    }

    #[test]
    fn what_an_operator_sets_is_kept_and_an_overcommit_is_named() {
        let shares = DescriptorShares::new(65_536, Some(60_000), None, 1024, true);
        assert_eq!((shares.connections, shares.guests), (60_000, 5_280));
        let shares = DescriptorShares::new(65_536, None, Some(1_000), 1024, true);
        assert_eq!((shares.connections, shares.guests), (64_280, 1_000));
        let shares = DescriptorShares::new(1024, Some(2000), None, 1024, true);
        assert_eq!(shares.guests, 0);
        assert!(shares.warning(true).unwrap().contains("ENFILE"));
        let shares = DescriptorShares::new(1024, Some(2000), Some(64), 1024, true);
        let warning = shares.warning(true).unwrap();
        assert!(warning.contains("--max-connections"), "{warning}");
        assert!(warning.contains("1024 descriptors"), "{warning}");
    }

    #[test]
    fn pauses_double_from_10_ms_to_1_s_and_a_success_starts_again() {
        let mut pacing = ErrorPacing::default();
        let err = std::io::Error::other("too many open files");
        let pauses: Vec<u128> = (0..10).map(|_| pacing.failed(&err).as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        pacing.succeeded();
        assert_eq!(pacing.failed(&err), FIRST_PAUSE);
    }

    #[test]
    fn errors_are_reported_at_most_once_a_second_with_their_count() {
        let mut pacing = ErrorPacing::default();
        let err = std::io::Error::other("too many open files");
        pacing.failed(&err);
        assert_eq!(pacing.unreported, 0, "the first error is reported at once");
        for _ in 0..1000 {
            pacing.failed(&err);
        }
        assert_eq!(pacing.unreported, 1000, "the rest wait for the next second");
    }

    #[test]
    fn the_limit_is_the_processs_raised_to_its_hard_one() {
        let limit = descriptor_limit();
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(now.current, now.maximum.or(now.current));
        if let Some(current) = now.current {
            assert_eq!(limit as u64, current.min(65_536));
        }
    }
}
