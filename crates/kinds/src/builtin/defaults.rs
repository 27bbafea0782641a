//! Upstream's v1 defaulting (`SetDefaults_*` of `pkg/apis/<group>/v1/defaults.go`) of the
//! built-in kinds whose strategy is a plain [`Printed`](crate::builtin::print::Printed)
//! printer: CSI drivers, flow schemas, priority level configurations, webhook
//! configurations, validating admission policies and their bindings, priority classes,
//! ingress classes, endpoints and endpoint slices.
//!
//! Invariants: a default fills only a field that is absent or `null` (or, where upstream's
//! field is a plain Go scalar, its zero value), never overwrites what the body sets, never
//! changes the shape of a value of the wrong type (validation reports that), and walks only
//! what the body holds (no allocation beyond the defaulted values). Go defaults on every
//! decode, so [`Printed`](crate::builtin::print::Printed) applies these on create and on update.

use serde_json::{Value, json};

use crate::strategy::set_default;

/// Each element of the array at `path` (if it is an array), mutably.
fn each<'a>(obj: &'a mut Value, path: &[&str]) -> impl Iterator<Item = &'a mut Value> {
    let mut cur = Some(obj);
    for seg in path {
        cur = cur.and_then(|v| v.get_mut(*seg));
    }
    cur.and_then(Value::as_array_mut)
        .into_iter()
        .flat_map(|a| a.iter_mut())
}

/// Sets `path` to `value` when it is absent, `null` or the integer zero (a Go `int32`
/// field's zero value reads as unset to upstream's defaulting).
fn set_default_nonzero(obj: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = &mut *obj;
    for seg in parents {
        match cur.get_mut(*seg) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if cur.get(*last).and_then(Value::as_i64) == Some(0) {
        cur[*last] = Value::Null;
    }
    set_default(cur, &[*last], value);
}

/// `SetDefaults_CSIDriver` (storage/v1; `seLinuxMount` under the SELinuxMountReadWriteOncePod
/// gate, on by default since 1.28).
pub fn csi_driver(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    set_default(obj, &["spec", "attachRequired"], json!(true));
    set_default(obj, &["spec", "podInfoOnMount"], json!(false));
    set_default(obj, &["spec", "storageCapacity"], json!(false));
    set_default(
        obj,
        &["spec", "fsGroupPolicy"],
        json!("ReadWriteOnceWithFSType"),
    );
    set_default(obj, &["spec", "requiresRepublish"], json!(false));
    set_default(obj, &["spec", "seLinuxMount"], json!(false));
    if obj["spec"]["volumeLifecycleModes"]
        .as_array()
        .is_some_and(Vec::is_empty)
    {
        obj["spec"]["volumeLifecycleModes"] = Value::Null;
    }
    set_default(
        obj,
        &["spec", "volumeLifecycleModes"],
        json!(["Persistent"]),
    );
}

/// `SetDefaults_FlowSchemaSpec` (flowcontrol/v1: a zero or unset precedence is 1000).
pub fn flow_schema(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        return;
    }
    set_default_nonzero(obj, &["spec", "matchingPrecedence"], json!(1000));
}

/// flowcontrol/v1's `SetDefaults_ExemptPriorityLevelConfiguration`,
/// `SetDefaults_LimitedPriorityLevelConfiguration` (v1: an unset share count is 30, an
/// explicit 0 stays) and `SetDefaults_QueuingConfiguration` (zero or unset: 64 queues, hand
/// size 8, queue length limit 50).
pub fn priority_level(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    if spec.get("exempt").is_some_and(Value::is_object) {
        set_default(spec, &["exempt", "nominalConcurrencyShares"], json!(0));
        set_default(spec, &["exempt", "lendablePercent"], json!(0));
    }
    if spec.get("limited").is_some_and(Value::is_object) {
        set_default(spec, &["limited", "nominalConcurrencyShares"], json!(30));
        set_default(spec, &["limited", "lendablePercent"], json!(0));
        let queuing = &["limited", "limitResponse", "queuing"];
        let has_queuing = spec["limited"]["limitResponse"]
            .get("queuing")
            .is_some_and(Value::is_object);
        if has_queuing {
            for (field, value) in [("queues", 64), ("handSize", 8), ("queueLengthLimit", 50)] {
                let path = [queuing[0], queuing[1], queuing[2], field];
                set_default_nonzero(spec, &path, json!(value));
            }
        }
    }
}

/// admissionregistration/v1's `SetDefaults_Rule` on each rule of `rules` (scope `*`).
fn rules(holder: &mut Value, field: &str) {
    for rule in each(holder, &[field]) {
        if rule.is_object() {
            set_default(rule, &["scope"], json!("*"));
        }
    }
}

/// admissionregistration/v1's `SetDefaults_MatchResources`.
fn match_resources(m: &mut Value) {
    if !m.is_object() {
        return;
    }
    set_default(m, &["matchPolicy"], json!("Equivalent"));
    set_default(m, &["namespaceSelector"], json!({}));
    set_default(m, &["objectSelector"], json!({}));
    rules(m, "resourceRules");
    rules(m, "excludeResourceRules");
}

/// The webhook defaults shared by both kinds (`SetDefaults_ValidatingWebhook` /
/// `SetDefaults_MutatingWebhook`, `SetDefaults_Rule`, `SetDefaults_ServiceReference`).
fn webhooks(obj: &mut Value, mutating: bool) {
    for hook in each(obj, &["webhooks"]) {
        if !hook.is_object() {
            continue;
        }
        set_default(hook, &["failurePolicy"], json!("Fail"));
        set_default(hook, &["matchPolicy"], json!("Equivalent"));
        set_default(hook, &["namespaceSelector"], json!({}));
        set_default(hook, &["objectSelector"], json!({}));
        set_default(hook, &["timeoutSeconds"], json!(10));
        if mutating {
            set_default(hook, &["reinvocationPolicy"], json!("Never"));
        }
        rules(hook, "rules");
        if hook["clientConfig"]
            .get("service")
            .is_some_and(Value::is_object)
        {
            set_default(hook, &["clientConfig", "service", "port"], json!(443));
        }
    }
}

/// The defaults of a `ValidatingWebhookConfiguration`.
pub fn validating_webhooks(obj: &mut Value) {
    webhooks(obj, false);
}

/// The defaults of a `MutatingWebhookConfiguration` (also `reinvocationPolicy: Never`).
pub fn mutating_webhooks(obj: &mut Value) {
    webhooks(obj, true);
}

/// `SetDefaults_ValidatingAdmissionPolicySpec` (failure policy `Fail`) and the match
/// constraints' `SetDefaults_MatchResources`.
pub fn admission_policy(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    set_default(spec, &["failurePolicy"], json!("Fail"));
    if let Some(m) = spec.get_mut("matchConstraints") {
        match_resources(m);
    }
}

/// A binding's `matchResources`, when set, is defaulted as a policy's match constraints.
pub fn admission_policy_binding(obj: &mut Value) {
    if let Some(m) = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("matchResources"))
    {
        match_resources(m);
    }
}

/// scheduling/v1's `SetDefaults_PriorityClass` (`preemptionPolicy: PreemptLowerPriority`).
pub fn priority_class(obj: &mut Value) {
    if obj.is_object() {
        set_default(obj, &["preemptionPolicy"], json!("PreemptLowerPriority"));
    }
}

/// networking/v1's `SetDefaults_IngressClass` (set parameters without a scope are
/// cluster-scoped).
pub fn ingress_class(obj: &mut Value) {
    if obj["spec"].get("parameters").is_some_and(Value::is_object) {
        set_default(obj, &["spec", "parameters", "scope"], json!("Cluster"));
    }
}

/// core/v1's `SetDefaults_EndpointPort` on every port of every subset (protocol TCP).
pub fn endpoints(obj: &mut Value) {
    for subset in each(obj, &["subsets"]) {
        for port in each(subset, &["ports"]) {
            if port.is_object() {
                set_default(port, &["protocol"], json!("TCP"));
            }
        }
    }
}

/// discovery/v1's `SetDefaults_EndpointPort` on every port (name `""`, protocol TCP).
pub fn endpoint_slice(obj: &mut Value) {
    for port in each(obj, &["ports"]) {
        if port.is_object() {
            set_default(port, &["name"], json!(""));
            set_default(port, &["protocol"], json!("TCP"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csi_driver_fills_upstreams_defaults_and_keeps_what_is_set() {
        let mut d = json!({"spec": {"attachRequired": false, "volumeLifecycleModes": []}});
        csi_driver(&mut d);
        assert_eq!(
            d["spec"],
            json!({"attachRequired": false, "podInfoOnMount": false,
                   "storageCapacity": false, "fsGroupPolicy": "ReadWriteOnceWithFSType",
                   "requiresRepublish": false, "seLinuxMount": false,
                   "volumeLifecycleModes": ["Persistent"]})
        );
    }

    #[test]
    fn flow_control_defaults() {
        let mut fs = json!({"spec": {"matchingPrecedence": 0}});
        flow_schema(&mut fs);
        assert_eq!(fs["spec"]["matchingPrecedence"], 1000);
        let mut fs = json!({"spec": {"matchingPrecedence": 7}});
        flow_schema(&mut fs);
        assert_eq!(fs["spec"]["matchingPrecedence"], 7);

        let mut pl = json!({"spec": {"type": "Limited", "limited": {
            "limitResponse": {"type": "Queue", "queuing": {"queues": 0, "handSize": 4}}}}});
        priority_level(&mut pl);
        assert_eq!(
            pl["spec"]["limited"],
            json!({"nominalConcurrencyShares": 30, "lendablePercent": 0,
                   "limitResponse": {"type": "Queue", "queuing":
                       {"queues": 64, "handSize": 4, "queueLengthLimit": 50}}})
        );
        let mut pl = json!({"spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}}}});
        priority_level(&mut pl);
        assert_eq!(pl["spec"]["limited"]["nominalConcurrencyShares"], 0);
        assert!(
            pl["spec"]["limited"]["limitResponse"]
                .get("queuing")
                .is_none()
        );
    }

    #[test]
    fn webhook_defaults_differ_by_kind_only_in_reinvocation() {
        let body = json!({"webhooks": [{"name": "a", "clientConfig": {"service":
            {"namespace": "n", "name": "s"}}, "rules": [{"operations": ["*"]}]}, 3]});
        let mut m = body.clone();
        mutating_webhooks(&mut m);
        let mut v = body;
        validating_webhooks(&mut v);
        assert_eq!(m["webhooks"][0]["reinvocationPolicy"], "Never");
        assert!(v["webhooks"][0].get("reinvocationPolicy").is_none());
        for w in [&m, &v] {
            let h = &w["webhooks"][0];
            assert_eq!(h["failurePolicy"], "Fail");
            assert_eq!(h["matchPolicy"], "Equivalent");
            assert_eq!(h["timeoutSeconds"], 10);
            assert_eq!(h["namespaceSelector"], json!({}));
            assert_eq!(h["rules"][0]["scope"], "*");
            assert_eq!(h["clientConfig"]["service"]["port"], 443);
            assert_eq!(w["webhooks"][1], 3);
        }
    }

    #[test]
    fn wrong_shapes_are_left_for_validation() {
        for mut v in [
            json!(null),
            json!([1]),
            json!({"spec": 3, "webhooks": "x", "ports": 1,
                                                       "subsets": [{"ports": "p"}]}),
        ] {
            let before = v.clone();
            csi_driver(&mut v);
            flow_schema(&mut v);
            priority_level(&mut v);
            validating_webhooks(&mut v);
            admission_policy(&mut v);
            admission_policy_binding(&mut v);
            ingress_class(&mut v);
            endpoints(&mut v);
            endpoint_slice(&mut v);
            assert_eq!(v, before);
        }
    }
}
