//! What the HTTP servers of `kvfabric engine-sim` and `kvfabric router` share: JSON error
//! answers in the node's shape (`{"error": {"code", "message"}}`), a bounded body reader that
//! refuses with such an answer, the parsed `POST /v1/generate` request, and binding a listener.

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Largest `POST /v1/generate` body either server reads (about 1.5 M tokens as JSON).
pub const GENERATE_BODY_MAX: usize = 16 << 20;
/// Most tokens one request may carry.
pub const TOKENS_MAX: usize = 1 << 20;

/// A refused or failed request: status, stable snake_case code, message.
#[derive(Debug, Clone)]
pub struct JsonError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code.
    pub code: &'static str,
    /// What was wrong.
    pub message: String,
}

impl JsonError {
    /// A 400 with `code`.
    pub fn bad(code: &'static str, message: impl Into<String>) -> JsonError {
        JsonError {
            status: StatusCode::BAD_REQUEST,
            code,
            message: message.into(),
        }
    }

    /// Any status with `code`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        JsonError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for JsonError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        json_response(self.status, &body)
    }
}

/// A JSON answer with `status`.
pub fn json_response(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

/// A 200 JSON answer.
pub fn ok_json(v: &Value) -> Response {
    json_response(StatusCode::OK, v)
}

/// How an engine looks chunks up: `Any` uses the fabric (both chunk-key modes, blocks
/// anywhere in the cluster); `Prefix` models today's engine-local prefix cache (prefix keys
/// only, the leading run of hits, blocks its own node holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupMode {
    /// Position-independent and prefix keys, blocks from any node.
    Any,
    /// Prefix keys only, leading hits only, local blocks only.
    Prefix,
}

impl LookupMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LookupMode::Any => "any",
            LookupMode::Prefix => "prefix",
        }
    }
}

/// A parsed `POST /v1/generate` body.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// The prompt's token ids.
    pub tokens: Vec<u32>,
    /// The caller's id for the request, echoed back.
    pub request_id: Option<String>,
    /// The lookup mode, if the caller chose one.
    pub mode: Option<LookupMode>,
}

/// Reads a body of at most [`GENERATE_BODY_MAX`] bytes (413 `body_too_large` beyond, 400
/// `body_read` if the connection fails).
pub async fn read_body(body: Body) -> Result<Bytes, JsonError> {
    axum::body::to_bytes(body, GENERATE_BODY_MAX)
        .await
        .map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                JsonError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!("request body over {GENERATE_BODY_MAX} bytes"),
                )
            } else {
                JsonError::bad("body_read", format!("reading the request body: {e}"))
            }
        })
}

/// Parses and checks a `POST /v1/generate` body: `{"tokens": [u32, ...], "request_id"?:
/// string, "mode"?: "any"|"prefix"}`.
pub fn parse_generate(bytes: &[u8]) -> Result<GenerateRequest, JsonError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| JsonError::bad("invalid_json", format!("request body: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| JsonError::bad("invalid_json", "request body: expected a JSON object"))?;
    let raw = obj
        .get("tokens")
        .ok_or_else(|| JsonError::bad("invalid_tokens", "missing field `tokens`"))?
        .as_array()
        .ok_or_else(|| JsonError::bad("invalid_tokens", "`tokens`: expected an array"))?;
    if raw.is_empty() {
        return Err(JsonError::bad(
            "invalid_tokens",
            "`tokens`: expected at least one",
        ));
    }
    if raw.len() > TOKENS_MAX {
        return Err(JsonError::bad(
            "invalid_tokens",
            format!("`tokens`: at most {TOKENS_MAX}, found {}", raw.len()),
        ));
    }
    let mut tokens = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        match t.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => tokens.push(n),
            None => {
                return Err(JsonError::bad(
                    "invalid_tokens",
                    format!("`tokens[{i}]`: expected an integer in 0..=4294967295, found {t}"),
                ))
            }
        }
    }
    let request_id = match obj.get("request_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() <= 256 => Some(s.clone()),
        Some(other) => {
            return Err(JsonError::bad(
                "invalid_json",
                format!("`request_id`: expected a string of at most 256 bytes, found {other}"),
            ))
        }
    };
    let mode = match obj.get("mode") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "any" => Some(LookupMode::Any),
        Some(Value::String(s)) if s == "prefix" => Some(LookupMode::Prefix),
        Some(other) => {
            return Err(JsonError::bad(
                "invalid_mode",
                format!("`mode`: expected \"any\" or \"prefix\", found {other}"),
            ))
        }
    };
    Ok(GenerateRequest {
        tokens,
        request_id,
        mode,
    })
}

/// Binds `addr` (e.g. `127.0.0.1:0`) for a server.
pub async fn bind(addr: &str) -> anyhow::Result<tokio::net::TcpListener> {
    use anyhow::Context;
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("--listen {addr}: binding"))
}

/// A `404 route_not_found` for any other path.
pub async fn not_found() -> JsonError {
    JsonError::new(StatusCode::NOT_FOUND, "route_not_found", "no such route")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_bodies_are_checked() {
        let r = parse_generate(br#"{"tokens":[1,2,4294967295],"request_id":"a","mode":"prefix"}"#)
            .unwrap();
        assert_eq!(r.tokens, vec![1, 2, u32::MAX]);
        assert_eq!(r.request_id.as_deref(), Some("a"));
        assert_eq!(r.mode, Some(LookupMode::Prefix));
        for (body, code) in [
            (&b"nope"[..], "invalid_json"),
            (b"[1]", "invalid_json"),
            (b"{}", "invalid_tokens"),
            (br#"{"tokens":[]}"#, "invalid_tokens"),
            (br#"{"tokens":[-1]}"#, "invalid_tokens"),
            (br#"{"tokens":[4294967296]}"#, "invalid_tokens"),
            (br#"{"tokens":"abc"}"#, "invalid_tokens"),
            (br#"{"tokens":[1],"mode":"all"}"#, "invalid_mode"),
            (br#"{"tokens":[1],"request_id":7}"#, "invalid_json"),
        ] {
            let e = parse_generate(body).unwrap_err();
            assert_eq!(e.code, code, "{}", String::from_utf8_lossy(body));
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
    }
}
