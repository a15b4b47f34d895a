//! The call's volume as the broker sees it: the host folders behind `/volume/tmp` and
//! `/volume/data`, opened when a request first needs them, and the guest paths of `file`
//! bodies and outputs resolved inside them through cap-std, so that no path or symlink leads
//! out. It owns [`VolumeDirs`] and [`VolumeRoot`]; it does not charge the write budget or
//! check path syntax (`Request::parse` has refused `..` and empty segments).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File};

use crate::http::answer::{ErrorKind, HttpError};
use crate::sandbox::{Held, GUEST_DESCRIPTORS};

/// The largest `file` body a request may send.
pub const MAX_FILE_BODY_BYTES: u64 = 64 * 1024 * 1024;

/// How a volume folder comes to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Make {
    /// Made with `create_dir` on first use, by whoever uses it first; an existing path is a
    /// failure, never a shared folder.
    Fresh,
    /// Made with `create_dir_all` when missing.
    Missing,
}

/// One host folder behind a volume mount. Clones share the knowledge of whether a fresh
/// folder was made, so the sandbox and the broker can each be the first to use it.
#[derive(Debug, Clone)]
pub struct VolumeRoot {
    path: PathBuf,
    make: Make,
    made: Arc<Mutex<bool>>,
}

impl VolumeRoot {
    /// A folder that must not exist yet, made on first use.
    pub fn fresh(path: PathBuf) -> VolumeRoot {
        VolumeRoot {
            path,
            make: Make::Fresh,
            made: Arc::new(Mutex::new(false)),
        }
    }

    /// A folder made (with its parents) on first use when it is missing.
    pub fn existing(path: PathBuf) -> VolumeRoot {
        VolumeRoot {
            path,
            make: Make::Missing,
            made: Arc::new(Mutex::new(false)),
        }
    }

    /// The folder on the host.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the folder, making it first if this is its first use.
    pub fn open(&self) -> io::Result<Dir> {
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if !*made {
            match self.make {
                // Only this user may enter a fresh volume: it holds the call's files.
                Make::Fresh => {
                    use std::os::unix::fs::DirBuilderExt;
                    std::fs::DirBuilder::new().mode(0o700).create(&self.path)?
                }
                Make::Missing => std::fs::create_dir_all(&self.path)?,
            }
            *made = true;
        }
        Dir::open_ambient_dir(&self.path, ambient_authority())
    }

    /// Opens the folder only if it exists already (a fresh one exists once something used
    /// it): reading what a call left behind never makes a folder.
    pub fn open_existing(&self) -> Option<Dir> {
        Dir::open_ambient_dir(&self.path, ambient_authority()).ok()
    }

    /// Whether this folder is made fresh for its call (and so is the call's to remove).
    pub fn is_fresh(&self) -> bool {
        self.make == Make::Fresh
    }

    /// Whether the folder has been made (a fresh one) or checked to exist (a given one) by a
    /// first use: a fresh folder nothing used was never made.
    pub fn was_made(&self) -> bool {
        *self
            .made
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// The folders behind `/volume/tmp` and `/volume/data` in one call; either may be absent.
#[derive(Debug, Clone, Default)]
pub struct VolumeDirs {
    pub tmp: Option<VolumeRoot>,
    pub data: Option<VolumeRoot>,
}

impl VolumeDirs {
    /// No volume (discovery, and calls that mount none).
    pub fn none() -> VolumeDirs {
        VolumeDirs::default()
    }

    /// The root folder and the path inside it of the guest path `guest` (`/volume/…`), with
    /// the two descriptors the folder and the file in it hold taken from the guests' share
    /// (see [`GUEST_DESCRIPTORS`]).
    fn locate<'a>(&self, field: &str, guest: &'a str) -> Result<(Dir, &'a str, Held), HttpError> {
        let bad =
            |why: String| HttpError::new(ErrorKind::BadPath, format!("{field} `{guest}` {why}"));
        let below = guest
            .strip_prefix("/volume/")
            .ok_or_else(|| bad("must be under /volume/".into()))?;
        let (mount, rest) = below.split_once('/').unwrap_or((below, ""));
        let root = match mount {
            "tmp" => self.tmp.as_ref(),
            "data" => self.data.as_ref(),
            _ => return Err(bad("must be under /volume/tmp/ or /volume/data/".into())),
        };
        let root = root.ok_or_else(|| {
            bad(format!(
                "is on /volume/{mount}, which this call does not mount"
            ))
        })?;
        if rest.is_empty() {
            return Err(bad("names a folder, not a file".into()));
        }
        let held = GUEST_DESCRIPTORS.take(2).map_err(|_| {
            bad(format!(
                "cannot be opened now: the server's guests hold every descriptor they may \
                 ({} with --max-guest-descriptors); try again",
                GUEST_DESCRIPTORS.limit()
            ))
        })?;
        let dir = root.open().map_err(|error| {
            bad(format!(
                "cannot be reached: /volume/{mount} is unavailable ({error})"
            ))
        })?;
        Ok((dir, rest, held))
    }

    /// The content of the file at guest path `guest`, for a `file` body: at most
    /// `MAX_FILE_BODY_BYTES` (`invalid_request` beyond), since it is held in memory while the
    /// request is sent (and sent again on a redirect that keeps the body).
    pub fn read(&self, guest: &str) -> Result<Vec<u8>, HttpError> {
        use std::io::Read;
        let (dir, rest, _held) = self.locate("body.path", guest)?;
        let unreadable = |error: io::Error| {
            HttpError::new(
                ErrorKind::BadPath,
                format!("body.path `{guest}` cannot be read: {}", describe(&error)),
            )
        };
        let too_large = || {
            HttpError::invalid(format!(
                "body.path `{guest}` is larger than {MAX_FILE_BODY_BYTES} bytes (64 MiB), the \
                 most a file body may be"
            ))
        };
        let file = dir.open(rest).map_err(unreadable)?;
        if file.metadata().map_err(unreadable)?.len() > MAX_FILE_BODY_BYTES {
            return Err(too_large());
        }
        // The file may grow after its size was read: never more than the bound is read.
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BODY_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        if bytes.len() as u64 > MAX_FILE_BODY_BYTES {
            return Err(too_large());
        }
        Ok(bytes)
    }

    /// Creates (or truncates) the file at guest path `guest` for a `file` output, making its
    /// parent folders. Returns the folder it is in and its path there, to remove it again.
    pub fn create(&self, guest: &str) -> Result<(File, OutputFile), HttpError> {
        let (dir, rest, held) = self.locate("output.path", guest)?;
        let fail = |error: io::Error| {
            HttpError::new(
                ErrorKind::BadPath,
                format!(
                    "output.path `{guest}` cannot be written: {}",
                    describe(&error)
                ),
            )
        };
        if let Some((parent, _)) = rest.rsplit_once('/') {
            dir.create_dir_all(parent).map_err(fail)?;
        }
        let file = dir.create(rest).map_err(fail)?;
        Ok((
            file,
            OutputFile {
                dir,
                path: rest.to_string(),
                _held: held,
            },
        ))
    }
}

/// A file output being written, so that a failed request can remove what it left.
#[derive(Debug)]
pub struct OutputFile {
    dir: Dir,
    path: String,
    /// The folder's and the file's share of the guests' descriptors: the file is written
    /// while this is kept.
    _held: Held,
}

impl OutputFile {
    /// Removes the partial file; a failure to do so only leaves the file behind.
    pub fn discard(self) {
        if let Err(error) = self.dir.remove_file(&self.path) {
            tracing::debug!(%error, "removing a partial HTTP output file");
        }
    }
}

fn describe(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "no such file or folder".to_string(),
        io::ErrorKind::PermissionDenied => {
            "it leads outside the volume or is not permitted".to_string()
        }
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs() -> (tempfile::TempDir, VolumeDirs) {
        let host = tempfile::tempdir().unwrap();
        let dirs = VolumeDirs {
            tmp: Some(VolumeRoot::fresh(host.path().join("tmp"))),
            data: None,
        };
        (host, dirs)
    }

    #[test]
    fn a_fresh_root_is_made_once_and_shared_by_clones() {
        let (host, dirs) = dirs();
        let clone = dirs.tmp.clone().unwrap();
        assert!(!host.path().join("tmp").exists());
        clone.open().unwrap();
        dirs.tmp.as_ref().unwrap().open().unwrap();
        assert!(host.path().join("tmp").is_dir());
    }

    #[test]
    fn an_output_makes_its_folders_and_a_body_reads_it_back() {
        let (host, dirs) = dirs();
        let (file, _) = dirs.create("/volume/tmp/a/b/out.txt").unwrap();
        drop(file);
        std::fs::write(host.path().join("tmp/a/b/out.txt"), "saved").unwrap();
        assert_eq!(dirs.read("/volume/tmp/a/b/out.txt").unwrap(), b"saved");
    }

    #[test]
    fn a_file_body_past_its_bound_is_refused_unread() {
        let (host, dirs) = dirs();
        dirs.tmp.as_ref().unwrap().open().unwrap();
        let big = std::fs::File::create(host.path().join("tmp/big")).unwrap();
        big.set_len(MAX_FILE_BODY_BYTES + 1).unwrap();
        let error = dirs.read("/volume/tmp/big").unwrap_err();
        assert_eq!(error.kind, ErrorKind::InvalidRequest);
        assert!(error.message.contains("64 MiB"), "{}", error.message);
        big.set_len(MAX_FILE_BODY_BYTES).unwrap();
        assert_eq!(
            dirs.read("/volume/tmp/big").unwrap().len() as u64,
            MAX_FILE_BODY_BYTES
        );
    }

    #[test]
    fn paths_outside_the_mounts_are_bad_paths() {
        let (_host, dirs) = dirs();
        for path in [
            "/volume/data/x",
            "/volume/other/x",
            "/volume/tmp",
            "/etc/passwd",
        ] {
            assert_eq!(
                dirs.read(path).unwrap_err().kind,
                ErrorKind::BadPath,
                "{path}"
            );
        }
        assert_eq!(
            dirs.read("/volume/tmp/missing").unwrap_err().kind,
            ErrorKind::BadPath
        );
    }

    #[test]
    fn a_symlink_out_of_the_volume_is_a_bad_path() {
        let (host, dirs) = dirs();
        dirs.tmp.as_ref().unwrap().open().unwrap();
        let outside = host.path().join("secret");
        std::fs::write(&outside, "s").unwrap();
        std::os::unix::fs::symlink(&outside, host.path().join("tmp/link")).unwrap();
        let error = dirs.read("/volume/tmp/link").unwrap_err();
        assert_eq!(error.kind, ErrorKind::BadPath);
        assert!(dirs.create("/volume/tmp/link").is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "s");
    }
}
