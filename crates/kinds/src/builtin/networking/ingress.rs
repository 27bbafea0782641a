//! Ingresses (`networking.k8s.io/v1`): the status reset on create
//! (pkg/registry/networking/ingress/strategy.go), the HTTP path rules clients meet
//! (pkg/apis/networking/validation: every path has a `pathType`, `Exact` and `Prefix` paths
//! are absolute and clean) and the printer (NAME CLASS HOSTS ADDRESS PORTS AGE).
//!
//! Invariant: validation is one pass over the rules' paths, whose number the request's size
//! bounds, with a fixed number of checks per path.

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

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        paths(&obj["spec"])
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<crate::FieldError> {
        paths(&new["spec"])
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

/// The path types upstream supports, sorted as its `NotSupported` lists them.
const PATH_TYPES: &[&str] = &["Exact", "ImplementationSpecific", "Prefix"];

/// Sequences an `Exact` or `Prefix` path may not contain, and endings it may not have
/// (upstream's `invalidPathSequences`, `invalidPathSuffixes`).
const BAD_SEQUENCES: &[&str] = &["//", "/./", "/../", "%2f", "%2F"];
const BAD_SUFFIXES: &[&str] = &["/..", "/."];

/// Upstream's `validateHTTPIngressPath` for every rule's path: `pathType` required and
/// supported; an `Exact` or `Prefix` path absolute, without `//`, `/./`, `/../`, `%2f`, and
/// not ending in `/.` or `/..`; an `ImplementationSpecific` one absolute when set.
fn paths(spec: &Value) -> Vec<crate::FieldError> {
    let mut out = Vec::new();
    for (i, rule) in spec["rules"].as_array().into_iter().flatten().enumerate() {
        let http_paths = rule["http"]["paths"].as_array().into_iter().flatten();
        for (j, p) in http_paths.enumerate() {
            let at = format!("spec.rules[{i}].http.paths[{j}]");
            let path = p["path"].as_str().unwrap_or("");
            let absolute = || {
                crate::FieldError::invalid_str(
                    &format!("{at}.path"),
                    path,
                    "must be an absolute path",
                )
            };
            match p["pathType"].as_str() {
                None => out.push(crate::FieldError::required(
                    &format!("{at}.pathType"),
                    "pathType must be specified",
                )),
                Some("Exact" | "Prefix") => {
                    if !path.starts_with('/') {
                        out.push(absolute());
                    }
                    for bad in BAD_SEQUENCES.iter().filter(|b| path.contains(**b)) {
                        out.push(crate::FieldError::invalid_str(
                            &format!("{at}.path"),
                            path,
                            format!("must not contain '{bad}'"),
                        ));
                    }
                    for bad in BAD_SUFFIXES.iter().filter(|b| path.ends_with(**b)) {
                        out.push(crate::FieldError::invalid_str(
                            &format!("{at}.path"),
                            path,
                            format!("cannot end with '{bad}'"),
                        ));
                    }
                }
                Some("ImplementationSpecific") => {
                    if !path.is_empty() && !path.starts_with('/') {
                        out.push(absolute());
                    }
                }
                Some(other) => out.push(crate::FieldError::not_supported_str(
                    &format!("{at}.pathType"),
                    other,
                    PATH_TYPES,
                )),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ingress(paths: Value) -> Value {
        json!({"spec": {"rules": [{"http": {"paths": paths}}]}})
    }

    #[test]
    fn paths_need_a_type_and_prefix_paths_are_absolute() {
        let backend = json!({"service": {"name": "s", "port": {"number": 80}}});
        let ok = ingress(json!([
            {"path": "/", "pathType": "Prefix", "backend": backend},
            {"path": "/a/b", "pathType": "Exact", "backend": backend},
            {"pathType": "ImplementationSpecific", "backend": backend},
        ]));
        assert_eq!(IngressStrategy.validate_create(&ok), []);
        let bad = ingress(json!([
            {"path": "/", "backend": backend},
            {"path": "nope", "pathType": "Prefix", "backend": backend},
            {"path": "/a//b", "pathType": "Exact", "backend": backend},
            {"path": "/a/..", "pathType": "Prefix", "backend": backend},
            {"path": "x", "pathType": "ImplementationSpecific", "backend": backend},
            {"path": "/", "pathType": "Regex", "backend": backend},
        ]));
        let errs: Vec<String> = IngressStrategy
            .validate_update(&bad, &ok)
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect();
        assert_eq!(
            errs,
            [
                "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
                "spec.rules[0].http.paths[1].path: Invalid value: \"nope\": must be an absolute path",
                "spec.rules[0].http.paths[2].path: Invalid value: \"/a//b\": must not contain '//'",
                "spec.rules[0].http.paths[3].path: Invalid value: \"/a/..\": cannot end with '/..'",
                "spec.rules[0].http.paths[4].path: Invalid value: \"x\": must be an absolute path",
                "spec.rules[0].http.paths[5].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
            ]
        );
    }

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
