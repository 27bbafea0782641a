//! Secrets (`v1`): upstream's v1 defaults set `type` to `Opaque` (a field selector reads an
//! object without one as `Opaque` too); upstream's printer (NAME TYPE DATA AGE).

use serde_json::{Value, json};

use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, set_default};
use crate::{Generation, KindSpec};

/// `v1` secrets.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "secrets", "Secret")
        .selectable_fields(["type"])
        .field_default("type", "Opaque")
        .generation(Generation::None)
        .strategy(SecretStrategy)
}

/// The secret strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct SecretStrategy;

impl KindStrategy for SecretStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_default(obj, &["type"], json!("Opaque"));
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col("Type", "string", "The type of the secret."),
            print::col("Data", "string", "The number of keys in data."),
            print::age_column(),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        // Upstream's decoding merges `stringData` into `data`; a key in both counts once.
        let mut keys: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        for f in ["data", "stringData"] {
            keys.extend(
                obj[f]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| k.as_str()),
            );
        }
        Some(vec![
            Value::String(name.into()),
            print::str_or(&obj["type"], ""),
            Value::from(keys.len() as u64),
            Value::String(age.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_print_type_and_data_keys() {
        let s = json!({"type": "kubernetes.io/tls", "data": {"a": "", "b": ""}, "stringData": {"b": "x", "c": "y"}});
        let c = SecretStrategy.table_cells(&s, "s", "2m").unwrap();
        assert_eq!(
            c,
            [
                json!("s"),
                json!("kubernetes.io/tls"),
                json!(3),
                json!("2m")
            ]
        );
        assert_eq!(c.len(), SecretStrategy.table_columns().unwrap().len());
    }
}
