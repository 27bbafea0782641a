//! The request body a `Request`-level audit event records (`requestObject`), as upstream's
//! `LogRequestObject` / `LogRequestPatch` record it: the object the handler decodes,
//! converted to JSON, whatever the body's encoding — JSON, YAML (`application/yaml`,
//! `application/apply-patch+yaml`) or protobuf (`application/vnd.kubernetes.protobuf`, which
//! every `kubectl create secret|configmap|…` sends). Before, only JSON bodies were recorded,
//! so switching the encoding kept a Secret's payload out of the log.
//!
//! The body is copied as the handler reads it ([`tee_body`]): the filter never reads a body
//! itself, so the endpoints' flow control (per-client queue places, body memory budget,
//! deadlines) governs every body read, audited or not, and the copy grows only as fast as
//! the handler admits bytes. It is decoded once the handler is done, with the same bounded
//! decoders the handlers use.
//!
//! The object recorded is the one the handler decoded
//! ([`listwatch_endpoints::RequestObject`]), so the audit follows the handler's rules: the
//! URL's kind for a protobuf body whatever its envelope says, YAML for both apply types.
//! The copy here is decoded only when the handler recorded nothing (TokenRequest).
//!
//! Invariants: at most upstream's 3 MiB of body is kept; a body that was not read whole,
//! is larger, or does not decode (the request failed with 400 or 415 then) records no
//! object; a successful create, update or patch with a body but no recorded object carries
//! the [`NOT_RECORDED`] annotation instead of a silent gap.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use futures::StreamExt;
use serde_json::Value;

/// The annotation on a successful write's event whose body could not be recorded.
pub const NOT_RECORDED: &str = "audit.listwatch.io/request-object-not-recorded";

/// The copy of a request body, and its content type.
#[derive(Clone)]
pub struct Captured {
    body: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    content_type: String,
}

impl Captured {
    /// Upstream's limit on a recorded request body.
    const LIMIT: usize = 3 * 1024 * 1024;

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<u8>>> {
        self.body
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, chunk: &[u8]) {
        let mut g = self.lock();
        let over = g
            .as_ref()
            .is_some_and(|b| b.len().saturating_add(chunk.len()) > Self::LIMIT);
        if over {
            *g = None;
        } else if let Some(b) = g.as_mut() {
            b.extend_from_slice(chunk);
        }
    }

    /// The body as a JSON value, when it was read whole, fits and decodes.
    pub fn object(&self) -> Option<Value> {
        let body = self.lock().take()?;
        decode(&self.content_type, &body)
    }

    /// Whether any body bytes arrived (a copy dropped for its size counts as a body).
    pub fn had_body(&self) -> bool {
        self.lock().as_ref().is_none_or(|b| !b.is_empty())
    }
}

/// Decodes a body of `content_type` to JSON, as the handlers would.
pub fn decode(content_type: &str, body: &[u8]) -> Option<Value> {
    if body.is_empty() {
        return None;
    }
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/vnd.kubernetes.protobuf" => {
            listwatch_endpoints::protobuf::decode_enveloped(body)
                .ok()
                .map(Value::Object)
        }
        // The patch handler reads both apply types as YAML (JSON is YAML).
        "application/yaml" | "application/apply-patch+yaml" | "application/apply-patch+json" => {
            listwatch_endpoints::limits::decode_yaml(body).ok()
        }
        // JSON, the JSON patch types, and a body without a type (read as JSON upstream).
        _ => listwatch_endpoints::limits::decode_json(body).ok(),
    }
}

/// Copies the body for a `Request`-level audit event as the handler reads it.
pub fn tee_body(req: Request) -> (Request, Captured) {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let captured = Captured {
        body: Arc::new(std::sync::Mutex::new(Some(Vec::new()))),
        content_type,
    };
    let copy = captured.clone();
    let (parts, body) = req.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        if let Ok(bytes) = &chunk {
            copy.push(bytes);
        }
        chunk
    });
    (
        Request::from_parts(parts, Body::from_stream(stream)),
        captured,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_body_encoding_is_recorded_as_json() {
        let json = decode(
            "application/json",
            br#"{"kind":"Secret","data":{"k":"dg=="}}"#,
        );
        assert_eq!(json.unwrap()["data"]["k"], "dg==");
        let yaml = decode(
            "application/yaml; charset=utf-8",
            b"kind: Secret\nstringData:\n  password: hunter2\n",
        );
        assert_eq!(yaml.unwrap()["stringData"]["password"], "hunter2");
        let apply = decode("application/apply-patch+yaml", b"data: {k: v}\n");
        assert_eq!(apply.unwrap()["data"]["k"], "v");
        let apply_json = decode("application/apply-patch+json", b"data: {k: v}\n");
        assert_eq!(
            apply_json.unwrap()["data"]["k"],
            "v",
            "read as YAML, as the handler does"
        );
        let merge = decode("application/merge-patch+json", br#"{"data":{"k":"v"}}"#);
        assert_eq!(merge.unwrap()["data"]["k"], "v");
        assert_eq!(decode("application/json", b""), None);
        assert_eq!(
            decode("application/vnd.kubernetes.protobuf", b"k8s\0\xff"),
            None
        );
        assert_eq!(decode("application/json", b"{"), None);
    }
}
