//! The host descriptors all guests of the process hold together. Each guest may hold
//! [`super::MAX_OPEN_FDS`] at once, but a server runs up to `--max-calls` guests, and 1,024 of
//! them holding 128 each would need twice the process's descriptor limit: past the bound here a
//! guest's open is refused `ENFILE` (the system's table is full), so that a guest never takes
//! the descriptors the server's connections, store and compile workers need.
//!
//! What counts: every file or directory a guest holds in its fd table (opened by `path_open`, or
//! a lazy preopen opened on first use), and the two a `subako_http` file body or file output
//! holds while the broker reads or writes it. Preopens opened before the run (`hako run
//! --dir`) and the descriptors a path lookup opens and closes within one host call do not:
//! those come from what the server keeps beside its connections.
//!
//! The bound is the process's, set once by `hako serve` ([`GUEST_DESCRIPTORS`]); without it, as
//! in `hako run`, it is unbounded and each guest's own bound is what holds.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::error::errno::ENFILE;
use super::Fail;

/// The bound every guest of this process shares.
pub static GUEST_DESCRIPTORS: Descriptors = Descriptors::new(usize::MAX);

/// A count of descriptors held, within a limit.
#[derive(Debug)]
pub struct Descriptors {
    limit: AtomicUsize,
    held: AtomicUsize,
}

impl Descriptors {
    pub const fn new(limit: usize) -> Self {
        Self {
            limit: AtomicUsize::new(limit),
            held: AtomicUsize::new(0),
        }
    }

    /// Sets the limit; descriptors held past a lowered one stay until given back.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Release);
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// Descriptors held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// `count` more descriptors if they fit under the limit, given back when the [`Held`] is
    /// dropped; `ENFILE` otherwise (nothing taken).
    pub(crate) fn take(&'static self, count: usize) -> Result<Held, Fail> {
        let limit = self.limit();
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(count).filter(|&after| after <= limit)
            })
            .map_err(|_| Fail::Errno(ENFILE))?;
        Ok(Held { from: self, count })
    }
}

/// Descriptors taken from a [`Descriptors`], given back when dropped.
#[derive(Debug)]
pub struct Held {
    from: &'static Descriptors,
    count: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.from.held.fetch_sub(self.count, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(limit: usize) -> &'static Descriptors {
        Box::leak(Box::new(Descriptors::new(limit)))
    }

    #[test]
    fn past_the_limit_a_take_is_enfile_and_takes_nothing() {
        let descriptors = bound(3);
        let two = descriptors.take(2).unwrap();
        assert!(matches!(descriptors.take(2), Err(Fail::Errno(ENFILE))));
        assert_eq!(descriptors.held(), 2);
        let one = descriptors.take(1).unwrap();
        assert!(matches!(descriptors.take(1), Err(Fail::Errno(ENFILE))));
        drop(two);
        assert_eq!(descriptors.held(), 1);
        assert!(descriptors.take(2).is_ok());
        drop(one);
        assert_eq!(descriptors.held(), 0);
    }

    #[test]
    fn a_lowered_limit_refuses_new_takes_only() {
        let descriptors = bound(4);
        let held = descriptors.take(4).unwrap();
        descriptors.set_limit(2);
        assert!(descriptors.take(1).is_err());
        drop(held);
        assert!(descriptors.take(2).is_ok());
    }
}
