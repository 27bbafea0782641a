//! Endpoints (`v1`): a PUT of missing endpoints creates them; upstream's printer (NAME
//! ENDPOINTS AGE, `formatEndpoints`: `ip:port` per address and port, three at most, then
//! `+ N more...`; `<none>` without subsets).

use serde_json::Value;

use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;
use crate::{Generation, KindSpec};

/// How many addresses the ENDPOINTS column shows.
const SHOWN: usize = 3;

/// `v1` endpoints.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "endpoints", "Endpoints")
        .short_names(["ep"])
        .singular("endpoints")
        .generation(Generation::None)
        .allow_create_on_update(true)
        .strategy(Printed::new(columns, cells).defaulting(crate::builtin::defaults::endpoints))
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Endpoints",
            "string",
            "The addresses and ports of the subsets.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    vec![
        Value::String(name.into()),
        Value::String(format_endpoints(&obj["subsets"])),
        Value::String(age.into()),
    ]
}

/// `ip:port` (`[ip]:port` for IPv6, as Go's `net.JoinHostPort`) of every address and port
/// of every subset (the addresses alone for a subset without ports), cut after three (`SHOWN`).
pub fn format_endpoints(subsets: &Value) -> String {
    let Some(subsets) = subsets.as_array().filter(|s| !s.is_empty()) else {
        return "<none>".into();
    };
    let mut shown = Vec::with_capacity(SHOWN);
    let mut count = 0usize;
    for ss in subsets {
        let addresses = ss["addresses"].as_array().map_or(&[][..], Vec::as_slice);
        let ip = |a: &Value| a["ip"].as_str().unwrap_or("").to_owned();
        match ss["ports"].as_array().filter(|p| !p.is_empty()) {
            None => {
                count += addresses.len();
                for a in addresses.iter().take(SHOWN.saturating_sub(shown.len())) {
                    shown.push(ip(a));
                }
            }
            Some(ports) => {
                for p in ports {
                    count += addresses.len();
                    let port = p["port"].as_i64().unwrap_or(0);
                    for a in addresses.iter().take(SHOWN.saturating_sub(shown.len())) {
                        let host = ip(a);
                        shown.push(if host.contains(':') {
                            format!("[{host}]:{port}")
                        } else {
                            format!("{host}:{port}")
                        });
                    }
                }
            }
        }
    }
    print::list_with_more(&shown, count, SHOWN, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoints_print_three_then_more() {
        let ep = json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
            "ports": [{"port": 80}, {"port": 443}]}]);
        assert_eq!(
            format_endpoints(&ep),
            "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 1 more..."
        );
        let v6 = json!([{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}]);
        assert_eq!(format_endpoints(&v6), "[fd00::1]:80");
        let headless = json!([{"addresses": [{"ip": "10.0.0.9"}]}]);
        assert_eq!(format_endpoints(&headless), "10.0.0.9");
        assert_eq!(format_endpoints(&json!(null)), "<none>");
        assert_eq!(format_endpoints(&json!([{}])), "");
        assert_eq!(cells(&json!({}), "e", "1s").len(), columns().len());
    }
}
