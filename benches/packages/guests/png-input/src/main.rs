//! `png-input PATH`: writes the png bench package's input image, a 640×480 RGB picture (a sky
//! gradient, a sun, rolling hills, and a grain of pseudo-random noise so that it compresses as a
//! photograph does, not as a flat drawing), encoded as PNG by the `image` crate. The same bytes
//! every time: the picture is a function of its pixel coordinates and a fixed seed.
//!
//! A native program that `build.sh` runs, not a guest; it writes only the file it is given.

use image::{Rgb, RgbImage};

const WIDTH: u32 = 640;
const HEIGHT: u32 = 480;

/// The noise generator's seed: any fixed number gives a reproducible picture.
const SEED: u64 = 0x0070_6e67_2026_0001;

fn main() {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: png-input PATH");
        std::process::exit(2);
    };
    if let Err(err) = picture().save_with_format(&path, image::ImageFormat::Png) {
        eprintln!("png-input: cannot write {}: {err}", path.to_string_lossy());
        std::process::exit(1);
    }
}

/// The picture.
fn picture() -> RgbImage {
    let mut noise = SEED;
    RgbImage::from_fn(WIDTH, HEIGHT, |x, y| {
        // xorshift64: a few bits of grain per pixel.
        noise ^= noise << 13;
        noise ^= noise >> 7;
        noise ^= noise << 17;
        let grain = (noise % 17) as i32 - 8;
        let [r, g, b] = scene(x as f32 / WIDTH as f32, y as f32 / HEIGHT as f32);
        Rgb([r, g, b].map(|channel| (channel as i32 + grain).clamp(0, 255) as u8))
    })
}

/// The colour of the scene at (`u`, `v`), both from 0 (left, top) to 1.
fn scene(u: f32, v: f32) -> [u8; 3] {
    let hill = 0.62 + 0.08 * (u * 9.0).sin() + 0.04 * (u * 23.0 + 1.0).sin();
    if v > hill {
        let depth = (v - hill) / (1.0 - hill);
        return [
            (40.0 + 60.0 * depth) as u8,
            (110.0 + 50.0 * (1.0 - depth)) as u8,
            (30.0 + 20.0 * depth) as u8,
        ];
    }
    let (du, dv) = (u - 0.72, (v - 0.25) * 0.75);
    if du * du + dv * dv < 0.006 {
        return [250, 220, 120];
    }
    [
        (90.0 + 120.0 * v) as u8,
        (140.0 + 80.0 * v) as u8,
        (230.0 - 20.0 * v) as u8,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_picture_is_the_same_every_time() {
        assert_eq!(picture().as_raw(), picture().as_raw());
        assert_eq!(picture().dimensions(), (WIDTH, HEIGHT));
    }

    #[test]
    fn the_picture_has_sky_sun_and_hills() {
        assert!(scene(0.1, 0.1)[2] > 200, "blue sky at the top");
        assert_eq!(scene(0.72, 0.25), [250, 220, 120], "the sun");
        assert!(
            scene(0.5, 0.95)[1] > scene(0.5, 0.95)[2],
            "green hills at the bottom"
        );
    }
}
