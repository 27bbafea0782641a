//! Persistent volume claims (`v1`): upstream's v1 default (`volumeMode: Filesystem`), the
//! status reset on create to `phase: Pending` (pkg/registry/core/persistentvolumeclaim)
//! and the printer (NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS
//! VOLUMEATTRIBUTESCLASS AGE, and VOLUMEMODE for `-o wide`).

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::print;
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
}
