//! Daemon sets (`apps/v1`): upstream's v1 defaults (`updateStrategy` RollingUpdate with
//! `maxUnavailable: 1, maxSurge: 0`, `revisionHistoryLimit: 10`, the pod template's),
//! validation (the selector required, matching the template and immutable; the template's
//! pod spec: [`crate::builtin::podspec::workload`]), the status reset on create
//! (pkg/registry/apps/daemonset/strategy.go) and the printer (NAME DESIRED CURRENT READY
//! UP-TO-DATE AVAILABLE NODE SELECTOR AGE, and CONTAINERS IMAGES SELECTOR for `-o wide`).

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::podspec::{self, workload};
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, set_default};

/// `apps/v1` daemon sets.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(DaemonSetStrategy)
}

/// The daemon set strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct DaemonSetStrategy;

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    set_default(
        obj,
        &["spec", "updateStrategy", "type"],
        json!("RollingUpdate"),
    );
    if obj["spec"]["updateStrategy"]["type"] == "RollingUpdate" {
        let ru = ["spec", "updateStrategy", "rollingUpdate"];
        set_default(obj, &[ru[0], ru[1], ru[2], "maxUnavailable"], json!(1));
        set_default(obj, &[ru[0], ru[1], ru[2], "maxSurge"], json!(0));
    }
    set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
    podspec::defaults::template(obj.get_mut("spec").and_then(|s| s.get_mut("template")));
}

impl KindStrategy for DaemonSetStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert(
                "status".into(),
                json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                       "desiredNumberScheduled": 0, "numberReady": 0}),
            );
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        workload::selector_spec(&obj["spec"], "daemonset", "DaemonSet")
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        let mut out = workload::selector_spec(&new["spec"], "daemonset", "DaemonSet");
        out.extend(workload::selector_immutable(new, old));
        out
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let mut v = vec![
            print::name_column(),
            print::col(
                "Desired",
                "integer",
                "The total number of nodes that should be running the daemon pod.",
            ),
            print::col(
                "Current",
                "integer",
                "The number of nodes running at least one daemon pod.",
            ),
            print::col(
                "Ready",
                "integer",
                "The number of nodes that should be running the daemon pod and have a ready pod.",
            ),
            print::col(
                "Up-to-date",
                "integer",
                "The total number of nodes that are running the updated daemon pod.",
            ),
            print::col(
                "Available",
                "integer",
                "The number of nodes that should be running the daemon pod and have an available pod.",
            ),
            print::col(
                "Node Selector",
                "string",
                "The node selector of the daemon pods.",
            ),
            print::age_column(),
        ];
        v.extend(print::containers_images_selector(true));
        Some(v)
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let [containers, images] = print::containers_and_images(&spec["template"]);
        Some(vec![
            Value::String(name.into()),
            print::count(&status["desiredNumberScheduled"]),
            print::count(&status["currentNumberScheduled"]),
            print::count(&status["numberReady"]),
            print::count(&status["updatedNumberScheduled"]),
            print::count(&status["numberAvailable"]),
            Value::String(print::format_labels(
                spec["template"]["spec"]["nodeSelector"].as_object(),
            )),
            Value::String(age.into()),
            containers,
            images,
            Value::String(print::format_label_selector(&spec["selector"])),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_defaults_the_update_strategy() {
        let mut ds = json!({"spec": {}, "status": {"numberReady": 3}});
        DaemonSetStrategy.prepare_for_create(&mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(ds["status"]["numberReady"], 0);
        let c = DaemonSetStrategy.table_cells(&ds, "d", "1s").unwrap();
        assert_eq!(c.len(), DaemonSetStrategy.table_columns().unwrap().len());
        assert_eq!(c[6], json!("<none>"));
    }
}
