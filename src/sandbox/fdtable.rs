//! The guest's file descriptor table: what each fd is (standard stream, directory, file), its
//! rights and flags, and the lazy opening of preopens. It does not perform I/O on behalf of a
//! WASI function beyond opening a lazy directory; the functions do that.

use super::abi::{fdflags, rights};
use super::descriptors::{Held, GUEST_DESCRIPTORS};
use super::error::errno::{EBADF, EIO, EMFILE, ENOTDIR};
use super::{Fail, Preopen, PreopenDir, MAX_OPEN_FDS};
use cap_std::fs::Dir;

/// One open file descriptor.
pub enum Entry {
    Stdin,
    Stdout,
    Stderr,
    Dir(DirFd),
    File(FileFd),
}

/// A directory fd: a preopen or a directory opened beneath one.
pub struct DirFd {
    slot: DirSlot,
    /// The guest path when this fd is a preopen (reported by `fd_prestat_*`).
    pub preopen: Option<String>,
    /// Inside a read-only preopen: nothing beneath it may change.
    pub read_only: bool,
    pub base: u64,
    pub inheriting: u64,
}

enum DirSlot {
    /// Open, with its share of the guests' descriptors (none for a preopen opened before the
    /// run).
    Open(Dir, #[allow(dead_code)] Option<Held>),
    Lazy(Box<dyn FnOnce() -> std::io::Result<Dir> + Send>),
    /// A lazy open that failed; every later use answers `EIO` too.
    Failed,
}

impl DirFd {
    /// A directory opened beneath another one, holding `held`.
    pub fn opened(dir: Dir, held: Held, read_only: bool, base: u64, inheriting: u64) -> Self {
        Self {
            slot: DirSlot::Open(dir, Some(held)),
            preopen: None,
            read_only,
            base,
            inheriting,
        }
    }

    /// The host directory, opening a lazy preopen on first use: `ENFILE` (and still lazy)
    /// while the guests of the process hold all the descriptors they may.
    pub fn dir(&mut self) -> Result<&Dir, Fail> {
        if matches!(self.slot, DirSlot::Lazy(_)) {
            let held = GUEST_DESCRIPTORS.take(1)?;
            let DirSlot::Lazy(open) = std::mem::replace(&mut self.slot, DirSlot::Failed) else {
                return Err(Fail::Errno(EIO));
            };
            if let Ok(dir) = open() {
                self.slot = DirSlot::Open(dir, Some(held));
            }
        }
        self.opened_dir()
    }

    /// The host directory if it is open already (see [`DirFd::dir`]).
    pub fn opened_dir(&self) -> Result<&Dir, Fail> {
        match &self.slot {
            DirSlot::Open(dir, _) => Ok(dir),
            DirSlot::Lazy(_) | DirSlot::Failed => Err(Fail::Errno(EIO)),
        }
    }
}

/// A regular file (or another non-directory node) opened beneath a preopen.
pub struct FileFd {
    pub file: std::fs::File,
    /// Its share of the guests' descriptors.
    pub _held: Held,
    pub readable: bool,
    pub writable: bool,
    /// `fdflags` as the guest set them; `APPEND` is applied by seeking to the end before each
    /// write, so the flag can change after opening without touching the host fd.
    pub flags: u16,
    pub filetype: u8,
    pub read_only: bool,
    pub base: u64,
    pub inheriting: u64,
}

impl FileFd {
    pub fn append(&self) -> bool {
        self.flags & fdflags::APPEND != 0
    }
}

/// The table itself: fd numbers index a vector; a closed fd is `None`.
pub struct FdTable {
    entries: Vec<Option<Entry>>,
}

impl FdTable {
    /// Fds 0, 1, 2 for the standard streams and 3, 4, … for the preopens in order.
    pub fn new(preopens: Vec<Preopen>) -> Self {
        let mut entries = Vec::with_capacity(3 + preopens.len() + 4);
        entries.push(Some(Entry::Stdin));
        entries.push(Some(Entry::Stdout));
        entries.push(Some(Entry::Stderr));
        for preopen in preopens {
            let mut base = rights::DIRECTORY;
            let mut inheriting = rights::DIRECTORY | rights::FILE;
            if preopen.read_only {
                base &= !rights::WRITING;
                inheriting &= !rights::WRITING;
            }
            let slot = match preopen.dir {
                PreopenDir::Open(dir) => DirSlot::Open(dir, None),
                PreopenDir::Lazy(open) => DirSlot::Lazy(open),
            };
            entries.push(Some(Entry::Dir(DirFd {
                slot,
                preopen: Some(preopen.guest_path),
                read_only: preopen.read_only,
                base,
                inheriting,
            })));
        }
        Self { entries }
    }

    pub fn get(&self, fd: u32) -> Result<&Entry, Fail> {
        self.entries
            .get(fd as usize)
            .and_then(Option::as_ref)
            .ok_or(Fail::Errno(EBADF))
    }

    pub fn get_mut(&mut self, fd: u32) -> Result<&mut Entry, Fail> {
        self.entries
            .get_mut(fd as usize)
            .and_then(Option::as_mut)
            .ok_or(Fail::Errno(EBADF))
    }

    /// The directory behind `fd`, opened if lazy; `ENOTDIR` for an fd that is no directory.
    pub fn dir_fd(&mut self, fd: u32) -> Result<&mut DirFd, Fail> {
        match self.get_mut(fd)? {
            Entry::Dir(dir) => {
                dir.dir()?;
                Ok(dir)
            }
            _ => Err(Fail::Errno(ENOTDIR)),
        }
    }

    /// Like [`FdTable::dir_fd`] without opening: for a second directory after both were
    /// opened with `dir_fd`.
    pub fn opened_dir_fd(&self, fd: u32) -> Result<&DirFd, Fail> {
        match self.get(fd)? {
            Entry::Dir(dir) => Ok(dir),
            _ => Err(Fail::Errno(ENOTDIR)),
        }
    }

    /// Puts `entry` in the lowest free fd; `EMFILE` when [`MAX_OPEN_FDS`] are open (the entry,
    /// and the host descriptor it holds, is dropped).
    pub fn insert(&mut self, entry: Entry) -> Result<u32, Fail> {
        let index = match self.entries.iter().position(Option::is_none) {
            Some(index) => {
                self.entries[index] = Some(entry);
                index
            }
            None if self.entries.len() >= MAX_OPEN_FDS => return Err(Fail::Errno(EMFILE)),
            None => {
                self.entries.push(Some(entry));
                self.entries.len() - 1
            }
        };
        u32::try_from(index).map_err(|_| Fail::Errno(EBADF))
    }

    pub fn remove(&mut self, fd: u32) -> Result<Entry, Fail> {
        self.entries
            .get_mut(fd as usize)
            .and_then(Option::take)
            .ok_or(Fail::Errno(EBADF))
    }

    /// Moves `from` onto `to`, closing what `to` was; both must be open.
    pub fn renumber(&mut self, from: u32, to: u32) -> Result<(), Fail> {
        self.get(from)?;
        self.get(to)?;
        if from != to {
            let entry = self.remove(from)?;
            self.entries[to as usize] = Some(entry);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn lazy(opened: Arc<AtomicBool>, fails: bool) -> Preopen {
        Preopen {
            guest_path: "/volume/tmp".into(),
            dir: PreopenDir::Lazy(Box::new(move || {
                opened.store(true, Ordering::SeqCst);
                if fails {
                    return Err(std::io::Error::other("no such volume"));
                }
                Dir::open_ambient_dir(".", cap_std::ambient_authority())
            })),
            read_only: false,
        }
    }

    #[test]
    fn a_lazy_preopen_is_opened_on_first_use_only() {
        let opened = Arc::new(AtomicBool::new(false));
        let mut table = FdTable::new(vec![lazy(opened.clone(), false)]);
        assert!(!opened.load(Ordering::SeqCst));
        assert!(table.dir_fd(3).is_ok());
        assert!(opened.load(Ordering::SeqCst));
    }

    #[test]
    fn a_failed_lazy_open_answers_eio_every_time() {
        let opened = Arc::new(AtomicBool::new(false));
        let mut table = FdTable::new(vec![lazy(opened, true)]);
        assert!(matches!(table.dir_fd(3), Err(Fail::Errno(EIO))));
        assert!(matches!(table.dir_fd(3), Err(Fail::Errno(EIO))));
    }

    #[test]
    fn a_new_fd_takes_the_lowest_free_number() {
        let mut table = FdTable::new(Vec::new());
        table.remove(1).unwrap();
        assert_eq!(table.insert(Entry::Stdout).unwrap(), 1);
        assert_eq!(table.insert(Entry::Stderr).unwrap(), 3);
        assert!(matches!(table.get(9), Err(Fail::Errno(EBADF))));
    }

    #[test]
    fn at_most_max_open_fds_are_open_at_once() {
        let mut table = FdTable::new(Vec::new());
        while table.entries.len() < MAX_OPEN_FDS {
            table.insert(Entry::Stdout).unwrap();
        }
        assert!(matches!(
            table.insert(Entry::Stdout),
            Err(Fail::Errno(EMFILE))
        ));
        table.remove(7).unwrap();
        assert_eq!(table.insert(Entry::Stdout).unwrap(), 7);
    }

    #[test]
    fn renumbering_needs_both_fds_open() {
        let mut table = FdTable::new(Vec::new());
        assert!(matches!(table.renumber(0, 7), Err(Fail::Errno(EBADF))));
        table.renumber(2, 1).unwrap();
        assert!(matches!(table.get(2), Err(Fail::Errno(EBADF))));
        assert!(matches!(table.get(1), Ok(Entry::Stderr)));
    }
}
