//! The `/scale` subresource: an `autoscaling/v1` `Scale` view of an object's replica count.
//!
//! Invariants: a Scale is always derived from the stored object (never stored itself); a
//! write through it changes only the replica field of the object, and a Scale carrying a
//! `resourceVersion` must match the object's.

use listwatch_api::echo::echo;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, FieldError};
use listwatch_kinds::{KindSpec, ScaleSubresource};

fn at<'a>(v: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(v, |cur, seg| cur.get(seg))
}

fn set_at(v: &mut Value, dotted: &str, value: Value) {
    let mut cur = v;
    let segs: Vec<&str> = dotted.split('.').collect();
    for seg in &segs[..segs.len().saturating_sub(1)] {
        if !cur.get(*seg).is_some_and(Value::is_object) {
            cur[*seg] = json!({});
        }
        cur = &mut cur[*seg];
    }
    if let Some(last) = segs.last() {
        cur[*last] = value;
    }
}

/// A label selector as the Scale's `status.selector` string: a string as is, a
/// `LabelSelector`'s `matchLabels` (or a plain label map) as `k=v,...`.
fn selector_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => {
            // A replication controller's selector is a plain label map, not a
            // `LabelSelector` (upstream's `labels.SelectorFromSet(rc.Spec.Selector)`).
            let plain = !m.is_empty()
                && !m.contains_key("matchLabels")
                && !m.contains_key("matchExpressions")
                && m.values().all(Value::is_string);
            let labels = if plain {
                m
            } else {
                m.get("matchLabels")?.as_object()?
            };
            Some(
                labels
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join(","),
            )
        }
        _ => None,
    }
}

/// A replica count at `path` of `obj`: an integer, or an integral float (an object stored
/// before its numbers were normalised, as upstream reads every integral number); else 0.
fn replicas_at(obj: &Value, path: &str) -> i64 {
    at(obj, path)
        .and_then(|v| {
            v.as_i64().or_else(|| {
                v.as_f64()
                    .and_then(listwatch_kinds::custom::numbers::integral)
            })
        })
        .unwrap_or(0)
}

/// The Scale of an object (its wire JSON, with `metadata.resourceVersion`).
pub fn to_scale(spec: &ScaleSubresource, obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let mut m = Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    let mut status = json!({
        "replicas": replicas_at(obj, &spec.status_replicas_path),
    });
    if let Some(sel) = spec
        .label_selector_path
        .as_deref()
        .and_then(|p| at(obj, p))
        .and_then(selector_string)
    {
        status["selector"] = Value::String(sel);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": m,
        "spec": {"replicas": replicas_at(obj, &spec.spec_replicas_path)},
        "status": status,
    })
}

/// Why a Scale write was refused.
#[derive(Debug)]
pub enum ScaleError {
    /// A 400 or 422.
    Api(ApiError),
    /// Its resourceVersion is not the object's.
    Conflict,
}

/// Applies a (possibly patched) Scale to the object: returns the object with the new
/// replica count.
pub fn apply_scale(
    info: &KindSpec,
    spec: &ScaleSubresource,
    obj: &Value,
    scale: &Value,
) -> Result<Value, ScaleError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if let Some(rv) = scale["metadata"]["resourceVersion"]
        .as_str()
        .filter(|r| !r.is_empty())
        && Some(rv) != obj["metadata"]["resourceVersion"].as_str()
    {
        return Err(ScaleError::Conflict);
    }
    if let Some(n) = scale["metadata"]["name"].as_str().filter(|n| !n.is_empty())
        && n != name
    {
        return Err(ScaleError::Api(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            echo(n),
            echo(name)
        ))));
    }
    let replicas = match scale["spec"]["replicas"].as_i64() {
        Some(r) if (0..=i64::from(i32::MAX)).contains(&r) => r,
        _ => {
            let shown = scale["spec"]["replicas"].to_string();
            let err =
                FieldError::invalid("spec.replicas", &shown, "must be a non-negative integer");
            return Err(ScaleError::Api(ApiError::invalid(info, name, &[err])));
        }
    };
    let mut out = obj.clone();
    set_at(&mut out, &spec.spec_replicas_path, Value::from(replicas));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployments() -> (KindSpec, ScaleSubresource) {
        let spec = ScaleSubresource::replicas().label_selector("spec.selector");
        (
            KindSpec::new("apps", "v1", "deployments", "Deployment").scale(spec.clone()),
            spec,
        )
    }

    #[test]
    fn scale_reads_replicas_and_selector() {
        let (_, spec) = deployments();
        let d = json!({"metadata":{"name":"web","namespace":"ns","resourceVersion":"7"},
            "spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}}},"status":{"replicas":2}});
        let s = to_scale(&spec, &d);
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(s["status"], json!({"replicas":2,"selector":"app=web"}));
        assert_eq!(s["metadata"]["resourceVersion"], "7");
        assert_eq!(s["apiVersion"], "autoscaling/v1");
        // A replication controller's plain label map.
        let rc = json!({"metadata":{"name":"r"},"spec":{"replicas":1,"selector":{"app":"r"}}});
        assert_eq!(to_scale(&spec, &rc)["status"]["selector"], "app=r");
    }

    /// Red team rt9 item 3: a custom resource stored with `replicas: 2.0` read as 0.
    #[test]
    fn scale_reads_integral_floats_as_upstream_reads_integral_numbers() {
        let spec = ScaleSubresource::replicas();
        let o = json!({"metadata":{"name":"c"},"spec":{"replicas":2.0},"status":{"replicas":1.5}});
        let s = to_scale(&spec, &o);
        assert_eq!(s["spec"]["replicas"], 2);
        assert_eq!(s["status"]["replicas"], 0);
    }

    #[test]
    fn scale_writes_only_the_replicas_and_checks_versions() {
        let (info, spec) = deployments();
        let d = json!({"metadata":{"name":"web","resourceVersion":"7"},"spec":{"replicas":3,"paused":true}});
        let out = apply_scale(&info, &spec, &d, &json!({"spec":{"replicas":5}})).unwrap();
        assert_eq!(out["spec"], json!({"replicas":5,"paused":true}));
        let stale = json!({"metadata":{"resourceVersion":"6"},"spec":{"replicas":5}});
        assert!(matches!(
            apply_scale(&info, &spec, &d, &stale),
            Err(ScaleError::Conflict)
        ));
        let negative = json!({"spec":{"replicas":-1}});
        assert!(
            matches!(apply_scale(&info, &spec, &d, &negative), Err(ScaleError::Api(e)) if e.code() == 422)
        );
    }
}
