//! The package manifest, `subako-package.json`, and its rules.
//!
//! The manifest is a JSON object:
//!
//! | field | rule |
//! | --- | --- |
//! | `name` | required; 1 to 64 characters, the first of `a-z 0-9`, the rest of `a-z 0-9 _ -` (it names the package in the store and in URLs, so it must be safe as one path segment) |
//! | `version` | required; 1 to 64 bytes of `0-9 A-Z a-z . + -`, not starting with `.` (SemVer 2.0's characters: every SemVer version fits; the grammar is hako's, so that a version is safe as a path segment and no store name can be one; nothing is trimmed) |
//! | `abi` | required; the JSON number `1` (not `"1"`, not `1.0`) |
//! | `description` | optional; a string if present (`null` is refused) |
//!
//! Any other field is allowed and ignored, so that newer manifests still load here. The file
//! itself may be at most 64 KiB.
//!
//! This module only parses bytes into a [`Manifest`]; finding and reading the file is
//! [`super::load`]'s job.

use serde_json::{Map, Value};

use super::Problem;

/// The largest manifest accepted, in bytes.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024;
/// The longest package name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// The longest version, in bytes.
pub const MAX_VERSION_BYTES: usize = 64;

/// What a package says about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Parses a manifest, reporting every broken rule at once.
pub fn parse(bytes: &[u8]) -> Result<Manifest, Vec<Problem>> {
    let fields = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => {
            return Err(vec![Problem::new(
                "manifest.json",
                "subako-package.json must be a JSON object",
            )])
        }
        Err(error) => {
            return Err(vec![Problem::new(
                "manifest.json",
                format!("subako-package.json is not valid JSON: {error}"),
            )])
        }
    };

    let mut problems = Vec::new();
    let name = name(&fields, &mut problems);
    let version = version(&fields, &mut problems);
    abi(&fields, &mut problems);
    let description = description(&fields, &mut problems);

    match (name, version) {
        (Some(name), Some(version)) if problems.is_empty() => Ok(Manifest {
            name,
            version,
            description,
        }),
        _ => Err(problems),
    }
}

/// Whether `name` is a valid package name (see the module docs).
pub fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_NAME_CHARS
        && matches!(bytes[0], b'a'..=b'z' | b'0'..=b'9')
        && bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// Whether `version` is a valid version (see the module docs).
pub fn is_valid_version(version: &str) -> bool {
    (1..=MAX_VERSION_BYTES).contains(&version.len())
        && !version.starts_with('.')
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
}

fn name(fields: &Map<String, Value>, problems: &mut Vec<Problem>) -> Option<String> {
    match fields.get("name") {
        None => problems.push(Problem::new("manifest.name", "name is missing")),
        Some(Value::String(name)) if is_valid_name(name) => return Some(name.clone()),
        Some(Value::String(name)) => problems.push(Problem::new(
            "manifest.name",
            format!(
                "name {:?} must be 1 to 64 characters of a-z, 0-9, _ and -, starting with a letter or digit",
                crate::clip(name, 80)
            ),
        )),
        Some(_) => problems.push(Problem::new("manifest.name", "name must be a string")),
    }
    None
}

fn version(fields: &Map<String, Value>, problems: &mut Vec<Problem>) -> Option<String> {
    match fields.get("version") {
        None => problems.push(Problem::new("manifest.version", "version is missing")),
        Some(Value::String(version)) if is_valid_version(version) => {
            return Some(version.clone())
        }
        Some(Value::String(version)) => problems.push(Problem::new(
            "manifest.version",
            format!(
                "version {:?} must be 1 to {MAX_VERSION_BYTES} bytes of 0-9, A-Z, a-z, '.', '+' and \
                 '-', not starting with '.'",
                crate::clip(version, 80)
            ),
        )),
        Some(_) => problems.push(Problem::new("manifest.version", "version must be a string")),
    }
    None
}

fn abi(fields: &Map<String, Value>, problems: &mut Vec<Problem>) {
    match fields.get("abi") {
        None => problems.push(Problem::new(
            "manifest.abi",
            "abi is missing; it must be the number 1",
        )),
        Some(Value::Number(number)) if number.as_u64() == Some(1) => {}
        Some(other) => problems.push(Problem::new(
            "manifest.abi",
            format!(
                "abi is {}; it must be the number 1 (this host speaks ABI 1 only)",
                crate::clip(&other.to_string(), 80)
            ),
        )),
    }
}

fn description(fields: &Map<String, Value>, problems: &mut Vec<Problem>) -> Option<String> {
    match fields.get("description") {
        None => None,
        Some(Value::String(description)) => Some(description.clone()),
        Some(_) => {
            problems.push(Problem::new(
                "manifest.description",
                "description must be a string",
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(bytes: &str) -> Vec<&'static str> {
        parse(bytes.as_bytes())
            .unwrap_err()
            .into_iter()
            .map(|p| p.rule)
            .collect()
    }

    #[test]
    fn a_minimal_manifest_parses() {
        let manifest = parse(br#"{"name":"greet","version":"1.0.0","abi":1}"#).unwrap();
        assert_eq!(
            manifest,
            Manifest {
                name: "greet".into(),
                version: "1.0.0".into(),
                description: None
            }
        );
    }

    #[test]
    fn unknown_fields_are_ignored_and_description_is_kept() {
        let manifest = parse(
            br#"{"name":"g-1_x","version":"2","abi":1,"description":"Greets.","author":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(manifest.description.as_deref(), Some("Greets."));
        assert_eq!(manifest.name, "g-1_x");
    }

    #[test]
    fn a_missing_name_is_refused() {
        assert_eq!(rules(r#"{"version":"1","abi":1}"#), ["manifest.name"]);
    }

    #[test]
    fn abi_2_is_refused() {
        assert_eq!(
            rules(r#"{"name":"a","version":"1","abi":2}"#),
            ["manifest.abi"]
        );
    }

    #[test]
    fn abi_as_a_string_or_a_float_is_refused() {
        assert_eq!(
            rules(r#"{"name":"a","version":"1","abi":"1"}"#),
            ["manifest.abi"]
        );
        assert_eq!(
            rules(r#"{"name":"a","version":"1","abi":1.0}"#),
            ["manifest.abi"]
        );
        assert_eq!(rules(r#"{"name":"a","version":"1"}"#), ["manifest.abi"]);
    }

    #[test]
    fn bad_json_and_non_objects_are_refused() {
        assert_eq!(rules(r#"{"name":"a","#), ["manifest.json"]);
        assert_eq!(rules(r#"["name"]"#), ["manifest.json"]);
    }

    #[test]
    fn versions_follow_one_strict_grammar_and_are_never_trimmed() {
        for good in [
            "1",
            "1.0.0",
            "2.0.0-rc.1+build.5",
            "current",
            "0.1.0-alpha-2",
        ] {
            assert!(is_valid_version(good), "{good}");
        }
        let long = "1".repeat(MAX_VERSION_BYTES + 1);
        for bad in [
            "",
            " 1.0 ",
            "\u{a0}",
            " 0.1.0",
            ".staging-x",
            ".",
            "..",
            "a/b",
            "a\\b",
            "1_0",
            "é",
            long.as_str(),
        ] {
            assert!(!is_valid_version(bad), "{bad:?}");
            let manifest = format!(r#"{{"name":"a","version":{},"abi":1}}"#, Value::from(bad));
            assert_eq!(rules(&manifest), ["manifest.version"], "{bad:?}");
        }
    }

    #[test]
    fn every_broken_field_is_reported() {
        assert_eq!(
            rules(r#"{"name":"Bad Name","version":"a/b","abi":0,"description":3}"#),
            [
                "manifest.name",
                "manifest.version",
                "manifest.abi",
                "manifest.description"
            ]
        );
    }

    #[test]
    fn a_refusal_quotes_a_long_name_or_abi_clipped() {
        let manifest = serde_json::json!({
            "name": "N".repeat(60_000),
            "version": "1",
            "abi": ["x".repeat(60_000)],
        });
        let problems = parse(manifest.to_string().as_bytes()).unwrap_err();
        assert_eq!(problems.len(), 2);
        for problem in problems {
            assert!(problem.message.len() < 300, "{}", problem.message);
            assert!(problem.message.contains('…'), "{}", problem.message);
        }
    }

    #[test]
    fn names_follow_the_store_rule() {
        assert!(is_valid_name("a"));
        assert!(is_valid_name("0day_tool-2"));
        assert!(is_valid_name(&"x".repeat(64)));
        assert!(!is_valid_name(&"x".repeat(65)));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("-dash"));
        assert!(!is_valid_name("_under"));
        assert!(!is_valid_name("Upper"));
        assert!(!is_valid_name("dot.ted"));
        assert!(!is_valid_name("../x"));
    }

    #[test]
    fn versions_cannot_escape_a_folder() {
        assert!(is_valid_version("1.2.3-beta+build"));
        assert!(is_valid_version(&"9".repeat(64)));
        assert!(!is_valid_version(&"9".repeat(65)));
        assert!(!is_valid_version(""));
        assert!(!is_valid_version("."));
        assert!(!is_valid_version(".."));
        assert!(!is_valid_version("1/2"));
        assert!(!is_valid_version("1\\2"));
        assert!(!is_valid_version("1\n2"));
    }
}
