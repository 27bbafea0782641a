//! YAML responses (`Accept: application/yaml`), as upstream's YAML serializer writes them:
//! the JSON representation turned into YAML (keys sorted, as `sigs.k8s.io/yaml` sorts
//! them), `Content-Type: application/yaml`.
//!
//! What is served as YAML: the objects of get, create, update, patch and delete, lists
//! (list and collection delete), and the `Status` of a failed resource request. Watches
//! are not (upstream has no YAML stream serializer: 406), nor are Tables, metadata-only
//! objects or discovery documents (406 for `application/yaml` alone).
//!
//! Bounds: a list is written item by item (each item decoded and encoded on its own, so
//! the whole list is never a JSON tree in memory) and, like upstream's, whole rather than
//! streamed; any other response is an object at most the storage's object size, a Scale or
//! a Status, converted from its JSON bytes, refused (500) past [`MAX_CONVERTED_BYTES`].

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use listwatch_storage::ObjectList;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::negotiate::{Format, Offer, negotiate};
use crate::resource::ResourceInfo;

/// The Content-Type of a YAML response.
pub(crate) const CONTENT_TYPE: &str = "application/yaml";

/// The largest JSON response converted to YAML (an object response is at most the
/// storage's object limit, 1.5 MiB with etcd; this leaves room for any backend's).
pub(crate) const MAX_CONVERTED_BYTES: usize = 64 * 1024 * 1024;

/// Whether the request's `Accept`, negotiated against `offer`, picks YAML.
pub(crate) fn wanted(headers: &HeaderMap, offer: Offer) -> bool {
    matches!(negotiate(headers, offer), Ok(Format::Yaml))
}

fn encode(v: &Value) -> ApiResult<String> {
    serde_saphyr::to_string(v).map_err(|e| ApiError::internal(format!("encoding YAML: {e}")))
}

/// A JSON response (`Content-Type: application/json`) as YAML, with its status and other
/// headers; any other response is returned as it is.
pub(crate) async fn from_json(resp: Response) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/json");
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let converted = match axum::body::to_bytes(body, MAX_CONVERTED_BYTES).await {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
            .map_err(|e| ApiError::internal(format!("a response is not JSON: {e}")))
            .and_then(|v| encode(&v)),
        Err(e) => Err(ApiError::internal(format!(
            "a response too large to convert to YAML: {e}"
        ))),
    };
    match converted {
        Ok(text) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            parts
                .headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            Response::from_parts(parts, Body::from(text))
        }
        Err(e) => e.into_response(),
    }
}

/// A list as YAML: `apiVersion`, `items` (each item's YAML under `- `), `kind` and
/// `metadata`, in that (sorted) order.
pub(crate) fn list(info: &ResourceInfo, list: ObjectList) -> ApiResult<Response> {
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
    let mut out = encode(&json!({"apiVersion": info.api_version()}))?;
    if list.items.is_empty() {
        out.push_str("items: []\n");
    } else {
        out.push_str("items:\n");
    }
    for obj in &list.items {
        let v = obj
            .to_value()
            .map_err(|e| ApiError::internal(format!("stored object does not decode: {e}")))?;
        let item = encode(&v)?;
        for (i, line) in item.lines().enumerate() {
            out.push_str(if i == 0 { "- " } else { "  " });
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(&encode(
        &json!({"kind": info.list_kind(), "metadata": Value::Object(meta)}),
    )?);
    let mut resp = out.into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::{Object, SelectableFields};

    fn decode(text: &str) -> Value {
        serde_saphyr::from_str(text).unwrap()
    }

    #[tokio::test]
    async fn lists_and_objects_read_back_as_their_json() {
        let info = ResourceInfo::new("", "v1", "configmaps", "ConfigMap");
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
        let resp = list(&info, l).unwrap();
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
        let body = axum::body::to_bytes(list(&info, empty).unwrap().into_body(), usize::MAX)
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
