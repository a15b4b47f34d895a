//! The ABI 1 rules for the tools a package offers, applied to what discovery's `tools/list`
//! pages answered.
//!
//! | rule | limit |
//! | --- | --- |
//! | count | 1 to 64 tools |
//! | `name` | 1 to 64 characters of `a-z 0-9 _ -`, unique across the package |
//! | `description` | optional; a string of at most 1,024 characters (Unicode scalar values) |
//! | `inputSchema` | required; a JSON object with `"type": "object"` at the top, at most 64 KiB |
//! | `outputSchema` | optional; a JSON object, at most 64 KiB |
//! | all tools together | at most 256 KiB |
//!
//! Sizes are those of compact JSON serialization. Other fields (`title`, `annotations`, …)
//! are kept as they are. The first broken rule is reported, naming the tool by its index in
//! the discovered order (counting from 0) and its name when it has one.
//!
//! This module does not talk to the guest; upload runs discovery and hands the tools here.

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

/// The fewest tools a package may offer.
pub const MIN_TOOLS: usize = 1;
/// The most tools a package may offer.
pub const MAX_TOOLS: usize = 64;
/// The longest tool name, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The largest `inputSchema` or `outputSchema`, in bytes of compact JSON.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// The largest list of tools, in bytes of compact JSON.
pub const MAX_TOTAL_BYTES: usize = 256 * 1024;

/// One tool a package offers, as `tools/list` described it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Tool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    #[serde(
        rename = "outputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub output_schema: Option<Value>,
    /// Every other field, such as `title` or `annotations`, kept as it was.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Which tool broke a rule: its index in the discovered order, and its name if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRef {
    pub index: usize,
    pub name: Option<String>,
}

impl fmt::Display for ToolRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "tool {} ({name:?})", self.index),
            None => write!(f, "tool {}", self.index),
        }
    }
}

/// The tool rule that a package's tools broke.
#[derive(Debug, thiserror::Error)]
pub enum ToolRuleError {
    #[error("the package offers {count} tools; it must offer 1 to 64")]
    Count { count: usize },
    #[error("{tool}: a tool must be a JSON object")]
    NotAnObject { tool: ToolRef },
    #[error("{tool}: name must be 1 to 64 characters of a-z, 0-9, _ and -")]
    Name { tool: ToolRef },
    #[error("{tool}: the name is already used by tool {first}")]
    DuplicateName { tool: ToolRef, first: usize },
    #[error("{tool}: description must be a string")]
    DescriptionType { tool: ToolRef },
    #[error("{tool}: description is {chars} characters; at most 1,024 are allowed")]
    DescriptionLength { tool: ToolRef, chars: usize },
    #[error("{tool}: inputSchema must be a JSON object with \"type\": \"object\" at the top")]
    InputSchema { tool: ToolRef },
    #[error("{tool}: outputSchema must be a JSON object")]
    OutputSchema { tool: ToolRef },
    #[error("{tool}: {field} is {bytes} bytes; at most 64 KiB (65536 bytes) are allowed")]
    SchemaSize {
        tool: ToolRef,
        field: &'static str,
        bytes: usize,
    },
    #[error("the tools together are {bytes} bytes; at most 256 KiB (262144 bytes) are allowed")]
    TotalSize { bytes: usize },
}

impl ToolRuleError {
    /// A stable id of the broken rule, such as `"tools.count"` or `"tool.name"`.
    pub fn rule(&self) -> &'static str {
        match self {
            ToolRuleError::Count { .. } => "tools.count",
            ToolRuleError::NotAnObject { .. } => "tool.object",
            ToolRuleError::Name { .. } => "tool.name",
            ToolRuleError::DuplicateName { .. } => "tool.duplicate_name",
            ToolRuleError::DescriptionType { .. } | ToolRuleError::DescriptionLength { .. } => {
                "tool.description"
            }
            ToolRuleError::InputSchema { .. } => "tool.input_schema",
            ToolRuleError::OutputSchema { .. } => "tool.output_schema",
            ToolRuleError::SchemaSize { .. } => "tool.schema_size",
            ToolRuleError::TotalSize { .. } => "tools.total_size",
        }
    }
}

/// Applies every tool rule to the tools discovery found, in their discovered order.
pub fn validate_tools(tools: Vec<Value>) -> Result<Vec<Tool>, ToolRuleError> {
    if !(MIN_TOOLS..=MAX_TOOLS).contains(&tools.len()) {
        return Err(ToolRuleError::Count { count: tools.len() });
    }
    let total = compact_len(&Value::Array(tools.clone()));
    let mut first_index: HashMap<String, usize> = HashMap::new();
    let mut valid = Vec::with_capacity(tools.len());
    for (index, value) in tools.into_iter().enumerate() {
        let tool = check_tool(index, value)?;
        if let Some(&first) = first_index.get(&tool.name) {
            return Err(ToolRuleError::DuplicateName {
                tool: ToolRef {
                    index,
                    name: Some(tool.name),
                },
                first,
            });
        }
        first_index.insert(tool.name.clone(), index);
        valid.push(tool);
    }
    if total > MAX_TOTAL_BYTES {
        return Err(ToolRuleError::TotalSize { bytes: total });
    }
    Ok(valid)
}

fn check_tool(index: usize, value: Value) -> Result<Tool, ToolRuleError> {
    let Value::Object(mut fields) = value else {
        let tool = ToolRef { index, name: None };
        return Err(ToolRuleError::NotAnObject { tool });
    };
    let shown_name = fields
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let tool = ToolRef {
        index,
        name: shown_name.clone(),
    };
    let name = match shown_name {
        Some(name) if is_valid_name(&name) => name,
        _ => return Err(ToolRuleError::Name { tool }),
    };
    fields.remove("name");

    let description = match fields.remove("description") {
        None => None,
        Some(Value::String(text)) => {
            let chars = text.chars().count();
            if chars > MAX_DESCRIPTION_CHARS {
                return Err(ToolRuleError::DescriptionLength { tool, chars });
            }
            Some(text)
        }
        Some(_) => return Err(ToolRuleError::DescriptionType { tool }),
    };

    let input_schema = match fields.remove("inputSchema") {
        Some(schema) if schema.get("type") == Some(&Value::from("object")) => schema,
        _ => return Err(ToolRuleError::InputSchema { tool }),
    };
    schema_size(&tool, "inputSchema", &input_schema)?;

    let output_schema = match fields.remove("outputSchema") {
        None => None,
        Some(schema @ Value::Object(_)) => {
            schema_size(&tool, "outputSchema", &schema)?;
            Some(schema)
        }
        Some(_) => return Err(ToolRuleError::OutputSchema { tool }),
    };

    Ok(Tool {
        name,
        description,
        input_schema,
        output_schema,
        extra: fields,
    })
}

fn schema_size(tool: &ToolRef, field: &'static str, schema: &Value) -> Result<(), ToolRuleError> {
    let bytes = compact_len(schema);
    if bytes > MAX_SCHEMA_BYTES {
        return Err(ToolRuleError::SchemaSize {
            tool: tool.clone(),
            field,
            bytes,
        });
    }
    Ok(())
}

/// Whether `name` is a valid tool name.
pub fn is_valid_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

fn compact_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` into a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Value {
        json!({"name": name, "inputSchema": {"type": "object"}})
    }

    fn rule(tools: Vec<Value>) -> (&'static str, String) {
        let error = validate_tools(tools).unwrap_err();
        (error.rule(), error.to_string())
    }

    #[test]
    fn a_valid_list_keeps_every_field() {
        let tools = validate_tools(vec![
            json!({"name": "greet", "description": "Greets.", "title": "Greet",
                   "inputSchema": {"type": "object", "properties": {}},
                   "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            tool("second-tool_2"),
        ])
        .unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[0].description.as_deref(), Some("Greets."));
        assert_eq!(tools[0].extra["title"], json!("Greet"));
        assert_eq!(tools[0].extra["annotations"], json!({"readOnlyHint": true}));
        let back = serde_json::to_value(&tools[1]).unwrap();
        assert_eq!(back, tool("second-tool_2"));
    }

    #[test]
    fn no_tools_or_more_than_64_are_refused() {
        assert_eq!(rule(vec![]).0, "tools.count");
        let many = (0..65).map(|i| tool(&format!("t{i}"))).collect();
        assert_eq!(
            rule(many).1,
            "the package offers 65 tools; it must offer 1 to 64"
        );
        let exactly = (0..64).map(|i| tool(&format!("t{i}"))).collect();
        assert_eq!(validate_tools(exactly).unwrap().len(), 64);
    }

    #[test]
    fn a_bad_name_is_refused_naming_the_tool() {
        let (rule_id, message) = rule(vec![tool("a"), tool("b"), tool("c"), tool("x y")]);
        assert_eq!(rule_id, "tool.name");
        assert_eq!(
            message,
            "tool 3 (\"x y\"): name must be 1 to 64 characters of a-z, 0-9, _ and -"
        );
        assert_eq!(rule(vec![tool("")]).0, "tool.name");
        assert_eq!(rule(vec![tool("Upper")]).0, "tool.name");
        assert_eq!(rule(vec![tool(&"n".repeat(65))]).0, "tool.name");
        assert_eq!(
            rule(vec![json!({"inputSchema": {"type": "object"}})]).1,
            "tool 0: name must be 1 to 64 characters of a-z, 0-9, _ and -"
        );
    }

    #[test]
    fn a_repeated_name_is_refused() {
        let (rule_id, message) = rule(vec![tool("a"), tool("b"), tool("a")]);
        assert_eq!(rule_id, "tool.duplicate_name");
        assert_eq!(
            message,
            "tool 2 (\"a\"): the name is already used by tool 0"
        );
    }

    #[test]
    fn a_tool_that_is_not_an_object_is_refused() {
        assert_eq!(rule(vec![json!("greet")]).0, "tool.object");
    }

    #[test]
    fn descriptions_must_be_strings_of_at_most_1024_characters() {
        let mut long = tool("a");
        long["description"] = json!("é".repeat(1025));
        assert_eq!(rule(vec![long]).0, "tool.description");
        let mut fits = tool("a");
        fits["description"] = json!("é".repeat(1024));
        assert!(validate_tools(vec![fits]).is_ok());
        let mut number = tool("a");
        number["description"] = json!(5);
        assert_eq!(
            rule(vec![number]).1,
            "tool 0 (\"a\"): description must be a string"
        );
    }

    #[test]
    fn the_input_schema_must_be_an_object_schema() {
        assert_eq!(rule(vec![json!({"name": "a"})]).0, "tool.input_schema");
        assert_eq!(
            rule(vec![
                json!({"name": "a", "inputSchema": {"type": "string"}})
            ])
            .0,
            "tool.input_schema"
        );
        assert_eq!(
            rule(vec![json!({"name": "a", "inputSchema": "object"})]).0,
            "tool.input_schema"
        );
    }

    #[test]
    fn the_output_schema_must_be_an_object() {
        let mut bad = tool("a");
        bad["outputSchema"] = json!([1]);
        assert_eq!(rule(vec![bad]).0, "tool.output_schema");
    }

    #[test]
    fn schemas_over_64_kib_are_refused() {
        let big = "x".repeat(MAX_SCHEMA_BYTES);
        let input = json!({"name": "a", "inputSchema": {"type": "object", "description": big}});
        let (rule_id, message) = rule(vec![input]);
        assert_eq!(rule_id, "tool.schema_size");
        assert!(
            message.starts_with("tool 0 (\"a\"): inputSchema is"),
            "{message}"
        );
        let mut output = tool("a");
        output["outputSchema"] = json!({"description": big});
        assert!(rule(vec![output]).1.contains("outputSchema"));
    }

    #[test]
    fn all_tools_together_over_256_kib_are_refused() {
        let chunk = "x".repeat(MAX_SCHEMA_BYTES - 100);
        let tools = (0..5)
            .map(
                |i| json!({"name": format!("t{i}"), "inputSchema": {"type": "object", "d": chunk}}),
            )
            .collect();
        let (id, message) = rule(tools);
        assert_eq!(id, "tools.total_size");
        // The limit in the ABI's own words.
        assert!(message.contains("at most 256 KiB"), "{message}");
    }

    #[test]
    fn compact_length_matches_serialization() {
        let value = json!({"a": [1, 2, {"b": "c"}]});
        assert_eq!(
            compact_len(&value),
            serde_json::to_vec(&value).unwrap().len()
        );
    }
}
