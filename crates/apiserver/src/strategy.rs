//! What upstream's registry strategies do to a new object of a built-in kind
//! (`PrepareForCreate`), one function per kind, installed by [`crate::builtin`] through
//! `KindSpec::prepare_for_create` (custom resources: [`drop_status`], by
//! [`crate::custom`]).
//!
//! Status is the server's (its controllers' and kubelets'), written through `/status`: a
//! create cannot set it, as upstream's strategies reset it — pods to a fresh
//! `{phase: Pending, qosClass}` (and the `SchedulingGated` condition of a gated pod),
//! deployments to `{}`, services to `{loadBalancer: {}}`, namespaces to `{phase: Active}`,
//! custom resources with a status subresource to none. Nodes keep theirs (upstream: "Nodes
//! allow *all* fields, including status, to be set on create"); the other built-in kinds
//! have no status.
//!
//! Invariants: each function only looks at the object it is given (bounded by the request's
//! size: one pass over the pod's containers for the QoS class); a quantity that does not
//! parse counts as absent (upstream's validation refuses it; this server does not validate
//! pod specs).

use serde_json::{Map, Value, json};

fn set_default(obj: &mut Value, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for seg in parents {
        if !cur.get(*seg).is_some_and(Value::is_object) {
            cur[*seg] = json!({});
        }
        cur = &mut cur[*seg];
    }
    if cur.get(*last).is_none_or(Value::is_null) {
        cur[*last] = value;
    }
}

/// Upstream's namespace strategy: `spec.finalizers` holds `kubernetes`, status `Active`.
pub(crate) fn prepare_namespace(obj: &mut Value) {
    set_default(obj, &["spec", "finalizers"], json!(["kubernetes"]));
    obj["status"] = json!({"phase": "Active"});
}

/// Upstream's pod strategy (with the v1 defaults this server applies): the status is reset
/// to `{phase: Pending, qosClass}`, plus `PodScheduled=False/SchedulingGated` when the pod
/// has scheduling gates.
pub(crate) fn prepare_pod(obj: &mut Value) {
    set_default(obj, &["spec", "restartPolicy"], json!("Always"));
    set_default(obj, &["spec", "schedulerName"], json!("default-scheduler"));
    set_default(obj, &["spec", "serviceAccountName"], json!("default"));
    let qos = qos_class(&obj["spec"]);
    let mut status = json!({"phase": "Pending", "qosClass": qos});
    if obj["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty())
    {
        status["conditions"] = json!([{
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": null,
            "lastTransitionTime": null,
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
        }]);
    }
    obj["status"] = status;
}

/// Upstream's service strategy: `spec.type` defaults to `ClusterIP`; the status is reset.
pub(crate) fn prepare_service(obj: &mut Value) {
    set_default(obj, &["spec", "type"], json!("ClusterIP"));
    obj["status"] = json!({"loadBalancer": {}});
}

/// Upstream's deployment strategy: the status is reset.
pub(crate) fn prepare_deployment(obj: &mut Value) {
    obj["status"] = json!({});
}

/// Upstream's secret defaults: `type` is `Opaque`.
pub(crate) fn prepare_secret(obj: &mut Value) {
    set_default(obj, &["type"], json!("Opaque"));
}

/// Upstream's custom resource strategy with a status subresource: a create cannot set it.
pub(crate) fn drop_status(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
}

/// The resources a QoS class is computed from (upstream's `isSupportedQoSComputeResource`).
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// A pod's QoS class from its spec, as upstream's `ComputePodQOS` (containers and init
/// containers; a limit without a request counts as the request too, as upstream's v1
/// defaulting sets it): `BestEffort` without any cpu/memory request or limit, `Guaranteed`
/// when every container limits both and the summed requests equal the summed limits, else
/// `Burstable`.
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    let mut requests: [Option<i128>; 2] = [None, None];
    let mut limits: [Option<i128>; 2] = [None, None];
    let mut guaranteed = true;
    let containers = ["initContainers", "containers"]
        .into_iter()
        .filter_map(|k| spec[k].as_array())
        .flatten();
    for c in containers {
        let res = &c["resources"];
        let empty = Map::new();
        let reqs = res["requests"].as_object().unwrap_or(&empty);
        let lims = res["limits"].as_object().unwrap_or(&empty);
        let mut limited = [false, false];
        for (i, name) in QOS_RESOURCES.iter().enumerate() {
            let limit = lims.get(*name).and_then(quantity_nanos).filter(|q| *q > 0);
            let request = match reqs.get(*name) {
                Some(q) => quantity_nanos(q),
                // Defaulted from the limit.
                None => lims.get(*name).and_then(quantity_nanos),
            }
            .filter(|q| *q > 0);
            if let Some(q) = request {
                requests[i] = Some(requests[i].unwrap_or(0).saturating_add(q));
            }
            if let Some(q) = limit {
                limited[i] = true;
                limits[i] = Some(limits[i].unwrap_or(0).saturating_add(q));
            }
        }
        if !limited.iter().all(|l| *l) {
            guaranteed = false;
        }
    }
    let count = |a: &[Option<i128>; 2]| a.iter().filter(|q| q.is_some()).count();
    if count(&requests) == 0 && count(&limits) == 0 {
        return "BestEffort";
    }
    if guaranteed {
        guaranteed = requests
            .iter()
            .zip(&limits)
            .all(|(r, l)| r.is_none() || r == l);
    }
    if guaranteed && count(&requests) == count(&limits) {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A resource quantity (`100m`, `1.5Gi`, `2e3`, `1`) in billionths, as upstream's
/// `resource.Quantity` reads it (sub-nano digits dropped); `None` if it does not parse or
/// does not fit.
pub(crate) fn quantity_nanos(v: &Value) -> Option<i128> {
    let text;
    let s = match v {
        Value::String(s) => s.as_str(),
        Value::Number(n) => {
            text = n.to_string();
            text.as_str()
        }
        _ => return None,
    };
    let (negative, s) = match s.as_bytes().first()? {
        b'-' => (true, s.get(1..)?),
        b'+' => (false, s.get(1..)?),
        _ => (false, s),
    };
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty()
        || int.len() + frac.len() > 30
        || !digits(int)
        || !digits(frac)
    {
        return None;
    }
    let mut mantissa: i128 = 0;
    for d in int.bytes().chain(frac.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(d.saturating_sub(b'0')))?;
    }
    // value = mantissa × 10^(exp10 − frac digits) × 2^exp2, in nanos: + 9.
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        e => {
            let exp = e.strip_prefix(['e', 'E'])?;
            if exp.is_empty() || exp.len() > 4 {
                return None;
            }
            (exp.parse::<i32>().ok()?, 0)
        }
    };
    let frac_len = i32::try_from(frac.len()).ok()?;
    let scale = exp10 - frac_len + 9;
    let mut n = mantissa.checked_mul(1i128.checked_shl(exp2)?)?;
    if scale >= 0 {
        n = n.checked_mul(10i128.checked_pow(u32::try_from(scale).ok()?)?)?;
    } else {
        let div = 10i128.checked_pow(u32::try_from(-scale).ok()?)?;
        n /= div;
    }
    Some(if negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_upstream() {
        let q = |s: &str| quantity_nanos(&json!(s));
        assert_eq!(q("1"), Some(1_000_000_000));
        assert_eq!(q("100m"), Some(100_000_000));
        assert_eq!(q("0.5"), Some(500_000_000));
        assert_eq!(q("1Ki"), Some(1024 * 1_000_000_000));
        assert_eq!(q("1.5Gi"), Some(3 * (1i128 << 29) * 1_000_000_000));
        assert_eq!(q("2e3"), Some(2_000 * 1_000_000_000));
        assert_eq!(q("1k"), q("1e3"));
        assert_eq!(q("1000m"), q("1"));
        assert_eq!(quantity_nanos(&json!(2)), q("2"));
        for bad in [
            "",
            "m",
            "1x",
            "1.2.3",
            "e3",
            "1e",
            "99999999999999999999999999999999",
        ] {
            assert_eq!(q(bad), None, "{bad}");
        }
    }

    #[test]
    fn qos_classes_follow_upstream() {
        let pod = |containers: Value| json!({ "containers": containers });
        assert_eq!(qos_class(&pod(json!([{"name": "a"}]))), "BestEffort");
        let both = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": both}]))),
            "Guaranteed",
            "requests default to the limits"
        );
        let equal = json!({"limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "1000m", "memory": "1024Mi"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": equal}]))),
            "Guaranteed"
        );
        let less = json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": less}]))),
            "Burstable"
        );
        let cpu_only = json!({"limits": {"cpu": "1"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": cpu_only}]))),
            "Burstable"
        );
        // One container without limits makes the pod Burstable.
        assert_eq!(
            qos_class(&pod(
                json!([{"name": "a", "resources": both}, {"name": "b"}])
            )),
            "Burstable"
        );
        // Other resources do not count.
        let gpu = json!({"limits": {"nvidia.com/gpu": "1"}});
        assert_eq!(
            qos_class(&pod(json!([{"name": "a", "resources": gpu}]))),
            "BestEffort"
        );
    }

    #[test]
    fn create_resets_status_as_upstream() {
        let mut pod = json!({"spec": {"restartPolicy": "Never", "schedulingGates": [{"name": "g"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}});
        prepare_pod(&mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["status"]["qosClass"], "BestEffort");
        assert_eq!(pod["status"]["conditions"][0]["reason"], "SchedulingGated");
        assert!(pod["status"].get("podIP").is_none());
        let mut ns = json!({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}});
        prepare_namespace(&mut ns);
        assert_eq!(ns["status"], json!({"phase": "Active"}));
        let mut svc = json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
        prepare_service(&mut svc);
        assert_eq!(svc["status"], json!({"loadBalancer": {}}));
        let mut deploy = json!({"status": {"readyReplicas": 5}});
        prepare_deployment(&mut deploy);
        assert_eq!(deploy["status"], json!({}));
        let mut cr = json!({"status": {"x": 1}});
        drop_status(&mut cr);
        assert!(cr.get("status").is_none());
    }
}
