//! CSI storage capacities (`storage.k8s.io/v1`): upstream's printer (NAME STORAGECLASSNAME
//! CAPACITY, no AGE; `<unset>` without a capacity; the quantity as stored).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `storage.k8s.io/v1` CSI storage capacities, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(Printed::new(columns, cells))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "StorageClassName",
            "string",
            "The storage class the capacity is for.",
        ),
        print::col("Capacity", "string", "The capacity reported."),
    ]
}

fn cells(obj: &Value, name: &str, _age: &str) -> Vec<Value> {
    let capacity = match &obj["capacity"] {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "<unset>".to_owned(),
    };
    vec![
        Value::String(name.into()),
        print::str_or(&obj["storageClassName"], ""),
        Value::String(capacity),
    ]
}
