//! Upstream's `ValidatePodUpdate` (pkg/apis/core/validation): what an update of a pod may
//! change in its spec. Only the containers' and init containers' images, a lower (or a
//! first) `activeDeadlineSeconds`, added tolerations (and existing ones' seconds), removed
//! scheduling gates, node selector additions while the pod is gated, and a negative
//! `terminationGracePeriodSeconds` set to 1; anything else is upstream's 403-like 422
//! `spec: Forbidden: pod updates may not change fields other than ...`, followed by what
//! changed. The spec is compared as upstream's semantic equality does
//! ([`super::semantic_eq`]), after both sides were defaulted; `spec.ephemeralContainers`
//! is left to its own subresource (the main resource keeps the stored ones).
//!
//! Invariants: those of the parent module; the spec is copied once, only when it changed.

use serde_json::{Map, Value};

use super::{is_zero, semantic_eq};
use crate::FieldError;
use crate::field::shown;

/// Upstream's message (v1.32) for a change to a field a pod update may not change.
pub const NOT_UPDATABLE: &str = "pod updates may not change fields other than \
`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,\
`spec.tolerations` (only additions to existing tolerations),\
`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// The spec field kept out of the comparison (its own subresource writes it).
const EPHEMERAL: &str = "ephemeralContainers";

/// The most changed fields a refusal lists.
const SHOWN_CHANGES: usize = 8;

/// A copy of `pod` holding its `spec` alone.
fn spec_only(pod: &Value) -> Value {
    let mut m = Map::new();
    if let Some(spec) = pod.get("spec") {
        m.insert("spec".into(), spec.clone());
    }
    Value::Object(m)
}

/// The errors of an update of the pod `old` to `new` (`new` defaulted); none when the spec
/// did not change (a status or metadata write). `old` is defaulted here too, as upstream
/// defaults what it reads from storage: a pod stored before these defaults existed compares
/// equal to its defaulted self.
pub fn pod_update(new: &Value, old: &Value) -> Vec<FieldError> {
    // Only the specs are read, defaulted and compared: the rest of either pod (its metadata
    // with managedFields, its status) is not copied.
    let mut old = spec_only(old);
    // Which of the stored containers had no pull policy: stored by a build that did not
    // default it, so upstream (which defaults on read, before the change applies) would have
    // carried the old image's policy into the new object; here the new object was defaulted
    // from its own image, so the two are not compared.
    let unset_policy = |o: &Value, list: &str| -> Vec<bool> {
        o["spec"][list]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| c.get("imagePullPolicy").is_none())
                    .collect()
            })
            .unwrap_or_default()
    };
    let unset = [
        ("containers", unset_policy(&old, "containers")),
        ("initContainers", unset_policy(&old, "initContainers")),
    ];
    super::defaults::pod(&mut old);
    for (list, unset) in &unset {
        if let (Some(Value::Array(olds)), Some(Value::Array(news))) = (
            old.get_mut("spec").and_then(|s| s.get_mut(*list)),
            new.get("spec").and_then(|s| s.get(*list)),
        ) {
            for ((o, n), unset) in olds.iter_mut().zip(news).zip(unset) {
                if let (true, Some(o), Some(p)) =
                    (*unset, o.as_object_mut(), n.get("imagePullPolicy"))
                {
                    o.insert("imagePullPolicy".into(), p.clone());
                }
            }
        }
    }
    // Quantities compare by value, as upstream's semantic equality compares
    // `resource.Quantity`: a pod stored as `cpu: 1` by an earlier build equals the canonical
    // `"1"` its update is normalised to.
    let mut new = spec_only(new);
    same_quantities(&mut new, &mut old);
    let (new, old) = (&new, &old);
    let empty = Map::new();
    let ns = new["spec"].as_object().unwrap_or(&empty);
    let os = old["spec"].as_object().unwrap_or(&empty);
    if eq_except(ns, os, EPHEMERAL) {
        return Vec::new();
    }
    let mut out = super::validate::pod_spec(&new["spec"], "spec");
    for list in ["containers", "initContainers"] {
        let (n, o) = (list_of(ns, list), list_of(os, list));
        if n.len() != o.len() {
            out.push(FieldError::forbidden(
                &format!("spec.{list}"),
                "pod updates may not add or remove containers",
            ));
            return out;
        }
        for (i, c) in n.iter().enumerate() {
            if let Some(image) = c["image"].as_str().filter(|i| i.trim() != *i) {
                out.push(FieldError::invalid_str(
                    &format!("spec.{list}[{i}].image"),
                    image,
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    if let Some(e) = deadline(ns, os) {
        out.push(e);
        return out;
    }
    out.extend(tolerations(ns, os));
    out.extend(scheduling_gates(ns, os));

    let mut munged = ns.clone();
    munged.remove(EPHEMERAL);
    for list in ["containers", "initContainers"] {
        if let (Some(Value::Array(n)), Value::Array(o)) =
            (munged.get_mut(list), os.get(list).unwrap_or(&Value::Null))
        {
            for (c, old_c) in n.iter_mut().zip(o) {
                if let Some(c) = c.as_object_mut() {
                    match old_c.get("image") {
                        Some(i) => c.insert("image".into(), i.clone()),
                        None => c.remove("image"),
                    };
                }
            }
        }
    }
    for field in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        keep_old(&mut munged, os, field);
    }
    let grace = "terminationGracePeriodSeconds";
    if os.get(grace).and_then(Value::as_i64).is_some_and(|g| g < 0)
        && munged.get(grace).and_then(Value::as_i64) == Some(1)
    {
        keep_old(&mut munged, os, grace);
    }
    // A gated pod may gain node selector entries (never lose or change one).
    let gated = os
        .get("schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty());
    if gated {
        let superset = os
            .get("nodeSelector")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .all(|(k, v)| munged["nodeSelector"].get(k) == Some(v));
        if superset {
            keep_old(&mut munged, os, "nodeSelector");
        }
    }
    if !eq_except(&munged, os, EPHEMERAL) {
        out.push(FieldError::forbidden(
            "spec",
            format!("{NOT_UPDATABLE}\n{}", changes(os, &munged)),
        ));
    }
    out
}

/// `activeDeadlineSeconds` may be set, or lowered, never raised or removed.
fn deadline(ns: &Map<String, Value>, os: &Map<String, Value>) -> Option<FieldError> {
    let field = "spec.activeDeadlineSeconds";
    let old = os.get("activeDeadlineSeconds").filter(|v| !v.is_null());
    match ns.get("activeDeadlineSeconds").filter(|v| !v.is_null()) {
        Some(v) => {
            let n = v.as_i64().unwrap_or(-1);
            if n <= 0 || n > i64::from(i32::MAX) {
                return Some(FieldError::invalid(
                    field,
                    v,
                    "must be between 0 and 2147483647, inclusive",
                ));
            }
            match old.and_then(Value::as_i64) {
                Some(o) if o < n => Some(FieldError::invalid(
                    field,
                    v,
                    "must be less than or equal to previous value",
                )),
                _ => None,
            }
        }
        None => old.map(|_| {
            FieldError::invalid(
                field,
                &Value::Null,
                "must not update from a positive integer to nil value",
            )
        }),
    }
}

/// Every old toleration must stay, but for its `tolerationSeconds`.
fn tolerations(ns: &Map<String, Value>, os: &Map<String, Value>) -> Option<FieldError> {
    let new = list_of(ns, "tolerations");
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    let new: Vec<Value> = new.iter().map(without_seconds).collect();
    let kept = list_of(os, "tolerations").iter().all(|old| {
        let old = without_seconds(old);
        new.iter().any(|n| semantic_eq(n, &old))
    });
    (!kept).then(|| {
        FieldError::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        )
    })
}

/// Scheduling gates may only be removed.
fn scheduling_gates(ns: &Map<String, Value>, os: &Map<String, Value>) -> Vec<FieldError> {
    let old: Vec<&str> = list_of(os, "schedulingGates")
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    list_of(ns, "schedulingGates")
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            let name = g["name"].as_str().unwrap_or("");
            (!old.contains(&name)).then(|| {
                FieldError::forbidden(
                    &format!("spec.schedulingGates[{i}].name"),
                    format!("only deletion is allowed, but found new scheduling gate '{name}'"),
                )
            })
        })
        .collect()
}

fn list_of<'a>(spec: &'a Map<String, Value>, field: &str) -> &'a [Value] {
    spec.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `munged[field]` as in `old` (absent when `old` lacks it).
fn keep_old(munged: &mut Map<String, Value>, old: &Map<String, Value>, field: &str) {
    match old.get(field) {
        Some(v) => munged.insert(field.into(), v.clone()),
        None => munged.remove(field),
    };
}

/// Whether two spec objects are semantically equal, leaving out `skip`.
fn eq_except(a: &Map<String, Value>, b: &Map<String, Value>, skip: &str) -> bool {
    let null = Value::Null;
    a.iter()
        .filter(|(k, _)| *k != skip)
        .all(|(k, v)| semantic_eq(v, b.get(k).unwrap_or(&null)))
        && b.iter()
            .filter(|(k, _)| *k != skip && !a.contains_key(*k))
            .all(|(_, v)| is_zero(v))
}

/// The changed fields, `- field: old` / `+ field: new` lines as a diff (upstream prints a
/// `cmp.Diff` of its Go structs), at most [`SHOWN_CHANGES`] of them, each value cut.
fn changes(old: &Map<String, Value>, new: &Map<String, Value>) -> String {
    let null = Value::Null;
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut lines = Vec::new();
    for k in keys
        .into_iter()
        .filter(|k| k.as_str() != EPHEMERAL)
        .filter(|k| !semantic_eq(old.get(*k).unwrap_or(&null), new.get(*k).unwrap_or(&null)))
        .take(SHOWN_CHANGES)
    {
        lines.push(format!("- {k}: {}", shown(old.get(k).unwrap_or(&null))));
        lines.push(format!("+ {k}: {}", shown(new.get(k).unwrap_or(&null))));
    }
    lines.join("\n")
}

/// Where a pod spec holds quantities: each container's (and init container's) resource
/// limits and requests, and the pod's overhead.
fn quantity_maps(spec: &mut Value) -> Vec<&mut Map<String, Value>> {
    let mut out = Vec::new();
    let Some(spec) = spec.as_object_mut() else {
        return out;
    };
    for (k, v) in spec.iter_mut() {
        match (k.as_str(), v) {
            ("overhead", Value::Object(m)) => out.push(m),
            ("containers" | "initContainers", Value::Array(cs)) => {
                for c in cs {
                    if let Some(Value::Object(r)) = c.get_mut("resources") {
                        for (rk, rv) in r.iter_mut() {
                            if let ("limits" | "requests", Value::Object(m)) = (rk.as_str(), rv) {
                                out.push(m);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Rewrites the quantities of `old`'s spec that equal `new`'s by value (`1` and `"1"`,
/// `"1000m"` and `"1"`) as `new` writes them, so that the comparison sees no change there.
fn same_quantities(new: &mut Value, old: &mut Value) {
    let (Some(new_spec), Some(old_spec)) = (new.get_mut("spec"), old.get_mut("spec")) else {
        return;
    };
    let news: Vec<Map<String, Value>> = quantity_maps(new_spec)
        .into_iter()
        .map(|m| m.clone())
        .collect();
    let mut olds = quantity_maps(old_spec);
    if olds.len() != news.len() {
        return;
    }
    for (o, n) in olds.iter_mut().zip(&news) {
        for (k, ov) in o.iter_mut() {
            if let Some(nv) = n.get(k) {
                let nanos = crate::builtin::quantity::quantity_nanos;
                // A value stored by an earlier build with a part below a thousandth (`1n`)
                // reads as upstream's v1 defaulting rounds it (`RoundUp(-3)`, away from zero:
                // `1m`), as an update of it is normalised.
                let to_milli = |n: i128| {
                    let m = 1_000_000;
                    let rest = n % m;
                    if rest == 0 {
                        n
                    } else {
                        n.saturating_sub(rest).saturating_add(m * n.signum())
                    }
                };
                let same = nanos(ov)
                    .is_some_and(|a| Some(a) == nanos(nv) || Some(to_milli(a)) == nanos(nv));
                if same {
                    *ov = nv.clone();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    fn base() -> Value {
        json!({"containers": [{"name": "c", "image": "nginx:1"}], "restartPolicy": "Always",
            "activeDeadlineSeconds": 100, "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}],
            "schedulingGates": [{"name": "g"}, {"name": "h"}]})
    }

    /// A pod stored by an earlier build with a sub-milli request (`1n`) still takes a label:
    /// its update is normalised to `1m` (upstream's ResourceList rounding), which is the
    /// stored value as upstream reads it.
    #[test]
    fn a_stored_sub_milli_quantity_equals_its_rounded_self() {
        let c = |cpu: &str| {
            json!({"containers": [{"name": "c", "image": "nginx:1",
                "resources": {"requests": {"cpu": cpu}}}]})
        };
        let mut old = pod(c("1n"));
        crate::builtin::podspec::defaults::pod(&mut old);
        let mut new = pod(c("1m"));
        crate::builtin::podspec::defaults::pod(&mut new);
        assert!(
            pod_update(&new, &old).is_empty(),
            "{:?}",
            pod_update(&new, &old)
        );
        let mut other = pod(c("2m"));
        crate::builtin::podspec::defaults::pod(&mut other);
        assert!(!pod_update(&other, &old).is_empty());
    }

    /// Only the specs decide: the same update with other metadata (managedFields, labels)
    /// and status on either side gives the same errors, allowed or refused.
    #[test]
    fn metadata_and_status_play_no_part() {
        let old = pod(base());
        let mut changed = old.clone();
        changed["spec"]["restartPolicy"] = json!("Never");
        for mut new in [old.clone(), changed] {
            crate::builtin::podspec::defaults::pod(&mut new);
            let plain: Vec<String> = pod_update(&new, &old)
                .iter()
                .map(ToString::to_string)
                .collect();
            let dress = |mut p: Value, n: i64| {
                p["metadata"]["labels"] = json!({"bench": format!("w{n}")});
                p["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]);
                p["status"] = json!({"phase": if n == 0 { "Pending" } else { "Running" }});
                p
            };
            let dressed: Vec<String> = pod_update(&dress(new.clone(), 1), &dress(old.clone(), 0))
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(plain, dressed);
            let allowed = new["spec"]["restartPolicy"] == "Always";
            assert_eq!(plain.is_empty(), allowed, "{plain:?}");
        }
    }

    fn update(change: impl FnOnce(&mut Value)) -> Vec<String> {
        let old = pod(base());
        let mut new = old.clone();
        change(&mut new["spec"]);
        // As the strategy's update preparation does before validation.
        crate::builtin::podspec::defaults::pod(&mut new);
        pod_update(&new, &old)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// A pod stored by an earlier build (no pull policy; quantities as written: `cpu: 1`, a
    /// non-canonical `1.5Gi`) may still be relabelled and get a new image: upstream defaults
    /// and reads quantities by value before comparing. Before, each of these updates was 422
    /// "pod updates may not change fields other than ..." (red team rt10, finding 1).
    #[test]
    fn a_pod_stored_before_defaults_and_canonical_quantities_still_updates() {
        let old = pod(json!({"containers": [{"name": "c", "image": "nginx:1",
            "resources": {"limits": {"cpu": 1, "memory": "1.5Gi"},
                          "requests": {"cpu": "500m"}}}]}));
        let canonical = |v: &mut Value| {
            v["spec"]["containers"][0]["resources"] = json!({
                "limits": {"cpu": "1", "memory": "1536Mi"}, "requests": {"cpu": "500m"}});
        };
        // A label change (the spec as read back, normalised by the write path).
        let mut relabel = old.clone();
        relabel["metadata"]["labels"] = json!({"a": "b"});
        canonical(&mut relabel);
        crate::builtin::podspec::defaults::pod(&mut relabel);
        assert_eq!(pod_update(&relabel, &old), Vec::new());
        // `kubectl set image` to a `latest` image: the new object's pull policy is defaulted
        // from its own image (Always), the stored one had none.
        let mut image = old.clone();
        image["spec"]["containers"][0]["image"] = json!("nginx:latest");
        canonical(&mut image);
        crate::builtin::podspec::defaults::pod(&mut image);
        assert_eq!(pod_update(&image, &old), Vec::new());
        // A real change of a quantity is still refused.
        let mut more = relabel.clone();
        more["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("2");
        assert_eq!(pod_update(&more, &old).len(), 1);
    }

    #[test]
    fn the_mutable_fields_may_change() {
        assert!(
            update(|s| {
                s["containers"][0]["image"] = json!("nginx:2");
                s["activeDeadlineSeconds"] = json!(50);
                s["tolerations"][0]["tolerationSeconds"] = json!(5);
                s["tolerations"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"key": "new"}));
                s["schedulingGates"] = json!([{"name": "h"}]);
                s["nodeSelector"] = json!({"zone": "a"});
                s["ephemeralContainers"] = json!([{"name": "e", "image": "x"}]);
            })
            .is_empty()
        );
        assert!(
            update(|s| s["hostNetwork"] = json!(false)).is_empty(),
            "zero values"
        );
    }

    #[test]
    fn anything_else_is_forbidden() {
        let got = update(|s| s["nodeName"] = json!("n1"));
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with(&format!(
                "spec: Forbidden: {NOT_UPDATABLE}\n- nodeName: null\n+ nodeName: \"n1\""
            )),
            "{got:?}"
        );
        let got = update(|s| s["containers"] = json!([]));
        assert_eq!(
            got,
            [
                "spec.containers: Required value",
                "spec.containers: Forbidden: pod updates may not add or remove containers"
            ]
        );
        assert_eq!(
            update(|s| s["activeDeadlineSeconds"] = json!(200)),
            [
                "spec.activeDeadlineSeconds: Invalid value: 200: must be less than or equal to previous value"
            ]
        );
        assert_eq!(
            update(|s| s["tolerations"] = json!([])),
            [
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
            ]
        );
        assert_eq!(
            update(|s| s["schedulingGates"] = json!([{"name": "g"}, {"name": "new"}])),
            [
                "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'new'"
            ]
        );
    }

    #[test]
    fn a_pod_stored_without_defaults_takes_status_writes() {
        let old = pod(json!({"containers": [{"name": "c", "image": "i"}]}));
        let mut new = old.clone();
        crate::builtin::podspec::defaults::pod(&mut new);
        assert!(pod_update(&new, &old).is_empty());
    }

    #[test]
    fn an_emptied_spec_is_refused() {
        let old = pod(base());
        let got = pod_update(&pod(json!({})), &old);
        assert!(!got.is_empty());
    }
}
