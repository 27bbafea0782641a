//! Flow schemas (`flowcontrol.apiserver.k8s.io/v1`): the status reset on create and
//! upstream's printer (NAME PRIORITYLEVEL MATCHINGPRECEDENCE DISTINGUISHERMETHOD AGE
//! MISSINGPL, MISSINGPL the `Dangling` condition's status or `?`). Upstream's list printer
//! also orders the rows by matching precedence; this server prints them in list order.

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `flowcontrol.apiserver.k8s.io/v1` flow schemas, from the derived table's row; `status`
/// is the empty status a create resets to.
pub fn spec(base: KindSpec, status: fn() -> Value) -> KindSpec {
    base.strategy(
        Printed::new(columns, cells)
            .resetting_status(status)
            .defaulting(crate::builtin::defaults::flow_schema),
    )
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "PriorityLevel",
            "string",
            "The priority level configuration the schema refers to.",
        ),
        print::col(
            "MatchingPrecedence",
            "string",
            "The schema's matching precedence.",
        ),
        print::col(
            "DistinguisherMethod",
            "string",
            "How flows are distinguished.",
        ),
        print::age_column(),
        print::col(
            "MissingPL",
            "string",
            "Whether the referenced priority level is missing.",
        ),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let spec = &obj["spec"];
    let missing = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Dangling")
        .map_or("?", |c| c["status"].as_str().unwrap_or(""));
    vec![
        Value::String(name.into()),
        print::str_or(&spec["priorityLevelConfiguration"]["name"], ""),
        Value::from(spec["matchingPrecedence"].as_i64().unwrap_or(0)),
        print::str_or(&spec["distinguisherMethod"]["type"], "<none>"),
        Value::String(age.into()),
        Value::String(missing.to_owned()),
    ]
}
