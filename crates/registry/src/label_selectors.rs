//! Validation of every label selector a built-in object holds, as upstream's
//! `ValidateLabelSelector` (apimachinery's `meta/v1/validation`) judges each one its kinds'
//! validation passes it: a PodDisruptionBudget's, Deployment's, ReplicaSet's,
//! StatefulSet's, DaemonSet's or Job's `spec.selector`, a NetworkPolicy's selectors, the
//! selectors of a pod template's affinity terms and spread constraints, a webhook's, …
//! (wherever the schema types a `metav1.LabelSelector`: [`listwatch_schema::Node::label_selectors`]).
//!
//! The rules, per selector at path `p`:
//! - `p.matchLabels`: each key a qualified name, each value a label value;
//! - `p.matchExpressions[i]`: `In`/`NotIn` need `values` (`Required value`),
//!   `Exists`/`DoesNotExist` refuse them (`Forbidden`), any other operator (also none) is
//!   `Invalid value: "<op>": not a valid selector operator`; the key is a qualified name;
//!   on create, each value is a label value (upstream lets an update keep values an old
//!   object already had; here an update does not judge values at all).
//!
//! Each problem is a cause of the write's 422, beside the kind's own ones. This closes the
//! eviction bypass of a budget whose selector never parses (`matchExpressions: [null]`,
//! decoded as an empty requirement): such a budget is refused instead of stored to cover
//! nothing. Custom resources are not walked (their schemas carry no references).
//!
//! Invariant: one walk over the object; errors are built only for problems found.

use listwatch_api::labels::{label_value_errors, qualified_name_errors};
use listwatch_kinds::{FieldError, KindSpec};
use listwatch_schema::Catalog;
use serde_json::Value;

/// The problems of every label selector in `obj` (a built-in kind's object about to be
/// written); `create` judges selector values too.
pub fn errors(info: &KindSpec, catalog: &Catalog, obj: &Value, create: bool) -> Vec<FieldError> {
    let mut out = Vec::new();
    if info.custom_resource {
        return out;
    }
    if let Some(plan) = catalog.plan(&info.group, &info.version, &info.kind) {
        plan.label_selectors(obj, &mut |path, sel| {
            validate(path, sel, create, &mut out);
        });
    }
    out
}

/// Upstream's `ValidateLabelSelector` of `sel` at `path`.
pub fn validate(path: &str, sel: &Value, create: bool, out: &mut Vec<FieldError>) {
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        let field = format!("{path}.matchLabels");
        for (k, v) in labels {
            for m in qualified_name_errors(k) {
                out.push(FieldError::invalid_str(&field, k, m));
            }
            let v = v.as_str().unwrap_or("");
            for m in label_value_errors(v) {
                out.push(FieldError::invalid_str(&field, v, m));
            }
        }
    }
    let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) else {
        return;
    };
    for (i, e) in exprs.iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
        match op {
            "In" | "NotIn" if values.is_empty() => out.push(FieldError::required(
                &format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => out.push(FieldError::forbidden(
                &format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => out.push(FieldError::invalid_str(
                &format!("{at}.operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        for m in qualified_name_errors(key) {
            out.push(FieldError::invalid_str(&format!("{at}.key"), key, m));
        }
        if create {
            for (j, v) in values.iter().enumerate() {
                let v = v.as_str().unwrap_or("");
                for m in label_value_errors(v) {
                    out.push(FieldError::invalid_str(&format!("{at}.values[{j}]"), v, m));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(sel: Value) -> Vec<String> {
        let info = KindSpec::new(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
        );
        errors(
            &info,
            &Catalog::builtin(),
            &json!({"spec": {"selector": sel}}),
            true,
        )
        .iter()
        .map(|e| format!("{}: {}", e.field, e.body()))
        .collect()
    }

    #[test]
    fn selectors_are_judged_as_upstream() {
        assert!(
            pdb(json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a"]},
            {"key": "x", "operator": "Exists"}]}))
            .is_empty()
        );
        assert_eq!(
            pdb(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})),
            [
                "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
            ]
        );
        assert_eq!(
            pdb(
                json!({"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]})
            ),
            [
                "spec.selector.matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            ]
        );
        // An empty requirement (a `null` item, decoded): no operator, no key.
        let e = pdb(json!({"matchExpressions": [{}]}));
        assert_eq!(
            e[0],
            "spec.selector.matchExpressions[0].operator: Invalid value: \"\": not a valid selector operator"
        );
        assert!(e[1].starts_with("spec.selector.matchExpressions[0].key: Invalid value: \"\": name part must be non-empty"), "{e:?}");
        let e = pdb(json!({"matchLabels": {"bad key!": "v"}}));
        assert!(
            e[0].starts_with("spec.selector.matchLabels: Invalid value: \"bad key!\""),
            "{e:?}"
        );
        let e = pdb(
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["not ok"]}]}),
        );
        assert!(
            e[0].starts_with(
                "spec.selector.matchExpressions[0].values[0]: Invalid value: \"not ok\""
            ),
            "{e:?}"
        );
    }
}
