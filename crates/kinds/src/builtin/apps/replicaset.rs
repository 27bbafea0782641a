//! Replica sets (`apps/v1`): upstream's v1 default (`replicas: 1`, and the pod template's),
//! validation (the selector required, matching the template and immutable; the template's
//! pod spec: [`crate::builtin::podspec::workload`]), the status reset on
//! create (pkg/registry/apps/replicaset/strategy.go), no selectable field (`apps/v1` has no
//! field label function), and the printer (NAME DESIRED CURRENT READY AGE, and CONTAINERS IMAGES SELECTOR for
//! `-o wide`, shared with replication controllers).

use serde_json::{Value, json};

use super::super::print;
use crate::KindSpec;
use crate::builtin::podspec::{self, workload};
use crate::strategy::{KindStrategy, TableColumn, set_default};

/// `apps/v1` replica sets.
pub fn spec(base: KindSpec) -> KindSpec {
    // No field label function is registered for `apps/v1` (only `apps/v1beta1`/`v1beta2`
    // stateful sets have one), so `status.replicas`, which the registry's `GetAttrs` has, is
    // refused like any field but `metadata.name`/`metadata.namespace`.
    base.strategy(ReplicaSetStrategy)
}

/// The replica set strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplicaSetStrategy;

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    set_default(obj, &["spec", "replicas"], json!(1));
    podspec::defaults::template(obj.get_mut("spec").and_then(|s| s.get_mut("template")));
}

impl KindStrategy for ReplicaSetStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"replicas": 0}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    /// Upstream's message for an empty selector names deployments here too.
    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        workload::selector_spec(&obj["spec"], "deployment", "ReplicaSet")
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        let mut out = workload::selector_spec(&new["spec"], "deployment", "ReplicaSet");
        out.extend(workload::selector_immutable(new, old));
        out
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(replica_columns())
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let selector = print::format_label_selector(&obj["spec"]["selector"]);
        Some(replica_cells(obj, name, age, selector))
    }
}

/// The replica set and replication controller columns.
pub fn replica_columns() -> Vec<TableColumn> {
    let mut v = vec![
        print::name_column(),
        print::col("Desired", "integer", "Number of desired replicas."),
        print::col("Current", "integer", "Number of actual replicas."),
        print::col("Ready", "integer", "Number of ready replicas."),
        print::age_column(),
    ];
    v.extend(print::containers_images_selector(true));
    v
}

/// The replica set and replication controller cells, given the printed selector.
pub fn replica_cells(obj: &Value, name: &str, age: &str, selector: String) -> Vec<Value> {
    let (spec, status) = (&obj["spec"], &obj["status"]);
    let [containers, images] = print::containers_and_images(&spec["template"]);
    vec![
        Value::String(name.into()),
        Value::from(spec["replicas"].as_i64().unwrap_or(1)),
        print::count(&status["replicas"]),
        print::count(&status["readyReplicas"]),
        Value::String(age.into()),
        containers,
        images,
        Value::String(selector),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_defaults_replicas_and_resets_the_status() {
        let mut rs = json!({"spec": {}, "status": {"replicas": 4}});
        ReplicaSetStrategy.prepare_for_create(&mut rs);
        assert_eq!(rs["spec"]["replicas"], 1);
        assert_eq!(rs["status"], json!({"replicas": 0}));
    }

    #[test]
    fn rows_print_desired_current_ready() {
        let rs = json!({"spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1}});
        let c = ReplicaSetStrategy.table_cells(&rs, "web", "1m").unwrap();
        assert_eq!(c.len(), replica_columns().len());
        assert_eq!(
            c,
            [
                json!("web"),
                json!(3),
                json!(2),
                json!(1),
                json!("1m"),
                json!("c"),
                json!("nginx"),
                json!("app=web")
            ]
        );
    }
}
