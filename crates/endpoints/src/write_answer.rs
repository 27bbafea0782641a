//! A write's answer in the representation its `Accept` asked for. Upstream converts the
//! object a create, update, patch or delete answers with exactly as it converts a read's
//! (`transformResponseObject`, k8s.io/apiserver `pkg/endpoints/handlers/response.go`):
//! `PartialObjectMetadata` (what metadata clients send, e.g. kube-rs `patch_metadata`), or a
//! one-row `Table`; `PartialObjectMetadataList` is refused with 406, since a write's answer
//! is never a list.
//!
//! Invariants:
//! - a Status answer (a delete's `Success`, any failure) is never converted;
//! - the conversion reads the JSON response the handler built (bounded as the YAML
//!   conversion is), so no write handler knows about representations;
//! - a request that can only be refused (the List form, or a conversion of a collection
//!   delete) is refused before anything is written — upstream writes first and then fails
//!   the conversion; docs/conformance.md lists this difference;
//! - the converted body ends with a newline and keeps the answer's status code and headers
//!   (Warnings), with `Content-Type: application/json` as upstream's serializer sends it.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use listwatch_api::Object;
use serde_json::Value;

use crate::ErrorResponse;
use crate::error::{ApiError, ApiResult};
use crate::negotiate::{WriteFormat, negotiate_write_dropping};
use crate::query::IncludeObject;
use crate::resource::KindSpec;
use crate::table;

/// How a write's answer is to be converted (`None` in [`Conversion::of`]: sent as built).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conversion {
    format: WriteFormat,
    include: IncludeObject,
    /// `drop=metadata.managedFields` (KEP-5958): the answer's object goes out without it.
    drop_managed_fields: bool,
}

impl Conversion {
    /// The conversion a write asks for, or the 406 upstream answers (before the write: see
    /// the module docs). `collection`: a collection delete, whose answer is a list.
    pub(crate) fn of(
        info: &KindSpec,
        headers: &axum::http::HeaderMap,
        include: IncludeObject,
        collection: bool,
    ) -> ApiResult<Option<Self>> {
        let (format, drop) = negotiate_write_dropping(headers)?;
        match format {
            // A JSON answer whose client opts out of managedFields is cut (a collection
            // delete's list too: its items lose the field by the same cut of each).
            WriteFormat::Json if drop && !collection => Ok(Some(Self {
                format,
                include,
                drop_managed_fields: true,
            })),
            // The same cut for a CBOR answer, which `handlers::handle` then converts.
            WriteFormat::Cbor if drop && !collection => Ok(Some(Self {
                format: WriteFormat::Json,
                include,
                drop_managed_fields: true,
            })),
            WriteFormat::Json | WriteFormat::Yaml | WriteFormat::Cbor => Ok(None),
            WriteFormat::MetadataList => Err(ApiError::not_acceptable_conversion(&format!(
                "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
                go_type(info)
            ))),
            _ if collection => Err(ApiError::not_acceptable_conversion(
                "a collection delete's answer is not converted here; ask for application/json",
            )),
            WriteFormat::Table { .. } | WriteFormat::Metadata { .. } => Ok(Some(Self {
                format,
                include,
                drop_managed_fields: drop,
            })),
        }
    }

    /// Converts a handler's JSON answer; a Status, or any other response, is returned as it
    /// is.
    pub(crate) async fn apply(self, info: &KindSpec, resp: Response) -> Response {
        let is_json = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == b"application/json");
        if !is_json {
            return resp;
        }
        let (mut parts, body) = resp.into_parts();
        let bytes = match axum::body::to_bytes(body, crate::yaml::MAX_CONVERTED_BYTES).await {
            Ok(b) => b,
            Err(e) => {
                return ApiError::internal(format!("an answer too large to convert: {e}"))
                    .into_response();
            }
        };
        if self.format == WriteFormat::Json {
            // The object's own bytes without the member: nothing else changes.
            return match listwatch_api::drop_fields::without_managed_fields(&bytes) {
                Some(cut) => {
                    parts.headers.remove(header::CONTENT_LENGTH);
                    Response::from_parts(parts, Body::from(cut))
                }
                None => Response::from_parts(parts, Body::from(bytes)),
            };
        }
        let converted = match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) if v.get("kind").and_then(Value::as_str) == Some("Status") => None,
            Ok(v) => Some(self.convert(info, v)),
            Err(e) => Some(Err(ApiError::internal(format!(
                "an answer is not JSON: {e}"
            )))),
        };
        match converted {
            None => Response::from_parts(parts, Body::from(bytes)),
            Some(Ok(mut json)) => {
                json.push(b'\n');
                parts.headers.remove(header::CONTENT_LENGTH);
                parts.headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                Response::from_parts(parts, Body::from(json))
            }
            Some(Err(e)) => e.into_response(),
        }
    }

    fn convert(self, info: &KindSpec, mut v: Value) -> ApiResult<Vec<u8>> {
        if self.drop_managed_fields {
            crate::stream_list::drop_managed_fields(&mut v);
        }
        // Only Table and Metadata reach here (`Conversion::of`; JSON is cut in `apply`).
        match self.format {
            WriteFormat::Metadata { beta } => Ok(table::partial_metadata_json(&v, beta)),
            WriteFormat::Table { beta } => {
                let obj = Object::from_value(v, &info.selectable_fields)
                    .map_err(|e| ApiError::internal(format!("an answer is not an object: {e}")))?;
                table::table(
                    info,
                    std::slice::from_ref(&obj),
                    Some(obj.resource_version()),
                    None,
                    self.include,
                    beta,
                )
                .map_err(|e| ApiError::internal(format!("printing a table failed: {e}")))
            }
            WriteFormat::Json
            | WriteFormat::Yaml
            | WriteFormat::Cbor
            | WriteFormat::MetadataList => Err(ApiError::internal(
                "a write's answer converted to its own format",
            )),
        }
    }
}

/// The Go type upstream's message names (`%T` of the object the registry returned: the
/// internal type of a built-in kind, `*apps.Deployment`, `*core.ConfigMap`; a custom
/// resource is `*unstructured.Unstructured`).
fn go_type(info: &KindSpec) -> String {
    if info.custom_resource {
        return "*unstructured.Unstructured".into();
    }
    let package = match info.group.split('.').next() {
        None | Some("") => "core",
        Some(first) => first,
    };
    format!("*{package}.{}", info.kind)
}
