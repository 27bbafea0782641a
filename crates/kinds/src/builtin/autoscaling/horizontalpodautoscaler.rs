//! Horizontal pod autoscalers (`autoscaling/v2`): upstream's v2 defaults
//! (pkg/apis/autoscaling/v2/defaults.go: `minReplicas: 1`, and without metrics one on cpu at
//! 80% average utilization), the status reset on create, and the printer (NAME REFERENCE
//! TARGETS MINPODS MAXPODS REPLICAS AGE, the targets as upstream's `formatHPAMetrics`: at
//! most two, then `+ N more...`), and the replica bounds (pkg/apis/autoscaling/validation
//! `validateHorizontalPodAutoscalerSpec`: `minReplicas` ≥ 1, `maxReplicas` ≥ 1 and ≥
//! `minReplicas`), which the v1 strategy shares.

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn, set_default};

/// `autoscaling/v2` horizontal pod autoscalers.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(HorizontalPodAutoscalerStrategy)
}

/// The horizontal pod autoscaler strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct HorizontalPodAutoscalerStrategy;

/// `SetDefaults_HorizontalPodAutoscalerBehavior`: a set `behavior` gets upstream's scale-up
/// rules (no stabilization window, `selectPolicy: Max`, 4 pods or 100% per 15 s) and
/// scale-down rules (`selectPolicy: Max`, 100% per 15 s; the window stays unset) where its
/// own leave a field unset.
fn behavior(obj: &mut Value) {
    let Some(b) = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("behavior"))
        .filter(|b| b.is_object())
    else {
        return;
    };
    set_default(b, &["scaleUp", "stabilizationWindowSeconds"], json!(0));
    set_default(b, &["scaleUp", "selectPolicy"], json!("Max"));
    set_default(
        b,
        &["scaleUp", "policies"],
        json!([{"type": "Pods", "value": 4, "periodSeconds": 15},
               {"type": "Percent", "value": 100, "periodSeconds": 15}]),
    );
    set_default(b, &["scaleDown", "selectPolicy"], json!("Max"));
    set_default(
        b,
        &["scaleDown", "policies"],
        json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
    );
}

/// Upstream's v2 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    behavior(obj);
    set_default(obj, &["spec", "minReplicas"], json!(1));
    if obj["spec"]["metrics"].as_array().is_none_or(Vec::is_empty) {
        set_default(obj, &["spec", "metrics"], json!([]));
        if let Some(m) = obj.pointer_mut("/spec/metrics") {
            *m = json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}]);
        }
    }
}

impl KindStrategy for HorizontalPodAutoscalerStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"desiredReplicas": 0}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        replica_bounds(&obj["spec"])
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<crate::FieldError> {
        replica_bounds(&new["spec"])
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col(
                "Reference",
                "string",
                "reference to scaled resource; horizontal pod autoscaler will learn the current resource consumption and will set the desired number of pods by using its Scale subresource.",
            ),
            print::col(
                "Targets",
                "string",
                "metrics contains the specifications for which to use to calculate the desired replica count.",
            ),
            print::col(
                "MinPods",
                "string",
                "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
            ),
            print::col(
                "MaxPods",
                "integer",
                "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up.",
            ),
            print::col(
                "Replicas",
                "integer",
                "currentReplicas is current number of replicas of pods managed by this autoscaler.",
            ),
            print::age_column(),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let target = &spec["scaleTargetRef"];
        let min = spec["minReplicas"]
            .as_i64()
            .map_or_else(|| "<unset>".to_owned(), |m| m.to_string());
        Some(vec![
            Value::String(name.into()),
            Value::String(format!(
                "{}/{}",
                target["kind"].as_str().unwrap_or(""),
                target["name"].as_str().unwrap_or("")
            )),
            Value::String(targets(&spec["metrics"], &status["currentMetrics"])),
            Value::String(min),
            print::count(&spec["maxReplicas"]),
            print::count(&status["currentReplicas"]),
            Value::String(age.into()),
        ])
    }
}

/// A quantity or number as text.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// One metric as `current/target` (`<unknown>` when not measured yet), prefixed with the
/// resource's name for resource metrics.
fn metric(spec: &Value, current: Option<&Value>) -> String {
    let kind = spec["type"].as_str().unwrap_or("");
    let field = match kind {
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "Pods" => "pods",
        "Object" => "object",
        "External" => "external",
        _ => return "<unknown type>".into(),
    };
    let target = &spec[field]["target"];
    let current = current.map(|c| &c[field]["current"]);
    let (now, want) = if let Some(u) = target["averageUtilization"].as_i64() {
        let now = current
            .and_then(|c| c["averageUtilization"].as_i64())
            .map_or_else(|| "<unknown>".to_owned(), |c| format!("{c}%"));
        (now, format!("{u}%"))
    } else {
        let key = if target["averageValue"].is_null() {
            "value"
        } else {
            "averageValue"
        };
        let now = current
            .and_then(|c| text(&c[key]))
            .unwrap_or_else(|| "<unknown>".into());
        (now, text(&target[key]).unwrap_or_default())
    };
    let prefix = match kind {
        "Resource" | "ContainerResource" => spec[field]["name"]
            .as_str()
            .map(|n| format!("{n}: "))
            .unwrap_or_default(),
        _ => String::new(),
    };
    format!("{prefix}{now}/{want}")
}

/// Upstream's `formatHPAMetrics`: `<none>` without metrics, at most two, then `+ N more...`.
fn targets(specs: &Value, statuses: &Value) -> String {
    let specs = specs.as_array().map_or(&[][..], Vec::as_slice);
    if specs.is_empty() {
        return "<none>".into();
    }
    let statuses = statuses.as_array().map_or(&[][..], Vec::as_slice);
    let shown: Vec<String> = specs
        .iter()
        .take(2)
        .enumerate()
        .map(|(i, s)| metric(s, statuses.get(i)))
        .collect();
    let mut out = shown.join(", ");
    if specs.len() > 2 {
        out.push_str(&format!(" + {} more...", specs.len() - 2));
    }
    out
}

/// The replica bounds of an autoscaler's spec (v1 and v2 name them alike).
pub(crate) fn replica_bounds(spec: &Value) -> Vec<crate::FieldError> {
    let mut out = Vec::new();
    let min = spec["minReplicas"].as_i64();
    if let Some(m) = min.filter(|m| *m < 1) {
        out.push(crate::FieldError::invalid(
            "spec.minReplicas",
            &json!(m),
            "must be greater than or equal to 1",
        ));
    }
    let max = spec["maxReplicas"].as_i64().unwrap_or(0);
    if max < 1 {
        out.push(crate::FieldError::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than 0",
        ));
    }
    if min.is_some_and(|m| max < m) {
        out.push(crate::FieldError::invalid(
            "spec.maxReplicas",
            &json!(max),
            "must be greater than or equal to `minReplicas`",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_replicas_is_at_least_one_and_min_replicas() {
        let bodies = |spec: Value| -> Vec<String> {
            replica_bounds(&spec)
                .iter()
                .map(|e| format!("{}: {}", e.field, e.body()))
                .collect()
        };
        assert_eq!(
            bodies(json!({"minReplicas": 1, "maxReplicas": 1})),
            Vec::<String>::new()
        );
        assert_eq!(
            bodies(json!({"minReplicas": 20, "maxReplicas": 10})),
            ["spec.maxReplicas: Invalid value: 10: must be greater than or equal to `minReplicas`"]
        );
        assert_eq!(
            bodies(json!({"minReplicas": 0, "maxReplicas": 0})),
            [
                "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
                "spec.maxReplicas: Invalid value: 0: must be greater than 0",
            ]
        );
        let hpa = json!({"spec": {"minReplicas": 3, "maxReplicas": 2}});
        assert_eq!(
            HorizontalPodAutoscalerStrategy
                .validate_update(&hpa, &hpa)
                .len(),
            1
        );
        assert_eq!(
            crate::builtin::autoscaling::v1::V1Strategy
                .validate_create(&hpa)
                .len(),
            1
        );
    }

    #[test]
    fn create_defaults_a_cpu_metric_and_rows_print_targets() {
        let mut hpa = json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}});
        HorizontalPodAutoscalerStrategy.prepare_for_create(&mut hpa);
        assert_eq!(hpa["spec"]["minReplicas"], 1);
        let c = HorizontalPodAutoscalerStrategy
            .table_cells(&hpa, "h", "1s")
            .unwrap();
        assert_eq!(
            c,
            [
                json!("h"),
                json!("Deployment/web"),
                json!("cpu: <unknown>/80%"),
                json!("1"),
                json!(5),
                json!(0),
                json!("1s")
            ]
        );
        hpa["status"]["currentMetrics"] = json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 42}}}]);
        hpa["spec"]["metrics"].as_array_mut().unwrap().extend([
            json!({"type": "Pods", "pods": {"target": {"averageValue": "1k"}}}),
            json!({"type": "External", "external": {"target": {"value": "3"}}}),
        ]);
        let c = HorizontalPodAutoscalerStrategy
            .table_cells(&hpa, "h", "1s")
            .unwrap();
        assert_eq!(c[2], json!("cpu: 42%/80%, <unknown>/1k + 1 more..."));
    }
}
