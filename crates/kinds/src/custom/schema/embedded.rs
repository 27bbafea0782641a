//! Upstream's `objectmeta.Validate` for `x-kubernetes-embedded-resource` objects: their
//! `apiVersion` and `kind` are required and well-formed, and their `metadata` is valid
//! ObjectMeta with path-segment names (a resource's own root metadata is the registry's).

use listwatch_api::labels::{label_value_errors, qualified_name_errors};
use serde_json::{Map, Value};

use super::build::join;
use crate::field::FieldError;

/// Upstream's `TotalAnnotationSizeLimitB`.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The errors of an embedded resource `m` at `path`.
pub(super) fn validate(path: &str, m: &Map<String, Value>, out: &mut Vec<FieldError>) {
    for k in ["apiVersion", "kind"] {
        let p = join(path, k);
        match m.get(k) {
            None => out.push(FieldError::required(&p, "")),
            Some(Value::String(s)) if s.is_empty() => out.push(FieldError::required(&p, "")),
            Some(Value::String(s)) if k == "apiVersion" => {
                if s.matches('/').count() > 1 {
                    out.push(FieldError::invalid(
                        &p,
                        &Value::String(s.clone()),
                        format!("unexpected GroupVersion string: {s}"),
                    ));
                }
            }
            Some(Value::String(s)) => {
                let errs = dns1035_label_errors(&s.to_lowercase());
                if !errs.is_empty() {
                    out.push(FieldError::invalid(
                        &p,
                        &Value::String(s.clone()),
                        format!(
                            "may have mixed case, but should otherwise match: {}",
                            errs.join(",")
                        ),
                    ));
                }
            }
            Some(other) => out.push(FieldError::invalid(&p, other, "must be a string")),
        }
    }
    let Some(meta) = m.get("metadata") else {
        return;
    };
    let mp = join(path, "metadata");
    let Value::Object(meta) = meta else {
        out.push(FieldError::invalid(&mp, meta, "must be an object"));
        return;
    };
    for (k, prefix) in [("name", false), ("generateName", true)] {
        if let Some(v) = meta.get(k) {
            let Some(s) = v.as_str() else {
                out.push(FieldError::invalid(&join(&mp, k), v, "must be a string"));
                continue;
            };
            for e in path_segment_errors(s, prefix) {
                out.push(FieldError::invalid(&join(&mp, k), v, e));
            }
        }
    }
    labels(&join(&mp, "labels"), meta.get("labels"), out);
    annotations(&join(&mp, "annotations"), meta.get("annotations"), out);
}

/// Upstream's `IsValidPathSegmentName` (`IsValidPathSegmentPrefix` for a prefix).
fn path_segment_errors(s: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        for bad in [".", ".."] {
            if s == bad {
                return vec![format!("may not be '{bad}'")];
            }
        }
    }
    ["/", "%"]
        .iter()
        .filter(|c| s.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// Upstream's `IsDNS1035Label`.
fn dns1035_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    let b = s.as_bytes();
    let ok = b.first().is_some_and(u8::is_ascii_lowercase)
        && b.last()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if !ok {
        errs.push(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
                .to_owned(),
        );
    }
    errs
}

fn labels(field: &str, v: Option<&Value>, out: &mut Vec<FieldError>) {
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                for e in qualified_name_errors(k) {
                    out.push(FieldError::invalid(field, &Value::String(k.clone()), e));
                }
                match v.as_str() {
                    Some(s) => {
                        for e in label_value_errors(s) {
                            out.push(FieldError::invalid(field, v, e));
                        }
                    }
                    None => out.push(FieldError::invalid(&join(field, k), v, "must be a string")),
                }
            }
        }
        Some(other) => out.push(FieldError::invalid(field, other, "must be a map")),
    }
}

fn annotations(field: &str, v: Option<&Value>, out: &mut Vec<FieldError>) {
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            let mut total = 0usize;
            for (k, v) in m {
                for e in qualified_name_errors(&k.to_lowercase()) {
                    out.push(FieldError::invalid(field, &Value::String(k.clone()), e));
                }
                match v.as_str() {
                    Some(s) => total = total.saturating_add(k.len() + s.len()),
                    None => out.push(FieldError::invalid(&join(field, k), v, "must be a string")),
                }
            }
            if total > MAX_ANNOTATIONS_BYTES {
                out.push(FieldError::new(
                    crate::field::ErrorType::TooLong,
                    field,
                    None,
                    format!("must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
                ));
            }
        }
        Some(other) => out.push(FieldError::invalid(field, other, "must be a map")),
    }
}
