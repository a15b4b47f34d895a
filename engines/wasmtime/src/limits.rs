//! What bounds one run on wasmtime: the memory cap, as a store's [`ResourceLimiter`] that
//! remembers when it refused the guest memory, and the deadline, as an [`Interrupt`] that
//! stops only its own store's guest.
//!
//! Why epochs, and why per store: wasmtime offers fuel (counted in every basic block, slow)
//! and epoch interruption (one load and compare at function entries and loop headers). The
//! epoch counter is engine-wide, so bumping it reaches every store of the engine, not just the
//! one whose call ran out of time. Each store therefore keeps its deadline one tick ahead of the
//! engine's epoch and installs a deadline callback: when a bump reaches the store, the callback
//! looks at the store's own flag, and traps only if this store was interrupted; any other
//! store re-arms one tick ahead and goes on. Interrupts are rare (a call past its deadline), so
//! the bystanders' cost, one callback per bump, does not matter, while the steady-state cost is
//! that of plain epoch checks.
//!
//! This file does not decide what the cap is nor when a deadline passes; the host does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hako_engine_api::{Interrupt, RunLimits};
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};

/// The memory cap of one run with its tables' reservations (see [`RunLimits`]), and whether
/// it ever refused the guest.
#[derive(Debug)]
pub(crate) struct MemoryCap {
    limits: RunLimits,
    refused: bool,
    /// The linear memory's current size.
    memory_bytes: u64,
    /// What the tables made so far reserve.
    table_bytes: u64,
    /// How many of the module's own tables are still to be made: wasmtime asks the limiter
    /// about each as it makes the instance (from 0 to its minimum), before any other grow.
    tables_to_make: u32,
}

impl MemoryCap {
    /// The cap of a run under `limits` of a module that defines `tables` tables.
    pub(crate) fn new(limits: RunLimits, tables: u32) -> Self {
        Self {
            limits,
            refused: false,
            memory_bytes: 0,
            table_bytes: 0,
            tables_to_make: tables,
        }
    }

    /// Whether the guest was refused memory during this run: a grow past the cap, a grow the
    /// memory itself could not make, an initial memory above the cap, or a table that could
    /// not be made.
    pub(crate) fn refused(&self) -> bool {
        self.refused
    }

    fn cap_bytes(&self) -> usize {
        usize::try_from(self.limits.max_memory_bytes).unwrap_or(usize::MAX)
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let tables = usize::try_from(self.table_bytes).unwrap_or(usize::MAX);
        let allowed = desired.saturating_add(tables) <= self.cap_bytes();
        if allowed {
            self.memory_bytes = desired as u64;
        } else {
            self.refused = true;
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // The grow fails in the guest (`memory.grow` answers -1), as it does on wasmer when
        // the memory's own maximum or the slot's size is reached; the refusal is remembered.
        self.refused = true;
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let bound = self.limits.max_table_elements as usize;
        if self.tables_to_make > 0 {
            // A table being made: its minimum must be within the bound and its reservation
            // must fit beside the memory and the tables made before it.
            self.tables_to_make -= 1;
            let reservation = self
                .limits
                .table_reservation(maximum.map(|maximum| maximum as u64));
            let reserved = self.table_bytes + reservation;
            let fits =
                desired <= bound && self.memory_bytes + reserved <= self.limits.max_memory_bytes;
            if !fits {
                self.refused = true;
                return Ok(false);
            }
            self.table_bytes = reserved;
            return Ok(true);
        }
        // A `table.grow`: past the bound it answers -1, as past a declared maximum, and the
        // memory cap is not involved (the table reserved its bound when it was made).
        Ok(desired <= bound)
    }
}

/// Stops one store's guest code: sets the store's flag, then bumps the engine's epoch so that
/// the store's next epoch check runs its deadline callback.
pub(crate) struct StoreInterrupt {
    engine: wasmtime::Engine,
    interrupted: Arc<AtomicBool>,
}

impl Interrupt for StoreInterrupt {
    fn interrupt(&self) {
        // The flag is set before the bump, so a callback that sees the bump sees the flag.
        self.interrupted.store(true, Ordering::SeqCst);
        self.engine.increment_epoch();
    }
}

/// Arms `store` for interrupts and returns the interrupt that stops it. Called before any
/// guest code of the run, including a start function.
pub(crate) fn arm<T: 'static>(store: &mut Store<T>) -> StoreInterrupt {
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupted);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if flag.load(Ordering::SeqCst) {
            Ok(UpdateDeadline::Interrupt)
        } else {
            // Another store was interrupted: stay one tick ahead of the engine's epoch.
            Ok(UpdateDeadline::Continue(1))
        }
    });
    StoreInterrupt {
        engine: store.engine().clone(),
        interrupted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_past_the_cap_is_refused_and_remembered() {
        let mut cap = MemoryCap::new(limits(2 * 65_536, 16), 0);
        assert!(cap.memory_growing(0, 65_536, None).unwrap());
        assert!(!cap.refused());
        assert!(cap.memory_growing(65_536, 2 * 65_536, None).unwrap());
        assert!(!cap.memory_growing(2 * 65_536, 3 * 65_536, None).unwrap());
        assert!(cap.refused());
    }

    #[test]
    fn a_failed_grow_counts_as_refused() {
        let mut cap = MemoryCap::new(limits(u64::MAX, 16), 0);
        cap.memory_grow_failed(wasmtime::Error::msg("no room"))
            .unwrap();
        assert!(cap.refused());
    }

    fn limits(max_memory_bytes: u64, max_table_elements: u32) -> RunLimits {
        RunLimits {
            max_memory_bytes,
            max_table_elements,
        }
    }

    #[test]
    fn a_table_reserves_its_bound_and_grows_no_further() {
        // 64 KiB of cap: one page of memory, then a table without a maximum reserves its
        // bound of 1,024 elements (8 KiB).
        let mut cap = MemoryCap::new(limits(65_536 + 8 * 1024, 1024), 1);
        assert!(cap.memory_growing(0, 65_536, None).unwrap());
        assert!(cap.table_growing(0, 10, None).unwrap());
        assert!(cap.table_growing(10, 1024, None).unwrap());
        assert!(!cap.table_growing(1024, 1025, None).unwrap());
        // A refused table.grow is no refused memory: the trap after it stays a trap.
        assert!(!cap.refused());
        // The memory may not grow into the tables' reservation.
        assert!(!cap.memory_growing(65_536, 2 * 65_536, None).unwrap());
        assert!(cap.refused());
    }

    #[test]
    fn a_table_whose_minimum_or_reservation_does_not_fit_is_refused() {
        let mut cap = MemoryCap::new(limits(1 << 20, 1024), 1);
        assert!(!cap.table_growing(0, 1025, None).unwrap());
        assert!(cap.refused());
        let mut cap = MemoryCap::new(limits(65_536, 1024), 1);
        assert!(cap.memory_growing(0, 65_536, None).unwrap());
        assert!(!cap.table_growing(0, 1, Some(1)).unwrap());
        assert!(cap.refused());
    }
}
