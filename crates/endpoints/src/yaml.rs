//! YAML responses (`Accept: application/yaml`), as upstream's YAML serializer writes them:
//! the JSON representation turned into YAML (keys sorted, as `sigs.k8s.io/yaml` sorts
//! them), `Content-Type: application/yaml`.
//!
//! What is served as YAML: the objects of get, create, update, patch and delete, lists
//! (list and collection delete), and the `Status` of a failed resource request. Watches
//! are not (upstream has no YAML stream serializer: 406), nor are Tables, metadata-only
//! objects or discovery documents (406 for `application/yaml` alone).
//!
//! Bounds (issue 24: block YAML indents every line by its depth, so an object nested 90
//! levels with a long list at the bottom printed ~100× its JSON):
//! - nesting deeper than [`BLOCK_DEPTH`] levels is written in flow style (`{a: [1, 2]}`)
//!   inside the block document, so no line is indented by more than 2 × [`BLOCK_DEPTH`]
//!   spaces and the output grows linearly with the JSON however deep it nests (without
//!   it, N levels of a few keys each print O(N²) bytes of indentation, still under the cap
//!   below: the amplification harness's `get-narrow-deep-yaml` grew 11× for 4× the input).
//!   Real objects are far shallower and print in block style, as upstream;
//! - every document (an object, or one item of a list) is encoded into a writer that counts
//!   its bytes and stops at [`YAML_OUTPUT_FACTOR`] × the document's JSON size +
//!   [`YAML_OUTPUT_FLOOR`]; a document whose block form is larger is written again in flow
//!   style (`{a: [1, 2]}`, YAML's JSON-like form, about its JSON size), still valid YAML
//!   that decodes to the same value. Upstream (`sigs.k8s.io/yaml`) always writes block
//!   style, without a bound; real objects stay far under the factor and print as upstream.
//! - a list is streamed item by item (each item decoded and encoded when the connection
//!   takes it, so neither the whole list's YAML nor its JSON tree is ever in memory); an
//!   item that cannot be encoded ends the body early (the status line has gone by then);
//! - any other response is an object at most the storage's object size, a Scale or a
//!   Status, converted from its JSON bytes, refused (500) past [`MAX_CONVERTED_BYTES`].

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_storage::ObjectList;
use serde_json::{Value, json};

use crate::ErrorResponse;
use crate::compute::Offloader;
use crate::error::{ApiError, ApiResult};
use crate::negotiate::{Format, Offer, negotiate};
use crate::resource::KindSpec;

/// The Content-Type of a YAML response.
pub(crate) const CONTENT_TYPE: &str = "application/yaml";

/// The largest JSON response converted to YAML (an object response is at most the
/// storage's object limit, 1.5 MiB with etcd; this leaves room for any backend's).
pub(crate) const MAX_CONVERTED_BYTES: usize = 64 * 1024 * 1024;

/// Whether the request's `Accept`, negotiated against `offer`, picks YAML.
pub(crate) fn wanted(headers: &HeaderMap, offer: Offer) -> bool {
    matches!(negotiate(headers, offer), Ok(Format::Yaml))
}

/// A document's block YAML may be at most this many times its JSON size …
pub(crate) const YAML_OUTPUT_FACTOR: usize = 8;

/// … plus this many bytes; past that it is written in flow style.
pub(crate) const YAML_OUTPUT_FLOOR: usize = 64 * 1024;

/// Maps and lists nested deeper than this are written in flow style inside the block
/// document. A pod nests about 10 levels, a CRD's `openAPIV3Schema` rarely past 20.
pub(crate) const BLOCK_DEPTH: usize = 24;

/// A `fmt::Write` that refuses to grow past its cap (the encoder stops at the first
/// refused write, so nothing past the cap is built).
struct Capped {
    out: String,
    cap: usize,
    over: bool,
}

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.out.len().saturating_add(s.len()) > self.cap {
            self.over = true;
            return Err(std::fmt::Error);
        }
        self.out.push_str(s);
        Ok(())
    }
}

/// `v` in flow style at every level (scalars as the block encoder writes them).
struct Flow<'a>(&'a Value);

impl serde::Serialize for Flow<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Items<'a>(&'a [Value]);
        impl serde::Serialize for Items<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.len()))?;
                for v in self.0 {
                    seq.serialize_element(&Flow(v))?;
                }
                seq.end()
            }
        }
        struct Entries<'a>(&'a serde_json::Map<String, Value>);
        impl serde::Serialize for Entries<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(Some(self.0.len()))?;
                for (k, v) in self.0 {
                    map.serialize_entry(k, &Flow(v))?;
                }
                map.end()
            }
        }
        match self.0 {
            Value::Array(a) => serde_saphyr::FlowSeq(Items(a)).serialize(s),
            Value::Object(m) => serde_saphyr::FlowMap(Entries(m)).serialize(s),
            other => other.serialize(s),
        }
    }
}

/// `v` in block style down to [`BLOCK_DEPTH`] levels below `.1`, in flow style deeper.
struct Block<'a>(&'a Value, usize);

impl serde::Serialize for Block<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        let Block(v, depth) = *self;
        match v {
            Value::Array(_) | Value::Object(_) if depth >= BLOCK_DEPTH => Flow(v).serialize(s),
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for x in a {
                    seq.serialize_element(&Block(x, depth + 1))?;
                }
                seq.end()
            }
            Value::Object(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, x) in m {
                    map.serialize_entry(k, &Block(x, depth + 1))?;
                }
                map.end()
            }
            other => other.serialize(s),
        }
    }
}

/// `v` as YAML, `json_len` its JSON size: block style as upstream, unless that passes
/// [`YAML_OUTPUT_FACTOR`] × `json_len` + [`YAML_OUTPUT_FLOOR`] bytes; then flow style.
fn encode_sized(v: &Value, json_len: usize) -> ApiResult<String> {
    let cap = json_len
        .saturating_mul(YAML_OUTPUT_FACTOR)
        .saturating_add(YAML_OUTPUT_FLOOR);
    let mut w = Capped {
        out: String::new(),
        cap,
        over: false,
    };
    match serde_saphyr::to_fmt_writer(&mut w, &Block(v, 0)) {
        Ok(()) => return Ok(w.out),
        Err(_) if w.over => {}
        Err(e) => return Err(ApiError::internal(format!("encoding YAML: {e}"))),
    }
    drop(w);
    tracing::debug!(
        json_len,
        cap,
        "block YAML past its bound: the document is written in flow style"
    );
    let mut out = String::new();
    serde_saphyr::to_fmt_writer(&mut out, &Flow(v))
        .map_err(|e| ApiError::internal(format!("encoding YAML: {e}")))?;
    Ok(out)
}

/// A small document (a list's head or tail).
fn encode(v: &Value) -> ApiResult<String> {
    encode_sized(v, 0)
}

/// A JSON response (`Content-Type: application/json`) as YAML, with its status and other
/// headers; any other response is returned as it is.
pub(crate) async fn from_json(resp: Response) -> Response {
    convert_json_response(resp, "YAML", CONTENT_TYPE, |bytes| {
        serde_json::from_slice::<Value>(bytes)
            .map_err(|e| ApiError::internal(format!("a response is not JSON: {e}")))
            .and_then(|v| encode_sized(&v, bytes.len()))
            .map(String::into_bytes)
    })
    .await
}

/// A JSON response (`Content-Type: application/json`) converted by `convert` into the
/// format `format` served as `content_type` (YAML here, CBOR in `cbor.rs`), its status and
/// other headers kept; any other response is returned as it is. The body read is bounded by
/// [`MAX_CONVERTED_BYTES`]; a failed conversion is a 500.
pub(crate) async fn convert_json_response(
    resp: Response,
    format: &str,
    content_type: &'static str,
    convert: impl FnOnce(&[u8]) -> ApiResult<Vec<u8>>,
) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let converted = match axum::body::to_bytes(body, MAX_CONVERTED_BYTES).await {
        Ok(bytes) => convert(&bytes),
        Err(e) => Err(ApiError::internal(format!(
            "a response too large to convert to {format}: {e}"
        ))),
    };
    match converted {
        Ok(out) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            parts
                .headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            Response::from_parts(parts, Body::from(out))
        }
        Err(e) => e.into_response(),
    }
}

/// A list as YAML: `apiVersion`, `items` (each item's YAML under `- `), `kind` and
/// `metadata`, in that (sorted) order; streamed, items encoded a batch (about
/// [`crate::stream_list::BATCH_BYTES`] of YAML, at least one item) at a time — on the request
/// compute pool in the client's flow when `offload` is given, else on the thread polling
/// the body.
pub(crate) fn list(
    info: &KindSpec,
    list: ObjectList,
    offload: Option<Offloader>,
) -> ApiResult<Response> {
    let mut meta = serde_json::Map::new();
    meta.insert(
        "resourceVersion".into(),
        Value::String(list.resource_version.to_string()),
    );
    if let Some(c) = &list.continue_token {
        meta.insert("continue".into(), Value::String(c.clone()));
    }
    if let Some(n) = list.remaining_item_count {
        meta.insert("remainingItemCount".into(), Value::from(n));
    }
    let mut head = encode(&json!({"apiVersion": info.api_version()}))?;
    head.push_str(if list.items.is_empty() {
        "items: []\n"
    } else {
        "items:\n"
    });
    let tail = encode(&json!({"kind": info.list_kind(), "metadata": Value::Object(meta)}))?;
    let items = futures::stream::unfold(Some(list.items.into_iter()), move |state| {
        let offload = offload.clone();
        async move {
            let mut objects = state?;
            objects.as_slice().first()?;
            let (objects, batch) = match offload {
                // The iterator moves to the pool and back: batches stay in order, and a
                // client that goes away drops the wait, which aborts the task.
                Some(pool) => match pool
                    .run(async move {
                        let batch = encode_batch(&mut objects);
                        (objects, batch)
                    })
                    .await
                {
                    Ok(done) => done,
                    Err(stopped) => return Some((Err(std::io::Error::other(stopped)), None)),
                },
                None => {
                    let batch = encode_batch(&mut objects);
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
    let mut resp = Body::from_stream(chunks).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    Ok(resp)
}

/// The next items of a YAML list, each under `- `, until about a batch is written.
fn encode_batch(objects: &mut std::vec::IntoIter<Object>) -> Result<Bytes, std::io::Error> {
    let mut out = String::new();
    while out.len() < crate::stream_list::BATCH_BYTES {
        let Some(obj) = objects.next() else { break };
        let v = obj
            .to_value()
            .map_err(|e| std::io::Error::other(format!("stored object does not decode: {e}")))?;
        let item =
            encode_sized(&v, obj.size()).map_err(|e| std::io::Error::other(e.to_string()))?;
        out.reserve(item.len() + item.len() / 8 + 4);
        for (i, line) in item.lines().enumerate() {
            out.push_str(if i == 0 { "- " } else { "  " });
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::{Object, SelectableFields};

    fn decode(text: &str) -> Value {
        serde_saphyr::from_str(text).unwrap()
    }

    #[test]
    fn deep_documents_fall_back_to_flow_style_within_the_bound() {
        let mut v = json!({"list": vec![0; 40_000], "s": "a: b\nc", "e": {}, "n": null});
        // 50 levels (the test's YAML reader stops at 64); block style would indent each
        // of the 40 000 items by 100 spaces.
        for _ in 0..50 {
            v = json!({ "k": v });
        }
        let json_len = serde_json::to_vec(&v).unwrap().len();
        let text = encode_sized(&v, json_len).unwrap();
        assert!(
            text.len() < 2 * json_len + 1024,
            "{} bytes of YAML for {json_len} of JSON",
            text.len()
        );
        assert_eq!(decode(&text), v);
        // A shallow document stays in block style, as upstream writes it.
        let small = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        assert_eq!(
            encode_sized(&small, 40).unwrap(),
            "data:\n  k: v\nmetadata:\n  name: a\n"
        );
    }

    /// `levels` nested maps of 64 short keys each (the harness's narrow-deep shape).
    fn narrow_deep(levels: usize) -> Value {
        let mut v = json!("end");
        for _ in 0..levels {
            let mut m: serde_json::Map<String, Value> =
                (0..64).map(|i| (format!("k{i}"), json!(i))).collect();
            m.insert("c".into(), v);
            v = Value::Object(m);
        }
        v
    }

    #[test]
    fn yaml_grows_linearly_with_depth() {
        // Without the flow style past BLOCK_DEPTH, 60 levels print ~4.5× the bytes per
        // JSON byte that 15 levels do (indentation grows with depth); with it, about the
        // same ratio.
        let ratio = |levels| {
            let v = narrow_deep(levels);
            let json_len = serde_json::to_vec(&v).unwrap().len();
            let text = encode_sized(&v, json_len).unwrap();
            assert_eq!(decode(&text), v, "{levels} levels read back");
            text.len() as f64 / json_len as f64
        };
        let (shallow, deep) = (ratio(15), ratio(60));
        assert!(
            deep < 1.5 * shallow,
            "YAML per JSON byte: {shallow:.2} at 15 levels, {deep:.2} at 60"
        );
        // Shallower than BLOCK_DEPTH, everything is block style, as upstream.
        let text = encode_sized(&narrow_deep(3), 1 << 20).unwrap();
        assert!(!text.contains('{'), "{text}");
    }

    #[tokio::test]
    async fn lists_and_objects_read_back_as_their_json() {
        let info = KindSpec::new("", "v1", "configmaps", "ConfigMap");
        let objects: Vec<Object> = [
            json!({"metadata": {"name": "a", "resourceVersion": "3"},
                   "data": {"multi": "line one\nline two\n", "n": "1", "t": "true", "e": ""}}),
            json!({"metadata": {"name": "b", "resourceVersion": "4", "labels": {}}, "data": {"k": ": -"}}),
        ]
        .into_iter()
        .map(|v| Object::from_value(v, &SelectableFields::none()).unwrap())
        .collect();
        let want: Vec<Value> = objects.iter().map(|o| o.to_value().unwrap()).collect();
        let l = ObjectList {
            items: objects,
            resource_version: 9,
            continue_token: Some("next".into()),
            remaining_item_count: Some(2),
        };
        let resp = list(&info, l, None).unwrap();
        assert_eq!(resp.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.starts_with("apiVersion: v1\nitems:\n- "), "{text}");
        let v = decode(&text);
        assert_eq!(v["kind"], "ConfigMapList");
        assert_eq!(v["metadata"]["resourceVersion"], "9");
        assert_eq!(v["metadata"]["continue"], "next");
        assert_eq!(v["metadata"]["remainingItemCount"], 2);
        assert_eq!(v["items"], Value::Array(want));

        let empty = ObjectList {
            items: Vec::new(),
            resource_version: 1,
            continue_token: None,
            remaining_item_count: None,
        };
        let body = axum::body::to_bytes(list(&info, empty, None).unwrap().into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(
            decode(std::str::from_utf8(&body).unwrap())["items"],
            json!([])
        );

        let err = ApiError::bad_request("bad: \"x\"\n").into_response();
        let converted = from_json(err).await;
        assert_eq!(converted.status(), 400);
        assert_eq!(converted.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        let body = axum::body::to_bytes(converted.into_body(), usize::MAX)
            .await
            .unwrap();
        let status = decode(std::str::from_utf8(&body).unwrap());
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["message"], "bad: \"x\"\n");
        assert_eq!(status["code"], 400);
    }
}
