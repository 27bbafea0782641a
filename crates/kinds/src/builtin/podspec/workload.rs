//! The rules upstream's apps and batch validation (pkg/apis/apps/validation,
//! pkg/apis/batch/validation) gives a workload's selector and pod template: the selector is
//! required and not empty, its template's labels must match it (`` `selector` does not match
//! template `labels` ``), the template is a valid pod spec (with `restartPolicy: Always` for
//! the controllers that restart their pods), and on update (`apps/v1`) the selector is
//! immutable (`field is immutable`). Values in errors print as upstream's `%#v` of its Go
//! types (`v1.LabelSelector{MatchLabels:map[string]string{"app":"web"}, ...}`).
//!
//! Invariants: those of the parent module; a selector is evaluated against one label map,
//! once per requirement.

use serde_json::Value;

use super::{go_string_map, semantic_eq};
use crate::FieldError;
use crate::field::go_quote;

/// Upstream's `FieldImmutableErrorMsg`.
pub const IMMUTABLE: &str = "field is immutable";

/// Upstream's detail of a template whose labels the selector does not select.
pub const NOT_MATCHING: &str = "`selector` does not match template `labels`";

/// The spec rules of a workload with a `metav1.LabelSelector` (deployments, replica sets,
/// daemon sets, stateful sets): replicas not negative, the selector required and not empty
/// (`empty selector is invalid for <what>`), the template's labels matching it, the
/// template's pod spec valid with `restartPolicy: Always` (`kind`: the kind named in the
/// active deadline's error, `ReplicaSet` for deployments). `spec` is the workload's spec.
pub fn selector_spec(spec: &Value, what: &str, kind: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    if let Some(n) = spec["replicas"].as_i64().filter(|n| *n < 0) {
        out.push(FieldError::invalid(
            "spec.replicas",
            &Value::from(n),
            "must be greater than or equal to 0",
        ));
    }
    let selector = &spec["selector"];
    let labels = &spec["template"]["metadata"]["labels"];
    if selector.is_null() {
        out.push(FieldError::required("spec.selector", ""));
        // Upstream's nil selector selects nothing, so the template does not match either.
        out.push(not_matching(labels));
    } else {
        let empty = selector["matchLabels"]
            .as_object()
            .is_none_or(|m| m.is_empty())
            && selector["matchExpressions"]
                .as_array()
                .is_none_or(Vec::is_empty);
        if empty {
            out.push(FieldError::new(
                crate::field::ErrorType::Invalid,
                "spec.selector",
                Some(go_label_selector(selector)),
                format!("empty selector is invalid for {what}"),
            ));
        } else {
            match matches(selector, labels) {
                Some(true) => {}
                Some(false) => out.push(not_matching(labels)),
                None => out.push(FieldError::new(
                    crate::field::ErrorType::Invalid,
                    "spec.selector",
                    Some(go_label_selector(selector)),
                    "invalid label selector",
                )),
            }
        }
    }
    out.extend(template(&spec["template"], "spec.template", Some(kind)));
    out
}

/// A pod template's rules at `path` (e.g. `spec.template`): its pod spec's, and for the
/// controllers that restart their pods (`always`: the kind's name), upstream's
/// `ValidatePodTemplateSpecForReplicaSet` rule that the restart policy is `Always` and no
/// active deadline is set.
pub fn template(template: &Value, path: &str, always: Option<&str>) -> Vec<FieldError> {
    let spec = &template["spec"];
    let mut out = super::validate::pod_spec(spec, &format!("{path}.spec"));
    if let Some(kind) = always {
        let policy = spec["restartPolicy"].as_str().unwrap_or("Always");
        if policy != "Always" && super::validate::RESTART_POLICIES.contains(&policy) {
            out.push(FieldError::not_supported_str(
                &format!("{path}.spec.restartPolicy"),
                policy,
                &["Always"],
            ));
        }
        if !spec["activeDeadlineSeconds"].is_null() {
            out.push(FieldError::forbidden(
                &format!("{path}.spec.activeDeadlineSeconds"),
                format!("activeDeadlineSeconds in {kind} is not Supported"),
            ));
        }
    }
    out
}

/// The `apps/v1` update rule of these workloads: `spec.selector` may not change.
pub fn selector_immutable(new: &Value, old: &Value) -> Option<FieldError> {
    immutable(
        &new["spec"]["selector"],
        &old["spec"]["selector"],
        "spec.selector",
        go_label_selector,
    )
}

/// `ValidateImmutableField`: `new` must equal `old` (semantically), else `field is
/// immutable` with `new` printed by `show`.
pub fn immutable(
    new: &Value,
    old: &Value,
    field: &str,
    show: fn(&Value) -> String,
) -> Option<FieldError> {
    (!semantic_eq(new, old)).then(|| {
        FieldError::new(
            crate::field::ErrorType::Invalid,
            field,
            Some(show(new)),
            IMMUTABLE,
        )
    })
}

fn not_matching(labels: &Value) -> FieldError {
    FieldError::new(
        crate::field::ErrorType::Invalid,
        "spec.template.metadata.labels",
        Some(go_string_map(labels)),
        NOT_MATCHING,
    )
}

/// Whether a `metav1.LabelSelector` selects `labels`; `None` for a selector upstream cannot
/// convert (an unknown operator, values where none are allowed or none where some must be).
pub fn matches(selector: &Value, labels: &Value) -> Option<bool> {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let mut ok = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k).is_some() && label(k) == v.as_str());
    for req in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = req["key"].as_str().unwrap_or("");
        let values: Vec<&str> = req["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let found = match (req["operator"].as_str().unwrap_or(""), values.is_empty()) {
            ("In", false) => label(key).is_some_and(|v| values.contains(&v)),
            ("NotIn", false) => label(key).is_none_or(|v| !values.contains(&v)),
            ("Exists", true) => label(key).is_some(),
            ("DoesNotExist", true) => label(key).is_none(),
            _ => return None,
        };
        ok = ok && found;
    }
    Some(ok)
}

/// A label selector as upstream's errors print its Go value (`%#v` of a
/// `v1.LabelSelector`), `null` when unset.
pub fn go_label_selector(sel: &Value) -> String {
    if sel.is_null() {
        return "null".into();
    }
    let exprs = match sel["matchExpressions"].as_array().filter(|e| !e.is_empty()) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|r| {
                    let s = |v: &Value| go_quote(v.as_str().unwrap_or(""));
                    let values = match r["values"].as_array().filter(|v| !v.is_empty()) {
                        None => "[]string(nil)".to_owned(),
                        Some(v) => format!(
                            "[]string{{{}}}",
                            v.iter().map(s).collect::<Vec<_>>().join(", ")
                        ),
                    };
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{values}}}",
                        s(&r["key"]),
                        s(&r["operator"])
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{exprs}}}",
        go_string_map(&sel["matchLabels"])
    )
}

/// Upstream's refusal of a stateful set update that changes more than its mutable fields.
pub const STATEFUL_SET_FORBIDDEN: &str = "updates to statefulset spec for fields other than \
'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', \
'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The spec fields a stateful set update may change (`ValidateStatefulSetUpdate`).
const STATEFUL_SET_MUTABLE: [&str; 7] = [
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

/// A stateful set update's rule: only the fields upstream lists (`STATEFUL_SET_MUTABLE`) change.
pub fn stateful_set_update(new: &Value, old: &Value) -> Option<FieldError> {
    let null = Value::Null;
    let empty = serde_json::Map::new();
    let (n, o) = (
        new["spec"].as_object().unwrap_or(&empty),
        old["spec"].as_object().unwrap_or(&empty),
    );
    let changed = n
        .keys()
        .chain(o.keys())
        .filter(|k| !STATEFUL_SET_MUTABLE.contains(&k.as_str()))
        .any(|k| !semantic_eq(n.get(k).unwrap_or(&null), o.get(k).unwrap_or(&null)));
    changed.then(|| FieldError::forbidden("spec", STATEFUL_SET_FORBIDDEN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(selector: Value, labels: Value) -> Value {
        json!({"selector": selector, "template": {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}})
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_selector_is_required_and_must_match() {
        assert!(
            selector_spec(
                &spec(
                    json!({"matchLabels": {"a": "b"}}),
                    json!({"a": "b", "c": "d"})
                ),
                "deployment",
                "ReplicaSet"
            )
            .is_empty()
        );
        assert_eq!(
            messages(&selector_spec(
                &spec(json!({"matchLabels": {"a": "x"}}), json!({"a": "b"})),
                "deployment",
                "ReplicaSet"
            )),
            [
                "spec.template.metadata.labels: Invalid value: map[string]string{\"a\":\"b\"}: `selector` does not match template `labels`"
            ]
        );
        assert_eq!(
            messages(&selector_spec(
                &spec(Value::Null, json!({"a": "b"})),
                "deployment",
                "ReplicaSet"
            )),
            [
                "spec.selector: Required value",
                "spec.template.metadata.labels: Invalid value: map[string]string{\"a\":\"b\"}: `selector` does not match template `labels`"
            ]
        );
        assert_eq!(
            messages(&selector_spec(
                &spec(json!({}), json!({"a": "b"})),
                "daemonset",
                "DaemonSet"
            )),
            [
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for daemonset"
            ]
        );
    }

    #[test]
    fn expressions_select_as_upstream() {
        let labels = json!({"tier": "web", "env": "prod"});
        let sel = |op: &str, values: Value| json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]});
        assert_eq!(
            matches(&sel("In", json!(["web", "db"])), &labels),
            Some(true)
        );
        assert_eq!(matches(&sel("NotIn", json!(["web"])), &labels), Some(false));
        assert_eq!(matches(&sel("Exists", json!([])), &labels), Some(true));
        assert_eq!(
            matches(&sel("DoesNotExist", Value::Null), &labels),
            Some(false)
        );
        assert_eq!(matches(&sel("Near", json!(["x"])), &labels), None);
        assert_eq!(
            go_label_selector(&sel("In", json!(["web"]))),
            "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"tier\", Operator:\"In\", Values:[]string{\"web\"}}}}"
        );
    }

    #[test]
    fn the_selector_is_immutable() {
        let old = json!({"spec": {"selector": {"matchLabels": {"a": "b"}}}});
        let new = json!({"spec": {"selector": {"matchLabels": {"a": "c"}}}});
        assert_eq!(
            selector_immutable(&new, &old)
                .map(|e| e.to_string())
                .as_deref(),
            Some(
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"a\":\"c\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
            )
        );
        assert!(selector_immutable(&old, &old).is_none());
    }

    #[test]
    fn replica_set_templates_restart_always() {
        let t = json!({"spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}});
        assert_eq!(
            messages(&template(&t, "spec.template", Some("ReplicaSet"))),
            [
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
            ]
        );
        assert!(template(&t, "spec.template", None).is_empty());
    }
}
