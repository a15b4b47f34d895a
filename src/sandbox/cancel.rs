//! A call's cancellation flag: set once by the deadline timer (or the host), read at the start
//! of every WASI host call and by every one that could block, and able to wake a sleeping one. It does not interrupt
//! guest code; the engine's interrupt does that.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// Set when a call must stop; host calls that wait use [`Cancel::sleep_until`].
#[derive(Debug, Default)]
pub struct Cancel {
    cancelled: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Cancel {
    /// A flag that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the flag and wakes every sleeper.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        self.wake.notify_all();
    }

    /// Whether the flag is set.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Sleeps until `until` or until the flag is set, whichever comes first. Returns `true`
    /// when it woke because of the flag.
    pub fn sleep_until(&self, until: Instant) -> bool {
        let mut guard = self
            .lock
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        loop {
            if self.is_cancelled() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            guard = match self.wake.wait_timeout(guard, until - now) {
                Ok((guard, _)) => guard,
                Err(poison) => poison.into_inner().0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_sleep_ends_when_the_flag_is_set() {
        let cancel = Arc::new(Cancel::new());
        let other = Arc::clone(&cancel);
        let waker = std::thread::spawn(move || other.cancel());
        assert!(cancel.sleep_until(Instant::now() + Duration::from_secs(3600)));
        waker.join().unwrap();
    }

    #[test]
    fn a_sleep_without_the_flag_returns_false() {
        let cancel = Cancel::new();
        assert!(!cancel.sleep_until(Instant::now()));
    }
}
