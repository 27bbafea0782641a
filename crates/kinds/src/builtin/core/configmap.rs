//! Config maps (`v1`): no status, no generation; keys of `data` and `binaryData` are config
//! keys and in one of the two only ([`super::data_keys`], upstream's `ValidateConfigMap`); a
//! config map marked `immutable` keeps its `data`, `binaryData` and the mark (upstream's
//! `ValidateConfigMapUpdate`); upstream's printer (NAME DATA AGE, DATA counting `data` and
//! `binaryData` keys).

use serde_json::Value;

use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn};
use crate::{FieldError, Generation, KindSpec};

/// `v1` config maps.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "configmaps", "ConfigMap")
        .short_names(["cm"])
        .generation(Generation::None)
        .strategy(ConfigMapStrategy)
}

/// The config map strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfigMapStrategy;

impl KindStrategy for ConfigMapStrategy {
    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        super::data_keys::config_map_errors(obj)
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut out = super::data_keys::config_map_errors(new);
        out.extend(super::secret::immutable_contents(
            new,
            old,
            &["data", "binaryData"],
        ));
        out
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
            "Data",
            "string",
            "The number of keys in data and binaryData.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let n = |f: &str| obj[f].as_object().map_or(0, serde_json::Map::len) as u64;
    vec![
        Value::String(name.into()),
        Value::from(n("data") + n("binaryData")),
        Value::String(age.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn data_counts_both_maps() {
        let cm = json!({"data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        assert_eq!(cells(&cm, "c", "1m"), [json!("c"), json!(3), json!("1m")]);
        assert_eq!(cells(&json!({}), "c", "1m")[1], json!(0));
        assert_eq!(columns().len(), 3);
    }
}
