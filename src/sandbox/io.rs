//! Reading and writing through file descriptors: `fd_read`, `fd_write`, `fd_pread`,
//! `fd_pwrite`, `fd_seek` and `fd_tell`. Standard streams go to the caller's [`Stdio`]; files
//! are charged to the write budget before a byte is written — the bytes written and the hole a
//! write past the end leaves before them, which the file system may fill with blocks (a byte
//! written every 4 KiB takes a block for each) — and read and written a piece
//! ([`PIECE_BYTES`]) at a time, the cancel flag looked at before each, so that one call moving
//! gigabytes still ends soon after the time limit. It does not open files (`path`) nor report
//! on them (`fd`).

use super::abi::rights;
use super::error::errno::{EBADF, EDQUOT, EINVAL, EISDIR, ENOTCAPABLE, EROFS, ESPIPE};
use super::error::from_io;
use super::fdtable::{Entry, FileFd};
use super::memory::{self, IoVec};
use super::{Cancel, Fail, Stdio, Wasi, WriteBudget, PIECE_BYTES};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

fn io_fail(error: std::io::Error) -> Fail {
    Fail::Errno(from_io(&error))
}

/// The file behind an fd that may be read (`EBADF` otherwise, `ESPIPE` for a stream when
/// `seekable` is asked, `EISDIR` for a directory).
fn readable_file(entry: &mut Entry, seekable: bool) -> Result<&mut FileFd, Fail> {
    match entry {
        Entry::File(file) if !file.readable => Err(Fail::Errno(EBADF)),
        Entry::File(file) if file.base & rights::FD_READ == 0 => Err(Fail::Errno(ENOTCAPABLE)),
        Entry::File(file) => Ok(file),
        Entry::Dir(_) => Err(Fail::Errno(EISDIR)),
        Entry::Stdin | Entry::Stdout | Entry::Stderr if seekable => Err(Fail::Errno(ESPIPE)),
        _ => Err(Fail::Errno(EBADF)),
    }
}

/// The file behind an fd that may be written, as [`readable_file`] does for reading.
fn writable_file(entry: &mut Entry, seekable: bool) -> Result<&mut FileFd, Fail> {
    match entry {
        Entry::File(file) if file.read_only => Err(Fail::Errno(EROFS)),
        Entry::File(file) if !file.writable => Err(Fail::Errno(EBADF)),
        Entry::File(file) if file.base & rights::FD_WRITE == 0 => Err(Fail::Errno(ENOTCAPABLE)),
        Entry::File(file) => Ok(file),
        Entry::Stdin | Entry::Stdout | Entry::Stderr if seekable => Err(Fail::Errno(ESPIPE)),
        _ => Err(Fail::Errno(EBADF)),
    }
}

/// Charges `budget` for a write of `total` bytes at `at` in `file`: the bytes, and the hole
/// between the file's end and `at` (`EDQUOT`, charging nothing, when that does not fit).
fn charge_write(budget: &WriteBudget, file: &FileFd, at: u64, total: u64) -> Result<(), Fail> {
    let end = file.file.metadata().map_err(io_fail)?.len();
    let charge = total.saturating_add(at.saturating_sub(end));
    if budget.try_charge(charge) {
        Ok(())
    } else {
        Err(Fail::Errno(EDQUOT))
    }
}

/// Fills `buffer` with `read` (given each piece and the bytes read before it) a piece at a
/// time, looking at `cancel` before each; a short read ends it. Returns the bytes read.
fn read_pieces(
    cancel: &Cancel,
    buffer: &mut [u8],
    mut read: impl FnMut(&mut [u8], u64) -> std::io::Result<usize>,
) -> Result<usize, Fail> {
    let mut done = 0;
    for piece in buffer.chunks_mut(PIECE_BYTES) {
        super::go_on(cancel)?;
        let wanted = piece.len();
        let read = read(piece, done as u64).map_err(io_fail)?;
        done += read;
        if read < wanted {
            break;
        }
    }
    Ok(done)
}

/// Writes all of `bytes` with `write` (given each piece and the bytes written before it) a
/// piece at a time, looking at `cancel` before each.
fn write_pieces(
    cancel: &Cancel,
    bytes: &[u8],
    mut write: impl FnMut(&[u8], u64) -> std::io::Result<()>,
) -> Result<(), Fail> {
    let mut done = 0u64;
    for piece in bytes.chunks(PIECE_BYTES) {
        super::go_on(cancel)?;
        write(piece, done).map_err(io_fail)?;
        done += piece.len() as u64;
    }
    Ok(())
}

impl<S: Stdio> Wasi<S> {
    pub(super) fn fd_read(
        &mut self,
        m: &mut [u8],
        fd: u32,
        iovs: u32,
        count: u32,
        nread_ptr: u32,
    ) -> Result<(), Fail> {
        memory::iovecs(m, iovs, count)?;
        memory::range(m, nread_ptr, 4)?;
        let mut total = 0u64;
        match self.fds.get_mut(fd)? {
            Entry::Stdin => {
                for index in 0..count {
                    let IoVec { ptr, len } = memory::iovec(m, iovs, index)?;
                    if len == 0 {
                        continue;
                    }
                    let read = self.stdio.read_stdin(memory::bytes_mut(m, ptr, len)?)?;
                    total += read as u64;
                    // A second read could block with data already in hand; stop unless the
                    // stream has more at once.
                    if read < len as usize || !self.stdio.stdin_ready() {
                        break;
                    }
                }
            }
            entry => {
                let file = readable_file(entry, false)?;
                for index in 0..count {
                    let IoVec { ptr, len } = memory::iovec(m, iovs, index)?;
                    let buffer = memory::bytes_mut(m, ptr, len)?;
                    let read =
                        read_pieces(&self.cancel, buffer, |piece, _| (&file.file).read(piece))?;
                    total += read as u64;
                    if read < len as usize {
                        break;
                    }
                }
            }
        }
        memory::write_u32(m, nread_ptr, total as u32)
    }

    pub(super) fn fd_write(
        &mut self,
        m: &mut [u8],
        fd: u32,
        iovs: u32,
        count: u32,
        nwritten_ptr: u32,
    ) -> Result<(), Fail> {
        let total = memory::iovecs(m, iovs, count)?;
        memory::range(m, nwritten_ptr, 4)?;
        match self.fds.get_mut(fd)? {
            stream @ (Entry::Stdout | Entry::Stderr) => {
                let stdout = matches!(stream, Entry::Stdout);
                for index in 0..count {
                    let IoVec { ptr, len } = memory::iovec(m, iovs, index)?;
                    if len == 0 {
                        continue;
                    }
                    let bytes = memory::bytes(m, ptr, len)?;
                    if stdout {
                        self.stdio.write_stdout(bytes)?;
                    } else {
                        self.stdio.write_stderr(bytes)?;
                    }
                }
            }
            entry => {
                let file = writable_file(entry, false)?;
                if file.append() {
                    (&file.file).seek(SeekFrom::End(0)).map_err(io_fail)?;
                }
                let at = (&file.file).stream_position().map_err(io_fail)?;
                charge_write(&self.budget, file, at, total)?;
                for index in 0..count {
                    let IoVec { ptr, len } = memory::iovec(m, iovs, index)?;
                    let bytes = memory::bytes(m, ptr, len)?;
                    write_pieces(&self.cancel, bytes, |piece, _| {
                        (&file.file).write_all(piece)
                    })?;
                }
            }
        }
        memory::write_u32(m, nwritten_ptr, total as u32)
    }

    pub(super) fn fd_pread(
        &mut self,
        m: &mut [u8],
        fd: u32,
        iovs: u32,
        count: u32,
        offset: u64,
        nread_ptr: u32,
    ) -> Result<(), Fail> {
        memory::iovecs(m, iovs, count)?;
        memory::range(m, nread_ptr, 4)?;
        let file = readable_file(self.fds.get_mut(fd)?, true)?;
        let mut total = 0u64;
        for index in 0..count {
            let IoVec { ptr, len } = memory::iovec(m, iovs, index)?;
            let buffer = memory::bytes_mut(m, ptr, len)?;
            let at = offset.saturating_add(total);
            let read = read_pieces(&self.cancel, buffer, |piece, done| {
                file.file.read_at(piece, at.saturating_add(done))
            })?;
            total += read as u64;
            if read < len as usize {
                break;
            }
        }
        memory::write_u32(m, nread_ptr, total as u32)
    }

    pub(super) fn fd_pwrite(
        &mut self,
        m: &mut [u8],
        fd: u32,
        iovs: u32,
        count: u32,
        offset: u64,
        nwritten_ptr: u32,
    ) -> Result<(), Fail> {
        let total = memory::iovecs(m, iovs, count)?;
        memory::range(m, nwritten_ptr, 4)?;
        let file = writable_file(self.fds.get_mut(fd)?, true)?;
        if offset
            .checked_add(total)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(Fail::Errno(EINVAL));
        }
        charge_write(&self.budget, file, offset, total)?;
        let mut at = offset;
        for index in 0..count {
            let IoVec { ptr, len } = memory::iovec(m, iovs, index)?;
            let bytes = memory::bytes(m, ptr, len)?;
            write_pieces(&self.cancel, bytes, |piece, done| {
                file.file.write_all_at(piece, at + done)
            })?;
            at += u64::from(len);
        }
        memory::write_u32(m, nwritten_ptr, total as u32)
    }

    pub(super) fn fd_seek(
        &mut self,
        m: &mut [u8],
        fd: u32,
        offset: i64,
        whence: u32,
        new_offset_ptr: u32,
    ) -> Result<(), Fail> {
        memory::range(m, new_offset_ptr, 8)?;
        let file = seekable_file(self.fds.get_mut(fd)?, rights::FD_SEEK)?;
        let target = match whence {
            0 => SeekFrom::Start(u64::try_from(offset).map_err(|_| Fail::Errno(EINVAL))?),
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            _ => return Err(Fail::Errno(EINVAL)),
        };
        let position = (&file.file).seek(target).map_err(io_fail)?;
        memory::write_u64(m, new_offset_ptr, position)
    }

    pub(super) fn fd_tell(&mut self, m: &mut [u8], fd: u32, offset_ptr: u32) -> Result<(), Fail> {
        memory::range(m, offset_ptr, 8)?;
        let file = seekable_file(self.fds.get_mut(fd)?, rights::FD_TELL)?;
        let position = (&file.file).stream_position().map_err(io_fail)?;
        memory::write_u64(m, offset_ptr, position)
    }
}

/// The file behind an fd that has a position: `ESPIPE` for a stream, `EBADF` for a directory.
fn seekable_file(entry: &mut Entry, right: u64) -> Result<&mut FileFd, Fail> {
    match entry {
        Entry::File(file) if file.base & right == 0 => Err(Fail::Errno(ENOTCAPABLE)),
        Entry::File(file) => Ok(file),
        Entry::Stdin | Entry::Stdout | Entry::Stderr => Err(Fail::Errno(ESPIPE)),
        Entry::Dir(_) => Err(Fail::Errno(EBADF)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::errno::{EBADF, EDQUOT, EFAULT, ESPIPE};
    use super::super::testkit::{config, preopen, Guest, IOVEC_AT, RESULT_AT};
    use super::super::{Cancel, Fail, WriteBudget, NODE_BYTES, PIECE_BYTES};
    use super::{read_pieces, write_pieces};
    use hako_engine_api::{Import, Stop};
    use std::sync::Arc;

    #[test]
    fn a_file_written_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let fd = guest.create(3, "note.txt").unwrap();
        assert_eq!(guest.write(fd, b"hello, volume"), (0, 13));
        assert_eq!(
            std::fs::read(tmp.path().join("note.txt")).unwrap(),
            b"hello, volume"
        );
        // Back to the start, then read it through the same fd.
        let args = [u64::from(fd), 0, 0, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdSeek, &args), 0);
        assert_eq!(guest.read(fd, 64), (0, b"hello, volume".to_vec()));
        assert_eq!(guest.read(fd, 64), (0, Vec::new()));
    }

    #[test]
    fn standard_streams_go_one_way_each() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        guest.wasi.stdio_mut().stdin = b"request\n".to_vec();
        assert_eq!(guest.write(1, b"answer\n"), (0, 7));
        assert_eq!(guest.write(2, b"log"), (0, 3));
        assert_eq!(guest.write(0, b"x").0, EBADF);
        assert_eq!(guest.read(0, 64), (0, b"request\n".to_vec()));
        assert_eq!(guest.read(1, 8).0, EBADF);
        assert_eq!(guest.read(2, 8).0, EBADF);
        let stdio = guest.wasi.stdio();
        assert_eq!(stdio.stdout, b"answer\n");
        assert_eq!(stdio.stderr, b"log");
        for fd in 0..3u64 {
            let args = [fd, 0, 0, u64::from(RESULT_AT)];
            assert_eq!(guest.errno(Import::FdSeek, &args), ESPIPE);
            assert_eq!(
                guest.errno(Import::FdTell, &[fd, u64::from(RESULT_AT)]),
                ESPIPE
            );
        }
    }

    #[test]
    fn a_write_past_the_budget_is_edquot_and_writes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let budget = Arc::new(WriteBudget::new(NODE_BYTES + 8));
        let mut guest = Guest::new(config(
            vec![preopen("/volume/tmp", tmp.path(), false)],
            budget.clone(),
        ));
        let fd = guest.create(3, "big.bin").unwrap();
        assert_eq!(budget.remaining(), 8);
        assert_eq!(guest.write(fd, b"0123456789").0, EDQUOT);
        assert_eq!(std::fs::read(tmp.path().join("big.bin")).unwrap(), b"");
        assert_eq!(budget.remaining(), 8);
        // Stdout is no file: the budget does not apply to it.
        assert_eq!(guest.write(1, b"0123456789"), (0, 10));
    }

    #[test]
    fn the_budget_is_shared_across_files() {
        let tmp = tempfile::tempdir().unwrap();
        let budget = Arc::new(WriteBudget::new(2 * NODE_BYTES + 10));
        let mut guest = Guest::new(config(
            vec![preopen("/volume/tmp", tmp.path(), false)],
            budget.clone(),
        ));
        let first = guest.create(3, "a").unwrap();
        let second = guest.create(3, "b").unwrap();
        assert_eq!(budget.remaining(), 10);
        assert_eq!(guest.write(first, b"123456"), (0, 6));
        assert_eq!(guest.write(second, b"12345").0, EDQUOT);
        assert_eq!(guest.write(second, b"1234"), (0, 4));
        assert_eq!(budget.remaining(), 0);
        // Growing a file by truncation is a write too.
        assert_eq!(
            guest.errno(Import::FdFilestatSetSize, &[u64::from(first), 7]),
            EDQUOT
        );
        assert_eq!(
            guest.errno(Import::FdFilestatSetSize, &[u64::from(first), 2]),
            0
        );
        assert_eq!(std::fs::read(tmp.path().join("a")).unwrap(), b"12");
    }

    #[test]
    fn pread_and_pwrite_leave_the_offset_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let fd = u64::from(guest.create(3, "p").unwrap());
        assert_eq!(guest.write(fd as u32, b"abcdef"), (0, 6));
        guest.put(4096, b"XY");
        guest.put(IOVEC_AT, &4096u32.to_le_bytes());
        guest.put(IOVEC_AT + 4, &2u32.to_le_bytes());
        let args = [fd, u64::from(IOVEC_AT), 1, 1, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdPwrite, &args), 0);
        assert_eq!(guest.errno(Import::FdTell, &[fd, u64::from(RESULT_AT)]), 0);
        assert_eq!(guest.u64_at(RESULT_AT), 6);
        guest.put(IOVEC_AT + 4, &3u32.to_le_bytes());
        let args = [fd, u64::from(IOVEC_AT), 1, 0, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdPread, &args), 0);
        assert_eq!(&guest.memory[4096..4099], b"aXY");
        assert_eq!(std::fs::read(tmp.path().join("p")).unwrap(), b"aXYdef");
    }

    #[test]
    fn a_write_past_the_end_is_charged_for_the_hole_it_leaves() {
        let tmp = tempfile::tempdir().unwrap();
        let budget = Arc::new(WriteBudget::new(NODE_BYTES + 10_000));
        let mut guest = Guest::new(config(
            vec![preopen("/volume/tmp", tmp.path(), false)],
            budget.clone(),
        ));
        let fd = u64::from(guest.create(3, "sparse").unwrap());
        guest.put(4096, b"X");
        guest.put(IOVEC_AT, &4096u32.to_le_bytes());
        guest.put(IOVEC_AT + 4, &1u32.to_le_bytes());
        // One byte at 4,095: the hole before it and the byte, 4,096 bytes.
        let pwrite = |offset: u64| [fd, u64::from(IOVEC_AT), 1, offset, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdPwrite, &pwrite(4095)), 0);
        assert_eq!(budget.remaining(), 10_000 - 4096);
        // Inside the file: the byte alone.
        assert_eq!(guest.errno(Import::FdPwrite, &pwrite(10)), 0);
        assert_eq!(budget.remaining(), 10_000 - 4097);
        // A hole past what is left: EDQUOT, nothing charged or written.
        assert_eq!(guest.errno(Import::FdPwrite, &pwrite(20_000)), EDQUOT);
        assert_eq!(budget.remaining(), 10_000 - 4097);
        assert_eq!(
            std::fs::metadata(tmp.path().join("sparse")).unwrap().len(),
            4096
        );
        // The same through fd_seek and fd_write.
        let seek = [fd, 8000, 0, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdSeek, &seek), 0);
        assert_eq!(guest.write(fd as u32, b"Z"), (0, 1));
        assert_eq!(budget.remaining(), 10_000 - 4097 - (8000 - 4096) - 1);
        let seek = [fd, 30_000, 0, u64::from(RESULT_AT)];
        assert_eq!(guest.errno(Import::FdSeek, &seek), 0);
        assert_eq!(guest.write(fd as u32, b"Z").0, EDQUOT);
        assert_eq!(
            std::fs::metadata(tmp.path().join("sparse")).unwrap().len(),
            8001
        );
    }

    #[test]
    fn pointers_outside_memory_are_efault() {
        let tmp = tempfile::tempdir().unwrap();
        let mut guest = Guest::with_dir(tmp.path());
        let beyond = guest.memory.len() as u64;
        assert_eq!(guest.errno(Import::FdWrite, &[1, beyond, 1, 0]), EFAULT);
        guest.put(IOVEC_AT, &(beyond as u32 - 2).to_le_bytes());
        guest.put(IOVEC_AT + 4, &4u32.to_le_bytes());
        assert_eq!(
            guest.errno(Import::FdWrite, &[1, u64::from(IOVEC_AT), 1, 0]),
            EFAULT
        );
        assert!(guest.wasi.stdio().stdout.is_empty());
        assert_eq!(
            guest.errno(Import::FdRead, &[0, u64::from(IOVEC_AT), 1, beyond]),
            EFAULT
        );
    }

    #[test]
    fn data_moves_a_piece_at_a_time_and_stops_at_the_piece_after_a_cancel() {
        let cancel = Cancel::new();
        let bytes = vec![7u8; 5 * PIECE_BYTES + 1];
        let mut pieces = Vec::new();
        let written = write_pieces(&cancel, &bytes, |piece, done| {
            pieces.push((piece.len(), done));
            if pieces.len() == 2 {
                cancel.cancel();
            }
            Ok(())
        });
        assert_eq!(written, Err(Fail::Stop(Stop::Abort)));
        assert_eq!(
            pieces,
            [(PIECE_BYTES, 0), (PIECE_BYTES, PIECE_BYTES as u64)]
        );

        let cancel = Cancel::new();
        let mut buffer = vec![0u8; 3 * PIECE_BYTES];
        let mut reads = 0;
        let read = read_pieces(&cancel, &mut buffer, |piece, _| {
            reads += 1;
            // The second piece is short: the read ends there, as a short read does.
            Ok(if reads == 2 { 10 } else { piece.len() })
        });
        assert_eq!(read, Ok(PIECE_BYTES + 10));
        assert_eq!(reads, 2);
    }

    #[test]
    fn a_cancelled_call_stops_reads_and_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let mut config = config(Vec::new(), Arc::new(WriteBudget::new(1)));
        let cancel = config.cancel.clone();
        config
            .preopens
            .push(preopen("/volume/tmp", tmp.path(), false));
        let mut guest = Guest::new(config);
        cancel.cancel();
        let args = [1, u64::from(IOVEC_AT), 1, u64::from(RESULT_AT)];
        assert_eq!(guest.call(Import::FdWrite, &args), Err(Stop::Abort));
        assert_eq!(
            guest.call(
                Import::FdRead,
                &[0, u64::from(IOVEC_AT), 1, u64::from(RESULT_AT)]
            ),
            Err(Stop::Abort)
        );
    }
}
