//! Pods' `/ephemeralcontainers` subresource: upstream's `podEphemeralContainersStrategy`
//! (pkg/registry/core/pod/strategy.go) and `ValidatePodEphemeralContainersUpdate`
//! (pkg/apis/core/validation).
//!
//! A write through it changes `spec.ephemeralContainers` and nothing else: the object stored
//! is the stored pod with the request's list (and the request's name, namespace, uid and
//! resourceVersion, which the generic update checks against the stored ones). Ephemeral
//! containers may be added, never changed or removed; each new one needs a DNS-label name
//! unique among the pod's containers, an image, valid environment variables (upstream's
//! `ValidateEnv`), and none of the fields upstream forbids for them. Running them is a
//! kubelet's business: this server only stores them.
//!
//! Invariants: the functions here look only at the two objects given (cost linear in their
//! size; names are compared through one set); they never panic on any JSON.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::FieldError;
use crate::builtin::podspec::validate::dns_label;

/// Container fields an ephemeral container may not set (upstream's
/// `validateEphemeralContainers`: no ports, probes, lifecycle, resources or restart policy).
const FORBIDDEN: [&str; 8] = [
    "lifecycle",
    "livenessProbe",
    "ports",
    "readinessProbe",
    "resizePolicy",
    "resources",
    "restartPolicy",
    "startupProbe",
];

/// The object an `/ephemeralcontainers` update of the stored pod `old` to the request's `new`
/// stores (upstream's `dropNonEphemeralContainerUpdates`), or the causes of its 422.
pub fn update(new: &Value, old: &Value) -> Result<Value, Vec<FieldError>> {
    let mut out = old.clone();
    if let (Some(meta), Some(new_meta)) = (
        out.get_mut("metadata").and_then(Value::as_object_mut),
        new.get("metadata").and_then(Value::as_object),
    ) {
        for k in ["name", "namespace", "uid", "resourceVersion"] {
            match new_meta.get(k) {
                Some(v) => meta.insert(k.into(), v.clone()),
                None => meta.remove(k),
            };
        }
    }
    let wanted = new
        .get("spec")
        .and_then(|s| s.get("ephemeralContainers"))
        .filter(|v| !v.is_null())
        .cloned();
    if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
        match wanted {
            Some(list) => spec.insert("ephemeralContainers".into(), list),
            None => spec.remove("ephemeralContainers"),
        };
    }
    let errs = validate(&out, old);
    if errs.is_empty() { Ok(out) } else { Err(errs) }
}

/// Upstream's `ValidatePodEphemeralContainersUpdate` of `new` (already reduced to an
/// ephemeral-containers change) against the stored `old`.
fn validate(new: &Value, old: &Value) -> Vec<FieldError> {
    const PATH: &str = "spec.ephemeralContainers";
    let mut errs = Vec::new();
    let list = |pod: &Value| -> Option<Vec<Value>> {
        match pod.get("spec").and_then(|s| s.get("ephemeralContainers")) {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(Value::Array(a)) => Some(a.clone()),
            Some(_) => None,
        }
    };
    let Some(new_list) = list(new) else {
        errs.push(FieldError::invalid_str(PATH, "", "must be a list"));
        return errs;
    };
    let old_list = list(old).unwrap_or_default();
    let name_of = |c: &Value| c.get("name").and_then(Value::as_str).map(str::to_owned);
    // Existing ones may be neither removed nor changed.
    for o in &old_list {
        let Some(name) = name_of(o) else { continue };
        match new_list
            .iter()
            .find(|n| name_of(n).as_deref() == Some(&name))
        {
            None => errs.push(FieldError::forbidden(
                PATH,
                format!("existing ephemeral containers {name:?} may not be removed"),
            )),
            Some(n) if n != o => errs.push(FieldError::forbidden(
                &format!("{PATH}[{name}]"),
                format!("existing ephemeral containers {name:?} may not be changed"),
            )),
            Some(_) => {}
        }
    }
    // Names are unique across every kind of container of the pod.
    let spec = new.get("spec").cloned().unwrap_or(Value::Null);
    let mut taken: HashSet<String> = HashSet::new();
    let mut regular: HashSet<String> = HashSet::new();
    for key in ["containers", "initContainers"] {
        for c in spec
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = name_of(c) {
                taken.insert(n.clone());
                regular.insert(n);
            }
        }
    }
    for (i, c) in new_list.iter().enumerate() {
        let at = format!("{PATH}[{i}]");
        let Some(c) = c.as_object() else {
            errs.push(FieldError::invalid_str(&at, "", "must be an object"));
            continue;
        };
        check_container(c, &at, &mut taken, &regular, &mut errs);
    }
    errs
}

/// One ephemeral container's own rules (name, image, forbidden fields, target).
fn check_container(
    c: &Map<String, Value>,
    at: &str,
    taken: &mut HashSet<String>,
    regular: &HashSet<String>,
    errs: &mut Vec<FieldError>,
) {
    match c.get("name").and_then(Value::as_str) {
        None | Some("") => errs.push(FieldError::required(&format!("{at}.name"), "")),
        Some(name) => {
            if let Err(detail) = dns_label(name) {
                errs.push(FieldError::invalid_str(&format!("{at}.name"), name, detail));
            } else if !taken.insert(name.to_owned()) {
                errs.push(FieldError::duplicate(&format!("{at}.name"), name));
            }
        }
    }
    if c.get("image")
        .and_then(Value::as_str)
        .is_none_or(|i| i.trim().is_empty())
    {
        errs.push(FieldError::required(&format!("{at}.image"), ""));
    }
    // Set means not the zero value, as upstream's `validateFieldAllowList` compares (kubectl
    // debug sends `resources: {}`).
    let set = |v: &Value| !(v.is_null() || v.as_object().is_some_and(Map::is_empty));
    for field in FORBIDDEN {
        if c.get(field).is_some_and(set) {
            errs.push(FieldError::forbidden(
                &format!("{at}.{field}"),
                "cannot be set for an Ephemeral Container",
            ));
        }
    }
    errs.extend(crate::builtin::podspec::ports_env::env(
        c.get("env").unwrap_or(&Value::Null),
        &format!("{at}.env"),
    ));
    if let Some(target) = c.get("targetContainerName").and_then(Value::as_str)
        && !target.is_empty()
        && !regular.contains(target)
    {
        errs.push(FieldError::new(
            crate::field::ErrorType::Invalid,
            &format!("{at}.targetContainerName"),
            Some(crate::field::go_quote(target)),
            "must be the name of a container in the pod",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(eph: Value) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "d", "uid": "u", "resourceVersion": "5",
                         "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i"}], "ephemeralContainers": eph},
            "status": {"phase": "Pending"},
        })
    }

    #[test]
    fn only_the_ephemeral_containers_change() {
        let old = pod(Value::Null);
        let mut new = pod(json!([{"name": "e", "image": "busybox"}]));
        new["metadata"]["labels"] = json!({"x": "y"});
        new["spec"]["containers"] = json!([]);
        new["status"] = json!({});
        let out = update(&new, &old).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(out["spec"]["containers"], old["spec"]["containers"]);
        assert_eq!(out["status"], old["status"]);
        assert_eq!(out["spec"]["ephemeralContainers"][0]["name"], "e");
    }

    #[test]
    fn existing_ones_stay_and_new_ones_follow_the_rules() {
        let old = pod(json!([{"name": "e", "image": "busybox"}]));
        let errs = update(&pod(json!([])), &old).unwrap_err();
        assert_eq!(errs[0].field, "spec.ephemeralContainers");
        assert!(errs[0].detail.contains("may not be removed"), "{errs:?}");
        let errs = update(&pod(json!([{"name": "e", "image": "other"}])), &old).unwrap_err();
        assert_eq!(errs[0].field, "spec.ephemeralContainers[e]");
        let errs = update(
            &pod(json!([
                {"name": "e", "image": "busybox"},
                {"name": "c", "image": "x", "ports": [], "targetContainerName": "nope",
                 "resources": {}},
                {"name": "Bad_Name"},
            ])),
            &old,
        )
        .unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.ephemeralContainers[1].name",
                "spec.ephemeralContainers[1].ports",
                "spec.ephemeralContainers[1].targetContainerName",
                "spec.ephemeralContainers[2].name",
                "spec.ephemeralContainers[2].image",
            ]
        );
    }

    #[test]
    fn any_json_is_answered_without_panicking() {
        for new in [
            json!(null),
            json!([]),
            json!({"spec": {"ephemeralContainers": 3}}),
        ] {
            let _ = update(&new, &pod(Value::Null));
            let _ = update(&pod(json!([1, "x", null])), &new);
        }
    }
}
