//! EndpointSlices (`discovery.k8s.io/v1`): stored as upstream's registry stores them
//! (pkg/registry/discovery/endpointslice: no status, no generation of its own here, no
//! create on update, no short names), printed with upstream's columns (AddressType, Ports,
//! Endpoints: at most three values each, then `+ N more...`, `<unset>` for none).

use serde_json::Value;

use crate::strategy::{KindStrategy, TableColumn};
use crate::{Generation, KindSpec};

/// `discovery.k8s.io/v1` endpointslices.
pub fn spec() -> KindSpec {
    KindSpec::new("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
        .generation(Generation::None)
        .strategy(EndpointSliceStrategy)
}

/// The EndpointSlice strategy: its Table.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndpointSliceStrategy;

/// Upstream's `listWithMoreString` over at most three shown values.
fn list_with_more(shown: &[String], total: usize) -> String {
    let joined = shown.join(",");
    if total > shown.len() {
        return format!("{joined} + {} more...", total - shown.len());
    }
    if joined.is_empty() {
        "<unset>".into()
    } else {
        joined
    }
}

const MAX_SHOWN: usize = 3;

fn ports(obj: &Value) -> String {
    let all = obj
        .get("ports")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let shown: Vec<String> = all
        .iter()
        .take(MAX_SHOWN)
        .map(|p| {
            match (
                p.get("port").and_then(Value::as_i64),
                p.get("name").and_then(Value::as_str),
            ) {
                (Some(n), _) => n.to_string(),
                (None, Some(name)) => name.to_owned(),
                (None, None) => "*".into(),
            }
        })
        .collect();
    list_with_more(&shown, all.len())
}

fn endpoints(obj: &Value) -> String {
    let addresses = obj
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("addresses").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str);
    let mut shown = Vec::new();
    let mut total = 0usize;
    for a in addresses {
        if shown.len() < MAX_SHOWN {
            shown.push(a.to_owned());
        }
        total = total.saturating_add(1);
    }
    list_with_more(&shown, total)
}

impl KindStrategy for EndpointSliceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        crate::builtin::defaults::endpoint_slice(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        crate::builtin::defaults::endpoint_slice(new);
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let col = TableColumn::new;
        let mut name = col(
            "Name",
            "string",
            "Name must be unique within a namespace. Cannot be updated.",
            0,
        );
        name.format = "name".into();
        Some(vec![
            name,
            col("AddressType", "string", "The IP protocol for this slice", 0),
            col("Ports", "string", "The ports for this slice", 0),
            col("Endpoints", "string", "The endpoints for this slice", 0),
            col(
                "Age",
                "string",
                "CreationTimestamp is the time this object was created.",
                0,
            ),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let address_type = obj.get("addressType").and_then(Value::as_str).unwrap_or("");
        Some(vec![
            name.into(),
            address_type.into(),
            ports(obj).into(),
            endpoints(obj).into(),
            age.into(),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cells_show_three_values_then_a_count() {
        let s = json!({"addressType": "IPv4",
            "ports": [{"port": 6443, "name": "https"}, {"name": "x"}, {}, {"port": 1}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3", "10.0.0.4"]}]});
        let cells = EndpointSliceStrategy.table_cells(&s, "k", "1m").unwrap();
        assert_eq!(cells[1], "IPv4");
        assert_eq!(cells[2], "6443,x,* + 1 more...");
        assert_eq!(cells[3], "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...");
        let empty = EndpointSliceStrategy
            .table_cells(&json!({}), "k", "1m")
            .unwrap();
        assert_eq!(empty[2], "<unset>");
        assert_eq!(empty[3], "<unset>");
    }
}
