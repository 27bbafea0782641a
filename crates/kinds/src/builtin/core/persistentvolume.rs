//! Persistent volumes (`v1`): upstream's v1 defaults (`persistentVolumeReclaimPolicy:
//! Retain`, `volumeMode: Filesystem`), the status reset on create to `phase: Pending`
//! (pkg/registry/core/persistentvolume) and the printer (NAME CAPACITY ACCESS MODES RECLAIM
//! POLICY STATUS CLAIM STORAGECLASS VOLUMEATTRIBUTESCLASS REASON AGE, and VOLUMEMODE for
//! `-o wide`).

use serde_json::{Value, json};

use super::persistentvolumeclaim::{access_modes, storage_class};
use crate::KindSpec;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, set_default};

/// `v1` persistent volumes.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(PersistentVolumeStrategy)
}

/// The persistent volume strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct PersistentVolumeStrategy;

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    set_default(
        obj,
        &["spec", "persistentVolumeReclaimPolicy"],
        json!("Retain"),
    );
    set_default(obj, &["spec", "volumeMode"], json!("Filesystem"));
}

impl KindStrategy for PersistentVolumeStrategy {
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
            print::col("Capacity", "string", "The capacity of the volume."),
            print::col("Access Modes", "string", "The access modes of the volume."),
            print::col(
                "Reclaim Policy",
                "string",
                "What happens to the volume when released.",
            ),
            print::col("Status", "string", "The phase of the volume."),
            print::col("Claim", "string", "The claim bound to the volume."),
            print::col("StorageClass", "string", "The storage class of the volume."),
            print::col(
                "VolumeAttributesClass",
                "string",
                "The volume attributes class of the volume.",
            ),
            print::col("Reason", "string", "Why the volume is in its phase."),
            print::age_column(),
            print::wide("VolumeMode", "string", "The volume mode of the volume."),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let claim = match (
            spec["claimRef"]["namespace"].as_str(),
            spec["claimRef"]["name"].as_str(),
        ) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            _ => String::new(),
        };
        let phase = if obj["metadata"]["deletionTimestamp"].is_string() {
            "Terminating"
        } else {
            status["phase"].as_str().unwrap_or("")
        };
        Some(vec![
            Value::String(name.into()),
            Value::String(spec["capacity"]["storage"].as_str().unwrap_or("").into()),
            Value::String(access_modes(&spec["accessModes"])),
            Value::String(
                spec["persistentVolumeReclaimPolicy"]
                    .as_str()
                    .unwrap_or("")
                    .into(),
            ),
            Value::String(phase.into()),
            Value::String(claim),
            Value::String(storage_class(obj)),
            Value::String(
                spec["volumeAttributesClassName"]
                    .as_str()
                    .unwrap_or("<unset>")
                    .into(),
            ),
            Value::String(status["reason"].as_str().unwrap_or("").into()),
            Value::String(age.into()),
            Value::String(spec["volumeMode"].as_str().unwrap_or("<unset>").into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_defaults_and_rows() {
        let mut pv = json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "claimRef": {"namespace": "default", "name": "c"}}});
        PersistentVolumeStrategy.prepare_for_create(&mut pv);
        let c = PersistentVolumeStrategy
            .table_cells(&pv, "v", "1s")
            .unwrap();
        assert_eq!(
            c.len(),
            PersistentVolumeStrategy.table_columns().unwrap().len()
        );
        assert_eq!(
            c[..6],
            [
                json!("v"),
                json!("1Gi"),
                json!("RWO"),
                json!("Retain"),
                json!("Pending"),
                json!("default/c")
            ]
        );
    }
}
