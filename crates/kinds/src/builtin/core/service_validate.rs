//! The part of upstream's `ValidateService` (pkg/apis/core/validation, v1.32) that typed
//! clients rely on, on create and update: `spec.ports` is required but for ExternalName and
//! headless (`clusterIP: None`) services; each port's `port` in 1–65535 (upstream checks the
//! range, so an absent port is `Invalid value: 0`), a protocol among TCP, UDP and SCTP, a
//! `targetPort` that is a port number or an IANA port name, an `appProtocol` that is a
//! qualified name, and a name — a DNS label, required and unique when the service has more
//! than one port.
//!
//! Invariants: one pass over the ports, names compared through one set; nothing panics on
//! any JSON.

use std::collections::HashSet;

use listwatch_api::labels::qualified_name_errors;
use serde_json::Value;

use crate::FieldError;
use crate::builtin::podspec::ports_env::{int, port_name_errors, port_number, protocol};
use crate::builtin::podspec::validate::dns_label;

/// A service's errors (its spec as defaulted).
pub fn service(svc: &Value) -> Vec<FieldError> {
    let spec = &svc["spec"];
    let mut out = Vec::new();
    let kind = spec["type"].as_str().unwrap_or("ClusterIP");
    let ports: &[Value] = spec["ports"].as_array().map_or(&[], Vec::as_slice);
    if ports.is_empty() && !headless(spec) && kind != "ExternalName" {
        out.push(FieldError::required("spec.ports", ""));
    }
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        match p["name"].as_str().unwrap_or("") {
            "" if ports.len() > 1 => out.push(FieldError::required(&format!("{at}.name"), "")),
            "" => {}
            name => {
                if let Err(msg) = dns_label(name) {
                    out.push(FieldError::invalid_str(&format!("{at}.name"), name, msg));
                }
                if !names.insert(name) {
                    out.push(FieldError::duplicate(&format!("{at}.name"), name));
                }
            }
        }
        port_number(int(&p["port"]), &format!("{at}.port"), &mut out);
        protocol(&p["protocol"], &format!("{at}.protocol"), &mut out);
        let target = format!("{at}.targetPort");
        match &p["targetPort"] {
            Value::String(name) => {
                for msg in port_name_errors(name) {
                    out.push(FieldError::invalid_str(&target, name, msg));
                }
            }
            other => port_number(int(other), &target, &mut out),
        }
        if let Some(app) = p["appProtocol"].as_str() {
            for msg in qualified_name_errors(app) {
                out.push(FieldError::invalid_str(
                    &format!("{at}.appProtocol"),
                    app,
                    msg,
                ));
            }
        }
    }
    out
}

/// Upstream's `isHeadlessService`: a ClusterIP service whose (first) cluster IP is `None`.
fn headless(spec: &Value) -> bool {
    let kind = spec["type"].as_str().unwrap_or("ClusterIP");
    let first = spec["clusterIPs"][0]
        .as_str()
        .or_else(|| spec["clusterIP"].as_str());
    kind == "ClusterIP" && first == Some("None")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(spec: Value) -> Vec<String> {
        service(&json!({ "spec": spec }))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn ports_are_required_but_for_external_names_and_headless_services() {
        assert_eq!(
            messages(json!({"type": "ClusterIP"})),
            ["spec.ports: Required value"]
        );
        assert_eq!(
            messages(json!({"ports": []})),
            ["spec.ports: Required value"]
        );
        assert!(messages(json!({"type": "ExternalName", "externalName": "x.example"})).is_empty());
        assert!(messages(json!({"type": "ClusterIP", "clusterIP": "None"})).is_empty());
        assert!(messages(json!({"clusterIPs": ["None"]})).is_empty());
    }

    #[test]
    fn each_port_is_checked_as_upstream() {
        // `ports: [{}]` after the v1 defaults (protocol TCP; no port, so no target port).
        assert_eq!(
            messages(json!({"ports": [{"protocol": "TCP"}]})),
            [
                "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive",
            ]
        );
        assert_eq!(
            messages(json!({"ports": [
                {"port": 80, "protocol": "TCP", "targetPort": 8080},
                {"name": "a", "port": 70000, "protocol": "ICMP", "targetPort": "Web--"},
                {"name": "a", "port": 53, "protocol": "UDP", "targetPort": 53,
                 "appProtocol": "-x"},
            ]})),
            [
                "spec.ports[0].name: Required value",
                "spec.ports[1].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.ports[1].targetPort: Invalid value: \"Web--\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "spec.ports[1].targetPort: Invalid value: \"Web--\": must not contain consecutive hyphens",
                "spec.ports[1].targetPort: Invalid value: \"Web--\": must not begin or end with a hyphen",
                "spec.ports[2].name: Duplicate value: \"a\"",
                "spec.ports[2].appProtocol: Invalid value: \"-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ]
        );
        // What `kubectl expose` and `kubectl create service` send.
        assert!(
            messages(json!({"ports": [
                {"name": "port-1", "port": 80, "protocol": "TCP", "targetPort": 8080},
                {"name": "port-2", "port": 443, "protocol": "TCP", "targetPort": "https"},
            ]}))
            .is_empty()
        );
    }
}
