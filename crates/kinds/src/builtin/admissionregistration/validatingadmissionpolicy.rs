//! Validating admission policies (`admissionregistration.k8s.io/v1`): the status reset on
//! create and upstream's printer (NAME VALIDATIONS PARAMKIND AGE, the param kind as
//! `apiVersion/kind`, `<unset>` without one).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `admissionregistration.k8s.io/v1` validating admission policies, from the derived
/// table's row; `status` is the empty status a create resets to.
pub fn spec(base: KindSpec, status: fn() -> Value) -> KindSpec {
    base.strategy(
        Printed::new(columns, cells)
            .resetting_status(status)
            .defaulting(crate::builtin::defaults::admission_policy),
    )
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Validations",
            "integer",
            "The number of validation rules of the policy.",
        ),
        print::col(
            "ParamKind",
            "string",
            "The kind of the resources that parameterize the policy.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let spec = &obj["spec"];
    let p = &spec["paramKind"];
    let param_kind = if p.is_object() {
        format!(
            "{}/{}",
            p["apiVersion"].as_str().unwrap_or(""),
            p["kind"].as_str().unwrap_or("")
        )
    } else {
        "<unset>".to_owned()
    };
    vec![
        Value::String(name.into()),
        print::len_of(&spec["validations"]),
        Value::String(param_kind),
        Value::String(age.into()),
    ]
}
