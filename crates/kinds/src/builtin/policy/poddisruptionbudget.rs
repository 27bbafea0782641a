//! Pod disruption budgets (`policy/v1`): the status reset on create
//! (pkg/registry/policy/poddisruptionbudget/strategy.go) and the printer (NAME MIN AVAILABLE
//! MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE), and the spec's rules (pkg/apis/policy/validation
//! `ValidatePodDisruptionBudgetSpec`: `minAvailable` and `maxUnavailable` not both set, each
//! a non-negative integer or a percentage of at most 100%).

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::int_or_percent::positive_int_or_percent;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn};

/// `policy/v1` pod disruption budgets.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(PodDisruptionBudgetStrategy)
}

/// The pod disruption budget strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodDisruptionBudgetStrategy;

impl KindStrategy for PodDisruptionBudgetStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert(
                "status".into(),
                json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}),
            );
        }
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        spec_rules(&obj["spec"])
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<crate::FieldError> {
        spec_rules(&new["spec"])
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col(
                "Min Available",
                "string",
                "The minimum number or percentage of available pods this budget requires.",
            ),
            print::col(
                "Max Unavailable",
                "string",
                "The maximum number or percentage of unavailable pods this budget requires.",
            ),
            print::col(
                "Allowed Disruptions",
                "integer",
                "Calculated number of pods that may be disrupted at this time.",
            ),
            print::age_column(),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        Some(vec![
            Value::String(name.into()),
            print::int_or_string(&obj["spec"]["minAvailable"]),
            print::int_or_string(&obj["spec"]["maxUnavailable"]),
            print::count(&obj["status"]["disruptionsAllowed"]),
            Value::String(age.into()),
        ])
    }
}

/// The budget's spec rules (see the module doc).
fn spec_rules(spec: &Value) -> Vec<crate::FieldError> {
    let mut out = Vec::new();
    let (min, max) = (&spec["minAvailable"], &spec["maxUnavailable"]);
    if !min.is_null() && !max.is_null() {
        out.push(crate::FieldError::invalid(
            "spec",
            spec,
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    positive_int_or_percent(min, "spec.minAvailable", &mut out);
    positive_int_or_percent(max, "spec.maxUnavailable", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_print_na_for_unset_bounds() {
        let mut pdb = json!({"spec": {"minAvailable": "50%"}});
        PodDisruptionBudgetStrategy.prepare_for_create(&mut pdb);
        let c = PodDisruptionBudgetStrategy
            .table_cells(&pdb, "p", "1s")
            .unwrap();
        assert_eq!(
            c,
            [
                json!("p"),
                json!("50%"),
                json!("N/A"),
                json!(0),
                json!("1s")
            ]
        );
    }

    #[test]
    fn one_of_min_available_and_max_unavailable() {
        let pdb = |spec: Value| json!({"spec": spec});
        let s = PodDisruptionBudgetStrategy;
        assert_eq!(s.validate_create(&pdb(json!({"minAvailable": "50%"}))), []);
        let both = pdb(json!({"minAvailable": 2, "maxUnavailable": 1}));
        let errs = s.validate_update(&both, &both);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec");
        assert!(
            errs[0]
                .body()
                .ends_with(": minAvailable and maxUnavailable cannot be both set"),
            "{}",
            errs[0].body()
        );
        let bad = s.validate_create(&pdb(json!({"maxUnavailable": "120%"})));
        assert_eq!(
            bad[0].to_string(),
            "spec.maxUnavailable: Invalid value: \"120%\": must not be greater than 100%"
        );
    }
}
