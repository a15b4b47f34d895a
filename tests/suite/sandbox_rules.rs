//! The sandbox as a guest sees it: preopens in the ABI's order, argv and environment,
//! `fd_allocate`, the write budget, sockets, and no way out of a preopen — through the real
//! fixture guest on every engine configuration.

use crate::support;

use serde_json::json;
use support::host::Call;

// WASI errno values (wasi_snapshot_preview1).
const EDQUOT: i64 = 19;
const ENOTSOCK: i64 = 57;
const ENOTSUP: i64 = 58;
const EROFS: i64 = 69;
const EBADF: i64 = 8;

fn folder() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn argv_has_one_entry_and_the_environment_is_empty() {
    let answer = Call::new("args_env").answer_json();
    assert_eq!(answer, json!({"args": ["fixture"], "env": []}));
}

#[test]
fn a_call_sees_only_a_fresh_volume_by_default() {
    assert_eq!(Call::new("preopens").answer_json(), json!(["/volume/tmp"]));
}

#[test]
fn preopens_come_in_the_abi_order() {
    let (data, assets, alpha, beta) = (folder(), folder(), folder(), folder());
    let answer = Call::new("preopens")
        .mounts(|mounts| {
            mounts.data = Some(data.path().to_path_buf());
            mounts.package_assets = Some(assets.path().to_path_buf());
            mounts.skills = vec![
                ("beta".into(), beta.path().to_path_buf()),
                ("alpha".into(), alpha.path().to_path_buf()),
            ];
        })
        .answer_json();
    assert_eq!(
        answer,
        json!([
            "/volume/tmp",
            "/volume/data",
            "/package",
            "/skills",
            "/skills/beta",
            "/skills/alpha"
        ])
    );
}

#[test]
fn a_file_written_to_the_volume_reads_back() {
    let volume = folder();
    let call = |tool: &str, args| {
        Call::new(tool)
            .args(args)
            .mounts(|mounts| {
                mounts.volume_tmp = hako::call::VolumeTmp::Given(volume.path().to_path_buf())
            })
            .answer_json()
    };
    assert_eq!(
        call(
            "write_file",
            json!({"path": "/volume/tmp/out.txt", "bytes": 10})
        ),
        json!({"ok": true})
    );
    assert_eq!(
        std::fs::read(volume.path().join("out.txt")).unwrap(),
        b"xxxxxxxxxx"
    );
    assert_eq!(
        call("read_file", json!({"path": "/volume/tmp/out.txt"})),
        json!({"ok": "xxxxxxxxxx"})
    );
}

#[test]
fn fd_allocate_answers_enotsup() {
    let answer = Call::new("fd_allocate")
        .args(json!({"path": "/volume/tmp/f"}))
        .answer_json();
    assert_eq!(answer, json!({"errno": ENOTSUP}));
}

#[test]
fn writes_past_the_budget_answer_edquot() {
    let answer = Call::new("write_file")
        .args(json!({"path": "/volume/tmp/big", "bytes": 5000, "chunk": 1000}))
        .limits(|limits| limits.write_budget = 3000)
        .answer_json();
    assert_eq!(answer["errno"], json!(EDQUOT), "{answer}");
}

#[test]
fn sockets_are_linked_but_never_a_socket() {
    assert_eq!(
        Call::new("sock").args(json!({"fd": 1})).answer_json(),
        json!({"errno": ENOTSOCK})
    );
    assert_eq!(
        Call::new("sock").args(json!({"fd": 99})).answer_json(),
        json!({"errno": EBADF})
    );
}

#[test]
fn dot_dot_cannot_leave_the_volume() {
    let answer = Call::new("read_file")
        .args(json!({"path": "/volume/tmp/../../../../etc/hostname"}))
        .answer_json();
    assert!(answer.get("errno").is_some(), "{answer}");
}

#[test]
fn a_symlink_cannot_lead_out_of_the_volume() {
    let volume = folder();
    let outside = folder();
    std::fs::write(outside.path().join("secret"), "secret").unwrap();
    let mounts = |mounts: &mut hako::call::Mounts| {
        mounts.volume_tmp = hako::call::VolumeTmp::Given(volume.path().to_path_buf())
    };
    let link = Call::new("symlink")
        .args(json!({"target": outside.path().join("secret"), "link": "/volume/tmp/abs"}))
        .mounts(mounts)
        .answer_json();
    // Creating a link to an absolute path may be refused outright; if it is made, it must
    // not lead anywhere.
    if link == json!({"ok": true}) {
        let read = Call::new("read_file")
            .args(json!({"path": "/volume/tmp/abs"}))
            .mounts(mounts)
            .answer_json();
        assert!(read.get("errno").is_some(), "{read}");
    }
    // A relative link planted by the host, climbing out, leads nowhere either.
    std::os::unix::fs::symlink("../../../../../../etc/hostname", volume.path().join("up")).unwrap();
    let read = Call::new("read_file")
        .args(json!({"path": "/volume/tmp/up"}))
        .mounts(mounts)
        .answer_json();
    assert!(read.get("errno").is_some(), "{read}");
}

#[test]
fn the_package_folder_is_read_only() {
    let assets = folder();
    std::fs::write(assets.path().join("data.txt"), "asset").unwrap();
    let mounts =
        |mounts: &mut hako::call::Mounts| mounts.package_assets = Some(assets.path().to_path_buf());
    assert_eq!(
        Call::new("read_file")
            .args(json!({"path": "/package/data.txt"}))
            .mounts(mounts)
            .answer_json(),
        json!({"ok": "asset"})
    );
    let write = Call::new("write_file")
        .args(json!({"path": "/package/new.txt", "bytes": 1}))
        .mounts(mounts)
        .answer_json();
    assert_eq!(write["errno"], json!(EROFS), "{write}");
}

#[test]
fn a_skill_is_mounted_read_only_under_its_name() {
    let skill = folder();
    std::fs::write(skill.path().join("SKILL.md"), "how to").unwrap();
    let mounts = |mounts: &mut hako::call::Mounts| {
        mounts.skills = vec![("writing".into(), skill.path().to_path_buf())]
    };
    assert_eq!(
        Call::new("read_file")
            .args(json!({"path": "/skills/writing/SKILL.md"}))
            .mounts(mounts)
            .answer_json(),
        json!({"ok": "how to"})
    );
    assert_eq!(
        Call::new("list_dir")
            .args(json!({"path": "/skills"}))
            .mounts(mounts)
            .answer_json(),
        json!(["writing"])
    );
}

#[test]
fn clocks_and_randomness_are_real() {
    for config in support::host::configs() {
        let answer = |call: Call| match call.run(config) {
            hako::call::CallOutcome::Answered { result, .. } => match &result.content[..] {
                [hako::protocol::ShownBlock::Text { text }] => {
                    serde_json::from_str::<serde_json::Value>(text).unwrap()
                }
                other => panic!("{other:?}"),
            },
            crashed => panic!("{crashed:?}"),
        };
        let a = answer(Call::new("clock_random"));
        let b = answer(Call::new("clock_random"));
        assert_ne!(a["random_hex"], b["random_hex"], "{config}");
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as f64;
        let guest_ns = a["realtime_ns"].as_f64().unwrap();
        assert!((now_ns - guest_ns).abs() < 600e9, "{guest_ns} vs {now_ns}");
    }
}
