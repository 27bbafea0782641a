//! Component statuses (`v1`, read-only: `get` and `list`): computed on each read by the
//! server (never stored), printed as upstream prints them (NAME STATUS MESSAGE ERROR, no
//! AGE: the objects have no creation time).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn};

/// `v1` component statuses.
pub fn spec(base: KindSpec) -> KindSpec {
    base.only_verbs(&["get", "list"])
        .strategy(ComponentStatusStrategy)
}

/// The component status strategy (its printer).
#[derive(Debug, Clone, Copy, Default)]
pub struct ComponentStatusStrategy;

impl KindStrategy for ComponentStatusStrategy {
    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col("Status", "string", "Status of the component conditions"),
            print::col("Message", "string", "Message of the component conditions"),
            print::col("Error", "string", "Error of the component conditions"),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, _age: &str) -> Option<Vec<Value>> {
        // The first `Healthy` condition decides, as upstream's printComponentStatus.
        let healthy = obj["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Healthy"));
        let (status, message, error) = match healthy {
            Some(c) => (
                if c["status"] == "True" {
                    "Healthy"
                } else {
                    "Unhealthy"
                },
                c["message"].as_str().unwrap_or(""),
                c["error"].as_str().unwrap_or(""),
            ),
            None => ("Unknown", "", ""),
        };
        Some(
            [name, status, message, error]
                .map(|s| Value::String(s.to_owned()))
                .to_vec(),
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_healthy_condition_is_printed() {
        let s = ComponentStatusStrategy;
        let cs = json!({"conditions": [{"type": "Healthy", "status": "False",
            "message": "", "error": "refused"}]});
        let cells = s.table_cells(&cs, "scheduler", "1s").unwrap();
        assert_eq!(cells.len(), s.table_columns().unwrap().len());
        assert_eq!(
            cells,
            [
                json!("scheduler"),
                json!("Unhealthy"),
                json!(""),
                json!("refused")
            ]
        );
        let ok = json!({"conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]});
        assert_eq!(
            s.table_cells(&ok, "etcd-0", "").unwrap()[1],
            json!("Healthy")
        );
        assert_eq!(
            s.table_cells(&json!({}), "x", "").unwrap()[1],
            json!("Unknown")
        );
    }
}
