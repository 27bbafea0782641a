//! Persistent volume claims (`v1`): upstream's v1 default (`volumeMode: Filesystem`), the
//! status reset on create to `phase: Pending` (pkg/registry/core/persistentvolumeclaim)
//! and the printer (NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS
//! VOLUMEATTRIBUTESCLASS AGE, and VOLUMEMODE for `-o wide`), and upstream's update rule
//! (pkg/apis/core/validation `ValidatePersistentVolumeClaimUpdate`): the spec is immutable
//! but for `volumeName` while the claim is unbound, `resources.requests.storage` (never
//! down to `status.capacity`) once it is bound, and `volumeAttributesClassName` (never
//! back to unset).
//!
//! Invariant: the update rule compares by value (`podspec::semantic_eq`, quantities by
//! their value), so a claim stored by an earlier build (no `volumeMode`, `1Gi` written
//! `1073741824`) still takes a metadata-only update.

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::podspec::semantic_eq;
use crate::builtin::print;
use crate::builtin::quantity::quantity_nanos;
use crate::strategy::{KindStrategy, TableColumn, set_default};

/// `v1` persistent volume claims.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(PersistentVolumeClaimStrategy)
}

/// The persistent volume claim strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct PersistentVolumeClaimStrategy;

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
}

impl KindStrategy for PersistentVolumeClaimStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"phase": "Pending"}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        update_rules(new, old)
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col("Status", "string", "The phase of the claim."),
            print::col("Volume", "string", "The volume bound to the claim."),
            print::col("Capacity", "string", "The capacity of the bound volume."),
            print::col(
                "Access Modes",
                "string",
                "The access modes of the bound volume.",
            ),
            print::col("StorageClass", "string", "The storage class of the claim."),
            print::col(
                "VolumeAttributesClass",
                "string",
                "The volume attributes class of the claim.",
            ),
            print::age_column(),
            print::wide("VolumeMode", "string", "The volume mode of the claim."),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let phase = if obj["metadata"]["deletionTimestamp"].is_string() {
            "Terminating"
        } else {
            status["phase"].as_str().unwrap_or("")
        };
        let bound = spec["volumeName"].as_str().is_some_and(|v| !v.is_empty());
        let (capacity, modes) = if bound {
            (
                status["capacity"]["storage"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                access_modes(&status["accessModes"]),
            )
        } else {
            (String::new(), String::new())
        };
        Some(vec![
            Value::String(name.into()),
            Value::String(phase.into()),
            Value::String(spec["volumeName"].as_str().unwrap_or("").into()),
            Value::String(capacity),
            Value::String(modes),
            Value::String(storage_class(obj)),
            Value::String(
                spec["volumeAttributesClassName"]
                    .as_str()
                    .unwrap_or("<unset>")
                    .into(),
            ),
            Value::String(age.into()),
            Value::String(spec["volumeMode"].as_str().unwrap_or("<unset>").into()),
        ])
    }
}

/// The detail of upstream's `Forbidden` on `spec` (upstream appends a diff of the two specs;
/// not here).
const IMMUTABLE: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

/// Upstream's `ValidatePersistentVolumeClaimUpdate` (the storage class annotation upgrade
/// aside): see the module doc.
fn update_rules(new: &Value, old: &Value) -> Vec<crate::FieldError> {
    let mut out = Vec::new();
    let mut old_spec = old["spec"].clone();
    let mut new_spec = new["spec"].clone();
    if !old_spec.is_object() || !new_spec.is_object() {
        return out;
    }
    // Both defaulted (the stored one may predate the default).
    set_default(&mut old_spec, &["volumeMode"], json!("Filesystem"));
    set_default(&mut new_spec, &["volumeMode"], json!("Filesystem"));
    // The binder sets `volumeName` on an unbound claim.
    if old_spec["volumeName"].as_str().is_none_or(str::is_empty) {
        old_spec["volumeName"] = new_spec["volumeName"].clone();
    }
    // `volumeAttributesClassName` is mutable, but not back to unset.
    if old_spec["volumeAttributesClassName"].is_string() {
        match new_spec["volumeAttributesClassName"].as_str() {
            None => out.push(crate::FieldError::forbidden(
                "spec.volumeAttributesClassName",
                "update from non-nil value to nil is forbidden",
            )),
            Some("") => out.push(crate::FieldError::invalid_str(
                "spec.volumeAttributesClassName",
                "",
                "an empty string is not allowed",
            )),
            Some(_) => {}
        }
    }
    new_spec["volumeAttributesClassName"] = old_spec["volumeAttributesClassName"].clone();
    // Quantities written differently but equal compare equal.
    for list in ["requests", "limits"] {
        let olds = old_spec["resources"][list].clone();
        if let Some(news) = new_spec
            .pointer_mut(&format!("/resources/{list}"))
            .and_then(Value::as_object_mut)
        {
            for (k, v) in news.iter_mut() {
                let was = olds.get(k).and_then(quantity_nanos);
                if was.is_some() && was == quantity_nanos(v) {
                    *v = olds[k.as_str()].clone();
                }
            }
        }
    }
    let phase = new["status"]["phase"]
        .as_str()
        .or_else(|| old["status"]["phase"].as_str());
    let requests = new_spec["resources"]["requests"].is_object();
    if phase == Some("Bound") && requests {
        let new_size = quantity_nanos(&new_spec["resources"]["requests"]["storage"]);
        let old_size = quantity_nanos(&old_spec["resources"]["requests"]["storage"]);
        new_spec["resources"]["requests"]["storage"] =
            old_spec["resources"]["requests"]["storage"].clone();
        if !semantic_eq(&new_spec, &old_spec) {
            out.push(crate::FieldError::forbidden("spec", IMMUTABLE));
        }
        // A shrink recovers from a failed expansion, down to above the capacity (upstream's
        // RecoverVolumeExpansionFailure, on by default).
        let capacity = quantity_nanos(&old["status"]["capacity"]["storage"]).unwrap_or(0);
        if let (Some(n), Some(o)) = (new_size, old_size)
            && n < o
            && n <= capacity
        {
            out.push(crate::FieldError::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than status.capacity",
            ));
        }
    } else if !semantic_eq(&new_spec, &old_spec) {
        out.push(crate::FieldError::forbidden("spec", IMMUTABLE));
    }
    out
}

/// The storage class of a claim or volume (the beta annotation first, as upstream's
/// `GetPersistentVolumeClaimClass`).
pub fn storage_class(obj: &Value) -> String {
    obj["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
        .as_str()
        .or_else(|| obj["spec"]["storageClassName"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// Access modes abbreviated as upstream's `GetAccessModesAsString` (`RWO,ROX,RWX,RWOP`, in
/// that order, each once).
pub fn access_modes(modes: &Value) -> String {
    let has = |m: &str| modes.as_array().is_some_and(|a| a.iter().any(|x| x == m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .into_iter()
    .filter(|(m, _)| has(m))
    .map(|(_, short)| short)
    .collect::<Vec<_>>()
    .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_defaults_and_rows() {
        let mut pvc =
            json!({"spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"]}});
        PersistentVolumeClaimStrategy.prepare_for_create(&mut pvc);
        assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
        let c = PersistentVolumeClaimStrategy
            .table_cells(&pvc, "c", "1s")
            .unwrap();
        assert_eq!(
            c.len(),
            PersistentVolumeClaimStrategy.table_columns().unwrap().len()
        );
        assert_eq!(
            c[..6],
            [
                json!("c"),
                json!("Pending"),
                json!(""),
                json!(""),
                json!(""),
                json!("fast")
            ]
        );
        assert_eq!(
            access_modes(&json!(["ReadWriteMany", "ReadWriteOnce"])),
            "RWO,RWX"
        );
    }

    fn claim(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "c"}, "spec": spec, "status": status})
    }

    fn bodies(new: &Value, old: &Value) -> Vec<String> {
        PersistentVolumeClaimStrategy
            .validate_update(new, old)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect()
    }

    #[test]
    fn an_unbound_claims_spec_is_immutable_but_for_its_volume_name() {
        let spec = json!({"accessModes": ["ReadWriteOnce"], "storageClassName": "std",
            "resources": {"requests": {"storage": "2Gi"}}});
        let old = claim(spec.clone(), json!({"phase": "Pending"}));
        let forbidden = format!("spec: Forbidden: {IMMUTABLE}");
        for (field, value) in [
            ("accessModes", json!(["ReadWriteMany"])),
            ("storageClassName", json!("fast")),
            ("resources", json!({"requests": {"storage": "1Gi"}})),
            ("resources", json!({"requests": {"storage": "3Gi"}})),
        ] {
            let mut new = old.clone();
            new["spec"][field] = value;
            assert_eq!(
                bodies(&new, &old),
                std::slice::from_ref(&forbidden),
                "{field}"
            );
        }
        // Unchanged but for the defaulted volume mode and the quantity's spelling; the
        // binder's volumeName; a volume attributes class; labels.
        let mut new = old.clone();
        new["spec"]["volumeMode"] = json!("Filesystem");
        new["spec"]["resources"]["requests"]["storage"] = json!("2147483648");
        new["spec"]["volumeName"] = json!("pv-1");
        new["spec"]["volumeAttributesClassName"] = json!("gold");
        new["metadata"]["labels"] = json!({"a": "b"});
        assert_eq!(bodies(&new, &old), Vec::<String>::new());
        // Once bound, the volume name is fixed, and the class may not be unset.
        let mut bound = new.clone();
        bound["status"] = json!({"phase": "Bound", "capacity": {"storage": "2Gi"}});
        let mut moved = bound.clone();
        moved["spec"]["volumeName"] = json!("pv-2");
        moved["spec"]
            .as_object_mut()
            .unwrap()
            .remove("volumeAttributesClassName");
        assert_eq!(
            bodies(&moved, &bound),
            [
                "spec.volumeAttributesClassName: Forbidden: update from non-nil value to nil is forbidden".to_owned(),
                forbidden
            ]
        );
    }

    #[test]
    fn a_bound_claim_grows_and_never_shrinks_to_its_capacity() {
        let old = claim(
            json!({"accessModes": ["ReadWriteOnce"], "volumeName": "pv",
                "resources": {"requests": {"storage": "2Gi"}}}),
            json!({"phase": "Bound", "capacity": {"storage": "2Gi"}}),
        );
        let mut grown = old.clone();
        grown["spec"]["resources"]["requests"]["storage"] = json!("5Gi");
        assert_eq!(bodies(&grown, &old), Vec::<String>::new());
        // Back from a failed 5Gi expansion to 3Gi: above the 2Gi capacity, allowed.
        let mut recovering = grown.clone();
        recovering["spec"]["resources"]["requests"]["storage"] = json!("3Gi");
        assert_eq!(bodies(&recovering, &grown), Vec::<String>::new());
        let mut shrunk = old.clone();
        shrunk["spec"]["resources"]["requests"]["storage"] = json!("1Gi");
        assert_eq!(
            bodies(&shrunk, &old),
            [
                "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity"
            ]
        );
    }
}
