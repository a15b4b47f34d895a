//! A `CallToolResult` turned into what the model is shown, before volume links are read.
//!
//! Each content block becomes one [`ShownBlock`]: text as is; an inline image once its
//! base64 and magic bytes agree with its MIME type; a `volume:///` link as the decoded path
//! the caller reads after the guest exits ([`super::read_volume_link`]); any other link as a
//! line naming it; anything else as a note that it was left out. A block the model cannot be
//! shown is a note, never a crash. What breaks the call here is only a `resultType` other than
//! `complete` ([`ResultError::BadResultType`]) or a result that is not a `CallToolResult` at
//! all ([`ResultError::Invalid`]); the caller decides what crash kind the latter is.

use serde::Serialize;
use simd_json::prelude::*;
use simd_json::BorrowedValue;

use super::image::check_inline;
use super::json::{clip, to_serde, type_name};
use super::volume::{decode_volume_uri, VolumeUri};

/// A tool's result as the model is shown it. It serializes as exactly the CallToolResult the
/// MCP endpoints answer (`content`, `structuredContent`, `isError`; every block as
/// [`ShownBlock`] serializes), so that `hako call --json`, the operator API and MCP show one
/// result one way.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallResult {
    /// The content blocks, in order.
    pub content: Vec<ShownBlock>,
    /// `structuredContent`, when the result has one.
    #[serde(rename = "structuredContent", skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
    /// `isError`: a failure the model should read.
    #[serde(rename = "isError")]
    pub is_error: bool,
}

/// One content block as the model is shown it. It serializes as the MCP block the model gets:
/// an image as `{"type":"image","mimeType","data"}`, everything else as
/// `{"type":"text","text"}` (a link as its line, a left-out block as its note, a volume link
/// still here, which could not be read, as a line saying so).
#[derive(Debug, Clone, PartialEq)]
pub enum ShownBlock {
    /// Text, as given.
    Text { text: String },
    /// An image whose magic bytes were checked; `data` is base64, as given or as read.
    Image { mime_type: String, data: String },
    /// A `volume:///` link, to be read by the caller after the guest exits.
    VolumeLink {
        /// The link's URI, as given.
        uri: String,
        /// The decoded path beneath `/volume`, such as `tmp/chart.png`.
        path: String,
    },
    /// Any other `resource_link`, as one line naming it.
    Link { text: String },
    /// A note that a block was left out, and why.
    Omitted { text: String },
}

impl Serialize for ShownBlock {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(3))?;
        match self {
            ShownBlock::Text { text }
            | ShownBlock::Link { text }
            | ShownBlock::Omitted { text } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            ShownBlock::Image { mime_type, data } => {
                map.serialize_entry("type", "image")?;
                map.serialize_entry("mimeType", mime_type)?;
                map.serialize_entry("data", data)?;
            }
            // Links are read after the guest exits; one left here could not be read.
            ShownBlock::VolumeLink { uri, .. } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", &format!("{uri} could not be read"))?;
            }
        }
        map.end()
    }
}

/// A result that breaks the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResultError {
    /// `resultType` is present and not `"complete"`; the text shows what it was.
    #[error("resultType is {0}, not \"complete\"")]
    BadResultType(String),
    /// The result is not a `CallToolResult`; the text says what is wrong.
    #[error("not a CallToolResult: {0}")]
    Invalid(String),
}

impl ResultError {
    /// The crash kind of a bad `resultType` (`bad_result_type`); `None` for an invalid
    /// result, whose kind the caller chooses.
    pub fn crash_kind(&self) -> Option<&'static str> {
        match self {
            ResultError::BadResultType(_) => Some("bad_result_type"),
            ResultError::Invalid(_) => None,
        }
    }
}

/// Renders the `result` member of a `tools/call` answer.
pub fn call_result(result: &BorrowedValue<'_>) -> Result<CallResult, ResultError> {
    let Some(members) = result.as_object() else {
        return Err(ResultError::Invalid(format!(
            "the result is {}, not an object",
            type_name(result)
        )));
    };
    match members.get("resultType") {
        None => {}
        Some(kind) if kind.as_str() == Some("complete") => {}
        Some(BorrowedValue::String(kind)) => {
            return Err(ResultError::BadResultType(format!("{:?}", clip(kind, 64))))
        }
        Some(other) => return Err(ResultError::BadResultType(type_name(other).to_string())),
    }
    let Some(blocks) = members.get("content").and_then(|c| c.as_array()) else {
        return Err(ResultError::Invalid(
            "it has no \"content\" array".to_string(),
        ));
    };
    let mut content = Vec::with_capacity(blocks.len());
    for (index, block) in blocks.iter().enumerate() {
        if !block.is_object() {
            return Err(ResultError::Invalid(format!(
                "content block {index} is {}, not an object",
                type_name(block)
            )));
        }
        content.push(shown_block(block));
    }
    let is_error = match members.get("isError") {
        None | Some(BorrowedValue::Static(simd_json::StaticNode::Null)) => false,
        Some(flag) => flag.as_bool().ok_or_else(|| {
            ResultError::Invalid(format!("\"isError\" is {}, not a boolean", type_name(flag)))
        })?,
    };
    let structured = match members.get("structuredContent") {
        None | Some(BorrowedValue::Static(simd_json::StaticNode::Null)) => None,
        Some(value) => Some(to_serde(value)),
    };
    Ok(CallResult {
        content,
        structured,
        is_error,
    })
}

/// One content block (an object) as the model is shown it.
fn shown_block(block: &BorrowedValue<'_>) -> ShownBlock {
    let field = |name: &str| block.get(name).and_then(|v| v.as_str());
    let omitted = |why: String| ShownBlock::Omitted { text: why };
    match field("type") {
        Some("text") => match field("text") {
            Some(text) => ShownBlock::Text {
                text: text.to_string(),
            },
            None => omitted("a text block without text was left out".to_string()),
        },
        Some("image") => match (field("mimeType"), field("data")) {
            (Some(mime), Some(data)) => match check_inline(mime, data) {
                Ok(kind) => ShownBlock::Image {
                    mime_type: kind.mime().to_string(),
                    data: data.to_string(),
                },
                Err(why) => omitted(format!("an image was left out: {why}")),
            },
            _ => omitted("an image was left out: it has no mimeType or no data".to_string()),
        },
        Some("resource_link") => match field("uri") {
            Some(uri) => link_block(uri, field("name")),
            None => omitted("a resource_link without a uri was left out".to_string()),
        },
        Some(other) => {
            let other = clip(other, 64);
            let article = if other.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            omitted(format!("{article} {other} block was left out"))
        }
        None => omitted("a block without a type was left out".to_string()),
    }
}

fn link_block(uri: &str, name: Option<&str>) -> ShownBlock {
    match decode_volume_uri(uri) {
        VolumeUri::Path(path) => ShownBlock::VolumeLink {
            uri: uri.to_string(),
            path,
        },
        VolumeUri::Invalid(why) => ShownBlock::Omitted {
            text: format!("the link {} was left out as invalid: {why}", clip(uri, 256)),
        },
        VolumeUri::Other => ShownBlock::Link {
            text: match name.filter(|n| !n.is_empty()) {
                Some(name) => format!("{name}: {uri}"),
                None => uri.to_string(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::image::tests::sample;
    use crate::protocol::image::ImageKind;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use serde_json::json;

    fn render(result: serde_json::Value) -> Result<CallResult, ResultError> {
        let mut text = serde_json::to_vec(&result).unwrap();
        let value = simd_json::to_borrowed_value(&mut text).unwrap();
        call_result(&value)
    }

    fn one_block(block: serde_json::Value) -> ShownBlock {
        let mut shown = render(json!({"content": [block]})).unwrap();
        assert_eq!(shown.content.len(), 1);
        shown.content.remove(0)
    }

    fn note(block: serde_json::Value) -> String {
        match one_block(block) {
            ShownBlock::Omitted { text } => text,
            other => panic!("expected a note, got {other:?}"),
        }
    }

    fn image_block(kind_bytes: ImageKind, mime: &str) -> serde_json::Value {
        json!({"type": "image", "mimeType": mime, "data": STANDARD.encode(sample(kind_bytes))})
    }

    #[test]
    fn result_type_absent_or_complete_is_fine() {
        assert!(render(json!({"content": []})).is_ok());
        assert!(render(json!({"content": [], "resultType": "complete"})).is_ok());
    }

    #[test]
    fn result_type_incomplete_breaks_the_call() {
        assert_eq!(
            render(json!({"content": [], "resultType": "incomplete"})),
            Err(ResultError::BadResultType("\"incomplete\"".into()))
        );
        let numeric = render(json!({"content": [], "resultType": 1})).unwrap_err();
        assert_eq!(numeric, ResultError::BadResultType("a number".into()));
        assert_eq!(numeric.crash_kind(), Some("bad_result_type"));
        assert_eq!(ResultError::Invalid(String::new()).crash_kind(), None);
    }

    #[test]
    fn a_result_without_a_content_array_is_invalid() {
        assert!(matches!(render(json!({})), Err(ResultError::Invalid(_))));
        assert!(matches!(
            render(json!({"content": "hi"})),
            Err(ResultError::Invalid(_))
        ));
        assert!(matches!(render(json!([])), Err(ResultError::Invalid(_))));
        assert_eq!(
            render(json!({"content": [{"type": "text", "text": "a"}, "b"]})),
            Err(ResultError::Invalid(
                "content block 1 is a string, not an object".into()
            ))
        );
    }

    #[test]
    fn text_is_shown_as_is() {
        assert_eq!(
            one_block(json!({"type": "text", "text": "Hello, \"Ada\"!\n"})),
            ShownBlock::Text {
                text: "Hello, \"Ada\"!\n".into()
            }
        );
        assert!(note(json!({"type": "text"})).contains("without text"));
    }

    #[test]
    fn images_of_the_four_formats_are_accepted() {
        for (kind, mime) in [
            (ImageKind::Png, "image/png"),
            (ImageKind::Jpeg, "image/jpeg"),
            (ImageKind::Gif, "image/gif"),
            (ImageKind::Webp, "image/webp"),
        ] {
            assert_eq!(
                one_block(image_block(kind, mime)),
                ShownBlock::Image {
                    mime_type: mime.into(),
                    data: STANDARD.encode(sample(kind)),
                }
            );
        }
    }

    #[test]
    fn an_image_with_the_wrong_magic_is_omitted() {
        let block = json!({"type": "image", "mimeType": "image/png",
                           "data": STANDARD.encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>")});
        assert!(note(block).contains("not a PNG, JPEG, GIF or WebP image"));
    }

    #[test]
    fn an_image_whose_mime_type_disagrees_is_omitted() {
        assert_eq!(
            note(image_block(ImageKind::Gif, "image/png")),
            "an image was left out: it says image/png but its data is image/gif"
        );
        assert!(note(image_block(ImageKind::Png, "image/bmp")).contains("not PNG"));
    }

    #[test]
    fn an_image_with_bad_base64_is_omitted() {
        let block = json!({"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo*"});
        assert!(note(block).contains("not valid base64"));
        assert!(note(json!({"type": "image", "mimeType": "image/png"})).contains("no data"));
    }

    #[test]
    fn a_volume_link_is_decoded() {
        assert_eq!(
            one_block(
                json!({"type": "resource_link", "uri": "volume:///tmp/chart%20a.png",
                             "name": "chart a.png"})
            ),
            ShownBlock::VolumeLink {
                uri: "volume:///tmp/chart%20a.png".into(),
                path: "tmp/chart a.png".into(),
            }
        );
    }

    #[test]
    fn a_volume_link_with_dot_dot_is_omitted() {
        let text = note(json!({"type": "resource_link", "uri": "volume:///tmp/../../etc/passwd"}));
        assert!(text.contains("invalid"), "{text}");
    }

    #[test]
    fn a_volume_link_with_an_encoded_slash_is_omitted() {
        let text = note(json!({"type": "resource_link", "uri": "volume:///tmp%2F..%2F..%2Fetc"}));
        assert!(text.contains("invalid"), "{text}");
    }

    #[test]
    fn other_links_become_one_line() {
        assert_eq!(
            one_block(
                json!({"type": "resource_link", "uri": "https://example.com/r.pdf",
                             "name": "report"})
            ),
            ShownBlock::Link {
                text: "report: https://example.com/r.pdf".into()
            }
        );
        assert_eq!(
            one_block(json!({"type": "resource_link", "uri": "https://example.com/r.pdf"})),
            ShownBlock::Link {
                text: "https://example.com/r.pdf".into()
            }
        );
    }

    #[test]
    fn audio_and_embedded_resources_are_omitted() {
        assert_eq!(
            note(json!({"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="})),
            "an audio block was left out"
        );
        assert_eq!(
            note(json!({"type": "resource", "resource": {"uri": "x:y", "text": "t"}})),
            "a resource block was left out"
        );
        assert!(note(json!({"text": "untyped"})).contains("without a type"));
    }

    #[test]
    fn structured_content_and_is_error_are_carried() {
        let shown = render(json!({
            "content": [{"type": "text", "text": "{\"message\":\"Hello, Ada!\"}"}],
            "structuredContent": {"message": "Hello, Ada!", "n": [1, 2.5]},
            "isError": true,
        }))
        .unwrap();
        assert_eq!(
            shown.structured,
            Some(json!({"message": "Hello, Ada!", "n": [1, 2.5]}))
        );
        assert!(shown.is_error);
        let plain = render(json!({"content": []})).unwrap();
        assert_eq!(plain.structured, None);
        assert!(!plain.is_error);
        assert!(matches!(
            render(json!({"content": [], "isError": "yes"})),
            Err(ResultError::Invalid(_))
        ));
    }

    #[test]
    fn shown_results_serialize_as_the_blocks_the_model_is_shown() {
        let shown = CallResult {
            content: vec![
                ShownBlock::Text { text: "t".into() },
                ShownBlock::VolumeLink {
                    uri: "volume:///a".into(),
                    path: "a".into(),
                },
            ],
            structured: None,
            is_error: false,
        };
        assert_eq!(
            serde_json::to_value(&shown).unwrap(),
            json!({"content": [{"type": "text", "text": "t"},
                               {"type": "text", "text": "volume:///a could not be read"}],
                   "isError": false})
        );
        let image = CallResult {
            content: vec![ShownBlock::Image {
                mime_type: "image/png".into(),
                data: "AAAA".into(),
            }],
            structured: Some(json!({"k": 1})),
            is_error: true,
        };
        assert_eq!(
            serde_json::to_value(&image).unwrap(),
            json!({"content": [{"type": "image", "mimeType": "image/png", "data": "AAAA"}],
                   "structuredContent": {"k": 1}, "isError": true})
        );
    }
}
