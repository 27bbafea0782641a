//! Stateful sets (`apps/v1`): upstream's v1 defaults (`replicas: 1`, `podManagementPolicy:
//! OrderedReady`, `updateStrategy` RollingUpdate with `partition: 0`,
//! `revisionHistoryLimit: 10`, `persistentVolumeClaimRetentionPolicy` Retain/Retain, the pod
//! template's), validation (the selector required and matching the template, the template's
//! pod spec, and on update only `replicas`, `ordinals`, `template`, `updateStrategy`,
//! `revisionHistoryLimit`, `persistentVolumeClaimRetentionPolicy` and `minReadySeconds`
//! changing: [`crate::builtin::podspec::workload`]), the
//! status reset on create (pkg/registry/apps/statefulset/strategy.go) and the printer (NAME
//! READY AGE, and CONTAINERS IMAGES for `-o wide`).

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::podspec::{self, workload};
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, set_default};

/// `apps/v1` stateful sets.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(StatefulSetStrategy)
}

/// The stateful set strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct StatefulSetStrategy;

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    set_default(obj, &["spec", "replicas"], json!(1));
    set_default(obj, &["spec", "podManagementPolicy"], json!("OrderedReady"));
    set_default(
        obj,
        &["spec", "updateStrategy", "type"],
        json!("RollingUpdate"),
    );
    if obj["spec"]["updateStrategy"]["type"] == "RollingUpdate" {
        set_default(
            obj,
            &["spec", "updateStrategy", "rollingUpdate", "partition"],
            json!(0),
        );
    }
    set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
    let retention = ["spec", "persistentVolumeClaimRetentionPolicy"];
    set_default(
        obj,
        &[retention[0], retention[1], "whenDeleted"],
        json!("Retain"),
    );
    set_default(
        obj,
        &[retention[0], retention[1], "whenScaled"],
        json!("Retain"),
    );
    podspec::defaults::template(obj.get_mut("spec").and_then(|s| s.get_mut("template")));
}

impl KindStrategy for StatefulSetStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert(
                "status".into(),
                json!({"replicas": 0, "availableReplicas": 0}),
            );
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        workload::selector_spec(&obj["spec"], "statefulset", "StatefulSet")
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        let mut out = workload::selector_spec(&new["spec"], "statefulset", "StatefulSet");
        // The stored set defaulted as upstream defaults what it reads.
        let mut old = old.clone();
        defaults(&mut old);
        out.extend(workload::stateful_set_update(new, &old));
        out
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let mut v = vec![
            print::name_column(),
            print::col("Ready", "string", "Number of the pod with ready state"),
            print::age_column(),
        ];
        v.extend(print::containers_images_selector(false));
        Some(v)
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let [containers, images] = print::containers_and_images(&spec["template"]);
        Some(vec![
            Value::String(name.into()),
            Value::String(format!(
                "{}/{}",
                status["readyReplicas"].as_i64().unwrap_or(0),
                spec["replicas"].as_i64().unwrap_or(1)
            )),
            Value::String(age.into()),
            containers,
            images,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_defaults_policy_and_strategy() {
        let mut s = json!({"spec": {"replicas": 2}});
        StatefulSetStrategy.prepare_for_create(&mut s);
        assert_eq!(s["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(s["spec"]["updateStrategy"]["rollingUpdate"]["partition"], 0);
        assert_eq!(s["spec"]["replicas"], 2);
        let c = StatefulSetStrategy.table_cells(&s, "s", "1s").unwrap();
        assert_eq!(c.len(), StatefulSetStrategy.table_columns().unwrap().len());
        assert_eq!(c[1], json!("0/2"));
    }
}
