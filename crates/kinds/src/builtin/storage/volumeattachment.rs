//! Volume attachments (`storage.k8s.io/v1`): the status reset on create (`attached: false`)
//! and upstream's printer (NAME ATTACHER PV NODE ATTACHED AGE, an unset PV as empty).

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `storage.k8s.io/v1` volume attachments, from the derived table's row; `status` is the
/// empty status a create resets to.
pub fn spec(base: KindSpec, status: fn() -> Value) -> KindSpec {
    base.strategy(Printed::new(columns, cells).resetting_status(status))
}

fn columns() -> Vec<TableColumn> {
    let mut attacher = print::col("Attacher", "string", "The name of the volume driver.");
    attacher.format = "name".into();
    vec![
        print::name_column(),
        attacher,
        print::col("PV", "string", "The persistent volume to attach."),
        print::col("Node", "string", "The node to attach the volume to."),
        print::col("Attached", "boolean", "Whether the volume is attached."),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let spec = &obj["spec"];
    vec![
        Value::String(name.into()),
        print::str_or(&spec["attacher"], ""),
        print::str_or(&spec["source"]["persistentVolumeName"], ""),
        print::str_or(&spec["nodeName"], ""),
        Value::Bool(obj["status"]["attached"].as_bool().unwrap_or(false)),
        Value::String(age.into()),
    ]
}
