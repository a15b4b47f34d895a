//! The data packages (`data-1m`, `data-8m`): one tool, `lookup`, that reads a few bytes of a
//! table of 1 MiB or 8 MiB held in the module's data section. The call does almost nothing; what
//! a bench of it measures is what the engine does with a module whose linear memory starts with
//! megabytes of data: loading it, and initialising (or mapping) that memory for every instance.
//!
//! The table is made by `build.rs` at build time and included as a static byte array, so it is
//! an active data segment of the module, not computed at run time. This file owns the tool; the
//! protocol is the corpus's `abi` crate.

use serde_json::{json, Value};

/// The table `build.rs` wrote: pseudo-random bytes, the package's size.
static TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/table.bin"));

/// The most bytes one lookup sums.
const MAX_COUNT: u64 = 4096;

fn main() {
    abi::serve(
        env!("CARGO_PKG_NAME"),
        &[abi::Tool {
            description: lookup_tool(),
            call: lookup,
        }],
    );
}

fn lookup_tool() -> Value {
    json!({
        "name": "lookup",
        "description": format!(
            "Read the byte at an offset of a {} MiB table, and a checksum of the bytes from there.",
            TABLE.len() >> 20
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "offset": {"type": "integer", "minimum": 0, "description": "Where to read."},
                "count": {
                    "type": "integer", "minimum": 1, "maximum": MAX_COUNT,
                    "description": "How many bytes the checksum covers (default 16)."
                }
            },
            "required": ["offset"]
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "offset": {"type": "integer"},
                "byte": {"type": "integer"},
                "count": {"type": "integer"},
                "checksum": {"type": "string"},
                "table_bytes": {"type": "integer"}
            }
        }
    })
}

/// `lookup {offset, count?}`: the byte at `offset` and the FNV-1a hash of `count` bytes from it.
fn lookup(arguments: &Value) -> Result<Value, String> {
    let offset = abi::u64_argument(arguments, "offset", None)?;
    let count = abi::u64_argument(arguments, "count", Some(16))?;
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(format!("count must be from 1 to {MAX_COUNT}"));
    }
    let start = usize::try_from(offset)
        .ok()
        .filter(|start| *start < TABLE.len())
        .ok_or_else(|| format!("offset must be below {}", TABLE.len()))?;
    let end = (start + count as usize).min(TABLE.len());
    let bytes = &TABLE[start..end];
    Ok(abi::structured(json!({
        "offset": offset,
        "byte": bytes[0],
        "count": bytes.len(),
        "checksum": format!("{:016x}", fnv1a(bytes)),
        "table_bytes": TABLE.len(),
    })))
}

/// The 64-bit FNV-1a hash of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_the_packages_size_and_is_not_blank() {
        let mib = env!("CARGO_PKG_NAME")
            .trim_start_matches("data-")
            .trim_end_matches('m');
        assert_eq!(TABLE.len() >> 20, mib.parse::<usize>().unwrap());
        let zeros = TABLE.iter().filter(|byte| **byte == 0).count();
        assert!(zeros < TABLE.len() / 128, "{zeros} zero bytes");
    }

    #[test]
    fn a_lookup_reads_the_byte_and_sums_the_bytes_after_it() {
        let result = lookup(&json!({"offset": 5, "count": 3})).unwrap();
        let found = &result["structuredContent"];
        assert_eq!(found["byte"], TABLE[5]);
        assert_eq!(found["count"], 3);
        assert_eq!(found["checksum"], format!("{:016x}", fnv1a(&TABLE[5..8])));
    }

    #[test]
    fn a_lookup_at_the_end_sums_what_is_left() {
        let last = TABLE.len() as u64 - 1;
        let result = lookup(&json!({"offset": last})).unwrap();
        assert_eq!(result["structuredContent"]["count"], 1);
    }

    #[test]
    fn offsets_and_counts_out_of_range_are_refused() {
        assert!(lookup(&json!({"offset": TABLE.len()})).is_err());
        assert!(lookup(&json!({"offset": 0, "count": 0})).is_err());
        assert!(lookup(&json!({"offset": -1})).is_err());
        assert_eq!(lookup(&json!({})).unwrap_err(), "offset is required");
    }
}
