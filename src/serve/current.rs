//! Which packages' `current` pointers may have changed since they were last read, learnt from
//! the kernel (inotify) instead of reading every pointer at every request.
//!
//! A served package's folder is watched from its first request on. Every change to its
//! `current` file (the store replaces it by renaming a new file over it, whoever writes: this
//! server's uploads, its bucket follower, or `hako upload` run beside it) queues an event before
//! the writer returns, and a request first drains the queue without waiting (one `read` that
//! finds it empty, in the common case), so it never sees a pointer older than one written
//! before it arrived. A watch that is lost (the folder removed or moved, the queue overflowed)
//! makes the packages concerned be read again. Where inotify cannot be had (no descriptor, the
//! user's watch limit reached), the package is read at every request, as before.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The events that can change what a package folder's `current` says, or end the watch.
const PACKAGE_EVENTS: u32 = libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_CREATE
    | libc::IN_CLOSE_WRITE
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

/// What changed since the last look.
#[derive(Debug, PartialEq, Eq)]
pub enum Changes {
    /// These packages (none, usually).
    Some(HashSet<String>),
    /// Anything may have: read every package again.
    All,
}

/// The watches on package folders.
pub struct CurrentWatch {
    /// `None` when inotify could not be had: nothing is ever known fresh.
    fd: Option<OwnedFd>,
    names: HashMap<i32, String>,
    watches: HashMap<String, i32>,
}

impl CurrentWatch {
    /// A watch with no folder watched yet.
    pub fn new() -> Self {
        // SAFETY: inotify_init1 takes flags only; a non-negative result is a new descriptor
        // that nothing else owns.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        let fd = (fd >= 0).then(|| {
            // SAFETY: `fd` was just opened and is owned here alone.
            unsafe { OwnedFd::from_raw_fd(fd) }
        });
        Self {
            fd,
            names: HashMap::new(),
            watches: HashMap::new(),
        }
    }

    /// Whether `name`'s folder is watched, so that an unchanged `current` need not be read.
    pub fn watches(&self, name: &str) -> bool {
        self.watches.contains_key(name)
    }

    /// Watches `name`'s folder `dir` from now on (before its `current` is read, so that a
    /// change after the read is seen). `false` when it cannot be watched.
    pub fn watch(&mut self, name: &str, dir: &Path) -> bool {
        if self.watches(name) {
            return true;
        }
        let Some(fd) = &self.fd else {
            return false;
        };
        let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: a live inotify descriptor and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), PACKAGE_EVENTS) };
        if wd < 0 {
            return false;
        }
        // The same folder under another name (a link) shares the descriptor: the later name
        // takes it, and the earlier one is read again.
        if let Some(earlier) = self.names.insert(wd, name.to_string()) {
            self.watches.remove(&earlier);
        }
        self.watches.insert(name.to_string(), wd);
        true
    }

    /// What changed since the last call, without waiting.
    pub fn changes(&mut self) -> Changes {
        let Some(fd) = &self.fd else {
            return Changes::All;
        };
        let mut changed = HashSet::new();
        // Room for many events at once; an event is 16 bytes and a name of at most NAME_MAX.
        let mut buffer = [0u8; 4096];
        loop {
            // SAFETY: reads into a buffer of the length given, from a live descriptor.
            let n = unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if err.kind() == io::ErrorKind::WouldBlock {
                    return Changes::Some(changed);
                }
                // Nothing can be known from a descriptor that fails: read everything, always.
                self.fd = None;
                self.names.clear();
                self.watches.clear();
                return Changes::All;
            }
            let mut at = 0;
            let n = n as usize;
            while at + HEADER <= n {
                let event = parse(&buffer[at..n]);
                at += HEADER + event.len;
                if event.mask & libc::IN_Q_OVERFLOW != 0 {
                    return self.all_after_drain();
                }
                let Some(name) = self.names.get(&event.wd).cloned() else {
                    continue;
                };
                if event.mask & (libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0
                {
                    self.names.remove(&event.wd);
                    self.watches.remove(&name);
                    changed.insert(name);
                } else if event.name == b"current" {
                    changed.insert(name);
                }
            }
        }
    }

    /// Empties the queue after an overflow, and says that anything may have changed.
    fn all_after_drain(&mut self) -> Changes {
        while matches!(self.changes(), Changes::Some(ref more) if !more.is_empty()) {}
        Changes::All
    }
}

impl Default for CurrentWatch {
    fn default() -> Self {
        Self::new()
    }
}

/// The size of `struct inotify_event` before its name.
const HEADER: usize = std::mem::size_of::<libc::inotify_event>();

struct Event<'a> {
    wd: i32,
    mask: u32,
    /// The length of the name field (padded with NULs).
    len: usize,
    /// The name, without its padding.
    name: &'a [u8],
}

/// The event at the start of `bytes`, which the kernel filled with whole events.
fn parse(bytes: &[u8]) -> Event<'_> {
    let word = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let len = word(12) as usize;
    let name = bytes.get(HEADER..HEADER + len).unwrap_or_default();
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Event {
        wd: word(0) as i32,
        mask: word(4),
        len,
        name: &name[..end],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_current(dir: &Path, version: &str) {
        let tmp = dir.join(".writing");
        std::fs::write(&tmp, version).unwrap();
        std::fs::rename(&tmp, dir.join("current")).unwrap();
    }

    fn some(names: &[&str]) -> Changes {
        Changes::Some(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn a_new_current_is_seen_at_the_next_look_and_nothing_else_is() {
        let root = tempfile::tempdir().unwrap();
        let (greet, other) = (root.path().join("greet"), root.path().join("other"));
        std::fs::create_dir_all(&greet).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let mut watch = CurrentWatch::new();
        assert!(watch.watch("greet", &greet));
        assert!(watch.watch("other", &other));
        assert_eq!(watch.changes(), some(&[]));
        write_current(&greet, "1.0.0");
        assert_eq!(watch.changes(), some(&["greet"]));
        assert_eq!(watch.changes(), some(&[]));
        // Files beside it (versions, records) change nothing.
        std::fs::write(other.join("records"), "x").unwrap();
        assert_eq!(watch.changes(), some(&[]));
        write_current(&greet, "1.1.0");
        write_current(&other, "2.0.0");
        assert_eq!(watch.changes(), some(&["greet", "other"]));
    }

    #[test]
    fn a_folder_removed_or_moved_is_read_again_and_watched_anew() {
        let root = tempfile::tempdir().unwrap();
        let greet = root.path().join("greet");
        std::fs::create_dir_all(&greet).unwrap();
        let mut watch = CurrentWatch::new();
        assert!(watch.watch("greet", &greet));
        std::fs::rename(&greet, root.path().join("moved")).unwrap();
        assert_eq!(watch.changes(), some(&["greet"]));
        assert!(!watch.watches("greet"));
        std::fs::create_dir_all(&greet).unwrap();
        assert!(watch.watch("greet", &greet));
        std::fs::remove_dir_all(&greet).unwrap();
        assert_eq!(watch.changes(), some(&["greet"]));
        assert!(!watch.watches("greet"));
        // A folder that is not there cannot be watched.
        assert!(!watch.watch("greet", &greet));
    }

    #[test]
    fn an_overflowed_queue_means_everything() {
        let root = tempfile::tempdir().unwrap();
        let greet = root.path().join("greet");
        std::fs::create_dir_all(&greet).unwrap();
        let mut watch = CurrentWatch::new();
        assert!(watch.watch("greet", &greet));
        let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .map_or(16384, |text| text.trim().parse().unwrap_or(16384));
        for i in 0..limit + 10 {
            std::fs::write(greet.join(format!("f{}", i % 8)), "x").unwrap();
        }
        assert_eq!(watch.changes(), Changes::All);
        assert_eq!(watch.changes(), some(&[]));
    }
}
