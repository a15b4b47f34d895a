//! Content blocks as the model is shown them: text, images checked by magic bytes,
//! `volume:///` links read after the guest exits and confined to the volume, other links as a
//! line, other blocks as a note.

use crate::support;

use base64::Engine as _;
use hako::protocol::ShownBlock;
use serde_json::json;
use support::host::Call;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDRrest-of-a-png";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn single(call: Call) -> ShownBlock {
    let result = call.answers();
    assert_eq!(result.content.len(), 1, "{result:?}");
    result.content.into_iter().next().unwrap()
}

#[test]
fn an_inline_png_is_shown_as_an_image() {
    let block = single(Call::new("image").args(json!({"mime": "image/png", "base64": b64(PNG)})));
    assert_eq!(
        block,
        ShownBlock::Image {
            mime_type: "image/png".into(),
            data: b64(PNG)
        }
    );
}

#[test]
fn an_image_whose_bytes_are_not_an_image_is_left_out() {
    let block =
        single(Call::new("image").args(json!({"mime": "image/png", "base64": b64(b"plain text")})));
    assert!(matches!(block, ShownBlock::Omitted { .. }), "{block:?}");
}

#[test]
fn a_volume_link_is_read_after_exit_and_shown_as_the_image() {
    let block = single(Call::new("resource_link").args(json!({
        "uri": "volume:///tmp/chart%20one.png",
        "file": "/volume/tmp/chart one.png",
        "base64": b64(PNG),
    })));
    assert_eq!(
        block,
        ShownBlock::Image {
            mime_type: "image/png".into(),
            data: b64(PNG)
        }
    );
}

#[test]
fn a_volume_link_to_a_missing_file_is_left_out() {
    let block = single(Call::new("resource_link").args(json!({"uri": "volume:///tmp/none.png"})));
    assert!(matches!(block, ShownBlock::Omitted { .. }), "{block:?}");
}

#[test]
fn a_volume_link_cannot_climb_out_of_the_volume() {
    for uri in [
        "volume:///tmp/../../etc/hostname",
        "volume:///tmp/%2E%2E/%2E%2E/etc/hostname",
        "volume:///tmp/a%2F..%2F..%2Fetc",
    ] {
        let block = single(Call::new("resource_link").args(json!({"uri": uri})));
        assert!(
            matches!(block, ShownBlock::Omitted { .. }),
            "{uri}: {block:?}"
        );
    }
}

#[test]
fn a_volume_link_through_a_symlink_out_of_the_volume_is_left_out() {
    let volume = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("x.png"), PNG).unwrap();
    std::os::unix::fs::symlink(outside.path().join("x.png"), volume.path().join("x.png")).unwrap();
    let block = single(
        Call::new("resource_link")
            .args(json!({"uri": "volume:///tmp/x.png"}))
            .mounts(|mounts| {
                mounts.volume_tmp = hako::call::VolumeTmp::Given(volume.path().to_path_buf())
            }),
    );
    assert!(matches!(block, ShownBlock::Omitted { .. }), "{block:?}");
}

#[test]
fn another_link_becomes_a_line_naming_it() {
    let block = single(
        Call::new("resource_link")
            .args(json!({"uri": "https://example.com/report", "name": "report"})),
    );
    match block {
        ShownBlock::Link { text } => assert!(text.contains("https://example.com/report"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn other_blocks_become_a_note_that_they_were_left_out() {
    let result = Call::new("blocks")
        .args(json!({"content": [
            {"type": "text", "text": "kept"},
            {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "t"}},
        ]}))
        .answers();
    assert_eq!(
        result.content[0],
        ShownBlock::Text {
            text: "kept".into()
        }
    );
    for block in &result.content[1..] {
        match block {
            ShownBlock::Omitted { text } => assert!(text.contains("left out"), "{text}"),
            other => panic!("{other:?}"),
        }
    }
}
