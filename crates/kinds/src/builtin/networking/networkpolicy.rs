//! Network policies (`networking.k8s.io/v1`): upstream's v1 default (`policyTypes`:
//! `Ingress`, plus `Egress` when the policy has egress rules) and printer (NAME POD-SELECTOR
//! AGE).

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn};

/// `networking.k8s.io/v1` network policies.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(NetworkPolicyStrategy)
}

/// The network policy strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct NetworkPolicyStrategy;

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    let unset = obj["spec"]["policyTypes"]
        .as_array()
        .is_none_or(Vec::is_empty);
    if unset && obj["spec"].is_object() {
        let egress = obj["spec"]["egress"]
            .as_array()
            .is_some_and(|e| !e.is_empty());
        obj["spec"]["policyTypes"] = if egress {
            json!(["Ingress", "Egress"])
        } else {
            json!(["Ingress"])
        };
    }
}

impl KindStrategy for NetworkPolicyStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col(
                "Pod-Selector",
                "string",
                "Selects the pods to which this NetworkPolicy object applies.",
            ),
            print::age_column(),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        Some(vec![
            Value::String(name.into()),
            Value::String(print::format_label_selector(&obj["spec"]["podSelector"])),
            Value::String(age.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_defaults_policy_types() {
        let mut np = json!({"spec": {"podSelector": {}, "egress": [{}]}});
        NetworkPolicyStrategy.prepare_for_create(&mut np);
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        let c = NetworkPolicyStrategy.table_cells(&np, "n", "1s").unwrap();
        assert_eq!(c[1], json!("<none>"));
    }
}
