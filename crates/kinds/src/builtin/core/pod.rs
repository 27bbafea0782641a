//! Pods (`v1`): upstream's pod strategy (pkg/registry/core/pod/strategy.go) and printer
//! (pkg/printers/internalversion: NAME READY STATUS RESTARTS AGE, and IP NODE NOMINATED NODE
//! READINESS GATES for `-o wide`, computed like kubectl's).
//!
//! On create the status is reset to `{phase: Pending, qosClass}` (plus
//! `PodScheduled=False/SchedulingGated` for a pod with scheduling gates), the service account
//! defaults to `default` (upstream's ServiceAccount admission), and on create and update the
//! pod gets upstream's v1 defaults ([`crate::builtin::podspec::defaults::pod`]). A create is
//! validated as upstream's `ValidatePodCreate` (the spec rules of
//! [`crate::builtin::podspec::validate`]), an update as `ValidatePodUpdate` (only images,
//! the active deadline, tolerations, scheduling gates and a few more may change:
//! [`crate::builtin::podspec::update`]). Invariant: one pass over the containers for the QoS
//! class, and one over the containers' statuses and conditions for a row; a quantity that
//! does not parse counts as absent.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::builtin::podspec;
use crate::builtin::quantity::quantity_nanos;
use crate::strategy::{KindStrategy, TableColumn, set_default};
use crate::{GracefulDeletion, KindSpec, StatusUpdate};

/// Pod fields a field selector may name (upstream's `pod.ToSelectableFields` and core/v1's
/// pod field label function; `spec.hostNetwork` is declared with its default and the legacy
/// `spec.host`, which the function renames `spec.nodeName`, with what it reads in [`spec`]).
/// `status.podIPs` is accepted but, as upstream's selectable set has no value for it, reads
/// as `""` (a list is never a selectable value).
pub const POD_FIELDS: [&str; 8] = [
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];

/// `v1` pods: graceful deletion, a `/status` that keeps the request's metadata but
/// `ownerReferences`, the generation bumped on spec changes, the deleted object returned.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "pods", "Pod")
        .short_names(["po"])
        .categories(["all"])
        .selectable_fields(POD_FIELDS)
        .field_default("spec.restartPolicy", "Always")
        .field_default("spec.schedulerName", "default-scheduler")
        .field_default("spec.hostNetwork", "false")
        .field_reads("spec.host", &["spec.nodeName"])
        .trigger_field("spec.nodeName")
        .status_subresource(true)
        .ephemeral_containers_subresource(true)
        .status_update(StatusUpdate::StatusAndMetadataExcept(&["ownerReferences"]))
        .graceful_deletion(GracefulDeletion::Pod)
        .return_deleted_object(true)
        .strategy(PodStrategy)
}

/// The pod strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodStrategy;

impl KindStrategy for PodStrategy {
    fn ephemeral_containers_update(
        &self,
        new: &Value,
        old: &Value,
    ) -> Result<Value, Vec<crate::FieldError>> {
        super::pod_ephemeral::update(new, old)
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.get("spec").is_some_and(Value::is_object) {
            set_default(obj, &["spec", "serviceAccountName"], json!("default"));
        }
        podspec::defaults::pod(obj);
        let qos = qos_class(&obj["spec"]);
        let mut status = json!({"phase": "Pending", "qosClass": qos});
        if obj["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
        {
            status["conditions"] = json!([{
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": null,
                "lastTransitionTime": null,
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
            }]);
        }
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), status);
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        podspec::defaults::pod(new);
        // What the Priority admission resolved on create stays when a body omits it
        // (upstream's plugin on update).
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            for field in ["priority", "preemptionPolicy"] {
                if spec.get(field).is_none_or(Value::is_null)
                    && let Some(v) = old["spec"].get(field).filter(|v| !v.is_null())
                {
                    spec.insert(field.into(), v.clone());
                }
            }
        }
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        podspec::validate::pod_create(obj)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        podspec::update::pod_update(new, old)
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
            col(
                "Ready",
                "string",
                "The aggregate readiness state of this pod for accepting traffic.",
                0,
            ),
            col(
                "Status",
                "string",
                "The aggregate status of the containers in this pod.",
                0,
            ),
            col(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted.",
                0,
            ),
            col(
                "Age",
                "string",
                "CreationTimestamp is the time this object was created.",
                0,
            ),
            col("IP", "string", "IP address allocated to the pod.", 1),
            col(
                "Node",
                "string",
                "Name of the Node this pod is scheduled on.",
                1,
            ),
            col(
                "Nominated Node",
                "string",
                "Name of the Node nominated by the scheduler.",
                1,
            ),
            col(
                "Readiness Gates",
                "string",
                "The readiness gates of this pod.",
                1,
            ),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        Some(cells(obj, name.to_owned(), age.to_owned()))
    }
}

/// The resources a QoS class is computed from (upstream's `isSupportedQoSComputeResource`).
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// A pod's QoS class from its spec, as upstream's `ComputePodQOS` (containers and init
/// containers; a limit without a request counts as the request too, as upstream's v1
/// defaulting sets it): `BestEffort` without any cpu/memory request or limit, `Guaranteed`
/// when every container limits both and the summed requests equal the summed limits, else
/// `Burstable`.
pub fn qos_class(spec: &Value) -> &'static str {
    let mut requests: [Option<i128>; 2] = [None, None];
    let mut limits: [Option<i128>; 2] = [None, None];
    let mut guaranteed = true;
    let containers = ["initContainers", "containers"]
        .into_iter()
        .filter_map(|k| spec[k].as_array())
        .flatten();
    for c in containers {
        let res = &c["resources"];
        let empty = Map::new();
        let reqs = res["requests"].as_object().unwrap_or(&empty);
        let lims = res["limits"].as_object().unwrap_or(&empty);
        let mut limited = [false, false];
        for (i, name) in QOS_RESOURCES.iter().enumerate() {
            let limit = lims.get(*name).and_then(quantity_nanos).filter(|q| *q > 0);
            let request = match reqs.get(*name) {
                Some(q) => quantity_nanos(q),
                // Defaulted from the limit.
                None => lims.get(*name).and_then(quantity_nanos),
            }
            .filter(|q| *q > 0);
            if let Some(q) = request {
                requests[i] = Some(requests[i].unwrap_or(0).saturating_add(q));
            }
            if let Some(q) = limit {
                limited[i] = true;
                limits[i] = Some(limits[i].unwrap_or(0).saturating_add(q));
            }
        }
        if !limited.iter().all(|l| *l) {
            guaranteed = false;
        }
    }
    let count = |a: &[Option<i128>; 2]| a.iter().filter(|q| q.is_some()).count();
    if count(&requests) == 0 && count(&limits) == 0 {
        return "BestEffort";
    }
    if guaranteed {
        guaranteed = requests
            .iter()
            .zip(&limits)
            .all(|(r, l)| r.is_none() || r == l);
    }
    if guaranteed && count(&requests) == count(&limits) {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn cells(pod: &Value, name: String, age: String) -> Vec<Value> {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let total = spec["containers"].as_array().map_or(0, Vec::len);
    let mut ready = 0;
    let mut restarts = 0i64;
    let mut reason = status["phase"].as_str().unwrap_or("").to_owned();
    if let Some(r) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_owned();
    }
    if let Some(statuses) = status["containerStatuses"].as_array() {
        for cs in statuses.iter().rev() {
            // Saturating: a stored count is whatever a client wrote (upstream sums int32s
            // in an int, which cannot overflow).
            restarts = restarts.saturating_add(cs["restartCount"].as_i64().unwrap_or(0));
            let state = &cs["state"];
            if let Some(r) = state["waiting"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = r.to_owned();
            } else if let Some(r) = state["terminated"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = r.to_owned();
            } else if state["terminated"].is_object() {
                reason = match state["terminated"]["signal"].as_i64() {
                    Some(s) if s != 0 => format!("Signal:{s}"),
                    _ => format!(
                        "ExitCode:{}",
                        state["terminated"]["exitCode"].as_i64().unwrap_or(0)
                    ),
                };
            } else if cs["ready"].as_bool() == Some(true) && state["running"].is_object() {
                ready += 1;
            }
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    let none = || Value::String("<none>".into());
    let text = |v: &Value| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .map_or_else(none, |s| Value::String(s.into()))
    };
    let gates = spec["readinessGates"].as_array().map_or_else(none, |g| {
        // The first condition of each type decides, as upstream's printer's inner loop
        // breaks on it; indexed once, so the column costs O(gates + conditions).
        let mut by_type: HashMap<&str, &Value> = HashMap::new();
        for c in status["conditions"].as_array().into_iter().flatten() {
            by_type
                .entry(c["type"].as_str().unwrap_or(""))
                .or_insert(&c["status"]);
        }
        let ok = g
            .iter()
            .filter(|gate| {
                let t = gate["conditionType"].as_str().unwrap_or("");
                by_type.get(t).is_some_and(|s| *s == "True")
            })
            .count();
        Value::String(format!("{ok}/{}", g.len()))
    });
    vec![
        Value::String(name),
        Value::String(format!("{ready}/{total}")),
        Value::String(reason),
        Value::from(restarts),
        Value::String(age),
        text(&status["podIP"]),
        text(&spec["nodeName"]),
        text(&status["nominatedNodeName"]),
        gates,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_trigger_on_a_selectable_node_name() {
        let pods = spec();
        assert_eq!(pods.trigger_field.as_deref(), Some("spec.nodeName"));
        assert!(pods.selectable_fields.supports("spec.nodeName"));
        assert!(pods.selectable_fields.supports("status.phase"));
    }

    #[test]
    fn pods_print_ready_status_and_restarts_like_kubectl() {
        let pod = json!({"metadata":{"name":"web"},
            "spec":{"containers":[{"name":"a"},{"name":"b"}],"nodeName":"n1"},
            "status":{"phase":"Running","podIP":"10.0.0.1","containerStatuses":[
                {"name":"a","ready":true,"restartCount":2,"state":{"running":{}}},
                {"name":"b","ready":false,"restartCount":1,"state":{"waiting":{"reason":"CrashLoopBackOff"}}}]}});
        let c = PodStrategy.table_cells(&pod, "web", "5m").unwrap();
        assert_eq!(c.len(), PodStrategy.table_columns().unwrap().len());
        assert_eq!(
            c[..5],
            [
                json!("web"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!(3),
                json!("5m")
            ]
        );
        assert_eq!(c[5..7], [json!("10.0.0.1"), json!("n1")]);
    }

    #[test]
    fn create_resets_status_as_upstream() {
        let mut pod = json!({"spec": {"restartPolicy": "Never", "schedulingGates": [{"name": "g"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}});
        PodStrategy.prepare_for_create(&mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["status"]["qosClass"], "BestEffort");
        assert_eq!(pod["status"]["conditions"][0]["reason"], "SchedulingGated");
        assert!(pod["status"].get("podIP").is_none());
    }

    #[test]
    fn qos_classes_follow_upstream() {
        let pod = |containers: Value| json!({ "containers": containers });
        assert_eq!(qos_class(&pod(json!([{"name": "a"}]))), "BestEffort");
        let both = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": both}]))),
            "Guaranteed",
            "requests default to the limits"
        );
        let equal = json!({"limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "1000m", "memory": "1024Mi"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": equal}]))),
            "Guaranteed"
        );
        let less = json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": less}]))),
            "Burstable"
        );
        let cpu_only = json!({"limits": {"cpu": "1"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": cpu_only}]))),
            "Burstable"
        );
        // One container without limits makes the pod Burstable.
        assert_eq!(
            qos_class(&pod(
                json!([{"name": "a", "resources": both}, {"name": "b"}])
            )),
            "Burstable"
        );
        // Other resources do not count.
        let gpu = json!({"limits": {"nvidia.com/gpu": "1"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": gpu}]))),
            "BestEffort"
        );
    }
}
