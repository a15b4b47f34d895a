/* The operating-system layer SQLite asks of a build with SQLITE_OS_OTHER: one VFS that opens
 * no file (the sqlite package's databases live in memory, and it needs no folder), and takes
 * randomness and the time from WASI through wasi-libc. */
#include <stdint.h>
#include <wasi/api.h>

#include "sqlite3.h"

static int no_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file, int flags,
                   int *out_flags) {
    (void)vfs, (void)name, (void)flags, (void)out_flags;
    file->pMethods = 0;
    return SQLITE_CANTOPEN;
}

static int no_delete(sqlite3_vfs *vfs, const char *name, int sync) {
    (void)vfs, (void)name, (void)sync;
    return SQLITE_IOERR_DELETE;
}

static int no_access(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    (void)vfs, (void)name, (void)flags;
    *out = 0;
    return SQLITE_OK;
}

static int full_pathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    (void)vfs;
    sqlite3_snprintf(size, out, "%s", name);
    return SQLITE_OK;
}

static int randomness(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return __wasi_random_get((uint8_t *)out, (__wasi_size_t)size) == 0 ? size : 0;
}

/* Nothing to wait for: no file is ever locked. */
static int no_sleep(sqlite3_vfs *vfs, int microseconds) {
    (void)vfs;
    return microseconds;
}

static int current_time(sqlite3_vfs *vfs, double *out) {
    (void)vfs;
    __wasi_timestamp_t ns = 0;
    if (__wasi_clock_time_get(__WASI_CLOCKID_REALTIME, 1000, &ns) != 0) return SQLITE_ERROR;
    *out = 2440587.5 + (double)ns / 86400e9; /* the Julian day of the Unix epoch, and days since */
    return SQLITE_OK;
}

static int last_error(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs, (void)size, (void)out;
    return 0;
}

int sqlite3_os_init(void) {
    static sqlite3_vfs vfs = {
        .iVersion = 1,
        .szOsFile = sizeof(sqlite3_file),
        .mxPathname = 512,
        .zName = "memory-only",
        .xOpen = no_open,
        .xDelete = no_delete,
        .xAccess = no_access,
        .xFullPathname = full_pathname,
        .xRandomness = randomness,
        .xSleep = no_sleep,
        .xCurrentTime = current_time,
        .xGetLastError = last_error,
    };
    return sqlite3_vfs_register(&vfs, 1);
}

int sqlite3_os_end(void) { return SQLITE_OK; }
