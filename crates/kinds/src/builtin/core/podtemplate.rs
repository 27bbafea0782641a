//! Pod templates (`v1`): upstream's printer (NAME CONTAINERS IMAGES POD LABELS, no AGE).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `v1` pod templates, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(Printed::new(columns, cells))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Containers",
            "string",
            "Names of each container in the template.",
        ),
        print::col(
            "Images",
            "string",
            "Images referenced by each container in the template.",
        ),
        print::col("Pod Labels", "string", "The labels for the pod template."),
    ]
}

fn cells(obj: &Value, name: &str, _age: &str) -> Vec<Value> {
    let template = &obj["template"];
    let [containers, images] = print::containers_and_images(template);
    vec![
        Value::String(name.into()),
        containers,
        images,
        Value::String(print::format_labels(
            template["metadata"]["labels"].as_object(),
        )),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_print_containers_images_and_labels() {
        let t = json!({"template": {"metadata": {"labels": {"b": "2", "a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}, {"name": "d", "image": "redis"}]}}});
        assert_eq!(
            cells(&t, "t", "1m"),
            [
                json!("t"),
                json!("c,d"),
                json!("nginx,redis"),
                json!("a=1,b=2")
            ]
        );
        assert_eq!(cells(&json!({}), "t", "1m")[3], json!("<none>"));
    }
}
