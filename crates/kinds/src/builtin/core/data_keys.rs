//! The keys of a Secret's `data` and a ConfigMap's `data` and `binaryData`, judged as
//! upstream's `ValidateSecret` and `ValidateConfigMap` judge them: each key is a config key
//! ([`config_key_errors`], upstream's `IsConfigMapKey`: `[-._a-zA-Z0-9]+`, at most 253
//! characters, not `.` or `..`, not starting with `..`), and a config map's key is in
//! `data` or in `binaryData`, not both; and their sizes together at most
//! [`MAX_DATA_BYTES`] (upstream's `MaxSecretSize`, which `ValidateConfigMap` applies too).
//!
//! Invariant: pure; one pass over the keys; errors only for problems found.

use serde_json::Value;

use crate::FieldError;

/// Upstream's `corev1.MaxSecretSize`: the most bytes of a Secret's values, and of a
/// ConfigMap's `data` and `binaryData` values together (1 MiB).
pub const MAX_DATA_BYTES: usize = 1 << 20;

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

/// The decoded size of one value: a ConfigMap's `data` value as its UTF-8 bytes, a
/// base64 value (`binaryData`, a Secret's `data`) as the bytes it decodes to (computed from
/// its length and padding, not decoded; an undecodable value is refused elsewhere).
fn value_bytes(v: &Value, base64: bool) -> usize {
    let Some(s) = v.as_str() else { return 0 };
    if !base64 {
        return s.len();
    }
    let pad = s.bytes().rev().take_while(|b| *b == b'=').count().min(2);
    (s.len() / 4 * 3 + (s.len() % 4).saturating_sub(1)).saturating_sub(pad)
}

/// The total size of the values of `obj[field]`.
fn field_bytes(obj: &Value, field: &str, base64: bool) -> usize {
    obj.get(field).and_then(Value::as_object).map_or(0, |m| {
        m.values()
            .map(|v| value_bytes(v, base64))
            .fold(0, usize::saturating_add)
    })
}

/// Upstream's `TooLong` for values over [`MAX_DATA_BYTES`] at `field` (`""`: the whole object).
fn too_long(field: &str) -> FieldError {
    FieldError::new(
        crate::field::ErrorType::TooLong,
        field,
        None,
        format!("must have at most {MAX_DATA_BYTES} bytes"),
    )
}

/// A Secret's `data` over [`MAX_DATA_BYTES`] (upstream's `ValidateSecret`: `data: Too long`).
pub fn secret_size_errors(obj: &Value) -> Option<FieldError> {
    (field_bytes(obj, "data", true) > MAX_DATA_BYTES).then(|| too_long("data"))
}

/// A config map's keys: `data` and `binaryData`, each against the other; and their values'
/// size together (upstream reports it for the whole object, path `""`).
pub fn config_map_errors(obj: &Value) -> Vec<FieldError> {
    let mut out = key_errors(obj, "data", Some("binaryData"));
    out.extend(key_errors(obj, "binaryData", Some("data")));
    let total =
        field_bytes(obj, "data", false).saturating_add(field_bytes(obj, "binaryData", true));
    if total > MAX_DATA_BYTES {
        out.push(too_long(""));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// rt3: values over 1 MiB were accepted; upstream refuses them.
    #[test]
    fn values_over_one_mebibyte_are_too_long() {
        let mib = MAX_DATA_BYTES;
        let cm = |n: usize, b64: usize| json!({"data": {"a": "x".repeat(n)}, "binaryData": {"b": "QUJD".repeat(b64)}});
        assert!(config_map_errors(&cm(mib - 3, 1)).is_empty());
        let e = config_map_errors(&cm(mib - 2, 1));
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].field, "");
        assert_eq!(e[0].body(), "Too long: must have at most 1048576 bytes");
        // base64 sizes: 4 characters hold 3 bytes, less the padding.
        assert_eq!(value_bytes(&json!("QUJD"), true), 3);
        assert_eq!(value_bytes(&json!("QUI="), true), 2);
        assert_eq!(value_bytes(&json!("QQ=="), true), 1);
        assert_eq!(value_bytes(&json!(""), true), 0);
        // A Secret of exactly 1 MiB passes; one byte more does not.
        let secret = |n: usize| json!({"data": {"k": "A".repeat(n / 3 * 4)}});
        assert!(secret_size_errors(&secret(mib - mib % 3)).is_none());
        let big = json!({"data": {"k": "A".repeat((mib / 3 + 1) * 4)}});
        assert_eq!(
            secret_size_errors(&big).map(|e| e.field),
            Some("data".to_owned())
        );
    }

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
