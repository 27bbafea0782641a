//! Priority classes (`scheduling.k8s.io/v1`): upstream's printer (NAME VALUE GLOBAL-DEFAULT
//! AGE PREEMPTIONPOLICY; an unset `globalDefault` prints `false`).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `scheduling.k8s.io/v1` priority classes, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(Printed::new(columns, cells).defaulting(crate::builtin::defaults::priority_class))
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
