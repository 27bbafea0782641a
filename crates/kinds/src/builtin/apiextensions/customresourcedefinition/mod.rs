//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): upstream's CRD strategy and
//! validation (apiextensions-apiserver `pkg/registry/customresourcedefinition/strategy.go`,
//! `etcd.go` and `pkg/apis/apiextensions/validation`), the parts clients rely on:
//!
//! - cluster-scoped, short names `crd`, `crds`, category `api-extensions`, a `/status`
//!   subresource, the generation bumped on spec changes, printed as NAME, CREATED AT;
//! - v1 defaulting on create and update: `names.singular` (the lower-case kind),
//!   `names.listKind` (kind + `List`), `conversion.strategy: None`; a create starts with an
//!   empty status; the storage version is added to `status.storedVersions` on create and on
//!   every update;
//! - validation (each a 422 cause in upstream's words): `metadata.name` must be
//!   `<plural>.<group>`; `spec.group` a DNS subdomain with at least one dot; `spec.scope`
//!   `Cluster` or `Namespaced`; at least one version, unique DNS-1035 version names, exactly
//!   one storage version; the names DNS-1035 labels (the kinds may have mixed case), kind and
//!   listKind different; printer column types and formats; on update, `spec.group` and
//!   `spec.names.plural` immutable, and `spec.scope` and `spec.names.kind` once the CRD is
//!   `Established`; `status.storedVersions` listing the storage version and only versions
//!   of `spec.versions`;
//! - not supported, refused with a 422 naming the field rather than ignored:
//!   `spec.conversion.strategy: Webhook`, CEL rules (`x-kubernetes-validations` anywhere
//!   in a schema), and a `names.listKind` other than the kind + `List`;
//! - the first DELETE adds the `customresourcecleanup.apiextensions.k8s.io` finalizer and a
//!   `Terminating` condition (upstream's CRD `Delete`): the CRD stays until the CRD controller
//!   has deleted every custom resource and removed the finalizer.
//!
//! The schema's own rules (structural, defaults, pruning) are the structural schema
//! module's ([`crate::custom::schema`]); see [`validate_schema`].
//!
//! This module owns the kind: its spec, strategy (defaulting, the first DELETE, the table),
//! conditions and timestamps; `validation` holds the checks of a CRD written, `tests`
//! their unit tests.
//!
//! Invariant: validation walks each document once (a schema within the structural schema
//! module's depth and step budgets); every violation names its field.

use serde_json::{Value, json};

use crate::FieldError;
use crate::crd::{CLEANUP_FINALIZER, GROUP, KIND, VERSION};
use crate::strategy::{KindStrategy, TableColumn};
use crate::{Generation, KindSpec};

#[cfg(test)]
mod tests;
mod validation;

pub use validation::validate_schema;
use validation::{
    validate_name, validate_names_of, validate_preserve_unknown_fields, validate_spec,
    validate_stored_versions,
};

/// `apiextensions.k8s.io/v1` customresourcedefinitions, with `/status`.
pub fn spec() -> KindSpec {
    KindSpec::new(GROUP, VERSION, "customresourcedefinitions", KIND)
        .namespaced(false)
        .short_names(["crd", "crds"])
        .categories(["api-extensions"])
        .status_subresource(true)
        .generation(Generation::Spec)
        .strategy(CrdStrategy)
}

/// The CRD strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct CrdStrategy;

fn set_if_missing(obj: &mut serde_json::Map<String, Value>, key: &str, value: Value) {
    if obj
        .get(key)
        .is_none_or(|v| v.is_null() || v.as_str() == Some(""))
    {
        obj.insert(key.into(), value);
    }
}

/// v1 defaulting of a CRD's spec (`SetDefaults_CustomResourceDefinitionSpec`).
fn default_spec(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if !kind.is_empty() {
            set_if_missing(names, "singular", Value::from(kind.to_ascii_lowercase()));
            set_if_missing(names, "listKind", Value::from(format!("{kind}List")));
        }
    }
    match spec.get_mut("conversion").and_then(Value::as_object_mut) {
        Some(c) => set_if_missing(c, "strategy", Value::from("None")),
        None => {
            spec.insert("conversion".into(), json!({"strategy": "None"}));
        }
    }
}

/// The storage version's name, when exactly one is marked.
fn storage_version(obj: &Value) -> Option<String> {
    let versions = obj.pointer("/spec/versions")?.as_array()?;
    let mut storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true));
    let first = storage.next()?;
    if storage.next().is_some() {
        return None;
    }
    first.get("name")?.as_str().map(str::to_owned)
}

/// Adds the storage version to `status.storedVersions` unless listed.
fn record_stored_version(obj: &mut Value) {
    let Some(v) = storage_version(obj) else {
        return;
    };
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    let status = o.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let stored = status
        .entry("storedVersions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !stored.is_array() {
        *stored = Value::Array(Vec::new());
    }
    if let Some(a) = stored.as_array_mut()
        && !a.iter().any(|s| s.as_str() == Some(v.as_str()))
    {
        a.push(Value::from(v));
    }
}

/// Whether the CRD's `condition` is `True`.
pub fn condition_true(obj: &Value, condition: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(condition)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Sets `condition` in `obj`'s `status.conditions` (upstream's `SetCRDCondition`): the
/// transition time moves only when the status changes. Returns whether anything changed.
pub fn set_condition(
    obj: &mut Value,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> bool {
    let Some(o) = obj.as_object_mut() else {
        return false;
    };
    let st = o.entry("status").or_insert_with(|| json!({}));
    if !st.is_object() {
        *st = json!({});
    }
    let Some(st) = st.as_object_mut() else {
        return false;
    };
    let conds = st
        .entry("conditions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !conds.is_array() {
        *conds = Value::Array(Vec::new());
    }
    let Some(conds) = conds.as_array_mut() else {
        return false;
    };
    let new = |time: &str| {
        json!({"type": type_, "status": status, "lastTransitionTime": time,
               "reason": reason, "message": message})
    };
    match conds
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
    {
        Some(c) => {
            let same_status = c.get("status").and_then(Value::as_str) == Some(status);
            let same = same_status
                && c.get("reason").and_then(Value::as_str) == Some(reason)
                && c.get("message").and_then(Value::as_str) == Some(message);
            if same {
                return false;
            }
            let time = if same_status {
                c.get("lastTransitionTime")
                    .and_then(Value::as_str)
                    .unwrap_or(now)
                    .to_owned()
            } else {
                now.to_owned()
            };
            *c = new(&time);
            true
        }
        None => {
            conds.push(new(now));
            true
        }
    }
}

impl KindStrategy for CrdStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        default_spec(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
        record_stored_version(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        default_spec(new);
        record_stored_version(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_name(obj);
        errs.extend(validate_spec(obj));
        errs.extend(validate_preserve_unknown_fields(obj, None));
        errs.extend(super::api_approval::validate(obj, None));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = validate_spec(new);
        let at = |v: &Value, p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let mut immutable = |path: &str, field: &str| {
            let (n, o) = (at(new, path), at(old, path));
            if n != o {
                errs.push(FieldError::invalid_str(field, &n, "field is immutable"));
            }
        };
        immutable("/spec/group", "spec.group");
        immutable("/spec/names/plural", "spec.names.plural");
        if condition_true(old, "Established") {
            immutable("/spec/scope", "spec.scope");
            immutable("/spec/names/kind", "spec.names.kind");
        }
        errs.extend(validate_names_of(
            new.pointer("/status/acceptedNames").unwrap_or(&Value::Null),
            "status.acceptedNames",
        ));
        errs.extend(validate_stored_versions(new));
        errs.extend(validate_preserve_unknown_fields(new, Some(old)));
        errs.extend(super::api_approval::validate(new, Some(old)));
        errs
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            let f = meta
                .entry("finalizers")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !f.is_array() {
                *f = Value::Array(Vec::new());
            }
            if let Some(a) = f.as_array_mut()
                && !a.iter().any(|x| x.as_str() == Some(CLEANUP_FINALIZER))
            {
                a.push(Value::from(CLEANUP_FINALIZER));
            }
        }
        let now = now_rfc3339();
        set_condition(
            obj,
            "Terminating",
            "True",
            "InstanceDeletionPending",
            "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
            &now,
        );
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let mut name = TableColumn::new(
            "Name",
            "string",
            "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
            0,
        );
        name.format = "name".into();
        Some(vec![
            name,
            TableColumn::new(
                "Created At",
                "date",
                "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
                0,
            ),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, _age: &str) -> Option<Vec<Value>> {
        let created = obj
            .pointer("/metadata/creationTimestamp")
            .cloned()
            .unwrap_or(Value::Null);
        Some(vec![Value::from(name), created])
    }
}

/// Now as RFC 3339 (UTC, seconds).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days).
pub fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}
