//! The png package: one tool, `thumbnail`, that reads a PNG (by default the package's own
//! `/package/input.png`), decodes it, resizes it (Lanczos3), blurs it (Gaussian), rotates it
//! and encodes the result as PNG, all with the `image` crate (its `png` format only). It answers
//! the new image as an image block and its sizes as JSON, so a bench of it measures a module
//! doing real floating-point and compression work on a file of its read-only assets.
//!
//! The input image is not committed: `build.sh` writes it with the corpus's `png-input`
//! program, the same bytes every time. This file owns the tool; the protocol is the corpus's
//! `abi` crate.

use std::io::Cursor;

use image::imageops::FilterType;
use image::{DynamicImage, ImageFormat};
use serde_json::{json, Value};

/// The image read when the call names none: the package's asset.
const DEFAULT_PATH: &str = "/package/input.png";

/// The widest thumbnail made.
const MAX_WIDTH: u64 = 1024;

/// The largest Gaussian blur (sigma, in pixels).
const MAX_BLUR: f64 = 8.0;

fn main() {
    abi::serve(
        "png",
        &[abi::Tool {
            description: thumbnail_tool(),
            call: thumbnail,
        }],
    );
}

fn thumbnail_tool() -> Value {
    json!({
        "name": "thumbnail",
        "description": "Make a blurred, rotated thumbnail of a PNG image.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The PNG to read (default /package/input.png)."
                },
                "width": {
                    "type": "integer", "minimum": 1, "maximum": MAX_WIDTH,
                    "description": "The thumbnail's width before rotation (default 160); \
                        the height keeps the aspect ratio."
                },
                "blur": {
                    "type": "number", "minimum": 0, "maximum": MAX_BLUR,
                    "description": "Gaussian blur sigma in pixels (default 1; 0 for none)."
                },
                "rotate": {
                    "type": "integer", "enum": [0, 90, 180, 270],
                    "description": "Degrees clockwise (default 90)."
                }
            }
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "input": {"type": "object"},
                "output": {"type": "object"}
            }
        }
    })
}

/// What a call asked for.
struct Request {
    path: String,
    width: u32,
    blur: f32,
    rotate: u64,
}

impl Request {
    fn from_arguments(arguments: &Value) -> Result<Self, String> {
        let path = match arguments.get("path") {
            None | Some(Value::Null) => DEFAULT_PATH.to_string(),
            Some(Value::String(path)) => path.clone(),
            Some(_) => return Err("path must be a string".into()),
        };
        let width = abi::u64_argument(arguments, "width", Some(160))?;
        if !(1..=MAX_WIDTH).contains(&width) {
            return Err(format!("width must be from 1 to {MAX_WIDTH}"));
        }
        let blur = match arguments.get("blur") {
            None | Some(Value::Null) => 1.0,
            Some(value) => value
                .as_f64()
                .filter(|blur| (0.0..=MAX_BLUR).contains(blur))
                .ok_or_else(|| format!("blur must be a number from 0 to {MAX_BLUR}"))?,
        };
        let rotate = abi::u64_argument(arguments, "rotate", Some(90))?;
        if ![0, 90, 180, 270].contains(&rotate) {
            return Err("rotate must be 0, 90, 180 or 270".into());
        }
        Ok(Self {
            path,
            width: width as u32,
            blur: blur as f32,
            rotate,
        })
    }
}

/// `thumbnail {path?, width?, blur?, rotate?}`.
fn thumbnail(arguments: &Value) -> Result<Value, String> {
    let request = Request::from_arguments(arguments)?;
    let input = std::fs::read(&request.path)
        .map_err(|err| format!("cannot read {}: {err}", request.path))?;
    let decoded = image::load_from_memory_with_format(&input, ImageFormat::Png)
        .map_err(|err| format!("{} is not a PNG image: {err}", request.path))?;
    let made = transform(&decoded, &request);
    let mut png = Vec::new();
    made.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
        .map_err(|err| format!("encoding the thumbnail: {err}"))?;
    let summary = json!({
        "input": {"width": decoded.width(), "height": decoded.height(), "bytes": input.len()},
        "output": {"width": made.width(), "height": made.height(), "bytes": png.len()},
    });
    Ok(abi::image_and_text(&png, summary))
}

/// Resizes `image` to the request's width (keeping its aspect ratio), blurs and rotates it.
fn transform(image: &DynamicImage, request: &Request) -> DynamicImage {
    let height = (u64::from(image.height()) * u64::from(request.width))
        .div_ceil(u64::from(image.width().max(1)))
        .clamp(1, u64::from(u32::MAX)) as u32;
    let mut made = image.resize_exact(request.width, height, FilterType::Lanczos3);
    if request.blur > 0.0 {
        made = made.blur(request.blur);
    }
    match request.rotate {
        90 => made.rotate90(),
        180 => made.rotate180(),
        270 => made.rotate270(),
        _ => made,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(arguments: Value) -> Request {
        Request::from_arguments(&arguments).expect("the arguments are good")
    }

    #[test]
    fn a_thumbnail_keeps_the_aspect_ratio_and_turns_with_the_rotation() {
        let image = DynamicImage::new_rgb8(640, 480);
        let made = transform(&image, &request(json!({"width": 160})));
        assert_eq!((made.width(), made.height()), (120, 160));
        let made = transform(
            &image,
            &request(json!({"width": 160, "rotate": 0, "blur": 0})),
        );
        assert_eq!((made.width(), made.height()), (160, 120));
    }

    #[test]
    fn a_thumbnail_of_a_file_is_an_image_block_and_a_summary() {
        let dir = std::env::temp_dir().join(format!("png-guest-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("in.png");
        DynamicImage::new_rgb8(64, 32).save(&path).unwrap();
        let result = thumbnail(&json!({"path": path.to_str().unwrap(), "width": 16})).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(result["content"][0]["type"], "image");
        assert_eq!(result["content"][0]["mimeType"], "image/png");
        assert_eq!(result["structuredContent"]["input"]["width"], 64);
        assert_eq!(result["structuredContent"]["output"]["width"], 8);
        assert_eq!(result["structuredContent"]["output"]["height"], 16);
    }

    #[test]
    fn bad_arguments_are_messages_for_the_model() {
        for (arguments, message) in [
            (json!({"width": 0}), "width must be from 1 to 1024"),
            (json!({"rotate": 45}), "rotate must be 0, 90, 180 or 270"),
            (json!({"blur": 9}), "blur must be a number from 0 to 8"),
            (json!({"path": 1}), "path must be a string"),
        ] {
            assert_eq!(
                Request::from_arguments(&arguments).err().as_deref(),
                Some(message)
            );
        }
        let missing = thumbnail(&json!({"path": "/no/such.png"})).unwrap_err();
        assert!(missing.starts_with("cannot read /no/such.png"), "{missing}");
    }
}
