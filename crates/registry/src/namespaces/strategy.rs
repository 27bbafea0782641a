//! The namespace strategy's rules for writes of namespaces, as upstream's
//! `pkg/registry/core/namespace/strategy.go` and `ValidateNamespace` /
//! `ValidateNamespaceFinalizeUpdate` (`pkg/apis/core/validation`):
//! - every namespace written carries the label `kubernetes.io/metadata.name` set to its name
//!   (upstream's defaulting and `Canonicalize`): a user cannot change or remove it, whatever
//!   the write (create, update, patch, apply, `/status`, `/finalize`);
//! - `spec.finalizers` hold qualified names, and a name without a `/` must be a standard one
//!   (`kubernetes`, `orphan`, `foregroundDeletion`);
//! - an update of the namespace (or its `/status`) keeps the stored `spec.finalizers`
//!   (`lifecycle::check_update`); only `PUT .../finalize` changes them, and it changes
//!   nothing of the status ([`prepare_finalize`]).

use serde_json::{Map, Value};

use crate::error::FieldError;

/// The label every namespace carries, its value the namespace's name.
pub const METADATA_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Finalizer names without a `/` that `spec.finalizers` accepts (upstream's
/// `standardFinalizers`).
const STANDARD_FINALIZERS: [&str; 3] = [
    super::NAMESPACE_FINALIZER,
    crate::lifecycle::FINALIZER_ORPHAN,
    crate::lifecycle::FINALIZER_FOREGROUND,
];

/// Sets `metadata.labels["kubernetes.io/metadata.name"]` of the namespace `obj` to its
/// name (a namespace without a name yet is left alone).
pub fn canonicalize(obj: &mut Map<String, Value>) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(name) = meta
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
    else {
        return;
    };
    if !meta.get("labels").is_some_and(Value::is_object) {
        meta.insert("labels".into(), Value::Object(Map::new()));
    }
    if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
        labels.insert(METADATA_NAME_LABEL.into(), Value::String(name));
    }
}

/// What is wrong with the namespace's `spec.finalizers` (upstream's `validateFinalizerName`
/// for each): `indexed` names each cause `spec.finalizers[i]` (the finalize update's
/// paths), else `spec.finalizers` (create and update).
pub fn validate_finalizers(obj: &Value, indexed: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(list) = obj.pointer("/spec/finalizers") else {
        return errs;
    };
    let list = match list {
        Value::Null => return errs,
        Value::Array(a) => a,
        other => {
            errs.push(FieldError::invalid_raw(
                "spec.finalizers",
                &other.to_string(),
                "must be a list",
            ));
            return errs;
        }
    };
    for (i, f) in list.iter().enumerate() {
        let field = if indexed {
            format!("spec.finalizers[{i}]")
        } else {
            "spec.finalizers".to_owned()
        };
        let Some(f) = f.as_str() else {
            errs.push(FieldError::invalid_raw(
                &field,
                &f.to_string(),
                "must be a string",
            ));
            continue;
        };
        for m in listwatch_api::labels::qualified_name_errors(f) {
            errs.push(FieldError::invalid(&field, f, m));
        }
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
            errs.push(FieldError::invalid(
                &field,
                f,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    errs
}

/// A `PUT .../finalize` of the stored namespace `cur` into `new` (already through the
/// update's common preparation): the status stays the stored one (upstream's
/// `namespaceFinalizeStrategy.PrepareForUpdate`); `spec.finalizers` are the body's.
pub fn prepare_finalize(cur: &Value, new: &mut Value) {
    let Some(obj) = new.as_object_mut() else {
        return;
    };
    match cur.get("status") {
        Some(s) => obj.insert("status".into(), s.clone()),
        None => obj.remove("status"),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_name_label_is_the_name_whatever_the_body_says() {
        let mut m = json!({"metadata": {"name": "a", "labels": {"kubernetes.io/metadata.name": "b", "x": "y"}}});
        let Value::Object(obj) = &mut m else { panic!() };
        canonicalize(obj);
        assert_eq!(
            m["metadata"]["labels"],
            json!({"kubernetes.io/metadata.name": "a", "x": "y"})
        );
        let mut m = json!({"metadata": {"name": "a", "labels": null}});
        let Value::Object(obj) = &mut m else { panic!() };
        canonicalize(obj);
        assert_eq!(
            m["metadata"]["labels"],
            json!({"kubernetes.io/metadata.name": "a"})
        );
        let mut m = json!({"metadata": {"generateName": "a-"}});
        let Value::Object(obj) = &mut m else { panic!() };
        canonicalize(obj);
        assert!(m["metadata"].get("labels").is_none());
    }

    #[test]
    fn finalizer_names_are_qualified_or_standard() {
        let ok = json!({"spec": {"finalizers": ["kubernetes", "orphan", "foregroundDeletion", "example.com/x"]}});
        assert!(validate_finalizers(&ok, true).is_empty());
        let bad = json!({"spec": {"finalizers": ["mine", "a/b/c", "ö.io/x", "x".repeat(70), 3]}});
        let errs = validate_finalizers(&bad, true);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.finalizers[0]"), "{fields:?}");
        assert!(fields.contains(&"spec.finalizers[1]"), "{fields:?}");
        assert!(fields.contains(&"spec.finalizers[2]"), "{fields:?}");
        assert!(fields.contains(&"spec.finalizers[3]"), "{fields:?}");
        assert!(fields.contains(&"spec.finalizers[4]"), "{fields:?}");
        assert!(
            errs.iter().any(|e| e.detail
                == "name is neither a standard finalizer name nor is it fully qualified")
        );
        let errs = validate_finalizers(&json!({"spec": {"finalizers": ["mine"]}}), false);
        assert_eq!(errs[0].field, "spec.finalizers");
    }
}
