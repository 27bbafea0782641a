//! API services (`apiregistration.k8s.io/v1`): the status reset on create and
//! kube-aggregator's printer (NAME SERVICE AVAILABLE AGE: the service as `namespace/name`,
//! `Local` without one; the `Available` condition's status, with its reason in parentheses
//! when it is not `True`, `Unknown` without the condition).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `apiregistration.k8s.io/v1` API services, from the derived table's row; `status` is the
/// empty status a create resets to.
pub fn spec(base: KindSpec, status: fn() -> Value) -> KindSpec {
    base.strategy(Printed::new(columns, cells).resetting_status(status))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Service",
            "string",
            "The reference to the service that hosts this API endpoint.",
        ),
        print::col("Available", "string", "Whether this service is available."),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let svc = &obj["spec"]["service"];
    let service = if svc.is_object() {
        format!(
            "{}/{}",
            svc["namespace"].as_str().unwrap_or(""),
            svc["name"].as_str().unwrap_or("")
        )
    } else {
        "Local".to_owned()
    };
    let available = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .map_or_else(
            || "Unknown".to_owned(),
            |c| {
                let status = c["status"].as_str().unwrap_or("");
                match c["reason"].as_str().filter(|r| !r.is_empty()) {
                    Some(reason) if status != "True" => format!("{status} ({reason})"),
                    _ => status.to_owned(),
                }
            },
        );
    vec![
        Value::String(name.into()),
        Value::String(service),
        Value::String(available),
        Value::String(age.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_print_service_and_availability() {
        let a = json!({"spec": {"service": {"namespace": "kube-system", "name": "metrics"}},
            "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}});
        assert_eq!(
            cells(&a, "v1beta1.metrics.k8s.io", "1m"),
            [
                json!("v1beta1.metrics.k8s.io"),
                json!("kube-system/metrics"),
                json!("False (MissingEndpoints)"),
                json!("1m")
            ]
        );
        let local = cells(&json!({}), "v1.", "1m");
        assert_eq!((&local[1], &local[2]), (&json!("Local"), &json!("Unknown")));
    }
}
