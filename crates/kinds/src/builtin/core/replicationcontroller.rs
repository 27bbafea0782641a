//! Replication controllers (`v1`): upstream's v1 defaults (`replicas: 1`; an empty selector
//! and empty labels taken from the template's labels, pkg/apis/core/v1/defaults.go; the pod
//! template's), upstream's `ValidateReplicationControllerSpec` (a selector the template's
//! labels match, a valid pod template restarting `Always`), the
//! status reset on create, `status.replicas` as a selectable field, orphaning dependents by
//! default, the `/scale` selector read from `spec.selector` (a plain label map), and the
//! replica set printer.

use serde_json::{Value, json};

use crate::builtin::apps::replicaset::{replica_cells, replica_columns};
use crate::builtin::podspec::{self, workload};
use crate::builtin::print;
use crate::field::{ErrorType, FieldError};
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

/// `SetDefaults_ReplicationController` and the pod template's defaults.
fn defaults(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    podspec::defaults::template(obj.get_mut("spec").and_then(|s| s.get_mut("template")));
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
}

/// Upstream's `ValidateReplicationControllerSpec`: a selector, non-negative replicas, a
/// template whose labels the selector matches, with a valid pod spec restarting `Always`.
fn validate(obj: &Value) -> Vec<FieldError> {
    let spec = &obj["spec"];
    let mut out = Vec::new();
    let selector = spec["selector"].as_object().filter(|s| !s.is_empty());
    if selector.is_none() {
        out.push(FieldError::required("spec.selector", ""));
    }
    if let Some(n) = spec["replicas"].as_i64().filter(|n| *n < 0) {
        out.push(FieldError::invalid(
            "spec.replicas",
            &Value::from(n),
            "must be greater than or equal to 0",
        ));
    }
    let template = &spec["template"];
    if !template.is_object() {
        out.push(FieldError::required("spec.template", ""));
        return out;
    }
    let labels = &template["metadata"]["labels"];
    let matched = selector
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).is_some_and(|l| l == v));
    if !matched {
        out.push(FieldError::new(
            ErrorType::Invalid,
            "spec.template.metadata.labels",
            Some(podspec::go_string_map(labels)),
            workload::NOT_MATCHING,
        ));
    }
    out.extend(workload::template(
        template,
        "spec.template",
        Some("ReplicationController"),
    ));
    out
}

impl KindStrategy for ReplicationControllerStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"replicas": 0}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        validate(obj)
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        validate(new)
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
