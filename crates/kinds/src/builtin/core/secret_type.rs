//! What each built-in secret `type` requires of a secret (upstream's `ValidateSecret`, the
//! `switch` on the type): the keys of `data` (after `stringData` is folded in) and, for
//! service-account tokens, an annotation. Types not listed here (`Opaque`, `""`, any other
//! string) require nothing.
//!
//! Invariants: only reads the object; the messages and field paths are upstream's
//! (`Required` with an empty detail; a docker config that is not a JSON object is `Invalid`
//! with the value shown as `<secret contents redacted>`); a `data` value that is not base64
//! is left to the data validation (its JSON is not checked here). Key names are not this
//! module's business (the secret strategy validates them).

use base64::Engine as _;
use serde_json::Value;

use crate::FieldError;

/// The annotation a `kubernetes.io/service-account-token` secret must carry.
const SERVICE_ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";

/// Upstream's rules for `obj`'s `type`: the errors, empty when it meets them.
pub fn validate(obj: &Value) -> Vec<FieldError> {
    let data = obj.get("data").and_then(Value::as_object);
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    let key = |k: &str| format!("data[{k}]");
    let mut out = Vec::new();
    match obj.get("type").and_then(Value::as_str).unwrap_or("") {
        "kubernetes.io/service-account-token" => {
            let named = obj["metadata"]["annotations"][SERVICE_ACCOUNT_NAME]
                .as_str()
                .is_some_and(|v| !v.is_empty());
            if !named {
                out.push(FieldError::required(
                    &format!("metadata.annotations[{SERVICE_ACCOUNT_NAME}]"),
                    "",
                ));
            }
        }
        t @ ("kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson") => {
            let k = if t == "kubernetes.io/dockercfg" {
                ".dockercfg"
            } else {
                ".dockerconfigjson"
            };
            match data.and_then(|d| d.get(k)) {
                None => out.push(FieldError::required(&key(k), "")),
                Some(v) => {
                    if let Some(why) = decoded(v).and_then(|b| not_a_json_object(&b)) {
                        out.push(FieldError::invalid_str(
                            &key(k),
                            "<secret contents redacted>",
                            why,
                        ));
                    }
                }
            }
        }
        // Either may be empty, but one must be there.
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            out.push(FieldError::required(&key("username"), ""));
            out.push(FieldError::required(&key("password"), ""));
        }
        "kubernetes.io/ssh-auth" => {
            let empty = data
                .and_then(|d| d.get("ssh-privatekey"))
                .is_none_or(|v| v.as_str().is_none_or(str::is_empty));
            if empty {
                out.push(FieldError::required(&key("ssh-privatekey"), ""));
            }
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    out.push(FieldError::required(&key(k), ""));
                }
            }
        }
        _ => {}
    }
    out
}

/// The bytes a `data` value stands for; `None` when it is not a base64 string (the data
/// validation refuses it).
fn decoded(v: &Value) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str()?)
        .ok()
}

/// Why `bytes` would not decode into Go's `map[string]interface{}` (as upstream checks a
/// docker config), in Go's words for the usual cases; `None` when it would (`null` does).
fn not_a_json_object(bytes: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(_) | Value::Null) => None,
        Ok(other) => {
            let kind = match other {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                _ => "bool",
            };
            Some(format!(
                "json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
            ))
        }
        Err(e) => {
            let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
            Some(match first {
                None => "unexpected end of JSON input".to_owned(),
                Some(&c) if !b"{[\"-0123456789tfn".contains(&c) => {
                    format!(
                        "invalid character {} looking for beginning of value",
                        shown(c)
                    )
                }
                Some(&c) => literal_error(bytes, c).unwrap_or_else(|| e.to_string()),
            })
        }
    }
}

/// Go's message for `bytes` starting with `first`, one of `t`, `f`, `n`, whose literal
/// (`true`, `false`, `null`) breaks off: the first character that differs, or the end.
fn literal_error(bytes: &[u8], first: u8) -> Option<String> {
    let literal: &[u8] = match first {
        b't' => b"true",
        b'f' => b"false",
        b'n' => b"null",
        _ => return None,
    };
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = bytes.get(start..)?;
    for (i, want) in literal.iter().enumerate() {
        match rest.get(i) {
            None => return Some("unexpected end of JSON input".to_owned()),
            Some(got) if got != want => {
                return Some(format!(
                    "invalid character {} in literal {} (expecting '{}')",
                    shown(*got),
                    String::from_utf8_lossy(literal),
                    char::from(*want)
                ));
            }
            Some(_) => {}
        }
    }
    None
}

/// A byte as Go's JSON errors quote it.
fn shown(c: u8) -> String {
    if c.is_ascii_graphic() || c == b' ' {
        format!("'{}'", char::from(c))
    } else {
        format!("'\\x{c:02x}'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(obj: &Value) -> Vec<String> {
        validate(obj).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn each_type_requires_upstream_s_keys() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert!(validate(&json!({"type": "Opaque"})).is_empty());
        assert!(validate(&json!({"type": "example.com/any"})).is_empty());
        assert_eq!(validate(&json!({"type": "kubernetes.io/tls"})).len(), 2);
        assert!(
            validate(&json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}}))
                .is_empty()
        );
        assert_eq!(
            validate(&json!({"type": "kubernetes.io/basic-auth", "data": {}})).len(),
            2
        );
        assert!(
            validate(&json!({"type": "kubernetes.io/basic-auth", "data": {"password": ""}}))
                .is_empty()
        );
        assert_eq!(
            validate(&json!({"type": "kubernetes.io/ssh-auth", "data": {"ssh-privatekey": ""}}))
                .len(),
            1
        );
        let sa = json!({"type": "kubernetes.io/service-account-token", "metadata": {}});
        assert_eq!(validate(&sa).len(), 1);
        let named = json!({"type": "kubernetes.io/service-account-token",
            "metadata": {"annotations": {"kubernetes.io/service-account.name": "default"}}});
        assert!(validate(&named).is_empty());
        let missing = json!({"type": "kubernetes.io/dockerconfigjson"});
        assert_eq!(validate(&missing).len(), 1);
        let good = json!({"type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": b64(r#"{"auths": {}}"#)}});
        assert!(validate(&good).is_empty());
        let bad = json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64("nope")}});
        let e = errors(&bad);
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("<secret contents redacted>"), "{e:?}");
        assert!(
            e[0].contains("invalid character 'o' in literal null (expecting 'u')"),
            "{e:?}"
        );
        let word = json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64("}")}});
        assert!(errors(&word)[0].contains("invalid character '}' looking for beginning"));
        let list = json!({"type": "kubernetes.io/dockercfg", "data": {".dockercfg": b64("[]")}});
        assert!(errors(&list)[0].contains("cannot unmarshal array"));
    }
}
