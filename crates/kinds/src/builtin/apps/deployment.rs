//! Deployments (`apps/v1`): upstream's v1 defaults (create and update, the pod template's
//! included), validation (the selector required, matching the template and immutable; the
//! template's pod spec: [`crate::builtin::podspec::workload`]) and deployment strategy
//! (pkg/registry/apps/deployment/strategy.go: the status reset on create, the generation
//! bumped on spec or annotation changes, a `/status` write that keeps the labels) and
//! printer (NAME READY UP-TO-DATE AVAILABLE AGE, and CONTAINERS IMAGES SELECTOR for
//! `-o wide`).
//!
//! The deployment's own rules (pkg/apis/apps/validation `ValidateDeploymentSpec`): a
//! rolling update's `maxSurge` and `maxUnavailable` non-negative, at most 100%, and not both
//! 0; no `rollingUpdate` for `Recreate`; `progressDeadlineSeconds` above `minReadySeconds`.
//!
//! Invariant: a row is one pass over the template's containers and the selector's labels.

use serde_json::{Value, json};

use crate::builtin::int_or_percent::{int_or_percent, positive_int_or_percent};
use crate::builtin::podspec::{self, workload};
use crate::strategy::{KindStrategy, TableColumn, set_default};
use crate::{Generation, KindSpec, ScaleSubresource, StatusUpdate};

/// `apps/v1` deployments, with `/status` and `/scale`.
pub fn spec() -> KindSpec {
    KindSpec::new("apps", "v1", "deployments", "Deployment")
        .short_names(["deploy"])
        .categories(["all"])
        .status_subresource(true)
        .scale(ScaleSubresource::replicas().label_selector("spec.selector"))
        .generation(Generation::SpecAndAnnotations)
        .status_update(StatusUpdate::StatusAndMetadataExcept(&["labels"]))
        .strategy(DeploymentStrategy)
}

/// The deployment strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeploymentStrategy;

/// apps/v1's `SetDefaults_Deployment`, on create and on update (Go defaults every decoded
/// body): one replica, a rolling update of 25% unavailable and 25% surge, ten revisions
/// kept, a 600 s progress deadline, and the pod template's defaults.
fn defaults(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    set_default(obj, &["spec", "replicas"], json!(1));
    set_default(obj, &["spec", "strategy", "type"], json!("RollingUpdate"));
    if obj["spec"]["strategy"]["type"] == "RollingUpdate" {
        let ru = ["spec", "strategy", "rollingUpdate"];
        set_default(obj, &[ru[0], ru[1], ru[2], "maxUnavailable"], json!("25%"));
        set_default(obj, &[ru[0], ru[1], ru[2], "maxSurge"], json!("25%"));
    }
    set_default(obj, &["spec", "revisionHistoryLimit"], json!(10));
    set_default(obj, &["spec", "progressDeadlineSeconds"], json!(600));
    podspec::defaults::template(obj.get_mut("spec").and_then(|s| s.get_mut("template")));
}

impl KindStrategy for DeploymentStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        let mut out = workload::selector_spec(&obj["spec"], "deployment", "ReplicaSet");
        out.extend(rollout_rules(&obj["spec"]));
        out
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        let mut out = workload::selector_spec(&new["spec"], "deployment", "ReplicaSet");
        out.extend(rollout_rules(&new["spec"]));
        out.extend(workload::selector_immutable(new, old));
        out
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let col = TableColumn::new;
        let mut name = col(
            "Name",
            "string",
            "Name must be unique within a namespace. Cannot be updated.",
            0,
        );
        name.format = "name".into();
        Some(vec![
            name,
            col("Ready", "string", "Number of the pod with ready state", 0),
            col(
                "Up-to-date",
                "integer",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                0,
            ),
            col(
                "Available",
                "integer",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                0,
            ),
            col(
                "Age",
                "string",
                "CreationTimestamp is the time this object was created.",
                0,
            ),
            col(
                "Containers",
                "string",
                "Names of each container in the template.",
                1,
            ),
            col(
                "Images",
                "string",
                "Images referenced by each container in the template.",
                1,
            ),
            col(
                "Selector",
                "string",
                "The label selector of the deployment's pods.",
                1,
            ),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        Some(cells(obj, name.to_owned(), age.to_owned()))
    }
}

fn cells(d: &Value, name: String, age: String) -> Vec<Value> {
    let count = |v: &Value| v.as_i64().unwrap_or(0);
    let (spec, status) = (&d["spec"], &d["status"]);
    // An unset replica count means 1, as the API defaults it.
    let desired = spec["replicas"].as_i64().unwrap_or(1);
    let containers = spec["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let join = |field: &str| {
        containers
            .iter()
            .filter_map(|c| c[field].as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    let selector = spec["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    vec![
        Value::String(name),
        Value::String(format!("{}/{desired}", count(&status["readyReplicas"]))),
        Value::from(count(&status["updatedReplicas"])),
        Value::from(count(&status["availableReplicas"])),
        Value::String(age),
        Value::String(join("name")),
        Value::String(join("image")),
        Value::String(selector),
    ]
}

/// The deployment's rollout rules (see the module doc).
fn rollout_rules(spec: &Value) -> Vec<crate::FieldError> {
    let mut out = Vec::new();
    let strategy = &spec["strategy"];
    let ru = &strategy["rollingUpdate"];
    if strategy["type"] == "Recreate" && !ru.is_null() {
        out.push(crate::FieldError::forbidden(
            "spec.strategy.rollingUpdate",
            "may not be specified when strategy `type` is 'Recreate'",
        ));
    } else if ru.is_object() {
        let unavailable = "spec.strategy.rollingUpdate.maxUnavailable";
        positive_int_or_percent(&ru["maxUnavailable"], unavailable, &mut out);
        positive_int_or_percent(
            &ru["maxSurge"],
            "spec.strategy.rollingUpdate.maxSurge",
            &mut out,
        );
        if int_or_percent(&ru["maxUnavailable"]) == 0 && int_or_percent(&ru["maxSurge"]) == 0 {
            out.push(crate::FieldError::invalid(
                unavailable,
                &ru["maxUnavailable"],
                "may not be 0 when `maxSurge` is 0",
            ));
        }
    }
    let min_ready = spec["minReadySeconds"].as_i64().unwrap_or(0);
    if let Some(deadline) = spec["progressDeadlineSeconds"].as_i64()
        && deadline <= min_ready
    {
        out.push(crate::FieldError::invalid(
            "spec.progressDeadlineSeconds",
            &spec["progressDeadlineSeconds"],
            "must be greater than minReadySeconds",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broken(spec: Value) -> Vec<String> {
        let mut d = json!({"metadata": {"name": "d"}, "spec": spec});
        DeploymentStrategy.prepare_for_create(&mut d);
        rollout_rules(&d["spec"])
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect()
    }

    #[test]
    fn rollouts_need_room_and_a_deadline_past_min_ready() {
        assert_eq!(broken(json!({})), Vec::<String>::new());
        assert_eq!(
            broken(json!({"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}})),
            [
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": may not be 0 when `maxSurge` is 0"
            ]
        );
        assert_eq!(
            broken(
                json!({"strategy": {"rollingUpdate": {"maxSurge": "150%", "maxUnavailable": -1}}})
            ),
            [
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: -1: must be greater than or equal to 0",
                "spec.strategy.rollingUpdate.maxSurge: Invalid value: \"150%\": must not be greater than 100%",
            ]
        );
        assert_eq!(
            broken(json!({"strategy": {"type": "Recreate", "rollingUpdate": {}}})),
            [
                "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"
            ]
        );
        // The 600 s default deadline against a 700 s minReadySeconds.
        assert_eq!(
            broken(json!({"minReadySeconds": 700})),
            [
                "spec.progressDeadlineSeconds: Invalid value: 600: must be greater than minReadySeconds"
            ]
        );
        assert_eq!(
            broken(json!({"minReadySeconds": 599})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn deployments_print_ready_over_desired() {
        let d = json!({"metadata":{"name":"web"},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},
            "template":{"spec":{"containers":[{"name":"a","image":"nginx"},{"name":"b","image":"busybox"}]}}},
            "status":{"readyReplicas":2,"updatedReplicas":3,"availableReplicas":2}});
        let c = DeploymentStrategy.table_cells(&d, "web", "1s").unwrap();
        assert_eq!(c.len(), DeploymentStrategy.table_columns().unwrap().len());
        assert_eq!(c[..4], [json!("web"), json!("2/3"), json!(3), json!(2)]);
        assert_eq!(
            c[5..],
            [json!("a,b"), json!("nginx,busybox"), json!("app=web")]
        );
    }

    #[test]
    fn create_resets_the_status() {
        let mut d = json!({"status": {"readyReplicas": 5}});
        DeploymentStrategy.prepare_for_create(&mut d);
        assert_eq!(d["status"], json!({}));
    }
}
