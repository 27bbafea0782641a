//! Pod templates (`v1`): the template's v1 defaults and upstream's `ValidatePodTemplate`
//! (the template's pod spec, [`crate::builtin::podspec`]) and upstream's printer (NAME
//! CONTAINERS IMAGES POD LABELS, no AGE).

use serde_json::Value;

use crate::builtin::podspec::{self, workload};
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn};
use crate::{FieldError, KindSpec};

/// `v1` pod templates, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(PodTemplateStrategy)
}

/// The pod template strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodTemplateStrategy;

impl KindStrategy for PodTemplateStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        podspec::defaults::template(obj.get_mut("template"));
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        podspec::defaults::template(new.get_mut("template"));
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        workload::template(&obj["template"], "template", None)
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<FieldError> {
        workload::template(&new["template"], "template", None)
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(columns())
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        Some(cells(obj, name, age))
    }
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
