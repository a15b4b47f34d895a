//! A store on an S3-compatible bucket (`--store s3://BUCKET[/PREFIX]`), against a real
//! SeaweedFS started by the tests: uploads through the CLI, calls from an empty cache, the
//! bucket's layout and consistency under concurrent uploads, tampering, and bad credentials;
//! signed records and the native code nodes take from them; three `hako serve` nodes on one
//! bucket, and the same while the store is down and after it is back.

use std::path::Path;
use std::process::Output;

use bytes::Bytes;
use hako::store::bucket::Read;
use hako::store::remote::{Pointer, Record};

use std::process::Stdio;

use crate::serve_support::{self, Server};
use crate::support;
use crate::support::seaweed::{Seaweed, BUCKET};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn succeeded(output: &Output) -> String {
    assert!(
        output.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// `hako ARGS --store s3://hako/PREFIX --cache CACHE` against `seaweed`.
fn hako(seaweed: &Seaweed, prefix: &str, cache: &Path, args: &[&str]) -> Output {
    seaweed
        .hako()
        .args(args)
        .args(["--store", &format!("s3://{BUCKET}/{prefix}")])
        .args(["--cache", support::arg(cache)])
        .output()
        .expect("hako runs")
}

/// `hako upload PACKAGE --json` to the bucket: its summary.
fn upload_json(seaweed: &Seaweed, prefix: &str, cache: &Path, package: &Path) -> serde_json::Value {
    let out = succeeded(&hako(
        seaweed,
        prefix,
        cache,
        &["upload", support::arg(package), "--json"],
    ));
    serde_json::from_str(&out).unwrap()
}

/// The greet package as version `version`, in a folder of its own.
fn greet_version(version: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let source = support::greet_package_dir();
    std::fs::copy(source.join("module.wasm"), dir.path().join("module.wasm")).unwrap();
    let manifest = std::fs::read_to_string(source.join("subako-package.json")).unwrap();
    let mut manifest: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    manifest["version"] = version.into();
    std::fs::write(
        dir.path().join("subako-package.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    dir
}

const GREET_ARGS: &str = r#"{"name":"bucket"}"#;

/// greet called by a node whose cache starts empty: its cache folder, and what it printed.
fn greet_from_an_empty_cache(seaweed: &Seaweed, prefix: &str) -> (tempfile::TempDir, String) {
    let node = tempfile::tempdir().unwrap();
    let out = succeeded(&hako(
        seaweed,
        prefix,
        node.path(),
        &["call", "greet", "greet", GREET_ARGS],
    ));
    (node, out)
}

#[test]
fn a_package_uploaded_to_a_bucket_is_called_from_an_empty_cache() {
    let seaweed = Seaweed::start();
    let uploader = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let summary = upload_json(&seaweed, "one", uploader.path(), &greet);
    assert_eq!(summary["stored"], true, "{summary}");

    let (node, out) = greet_from_an_empty_cache(&seaweed, "one");
    assert!(out.contains("bucket"), "{out}");
    // The node's cache now holds the version, checked and compiled there.
    assert!(node.path().join("packages/greet/current").is_file());
    let tools = succeeded(&hako(&seaweed, "one", node.path(), &["tools", "greet"]));
    assert!(tools.contains("\"greet\""), "{tools}");

    // The same version again is unchanged, in the bucket too.
    let summary = upload_json(&seaweed, "one", uploader.path(), &greet);
    assert_eq!(summary["stored"], false, "{summary}");

    // Another prefix of the same bucket is another store.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = hako(&seaweed, "two", elsewhere.path(), &["tools", "greet"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no package named \"greet\""),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_store_restarted_while_another_process_holds_one_of_its_ports_comes_back_with_its_data() {
    let mut seaweed = Seaweed::start();
    let uploader = tempfile::tempdir().unwrap();
    let summary = upload_json(
        &seaweed,
        "one",
        uploader.path(),
        &support::greet_package_dir(),
    );
    assert_eq!(summary["stored"], true, "{summary}");
    seaweed.stop();
    // What an outgoing connection of the machine may do while it is down: take a port of its.
    let endpoint = seaweed.endpoint();
    let taken = seaweed
        .ports()
        .iter()
        .copied()
        .find(|&port| port != seaweed.s3_port())
        .unwrap();
    let _holder = std::net::TcpListener::bind(("127.0.0.1", taken)).unwrap();
    seaweed.restart();
    assert_eq!(
        seaweed.endpoint(),
        endpoint,
        "the clients' endpoint is kept"
    );
    assert!(!seaweed.ports().contains(&taken));
    let (_node, out) = greet_from_an_empty_cache(&seaweed, "one");
    assert!(out.contains("Hello"), "{out}");
}

#[test]
fn a_new_version_in_the_bucket_is_what_a_node_with_the_old_one_calls_next() {
    let seaweed = Seaweed::start();
    let (uploader, node) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // The last is the first again: the node's cache has it already, and offers it again.
    for (version, read) in [("1.0.0", "call"), ("1.1.0", "call"), ("1.0.0", "tools")] {
        let package = greet_version(version);
        succeeded(&hako(
            &seaweed,
            "versions",
            uploader.path(),
            &["upload", support::arg(package.path())],
        ));
        let args: &[&str] = match read {
            "call" => &["call", "greet", "greet", GREET_ARGS],
            _ => &["tools", "greet"],
        };
        succeeded(&hako(&seaweed, "versions", node.path(), args));
        let current = std::fs::read_to_string(node.path().join("packages/greet/current")).unwrap();
        assert_eq!(current, version);
    }
}

#[test]
fn concurrent_uploads_leave_current_at_one_complete_version() {
    let seaweed = Seaweed::start();
    let versions: Vec<String> = (0..8).map(|i| format!("2.0.{i}")).collect();
    let packages: Vec<_> = versions.iter().map(|v| greet_version(v)).collect();
    let caches: Vec<_> = versions
        .iter()
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let children: Vec<_> = packages
        .iter()
        .zip(&caches)
        .map(|(package, cache)| {
            seaweed
                .hako()
                .args(["upload", support::arg(package.path())])
                .args(["--store", &format!("s3://{BUCKET}/race")])
                .args(["--cache", support::arg(cache.path())])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        succeeded(&child.wait_with_output().unwrap());
    }
    let (pointer, records) = consistent(&seaweed, "race");
    let pointer = pointer.expect("a pointer");
    assert!(versions.contains(&pointer.version), "{pointer:?}");
    assert_eq!(records, 8);
    // And a node serves it.
    let node = tempfile::tempdir().unwrap();
    succeeded(&hako(
        &seaweed,
        "race",
        node.path(),
        &["call", "greet", "greet", GREET_ARGS],
    ));
    let current = std::fs::read_to_string(node.path().join("packages/greet/current")).unwrap();
    assert_eq!(current, pointer.version);
}

/// Checks that the bucket under `prefix` is consistent: every record names only blobs that
/// are there, and the pointer (if any) names a record by its digest. Returns the pointer and
/// how many records there are.
fn consistent(seaweed: &Seaweed, prefix: &str) -> (Option<Pointer>, usize) {
    let (runtime, bucket) = seaweed.bucket(prefix);
    let pointer = match runtime
        .block_on(bucket.read("packages/greet/current", None))
        .unwrap()
    {
        Read::Found { bytes, .. } => Some(serde_json::from_slice::<Pointer>(&bytes).unwrap()),
        _ => None,
    };
    let records = runtime.block_on(bucket.list("versions/greet")).unwrap();
    let mut pointed = false;
    for key in &records {
        let Read::Found { bytes, .. } = runtime
            .block_on(bucket.read(&format!("versions/greet/{key}"), None))
            .unwrap()
        else {
            panic!("{key} listed but not read");
        };
        pointed |= pointer
            .as_ref()
            .is_some_and(|pointer| hako::store::sha256_hex(&bytes) == pointer.record_sha256);
        let record: Record = serde_json::from_slice(&bytes).unwrap();
        for (path, digest) in &record.files {
            let blob = runtime
                .block_on(bucket.read(&format!("blobs/sha256/{digest}"), None))
                .unwrap();
            assert!(
                matches!(blob, Read::Found { .. }),
                "{key}: {path} is missing"
            );
        }
    }
    assert!(
        pointed || pointer.is_none(),
        "the pointer names no record: {pointer:?}"
    );
    (pointer, records.len())
}

#[test]
fn an_upload_killed_at_any_point_leaves_the_bucket_consistent() {
    let seaweed = Seaweed::start();
    let cache = tempfile::tempdir().unwrap();
    let upload = |version: &str| {
        let package = greet_version(version);
        let started = std::time::Instant::now();
        let child = seaweed
            .hako()
            .args(["upload", support::arg(package.path())])
            .args(["--store", &format!("s3://{BUCKET}/killed")])
            .args(["--cache", support::arg(cache.path())])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        (package, started, child)
    };
    // How long a whole upload takes here, and so where its writes to the bucket fall.
    // (The second, whose cache is as warm as the trials' will be.)
    let mut whole = std::time::Duration::ZERO;
    for version in ["3.0.0", "3.0.1"] {
        let (_package, started, child) = upload(version);
        assert!(child.wait_with_output().unwrap().status.success());
        whole = started.elapsed();
    }
    const TRIALS: u32 = 20;
    let mut killed_after = Vec::new();
    let mut seen_records = consistent(&seaweed, "killed").1;
    for trial in 0..TRIALS {
        // Half spread over the whole upload, half around its end, where its writes to the
        // bucket are (the rest is the local check, compile and discovery), in an order that
        // is not monotonic.
        let at = (trial * 7) % TRIALS;
        let fraction = if at.is_multiple_of(2) {
            f64::from(at) / f64::from(TRIALS)
        } else {
            0.88 + 0.2 * f64::from(at) / f64::from(TRIALS)
        };
        let (_package, started, mut child) = upload(&format!("3.1.{trial}"));
        std::thread::sleep(whole.mul_f64(fraction));
        let finished = child.try_wait().unwrap().is_some();
        child.kill().unwrap_or(());
        child.wait().unwrap();
        let (pointer, records) = consistent(&seaweed, "killed");
        let pointer = pointer.expect("the first upload's pointer at least");
        assert!(
            pointer.version == "3.0.1" || pointer.version.starts_with("3.1."),
            "{pointer:?}"
        );
        let stage = if finished {
            "after it ended"
        } else if pointer.version == format!("3.1.{trial}") {
            "after the swap"
        } else if records > seen_records {
            "after the record, before the swap"
        } else {
            "before the record"
        };
        seen_records = records;
        killed_after.push((started.elapsed(), stage));
    }
    eprintln!("an upload takes {whole:?}; the kills: {killed_after:?}");
    // The next upload succeeds, and a node serves it.
    let (_package, _, child) = upload("3.2.0");
    assert!(
        child.wait_with_output().unwrap().status.success(),
        "{killed_after:?}"
    );
    let (pointer, _) = consistent(&seaweed, "killed");
    assert_eq!(pointer.unwrap().version, "3.2.0");
    let node = tempfile::tempdir().unwrap();
    succeeded(&hako(
        &seaweed,
        "killed",
        node.path(),
        &["call", "greet", "greet", GREET_ARGS],
    ));
}

/// Replaces an object of the bucket whatever it holds (as a writer of the bucket could).
fn overwrite(seaweed: &Seaweed, prefix: &str, key: &str, edit: impl FnOnce(&mut Vec<u8>)) {
    let (runtime, bucket) = seaweed.bucket(prefix);
    let Read::Found { bytes, etag } = runtime.block_on(bucket.read(key, None)).unwrap() else {
        panic!("{key} is not in the bucket");
    };
    let mut bytes = bytes.to_vec();
    edit(&mut bytes);
    let written = runtime
        .block_on(bucket.update(key, Bytes::from(bytes), etag.unwrap()))
        .unwrap();
    assert_eq!(written, hako::store::bucket::Written::Done);
}

#[test]
fn a_tampered_blob_or_record_is_refused_and_never_run() {
    let seaweed = Seaweed::start();
    let uploader = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    succeeded(&hako(
        &seaweed,
        "tamper",
        uploader.path(),
        &["upload", support::arg(&greet)],
    ));
    let module = hako::store::sha256_hex(&std::fs::read(greet.join("module.wasm")).unwrap());

    // A flipped byte in the module's blob.
    overwrite(
        &seaweed,
        "tamper",
        &format!("blobs/sha256/{module}"),
        |bytes| {
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
        },
    );
    let node = tempfile::tempdir().unwrap();
    let out = hako(
        &seaweed,
        "tamper",
        node.path(),
        &["call", "greet", "greet", GREET_ARGS],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("blobs/sha256/{module}")),
        "{stderr}"
    );
    assert!(stderr.contains("module.wasm has SHA-256"), "{stderr}");
    assert!(!node.path().join("packages/greet/current").exists());

    // An edited record (a tool's description), which its pointer's digest no longer matches.
    let record = "versions/greet/0.1.0.json";
    let version = serde_json::from_str::<serde_json::Value>(
        &std::fs::read_to_string(greet.join("subako-package.json")).unwrap(),
    )
    .unwrap()["version"]
        .as_str()
        .unwrap()
        .to_string();
    let record = record.replace("0.1.0", &version);
    overwrite(&seaweed, "tamper", &record, |bytes| {
        let edited = String::from_utf8(bytes.clone()).unwrap().replacen(
            "\"description\"",
            "\"description\" ",
            1,
        );
        *bytes = edited.into_bytes();
    });
    let out = hako(&seaweed, "tamper", node.path(), &["tools", "greet"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the record's SHA-256 is"), "{stderr}");
}

#[test]
fn wrong_credentials_get_an_error_naming_the_store_and_the_status() {
    let seaweed = Seaweed::start();
    let cache = tempfile::tempdir().unwrap();
    let out = seaweed
        .hako()
        .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        .args(["tools", "greet", "--store", &format!("s3://{BUCKET}/creds")])
        .args(["--cache", support::arg(cache.path())])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("s3://{BUCKET}")), "{stderr}");
    assert!(stderr.contains("403"), "{stderr}");
    // An upload is refused before anything is written, by the conditional-write probe.
    let greet = support::greet_package_dir();
    let out = seaweed
        .hako()
        .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        .args([
            "upload",
            support::arg(&greet),
            "--store",
            &format!("s3://{BUCKET}/creds"),
        ])
        .args(["--cache", support::arg(cache.path())])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("403"), "{stderr}");
    assert!(
        !cache.path().join("packages").exists(),
        "nothing was uploaded"
    );
}

#[test]
fn a_bad_store_argument_is_a_usage_error_naming_the_rule() {
    let out = support::hako_command()
        .args(["tools", "greet", "--store", "s3://Bad_Bucket"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("a bucket name is 3 to 63"),
        "{}",
        text(&out.stderr)
    );
    // Commands that do not work on a bucket yet say so.
    let out = support::hako_command()
        .args(["run", "--store", "s3://hako", "greet"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not on a bucket yet"),
        "{}",
        text(&out.stderr)
    );
}

/// `hako call NAME greet --json` on a node: the call's JSON, and its stderr.
fn call_json(
    seaweed: &Seaweed,
    prefix: &str,
    node: &Path,
    flags: &[&str],
) -> (serde_json::Value, String) {
    let mut args = vec!["call", "greet", "greet", GREET_ARGS, "--json"];
    args.extend_from_slice(flags);
    let out = hako(seaweed, prefix, node, &args);
    let stdout = succeeded(&out);
    (serde_json::from_str(&stdout).unwrap(), text(&out.stderr))
}

/// `hako keygen --out DIR/NAME`: the private key and the public key file.
fn keygen(dir: &Path, name: &str) -> (String, String) {
    let prefix = dir.join(name);
    let out = support::hako_command()
        .args(["keygen", "--out", support::arg(&prefix)])
        .output()
        .unwrap();
    succeeded(&out);
    let private = prefix.display().to_string();
    (private.clone(), format!("{private}.pub"))
}

/// Uploads greet to the bucket's `prefix`, signed with the key at `private`, from a cache of
/// its own; returns the name of the artifact it compiled.
fn upload_signed(seaweed: &Seaweed, prefix: &str, private: &str) -> String {
    let uploader = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let summary: serde_json::Value = serde_json::from_str(&succeeded(&hako(
        seaweed,
        prefix,
        uploader.path(),
        &[
            "upload",
            support::arg(&greet),
            "--json",
            "--signing-key",
            private,
        ],
    )))
    .unwrap();
    summary["artifacts"][0]["file"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_node_runs_native_code_from_the_bucket_only_when_a_key_it_trusts_signed_the_record() {
    let seaweed = Seaweed::start();
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = keygen(keys.path(), "uploader");
    let (_, other) = keygen(keys.path(), "other");
    let artifact = upload_signed(&seaweed, "signed", &private);

    // The record lists the artifact by digest, and its signature lies beside it.
    let (runtime, bucket) = seaweed.bucket("signed");
    let pointer = read_json::<Pointer>(&runtime, &bucket, "packages/greet/current");
    let record_key = format!("versions/greet/{}.json", pointer.version);
    let record = read_json::<Record>(&runtime, &bucket, &record_key);
    assert!(
        record.artifacts.contains_key(&artifact),
        "{:?}",
        record.artifacts
    );
    let signature = runtime
        .block_on(bucket.read(&format!("{record_key}.sig"), None))
        .unwrap();
    assert!(matches!(signature, Read::Found { .. }));

    // Trusted: the artifact is fetched, checked and loaded; nothing is compiled.
    let node = tempfile::tempdir().unwrap();
    let (call, _) = call_json(&seaweed, "signed", node.path(), &["--trust-key", &public]);
    assert_eq!(call["stats"]["compiled"], false, "{call}");
    assert!(node.path().join("artifacts").join(&artifact).is_file());

    // No trusted key, or only another's: no native code from the bucket; compiled here.
    for (flags, why) in [
        (vec![], "no key is trusted"),
        (vec!["--trust-key", other.as_str()], "which is not trusted"),
    ] {
        let node = tempfile::tempdir().unwrap();
        let (call, stderr) = call_json(&seaweed, "signed", node.path(), &flags);
        assert_eq!(call["stats"]["compiled"], true, "{call}");
        assert!(
            stderr.contains("compiling greet here") && stderr.contains(why),
            "{stderr}"
        );
    }

    // --require-signed refuses what no trusted key signed.
    let node = tempfile::tempdir().unwrap();
    let out = hako(
        &seaweed,
        "signed",
        node.path(),
        &[
            "call",
            "greet",
            "greet",
            GREET_ARGS,
            "--trust-key",
            &other,
            "--require-signed",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refused by --require-signed"), "{stderr}");
    assert!(!node.path().join("packages/greet/current").exists());

    // A flipped byte in the artifact's blob: refused, even under a trusted signature.
    overwrite(
        &seaweed,
        "signed",
        &format!("blobs/sha256/{}", record.artifacts[&artifact]),
        |bytes| bytes[100] ^= 1,
    );
    let node = tempfile::tempdir().unwrap();
    let out = hako(
        &seaweed,
        "signed",
        node.path(),
        &["call", "greet", "greet", GREET_ARGS, "--trust-key", &public],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("the blob of {artifact} has SHA-256")),
        "{stderr}"
    );
    assert!(!node.path().join("artifacts").join(&artifact).exists());
}

#[test]
fn an_artifact_fetched_under_a_key_no_longer_trusted_is_compiled_here_instead() {
    let seaweed = Seaweed::start();
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = keygen(keys.path(), "uploader");
    let (_, other) = keygen(keys.path(), "other");
    let artifact = upload_signed(&seaweed, "revoked", &private);
    let (runtime, bucket) = seaweed.bucket("revoked");
    let pointer = read_json::<Pointer>(&runtime, &bucket, "packages/greet/current");

    // Trusted: fetched and loaded, with where it came from beside it.
    let node = tempfile::tempdir().unwrap();
    let artifacts = node.path().join("artifacts");
    let (call, _) = call_json(&seaweed, "revoked", node.path(), &["--trust-key", &public]);
    assert_eq!(call["stats"]["compiled"], false, "{call}");
    let origin: serde_json::Value = serde_json::from_slice(
        &std::fs::read(artifacts.join(format!("{artifact}.origin"))).unwrap(),
    )
    .unwrap();
    assert_eq!(
        origin["public_key"],
        std::fs::read_to_string(&public).unwrap().trim()
    );
    assert_eq!(origin["record_sha256"], pointer.record_sha256.as_str());

    // The key taken back (no --trust-key, or another's) on the same cache: the fetched code is
    // not loaded; the module is compiled here, and stderr says why.
    let (call, stderr) = call_json(&seaweed, "revoked", node.path(), &["--trust-key", &other]);
    assert_eq!(call["stats"]["compiled"], true, "{call}");
    assert!(
        stderr.contains(&format!(
            "the cached artifact {artifact} came from the object store"
        )) && stderr.contains("not trusted now")
            && stderr.contains("compiled the module now"),
        "{stderr}"
    );
    // What runs from now on is this node's own compile, which is no fetched artifact.
    assert!(!artifacts.join(format!("{artifact}.origin")).exists());
    let (call, stderr) = call_json(&seaweed, "revoked", node.path(), &[]);
    assert_eq!(call["stats"]["compiled"], false, "{call}");
    assert!(!stderr.contains("not trusted now"), "{stderr}");

    // A local command on the cache folder, with no trust at all, refuses a fetched artifact
    // too, and so does an origin that cannot be read.
    let node = tempfile::tempdir().unwrap();
    call_json(&seaweed, "revoked", node.path(), &["--trust-key", &public]);
    let folder = node.path().display().to_string();
    let out = support::hako_command()
        .args([
            "call", "greet", "greet", GREET_ARGS, "--json", "--store", &folder,
        ])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    let call: serde_json::Value = serde_json::from_str(&succeeded(&out)).unwrap();
    assert_eq!(call["stats"]["compiled"], true, "{call}");
    assert!(stderr.contains("not trusted now"), "{stderr}");
    let node = tempfile::tempdir().unwrap();
    call_json(&seaweed, "revoked", node.path(), &["--trust-key", &public]);
    std::fs::write(
        node.path()
            .join("artifacts")
            .join(format!("{artifact}.origin")),
        b"{not json",
    )
    .unwrap();
    let (call, stderr) = call_json(&seaweed, "revoked", node.path(), &["--trust-key", &public]);
    assert_eq!(call["stats"]["compiled"], true, "{call}");
    assert!(stderr.contains("cannot be read"), "{stderr}");

    // A cache an earlier release left: a fetched artifact without its origin, and no mark of
    // the cache's format. Its artifacts are dropped once, so the fetched code is not loaded
    // without a trusted key; the cache is marked, and keeps the node's own compile from then.
    let node = tempfile::tempdir().unwrap();
    call_json(&seaweed, "revoked", node.path(), &["--trust-key", &public]);
    let artifacts = node.path().join("artifacts");
    std::fs::remove_file(artifacts.join(format!("{artifact}.origin"))).unwrap();
    std::fs::remove_file(node.path().join("bucket-cache")).unwrap();
    let (call, _) = call_json(&seaweed, "revoked", node.path(), &[]);
    assert_eq!(call["stats"]["compiled"], true, "{call}");
    assert!(node.path().join("bucket-cache").exists());
    let (call, _) = call_json(&seaweed, "revoked", node.path(), &[]);
    assert_eq!(call["stats"]["compiled"], false, "{call}");
}

/// Replaces the package's pointer in the bucket with `bytes`, as a bucket writer could.
fn put_pointer(seaweed: &Seaweed, prefix: &str, bytes: &[u8]) {
    overwrite(seaweed, prefix, "packages/greet/current", |old| {
        *old = bytes.to_vec()
    });
}

/// What the node's cache offers of greet.
fn cached_version(cache: &Path) -> String {
    std::fs::read_to_string(cache.join("packages/greet/current")).unwrap()
}

#[test]
fn a_pointer_older_than_the_one_held_is_refused_and_under_require_signed_so_is_an_unsigned_one() {
    let seaweed = Seaweed::start();
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = keygen(keys.path(), "uploader");
    let uploader = tempfile::tempdir().unwrap();
    let try_upload = |version: &str| {
        let package = greet_version(version);
        hako(
            &seaweed,
            "rollback",
            uploader.path(),
            &[
                "upload",
                support::arg(package.path()),
                "--signing-key",
                &private,
            ],
        )
    };
    let upload = |version: &str| {
        succeeded(&try_upload(version));
    };
    let (runtime, bucket) = seaweed.bucket("rollback");
    let pointer_bytes = || match runtime
        .block_on(bucket.read("packages/greet/current", None))
        .unwrap()
    {
        Read::Found { bytes, .. } => bytes.to_vec(),
        _ => panic!("no pointer"),
    };
    upload("1.0.0");
    let old_bytes = pointer_bytes();
    let old: Pointer = serde_json::from_slice(&old_bytes).unwrap();
    assert_eq!((old.version.as_str(), old.sequence), ("1.0.0", 1));
    assert!(old.signature.is_some(), "{old:?}");
    upload("1.1.0");
    let new_bytes = pointer_bytes();
    let new: Pointer = serde_json::from_slice(&new_bytes).unwrap();
    assert_eq!((new.version.as_str(), new.sequence), ("1.1.0", 2));

    let strict = ["--trust-key", public.as_str(), "--require-signed"];
    let node = tempfile::tempdir().unwrap();
    let (call, _) = call_json(&seaweed, "rollback", node.path(), &strict);
    assert_eq!(call["outcome"], "ok", "{call}");
    assert_eq!(cached_version(node.path()), "1.1.0");
    let refused = |flags: &[&str], why: &str| {
        let mut args = vec!["call", "greet", "greet", GREET_ARGS];
        args.extend_from_slice(flags);
        let out = hako(&seaweed, "rollback", node.path(), &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
        assert_eq!(cached_version(node.path()), "1.1.0");
    };

    // The old signed pointer put back: refused, with or without --require-signed.
    put_pointer(&seaweed, "rollback", &old_bytes);
    let rollback = "offers 1.0.0 at sequence 1, not newer than 1.1.0 at sequence 2, which this \
                    node holds: refused as a rollback";
    refused(&strict, rollback);
    refused(&[], rollback);
    // A pointer no trusted key signed, or a signed one renumbered, moves nothing under
    // --require-signed, however new it says it is.
    let mut forged = old.clone();
    forged.sequence = 7;
    forged.signature = None;
    put_pointer(&seaweed, "rollback", &serde_json::to_vec(&forged).unwrap());
    refused(&strict, "the pointer is not signed");
    forged.signature = old.signature.clone();
    put_pointer(&seaweed, "rollback", &serde_json::to_vec(&forged).unwrap());
    refused(&strict, "the pointer's signature: the signature by");

    // An upload after the old pointer was put back numbers its pointer past the one its own
    // cache held, so nodes that saw that one take it.
    put_pointer(&seaweed, "rollback", &old_bytes);
    upload("1.2.0");
    let next: Pointer = serde_json::from_slice(&pointer_bytes()).unwrap();
    assert_eq!((next.version.as_str(), next.sequence), ("1.2.0", 3));
    call_json(&seaweed, "rollback", node.path(), &strict);
    assert_eq!(cached_version(node.path()), "1.2.0");

    // A node following the bucket: the rollback is logged and counted once, and the node
    // keeps serving what it holds.
    put_pointer(&seaweed, "rollback", &new_bytes);
    let cache = tempfile::tempdir().unwrap();
    let log_path = cache.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let env = seaweed.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start_logging(
        Path::new(&format!("s3://{BUCKET}/rollback")),
        &[
            "--cache",
            support::arg(&cache.path().join("cache")),
            "--refresh-ms",
            "100",
            "--trust-key",
            &public,
            "--require-signed",
        ],
        &env,
        log,
    );
    assert_eq!(greet_call(&server).status, 200);
    assert_eq!(served_version(&server).as_deref(), Some("1.1.0"));
    put_pointer(&seaweed, "rollback", &old_bytes);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let metrics = server.get("/metrics").text();
        if metrics.contains("hako_pointer_rollbacks_total 1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{metrics}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(server
        .get("/metrics")
        .text()
        .contains("hako_pointer_rollbacks_total 1"));
    assert_eq!(served_version(&server).as_deref(), Some("1.1.0"));
    assert_eq!(greet_call(&server).status, 200);
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(
        logged.matches("refused as a rollback").count(),
        1,
        "{logged}"
    );

    // A pointer that a writer of the bucket without the key put there, at the sequence's
    // end: uploads number past what their own cache held for this store, not past it, and a
    // --require-signed node serves each of them in turn.
    let mut frozen = old.clone();
    frozen.sequence = u64::MAX - 1;
    frozen.signature = None;
    put_pointer(&seaweed, "rollback", &serde_json::to_vec(&frozen).unwrap());
    for (version, sequence) in [("1.3.0", 4), ("1.4.0", 5)] {
        upload(version);
        let next: Pointer = serde_json::from_slice(&pointer_bytes()).unwrap();
        assert_eq!((next.version.as_str(), next.sequence), (version, sequence));
        let (call, _) = call_json(&seaweed, "rollback", node.path(), &strict);
        assert_eq!(call["outcome"], "ok", "{call}");
        assert_eq!(cached_version(node.path()), version);
    }

    // A signed pointer at the sequence's end (only a holder of a key can put one there): the
    // next upload is refused with the reason, never wrapped round to an older number, and the
    // uploader's cache offers what it offered before.
    let signer = hako::store::signing::SigningKey::read(Path::new(&private)).unwrap();
    let mut last: Pointer = serde_json::from_slice(&pointer_bytes()).unwrap();
    last.sequence = u64::MAX;
    last.signature = Some(signer.sign(&last.signed_bytes("greet")));
    put_pointer(&seaweed, "rollback", &serde_json::to_vec(&last).unwrap());
    let out = try_upload("1.5.0");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("past which none can follow"), "{stderr}");
    assert_eq!(cached_version(uploader.path()), "1.4.0");

    // What the uploader's cache holds of this store says nothing of another: the same cache
    // uploads greet to a fresh prefix from sequence 1.
    let package = greet_version("1.5.0");
    succeeded(&hako(
        &seaweed,
        "rollback-other",
        uploader.path(),
        &[
            "upload",
            support::arg(package.path()),
            "--signing-key",
            &private,
        ],
    ));
    let (runtime, other) = seaweed.bucket("rollback-other");
    let Read::Found { bytes, .. } = runtime
        .block_on(other.read("packages/greet/current", None))
        .unwrap()
    else {
        panic!("no pointer in the other prefix");
    };
    let first: Pointer = serde_json::from_slice(&bytes).unwrap();
    assert_eq!((first.version.as_str(), first.sequence), ("1.5.0", 1));
}

fn read_json<T: serde::de::DeserializeOwned>(
    runtime: &tokio::runtime::Runtime,
    bucket: &hako::store::bucket::Bucket,
    key: &str,
) -> T {
    let Read::Found { bytes, .. } = runtime.block_on(bucket.read(key, None)).unwrap() else {
        panic!("{key} is not in the bucket");
    };
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_foreign_artifact_under_another_modules_name_is_refused_at_load_and_never_run() {
    // Even a trusted signer's record cannot make a node run code made from another module: the
    // artifact's header names its module, and a load checks it.
    let seaweed = Seaweed::start();
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = keygen(keys.path(), "uploader");
    let uploader = tempfile::tempdir().unwrap();
    let greet = support::greet_package_dir();
    let other = support::fixture_package("other", None);
    for package in [greet.as_path(), other.path()] {
        succeeded(&hako(
            &seaweed,
            "foreign",
            uploader.path(),
            &["upload", support::arg(package), "--signing-key", &private],
        ));
    }
    let (runtime, bucket) = seaweed.bucket("foreign");
    let read = |name: &str| {
        let pointer = read_json::<Pointer>(&runtime, &bucket, &format!("packages/{name}/current"));
        let key = format!("versions/{name}/{}.json", pointer.version);
        (read_json::<Record>(&runtime, &bucket, &key), key)
    };
    let (mut record, record_key) = read("greet");
    let (foreign, _) = read("other");
    let foreign_digest = foreign.artifacts.values().next().unwrap().clone();
    for digest in record.artifacts.values_mut() {
        *digest = foreign_digest.clone();
    }
    // The signer signs the edited record, and the pointer names it.
    let bytes = serde_json::to_vec(&record).unwrap();
    let key = hako::store::signing::SigningKey::read(Path::new(&private)).unwrap();
    let signature = serde_json::to_vec(&key.sign(&bytes)).unwrap();
    overwrite(&seaweed, "foreign", &record_key, |old| *old = bytes.clone());
    overwrite(&seaweed, "foreign", &format!("{record_key}.sig"), |old| {
        *old = signature.clone()
    });
    overwrite(&seaweed, "foreign", "packages/greet/current", |old| {
        let mut pointer: Pointer = serde_json::from_slice(old).unwrap();
        pointer.record_sha256 = hako::store::sha256_hex(&bytes);
        *old = serde_json::to_vec(&pointer).unwrap();
    });

    let node = tempfile::tempdir().unwrap();
    let (call, stderr) = call_json(&seaweed, "foreign", node.path(), &["--trust-key", &public]);
    assert_eq!(call["stats"]["compiled"], true, "{call}");
    assert!(call.to_string().contains("bucket"), "{call}");
    assert!(
        stderr.contains("refusing artifact") && stderr.contains("module is"),
        "{stderr}"
    );
}

/// `hako serve` on the bucket under `prefix`, with its own cache folder, looking at the
/// bucket every 200 ms.
fn node(seaweed: &Seaweed, prefix: &str, cache: &Path) -> Server {
    let store = format!("s3://{BUCKET}/{prefix}");
    let env = seaweed.env();
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect();
    Server::start_logging(
        Path::new(&store),
        &["--cache", support::arg(cache), "--refresh-ms", "200"],
        &env,
        Stdio::null(),
    )
}

fn greet_call(node: &Server) -> serve_support::Reply {
    node.post_json(
        "/v1/packages/greet/call",
        &serde_json::json!({"tool": "greet", "arguments": {"name": "bucket"}}),
    )
}

fn served_version(node: &Server) -> Option<String> {
    let reply = node.get("/v1/packages/greet");
    (reply.status == 200).then(|| reply.json()["version"].as_str().unwrap().to_string())
}

fn upload_through(node: &Server, version: &str) -> serve_support::Reply {
    let package = greet_version(version);
    node.request(
        "POST",
        "/v1/packages",
        &[],
        &support::archive_of(package.path()),
    )
}

#[test]
fn three_nodes_on_one_bucket_serve_what_any_of_them_was_given() {
    let seaweed = Seaweed::start();
    let caches: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<Server> = caches
        .iter()
        .map(|c| node(&seaweed, "nodes", c.path()))
        .collect();
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);

    // Uploaded through A: served by A at once, and by B and C, which fetch it when asked.
    let reply = upload_through(a, "1.0.0");
    assert_eq!(reply.status, 201, "{}", reply.text());
    for node in &nodes {
        let reply = greet_call(node);
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.text().contains("bucket"), "{}", reply.text());
    }

    // A new version uploaded through C reaches A and B at their next look at the bucket.
    let started = std::time::Instant::now();
    let reply = upload_through(c, "1.1.0");
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(served_version(c).as_deref(), Some("1.1.0"));
    for node in [a, b] {
        node.wait_until("the new version is served", |node| {
            served_version(node).as_deref() == Some("1.1.0")
        });
    }
    eprintln!(
        "propagation of a new version (--refresh-ms 200): {:?}",
        started.elapsed()
    );
    assert_eq!(greet_call(a).status, 200);

    // The three agree on what the store offers.
    let lists: Vec<serde_json::Value> =
        nodes.iter().map(|n| n.get("/v1/packages").json()).collect();
    assert_eq!(lists[0], lists[1]);
    assert_eq!(lists[1], lists[2]);
    assert!(lists[0].to_string().contains("1.1.0"), "{}", lists[0]);

    // An unchanged pointer costs a conditional GET (at A's next refresh after it read the new
    // one: on a loaded machine the test may get here first); B fetched a version from the store.
    a.wait_until("an unchanged pointer is read conditionally", |a| {
        a.metric("hako_store_requests_total{operation=\"get\",outcome=\"not_modified\"}") > 0.0
    });
    assert!(b.metric("hako_cache_hits_total{layer=\"store\"}") >= 1.0);
    // B trusts no key: the artifacts compiled at upload are not used, and B compiled.
    assert!(b.metric("hako_signature_refusals_total{action=\"compiled_here\"}") >= 1.0);
    assert!(b.metric("hako_module_loads_total{source=\"compiled\"}") >= 1.0);
    assert_eq!(b.metric("hako_store_ready"), 1.0);
    assert_eq!(a.get("/readyz").status, 200);

    // Requests for a name nobody uploaded are 404s that do not each cost a request to the
    // bucket.
    let missing = "hako_store_requests_total{operation=\"get\",outcome=\"missing\"}";
    let before = a.metric(missing);
    for _ in 0..10 {
        assert_eq!(a.get("/v1/packages/nobody").status, 404);
    }
    assert!(
        a.metric(missing) - before < 10.0,
        "every miss went to the bucket"
    );
}

#[test]
fn nodes_keep_serving_while_the_store_is_down_and_catch_up_when_it_is_back() {
    let mut seaweed = Seaweed::start();
    let caches: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let nodes: Vec<Server> = caches
        .iter()
        .map(|c| node(&seaweed, "outage", c.path()))
        .collect();
    assert_eq!(upload_through(&nodes[0], "1.0.0").status, 201);
    for node in &nodes {
        assert_eq!(greet_call(node).status, 200);
    }

    seaweed.stop();
    for node in &nodes {
        node.wait_until("/readyz says the store is unreachable", |node| {
            node.get("/readyz").status == 503
        });
        // A probe learns that the bucket is out of reach, and nothing of where it is: the
        // cause is in the node's log.
        let ready = node.get("/readyz").json();
        assert_eq!(ready["ready"], false, "{ready}");
        let said = ready["store"].as_str().unwrap();
        assert!(said.contains("could not be reached"), "{ready}");
        assert!(
            !said.contains("s3://")
                && !said.contains(seaweed.endpoint().trim_start_matches("http://")),
            "{ready}"
        );
        // Cached packages are still answered.
        let reply = greet_call(node);
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(node.get("/healthz").status, 200);
    }
    // An upload cannot be published: 503 with a request id, naming no bucket, and nothing
    // changes.
    let reply = upload_through(&nodes[0], "2.0.0");
    assert_eq!(reply.status, 503, "{}", reply.text());
    let said = reply.text();
    assert!(
        said.contains("not published") && said.contains("request id "),
        "{said}"
    );
    assert!(
        !said.contains("s3://") && !said.contains(seaweed.endpoint().trim_start_matches("http://")),
        "{said}"
    );
    assert_eq!(served_version(&nodes[0]).as_deref(), Some("1.0.0"));

    // Back: every node is ready again on its own, and uploads reach all of them.
    seaweed.restart();
    for node in &nodes {
        node.wait_until("/readyz is ready again", |node| {
            node.get("/readyz").status == 200
        });
    }
    let reply = upload_through(&nodes[0], "2.0.0");
    assert_eq!(reply.status, 201, "{}", reply.text());
    for node in &nodes {
        node.wait_until("the new version is served", |node| {
            served_version(node).as_deref() == Some("2.0.0")
        });
        assert_eq!(greet_call(node).status, 200);
    }
}

#[test]
fn serve_stdio_and_bench_take_a_package_from_the_bucket() {
    use std::io::Write;
    let seaweed = Seaweed::start();
    let uploader = tempfile::tempdir().unwrap();
    succeeded(&hako(
        &seaweed,
        "stdio",
        uploader.path(),
        &["upload", support::arg(&support::greet_package_dir())],
    ));

    // `serve --stdio NAME` from an empty cache.
    let node = tempfile::tempdir().unwrap();
    let mut child = seaweed
        .hako()
        .args([
            "serve",
            "--stdio",
            "greet",
            "--store",
            &format!("s3://{BUCKET}/stdio"),
        ])
        .args(["--cache", support::arg(node.path())])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "greet", "arguments": {"name": "stdio"}}});
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{call}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = succeeded(&out);
    let answer: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert!(answer["result"].to_string().contains("stdio"), "{answer}");

    // `bench NAME` on a bucket.
    let bench = tempfile::tempdir().unwrap();
    let out = succeeded(&hako(
        &seaweed,
        "stdio",
        bench.path(),
        &[
            "bench",
            "greet",
            "--engines",
            "wasmer-singlepass",
            "--iterations",
            "3",
            "--json",
        ],
    ));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(report.to_string().contains("wasmer-singlepass"), "{report}");

    // A package folder is not served from a bucket without an upload.
    let out = hako(
        &seaweed,
        "stdio",
        node.path(),
        &[
            "serve",
            "--stdio",
            support::arg(&support::greet_package_dir()),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("upload the package first"),
        "{}",
        text(&out.stderr)
    );
}
