//! Safe extraction of a package archive (a gzip-compressed tar file, `.tar.gz` or `.tgz`).
//!
//! Archives come from uploads, so they are treated as hostile. An archive is refused when any
//! entry:
//!
//! - has an absolute path, or a `..` component (rule `archive.unsafe_path`);
//! - is anything but a regular file or a folder: symbolic links, hard links, devices, fifos and
//!   sparse files are refused (rule `archive.entry_type`), so nothing extracted can point
//!   elsewhere;
//! - would make the archive hold more than [`MAX_ENTRIES`] entries or more than
//!   [`MAX_UNPACKED_BYTES`] bytes of entry data, skipped entries included (rule
//!   `archive.too_large`), which stops reading at once;
//! - collides with another entry, such as a file where a folder must go (rule
//!   `archive.conflict`).
//!
//! An archive that is not gzip and tar at all is refused as `archive.invalid`.
//!
//! Entries are written by this module itself (never with `tar`'s own unpacking) below a folder
//! the caller owns, with default permissions. The package root is that folder when the
//! manifest sits at the archive's root, or the single top-level folder otherwise.
//!
//! This module does not check the package's contents; [`super::load`] does that next.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use tar::EntryType;

use super::{Problem, MANIFEST_FILE};

/// The most entries (files and folders) an archive may hold.
pub const MAX_ENTRIES: usize = 10_000;
/// The most bytes an archive's files may hold together, once unpacked.
pub const MAX_UNPACKED_BYTES: u64 = 256 * 1024 * 1024;

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
            format!("the package is not a readable .tar.gz archive: {error}"),
        )),
    }
    if !problems.is_empty() {
        return Err(ExtractError::Refused(problems));
    }
    package_root(dest).map_err(|source| ExtractError::Io {
        path: dest.to_path_buf(),
        source,
    })
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
    for entry in archive.entries().map_err(Unpack::Malformed)? {
        let mut entry = entry.map_err(Unpack::Malformed)?;
        entries_seen += 1;
        if entries_seen > MAX_ENTRIES {
            problems.push(Problem::new(
                "archive.too_large",
                format!("the archive holds more than {MAX_ENTRIES} entries"),
            ));
            return Ok(());
        }
        // Every entry's data counts, even one that is skipped or refused, since reading past
        // it still means decompressing it.
        let size = entry.size();
        if size > bytes_left {
            problems.push(Problem::new(
                "archive.too_large",
                format!("the archive unpacks to more than {MAX_UNPACKED_BYTES} bytes"),
            ));
            return Ok(());
        }
        bytes_left -= size;
        let entry_type = entry.header().entry_type();
        if entry_type == EntryType::XGlobalHeader {
            continue;
        }
        let raw_path = entry.path().map_err(Unpack::Malformed)?.into_owned();
        let shown = raw_path.display().to_string();
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
    Ok(())
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
        let temp = TempDir::new().unwrap();
        let path = temp.path().join("package.tar.gz");
        let gz = flate2::write::GzEncoder::new(
            fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        let mut builder = tar::Builder::new(gz);
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
        builder.into_inner().unwrap().finish().unwrap();
        (temp, path)
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
        // One folder named over and over: the count is what matters, not the disk.
        let entries = vec![("d/", EntryType::Directory, &b""[..]); MAX_ENTRIES + 1];
        let (_keep, path) = archive(&entries);
        assert_eq!(refused_rules(&path), ["archive.too_large"]);
    }

    #[test]
    fn an_entry_claiming_more_than_the_size_limit_is_refused_before_it_is_read() {
        let temp = TempDir::new().unwrap();
        let path = temp.path().join("package.tar.gz");
        let gz = flate2::write::GzEncoder::new(
            fs::File::create(&path).unwrap(),
            flate2::Compression::fast(),
        );
        let mut builder = tar::Builder::new(gz);
        let mut header = tar::Header::new_gnu();
        header.set_path("huge.bin").unwrap();
        header.set_entry_type(EntryType::Regular);
        header.set_size(MAX_UNPACKED_BYTES + 1);
        header.set_cksum();
        // Only the header is written: the check must come before any data is read.
        builder.get_mut().write_all(header.as_bytes()).unwrap();
        builder.into_inner().unwrap().finish().unwrap();
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
