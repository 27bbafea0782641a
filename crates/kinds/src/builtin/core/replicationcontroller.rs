//! Replication controllers (`v1`): upstream's v1 defaults (`replicas: 1`; an empty selector
//! and empty labels taken from the template's labels, pkg/apis/core/v1/defaults.go), the
//! status reset on create, `status.replicas` as a selectable field, orphaning dependents by
//! default, the `/scale` selector read from `spec.selector` (a plain label map), and the
//! replica set printer.

use serde_json::{Value, json};

use crate::builtin::apps::replicaset::{replica_cells, replica_columns};
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, set_default};
use crate::{GcPolicy, KindSpec};

/// `v1` replication controllers.
pub fn spec(base: KindSpec) -> KindSpec {
    // `strconv.Itoa(int(rc.Status.Replicas))`: an unset count reads as `0`.
    base.selectable_fields(["status.replicas"])
        .field_default("status.replicas", "0")
        .gc_policy(GcPolicy::OrphanDependents)
        .strategy(ReplicationControllerStrategy)
}

/// The replication controller strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplicationControllerStrategy;

impl KindStrategy for ReplicationControllerStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_default(obj, &["spec", "replicas"], json!(1));
        let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
        if labels.as_object().is_some_and(|l| !l.is_empty()) {
            let empty = |v: &Value| v.as_object().is_none_or(serde_json::Map::is_empty);
            if empty(&obj["spec"]["selector"]) {
                obj["spec"]["selector"] = labels.clone();
            }
            if obj["metadata"].is_object() && empty(&obj["metadata"]["labels"]) {
                obj["metadata"]["labels"] = labels;
            }
        }
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"replicas": 0}));
        }
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(replica_columns())
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let selector = print::format_labels(obj["spec"]["selector"].as_object());
        Some(replica_cells(obj, name, age, selector))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_takes_selector_and_labels_from_the_template() {
        let mut rc = json!({"metadata": {"name": "r"}, "spec": {"template": {"metadata": {"labels": {"app": "a"}}}}});
        ReplicationControllerStrategy.prepare_for_create(&mut rc);
        assert_eq!(rc["spec"]["selector"], json!({"app": "a"}));
        assert_eq!(rc["metadata"]["labels"], json!({"app": "a"}));
        assert_eq!(rc["spec"]["replicas"], 1);
        let c = ReplicationControllerStrategy
            .table_cells(&rc, "r", "1s")
            .unwrap();
        assert_eq!(c[7], json!("app=a"));
    }
}
