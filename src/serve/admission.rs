//! Admission: the bound on calls in flight (`hako serve --max-calls`), and each package's share
//! of it (`--max-calls-per-package`, by default three quarters of it): a package whose calls
//! hold its share is refused more while the rest stay open to the other packages, so one
//! tenant's slow calls cannot take every slot. A call is admitted or refused at once, never
//! queued: past either bound the front end answers 503 with `Retry-After`.
//! An admitted call counts until what it holds is let go — its answer sent and its instance's
//! memory given back — so the bound is also a bound on the instances alive at once, and so on
//! the memory calls hold (at most `--max-calls` × the call's memory cap, and in practice what
//! each instance touched).
//!
//! It does not run calls or decide which runs first: that is [`super::threads`] and
//! [`super::permits`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The server's bound on calls in flight, each package's share of it, and the count of those
/// admitted.
pub struct Admission {
    max: u64,
    share: u64,
    admitted: Arc<AtomicU64>,
}

/// A package's share when the operator sets none: three quarters of the calls in flight (at
/// least one), so that a quarter stays for the others.
pub fn default_share(max: u64) -> u64 {
    (max.saturating_mul(3) / 4).max(1)
}

impl Admission {
    /// At most `max` calls (at least one) in flight, and at most `share` (between one and
    /// `max`) of one package.
    pub fn new(max: u64, share: u64) -> Self {
        let max = max.max(1);
        Self {
            max,
            share: share.clamp(1, max),
            admitted: Arc::default(),
        }
    }

    /// One package's share.
    pub fn share(&self) -> u64 {
        self.share
    }

    /// The bound.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Calls admitted and not yet let go.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Admits one more call of the package whose calls in flight `package` counts, or says
    /// which bound refuses it: that package holds its share, or `max` calls are in flight.
    pub fn admit(&self, package: &Arc<AtomicU64>) -> Result<Admitted, Full> {
        let below = |bound: u64| move |n: u64| (n < bound).then_some(n + 1);
        package
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, below(self.share))
            .map_err(|_| Full::Package)?;
        let package = Arc::clone(package);
        if self
            .admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, below(self.max))
            .is_err()
        {
            package.fetch_sub(1, Ordering::AcqRel);
            return Err(Full::Server);
        }
        Ok(Admitted {
            total: Arc::clone(&self.admitted),
            package,
        })
    }
}

/// Which bound refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Its package holds its share.
    Package,
    /// The server holds `--max-calls`.
    Server,
}

/// One admitted call; it counts against both bounds until dropped.
pub struct Admitted {
    total: Arc<AtomicU64>,
    package: Arc<AtomicU64>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.package.fetch_sub(1, Ordering::AcqRel);
        self.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_a_call_is_refused_until_one_is_let_go() {
        let admission = Admission::new(2, 2);
        let (a, b) = (Arc::default(), Arc::default());
        let first = admission.admit(&a).unwrap();
        let _second = admission.admit(&b).unwrap();
        assert_eq!(admission.admit(&a).err(), Some(Full::Server));
        assert_eq!(admission.admit(&b).err(), Some(Full::Server));
        assert_eq!(admission.admitted(), 2);
        drop(first);
        assert!(admission.admit(&b).is_ok());
    }

    #[test]
    fn a_package_at_its_share_is_refused_while_the_others_get_the_rest() {
        let admission = Admission::new(4, default_share(4));
        assert_eq!(admission.share(), 3);
        let (a, b) = (Arc::default(), Arc::default());
        let held: Vec<_> = (0..3).map(|_| admission.admit(&a).unwrap()).collect();
        assert_eq!(
            admission.admit(&a).err(),
            Some(Full::Package),
            "past its share"
        );
        // The refusal took nothing from either count.
        assert_eq!(a.load(Ordering::Relaxed), 3);
        assert_eq!(admission.admitted(), 3);
        let other = admission
            .admit(&b)
            .expect("the quarter left is the others'");
        assert_eq!(
            admission.admit(&b).err(),
            Some(Full::Server),
            "the server is full"
        );
        assert_eq!(
            b.load(Ordering::Relaxed),
            1,
            "a refusal at the total gives back the share"
        );
        drop(held);
        drop(other);
        assert_eq!((admission.admitted(), a.load(Ordering::Relaxed)), (0, 0));
    }

    #[test]
    fn shares_are_at_least_one_and_at_most_the_bound() {
        assert_eq!(default_share(1), 1);
        assert_eq!(default_share(1024), 768);
        assert_eq!(Admission::new(8, 0).share(), 1);
        assert_eq!(Admission::new(8, 100).share(), 8);
    }
}
