//! The imports an ABI 1 module may make: every `wasi_snapshot_preview1` function and the two
//! `subako_http` functions, each with its exact signature. This table is the one list of them:
//! the package check refuses anything else, and engines link exactly these.

/// The WASI preview 1 module name.
pub const WASI_MODULE: &str = "wasi_snapshot_preview1";
/// The host module for HTTP.
pub const HTTP_MODULE: &str = "subako_http";

/// A WebAssembly value type that an import uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValType {
    I32,
    I64,
}

use ValType::{I32, I64};

/// One function a module may import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Import {
    /// `wasi_snapshot_preview1.args_get`
    ArgsGet,
    /// `wasi_snapshot_preview1.args_sizes_get`
    ArgsSizesGet,
    /// `wasi_snapshot_preview1.environ_get`
    EnvironGet,
    /// `wasi_snapshot_preview1.environ_sizes_get`
    EnvironSizesGet,
    /// `wasi_snapshot_preview1.clock_res_get`
    ClockResGet,
    /// `wasi_snapshot_preview1.clock_time_get`
    ClockTimeGet,
    /// `wasi_snapshot_preview1.fd_advise`
    FdAdvise,
    /// `wasi_snapshot_preview1.fd_allocate`
    FdAllocate,
    /// `wasi_snapshot_preview1.fd_close`
    FdClose,
    /// `wasi_snapshot_preview1.fd_datasync`
    FdDatasync,
    /// `wasi_snapshot_preview1.fd_fdstat_get`
    FdFdstatGet,
    /// `wasi_snapshot_preview1.fd_fdstat_set_flags`
    FdFdstatSetFlags,
    /// `wasi_snapshot_preview1.fd_fdstat_set_rights`
    FdFdstatSetRights,
    /// `wasi_snapshot_preview1.fd_filestat_get`
    FdFilestatGet,
    /// `wasi_snapshot_preview1.fd_filestat_set_size`
    FdFilestatSetSize,
    /// `wasi_snapshot_preview1.fd_filestat_set_times`
    FdFilestatSetTimes,
    /// `wasi_snapshot_preview1.fd_pread`
    FdPread,
    /// `wasi_snapshot_preview1.fd_prestat_get`
    FdPrestatGet,
    /// `wasi_snapshot_preview1.fd_prestat_dir_name`
    FdPrestatDirName,
    /// `wasi_snapshot_preview1.fd_pwrite`
    FdPwrite,
    /// `wasi_snapshot_preview1.fd_read`
    FdRead,
    /// `wasi_snapshot_preview1.fd_readdir`
    FdReaddir,
    /// `wasi_snapshot_preview1.fd_renumber`
    FdRenumber,
    /// `wasi_snapshot_preview1.fd_seek`
    FdSeek,
    /// `wasi_snapshot_preview1.fd_sync`
    FdSync,
    /// `wasi_snapshot_preview1.fd_tell`
    FdTell,
    /// `wasi_snapshot_preview1.fd_write`
    FdWrite,
    /// `wasi_snapshot_preview1.path_create_directory`
    PathCreateDirectory,
    /// `wasi_snapshot_preview1.path_filestat_get`
    PathFilestatGet,
    /// `wasi_snapshot_preview1.path_filestat_set_times`
    PathFilestatSetTimes,
    /// `wasi_snapshot_preview1.path_link`
    PathLink,
    /// `wasi_snapshot_preview1.path_open`
    PathOpen,
    /// `wasi_snapshot_preview1.path_readlink`
    PathReadlink,
    /// `wasi_snapshot_preview1.path_remove_directory`
    PathRemoveDirectory,
    /// `wasi_snapshot_preview1.path_rename`
    PathRename,
    /// `wasi_snapshot_preview1.path_symlink`
    PathSymlink,
    /// `wasi_snapshot_preview1.path_unlink_file`
    PathUnlinkFile,
    /// `wasi_snapshot_preview1.poll_oneoff`
    PollOneoff,
    /// `wasi_snapshot_preview1.proc_exit`
    ProcExit,
    /// `wasi_snapshot_preview1.proc_raise`
    ProcRaise,
    /// `wasi_snapshot_preview1.sched_yield`
    SchedYield,
    /// `wasi_snapshot_preview1.random_get`
    RandomGet,
    /// `wasi_snapshot_preview1.sock_accept`
    SockAccept,
    /// `wasi_snapshot_preview1.sock_recv`
    SockRecv,
    /// `wasi_snapshot_preview1.sock_send`
    SockSend,
    /// `wasi_snapshot_preview1.sock_shutdown`
    SockShutdown,
    /// `subako_http.request`
    HttpRequest,
    /// `subako_http.read_response`
    HttpReadResponse,
}

struct Entry {
    import: Import,
    name: &'static str,
    params: &'static [ValType],
    results: &'static [ValType],
}

const TABLE: [Entry; 48] = [
    Entry {
        import: Import::ArgsGet,
        name: "args_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::ArgsSizesGet,
        name: "args_sizes_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::EnvironGet,
        name: "environ_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::EnvironSizesGet,
        name: "environ_sizes_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::ClockResGet,
        name: "clock_res_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::ClockTimeGet,
        name: "clock_time_get",
        params: &[I32, I64, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdAdvise,
        name: "fd_advise",
        params: &[I32, I64, I64, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdAllocate,
        name: "fd_allocate",
        params: &[I32, I64, I64],
        results: &[I32],
    },
    Entry {
        import: Import::FdClose,
        name: "fd_close",
        params: &[I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdDatasync,
        name: "fd_datasync",
        params: &[I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdFdstatGet,
        name: "fd_fdstat_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdFdstatSetFlags,
        name: "fd_fdstat_set_flags",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdFdstatSetRights,
        name: "fd_fdstat_set_rights",
        params: &[I32, I64, I64],
        results: &[I32],
    },
    Entry {
        import: Import::FdFilestatGet,
        name: "fd_filestat_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdFilestatSetSize,
        name: "fd_filestat_set_size",
        params: &[I32, I64],
        results: &[I32],
    },
    Entry {
        import: Import::FdFilestatSetTimes,
        name: "fd_filestat_set_times",
        params: &[I32, I64, I64, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdPread,
        name: "fd_pread",
        params: &[I32, I32, I32, I64, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdPrestatGet,
        name: "fd_prestat_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdPrestatDirName,
        name: "fd_prestat_dir_name",
        params: &[I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdPwrite,
        name: "fd_pwrite",
        params: &[I32, I32, I32, I64, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdRead,
        name: "fd_read",
        params: &[I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdReaddir,
        name: "fd_readdir",
        params: &[I32, I32, I32, I64, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdRenumber,
        name: "fd_renumber",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdSeek,
        name: "fd_seek",
        params: &[I32, I64, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdSync,
        name: "fd_sync",
        params: &[I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdTell,
        name: "fd_tell",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::FdWrite,
        name: "fd_write",
        params: &[I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathCreateDirectory,
        name: "path_create_directory",
        params: &[I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathFilestatGet,
        name: "path_filestat_get",
        params: &[I32, I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathFilestatSetTimes,
        name: "path_filestat_set_times",
        params: &[I32, I32, I32, I32, I64, I64, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathLink,
        name: "path_link",
        params: &[I32, I32, I32, I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathOpen,
        name: "path_open",
        params: &[I32, I32, I32, I32, I32, I64, I64, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathReadlink,
        name: "path_readlink",
        params: &[I32, I32, I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathRemoveDirectory,
        name: "path_remove_directory",
        params: &[I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathRename,
        name: "path_rename",
        params: &[I32, I32, I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathSymlink,
        name: "path_symlink",
        params: &[I32, I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PathUnlinkFile,
        name: "path_unlink_file",
        params: &[I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::PollOneoff,
        name: "poll_oneoff",
        params: &[I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::ProcExit,
        name: "proc_exit",
        params: &[I32],
        results: &[],
    },
    Entry {
        import: Import::ProcRaise,
        name: "proc_raise",
        params: &[I32],
        results: &[I32],
    },
    Entry {
        import: Import::SchedYield,
        name: "sched_yield",
        params: &[],
        results: &[I32],
    },
    Entry {
        import: Import::RandomGet,
        name: "random_get",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::SockAccept,
        name: "sock_accept",
        params: &[I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::SockRecv,
        name: "sock_recv",
        params: &[I32, I32, I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::SockSend,
        name: "sock_send",
        params: &[I32, I32, I32, I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::SockShutdown,
        name: "sock_shutdown",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::HttpRequest,
        name: "request",
        params: &[I32, I32],
        results: &[I32],
    },
    Entry {
        import: Import::HttpReadResponse,
        name: "read_response",
        params: &[I32, I32],
        results: &[I32],
    },
];

impl Import {
    /// Every import, in table order.
    pub fn all() -> impl Iterator<Item = Import> {
        TABLE.iter().map(|entry| entry.import)
    }

    fn entry(self) -> &'static Entry {
        &TABLE[self as usize]
    }

    /// The module the import comes from.
    pub fn module(self) -> &'static str {
        if matches!(self, Import::HttpRequest | Import::HttpReadResponse) {
            HTTP_MODULE
        } else {
            WASI_MODULE
        }
    }

    /// The function's name within its module.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// The parameter types, in order.
    pub fn params(self) -> &'static [ValType] {
        self.entry().params
    }

    /// The result types: one `i32`, or none for `proc_exit`.
    pub fn results(self) -> &'static [ValType] {
        self.entry().results
    }

    /// Finds the import a module names, if it is one the ABI provides.
    pub fn lookup(module: &str, name: &str) -> Option<Import> {
        let http = match module {
            WASI_MODULE => false,
            HTTP_MODULE => true,
            _ => return None,
        };
        TABLE
            .iter()
            .find(|entry| entry.name == name && (entry.import.module() == HTTP_MODULE) == http)
            .map(|entry| entry.import)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_order_matches_the_enum() {
        for (index, entry) in TABLE.iter().enumerate() {
            assert_eq!(entry.import as usize, index, "{}", entry.name);
        }
    }

    #[test]
    fn every_wasi_function_and_both_http_functions_are_listed() {
        assert_eq!(
            Import::all().filter(|i| i.module() == WASI_MODULE).count(),
            46
        );
        assert_eq!(
            Import::lookup(HTTP_MODULE, "request"),
            Some(Import::HttpRequest)
        );
        assert_eq!(Import::lookup(HTTP_MODULE, "fd_write"), None);
        assert_eq!(Import::lookup(WASI_MODULE, "request"), None);
        assert_eq!(Import::lookup("env", "fd_write"), None);
    }

    #[test]
    fn path_open_takes_rights_as_i64() {
        let path_open = Import::lookup(WASI_MODULE, "path_open").unwrap();
        assert_eq!(
            path_open.params(),
            &[I32, I32, I32, I32, I32, I64, I64, I32, I32]
        );
        assert!(Import::ProcExit.results().is_empty());
    }
}
