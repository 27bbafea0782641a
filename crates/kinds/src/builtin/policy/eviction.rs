//! `policy/v1` Eviction: not stored, but the write that deletes a pod when its
//! PodDisruptionBudget allows it (upstream's `EvictionREST`,
//! pkg/registry/core/pod/storage/eviction.go), served at `POST
//! /api/v1/namespaces/{ns}/pods/{name}/eviction`. This module holds what is pure: the
//! body's checks ([`check_body`]), which budgets cover a pod ([`covers`]), when a budget
//! does not apply ([`can_ignore_budgets`], [`unhealthy_may_go`]) and the decrement of a
//! budget's status ([`decrement`]); the server reads the pod and the budgets and writes.
//!
//! Invariants: a budget with a missing, empty or unparsable selector covers no pod (as
//! upstream: "it should match nothing, not everything"); [`decrement`] changes a budget
//! only when it allows a disruption (`status.disruptionsAllowed > 0`, its status observed
//! for its generation, fewer than [`MAX_DISRUPTED_PODS`] pods awaiting confirmation), and
//! then lowers `disruptionsAllowed` by exactly one and records the pod in
//! `status.disruptedPods`.

use listwatch_api::labels::{LabelSelector, Operator, Requirement};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Upstream's `MaxDisruptedPodSize`: more pods awaiting the disruption controller's
/// confirmation than this and a budget refuses evictions.
pub const MAX_DISRUPTED_PODS: usize = 2000;

/// The `Eviction` versions a body may name (upstream still decodes `policy/v1beta1`).
pub const API_VERSIONS: [&str; 2] = ["policy/v1", "policy/v1beta1"];

/// Why a body is refused (400 upstream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadBody {
    /// The body is not an object.
    #[error("the body of an Eviction must be a JSON object")]
    NotObject,
    /// `apiVersion`/`kind` are not an Eviction's.
    #[error("expected an Eviction of policy/v1 or policy/v1beta1, got {0}")]
    WrongKind(String),
    /// `metadata.name` is not the pod's of the path.
    #[error("name in URL does not match name in Eviction object")]
    NameMismatch,
    /// The namespace of the body is not the path's.
    #[error(
        "the namespace of the provided object does not match the namespace sent on the request"
    )]
    NamespaceMismatch,
}

/// Checks the body against the path's namespace and pod name.
pub fn check_body(v: &Value, ns: &str, pod: &str) -> Result<(), BadBody> {
    let m = v.as_object().ok_or(BadBody::NotObject)?;
    let av = m.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
    if (!av.is_empty() && !API_VERSIONS.contains(&av)) || (!kind.is_empty() && kind != "Eviction") {
        let shown: String = format!("{av} {kind}").chars().take(128).collect();
        return Err(BadBody::WrongKind(shown));
    }
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name != pod {
        return Err(BadBody::NameMismatch);
    }
    let body_ns = v
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !body_ns.is_empty() && body_ns != ns {
        return Err(BadBody::NamespaceMismatch);
    }
    Ok(())
}

/// The `deleteOptions` of the body, re-encoded as a `DeleteOptions` body (empty when
/// absent).
pub fn delete_options(v: &Value) -> Vec<u8> {
    match v.get("deleteOptions") {
        Some(d) if !d.is_null() => serde_json::to_vec(d).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Upstream's `canIgnorePDB`: a pod that has ended, has not started (`Pending`) or is
/// being deleted has already disrupted, or never served; its budget does not apply.
pub fn can_ignore_budgets(pod: &Value) -> bool {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    matches!(phase, "Succeeded" | "Failed" | "Pending")
        || pod
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
}

/// Upstream's `IsPodReady`: the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Whether a pod that is not ready may be deleted without touching `pdb`: its
/// `unhealthyPodEvictionPolicy` is `AlwaysAllow`, or (the default `IfHealthyBudget`) the
/// budget has as many healthy pods as it needs and needs some.
pub fn unhealthy_may_go(pdb: &Value) -> bool {
    let policy = pdb
        .pointer("/spec/unhealthyPodEvictionPolicy")
        .and_then(Value::as_str);
    if policy == Some("AlwaysAllow") {
        return true;
    }
    let status = |f: &str| {
        pdb.pointer(&format!("/status/{f}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let desired = status("desiredHealthy");
    status("currentHealthy") >= desired && desired > 0
}

/// A `metav1.LabelSelector` value as a selector; `None` when it is missing, empty or
/// malformed (upstream's `LabelSelectorAsSelector` failing, or `Empty()`).
fn selector(sel: &Value) -> Option<LabelSelector> {
    let sel = sel.as_object()?;
    let mut reqs = Vec::new();
    if let Some(ml) = sel.get("matchLabels").filter(|x| !x.is_null()) {
        for (k, v) in ml.as_object()? {
            reqs.push(Requirement::new(k, Operator::Equals, [v.as_str()?.to_owned()]).ok()?);
        }
    }
    if let Some(me) = sel.get("matchExpressions").filter(|x| !x.is_null()) {
        for e in me.as_array()? {
            let key = e.get("key")?.as_str()?;
            let op = match e.get("operator")?.as_str()? {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                _ => return None,
            };
            let values = match e.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(vs) => vs
                    .as_array()?
                    .iter()
                    .map(|x| x.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()?,
            };
            reqs.push(Requirement::new(key, op, values).ok()?);
        }
    }
    let s = LabelSelector::from_requirements(reqs);
    (!s.is_empty()).then_some(s)
}

/// Whether `pdb` covers `pod` (same namespace, a non-empty selector matching its labels).
pub fn covers(pdb: &Value, pod: &Value) -> bool {
    let ns = |o: &Value| {
        o.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    if ns(pdb) != ns(pod) {
        return false;
    }
    let Some(sel) = pdb.pointer("/spec/selector").and_then(selector) else {
        return false;
    };
    let labels: BTreeMap<String, String> = pod
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    sel.matches(&labels)
}

/// Why a budget refuses an eviction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// 429 (Retry-After 10): the budget's status is older than its spec.
    #[error("The disruption budget {0} is still being processed by the server.")]
    Processing(String),
    /// 429: no disruption allowed now.
    #[error(
        "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
    )]
    Budget {
        /// The budget's name.
        name: String,
        /// `status.desiredHealthy`.
        desired: i64,
        /// `status.currentHealthy`.
        current: i64,
    },
    /// 403: `status.disruptionsAllowed` is negative.
    #[error("pdb disruptions allowed is negative")]
    Negative,
    /// 403: too many evictions await the disruption controller.
    #[error("DisruptedPods map too big - too many evictions not confirmed by PDB controller")]
    TooManyDisrupted,
}

/// The message of the 429 a [`Refused::Processing`] or [`Refused::Budget`] is sent with.
pub const TOO_MANY_MESSAGE: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";

/// The cause type of those 429s (upstream's `policyv1.DisruptionBudgetCause`).
pub const CAUSE: &str = "DisruptionBudget";

/// Upstream's `checkAndDecrement`: refuses unless the budget allows a disruption, else
/// lowers `status.disruptionsAllowed` by one (setting the `DisruptionAllowed` condition to
/// `False`/`InsufficientPods` when it reaches 0) and, unless `dry_run`, records `pod` in
/// `status.disruptedPods` at `now` (RFC 3339).
pub fn decrement(pdb: &mut Value, pod: &str, now: &str, dry_run: bool) -> Result<(), Refused> {
    let name = pdb
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let int = |p: &str| pdb.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    if int("/status/observedGeneration") < int("/metadata/generation") {
        return Err(Refused::Processing(name));
    }
    let allowed = int("/status/disruptionsAllowed");
    if allowed < 0 {
        return Err(Refused::Negative);
    }
    let disrupted = pdb
        .pointer("/status/disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, Map::len);
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(Refused::TooManyDisrupted);
    }
    if allowed == 0 {
        return Err(Refused::Budget {
            name,
            desired: int("/status/desiredHealthy"),
            current: int("/status/currentHealthy"),
        });
    }
    let observed = int("/status/observedGeneration");
    if !pdb.get("status").is_some_and(Value::is_object) {
        pdb["status"] = json!({});
    }
    let status = &mut pdb["status"];
    status["disruptionsAllowed"] = json!(allowed - 1);
    if allowed - 1 == 0 {
        set_condition(
            status,
            json!({"type": "DisruptionAllowed", "status": "False",
                "reason": "InsufficientPods", "message": "",
                "observedGeneration": observed, "lastTransitionTime": now}),
        );
    }
    if dry_run {
        return Ok(());
    }
    if !status.get("disruptedPods").is_some_and(Value::is_object) {
        status["disruptedPods"] = json!({});
    }
    status["disruptedPods"][pod] = json!(now);
    Ok(())
}

/// `apimeta.SetStatusCondition`: replaces the condition of the same type, keeping its
/// `lastTransitionTime` when the status does not change.
fn set_condition(status: &mut Value, cond: Value) {
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let Some(cs) = status["conditions"].as_array_mut() else {
        return;
    };
    match cs.iter_mut().find(|c| c.get("type") == cond.get("type")) {
        Some(old) => {
            let keep = old.get("status") == cond.get("status");
            let t = old.get("lastTransitionTime").cloned();
            *old = cond;
            if let (true, Some(t)) = (keep, t) {
                old["lastTransitionTime"] = t;
            }
        }
        None => cs.push(cond),
    }
}

/// Adds (or refreshes) the pod's `DisruptionTarget` condition, as upstream's
/// `addConditionAndDeletePod` does before deleting an evicted pod.
pub fn mark_disruption_target(pod: &mut Value, now: &str) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let cond = json!({"type": "DisruptionTarget", "status": "True",
        "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting",
        "lastProbeTime": null, "lastTransitionTime": now});
    set_condition(&mut pod["status"], cond);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pdb(sel: Value, status: Value) -> Value {
        json!({"metadata": {"name": "b", "namespace": "n", "generation": 1},
            "spec": {"selector": sel}, "status": status})
    }

    #[test]
    fn selectors_cover_as_upstream() {
        let pod = json!({"metadata": {"namespace": "n", "labels": {"app": "web"}}});
        assert!(covers(
            &pdb(json!({"matchLabels": {"app": "web"}}), json!({})),
            &pod
        ));
        assert!(covers(
            &pdb(
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}),
                json!({})
            ),
            &pod
        ));
        assert!(
            !covers(&pdb(json!({}), json!({})), &pod),
            "empty covers nothing"
        );
        assert!(!covers(&pdb(Value::Null, json!({})), &pod));
        assert!(!covers(
            &pdb(json!({"matchLabels": {"app": "db"}}), json!({})),
            &pod
        ));
        let mut other = pdb(json!({"matchLabels": {"app": "web"}}), json!({}));
        other["metadata"]["namespace"] = json!("m");
        assert!(!covers(&other, &pod));
    }

    #[test]
    fn decrement_refuses_and_counts_as_upstream() {
        let status = |allowed: i64, observed: i64| {
            json!({"disruptionsAllowed": allowed, "observedGeneration": observed,
                "desiredHealthy": 2, "currentHealthy": 2})
        };
        let mut p = pdb(json!({}), status(0, 1));
        assert_eq!(
            decrement(&mut p, "x", "t", false).unwrap_err().to_string(),
            "The disruption budget b needs 2 healthy pods and has 2 currently"
        );
        let mut p = pdb(json!({}), status(1, 0));
        assert!(matches!(
            decrement(&mut p, "x", "t", false),
            Err(Refused::Processing(_))
        ));
        let mut p = pdb(json!({}), status(-1, 1));
        assert_eq!(decrement(&mut p, "x", "t", false), Err(Refused::Negative));
        let mut p = pdb(json!({}), status(2, 1));
        decrement(&mut p, "x", "t", false).unwrap();
        assert_eq!(p["status"]["disruptionsAllowed"], 1);
        assert_eq!(p["status"]["disruptedPods"]["x"], "t");
        let mut p = pdb(json!({}), status(1, 1));
        decrement(&mut p, "x", "t", true).unwrap();
        assert_eq!(p["status"]["disruptionsAllowed"], 0);
        assert_eq!(p["status"]["conditions"][0]["reason"], "InsufficientPods");
        assert!(p["status"].get("disruptedPods").is_none(), "dry run");
    }

    #[test]
    fn bodies_and_pods() {
        let ok = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}});
        assert_eq!(check_body(&ok, "n", "p"), Ok(()));
        assert_eq!(check_body(&ok, "n", "q"), Err(BadBody::NameMismatch));
        let beta =
            json!({"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "p"}});
        assert_eq!(check_body(&beta, "n", "p"), Ok(()));
        let wrong = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert!(matches!(
            check_body(&wrong, "n", "p"),
            Err(BadBody::WrongKind(_))
        ));
        assert!(can_ignore_budgets(&json!({"status": {"phase": "Failed"}})));
        assert!(!can_ignore_budgets(
            &json!({"status": {"phase": "Running"}})
        ));
        assert!(unhealthy_may_go(
            &json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}})
        ));
        assert!(!unhealthy_may_go(&json!({"status": {"desiredHealthy": 0}})));
    }
}
