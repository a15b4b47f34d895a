//! The write budget of one call: how many bytes the guest may still write to files, shared by
//! the WASI layer and the `subako_http` broker's file outputs. It does not decide what happens
//! when the budget runs out (`EDQUOT` for WASI, `write_budget` for HTTP).

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes a call may still write to files, across all of them.
#[derive(Debug)]
pub struct WriteBudget {
    remaining: AtomicU64,
}

impl WriteBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> Self {
        Self {
            remaining: AtomicU64::new(bytes),
        }
    }

    /// Takes `bytes` from the budget if all of them fit; takes nothing otherwise.
    pub fn try_charge(&self, bytes: u64) -> bool {
        self.remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(bytes)
            })
            .is_ok()
    }

    /// Gives back `bytes` a charge took for what did not happen after all.
    pub fn refund(&self, bytes: u64) {
        self.remaining.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Bytes still allowed.
    pub fn remaining(&self) -> u64 {
        self.remaining.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_that_does_not_fit_takes_nothing() {
        let budget = WriteBudget::new(10);
        assert!(budget.try_charge(6));
        assert!(!budget.try_charge(5));
        assert_eq!(budget.remaining(), 4);
        assert!(budget.try_charge(4));
        assert_eq!(budget.remaining(), 0);
    }
}
