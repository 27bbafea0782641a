//! Upstream's rules (pkg/apis/core/validation, v1.32) for a container's `ports`
//! (`validateContainerPorts`) and `env` (`ValidateEnv`, `validateEnvVarValueFrom`), and the
//! port number and name rules (`IsValidPortNum`, `IsValidPortName`) that Services share.
//!
//! A port needs a `containerPort` (`Required value` when absent or 0) in 1–65535, a
//! `hostPort` (when set) in that range, a protocol among TCP, UDP and SCTP (the v1 defaults
//! set TCP), and an optional IANA-style name unique among the container's ports. An
//! environment variable needs a name (`Required value`), which with upstream 1.32's
//! `RelaxedEnvironmentVariableValidation` (beta, on) is any printable ASCII but `=`; a
//! `valueFrom` names exactly one source, and none beside a `value`.
//!
//! Invariants: those of the parent module; names are compared through one set per list.

use std::collections::HashSet;

use serde_json::Value;

use crate::FieldError;

/// Upstream's `InclusiveRangeError(1, 65535)`.
pub const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// The protocols of a port, as `sets.List` sorts them.
pub const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

/// The errors of the container ports `ports` at `path` (`spec.containers[0].ports`).
pub fn container_ports(ports: &Value, path: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut names = HashSet::new();
    for (i, p) in ports.as_array().into_iter().flatten().enumerate() {
        let at = format!("{path}[{i}]");
        if let Some(name) = p["name"].as_str().filter(|n| !n.is_empty()) {
            let errs = port_name_errors(name);
            if !errs.is_empty() {
                for msg in errs {
                    out.push(FieldError::invalid_str(&format!("{at}.name"), name, msg));
                }
            } else if !names.insert(name) {
                out.push(FieldError::duplicate(&format!("{at}.name"), name));
            }
        }
        match int(&p["containerPort"]) {
            0 => out.push(FieldError::required(&format!("{at}.containerPort"), "")),
            n => port_number(n, &format!("{at}.containerPort"), &mut out),
        }
        if let n @ (..=-1 | 1..) = int(&p["hostPort"]) {
            port_number(n, &format!("{at}.hostPort"), &mut out);
        }
        protocol(&p["protocol"], &format!("{at}.protocol"), &mut out);
    }
    out
}

/// `protocol` Required, else one of [`PROTOCOLS`].
pub fn protocol(v: &Value, at: &str, out: &mut Vec<FieldError>) {
    match v.as_str() {
        None | Some("") => out.push(FieldError::required(at, "")),
        Some(p) if PROTOCOLS.contains(&p) => {}
        Some(p) => out.push(FieldError::not_supported_str(at, p, PROTOCOLS)),
    }
}

/// `IsValidPortNum` at `at`, the value shown bare.
pub fn port_number(n: i64, at: &str, out: &mut Vec<FieldError>) {
    if !(1..=65535).contains(&n) {
        out.push(FieldError::invalid(at, &Value::from(n), PORT_RANGE));
    }
}

/// An integer field as Go decodes it into an `int32` (absent, `null` or not a number: 0).
pub fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Upstream's `IsValidPortName` (an IANA service name): every problem with `name`.
pub fn port_name_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push("must be no more than 15 characters".to_owned());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        || name.is_empty()
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

/// The errors of the environment `env` at `path` (`spec.containers[0].env`).
pub fn env(env: &Value, path: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    for (i, e) in env.as_array().into_iter().flatten().enumerate() {
        let at = format!("{path}[{i}]");
        match e["name"].as_str().unwrap_or("") {
            "" => out.push(FieldError::required(&format!("{at}.name"), "")),
            name => {
                // `IsRelaxedEnvVarName`.
                if name.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
                    out.push(FieldError::invalid_str(
                        &format!("{at}.name"),
                        name,
                        "a valid environment variable name must consist only of printable ASCII characters other than '='",
                    ));
                }
            }
        }
        value_from(e, &format!("{at}.valueFrom"), &mut out);
    }
    out
}

/// `validateEnvVarValueFrom`: exactly one source, none beside a value; each source's
/// required fields.
fn value_from(e: &Value, at: &str, out: &mut Vec<FieldError>) {
    let from = &e["valueFrom"];
    if from.is_null() {
        return;
    }
    let set = |k: &str| !from[k].is_null();
    let mut sources = 0;
    if set("fieldRef") {
        sources += 1;
        if from["fieldRef"]["fieldPath"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            out.push(FieldError::required(
                &format!("{at}.fieldRef.fieldPath"),
                "",
            ));
        }
    }
    if set("resourceFieldRef") {
        sources += 1;
        if from["resourceFieldRef"]["resource"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            out.push(FieldError::required(
                &format!("{at}.resourceFieldRef.resource"),
                "",
            ));
        }
    }
    for source in ["configMapKeyRef", "secretKeyRef"] {
        if set(source) {
            sources += 1;
            if from[source]["key"].as_str().is_none_or(str::is_empty) {
                out.push(FieldError::required(&format!("{at}.{source}.key"), ""));
            }
        }
    }
    let has_value = e["value"].as_str().is_some_and(|v| !v.is_empty());
    if sources == 0 {
        out.push(FieldError::invalid_str(
            at,
            "",
            "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
        ));
    } else if has_value {
        out.push(FieldError::invalid_str(
            at,
            "",
            "may not be specified when `value` is not empty",
        ));
    } else if sources > 1 {
        out.push(FieldError::invalid_str(
            at,
            "",
            "may not have more than one field specified at a time",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn ports_need_a_number_in_range_a_protocol_and_unique_names() {
        let ports = json!([{}, {"containerPort": 70000, "hostPort": -1, "protocol": "ICMP",
            "name": "Web"}, {"containerPort": 80, "name": "web", "protocol": "TCP"},
            {"containerPort": 81, "name": "web", "protocol": "UDP", "hostPort": 8080}]);
        assert_eq!(
            messages(&container_ports(&ports, "p")),
            [
                "p[0].containerPort: Required value",
                "p[0].protocol: Required value",
                "p[1].name: Invalid value: \"Web\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "p[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "p[1].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive",
                "p[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "p[3].name: Duplicate value: \"web\"",
            ]
        );
        assert_eq!(
            port_name_errors("-a--"),
            [
                "must not contain consecutive hyphens",
                "must not begin or end with a hyphen"
            ]
        );
        assert_eq!(port_name_errors("123").len(), 1);
    }

    #[test]
    fn env_needs_names_and_one_source() {
        let vars = json!([{}, {"name": "A=B"}, {"name": "my.env-name 1", "value": "x"},
            {"name": "F", "valueFrom": {}},
            {"name": "G", "value": "v", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "H", "valueFrom": {"configMapKeyRef": {"name": "c"},
                "secretKeyRef": {"name": "s", "key": "k"}}}]);
        assert_eq!(
            messages(&env(&vars, "e")),
            [
                "e[0].name: Required value",
                "e[1].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
                "e[3].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                "e[4].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
                "e[5].valueFrom.configMapKeyRef.key: Required value",
                "e[5].valueFrom: Invalid value: \"\": may not have more than one field specified at a time",
            ]
        );
    }
}
