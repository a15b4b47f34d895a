//! The numbers and layouts of WASI preview 1 as its witx defines them: file types, flags,
//! rights, and the `filestat` and `fdstat` records written into guest memory. It does not
//! decide what any function answers.

use super::memory;
use super::Fail;

pub mod filetype {
    pub const UNKNOWN: u8 = 0;
    pub const BLOCK_DEVICE: u8 = 1;
    pub const CHARACTER_DEVICE: u8 = 2;
    pub const DIRECTORY: u8 = 3;
    pub const REGULAR_FILE: u8 = 4;
    pub const SOCKET_STREAM: u8 = 6;
    pub const SYMBOLIC_LINK: u8 = 7;
}

pub mod fdflags {
    pub const APPEND: u16 = 1;
    pub const DSYNC: u16 = 2;
    pub const NONBLOCK: u16 = 4;
    pub const RSYNC: u16 = 8;
    pub const SYNC: u16 = 16;
}

pub mod oflags {
    pub const CREAT: u16 = 1;
    pub const DIRECTORY: u16 = 2;
    pub const EXCL: u16 = 4;
    pub const TRUNC: u16 = 8;
}

pub mod fstflags {
    pub const ATIM: u16 = 1;
    pub const ATIM_NOW: u16 = 2;
    pub const MTIM: u16 = 4;
    pub const MTIM_NOW: u16 = 8;
}

/// `lookupflags.symlink_follow`.
pub const SYMLINK_FOLLOW: u32 = 1;

pub mod rights {
    pub const FD_DATASYNC: u64 = 1 << 0;
    pub const FD_READ: u64 = 1 << 1;
    pub const FD_SEEK: u64 = 1 << 2;
    pub const FD_FDSTAT_SET_FLAGS: u64 = 1 << 3;
    pub const FD_SYNC: u64 = 1 << 4;
    pub const FD_TELL: u64 = 1 << 5;
    pub const FD_WRITE: u64 = 1 << 6;
    pub const FD_ADVISE: u64 = 1 << 7;
    pub const FD_ALLOCATE: u64 = 1 << 8;
    pub const PATH_CREATE_DIRECTORY: u64 = 1 << 9;
    pub const PATH_CREATE_FILE: u64 = 1 << 10;
    pub const PATH_LINK_SOURCE: u64 = 1 << 11;
    pub const PATH_LINK_TARGET: u64 = 1 << 12;
    pub const PATH_OPEN: u64 = 1 << 13;
    pub const FD_READDIR: u64 = 1 << 14;
    pub const PATH_READLINK: u64 = 1 << 15;
    pub const PATH_RENAME_SOURCE: u64 = 1 << 16;
    pub const PATH_RENAME_TARGET: u64 = 1 << 17;
    pub const PATH_FILESTAT_GET: u64 = 1 << 18;
    pub const PATH_FILESTAT_SET_SIZE: u64 = 1 << 19;
    pub const PATH_FILESTAT_SET_TIMES: u64 = 1 << 20;
    pub const FD_FILESTAT_GET: u64 = 1 << 21;
    pub const FD_FILESTAT_SET_SIZE: u64 = 1 << 22;
    pub const FD_FILESTAT_SET_TIMES: u64 = 1 << 23;
    pub const PATH_SYMLINK: u64 = 1 << 24;
    pub const PATH_REMOVE_DIRECTORY: u64 = 1 << 25;
    pub const PATH_UNLINK_FILE: u64 = 1 << 26;
    pub const POLL_FD_READWRITE: u64 = 1 << 27;

    /// What a regular file can do.
    pub const FILE: u64 = FD_DATASYNC
        | FD_READ
        | FD_SEEK
        | FD_FDSTAT_SET_FLAGS
        | FD_SYNC
        | FD_TELL
        | FD_WRITE
        | FD_ADVISE
        | FD_ALLOCATE
        | FD_FILESTAT_GET
        | FD_FILESTAT_SET_SIZE
        | FD_FILESTAT_SET_TIMES
        | POLL_FD_READWRITE;

    /// What a directory can do.
    pub const DIRECTORY: u64 = FD_FDSTAT_SET_FLAGS
        | FD_SYNC
        | FD_ADVISE
        | PATH_CREATE_DIRECTORY
        | PATH_CREATE_FILE
        | PATH_LINK_SOURCE
        | PATH_LINK_TARGET
        | PATH_OPEN
        | FD_READDIR
        | PATH_READLINK
        | PATH_RENAME_SOURCE
        | PATH_RENAME_TARGET
        | PATH_FILESTAT_GET
        | PATH_FILESTAT_SET_SIZE
        | PATH_FILESTAT_SET_TIMES
        | FD_FILESTAT_GET
        | FD_FILESTAT_SET_TIMES
        | PATH_SYMLINK
        | PATH_REMOVE_DIRECTORY
        | PATH_UNLINK_FILE;

    /// The rights that change something; a read-only preopen and what is opened in it lack them.
    pub const WRITING: u64 = FD_DATASYNC
        | FD_WRITE
        | FD_ALLOCATE
        | PATH_CREATE_DIRECTORY
        | PATH_CREATE_FILE
        | PATH_LINK_SOURCE
        | PATH_LINK_TARGET
        | PATH_RENAME_SOURCE
        | PATH_RENAME_TARGET
        | PATH_FILESTAT_SET_SIZE
        | PATH_FILESTAT_SET_TIMES
        | FD_FILESTAT_SET_SIZE
        | FD_FILESTAT_SET_TIMES
        | PATH_SYMLINK
        | PATH_REMOVE_DIRECTORY
        | PATH_UNLINK_FILE;

    /// Standard input: read and poll.
    pub const STDIN: u64 = FD_READ | FD_FILESTAT_GET | POLL_FD_READWRITE;
    /// Standard output and error: write and poll.
    pub const STDOUT: u64 = FD_WRITE | FD_FILESTAT_GET | POLL_FD_READWRITE;
}

/// The 64-byte `filestat` record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filestat {
    pub dev: u64,
    pub ino: u64,
    pub filetype: u8,
    pub nlink: u64,
    pub size: u64,
    pub atim: u64,
    pub mtim: u64,
    pub ctim: u64,
}

impl Filestat {
    pub const SIZE: u32 = 64;

    pub fn write(&self, memory: &mut [u8], ptr: u32) -> Result<(), Fail> {
        let mut record = [0u8; 64];
        record[0..8].copy_from_slice(&self.dev.to_le_bytes());
        record[8..16].copy_from_slice(&self.ino.to_le_bytes());
        record[16] = self.filetype;
        record[24..32].copy_from_slice(&self.nlink.to_le_bytes());
        record[32..40].copy_from_slice(&self.size.to_le_bytes());
        record[40..48].copy_from_slice(&self.atim.to_le_bytes());
        record[48..56].copy_from_slice(&self.mtim.to_le_bytes());
        record[56..64].copy_from_slice(&self.ctim.to_le_bytes());
        memory::write(memory, ptr, &record)
    }

    /// The record for host metadata, from `cap-std` or `std` (both expose the Unix fields).
    pub fn from_parts(filetype: u8, fields: &impl UnixStat) -> Self {
        Self {
            dev: fields.dev(),
            ino: fields.ino(),
            filetype,
            nlink: fields.nlink(),
            size: fields.size(),
            atim: nanos(fields.atime(), fields.atime_nsec()),
            mtim: nanos(fields.mtime(), fields.mtime_nsec()),
            ctim: nanos(fields.ctime(), fields.ctime_nsec()),
        }
    }
}

/// Nanoseconds since the epoch; times before it read as 0.
fn nanos(seconds: i64, nanos: i64) -> u64 {
    u64::try_from(seconds)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(nanos).unwrap_or(0))
}

/// The Unix metadata fields a `filestat` needs, over `cap-std`'s and `std`'s metadata alike.
pub trait UnixStat {
    fn dev(&self) -> u64;
    fn ino(&self) -> u64;
    fn nlink(&self) -> u64;
    fn size(&self) -> u64;
    fn atime(&self) -> i64;
    fn atime_nsec(&self) -> i64;
    fn mtime(&self) -> i64;
    fn mtime_nsec(&self) -> i64;
    fn ctime(&self) -> i64;
    fn ctime_nsec(&self) -> i64;
}

macro_rules! unix_stat {
    ($type:ty, $ext:path) => {
        impl UnixStat for $type {
            fn dev(&self) -> u64 {
                <$type as $ext>::dev(self)
            }
            fn ino(&self) -> u64 {
                <$type as $ext>::ino(self)
            }
            fn nlink(&self) -> u64 {
                <$type as $ext>::nlink(self)
            }
            fn size(&self) -> u64 {
                <$type as $ext>::size(self)
            }
            fn atime(&self) -> i64 {
                <$type as $ext>::atime(self)
            }
            fn atime_nsec(&self) -> i64 {
                <$type as $ext>::atime_nsec(self)
            }
            fn mtime(&self) -> i64 {
                <$type as $ext>::mtime(self)
            }
            fn mtime_nsec(&self) -> i64 {
                <$type as $ext>::mtime_nsec(self)
            }
            fn ctime(&self) -> i64 {
                <$type as $ext>::ctime(self)
            }
            fn ctime_nsec(&self) -> i64 {
                <$type as $ext>::ctime_nsec(self)
            }
        }
    };
}

unix_stat!(cap_std::fs::Metadata, cap_std::fs::MetadataExt);
unix_stat!(std::fs::Metadata, std::os::unix::fs::MetadataExt);

/// The WASI file type of host metadata's file type.
pub fn filetype_of(kind: impl Into<Kind>) -> u8 {
    match kind.into() {
        Kind::Dir => filetype::DIRECTORY,
        Kind::File => filetype::REGULAR_FILE,
        Kind::Symlink => filetype::SYMBOLIC_LINK,
        Kind::Block => filetype::BLOCK_DEVICE,
        Kind::Char => filetype::CHARACTER_DEVICE,
        Kind::Socket => filetype::SOCKET_STREAM,
        Kind::Other => filetype::UNKNOWN,
    }
}

/// A host file type, reduced to what WASI tells apart.
pub enum Kind {
    Dir,
    File,
    Symlink,
    Block,
    Char,
    Socket,
    Other,
}

impl From<cap_std::fs::FileType> for Kind {
    fn from(kind: cap_std::fs::FileType) -> Self {
        use cap_std::fs::FileTypeExt;
        if kind.is_dir() {
            Kind::Dir
        } else if kind.is_file() {
            Kind::File
        } else if kind.is_symlink() {
            Kind::Symlink
        } else if kind.is_block_device() {
            Kind::Block
        } else if kind.is_char_device() {
            Kind::Char
        } else if kind.is_socket() {
            Kind::Socket
        } else {
            Kind::Other
        }
    }
}

impl From<std::fs::FileType> for Kind {
    fn from(kind: std::fs::FileType) -> Self {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_dir() {
            Kind::Dir
        } else if kind.is_file() {
            Kind::File
        } else if kind.is_symlink() {
            Kind::Symlink
        } else if kind.is_block_device() {
            Kind::Block
        } else if kind.is_char_device() {
            Kind::Char
        } else if kind.is_socket() {
            Kind::Socket
        } else {
            Kind::Other
        }
    }
}

/// Writes the 24-byte `fdstat` record.
pub fn write_fdstat(
    memory: &mut [u8],
    ptr: u32,
    filetype: u8,
    flags: u16,
    base: u64,
    inheriting: u64,
) -> Result<(), Fail> {
    let mut record = [0u8; 24];
    record[0] = filetype;
    record[2..4].copy_from_slice(&flags.to_le_bytes());
    record[8..16].copy_from_slice(&base.to_le_bytes());
    record[16..24].copy_from_slice(&inheriting.to_le_bytes());
    memory::write(memory, ptr, &record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filestat_has_the_witx_layout() {
        let stat = Filestat {
            dev: 1,
            ino: 2,
            filetype: filetype::REGULAR_FILE,
            nlink: 3,
            size: 4,
            atim: 5,
            mtim: 6,
            ctim: 7,
        };
        let mut memory = vec![0xffu8; 64];
        stat.write(&mut memory, 0).unwrap();
        assert_eq!(memory[0], 1);
        assert_eq!(memory[8], 2);
        assert_eq!(&memory[16..24], &[4, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(memory[24], 3);
        assert_eq!(memory[32], 4);
        assert_eq!(memory[56], 7);
    }

    #[test]
    fn read_only_rights_lack_every_writing_right() {
        let read_only = rights::DIRECTORY & !rights::WRITING;
        assert_eq!(read_only & rights::PATH_CREATE_FILE, 0);
        assert_ne!(read_only & rights::PATH_OPEN, 0);
        assert_ne!(read_only & rights::FD_READDIR, 0);
    }

    #[test]
    fn times_before_the_epoch_read_as_zero() {
        assert_eq!(nanos(-5, 3), 3);
        assert_eq!(nanos(2, 5), 2_000_000_005);
    }
}
