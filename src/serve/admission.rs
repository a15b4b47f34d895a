//! Admission: the bound on calls in flight (`hako serve --max-calls`). A call is admitted or
//! refused at once, never queued: past the bound the front end answers 503 with `Retry-After`.
//! An admitted call counts until what it holds is let go — its answer sent and its instance's
//! memory given back — so the bound is also a bound on the instances alive at once, and so on
//! the memory calls hold (at most `--max-calls` × the call's memory cap, and in practice what
//! each instance touched).
//!
//! It does not run calls or decide which runs first: that is [`super::threads`] and
//! [`super::permits`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The server's bound on calls in flight, and the count of those admitted.
pub struct Admission {
    max: u64,
    admitted: Arc<AtomicU64>,
}

impl Admission {
    /// At most `max` calls (at least one) in flight.
    pub fn new(max: u64) -> Self {
        Self {
            max: max.max(1),
            admitted: Arc::default(),
        }
    }

    /// The bound.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Calls admitted and not yet let go.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Admits one more call, or none when `max` are in flight.
    pub fn admit(&self) -> Option<Admitted> {
        self.admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()?;
        Some(Admitted(Arc::clone(&self.admitted)))
    }
}

/// One admitted call; it counts against the bound until dropped.
pub struct Admitted(Arc<AtomicU64>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_a_call_is_refused_until_one_is_let_go() {
        let admission = Admission::new(2);
        let first = admission.admit().unwrap();
        let _second = admission.admit().unwrap();
        assert!(admission.admit().is_none());
        assert_eq!(admission.admitted(), 2);
        drop(first);
        assert!(admission.admit().is_some());
    }
}
