//! CSI drivers (`storage.k8s.io/v1`): upstream's printer (NAME ATTACHREQUIRED PODINFOONMOUNT
//! STORAGECAPACITY TOKENREQUESTS REQUIRESREPUBLISH MODES AGE), unset booleans as upstream's
//! printer reads them (`attachRequired` true, the others false).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `storage.k8s.io/v1` CSI drivers, from the derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(Printed::new(columns, cells).defaulting(crate::builtin::defaults::csi_driver))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "AttachRequired",
            "boolean",
            "Whether the driver needs an attach operation.",
        ),
        print::col(
            "PodInfoOnMount",
            "boolean",
            "Whether the driver needs pod information on mount.",
        ),
        print::col(
            "StorageCapacity",
            "boolean",
            "Whether the driver reports storage capacity.",
        ),
        print::col(
            "TokenRequests",
            "string",
            "The audiences of the tokens the driver receives.",
        ),
        print::col(
            "RequiresRepublish",
            "boolean",
            "Whether NodePublishVolume is called periodically.",
        ),
        print::col(
            "Modes",
            "string",
            "The volume lifecycle modes the driver supports.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let spec = &obj["spec"];
    let flag = |f: &str, default: bool| Value::Bool(spec[f].as_bool().unwrap_or(default));
    let joined = |items: &[Value], field: Option<&str>| {
        items
            .iter()
            .map(|i| field.map_or(i, |f| &i[f]).as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")
    };
    let token_requests = match spec["tokenRequests"].as_array() {
        Some(t) => joined(t, Some("audience")),
        None => "<unset>".to_owned(),
    };
    let modes = joined(
        spec["volumeLifecycleModes"]
            .as_array()
            .map_or(&[][..], Vec::as_slice),
        None,
    );
    vec![
        Value::String(name.into()),
        flag("attachRequired", true),
        flag("podInfoOnMount", false),
        flag("storageCapacity", false),
        Value::String(token_requests),
        flag("requiresRepublish", false),
        Value::String(if modes.is_empty() {
            "<none>".into()
        } else {
            modes
        }),
        Value::String(age.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_print_flags_tokens_and_modes() {
        let d = json!({"spec": {"podInfoOnMount": true, "tokenRequests": [{"audience": "a"}, {"audience": "b"}],
            "volumeLifecycleModes": ["Persistent", "Ephemeral"]}});
        assert_eq!(
            cells(&d, "d", "1m"),
            [
                json!("d"),
                json!(true),
                json!(true),
                json!(false),
                json!("a,b"),
                json!(false),
                json!("Persistent,Ephemeral"),
                json!("1m")
            ]
        );
        let bare = cells(&json!({}), "d", "1m");
        assert_eq!((&bare[4], &bare[6]), (&json!("<unset>"), &json!("<none>")));
        assert_eq!(bare.len(), columns().len());
    }
}
