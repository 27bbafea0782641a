//! The keys of a Secret's `data` and a ConfigMap's `data` and `binaryData`, judged as
//! upstream's `ValidateSecret` and `ValidateConfigMap` judge them: each key is a config key
//! ([`config_key_errors`], upstream's `IsConfigMapKey`: `[-._a-zA-Z0-9]+`, at most 253
//! characters, not `.` or `..`, not starting with `..`), and a config map's key is in
//! `data` or in `binaryData`, not both.
//!
//! Invariant: pure; one pass over the keys; errors only for problems found.

use serde_json::Value;

use crate::FieldError;

/// Upstream's `DNS1123SubdomainMaxLength`, the longest key.
pub const MAX_KEY_LEN: usize = 253;

const CONFIG_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_KEY_MSG: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

/// Upstream's `IsConfigMapKey`: every problem with `key` as a Secret's or ConfigMap's key.
pub fn config_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > MAX_KEY_LEN {
        errs.push(format!("must be no more than {MAX_KEY_LEN} characters"));
    }
    let fits = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !fits {
        errs.push(format!(
            "{CONFIG_KEY_MSG} (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '{CONFIG_KEY_FMT}')"
        ));
    }
    match key {
        "." => errs.push("must not be '.'".into()),
        ".." => errs.push("must not be '..'".into()),
        k if k.starts_with("..") => errs.push("must not start with '..'".into()),
        _ => {}
    }
    errs
}

/// The problems of the keys of `obj[field]`, each at `field[key]`; with `other`, a key also
/// in `obj[other]` is `duplicate of key present in <other>`.
pub fn key_errors(obj: &Value, field: &str, other: Option<&str>) -> Vec<FieldError> {
    let mut out = Vec::new();
    let Some(map) = obj.get(field).and_then(Value::as_object) else {
        return out;
    };
    let twin = other.and_then(|o| obj.get(o).and_then(Value::as_object).map(|m| (o, m)));
    for key in map.keys() {
        let at = format!("{field}[{key}]");
        for m in config_key_errors(key) {
            out.push(FieldError::invalid_str(&at, key, m));
        }
        if let Some((o, m)) = twin
            && m.contains_key(key)
        {
            out.push(FieldError::invalid_str(
                &at,
                key,
                format!("duplicate of key present in {o}"),
            ));
        }
    }
    out
}

/// A config map's keys: `data` and `binaryData`, each against the other.
pub fn config_map_errors(obj: &Value) -> Vec<FieldError> {
    let mut out = key_errors(obj, "data", Some("binaryData"));
    out.extend(key_errors(obj, "binaryData", Some("data")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_judged_as_upstream() {
        for ok in ["a", "key.name", "KEY_NAME", "key-name", ".hidden", "a..b"] {
            assert!(config_key_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(config_key_errors("."), ["must not be '.'"]);
        assert_eq!(config_key_errors(".."), ["must not be '..'"]);
        assert_eq!(config_key_errors("..x"), ["must not start with '..'"]);
        assert!(config_key_errors("a/b")[0].starts_with("a valid config key must consist"));
        assert_eq!(config_key_errors("").len(), 1);
        assert_eq!(
            config_key_errors(&"k".repeat(254)),
            ["must be no more than 253 characters"]
        );
        let cm = json!({"data": {"a": "1", "b/c": "2"}, "binaryData": {"a": "AA=="}});
        let e: Vec<String> = config_map_errors(&cm)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect();
        assert_eq!(
            e,
            [
                "data[a]: Invalid value: \"a\": duplicate of key present in binaryData",
                "data[b/c]: Invalid value: \"b/c\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                "binaryData[a]: Invalid value: \"a\": duplicate of key present in data",
            ]
        );
    }
}
