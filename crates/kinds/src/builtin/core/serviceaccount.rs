//! Service accounts (`v1`): a DELETE answers with the deleted object; upstream's printer
//! (NAME SECRETS AGE).

use serde_json::Value;

use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;
use crate::{Generation, KindSpec};

/// `v1` service accounts.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "serviceaccounts", "ServiceAccount")
        .short_names(["sa"])
        .generation(Generation::None)
        .return_deleted_object(true)
        .strategy(Printed::new(columns, cells))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col("Secrets", "string", "The number of secrets listed."),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    vec![
        Value::String(name.into()),
        print::len_of(&obj["secrets"]),
        Value::String(age.into()),
    ]
}
