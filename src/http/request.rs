//! A guest's HTTP request: the JSON it passes to `subako_http.request`, validated into a
//! [`Request`] a broker can send. It owns the request's fields and every `invalid_request` and
//! `bad_path` rule; it does not apply the operator's policy (see `policy`) nor send anything.
//!
//! Decisions where the ABI text is silent:
//! - A field set to `null` is treated as absent, since many JSON encoders write absent
//!   optional fields that way.
//! - A body is allowed with any method, GET and HEAD included, as HTTP allows it.
//! - Connection headers (`host`, `content-length`, `connection`, `transfer-encoding`,
//!   `upgrade`, `te`, `keep-alive`, `trailer`, `proxy-connection`, `proxy-*`) are dropped, but
//!   `proxy-authorization` is kept so that the policy refuses it as a credential header.
//! - A request longer than 8 MiB is answered `invalid_request` naming the limit (the ABI
//!   bounds the request; `too_large` is about response bodies).
//! - So is one holding more than [`MAX_REQUEST_VALUES`] JSON values: parsed, each value costs
//!   the host tens of bytes, so 8 MiB of `[0,0,…]` would hold hundreds of megabytes while the
//!   call runs. A larger payload goes as a `file` body.

use std::time::Duration;

use serde_json::{Map, Value};

use super::answer::{ErrorKind, HttpError};
use super::url::Url;

/// The largest request the guest may pass, in bytes.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// The most JSON values (objects, arrays, members, elements) a request may hold.
pub const MAX_REQUEST_VALUES: usize = 100_000;

/// How many JSON values `bytes` holds at least, counted up to one past `most`: one, plus one
/// for every array or object opened and every comma, outside strings. A byte scan, so that a
/// request is refused before parsing it would cost more than its bytes.
fn values_up_to(bytes: &[u8], most: usize) -> usize {
    let mut count = 1;
    crate::json_structure(bytes, |byte| {
        if matches!(byte, b',' | b'[' | b'{') {
            count += 1;
        }
        count <= most
    });
    count
}

/// The fields a request may have.
const FIELDS: [&str; 7] = [
    "method",
    "url",
    "headers",
    "body",
    "output",
    "follow_redirects",
    "timeout_ms",
];

/// The HTTP methods a guest may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Method {
    #[default]
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Options,
}

impl Method {
    const ALL: [Method; 7] = [
        Method::Get,
        Method::Head,
        Method::Post,
        Method::Put,
        Method::Patch,
        Method::Delete,
        Method::Options,
    ];

    /// The method as sent on the request line.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
        }
    }
}

/// What the request sends as its body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    None,
    /// UTF-8 text, sent as is.
    Text(String),
    /// A JSON value, sent as compact JSON.
    Json(Value),
    /// The content of a file under `/volume`, named by its guest path.
    File(String),
}

impl Body {
    /// The bytes of an inline body (`None` for a file body, which the broker reads).
    pub fn inline_bytes(&self) -> Option<Vec<u8>> {
        match self {
            Body::None => Some(Vec::new()),
            Body::Text(text) => Some(text.as_bytes().to_vec()),
            Body::Json(value) => serde_json::to_vec(value).ok(),
            Body::File(_) => None,
        }
    }
}

/// Where the response body goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Output {
    /// Into the answer, as UTF-8 text of at most 256 KiB.
    #[default]
    Inline,
    /// Into a file under `/volume`, named by its guest path.
    File(String),
}

/// A validated request, as a broker sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: Method,
    pub url: Url,
    /// Lower-case names, connection headers removed, in the order the guest wrote them.
    pub headers: Vec<(String, String)>,
    pub body: Body,
    pub output: Output,
    pub follow_redirects: bool,
    /// The bound on the whole request: the guest's `timeout_ms`, capped by the call's
    /// deadline once the request is accepted.
    pub timeout: Option<Duration>,
}

impl Request {
    /// Validates the JSON `bytes` the guest passed.
    pub fn parse(bytes: &[u8]) -> Result<Request, HttpError> {
        if bytes.len() > MAX_REQUEST_BYTES {
            return Err(HttpError::invalid(format!(
                "the request is {} bytes; the limit is {MAX_REQUEST_BYTES} bytes (8 MiB)",
                bytes.len()
            )));
        }
        if values_up_to(bytes, MAX_REQUEST_VALUES) > MAX_REQUEST_VALUES {
            return Err(HttpError::invalid(format!(
                "the request holds more than {MAX_REQUEST_VALUES} JSON values, the most one may \
                 hold; send a larger payload as a file body"
            )));
        }
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|error| HttpError::invalid(format!("the request is not JSON: {error}")))?;
        let Value::Object(fields) = value else {
            return Err(HttpError::invalid("the request must be a JSON object"));
        };
        if let Some(unknown) = fields.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(HttpError::invalid(format!(
                "unknown field `{unknown}`; a request takes only {}",
                FIELDS.join(", ")
            )));
        }
        let present = |name: &str| fields.get(name).filter(|value| !value.is_null());
        let method = match present("method") {
            None => Method::Get,
            Some(value) => parse_method(value)?,
        };
        let url = match present("url") {
            None => return Err(HttpError::invalid("url is required")),
            Some(Value::String(text)) => {
                Url::parse(text).map_err(|reason| HttpError::invalid(format!("url {reason}")))?
            }
            Some(_) => return Err(HttpError::invalid("url must be a string")),
        };
        let headers = match present("headers") {
            None => Vec::new(),
            Some(value) => parse_headers(value)?,
        };
        let body = match present("body") {
            None => Body::None,
            Some(value) => parse_body(value)?,
        };
        let output = match present("output") {
            None => Output::Inline,
            Some(value) => parse_output(value)?,
        };
        let follow_redirects = match present("follow_redirects") {
            None => true,
            Some(Value::Bool(follow)) => *follow,
            Some(_) => return Err(HttpError::invalid("follow_redirects must be true or false")),
        };
        let timeout = match present("timeout_ms") {
            None => None,
            Some(value) => match value.as_u64().filter(|ms| *ms > 0) {
                Some(ms) => Some(Duration::from_millis(ms)),
                None => {
                    return Err(HttpError::invalid(
                        "timeout_ms must be a positive whole number of milliseconds",
                    ))
                }
            },
        };
        Ok(Request {
            method,
            url,
            headers,
            body,
            output,
            follow_redirects,
            timeout,
        })
    }
}

fn parse_method(value: &Value) -> Result<Method, HttpError> {
    let allowed = || {
        Method::ALL
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Value::String(text) = value else {
        return Err(HttpError::invalid(format!(
            "method must be a string, one of {}",
            allowed()
        )));
    };
    Method::ALL
        .into_iter()
        .find(|method| method.as_str() == text)
        .ok_or_else(|| {
            HttpError::invalid(format!(
                "method `{text}` is not one of {} (upper case)",
                allowed()
            ))
        })
}

/// Whether `byte` may appear in a lower-case header name (an HTTP token without upper case).
pub(crate) fn is_header_name_byte(byte: u8) -> bool {
    byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Whether `value` may be sent as a header value: no control characters but tab.
pub(crate) fn is_header_value(value: &str) -> bool {
    value.chars().all(|c| c == '\t' || !c.is_control())
}

/// Whether a header is about the connection rather than the request, so never forwarded.
pub fn is_connection_header(name: &str) -> bool {
    matches!(
        name,
        "host"
            | "content-length"
            | "connection"
            | "transfer-encoding"
            | "upgrade"
            | "te"
            | "keep-alive"
            | "trailer"
            | "proxy-connection"
    ) || name.starts_with("proxy-")
}

fn parse_headers(value: &Value) -> Result<Vec<(String, String)>, HttpError> {
    let Value::Object(map) = value else {
        return Err(HttpError::invalid(
            "headers must be an object of header names to string values",
        ));
    };
    let mut headers = Vec::with_capacity(map.len());
    for (name, value) in map {
        if name.is_empty() || !name.bytes().all(is_header_name_byte) {
            return Err(HttpError::invalid(format!(
                "headers: `{name}` is not a lower-case HTTP header name"
            )));
        }
        let Value::String(text) = value else {
            return Err(HttpError::invalid(format!(
                "headers: the value of `{name}` must be a string"
            )));
        };
        if !is_header_value(text) {
            return Err(HttpError::invalid(format!(
                "headers: the value of `{name}` contains a line break or control character"
            )));
        }
        if is_connection_header(name) && name != "proxy-authorization" {
            continue;
        }
        headers.push((name.clone(), text.clone()));
    }
    Ok(headers)
}

/// Reads `{"type": …}` objects, refusing fields other than `type` and `allowed`.
fn typed_object<'a>(
    field: &str,
    value: &'a Value,
    allowed: &[&str],
) -> Result<(&'a str, &'a Map<String, Value>), HttpError> {
    let Value::Object(map) = value else {
        return Err(HttpError::invalid(format!(
            "{field} must be an object with a type"
        )));
    };
    let kind = match map.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        _ => {
            return Err(HttpError::invalid(format!(
                "{field}.type is required and must be a string"
            )))
        }
    };
    if let Some(unknown) = map
        .keys()
        .find(|key| *key != "type" && !allowed.contains(&key.as_str()))
    {
        return Err(HttpError::invalid(format!(
            "{field} of type `{kind}` takes no field `{unknown}`"
        )));
    }
    Ok((kind, map))
}

fn parse_body(value: &Value) -> Result<Body, HttpError> {
    let kind = match value.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        _ => "",
    };
    match kind {
        "text" => {
            let (_, map) = typed_object("body", value, &["text"])?;
            match map.get("text") {
                Some(Value::String(text)) => Ok(Body::Text(text.clone())),
                _ => Err(HttpError::invalid("body.text must be a string")),
            }
        }
        "json" => {
            let (_, map) = typed_object("body", value, &["json"])?;
            map.get("json")
                .map(|json| Body::Json(json.clone()))
                .ok_or_else(|| HttpError::invalid("body.json is required"))
        }
        "file" => {
            let (_, map) = typed_object("body", value, &["path"])?;
            Ok(Body::File(volume_path("body.path", map.get("path"))?))
        }
        _ => {
            typed_object("body", value, &[])?;
            Err(HttpError::invalid(
                "body.type must be `text`, `json` or `file`",
            ))
        }
    }
}

fn parse_output(value: &Value) -> Result<Output, HttpError> {
    let kind = match value.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        _ => "",
    };
    match kind {
        "inline" => typed_object("output", value, &[]).map(|_| Output::Inline),
        "file" => {
            let (_, map) = typed_object("output", value, &["path"])?;
            Ok(Output::File(volume_path("output.path", map.get("path"))?))
        }
        _ => {
            typed_object("output", value, &[])?;
            Err(HttpError::invalid("output.type must be `inline` or `file`"))
        }
    }
}

/// Checks a guest path for a body or output file: absolute, below `/volume/`, with no empty,
/// `.` or `..` segment. The sandbox still confines the actual file access; this refuses early
/// what could never be allowed.
fn volume_path(field: &str, value: Option<&Value>) -> Result<String, HttpError> {
    let Some(Value::String(path)) = value else {
        return Err(HttpError::invalid(format!("{field} must be a string")));
    };
    let bad = |why: &str| {
        Err(HttpError::new(
            ErrorKind::BadPath,
            format!("{field} `{path}` {why}"),
        ))
    };
    let Some(below) = path.strip_prefix("/volume/") else {
        return bad("must be an absolute path under /volume/");
    };
    if path.contains('\0') {
        return bad("contains a NUL character");
    }
    if below
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return bad("must not have empty, `.` or `..` segments");
    }
    Ok(path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::url::Host;
    use serde_json::json;

    fn parse(value: Value) -> Result<Request, HttpError> {
        Request::parse(&serde_json::to_vec(&value).unwrap())
    }

    fn refused(value: Value) -> HttpError {
        parse(value).unwrap_err()
    }

    fn invalid_naming(value: Value, word: &str) {
        let error = refused(value);
        assert_eq!(error.kind, ErrorKind::InvalidRequest, "{error}");
        assert!(error.message.contains(word), "`{word}` not in: {error}");
    }

    #[test]
    fn the_abi_example_parses() {
        let request = parse(json!({
            "method": "POST",
            "url": "https://api.example.com/orders",
            "headers": {"accept": "application/json"},
            "body": {"type": "json", "json": {"order": 1042}},
            "output": {"type": "inline"},
            "follow_redirects": true,
            "timeout_ms": 5000
        }))
        .unwrap();
        assert_eq!(request.method, Method::Post);
        assert_eq!(request.url.host, Host::Name("api.example.com".into()));
        assert_eq!(request.url.path_and_query, "/orders");
        assert_eq!(
            request.headers,
            vec![("accept".into(), "application/json".into())]
        );
        assert_eq!(request.body.inline_bytes().unwrap(), br#"{"order":1042}"#);
        assert_eq!(request.output, Output::Inline);
        assert!(request.follow_redirects);
        assert_eq!(request.timeout, Some(Duration::from_millis(5000)));
    }

    #[test]
    fn defaults_are_get_inline_and_following_redirects() {
        let request = parse(json!({"url": "https://a.example", "body": null})).unwrap();
        assert_eq!(request.method, Method::Get);
        assert_eq!(request.body, Body::None);
        assert_eq!(request.output, Output::Inline);
        assert!(request.follow_redirects);
        assert_eq!(request.timeout, None);
    }

    #[test]
    fn bad_json_and_non_objects_are_invalid() {
        let error = Request::parse(b"{\"url\":").unwrap_err();
        assert_eq!(error.kind, ErrorKind::InvalidRequest);
        assert!(error.message.contains("not JSON"));
        invalid_naming(json!(["https://a.example"]), "object");
    }

    #[test]
    fn an_oversized_request_is_invalid_naming_the_limit() {
        let error = Request::parse(&vec![b' '; MAX_REQUEST_BYTES + 1]).unwrap_err();
        assert_eq!(error.kind, ErrorKind::InvalidRequest);
        assert!(error.message.contains("8 MiB"), "{error}");
    }

    #[test]
    fn a_request_of_too_many_json_values_is_invalid_before_it_is_parsed() {
        let many = |count: usize| {
            let zeros = vec!["0"; count].join(",");
            format!(r#"{{"url":"https://a.example","body":{{"type":"json","json":[{zeros}]}}}}"#)
        };
        // The request's own object, the body's, the array, and a comma after each member and
        // element but the last.
        let fits = many(MAX_REQUEST_VALUES - 5);
        assert!(Request::parse(fits.as_bytes()).is_ok());
        let error = Request::parse(many(MAX_REQUEST_VALUES).as_bytes()).unwrap_err();
        assert_eq!(error.kind, ErrorKind::InvalidRequest);
        assert!(error.message.contains("100000 JSON values"), "{error}");
        // Commas and brackets inside strings are text, not values.
        let text = format!(
            r#"{{"url":"https://a.example","body":{{"type":"text","text":"{}\\\",["}}}}"#,
            ",".repeat(2 * MAX_REQUEST_VALUES)
        );
        assert!(Request::parse(text.as_bytes()).is_ok(), "{text:.80}");
    }

    #[test]
    fn unknown_fields_are_invalid_naming_them() {
        invalid_naming(json!({"url": "https://a.example", "query": {}}), "query");
        invalid_naming(
            json!({"url": "https://a.example", "body": {"type": "text", "text": "", "x": 1}}),
            "`x`",
        );
    }

    #[test]
    fn the_url_is_required_and_must_be_https() {
        invalid_naming(json!({}), "url");
        invalid_naming(json!({"url": 7}), "url");
        invalid_naming(json!({"url": "http://a.example/"}), "https");
    }

    #[test]
    fn methods_are_exact_upper_case_names() {
        invalid_naming(
            json!({"url": "https://a.example", "method": "get"}),
            "method",
        );
        invalid_naming(
            json!({"url": "https://a.example", "method": "TRACE"}),
            "method",
        );
        invalid_naming(json!({"url": "https://a.example", "method": 1}), "method");
        for method in Method::ALL {
            let request =
                parse(json!({"url": "https://a.example", "method": method.as_str()})).unwrap();
            assert_eq!(request.method, method);
        }
    }

    #[test]
    fn header_names_must_be_lower_case_tokens_with_string_values() {
        invalid_naming(
            json!({"url": "https://a.example", "headers": {"Accept": "x"}}),
            "Accept",
        );
        invalid_naming(
            json!({"url": "https://a.example", "headers": {"a b": "x"}}),
            "headers",
        );
        invalid_naming(
            json!({"url": "https://a.example", "headers": {"accept": 1}}),
            "accept",
        );
        invalid_naming(
            json!({"url": "https://a.example", "headers": {"x-a": "1\r\nx-b: 2"}}),
            "x-a",
        );
        invalid_naming(
            json!({"url": "https://a.example", "headers": []}),
            "headers",
        );
    }

    #[test]
    fn connection_headers_are_dropped_but_proxy_authorization_is_kept() {
        let request = parse(json!({"url": "https://a.example", "headers": {
            "host": "evil.example", "content-length": "9", "connection": "close",
            "transfer-encoding": "chunked", "upgrade": "h2c", "te": "trailers",
            "keep-alive": "1", "trailer": "x", "proxy-connection": "x", "proxy-foo": "x",
            "proxy-authorization": "Basic x", "accept": "*/*"
        }}))
        .unwrap();
        let names: Vec<_> = request.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["accept", "proxy-authorization"]);
    }

    #[test]
    fn every_body_form_parses_and_a_body_is_allowed_with_get() {
        let text =
            parse(json!({"url": "https://a.example", "body": {"type": "text", "text": "hi"}}));
        assert_eq!(text.unwrap().body, Body::Text("hi".into()));
        let file = parse(json!({"url": "https://a.example",
            "body": {"type": "file", "path": "/volume/tmp/in.bin"}}));
        assert_eq!(file.unwrap().body, Body::File("/volume/tmp/in.bin".into()));
        invalid_naming(
            json!({"url": "https://a.example", "body": {"type": "form"}}),
            "body.type",
        );
        invalid_naming(
            json!({"url": "https://a.example", "body": {"type": "json"}}),
            "body.json",
        );
        invalid_naming(json!({"url": "https://a.example", "body": "raw"}), "body");
    }

    #[test]
    fn file_paths_outside_volume_or_with_dot_segments_are_bad_paths() {
        for (field, path) in [
            ("body", "/volume/tmp/../../etc/passwd"),
            ("output", "/volume/tmp/../x"),
            ("output", "/volume/./tmp/x"),
            ("output", "/etc/passwd"),
            ("output", "volume/tmp/x"),
            ("output", "/volume"),
            ("output", "/volume/"),
            ("body", "/volume//x"),
            ("body", "/volumes/x"),
        ] {
            let error = refused(json!({"url": "https://a.example",
                field: {"type": "file", "path": path}}));
            assert_eq!(error.kind, ErrorKind::BadPath, "{path}: {error}");
            assert!(error.message.contains(field), "{error}");
        }
        let ok = parse(json!({"url": "https://a.example",
            "output": {"type": "file", "path": "/volume/data/out.bin"}}));
        assert_eq!(
            ok.unwrap().output,
            Output::File("/volume/data/out.bin".into())
        );
    }

    #[test]
    fn timeout_ms_must_be_a_positive_integer() {
        for bad in [json!(0), json!(-5), json!(1.5), json!("100")] {
            invalid_naming(
                json!({"url": "https://a.example", "timeout_ms": bad}),
                "timeout_ms",
            );
        }
        invalid_naming(
            json!({"url": "https://a.example", "follow_redirects": "yes"}),
            "follow_redirects",
        );
    }
}
