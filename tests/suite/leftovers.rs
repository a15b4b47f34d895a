//! What a process killed with SIGKILL leaves: all of its temporary work is in the store's
//! staging folder, never beside the store's own files or in the system's temporary folder,
//! and the next `hako upload` or `hako serve` on the store sweeps it.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::serve_support::{self, Server};
use crate::support;

/// Every entry of the store outside `staging/` that is not the store's own: a name starting
/// with `.` (where temporary files were written before), or a version folder without its
/// upload record (a version half written).
fn strays(store: &Path) -> Vec<String> {
    fn walk(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                found.push(path.display().to_string());
            }
            let in_versions = dir.file_name().is_some_and(|name| name == "versions");
            if in_versions && !path.join("upload.json").is_file() {
                found.push(path.display().to_string());
            }
            if path.is_dir() && !in_versions {
                walk(&path, found);
            }
        }
    }
    let mut found = Vec::new();
    for folder in ["artifacts", "packages"] {
        walk(&store.join(folder), &mut found);
    }
    found
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A package archive of some weight (an 8 MiB asset of incompressible bytes), so that a kill
/// can land while it is being extracted, checked or stored.
fn weighty_archive(dir: &Path) -> std::path::PathBuf {
    let package = support::fixture_package("weighty", None);
    let assets = package.path().join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..8 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(assets.join("noise.bin"), noise).unwrap();
    let archive = dir.join("weighty.tar.gz");
    std::fs::write(&archive, support::archive_of(package.path())).unwrap();
    archive
}

#[test]
fn a_killed_upload_leaves_nothing_outside_staging_and_the_next_one_sweeps_it() {
    // Before, 31 of 40 killed archive uploads left an extraction folder in $TMPDIR, and
    // `.writing-*` files stayed in `artifacts/` and the package folders, never removed.
    let work = tempfile::tempdir().unwrap();
    let archive = weighty_archive(work.path());
    let store = work.path().join("store");
    let tmp = work.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let upload = || {
        let mut command = support::hako_command();
        command
            .args(["upload", "--store"])
            .arg(&store)
            .arg(&archive)
            .env("TMPDIR", &tmp)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    };
    // How long a whole upload takes here; the kills are spread over it.
    let started = Instant::now();
    let whole = upload().status().unwrap();
    assert!(whole.success());
    let took = started.elapsed();
    std::fs::remove_dir_all(&store).unwrap();

    let kills = 16;
    for round in 0..kills {
        let mut child = upload().spawn().unwrap();
        std::thread::sleep(took * round / kills);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            entries(&tmp),
            Vec::<String>::new(),
            "round {round}: $TMPDIR"
        );
        assert_eq!(strays(&store), Vec::<String>::new(), "round {round}");
    }
    // A process that ends normally sweeps what the dead ones left, and then removes its own.
    assert!(upload().status().unwrap().success());
    assert_eq!(
        entries(&store.join("staging")),
        Vec::<String>::new(),
        "the staging folder after a whole upload"
    );
    assert_eq!(entries(&tmp), Vec::<String>::new());
}

#[test]
fn a_killed_server_leaves_its_upload_in_staging_and_the_next_server_sweeps_it() {
    // Before, a killed `hako serve` left each upload it was receiving (up to 384 MiB a kill),
    // and nothing removed it.
    let store = tempfile::tempdir().unwrap();
    let archive = support::archive_of(&support::greet_package_dir());
    let mut server = Server::start(store.path(), &[]);
    let _upload = serve_support::half_upload(&server, store.path(), &archive);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);
    let left = serve_support::staged(store.path());
    assert_eq!(left.len(), 1, "the dead server's upload is left: {left:?}");

    // The next server sweeps it as it starts: what remains is its own (empty) lease.
    let next = Server::start(store.path(), &[]);
    assert_eq!(serve_support::staged(store.path()), Vec::<String>::new());
    let staging = entries(&store.path().join("staging"));
    assert_eq!(
        staging.len(),
        2,
        "one lease, a lock and a folder: {staging:?}"
    );
    assert!(
        !staging
            .iter()
            .any(|name| left[0].starts_with(name.as_str())),
        "the dead lease is gone: {staging:?}"
    );
    let reply = next.request("POST", "/v1/packages", &[], &archive);
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(serve_support::staged(store.path()), Vec::<String>::new());
    // A server that stops normally removes its lease too.
    assert!(next.terminate().success());
    let start = Instant::now();
    while !entries(&store.path().join("staging")).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(5), "the lease stays");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_killed_servers_call_volumes_are_in_staging_and_swept_too() {
    // A call's `/volume/tmp` (up to its write budget, 1 GiB by default) was made in $TMPDIR,
    // where a killed server left it.
    let store = serve_support::store();
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(store.path(), &[], &[("TMPDIR", support::arg(tmp.path()))]);
    let addr = server.addr;
    let call = std::thread::spawn(move || {
        let body = serde_json::json!({"tool": "write_file", "arguments": {
            "path": "/volume/tmp/big", "bytes": 1u64 << 30, "chunk": 4096}});
        // The answer never comes: the server is killed first.
        serve_support::request(
            addr,
            "POST",
            "/v1/packages/fixture/call",
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        )
    });
    server.wait_until("the call writes its volume", |_| {
        serve_support::staged(store.path())
            .iter()
            .any(|path| path.ends_with("/big"))
    });
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);
    let _ = call.join();
    assert_eq!(entries(tmp.path()), Vec::<String>::new(), "$TMPDIR");
    assert!(!serve_support::staged(store.path()).is_empty());
    let _next = Server::start(store.path(), &[]);
    assert_eq!(serve_support::staged(store.path()), Vec::<String>::new());
}
