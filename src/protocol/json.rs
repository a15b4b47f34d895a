//! Small helpers over simd-json's borrowed values, shared by the files of this module: the
//! conversion to an owned `serde_json::Value` for what leaves the module, and the name of a
//! value's type for error messages. Parsing itself lives in [`super::line`].

use simd_json::prelude::*;
use simd_json::{BorrowedValue, StaticNode};

/// An owned `serde_json` copy of `value`.
///
/// Recursion is bounded: every value reaching here came through [`super::parse_line`], which
/// refuses lines nested deeper than [`super::MAX_NESTING`].
pub(crate) fn to_serde(value: &BorrowedValue<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        BorrowedValue::Static(StaticNode::Null) => J::Null,
        BorrowedValue::Static(StaticNode::Bool(b)) => J::Bool(*b),
        BorrowedValue::Static(StaticNode::I64(n)) => J::from(*n),
        BorrowedValue::Static(StaticNode::U64(n)) => J::from(*n),
        // JSON text cannot spell a non-finite number, so `from_f64` only fails on values
        // that never come out of a parser; null is the honest stand-in.
        BorrowedValue::Static(StaticNode::F64(f)) => {
            serde_json::Number::from_f64(*f).map_or(J::Null, J::Number)
        }
        BorrowedValue::String(s) => J::String(s.to_string()),
        BorrowedValue::Array(items) => J::Array(items.iter().map(to_serde).collect()),
        BorrowedValue::Object(members) => J::Object(
            members
                .iter()
                .map(|(k, v)| (k.to_string(), to_serde(v)))
                .collect(),
        ),
    }
}

/// "a string", "an object", …: the type of `value` for a message.
pub(crate) fn type_name(value: &BorrowedValue<'_>) -> &'static str {
    match value.value_type() {
        ValueType::Null => "null",
        ValueType::Bool => "a boolean",
        ValueType::String => "a string",
        ValueType::Array => "an array",
        ValueType::Object => "an object",
        _ => "a number",
    }
}

/// Guest text is quoted in messages cut by the crate's one [`crate::clip`].
pub(crate) use crate::clip;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_to_serde_keeps_every_kind_of_value() {
        let mut text =
            br#"{"a":[null,true,-3,18446744073709551615,2.5,"x\u00e9"],"b":{}}"#.to_vec();
        let value = simd_json::to_borrowed_value(&mut text).unwrap();
        assert_eq!(
            to_serde(&value),
            serde_json::json!({"a": [null, true, -3, 18446744073709551615u64, 2.5, "xé"], "b": {}})
        );
    }

    #[test]
    fn type_names_read_as_phrases() {
        let mut text = br#"[1,"s",{},[],null,false,1.5]"#.to_vec();
        let value = simd_json::to_borrowed_value(&mut text).unwrap();
        let names: Vec<_> = value.as_array().unwrap().iter().map(type_name).collect();
        assert_eq!(
            names,
            [
                "a number",
                "a string",
                "an object",
                "an array",
                "null",
                "a boolean",
                "a number"
            ]
        );
    }

    #[test]
    fn clip_cuts_long_text_on_a_character_boundary() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 2), "hi");
    }
}
