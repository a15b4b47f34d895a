//! The optional `assets/` folder of a package, mounted read-only as `/package` at run time.
//!
//! The check here makes sure the folder cannot hand the guest anything outside the package:
//! `assets` itself must be a real folder (not a symbolic link, not a file), and every symbolic
//! link beneath it must resolve to something inside the package root. A link that resolves to
//! nothing is refused too, since what it would point to could appear later. Links are never
//! followed while walking, so a link cycle cannot loop.
//!
//! This module does not mount anything; the sandbox does, and it confines paths itself too.

use std::fs;
use std::path::{Path, PathBuf};

use super::{LoadError, Problem, ASSETS_DIR};

/// Returns the assets folder if the package has an acceptable one, recording problems
/// otherwise.
pub(super) fn check(
    root: &Path,
    problems: &mut Vec<Problem>,
) -> Result<Option<PathBuf>, LoadError> {
    let assets = root.join(ASSETS_DIR);
    let metadata = match fs::symlink_metadata(&assets) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(LoadError::io(&assets, source)),
    };
    if metadata.file_type().is_symlink() {
        problems.push(Problem::new(
            "assets.symlink",
            "assets must be a folder, not a symbolic link",
        ));
        return Ok(None);
    }
    if !metadata.is_dir() {
        problems.push(Problem::new("assets.not_folder", "assets must be a folder"));
        return Ok(None);
    }

    let package_root = root
        .canonicalize()
        .map_err(|source| LoadError::io(root, source))?;
    let before = problems.len();
    let mut pending = vec![assets.clone()];
    while let Some(folder) = pending.pop() {
        let entries = fs::read_dir(&folder).map_err(|source| LoadError::io(&folder, source))?;
        for entry in entries {
            let entry = entry.map_err(|source| LoadError::io(&folder, source))?;
            let path = entry.path();
            let file_type = entry
                .file_type()
                .map_err(|source| LoadError::io(&path, source))?;
            if file_type.is_dir() {
                pending.push(path);
            } else if file_type.is_symlink() {
                check_link(&package_root, root, &path, problems);
            }
        }
    }
    Ok((problems.len() == before).then_some(assets))
}

fn check_link(package_root: &Path, root: &Path, link: &Path, problems: &mut Vec<Problem>) {
    let shown = link
        .strip_prefix(root)
        .unwrap_or(link)
        .display()
        .to_string();
    match link.canonicalize() {
        Ok(target) if target.starts_with(package_root) => {}
        Ok(_) => problems.push(Problem::new(
            "assets.symlink",
            format!("the symbolic link {shown} points outside the package"),
        )),
        Err(_) => problems.push(Problem::new(
            "assets.symlink",
            format!("the symbolic link {shown} points to nothing"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use tempfile::TempDir;

    fn run(root: &Path) -> (Option<PathBuf>, Vec<&'static str>) {
        let mut problems = Vec::new();
        let assets = check(root, &mut problems).unwrap();
        (assets, problems.into_iter().map(|p| p.rule).collect())
    }

    #[test]
    fn a_package_without_assets_has_none() {
        let temp = TempDir::new().unwrap();
        assert_eq!(run(temp.path()), (None, vec![]));
    }

    #[test]
    fn links_inside_the_package_are_allowed() {
        let temp = TempDir::new().unwrap();
        fs::create_dir_all(temp.path().join("assets/deep")).unwrap();
        fs::write(temp.path().join("assets/deep/a.txt"), "a").unwrap();
        fs::write(temp.path().join("README"), "r").unwrap();
        symlink("deep/a.txt", temp.path().join("assets/a")).unwrap();
        symlink("../../README", temp.path().join("assets/deep/readme")).unwrap();
        let (assets, rules) = run(temp.path());
        assert_eq!(rules, Vec::<&str>::new());
        assert_eq!(assets, Some(temp.path().join("assets")));
    }

    #[test]
    fn links_leaving_the_package_or_dangling_are_refused() {
        let outside = TempDir::new().unwrap();
        let temp = TempDir::new().unwrap();
        fs::create_dir_all(temp.path().join("assets/sub")).unwrap();
        symlink(outside.path(), temp.path().join("assets/escape")).unwrap();
        symlink("../../../x", temp.path().join("assets/sub/up")).unwrap();
        symlink("missing", temp.path().join("assets/dangling")).unwrap();
        let (assets, rules) = run(temp.path());
        assert_eq!(assets, None);
        assert_eq!(rules.len(), 3, "{rules:?}");
        assert!(rules.iter().all(|rule| *rule == "assets.symlink"));
    }

    #[test]
    fn assets_as_a_link_or_a_file_is_refused() {
        let temp = TempDir::new().unwrap();
        fs::create_dir(temp.path().join("real")).unwrap();
        symlink("real", temp.path().join("assets")).unwrap();
        assert_eq!(run(temp.path()), (None, vec!["assets.symlink"]));

        let temp = TempDir::new().unwrap();
        fs::write(temp.path().join("assets"), "").unwrap();
        assert_eq!(run(temp.path()), (None, vec!["assets.not_folder"]));
    }
}
