//! The pod spec that pods and every workload's pod template share: upstream's v1 defaulting
//! of it (`SetDefaults_PodSpec`, `SetDefaults_Container` and the defaults of the types a
//! spec holds, pkg/apis/core/v1/defaults.go; [`defaults`]), the part of upstream's
//! `ValidatePodSpec` clients meet first (containers required, container names DNS labels
//! unique in the pod, images required, the enumerations of restart, DNS, pull and
//! termination message policies; [`validate`]; with each container's ports and environment,
//! [`ports_env`], resource requirements, [`resources`], and the tolerations, [`tolerations`]), a pod update's rule that only a few spec
//! fields may change (`ValidatePodUpdate`; [`update`]), and the workloads' selector rules
//! (required, not empty, matching the template's labels, immutable; [`workload`]).
//!
//! The kinds' files call in here: `core/pod.rs`, `core/podtemplate.rs`,
//! `core/replicationcontroller.rs`, `apps/{deployment,replicaset,daemonset,statefulset}.rs`,
//! `batch/{job,cronjob}.rs`.
//!
//! Invariants: every function looks only at the values it is given and walks each once (a
//! comparison walks both sides once), so its cost is linear in the body, which the request
//! limits bound; nothing panics on a value of the wrong JSON type (a default skips it,
//! validation reports what upstream would or passes over it); a default fills only what is
//! absent, `null` or Go's zero value, never changes what a body sets.

pub mod defaults;
pub mod ports_env;
pub mod resources;
pub mod tolerations;
pub mod update;
pub mod validate;
pub mod workload;

use serde_json::Value;

use crate::field::go_quote;

/// Go's zero value of a JSON value as the API decodes it: absent, `null`, `false`, `0`, `""`,
/// an empty list or an empty object all read the same to upstream's
/// `apiequality.Semantic.DeepEqual` after decoding (an omitted field is the zero value, and
/// an empty list equals a nil one).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Upstream's `apiequality.Semantic.DeepEqual` of two decoded values, over JSON: a member
/// absent on one side equals a zero one on the other (`is_zero`); numbers compare by value.
pub fn semantic_eq(a: &Value, b: &Value) -> bool {
    if is_zero(a) && is_zero(b) {
        return true;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let null = Value::Null;
            x.iter()
                .all(|(k, v)| semantic_eq(v, y.get(k).unwrap_or(&null)))
                && y.iter()
                    .filter(|(k, _)| !x.contains_key(*k))
                    .all(|(_, v)| is_zero(v))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| semantic_eq(a, b))
        }
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

/// A label map as Go's `%#v` prints a `map[string]string` in a field error
/// (`map[string]string{"app":"web"}`, keys sorted; `map[string]string(nil)` when unset).
pub fn go_string_map(v: &Value) -> String {
    let Some(m) = v.as_object().filter(|m| !m.is_empty()) else {
        return "map[string]string(nil)".into();
    };
    let mut entries: Vec<(&String, &Value)> = m.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let body: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v.as_str().unwrap_or(""))))
        .collect();
    format!("map[string]string{{{}}}", body.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn semantic_equality_reads_absent_as_zero() {
        assert!(semantic_eq(
            &json!({"a": [], "b": false, "c": {"d": 1}}),
            &json!({"c": {"d": 1.0}, "e": ""})
        ));
        assert!(!semantic_eq(&json!({"a": [1]}), &json!({})));
        assert!(!semantic_eq(&json!({"a": "x"}), &json!({"a": "y"})));
        assert!(!semantic_eq(&json!([1, 2]), &json!([1])));
    }

    #[test]
    fn label_maps_print_as_go_does() {
        assert_eq!(
            go_string_map(&json!({"b": "2", "a": "1"})),
            r#"map[string]string{"a":"1", "b":"2"}"#
        );
        assert_eq!(go_string_map(&json!(null)), "map[string]string(nil)");
    }
}
