//! Validating admission policy bindings (`admissionregistration.k8s.io/v1`): upstream's
//! printer (NAME POLICYNAME PARAMREF AGE). The param reference prints as upstream's does:
//! `namespace/name` (`*/name` without a namespace), else its selector as Go prints a
//! `*metav1.LabelSelector` (the generated `String()`,
//! `&LabelSelector{MatchLabels:map[string]string{k: v,},MatchExpressions:[]LabelSelectorRequirement{},}`),
//! else `<unset>`.

use serde_json::Value;

use crate::KindSpec;
use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;

/// `admissionregistration.k8s.io/v1` validating admission policy bindings, from the
/// derived table's row.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(
        Printed::new(columns, cells).defaulting(crate::builtin::defaults::admission_policy_binding),
    )
}

fn columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col("PolicyName", "string", "The policy the binding binds."),
        print::col(
            "ParamRef",
            "string",
            "The param resource the binding configures the policy with.",
        ),
        print::age_column(),
    ]
}

fn cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let spec = &obj["spec"];
    vec![
        Value::String(name.into()),
        print::str_or(&spec["policyName"], ""),
        Value::String(param_ref(&spec["paramRef"])),
        Value::String(age.into()),
    ]
}

fn param_ref(p: &Value) -> String {
    if !p.is_object() {
        return "<unset>".into();
    }
    match p["name"].as_str().filter(|n| !n.is_empty()) {
        Some(n) => match p["namespace"].as_str().filter(|ns| !ns.is_empty()) {
            Some(ns) => format!("{ns}/{n}"),
            None => format!("*/{n}"),
        },
        None if p["selector"].is_object() => go_label_selector(&p["selector"]),
        None => "<unset>".into(),
    }
}

/// The generated `String()` of a `*metav1.LabelSelector`.
fn go_label_selector(sel: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let mut labels: Vec<(&String, &Value)> = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .collect();
    labels.sort_by(|a, b| a.0.cmp(b.0));
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("{k}: {},", text(v)))
        .collect();
    let expressions: String = sel["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                text(&e["key"]),
                text(&e["operator"]),
                values.join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn param_refs_print_as_upstream() {
        assert_eq!(param_ref(&json!({"name": "p", "namespace": "ns"})), "ns/p");
        assert_eq!(param_ref(&json!({"name": "p"})), "*/p");
        assert_eq!(param_ref(&json!(null)), "<unset>");
        assert_eq!(
            param_ref(&json!({"selector": {"matchLabels": {"b": "2", "a": "1"},
                "matchExpressions": [{"key": "k", "operator": "In", "values": ["x", "y"]}]}})),
            "&LabelSelector{MatchLabels:map[string]string{a: 1,b: 2,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:k,Operator:In,Values:[x y],},},}"
        );
        let c = cells(&json!({"spec": {"policyName": "pol"}}), "b", "1m");
        assert_eq!(c, [json!("b"), json!("pol"), json!("<unset>"), json!("1m")]);
    }
}
