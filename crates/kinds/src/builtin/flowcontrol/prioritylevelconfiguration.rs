//! Priority level configurations (`flowcontrol.apiserver.k8s.io/v1`): the status reset on
//! create and upstream's printer (NAME TYPE NOMINALCONCURRENCYSHARES QUEUES HANDSIZE
//! QUEUELENGTHLIMIT AGE; `<none>` for the numbers of an exempt level and the queuing ones of
//! a level that rejects).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `flowcontrol.apiserver.k8s.io/v1` priority level configurations, from the derived
/// table's row; `status` is the empty status a create resets to.
pub fn spec(base: KindSpec, status: fn() -> Value) -> KindSpec {
    base.strategy(
        Printed::new(columns, cells)
            .resetting_status(status)
            .defaulting(crate::builtin::defaults::priority_level),
    )
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col("Type", "string", "Whether the level is Limited or Exempt."),
        print::col(
            "NominalConcurrencyShares",
            "string",
            "The level's nominal concurrency shares.",
        ),
        print::col("Queues", "string", "The number of queues."),
        print::col(
            "HandSize",
            "string",
            "The number of queues a flow is shuffled among.",
        ),
        print::col("QueueLengthLimit", "string", "The longest a queue may be."),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let spec = &obj["spec"];
    let none = || Value::String("<none>".into());
    let (mut ncs, mut queues, mut hand, mut limit) = (none(), none(), none(), none());
    let limited = &spec["limited"];
    if limited.is_object() {
        let int = |v: &Value| Value::from(v.as_i64().unwrap_or(0));
        ncs = int(&limited["nominalConcurrencyShares"]);
        let q = &limited["limitResponse"]["queuing"];
        if q.is_object() {
            queues = int(&q["queues"]);
            hand = int(&q["handSize"]);
            limit = int(&q["queueLengthLimit"]);
        }
    }
    vec![
        Value::String(name.into()),
        print::str_or(&spec["type"], ""),
        ncs,
        queues,
        hand,
        limit,
        Value::String(age.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limited_and_exempt_levels_print_as_upstream() {
        let l = json!({"spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 30,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}}}});
        assert_eq!(
            cells(&l, "workload", "1m"),
            [
                json!("workload"),
                json!("Limited"),
                json!(30),
                json!(64),
                json!(8),
                json!(50),
                json!("1m")
            ]
        );
        let e = cells(&json!({"spec": {"type": "Exempt"}}), "exempt", "1m");
        assert_eq!(e[2], json!("<none>"));
        assert_eq!(e.len(), columns().len());
    }
}
