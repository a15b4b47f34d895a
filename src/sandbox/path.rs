//! The `path_*` functions: every lookup beneath a directory fd, confined by `cap-std` alone
//! (no `..`, absolute path or symlink leaves a preopen; an attempt answers the errno `cap-std`
//! gives it), and every change refused with `EROFS` inside a read-only preopen. It does not
//! read or write file contents (`io`) nor keep the fd table (`fdtable`).

use super::abi::{self, fdflags, fstflags, oflags, rights, Filestat, SYMLINK_FOLLOW};
use super::descriptors::GUEST_DESCRIPTORS;
use super::error::errno::{
    EDQUOT, EILSEQ, EINVAL, EISDIR, ENAMETOOLONG, ENOTCAPABLE, EPERM, EROFS,
};
use super::error::from_io;
use super::fd::time_spec;
use super::fdtable::{DirFd, Entry, FileFd};
use super::memory;
use super::{Fail, Stdio, Wasi, MAX_PATH_BYTES, NODE_BYTES};
use cap_fs_ext::{
    DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsMaybeDirExt, OpenOptionsSyncExt,
};
use cap_std::fs::{Dir, OpenOptions};
use std::path::Path;

fn io_fail(error: std::io::Error) -> Fail {
    Fail::Errno(from_io(&error))
}

/// A guest path: at most [`MAX_PATH_BYTES`] (`ENAMETOOLONG`), UTF-8 (`EILSEQ` otherwise)
/// without NUL (`EINVAL`), borrowed from memory.
fn guest_path(m: &[u8], (ptr, len): (u32, u32)) -> Result<&Path, Fail> {
    let bytes = memory::bytes(m, ptr, len)?;
    if len > MAX_PATH_BYTES {
        return Err(Fail::Errno(ENAMETOOLONG));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Fail::Errno(EILSEQ))?;
    if text.contains('\0') {
        return Err(Fail::Errno(EINVAL));
    }
    Ok(Path::new(text))
}

/// Makes a file, directory or link with `make`, charged to the write budget ([`NODE_BYTES`]):
/// `EDQUOT` when it does not fit, the charge given back when `make` fails.
fn make_node<T>(
    budget: &super::WriteBudget,
    make: impl FnOnce() -> std::io::Result<T>,
) -> Result<T, Fail> {
    if !budget.try_charge(NODE_BYTES) {
        return Err(Fail::Errno(EDQUOT));
    }
    make().map_err(|error| {
        budget.refund(NODE_BYTES);
        io_fail(error)
    })
}

/// A directory fd that may be changed beneath.
fn writable_dir(dir: &DirFd) -> Result<&Dir, Fail> {
    if dir.read_only {
        return Err(Fail::Errno(EROFS));
    }
    dir.opened_dir()
}

/// The arguments of `path_open`, as the guest passed them.
pub(super) struct OpenRequest {
    pub fd: u32,
    pub lookup: u32,
    pub path: (u32, u32),
    pub oflags: u16,
    pub base: u64,
    pub inheriting: u64,
    pub fdflags: u16,
}

impl<S: Stdio> Wasi<S> {
    pub(super) fn path_open(
        &mut self,
        m: &mut [u8],
        request: OpenRequest,
        opened_fd_ptr: u32,
    ) -> Result<(), Fail> {
        memory::range(m, opened_fd_ptr, 4)?;
        let path = guest_path(m, request.path)?;
        let parent = self.fds.dir_fd(request.fd)?;
        if parent.base & rights::PATH_OPEN == 0 {
            return Err(Fail::Errno(ENOTCAPABLE));
        }
        let read_only = parent.read_only;
        let parent_base = parent.base;
        let mut base = request.base & parent.inheriting;
        let mut inheriting = request.inheriting & parent.inheriting;
        if read_only {
            base &= !rights::WRITING;
            inheriting &= !rights::WRITING;
        }
        let dir = parent.opened_dir()?;
        let flags = request.oflags;
        let creat = flags & oflags::CREAT != 0;
        let trunc = flags & oflags::TRUNC != 0;
        let excl = flags & oflags::EXCL != 0;
        let append = request.fdflags & fdflags::APPEND != 0;
        let write = request.base
            & (rights::FD_WRITE | rights::FD_ALLOCATE | rights::FD_FILESTAT_SET_SIZE)
            != 0
            || trunc
            || append;
        let read = request.base & (rights::FD_READ | rights::FD_READDIR) != 0 || !write;
        if read_only && (write || creat) {
            return Err(Fail::Errno(EROFS));
        }
        // Truncating through a path needs the directory's right to set sizes (`EPERM`, as the
        // WASI test suite's `truncation_rights` asks).
        if trunc && parent_base & rights::PATH_FILESTAT_SET_SIZE == 0 {
            return Err(Fail::Errno(EPERM));
        }
        let follow = request.lookup & SYMLINK_FOLLOW != 0;

        // Taken before the host opens anything, so the process never holds more.
        let held = GUEST_DESCRIPTORS.take(1)?;
        let entry = if flags & oflags::DIRECTORY != 0 {
            if creat || trunc {
                return Err(Fail::Errno(EINVAL));
            }
            if write {
                return Err(Fail::Errno(EISDIR));
            }
            let opened = if follow {
                dir.open_dir(path)
            } else {
                dir.open_dir_nofollow(path)
            };
            let opened = opened.map_err(io_fail)?;
            Entry::Dir(DirFd::opened(
                opened,
                held,
                read_only,
                base & rights::DIRECTORY,
                inheriting,
            ))
        } else {
            let mut options = OpenOptions::new();
            // `std` refuses to create without write access; the fd still refuses writes
            // unless the guest asked for them.
            options
                .read(read)
                .write(write || creat)
                .create(creat && !excl)
                .create_new(creat && excl)
                .truncate(trunc)
                .follow(if follow {
                    FollowSymlinks::Yes
                } else {
                    FollowSymlinks::No
                })
                .maybe_dir(!write && !creat)
                .sync(request.fdflags & fdflags::SYNC != 0)
                .dsync(request.fdflags & fdflags::DSYNC != 0)
                .rsync(request.fdflags & fdflags::RSYNC != 0);
            // A file made here costs its node (an existing one opened with O_CREAT nothing).
            let file = if creat && dir.symlink_metadata(path).is_err() {
                make_node(&self.budget, || dir.open_with(path, &options))?
            } else {
                dir.open_with(path, &options).map_err(io_fail)?
            };
            let meta = file.metadata().map_err(io_fail)?;
            if meta.is_dir() {
                let opened = Dir::from_std_file(file.into_std());
                Entry::Dir(DirFd::opened(
                    opened,
                    held,
                    read_only,
                    base & rights::DIRECTORY,
                    inheriting,
                ))
            } else {
                Entry::File(FileFd {
                    file: file.into_std(),
                    _held: held,
                    readable: read,
                    writable: write,
                    flags: request.fdflags,
                    filetype: abi::filetype_of(meta.file_type()),
                    read_only,
                    base: base & rights::FILE,
                    inheriting,
                })
            }
        };
        let fd = self.fds.insert(entry)?;
        memory::write_u32(m, opened_fd_ptr, fd)
    }

    pub(super) fn path_create_directory(
        &mut self,
        m: &mut [u8],
        fd: u32,
        ptr: u32,
        len: u32,
    ) -> Result<(), Fail> {
        let path = guest_path(m, (ptr, len))?;
        let dir = writable_dir(self.fds.dir_fd(fd)?)?;
        make_node(&self.budget, || dir.create_dir(path))
    }

    pub(super) fn path_filestat_get(
        &mut self,
        m: &mut [u8],
        fd: u32,
        lookup: u32,
        ptr: u32,
        len: u32,
        buf: u32,
    ) -> Result<(), Fail> {
        memory::range(m, buf, Filestat::SIZE)?;
        let path = guest_path(m, (ptr, len))?;
        let dir = self.fds.dir_fd(fd)?.opened_dir()?;
        let meta = if lookup & SYMLINK_FOLLOW != 0 {
            dir.metadata(path)
        } else {
            dir.symlink_metadata(path)
        };
        let meta = meta.map_err(io_fail)?;
        let stat = Filestat::from_parts(abi::filetype_of(meta.file_type()), &meta);
        stat.write(m, buf)
    }

    #[allow(clippy::too_many_arguments)] // the witx signature, one argument each
    pub(super) fn path_filestat_set_times(
        &mut self,
        m: &mut [u8],
        fd: u32,
        lookup: u32,
        path: (u32, u32),
        atim: u64,
        mtim: u64,
        flags: u32,
    ) -> Result<(), Fail> {
        let atime = time_spec(atim, flags, fstflags::ATIM, fstflags::ATIM_NOW)?;
        let mtime = time_spec(mtim, flags, fstflags::MTIM, fstflags::MTIM_NOW)?;
        let path = guest_path(m, path)?;
        let dir = writable_dir(self.fds.dir_fd(fd)?)?;
        if lookup & SYMLINK_FOLLOW != 0 {
            dir.set_times(path, atime, mtime).map_err(io_fail)
        } else {
            dir.set_symlink_times(path, atime, mtime).map_err(io_fail)
        }
    }

    pub(super) fn path_link(
        &mut self,
        m: &mut [u8],
        (old_fd, old_lookup): (u32, u32),
        old_path: (u32, u32),
        new_fd: u32,
        new_path: (u32, u32),
    ) -> Result<(), Fail> {
        // Following a link to link what it names could follow it out of the preopen: never.
        if old_lookup & SYMLINK_FOLLOW != 0 {
            return Err(Fail::Errno(EINVAL));
        }
        let old_path = guest_path(m, old_path)?;
        let new_path = guest_path(m, new_path)?;
        let budget = std::sync::Arc::clone(&self.budget);
        let (old_dir, new_dir) = self.two_writable_dirs(old_fd, new_fd)?;
        make_node(&budget, || old_dir.hard_link(old_path, new_dir, new_path))
    }

    pub(super) fn path_readlink(
        &mut self,
        m: &mut [u8],
        fd: u32,
        path: (u32, u32),
        (buf, buf_len): (u32, u32),
        bufused_ptr: u32,
    ) -> Result<(), Fail> {
        memory::range(m, buf, buf_len)?;
        memory::range(m, bufused_ptr, 4)?;
        let path = guest_path(m, path)?;
        let dir = self.fds.dir_fd(fd)?.opened_dir()?;
        let target = dir.read_link_contents(path).map_err(io_fail)?;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
        let take = bytes.len().min(buf_len as usize);
        memory::write(m, buf, &bytes[..take])?;
        memory::write_u32(m, bufused_ptr, take as u32)
    }

    /// `path_remove_directory` (`directory`) or `path_unlink_file`.
    pub(super) fn path_remove(
        &mut self,
        m: &mut [u8],
        fd: u32,
        ptr: u32,
        len: u32,
        directory: bool,
    ) -> Result<(), Fail> {
        let path = guest_path(m, (ptr, len))?;
        let dir = writable_dir(self.fds.dir_fd(fd)?)?;
        if directory {
            dir.remove_dir(path).map_err(io_fail)
        } else {
            dir.remove_file(path).map_err(io_fail)
        }
    }

    pub(super) fn path_rename(
        &mut self,
        m: &mut [u8],
        old_fd: u32,
        old_path: (u32, u32),
        new_fd: u32,
        new_path: (u32, u32),
    ) -> Result<(), Fail> {
        let old_path = guest_path(m, old_path)?;
        let new_path = guest_path(m, new_path)?;
        let (old_dir, new_dir) = self.two_writable_dirs(old_fd, new_fd)?;
        old_dir.rename(old_path, new_dir, new_path).map_err(io_fail)
    }

    pub(super) fn path_symlink(
        &mut self,
        m: &mut [u8],
        target: (u32, u32),
        fd: u32,
        link: (u32, u32),
    ) -> Result<(), Fail> {
        let target = guest_path(m, target)?;
        let link = guest_path(m, link)?;
        let dir = writable_dir(self.fds.dir_fd(fd)?)?;
        make_node(&self.budget, || dir.symlink(target, link))
    }

    /// Both directories of a two-path change, opened, and both writable.
    fn two_writable_dirs(&mut self, first: u32, second: u32) -> Result<(&Dir, &Dir), Fail> {
        self.fds.dir_fd(first)?;
        self.fds.dir_fd(second)?;
        let first = writable_dir(self.fds.opened_dir_fd(first)?)?;
        let second = writable_dir(self.fds.opened_dir_fd(second)?)?;
        Ok((first, second))
    }
}

#[cfg(test)]
mod tests {
    use super::super::abi::{oflags, rights};
    use super::super::errno::{EINVAL, ELOOP, ENOENT, ENOTDIR, EPERM, EROFS};
    use super::super::testkit::{config, preopen, Guest, PATH2_AT, PATH_AT, RESULT_AT};
    use super::super::WriteBudget;
    use hako_engine_api::Import;
    use std::sync::Arc;

    /// A guest whose fd 3 is a writable `/volume/tmp`, beside a secret file it must not reach.
    fn confined() -> (tempfile::TempDir, Guest) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("tmp")).unwrap();
        std::fs::write(root.path().join("secret"), b"s3cret").unwrap();
        let guest = Guest::with_dir(&root.path().join("tmp"));
        (root, guest)
    }

    #[test]
    fn dot_dot_cannot_leave_the_preopen() {
        let (_root, mut guest) = confined();
        let read = rights::FD_READ;
        assert_eq!(guest.open(3, true, "../secret", 0, read), Err(EPERM));
        assert_eq!(guest.open(3, true, "a/../../secret", 0, read), Err(ENOENT));
        std::fs::create_dir(_root.path().join("tmp/a")).unwrap();
        assert_eq!(guest.open(3, true, "a/../../secret", 0, read), Err(EPERM));
        assert_eq!(guest.create(3, "../evil"), Err(EPERM));
        assert!(!_root.path().join("evil").exists());
    }

    #[test]
    fn an_absolute_path_is_refused() {
        let (root, mut guest) = confined();
        let secret = root.path().join("secret");
        let result = guest.open(3, true, secret.to_str().unwrap(), 0, rights::FD_READ);
        assert_eq!(result, Err(EPERM));
        let [ptr, len] = guest.path_at(PATH_AT, "/etc");
        assert_eq!(
            guest.errno(Import::PathCreateDirectory, &[3, ptr, len]),
            EPERM
        );
    }

    /// Makes the symlink `link` -> `target` in fd 3 through `path_symlink`; the errno.
    fn symlink(guest: &mut Guest, target: &str, link: &str) -> i32 {
        let [tptr, tlen] = guest.path_at(PATH_AT, target);
        let [lptr, llen] = guest.path_at(PATH2_AT, link);
        guest.errno(Import::PathSymlink, &[tptr, tlen, 3, lptr, llen])
    }

    /// Whether the guest can open `name` for reading, following links: the errno if not.
    fn read_through(guest: &mut Guest, name: &str) -> Result<u32, i32> {
        guest.open(3, true, name, 0, rights::FD_READ)
    }

    #[test]
    fn a_link_to_an_absolute_target_never_leads_out() {
        let (root, mut guest) = confined();
        let secret = root.path().join("secret");
        let made = symlink(&mut guest, secret.to_str().unwrap(), "abs");
        if made == 0 {
            assert_eq!(read_through(&mut guest, "abs"), Err(EPERM));
        } else {
            assert_eq!(made, EPERM);
        }
        assert_eq!(symlink(&mut guest, "/", "root"), made);
        assert!(guest
            .open(3, true, "root/secret", 0, rights::FD_READ)
            .is_err());
    }

    #[test]
    fn a_link_whose_dot_dot_chain_climbs_out_is_refused() {
        let (root, mut guest) = confined();
        std::fs::create_dir_all(root.path().join("tmp/a/b")).unwrap();
        for target in [
            "../secret",
            "a/../../secret",
            "a/b/../../../secret",
            "a/b/../../..",
        ] {
            assert_eq!(symlink(&mut guest, target, "up"), 0, "{target}");
            assert_eq!(read_through(&mut guest, "up"), Err(EPERM), "{target}");
            let [ptr, len] = guest.path_at(PATH_AT, "up");
            assert_eq!(guest.errno(Import::PathUnlinkFile, &[3, ptr, len]), 0);
        }
        // A chain that climbs and comes back down inside stays allowed.
        std::fs::write(root.path().join("tmp/a/inside"), b"in").unwrap();
        assert_eq!(symlink(&mut guest, "a/b/../inside", "down"), 0);
        assert!(read_through(&mut guest, "down").is_ok());
    }

    #[test]
    fn a_link_through_a_link_cannot_leave() {
        let (_root, mut guest) = confined();
        assert_eq!(symlink(&mut guest, "../secret", "second"), 0);
        assert_eq!(symlink(&mut guest, "second", "first"), 0);
        assert_eq!(read_through(&mut guest, "first"), Err(EPERM));
        assert_eq!(guest.create(3, "first"), Err(EPERM));
        // A hard link of the link is a link of the link itself, and leads nowhere either.
        let [ptr, len] = guest.path_at(PATH_AT, "first");
        let [ptr2, len2] = guest.path_at(PATH2_AT, "hard");
        assert_eq!(
            guest.errno(Import::PathLink, &[3, 0, ptr, len, 3, ptr2, len2]),
            0
        );
        assert_eq!(read_through(&mut guest, "hard"), Err(EPERM));
    }

    #[test]
    fn path_link_never_follows_a_link() {
        let (_root, mut guest) = confined();
        assert_eq!(symlink(&mut guest, "../secret", "out"), 0);
        let [ptr, len] = guest.path_at(PATH_AT, "out");
        let [ptr2, len2] = guest.path_at(PATH2_AT, "copy");
        let follow = u64::from(super::SYMLINK_FOLLOW);
        assert_eq!(
            guest.errno(Import::PathLink, &[3, follow, ptr, len, 3, ptr2, len2]),
            EINVAL
        );
        assert_eq!(read_through(&mut guest, "copy"), Err(ENOENT));
    }

    #[test]
    fn a_rename_over_a_link_replaces_the_link_not_what_it_names() {
        let (root, mut guest) = confined();
        assert_eq!(symlink(&mut guest, "../secret", "out"), 0);
        let fd = guest.create(3, "mine").unwrap();
        assert_eq!(guest.write(fd, b"mine"), (0, 4));
        let [ptr, len] = guest.path_at(PATH_AT, "mine");
        let [ptr2, len2] = guest.path_at(PATH2_AT, "out");
        assert_eq!(
            guest.errno(Import::PathRename, &[3, ptr, len, 3, ptr2, len2]),
            0
        );
        assert_eq!(
            std::fs::read(root.path().join("secret")).unwrap(),
            b"s3cret"
        );
        assert_eq!(std::fs::read(root.path().join("tmp/out")).unwrap(), b"mine");
        // A link moved into a folder still cannot lead out from there.
        std::fs::create_dir(root.path().join("tmp/sub")).unwrap();
        assert_eq!(symlink(&mut guest, "../secret", "out2"), 0);
        let [ptr, len] = guest.path_at(PATH_AT, "out2");
        let [ptr2, len2] = guest.path_at(PATH2_AT, "sub/out2");
        assert_eq!(
            guest.errno(Import::PathRename, &[3, ptr, len, 3, ptr2, len2]),
            0
        );
        assert_eq!(read_through(&mut guest, "sub/out2"), Err(ENOENT));
    }

    #[test]
    fn truncating_through_a_path_needs_the_right_to_set_sizes() {
        let (_root, mut guest) = confined();
        guest.create(3, "file").unwrap();
        let keep = rights::DIRECTORY & !rights::PATH_FILESTAT_SET_SIZE;
        let args = [3, keep, rights::FILE | rights::DIRECTORY];
        assert_eq!(guest.errno(Import::FdFdstatSetRights, &args), 0);
        let truncate = guest.open(3, true, "file", oflags::TRUNC, rights::FD_WRITE);
        assert_eq!(truncate, Err(EPERM));
        assert!(guest.open(3, true, "file", 0, rights::FD_WRITE).is_ok());
    }

    #[test]
    fn a_symlink_pointing_outside_is_not_followed_out() {
        let (root, mut guest) = confined();
        std::os::unix::fs::symlink(root.path().join("secret"), root.path().join("tmp/abs"))
            .unwrap();
        std::os::unix::fs::symlink("../secret", root.path().join("tmp/rel")).unwrap();
        for name in ["abs", "rel"] {
            let followed = guest.open(3, true, name, 0, rights::FD_READ);
            assert_eq!(followed, Err(EPERM), "{name} followed");
            let unfollowed = guest.open(3, false, name, 0, rights::FD_READ);
            assert_eq!(unfollowed, Err(ELOOP), "{name} not followed");
            assert_eq!(guest.create(3, name), Err(EPERM), "{name} for writing");
        }
        assert_eq!(
            std::fs::read(root.path().join("secret")).unwrap(),
            b"s3cret"
        );
        // The link itself is still visible, and says where it points.
        let [ptr, len] = guest.path_at(PATH_AT, "rel");
        let args = [3, ptr, len, u64::from(PATH2_AT), 64, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::PathReadlink, &args), 0);
        assert_eq!(guest.u32_at(RESULT_AT), 9);
        assert_eq!(
            &guest.memory[PATH2_AT as usize..PATH2_AT as usize + 9],
            b"../secret"
        );
    }

    #[test]
    fn a_read_only_preopen_refuses_every_change() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("asset.txt"), b"asset").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let budget = Arc::new(WriteBudget::new(1 << 20));
        let mut guest = Guest::new(config(vec![preopen("/package", dir.path(), true)], budget));
        assert_eq!(guest.create(3, "new.txt"), Err(EROFS));
        assert_eq!(
            guest.open(3, true, "asset.txt", 0, rights::FD_WRITE),
            Err(EROFS)
        );
        assert_eq!(
            guest.open(3, true, "asset.txt", oflags::TRUNC, rights::FD_READ),
            Err(EROFS)
        );
        let [ptr, len] = guest.path_at(PATH_AT, "asset.txt");
        let [ptr2, len2] = guest.path_at(PATH2_AT, "moved.txt");
        assert_eq!(guest.errno(Import::PathUnlinkFile, &[3, ptr, len]), EROFS);
        assert_eq!(
            guest.errno(Import::PathRename, &[3, ptr, len, 3, ptr2, len2]),
            EROFS
        );
        assert_eq!(
            guest.errno(Import::PathLink, &[3, 0, ptr, len, 3, ptr2, len2]),
            EROFS
        );
        assert_eq!(
            guest.errno(Import::PathSymlink, &[ptr, len, 3, ptr2, len2]),
            EROFS
        );
        assert_eq!(
            guest.errno(Import::PathCreateDirectory, &[3, ptr2, len2]),
            EROFS
        );
        assert_eq!(
            guest.errno(Import::PathFilestatSetTimes, &[3, 1, ptr, len, 0, 0, 2]),
            EROFS
        );
        let [sub, sub_len] = guest.path_at(PATH_AT, "sub");
        assert_eq!(
            guest.errno(Import::PathRemoveDirectory, &[3, sub, sub_len]),
            EROFS
        );
        // Reading still works, and what is opened inside stays read-only.
        let fd = guest
            .open(3, true, "asset.txt", 0, rights::FD_READ)
            .unwrap();
        assert_eq!(guest.read(fd, 16), (0, b"asset".to_vec()));
        assert_eq!(guest.write(fd, b"x").0, EROFS);
        let sub_fd = guest
            .open(3, true, "sub", oflags::DIRECTORY, rights::DIRECTORY)
            .unwrap();
        assert_eq!(guest.create(sub_fd, "inner"), Err(EROFS));
        assert_eq!(
            std::fs::read(dir.path().join("asset.txt")).unwrap(),
            b"asset"
        );
        assert!(!dir.path().join("moved.txt").exists());
    }

    #[test]
    fn directories_and_files_are_made_renamed_and_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let [dir, dir_len] = guest.path_at(PATH_AT, "d");
        assert_eq!(
            guest.errno(Import::PathCreateDirectory, &[3, dir, dir_len]),
            0
        );
        assert!(tmp.path().join("d").is_dir());
        let fd = guest.create(3, "d/f").unwrap();
        assert_eq!(guest.write(fd, b"x"), (0, 1));
        let [from, from_len] = guest.path_at(PATH_AT, "d/f");
        let [to, to_len] = guest.path_at(PATH2_AT, "g");
        assert_eq!(
            guest.errno(Import::PathRename, &[3, from, from_len, 3, to, to_len]),
            0
        );
        assert_eq!(std::fs::read(tmp.path().join("g")).unwrap(), b"x");
        assert_eq!(
            guest.open(3, true, "g", oflags::DIRECTORY, rights::FD_READDIR),
            Err(ENOTDIR)
        );
        let [d, d_len] = guest.path_at(PATH_AT, "d");
        assert_eq!(guest.errno(Import::PathRemoveDirectory, &[3, d, d_len]), 0);
        let [g, g_len] = guest.path_at(PATH_AT, "g");
        assert_eq!(
            guest.errno(
                Import::PathFilestatGet,
                &[3, 1, g, g_len, u64::from(RESULT_AT)]
            ),
            0
        );
        assert_eq!(guest.memory[RESULT_AT as usize + 16], 4);
        assert_eq!(guest.u64_at(RESULT_AT + 32), 1);
        assert_eq!(guest.errno(Import::PathUnlinkFile, &[3, g, g_len]), 0);
        assert!(!tmp.path().join("g").exists());
        assert_eq!(guest.errno(Import::PathUnlinkFile, &[3, g, g_len]), ENOENT);
    }
}
