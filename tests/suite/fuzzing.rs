//! The fuzz targets' checks (`fuzz/src/`, included here as the module `checks`) on the stable
//! toolchain, a few seconds each: over the committed seed corpora (`fuzz/corpus/<target>/`)
//! and over inputs drawn with `arbitrary::Unstructured` from a fixed seed — mutations of the
//! seeds, archives built entry by entry, and `wasm-smith` modules. The same bounds hold as
//! under libFuzzer; `cargo +nightly fuzz` searches much further (see the README's Fuzzing).
//!
//! The seeds are made by [`seeds`]: `HAKO_WRITE_FUZZ_SEEDS=1 cargo test --test suite
//! fuzzing::` writes them; otherwise the test checks the committed ones are what it makes.

#[path = "../../fuzz/src/lib.rs"]
mod checks;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use arbitrary::{Result as Drawn, Unstructured};
use tar::{EntryType, Header};

use checks::http::HttpChecker;
use checks::serve::StdioServer;

/// A fixed stream of pseudo-random bytes (splitmix64), the same on every run.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        bytes.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// Pieces that make mutations of JSON, TOML and HTTP requests more than random bytes.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"\\",
    b"\n",
    b"null",
    b"true",
    b"1e999",
    b"-0",
    b"18446744073709551616",
    b"\"id\":",
    b"\"jsonrpc\":\"2.0\"",
    b"\"method\":",
    b"\\u0000",
    b"\\ud800",
    b"\xff",
    b"=",
    b"[[",
    b"]]",
    b"*.",
    b"https://",
    b"volume:///",
    b"%2F",
    b"..",
];

/// `seed` changed in one to eight places: bytes replaced, tokens inserted, ranges removed,
/// repeated, one byte repeated at length, or ranges taken from `others`.
fn mutated(seed: &[u8], others: &[Vec<u8>], u: &mut Unstructured<'_>) -> Drawn<Vec<u8>> {
    let mut out = seed.to_vec();
    for _ in 0..u.int_in_range(1..=8)? {
        let at = if out.is_empty() {
            0
        } else {
            u.choose_index(out.len() + 1)?
        };
        match u.int_in_range(0..=5)? {
            0 if at < out.len() => out[at] = u.arbitrary()?,
            1 => {
                let token = u.choose(TOKENS)?;
                out.splice(at..at, token.iter().copied());
            }
            2 if at < out.len() => {
                let end = at + u.choose_index(out.len() - at)? + 1;
                out.drain(at..end);
            }
            3 if at < out.len() => {
                let end = (at + u.int_in_range(1..=64)?).min(out.len());
                let copy: Vec<u8> = out[at..end].to_vec();
                for _ in 0..u.int_in_range(1..=64)? {
                    out.splice(at..at, copy.iter().copied());
                }
            }
            4 if at < out.len() => {
                // A long run of one byte: names, strings and numbers past their limits.
                let run = vec![out[at]; u.int_in_range(1..=8192)?];
                out.splice(at..at, run);
            }
            _ if !others.is_empty() => {
                let other = u.choose(others)?;
                let from = u.choose_index(other.len().max(1))?.min(other.len());
                let end = (from + u.int_in_range(0..=256)?).min(other.len());
                out.splice(at..at, other[from..end].iter().copied());
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Runs `check` on every seed of `target`, then on `draws` mutations of them.
fn over_seeds_and_mutations(target: &str, salt: u64, draws: usize, mut check: impl FnMut(&[u8])) {
    let seeds: Vec<Vec<u8>> = seeds::made().remove(target).expect("the target has seeds");
    assert!(!seeds.is_empty());
    for seed in &seeds {
        check(seed);
    }
    let noise = noise(salt, draws * 64);
    let mut u = Unstructured::new(&noise);
    for index in 0..draws {
        let seed = &seeds[index % seeds.len()];
        let input = mutated(seed, &seeds, &mut u).unwrap_or_else(|_| seed.clone());
        check(&input);
    }
}

#[test]
fn guest_lines_keep_the_codecs_promises() {
    over_seeds_and_mutations("guest_line", 1, 20_000, checks::protocol::guest_lines);
}

#[test]
fn mcp_over_stdio_answers_json_rpc_with_the_clients_ids() {
    let server = StdioServer::new();
    over_seeds_and_mutations("mcp_stdio", 2, 4_000, |input| server.check(input));
    // A line past the 64 KiB limit is one parse error, and the next line is still served.
    let mut long = vec![0u8];
    long.extend(std::iter::repeat_n(b'x', 70 * 1024));
    long.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
    server.check(&long);
}

#[test]
fn manifests_are_parsed_or_refused_by_rule() {
    over_seeds_and_mutations("manifest", 3, 20_000, checks::package::manifest);
}

#[test]
fn http_requests_pass_validation_and_policy_before_any_broker() {
    let checker = HttpChecker::new();
    over_seeds_and_mutations("http_request", 4, 20_000, |input| checker.request(input));
}

#[test]
fn policy_files_load_whole_or_are_errors() {
    over_seeds_and_mutations("http_policy", 5, 20_000, checks::http::policy);
}

#[test]
fn raw_modules_are_accepted_only_when_they_are_abi_1_commands() {
    over_seeds_and_mutations("module_check", 6, 20_000, checks::package::module);
}

#[test]
fn wasm_smith_modules_are_accepted_only_when_they_are_abi_1_commands() {
    let noise = noise(7, 4096 * 1000);
    for chunk in noise.chunks(4096) {
        let mut u = Unstructured::new(chunk);
        if let Ok(wasm) = checks::package::smith_module(&mut u) {
            checks::package::module(&wasm);
        }
    }
}

#[test]
fn archives_are_extracted_or_refused_within_the_memory_bound() {
    over_seeds_and_mutations("archive", 8, 400, checks::package::archive);
    let noise = noise(9, 1 << 20);
    let mut u = Unstructured::new(&noise);
    for _ in 0..400 {
        match drawn_archive(&mut u) {
            Ok(archive) => checks::package::archive(&archive),
            Err(_) => break,
        }
    }
}

#[test]
fn reading_an_archive_of_large_records_stays_within_the_bound() {
    // A gzip header whose name and comment fields are as long as flate2 reads, then a long
    // name and a PAX header at the metadata bound, then a file of 8 MiB.
    let mut gz = flate2::GzBuilder::new()
        .filename(vec![b'n'; 65_535])
        .comment(vec![b'c'; 65_535])
        .extra(vec![b'e'; 65_535])
        .write(Vec::new(), flate2::Compression::fast());
    {
        let mut builder = tar::Builder::new(&mut gz);
        let long = format!("{}/{}", "d".repeat(255), "f".repeat(200));
        let mut header = Header::new_gnu();
        header.set_size(8 << 20);
        header.set_mode(0o644);
        builder
            .append_data(
                &mut header,
                &long,
                std::io::Read::take(std::io::repeat(7), 8 << 20),
            )
            .unwrap();
        let padding = format!("x={}", "p".repeat(64 * 1024 - 200));
        append_pax(&mut builder, &[&padding, "path=pax/named"]);
        file(&mut builder, "short", b"x");
        builder.finish().unwrap();
    }
    checks::package::archive(&gz.finish().unwrap());
}

/// Path pieces that reach the archive reader's rules: the manifest, assets, climbing, dots,
/// absolute paths, names and paths past their bounds.
const PATH_PIECES: &[&str] = &[
    "subako-package.json",
    "module.wasm",
    "assets",
    "a",
    "b",
    "greet",
    "..",
    ".",
    "",
    "/tmp",
    "nul\0byte",
];

fn drawn_path(u: &mut Unstructured<'_>) -> Drawn<String> {
    let mut parts = Vec::new();
    for _ in 0..u.int_in_range(1..=4)? {
        parts.push(match u.int_in_range(0..=9)? {
            0 => "n".repeat(u.int_in_range(200..=300)?),
            1 => "d/".repeat(u.int_in_range(100..=600)?),
            _ => u.choose(PATH_PIECES)?.to_string(),
        });
    }
    Ok(parts.join("/"))
}

/// A `.tar.gz` built entry by entry from `u`: files, folders, links, devices, GNU long names
/// and PAX headers (some past the metadata bound), sizes that lie, and sometimes a cut or a
/// changed byte after compression.
fn drawn_archive(u: &mut Unstructured<'_>) -> Drawn<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for _ in 0..u.int_in_range(1..=12)? {
        let path = drawn_path(u)?;
        let data: Vec<u8> = vec![b'x'; u.int_in_range(0..=2048)?];
        match u.int_in_range(0..=7)? {
            0 => {
                // A GNU long name for the next entry, its size true or not.
                let claimed = match u.arbitrary()? {
                    true => path.len() as u64,
                    false => u.int_in_range(0..=(1u64 << 20))?,
                };
                let name = path.as_bytes();
                raw_entry(
                    &mut builder,
                    EntryType::GNULongName,
                    "././@LongLink",
                    claimed,
                    name,
                );
            }
            1 => {
                let record = format!("path={path}");
                let size = format!("size={}", data.len());
                let records: Vec<&str> = match u.int_in_range(0..=2)? {
                    0 => vec![&record],
                    1 => vec![&size],
                    _ => vec![&record, "mtime=1"],
                };
                append_pax(&mut builder, &records);
            }
            2 => {
                let kinds = [
                    EntryType::Symlink,
                    EntryType::Link,
                    EntryType::Char,
                    EntryType::Fifo,
                    EntryType::GNUSparse,
                    EntryType::XGlobalHeader,
                ];
                let kind = *u.choose(&kinds)?;
                raw_entry(&mut builder, kind, &path, data.len() as u64, &data);
            }
            3 => raw_entry(&mut builder, EntryType::Directory, &path, 0, b""),
            4 => {
                let claimed = u.int_in_range(0..=u64::MAX)?;
                raw_entry(&mut builder, EntryType::Regular, &path, claimed, &data);
            }
            _ => {
                if builder
                    .append_data(&mut file_header(data.len()), &path, &*data)
                    .is_err()
                {
                    raw_entry(
                        &mut builder,
                        EntryType::Regular,
                        &path,
                        data.len() as u64,
                        &data,
                    );
                }
            }
        }
    }
    let tar = builder.into_inner().expect("a tar in memory");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).expect("compressing in memory");
    let mut archive = gz.finish().expect("compressing in memory");
    match u.int_in_range(0..=5)? {
        0 => archive.truncate(u.choose_index(archive.len())?),
        1 => {
            let at = u.choose_index(archive.len())?;
            archive[at] ^= u.int_in_range(1..=255)?;
        }
        _ => {}
    }
    Ok(archive)
}

fn file_header(len: usize) -> Header {
    let mut header = Header::new_gnu();
    header.set_size(len as u64);
    header.set_mode(0o644);
    header.set_entry_type(EntryType::Regular);
    header
}

fn file(builder: &mut tar::Builder<impl Write>, path: &str, data: &[u8]) {
    builder
        .append_data(&mut file_header(data.len()), path, data)
        .expect("a file entry");
}

/// An entry whose header says what it is told, path and size included, with `data` after it
/// (padded to a block): the `tar` builder would refuse the hostile ones.
fn raw_entry(
    builder: &mut tar::Builder<Vec<u8>>,
    kind: EntryType,
    path: &str,
    size: u64,
    data: &[u8],
) {
    let mut header = Header::new_gnu();
    let name = &mut header.as_old_mut().name;
    let len = path.len().min(name.len());
    name[..len].copy_from_slice(&path.as_bytes()[..len]);
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(0o644);
    if matches!(kind, EntryType::Symlink | EntryType::Link) {
        let _ = header.set_link_name("/etc/passwd");
    }
    header.set_cksum();
    let out = builder.get_mut();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(512), 0);
}

/// A PAX header entry holding `records` (`key=value` each, as "LEN key=value\n").
fn append_pax(builder: &mut tar::Builder<impl Write>, records: &[&str]) {
    let mut data = Vec::new();
    for record in records {
        let body = format!(" {record}\n");
        let mut len = body.len() + 1;
        while format!("{len}{body}").len() != len {
            len += 1;
        }
        data.extend_from_slice(format!("{len}{body}").as_bytes());
    }
    let mut header = Header::new_ustar();
    header.set_path("PaxHeaders/x").expect("a short path");
    header.set_entry_type(EntryType::XHeader);
    header.set_size(data.len() as u64);
    header.set_cksum();
    builder
        .append(&header, data.as_slice())
        .expect("a PAX entry");
}

/// The seed corpora, made here so that the binary ones can be made again.
mod seeds {
    use super::*;

    /// The folder of the committed corpora.
    pub fn corpus_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus")
    }

    fn wasm(fixture: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/wat")
            .join(format!("{fixture}.wat"));
        wat::parse_file(&path).expect("a fixture module")
    }

    fn line(choice: u8, lines: &[&str]) -> Vec<u8> {
        let mut bytes = vec![choice];
        bytes.extend_from_slice(lines.join("\n").as_bytes());
        bytes.push(b'\n');
        bytes
    }

    fn package_archive() -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        raw_entry(&mut builder, EntryType::Directory, "greet/", 0, b"");
        let manifest = br#"{"name":"greet","version":"1.0.0","abi":1,"description":"Greets."}"#;
        file(&mut builder, "greet/subako-package.json", manifest);
        file(&mut builder, "greet/module.wasm", &wasm("valid_minimal"));
        file(
            &mut builder,
            "greet/assets/readme.txt",
            b"assets are mounted at /package\n",
        );
        gzip(builder.into_inner().expect("a tar in memory"))
    }

    fn hostile_archive() -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        raw_entry(&mut builder, EntryType::Symlink, "link", 0, b"");
        raw_entry(&mut builder, EntryType::Regular, "a/../../escaped", 1, b"x");
        raw_entry(&mut builder, EntryType::Regular, "/tmp/absolute", 1, b"x");
        append_pax(&mut builder, &["path=from-pax/named.txt", "mtime=1"]);
        file(&mut builder, "short", b"pax");
        file(&mut builder, "module.wasm", b"first");
        file(&mut builder, "./module.wasm", b"second");
        raw_entry(
            &mut builder,
            EntryType::GNULongName,
            "././@LongLink",
            8 << 20,
            b"aaaa",
        );
        gzip(builder.into_inner().expect("a tar in memory"))
    }

    fn gzip(tar: Vec<u8>) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&tar).expect("compressing in memory");
        gz.finish().expect("compressing in memory")
    }

    /// Every target's seeds, by target and file name.
    pub fn by_name() -> BTreeMap<&'static str, Vec<(&'static str, Vec<u8>)>> {
        let text = |s: &str| s.as_bytes().to_vec();
        let mut seeds = BTreeMap::new();
        seeds.insert("guest_line", vec![
            ("answer", line(1, &[
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}"#,
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Hello, Ada!"}],"structuredContent":{"message":"Hello, Ada!"},"isError":false}}"#,
            ])),
            ("blocks", line(2, &[
                r#"{"jsonrpc":"2.0","id":"call-1","result":{"content":[{"type":"image","mimeType":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="},{"type":"resource_link","uri":"volume:///tmp/chart%20one.png","name":"chart"},{"type":"resource_link","uri":"https://example.com/report","name":"report"},{"type":"audio","data":""}],"resultType":"complete"}}"#,
            ])),
            ("discovery", line(1, &[
                r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}"#,
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"greet","description":"Greet someone.","inputSchema":{"type":"object"}}],"nextCursor":"page-2"}}"#,
            ])),
            ("faults", line(0, &[
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no such tool"}}"#,
                r#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}"#,
                "hello from the guest",
                r#"{"jsonrpc":"1.0","id":"x","result":{}}"#,
                r#"[[[[{"jsonrpc":"2.0"}]]]]"#,
            ])),
        ]);
        seeds.insert("mcp_stdio", vec![
            ("session", line(8, &[
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
                r#"{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"greet","arguments":{"name":"Ada"}}}"#,
                r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
            ])),
            ("stateless", line(3, &[
                r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#,
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"1999-01-01"}}}"#,
            ])),
            ("malformed", line(200, &[
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                r#"{"jsonrpc":"2.0","id": 1e2 ,"method":"ping","params":[]}"#,
                r#"{"jsonrpc":"2.0","id":"\u0041b","method":"nothing/here"}"#,
                r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/call","params":{"name":"absent"}}"#,
                r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
                "{oops",
                "   ",
                r#"{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
            ])),
        ]);
        seeds.insert("manifest", vec![
            ("greet.json", text(r#"{"name":"greet","version":"1.0.0","abi":1,"description":"Greets someone by name."}"#)),
            ("refused.json", text(r#"{"name":"Greet!","version":".1","abi":"1","description":null}"#)),
            ("extra.json", text(r#"{"name":"a-b_c","version":"1.0.0-rc.1+build.5","abi":1,"homepage":"https://example.com","tags":["x"]}"#)),
        ]);
        seeds.insert(
            "archive",
            vec![
                ("package.tar.gz", package_archive()),
                ("hostile.tar.gz", hostile_archive()),
            ],
        );
        seeds.insert(
            "module_check",
            vec![
                ("valid_minimal.wasm", wasm("valid_minimal")),
                ("valid_simd.wasm", wasm("valid_simd")),
                ("several_problems.wasm", wasm("several_problems")),
                ("tail_calls.wasm", wasm("tail_calls")),
                ("component.wasm", wasm("component")),
            ],
        );
        seeds.insert(
            "module_smith",
            vec![("noise-1", noise(11, 512)), ("noise-2", noise(12, 2048))],
        );
        seeds.insert("http_request", vec![
            ("get.json", text(r#"{"url":"https://api.example.com/v1/items?page=2#top","headers":{"Accept":"application/json","X-Trace":"1"},"timeout_ms":5000}"#)),
            ("post.json", text(r#"{"method":"POST","url":"https://a.tiles.example/upload","body":{"json":{"n":[1,2,3]}},"output":{"file":"/volume/tmp/out.bin"},"follow_redirects":false}"#)),
            ("refused.json", text(r#"{"method":"TRACE","url":"http://localhost:8443/","headers":{"Authorization":"Bearer x","Host":"evil"},"body":{"file":"/etc/passwd"}}"#)),
            ("literal.json", text(r#"{"url":"https://[::1]:9443/x","headers":{"cookie":"a=b"},"body":{"text":"hi"}}"#)),
        ]);
        seeds.insert(
            "http_policy",
            vec![
                (
                    "design.toml",
                    text(
                        r#"[tls]
extra_ca_files = ["certs/internal-ca.pem"]

[packages."*"]
allow_hosts = []

[packages.weather]
allow_hosts = ["api.weather.example", "*.tiles.example", "localhost:8443"]
trust_private = ["localhost"]

[[packages.weather.credentials]]
host = "api.weather.example"
header = "authorization"
value_env = "WEATHER_TOKEN"
prefix = "Bearer "
"#,
                    ),
                ),
                (
                    "refused.toml",
                    text(
                        r#"[packages.a]
allow_hosts = ["*"]
trust_private = ["10.0.0.1"]
unknown = 1
"#,
                    ),
                ),
            ],
        );
        seeds
    }

    /// Every target's seeds, by target.
    pub fn made() -> BTreeMap<&'static str, Vec<Vec<u8>>> {
        by_name()
            .into_iter()
            .map(|(target, seeds)| (target, seeds.into_iter().map(|(_, bytes)| bytes).collect()))
            .collect()
    }

    #[test]
    fn the_committed_seed_corpora_are_the_ones_made_here() {
        let write = std::env::var_os("HAKO_WRITE_FUZZ_SEEDS").is_some();
        for (target, seeds) in by_name() {
            let dir = corpus_dir().join(target);
            for (name, bytes) in seeds {
                let path = dir.join(name);
                if write {
                    std::fs::create_dir_all(&dir).expect("the corpus folder");
                    std::fs::write(&path, &bytes).expect("a seed is written");
                } else {
                    let committed = std::fs::read(&path).unwrap_or_default();
                    assert!(
                        committed == bytes,
                        "{} is not the seed made here; write the seeds again with \
                         HAKO_WRITE_FUZZ_SEEDS=1 cargo test --test suite fuzzing::",
                        path.display()
                    );
                }
            }
        }
    }
}
