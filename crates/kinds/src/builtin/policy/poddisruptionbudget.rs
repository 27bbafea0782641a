//! Pod disruption budgets (`policy/v1`): the status reset on create
//! (pkg/registry/policy/poddisruptionbudget/strategy.go) and the printer (NAME MIN AVAILABLE
//! MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE).

use serde_json::{Value, json};

use crate::KindSpec;
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
}
