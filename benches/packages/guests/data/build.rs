//! Writes the data packages' table into `OUT_DIR/table.bin`, for `main.rs` to include in the
//! module's data section: pseudo-random bytes (splitmix64 from a fixed seed), the same every
//! build, which no compressor or data-segment optimiser can shrink. Its size in MiB comes from
//! the package's name, `data-<MiB>m`, so the two data packages share this file and `main.rs`.
//!
//! It writes nothing outside `OUT_DIR` and reads nothing but the package's name.

use std::path::PathBuf;

/// The generator's seed: any fixed number gives a reproducible table.
const SEED: u64 = 0x5ab0_2026_0728_0001;

fn main() {
    let name = std::env::var("CARGO_PKG_NAME").expect("cargo names the package");
    let mib: usize = name
        .strip_prefix("data-")
        .and_then(|size| size.strip_suffix('m'))
        .and_then(|size| size.parse().ok())
        .unwrap_or_else(|| panic!("a data package is named data-<MiB>m, not {name}"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("table.bin"), table(mib << 20)).expect("OUT_DIR is writable");
    println!("cargo::rerun-if-changed=Cargo.toml");
}

/// `len` bytes of splitmix64's output from [`SEED`].
fn table(len: usize) -> Vec<u8> {
    let mut state = SEED;
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
