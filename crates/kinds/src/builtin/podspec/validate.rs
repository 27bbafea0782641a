//! The part of upstream's `ValidatePodSpec` (pkg/apis/core/validation) that clients meet
//! first, for a pod's spec and every pod template's: at least one container; each container
//! and init container named with a DNS label unique among the pod's containers and init
//! containers, with an image, and with a pull and termination message policy upstream
//! supports, with valid ports ([`super::ports_env`]), environment variables and resource
//! requirements ([`super::resources`]); the pod's restart and DNS policies among upstream's,
//! its tolerations valid ([`super::tolerations`]). A pod's create adds
//! upstream's `ValidatePodCreate` rules: no ephemeral containers, no node name while
//! scheduling gates remain.
//!
//! Invariants: those of the parent module; names are compared through one set, so a spec
//! costs one pass over its containers.

use std::collections::HashSet;

use serde_json::Value;

use super::{ports_env, resources, tolerations};
use crate::FieldError;

/// `spec.restartPolicy`'s values.
pub const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const MESSAGE_POLICIES: &[&str] = &["File", "FallbackToLogsOnError"];

/// A pod spec's errors, its fields under `path` (`spec`, `spec.template.spec`).
pub fn pod_spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut names = HashSet::new();
    containers(spec, "initContainers", path, &mut names, &mut out);
    if spec["containers"].as_array().is_none_or(Vec::is_empty) {
        out.push(FieldError::required(&format!("{path}.containers"), ""));
    } else {
        containers(spec, "containers", path, &mut names, &mut out);
    }
    enumerated(spec, "restartPolicy", path, RESTART_POLICIES, &mut out);
    enumerated(spec, "dnsPolicy", path, DNS_POLICIES, &mut out);
    out.extend(tolerations::tolerations(
        &spec["tolerations"],
        &format!("{path}.tolerations"),
    ));
    out
}

/// A pod's create rules (`ValidatePodCreate`): its spec's, no ephemeral containers, and no
/// node name while scheduling gates remain.
pub fn pod_create(pod: &Value) -> Vec<FieldError> {
    let spec = &pod["spec"];
    let mut out = pod_spec(spec, "spec");
    if spec["ephemeralContainers"]
        .as_array()
        .is_some_and(|e| !e.is_empty())
    {
        out.push(FieldError::forbidden(
            "spec.ephemeralContainers",
            "cannot be set on create",
        ));
    }
    if spec["nodeName"].as_str().is_some_and(|n| !n.is_empty())
        && spec["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
    {
        out.push(FieldError::forbidden(
            "spec.nodeName",
            "cannot be set until all schedulingGates have been cleared",
        ));
    }
    out
}

/// The containers of `spec[list]`: names (required, DNS labels, unique through `names`),
/// images (required) and policies.
fn containers(
    spec: &Value,
    list: &str,
    path: &str,
    names: &mut HashSet<String>,
    out: &mut Vec<FieldError>,
) {
    for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
        let at = format!("{path}.{list}[{i}]");
        match c["name"].as_str().filter(|n| !n.is_empty()) {
            None => out.push(FieldError::required(&format!("{at}.name"), "")),
            Some(name) => {
                if let Err(msg) = dns_label(name) {
                    out.push(FieldError::invalid_str(&format!("{at}.name"), name, msg));
                }
                if !names.insert(name.to_owned()) {
                    out.push(FieldError::duplicate(&format!("{at}.name"), name));
                }
            }
        }
        if c["image"].as_str().is_none_or(str::is_empty) {
            out.push(FieldError::required(&format!("{at}.image"), ""));
        }
        out.extend(ports_env::container_ports(
            &c["ports"],
            &format!("{at}.ports"),
        ));
        out.extend(ports_env::env(&c["env"], &format!("{at}.env")));
        enumerated(c, "imagePullPolicy", &at, PULL_POLICIES, out);
        out.extend(resources::requirements(
            &c["resources"],
            &format!("{at}.resources"),
        ));
        enumerated(c, "terminationMessagePolicy", &at, MESSAGE_POLICIES, out);
    }
}

/// `obj[field]`, when set, must be one of `supported` (upstream's `NotSupported`); an unset
/// one is defaulted before validation, so it is `Required` only when present and empty.
fn enumerated(obj: &Value, field: &str, path: &str, supported: &[&str], out: &mut Vec<FieldError>) {
    let at = format!("{path}.{field}");
    match obj.get(field) {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => out.push(FieldError::required(&at, "")),
        Some(Value::String(s)) if supported.contains(&s.as_str()) => {}
        Some(v) => {
            let supported: Vec<String> = supported.iter().map(|s| (*s).to_owned()).collect();
            out.push(FieldError::not_supported(&at, v, &supported));
        }
    }
}

/// Upstream's `IsDNS1123Label`, with its message.
pub fn dns_label(v: &str) -> Result<(), String> {
    let bytes = v.as_bytes();
    if bytes.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-');
    if ok {
        Ok(())
    } else {
        Err(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
             '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
             '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .into(),
        )
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
    fn containers_are_required_and_named_uniquely() {
        assert_eq!(
            messages(&pod_spec(&json!({"containers": []}), "spec")),
            ["spec.containers: Required value"]
        );
        let spec = json!({"initContainers": [{"name": "a", "image": "i"}],
            "containers": [{"name": "a", "image": "i"}, {"name": "B_1"}, {"image": "i"}],
            "restartPolicy": "Sometimes"});
        let got = messages(&pod_spec(&spec, "spec"));
        assert_eq!(got[0], "spec.containers[0].name: Duplicate value: \"a\"");
        assert!(got[1].starts_with(
            "spec.containers[1].name: Invalid value: \"B_1\": a lowercase RFC 1123 label"
        ));
        assert_eq!(got[2], "spec.containers[1].image: Required value");
        assert_eq!(got[3], "spec.containers[2].name: Required value");
        assert_eq!(
            got[4],
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        );
        assert_eq!(got.len(), 5);
    }

    #[test]
    fn a_pod_create_refuses_ephemeral_containers_and_a_gated_node() {
        let pod = json!({"spec": {"containers": [{"name": "c", "image": "i"}],
            "ephemeralContainers": [{"name": "e"}], "nodeName": "n",
            "schedulingGates": [{"name": "g"}]}});
        assert_eq!(
            messages(&pod_create(&pod)),
            [
                "spec.ephemeralContainers: Forbidden: cannot be set on create",
                "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"
            ]
        );
    }
}
