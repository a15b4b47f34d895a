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

use hako_engine_api::Interrupt;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};

/// The memory cap of one run, and whether it ever refused the guest.
#[derive(Debug)]
pub(crate) struct MemoryCap {
    max_bytes: usize,
    refused: bool,
}

impl MemoryCap {
    pub(crate) fn new(max_memory_bytes: u64) -> Self {
        Self {
            max_bytes: usize::try_from(max_memory_bytes).unwrap_or(usize::MAX),
            refused: false,
        }
    }

    /// Whether the guest was refused memory during this run: a grow past the cap, a grow the
    /// memory itself could not make, or an initial memory above the cap.
    pub(crate) fn refused(&self) -> bool {
        self.refused
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.max_bytes;
        if !allowed {
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
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
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
        let mut cap = MemoryCap::new(2 * 65_536);
        assert!(cap.memory_growing(0, 65_536, None).unwrap());
        assert!(!cap.refused());
        assert!(cap.memory_growing(65_536, 2 * 65_536, None).unwrap());
        assert!(!cap.memory_growing(2 * 65_536, 3 * 65_536, None).unwrap());
        assert!(cap.refused());
    }

    #[test]
    fn a_failed_grow_counts_as_refused() {
        let mut cap = MemoryCap::new(u64::MAX);
        cap.memory_grow_failed(wasmtime::Error::msg("no room"))
            .unwrap();
        assert!(cap.refused());
    }
}
