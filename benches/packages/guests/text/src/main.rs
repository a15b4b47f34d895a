//! The text package: one tool, `find`, that runs regular expressions (`regex`, with its
//! Unicode tables) over a text and answers every match, with its position and capture groups,
//! as JSON (`serde_json`). Each call compiles its patterns afresh, as a package running one
//! instance per call must, so a bench of it measures a module of a realistic size (about
//! 1.5 MB) doing realistic work: building automata, scanning, and writing JSON.
//!
//! This file owns the tool; the protocol is the corpus's `abi` crate.

use regex::Regex;
use serde_json::{json, Map, Value};

/// The most patterns one call runs.
const MAX_PATTERNS: usize = 64;

/// The most matches answered per pattern unless the call says otherwise.
const DEFAULT_LIMIT: u64 = 100;

fn main() {
    abi::serve(
        env!("CARGO_PKG_NAME"),
        &[abi::Tool {
            description: find_tool(),
            call: find,
        }],
    );
}

fn find_tool() -> Value {
    json!({
        "name": "find",
        "description": "Find every match of each regular expression (Rust regex syntax) in a \
            text; answers each match's byte offsets, text and named capture groups.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The text to search."},
                "patterns": {
                    "type": "array", "items": {"type": "string"}, "maxItems": MAX_PATTERNS,
                    "description": "The regular expressions."
                },
                "limit": {
                    "type": "integer", "minimum": 0,
                    "description": "The most matches answered per pattern (default 100); \
                        every match is still counted."
                }
            },
            "required": ["text", "patterns"]
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "patterns": {"type": "array"},
                "total": {"type": "integer"}
            }
        }
    })
}

/// `find {text, patterns, limit?}`.
fn find(arguments: &Value) -> Result<Value, String> {
    let text = match arguments.get("text") {
        None | Some(Value::Null) => return Err("text is required".into()),
        Some(Value::String(text)) => text,
        Some(_) => return Err("text must be a string".into()),
    };
    let patterns = match arguments.get("patterns") {
        None | Some(Value::Null) => return Err("patterns is required".into()),
        Some(Value::Array(patterns)) => patterns,
        Some(_) => return Err("patterns must be an array of strings".into()),
    };
    if patterns.len() > MAX_PATTERNS {
        return Err(format!("at most {MAX_PATTERNS} patterns"));
    }
    let limit = abi::u64_argument(arguments, "limit", Some(DEFAULT_LIMIT))?;

    let mut answered = Vec::with_capacity(patterns.len());
    let mut total = 0;
    for (index, pattern) in patterns.iter().enumerate() {
        let pattern = pattern
            .as_str()
            .ok_or_else(|| format!("pattern {index} must be a string"))?;
        let regex = Regex::new(pattern).map_err(|err| format!("pattern {index}: {err}"))?;
        let found = matches(&regex, text, limit);
        total += found["count"].as_u64().unwrap_or(0);
        answered.push(found);
    }
    Ok(abi::structured(json!({
        "patterns": answered,
        "total": total,
    })))
}

/// Every match of `regex` in `text`, counted, the first `limit` described.
fn matches(regex: &Regex, text: &str, limit: u64) -> Value {
    let names: Vec<&str> = regex.capture_names().flatten().collect();
    let mut count = 0u64;
    let mut described = Vec::new();
    for captures in regex.captures_iter(text) {
        count += 1;
        if count > limit {
            continue;
        }
        let whole = captures.get(0).expect("group 0 is the whole match");
        let mut groups = Map::new();
        for name in &names {
            if let Some(group) = captures.name(name) {
                groups.insert(name.to_string(), Value::from(group.as_str()));
            }
        }
        let mut described_match = json!({
            "start": whole.start(),
            "end": whole.end(),
            "text": whole.as_str(),
        });
        if !groups.is_empty() {
            described_match["groups"] = Value::Object(groups);
        }
        described.push(described_match);
    }
    json!({
        "pattern": regex.as_str(),
        "count": count,
        "matches": described,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(arguments: Value) -> Value {
        find(&arguments).expect("the call succeeds")["structuredContent"].clone()
    }

    #[test]
    fn matches_come_with_offsets_and_named_groups() {
        let result = found(json!({
            "text": "ada@example.org wrote to bob@example.com",
            "patterns": [r"(?P<user>\w+)@(?P<host>[\w.]+)"],
        }));
        assert_eq!(result["total"], 2);
        let first = &result["patterns"][0]["matches"][0];
        assert_eq!(first["text"], "ada@example.org");
        assert_eq!(
            (first["start"].as_u64(), first["end"].as_u64()),
            (Some(0), Some(15))
        );
        assert_eq!(
            first["groups"],
            json!({"user": "ada", "host": "example.org"})
        );
    }

    #[test]
    fn unicode_classes_match_beyond_ascii() {
        let result = found(json!({"text": "café 東京 naïve", "patterns": [r"\w+"]}));
        let words: Vec<&str> = result["patterns"][0]["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        assert_eq!(words, ["café", "東京", "naïve"]);
    }

    #[test]
    fn the_limit_cuts_the_list_not_the_count() {
        let result = found(json!({"text": "a a a a", "patterns": ["a"], "limit": 2}));
        assert_eq!(result["patterns"][0]["count"], 4);
        assert_eq!(
            result["patterns"][0]["matches"].as_array().unwrap().len(),
            2
        );
    }

    #[test]
    fn a_bad_pattern_or_argument_is_a_message_for_the_model() {
        let err = find(&json!({"text": "x", "patterns": ["ok", "("]})).unwrap_err();
        assert!(err.starts_with("pattern 1: "), "{err}");
        assert_eq!(
            find(&json!({"patterns": []})).unwrap_err(),
            "text is required"
        );
        assert_eq!(
            find(&json!({"text": "x", "patterns": "a"})).unwrap_err(),
            "patterns must be an array of strings"
        );
    }
}
