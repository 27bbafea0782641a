//! What a request may make the server read, build or store: the one place that decides
//! "too large" and "too deep" for every body (create, update, every patch type, apply,
//! protobuf, YAML, `/scale`, delete options, delete collection).
//!
//! | bound | default | upstream counterpart | answer |
//! | --- | --- | --- | --- |
//! | request body | 3 MiB ([`Config::max_body_bytes`](crate::Config)) | `MaxRequestBodyBytes`, 3 MiB | 413 `Request entity too large: limit is N` |
//! | JSON patch operations | [`MAX_JSON_PATCH_OPERATIONS`] = 10 000 | `maxJSONPatchOperations` | 413 `Request entity too large: The allowed maximum operations in a JSON patch is 10000, got N` |
//! | bytes copied by a JSON patch's `copy` operations, together | the request body limit | `JSONPatchMaxCopyBytes` (3 MiB, json-patch's `AccumulatedCopySizeLimit`) | 422 with json-patch's message |
//! | array elements shifted by a JSON patch's adds, removes and moves, together (a run of identical removes is one drain) | [`MAX_JSON_PATCH_SHIFTS`] = 10 000 000 | none (json-patch shifts the slice per operation) | 422 `Unable to complete the patch, its operations shift N array elements, exceeding the limit M` |
//! | nesting depth of a decoded body or a patched object | [`MAX_DEPTH`] = 100 | none that bites (Go's decoder stops at 10 000) | 400 |
//! | JSON a YAML body may expand to (anchors and aliases) | [`YAML_EXPANSION_FACTOR`] × its size + [`YAML_EXPANSION_FLOOR`] | go-yaml's "excessive aliasing" ratio | 413 |
//! | events YAML aliases and merge keys may replay | [`max_replayed_events`]: [`YAML_REPLAY_FLOOR`] + one per [`YAML_REPLAY_DIVISOR`] body bytes | go-yaml's "excessive aliasing" ratio | 413 |
//! | an object's encoded size when written (create, update, every patch, apply, `/status`, `/scale`, dry runs too) | the storage's `Storage::max_object_bytes` (checked by the registry): 1.5 MiB on the embedded store, etcd's request limit less 4 KiB on etcd | etcd's `--max-request-bytes`, 1.5 MiB (upstream answers etcd's refusal with a 500) | 413 `Request entity too large: the object is N bytes, more than the storage limit of M bytes`, before anything is written |
//!
//! Decoding within these bounds (JSON and YAML, depth, expansion, why 100 levels) is the
//! registry's `decode` module, re-exported here; this module reads bodies off the
//! connection and decodes object bodies by their Content-Type.
//!
//! Invariants:
//! - a body is read with a hard cap before anything parses it, and a declared
//!   `Content-Length` over the cap is refused before the body is read;
//! - a body's buffer is charged to the body-memory budget as its bytes arrive (at most
//!   twice what arrived), never for a declared length ahead of the data.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::flowcontrol::BodyHold;
use crate::resource::KindSpec;

pub use listwatch_registry::decode::{
    DecodeError, MAX_DEPTH, MAX_JSON_PATCH_OPERATIONS, MAX_JSON_PATCH_SHIFTS,
    YAML_EXPANSION_FACTOR, YAML_EXPANSION_FLOOR, YAML_REPLAY_DIVISOR, YAML_REPLAY_FLOOR,
    decode_json, decode_json_keys, decode_yaml, decode_yaml_keys, depth, encoded_len_capped,
    max_replayed_events, yaml_budget,
};

/// Decodes an object body sent as CBOR (`Content-Type: application/cbor`) within upstream's
/// bounds, as the resource handlers do: for the server's own endpoints outside them (reviews,
/// token requests, evictions, bindings).
pub fn decode_cbor_object(bytes: &[u8]) -> ApiResult<Map<String, Value>> {
    crate::cbor::decode_object(bytes)
}

/// Reads a body, refusing more than `limit` bytes (413) — by its declared `Content-Length`
/// before reading anything, and by counting while reading otherwise. The buffer grows as
/// bytes arrive, and every byte of buffer is taken from the body-memory budget through
/// `hold` (429 when spent) before it is allocated: nothing is reserved for a declared length
/// that has not arrived, so a client that declares 3 MiB and sends one byte holds one byte
/// of buffer, not 3 MiB of the budget. Chunks are copied out of the connection's
/// buffers as they arrive, so a body trickled in tiny chunks holds its bytes, not a buffer
/// per chunk.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    hold: &mut BodyHold,
) -> ApiResult<Bytes> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    // The most the buffer can need: the declared length, else the limit.
    let most = declared.map_or(limit, |n| usize::try_from(n).unwrap_or(limit).min(limit));
    let mut out: Vec<u8> = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("reading the request body failed: {e}")))?;
        let needed = out.len().saturating_add(chunk.len());
        if needed > limit {
            return Err(ApiError::too_large(limit));
        }
        if needed > out.capacity() {
            let grown = body_capacity(out.capacity(), needed, most);
            hold.take(grown - out.capacity())
                .map_err(|_| ApiError::too_many_requests())?;
            out.reserve_exact(grown - out.len());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(out))
}

/// The capacity a body buffer of capacity `cap` grows to when it must hold `needed` bytes:
/// doubling, but never past `most` (what the body may need at all) unless `needed` itself
/// is larger. Always at least `needed`, so growth is amortised linear and the buffer is at
/// most twice what has arrived.
fn body_capacity(cap: usize, needed: usize, most: usize) -> usize {
    cap.saturating_mul(2).min(most).max(needed)
}

/// Media types accepted for object bodies.
const OBJECT_MEDIA: &str = "application/json, application/yaml, application/cbor, application/vnd.kubernetes.protobuf (Namespace, ConfigMap, Secret, ServiceAccount, Service, Deployment, Role, ClusterRole, RoleBinding, ClusterRoleBinding)";

/// The request's `Content-Type`, `""` when absent or not text.
pub(crate) fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Decodes an object body (JSON, YAML, CBOR, or protobuf for a few kinds) into a JSON map,
/// within the decode limits: nesting at most [`MAX_DEPTH`] (CBOR: upstream's 64 levels and
/// 1 024 elements per array or map, `crate::cbor`), YAML expanding at most
/// [`yaml_budget`], protobuf bounded by its schemas (each field maps to at most its bytes,
/// base64 to 4/3 of them).
/// Also returns the keys a JSON or YAML body repeated in one object (for
/// [`crate::field_validation`]).
pub(crate) fn decode_object_keys(
    info: &KindSpec,
    headers: &HeaderMap,
    bytes: &[u8],
) -> ApiResult<(Map<String, Value>, Vec<String>)> {
    let ct = content_type(headers);
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let (value, duplicates) = match essence.as_str() {
        // Upstream reads a body without Content-Type as JSON (some clients send none).
        "application/json" | "" => decode_json_keys(bytes).map_err(|e| e.into_api_error("JSON"))?,
        "application/yaml" => decode_yaml_keys(bytes).map_err(|e| e.into_api_error("YAML"))?,
        // CBOR has no duplicate keys to report: upstream refuses such a body outright.
        "application/cbor" => return crate::cbor::decode_object(bytes).map(|m| (m, Vec::new())),
        "application/vnd.kubernetes.protobuf" => {
            return crate::protobuf::decode(bytes, &info.kind)
                .map(|m| (m, Vec::new()))
                .map_err(|e| match e {
                    crate::protobuf::ProtobufError::Unsupported(_) => {
                        ApiError::unsupported_media_type(ct, &e.to_string())
                    }
                    other => ApiError::bad_request(other.to_string()),
                });
        }
        _ => return Err(ApiError::unsupported_media_type(ct, OBJECT_MEDIA)),
    };
    match value {
        Value::Object(m) => Ok((m, duplicates)),
        _ => Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_buffer_grows_with_what_arrived_not_with_what_was_declared() {
        let most = 3 * 1024 * 1024;
        // One byte of a declared 3 MiB: one byte.
        assert_eq!(body_capacity(0, 1, most), 1);
        assert_eq!(body_capacity(0, 37, most), 37);
        // Doubling, capped by the declared length, always room for what arrived.
        assert_eq!(body_capacity(4096, 4097, most), 8192);
        assert_eq!(body_capacity(1, 2, most), 2);
        assert_eq!(
            body_capacity(2 * 1024 * 1024, 2 * 1024 * 1024 + 1, most),
            most
        );
        assert_eq!(body_capacity(4096, 5000, 4500), 5000);
        assert_eq!(body_capacity(0, 10, 3), 10);
    }
}
