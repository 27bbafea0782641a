//! `autoscaling/v1` horizontal pod autoscalers, served over the `autoscaling/v2` storage
//! (as upstream, whose storage version is v2) through upstream's v1 conversion
//! (pkg/apis/autoscaling/v1/conversion.go): a cpu utilization target is
//! `targetCPUUtilizationPercentage`; the other metrics, the current metrics, the conditions
//! and `behavior`, which v1 has no field for, ride in the round-trip annotations
//! `autoscaling.alpha.kubernetes.io/{metrics,current-metrics,conditions,behavior}` (as JSON,
//! the metrics in v1's `MetricSpec`/`MetricStatus` shapes), and come back from them on a v1
//! write. A v1 object without a cpu target or other metrics is stored with v2's default
//! (80% cpu utilization), as upstream's v2 decoding defaults what it reads.
//!
//! Invariants: the conversion is pure, bounded by the object's size (an annotation is read
//! once); `to_stored(to_served(x))` gives back `x` for the fields both versions carry; an
//! annotation that does not parse is dropped, never a panic.

use serde_json::{Map, Value, json};

use crate::KindSpec;
use crate::builtin::autoscaling::horizontalpodautoscaler::{self, HorizontalPodAutoscalerStrategy};
use crate::conversion::Conversion;
use crate::strategy::{KindStrategy, TableColumn, set_default};

/// The annotation of the metrics other than a cpu utilization target.
pub const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// The annotation of the current metrics.
pub const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// The annotation of the status conditions.
pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// The annotation of `spec.behavior`.
pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// `autoscaling/v1` horizontal pod autoscalers over the `autoscaling/v2` storage.
pub fn spec() -> KindSpec {
    KindSpec::new(
        "autoscaling",
        "v1",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
    )
    .short_names(["hpa"])
    .categories(["all"])
    .status_subresource(true)
    .generation(crate::Generation::None)
    .storage_resource("horizontalpodautoscalers")
    .strategy(V1Strategy)
    .converted(HpaV1)
}

/// The conversion between `autoscaling/v1` and stored (`autoscaling/v2`) autoscalers.
#[derive(Debug, Clone, Copy, Default)]
pub struct HpaV1;

impl Conversion for HpaV1 {
    fn served(&self) -> &str {
        "autoscaling/v1"
    }

    fn stored(&self) -> &str {
        "autoscaling/v2"
    }

    fn to_served(&self, obj: &mut Map<String, Value>) {
        obj.insert("apiVersion".into(), Value::from(self.served()));
        let spec = take_object(obj, "spec").unwrap_or_default();
        let status = take_object(obj, "status");
        let mut notes: Vec<(&str, Value)> = Vec::new();
        let mut v1 = Map::new();
        copy(
            &spec,
            &mut v1,
            &["scaleTargetRef", "minReplicas", "maxReplicas"],
        );
        let mut other = Vec::new();
        for m in spec
            .get("metrics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match cpu_utilization(m, "target") {
                Some(u) => {
                    v1.entry("targetCPUUtilizationPercentage")
                        .or_insert_with(|| u.clone());
                }
                None => other.push(metric_to_v1(m, "target")),
            }
        }
        if !other.is_empty() {
            notes.push((METRICS, Value::Array(other)));
        }
        if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
            notes.push((BEHAVIOR, b.clone()));
        }
        obj.insert("spec".into(), Value::Object(v1));
        // v1's status is a struct (always encoded) whose `currentReplicas` and
        // `desiredReplicas` have no `omitempty`, so a v1 reader always gets both (v2's
        // `currentReplicas` is `omitempty`: an HPA made through v2 may store none, and the
        // Python client's v1 model requires it).
        {
            let status = status.unwrap_or_default();
            let mut s = Map::new();
            copy(
                &status,
                &mut s,
                &[
                    "observedGeneration",
                    "lastScaleTime",
                    "currentReplicas",
                    "desiredReplicas",
                ],
            );
            let current = status.get("currentMetrics").and_then(Value::as_array);
            if let Some(u) = current
                .into_iter()
                .flatten()
                .find_map(|m| cpu_utilization(m, "current"))
            {
                s.insert("currentCPUUtilizationPercentage".into(), u.clone());
            }
            if let Some(c) = current.filter(|c| !c.is_empty()) {
                notes.push((
                    CURRENT_METRICS,
                    Value::Array(c.iter().map(|m| metric_to_v1(m, "current")).collect()),
                ));
            }
            if let Some(c) = status
                .get("conditions")
                .and_then(Value::as_array)
                .filter(|c| !c.is_empty())
            {
                notes.push((CONDITIONS, Value::Array(c.clone())));
            }
            for key in ["currentReplicas", "desiredReplicas"] {
                s.entry(key).or_insert(Value::from(0));
            }
            obj.insert("status".into(), Value::Object(s));
        }
        if let Some(annotations) = annotations_mut(obj) {
            for k in [METRICS, CURRENT_METRICS, CONDITIONS, BEHAVIOR] {
                annotations.remove(k);
            }
            for (k, v) in notes {
                annotations.insert(k.into(), Value::String(v.to_string()));
            }
        }
        tidy_annotations(obj);
    }

    fn to_stored(&self, obj: &mut Map<String, Value>) {
        obj.insert("apiVersion".into(), Value::from(self.stored()));
        let note = |obj: &mut Map<String, Value>, key: &str| -> Option<Value> {
            let a = obj
                .get_mut("metadata")?
                .get_mut("annotations")?
                .as_object_mut()?;
            let text = a.remove(key)?;
            serde_json::from_str(text.as_str()?).ok()
        };
        let metrics = note(obj, METRICS);
        let behavior = note(obj, BEHAVIOR);
        let current = note(obj, CURRENT_METRICS);
        let conditions = note(obj, CONDITIONS);
        tidy_annotations(obj);
        let spec = take_object(obj, "spec").unwrap_or_default();
        let mut v2 = Map::new();
        copy(
            &spec,
            &mut v2,
            &["scaleTargetRef", "minReplicas", "maxReplicas"],
        );
        let mut list: Vec<Value> = metrics
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(metric_spec_to_v2)
            .collect();
        let cpu = spec
            .get("targetCPUUtilizationPercentage")
            .filter(|v| !v.is_null())
            .cloned()
            // v2's default, which upstream's decoding of the stored object applies.
            .or_else(|| list.is_empty().then(|| json!(80)));
        if let Some(u) = cpu {
            list.push(json!({"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": u}}}));
        }
        v2.insert("metrics".into(), Value::Array(list));
        if let Some(b) = behavior.filter(Value::is_object) {
            v2.insert("behavior".into(), b);
        }
        obj.insert("spec".into(), Value::Object(v2));
        if let Some(status) = take_object(obj, "status") {
            let mut s = Map::new();
            copy(
                &status,
                &mut s,
                &[
                    "observedGeneration",
                    "lastScaleTime",
                    "currentReplicas",
                    "desiredReplicas",
                ],
            );
            let current = match current.as_ref().and_then(Value::as_array) {
                Some(c) => c.iter().map(metric_status_to_v2).collect(),
                None => status
                    .get("currentCPUUtilizationPercentage")
                    .filter(|v| !v.is_null())
                    .map(|u| {
                        vec![json!({"type": "Resource", "resource": {"name": "cpu",
                            "current": {"averageUtilization": u}}})]
                    })
                    .unwrap_or_default(),
            };
            if !current.is_empty() {
                s.insert("currentMetrics".into(), Value::Array(current));
            }
            if let Some(c) = conditions.filter(Value::is_array) {
                s.insert("conditions".into(), c);
            }
            obj.insert("status".into(), Value::Object(s));
        }
    }
}

/// The v1 strategy: v1's default (`minReplicas: 1`), the status reset on create, and the
/// v2 printer (over the converted object).
#[derive(Debug, Clone, Copy, Default)]
pub struct V1Strategy;

impl KindStrategy for V1Strategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.get("spec").is_some_and(Value::is_object) {
            set_default(obj, &["spec", "minReplicas"], json!(1));
        }
        if let Some(m) = obj.as_object_mut() {
            m.insert(
                "status".into(),
                json!({"currentReplicas": 0, "desiredReplicas": 0}),
            );
        }
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        if new.get("spec").is_some_and(Value::is_object) {
            set_default(new, &["spec", "minReplicas"], json!(1));
        }
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        horizontalpodautoscaler::replica_bounds(&obj["spec"])
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<crate::FieldError> {
        horizontalpodautoscaler::replica_bounds(&new["spec"])
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        HorizontalPodAutoscalerStrategy.table_columns()
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let mut v2 = obj.clone();
        if let Some(m) = v2.as_object_mut() {
            HpaV1.to_stored(m);
        }
        HorizontalPodAutoscalerStrategy.table_cells(&v2, name, age)
    }
}

/// The cpu `averageUtilization` of a v2 metric (`at`: `target` of a spec, `current` of a
/// status), when it is one.
fn cpu_utilization<'a>(m: &'a Value, at: &str) -> Option<&'a Value> {
    let r = &m["resource"];
    (m["type"] == "Resource" && r["name"] == "cpu")
        .then(|| r[at].get("averageUtilization"))
        .flatten()
        .filter(|u| !u.is_null())
}

/// A v2 `MetricSpec` (`side` `target`) or `MetricStatus` (`side` `current`) as v1's
/// (`autoscaling/v1` `MetricSpec` and `MetricStatus`, the v2beta1 shapes): the two are
/// the same conversion, each v2 `<side>` value becoming v1's `<side>…` field.
fn metric_to_v1(m: &Value, side: &str) -> Value {
    let mut out = json!({"type": m["type"]});
    let field = |name: &str| format!("{side}{name}");
    match m["type"].as_str().unwrap_or("") {
        "Resource" | "ContainerResource" => {
            let key = if m["type"] == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let s = &m[key];
            let mut r = json!({"name": s["name"]});
            put(
                &mut r,
                &field("AverageUtilization"),
                &s[side]["averageUtilization"],
            );
            put(&mut r, &field("AverageValue"), &s[side]["averageValue"]);
            put(&mut r, "container", &s["container"]);
            out[key] = r;
        }
        "Pods" => {
            let s = &m["pods"];
            let mut r = json!({"metricName": s["metric"]["name"]});
            put(&mut r, &field("AverageValue"), &s[side]["averageValue"]);
            put(&mut r, "selector", &s["metric"]["selector"]);
            out["pods"] = r;
        }
        "Object" => {
            let s = &m["object"];
            let mut r = json!({"target": s["describedObject"], "metricName": s["metric"]["name"]});
            put(&mut r, &field("Value"), &s[side]["value"]);
            put(&mut r, "averageValue", &s[side]["averageValue"]);
            put(&mut r, "selector", &s["metric"]["selector"]);
            out["object"] = r;
        }
        "External" => {
            let s = &m["external"];
            let mut r = json!({"metricName": s["metric"]["name"]});
            put(&mut r, "metricSelector", &s["metric"]["selector"]);
            put(&mut r, &field("Value"), &s[side]["value"]);
            put(&mut r, &field("AverageValue"), &s[side]["averageValue"]);
            out["external"] = r;
        }
        _ => return m.clone(),
    }
    out
}

/// A v1 `MetricSpec` as v2's.
fn metric_spec_to_v2(m: &Value) -> Value {
    let mut out = json!({"type": m["type"]});
    match m["type"].as_str().unwrap_or("") {
        "Resource" | "ContainerResource" => {
            let key = if m["type"] == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let s = &m[key];
            let target = if !s["targetAverageUtilization"].is_null() {
                json!({"type": "Utilization", "averageUtilization": s["targetAverageUtilization"]})
            } else {
                json!({"type": "AverageValue", "averageValue": s["targetAverageValue"]})
            };
            let mut r = json!({"name": s["name"], "target": target});
            put(&mut r, "container", &s["container"]);
            out[key] = r;
        }
        "Pods" => {
            let s = &m["pods"];
            out["pods"] = json!({"metric": metric_id(&s["metricName"], &s["selector"]),
                "target": {"type": "AverageValue", "averageValue": s["targetAverageValue"]}});
        }
        "Object" => {
            let s = &m["object"];
            let target = if s["averageValue"].is_null() {
                json!({"type": "Value", "value": s["targetValue"]})
            } else {
                json!({"type": "AverageValue", "averageValue": s["averageValue"]})
            };
            out["object"] = json!({"describedObject": s["target"],
                "metric": metric_id(&s["metricName"], &s["selector"]), "target": target});
        }
        "External" => {
            let s = &m["external"];
            let target = if s["targetAverageValue"].is_null() {
                json!({"type": "Value", "value": s["targetValue"]})
            } else {
                json!({"type": "AverageValue", "averageValue": s["targetAverageValue"]})
            };
            out["external"] = json!({"metric": metric_id(&s["metricName"], &s["metricSelector"]),
                "target": target});
        }
        _ => return m.clone(),
    }
    out
}

/// A v1 `MetricStatus` as v2's.
fn metric_status_to_v2(m: &Value) -> Value {
    let mut out = json!({"type": m["type"]});
    let current = |pairs: &[(&str, &Value)]| {
        let mut c = json!({});
        for (k, v) in pairs {
            put(&mut c, k, v);
        }
        c
    };
    match m["type"].as_str().unwrap_or("") {
        "Resource" | "ContainerResource" => {
            let key = if m["type"] == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let s = &m[key];
            let mut r = json!({"name": s["name"], "current": current(&[
                ("averageUtilization", &s["currentAverageUtilization"]),
                ("averageValue", &s["currentAverageValue"])])});
            put(&mut r, "container", &s["container"]);
            out[key] = r;
        }
        "Pods" => {
            let s = &m["pods"];
            out["pods"] = json!({"metric": metric_id(&s["metricName"], &s["selector"]),
                "current": current(&[("averageValue", &s["currentAverageValue"])])});
        }
        "Object" => {
            let s = &m["object"];
            out["object"] = json!({"describedObject": s["target"],
                "metric": metric_id(&s["metricName"], &s["selector"]),
                "current": current(&[("value", &s["currentValue"]), ("averageValue", &s["averageValue"])])});
        }
        "External" => {
            let s = &m["external"];
            out["external"] = json!({"metric": metric_id(&s["metricName"], &s["metricSelector"]),
                "current": current(&[("value", &s["currentValue"]),
                    ("averageValue", &s["currentAverageValue"])])});
        }
        _ => return m.clone(),
    }
    out
}

/// v2's `MetricIdentifier`.
fn metric_id(name: &Value, selector: &Value) -> Value {
    let mut id = json!({"name": name});
    put(&mut id, "selector", selector);
    id
}

/// Sets `obj[key]` to `v` unless `v` is `null`.
fn put(obj: &mut Value, key: &str, v: &Value) {
    if !v.is_null()
        && let Some(m) = obj.as_object_mut()
    {
        m.insert(key.into(), v.clone());
    }
}

fn copy(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[&str]) {
    for k in keys {
        if let Some(v) = from.get(*k).filter(|v| !v.is_null()) {
            to.insert((*k).into(), v.clone());
        }
    }
}

/// Removes `obj[key]` if it is an object and returns it.
fn take_object(obj: &mut Map<String, Value>, key: &str) -> Option<Map<String, Value>> {
    match obj.remove(key) {
        Some(Value::Object(m)) => Some(m),
        Some(other) => {
            obj.insert(key.into(), other);
            None
        }
        None => None,
    }
}

/// The object's annotations, created when missing; `None` when its `metadata` or
/// `annotations` is not an object (validation refuses such an object).
fn annotations_mut(obj: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    obj.entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()?
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

/// Drops an empty `metadata.annotations`.
fn tidy_annotations(obj: &mut Map<String, Value>) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        meta.remove("annotations");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "annotations": {"keep": "me"}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Pods", "pods": {"metric": {"name": "qps"},
                        "target": {"type": "AverageValue", "averageValue": "10"}}},
                    {"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}},
            "status": {"currentReplicas": 2, "desiredReplicas": 3,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": 40}}}],
                "conditions": [{"type": "AbleToScale", "status": "True"}]}})
    }

    #[test]
    fn cpu_targets_are_fields_and_the_rest_rides_in_annotations() {
        let Value::Object(mut m) = v2() else {
            unreachable!()
        };
        HpaV1.to_served(&mut m);
        let v1 = Value::Object(m.clone());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 40);
        assert!(v1["spec"].get("metrics").is_none());
        let a = &v1["metadata"]["annotations"];
        assert_eq!(a["keep"], "me");
        let other: Value = serde_json::from_str(a[METRICS].as_str().unwrap()).unwrap();
        assert_eq!(
            other,
            json!([{"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}}])
        );
        HpaV1.to_stored(&mut m);
        let back = Value::Object(m);
        let mut want = v2();
        // v1 keeps the cpu target last, after the metrics of the annotation (upstream's order).
        assert_eq!(back["spec"]["metrics"], want["spec"]["metrics"]);
        assert_eq!(back, std::mem::take(&mut want));
    }

    /// rt3 finding 5: an HPA made through v2 with no `currentReplicas` (v2's is
    /// `omitempty`) read through v1 carries `currentReplicas: 0`, as upstream's v1 encoding.
    #[test]
    fn v1_always_carries_both_replica_counts() {
        for status in [None, Some(json!({"desiredReplicas": 2})), Some(json!({}))] {
            let mut obj = json!({"apiVersion": "autoscaling/v2", "metadata": {"name": "h"},
                "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 3}});
            if let Some(s) = status.clone() {
                obj["status"] = s;
            }
            let Value::Object(mut m) = obj else {
                unreachable!()
            };
            HpaV1.to_served(&mut m);
            let want = status
                .as_ref()
                .and_then(|s| s.get("desiredReplicas"))
                .cloned()
                .unwrap_or(json!(0));
            assert_eq!(m["status"]["currentReplicas"], 0, "{status:?}");
            assert_eq!(m["status"]["desiredReplicas"], want, "{status:?}");
        }
    }

    #[test]
    fn a_v1_object_without_targets_is_stored_with_v2s_default() {
        let Value::Object(mut m) = json!({"apiVersion": "autoscaling/v1", "metadata": {"name": "h"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 3}})
        else {
            unreachable!()
        };
        HpaV1.to_stored(&mut m);
        assert_eq!(
            m["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}])
        );
        for bad in [
            json!({"metadata": 3, "spec": [1]}),
            json!({"metadata": {"annotations": {METRICS: "{"}}}),
        ] {
            let Value::Object(mut m) = bad else {
                unreachable!()
            };
            HpaV1.to_served(&mut m);
            HpaV1.to_stored(&mut m);
        }
    }

    /// Every v2 metric type read through v1, as a spec's target and as a status's current
    /// value: the v1 shapes (the two conversions are one function, `metric_to_v1`).
    #[test]
    fn every_metric_type_reads_through_v1_on_both_sides() {
        let metrics = |side: &str| {
            json!([
                {"type": "Resource", "resource": {"name": "memory",
                    side: {"type": "AverageValue", "averageValue": "1Gi"}}},
                {"type": "ContainerResource", "containerResource": {"name": "cpu",
                    "container": "app", side: {"type": "Utilization", "averageUtilization": 60}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps", "selector": {"matchLabels": {"a": "b"}}},
                    side: {"type": "AverageValue", "averageValue": "10"}}},
                {"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s"},
                    "metric": {"name": "rps"}, side: {"type": "Value", "value": "5", "averageValue": "2"}}},
                {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "1"}}},
                    side: {"type": "Value", "value": "7", "averageValue": "3"}}},
                {"type": "Custom", "custom": {"x": 1}}
            ])
        };
        let want = |side: &str| {
            let f = |name: &str| format!("{side}{name}");
            json!([
                {"type": "Resource", "resource": {"name": "memory", f("AverageValue"): "1Gi"}},
                {"type": "ContainerResource", "containerResource": {"name": "cpu",
                    f("AverageUtilization"): 60, "container": "app"}},
                {"type": "Pods", "pods": {"metricName": "qps", f("AverageValue"): "10",
                    "selector": {"matchLabels": {"a": "b"}}}},
                {"type": "Object", "object": {"target": {"kind": "Service", "name": "s"},
                    "metricName": "rps", f("Value"): "5", "averageValue": "2"}},
                {"type": "External", "external": {"metricName": "queue",
                    "metricSelector": {"matchLabels": {"q": "1"}}, f("Value"): "7", f("AverageValue"): "3"}},
                {"type": "Custom", "custom": {"x": 1}}
            ])
        };
        let Value::Object(mut m) = json!({"apiVersion": "autoscaling/v2", "metadata": {"name": "h"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 3,
                "metrics": metrics("target")},
            "status": {"currentMetrics": metrics("current")}})
        else {
            unreachable!()
        };
        HpaV1.to_served(&mut m);
        let a = &m["metadata"]["annotations"];
        let read = |k: &str| serde_json::from_str::<Value>(a[k].as_str().unwrap_or("")).ok();
        assert_eq!(read(METRICS), Some(want("target")));
        assert_eq!(read(CURRENT_METRICS), Some(want("current")));
    }
}
