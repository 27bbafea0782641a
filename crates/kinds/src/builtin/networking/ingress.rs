//! Ingresses (`networking.k8s.io/v1`): the status reset on create
//! (pkg/registry/networking/ingress/strategy.go) and the printer (NAME CLASS HOSTS ADDRESS
//! PORTS AGE).

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn};

/// `networking.k8s.io/v1` ingresses.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(IngressStrategy)
}

/// The ingress strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct IngressStrategy;

impl KindStrategy for IngressStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"loadBalancer": {}}));
        }
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col("Class", "string", "The name of the IngressClass resource."),
            print::col(
                "Hosts",
                "string",
                "Hosts that incoming requests are matched against.",
            ),
            print::col(
                "Address",
                "string",
                "Address is a list of IPs or hostnames of the load balancer.",
            ),
            print::col("Ports", "string", "Ports of TLS configurations that open."),
            print::age_column(),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let spec = &obj["spec"];
        // Upstream's formatHosts: the first three, then "+ N more...", "*" for none.
        let hosts: Vec<&str> = spec["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["host"].as_str().filter(|h| !h.is_empty()))
            .collect();
        let hosts_text = match hosts.len() {
            0 => "*".to_owned(),
            n if n > 3 => format!("{} + {} more...", hosts[..3].join(","), n - 3),
            _ => hosts.join(","),
        };
        let address: Vec<&str> = obj["status"]["loadBalancer"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| {
                i["ip"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .or_else(|| i["hostname"].as_str().filter(|s| !s.is_empty()))
            })
            .collect();
        let tls = spec["tls"].as_array().is_some_and(|t| !t.is_empty());
        Some(vec![
            Value::String(name.into()),
            print::or_none(&spec["ingressClassName"]),
            Value::String(hosts_text),
            Value::String(address.join(",")),
            Value::String(if tls { "80, 443" } else { "80" }.into()),
            Value::String(age.into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_print_hosts_and_ports() {
        let ing = json!({"spec": {"ingressClassName": "nginx",
            "rules": [{"host": "a"}, {"host": "b"}, {"host": "c"}, {"host": "d"}], "tls": [{}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
        let c = IngressStrategy.table_cells(&ing, "i", "1s").unwrap();
        assert_eq!(
            c,
            [
                json!("i"),
                json!("nginx"),
                json!("a,b,c + 1 more..."),
                json!("1.2.3.4"),
                json!("80, 443"),
                json!("1s")
            ]
        );
        let mut bare = json!({"spec": {}});
        IngressStrategy.prepare_for_create(&mut bare);
        let c = IngressStrategy.table_cells(&bare, "i", "1s").unwrap();
        assert_eq!(
            c[1..5],
            [json!("<none>"), json!("*"), json!(""), json!("80")]
        );
    }
}
