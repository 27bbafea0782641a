//! Ingress classes (`networking.k8s.io/v1`): upstream's printer (NAME CONTROLLER PARAMETERS
//! AGE, the parameters as `Kind[.apiGroup]/name`).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `networking.k8s.io/v1` ingress classes, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(Printed::new(columns, cells).defaulting(crate::builtin::defaults::ingress_class))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Controller",
            "string",
            "Controller that is responsible for handling this class.",
        ),
        print::col(
            "Parameters",
            "string",
            "A reference to a resource with additional parameters.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let p = &obj["spec"]["parameters"];
    let parameters = if p.is_object() {
        let mut s = p["kind"].as_str().unwrap_or("").to_owned();
        if let Some(g) = p["apiGroup"].as_str() {
            s.push('.');
            s.push_str(g);
        }
        format!("{s}/{}", p["name"].as_str().unwrap_or(""))
    } else {
        "<none>".to_owned()
    };
    vec![
        Value::String(name.into()),
        print::str_or(&obj["spec"]["controller"], ""),
        Value::String(parameters),
        Value::String(age.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_print_the_parameters_reference() {
        let c = json!({"spec": {"controller": "example.com/ic", "parameters":
            {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "p"}}});
        assert_eq!(
            cells(&c, "ic", "1m"),
            [
                json!("ic"),
                json!("example.com/ic"),
                json!("IngressParameters.k8s.example.com/p"),
                json!("1m")
            ]
        );
        assert_eq!(cells(&json!({}), "ic", "1m")[2], json!("<none>"));
    }
}
