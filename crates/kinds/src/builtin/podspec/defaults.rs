//! Upstream's v1 defaults of a pod spec (pkg/apis/core/v1/defaults.go and the generated
//! defaulters that call them): `SetDefaults_PodSpec` (DNS policy `ClusterFirst`, restart
//! policy `Always`, an empty pod security context, a 30 s termination grace period, the
//! `default-scheduler`), `SetDefaults_Container` on containers and init containers (image
//! pull policy `Always` for `:latest` or no tag, else `IfNotPresent`; the termination message
//! path and policy), `resources: {}` as Go always writes it, ports' protocol `TCP`, probes'
//! timings and HTTP handlers' path and scheme, field references' `apiVersion: v1`, volumes
//! without a source as `emptyDir`, the `defaultMode` of secret, config map, downward API and
//! projected volumes, a projected token's expiry and a host path's type; and the v1
//! conversion that mirrors `serviceAccountName` into the deprecated `serviceAccount`.
//! [`pod`] adds what only a Pod gets (`SetDefaults_Pod`: requests from limits, service links
//! on, host ports of a host-network pod), [`template`] is a pod template's (the spec only).
//!
//! Not defaulted here (rare volume sources): iSCSI, RBD, Azure disk, ScaleIO, Ceph and
//! the other in-tree plugins' own defaults.
//!
//! Invariants: those of the parent module — a default fills only an absent, `null` or
//! zero field and never changes the type of what a body holds.

use serde_json::{Map, Value, json};

use crate::strategy::set_default;

/// Upstream's `v1.TerminationMessagePathDefault`.
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// `0644`, upstream's default mode of secret, config map, downward API and projected volumes.
const DEFAULT_MODE: i64 = 0o644;

/// A pod's defaults (`SetDefaults_Pod` and then the spec's), on `obj`, the whole pod.
pub fn pod(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    for list in ["containers", "initContainers"] {
        for c in each(spec, list) {
            requests_from_limits(c);
        }
    }
    set_default(spec, &["enableServiceLinks"], json!(true));
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for list in ["containers", "initContainers"] {
            for c in each(spec, list) {
                for port in each(c, "ports") {
                    let container_port = port.get("containerPort").cloned();
                    if let (Some(p), Some(cp)) = (port.as_object_mut(), container_port)
                        && p.get("hostPort")
                            .is_none_or(|h| h.as_i64() == Some(0) || h.is_null())
                    {
                        p.insert("hostPort".into(), cp);
                    }
                }
            }
        }
    }
    pod_spec(spec);
}

/// A pod template's defaults (`template`: a `PodTemplateSpec`, e.g. a deployment's
/// `spec.template`): the spec's, none of the pod-only ones.
pub fn template(template: Option<&mut Value>) {
    if let Some(spec) = template
        .and_then(|t| t.get_mut("spec"))
        .filter(|s| s.is_object())
    {
        pod_spec(spec);
    }
}

/// `SetDefaults_PodSpec` and the defaults of what the spec holds, on a pod spec object.
pub fn pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set_zero_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_zero_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, &["securityContext"], json!({}));
    set_default(spec, &["terminationGracePeriodSeconds"], json!(30));
    set_zero_default(spec, "schedulerName", json!("default-scheduler"));
    service_account_conversion(spec);
    for list in ["containers", "initContainers"] {
        for c in each(spec, list) {
            container(c);
        }
    }
    for v in each(spec, "volumes") {
        volume(v);
    }
}

/// The v1 conversion of the deprecated `serviceAccount`: read as the name when the name is
/// unset, and always written as the name.
fn service_account_conversion(spec: &mut Value) {
    let Some(s) = spec.as_object_mut() else {
        return;
    };
    let name = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
    };
    let account = match name(s.get("serviceAccountName")) {
        Some(n) => n,
        None => match name(s.get("serviceAccount")) {
            Some(n) => {
                s.insert("serviceAccountName".into(), Value::String(n.clone()));
                n
            }
            None => return,
        },
    };
    s.insert("serviceAccount".into(), Value::String(account));
}

/// `SetDefaults_Container` and its ports', env's, probes' and handlers' defaults.
fn container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else {
        return;
    };
    if m.get("imagePullPolicy").is_none_or(is_empty_str) {
        let policy = pull_policy(m.get("image").and_then(Value::as_str).unwrap_or(""));
        m.insert("imagePullPolicy".into(), json!(policy));
    }
    set_zero_default(c, "terminationMessagePath", json!(TERMINATION_MESSAGE_PATH));
    set_zero_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, &["resources"], json!({}));
    for port in each(c, "ports") {
        if port.is_object() {
            set_zero_default(port, "protocol", json!("TCP"));
        }
    }
    for env in each(c, "env") {
        if let Some(field_ref) = env
            .get_mut("valueFrom")
            .and_then(|v| v.get_mut("fieldRef"))
            .filter(|f| f.is_object())
        {
            set_zero_default(field_ref, "apiVersion", json!("v1"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).filter(|p| p.is_object()) {
            for (field, value) in [
                ("timeoutSeconds", 1),
                ("periodSeconds", 10),
                ("successThreshold", 1),
                ("failureThreshold", 3),
            ] {
                set_zero_default(p, field, json!(value));
            }
            handler(p);
            if let Some(g) = p.get_mut("grpc").filter(|g| g.is_object()) {
                set_default(g, &["service"], json!(""));
            }
        }
    }
    if let Some(lifecycle) = c.get_mut("lifecycle").filter(|l| l.is_object()) {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = lifecycle.get_mut(hook) {
                handler(h);
            }
        }
    }
}

/// `SetDefaults_HTTPGetAction`: path `/`, scheme `HTTP`.
fn handler(h: &mut Value) {
    if let Some(get) = h.get_mut("httpGet").filter(|g| g.is_object()) {
        set_zero_default(get, "path", json!("/"));
        set_zero_default(get, "scheme", json!("HTTP"));
    }
}

/// `SetDefaults_Volume` (no source: `emptyDir`) and the sources' own defaults.
fn volume(v: &mut Value) {
    let Some(m) = v.as_object_mut() else {
        return;
    };
    if m.keys().all(|k| k == "name") {
        m.insert("emptyDir".into(), json!({}));
        return;
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = m.get_mut(source).filter(|s| s.is_object()) {
            set_default(s, &["defaultMode"], json!(DEFAULT_MODE));
        }
    }
    if let Some(items) = m
        .get_mut("downwardAPI")
        .and_then(|d| d.get_mut("items"))
        .and_then(Value::as_array_mut)
    {
        items.iter_mut().for_each(downward_item);
    }
    if let Some(sources) = m
        .get_mut("projected")
        .and_then(|p| p.get_mut("sources"))
        .and_then(Value::as_array_mut)
    {
        for s in sources {
            if let Some(t) = s.get_mut("serviceAccountToken").filter(|t| t.is_object()) {
                set_zero_default(t, "expirationSeconds", json!(3600));
            }
            if let Some(items) = s
                .get_mut("downwardAPI")
                .and_then(|d| d.get_mut("items"))
                .and_then(Value::as_array_mut)
            {
                items.iter_mut().for_each(downward_item);
            }
        }
    }
    if let Some(h) = m.get_mut("hostPath").filter(|h| h.is_object()) {
        set_default(h, &["type"], json!(""));
    }
}

/// A downward API item's field reference is `v1` unless it says otherwise.
fn downward_item(item: &mut Value) {
    if let Some(f) = item.get_mut("fieldRef").filter(|f| f.is_object()) {
        set_zero_default(f, "apiVersion", json!("v1"));
    }
}

/// `SetDefaults_Pod`'s rule for one container: each limit without a request is its request.
fn requests_from_limits(c: &mut Value) {
    let Some(limits) = c
        .get("resources")
        .and_then(|r| r.get("limits"))
        .and_then(Value::as_object)
        .cloned()
    else {
        return;
    };
    let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut) else {
        return;
    };
    let requests = resources
        .entry("requests")
        .or_insert_with(|| Value::Object(Map::new()));
    if requests.is_null() {
        *requests = Value::Object(Map::new());
    }
    if let Some(requests) = requests.as_object_mut() {
        for (k, v) in limits {
            requests.entry(k).or_insert(v);
        }
    }
}

/// The pull policy `SetDefaults_Container` gives an image without one: `Always` when its
/// tag is `latest` or it has neither tag nor digest, else `IfNotPresent` (also for a
/// reference that does not parse, e.g. empty or with upper case in its path).
pub fn pull_policy(image: &str) -> &'static str {
    if image.is_empty() {
        return "IfNotPresent";
    }
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    // The first component is a registry host when it has a `.` or `:` or is `localhost`.
    let path = match name.split_once('/') {
        Some((host, rest)) if host.contains('.') || host.contains(':') || host == "localhost" => {
            rest
        }
        _ => name,
    };
    let last = path.rsplit('/').next().unwrap_or(path);
    let (repo_last, tag) = match last.split_once(':') {
        Some((r, t)) => (r, Some(t)),
        None => (last, None),
    };
    let repo = path.strip_suffix(last).unwrap_or("").to_owned() + repo_last;
    if repo.is_empty() || repo.bytes().any(|b| b.is_ascii_uppercase()) {
        return "IfNotPresent";
    }
    match (tag, digest) {
        (Some("latest"), _) | (None, None) => "Always",
        _ => "IfNotPresent",
    }
}

/// Each element of the array `field` of `obj` (if it is an array), mutably.
fn each<'a>(obj: &'a mut Value, field: &str) -> impl Iterator<Item = &'a mut Value> {
    obj.get_mut(field)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flat_map(|a| a.iter_mut())
}

fn is_empty_str(v: &Value) -> bool {
    v.is_null() || v.as_str() == Some("")
}

/// Sets `field` of the object `obj` when it is absent, `null`, `""` or `0` (Go's zero value
/// of a plain string or integer field reads as unset to upstream's defaulting).
fn set_zero_default(obj: &mut Value, field: &str, value: Value) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let unset = match m.get(field) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_i64() == Some(0),
        Some(_) => false,
    };
    if unset {
        m.insert(field.into(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_gets_what_kubectl_create_deployment_shows() {
        let mut t = json!({"metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}});
        template(Some(&mut t));
        assert_eq!(
            t["spec"],
            json!({"containers": [{"name": "nginx", "image": "nginx",
                    "imagePullPolicy": "Always", "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"}],
                   "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
                   "schedulerName": "default-scheduler", "securityContext": {},
                   "terminationGracePeriodSeconds": 30})
        );
    }

    #[test]
    fn a_pod_also_gets_requests_service_links_and_host_ports() {
        let mut p = json!({"spec": {"hostNetwork": true, "containers": [{"name": "c",
            "image": "nginx:1.27", "ports": [{"containerPort": 80}],
            "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}}]}});
        pod(&mut p);
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"})
        );
        assert_eq!(
            c["ports"][0],
            json!({"containerPort": 80, "hostPort": 80, "protocol": "TCP"})
        );
        assert_eq!(p["spec"]["enableServiceLinks"], true);
    }

    #[test]
    fn pull_policies_follow_the_tag() {
        for (image, want) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/a/b", "Always"),
            ("localhost:5000/a/b:v1", "IfNotPresent"),
            ("nginx@sha256:abc", "IfNotPresent"),
            ("Nginx", "IfNotPresent"),
            ("", "IfNotPresent"),
        ] {
            assert_eq!(pull_policy(image), want, "{image}");
        }
    }

    #[test]
    fn volumes_probes_and_service_accounts() {
        let mut s = json!({"serviceAccount": "robot", "volumes": [{"name": "a"},
            {"name": "s", "secret": {"secretName": "x"}}, {"name": "h", "hostPath": {"path": "/"}}],
            "containers": [{"name": "c", "image": "i", "imagePullPolicy": "Never",
                "livenessProbe": {"httpGet": {"port": 80}, "periodSeconds": 5}}]});
        pod_spec(&mut s);
        assert_eq!(s["serviceAccountName"], "robot");
        assert_eq!(s["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(s["volumes"][1]["secret"]["defaultMode"], 420);
        assert_eq!(s["volumes"][2]["hostPath"]["type"], "");
        let probe = &s["containers"][0]["livenessProbe"];
        assert_eq!(
            probe,
            &json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "periodSeconds": 5,
                "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(s["containers"][0]["imagePullPolicy"], "Never");
    }

    #[test]
    fn wrong_shapes_are_left_alone() {
        for mut v in [
            json!({"spec": 3}),
            json!({"spec": {"containers": "x", "volumes": [3]}}),
            json!({"spec": {"containers": [7, {"ports": "p", "resources": 1}]}}),
        ] {
            pod(&mut v);
            template(Some(&mut v));
        }
    }
}
