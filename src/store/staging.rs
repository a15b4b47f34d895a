//! The store's staging folder, where all of a process's temporary work on the store lives: an
//! upload's body being received, an archive being extracted, a version and an artifact being
//! written. Each is moved into place with one rename (the folder is inside the store, so on
//! the same file system) or removed.
//!
//! ```text
//! <store>/staging/<id>.lock    locked (flock) by the process that owns <id>/, while it lives
//! <store>/staging/<id>/        that process's work
//! ```
//!
//! A process takes its lease the first time it needs the folder, and sweeps just before: a lock
//! file it can lock belongs to a process that is gone, since the kernel releases a lock with
//! the last descriptor of its holder, however the holder ended (`kill -9` included). The dead
//! process's folder goes, then its lock file. A process that ends normally removes its own.
//!
//! The sweep also removes what hako versions without leases left behind, once it is an hour
//! old (no write of hako's takes that long): loose entries of the staging folder, and
//! `.writing-*` and `.staging-*` entries in `artifacts/` and the package folders.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use rustix::fs::{flock, FlockOperation};

/// Entries of earlier layouts younger than this are left alone: a process of an older hako may
/// still be writing them.
const FOREIGN_AGE: Duration = Duration::from_secs(3600);

/// The staging folder of one store, and this process's lease in it (taken on first use).
#[derive(Debug)]
pub struct Staging {
    /// `<store>/staging`.
    root: PathBuf,
    /// The store's root, whose package and artifact folders the sweep also cleans.
    store: PathBuf,
    lease: Mutex<Option<Lease>>,
}

/// This process's folder in the staging folder, and the lock that says it is alive.
#[derive(Debug)]
struct Lease {
    dir: PathBuf,
    lock_path: PathBuf,
    _lock: File,
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The folder first: a lock file without its folder is swept like any other.
        let _ = fs::remove_dir_all(&self.dir);
        let _ = fs::remove_file(&self.lock_path);
    }
}

impl Staging {
    pub(crate) fn new(store: &Path) -> Self {
        Self {
            root: store.join("staging"),
            store: store.to_path_buf(),
            lease: Mutex::new(None),
        }
    }

    /// This process's folder for temporary work, made (after a sweep) on first use.
    pub fn dir(&self) -> io::Result<PathBuf> {
        let mut lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lease) = lease.as_ref() {
            return Ok(lease.dir.clone());
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)?;
        self.sweep();
        let taken = take(&self.root)?;
        let dir = taken.dir.clone();
        *lease = Some(taken);
        Ok(dir)
    }

    /// Removes what processes that are gone left: see the module's documentation. Failures
    /// are left for the next sweep; a sweep never fails the work that started it.
    fn sweep(&self) {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(id) = name.strip_suffix(".lock") {
                release_if_dead(&path, &self.root.join(id));
            } else if !self.root.join(format!("{name}.lock")).exists() {
                remove_if_old(&path);
            }
        }
        let mut folders = vec![self.store.join("artifacts")];
        if let Ok(packages) = fs::read_dir(self.store.join("packages")) {
            for package in packages.flatten() {
                folders.push(package.path());
            }
        }
        for folder in folders {
            let Ok(entries) = fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(".writing-") || name.starts_with(".staging-") {
                    remove_if_old(&entry.path());
                }
            }
        }
    }
}

/// Makes a new lease in `root`: a lock file, locked, then its folder.
fn take(root: &Path) -> io::Result<Lease> {
    loop {
        let (lock, lock_path) = tempfile::Builder::new()
            .prefix(&format!("{}-", std::process::id()))
            .suffix(".lock")
            .tempfile_in(root)?
            .keep()
            .map_err(|err| err.error)?;
        // Between making the file and locking it, a sweep may have locked and removed it:
        // then the lock fails, or it holds a file that is no longer there. Either way the
        // next name is tried.
        if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err()
            || !names(&lock, &lock_path)
        {
            continue;
        }
        let dir = lock_path.with_extension("");
        fs::DirBuilder::new().mode(0o700).create(&dir)?;
        return Ok(Lease {
            dir,
            lock_path,
            _lock: lock,
        });
    }
}

/// Removes `dir` and the lock file at `lock_path` if no living process holds the lock.
fn release_if_dead(lock_path: &Path, dir: &Path) {
    let Ok(lock) = File::open(lock_path) else {
        return;
    };
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() || !names(&lock, lock_path) {
        return;
    }
    // Held until both are gone, so that no process takes this name meanwhile.
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(_) => return,
    }
    let _ = fs::remove_file(lock_path);
}

/// Whether `path` still names the open file `file`.
fn names(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

/// Removes the file or folder at `path` if it was last changed over [`FOREIGN_AGE`] ago.
fn remove_if_old(path: &Path) {
    let Ok(metadata) = fs::symlink_metadata(path) else {
        return;
    };
    let age = metadata
        .modified()
        .ok()
        .and_then(|modified| SystemTime::now().duration_since(modified).ok());
    if age.is_none_or(|age| age < FOREIGN_AGE) {
        return;
    }
    let _ = if metadata.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn age(path: &Path, by: Duration) {
        let file = File::open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }

    #[test]
    fn a_lease_is_a_locked_file_and_a_folder_and_goes_with_its_owner() {
        let store = tempfile::tempdir().unwrap();
        let staging = Staging::new(store.path());
        let dir = staging.dir().unwrap();
        assert_eq!(staging.dir().unwrap(), dir, "one lease a process");
        assert!(dir.is_dir());
        let lock = dir.with_extension("lock");
        let other = File::open(&lock).unwrap();
        assert!(
            flock(&other, FlockOperation::NonBlockingLockExclusive).is_err(),
            "the lease's lock is held"
        );
        fs::write(dir.join("work"), b"x").unwrap();
        drop(staging);
        assert_eq!(entries(&store.path().join("staging")), Vec::<String>::new());
    }

    #[test]
    fn a_sweep_removes_a_dead_lease_and_keeps_a_living_one() {
        let store = tempfile::tempdir().unwrap();
        let root = store.path().join("staging");
        fs::create_dir_all(&root).unwrap();
        // A dead process's lease: its lock file is there, and nobody holds it.
        fs::write(root.join("1-dead.lock"), b"").unwrap();
        fs::create_dir_all(root.join("1-dead/extracted/a")).unwrap();
        fs::write(root.join("1-dead/upload.tar.gz"), b"x").unwrap();
        // A living one: another store value of the same folder holds its lease.
        let living = Staging::new(store.path());
        let living_dir = living.dir().unwrap();

        let sweeping = Staging::new(store.path());
        let own = sweeping.dir().unwrap();
        let mut expected = vec![
            file_name(&living_dir),
            format!("{}.lock", file_name(&living_dir)),
            file_name(&own),
            format!("{}.lock", file_name(&own)),
        ];
        expected.sort();
        assert_eq!(entries(&root), expected);
    }

    fn file_name(path: &Path) -> String {
        path.file_name().unwrap().to_string_lossy().into_owned()
    }

    #[test]
    fn the_sweep_removes_old_leftovers_of_earlier_layouts_and_keeps_new_ones() {
        let store = tempfile::tempdir().unwrap();
        let root = store.path().join("staging");
        let package = store.path().join("packages/greet");
        let artifacts = store.path().join("artifacts");
        for dir in [&root, &package, &artifacts] {
            fs::create_dir_all(dir).unwrap();
        }
        let old = [
            root.join("upload-old.tar.gz"),
            package.join(".writing-old"),
            artifacts.join(".writing-old"),
        ];
        let new = [
            root.join("upload-new.tar.gz"),
            package.join(".writing-new"),
            artifacts.join(".writing-new"),
        ];
        for path in old.iter().chain(&new) {
            fs::write(path, b"x").unwrap();
        }
        fs::create_dir_all(package.join(".staging-old/assets")).unwrap();
        for path in &old {
            age(path, Duration::from_secs(7200));
        }
        age(&package.join(".staging-old"), Duration::from_secs(7200));
        fs::write(package.join("current"), b"0.1.0").unwrap();
        age(&package.join("current"), Duration::from_secs(7200));

        let staging = Staging::new(store.path());
        staging.dir().unwrap();
        for path in &old {
            assert!(!path.exists(), "{} is swept", path.display());
        }
        assert!(!package.join(".staging-old").exists());
        for path in &new {
            assert!(
                path.exists(),
                "{} is kept: it may be in use",
                path.display()
            );
        }
        assert!(
            package.join("current").exists(),
            "the store's own files stay"
        );
    }
}
