//! The memory cap: tunables that clamp every linear memory's maximum to the running call's
//! cap and every table's to the run's table bound, count the tables' reservations against the
//! cap (see [`hako_engine_api::RunLimits`]), and remember when a guest was refused memory, so a
//! trap that follows a refused `memory.grow` is reported as running out of memory rather than
//! as a plain trap.
//!
//! The cap belongs to a call, but tunables belong to the engine; the link between them is a
//! thread-local set by [`CapScope`] for the duration of one run on the run's own thread (a
//! store never leaves the thread it runs on). The same scope carries the module's memory image
//! ([`crate::image`]) to the first memory the run's instance makes (ABI 1 modules have one).
//! Memories live in [`crate::pool`]'s reused slots. This file does not decide what the cap is.
//!
//! wasmer 7.4's own `VMTable::grow` checks nothing but a declared maximum, and a table that
//! declares none would grow until the allocator aborts the process: the bound here is what
//! stops `table.grow` (it answers -1 past it).

use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use hako_engine_api::RunLimits;
use wasmer::sys::{BaseTunables, Tunables};
use wasmer::{MemoryType, Pages, TableType};
use wasmer_types::{MemoryError, MemoryStyle, TableStyle};
use wasmer_vm::{LinearMemory, Trap, VMMemory, VMMemoryDefinition, VMTable, VMTableDefinition};

use crate::image::Image;
use crate::pool::PooledMemory;

/// What one run may use of its memory cap and has used, shared by its linear memory and its
/// tables, and whether the guest was ever refused.
#[derive(Debug)]
pub(crate) struct Usage {
    limits: RunLimits,
    refused: AtomicBool,
    /// The linear memory's current size.
    memory_bytes: AtomicU64,
    /// What the tables made so far reserve.
    table_bytes: AtomicU64,
}

impl Usage {
    pub(crate) fn new(limits: RunLimits) -> Self {
        Self {
            limits,
            refused: AtomicBool::new(false),
            memory_bytes: AtomicU64::new(0),
            table_bytes: AtomicU64::new(0),
        }
    }

    /// Records that the guest was refused memory (or a table).
    pub(crate) fn refuse(&self) {
        self.refused.store(true, Ordering::Release);
    }

    pub(crate) fn refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// Whether a linear memory of `bytes` fits beside the tables' reservations; when it does,
    /// it is the memory's size from now on. A refusal is recorded.
    pub(crate) fn memory_fits(&self, bytes: u64) -> bool {
        let tables = self.table_bytes.load(Ordering::Acquire);
        let fits = bytes.saturating_add(tables) <= self.limits.max_memory_bytes;
        if fits {
            self.memory_bytes.store(bytes, Ordering::Release);
        } else {
            self.refuse();
        }
        fits
    }

    /// The table type a run may have: its maximum lowered to the table bound, its elements
    /// reserved against the cap. `Err` (recorded as a refusal) when its minimum is above the
    /// bound or the reservation does not fit beside the memory and the other tables.
    fn table(&self, ty: &TableType) -> Result<TableType, String> {
        let bound = self.limits.max_table_elements;
        if ty.minimum > bound {
            self.refuse();
            return Err(format!(
                "a table of at least {} elements is above this run's bound of {bound} elements",
                ty.minimum
            ));
        }
        let reservation = self.limits.table_reservation(ty.maximum.map(u64::from));
        let reserved = self.table_bytes.load(Ordering::Acquire) + reservation;
        if self.memory_bytes.load(Ordering::Acquire) + reserved > self.limits.max_memory_bytes {
            self.refuse();
            return Err(format!(
                "the module's memory and tables together are above the cap of {} bytes \
                 (a table of up to {} elements reserves {reservation} bytes)",
                self.limits.max_memory_bytes,
                reservation / hako_engine_api::TABLE_ELEMENT_BYTES
            ));
        }
        self.table_bytes.store(reserved, Ordering::Release);
        let maximum = ty.maximum.map_or(bound, |maximum| maximum.min(bound));
        Ok(TableType {
            maximum: Some(maximum),
            ..*ty
        })
    }
}

/// What the running call allows, and what happened to it.
#[derive(Debug, Clone)]
struct CapState {
    max_pages: u32,
    usage: Arc<Usage>,
    /// The image for the instance's memory, taken by the first memory made.
    image: Option<Arc<Image>>,
}

thread_local! {
    static CURRENT: RefCell<Option<CapState>> = const { RefCell::new(None) };
}

/// Sets the cap for runs on this thread until dropped.
pub(crate) struct CapScope {
    usage: Arc<Usage>,
}

impl CapScope {
    /// `image` goes to the first memory the instance makes.
    pub(crate) fn enter(limits: RunLimits, image: Option<Arc<Image>>) -> Self {
        let max_pages =
            (limits.max_memory_bytes / wasmer::WASM_PAGE_SIZE as u64).min(65_536) as u32;
        let usage = Arc::new(Usage::new(limits));
        CURRENT.with(|current| {
            *current.borrow_mut() = Some(CapState {
                max_pages,
                usage: Arc::clone(&usage),
                image,
            })
        });
        Self { usage }
    }

    /// Whether the guest was refused memory because of the cap during this scope.
    pub(crate) fn refused(&self) -> bool {
        self.usage.refused()
    }

    /// The run's record of its memory and refusals, which its memory and tables keep after the
    /// scope (the instantiation) ends.
    pub(crate) fn usage(&self) -> Arc<Usage> {
        Arc::clone(&self.usage)
    }
}

impl Drop for CapScope {
    fn drop(&mut self) {
        CURRENT.with(|current| *current.borrow_mut() = None);
    }
}

/// Engine tunables: wasmer's base tunables with every memory clamped to the current cap.
#[derive(Default)]
pub(crate) struct CappedTunables {
    base: BaseTunables,
}

impl CappedTunables {
    /// The memory type a run may have, or the refusal when even its minimum is over the cap.
    /// The state it returns holds the image, taken from the scope.
    fn clamp(ty: &MemoryType) -> Result<(MemoryType, Option<CapState>), MemoryError> {
        let Some(state) = CURRENT.with(|current| {
            let mut current = current.borrow_mut();
            let state = current.as_mut()?;
            let taken = state.image.take();
            Some(CapState {
                image: taken,
                ..state.clone()
            })
        }) else {
            return Ok((*ty, None));
        };
        if ty.minimum.0 > state.max_pages || !state.usage.memory_fits(ty.minimum.bytes().0 as u64) {
            state.usage.refuse();
            return Err(MemoryError::MinimumMemoryTooLarge {
                min_requested: ty.minimum,
                max_allowed: Pages(state.max_pages),
            });
        }
        let maximum = ty
            .maximum
            .map_or(state.max_pages, |max| max.0.min(state.max_pages));
        let clamped = MemoryType::new(ty.minimum, Some(Pages(maximum)), ty.shared);
        Ok((clamped, Some(state)))
    }

    /// The table type a run may have (see [`Usage::table`]); outside a run, the type as is.
    fn clamp_table(ty: &TableType) -> Result<TableType, String> {
        let usage = CURRENT.with(|current| current.borrow().as_ref().map(|s| Arc::clone(&s.usage)));
        match usage {
            Some(usage) => usage.table(ty),
            None => Ok(*ty),
        }
    }
}

impl Tunables for CappedTunables {
    fn memory_style(&self, memory: &MemoryType) -> MemoryStyle {
        self.base.memory_style(memory)
    }

    fn table_style(&self, table: &TableType) -> TableStyle {
        self.base.table_style(table)
    }

    fn create_host_memory(
        &self,
        ty: &MemoryType,
        style: &MemoryStyle,
    ) -> Result<VMMemory, MemoryError> {
        let (ty, state) = Self::clamp(ty)?;
        if *style == MemoryStyle::Static && !ty.shared {
            // SAFETY: without a location the memory owns its definition. A host memory is no
            // instance's: it gets no image.
            let memory = unsafe { PooledMemory::new(&ty, None, state.map(|s| s.usage), None)? };
            return Ok(VMMemory(Box::new(memory)));
        }
        let memory = self.base.create_host_memory(&ty, style)?;
        Ok(watch(memory, state))
    }

    unsafe fn create_vm_memory(
        &self,
        ty: &MemoryType,
        style: &MemoryStyle,
        vm_definition_location: NonNull<VMMemoryDefinition>,
    ) -> Result<VMMemory, MemoryError> {
        let (ty, state) = Self::clamp(ty)?;
        let image = state.as_ref().and_then(|state| state.image.clone());
        let has_image = image.is_some();
        if *style == MemoryStyle::Static && !ty.shared {
            // SAFETY: the caller guarantees the definition location is valid for the memory's
            // life, which is `PooledMemory::new`'s contract.
            let memory = unsafe {
                PooledMemory::new(
                    &ty,
                    Some(vm_definition_location),
                    state.map(|s| s.usage),
                    image,
                )?
            };
            return Ok(VMMemory(Box::new(memory)));
        }
        if has_image {
            // Only pooled memories map images; an engine whose memories are not static would
            // need the segments copied, which the module no longer carries.
            return Err(MemoryError::Generic(
                "a memory image needs a static, unshared memory".into(),
            ));
        }
        // SAFETY: the caller's contract (a valid, owned definition location) is passed on
        // unchanged; only the memory type's maximum was lowered.
        let memory = unsafe {
            self.base
                .create_vm_memory(&ty, style, vm_definition_location)?
        };
        Ok(watch(memory, state))
    }

    fn create_host_table(&self, ty: &TableType, style: &TableStyle) -> Result<VMTable, String> {
        self.base.create_host_table(&Self::clamp_table(ty)?, style)
    }

    unsafe fn create_vm_table(
        &self,
        ty: &TableType,
        style: &TableStyle,
        vm_definition_location: NonNull<VMTableDefinition>,
    ) -> Result<VMTable, String> {
        let ty = Self::clamp_table(ty)?;
        // SAFETY: the caller's contract is passed on unchanged; only the table type's maximum
        // was lowered.
        unsafe {
            self.base
                .create_vm_table(&ty, style, vm_definition_location)
        }
    }
}

fn watch(memory: VMMemory, state: Option<CapState>) -> VMMemory {
    match state {
        Some(state) => VMMemory(Box::new(WatchedMemory {
            inner: memory.0,
            usage: state.usage,
        })),
        None => memory,
    }
}

/// A linear memory that counts its grows against the cap and records a refused one;
/// everything else is the inner memory's.
#[derive(Debug)]
struct WatchedMemory {
    inner: Box<dyn LinearMemory + Send + Sync + 'static>,
    usage: Arc<Usage>,
}

impl LinearMemory for WatchedMemory {
    fn ty(&self) -> MemoryType {
        self.inner.ty()
    }

    fn size(&self) -> Pages {
        self.inner.size()
    }

    fn style(&self) -> MemoryStyle {
        self.inner.style()
    }

    fn grow(&mut self, delta: Pages) -> Result<Pages, MemoryError> {
        let current = self.inner.size();
        let fits = current
            .checked_add(delta)
            .is_some_and(|size| self.usage.memory_fits(size.bytes().0 as u64));
        if !fits {
            self.usage.refuse();
            return Err(MemoryError::CouldNotGrow {
                current,
                attempted_delta: delta,
            });
        }
        let grown = self.inner.grow(delta);
        if grown.is_err() {
            self.usage.refuse();
        }
        grown
    }

    fn grow_at_least(&mut self, min_size: u64) -> Result<(), MemoryError> {
        self.inner.grow_at_least(min_size)
    }

    fn reset(&mut self) -> Result<(), MemoryError> {
        self.inner.reset()
    }

    fn vmmemory(&self) -> NonNull<VMMemoryDefinition> {
        self.inner.vmmemory()
    }

    fn try_clone(&self) -> Result<Box<dyn LinearMemory + Send + Sync + 'static>, MemoryError> {
        self.inner.try_clone()
    }

    unsafe fn initialize_with_data(&self, start: usize, data: &[u8]) -> Result<(), Trap> {
        // SAFETY: the same contract as the inner memory's, which does the work.
        unsafe { self.inner.initialize_with_data(start, data) }
    }

    fn copy(&self) -> Result<Box<dyn LinearMemory + Send + Sync + 'static>, MemoryError> {
        self.inner.copy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmer::Type;

    fn usage(cap: u64, bound: u32) -> Usage {
        Usage::new(RunLimits {
            max_memory_bytes: cap,
            max_table_elements: bound,
        })
    }

    fn table(minimum: u32, maximum: Option<u32>) -> TableType {
        TableType::new(Type::FuncRef, minimum, maximum)
    }

    #[test]
    fn a_table_gets_the_bound_as_its_maximum_and_reserves_it() {
        let usage = usage(1 << 20, 1024);
        let clamped = usage.table(&table(1, None)).unwrap();
        assert_eq!(clamped.maximum, Some(1024));
        let clamped = usage.table(&table(1, Some(16))).unwrap();
        assert_eq!(clamped.maximum, Some(16));
        assert_eq!(usage.table_bytes.load(Ordering::Acquire), (1024 + 16) * 8);
        // The memory may grow only into what the tables leave.
        assert!(usage.memory_fits((1 << 20) - (1024 + 16) * 8));
        assert!(!usage.memory_fits((1 << 20) - (1024 + 16) * 8 + 1));
        assert!(usage.refused());
    }

    #[test]
    fn a_table_past_the_bound_or_the_cap_is_refused() {
        let usage = usage(1 << 20, 1024);
        assert!(usage.table(&table(1025, None)).is_err());
        assert!(usage.refused());
        let usage = self::usage(65_536, 1024);
        assert!(usage.memory_fits(65_536));
        assert!(usage.table(&table(0, Some(1))).is_err());
        assert!(usage.refused());
    }
}
