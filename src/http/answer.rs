//! The answers `subako_http.request` holds for the guest: `{"ok":…}` with an inline or a file
//! body, or `{"error":{"kind","message"}}` with one of the ABI's error kinds. It owns their JSON
//! form; it does not decide which answer a request gets (validation, policy and the broker do).

use serde::Serialize;
use serde_json::{json, Map, Value};

/// The error kinds the ABI names, spelled as they appear on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    InvalidRequest,
    HostNotAllowed,
    ForbiddenDestination,
    CredentialHeader,
    CredentialUnavailable,
    TooManyRedirects,
    Timeout,
    TooLarge,
    NotText,
    WriteBudget,
    BadPath,
    Connection,
    Abi,
}

impl ErrorKind {
    /// The kind as the guest reads it, e.g. `host_not_allowed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::HostNotAllowed => "host_not_allowed",
            ErrorKind::ForbiddenDestination => "forbidden_destination",
            ErrorKind::CredentialHeader => "credential_header",
            ErrorKind::CredentialUnavailable => "credential_unavailable",
            ErrorKind::TooManyRedirects => "too_many_redirects",
            ErrorKind::Timeout => "timeout",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::NotText => "not_text",
            ErrorKind::WriteBudget => "write_budget",
            ErrorKind::BadPath => "bad_path",
            ErrorKind::Connection => "connection",
            ErrorKind::Abi => "abi",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request that failed, as the guest is told. The message is for the model and the guest's
/// author to read: it names the field, host or limit involved and never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct HttpError {
    pub kind: ErrorKind,
    pub message: String,
}

impl HttpError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// An `invalid_request` error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }
}

/// What one request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The response, with its body as UTF-8 text in the answer.
    Inline {
        status: u16,
        headers: Vec<(String, String)>,
        text: String,
    },
    /// The response, with its body saved to a file under `/volume`.
    File {
        status: u16,
        headers: Vec<(String, String)>,
        path: String,
        bytes: u64,
    },
    /// The request failed.
    Error(HttpError),
}

impl From<HttpError> for Answer {
    fn from(error: HttpError) -> Self {
        Answer::Error(error)
    }
}

impl Answer {
    /// The answer as the compact JSON the guest reads. Response headers become one object;
    /// a name that appears more than once keeps every value, joined by `, ` in arrival order
    /// (the list form HTTP allows for repeated fields).
    pub fn to_json(&self) -> Vec<u8> {
        let value = match self {
            Answer::Inline {
                status,
                headers,
                text,
            } => json!({"ok": {
                "status": status,
                "headers": header_object(headers),
                "body": {"type": "inline", "text": text},
            }}),
            Answer::File {
                status,
                headers,
                path,
                bytes,
            } => json!({"ok": {
                "status": status,
                "headers": header_object(headers),
                "body": {"type": "file", "path": path, "bytes": bytes},
            }}),
            Answer::Error(error) => json!({"error": {
                "kind": error.kind,
                "message": error.message,
            }}),
        };
        // Serializing a `Value` built from strings and numbers cannot fail; keep a valid
        // answer anyway rather than panic inside a guest's call.
        serde_json::to_vec(&value).unwrap_or_else(|_| {
            br#"{"error":{"kind":"abi","message":"the host could not encode the answer"}}"#.to_vec()
        })
    }
}

fn header_object(headers: &[(String, String)]) -> Value {
    let mut object = Map::new();
    for (name, value) in headers {
        match object.get_mut(name) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(value);
            }
            _ => {
                object.insert(name.clone(), Value::String(value.clone()));
            }
        }
    }
    Value::Object(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(answer: &Answer) -> Value {
        serde_json::from_slice(&answer.to_json()).unwrap()
    }

    #[test]
    fn inline_answer_has_the_abi_shape() {
        let answer = Answer::Inline {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            text: "{\"status\":\"shipped\"}".into(),
        };
        assert_eq!(
            parsed(&answer),
            json!({"ok":{"status":200,"headers":{"content-type":"application/json"},
                   "body":{"type":"inline","text":"{\"status\":\"shipped\"}"}}})
        );
    }

    #[test]
    fn file_answer_names_the_path_and_size() {
        let answer = Answer::File {
            status: 200,
            headers: vec![],
            path: "/volume/tmp/out.bin".into(),
            bytes: 48211,
        };
        assert_eq!(
            parsed(&answer),
            json!({"ok":{"status":200,"headers":{},
                   "body":{"type":"file","path":"/volume/tmp/out.bin","bytes":48211}}})
        );
    }

    #[test]
    fn error_answer_spells_the_kind_in_snake_case() {
        let answer = Answer::Error(HttpError::new(
            ErrorKind::HostNotAllowed,
            "api.example.com is not in this function's network allowlist",
        ));
        assert_eq!(
            parsed(&answer),
            json!({"error":{"kind":"host_not_allowed",
                   "message":"api.example.com is not in this function's network allowlist"}})
        );
    }

    #[test]
    fn repeated_response_headers_are_joined() {
        let answer = Answer::Inline {
            status: 204,
            headers: vec![
                ("vary".into(), "accept".into()),
                ("vary".into(), "origin".into()),
            ],
            text: String::new(),
        };
        assert_eq!(parsed(&answer)["ok"]["headers"]["vary"], "accept, origin");
    }

    #[test]
    fn every_kind_serializes_as_its_name() {
        for kind in [
            ErrorKind::InvalidRequest,
            ErrorKind::ForbiddenDestination,
            ErrorKind::CredentialUnavailable,
            ErrorKind::TooManyRedirects,
            ErrorKind::WriteBudget,
            ErrorKind::Abi,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
