//! The memory cap: tunables that clamp every linear memory's maximum to the running call's
//! cap, and remember when a guest was refused memory, so a trap that follows a refused
//! `memory.grow` is reported as running out of memory rather than as a plain trap.
//!
//! The cap belongs to a call, but tunables belong to the engine; the link between them is a
//! thread-local set by [`CapScope`] for the duration of one run on the run's own thread (a
//! store never leaves the thread it runs on). The same scope carries the module's memory image
//! ([`crate::image`]) to the first memory the run's instance makes (ABI 1 modules have one).
//! Memories live in [`crate::pool`]'s reused slots. This file does not decide what the cap is.

use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wasmer::sys::{BaseTunables, Tunables};
use wasmer::{MemoryType, Pages, TableType};
use wasmer_types::{MemoryError, MemoryStyle, TableStyle};
use wasmer_vm::{LinearMemory, Trap, VMMemory, VMMemoryDefinition, VMTable, VMTableDefinition};

use crate::image::Image;
use crate::pool::PooledMemory;

/// What the running call allows, and what happened to it.
#[derive(Debug, Clone)]
struct CapState {
    max_pages: u32,
    refused: Arc<AtomicBool>,
    /// The image for the instance's memory, taken by the first memory made.
    image: Option<Arc<Image>>,
}

thread_local! {
    static CURRENT: RefCell<Option<CapState>> = const { RefCell::new(None) };
}

/// Sets the cap for runs on this thread until dropped.
pub(crate) struct CapScope {
    refused: Arc<AtomicBool>,
}

impl CapScope {
    /// `image` goes to the first memory the instance makes.
    pub(crate) fn enter(max_memory_bytes: u64, image: Option<Arc<Image>>) -> Self {
        let max_pages = (max_memory_bytes / wasmer::WASM_PAGE_SIZE as u64).min(65_536) as u32;
        let refused = Arc::new(AtomicBool::new(false));
        CURRENT.with(|current| {
            *current.borrow_mut() = Some(CapState {
                max_pages,
                refused: Arc::clone(&refused),
                image,
            })
        });
        Self { refused }
    }

    /// Whether the guest was refused memory because of the cap during this scope.
    pub(crate) fn refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
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
        if ty.minimum.0 > state.max_pages {
            state.refused.store(true, Ordering::Release);
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
            let memory = unsafe { PooledMemory::new(&ty, None, state.map(|s| s.refused), None)? };
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
                    state.map(|s| s.refused),
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
        self.base.create_host_table(ty, style)
    }

    unsafe fn create_vm_table(
        &self,
        ty: &TableType,
        style: &TableStyle,
        vm_definition_location: NonNull<VMTableDefinition>,
    ) -> Result<VMTable, String> {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { self.base.create_vm_table(ty, style, vm_definition_location) }
    }
}

fn watch(memory: VMMemory, state: Option<CapState>) -> VMMemory {
    match state {
        Some(state) => VMMemory(Box::new(WatchedMemory {
            inner: memory.0,
            refused: state.refused,
        })),
        None => memory,
    }
}

/// A linear memory that records a refused grow; everything else is the inner memory's.
#[derive(Debug)]
struct WatchedMemory {
    inner: Box<dyn LinearMemory + Send + Sync + 'static>,
    refused: Arc<AtomicBool>,
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
        let grown = self.inner.grow(delta);
        if grown.is_err() {
            self.refused.store(true, Ordering::Release);
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
