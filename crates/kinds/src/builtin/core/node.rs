//! Nodes (`v1`, cluster-scoped). Upstream's node strategy lets a create set every field,
//! the status included ("Nodes allow *all* fields, including status, to be set on create"),
//! so nodes need no strategy code but their printer (NAME STATUS ROLES AGE VERSION, and
//! INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME for `-o wide`);
//! `/status` resets only the spec.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;
use crate::{FieldLabels, Generation, KindSpec, StatusUpdate};

/// The label prefix naming a node's role (`node-role.kubernetes.io/<role>`).
const ROLE_PREFIX: &str = "node-role.kubernetes.io/";
/// The label whose value is a node's role.
const ROLE_LABEL: &str = "kubernetes.io/role";

/// `v1` nodes.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "nodes", "Node")
        .namespaced(false)
        .short_names(["no"])
        .selectable_fields(["spec.unschedulable"])
        .field_default("spec.unschedulable", "false")
        // core/v1's node field label function lists `metadata.name` and
        // `spec.unschedulable` only.
        .field_labels(FieldLabels::NOT_SUPPORTED_NO_NAMESPACE)
        .generation(Generation::None)
        .status_subresource(true)
        // nodeStatusStrategy.PrepareForUpdate resets only the spec.
        .status_update(StatusUpdate::StatusAndMetadataExcept(&[]))
        .strategy(Printed::new(columns, cells))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col("Status", "string", "The status of the node."),
        print::col("Roles", "string", "The roles of the node."),
        print::age_column(),
        print::col("Version", "string", "The kubelet version the node reports."),
        print::wide(
            "Internal-IP",
            "string",
            "The node's first InternalIP address.",
        ),
        print::wide(
            "External-IP",
            "string",
            "The node's first ExternalIP address.",
        ),
        print::wide("OS-Image", "string", "The OS image the node reports."),
        print::wide(
            "Kernel-Version",
            "string",
            "The kernel version the node reports.",
        ),
        print::wide(
            "Container-Runtime",
            "string",
            "The container runtime version the node reports.",
        ),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let status = &obj["status"];
    // The Ready condition's, as upstream's `printNode`: `Ready`, `NotReady`, else `Unknown`.
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    let mut shown = match ready {
        Some(c) if c["status"] == "True" => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if obj["spec"]["unschedulable"] == true {
        shown.push_str(",SchedulingDisabled");
    }
    let mut roles = BTreeSet::new();
    for (k, v) in obj["metadata"]["labels"].as_object().into_iter().flatten() {
        if let Some(role) = k.strip_prefix(ROLE_PREFIX).filter(|r| !r.is_empty()) {
            roles.insert(role.to_owned());
        } else if k == ROLE_LABEL {
            if let Some(v) = v.as_str().filter(|v| !v.is_empty()) {
                roles.insert(v.to_owned());
            }
        }
    }
    let roles = if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };
    let address = |kind: &str| {
        status["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == kind)
            .and_then(|a| a["address"].as_str())
            .unwrap_or("<none>")
            .to_owned()
    };
    let info = &status["nodeInfo"];
    let known = |f: &str| {
        Value::String(
            info[f]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or("<unknown>")
                .to_owned(),
        )
    };
    vec![
        Value::String(name.into()),
        Value::String(shown),
        Value::String(roles),
        Value::String(age.into()),
        print::str_or(&info["kubeletVersion"], ""),
        Value::String(address("InternalIP")),
        Value::String(address("ExternalIP")),
        known("osImage"),
        known("kernelVersion"),
        known("containerRuntimeVersion"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_print_status_roles_and_wide_columns() {
        let node = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": "",
            "kubernetes.io/role": "worker", "node-role.kubernetes.io/": "x"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Linux"}}});
        let c = cells(&node, "n1", "3d");
        assert_eq!(c.len(), columns().len());
        assert_eq!(
            c,
            [
                json!("n1"),
                json!("NotReady,SchedulingDisabled"),
                json!("control-plane,worker"),
                json!("3d"),
                json!("v1.32.0"),
                json!("10.0.0.5"),
                json!("<none>"),
                json!("Linux"),
                json!("<unknown>"),
                json!("<unknown>")
            ]
        );
        assert_eq!(cells(&json!({}), "n", "1s")[1], json!("Unknown"));
    }
}
