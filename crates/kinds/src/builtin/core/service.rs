//! Services (`v1`): upstream's service strategy (pkg/registry/core/service/strategy.go) and
//! v1 defaults (pkg/apis/core/v1/defaults.go `SetDefaults_Service`): `spec.type` defaults to
//! `ClusterIP`, `sessionAffinity` to `None`, each port's `protocol` to `TCP` and
//! `targetPort` to its `port`, `internalTrafficPolicy` to `Cluster` (not for
//! `ExternalName`), `externalTrafficPolicy` to `Cluster` and (LoadBalancer)
//! `allocateLoadBalancerNodePorts` to `true` for NodePort and LoadBalancer, a ClientIP
//! affinity's timeout to 10800 s; the status is reset to `{loadBalancer: {}}` on create;
//! `/status` resets only the spec; a PUT of a missing service creates it; names are DNS-1035
//! labels; the spec's ports are validated as upstream's `ValidateService` does
//! ([`super::service_validate`]). Cluster IPs and node ports are allocated by the registry's `service_alloc`, which
//! has state and so is not part of this strategy.
//!
//! An update that changes `type` drops what the new type does not use and the user did not
//! change (upstream's `dropTypeDependentFields`): the cluster IPs, IP families and family
//! policy and `internalTrafficPolicy` when leaving for `ExternalName`; the node ports when
//! leaving NodePort/LoadBalancer; `healthCheckNodePort`, `externalTrafficPolicy`,
//! `allocateLoadBalancerNodePorts` and `loadBalancerClass` likewise. What is dropped is then
//! released by the allocator once the write is stored. Validation refuses a `nodePort` on a
//! `ClusterIP` Service (an update refuses only a node port the stored object did not have, so
//! a Service stored by an earlier build that kept one still updates).

use serde_json::{Value, json};

use crate::strategy::{KindStrategy, TableColumn, set_default};
use crate::{FieldError, Generation, KindSpec, NameValidation, StatusUpdate};

/// `v1` services.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "services", "Service")
        .short_names(["svc"])
        .categories(["all"])
        .name_validation(NameValidation::Label1035)
        .selectable_fields(["spec.clusterIP", "spec.type"])
        .field_default("spec.type", "ClusterIP")
        .generation(Generation::None)
        .status_update(StatusUpdate::StatusAndMetadataExcept(&[]))
        .status_subresource(true)
        .allow_create_on_update(true)
        .return_deleted_object(true)
        .strategy(ServiceStrategy)
}

/// The service strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServiceStrategy;

impl KindStrategy for ServiceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        apply_defaults(obj);
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"loadBalancer": {}}));
        }
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        // Validation judges the defaulted object, as upstream decodes with its defaults;
        // then what the new type does not use is dropped (upstream's `PrepareForUpdate`).
        apply_defaults(new);
        drop_type_dependent_fields(new, old);
    }

    fn validate_create(&self, obj: &Value) -> Vec<FieldError> {
        let mut out = super::service_validate::service(obj);
        out.extend(node_ports_on_cluster_ip(obj, None));
        out
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut out = node_ports_on_cluster_ip(new, Some(old));
        // A write that leaves the spec as stored (a `/status` or metadata write) is not
        // judged by rules the stored spec may predate.
        if crate::builtin::podspec::semantic_eq(&new["spec"], &old["spec"]) {
            return out;
        }
        // The cluster IPs an update omits are the stored ones (upstream's
        // `patchAllocatedValues` runs before validation, when both the old and the new type
        // need a cluster IP), so a headless service stays one.
        let omitted = |k: &str| new["spec"].get(k).is_none_or(Value::is_null);
        let external = |o: &Value| o["spec"]["type"].as_str() == Some("ExternalName");
        if (omitted("clusterIP") || omitted("clusterIPs"))
            && new["spec"].is_object()
            && !external(new)
            && !external(old)
        {
            let mut carried = new.clone();
            for k in ["clusterIP", "clusterIPs"] {
                if omitted(k)
                    && let Some(v) = old["spec"].get(k)
                {
                    carried["spec"][k] = v.clone();
                }
            }
            out.extend(super::service_validate::service(&carried));
            return out;
        }
        out.extend(super::service_validate::service(new));
        out
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        let col = TableColumn::new;
        let mut name = col(
            "Name",
            "string",
            "Name must be unique within a namespace. Cannot be updated.",
            0,
        );
        name.format = "name".into();
        Some(vec![
            name,
            col("Type", "string", "The type of the service.", 0),
            col("Cluster-IP", "string", "The IP address of the service.", 0),
            col(
                "External-IP",
                "string",
                "The external IP addresses of the service.",
                0,
            ),
            col("Port(s)", "string", "The ports of the service.", 0),
            col(
                "Age",
                "string",
                "CreationTimestamp is the time this object was created.",
                0,
            ),
            col(
                "Selector",
                "string",
                "Route service traffic to pods with label keys and values matching this selector.",
                1,
            ),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let text = |k: &str| spec.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Some(vec![
            name.into(),
            text("type").into(),
            text("clusterIP").into(),
            external_ip(obj).into(),
            ports(spec).into(),
            age.into(),
            selector(spec).into(),
        ])
    }
}

/// A Service's type, defaulted.
fn service_type(obj: &Value) -> &str {
    obj.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

/// Whether a Service of this type has cluster IPs (every type but `ExternalName`; `None`
/// counts as a value).
fn needs_cluster_ip(obj: &Value) -> bool {
    service_type(obj) != "ExternalName"
}

/// Whether a Service of this type has node ports (and an external traffic policy).
fn needs_node_port(obj: &Value) -> bool {
    matches!(service_type(obj), "NodePort" | "LoadBalancer")
}

/// Whether a Service has a health check node port (LoadBalancer with a `Local` policy).
fn needs_health_check_node_port(obj: &Value) -> bool {
    service_type(obj) == "LoadBalancer"
        && obj
            .pointer("/spec/externalTrafficPolicy")
            .and_then(Value::as_str)
            == Some("Local")
}

/// `spec.<field>`, with null, `""`, `0` and `[]` read as unset.
fn spec_field<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get("spec").and_then(|s| s.get(field)).filter(|v| {
        !(v.is_null()
            || v.as_str().is_some_and(str::is_empty)
            || v.as_i64() == Some(0)
            || v.as_array().is_some_and(Vec::is_empty))
    })
}

/// The non-zero node ports of a Service's ports.
fn node_ports(obj: &Value) -> Vec<i64> {
    obj.pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
        .filter(|n| *n != 0)
        .collect()
}

/// The cluster IPs a Service states: `clusterIPs`, else `[clusterIP]`.
fn cluster_ips(obj: &Value) -> Vec<Value> {
    match spec_field(obj, "clusterIPs").and_then(Value::as_array) {
        Some(list) => list.clone(),
        None => spec_field(obj, "clusterIP").cloned().into_iter().collect(),
    }
}

/// Upstream's `dropTypeDependentFields`: on an update, the fields the new type does not use
/// and the user left as stored are removed (see the module doc). Nothing the user changed is
/// touched, so validation still judges it.
pub fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let same = |new: &Value, field: &str| spec_field(new, field) == spec_field(old, field);
    let mut drop: Vec<&str> = Vec::new();
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        let new_ips = cluster_ips(new);
        if new_ips.is_empty() || new_ips == cluster_ips(old) {
            drop.extend(["clusterIP", "clusterIPs"]);
        }
        for field in ["ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"] {
            if same(new, field) {
                drop.push(field);
            }
        }
    }
    let old_node_ports = node_ports(old);
    // The user may drop or keep node ports, but not add one the stored object lacked.
    let no_new_node_ports = node_ports(new).iter().all(|n| old_node_ports.contains(n));
    let clear_node_ports = needs_node_port(old) && !needs_node_port(new) && no_new_node_ports;
    if needs_health_check_node_port(old)
        && !needs_health_check_node_port(new)
        && same(new, "healthCheckNodePort")
    {
        drop.push("healthCheckNodePort");
    }
    if needs_node_port(old) && !needs_node_port(new) && same(new, "externalTrafficPolicy") {
        drop.push("externalTrafficPolicy");
    }
    let leaves_lb = service_type(old) == "LoadBalancer" && service_type(new) != "LoadBalancer";
    if leaves_lb {
        for field in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if same(new, field) {
                drop.push(field);
            }
        }
    }
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in drop {
        spec.remove(field);
    }
    if clear_node_ports && let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.remove("nodePort");
        }
    }
}

/// Upstream's refusal of node ports on a `ClusterIP` Service; on an update, only a node
/// port the stored object did not have is refused.
fn node_ports_on_cluster_ip(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    if service_type(obj) != "ClusterIP" {
        return Vec::new();
    }
    let kept = old.map(node_ports).unwrap_or_default();
    obj.pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, p)| {
            let n = p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
            (n != 0 && !kept.contains(&n)).then(|| {
                FieldError::forbidden(
                    &format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                )
            })
        })
        .collect()
}

/// Upstream's `getServiceExternalIP`: `externalName` for ExternalName, the load balancer's
/// ingress (or `<pending>`) for LoadBalancer, else the external IPs or `<none>`.
fn external_ip(obj: &Value) -> String {
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let external = strings(spec.get("externalIPs"));
    match spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
    {
        "ExternalName" => spec
            .get("externalName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        "LoadBalancer" => {
            let mut all: Vec<String> = obj
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| {
                    i.get("ip")
                        .or_else(|| i.get("hostname"))
                        .and_then(Value::as_str)
                })
                .map(str::to_owned)
                .collect();
            all.extend(external);
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        _ if external.is_empty() => "<none>".into(),
        _ => external.join(","),
    }
}

/// Upstream's `makePortString`: `port[:nodePort]/protocol`, comma-joined, `<none>` for none.
fn ports(spec: &Value) -> String {
    let list: Vec<String> = spec
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
                Some(n) => format!("{port}:{n}/{proto}"),
                None => format!("{port}/{proto}"),
            }
        })
        .collect();
    if list.is_empty() {
        "<none>".into()
    } else {
        list.join(",")
    }
}

/// A selector map as `k=v,...` sorted by key, `<none>` when empty.
fn selector(spec: &Value) -> String {
    let Some(m) = spec.get("selector").and_then(Value::as_object) else {
        return "<none>".into();
    };
    let mut pairs: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// Upstream's v1 defaulting of a Service (`SetDefaults_Service`), applied to every create
/// and update body: only what is missing is filled.
pub fn apply_defaults(obj: &mut Value) {
    set_default(obj, &["spec", "type"], json!("ClusterIP"));
    set_default(obj, &["spec", "sessionAffinity"], json!("None"));
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let kind = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_owned();
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("ClientIP") {
        set_default(
            spec,
            &["sessionAffinityConfig", "clientIP", "timeoutSeconds"],
            json!(10800),
        );
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter(|p| p.is_object()) {
            set_default(p, &["protocol"], json!("TCP"));
            let unset = p.get("targetPort").is_none_or(|t| {
                t.is_null() || t.as_i64() == Some(0) || t.as_str().is_some_and(str::is_empty)
            });
            if unset && let Some(port) = p.get("port").cloned() {
                p["targetPort"] = port;
            }
        }
    }
    if kind != "ExternalName" {
        set_default(spec, &["internalTrafficPolicy"], json!("Cluster"));
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        set_default(spec, &["externalTrafficPolicy"], json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set_default(spec, &["allocateLoadBalancerNodePorts"], json!(true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_are_validated_with_the_stored_cluster_ips_and_only_when_the_spec_changes() {
        let old = json!({"spec": {"type": "ClusterIP", "clusterIP": "None"}});
        // The body omits the cluster IP: the stored `None` keeps it headless.
        let mut new = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"selector": {"a": "b"}}});
        ServiceStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(ServiceStrategy.validate_update(&new, &old), Vec::new());
        // A stored spec without ports (an earlier build's) still takes a status write.
        let stored = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1"}});
        assert_eq!(
            ServiceStrategy.validate_update(&stored, &stored),
            Vec::new()
        );
        let mut emptied = json!({"spec": {"clusterIP": "10.0.0.1", "ports": []}});
        ServiceStrategy.prepare_for_update(&mut emptied, &stored);
        let errs =
            ServiceStrategy.validate_update(&emptied, &json!({"spec": {"ports": [{"port": 80}]}}));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].to_string(), "spec.ports: Required value");
    }

    #[test]
    fn create_resets_the_status() {
        let mut svc = json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
        ServiceStrategy.prepare_for_create(&mut svc);
        assert_eq!(svc["status"], json!({"loadBalancer": {}}));
        assert_eq!(svc["spec"]["type"], "ClusterIP");
    }

    #[test]
    fn defaults_fill_what_is_missing_as_upstream() {
        let mut svc = json!({"spec": {"type": "NodePort", "sessionAffinity": "ClientIP",
            "ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}});
        apply_defaults(&mut svc);
        let spec = &svc["spec"];
        assert_eq!(
            spec["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(
            spec["ports"][1],
            json!({"port": 53, "protocol": "UDP", "targetPort": "dns"})
        );
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert_eq!(spec["externalTrafficPolicy"], "Cluster");
        assert_eq!(
            spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
            10800
        );
        let cells = ServiceStrategy.table_cells(&json!({"spec": {"type": "NodePort", "clusterIP": "10.0.0.9",
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}], "selector": {"b": "2", "a": "1"}}}), "s", "1m").unwrap();
        assert_eq!(
            cells,
            [
                json!("s"),
                json!("NodePort"),
                json!("10.0.0.9"),
                json!("<none>"),
                json!("80:30080/TCP"),
                json!("1m"),
                json!("a=1,b=2")
            ]
        );
        let mut ext = json!({"spec": {"type": "ExternalName", "externalName": "x.example"}});
        apply_defaults(&mut ext);
        assert!(ext["spec"].get("internalTrafficPolicy").is_none());
        assert_eq!(ext["spec"]["sessionAffinity"], "None");
    }

    #[test]
    fn a_type_change_drops_what_the_new_type_does_not_use_and_the_user_left() {
        let old = json!({"spec": {"type": "ClusterIP", "clusterIP": "10.0.0.9",
            "clusterIPs": ["10.0.0.9"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster", "ports": [{"port": 80}]}});
        let mut new = old.clone();
        new["spec"]["type"] = json!("ExternalName");
        new["spec"]["externalName"] = json!("x.example");
        drop_type_dependent_fields(&mut new, &old);
        assert_eq!(
            new["spec"],
            json!({"type": "ExternalName", "externalName": "x.example", "ports": [{"port": 80}]})
        );
        // A changed address is the user's: kept, for validation to judge.
        let mut asked = old.clone();
        asked["spec"]["type"] = json!("ExternalName");
        asked["spec"]["clusterIP"] = json!("10.0.0.7");
        asked["spec"]["clusterIPs"] = json!(["10.0.0.7"]);
        drop_type_dependent_fields(&mut asked, &old);
        assert_eq!(asked["spec"]["clusterIP"], "10.0.0.7");

        let lb = json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.9",
            "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
            "allocateLoadBalancerNodePorts": true, "loadBalancerClass": "c",
            "ports": [{"port": 80, "nodePort": 30080}]}});
        let mut cip = lb.clone();
        cip["spec"]["type"] = json!("ClusterIP");
        drop_type_dependent_fields(&mut cip, &lb);
        assert_eq!(
            cip["spec"],
            json!({"type": "ClusterIP", "clusterIP": "10.0.0.9", "ports": [{"port": 80}]})
        );
        // A node port the user adds on the way is kept, and refused.
        let mut added = lb.clone();
        added["spec"]["type"] = json!("ClusterIP");
        added["spec"]["ports"][0]["nodePort"] = json!(30081);
        drop_type_dependent_fields(&mut added, &lb);
        assert_eq!(added["spec"]["ports"][0]["nodePort"], 30081);
        let errs = node_port_errors(ServiceStrategy.validate_update(&added, &lb));
        assert_eq!(errs.len(), 1);
        // An unchanged type keeps everything.
        let mut same = lb.clone();
        drop_type_dependent_fields(&mut same, &lb);
        assert_eq!(same, lb);
    }

    /// The node-port errors among `errs` (these tests' objects are not otherwise complete:
    /// the port rules have their own tests in `service_validate`).
    fn node_port_errors(errs: Vec<FieldError>) -> Vec<FieldError> {
        errs.into_iter()
            .filter(|e| e.field.ends_with(".nodePort"))
            .collect()
    }

    #[test]
    fn a_cluster_ip_service_refuses_node_ports_it_did_not_have() {
        let svc = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}, {"port": 81, "nodePort": 30091}]}});
        let errs = node_port_errors(ServiceStrategy.validate_create(&svc));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "spec.ports[1].nodePort");
        assert_eq!(errs[0].detail, "may not be used when `type` is 'ClusterIP'");
        // Stored so by an earlier build: it still updates.
        assert!(ServiceStrategy.validate_update(&svc, &svc).is_empty());
        let np = json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}});
        assert!(node_port_errors(ServiceStrategy.validate_create(&np)).is_empty());
    }
}
