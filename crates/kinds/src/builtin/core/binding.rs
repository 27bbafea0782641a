//! `v1` Binding: not stored, but the write that assigns a pod to a node (upstream's
//! `BindingREST` and `LegacyBindingREST`, pkg/registry/core/pod/storage/storage.go), served
//! at `POST /api/v1/namespaces/{ns}/pods/{name}/binding` and `POST
//! /api/v1/namespaces/{ns}/bindings`. This module holds what is pure: the body's rules
//! ([`check`]) and the change to the pod ([`assign`], upstream's `setPodNodeAndMetadata`
//! under `assignPod`'s checks); the server reads and writes the pod.
//!
//! Invariants: a pod that is being deleted, already has a `spec.nodeName`, or does not
//! match the binding's `metadata.uid` or `metadata.resourceVersion` (upstream's storage
//! preconditions in `setPodNodeAndMetadata`) is never changed ([`Refused`]); the change sets `spec.nodeName`, merges the binding's
//! annotations and sets the `PodScheduled` condition to `True`, and nothing else.

use serde_json::{Map, Value, json};

use crate::FieldError;

/// Why a pod cannot be bound (a 409 Conflict upstream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The binding's `metadata.uid` is not the pod's.
    #[error("Precondition failed: UID in precondition: {want}, UID in object meta: {got}")]
    Uid {
        /// The binding's (echoed, bounded).
        want: String,
        /// The pod's.
        got: String,
    },
    /// The binding's `metadata.resourceVersion` is not the pod's.
    #[error(
        "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {got}"
    )]
    ResourceVersion {
        /// The binding's (echoed, bounded).
        want: String,
        /// The pod's.
        got: String,
    },
    /// The pod has a deletion timestamp.
    #[error("pod {0} is being deleted, cannot be assigned to a host")]
    Deleting(String),
    /// The pod is bound already.
    #[error("pod {pod} is already assigned to node {node:?}")]
    Assigned {
        /// The pod's name.
        pod: String,
        /// Its node.
        node: String,
    },
}

/// A binding's rules (upstream's `ValidatePodBinding`): `target.kind` empty or `Node`,
/// `target.name` set. The node name to assign, or the causes of a 422.
pub fn check(binding: &Value) -> Result<String, Vec<FieldError>> {
    let target = binding.get("target").unwrap_or(&Value::Null);
    let kind = target.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = target.get("name").and_then(Value::as_str).unwrap_or("");
    let mut errs = Vec::new();
    if !kind.is_empty() && kind != "Node" {
        errs.push(FieldError::not_supported_str(
            "target.kind",
            kind,
            &["Node", "<empty>"],
        ));
    }
    if name.is_empty() {
        errs.push(FieldError::required("target.name", ""));
    }
    if errs.is_empty() {
        Ok(name.to_owned())
    } else {
        Err(errs)
    }
}

/// Why a binding's metadata would not decode upstream (a 400 there): a `uid`,
/// `resourceVersion` or annotation value that is neither a string nor null.
pub fn malformed(binding: &Value) -> Option<String> {
    let meta = binding.get("metadata")?;
    for field in ["uid", "resourceVersion"] {
        if meta
            .get(field)
            .is_some_and(|v| !v.is_null() && !v.is_string())
        {
            return Some(format!("metadata.{field} must be a string"));
        }
    }
    if meta
        .get("annotations")
        .and_then(Value::as_object)
        .is_some_and(|m| m.values().any(|v| !v.is_string()))
    {
        return Some("metadata.annotations values must be strings".to_owned());
    }
    None
}

/// The binding's annotations (string values only).
pub fn annotations(binding: &Value) -> Map<String, Value> {
    binding
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.is_string())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The binding's preconditions on the pod (upstream's `assignPod`): its non-empty
/// `metadata.uid` and `metadata.resourceVersion` must be the pod's, compared as strings.
pub fn preconditions(binding: &Value, pod: &Value) -> Result<(), Refused> {
    let field = |v: &Value, f: &str| {
        v.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let echo = |s: &str| listwatch_api::echo::echo(s).into_owned();
    let uid = field(binding, "uid");
    if !uid.is_empty() {
        let got = field(pod, "uid");
        if got != uid {
            return Err(Refused::Uid {
                want: echo(&uid),
                got,
            });
        }
    }
    let rv = field(binding, "resourceVersion");
    if !rv.is_empty() {
        let got = field(pod, "resourceVersion");
        if got != rv {
            return Err(Refused::ResourceVersion {
                want: echo(&rv),
                got,
            });
        }
    }
    Ok(())
}

/// Binds `pod` (its JSON) to `node`, at `now` (RFC 3339), as upstream's `assignPod`.
pub fn assign(
    pod: &mut Value,
    node: &str,
    annotations: &Map<String, Value>,
    now: &str,
) -> Result<(), Refused> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return Err(Refused::Deleting(name));
    }
    if let Some(bound) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Err(Refused::Assigned {
            pod: name,
            node: bound.to_owned(),
        });
    }
    let Some(obj) = pod.as_object_mut() else {
        return Ok(());
    };
    let spec = obj.entry("spec").or_insert_with(|| json!({}));
    if let Some(s) = spec.as_object_mut() {
        s.insert("nodeName".into(), Value::from(node));
    }
    if !annotations.is_empty() {
        let meta = obj.entry("metadata").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            let ann = m.entry("annotations").or_insert_with(|| json!({}));
            if !ann.is_object() {
                *ann = json!({});
            }
            if let Some(a) = ann.as_object_mut() {
                a.extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
    }
    // upstream's `UpdatePodCondition`: the transition time moves only with the status.
    let status = obj.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let conditions = &mut status["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    if let Some(list) = conditions.as_array_mut() {
        match list
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
        {
            Some(c) if c.get("status").and_then(Value::as_str) == Some("True") => {}
            Some(c) => {
                c["status"] = json!("True");
                c["lastTransitionTime"] = json!(now);
            }
            None => list.push(json!({
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": null,
                "lastTransitionTime": now,
            })),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_bound_once() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let ann = annotations(&json!({"metadata": {"annotations": {"a": "b", "n": 1}}}));
        assign(&mut pod, "node-1", &ann, "2026-12-07T00:00:00Z").unwrap();
        assert_eq!(pod["spec"]["nodeName"], "node-1");
        assert_eq!(pod["metadata"]["annotations"], json!({"a": "b"}));
        assert_eq!(pod["status"]["conditions"][0]["type"], "PodScheduled");
        assert_eq!(pod["status"]["conditions"][0]["status"], "True");
        let again = assign(&mut pod, "node-2", &Map::new(), "t").unwrap_err();
        assert_eq!(
            again.to_string(),
            "pod p is already assigned to node \"node-1\""
        );
        let mut gone = json!({"metadata": {"name": "q", "deletionTimestamp": "t"}});
        assert!(matches!(
            assign(&mut gone, "n", &Map::new(), "t"),
            Err(Refused::Deleting(_))
        ));
    }

    #[test]
    fn a_binding_s_uid_and_resource_version_must_be_the_pod_s() {
        let pod = json!({"metadata": {"name": "p", "uid": "u1", "resourceVersion": "7"}});
        assert!(preconditions(&json!({"metadata": {}}), &pod).is_ok());
        assert!(
            preconditions(
                &json!({"metadata": {"uid": "u1", "resourceVersion": "7"}}),
                &pod
            )
            .is_ok()
        );
        let uid = preconditions(&json!({"metadata": {"uid": "u2"}}), &pod).unwrap_err();
        assert_eq!(
            uid.to_string(),
            "Precondition failed: UID in precondition: u2, UID in object meta: u1"
        );
        let rv = preconditions(&json!({"metadata": {"resourceVersion": "x"}}), &pod).unwrap_err();
        assert!(matches!(rv, Refused::ResourceVersion { .. }), "{rv}");
        assert!(malformed(&json!({"metadata": {"uid": 5}})).is_some());
        assert!(malformed(&json!({"metadata": {"annotations": {"a": 1}}})).is_some());
        assert!(malformed(&json!({"metadata": {"uid": "u", "annotations": {"a": "b"}}})).is_none());
    }

    #[test]
    fn a_binding_needs_a_node_target() {
        assert_eq!(check(&json!({"target": {"name": "n"}})).unwrap(), "n");
        let errs = check(&json!({"target": {"kind": "Pod"}})).unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(
            text[0].starts_with("target.kind: Unsupported value"),
            "{text:?}"
        );
        assert!(
            text[1].starts_with("target.name: Required value"),
            "{text:?}"
        );
        assert!(check(&Value::Null).is_err());
    }
}
