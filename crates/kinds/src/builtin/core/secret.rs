//! Secrets (`v1`): upstream's v1 defaults set `type` to `Opaque` (a field selector reads an
//! object without one as `Opaque` too); `stringData` is write-only, folded into `data` on
//! every write as upstream's v1 conversion does (its entries override `data`'s, and it is
//! never stored or returned); the keys of `data` (after the fold) are config keys
//! ([`super::data_keys`], upstream's `ValidateSecret`); `type` never changes, and a secret
//! marked `immutable` keeps its `data` and the mark; what each `type` requires
//! ([`super::secret_type`]); upstream's printer (NAME TYPE DATA AGE).

use base64::Engine as _;
use serde_json::{Value, json};

use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, set_default};
use crate::{FieldError, Generation, KindSpec};

/// `v1` secrets.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "secrets", "Secret")
        .selectable_fields(["type"])
        .field_default("type", "Opaque")
        .generation(Generation::None)
        .strategy(SecretStrategy)
}

/// The secret strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct SecretStrategy;

impl KindStrategy for SecretStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        fold_string_data(obj);
        set_default(obj, &["type"], json!("Opaque"));
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        fold_string_data(new);
        // Go defaults every decoded body, an update's too: a body without `type` is Opaque
        // before `type`'s immutability is checked.
        set_default(new, &["type"], json!("Opaque"));
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        let mut out = string_data_left(obj);
        out.extend(super::data_keys::key_errors(obj, "data", None));
        out.extend(super::data_keys::secret_size_errors(obj));
        out.extend(super::secret_type::validate(obj));
        out
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut out = string_data_left(new);
        out.extend(super::data_keys::key_errors(new, "data", None));
        out.extend(super::data_keys::secret_size_errors(new));
        out.extend(super::secret_type::validate(new));
        if new.get("type") != old.get("type") {
            out.push(FieldError::invalid(
                "type",
                new.get("type").unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
        out.extend(immutable_contents(new, old, &["data"]));
        out
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col("Type", "string", "The type of the secret."),
            print::col("Data", "string", "The number of keys in data."),
            print::age_column(),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        // Upstream's decoding merges `stringData` into `data`; a key in both counts once.
        let mut keys: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        for f in ["data", "stringData"] {
            keys.extend(
                obj[f]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.as_str()),
            );
        }
        Some(vec![
            Value::String(name.into()),
            print::str_or(&obj["type"], ""),
            Value::from(keys.len() as u64),
            Value::String(age.into()),
        ])
    }
}

/// Upstream's v1 → internal conversion: each string of `stringData` becomes the base64 of
/// its bytes in `data`, over an entry of the same key; `stringData` goes. Entries that are
/// not strings stay (validation refuses them, as upstream's decoder refuses them).
fn fold_string_data(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let strings = match map.remove("stringData") {
        Some(Value::Object(strings)) => strings,
        None | Some(Value::Null) => return,
        // Not a map: put back, for validation to refuse.
        Some(other) => {
            map.insert("stringData".into(), other);
            return;
        }
    };
    let mut left = serde_json::Map::new();
    let mut folded = Vec::new();
    for (k, v) in strings {
        match v {
            Value::String(s) => folded.push((
                k,
                Value::String(base64::engine::general_purpose::STANDARD.encode(s.as_bytes())),
            )),
            other => {
                left.insert(k, other);
            }
        }
    }
    if !folded.is_empty() {
        if !map.get("data").is_some_and(Value::is_object) {
            map.insert("data".into(), Value::Object(serde_json::Map::new()));
        }
        if let Some(Value::Object(data)) = map.get_mut("data") {
            data.extend(folded);
        }
    }
    if !left.is_empty() {
        map.insert("stringData".into(), Value::Object(left));
    }
}

/// What is left of `stringData` after folding: entries that are not strings.
fn string_data_left(obj: &Value) -> Vec<FieldError> {
    match obj.get("stringData") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| FieldError::invalid(&format!("stringData[{k}]"), v, "must be a string"))
            .collect(),
        Some(other) => vec![FieldError::invalid(
            "stringData",
            other,
            "must be a map of strings",
        )],
    }
}

/// Upstream's rule for secrets and config maps marked `immutable: true`: the mark stays and
/// none of `fields` changes.
pub(crate) fn immutable_contents(new: &Value, old: &Value, fields: &[&str]) -> Vec<FieldError> {
    let mut out = Vec::new();
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return out;
    }
    let detail = "field is immutable when `immutable` is set";
    if new.get("immutable") != Some(&Value::Bool(true)) {
        out.push(FieldError::forbidden("immutable", detail));
    }
    // Go compares the maps: absent and empty are both nil after decoding.
    let contents = |v: &Value, f: &str| {
        v.get(f)
            .filter(|d| !d.is_null() && d.as_object().is_none_or(|m| !m.is_empty()))
            .cloned()
    };
    for f in fields {
        if contents(new, f) != contents(old, f) {
            out.push(FieldError::forbidden(f, detail));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_data_is_folded_into_data_over_its_entries() {
        let mut s =
            json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "hunter2", "c": ""}});
        SecretStrategy.prepare_for_create(&mut s);
        assert_eq!(
            s,
            json!({"data": {"a": "eA==", "b": "aHVudGVyMg==", "c": ""}, "type": "Opaque"})
        );
        assert!(SecretStrategy.validate_create(&s).is_empty());
        let mut bad = json!({"stringData": {"n": 1, "ok": "v"}});
        SecretStrategy.prepare_for_create(&mut bad);
        assert_eq!(bad["data"], json!({"ok": "dg=="}));
        assert_eq!(SecretStrategy.validate_create(&bad).len(), 1);
    }

    #[test]
    fn type_and_an_immutable_secret_s_data_do_not_change() {
        let old = json!({"type": "Opaque", "immutable": true, "data": {"a": "eA=="}});
        let same = old.clone();
        assert!(SecretStrategy.validate_update(&same, &old).is_empty());
        let changed = json!({"type": "kubernetes.io/tls", "immutable": false, "data": {"tls.crt": "", "tls.key": ""}});
        assert_eq!(SecretStrategy.validate_update(&changed, &old).len(), 3);
        let mut untyped = json!({"immutable": true, "data": {"a": "eA=="}});
        SecretStrategy.prepare_for_update(&mut untyped, &old);
        assert!(SecretStrategy.validate_update(&untyped, &old).is_empty());
    }

    #[test]
    fn rows_print_type_and_data_keys() {
        let s = json!({"type": "kubernetes.io/tls", "data": {"a": "", "b": ""}, "stringData": {"b": "x", "c": "y"}});
        let c = SecretStrategy.table_cells(&s, "s", "2m").unwrap();
        assert_eq!(
            c,
            [
                json!("s"),
                json!("kubernetes.io/tls"),
                json!(3),
                json!("2m")
            ]
        );
        assert_eq!(c.len(), SecretStrategy.table_columns().unwrap().len());
    }
}
