//! The WASI functions that report on or adjust one file descriptor without moving data through
//! it: `fdstat`, `filestat`, flags, rights, sizes, times, sync, advice, allocation, preopen
//! names and directory listings. Reading and writing live in `io`; path lookups in `path`.

use super::abi::{self, fdflags, filetype, fstflags, rights, Filestat};
use super::error::errno::{
    EBADF, EDQUOT, EINVAL, EISDIR, ENAMETOOLONG, ENOTCAPABLE, ENOTSUP, EROFS, ESPIPE,
};
use super::error::from_io;
use super::fdtable::Entry;
use super::memory;
use super::{Fail, Stdio, Wasi};
use cap_fs_ext::{DirExt, SystemTimeSpec};
use std::os::unix::fs::DirEntryExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn io_fail(error: std::io::Error) -> Fail {
    Fail::Errno(from_io(&error))
}

/// One of a `fstflags` pair as a time to set: `None` leaves it, both bits at once is `EINVAL`.
pub(super) fn time_spec(
    value: u64,
    flags: u32,
    set: u16,
    now: u16,
) -> Result<Option<SystemTimeSpec>, Fail> {
    let (set, now) = (flags & u32::from(set) != 0, flags & u32::from(now) != 0);
    match (set, now) {
        (true, true) => Err(Fail::Errno(EINVAL)),
        (false, true) => Ok(Some(SystemTimeSpec::SymbolicNow)),
        (true, false) => Ok(Some(SystemTimeSpec::Absolute(
            cap_std::time::SystemTime::from_std(UNIX_EPOCH + Duration::from_nanos(value)),
        ))),
        (false, false) => Ok(None),
    }
}

/// A `fstflags` pair as a `std` time (a symbolic "now" read at once).
fn std_time(spec: Option<SystemTimeSpec>) -> Option<SystemTime> {
    spec.map(|spec| match spec {
        SystemTimeSpec::SymbolicNow => SystemTime::now(),
        SystemTimeSpec::Absolute(time) => time.into_std(),
    })
}

impl<S: Stdio> Wasi<S> {
    pub(super) fn fd_advise(&mut self, fd: u32, advice: u32) -> Result<(), Fail> {
        match self.fds.get(fd)? {
            Entry::File(_) if advice <= 5 => Ok(()),
            Entry::File(_) => Err(Fail::Errno(EINVAL)),
            Entry::Dir(_) => Err(Fail::Errno(EBADF)),
            _ => Err(Fail::Errno(ESPIPE)),
        }
    }

    /// `fd_allocate` is never offered on a file: the write budget could not see space it
    /// reserves. A directory is `EBADF` and a stream `ESPIPE`, as `fallocate(2)` answers.
    pub(super) fn fd_allocate(&mut self, fd: u32) -> Result<(), Fail> {
        match self.fds.get(fd)? {
            Entry::File(_) => Err(Fail::Errno(ENOTSUP)),
            Entry::Dir(_) => Err(Fail::Errno(EBADF)),
            _ => Err(Fail::Errno(ESPIPE)),
        }
    }

    pub(super) fn fd_sync(&mut self, fd: u32, data_only: bool) -> Result<(), Fail> {
        match self.fds.get(fd)? {
            Entry::File(file) if data_only => file.file.sync_data().map_err(io_fail),
            Entry::File(file) => file.file.sync_all().map_err(io_fail),
            Entry::Dir(_) => Ok(()),
            _ => Err(Fail::Errno(EINVAL)),
        }
    }

    pub(super) fn fd_fdstat_get(&mut self, m: &mut [u8], fd: u32, ptr: u32) -> Result<(), Fail> {
        let (kind, flags, base, inheriting) = match self.fds.get(fd)? {
            Entry::Stdin => (filetype::CHARACTER_DEVICE, 0, rights::STDIN, 0),
            Entry::Stdout | Entry::Stderr => (
                filetype::CHARACTER_DEVICE,
                fdflags::APPEND,
                rights::STDOUT,
                0,
            ),
            Entry::Dir(dir) => (filetype::DIRECTORY, 0, dir.base, dir.inheriting),
            Entry::File(file) => (file.filetype, file.flags, file.base, file.inheriting),
        };
        abi::write_fdstat(m, ptr, kind, flags, base, inheriting)
    }

    pub(super) fn fd_fdstat_set_flags(&mut self, fd: u32, flags: u32) -> Result<(), Fail> {
        let known = fdflags::APPEND | fdflags::DSYNC | fdflags::NONBLOCK | fdflags::RSYNC;
        let known = u32::from(known | fdflags::SYNC);
        if flags & !known != 0 {
            return Err(Fail::Errno(EINVAL));
        }
        let flags = flags as u16;
        match self.fds.get_mut(fd)? {
            Entry::File(file) => {
                let syncing = fdflags::DSYNC | fdflags::RSYNC | fdflags::SYNC;
                if (flags ^ file.flags) & syncing != 0 {
                    return Err(Fail::Errno(ENOTSUP));
                }
                file.flags = flags;
                Ok(())
            }
            Entry::Dir(_) => Err(Fail::Errno(EBADF)),
            // The streams take any append/nonblock setting; neither changes what they do.
            _ if flags & !(fdflags::APPEND | fdflags::NONBLOCK) == 0 => Ok(()),
            _ => Err(Fail::Errno(ENOTSUP)),
        }
    }

    pub(super) fn fd_fdstat_set_rights(
        &mut self,
        fd: u32,
        base: u64,
        inheriting: u64,
    ) -> Result<(), Fail> {
        let (have_base, have_inheriting) = match self.fds.get_mut(fd)? {
            Entry::Dir(dir) => (&mut dir.base, &mut dir.inheriting),
            Entry::File(file) => (&mut file.base, &mut file.inheriting),
            // The streams' rights are fixed; asking for no more than they have is a no-op.
            Entry::Stdin if base & !rights::STDIN == 0 && inheriting == 0 => return Ok(()),
            Entry::Stdout | Entry::Stderr if base & !rights::STDOUT == 0 && inheriting == 0 => {
                return Ok(())
            }
            _ => return Err(Fail::Errno(ENOTCAPABLE)),
        };
        if base & !*have_base != 0 || inheriting & !*have_inheriting != 0 {
            return Err(Fail::Errno(ENOTCAPABLE));
        }
        *have_base = base;
        *have_inheriting = inheriting;
        Ok(())
    }

    pub(super) fn fd_filestat_get(&mut self, m: &mut [u8], fd: u32, ptr: u32) -> Result<(), Fail> {
        memory::range(m, ptr, Filestat::SIZE)?;
        let stat = match self.fds.get_mut(fd)? {
            Entry::File(file) => {
                let meta = file.file.metadata().map_err(io_fail)?;
                Filestat::from_parts(abi::filetype_of(meta.file_type()), &meta)
            }
            Entry::Dir(dir) => {
                let meta = dir.dir()?.dir_metadata().map_err(io_fail)?;
                Filestat::from_parts(filetype::DIRECTORY, &meta)
            }
            _ => Filestat {
                filetype: filetype::CHARACTER_DEVICE,
                ..Filestat::default()
            },
        };
        stat.write(m, ptr)
    }

    pub(super) fn fd_filestat_set_size(&mut self, fd: u32, size: u64) -> Result<(), Fail> {
        let file = match self.fds.get_mut(fd)? {
            Entry::File(file) if file.read_only => return Err(Fail::Errno(EROFS)),
            Entry::File(file) if !file.writable => return Err(Fail::Errno(EBADF)),
            Entry::File(file) if file.base & rights::FD_FILESTAT_SET_SIZE == 0 => {
                return Err(Fail::Errno(ENOTCAPABLE))
            }
            Entry::File(file) => file,
            Entry::Dir(_) => return Err(Fail::Errno(EISDIR)),
            _ => return Err(Fail::Errno(EINVAL)),
        };
        if size > i64::MAX as u64 {
            return Err(Fail::Errno(EINVAL));
        }
        let current = file.file.metadata().map_err(io_fail)?.len();
        if size > current && !self.budget.try_charge(size - current) {
            return Err(Fail::Errno(EDQUOT));
        }
        file.file.set_len(size).map_err(io_fail)
    }

    pub(super) fn fd_filestat_set_times(
        &mut self,
        fd: u32,
        atim: u64,
        mtim: u64,
        flags: u32,
    ) -> Result<(), Fail> {
        let atime = time_spec(atim, flags, fstflags::ATIM, fstflags::ATIM_NOW)?;
        let mtime = time_spec(mtim, flags, fstflags::MTIM, fstflags::MTIM_NOW)?;
        match self.fds.get_mut(fd)? {
            Entry::File(file) if file.read_only => Err(Fail::Errno(EROFS)),
            Entry::File(file) => {
                let mut times = std::fs::FileTimes::new();
                if let Some(time) = std_time(atime) {
                    times = times.set_accessed(time);
                }
                if let Some(time) = std_time(mtime) {
                    times = times.set_modified(time);
                }
                file.file.set_times(times).map_err(io_fail)
            }
            Entry::Dir(dir) if dir.read_only => Err(Fail::Errno(EROFS)),
            Entry::Dir(dir) => dir.dir()?.set_times(".", atime, mtime).map_err(io_fail),
            _ => Err(Fail::Errno(ENOTSUP)),
        }
    }

    pub(super) fn fd_prestat_get(&mut self, m: &mut [u8], fd: u32, ptr: u32) -> Result<(), Fail> {
        let name = self.preopen_name(fd)?;
        let len = u32::try_from(name.len()).map_err(|_| Fail::Errno(ENAMETOOLONG))?;
        let mut record = [0u8; 8];
        record[4..8].copy_from_slice(&len.to_le_bytes());
        memory::write(m, ptr, &record)
    }

    pub(super) fn fd_prestat_dir_name(
        &mut self,
        m: &mut [u8],
        fd: u32,
        ptr: u32,
        len: u32,
    ) -> Result<(), Fail> {
        let name = self.preopen_name(fd)?;
        if (len as usize) < name.len() {
            return Err(Fail::Errno(ENAMETOOLONG));
        }
        memory::write(m, ptr, name.as_bytes())
    }

    /// A preopen's guest path; `EBADF` for any other fd, which is how `wasi-libc` learns
    /// where the preopens end.
    fn preopen_name(&self, fd: u32) -> Result<&str, Fail> {
        match self.fds.get(fd)? {
            Entry::Dir(dir) => dir.preopen.as_deref().ok_or(Fail::Errno(EBADF)),
            _ => Err(Fail::Errno(EBADF)),
        }
    }

    /// Lists `.`, `..` and then the directory's entries in the host's order; the cookie is the
    /// index of the next entry. A full buffer (`bufused == buf_len`) tells the guest to call
    /// again, with the last entry possibly cut short, as the witx says.
    pub(super) fn fd_readdir(
        &mut self,
        m: &mut [u8],
        fd: u32,
        buf: u32,
        buf_len: u32,
        cookie: u64,
        bufused_ptr: u32,
    ) -> Result<(), Fail> {
        memory::range(m, buf, buf_len)?;
        memory::range(m, bufused_ptr, 4)?;
        let dir = self.fds.dir_fd(fd)?.opened_dir()?;
        let mut out = DirentWriter {
            memory: m,
            at: buf,
            left: buf_len,
            index: 0,
            cookie,
        };
        let dot = dir.dir_metadata().map_err(io_fail)?;
        let dot_ino = cap_std::fs::MetadataExt::ino(&dot);
        let mut full = !out.push(b".", dot_ino, filetype::DIRECTORY)?;
        if !full {
            full = !out.push(b"..", 0, filetype::DIRECTORY)?;
        }
        if !full {
            // A folder may hold many entries, and each call lists them from the start up to the
            // cookie: the cancel flag is looked at between pieces of them.
            for (index, entry) in dir.entries().map_err(io_fail)?.enumerate() {
                if index.is_multiple_of(super::PIECE_ITEMS) {
                    super::go_on(&self.cancel)?;
                }
                let entry = entry.map_err(io_fail)?;
                let kind = entry
                    .file_type()
                    .map(abi::filetype_of)
                    .unwrap_or(filetype::UNKNOWN);
                let name = entry.file_name();
                let name = std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str());
                if !out.push(name, entry.ino(), kind)? {
                    break;
                }
            }
        }
        let used = buf_len - out.left;
        memory::write_u32(m, bufused_ptr, used)
    }
}

/// Writes `dirent` records into the guest's buffer, skipping those before the cookie.
struct DirentWriter<'m> {
    memory: &'m mut [u8],
    at: u32,
    left: u32,
    index: u64,
    cookie: u64,
}

impl DirentWriter<'_> {
    /// Writes one entry (cut short if the buffer ends); `false` once the buffer is full.
    fn push(&mut self, name: &[u8], ino: u64, kind: u8) -> Result<bool, Fail> {
        let index = self.index;
        self.index += 1;
        if index < self.cookie {
            return Ok(true);
        }
        let namlen = u32::try_from(name.len()).map_err(|_| Fail::Errno(ENAMETOOLONG))?;
        let mut header = [0u8; 24];
        header[0..8].copy_from_slice(&(index + 1).to_le_bytes());
        header[8..16].copy_from_slice(&ino.to_le_bytes());
        header[16..20].copy_from_slice(&namlen.to_le_bytes());
        header[20] = kind;
        self.copy(&header)?;
        self.copy(name)?;
        Ok(self.left > 0)
    }

    fn copy(&mut self, bytes: &[u8]) -> Result<(), Fail> {
        let take = bytes.len().min(self.left as usize);
        memory::write(self.memory, self.at, &bytes[..take])?;
        self.at += take as u32;
        self.left -= take as u32;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::abi::{filetype, oflags, rights};
    use super::super::errno::{EBADF, ENAMETOOLONG, ENOTCAPABLE, ENOTSUP, ESPIPE};
    use super::super::testkit::{config, preopen, Guest, PATH_AT, RESULT_AT};
    use super::super::WriteBudget;
    use hako_engine_api::Import;
    use std::sync::Arc;

    #[test]
    fn preopens_are_reported_in_order_from_fd_3() {
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let names = ["/volume/tmp", "/volume/data", "/package"];
        let preopens = names
            .iter()
            .zip(&dirs)
            .map(|(name, dir)| preopen(name, dir.path(), *name == "/package"))
            .collect();
        let mut guest = Guest::new(config(preopens, Arc::new(WriteBudget::new(0))));
        for (index, name) in names.iter().enumerate() {
            let fd = 3 + index as u64;
            assert_eq!(
                guest.errno(Import::FdPrestatGet, &[fd, u64::from(RESULT_AT)]),
                0
            );
            assert_eq!(guest.memory[RESULT_AT as usize], 0);
            assert_eq!(guest.u32_at(RESULT_AT + 4), name.len() as u32);
            let args = [fd, u64::from(PATH_AT), name.len() as u64];
            assert_eq!(guest.errno(Import::FdPrestatDirName, &args), 0);
            let start = PATH_AT as usize;
            assert_eq!(&guest.memory[start..start + name.len()], name.as_bytes());
            let short = [fd, u64::from(PATH_AT), 2];
            assert_eq!(guest.errno(Import::FdPrestatDirName, &short), ENAMETOOLONG);
        }
        // Past the last preopen, and on the streams, is EBADF: that is where wasi-libc stops.
        assert_eq!(
            guest.errno(Import::FdPrestatGet, &[6, u64::from(RESULT_AT)]),
            EBADF
        );
        assert_eq!(
            guest.errno(Import::FdPrestatGet, &[1, u64::from(RESULT_AT)]),
            EBADF
        );
        // A read-only preopen reports no writing rights.
        assert_eq!(
            guest.errno(Import::FdFdstatGet, &[5, u64::from(RESULT_AT)]),
            0
        );
        assert_eq!(guest.memory[RESULT_AT as usize], filetype::DIRECTORY);
        assert_eq!(guest.u64_at(RESULT_AT + 8) & rights::WRITING, 0);
        assert_eq!(
            guest.errno(Import::FdFdstatGet, &[3, u64::from(RESULT_AT)]),
            0
        );
        assert_ne!(guest.u64_at(RESULT_AT + 8) & rights::PATH_CREATE_FILE, 0);
    }

    #[test]
    fn fd_allocate_is_never_offered_on_a_file_and_is_ebadf_on_a_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let fd = u64::from(guest.create(3, "f").unwrap());
        assert_eq!(guest.errno(Import::FdAllocate, &[fd, 0, 4096]), ENOTSUP);
        assert_eq!(std::fs::metadata(tmp.path().join("f")).unwrap().len(), 0);
        assert_eq!(guest.errno(Import::FdAllocate, &[3, 0, 1]), EBADF);
        assert_eq!(guest.errno(Import::FdAllocate, &[1, 0, 1]), ESPIPE);
        assert_eq!(guest.errno(Import::FdAllocate, &[99, 0, 1]), EBADF);
    }

    #[test]
    fn the_streams_are_character_devices() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        for fd in 0..3 {
            assert_eq!(
                guest.errno(Import::FdFdstatGet, &[fd, u64::from(RESULT_AT)]),
                0
            );
            assert_eq!(guest.memory[RESULT_AT as usize], filetype::CHARACTER_DEVICE);
        }
        assert_eq!(
            guest.u64_at(RESULT_AT + 8) & rights::FD_WRITE,
            rights::FD_WRITE
        );
        assert_eq!(
            guest.errno(Import::FdFdstatGet, &[9, u64::from(RESULT_AT)]),
            EBADF
        );
    }

    #[test]
    fn rights_can_be_dropped_but_not_added() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let fd = guest.create(3, "f").unwrap();
        let keep = rights::FD_READ | rights::FD_SEEK | rights::FD_TELL;
        assert_eq!(
            guest.errno(Import::FdFdstatSetRights, &[u64::from(fd), keep, 0]),
            0
        );
        assert_eq!(guest.write(fd, b"x").0, ENOTCAPABLE);
        let more = keep | rights::FD_WRITE;
        let args = [u64::from(fd), more, 0];
        assert_eq!(guest.errno(Import::FdFdstatSetRights, &args), ENOTCAPABLE);
    }

    #[test]
    fn append_set_later_writes_at_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let fd = guest.create(3, "log").unwrap();
        assert_eq!(guest.write(fd, b"abc"), (0, 3));
        assert_eq!(
            guest.errno(Import::FdSeek, &[u64::from(fd), 0, 0, u64::from(RESULT_AT)]),
            0
        );
        assert_eq!(
            guest.errno(Import::FdFdstatSetFlags, &[u64::from(fd), 1]),
            0
        );
        assert_eq!(guest.write(fd, b"de"), (0, 2));
        assert_eq!(std::fs::read(tmp.path().join("log")).unwrap(), b"abcde");
        assert_eq!(
            guest.errno(Import::FdFdstatGet, &[u64::from(fd), u64::from(RESULT_AT)]),
            0
        );
        assert_eq!(guest.memory[RESULT_AT as usize + 2], 1);
    }

    /// The entries of a `fd_readdir` buffer: (next cookie, name, type).
    fn dirents(bytes: &[u8]) -> Vec<(u64, String, u8)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 24 <= bytes.len() {
            let next = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            let len = u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()) as usize;
            let kind = bytes[at + 20];
            let name = String::from_utf8_lossy(&bytes[at + 24..at + 24 + len]).into_owned();
            out.push((next, name, kind));
            at += 24 + len;
        }
        out
    }

    #[test]
    fn readdir_lists_dot_entries_then_the_directory_and_resumes_at_a_cookie() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("file"), b"").unwrap();
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let buf = 8192u64;
        let args = [3, buf, 4096, 0, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdReaddir, &args), 0);
        let used = guest.u32_at(RESULT_AT) as usize;
        let entries = dirents(&guest.memory[8192..8192 + used]);
        let mut names: Vec<_> = entries.iter().map(|(_, n, k)| (n.clone(), *k)).collect();
        assert_eq!(names[0], (".".to_string(), filetype::DIRECTORY));
        assert_eq!(names[1], ("..".to_string(), filetype::DIRECTORY));
        names.sort();
        assert!(names.contains(&("file".to_string(), filetype::REGULAR_FILE)));
        assert!(names.contains(&("sub".to_string(), filetype::DIRECTORY)));
        assert_eq!(entries.len(), 4);
        // From the cookie of the third entry, only the last one comes back.
        let cookie = entries[2].0;
        let args = [3, buf, 4096, cookie, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdReaddir, &args), 0);
        let used = guest.u32_at(RESULT_AT) as usize;
        let rest = dirents(&guest.memory[8192..8192 + used]);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].1, entries[3].1);
        // A small buffer is filled completely, which tells the guest to read on.
        let args = [3, buf, 30, 0, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdReaddir, &args), 0);
        assert_eq!(guest.u32_at(RESULT_AT), 30);
    }

    #[test]
    fn closing_and_renumbering_move_fds() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let fd = guest
            .open(3, true, ".", oflags::DIRECTORY, rights::DIRECTORY)
            .unwrap();
        assert_eq!(fd, 4);
        assert_eq!(guest.errno(Import::FdRenumber, &[4, 3]), 0);
        assert_eq!(
            guest.errno(Import::FdPrestatGet, &[3, u64::from(RESULT_AT)]),
            EBADF
        );
        assert_eq!(guest.errno(Import::FdClose, &[3]), 0);
        assert_eq!(guest.errno(Import::FdClose, &[3]), EBADF);
        assert_eq!(guest.errno(Import::FdClose, &[4]), EBADF);
    }

    #[test]
    fn times_are_set_on_files_and_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let fd = u64::from(guest.create(3, "t").unwrap());
        let epoch_plus_a_second = 1_000_000_000u64;
        let args = [fd, 0, epoch_plus_a_second, 4];
        assert_eq!(guest.errno(Import::FdFilestatSetTimes, &args), 0);
        let modified = std::fs::metadata(tmp.path().join("t"))
            .unwrap()
            .modified()
            .unwrap();
        let since = modified.duration_since(std::time::UNIX_EPOCH).unwrap();
        assert_eq!(since.as_secs(), 1);
        assert_eq!(guest.errno(Import::FdFilestatSetTimes, &[3, 0, 0, 8]), 0);
        // Both "now" and a given time for the same stamp is invalid.
        let both = [fd, 0, 0, 4 | 8];
        assert_eq!(
            guest.errno(Import::FdFilestatSetTimes, &both),
            super::EINVAL
        );
    }
}
