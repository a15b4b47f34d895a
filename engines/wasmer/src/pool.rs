//! A pool of linear memories, reused from call to call instead of mapped and unmapped for each.
//!
//! A wasm32 memory in wasmer's static style is an 8 GiB reservation of address space (the
//! 4 GiB the guest can index, then a 4 GiB guard), of which only the guest's current size is
//! accessible; compiled code leaves bounds checks to the inaccessible rest. Mapping that and
//! unmapping it again costs a call tens of microseconds (the unmap tears down page tables and
//! shoots down other cores' TLBs), and every page the guest touches faults in fresh. So a
//! memory's reservation ([`Slot`]) goes back to a process-wide pool when its instance is dropped:
//! its touched pages are zeroed in place (they stay resident, so the next call does not fault
//! them in again), everything else is handed back to the kernel, and the next memory takes the
//! slot and only changes which part is accessible.
//!
//! Resetting is what makes reuse safe: a slot leaves the pool only with every byte as a new
//! memory has it. The kernel names the pages the memory has of its own (`PAGEMAP_SCAN`, Linux
//! 6.7+: pages written, or private copies of an image's pages), and only those are put back,
//! in place, with a write: zeros, or the image's bytes. Untouched pages are already zero (or
//! the image's file), and the pages put back stay resident, so the next call does not fault
//! them in again. A memory that touched more than a bound is dropped instead
//! (`MADV_DONTNEED`). Where the kernel cannot say (older kernels, emulators), the pages last
//! seen resident (`mincore`, relearnt every few resets) are zeroed in place and everything
//! else is dropped. A slot that cannot be reset is unmapped, never reused.
//!
//! A memory with an image ([`crate::image`]) has it mapped copy-on-write from its file over
//! the image's span, so that instantiation copies nothing and only the pages a guest touches
//! are faulted in (reads share the file's pages; a write copies one page). A slot keeps its
//! image when released, and the next memory of the same module takes such a slot first and
//! maps nothing; so does a module loaded again from the same artifact file while such slots
//! are idle, since it shares the image ([`Image::from_file`]). A memory of another module
//! takes a new slot while the pool has room, and only then one whose image is replaced by
//! mapping ([`choose`]).
//!
//! Putting pages back in place rather than dropping them is what keeps a short call cheap,
//! and calls on several threads from slowing each other: dropping mapped pages, and the first
//! write to a page mapped from the file, each flush the page from every core's TLB (an
//! interrupt to each core the process runs on, which on a virtual machine exits to the
//! hypervisor). Dropping the image's written pages cost a greet call about 37 µs, more than
//! the rest of the call, and dropping its untouched heap made two threads' calls interrupt
//! each other at every reset. The copy is bounded by what the call wrote, never the image's
//! size.
//!
//! This file owns only memory placement; the cap a memory may grow to is [`crate::memory`]'s.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};

use wasmer::{MemoryType, Pages};
use wasmer_types::{MemoryError, MemoryStyle, WASM_PAGE_SIZE};
use wasmer_vm::{LinearMemory, VMMemoryDefinition};

use crate::image::Image;
use crate::memory::Usage;

/// Slots kept idle for reuse; more are unmapped when released. Each idle slot keeps the image
/// of the module it last held mapped, so a server calling many packages in turn maps nothing
/// for any of as many modules: with 64, 200 greet packages called in turn through `hako serve`
/// (pinned to one core) mapped an image over another at almost every call (TLB flushes, page
/// faults) and served 0.44 of one package's rate; with 1,024, 0.68–0.73. An idle slot costs an
/// 8 GiB reservation of address space (8 TiB for all: x86-64 and aarch64 with 48-bit addresses
/// give a process 128 TiB) and a few page-table pages; the bytes of their own they keep
/// resident are bounded together by [`IDLE_KEPT`].
const MAX_IDLE: usize = 1024;

/// The most bytes of their own (pages put back in place rather than dropped) all idle slots
/// keep resident together; a slot released past it has its pages dropped first.
const IDLE_KEPT: usize = 128 << 20;

/// The most resident bytes a released slot keeps (zeroed); a memory that had more touched is
/// handed back to the kernel whole rather than cleared byte by byte.
const KEEP_RESIDENT: usize = 16 << 20;

/// The most separate runs of resident pages a reset clears one by one (each gap between them
/// costs a call into the kernel); beyond it, the whole memory is dropped with one call.
const MAX_HOT_RUNS: usize = 32;

/// The longest run of untouched pages between two resident ones that a reset clears in place.
const MERGE_GAP_PAGES: usize = 8;

/// The most separate runs of a slot's own pages a reset puts back one by one; a memory whose
/// pages are more scattered is dropped whole.
const MAX_TOUCHED_RUNS: usize = 1024;

/// Resets between two scans of which pages are resident, when the kernel cannot name the
/// pages a memory wrote.
const RESCAN_EVERY: u32 = 16;

/// The most bytes of an image's span a reset restores from the image in place; a call that
/// wrote more has the whole span dropped instead.
const RESTORE_IN_PLACE: usize = 128 << 10;

pub(crate) fn os_page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// The bytes a static-style memory reserves: the indexable 4 GiB and the offset guard.
fn reservation() -> usize {
    MemoryStyle::static_bound().bytes().0 + MemoryStyle::static_offset_guard_size() as usize
}

/// One reserved memory region; the first `accessible` bytes are readable and writable, the rest
/// is not accessible. Unmapped when dropped.
struct Slot {
    base: NonNull<u8>,
    accessible: usize,
    /// The byte ranges a reset clears in place, ascending; everything else it drops.
    hot: Vec<(usize, usize)>,
    resets_since_scan: u32,
    /// The accessible length when `hot` was learnt.
    scanned_length: usize,
    /// The image mapped over part of the accessible bytes, if any. Held while the slot is idle
    /// too (its file stays open), so that the next memory of the same module, which asks for
    /// this very image, maps nothing.
    image: Option<Arc<Image>>,
    /// The bytes of its own the slot keeps resident since its last reset (pages put back in
    /// place); counted against [`IDLE_KEPT`] while it is idle.
    kept: usize,
}

// SAFETY: a slot is an address range owned by whoever holds the `Slot`; nothing about it is
// tied to the thread that mapped it.
unsafe impl Send for Slot {}

impl Slot {
    fn reserve() -> io::Result<Slot> {
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing touches no
        // existing memory.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reservation(),
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap: null"))?;
        // No transparent huge pages: a guest's write would make a reset write back (or the
        // kernel zero) a whole 2 MiB page where it touched 4 KiB. A kernel without them
        // refuses the advice, which changes nothing.
        // SAFETY: advice on this fresh reservation, which only this slot uses.
        unsafe { libc::madvise(base.as_ptr().cast(), reservation(), libc::MADV_NOHUGEPAGE) };
        Ok(Slot {
            base,
            accessible: 0,
            hot: Vec::new(),
            resets_since_scan: 0,
            scanned_length: 0,
            image: None,
            kept: 0,
        })
    }

    /// Whether the slot holds `image` (or, for `None`, no image).
    fn holds(&self, image: Option<&Arc<Image>>) -> bool {
        match (&self.image, image) {
            (Some(held), Some(wanted)) => Arc::ptr_eq(held, wanted),
            (None, None) => true,
            _ => false,
        }
    }

    /// Maps `image` copy-on-write over its span, which must be accessible.
    fn map_image(&mut self, image: &Arc<Image>) -> io::Result<()> {
        debug_assert!(self.image.is_none());
        if image.start + image.len > self.accessible {
            return Err(io::Error::other(
                "the image is larger than the initial memory",
            ));
        }
        let offset = libc::off_t::try_from(image.offset).map_err(io::Error::other)?;
        // SAFETY: the span lies inside this slot's accessible part, which only this slot uses
        // and nothing references now; MAP_FIXED replaces exactly those pages. The file holds
        // the image's bytes at `offset` (verified by the store, or a sealed memory file) and
        // is at least `offset + len` long, so no access faults past its end.
        let mapped = unsafe {
            libc::mmap(
                self.base.as_ptr().add(image.start).cast(),
                image.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                image.file.as_raw_fd(),
                offset,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        self.image = Some(Arc::clone(image));
        Ok(())
    }

    /// Replaces the image's span with zeroed anonymous memory, accessible as before.
    fn unmap_image(&mut self) -> io::Result<()> {
        // A slot that cannot be put back as it was must not be reused: the caller drops it.
        let Some(image) = self.image.take() else {
            return Ok(());
        };
        let (start, len) = (image.start, image.len);
        // SAFETY: as in `map_image`; the span was accessible (an image is only mapped over
        // accessible bytes and the slot is never shrunk below it while mapped).
        let mapped = unsafe {
            libc::mmap(
                self.base.as_ptr().add(start).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Makes exactly the first `bytes` accessible (a multiple of the wasm page size).
    fn set_accessible(&mut self, bytes: usize) -> io::Result<()> {
        let (start, len, protection) = if bytes > self.accessible {
            (
                self.accessible,
                bytes - self.accessible,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        } else if bytes < self.accessible {
            (bytes, self.accessible - bytes, libc::PROT_NONE)
        } else {
            return Ok(());
        };
        // SAFETY: the range lies inside this slot's reservation (`bytes` never exceeds the
        // indexable 4 GiB, checked by the callers), which only this slot uses.
        let status =
            unsafe { libc::mprotect(self.base.as_ptr().add(start).cast(), len, protection) };
        if status != 0 {
            return Err(io::Error::last_os_error());
        }
        self.accessible = bytes;
        Ok(())
    }

    /// Puts every accessible byte back as a new memory has it: the image's bytes over its
    /// span, zero elsewhere.
    ///
    /// When the kernel names the pages this slot's memory has of its own (`PAGEMAP_SCAN`: a
    /// page written, or a private copy of the image's), only those are put back, in place: the
    /// image's from the image, the others zeroed with a write. Nothing is dropped, so a reset
    /// makes no other core flush its TLB, and the pages stay resident for the next call. Past
    /// [`RESTORE_IN_PLACE`] bytes of the image's span, or [`KEEP_RESIDENT`] bytes outside it,
    /// that part is dropped instead (it reads the file, or zero, again).
    ///
    /// When the kernel cannot say (before Linux 6.7, under an emulator), the resident pages
    /// learnt every [`RESCAN_EVERY`] resets (`mincore`) are zeroed in place and every other
    /// page is dropped; a page touched outside that set in between is dropped like any other,
    /// so a stale set costs page faults, never stale data.
    fn reset(&mut self) -> io::Result<()> {
        self.kept = 0;
        if self.accessible == 0 {
            return Ok(());
        }
        if let Some(touched) = touched_pages(self.base, 0, self.accessible) {
            self.kept = self.restore_touched(&touched)?;
            return Ok(());
        }
        if self.resets_since_scan >= RESCAN_EVERY || self.scanned_length != self.accessible {
            self.scan();
        }
        self.resets_since_scan += 1;
        let (image_start, image_end) = self.image_span();
        if self.image.is_some() {
            self.drop_pages(image_start, image_end - image_start)?;
        }
        self.clear(0, image_start)?;
        self.clear(image_end, self.accessible)?;
        self.kept = self.hot.iter().map(|(start, end)| end - start).sum();
        Ok(())
    }

    /// Hands every accessible page back to the kernel (the image's span reads the file again,
    /// the rest zero): the slot keeps nothing of its own.
    fn drop_all(&mut self) -> io::Result<()> {
        self.kept = 0;
        self.drop_pages(0, self.accessible)
    }

    /// Puts back the `touched` pages (ascending byte ranges of this slot's own pages): in the
    /// image's span from the image, elsewhere with zeros. Returns the bytes put back in place,
    /// which stay resident.
    fn restore_touched(&self, touched: &[(usize, usize)]) -> io::Result<usize> {
        let (image_start, image_end) = self.image_span();
        // The part of a run inside the image's span (empty when it has none, or no image).
        let inside = |&(from, to): &(usize, usize)| (from.max(image_start), to.min(image_end));
        let length = |(from, to): (usize, usize)| to.saturating_sub(from);
        let all: usize = touched.iter().copied().map(length).sum();
        let in_image: usize = touched.iter().map(inside).map(length).sum();
        let mut kept_in_image = 0;
        if in_image > 0 {
            match self.image.as_ref().and_then(|image| image.bytes()) {
                Some(source) if in_image <= RESTORE_IN_PLACE => {
                    for (from, to) in touched.iter().map(inside).filter(|&run| length(run) > 0) {
                        // SAFETY: the range lies in the image's span, which is accessible and
                        // owned by this slot (no guest runs on it any more); `source` is the
                        // image's bytes for the span, and does not overlap the slot.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                source[from - image_start..to - image_start].as_ptr(),
                                self.base.as_ptr().add(from),
                                to - from,
                            )
                        };
                    }
                    kept_in_image = in_image;
                }
                _ => self.drop_pages(image_start, image_end - image_start)?,
            }
        }
        if all - in_image > KEEP_RESIDENT {
            self.drop_pages(0, image_start)?;
            self.drop_pages(image_end, self.accessible - image_end)?;
            return Ok(kept_in_image);
        }
        // The parts of each run before and after the image's span.
        let parts = touched
            .iter()
            .flat_map(|&(from, to)| [(from, to.min(image_start)), (from.max(image_end), to)]);
        for (from, to) in parts.filter(|&run| length(run) > 0) {
            // SAFETY: the range is accessible and owned by this slot; no guest runs on it any
            // more (its instance is gone) and nothing else holds a reference into it.
            unsafe { std::ptr::write_bytes(self.base.as_ptr().add(from), 0, to - from) };
        }
        Ok(kept_in_image + all - in_image)
    }

    /// The image's span, or an empty one at 0.
    fn image_span(&self) -> (usize, usize) {
        self.image
            .as_ref()
            .map_or((0, 0), |image| (image.start, image.start + image.len))
    }

    /// Zeroes the bytes from `from` to `to`: the hot ones in place, the others dropped.
    fn clear(&self, from: usize, to: usize) -> io::Result<()> {
        let mut cursor = from;
        for &(start, end) in &self.hot {
            let (start, end) = (start.max(from), end.min(to));
            if start >= end {
                continue;
            }
            if start > cursor {
                self.drop_pages(cursor, start - cursor)?;
            }
            // SAFETY: the range is accessible and owned by this slot; no guest runs on it any
            // more (its instance is gone) and nothing else holds a reference into it.
            unsafe { std::ptr::write_bytes(self.base.as_ptr().add(start), 0, end - start) };
            cursor = end;
        }
        if cursor < to {
            self.drop_pages(cursor, to - cursor)?;
        }
        Ok(())
    }

    /// Learns which accessible pages are resident, as byte ranges; an empty set (drop
    /// everything) when the kernel cannot say, when too much is resident to clear cheaply, or
    /// when the resident pages are too scattered.
    fn scan(&mut self) {
        self.hot.clear();
        self.resets_since_scan = 0;
        self.scanned_length = self.accessible;
        let page = os_page();
        let mut resident = vec![0u8; self.accessible.div_ceil(page)];
        // SAFETY: the range is this slot's accessible part; the vector has one byte per page.
        let status = unsafe {
            libc::mincore(
                self.base.as_ptr().cast(),
                self.accessible,
                resident.as_mut_ptr().cast(),
            )
        };
        if status != 0 {
            return;
        }
        let mut hot_bytes = 0;
        // An image's pages are resident when the file is cached, whoever touched them: they are
        // never cleared in place.
        let (image_start, image_end) = self.image_span();
        for (index, state) in resident.iter().enumerate() {
            if state & 1 == 0 || (image_start..image_end).contains(&(index * page)) {
                continue;
            }
            let start = index * page;
            // A short gap between two hot runs is cleared with them: writing a few pages costs
            // less than another call into the kernel to drop them.
            match self.hot.last_mut() {
                Some((_, end)) if start - *end <= MERGE_GAP_PAGES * page => {
                    hot_bytes += start + page - *end;
                    *end = start + page;
                }
                _ => {
                    hot_bytes += page;
                    self.hot.push((start, start + page));
                }
            }
        }
        if hot_bytes > KEEP_RESIDENT || self.hot.len() > MAX_HOT_RUNS {
            self.hot.clear();
        }
    }

    /// Hands pages back to the kernel; they read as zero afterwards.
    fn drop_pages(&self, start: usize, len: usize) -> io::Result<()> {
        // SAFETY: the range lies inside this slot's accessible part, which only this slot uses
        // and nothing references now.
        let status = unsafe {
            libc::madvise(
                self.base.as_ptr().add(start).cast(),
                len,
                libc::MADV_DONTNEED,
            )
        };
        if status != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SAFETY: the reservation was mapped by `reserve` with this size and is unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), reservation()) };
    }
}

/// The pages from `start` to `end` (offsets from `base`) that are this process's own: written
/// (an anonymous page, or a private copy of a page mapped from a file), resident or swapped
/// out, but not the shared zero page a read maps. Ascending offset ranges. `None` when the
/// kernel cannot say (before Linux 6.7, under an emulator) or when the pages lie in more than
/// [`MAX_TOUCHED_RUNS`] separate runs; a reset then goes as when the kernel cannot say.
fn touched_pages(base: NonNull<u8>, start: usize, end: usize) -> Option<Vec<(usize, usize)>> {
    /// `struct pm_scan_arg` of `linux/fs.h`.
    #[repr(C)]
    struct ScanArg {
        size: u64,
        flags: u64,
        start: u64,
        end: u64,
        walk_end: u64,
        vec: u64,
        vec_len: u64,
        max_pages: u64,
        category_inverted: u64,
        category_mask: u64,
        category_anyof_mask: u64,
        return_mask: u64,
    }
    /// `struct page_region`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Region {
        start: u64,
        end: u64,
        categories: u64,
    }
    /// `_IOWR('f', 16, struct pm_scan_arg)`.
    const PAGEMAP_SCAN: u64 =
        (3 << 30) | ((std::mem::size_of::<ScanArg>() as u64) << 16) | (0x66 << 8) | 16;
    const PAGE_IS_FILE: u64 = 1 << 2;
    const PAGE_IS_PRESENT: u64 = 1 << 3;
    const PAGE_IS_SWAPPED: u64 = 1 << 4;
    const PAGE_IS_PFNZERO: u64 = 1 << 5;
    /// Runs one call reports.
    const BATCH: usize = 64;
    static PAGEMAP: OnceLock<Option<std::fs::File>> = OnceLock::new();
    let pagemap = PAGEMAP
        .get_or_init(|| std::fs::File::open("/proc/self/pagemap").ok())
        .as_ref()?;
    let first = base.as_ptr() as u64 + start as u64;
    let last = base.as_ptr() as u64 + end as u64;
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut from = first;
    while from < last {
        let mut regions = [Region::default(); BATCH];
        let mut arg = ScanArg {
            size: std::mem::size_of::<ScanArg>() as u64,
            flags: 0,
            start: from,
            end: last,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: BATCH as u64,
            max_pages: 0,
            // Pages neither the file's nor the zero page, present or swapped out.
            category_inverted: PAGE_IS_FILE | PAGE_IS_PFNZERO,
            category_mask: PAGE_IS_FILE | PAGE_IS_PFNZERO,
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        };
        // SAFETY: PAGEMAP_SCAN reads `arg` and writes at most `vec_len` regions into
        // `regions`, both of which outlive the call; it only reads this process's page tables.
        let found = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        let found = usize::try_from(found).ok()?.min(BATCH);
        for region in &regions[..found] {
            let offset = |at: u64| (at.clamp(first, last) - first) as usize + start;
            let (run_from, run_to) = (offset(region.start), offset(region.end));
            match runs.last_mut() {
                // A run the last call cut off at its end goes on.
                Some((_, end)) if *end == run_from => *end = run_to,
                _ if run_from < run_to => runs.push((run_from, run_to)),
                _ => {}
            }
        }
        if runs.len() > MAX_TOUCHED_RUNS || arg.walk_end <= from {
            return None;
        }
        from = arg.walk_end;
    }
    Some(runs)
}

/// The process's idle slots, and the bytes of their own they keep resident together.
struct Idle {
    slots: Vec<Slot>,
    kept: usize,
    /// The most slots kept idle: [`MAX_IDLE`] (the tests' pools keep fewer).
    most: usize,
}

impl Idle {
    const fn new(most: usize) -> Mutex<Idle> {
        Mutex::new(Idle {
            slots: Vec::new(),
            kept: 0,
            most,
        })
    }
}

static IDLE: Mutex<Idle> = Idle::new(MAX_IDLE);

fn lock(pool: &Mutex<Idle>) -> std::sync::MutexGuard<'_, Idle> {
    pool.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// An idle slot for a memory with `image`, or a new one.
fn take_slot(image: Option<&Arc<Image>>) -> io::Result<Slot> {
    let taken = {
        let mut idle = lock(&IDLE);
        let taken =
            choose(&idle.slots, idle.most, image).map(|index| idle.slots.swap_remove(index));
        if let Some(slot) = &taken {
            idle.kept -= slot.kept;
        }
        taken
    };
    match taken {
        Some(slot) => Ok(slot),
        None => Slot::reserve(),
    }
}

/// Which of the `idle` slots a memory with `image` takes, or `None` for a new one: one that
/// holds `image` (for no image, one that holds none), which maps nothing; else a new slot while
/// fewer than `most` are idle; else one whose image no module uses any more (only idle
/// slots hold it), else the last released.
///
/// A new slot costs one reservation; mapping an image over another slot's resident pages, or
/// over another image, unmaps pages inside a mapping, which interrupts every core the process
/// has run on to flush their TLBs: a greet call on a module just loaded from a file no idle
/// slot's image came from took 73 µs on a slot that held another module's image and 40 µs on a
/// new slot (`cargo bench --bench cold_start -- from_disk_parts`). A slot holding a live
/// module's image is taken last: taking it would make that module, the next time it is called,
/// map its image again and fault its pages in anew, and two modules called in turn would each
/// pay it at every call.
fn choose(idle: &[Slot], most: usize, image: Option<&Arc<Image>>) -> Option<usize> {
    if let Some(index) = idle.iter().rposition(|slot| slot.holds(image)) {
        return Some(index);
    }
    if idle.len() < most {
        return None;
    }
    unused_image(idle).or(Some(idle.len() - 1))
}

/// The last of the `idle` slots whose image no module uses any more (only idle slots hold it).
fn unused_image(idle: &[Slot]) -> Option<usize> {
    // How many idle slots hold each image, counted once (not once per slot looked at): the
    // pool's lock is held here.
    let mut holders: HashMap<*const Image, usize> = HashMap::with_capacity(idle.len());
    for held in idle.iter().filter_map(|slot| slot.image.as_ref()) {
        *holders.entry(Arc::as_ptr(held)).or_default() += 1;
    }
    // Every other holder of an image is a module (or a run of one, or a slot in use, which its
    // memory's module outlives).
    let unused = |slot: &Slot| {
        slot.image
            .as_ref()
            .is_some_and(|held| Arc::strong_count(held) <= holders[&Arc::as_ptr(held)])
    };
    idle.iter().rposition(unused)
}

/// Resets a released slot and keeps it idle: with its pages put back in place while the idle
/// slots keep at most [`IDLE_KEPT`] bytes of their own together, with its pages dropped past
/// that. When the pool's most slots are idle, it takes the place of one whose image no module uses
/// any more (unmapped), or is unmapped itself when there is none.
fn give_back(pool: &Mutex<Idle>, mut slot: Slot) {
    if slot.reset().is_err() {
        return; // unmapped by its drop, never reused
    }
    let over = lock(pool).kept + slot.kept > IDLE_KEPT;
    // Dropped outside the lock: other threads take and release slots meanwhile.
    if over && slot.drop_all().is_err() {
        return;
    }
    let evicted = {
        let mut idle = lock(pool);
        let evicted = if idle.slots.len() >= idle.most {
            match unused_image(&idle.slots) {
                Some(index) => Some(idle.slots.swap_remove(index)),
                None => return,
            }
        } else {
            None
        };
        if let Some(evicted) = &evicted {
            idle.kept -= evicted.kept;
        }
        idle.kept += slot.kept;
        idle.slots.push(slot);
        evicted
    };
    // Unmapped outside the lock.
    drop(evicted);
}

/// Where a memory's definition lives: inside its instance (a module's own memory) or with the
/// memory itself (a memory made by the host).
enum Definition {
    Instance(NonNull<VMMemoryDefinition>),
    Own(Box<UnsafeCell<VMMemoryDefinition>>),
}

impl Definition {
    fn ptr(&self) -> NonNull<VMMemoryDefinition> {
        match self {
            Definition::Instance(ptr) => *ptr,
            // SAFETY: a box's contents are never null.
            Definition::Own(cell) => unsafe { NonNull::new_unchecked(cell.get()) },
        }
    }
}

/// A linear memory in a pooled slot, which counts its grows against the run's cap and records
/// when one is refused.
pub(crate) struct PooledMemory {
    slot: Option<Slot>,
    definition: Definition,
    ty: MemoryType,
    size: Pages,
    usage: Option<Arc<Usage>>,
}

// SAFETY: the memory owns its slot and its definition (or the instance owns the definition and
// outlives this memory); wasm memories that are not shared are used by one thread at a time,
// which is what wasmer's own memories assume when they implement these.
unsafe impl Send for PooledMemory {}
// SAFETY: as above.
unsafe impl Sync for PooledMemory {}

impl std::fmt::Debug for PooledMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledMemory")
            .field("ty", &self.ty)
            .field("size", &self.size)
            .finish()
    }
}

impl PooledMemory {
    /// A memory of type `ty` in a pooled slot, its definition written at `location` (or owned
    /// when `None`). Grows are counted in `usage`, which records a refused one.
    ///
    /// # Safety
    /// `location`, when given, must point to a valid memory definition that outlives the memory.
    /// `image`, when given, is mapped over its span (it must fit in the initial memory).
    pub(crate) unsafe fn new(
        ty: &MemoryType,
        location: Option<NonNull<VMMemoryDefinition>>,
        usage: Option<Arc<Usage>>,
        image: Option<Arc<Image>>,
    ) -> Result<Self, MemoryError> {
        if ty.minimum > Pages::max_value() {
            return Err(MemoryError::MinimumMemoryTooLarge {
                min_requested: ty.minimum,
                max_allowed: Pages::max_value(),
            });
        }
        if let Some(maximum) = ty.maximum {
            if maximum < ty.minimum {
                return Err(MemoryError::InvalidMemory {
                    reason: format!(
                        "the maximum ({} pages) is less than the minimum ({} pages)",
                        maximum.0, ty.minimum.0
                    ),
                });
            }
        }
        let region = |err: io::Error| MemoryError::Region(err.to_string());
        let mut slot = take_slot(image.as_ref()).map_err(region)?;
        if !slot.holds(image.as_ref()) {
            slot.unmap_image().map_err(region)?;
        }
        let bytes = ty.minimum.bytes().0;
        slot.set_accessible(bytes).map_err(region)?;
        if let Some(image) = &image {
            if slot.image.is_none() {
                slot.map_image(image).map_err(region)?;
            }
        }
        let value = VMMemoryDefinition {
            base: slot.base.as_ptr(),
            current_length: bytes,
        };
        let definition = match location {
            Some(mut ptr) => {
                // SAFETY: the caller guarantees the location is valid.
                unsafe { *ptr.as_mut() = value };
                Definition::Instance(ptr)
            }
            None => Definition::Own(Box::new(UnsafeCell::new(value))),
        };
        Ok(Self {
            slot: Some(slot),
            definition,
            ty: *ty,
            size: ty.minimum,
            usage,
        })
    }

    fn refuse(&self, delta: Pages) -> MemoryError {
        if let Some(usage) = &self.usage {
            usage.refuse();
        }
        MemoryError::CouldNotGrow {
            current: self.size,
            attempted_delta: delta,
        }
    }
}

impl LinearMemory for PooledMemory {
    fn ty(&self) -> MemoryType {
        MemoryType::new(self.size, self.ty.maximum, false)
    }

    fn size(&self) -> Pages {
        self.size
    }

    fn style(&self) -> MemoryStyle {
        MemoryStyle::Static
    }

    fn grow(&mut self, delta: Pages) -> Result<Pages, MemoryError> {
        if delta.0 == 0 {
            return Ok(self.size);
        }
        let Some(new_size) = self.size.checked_add(delta) else {
            return Err(self.refuse(delta));
        };
        let maximum = self.ty.maximum.unwrap_or(Pages::max_value());
        let fits = |usage: &Arc<Usage>| usage.memory_fits(new_size.bytes().0 as u64);
        if new_size > maximum
            || new_size > Pages::max_value()
            || !self.usage.as_ref().is_none_or(fits)
        {
            return Err(self.refuse(delta));
        }
        let bytes = new_size.bytes().0;
        let slot = self
            .slot
            .as_mut()
            .expect("a memory has its slot until it is dropped");
        slot.set_accessible(bytes)
            .map_err(|err| MemoryError::Region(err.to_string()))?;
        // SAFETY: the definition is valid for the memory's life (see `new`); the guest is
        // suspended in `memory.grow` while it changes.
        unsafe { (*self.definition.ptr().as_ptr()).current_length = bytes };
        let previous = self.size;
        self.size = new_size;
        Ok(previous)
    }

    fn grow_at_least(&mut self, min_size: u64) -> Result<(), MemoryError> {
        let current = self.size.bytes().0 as u64;
        if current < min_size {
            let pages = (min_size - current).div_ceil(WASM_PAGE_SIZE as u64);
            let delta = Pages(u32::try_from(pages).unwrap_or(u32::MAX));
            self.grow(delta)?;
        }
        Ok(())
    }

    fn vmmemory(&self) -> NonNull<VMMemoryDefinition> {
        self.definition.ptr()
    }

    fn try_clone(&self) -> Result<Box<dyn LinearMemory + Send + Sync + 'static>, MemoryError> {
        Err(MemoryError::MemoryNotShared)
    }

    fn copy(&self) -> Result<Box<dyn LinearMemory + Send + Sync + 'static>, MemoryError> {
        Err(MemoryError::UnsupportedOperation {
            message: "pooled memories are not copied".into(),
        })
    }
}

impl Drop for PooledMemory {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            give_back(&IDLE, slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most idle slots of the tests' own pools: a pool of [`MAX_IDLE`] reservations of
    /// 8 GiB each is more than qemu-user, which tracks its guest's address space page by page,
    /// can hold.
    const MOST: usize = 16;

    fn bytes(memory: &mut PooledMemory) -> &mut [u8] {
        let definition = memory.vmmemory();
        // SAFETY: the test owns the memory and nothing else uses it.
        unsafe {
            let definition = definition.as_ref();
            std::slice::from_raw_parts_mut(definition.base, definition.current_length)
        }
    }

    #[test]
    fn a_reused_slot_reads_as_zero_everywhere() {
        let ty = MemoryType::new(Pages(2), Some(Pages(4)), false);
        // Each round writes somewhere else, so that pages both inside and outside what the
        // slot last learnt as hot are dirtied before a reset.
        for round in 0..(2 * RESCAN_EVERY as usize + 3) {
            // SAFETY: no instance: the memory owns its definition.
            let mut memory = unsafe { PooledMemory::new(&ty, None, None, None) }.unwrap();
            assert!(
                bytes(&mut memory).iter().all(|byte| *byte == 0),
                "round {round}"
            );
            assert_eq!(bytes(&mut memory).len(), 2 * WASM_PAGE_SIZE);
            memory.grow(Pages(2)).unwrap();
            let data = bytes(&mut memory);
            let len = data.len();
            data[(round * 9_973) % len] = 1;
            data[(round * 70_001 + 4_096) % len] = 2;
            data[len - 1 - round] = 3;
        }
    }

    /// The accessible bytes of a slot, as a slice.
    fn slot_bytes(slot: &mut Slot) -> &mut [u8] {
        // SAFETY: the test owns the slot; its first `accessible` bytes are readable and
        // writable, and nothing else uses them.
        unsafe { std::slice::from_raw_parts_mut(slot.base.as_ptr(), slot.accessible) }
    }

    /// Which of the slot's pages from `from` to `to` are resident.
    fn resident(slot: &Slot, from: usize, to: usize) -> Vec<bool> {
        let page = os_page();
        let mut states = vec![0u8; (to - from).div_ceil(page)];
        // SAFETY: the range lies in the slot's accessible part; one byte per page.
        let status = unsafe {
            libc::mincore(
                slot.base.as_ptr().add(from).cast(),
                to - from,
                states.as_mut_ptr().cast(),
            )
        };
        assert_eq!(status, 0, "{}", io::Error::last_os_error());
        states.iter().map(|state| state & 1 == 1).collect()
    }

    #[test]
    fn a_reset_writes_back_only_the_pages_a_memory_wrote_and_keeps_them() {
        let page = os_page();
        let mut slot = Slot::reserve().unwrap();
        slot.set_accessible(20 * WASM_PAGE_SIZE).unwrap();
        // More separate runs than one scan reports, and pages only read (the zero page).
        let written: Vec<usize> = (0..100).map(|run| run * 3 * page).collect();
        let data = slot_bytes(&mut slot);
        for &at in &written {
            data[at + 17] = 5;
        }
        let read: u64 = (1..100).map(|run| data[run * 3 * page + page] as u64).sum();
        assert_eq!(read, 0);
        let Some(touched) = touched_pages(slot.base, 0, slot.accessible) else {
            eprintln!("PAGEMAP_SCAN is not available here: resets go by mincore");
            return;
        };
        let expected: Vec<(usize, usize)> = written.iter().map(|&at| (at, at + page)).collect();
        assert_eq!(touched, expected);
        slot.reset().unwrap();
        assert!(slot_bytes(&mut slot).iter().all(|byte| *byte == 0));
        // Put back with a write, not dropped: still resident.
        let states = resident(&slot, 0, slot.accessible);
        assert!(written.iter().all(|&at| states[at / page]));
        // Zeroed pages are this memory's own still: the next reset names them again.
        assert_eq!(
            touched_pages(slot.base, 0, slot.accessible).unwrap(),
            expected
        );
    }

    #[test]
    fn a_memory_that_touched_too_much_or_too_scattered_is_dropped_and_reads_zero() {
        let page = os_page();
        // Over the bytes a reset keeps resident, in one run.
        let mut slot = Slot::reserve().unwrap();
        let len = KEEP_RESIDENT + 4 * WASM_PAGE_SIZE;
        slot.set_accessible(len).unwrap();
        slot_bytes(&mut slot).fill(7);
        slot.reset().unwrap();
        // Dropped (before anything reads it, which would map the zero page).
        if touched_pages(slot.base, 0, len).is_some() {
            assert!(resident(&slot, 0, len).iter().all(|state| !state));
        }
        assert!(slot_bytes(&mut slot).iter().all(|byte| *byte == 0));
        // More separate runs than a reset lists one by one.
        let mut slot = Slot::reserve().unwrap();
        let len = (2 * MAX_TOUCHED_RUNS + 2) * page;
        slot.set_accessible(len.next_multiple_of(WASM_PAGE_SIZE))
            .unwrap();
        for run in 0..=MAX_TOUCHED_RUNS {
            slot_bytes(&mut slot)[2 * run * page] = 1;
        }
        assert!(touched_pages(slot.base, 0, slot.accessible).is_none());
        for _ in 0..2 {
            slot.reset().unwrap();
            assert!(slot_bytes(&mut slot).iter().all(|byte| *byte == 0));
            slot_bytes(&mut slot)[page] = 1;
        }
    }

    /// A slot of 4 wasm pages with `image` mapped.
    fn with(image: &Arc<Image>) -> Slot {
        let mut slot = Slot::reserve().unwrap();
        slot.set_accessible(4 * WASM_PAGE_SIZE).unwrap();
        slot.map_image(image).unwrap();
        slot
    }

    #[test]
    fn a_memory_takes_a_slot_that_maps_nothing_else_a_new_one_while_there_is_room() {
        let (kept, gone, wanted) = (image(), image(), image());
        let mut idle = vec![
            with(&gone),
            with(&kept),
            with(&gone),
            Slot::reserve().unwrap(),
        ];
        drop(gone);
        // Its own image, or for a memory without one, a slot without one.
        assert_eq!(choose(&idle, MOST, Some(&kept)), Some(1));
        assert_eq!(choose(&idle, MOST, None), Some(3));
        // Any other slot would be mapped over: a new one.
        assert_eq!(choose(&idle, MOST, Some(&wanted)), None);
        idle.pop();
        assert_eq!(choose(&idle, MOST, None), None);
        // With as many idle as are kept: an image of a module that is gone, else the last.
        idle.extend((3..MOST).map(|_| with(&kept)));
        assert_eq!(choose(&idle, MOST, Some(&wanted)), Some(2));
        assert_eq!(choose(&idle, MOST, None), Some(2));
        let mut idle: Vec<Slot> = (0..MOST).map(|_| with(&kept)).collect();
        assert_eq!(choose(&idle, MOST, Some(&wanted)), Some(MOST - 1));
        idle.clear();
        assert_eq!(choose(&idle, MOST, Some(&wanted)), None);
    }

    #[test]
    fn a_full_pool_gives_the_place_of_a_module_no_longer_there_to_a_released_slot() {
        let pool = Idle::new(MOST);
        let (kept, gone, wanted) = (image(), image(), image());
        let mut gone_slot = with(&gone);
        gone_slot.kept = WASM_PAGE_SIZE;
        {
            let mut idle = lock(&pool);
            idle.slots = (1..MOST).map(|_| with(&kept)).collect();
            idle.slots.insert(5, gone_slot);
            idle.kept = WASM_PAGE_SIZE;
        }
        drop(gone);
        let holding = |pool: &Mutex<Idle>, image: &Arc<Image>| {
            lock(pool)
                .slots
                .iter()
                .filter(|slot| slot.holds(Some(image)))
                .count()
        };
        give_back(&pool, with(&wanted));
        assert_eq!(lock(&pool).slots.len(), MOST);
        assert_eq!(holding(&pool, &wanted), 1);
        assert_eq!(holding(&pool, &kept), MOST - 1);
        assert_eq!(
            lock(&pool).kept,
            0,
            "the evicted slot's pages are no longer counted"
        );
        // Only live modules' images are left: a released slot is unmapped.
        let another = image();
        give_back(&pool, with(&another));
        assert_eq!(holding(&pool, &another), 0);
        assert_eq!(lock(&pool).slots.len(), MOST);
    }

    #[test]
    fn idle_slots_keep_at_most_their_budget_of_own_pages() {
        let pool = Idle::new(MOST);
        let len = KEEP_RESIDENT;
        let released = IDLE_KEPT / len + 2;
        let pagemap = {
            let mut slot = Slot::reserve().unwrap();
            slot.set_accessible(WASM_PAGE_SIZE).unwrap();
            touched_pages(slot.base, 0, WASM_PAGE_SIZE).is_some()
        };
        for _ in 0..released {
            let mut slot = Slot::reserve().unwrap();
            slot.set_accessible(len).unwrap();
            slot_bytes(&mut slot).fill(1);
            give_back(&pool, slot);
        }
        let mut idle = lock(&pool);
        assert_eq!(idle.slots.len(), released);
        assert!(idle.kept <= IDLE_KEPT, "{} bytes kept", idle.kept);
        let kept: Vec<usize> = idle.slots.iter().map(|slot| slot.kept).collect();
        assert_eq!(idle.kept, kept.iter().sum::<usize>());
        // Whole slots kept in place while they fit, then slots dropped.
        assert_eq!(
            kept.iter().filter(|&&bytes| bytes == len).count(),
            IDLE_KEPT / len
        );
        assert_eq!(kept.iter().filter(|&&bytes| bytes == 0).count(), 2);
        for slot in &mut idle.slots {
            if pagemap {
                let states = resident(slot, 0, slot.accessible);
                assert!(states.iter().all(|&state| state == (slot.kept == len)));
            }
            assert!(slot_bytes(slot).iter().all(|&byte| byte == 0));
        }
    }

    /// An image of three wasm pages at 64 KiB, each byte its offset's low bits plus one.
    fn image() -> Arc<Image> {
        let bytes = (0..3 * WASM_PAGE_SIZE)
            .map(|i| (i % 251) as u8 + 1)
            .collect();
        let image = hako_engine_api::MemoryImage {
            start: WASM_PAGE_SIZE as u64,
            bytes,
        };
        Arc::new(Image::in_memory(&image).unwrap())
    }

    #[test]
    fn a_reused_slot_holds_its_image_again_whatever_the_last_memory_wrote() {
        let image = image();
        let expected = image.read().unwrap().bytes;
        let (start, end) = (WASM_PAGE_SIZE, 4 * WASM_PAGE_SIZE);
        let ty = MemoryType::new(Pages(6), Some(Pages(8)), false);
        // Rounds alternate between a few written pages (restored in place) and every page of
        // the image (more than a reset restores in place: dropped, read from the file again),
        // with writes outside the image too.
        for round in 0..(2 * RESCAN_EVERY as usize + 3) {
            // SAFETY: no instance: the memory owns its definition.
            let mut memory =
                unsafe { PooledMemory::new(&ty, None, None, Some(Arc::clone(&image))) }.unwrap();
            let data = bytes(&mut memory);
            assert_eq!(&data[start..end], &expected[..], "round {round}");
            assert!(data[..start].iter().all(|b| *b == 0), "round {round}");
            assert!(data[end..].iter().all(|b| *b == 0), "round {round}");
            if round % 2 == 0 {
                data[start + 7] = 0;
                data[end - 1] = 0;
            } else {
                for page in (start..end).step_by(4096) {
                    data[page] = 0;
                }
            }
            data[round * 4099 % start] = 9;
            data[end + round] = 9;
        }
        // Another memory from the same pool, without an image, reads as zero.
        let ty = MemoryType::new(Pages(6), Some(Pages(8)), false);
        for _ in 0..64 {
            // SAFETY: no instance: the memory owns its definition.
            let mut memory = unsafe { PooledMemory::new(&ty, None, None, None) }.unwrap();
            assert!(bytes(&mut memory).iter().all(|b| *b == 0));
        }
    }

    #[test]
    fn the_kernel_names_the_pages_a_memory_wrote_over_its_image() {
        let image = image();
        let ty = MemoryType::new(Pages(4), Some(Pages(4)), false);
        // SAFETY: no instance: the memory owns its definition.
        let mut memory =
            unsafe { PooledMemory::new(&ty, None, None, Some(Arc::clone(&image))) }.unwrap();
        let base = NonNull::new(bytes(&mut memory).as_mut_ptr()).unwrap();
        let (start, end) = (WASM_PAGE_SIZE, 4 * WASM_PAGE_SIZE);
        // Read everywhere, write two pages.
        let sum: u64 = bytes(&mut memory)[start..end]
            .iter()
            .map(|b| *b as u64)
            .sum();
        assert!(sum > 0);
        bytes(&mut memory)[start + 3 * 4096 + 5] = 0;
        bytes(&mut memory)[start + 9 * 4096] = 0;
        let Some(written) = touched_pages(base, start, end) else {
            // The kernel cannot say (before Linux 6.7, or under an emulator): resets drop.
            eprintln!("PAGEMAP_SCAN is not available here: resets drop the image's span");
            return;
        };
        assert_eq!(
            written,
            [
                (start + 3 * 4096, start + 4 * 4096),
                (start + 9 * 4096, start + 10 * 4096)
            ]
        );
    }

    #[test]
    fn growing_past_the_maximum_is_refused_and_recorded() {
        let ty = MemoryType::new(Pages(1), Some(Pages(2)), false);
        let usage = Arc::new(Usage::new(hako_engine_api::RunLimits {
            max_memory_bytes: 4 * WASM_PAGE_SIZE as u64,
            max_table_elements: 16,
        }));
        // SAFETY: no instance: the memory owns its definition.
        let mut memory =
            unsafe { PooledMemory::new(&ty, None, Some(Arc::clone(&usage)), None) }.unwrap();
        assert_eq!(memory.grow(Pages(1)).unwrap(), Pages(1));
        assert!(!usage.refused());
        assert!(memory.grow(Pages(1)).is_err());
        assert!(usage.refused());
        assert_eq!(memory.size(), Pages(2));
        assert_eq!(bytes(&mut memory).len(), 2 * WASM_PAGE_SIZE);
    }

    #[test]
    fn a_minimum_above_the_maximum_is_an_error() {
        let ty = MemoryType::new(Pages(3), Some(Pages(2)), false);
        // SAFETY: no instance: the memory owns its definition.
        let err = unsafe { PooledMemory::new(&ty, None, None, None) }.unwrap_err();
        assert!(err.to_string().contains("less than the minimum"), "{err}");
    }
}
