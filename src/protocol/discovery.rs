//! The answers of discovery: `server/discover` (does the guest speak our revision and offer
//! tools?) and one page of `tools/list` (the tools, and the cursor of the next page).
//!
//! This file checks only the shape of the answers. The tool rules (how many tools, their
//! names, sizes of descriptions and schemas) belong to the package check that consumes the
//! pages, and following cursors (up to 16 pages) belongs to the caller.

use simd_json::prelude::*;
use simd_json::BorrowedValue;

use super::json::{clip, to_serde, type_name};
use super::PROTOCOL_VERSION;

/// A discovery answer the host cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The `server/discover` result does not list the revision hako speaks.
    #[error("the server does not support revision {PROTOCOL_VERSION} (it offers {offered})")]
    UnsupportedVersion {
        /// The revisions it listed, comma-separated, or `none`.
        offered: String,
    },
    /// The `server/discover` result has no `capabilities.tools` object.
    #[error("the server does not offer the tools capability")]
    NoTools,
    /// The answer is not shaped as MCP says; the text says how.
    #[error("{method} answer is malformed: {why}")]
    Malformed {
        /// The request it answers.
        method: &'static str,
        /// What is wrong with it.
        why: String,
    },
}

fn malformed(method: &'static str, why: impl Into<String>) -> DiscoveryError {
    DiscoveryError::Malformed {
        method,
        why: why.into(),
    }
}

/// Checks the `result` of `server/discover`: an object whose `supportedVersions` array holds
/// [`PROTOCOL_VERSION`] and whose `capabilities.tools` is an object.
pub fn discover_result(result: &BorrowedValue<'_>) -> Result<(), DiscoveryError> {
    const METHOD: &str = "server/discover";
    if !result.is_object() {
        return Err(malformed(
            METHOD,
            format!("the result is {}, not an object", type_name(result)),
        ));
    }
    let Some(versions) = result.get("supportedVersions").and_then(|v| v.as_array()) else {
        return Err(malformed(METHOD, "it has no \"supportedVersions\" array"));
    };
    if !versions
        .iter()
        .any(|v| v.as_str() == Some(PROTOCOL_VERSION))
    {
        let offered: Vec<String> = versions
            .iter()
            .take(8)
            .map(|v| match v.as_str() {
                Some(s) => format!("{:?}", clip(s, 32)),
                None => type_name(v).to_string(),
            })
            .collect();
        return Err(DiscoveryError::UnsupportedVersion {
            offered: if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(", ")
            },
        });
    }
    match result.get("capabilities").and_then(|c| c.get("tools")) {
        Some(tools) if tools.is_object() => Ok(()),
        _ => Err(DiscoveryError::NoTools),
    }
}

/// Reads one page of `tools/list`: the tools as owned JSON, and the cursor of the next page
/// when there is one (a `null` cursor means there is none).
pub fn tools_list_page(
    result: &BorrowedValue<'_>,
) -> Result<(Vec<serde_json::Value>, Option<String>), DiscoveryError> {
    const METHOD: &str = "tools/list";
    if !result.is_object() {
        return Err(malformed(
            METHOD,
            format!("the result is {}, not an object", type_name(result)),
        ));
    }
    let Some(tools) = result.get("tools").and_then(|t| t.as_array()) else {
        return Err(malformed(METHOD, "it has no \"tools\" array"));
    };
    let mut owned = Vec::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        if !tool.is_object() {
            return Err(malformed(
                METHOD,
                format!("tool {index} is {}, not an object", type_name(tool)),
            ));
        }
        owned.push(to_serde(tool));
    }
    let next = match result.get("nextCursor") {
        None => None,
        Some(cursor) if cursor.is_null() => None,
        Some(cursor) => match cursor.as_str() {
            Some(cursor) => Some(cursor.to_string()),
            None => {
                return Err(malformed(
                    METHOD,
                    format!("\"nextCursor\" is {}, not a string", type_name(cursor)),
                ))
            }
        },
    };
    Ok((owned, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn discover(result: serde_json::Value) -> Result<(), DiscoveryError> {
        let mut text = serde_json::to_vec(&result).unwrap();
        let value = simd_json::to_borrowed_value(&mut text).unwrap();
        discover_result(&value)
    }

    type Page = (Vec<serde_json::Value>, Option<String>);

    fn page(result: serde_json::Value) -> Result<Page, DiscoveryError> {
        let mut text = serde_json::to_vec(&result).unwrap();
        let value = simd_json::to_borrowed_value(&mut text).unwrap();
        tools_list_page(&value)
    }

    #[test]
    fn the_seed_discover_answer_is_accepted() {
        assert_eq!(
            discover(json!({"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}})),
            Ok(())
        );
        assert_eq!(
            discover(json!({"supportedVersions": ["2025-06-18", "2026-07-28"],
                            "capabilities": {"tools": {"listChanged": false}, "logging": {}}})),
            Ok(())
        );
    }

    #[test]
    fn a_server_without_our_revision_is_refused_naming_what_it_offers() {
        assert_eq!(
            discover(
                json!({"supportedVersions": ["2025-06-18", 3], "capabilities": {"tools": {}}})
            ),
            Err(DiscoveryError::UnsupportedVersion {
                offered: "\"2025-06-18\", a number".into()
            })
        );
        assert_eq!(
            discover(json!({"supportedVersions": [], "capabilities": {"tools": {}}})),
            Err(DiscoveryError::UnsupportedVersion {
                offered: "none".into()
            })
        );
    }

    #[test]
    fn a_server_without_the_tools_capability_is_refused() {
        for capabilities in [json!({}), json!({"tools": true}), json!(null)] {
            assert_eq!(
                discover(
                    json!({"supportedVersions": ["2026-07-28"], "capabilities": capabilities})
                ),
                Err(DiscoveryError::NoTools)
            );
        }
    }

    #[test]
    fn malformed_discover_answers_are_refused() {
        assert!(matches!(
            discover(json!([])),
            Err(DiscoveryError::Malformed { .. })
        ));
        assert!(matches!(
            discover(json!({"supportedVersions": "2026-07-28", "capabilities": {"tools": {}}})),
            Err(DiscoveryError::Malformed { .. })
        ));
    }

    #[test]
    fn a_tools_page_hands_over_the_tools_and_the_cursor() {
        let greet = json!({"name": "greet", "description": "Greet someone by name.",
                           "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}});
        assert_eq!(
            page(json!({"tools": [greet.clone()]})),
            Ok((vec![greet.clone()], None))
        );
        assert_eq!(
            page(json!({"tools": [greet.clone()], "nextCursor": "p2"})),
            Ok((vec![greet], Some("p2".into())))
        );
        assert_eq!(
            page(json!({"tools": [], "nextCursor": null})),
            Ok((vec![], None))
        );
    }

    #[test]
    fn malformed_tools_pages_are_refused() {
        assert!(matches!(
            page(json!({})),
            Err(DiscoveryError::Malformed { .. })
        ));
        assert!(matches!(
            page(json!({"tools": ["greet"]})),
            Err(DiscoveryError::Malformed { .. })
        ));
        assert!(matches!(
            page(json!({"tools": [], "nextCursor": 2})),
            Err(DiscoveryError::Malformed { .. })
        ));
        assert_eq!(
            page(json!({"tools": {}})).unwrap_err().to_string(),
            "tools/list answer is malformed: it has no \"tools\" array"
        );
    }
}
