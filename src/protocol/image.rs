//! The four image formats a model is shown (PNG, JPEG, GIF, WebP), told apart by their magic
//! bytes, and the check of an inline `image` block's base64 `data`.
//!
//! The base64 text is validated in fixed chunks on the stack, so checking a large inline
//! image allocates nothing; the text itself is handed on as given. This file does not decide
//! how a refused image is shown; [`super::result`] turns the reason into a note.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// An image format the model can be shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageKind {
    Png,
    Jpeg,
    Gif,
    Webp,
}

impl ImageKind {
    /// The format whose magic bytes open `bytes`, if any.
    pub(crate) fn sniff(bytes: &[u8]) -> Option<Self> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageKind::Png)
        } else if bytes.starts_with(b"\xff\xd8\xff") {
            Some(ImageKind::Jpeg)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(ImageKind::Gif)
        } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
            Some(ImageKind::Webp)
        } else {
            None
        }
    }

    /// The format a MIME type names, if it is one of the four.
    pub(crate) fn from_mime(mime: &str) -> Option<Self> {
        match mime {
            "image/png" => Some(ImageKind::Png),
            "image/jpeg" => Some(ImageKind::Jpeg),
            "image/gif" => Some(ImageKind::Gif),
            "image/webp" => Some(ImageKind::Webp),
            _ => None,
        }
    }

    /// The format's MIME type.
    pub(crate) fn mime(self) -> &'static str {
        match self {
            ImageKind::Png => "image/png",
            ImageKind::Jpeg => "image/jpeg",
            ImageKind::Gif => "image/gif",
            ImageKind::Webp => "image/webp",
        }
    }
}

/// Checks an inline image: `data` is standard, padded base64 whose bytes open with the magic
/// of one of the four formats, and `mime` names that same format. The error says why not.
pub(crate) fn check_inline(mime: &str, data: &str) -> Result<ImageKind, String> {
    let Some(declared) = ImageKind::from_mime(mime) else {
        return Err(format!(
            "its type {:?} is not PNG, JPEG, GIF or WebP",
            super::json::clip(mime, 64)
        ));
    };
    let Some(head) = base64_head(data.as_bytes()) else {
        return Err("its data is not valid base64".to_string());
    };
    match ImageKind::sniff(&head) {
        Some(kind) if kind == declared => Ok(kind),
        Some(kind) => Err(format!("it says {mime} but its data is {}", kind.mime())),
        None => Err("its data is not a PNG, JPEG, GIF or WebP image".to_string()),
    }
}

/// Characters of base64 decoded to sniff the magic: 16 characters are 12 bytes, enough for
/// the longest magic (WebP's).
const HEAD: usize = 16;

/// The first bytes `text` decodes to, if all of `text` is valid standard padded base64.
///
/// Nothing is decoded but the head and the final quantum: every character before the final
/// four must be a base64 symbol (no padding in the middle), checked in a branch-free scan,
/// and the final quantum goes through the decoder, which checks the padding and that unused
/// bits are zero. Together that is exactly what a full decode accepts, at a fraction of its
/// cost for large images.
fn base64_head(text: &[u8]) -> Option<Vec<u8>> {
    if text.is_empty() || !text.len().is_multiple_of(4) {
        return None;
    }
    let (body, last) = text.split_at(text.len() - 4);
    if !all_symbols(body) {
        return None;
    }
    let mut tail = [0u8; 3];
    STANDARD.decode_slice(last, &mut tail).ok()?;
    let head = &text[..text.len().min(HEAD)];
    let mut bytes = vec![0u8; HEAD / 4 * 3];
    let n = STANDARD.decode_slice(head, &mut bytes).ok()?;
    bytes.truncate(n);
    Some(bytes)
}

/// Whether every byte is one of the 64 symbols of the standard alphabet (`=` is not one).
fn all_symbols(bytes: &[u8]) -> bool {
    fn symbol(b: u8) -> bool {
        (b.wrapping_sub(b'A') < 26)
            | (b.wrapping_sub(b'a') < 26)
            | (b.wrapping_sub(b'0') < 10)
            | (b == b'+')
            | (b == b'/')
    }
    // Folding with `&` over fixed blocks keeps the loop free of branches, so it vectorizes;
    // the check between blocks still stops early on bad input.
    bytes
        .chunks(256)
        .all(|block| block.iter().fold(true, |ok, &b| ok & symbol(b)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The opening bytes of each format, padded out to a plausible file.
    pub(crate) fn sample(kind: ImageKind) -> Vec<u8> {
        let mut bytes = match kind {
            ImageKind::Png => b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec(),
            ImageKind::Jpeg => b"\xff\xd8\xff\xe0\0\x10JFIF\0".to_vec(),
            ImageKind::Gif => b"GIF89a\x01\0\x01\0".to_vec(),
            ImageKind::Webp => b"RIFF\x24\0\0\0WEBPVP8 ".to_vec(),
        };
        bytes.extend((0..100u8).map(|i| i.wrapping_mul(37)));
        bytes
    }

    const ALL: [ImageKind; 4] = [
        ImageKind::Png,
        ImageKind::Jpeg,
        ImageKind::Gif,
        ImageKind::Webp,
    ];

    #[test]
    fn each_format_is_recognised_by_its_magic() {
        for kind in ALL {
            assert_eq!(ImageKind::sniff(&sample(kind)), Some(kind));
            assert_eq!(ImageKind::from_mime(kind.mime()), Some(kind));
        }
        assert_eq!(ImageKind::sniff(b"GIF88a"), None);
        assert_eq!(ImageKind::sniff(b"RIFF\0\0\0\0WAVE"), None);
        assert_eq!(ImageKind::sniff(b""), None);
    }

    #[test]
    fn inline_images_of_each_format_pass() {
        for kind in ALL {
            let data = STANDARD.encode(sample(kind));
            assert_eq!(check_inline(kind.mime(), &data), Ok(kind));
        }
    }

    #[test]
    fn a_large_inline_image_is_checked_across_chunks() {
        let mut bytes = sample(ImageKind::Png);
        bytes.resize(200 * 1024 + 1, 7);
        let data = STANDARD.encode(&bytes);
        assert_eq!(check_inline("image/png", &data), Ok(ImageKind::Png));
        let mut broken = data.into_bytes();
        broken[150_000] = b'*';
        let broken = String::from_utf8(broken).unwrap();
        assert!(check_inline("image/png", &broken).is_err());
    }

    #[test]
    fn padding_in_the_middle_is_not_base64() {
        let mut bytes = sample(ImageKind::Png);
        bytes.truncate(bytes.len() / 3 * 3);
        let data = STANDARD.encode(&bytes);
        assert!(!data.contains('='));
        let whole = format!("{data}AAAA");
        assert_eq!(check_inline("image/png", &whole), Ok(ImageKind::Png));
        let padded_early = format!("{data}AA==AAAA");
        assert!(check_inline("image/png", &padded_early).is_err());
        let padded_head = format!("iVBORw0KGgo={}", &data[12..]);
        assert!(check_inline("image/png", &padded_head).is_err());
    }

    #[test]
    fn the_final_quantum_must_be_canonical() {
        // "QR==" decodes to 'A' but leaves a non-zero unused bit; "QQ==" is canonical.
        let png = STANDARD.encode(sample(ImageKind::Png));
        let body = &png[..png.len() / 4 * 4 - 4];
        assert!(check_inline("image/png", &format!("{body}QQ==")).is_ok());
        assert!(check_inline("image/png", &format!("{body}QR==")).is_err());
        assert!(check_inline("image/png", &format!("{body}Q===")).is_err());
    }

    #[test]
    fn symbols_are_exactly_the_standard_alphabet() {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for b in 0..=255u8 {
            assert_eq!(all_symbols(&[b]), alphabet.contains(&b), "byte {b}");
        }
    }

    #[test]
    fn refusals_say_why() {
        let png = STANDARD.encode(sample(ImageKind::Png));
        assert_eq!(
            check_inline("image/jpeg", &png),
            Err("it says image/jpeg but its data is image/png".to_string())
        );
        assert!(check_inline("image/svg+xml", &png)
            .unwrap_err()
            .contains("not PNG"));
        assert!(check_inline("image/png", "not base64!")
            .unwrap_err()
            .contains("base64"));
        assert!(check_inline("image/png", "")
            .unwrap_err()
            .contains("base64"));
        let text = STANDARD.encode(b"just some words, no image here");
        assert!(check_inline("image/png", &text)
            .unwrap_err()
            .contains("not a PNG"));
    }
}
