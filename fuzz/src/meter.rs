//! A global allocator that counts what each thread holds: [`Meter`] forwards every call to the
//! system allocator and keeps, per thread, the bytes allocated and not yet freed and the most
//! of them held at once, so that [`peak_during`] can tell how much memory one piece of code
//! needed while other threads (other tests) allocate as they like.
//!
//! Only the thread's own allocations count: memory freed on another thread than the one that
//! allocated it moves the two threads' counts apart, which no code measured here does. It
//! does not limit anything; the checks compare what it measured with their bounds.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The counting allocator; install it with `#[global_allocator]`.
pub struct Meter;

thread_local! {
    /// Bytes this thread allocated and has not freed (negative after freeing another's).
    static HELD: Cell<isize> = const { Cell::new(0) };
    /// The most `HELD` has been since the last [`peak_during`] began.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// Adds `bytes` (negative: freed) to this thread's count. The cells are const-initialized and
/// have no destructor, so they neither allocate nor go away while the thread runs; a thread
/// past its end simply stops counting.
fn count(bytes: isize) {
    let _ = HELD.try_with(|held| {
        let now = held.get().wrapping_add(bytes);
        held.set(now);
        let _ = PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now);
            }
        });
    });
}

fn signed(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every method hands its arguments unchanged to `System`, whose allocations satisfy
// the `GlobalAlloc` contract, and returns what `System` returned. The counting beside it only
// touches this thread's `Cell`s: it neither allocates nor unwinds.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which is `System`'s too.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            count(signed(layout.size()));
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count(signed(layout.size()));
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        count(-signed(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`, and the caller upholds `realloc`'s
        // contract for `new_size`.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            count(signed(new_size).wrapping_sub(signed(layout.size())));
        }
        moved
    }
}

/// Runs `work` and returns its value with the most bytes this thread held at once while it
/// ran, above what it held when `work` began.
///
/// Panics when [`Meter`] is not the global allocator: a bound checked against a meter that
/// counts nothing would always hold.
pub fn peak_during<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let start = HELD.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    let probe = std::hint::black_box(vec![0u8; 4096]);
    let counting = PEAK.with(Cell::get) >= start + 4096;
    drop(probe);
    assert!(counting, "the counting allocator (Meter) is not installed");
    PEAK.with(|peak| peak.set(HELD.with(Cell::get)));
    let value = work();
    let peak = PEAK.with(Cell::get);
    (value, usize::try_from(peak - start).unwrap_or(0))
}
