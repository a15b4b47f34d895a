//! WASI preview 1 errno values, and the one mapping from a host `io::Error` to them. It does
//! not decide which errno a WASI function answers in a given case; the functions do.

use std::io;

/// Every `errno` of WASI preview 1, by its witx number.
pub mod errno {
    pub const SUCCESS: i32 = 0;
    pub const E2BIG: i32 = 1;
    pub const EACCES: i32 = 2;
    pub const EADDRINUSE: i32 = 3;
    pub const EADDRNOTAVAIL: i32 = 4;
    pub const EAFNOSUPPORT: i32 = 5;
    pub const EAGAIN: i32 = 6;
    pub const EALREADY: i32 = 7;
    pub const EBADF: i32 = 8;
    pub const EBADMSG: i32 = 9;
    pub const EBUSY: i32 = 10;
    pub const ECANCELED: i32 = 11;
    pub const ECHILD: i32 = 12;
    pub const ECONNABORTED: i32 = 13;
    pub const ECONNREFUSED: i32 = 14;
    pub const ECONNRESET: i32 = 15;
    pub const EDEADLK: i32 = 16;
    pub const EDESTADDRREQ: i32 = 17;
    pub const EDOM: i32 = 18;
    pub const EDQUOT: i32 = 19;
    pub const EEXIST: i32 = 20;
    pub const EFAULT: i32 = 21;
    pub const EFBIG: i32 = 22;
    pub const EHOSTUNREACH: i32 = 23;
    pub const EIDRM: i32 = 24;
    pub const EILSEQ: i32 = 25;
    pub const EINPROGRESS: i32 = 26;
    pub const EINTR: i32 = 27;
    pub const EINVAL: i32 = 28;
    pub const EIO: i32 = 29;
    pub const EISCONN: i32 = 30;
    pub const EISDIR: i32 = 31;
    pub const ELOOP: i32 = 32;
    pub const EMFILE: i32 = 33;
    pub const EMLINK: i32 = 34;
    pub const EMSGSIZE: i32 = 35;
    pub const EMULTIHOP: i32 = 36;
    pub const ENAMETOOLONG: i32 = 37;
    pub const ENETDOWN: i32 = 38;
    pub const ENETRESET: i32 = 39;
    pub const ENETUNREACH: i32 = 40;
    pub const ENFILE: i32 = 41;
    pub const ENOBUFS: i32 = 42;
    pub const ENODEV: i32 = 43;
    pub const ENOENT: i32 = 44;
    pub const ENOEXEC: i32 = 45;
    pub const ENOLCK: i32 = 46;
    pub const ENOLINK: i32 = 47;
    pub const ENOMEM: i32 = 48;
    pub const ENOMSG: i32 = 49;
    pub const ENOPROTOOPT: i32 = 50;
    pub const ENOSPC: i32 = 51;
    pub const ENOSYS: i32 = 52;
    pub const ENOTCONN: i32 = 53;
    pub const ENOTDIR: i32 = 54;
    pub const ENOTEMPTY: i32 = 55;
    pub const ENOTRECOVERABLE: i32 = 56;
    pub const ENOTSOCK: i32 = 57;
    pub const ENOTSUP: i32 = 58;
    pub const ENOTTY: i32 = 59;
    pub const ENXIO: i32 = 60;
    pub const EOVERFLOW: i32 = 61;
    pub const EOWNERDEAD: i32 = 62;
    pub const EPERM: i32 = 63;
    pub const EPIPE: i32 = 64;
    pub const EPROTO: i32 = 65;
    pub const EPROTONOSUPPORT: i32 = 66;
    pub const EPROTOTYPE: i32 = 67;
    pub const ERANGE: i32 = 68;
    pub const EROFS: i32 = 69;
    pub const ESPIPE: i32 = 70;
    pub const ESRCH: i32 = 71;
    pub const ESTALE: i32 = 72;
    pub const ETIMEDOUT: i32 = 73;
    pub const ETXTBSY: i32 = 74;
    pub const EXDEV: i32 = 75;
    pub const ENOTCAPABLE: i32 = 76;
}

use errno::*;

/// The errno a host I/O failure answers. An OS error keeps its meaning; an error that `cap-std`
/// made up itself (an escape from a preopen has no OS code) is mapped by its kind, so an escape
/// reads as `EPERM`, never as success.
pub fn from_io(error: &io::Error) -> i32 {
    if let Some(code) = error.raw_os_error() {
        return from_os(code);
    }
    match error.kind() {
        io::ErrorKind::NotFound => ENOENT,
        io::ErrorKind::PermissionDenied => EPERM,
        io::ErrorKind::AlreadyExists => EEXIST,
        io::ErrorKind::InvalidInput => EINVAL,
        io::ErrorKind::InvalidFilename => EINVAL,
        io::ErrorKind::NotADirectory => ENOTDIR,
        io::ErrorKind::IsADirectory => EISDIR,
        io::ErrorKind::DirectoryNotEmpty => ENOTEMPTY,
        io::ErrorKind::ReadOnlyFilesystem => EROFS,
        io::ErrorKind::StorageFull => ENOSPC,
        io::ErrorKind::QuotaExceeded => EDQUOT,
        io::ErrorKind::FileTooLarge => EFBIG,
        io::ErrorKind::CrossesDevices => EXDEV,
        io::ErrorKind::TooManyLinks => EMLINK,
        io::ErrorKind::Unsupported => ENOTSUP,
        io::ErrorKind::Interrupted => EINTR,
        io::ErrorKind::WouldBlock => EAGAIN,
        io::ErrorKind::OutOfMemory => ENOMEM,
        _ => EIO,
    }
}

/// The errno for an OS error code; an unknown code is `EIO`.
fn from_os(code: i32) -> i32 {
    match code {
        libc::EPERM => EPERM,
        libc::ENOENT => ENOENT,
        libc::EINTR => EINTR,
        libc::EIO => EIO,
        libc::ENXIO => ENXIO,
        libc::E2BIG => E2BIG,
        libc::EBADF => EBADF,
        libc::EAGAIN => EAGAIN,
        libc::ENOMEM => ENOMEM,
        libc::EACCES => EACCES,
        libc::EFAULT => EFAULT,
        libc::EBUSY => EBUSY,
        libc::EEXIST => EEXIST,
        libc::EXDEV => EXDEV,
        libc::ENODEV => ENODEV,
        libc::ENOTDIR => ENOTDIR,
        libc::EISDIR => EISDIR,
        libc::EINVAL => EINVAL,
        libc::ENFILE => ENFILE,
        libc::EMFILE => EMFILE,
        libc::ENOTTY => ENOTTY,
        libc::ETXTBSY => ETXTBSY,
        libc::EFBIG => EFBIG,
        libc::ENOSPC => ENOSPC,
        libc::ESPIPE => ESPIPE,
        libc::EROFS => EROFS,
        libc::EMLINK => EMLINK,
        libc::EPIPE => EPIPE,
        libc::ERANGE => ERANGE,
        libc::ENAMETOOLONG => ENAMETOOLONG,
        libc::ENOSYS => ENOSYS,
        libc::ENOTEMPTY => ENOTEMPTY,
        libc::ELOOP => ELOOP,
        libc::EOVERFLOW => EOVERFLOW,
        libc::EILSEQ => EILSEQ,
        libc::ENOTSUP => ENOTSUP,
        libc::EDQUOT => EDQUOT,
        libc::ESTALE => ESTALE,
        libc::ENOTSOCK => ENOTSOCK,
        libc::ETIMEDOUT => ETIMEDOUT,
        _ => EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_os_error_keeps_its_meaning() {
        let error = io::Error::from_raw_os_error(libc::ENOTEMPTY);
        assert_eq!(from_io(&error), ENOTEMPTY);
        let error = io::Error::from_raw_os_error(libc::ELOOP);
        assert_eq!(from_io(&error), ELOOP);
    }

    #[test]
    fn an_escape_without_an_os_code_is_refused_as_eperm() {
        let error = io::Error::new(io::ErrorKind::PermissionDenied, "escape");
        assert_eq!(from_io(&error), EPERM);
    }

    #[test]
    fn an_unknown_error_is_eio() {
        let error = io::Error::other("something");
        assert_eq!(from_io(&error), EIO);
        assert_eq!(from_os(-12345), EIO);
    }
}
