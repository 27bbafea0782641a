//! Resource quotas (`v1`): stored only (no admission counts or refuses anything); the status
//! reset on create; upstream's printer (NAME REQUEST LIMIT AGE): for each resource of
//! `status.hard` in name order, `name: used/hard`, in LIMIT when the name's first dotted part
//! is `limits` and in REQUEST otherwise. Quantities print as stored, which is upstream's
//! canonical form (`1000m` as `1`): the registry stores every quantity canonical.

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `v1` resource quotas, from the derived table's row; `status` is the empty status a
/// create resets to.
pub fn spec(base: KindSpec, status: fn() -> Value) -> KindSpec {
    base.strategy(Printed::new(columns, cells).resetting_status(status))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Request",
            "string",
            "Used and hard amounts of the requests and other resources.",
        ),
        print::col(
            "Limit",
            "string",
            "Used and hard amounts of the limits.* resources.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let (hard, used) = (&obj["status"]["hard"], &obj["status"]["used"]);
    let quantity = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "0".to_owned(),
    };
    let mut names: Vec<&String> = hard
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .collect();
    names.sort();
    let (mut request, mut limit) = (Vec::new(), Vec::new());
    for r in names {
        let text = format!(
            "{r}: {}/{}",
            quantity(&used[r.as_str()]),
            quantity(&hard[r.as_str()])
        );
        let mut parts = r.split('.');
        if parts.next() == Some("limits") && parts.next().is_some() {
            limit.push(text);
        } else {
            request.push(text);
        }
    }
    vec![
        Value::String(name.into()),
        Value::String(request.join(", ")),
        Value::String(limit.join(", ")),
        Value::String(age.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_and_limits_split_by_name() {
        let q = json!({"status": {"hard": {"pods": "10", "limits.cpu": "2", "requests.cpu": "1", "limits": "3"},
            "used": {"requests.cpu": "500m"}}});
        assert_eq!(
            cells(&q, "q", "1m"),
            [
                json!("q"),
                json!("limits: 0/3, pods: 0/10, requests.cpu: 500m/1"),
                json!("limits.cpu: 0/2"),
                json!("1m")
            ]
        );
        assert_eq!(cells(&json!({}), "q", "1m")[1], json!(""));
    }
}
