//! `/openapi/v2`: the Swagger 2.0 document of every served kind, in JSON and in the
//! protobuf encoding (gnostic's `openapi.v2.Document`) kubectl asks for.
//!
//! Why it is served: kubectl's client-side validation (`--validate=strict`, its default)
//! first asks the OpenAPI v3 document of the object's group-version for a PATCH operation
//! of the object's kind. A create-only kind (TokenReview, SubjectAccessReview, Binding,
//! Eviction, ...) has none — upstream publishes only a POST for them — so kubectl falls
//! back to `/openapi/v2` (protobuf, `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`),
//! finds no PATCH there either, and validates the object against the v2 definition of its
//! kind (found by `x-kubernetes-group-version-kind`). Without `/openapi/v2` kubectl gives
//! up with an error.
//!
//! What it owns:
//! - **The document**: derived from the same per-group-version v3 documents the
//!   [`crate::openapi`] module serves (so from the vendored catalog of `listwatch-schema`,
//!   never written by hand): every path and operation (parameters, body, responses,
//!   `x-kubernetes-*` extensions), and `definitions` holding every component of every
//!   group-version, turned into Swagger 2.0 form (`#/components/schemas/X` →
//!   `#/definitions/X`; a one-element `allOf` around a `$ref` back to the `$ref` with its
//!   siblings; a `oneOf` of scalar types, IntOrString's, to `type: string`, `format:
//!   int-or-string`, as upstream's v2 document has it).
//! - **Negotiation as kube-openapi's v2 handler**: JSON for `application/json`,
//!   `application/*`, `*/*` or no `Accept`; protobuf for the two protobuf media types;
//!   the first acceptable range in `q` order wins; otherwise 406. Protobuf is answered as
//!   `application/com.github.proto-openapi.spec.v2.v1.0+protobuf` (client-go cannot parse
//!   the `@` spelling it asks with). Each encoding carries an ETag of its own: the
//!   upper-case hex SHA-512 of its body, quoted (kube-openapi gives the protobuf the JSON's
//!   ETag and counts on `Vary: Accept`; but a strong validator names one representation
//!   (RFC 9110 §8.8.1), and a cache that revalidates its stored variants with one
//!   `If-None-Match` picks the one whose ETag the 304 carries (RFC 9111 §4.3.4) — with a
//!   shared ETag it could hand a JSON client the protobuf), `-gzip` appended when the body
//!   is gzipped (each encoding is kept gzipped too, for a client whose `Accept-Encoding`
//!   names gzip); `If-None-Match` with the ETag of the encoding asked for is a 304;
//!   `Vary: Accept, Accept-Encoding` always.
//!
//! Invariants: the two encodings are built once per kind-set generation (lazily, on the
//! first request; see [`crate::Derived`]) and never change; every `$ref` in the document
//! names a definition it holds (kubectl's parser refuses a document otherwise).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::sync::Arc;

use crate::Shared;

/// The protobuf media type kubectl (client-go's `OpenAPISchema`) asks for.
pub(crate) const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The spelling kube-openapi answers protobuf with, whichever was asked for (Go's
/// `mime.ParseMediaType`, which client-go runs on every response, refuses the `@`).
const PROTOBUF_SERVED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const V3_PREFIX: &str = "#/components/schemas/";
const V2_PREFIX: &str = "#/definitions/";

/// One encoding, plain and gzipped, with its ETag.
#[derive(Debug, Default)]
struct Encoded {
    plain: Bytes,
    gzipped: Bytes,
    /// The plain body's upper-case hex SHA-512 (kube-openapi's form), `-gzip` appended for
    /// the gzipped body.
    etag: String,
}

impl Encoded {
    fn new(plain: Vec<u8>) -> Self {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let gzipped = gz
            .write_all(&plain)
            .and_then(|()| gz.finish())
            .unwrap_or_default();
        Self {
            etag: crate::openapi::etag(&plain),
            plain: Bytes::from(plain),
            gzipped: Bytes::from(gzipped),
        }
    }
}

/// The v2 document in both encodings, each plain and gzipped, each with its own ETag.
#[derive(Debug, Default)]
pub(crate) struct Document {
    json: Encoded,
    proto: Encoded,
}

/// Builds the v2 document from the group-versions' v3 documents.
pub(crate) fn build(v3_docs: &[Value]) -> Document {
    let doc = document(v3_docs);
    let json = serde_json::to_vec(&doc).unwrap_or_default();
    let proto = proto::document(&doc);
    Document {
        json: Encoded::new(json),
        proto: Encoded::new(proto),
    }
}

/// The Swagger 2.0 document (JSON form) of `v3_docs`.
pub(crate) fn document(v3_docs: &[Value]) -> Value {
    let mut paths = Map::new();
    let mut definitions = std::collections::BTreeMap::new();
    for d in v3_docs {
        if let Some(Value::Object(p)) = d.get("paths") {
            for (path, item) in p {
                paths.insert(path.clone(), path_item(item));
            }
        }
        if let Some(Value::Object(c)) = d.pointer("/components/schemas") {
            for (name, s) in c {
                definitions.entry(name.clone()).or_insert_with(|| schema(s));
            }
        }
    }
    let definitions: Map<String, Value> = definitions.into_iter().collect();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::KUBE_GIT_VERSION},
        "paths": paths,
        "definitions": definitions,
    })
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    for m in METHODS {
        if let Some(op) = item.get(m) {
            out.insert(m.into(), operation(op));
        }
    }
    if let Some(Value::Array(ps)) = item.get("parameters") {
        out.insert(
            "parameters".into(),
            Value::Array(ps.iter().map(parameter).collect()),
        );
    }
    Value::Object(out)
}

fn operation(op: &Value) -> Value {
    let mut out = Map::new();
    let Value::Object(m) = op else {
        return Value::Object(out);
    };
    for (k, v) in m {
        match k.as_str() {
            "operationId" | "tags" | "description" | "summary" => {
                out.insert(k.clone(), v.clone());
            }
            _ if k.starts_with("x-") => {
                out.insert(k.clone(), v.clone());
            }
            _ => {}
        }
    }
    let mut params: Vec<Value> = match m.get("parameters") {
        Some(Value::Array(ps)) => ps.iter().map(parameter).collect(),
        _ => Vec::new(),
    };
    if let Some(body) = m.get("requestBody") {
        let s = body
            .pointer("/content")
            .and_then(Value::as_object)
            .and_then(|c| c.values().next())
            .and_then(|c| c.get("schema"))
            .map(schema)
            .unwrap_or_else(|| json!({}));
        params.insert(
            0,
            json!({"name": "body", "in": "body", "required": true, "schema": s}),
        );
    }
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    let mut responses = Map::new();
    if let Some(Value::Object(rs)) = m.get("responses") {
        for (code, r) in rs {
            let mut resp = Map::new();
            resp.insert(
                "description".into(),
                r.get("description").cloned().unwrap_or_else(|| json!("")),
            );
            if let Some(s) = r
                .pointer("/content")
                .and_then(Value::as_object)
                .and_then(|c| c.values().next())
                .and_then(|c| c.get("schema"))
            {
                resp.insert("schema".into(), schema(s));
            }
            responses.insert(code.clone(), Value::Object(resp));
        }
    }
    out.insert("responses".into(), Value::Object(responses));
    Value::Object(out)
}

/// A v3 query or path parameter (`schema: {type, uniqueItems}`) in v2 form (the type
/// beside the name).
fn parameter(p: &Value) -> Value {
    let mut out = Map::new();
    if let Value::Object(m) = p {
        for (k, v) in m {
            if k == "schema" {
                if let Value::Object(s) = v {
                    for (sk, sv) in s {
                        out.insert(sk.clone(), sv.clone());
                    }
                }
            } else {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// A v3 schema in Swagger 2.0 form (recursively through its schema positions).
pub(crate) fn schema(s: &Value) -> Value {
    let Value::Object(m) = s else {
        return s.clone();
    };
    let mut out = Map::new();
    // `{"allOf": [{"$ref": X}], siblings}` → `{"$ref": X, siblings}`.
    if let Some(Value::Array(all)) = m.get("allOf")
        && let [only] = all.as_slice()
        && let Some(r) = only.get("$ref").and_then(Value::as_str)
    {
        out.insert("$ref".into(), json!(ref_v2(r)));
    }
    for (k, v) in m {
        match k.as_str() {
            "$ref" => {
                out.insert(k.clone(), json!(v.as_str().map(ref_v2).unwrap_or_default()));
            }
            "allOf" if out.contains_key("$ref") => {}
            "allOf" => {
                let items = v
                    .as_array()
                    .map(|a| a.iter().map(schema).collect::<Vec<_>>());
                out.insert(k.clone(), json!(items.unwrap_or_default()));
            }
            "properties" => {
                let props: Map<String, Value> = v
                    .as_object()
                    .map(|p| p.iter().map(|(n, s)| (n.clone(), schema(s))).collect())
                    .unwrap_or_default();
                out.insert(k.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" if v.is_object() => {
                out.insert(k.clone(), schema(v));
            }
            // Not Swagger 2.0: an int-or-string's alternatives become its format below.
            "oneOf" | "anyOf" | "not" | "nullable" => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    if !m.contains_key("type")
        && let Some(Value::Array(alts)) = m.get("oneOf").or_else(|| m.get("anyOf"))
    {
        let types: Vec<&str> = alts
            .iter()
            .filter_map(|a| a.get("type").and_then(Value::as_str))
            .collect();
        if types.len() == alts.len() && types.contains(&"string") {
            out.insert("type".into(), json!("string"));
            if types.contains(&"integer") {
                out.insert("format".into(), json!("int-or-string"));
            }
        }
    }
    Value::Object(out)
}

fn ref_v2(r: &str) -> String {
    match r.strip_prefix(V3_PREFIX) {
        Some(name) => format!("{V2_PREFIX}{name}"),
        None => r.to_owned(),
    }
}

/// Which encoding an `Accept` header selects, as kube-openapi's v2 handler: ranges in
/// descending `q` (ties in header order); `None` when none is served (406).
fn negotiate(headers: &HeaderMap) -> Option<bool> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .unwrap_or("*/*");
    let mut ranges: Vec<(f32, usize, String)> = accept
        .split(',')
        .take(64)
        .enumerate()
        .map(|(i, range)| {
            let mut parts = range.split(';');
            let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q=").map(str::trim))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (q, i, essence)
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranges.into_iter().find_map(|(_, _, e)| match e.as_str() {
        "application/json" | "application/*" | "*/*" => Some(false),
        PROTOBUF | PROTOBUF_SERVED => Some(true),
        _ => None,
    })
}

/// `GET /openapi/v2`.
pub(crate) async fn serve(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let Some(protobuf) = negotiate(&headers) else {
        let mut r = StatusCode::NOT_ACCEPTABLE.into_response();
        r.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("Accept"));
        return r;
    };
    let derived = s.derived(&s.kinds());
    let d = derived.openapi_v2();
    let (encoded, content_type) = if protobuf {
        (&d.proto, PROTOBUF_SERVED)
    } else {
        (&d.json, "application/json")
    };
    let gzip = crate::compress::accepts_gzip(&headers) && !encoded.gzipped.is_empty();
    let (body, etag) = if gzip {
        (&encoded.gzipped, format!("{}-gzip", encoded.etag))
    } else {
        (&encoded.plain, encoded.etag.clone())
    };
    let mut resp = if crate::openapi::not_modified(&headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = (StatusCode::OK, body.clone()).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        if gzip {
            r.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        r
    };
    let h = resp.headers_mut();
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if let Ok(v) = HeaderValue::from_str(&format!("\"{etag}\"")) {
        h.insert(header::ETAG, v);
    }
    resp
}

/// The protobuf encoding of a Swagger 2.0 document (JSON form), as gnostic's
/// `openapi.v2` messages: what kubectl decodes with `proto.Unmarshal` into
/// `openapi_v2.Document`. Only the fields the JSON document can carry are written;
/// vendor extensions and defaults travel as `Any.yaml` (JSON is YAML).
mod proto {
    use serde_json::{Map, Value};

    fn varint(buf: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }

    fn key(buf: &mut Vec<u8>, field: u32, wire: u8) {
        varint(buf, (u64::from(field) << 3) | u64::from(wire));
    }

    fn bytes(buf: &mut Vec<u8>, field: u32, b: &[u8]) {
        key(buf, field, 2);
        varint(buf, b.len() as u64);
        buf.extend_from_slice(b);
    }

    fn string(buf: &mut Vec<u8>, field: u32, v: Option<&Value>) {
        if let Some(s) = v.and_then(Value::as_str).filter(|s| !s.is_empty()) {
            bytes(buf, field, s.as_bytes());
        }
    }

    fn strings(buf: &mut Vec<u8>, field: u32, v: Option<&Value>) {
        for s in v.and_then(Value::as_array).into_iter().flatten() {
            if let Some(s) = s.as_str() {
                bytes(buf, field, s.as_bytes());
            }
        }
    }

    fn boolean(buf: &mut Vec<u8>, field: u32, v: Option<&Value>) {
        if v.and_then(Value::as_bool) == Some(true) {
            key(buf, field, 0);
            buf.push(1);
        }
    }

    fn int(buf: &mut Vec<u8>, field: u32, v: Option<&Value>) {
        if let Some(n) = v.and_then(Value::as_i64).filter(|n| *n != 0) {
            key(buf, field, 0);
            varint(buf, n as u64);
        }
    }

    fn double(buf: &mut Vec<u8>, field: u32, v: Option<&Value>) {
        if let Some(n) = v.and_then(Value::as_f64).filter(|n| *n != 0.0) {
            key(buf, field, 1);
            buf.extend_from_slice(&n.to_le_bytes());
        }
    }

    /// `Any { yaml = 2 }`.
    fn any(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        bytes(
            &mut out,
            2,
            serde_json::to_string(v).unwrap_or_default().as_bytes(),
        );
        out
    }

    /// `repeated NamedAny vendor_extension = field` for the `x-` keys.
    fn extensions(buf: &mut Vec<u8>, field: u32, m: &Map<String, Value>) {
        for (k, v) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
            let mut named = Vec::new();
            bytes(&mut named, 1, k.as_bytes());
            bytes(&mut named, 2, &any(v));
            bytes(buf, field, &named);
        }
    }

    fn schema(v: &Value) -> Vec<u8> {
        let mut b = Vec::new();
        let Value::Object(m) = v else { return b };
        string(&mut b, 1, m.get("$ref"));
        string(&mut b, 2, m.get("format"));
        string(&mut b, 3, m.get("title"));
        string(&mut b, 4, m.get("description"));
        if let Some(d) = m.get("default") {
            bytes(&mut b, 5, &any(d));
        }
        double(&mut b, 6, m.get("multipleOf"));
        double(&mut b, 7, m.get("maximum"));
        boolean(&mut b, 8, m.get("exclusiveMaximum"));
        double(&mut b, 9, m.get("minimum"));
        boolean(&mut b, 10, m.get("exclusiveMinimum"));
        int(&mut b, 11, m.get("maxLength"));
        int(&mut b, 12, m.get("minLength"));
        string(&mut b, 13, m.get("pattern"));
        int(&mut b, 14, m.get("maxItems"));
        int(&mut b, 15, m.get("minItems"));
        boolean(&mut b, 16, m.get("uniqueItems"));
        int(&mut b, 17, m.get("maxProperties"));
        int(&mut b, 18, m.get("minProperties"));
        strings(&mut b, 19, m.get("required"));
        for e in m
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            bytes(&mut b, 20, &any(e));
        }
        match m.get("additionalProperties") {
            Some(Value::Bool(flag)) => {
                let mut item = Vec::new();
                key(&mut item, 2, 0);
                item.push(u8::from(*flag));
                bytes(&mut b, 21, &item);
            }
            Some(s @ Value::Object(_)) => {
                let mut item = Vec::new();
                bytes(&mut item, 1, &schema(s));
                bytes(&mut b, 21, &item);
            }
            _ => {}
        }
        match m.get("type") {
            Some(Value::String(t)) => {
                let mut item = Vec::new();
                bytes(&mut item, 1, t.as_bytes());
                bytes(&mut b, 22, &item);
            }
            Some(ts @ Value::Array(_)) => {
                let mut item = Vec::new();
                strings(&mut item, 1, Some(ts));
                bytes(&mut b, 22, &item);
            }
            _ => {}
        }
        match m.get("items") {
            Some(s @ Value::Object(_)) => {
                let mut item = Vec::new();
                bytes(&mut item, 1, &schema(s));
                bytes(&mut b, 23, &item);
            }
            Some(Value::Array(ss)) => {
                let mut item = Vec::new();
                for s in ss {
                    bytes(&mut item, 1, &schema(s));
                }
                bytes(&mut b, 23, &item);
            }
            _ => {}
        }
        for s in m
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            bytes(&mut b, 24, &schema(s));
        }
        if let Some(Value::Object(props)) = m.get("properties") {
            bytes(&mut b, 25, &named_schemas(props));
        }
        string(&mut b, 26, m.get("discriminator"));
        boolean(&mut b, 27, m.get("readOnly"));
        if let Some(e) = m.get("example") {
            bytes(&mut b, 30, &any(e));
        }
        extensions(&mut b, 31, m);
        b
    }

    /// `{ repeated NamedSchema additional_properties = 1 }` (Properties, Definitions).
    fn named_schemas(m: &Map<String, Value>) -> Vec<u8> {
        let mut b = Vec::new();
        for (name, s) in m {
            let mut named = Vec::new();
            bytes(&mut named, 1, name.as_bytes());
            bytes(&mut named, 2, &schema(s));
            bytes(&mut b, 1, &named);
        }
        b
    }

    /// `ParametersItem { parameter = 1 }`.
    fn parameter(p: &Value) -> Vec<u8> {
        let mut param = Vec::new();
        let location = p.get("in").and_then(Value::as_str).unwrap_or("");
        if location == "body" {
            let mut body = Vec::new();
            string(&mut body, 1, p.get("description"));
            string(&mut body, 2, p.get("name"));
            string(&mut body, 3, p.get("in"));
            boolean(&mut body, 4, p.get("required"));
            if let Some(s) = p.get("schema") {
                bytes(&mut body, 5, &schema(s));
            }
            bytes(&mut param, 1, &body);
        } else {
            // Query and path sub-schemas share fields 1-4; `type` and `uniqueItems` differ.
            let (field, ty, unique) = match location {
                "path" => (4, 5, 19),
                "header" => (1, 5, 19),
                _ => (3, 6, 20),
            };
            let mut sub = Vec::new();
            boolean(&mut sub, 1, p.get("required"));
            string(&mut sub, 2, p.get("in"));
            string(&mut sub, 3, p.get("description"));
            string(&mut sub, 4, p.get("name"));
            string(&mut sub, ty, p.get("type"));
            boolean(&mut sub, unique, p.get("uniqueItems"));
            let mut non_body = Vec::new();
            bytes(&mut non_body, field, &sub);
            bytes(&mut param, 2, &non_body);
        }
        let mut item = Vec::new();
        bytes(&mut item, 1, &param);
        item
    }

    fn operation(op: &Value) -> Vec<u8> {
        let mut b = Vec::new();
        let Value::Object(m) = op else { return b };
        strings(&mut b, 1, m.get("tags"));
        string(&mut b, 2, m.get("summary"));
        string(&mut b, 3, m.get("description"));
        string(&mut b, 5, m.get("operationId"));
        for p in m
            .get("parameters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            bytes(&mut b, 8, &parameter(p));
        }
        if let Some(Value::Object(rs)) = m.get("responses") {
            let mut responses = Vec::new();
            for (code, r) in rs {
                let mut resp = Vec::new();
                string(&mut resp, 1, r.get("description"));
                if let Some(s) = r.get("schema") {
                    let mut item = Vec::new();
                    bytes(&mut item, 1, &schema(s));
                    bytes(&mut resp, 2, &item);
                }
                let mut value = Vec::new();
                bytes(&mut value, 1, &resp);
                let mut named = Vec::new();
                bytes(&mut named, 1, code.as_bytes());
                bytes(&mut named, 2, &value);
                bytes(&mut responses, 1, &named);
            }
            bytes(&mut b, 9, &responses);
        }
        extensions(&mut b, 13, m);
        b
    }

    fn path_item(item: &Value) -> Vec<u8> {
        let mut b = Vec::new();
        for (method, field) in [
            ("get", 2),
            ("put", 3),
            ("post", 4),
            ("delete", 5),
            ("patch", 8),
        ] {
            if let Some(op) = item.get(method) {
                bytes(&mut b, field, &operation(op));
            }
        }
        for p in item
            .get("parameters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            bytes(&mut b, 9, &parameter(p));
        }
        b
    }

    /// `openapi.v2.Document`.
    pub(super) fn document(doc: &Value) -> Vec<u8> {
        let mut b = Vec::new();
        string(&mut b, 1, doc.get("swagger"));
        if let Some(info) = doc.get("info") {
            let mut i = Vec::new();
            string(&mut i, 1, info.get("title"));
            string(&mut i, 2, info.get("version"));
            bytes(&mut b, 2, &i);
        }
        if let Some(Value::Object(paths)) = doc.get("paths") {
            let mut p = Vec::new();
            for (name, item) in paths {
                let mut named = Vec::new();
                bytes(&mut named, 1, name.as_bytes());
                bytes(&mut named, 2, &path_item(item));
                bytes(&mut p, 2, &named);
            }
            bytes(&mut b, 8, &p);
        }
        if let Some(Value::Object(defs)) = doc.get("definitions") {
            bytes(&mut b, 9, &named_schemas(defs));
        }
        b
    }
}
