//! Upstream's `ValidateTolerations` (pkg/apis/core/validation) of a pod spec's
//! `tolerations`: a key, when set, is a qualified name; an empty key needs the `Exists`
//! operator; `tolerationSeconds` only with the `NoExecute` effect; the operator is `Equal`
//! (or empty) with a label-value `value`, or `Exists` with no value; an effect, when set,
//! is `NoSchedule`, `PreferNoSchedule` or `NoExecute`. Paths and messages are upstream's;
//! a whole toleration shown in an error is printed as Go's `%#v` of `core.Toleration`
//! (its seconds pointer as `(*int64)(nil)` or with the value, where Go prints an address).
//!
//! Invariants: those of the parent module; one pass over the list.

use listwatch_api::labels::{label_value_errors, qualified_name_errors};
use serde_json::Value;

use crate::FieldError;
use crate::field::{ErrorType, go_quote};

/// The effects a toleration may name.
const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// The errors of `tolerations` at `path` (`spec.tolerations`).
pub fn tolerations(tolerations: &Value, path: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    for (i, t) in tolerations.as_array().into_iter().flatten().enumerate() {
        let at = format!("{path}[{i}]");
        let s = |k: &str| t[k].as_str().unwrap_or("");
        let (key, operator, value, effect) = (s("key"), s("operator"), s("value"), s("effect"));
        if !key.is_empty() {
            for msg in qualified_name_errors(key) {
                out.push(FieldError::invalid_str(&format!("{at}.key"), key, msg));
            }
        }
        if key.is_empty() && operator != "Exists" {
            out.push(FieldError::invalid_str(
                &format!("{at}.operator"),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if !t["tolerationSeconds"].is_null() && effect != "NoExecute" {
            out.push(FieldError::invalid_str(
                &format!("{at}.effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "" | "Equal" => {
                let errs = label_value_errors(value);
                if !errs.is_empty() {
                    out.push(FieldError::invalid_str(
                        &format!("{at}.operator"),
                        value,
                        errs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    out.push(FieldError::new(
                        ErrorType::Invalid,
                        &format!("{at}.operator"),
                        Some(go_toleration(t)),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => out.push(FieldError::not_supported_str(
                &format!("{at}.operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !EFFECTS.contains(&effect) {
            out.push(FieldError::not_supported_str(
                &format!("{at}.effect"),
                effect,
                EFFECTS,
            ));
        }
    }
    out
}

/// A toleration as Go's `%#v` prints a `core.Toleration`.
fn go_toleration(t: &Value) -> String {
    let s = |k: &str| go_quote(t[k].as_str().unwrap_or(""));
    let seconds = match t["tolerationSeconds"].as_i64() {
        Some(n) => format!("(*int64)({n})"),
        None => "(*int64)(nil)".to_owned(),
    };
    format!(
        "core.Toleration{{Key:{}, Operator:{}, Value:{}, Effect:{}, TolerationSeconds:{seconds}}}",
        s("key"),
        s("operator"),
        s("value"),
        s("effect"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(v: Value) -> Vec<String> {
        tolerations(&v, "spec.tolerations")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_red_teams_tolerations_are_refused_as_upstream() {
        assert_eq!(
            messages(json!([
                {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule",
                 "tolerationSeconds": 5},
                {"key": "k", "operator": "Exists", "value": "v"},
                {"operator": "Equal", "value": "v"},
            ])),
            [
                "spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set",
                "spec.tolerations[1].operator: Invalid value: core.Toleration{Key:\"k\", Operator:\"Exists\", Value:\"v\", Effect:\"\", TolerationSeconds:(*int64)(nil)}: value must be empty when `operator` is 'Exists'",
                "spec.tolerations[2].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ]
        );
    }

    #[test]
    fn operators_effects_keys_and_values_are_checked() {
        let got = messages(json!([
            {"key": "a/b/c", "operator": "In", "effect": "Never"},
            {"key": "k", "value": "bad value"},
        ]));
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got[0].starts_with("spec.tolerations[0].key: Invalid value: \"a/b/c\": "));
        assert_eq!(
            got[1],
            "spec.tolerations[0].operator: Unsupported value: \"In\": supported values: \"Equal\", \"Exists\""
        );
        assert_eq!(
            got[2],
            "spec.tolerations[0].effect: Unsupported value: \"Never\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
        );
        assert!(got[3].starts_with("spec.tolerations[1].operator: Invalid value: \"bad value\": "));
        // What kubectl and controllers send.
        assert!(
            messages(json!([
                {"operator": "Exists"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                {"key": "x", "value": ""},
            ]))
            .is_empty()
        );
    }
}
