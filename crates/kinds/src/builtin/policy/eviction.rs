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

use serde_json::{Map, Value, json};

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

/// One requirement of a `metav1.LabelSelector`, checked as it is read: `Err(())` when it
/// is malformed (upstream's `LabelSelectorAsSelector` failing), else whether `label` (the
/// pod's value of its key) satisfies it. Allocates nothing; linear in its values.
fn requirement_holds(
    key: &str,
    op: &str,
    values: Option<&Value>,
    label: Option<&str>,
) -> Result<bool, ()> {
    use listwatch_api::labels::{validate_key, validate_value};
    validate_key(key).map_err(|_| ())?;
    let values: &[Value] = match values {
        None | Some(Value::Null) => &[],
        Some(Value::Array(vs)) => vs,
        Some(_) => return Err(()),
    };
    let mut found = false;
    for v in values {
        let v = v.as_str().ok_or(())?;
        validate_value(v).map_err(|_| ())?;
        found |= label == Some(v);
    }
    match op {
        "In" if !values.is_empty() => Ok(found),
        "NotIn" if !values.is_empty() => Ok(!found),
        "Exists" if values.is_empty() => Ok(label.is_some()),
        "DoesNotExist" if values.is_empty() => Ok(label.is_none()),
        _ => Err(()),
    }
}

/// Whether the `metav1.LabelSelector` value `sel` matches `labels` (a pod's
/// `metadata.labels`). A missing, empty or malformed selector matches nothing (upstream:
/// "it should match nothing, not everything"). One pass over the selector, nothing built:
/// since a malformed selector and a failed requirement both mean "no", the first
/// requirement that is malformed or fails ends it, and a budget costs at most one look at
/// each of its requirements and values (a selector of tens of thousands of expressions,
/// as a budget may hold, is read once per eviction, never copied into a set).
fn selector_matches(sel: &Value, labels: Option<&Map<String, Value>>) -> bool {
    let Some(sel) = sel.as_object() else {
        return false;
    };
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let mut any = false;
    if let Some(ml) = sel.get("matchLabels").filter(|x| !x.is_null()) {
        let Some(ml) = ml.as_object() else {
            return false;
        };
        for (k, v) in ml {
            let Some(v) = v.as_str() else {
                return false;
            };
            let ok = listwatch_api::labels::validate_key(k).is_ok()
                && listwatch_api::labels::validate_value(v).is_ok()
                && label(k) == Some(v);
            if !ok {
                return false;
            }
            any = true;
        }
    }
    if let Some(me) = sel.get("matchExpressions").filter(|x| !x.is_null()) {
        let Some(me) = me.as_array() else {
            return false;
        };
        for e in me {
            let (Some(key), Some(op)) = (
                e.get("key").and_then(Value::as_str),
                e.get("operator").and_then(Value::as_str),
            ) else {
                return false;
            };
            if requirement_holds(key, op, e.get("values"), label(key)) != Ok(true) {
                return false;
            }
            any = true;
        }
    }
    any
}

/// Whether `pdb` covers `pod` (same namespace, a non-empty selector matching its labels).
pub fn covers(pdb: &Value, pod: &Value) -> bool {
    fn ns(o: &Value) -> &str {
        o.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    if ns(pdb) != ns(pod) {
        return false;
    }
    let Some(sel) = pdb.pointer("/spec/selector") else {
        return false;
    };
    selector_matches(
        sel,
        pod.pointer("/metadata/labels").and_then(Value::as_object),
    )
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

    /// The one-pass matcher against the selector built in full (`LabelSelector` from
    /// `Requirement`s, as before): the same answer for matching, failing and malformed
    /// requirements wherever they stand, so stopping at the first "no" changes nothing.
    #[test]
    fn the_one_pass_matcher_answers_as_the_built_selector() {
        use listwatch_api::labels::{LabelSelector, Operator, Requirement};
        fn built(sel: &Value, labels: &std::collections::BTreeMap<String, String>) -> bool {
            let build = || -> Option<LabelSelector> {
                let sel = sel.as_object()?;
                let mut reqs = Vec::new();
                if let Some(ml) = sel.get("matchLabels").filter(|x| !x.is_null()) {
                    for (k, v) in ml.as_object()? {
                        reqs.push(
                            Requirement::new(k, Operator::Equals, [v.as_str()?.to_owned()]).ok()?,
                        );
                    }
                }
                if let Some(me) = sel.get("matchExpressions").filter(|x| !x.is_null()) {
                    for e in me.as_array()? {
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
                        reqs.push(Requirement::new(e.get("key")?.as_str()?, op, values).ok()?);
                    }
                }
                let s = LabelSelector::from_requirements(reqs);
                (!s.is_empty()).then_some(s)
            };
            build().is_some_and(|s| s.matches(labels))
        }
        let pod = json!({"metadata": {"namespace": "n",
            "labels": {"app": "web", "tier": "front", "n": 1}}});
        let labels: std::collections::BTreeMap<String, String> =
            [("app", "web"), ("tier", "front")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        let exprs = [
            json!({"key": "app", "operator": "In", "values": ["db", "web"]}),
            json!({"key": "app", "operator": "In", "values": ["db"]}),
            json!({"key": "app", "operator": "In", "values": []}),
            json!({"key": "app", "operator": "NotIn", "values": ["db"]}),
            json!({"key": "app", "operator": "NotIn", "values": ["web"]}),
            json!({"key": "gone", "operator": "NotIn", "values": ["x"]}),
            json!({"key": "tier", "operator": "Exists"}),
            json!({"key": "tier", "operator": "Exists", "values": ["x"]}),
            json!({"key": "gone", "operator": "DoesNotExist"}),
            json!({"key": "app", "operator": "DoesNotExist"}),
            json!({"key": "app", "operator": "Gt", "values": ["1"]}),
            json!({"key": "bad key!", "operator": "Exists"}),
            json!({"key": "app", "operator": "In", "values": ["web", "bad value!"]}),
            json!({"key": "app", "operator": "In", "values": ["web", 3]}),
            json!({"key": "n", "operator": "Exists"}),
            json!({"operator": "Exists"}),
        ];
        let mut cases = vec![
            json!(null),
            json!({}),
            json!({"matchLabels": {}}),
            json!({"matchLabels": {"app": "web"}}),
            json!({"matchLabels": {"app": "db"}}),
            json!({"matchLabels": {"app": 1}}),
            json!({"matchLabels": {"app": "web", "bad key!": "x"}}),
            json!({"matchExpressions": "no"}),
        ];
        // Every expression alone, and every pair in both orders (a malformed one after a
        // failing one and the reverse), with and without matchLabels.
        for a in &exprs {
            cases.push(json!({"matchExpressions": [a]}));
            for b in &exprs {
                cases.push(json!({"matchExpressions": [a, b]}));
                cases.push(json!({"matchLabels": {"tier": "front"}, "matchExpressions": [a, b]}));
            }
        }
        for sel in &cases {
            let budget = pdb(sel.clone(), json!({}));
            assert_eq!(covers(&budget, &pod), built(sel, &labels), "{sel}");
        }
    }

    /// Issue 28 (red team): budgets of tens of thousands of expressions that all hold are
    /// still judged right (the matcher reads each once; before, each was built into a set).
    #[test]
    fn a_budget_of_thirty_thousand_expressions_is_judged() {
        let pod = json!({"metadata": {"namespace": "n", "labels": {"app": "web"}}});
        let many: Vec<Value> = (0..30_000)
            .map(|i| json!({"key": format!("k{i}"), "operator": "DoesNotExist"}))
            .collect();
        assert!(covers(
            &pdb(json!({"matchExpressions": many.clone()}), json!({})),
            &pod
        ));
        let mut last_bad = many;
        last_bad.push(json!({"key": "app", "operator": "NotIn", "values": ["web"]}));
        assert!(!covers(
            &pdb(json!({"matchExpressions": last_bad}), json!({})),
            &pod
        ));
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
