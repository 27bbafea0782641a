//! Priority classes (`scheduling.k8s.io/v1`): upstream's v1 default
//! (`preemptionPolicy: PreemptLowerPriority`), validation (pkg/apis/scheduling/validation:
//! a user class's `value` at most [`HIGHEST_USER_DEFINABLE_PRIORITY`], the `system-` name
//! prefix reserved for [`SYSTEM_PRIORITY_CLASSES`] with their values, `value` and
//! `preemptionPolicy` immutable) and printer (NAME VALUE GLOBAL-DEFAULT AGE
//! PREEMPTIONPOLICY; an unset `globalDefault` prints `false`). A DELETE of a system class is
//! upstream's 403 `this is a system priority class and cannot be deleted`; an update of one
//! is judged as any class's (upstream's `ValidatePriorityClassUpdate`: `value` and
//! `preemptionPolicy` immutable, the name's reservation not asked again).
//!
//! That at most one class is the global default, and a pod's `priorityClassName` resolved
//! into its priority, need the other stored classes: the server's admission
//! (`listwatch_registry::priority`), not this strategy.

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print;
use crate::field::FieldError;
use crate::strategy::{KindStrategy, TableColumn};

/// Upstream's `HighestUserDefinablePriority`.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;

/// The prefix of names reserved for the system classes.
pub const SYSTEM_PREFIX: &str = "system-";

/// The classes upstream creates at start (`SystemPriorityClasses`): name, value,
/// description; neither is the global default.
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to \
         another node if necessary.",
    ),
];

const PREEMPTION_POLICIES: &[&str] = &["PreemptLowerPriority", "Never"];

/// `scheduling.k8s.io/v1` priority classes, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(PriorityClassStrategy)
}

/// The priority class strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct PriorityClassStrategy;

impl KindStrategy for PriorityClassStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        crate::builtin::defaults::priority_class(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        crate::builtin::defaults::priority_class(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        validate(obj)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut out = Vec::new();
        if new["value"] != old["value"] {
            out.push(FieldError::forbidden(
                "value",
                "may not be changed in an update.",
            ));
        }
        if new["preemptionPolicy"] != old["preemptionPolicy"] {
            out.push(FieldError::invalid(
                "preemptionPolicy",
                &new["preemptionPolicy"],
                "field is immutable",
            ));
        }
        out
    }

    /// Upstream's `REST.Delete` (pkg/registry/scheduling/priorityclass/storage): a system
    /// class may not be deleted (a collection delete still removes it, as upstream's).
    fn delete_forbidden(&self, name: &str) -> Option<String> {
        SYSTEM_PRIORITY_CLASSES
            .iter()
            .any(|(n, ..)| *n == name)
            .then(|| "this is a system priority class and cannot be deleted".to_owned())
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(columns())
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        Some(cells(obj, name, age))
    }
}

/// Upstream's `ValidatePriorityClass` (the name's own rules are the registry's).
fn validate(obj: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let value = obj["value"].as_i64().unwrap_or(0);
    let global = obj["globalDefault"].as_bool().unwrap_or(false);
    if name.starts_with(SYSTEM_PREFIX) {
        let why = match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, ..)| *n == name) {
            None => Some(format!("{name} is not a known system priority class")),
            Some((n, v, _)) if *v != value => {
                Some(format!("value of {n} PriorityClass must be {v}"))
            }
            Some((n, ..)) if global => {
                Some(format!("globalDefault of {n} PriorityClass must be false"))
            }
            Some(_) => None,
        };
        if let Some(why) = why {
            out.push(FieldError::forbidden(
                "metadata.name",
                format!(
                    "priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {why}"
                ),
            ));
        }
    } else if value > HIGHEST_USER_DEFINABLE_PRIORITY {
        out.push(FieldError::forbidden(
            "value",
            format!(
                "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
            ),
        ));
    }
    match obj.get("preemptionPolicy") {
        None | Some(Value::Null) => {}
        Some(Value::String(p)) if PREEMPTION_POLICIES.contains(&p.as_str()) => {}
        Some(v) => {
            let supported: Vec<String> = PREEMPTION_POLICIES
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            out.push(FieldError::not_supported("preemptionPolicy", v, &supported));
        }
    }
    out
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Value",
            "integer",
            "The priority of the pods of this class.",
        ),
        print::col(
            "Global-Default",
            "boolean",
            "Whether this is the default class.",
        ),
        print::age_column(),
        print::col(
            "PreemptionPolicy",
            "string",
            "The policy for preempting pods of lower priority.",
        ),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    vec![
        Value::String(name.into()),
        Value::from(obj["value"].as_i64().unwrap_or(0)),
        Value::Bool(obj["globalDefault"].as_bool().unwrap_or(false)),
        Value::String(age.into()),
        print::str_or(&obj["preemptionPolicy"], ""),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(obj: &Value) -> Vec<String> {
        validate(obj).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn user_classes_are_bounded_and_system_names_reserved() {
        let pc = |name: &str, value: i64| json!({"metadata": {"name": name}, "value": value});
        assert!(errors(&pc("high", 1_000_000_000)).is_empty());
        assert_eq!(
            errors(&pc("higher", 1_000_000_001)),
            ["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"]
        );
        assert_eq!(
            errors(&pc("system-mine", 5)),
            [
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class"
            ]
        );
        assert_eq!(
            errors(&pc("system-node-critical", 5)),
            [
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: value of system-node-critical PriorityClass must be 2000001000"
            ]
        );
        assert!(errors(&pc("system-node-critical", 2_000_001_000)).is_empty());
        assert_eq!(
            PriorityClassStrategy.delete_forbidden("system-node-critical"),
            Some("this is a system priority class and cannot be deleted".to_owned())
        );
        assert!(
            PriorityClassStrategy
                .delete_forbidden("system-cluster-critical")
                .is_some()
        );
        assert_eq!(PriorityClassStrategy.delete_forbidden("high"), None);
        let old = json!({"value": 5, "preemptionPolicy": "Never"});
        let new = json!({"value": 6, "preemptionPolicy": "Never"});
        assert_eq!(
            PriorityClassStrategy
                .validate_update(&new, &old)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["value: Forbidden: may not be changed in an update."]
        );
    }
}
