//! Long guest lines parsed with `serde_json` into the same [`BorrowedValue`] simd-json builds.
//!
//! simd-json copies a line into its own padded buffer, indexes every byte, then copies each
//! string back into the line: on a line that is mostly one long string without escapes (an
//! inline image's base64), that is slower than `serde_json`'s single scan (`benches/codec.rs`:
//! 126 against 77 µs on a 200 KiB image answer), while on short lines and on text full of
//! escapes simd-json is the faster one. [`super::line::parse_line`] therefore hands the lines
//! that [`suits`] picks (long, and sparse in escapes) to [`parse`], and everything after the
//! parse reads the same value type either way.
//!
//! The verdict on a line must not depend on which parser read it, so this path only ever
//! *accepts* a line simd-json reads to the same value, and gives up (returns `None`, and the
//! caller parses the line again with simd-json, whose verdict and error stand) on anything
//! else:
//! - a line `serde_json` refuses: its nesting limit, a lone surrogate, trailing text;
//! - any number that is not an integer within `i64`/`u64`: the two parsers round some floats
//!   differently in the last bit, `serde_json` reads `-0` and integers beyond `u64` as floats
//!   where simd-json has `0` and a refusal;
//! - an object that names a member twice (simd-json keeps both).
//!
//! Integers are `U64` when not negative and `I64` otherwise, and strings without escapes
//! borrow from the line, as on simd-json's tape. Giving up costs the `serde_json` scan up to
//! the first such thing.
//!
//! This file does not sort lines into answers or faults; that is [`super::line`].

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use simd_json::value::borrowed::Object;
use simd_json::{BorrowedValue, StaticNode};

/// Lines shorter than this are always parsed by simd-json, which is faster on them.
pub const LONG_LINE: usize = 4 * 1024;

/// The bytes read from the middle of a long line to see what its bulk is.
const SAMPLE: usize = 4096;

/// At most this many backslashes and quotes in the [`SAMPLE`] make the middle of a line one
/// long string sparse in escapes.
const SPARSE_ESCAPES: usize = 4;

/// Whether `serde_json` reads `line` faster than simd-json: it is [`LONG_LINE`] bytes or more
/// and its middle, where its bulk is, lies within one long string with at most
/// [`SPARSE_ESCAPES`] backslashes and quotes in [`SAMPLE`] bytes. `benches/codec.rs` measures
/// the three kinds of long line: on base64 `serde_json` wins from 4 KiB on, on prose (an
/// escape every 20 bytes) and on structured content (a quote every few bytes) simd-json wins
/// at every size. The choice only moves time: both paths reach the same verdict.
pub fn suits(line: &[u8]) -> bool {
    if line.len() < LONG_LINE {
        return false;
    }
    let start = (line.len() - SAMPLE) / 2;
    memchr::memchr2_iter(b'\\', b'"', &line[start..start + SAMPLE])
        .nth(SPARSE_ESCAPES)
        .is_none()
}

/// Parses `line` with `serde_json` into a value borrowing from it, or `None` where
/// `serde_json` refuses it or it holds what simd-json might read differently (see the module
/// docs): then the caller parses it with simd-json.
pub fn parse(line: &[u8]) -> Option<BorrowedValue<'_>> {
    let mut reader = serde_json::Deserializer::from_slice(line);
    let value = ValueSeed.deserialize(&mut reader).ok()?;
    reader.end().ok()?;
    Some(value)
}

/// Builds one [`BorrowedValue`] from whatever `serde_json` reads next.
struct ValueSeed;

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = BorrowedValue<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// An object key, borrowed from the line when it holds no escape.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

impl<'de> Visitor<'de> for ValueSeed {
    type Value = BorrowedValue<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(BorrowedValue::Static(StaticNode::Null))
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(BorrowedValue::Static(StaticNode::Bool(v)))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(BorrowedValue::Static(StaticNode::I64(v)))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(BorrowedValue::Static(StaticNode::U64(v)))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Err(E::custom("a float, left to simd-json"))
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(BorrowedValue::String(Cow::Borrowed(v)))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(BorrowedValue::String(Cow::Owned(v.to_owned())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ValueSeed)? {
            items.push(item);
        }
        Ok(BorrowedValue::Array(Box::new(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Object::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if members
                .insert(key, map.next_value_seed(ValueSeed)?)
                .is_some()
            {
                return Err(A::Error::custom("a member named twice, left to simd-json"));
            }
        }
        Ok(BorrowedValue::Object(Box::new(members)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simd_json::prelude::*;

    /// What simd-json reads `text` as (`None` where it refuses it), and what this path does.
    fn both(text: &str) -> (Option<BorrowedValue<'_>>, Option<BorrowedValue<'_>>) {
        let mut buffer = text.as_bytes().to_vec();
        let there = simd_json::to_borrowed_value(&mut buffer)
            .ok()
            .map(|v| v.into_static());
        (there, parse(text.as_bytes()))
    }

    #[test]
    fn a_line_this_path_takes_reads_as_simd_json_reads_it() {
        let taken = [
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
            r#"{"b":[true,false,null],"c":{"a\"b":"x\ny","\u00e9":"\ud83d\ude00","":"\u0000"}}"#,
            "[0,9223372036854775807,9223372036854775808,18446744073709551615,-1]",
            "[-9223372036854775808]",
            " \t\r[\"\u{7f}\"] \t",
            r#"{"nested":[[[[{"deep":[[["x"]]]}]]]]}"#,
        ];
        for line in taken {
            let (there, here) = both(line);
            assert!(there.is_some(), "simd-json reads {line}");
            assert_eq!(here, there, "{line}");
        }
        let mut many = String::from("{");
        for i in 0..100 {
            many.push_str(&format!("\"k{i}\":{i},"));
        }
        many.push_str("\"last\":[]}");
        let (there, here) = both(&many);
        assert!(here.is_some());
        assert_eq!(here, there, "an object past the size where it is hashed");
    }

    #[test]
    fn long_lines_sparse_in_escapes_suit_serde_json() {
        let answer = |text: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":"call-1","result":{{"content":[{{"type":"text","text":"{text}"}}]}}}}"#
            )
        };
        let base64 = "iVBORw0KGgo+/".repeat(4 * LONG_LINE / 13);
        let prose = "a \"quoted\" line\n".repeat(4 * LONG_LINE / 18);
        assert!(suits(answer(&base64).as_bytes()));
        assert!(!suits(answer(&prose).as_bytes()));
        assert!(!suits(answer(&base64[..LONG_LINE / 2]).as_bytes()));
        let mut sparse = base64.clone();
        sparse.insert_str(sparse.len() / 2, "\\n\\n\\n\\n");
        assert!(suits(answer(&sparse).as_bytes()));
        sparse.insert_str(sparse.len() / 2, "\\t");
        assert!(!suits(answer(&sparse).as_bytes()));
    }

    #[test]
    fn a_string_without_escapes_borrows_from_the_line() {
        let line = br#"{"data":"aGVsbG8=","text":"a\"b"}"#;
        let value = parse(line).expect("JSON");
        assert!(matches!(
            value.get("data"),
            Some(BorrowedValue::String(Cow::Borrowed("aGVsbG8=")))
        ));
        assert!(matches!(
            value.get("text"),
            Some(BorrowedValue::String(Cow::Owned(s))) if s == "a\"b"
        ));
    }

    #[test]
    fn what_the_parsers_might_read_apart_is_left_to_simd_json() {
        let left = [
            // Floats: serde_json rounds the first two a bit off, reads -0 as -0.0 and an
            // integer beyond u64 as a float where simd-json refuses it.
            "[2.2250738585072011e-308]",
            "[0.000000000000000000000000000000000000000001]",
            "[-0]",
            "[100000000000000000000000000000]",
            "[1.5]",
            // simd-json keeps both members.
            r#"{"a":1,"a":2}"#,
            // Refused by serde_json (and by simd-json, whose error then stands).
            r#"{"a":1} {"b":2}"#,
            r#"["\ud800"]"#,
            "not json",
            "[-9223372036854775809]",
        ];
        for line in left {
            assert_eq!(both(line).1, None, "{line}");
        }
        let too_deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(parse(too_deep.as_bytes()), None);
    }
}
