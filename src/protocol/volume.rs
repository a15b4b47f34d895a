//! `volume:///` links: decoding a link's URI into a path beneath `/volume`, and reading the
//! image it names once the guest has exited.
//!
//! Decoding refuses what could leave `/volume` by name (`..`, `.`, empty segments, a `/` or
//! NUL hidden in a percent-encoded segment); reading goes through `cap-std`, which refuses
//! absolute paths and symlinks that lead outside the directory, so confinement never rests
//! on these string checks alone. This file does not decide when links are read (the call
//! runner does, after exit) and does not know where the volume lives on the host.

use std::io::Read as _;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cap_std::fs::Dir;
use percent_encoding::percent_decode_str;

use super::image::ImageKind;
use super::ShownBlock;

/// The largest image file a volume link may name.
pub const MAX_VOLUME_IMAGE_BYTES: u64 = 16 * 1024 * 1024;

/// What a `resource_link` URI is, as far as the volume is concerned.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum VolumeUri {
    /// Not a `volume:` URI at all.
    Other,
    /// A `volume:` URI that names no safe path; the text says why.
    Invalid(String),
    /// The decoded path beneath `/volume`, segments joined by `/`.
    Path(String),
}

/// Decodes `uri` when it is a `volume:///` link.
pub(crate) fn decode_volume_uri(uri: &str) -> VolumeUri {
    let is_volume = uri
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("volume:"));
    if !is_volume {
        return VolumeUri::Other;
    }
    let Some(path) = uri[7..].strip_prefix("///") else {
        return VolumeUri::Invalid("it does not start with volume:///".to_string());
    };
    if path.is_empty() {
        return VolumeUri::Invalid("it names no path".to_string());
    }
    if path.contains(['?', '#']) {
        return VolumeUri::Invalid("it has a query or a fragment".to_string());
    }
    let mut decoded = String::with_capacity(path.len());
    for segment in path.split('/') {
        let Ok(segment) = percent_decode_str(segment).decode_utf8() else {
            return VolumeUri::Invalid("a segment is not UTF-8 once decoded".to_string());
        };
        let why = match &*segment {
            "" => Some("it has an empty segment"),
            "." | ".." => Some("it has a . or .. segment"),
            s if s.contains('/') => Some("a segment hides a /"),
            s if s.contains('\0') => Some("a segment hides a NUL"),
            _ => None,
        };
        if let Some(why) = why {
            return VolumeUri::Invalid(why.to_string());
        }
        if !decoded.is_empty() {
            decoded.push('/');
        }
        decoded.push_str(&segment);
    }
    VolumeUri::Path(decoded)
}

/// Reads the image at `path` (as decoded from a link) beneath the volume root `volume`.
///
/// Returns the image block, or a note saying why it was left out: a missing file, a file too
/// large, a file that is not a PNG, JPEG, GIF or WebP image, or a path that leads outside the
/// volume. Nothing here is a crash: the model is told and the call goes on.
pub fn read_volume_link(volume: &Dir, path: &str) -> ShownBlock {
    match read_image(volume, path) {
        Ok((kind, bytes)) => ShownBlock::Image {
            mime_type: kind.mime().to_string(),
            data: STANDARD.encode(bytes),
        },
        Err(why) => ShownBlock::Omitted {
            text: format!(
                "the linked file /volume/{} was left out: {why}",
                super::json::clip(path, 256)
            ),
        },
    }
}

fn read_image(volume: &Dir, path: &str) -> Result<(ImageKind, Vec<u8>), String> {
    // Metadata first, so a directory or a named pipe is never opened (a pipe would block).
    let metadata = volume.metadata(path).map_err(describe_io)?;
    if !metadata.is_file() {
        return Err("it is not a regular file".to_string());
    }
    if metadata.len() > MAX_VOLUME_IMAGE_BYTES {
        return Err(format!(
            "it is larger than {} MiB",
            MAX_VOLUME_IMAGE_BYTES / (1024 * 1024)
        ));
    }
    let file = volume.open(path).map_err(describe_io)?;
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    // The file may have grown since its metadata was read; never read past the limit.
    file.take(MAX_VOLUME_IMAGE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(describe_io)?;
    if bytes.len() as u64 > MAX_VOLUME_IMAGE_BYTES {
        return Err(format!(
            "it is larger than {} MiB",
            MAX_VOLUME_IMAGE_BYTES / (1024 * 1024)
        ));
    }
    match ImageKind::sniff(&bytes) {
        Some(kind) => Ok((kind, bytes)),
        None => Err("it is not a PNG, JPEG, GIF or WebP image".to_string()),
    }
}

fn describe_io(error: std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => "there is no such file".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            "it could not be opened inside the volume (it may lead outside)".to_string()
        }
        _ => format!("it could not be read ({error})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::image::tests::sample;

    fn path_of(uri: &str) -> String {
        match decode_volume_uri(uri) {
            VolumeUri::Path(p) => p,
            other => panic!("{uri} should decode, got {other:?}"),
        }
    }

    fn invalid(uri: &str) -> String {
        match decode_volume_uri(uri) {
            VolumeUri::Invalid(why) => why,
            other => panic!("{uri} should be refused, got {other:?}"),
        }
    }

    #[test]
    fn volume_links_decode_each_segment() {
        assert_eq!(path_of("volume:///tmp/chart.png"), "tmp/chart.png");
        assert_eq!(path_of("volume:///tmp/chart%20a.png"), "tmp/chart a.png");
        assert_eq!(path_of("VOLUME:///data/%E2%82%AC.gif"), "data/€.gif");
        assert_eq!(path_of("volume:///tmp/%2E%2E%2Ea"), "tmp/...a");
    }

    #[test]
    fn links_that_could_escape_are_refused() {
        assert!(invalid("volume:///tmp/../etc/passwd").contains(".."));
        assert!(invalid("volume:///tmp/%2E%2E/x").contains(".."));
        assert!(invalid("volume:///tmp/./x").contains(".."));
        assert!(invalid("volume:///tmp/a%2Fb.png").contains('/'));
        assert!(invalid("volume:///tmp/a%00.png").contains("NUL"));
        assert!(invalid("volume:///tmp//a.png").contains("empty"));
        assert!(invalid("volume:///tmp/").contains("empty"));
        assert!(invalid("volume:///").contains("no path"));
        assert!(invalid("volume://host/tmp/a.png").contains("volume:///"));
        assert!(invalid("volume:///tmp/a.png?x=1").contains("query"));
        assert!(invalid("volume:///tmp/%FF.png").contains("UTF-8"));
    }

    #[test]
    fn other_schemes_are_not_volume_links() {
        assert_eq!(
            decode_volume_uri("https://example.com/a.png"),
            VolumeUri::Other
        );
        assert_eq!(
            decode_volume_uri("file:///volume/tmp/a.png"),
            VolumeUri::Other
        );
        assert_eq!(decode_volume_uri("vol"), VolumeUri::Other);
    }

    fn volume_dir() -> (tempfile::TempDir, Dir) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("volume")).unwrap();
        std::fs::create_dir(root.path().join("volume/tmp")).unwrap();
        let dir = Dir::open_ambient_dir(root.path().join("volume"), cap_std::ambient_authority())
            .unwrap();
        (root, dir)
    }

    fn note(block: ShownBlock) -> String {
        match block {
            ShownBlock::Omitted { text } => text,
            other => panic!("expected a note, got {other:?}"),
        }
    }

    #[test]
    fn a_png_in_the_volume_is_read_as_an_image() {
        let (root, volume) = volume_dir();
        let png = sample(ImageKind::Png);
        std::fs::write(root.path().join("volume/tmp/chart a.png"), &png).unwrap();
        assert_eq!(
            read_volume_link(&volume, &path_of("volume:///tmp/chart%20a.png")),
            ShownBlock::Image {
                mime_type: "image/png".into(),
                data: STANDARD.encode(&png),
            }
        );
    }

    #[test]
    fn a_path_with_dot_dot_is_refused_by_the_directory() {
        let (root, volume) = volume_dir();
        std::fs::write(root.path().join("secret.png"), sample(ImageKind::Png)).unwrap();
        let text = note(read_volume_link(&volume, "tmp/../../secret.png"));
        assert!(text.contains("left out"), "{text}");
        let text = note(read_volume_link(&volume, "/etc/passwd"));
        assert!(text.contains("left out"), "{text}");
    }

    #[test]
    fn a_symlink_pointing_outside_is_refused() {
        let (root, volume) = volume_dir();
        let outside = root.path().join("outside.png");
        std::fs::write(&outside, sample(ImageKind::Png)).unwrap();
        std::os::unix::fs::symlink(&outside, root.path().join("volume/tmp/link.png")).unwrap();
        let text = note(read_volume_link(&volume, "tmp/link.png"));
        assert!(text.contains("outside"), "{text}");
    }

    #[test]
    fn a_symlink_inside_the_volume_is_followed() {
        let (root, volume) = volume_dir();
        std::fs::write(root.path().join("volume/tmp/a.gif"), sample(ImageKind::Gif)).unwrap();
        std::os::unix::fs::symlink("a.gif", root.path().join("volume/tmp/b.gif")).unwrap();
        assert!(matches!(
            read_volume_link(&volume, "tmp/b.gif"),
            ShownBlock::Image { mime_type, .. } if mime_type == "image/gif"
        ));
    }

    #[test]
    fn a_missing_file_becomes_a_note() {
        let (_root, volume) = volume_dir();
        assert_eq!(
            note(read_volume_link(&volume, "tmp/none.png")),
            "the linked file /volume/tmp/none.png was left out: there is no such file"
        );
    }

    #[test]
    fn a_file_that_is_not_an_image_becomes_a_note() {
        let (root, volume) = volume_dir();
        std::fs::write(root.path().join("volume/tmp/a.png"), b"plain text").unwrap();
        assert!(note(read_volume_link(&volume, "tmp/a.png")).contains("not a PNG"));
        assert!(note(read_volume_link(&volume, "tmp")).contains("not a regular file"));
    }

    #[test]
    fn a_file_over_the_limit_becomes_a_note() {
        let (root, volume) = volume_dir();
        let file = std::fs::File::create(root.path().join("volume/tmp/big.png")).unwrap();
        file.set_len(MAX_VOLUME_IMAGE_BYTES + 1).unwrap();
        assert!(note(read_volume_link(&volume, "tmp/big.png")).contains("larger than 16 MiB"));
    }
}
