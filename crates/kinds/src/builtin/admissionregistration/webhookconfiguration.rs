//! Mutating and validating webhook configurations (`admissionregistration.k8s.io/v1`):
//! upstream's printer (NAME WEBHOOKS AGE, the number of webhooks).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// Either webhook configuration kind, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    let defaults = if base.kind == "MutatingWebhookConfiguration" {
        crate::builtin::defaults::mutating_webhooks
    } else {
        crate::builtin::defaults::validating_webhooks
    };
    base.strategy(Printed::new(columns, cells).defaulting(defaults))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Webhooks",
            "integer",
            "The number of webhooks registered in this configuration.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    vec![
        Value::String(name.into()),
        print::len_of(&obj["webhooks"]),
        Value::String(age.into()),
    ]
}
