//! Memory images: a module's initial linear memory, computed once when the module is compiled,
//! so that no instance copies its data segments.
//!
//! At compile time [`plan`] applies the module's active data segments, in order, to a zeroed
//! memory of the module's initial size, and keeps the span they touched as the image; the
//! module handed to wasmer keeps every segment, each active one with its offset and an empty
//! payload, so that wasmer copies nothing at instantiation while `memory.init` and `data.drop`
//! mean what they meant (an active segment is dropped after instantiation either way, and
//! passive ones are untouched). The image is written page-aligned in the artifact beside the
//! code; an instance maps it copy-on-write into its memory slot (see [`crate::pool`]).
//!
//! A module keeps wasmer's own copying when its segments cannot be laid out ahead of time, and
//! its artifact says so ([`Layout::Copied`]):
//! - a segment out of the initial memory's bounds, or with an offset that is no `i32.const`
//!   (instantiation must then trap exactly as it does without images, so nothing changes);
//! - an image over [`MAX_IMAGE_BYTES`], or one whose span is mostly zeros (over twice the
//!   segments' bytes plus [`MAX_ZERO_FILL`]): a small module must not make a huge artifact.
//!
//! What this file does not do: map anything (the pool does) or verify an artifact (the store
//! does, before [`Image::from_file`] is called).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, OnceLock, Weak};

use hako_engine_api::{MemoryImage, IMAGE_ALIGN};
use wasmparser::{DataKind, Operator, Parser, Payload};

/// The largest image an artifact carries; a module whose data spans more keeps copying it.
pub(crate) const MAX_IMAGE_BYTES: u64 = 64 << 20;

/// The zero bytes an image may carry beyond twice its segments' bytes (gaps between segments,
/// rounding to [`IMAGE_ALIGN`]).
pub(crate) const MAX_ZERO_FILL: u64 = 1 << 20;

/// How a module's memory gets its initial contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// No active data segment: nothing to copy or map.
    Nothing,
    /// Active data segments, all empty: nothing to map, and the module to compile without them
    /// (as [`Layout::Image`]'s), so that instantiation does not walk them.
    Empty { module: Vec<u8> },
    /// An image, and the module to compile (its active segments emptied).
    Image { image: MemoryImage, module: Vec<u8> },
    /// wasmer copies the segments at each instantiation, for this reason.
    Copied(String),
}

impl Layout {
    /// The words an artifact and an operator get for this layout.
    pub(crate) fn describe(&self) -> String {
        match self {
            Layout::Nothing => "no active data segments".into(),
            Layout::Empty { .. } => "no bytes in active data segments".into(),
            Layout::Image { image, .. } => describe_image(image.start, image.bytes.len() as u64),
            Layout::Copied(why) => format!("data segments copied at each call: {why}"),
        }
    }
}

pub(crate) fn describe_image(start: u64, len: u64) -> String {
    format!(
        "memory image of {:.1} MiB at {start:#x}, mapped copy-on-write",
        len as f64 / (1 << 20) as f64
    )
}

/// One active segment, as far as the layout cares.
struct Segment<'a> {
    offset: Option<u64>,
    bytes: &'a [u8],
}

/// Lays out `wasm`'s initial memory. A module that does not parse keeps copying, so that
/// compiling it reports wasmer's own error.
pub(crate) fn plan(wasm: &[u8]) -> Layout {
    match try_plan(wasm) {
        Ok(layout) => layout,
        Err(err) => Layout::Copied(format!("the module does not parse: {err}")),
    }
}

fn try_plan(wasm: &[u8]) -> Result<Layout, wasmparser::BinaryReaderError> {
    let mut memory_bytes: Option<u64> = None;
    let mut segments = Vec::new();
    let mut data_section: Option<wasmparser::DataSectionReader<'_>> = None;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    if matches!(import?.ty, wasmparser::TypeRef::Memory(_)) {
                        return Ok(Layout::Copied("the memory is imported".into()));
                    }
                }
            }
            Payload::MemorySection(memories) => {
                for memory in memories {
                    let memory = memory?;
                    if memory_bytes.is_some() || memory.memory64 || memory.shared {
                        return Ok(Layout::Copied(
                            "the memory is not one plain wasm32 one".into(),
                        ));
                    }
                    memory_bytes = Some(memory.initial.saturating_mul(IMAGE_ALIGN));
                }
            }
            Payload::DataSection(data) => {
                data_section = Some(data.clone());
                for entry in data {
                    let entry = entry?;
                    if let DataKind::Active {
                        memory_index,
                        offset_expr,
                    } = entry.kind
                    {
                        if memory_index != 0 {
                            return Ok(Layout::Copied("a segment names another memory".into()));
                        }
                        let mut ops = offset_expr.get_operators_reader();
                        let offset = match (ops.read()?, ops.read()?) {
                            (Operator::I32Const { value }, Operator::End) => {
                                Some(u64::from(value as u32))
                            }
                            _ => None,
                        };
                        segments.push(Segment {
                            offset,
                            bytes: entry.data,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    let (Some(memory_bytes), Some(section)) = (memory_bytes, data_section) else {
        return Ok(Layout::Nothing);
    };
    if segments.is_empty() {
        return Ok(Layout::Nothing);
    }
    let mut low = u64::MAX;
    let mut high = 0;
    let mut data_bytes = 0u64;
    for (index, segment) in segments.iter().enumerate() {
        let Some(offset) = segment.offset else {
            return Ok(Layout::Copied(format!(
                "active segment {index}'s offset is not a constant"
            )));
        };
        let end = offset + segment.bytes.len() as u64;
        if end > memory_bytes {
            return Ok(Layout::Copied(format!(
                "active segment {index} ends at {end}, past the initial memory of \
                 {memory_bytes} bytes (instantiation traps)"
            )));
        }
        if !segment.bytes.is_empty() {
            low = low.min(offset);
            high = high.max(end);
            data_bytes += segment.bytes.len() as u64;
        }
    }
    if data_bytes == 0 {
        return Ok(match without_covered(wasm, section) {
            Ok(module) => Layout::Empty { module },
            Err(_) => Layout::Nothing,
        });
    }
    let start = low / IMAGE_ALIGN * IMAGE_ALIGN;
    let end = high.div_ceil(IMAGE_ALIGN) * IMAGE_ALIGN;
    let len = end - start;
    if len > MAX_IMAGE_BYTES {
        return Ok(Layout::Copied(format!(
            "the image would span {len} bytes, over the bound of {MAX_IMAGE_BYTES}"
        )));
    }
    if len > 2 * data_bytes + MAX_ZERO_FILL {
        return Ok(Layout::Copied(format!(
            "the image would span {len} bytes for {data_bytes} bytes of data"
        )));
    }
    let mut bytes = vec![0u8; len as usize];
    for segment in &segments {
        let at = (segment.offset.unwrap_or(0) - start) as usize;
        if !segment.bytes.is_empty() {
            bytes[at..at + segment.bytes.len()].copy_from_slice(segment.bytes);
        }
    }
    let module = match without_covered(wasm, section) {
        Ok(module) => module,
        Err(why) => {
            return Ok(Layout::Copied(format!(
                "the module could not be written without its segments: {why}"
            )))
        }
    };
    Ok(Layout::Image {
        image: MemoryImage { start, bytes },
        module,
    })
}

/// `wasm` as wasmer compiles it once its image holds the active segments' bytes: the segments
/// no code names (no `memory.init` or `data.drop` of theirs) are gone, passive ones too, since
/// nothing can reach them; those code names stay (an active one with its offset and an empty
/// payload, a passive one whole), renumbered in order, with the code and the data count
/// following. So instantiation does no work for each segment: a Go module's 45,000 active
/// segments, each one evaluated, checked and copied (empty) at every instantiation when they
/// were kept, cost nothing. Every other section is copied byte for byte, the code too where no
/// index changes.
///
/// A module whose code names a segment that does not exist (validation refuses it; the upload
/// check validates before anything compiles) is not rewritten.
fn without_covered(
    wasm: &[u8],
    reader: wasmparser::DataSectionReader<'_>,
) -> Result<Vec<u8>, String> {
    match without_covered_or_parse_error(wasm, reader) {
        Ok(Some(module)) => Ok(module),
        Ok(None) => Err("its code names a data segment that does not exist".into()),
        Err(err) => Err(err.to_string()),
    }
}

fn without_covered_or_parse_error(
    wasm: &[u8],
    reader: wasmparser::DataSectionReader<'_>,
) -> Result<Option<Vec<u8>>, wasm_encoder::reencode::Error> {
    let mut named = std::collections::BTreeSet::new();
    let mut data_count = None;
    let mut code_section = None;
    let mut bodies = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::DataCountSection { range, .. } => data_count = Some(range),
            Payload::CodeSectionStart { range, .. } => code_section = Some(range),
            Payload::CodeSectionEntry(body) => {
                let mut ops = body.get_operators_reader()?;
                while !ops.eof() {
                    match ops.read()? {
                        Operator::MemoryInit { data_index, .. }
                        | Operator::DataDrop { data_index } => {
                            named.insert(data_index);
                        }
                        _ => {}
                    }
                }
                bodies.push(body);
            }
            _ => {}
        }
    }
    if named.last().is_some_and(|&last| last >= reader.count()) {
        return Ok(None);
    }
    let mut data = wasm_encoder::DataSection::new();
    for (index, entry) in reader.clone().into_iter().enumerate() {
        let entry = entry?;
        if !named.contains(&u32::try_from(index).unwrap_or(u32::MAX)) {
            continue;
        }
        match entry.kind {
            DataKind::Passive => {
                data.passive(entry.data.iter().copied());
            }
            DataKind::Active {
                memory_index,
                offset_expr,
            } => {
                let mut ops = offset_expr.get_operators_reader();
                let offset = match ops.read()? {
                    Operator::I32Const { value } => value,
                    _ => unreachable!("plan refused offsets that are no constant"),
                };
                data.active(
                    memory_index,
                    &wasm_encoder::ConstExpr::i32_const(offset),
                    std::iter::empty(),
                );
            }
        }
    }
    let mut edits = Vec::new();
    let data_section = if named.is_empty() {
        Vec::new()
    } else {
        encoded(&data)
    };
    edits.push((section_span(wasm, reader.range()), data_section));
    if let Some(range) = data_count {
        let count = if named.is_empty() {
            Vec::new()
        } else {
            encoded(&wasm_encoder::DataCountSection {
                count: named.len() as u32,
            })
        };
        edits.push((section_span(wasm, range), count));
    }
    // Code changes only where a named segment's index does (one before it is gone).
    let renumber: HashMap<u32, u32> = named
        .iter()
        .zip(0..)
        .map(|(&old, new)| (old, new))
        .collect();
    if let Some(range) = code_section.filter(|_| renumber.iter().any(|(old, new)| old != new)) {
        let mut code = wasm_encoder::CodeSection::new();
        let mut renumbering = Renumber(&renumber);
        for body in bodies {
            use wasm_encoder::reencode::Reencode;
            renumbering.parse_function_body(&mut code, body)?;
        }
        edits.push((section_span(wasm, range), encoded(&code)));
    }
    edits.sort_by_key(|(span, _)| span.start);
    let mut out = Vec::with_capacity(wasm.len());
    let mut at = 0;
    for (span, bytes) in edits {
        out.extend_from_slice(&wasm[at..span.start]);
        out.extend_from_slice(&bytes);
        at = span.end;
    }
    out.extend_from_slice(&wasm[at..]);
    Ok(Some(out))
}

/// Data segment indices in code, old to new.
struct Renumber<'a>(&'a HashMap<u32, u32>);

impl wasm_encoder::reencode::Reencode for Renumber<'_> {
    type Error = std::convert::Infallible;

    fn data_index(&mut self, data: u32) -> Result<u32, wasm_encoder::reencode::Error> {
        // Every index code names was kept.
        Ok(self.0.get(&data).copied().unwrap_or(data))
    }
}

/// A section as it is written in a module: its id, size and contents.
fn encoded(section: &impl wasm_encoder::Section) -> Vec<u8> {
    let mut bytes = Vec::new();
    section.append_to(&mut bytes);
    bytes
}

/// The bytes of the section whose contents are `contents`: its id and size precede them (the
/// size a LEB128 of at most 5 bytes).
fn section_span(wasm: &[u8], contents: std::ops::Range<u64>) -> std::ops::Range<usize> {
    let contents = usize::try_from(contents.start).unwrap_or(usize::MAX)
        ..usize::try_from(contents.end).unwrap_or(usize::MAX);
    let mut start = contents.start - 1;
    while wasm[start - 1] & 0x80 != 0 {
        start -= 1;
    }
    (start - 1)..contents.end
}

/// An image file's device and inode, and the image's offset in it, start and length.
type ImageKey = (u64, u64, u64, u64, u64);

/// The images loaded from artifact files and still alive, by [`ImageKey`].
static LIVE: LazyLock<Mutex<HashMap<ImageKey, Weak<Image>>>> = LazyLock::new(Default::default);

fn lock_live() -> MutexGuard<'static, HashMap<ImageKey, Weak<Image>>> {
    LIVE.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// A memory image ready to map: `len` bytes of `file` from `offset`, for guest address `start`.
#[derive(Debug)]
pub(crate) struct Image {
    pub(crate) file: File,
    pub(crate) offset: u64,
    pub(crate) start: usize,
    pub(crate) len: usize,
    /// A read-only mapping of the image, made when a reset first restores pages from it.
    view: OnceLock<Option<View>>,
}

/// A read-only mapping of an image's bytes (the page cache's pages, shared by every view).
#[derive(Debug)]
struct View {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the view is read-only memory that nothing writes while it is mapped (the file is
// sealed or never written in place); any thread may read it.
unsafe impl Send for View {}
// SAFETY: as above.
unsafe impl Sync for View {}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: the view was mapped by `Image::view` with this length and is unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

impl Image {
    /// The image in a sealed memory file of its own (a module just compiled has no artifact
    /// file yet).
    pub(crate) fn in_memory(image: &MemoryImage) -> io::Result<Image> {
        let name = c"hako-memory-image";
        // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new
        // descriptor or -1.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just created and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        file.write_all_at(&image.bytes, 0)?;
        // Sealed, so that nothing (in this process or another with the descriptor) can change
        // what instances map.
        let seals =
            libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
        // SAFETY: fcntl on a descriptor this function owns.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self::new(file, 0, image.start, image.bytes.len() as u64))
    }

    /// The image at `offset` of a verified artifact file (a multiple of [`IMAGE_ALIGN`], which
    /// every page size of Linux on x86-64 and aarch64 divides, so it can always be mapped).
    ///
    /// A module loaded again from the very file an earlier load's image still lives for (a
    /// module evicted and called again, while pooled memory slots hold its image) shares that
    /// image: its memories then take those slots with the image already mapped and its pages
    /// resident, and map nothing. The same open file (device and inode; an inode is not reused
    /// while a descriptor holds it) at the same place holds the same bytes, since artifact files
    /// are replaced by renaming and never written in place.
    pub(crate) fn from_file(
        file: &File,
        offset: u64,
        start: u64,
        len: u64,
    ) -> io::Result<Arc<Image>> {
        use std::os::unix::fs::MetadataExt;
        let metadata = file.metadata()?;
        let key = (metadata.dev(), metadata.ino(), offset, start, len);
        let mut live = lock_live();
        if let Some(image) = live.get(&key).and_then(Weak::upgrade) {
            return Ok(image);
        }
        let image = Arc::new(Self::new(file.try_clone()?, offset, start, len));
        // Entries of images no longer alive go here, so the map holds about as many entries
        // as there are live images.
        live.retain(|_, image| image.strong_count() > 0);
        live.insert(key, Arc::downgrade(&image));
        Ok(image)
    }

    fn new(file: File, offset: u64, start: u64, len: u64) -> Image {
        Image {
            file,
            offset,
            start: start as usize,
            len: len as usize,
            view: OnceLock::new(),
        }
    }

    /// The image's bytes, as a read-only mapping made on first use; `None` when it cannot be
    /// mapped (the caller then resets by mapping instead).
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        let view = self.view.get_or_init(|| {
            let offset = libc::off_t::try_from(self.offset).ok()?;
            // SAFETY: a new read-only mapping at an address of the kernel's choosing; the file
            // is at least `offset + len` long (verified by the store, or a sealed memory file).
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    self.len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    self.file.as_raw_fd(),
                    offset,
                )
            };
            if base == libc::MAP_FAILED {
                return None;
            }
            Some(View {
                base: NonNull::new(base.cast())?,
                len: self.len,
            })
        });
        // SAFETY: the mapping is `len` readable bytes and lives as long as `self`.
        view.as_ref()
            .map(|view| unsafe { std::slice::from_raw_parts(view.base.as_ptr(), view.len) })
    }

    /// The image's bytes, read back (to serialize a module).
    pub(crate) fn read(&self) -> io::Result<MemoryImage> {
        let mut bytes = vec![0u8; self.len];
        self.file.read_exact_at(&mut bytes, self.offset)?;
        Ok(MemoryImage {
            start: self.start as u64,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }

    /// A data segment: an active one's offset (`None` for a passive one) and its bytes.
    type Segment = (Option<i32>, Vec<u8>);

    /// The data segments of `module`, and the data count, if any.
    fn segments(module: &[u8]) -> (Vec<Segment>, Option<u32>) {
        wasmparser::Validator::new().validate_all(module).unwrap();
        let mut segments = Vec::new();
        let mut count = None;
        for payload in Parser::new(0).parse_all(module) {
            match payload.unwrap() {
                Payload::DataCountSection { count: n, .. } => count = Some(n),
                Payload::DataSection(data) => {
                    for entry in data {
                        let entry = entry.unwrap();
                        let offset = match entry.kind {
                            DataKind::Active { offset_expr, .. } => {
                                match offset_expr.get_operators_reader().read().unwrap() {
                                    Operator::I32Const { value } => Some(value),
                                    other => panic!("{other:?}"),
                                }
                            }
                            DataKind::Passive => None,
                        };
                        segments.push((offset, entry.data.to_vec()));
                    }
                }
                _ => {}
            }
        }
        (segments, count)
    }

    #[test]
    fn segments_are_applied_in_order_and_none_reaches_wasmer_when_no_code_names_one() {
        let wasm = module(
            r#"(module (memory 4)
                 (data (i32.const 65540) "abcd")
                 (data (i32.const 65542) "XY")
                 (data "passive")
                 (func (drop (i32.const 0))))"#,
        );
        let Layout::Image { image, module } = plan(&wasm) else {
            panic!("{:?}", plan(&wasm))
        };
        assert_eq!(image.start, 65_536);
        assert_eq!(image.bytes.len(), 65_536);
        assert_eq!(&image.bytes[..8], b"\0\0\0\0abXY");
        assert_eq!(segments(&module), (Vec::new(), None));
    }

    #[test]
    fn segments_code_names_stay_renumbered_and_the_rest_go() {
        let wasm = module(
            r#"(module (memory 4)
                 (data $a (i32.const 65540) "abcd")
                 (data $b (i32.const 65542) "XY")
                 (data $c "unnamed")
                 (data $d "passive")
                 (func
                   (memory.init $d (i32.const 0) (i32.const 0) (i32.const 1))
                   (data.drop $b)
                   (data.drop $d)))"#,
        );
        let Layout::Image { image, module } = plan(&wasm) else {
            panic!("{:?}", plan(&wasm))
        };
        assert_eq!(&image.bytes[..8], b"\0\0\0\0abXY");
        // $b (emptied) and $d (whole) are 0 and 1, and the code says so.
        assert_eq!(
            segments(&module),
            (
                vec![(Some(65_542), Vec::new()), (None, b"passive".to_vec())],
                Some(2)
            )
        );
        let mut named = Vec::new();
        for payload in Parser::new(0).parse_all(&module) {
            if let Payload::CodeSectionEntry(body) = payload.unwrap() {
                let mut ops = body.get_operators_reader().unwrap();
                while !ops.eof() {
                    match ops.read().unwrap() {
                        Operator::MemoryInit { data_index, .. } => named.push(("init", data_index)),
                        Operator::DataDrop { data_index } => named.push(("drop", data_index)),
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(named, [("init", 1), ("drop", 0), ("drop", 1)]);
    }

    #[test]
    fn a_segment_out_of_bounds_keeps_copying() {
        let wasm = module(r#"(module (memory 1) (data (i32.const 65535) "ab"))"#);
        let layout = plan(&wasm);
        assert!(
            matches!(&layout, Layout::Copied(why) if why.contains("past the initial memory")),
            "{layout:?}"
        );
    }

    #[test]
    fn a_mostly_empty_span_keeps_copying() {
        let wasm = module(
            r#"(module (memory 100) (data (i32.const 0) "a") (data (i32.const 6000000) "b"))"#,
        );
        assert!(
            matches!(plan(&wasm), Layout::Copied(_)),
            "{:?}",
            plan(&wasm)
        );
    }

    #[test]
    fn empty_active_segments_leave_the_module_with_no_image() {
        let wasm = module(
            r#"(module (memory 1) (data (i32.const 10) "") (data $p "passive") (data (i32.const 20) "")
                 (func (data.drop $p)))"#,
        );
        let Layout::Empty { module: compiled } = plan(&wasm) else {
            panic!("{:?}", plan(&wasm))
        };
        assert_eq!(
            segments(&compiled),
            (vec![(None, b"passive".to_vec())], Some(1))
        );
        // One past the initial memory still traps at instantiation, so it stays.
        let past = module(r#"(module (memory 1) (data (i32.const 65537) ""))"#);
        assert!(
            matches!(plan(&past), Layout::Copied(_)),
            "{:?}",
            plan(&past)
        );
    }

    #[test]
    fn code_that_names_a_missing_segment_is_not_rewritten() {
        // Invalid (validation refuses it before any compile; `wat` writes numeric indices as
        // they are); the rewrite must not renumber it.
        let wasm = module(r#"(module (memory 1) (data (i32.const 0) "a") (func (data.drop 3)))"#);
        let layout = plan(&wasm);
        assert!(
            matches!(&layout, Layout::Copied(why) if why.contains("does not exist")),
            "{layout:?}"
        );
    }

    #[test]
    fn no_data_means_nothing_to_map() {
        assert_eq!(plan(&module("(module (memory 1))")), Layout::Nothing);
        assert_eq!(
            plan(&module(r#"(module (memory 1) (data "only passive"))"#)),
            Layout::Nothing
        );
    }

    #[test]
    fn loads_of_one_file_share_its_image_while_one_lives_and_no_other_file_does() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![7u8; 2 * IMAGE_ALIGN as usize]).unwrap();
            File::open(path).unwrap()
        };
        let (first, same_bytes) = (write("first"), write("same-bytes"));
        let align = IMAGE_ALIGN;
        let image = Image::from_file(&first, 0, 0, align).unwrap();
        // The same file opened again is the same inode.
        let reopened = File::open(dir.path().join("first")).unwrap();
        assert!(Arc::ptr_eq(
            &image,
            &Image::from_file(&reopened, 0, 0, align).unwrap()
        ));
        for other in [
            Image::from_file(&same_bytes, 0, 0, align).unwrap(),
            Image::from_file(&first, align, 0, align).unwrap(),
            Image::from_file(&first, 0, align, align).unwrap(),
            Image::from_file(&first, 0, 0, 2 * align).unwrap(),
        ] {
            assert!(!Arc::ptr_eq(&image, &other), "{other:?}");
        }
        let weak = Arc::downgrade(&image);
        drop(image);
        // Once no load holds it, the next load of the file makes an image of its own.
        let again = Image::from_file(&first, 0, 0, align).unwrap();
        assert!(weak.upgrade().is_none());
        assert_eq!(again.bytes().unwrap(), &[7u8; IMAGE_ALIGN as usize][..]);
    }

    #[test]
    fn an_image_in_memory_reads_back() {
        let image = MemoryImage {
            start: 0,
            bytes: vec![7; IMAGE_ALIGN as usize],
        };
        let mapped = Image::in_memory(&image).unwrap();
        assert_eq!(mapped.read().unwrap(), image);
        assert_eq!(mapped.bytes().unwrap(), &image.bytes[..]);
    }
}
