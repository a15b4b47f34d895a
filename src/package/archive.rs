//! Safe extraction of a package archive (a gzip-compressed tar file, `.tar.gz` or `.tgz`).
//!
//! Archives come from uploads, so they are treated as hostile. An archive is refused when any
//! entry:
//!
//! - has an absolute path, a `..` component, or a NUL byte, which no file name can hold (rule
//!   `archive.unsafe_path`);
//! - is anything but a regular file or a folder: symbolic links, hard links, devices, fifos and
//!   sparse files are refused (rule `archive.entry_type`), so nothing extracted can point
//!   elsewhere;
//! - would make the archive hold more than [`MAX_ENTRIES`] entries or unpack to more than
//!   [`MAX_UNPACKED_BYTES`] bytes, counting every header and every entry's data, skipped and
//!   metadata entries included, or is a metadata record (GNU long name, PAX header) of more
//!   than [`MAX_METADATA_BYTES`] (rule `archive.too_large`), which stops reading at once;
//! - has a path longer than [`MAX_PATH_BYTES`] or a folder or file name longer than
//!   [`MAX_COMPONENT_BYTES`] (rule `archive.path_too_long`);
//! - names a path an earlier entry named already (rule `archive.duplicate`): no entry
//!   silently replaces another;
//! - collides with another entry, such as a file where a folder must go (rule
//!   `archive.conflict`).
//!
//! An archive that is not gzip and tar at all, or whose metadata records do not add up (two long
//! names for one entry, a PAX header that sets a size), is refused as `archive.invalid`.
//!
//! The archive is read as raw entries, so that this module bounds a long name or a PAX header
//! before it reads one: `tar` itself would read such a record whole, whatever its size. Memory
//! use is bounded by [`MAX_METADATA_BYTES`] and a 64 KiB copy buffer, whatever the archive.
//!
//! Entries are written by this module itself (never with `tar`'s own unpacking) below a folder
//! the caller owns, with default permissions. The package root is that folder when the
//! manifest sits at the archive's root, or the single top-level folder otherwise.
//!
//! This module does not check the package's contents; [`super::load`] does that next.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use tar::EntryType;

use super::{Problem, MANIFEST_FILE};

/// The most entries (files and folders) an archive may hold.
pub const MAX_ENTRIES: usize = 10_000;
/// The most bytes an archive may unpack to: every entry's header and data, metadata included.
pub const MAX_UNPACKED_BYTES: u64 = 256 * 1024 * 1024;
/// The longest path an entry may have, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// The longest name of one folder or file in a path, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;
/// The most bytes a metadata record (a GNU long name, a PAX header) may hold.
pub const MAX_METADATA_BYTES: u64 = 64 * 1024;
/// The size of a tar header block.
const HEADER_BYTES: u64 = 512;

/// Why an archive was not extracted.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The archive or the destination could not be read or written.
    #[error("cannot extract to {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The archive is malformed or hostile.
    #[error("the archive was refused")]
    Refused(Vec<Problem>),
}

/// Extracts the archive at `archive` into `dest` (an empty folder) and returns the package
/// root inside it.
pub fn extract(archive: &Path, dest: &Path) -> Result<PathBuf, ExtractError> {
    unpack_file(
        archive,
        dest,
        "the package is not a readable .tar.gz archive",
    )?;
    package_root(dest).map_err(|source| ExtractError::Io {
        path: dest.to_path_buf(),
        source,
    })
}

/// Unpacks a layer of files (a tar+gzip whose paths are relative to `dest`, such as a pulled
/// package's assets) into `dest`, which it creates, under the same rules and bounds as a
/// package archive.
pub fn extract_layer(layer: &Path, dest: &Path) -> Result<(), ExtractError> {
    fs::create_dir(dest).map_err(|source| ExtractError::Io {
        path: dest.to_path_buf(),
        source,
    })?;
    unpack_file(layer, dest, "the layer is not a readable tar+gzip")
}

/// Unpacks the tar+gzip file at `archive` into `dest`; a file that is not one is refused as
/// `archive.invalid`, saying `unreadable`.
fn unpack_file(archive: &Path, dest: &Path, unreadable: &str) -> Result<(), ExtractError> {
    let file = fs::File::open(archive).map_err(|source| ExtractError::Io {
        path: archive.to_path_buf(),
        source,
    })?;
    let mut problems = Vec::new();
    match unpack(io::BufReader::new(file), dest, &mut problems) {
        Ok(()) => {}
        Err(Unpack::Io(path, source)) => return Err(ExtractError::Io { path, source }),
        Err(Unpack::Malformed(error)) => problems.push(Problem::new(
            "archive.invalid",
            format!("{unreadable}: {error}"),
        )),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ExtractError::Refused(problems))
    }
}

enum Unpack {
    /// Writing below the destination failed.
    Io(PathBuf, io::Error),
    /// Reading the archive failed: bad gzip, bad tar.
    Malformed(io::Error),
}

fn unpack(reader: impl Read, dest: &Path, problems: &mut Vec<Problem>) -> Result<(), Unpack> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(reader));
    let mut entries_seen = 0usize;
    let mut bytes_left = MAX_UNPACKED_BYTES;
    // The path a GNU long-name entry or a PAX header gave the entry that follows it.
    let mut next_path: Option<Vec<u8>> = None;
    let mut seen = HashSet::new();
    // Raw entries: `tar` would read a long name or a PAX header whole, whatever its size,
    // before handing over the entry it describes; here each is bounded before it is read.
    for entry in archive.entries().map_err(Unpack::Malformed)?.raw(true) {
        let mut entry = entry.map_err(Unpack::Malformed)?;
        entries_seen += 1;
        if entries_seen > MAX_ENTRIES {
            problems.push(Problem::new(
                "archive.too_large",
                format!("the archive holds more than {MAX_ENTRIES} entries"),
            ));
            return Ok(());
        }
        // Every entry's header and data count, even one that is skipped or refused, since
        // reading past it still means decompressing it.
        let size = entry.size();
        let cost = size.saturating_add(HEADER_BYTES);
        if cost > bytes_left {
            problems.push(Problem::new(
                "archive.too_large",
                format!(
                    "the archive unpacks to more than {} MiB",
                    MAX_UNPACKED_BYTES >> 20
                ),
            ));
            return Ok(());
        }
        bytes_left -= cost;
        let entry_type = entry.header().entry_type();
        if is_metadata(entry_type) {
            if size > MAX_METADATA_BYTES {
                problems.push(Problem::new(
                    "archive.too_large",
                    format!(
                        "the archive has a {} record of {size} bytes; at most \
                         {MAX_METADATA_BYTES} are allowed",
                        describe(entry_type)
                    ),
                ));
                return Ok(());
            }
            if let Some(path) = metadata_path(&mut entry, entry_type)? {
                if next_path.replace(path).is_some() {
                    problems.push(Problem::new(
                        "archive.invalid",
                        "the archive gives one entry two long names",
                    ));
                    return Ok(());
                }
            }
            continue;
        }
        let raw_path = next_path
            .take()
            .unwrap_or_else(|| entry.header().path_bytes().into_owned());
        let shown = crate::clip(&String::from_utf8_lossy(&raw_path), 100);
        if let Some(problem) = path_length_problem(&raw_path, &shown) {
            problems.push(problem);
            continue;
        }
        // A long name or a PAX path may hold a NUL, which no file name can: refused by rule
        // here, since creating the file would fail as if the disk had.
        if raw_path.contains(&0) {
            problems.push(Problem::new(
                "archive.unsafe_path",
                format!("the entry {shown:?} has a NUL byte in its path"),
            ));
            continue;
        }
        let raw_path = PathBuf::from(std::ffi::OsString::from_vec(raw_path));
        let Some(relative) = safe_relative_path(&raw_path) else {
            problems.push(Problem::new(
                "archive.unsafe_path",
                format!("the entry {shown:?} has an absolute path or a .. component"),
            ));
            continue;
        };
        let is_file = matches!(entry_type, EntryType::Regular | EntryType::Continuous);
        if !is_file && entry_type != EntryType::Directory {
            problems.push(Problem::new(
                "archive.entry_type",
                format!(
                    "the entry {shown:?} is a {}; only files and folders are allowed",
                    describe(entry_type)
                ),
            ));
            continue;
        }
        if !relative.as_os_str().is_empty() && !seen.insert(relative.clone()) {
            problems.push(Problem::new(
                "archive.duplicate",
                format!("the archive holds {shown:?} twice; each path may appear once"),
            ));
            continue;
        }
        // Keep scanning after a problem so that every bad entry is reported, but write
        // nothing more: the archive is refused anyway.
        if !problems.is_empty() || relative.as_os_str().is_empty() {
            continue;
        }
        let target = dest.join(&relative);
        let written = if entry_type == EntryType::Directory {
            fs::create_dir_all(&target)
        } else {
            write_file(&mut entry, &target)?
        };
        if let Err(error) = written {
            if !is_layout_conflict(&error) {
                return Err(Unpack::Io(target, error));
            }
            problems.push(Problem::new(
                "archive.conflict",
                format!("the entry {shown:?} cannot be written where the archive puts it: {error}"),
            ));
        }
    }
    if next_path.is_some() {
        problems.push(Problem::new(
            "archive.invalid",
            "the archive ends with a long name that describes no entry",
        ));
    }
    Ok(())
}

/// Whether an entry only describes others: a GNU long name or link name, or a PAX header.
fn is_metadata(entry_type: EntryType) -> bool {
    entry_type.is_gnu_longname()
        || entry_type.is_gnu_longlink()
        || entry_type.is_pax_local_extensions()
        || entry_type.is_pax_global_extensions()
}

/// The path a metadata entry gives the next entry, if it gives one: a GNU long name's data, or
/// a local PAX header's `path` record. Its size is already bounded.
fn metadata_path(
    entry: &mut tar::Entry<'_, impl Read>,
    entry_type: EntryType,
) -> Result<Option<Vec<u8>>, Unpack> {
    if entry_type.is_gnu_longname() {
        let mut name = Vec::new();
        entry.read_to_end(&mut name).map_err(Unpack::Malformed)?;
        while name.last() == Some(&0) {
            name.pop();
        }
        return Ok(Some(name));
    }
    if !entry_type.is_pax_local_extensions() {
        // A long link name describes a link, which is refused anyway; global PAX records set
        // nothing hako reads.
        return Ok(None);
    }
    let mut path = None;
    if let Some(extensions) = entry.pax_extensions().map_err(Unpack::Malformed)? {
        for extension in extensions {
            let extension = extension.map_err(Unpack::Malformed)?;
            match extension.key_bytes() {
                b"path" => path = Some(extension.value_bytes().to_vec()),
                b"size" => {
                    return Err(Unpack::Malformed(io::Error::other(
                        "a PAX header sets an entry's size, which hako does not accept \
                         (entries are far below the 8 GiB a tar header holds)",
                    )))
                }
                _ => {}
            }
        }
    }
    Ok(path)
}

/// A refusal when a path is longer than [`MAX_PATH_BYTES`] or has a component longer than
/// [`MAX_COMPONENT_BYTES`].
fn path_length_problem(path: &[u8], shown: &str) -> Option<Problem> {
    if path.len() > MAX_PATH_BYTES {
        return Some(Problem::new(
            "archive.path_too_long",
            format!(
                "the entry {shown:?} has a path of {} bytes; at most {MAX_PATH_BYTES} are allowed",
                path.len()
            ),
        ));
    }
    let longest = path.split(|&byte| byte == b'/').map(<[u8]>::len).max();
    match longest {
        Some(longest) if longest > MAX_COMPONENT_BYTES => Some(Problem::new(
            "archive.path_too_long",
            format!(
                "the entry {shown:?} has a name of {longest} bytes; at most \
                 {MAX_COMPONENT_BYTES} are allowed for one folder or file"
            ),
        )),
        _ => None,
    }
}

/// Writes one file entry. The outer error is the archive's (reading it failed); the inner one
/// is the destination's.
fn write_file(entry: &mut impl Read, target: &Path) -> Result<io::Result<()>, Unpack> {
    let mut out = match target.parent().map(fs::create_dir_all).transpose() {
        Ok(_) => match fs::File::create(target) {
            Ok(out) => out,
            Err(error) => return Ok(Err(error)),
        },
        Err(error) => return Ok(Err(error)),
    };
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = entry.read(&mut buffer).map_err(Unpack::Malformed)?;
        if read == 0 {
            return Ok(Ok(()));
        }
        if let Err(error) = out.write_all(&buffer[..read]) {
            return Ok(Err(error));
        }
    }
}

/// Whether writing failed because the archive's own entries collide (a file where a folder
/// must go, or the reverse) rather than because of the disk.
fn is_layout_conflict(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory | io::ErrorKind::IsADirectory
    )
}

/// The path with `.` components dropped, or `None` if it is absolute or climbs with `..`.
fn safe_relative_path(path: &Path) -> Option<PathBuf> {
    let mut relative = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(relative)
}

fn describe(entry_type: EntryType) -> &'static str {
    match entry_type {
        EntryType::Symlink => "symbolic link",
        EntryType::Link => "hard link",
        EntryType::Char => "character device",
        EntryType::Block => "block device",
        EntryType::Fifo => "named pipe",
        EntryType::GNUSparse => "sparse file",
        EntryType::GNULongName => "GNU long name",
        EntryType::GNULongLink => "GNU long link name",
        EntryType::XHeader => "PAX header",
        EntryType::XGlobalHeader => "PAX global header",
        _ => "special entry",
    }
}

/// The manifest's folder: `dest` itself, or its single top-level folder. When neither holds a
/// manifest, `dest` is returned and the missing manifest is reported by the caller.
fn package_root(dest: &Path) -> io::Result<PathBuf> {
    if dest.join(MANIFEST_FILE).exists() {
        return Ok(dest.to_path_buf());
    }
    let mut entries = fs::read_dir(dest)?.collect::<Result<Vec<_>, _>>()?;
    if entries.len() == 1 && entries[0].file_type()?.is_dir() {
        if let Some(only) = entries.pop() {
            return Ok(only.path());
        }
    }
    Ok(dest.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    /// Builds a .tar.gz from raw entries, writing paths straight into the header so that the
    /// hostile ones the `tar` builder would refuse can be made too.
    fn archive(entries: &[(&str, EntryType, &[u8])]) -> (TempDir, PathBuf) {
        built(|builder| {
            for (name, entry_type, data) in entries {
                let mut header = tar::Header::new_gnu();
                let raw = &mut header.as_old_mut().name;
                raw[..name.len()].copy_from_slice(name.as_bytes());
                header.set_entry_type(*entry_type);
                header.set_size(data.len() as u64);
                header.set_mode(0o644);
                if *entry_type == EntryType::Symlink {
                    header.set_link_name("/etc/passwd").unwrap();
                }
                header.set_cksum();
                builder.append(&header, *data).unwrap();
            }
        })
    }

    fn refused_rules(path: &Path) -> Vec<&'static str> {
        let dest = TempDir::new().unwrap();
        match extract(path, dest.path()) {
            Err(ExtractError::Refused(problems)) => problems.into_iter().map(|p| p.rule).collect(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn files_at_the_root_make_the_root_the_package() {
        let (_keep, path) = archive(&[
            (MANIFEST_FILE, EntryType::Regular, b"{}"),
            ("assets/a.txt", EntryType::Regular, b"a"),
        ]);
        let dest = TempDir::new().unwrap();
        let root = extract(&path, dest.path()).unwrap();
        assert_eq!(root, dest.path());
        assert_eq!(fs::read(root.join("assets/a.txt")).unwrap(), b"a");
    }

    #[test]
    fn a_single_top_level_folder_is_the_package() {
        let (_keep, path) = archive(&[
            ("greet/", EntryType::Directory, b""),
            ("./greet/subako-package.json", EntryType::Regular, b"{}"),
        ]);
        let dest = TempDir::new().unwrap();
        let root = extract(&path, dest.path()).unwrap();
        assert_eq!(root, dest.path().join("greet"));
        assert_eq!(fs::read(root.join(MANIFEST_FILE)).unwrap(), b"{}");
    }

    #[test]
    fn a_parent_component_is_refused_and_nothing_escapes() {
        let (keep, path) = archive(&[("a/../../escaped", EntryType::Regular, b"x")]);
        assert_eq!(refused_rules(&path), ["archive.unsafe_path"]);
        assert!(!keep.path().join("escaped").exists());
    }

    #[test]
    fn an_absolute_path_is_refused() {
        let (_keep, path) = archive(&[("/tmp/absolute", EntryType::Regular, b"x")]);
        assert_eq!(refused_rules(&path), ["archive.unsafe_path"]);
    }

    #[test]
    fn links_and_devices_are_refused_and_all_are_reported() {
        let (_keep, path) = archive(&[
            ("link", EntryType::Symlink, b""),
            ("hard", EntryType::Link, b""),
            ("dev", EntryType::Char, b""),
        ]);
        assert_eq!(
            refused_rules(&path),
            [
                "archive.entry_type",
                "archive.entry_type",
                "archive.entry_type"
            ]
        );
    }

    #[test]
    fn too_many_entries_are_refused() {
        // Empty folders: the count is what matters, not the disk.
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("d{i}/")).collect();
        let entries: Vec<(&str, EntryType, &[u8])> = names
            .iter()
            .map(|name| (name.as_str(), EntryType::Directory, &b""[..]))
            .collect();
        let (_keep, path) = archive(&entries);
        assert_eq!(refused_rules(&path), ["archive.too_large"]);
    }

    #[test]
    fn an_entry_claiming_more_than_the_size_limit_is_refused_before_it_is_read() {
        let (_keep, path) = built(|builder| {
            let mut header = tar::Header::new_gnu();
            header.set_path("huge.bin").unwrap();
            header.set_entry_type(EntryType::Regular);
            header.set_size(MAX_UNPACKED_BYTES + 1);
            header.set_cksum();
            // Only the header is written: the check must come before any data is read.
            builder.get_mut().write_all(header.as_bytes()).unwrap();
        });
        assert_eq!(refused_rules(&path), ["archive.too_large"]);
    }

    #[test]
    fn a_file_where_a_folder_must_go_is_a_conflict() {
        let (_keep, path) = archive(&[
            ("a", EntryType::Regular, b"file"),
            ("a/b", EntryType::Regular, b"under a file"),
        ]);
        assert_eq!(refused_rules(&path), ["archive.conflict"]);
    }

    /// Builds a .tar.gz with `tar`'s own builder (which writes GNU long names for long paths)
    /// and raw header blocks where a test needs them.
    fn built(
        build: impl FnOnce(&mut tar::Builder<flate2::write::GzEncoder<fs::File>>),
    ) -> (TempDir, PathBuf) {
        let temp = TempDir::new().unwrap();
        let path = temp.path().join("package.tar.gz");
        let gz = flate2::write::GzEncoder::new(
            fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        let mut builder = tar::Builder::new(gz);
        build(&mut builder);
        builder.into_inner().unwrap().finish().unwrap();
        (temp, path)
    }

    fn file(builder: &mut tar::Builder<impl Write>, path: &str, data: &[u8]) {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(EntryType::Regular);
        builder.append_data(&mut header, path, data).unwrap();
    }

    /// A PAX header entry holding `records` (`key=value` each).
    fn pax(builder: &mut tar::Builder<impl Write>, records: &[&str]) {
        let mut data = Vec::new();
        for record in records {
            // A record is "LEN key=value\n", LEN counting itself.
            let body = format!(" {record}\n");
            let mut len = body.len() + 1;
            while format!("{len}{body}").len() != len {
                len += 1;
            }
            data.extend_from_slice(format!("{len}{body}").as_bytes());
        }
        let mut header = tar::Header::new_ustar();
        header.set_path("PaxHeaders/x").unwrap();
        header.set_entry_type(EntryType::XHeader);
        header.set_size(data.len() as u64);
        header.set_cksum();
        builder.append(&header, data.as_slice()).unwrap();
    }

    #[test]
    fn a_long_name_past_the_metadata_bound_is_refused_before_it_is_read() {
        let (_keep, path) = built(|builder| {
            let mut header = tar::Header::new_gnu();
            header.set_path("././@LongLink").unwrap();
            header.set_entry_type(EntryType::GNULongName);
            header.set_size(8 << 20);
            header.set_cksum();
            builder
                .append(&header, io::repeat(b'a').take(8 << 20))
                .unwrap();
            file(builder, "x", b"x");
        });
        assert_eq!(refused_rules(&path), ["archive.too_large"]);
    }

    #[test]
    fn paths_and_names_past_their_bounds_are_refused_by_rule() {
        let long_path = format!("{}/x", "d/".repeat(600));
        let long_name = "n".repeat(300);
        let (_keep, path) = built(|builder| {
            file(builder, &long_path, b"x");
            file(builder, &long_name, b"x");
        });
        assert_eq!(
            refused_rules(&path),
            ["archive.path_too_long", "archive.path_too_long"]
        );
        // Within the bounds, a long name is read and used.
        let within = format!("{}/{}", "d".repeat(255), "e".repeat(200));
        let (_keep, path) = built(|builder| file(builder, &within, b"deep"));
        let dest = TempDir::new().unwrap();
        extract(&path, dest.path()).unwrap();
        assert_eq!(fs::read(dest.path().join(&within)).unwrap(), b"deep");
    }

    #[test]
    fn a_nul_byte_in_a_long_name_or_a_pax_path_is_refused_by_rule() {
        let (_keep, path) = built(|builder| {
            let mut header = tar::Header::new_gnu();
            header.set_path("././@LongLink").unwrap();
            header.set_entry_type(EntryType::GNULongName);
            header.set_size(4);
            header.set_cksum();
            builder.append(&header, &b"a\0b\0"[..]).unwrap();
            file(builder, "x", b"x");
            pax(builder, &["path=c\0d"]);
            file(builder, "y", b"y");
        });
        assert_eq!(
            refused_rules(&path),
            ["archive.unsafe_path", "archive.unsafe_path"]
        );
    }

    #[test]
    fn a_path_named_twice_is_refused() {
        let (_keep, path) = built(|builder| {
            file(builder, MANIFEST_FILE, b"{}");
            file(builder, "module.wasm", b"first");
            file(builder, "./module.wasm", b"second");
        });
        assert_eq!(refused_rules(&path), ["archive.duplicate"]);
    }

    #[test]
    fn a_pax_path_names_the_next_entry_and_is_bounded_like_any_path() {
        let (_keep, path) = built(|builder| {
            pax(builder, &["path=from-pax/named.txt", "mtime=1"]);
            file(builder, "short", b"pax");
        });
        let dest = TempDir::new().unwrap();
        extract(&path, dest.path()).unwrap();
        assert_eq!(
            fs::read(dest.path().join("from-pax/named.txt")).unwrap(),
            b"pax"
        );

        let too_long = format!("path={}", "p/".repeat(700));
        let (_keep, path) = built(|builder| {
            pax(builder, &[&too_long]);
            file(builder, "short", b"x");
        });
        assert_eq!(refused_rules(&path), ["archive.path_too_long"]);

        let (_keep, path) = built(|builder| {
            pax(builder, &["size=5"]);
            file(builder, "short", b"x");
        });
        assert_eq!(refused_rules(&path), ["archive.invalid"]);
    }

    #[test]
    fn a_file_that_is_not_gzip_is_refused_as_invalid() {
        let temp = TempDir::new().unwrap();
        let path = temp.path().join("package.tgz");
        fs::write(&path, b"plain text, not an archive").unwrap();
        assert_eq!(refused_rules(&path), ["archive.invalid"]);
    }

    #[test]
    fn safe_paths_drop_dots_and_refuse_climbing() {
        assert_eq!(
            safe_relative_path(Path::new("./a/./b")),
            Some(PathBuf::from("a/b"))
        );
        assert_eq!(safe_relative_path(Path::new("a/../b")), None);
        assert_eq!(safe_relative_path(Path::new("/a")), None);
    }
}
