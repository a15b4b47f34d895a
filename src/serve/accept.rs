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
/// Descriptors kept for everything but connections: the store, artifacts, guests' preopens.
const RESERVED_DESCRIPTORS: u64 = 256;

/// The default `--max-connections`: the descriptors this process may open (its soft limit,
/// first raised to the hard one), less a reserve for the rest of the server.
pub fn default_max_connections() -> usize {
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
    usize::try_from(descriptors.saturating_sub(RESERVED_DESCRIPTORS).max(16)).unwrap_or(16)
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
    fn the_default_bound_leaves_descriptors_for_the_rest_of_the_server() {
        let max = default_max_connections() as u64;
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(current) = limit.current {
            assert!(max + RESERVED_DESCRIPTORS <= current.max(16 + RESERVED_DESCRIPTORS));
        }
        assert!(max >= 16);
    }
}
