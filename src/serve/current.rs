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
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

/// The events that can change what a package folder's `current` says, or end the watch.
const PACKAGE_EVENTS: WatchFlags = WatchFlags::MOVED_TO
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::CREATE)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR);

/// The events after which a watch is gone: its folder was removed or moved.
const WATCH_ENDED: ReadFlags = ReadFlags::IGNORED
    .union(ReadFlags::DELETE_SELF)
    .union(ReadFlags::MOVE_SELF);

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
        Self {
            fd: inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok(),
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
        let Ok(wd) = inotify::add_watch(fd, dir, PACKAGE_EVENTS) else {
            return false;
        };
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
        let mut overflowed = false;
        // Room for many events at once; an event is 16 bytes and a name of at most NAME_MAX.
        let mut buffer = [MaybeUninit::<u8>::uninit(); 4096];
        let mut events = inotify::Reader::new(fd, &mut buffer);
        let failed = loop {
            let event = match events.next() {
                Ok(event) => event,
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => break false,
                Err(_) => break true,
            };
            if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                // Drained to its end all the same, so that the next look starts afresh.
                overflowed = true;
                continue;
            }
            let Some(name) = self.names.get(&event.wd()) else {
                continue;
            };
            if event.events().intersects(WATCH_ENDED) {
                let name = name.clone();
                self.names.remove(&event.wd());
                self.watches.remove(&name);
                changed.insert(name);
            } else if event.file_name().map(|file| file.to_bytes()) == Some(b"current") {
                changed.insert(name.clone());
            }
        };
        if failed {
            // Nothing can be known from a descriptor that fails: read everything, always.
            self.fd = None;
            self.names.clear();
            self.watches.clear();
            return Changes::All;
        }
        if overflowed {
            return Changes::All;
        }
        Changes::Some(changed)
    }
}

impl Default for CurrentWatch {
    fn default() -> Self {
        Self::new()
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
