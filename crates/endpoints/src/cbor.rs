//! CBOR responses and request bodies (KEP-4222, upstream's `CBORServingAndStorage`):
//! `Accept: application/cbor` on a resource request, `Content-Type: application/cbor` on an
//! object body, `application/apply-patch+cbor` for a server-side apply. The bytes are
//! listwatch-cbor's transcoding of the JSON representation, so every rule of the JSON path
//! (member order aside: CBOR's is the deterministic one) holds for CBOR too.
//!
//! `DeleteOptions` bodies in CBOR are read too ([`options_body`]).
//!
//! What is served as CBOR: objects of get, create, update, patch and delete, lists (list and
//! collection delete), the `Status` of a failed resource request, and watches — an
//! `application/cbor-seq` stream (RFC 8742) of `WatchEvent` items, each the self-described
//! tag and `{type, object}` with the object's own tagged encoding, as upstream's watch
//! handler answers a client that accepts `application/cbor`. Not as CBOR: Tables and
//! metadata-only forms (`application/cbor;as=...`: the range is skipped, so such a client
//! falls back to the JSON range it lists next, or gets 406), discovery and OpenAPI.
//!
//! Invariants:
//! - an object's CBOR is computed once per watch event and shared by every CBOR watcher of
//!   it (`Object::shared_encoding` under [`object_key`]), like its wire JSON;
//! - a list is streamed, items encoded a batch at a time (on the request compute pool when
//!   there is one), so neither the whole list's CBOR nor its JSON tree is held at once;
//! - any other response is converted from its JSON bytes, at most
//!   [`crate::yaml::MAX_CONVERTED_BYTES`] (an object, a Scale or a Status);
//! - a request body is decoded by listwatch-cbor within upstream's bounds (depth 64, 1 024
//!   elements per array or map, no duplicate keys) after the body limit has been applied:
//!   a hostile body is a 400, never a large allocation.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::LazyLock;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_api::watch::EventType;
use listwatch_storage::ObjectList;
use serde_json::Value;

use crate::compute::Offloader;
use crate::error::{ApiError, ApiResult};
use crate::negotiate::{Format, Offer, negotiate};
use crate::resource::KindSpec;
use crate::stream_list::ListExtras;

/// The Content-Type of a CBOR response (objects, lists, Status).
pub(crate) const CONTENT_TYPE: &str = "application/cbor";

/// The Content-Type of a CBOR watch (a CBOR sequence of `WatchEvent` items).
pub(crate) const SEQ_CONTENT_TYPE: &str = "application/cbor-seq";

/// The Content-Type of a server-side apply body in CBOR.
pub(crate) const APPLY_PATCH_CONTENT_TYPE: &str = "application/apply-patch+cbor";

/// Whether the request's `Accept`, negotiated against `offer`, picks CBOR.
pub(crate) fn wanted(headers: &HeaderMap, offer: Offer) -> bool {
    matches!(negotiate(headers, offer), Ok(Format::Cbor))
}

static KEYS: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// The shared-encoding key of an object's CBOR (`drop`: without `metadata.managedFields`).
pub(crate) fn object_key(drop: bool) -> u64 {
    KEYS.hash_one(("cbor", drop))
}

/// An object's CBOR (its wire JSON, or that JSON without `metadata.managedFields`), tagged.
pub(crate) fn object(obj: &Object, drop: bool) -> ApiResult<Bytes> {
    let json = if drop {
        obj.to_json_bytes_without_managed_fields()
    } else {
        obj.to_json_bytes()
    };
    listwatch_cbor::from_json(&json)
        .map(Bytes::from)
        .map_err(|e| ApiError::internal(format!("stored object does not encode as CBOR: {e}")))
}

/// The prefix of a watch event item (self-described tag, `{type, object: `), one per type.
pub(crate) fn event_prefix(t: EventType) -> &'static [u8] {
    static PREFIXES: LazyLock<[Vec<u8>; 5]> = LazyLock::new(|| {
        ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"].map(listwatch_cbor::event_prefix)
    });
    let i = match t {
        EventType::Added => 0,
        EventType::Modified => 1,
        EventType::Deleted => 2,
        EventType::Bookmark => 3,
        EventType::Error => 4,
    };
    PREFIXES.get(i).map_or(&[], Vec::as_slice)
}

/// A JSON watch frame (`{"type":..,"object":..}` and a newline: a bookmark or an error) as
/// a CBOR event item, its object tagged as an object event's is.
pub(crate) fn event_from_json(frame: &[u8]) -> Bytes {
    let v: Value = serde_json::from_slice(frame).unwrap_or(Value::Null);
    let mut out = listwatch_cbor::event_prefix(v.get("type").and_then(Value::as_str).unwrap_or(""));
    out.extend_from_slice(&listwatch_cbor::encode(
        v.get("object").unwrap_or(&Value::Null),
    ));
    Bytes::from(out)
}

/// An object response in CBOR.
pub(crate) fn object_response(code: StatusCode, obj: &Object, drop: bool) -> ApiResult<Response> {
    Ok(response(code, object(obj, drop)?))
}

fn response(code: StatusCode, body: impl Into<Body>) -> Response {
    let mut resp = (code, body.into()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    resp
}

/// A JSON response (object, Scale, Status, a list built as JSON) converted to CBOR; any
/// other response as it is.
pub(crate) async fn from_json(resp: Response) -> Response {
    crate::yaml::convert_json_response(resp, "CBOR", CONTENT_TYPE, |bytes| {
        listwatch_cbor::from_json(bytes)
            .map_err(|e| ApiError::internal(format!("a response is not JSON: {e}")))
    })
    .await
}

/// A list in CBOR: the tagged map `kind`, `items`, `metadata`, `apiVersion` (the
/// deterministic key order: shorter keys first), streamed, items encoded a batch (about
/// [`crate::stream_list::BATCH_BYTES`]) at a time — on the request compute pool in the
/// client's flow when `offload` is given.
pub(crate) fn list(
    info: &KindSpec,
    list: ObjectList,
    extras: ListExtras,
    offload: Option<Offloader>,
) -> ApiResult<Response> {
    let mut meta = serde_json::Map::new();
    if let Some(c) = &list.continue_token {
        meta.insert("continue".into(), Value::String(c.clone()));
    }
    if let Some(n) = list.remaining_item_count {
        meta.insert("remainingItemCount".into(), Value::from(n));
    }
    meta.insert(
        "resourceVersion".into(),
        Value::String(list.resource_version.to_string()),
    );
    if let Some(sel) = extras.shard_info {
        meta.insert("shardInfo".into(), serde_json::json!({ "selector": sel }));
    }
    let str_value = |s: &str| Value::String(s.to_owned());
    let mut head = listwatch_cbor::SELF_DESCRIBED.to_vec();
    // A map of four pairs (0xa4), then `kind`, then `items` and the array's head.
    head.push(0xa4);
    listwatch_cbor::encode_into(&str_value("kind"), &mut head);
    listwatch_cbor::encode_into(&str_value(&info.list_kind()), &mut head);
    listwatch_cbor::encode_into(&str_value("items"), &mut head);
    array_head(list.items.len(), &mut head);
    let mut tail = Vec::new();
    listwatch_cbor::encode_into(&str_value("metadata"), &mut tail);
    listwatch_cbor::encode_into(&Value::Object(meta), &mut tail);
    listwatch_cbor::encode_into(&str_value("apiVersion"), &mut tail);
    listwatch_cbor::encode_into(&str_value(&info.api_version()), &mut tail);
    let drop = extras.drop_managed_fields;
    let items = futures::stream::unfold(Some(list.items.into_iter()), move |state| {
        let offload = offload.clone();
        async move {
            let mut objects = state?;
            objects.as_slice().first()?;
            let (objects, batch) = match offload {
                Some(pool) => match pool
                    .run(async move {
                        let batch = encode_batch(&mut objects, drop);
                        (objects, batch)
                    })
                    .await
                {
                    Ok(done) => done,
                    Err(stopped) => return Some((Err(std::io::Error::other(stopped)), None)),
                },
                None => {
                    let batch = encode_batch(&mut objects, drop);
                    (objects, batch)
                }
            };
            match batch {
                Ok(b) => Some((Ok(b), Some(objects))),
                Err(e) => Some((Err(e), None)),
            }
        }
    });
    let chunks = futures::stream::once(async { Ok(Bytes::from(head)) })
        .chain(items)
        .chain(futures::stream::once(async { Ok(Bytes::from(tail)) }));
    Ok(response(StatusCode::OK, Body::from_stream(chunks)))
}

/// The head of a definite-length array of `n` items.
fn array_head(n: usize, out: &mut Vec<u8>) {
    // An array's head is its length's head under major type 4: encode an empty array of
    // that length's head by way of a placeholder integer (major type 0) and retag it.
    let start = out.len();
    listwatch_cbor::encode_into(&Value::from(n as u64), out);
    if let Some(first) = out.get_mut(start) {
        *first |= 4 << 5;
    }
}

/// The next items of a CBOR list (untagged maps), until about a batch is written.
fn encode_batch(
    objects: &mut std::vec::IntoIter<Object>,
    drop: bool,
) -> Result<Bytes, std::io::Error> {
    let mut out = Vec::new();
    while out.len() < crate::stream_list::BATCH_BYTES {
        let Some(obj) = objects.next() else { break };
        let json = if drop {
            obj.to_json_bytes_without_managed_fields()
        } else {
            obj.to_json_bytes()
        };
        listwatch_cbor::from_json_into(&json, &mut out)
            .map_err(|e| std::io::Error::other(format!("stored object does not encode: {e}")))?;
    }
    Ok(Bytes::from(out))
}

/// An object body in CBOR as the JSON map the write path takes (400 for anything
/// listwatch-cbor refuses, or a body that is not a map).
pub(crate) fn decode_object(bytes: &[u8]) -> ApiResult<serde_json::Map<String, Value>> {
    match listwatch_cbor::decode(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad_request(
            "the body of the request must be a CBOR map",
        )),
        Err(e) => Err(ApiError::bad_request(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/cbor: {e}"
        ))),
    }
}

/// A `DeleteOptions` body as JSON: a CBOR body (`Content-Type: application/cbor`, as a
/// client that speaks CBOR sends its options) transcoded, within the same bounds as an
/// object body; any other body as it is.
pub(crate) fn options_body<'a>(
    headers: &HeaderMap,
    bytes: &'a [u8],
) -> ApiResult<std::borrow::Cow<'a, [u8]>> {
    let essence = crate::limits::content_type(headers)
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    if bytes.is_empty() || !essence.eq_ignore_ascii_case(CONTENT_TYPE) {
        return Ok(std::borrow::Cow::Borrowed(bytes));
    }
    apply_patch_json(bytes).map(std::borrow::Cow::Owned)
}

/// A CBOR apply patch (`application/apply-patch+cbor`) as the JSON bytes of the same patch.
pub(crate) fn apply_patch_json(bytes: &[u8]) -> ApiResult<Vec<u8>> {
    let map = decode_object(bytes)?;
    serde_json::to_vec(&Value::Object(map))
        .map_err(|e| ApiError::internal(format!("a decoded body does not encode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::SelectableFields;

    #[test]
    fn array_heads_are_shortest() {
        for (n, want) in [
            (0usize, vec![0x80]),
            (23, vec![0x97]),
            (24, vec![0x98, 24]),
            (1000, vec![0x99, 0x03, 0xe8]),
        ] {
            let mut out = Vec::new();
            array_head(n, &mut out);
            assert_eq!(out, want, "{n}");
        }
    }

    #[test]
    fn a_list_decodes_to_its_json_form() {
        let objs: Vec<Object> = (0..3)
            .map(|i| {
                Object::from_value(
                    serde_json::json!({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":format!("c{i}"),"managedFields":[{"manager":"m"}]}}),
                    &SelectableFields::none(),
                )
                .unwrap()
                .with_resource_version(10 + i)
            })
            .collect();
        let list = ObjectList {
            items: objs,
            resource_version: 42,
            continue_token: Some("tok".into()),
            remaining_item_count: Some(7),
        };
        let info = KindSpec::new("", "v1", "configmaps", "ConfigMap");
        let resp = super::list(
            &info,
            list,
            ListExtras {
                shard_info: None,
                drop_managed_fields: true,
            },
            None,
        )
        .unwrap();
        assert_eq!(resp.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = rt
            .block_on(axum::body::to_bytes(resp.into_body(), usize::MAX))
            .unwrap();
        assert!(listwatch_cbor::is_self_described(&bytes));
        let v = listwatch_cbor::decode(&bytes).unwrap();
        assert_eq!(v["kind"], "ConfigMapList");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        assert_eq!(v["metadata"]["continue"], "tok");
        assert_eq!(v["metadata"]["remainingItemCount"], 7);
        let items = v["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[2]["metadata"]["name"], "c2");
        assert_eq!(items[2]["metadata"]["resourceVersion"], "12");
        assert!(items[2]["metadata"].get("managedFields").is_none());
    }
}
