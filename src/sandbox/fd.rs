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

    /// `fd_allocate` is never offered: the write budget could not see space it reserves.
    pub(super) fn fd_allocate(&mut self, fd: u32) -> Result<(), Fail> {
        self.fds.get(fd)?;
        Err(Fail::Errno(ENOTSUP))
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
            for entry in dir.entries().map_err(io_fail)? {
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
