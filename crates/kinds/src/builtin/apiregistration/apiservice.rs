//! API services (`apiregistration.k8s.io/v1`): the status reset on create, the
//! `Available` condition kube-aggregator's availability controller would write, and its
//! printer (NAME SERVICE AVAILABLE AGE: the service as `namespace/name`, `Local` without
//! one; the `Available` condition's status, with its reason in parentheses when it is not
//! `True`, `Unknown` without the condition).
//!
//! Availability (set on every create and update, over whatever the body's status says, as
//! upstream's controller overwrites it): an API service without `spec.service` is served
//! by this server, `Available=True` with reason `Local` and upstream's message; one with a
//! service is `Available=False` with reason `FailedDiscoveryCheck`, since this server never
//! proxies to an aggregated API server. The condition's `lastTransitionTime` stays while
//! its status does not change.

use serde_json::{Value, json};

use crate::builtin::apiextensions::customresourcedefinition::rfc3339;
use crate::builtin::print::{self, Printed};
use crate::strategy::{KindStrategy, TableColumn};
use crate::{FieldError, KindSpec, NameValidation};

/// `apiregistration.k8s.io/v1` API services, from the derived table's row; `status` is the
/// empty status a create resets to.
pub fn spec(base: KindSpec, status: fn() -> Value) -> KindSpec {
    // Upstream's name rule: a path segment, equal to `<version>.<group>` (the core group's
    // is `v1.`), checked by the strategy.
    base.name_validation(NameValidation::PathSegment)
        .strategy(ApiServiceStrategy(
            Printed::new(columns, cells).resetting_status(status),
        ))
}

/// The API service strategy: the printer's, then the `Available` condition.
#[derive(Debug, Clone, Copy)]
pub struct ApiServiceStrategy(Printed);

impl KindStrategy for ApiServiceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        self.0.prepare_for_create(obj);
        set_available(obj, None, &now_rfc3339());
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        self.0.prepare_for_update(new, old);
        set_available(new, Some(old), &now_rfc3339());
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        name_matches(obj)
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        name_matches(new)
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        self.0.table_columns()
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        self.0.table_cells(obj, name, age)
    }
}

/// Upstream's rule: the name is `spec.version + "." + spec.group`.
fn name_matches(obj: &Value) -> Vec<FieldError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let required = format!(
        "{}.{}",
        obj["spec"]["version"].as_str().unwrap_or(""),
        obj["spec"]["group"].as_str().unwrap_or("")
    );
    if name.is_empty() || name == required {
        return Vec::new();
    }
    vec![FieldError::invalid_str(
        "metadata.name",
        name,
        format!("must be `spec.version+\".\"+spec.group`: {required:?}"),
    )]
}

/// Now as RFC 3339 (UTC, seconds).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// The `Available` condition `obj`'s spec calls for.
fn available(obj: &Value) -> (&'static str, &'static str, String) {
    let svc = &obj["spec"]["service"];
    if svc.is_object() {
        (
            "False",
            "FailedDiscoveryCheck",
            format!(
                "service/{} in {:?} is not called: this server does not proxy to aggregated API servers",
                svc["name"].as_str().unwrap_or(""),
                svc["namespace"].as_str().unwrap_or(""),
            ),
        )
    } else {
        (
            "True",
            "Local",
            "Local APIServices are always available".to_owned(),
        )
    }
}

/// Puts the `Available` condition `obj`'s spec calls for in its status (replacing any),
/// keeping `old`'s transition time when its status is the same.
fn set_available(obj: &mut Value, old: Option<&Value>, now: &str) {
    let (status, reason, message) = available(obj);
    let since = old
        .and_then(|o| o["status"]["conditions"].as_array())
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available" && c["status"] == status)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| Value::String(now.to_owned()));
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let st = m
        .entry("status")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !st.is_object() {
        *st = Value::Object(serde_json::Map::new());
    }
    let Some(st) = st.as_object_mut() else {
        return;
    };
    let mut conditions: Vec<Value> = st
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["type"] != "Available")
        .cloned()
        .collect();
    conditions.push(
        json!({"type": "Available", "status": status, "reason": reason,
        "message": message, "lastTransitionTime": since}),
    );
    st.insert("conditions".into(), Value::Array(conditions));
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

    #[test]
    fn the_name_is_version_dot_group() {
        let core = json!({"metadata": {"name": "v1."}, "spec": {"version": "v1", "group": ""}});
        assert!(name_matches(&core).is_empty());
        let wrong = json!({"metadata": {"name": "v1.x"}, "spec": {"version": "v1", "group": "y"}});
        assert_eq!(
            name_matches(&wrong)[0].to_string(),
            "metadata.name: Invalid value: \"v1.x\": must be `spec.version+\".\"+spec.group`: \"v1.y\""
        );
    }

    #[test]
    fn local_services_are_available_and_others_not() {
        let mut local = json!({"spec": {"service": null},
            "status": {"conditions": [{"type": "Available", "status": "False"}]}});
        set_available(&mut local, None, "t1");
        assert_eq!(cells(&local, "v1.", "1m")[2], json!("True"));
        let c = &local["status"]["conditions"];
        assert_eq!(c.as_array().map(Vec::len), Some(1));
        assert_eq!(c[0]["reason"], "Local");
        assert_eq!(c[0]["lastTransitionTime"], "t1");
        let old = local.clone();
        set_available(&mut local, Some(&old), "t2");
        assert_eq!(local["status"]["conditions"][0]["lastTransitionTime"], "t1");
        let mut remote = json!({"spec": {"service": {"namespace": "ns", "name": "m"}}});
        set_available(&mut remote, Some(&old), "t3");
        assert_eq!(
            cells(&remote, "v1.x", "1m")[2],
            json!("False (FailedDiscoveryCheck)")
        );
        assert_eq!(
            remote["status"]["conditions"][0]["lastTransitionTime"],
            "t3"
        );
    }
}
