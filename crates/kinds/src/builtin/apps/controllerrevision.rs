//! Controller revisions (`apps/v1`): upstream's printer (NAME CONTROLLER REVISION AGE, the
//! controller as `kind.group/name` in lower case, `<none>` without a controller reference).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `apps/v1` controller revisions, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(Printed::new(columns, cells))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col("Controller", "string", "Controller of the object."),
        print::col(
            "Revision",
            "string",
            "The revision of the state the data represents.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let controller = obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["controller"] == true)
        .map_or_else(|| "<none>".to_owned(), controller_name);
    vec![
        Value::String(name.into()),
        Value::String(controller),
        Value::from(obj["revision"].as_i64().unwrap_or(0)),
        Value::String(age.into()),
    ]
}

/// `kind.group/name` in lower case (`kind/name` for the core group), as upstream's
/// `formatResourceName` of the reference's group and kind.
fn controller_name(r: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let (api_version, kind, name) = (s(&r["apiVersion"]), s(&r["kind"]), s(&r["name"]));
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    match (group.is_empty(), kind.is_empty()) {
        (true, true) => name,
        (true, false) => format!("{}/{name}", kind.to_lowercase()),
        (false, _) => format!("{}.{}/{name}", kind.to_lowercase(), group.to_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_print_the_controller_and_revision() {
        let r = json!({"revision": 3, "metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}]}});
        assert_eq!(
            cells(&r, "web-1", "1m"),
            [
                json!("web-1"),
                json!("statefulset.apps/web"),
                json!(3),
                json!("1m")
            ]
        );
        assert_eq!(cells(&json!({}), "x", "1m")[1], json!("<none>"));
    }
}
