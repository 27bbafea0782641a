//! CSI nodes (`storage.k8s.io/v1`): upstream's printer (NAME DRIVERS AGE, the number of
//! drivers registered on the node).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `storage.k8s.io/v1` CSI nodes, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(Printed::new(columns, cells))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Drivers",
            "integer",
            "The number of CSI drivers registered on the node.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    vec![
        Value::String(name.into()),
        print::len_of(&obj["spec"]["drivers"]),
        Value::String(age.into()),
    ]
}
