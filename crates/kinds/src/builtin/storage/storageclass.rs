//! Storage classes (`storage.k8s.io/v1`): upstream's v1 defaults (`reclaimPolicy: Delete`,
//! `volumeBindingMode: Immediate`) and printer (NAME — `(default)` appended for the default
//! class — PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE).

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, set_default};

/// The annotations marking the default class (GA and beta).
const DEFAULT_CLASS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

/// `storage.k8s.io/v1` storage classes.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(StorageClassStrategy)
}

/// The storage class strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct StorageClassStrategy;

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    set_default(obj, &["reclaimPolicy"], json!("Delete"));
    set_default(obj, &["volumeBindingMode"], json!("Immediate"));
}

impl KindStrategy for StorageClassStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col(
                "Provisioner",
                "string",
                "Indicates the type of the provisioner.",
            ),
            print::col(
                "ReclaimPolicy",
                "string",
                "Indicates the type of the reclaim policy.",
            ),
            print::col(
                "VolumeBindingMode",
                "string",
                "Indicates how PersistentVolumeClaims should be bound.",
            ),
            print::col(
                "AllowVolumeExpansion",
                "string",
                "Indicates whether the storage class allow volume expand.",
            ),
            print::age_column(),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let default = DEFAULT_CLASS
            .iter()
            .any(|a| obj["metadata"]["annotations"][*a] == "true");
        let shown = if default {
            format!("{name} (default)")
        } else {
            name.to_owned()
        };
        Some(vec![
            Value::String(shown),
            Value::String(obj["provisioner"].as_str().unwrap_or("").into()),
            Value::String(obj["reclaimPolicy"].as_str().unwrap_or("Delete").into()),
            Value::String(
                obj["volumeBindingMode"]
                    .as_str()
                    .unwrap_or("Immediate")
                    .into(),
            ),
            Value::String(
                if obj["allowVolumeExpansion"].as_bool() == Some(true) {
                    "true"
                } else {
                    "false"
                }
                .into(),
            ),
            Value::String(age.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_class_is_marked() {
        let mut sc =
            json!({"metadata": {"annotations": {DEFAULT_CLASS[0]: "true"}}, "provisioner": "p"});
        StorageClassStrategy.prepare_for_create(&mut sc);
        let c = StorageClassStrategy.table_cells(&sc, "fast", "1s").unwrap();
        assert_eq!(
            c,
            [
                json!("fast (default)"),
                json!("p"),
                json!("Delete"),
                json!("Immediate"),
                json!("false"),
                json!("1s")
            ]
        );
    }
}
